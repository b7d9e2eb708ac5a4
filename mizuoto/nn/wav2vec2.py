"""The wav2vec 2.0 / HuBERT speech encoder, with transformers 4.57.3's numerics (`Wav2Vec2Model`, `HubertModel`).

Several engines read self-supervised speech features from it: Seed-VC's real-time model (XLS-R through
`Wav2Vec2Model`, its layers cut to `output_layer`, in float16), Seed-VC's cnhubert option and v2 (HuBERT-large),
GPT-SoVITS (chinese-hubert-base, one given layer of `hidden_states`). Exact to transformers 4.57.3
`models/wav2vec2/modeling_wav2vec2.py` and `models/hubert/modeling_hubert.py` in eval mode with sdpa
attention (Apache-2.0 code, read, not copied); module and parameter names are transformers', so released
checkpoints load as they are (`load_state`, `load_folder`).

Data flow, raw 16 kHz samples (batch, samples) -> frames (batch, frames, hidden), one frame per 320 samples:
1. feature encoder: a stack of strided Conv1d, each followed by GELU; "group" norm puts a per-channel
   GroupNorm after the first conv only, "layer" norm a LayerNorm over channels after every conv;
2. feature projection: LayerNorm over the conv channels (optional for HuBERT), Linear to the hidden size;
3. padded frames (from the feature extractor's attention mask) are zeroed, a convolutional relative position
   embedding (grouped Conv1d with weight norm over dim 2, folded once at load; the last frame dropped for an
   even kernel, as transformers' SamePad does; HuBERT may put a BatchNorm before it) is added;
4. transformer layers, post-LN (`do_stable_layer_norm=False`: the encoder's LayerNorm comes first, each
   layer normalises after its residual adds) or pre-LN ("stable": each layer normalises its inputs, the
   encoder's LayerNorm comes last). Attention is SDPA with transformers' arguments: the query unscaled,
   scale=head_dim^-1/2, and for a padded batch an additive (batch, 1, frames, frames) mask holding 0 and the
   dtype's lowest value, dropped altogether when no frame is padded (as transformers does).

`hidden_states` are transformers' tuple: the input of every layer, then the output (for the stable layout,
after the final LayerNorm). Truncating the layers as Seed-VC does (`model.encoder.layers =
model.encoder.layers[:n]`, or `keep_layers(n)`) and replacing `model.encoder.layer_norm` work as upstream.

In float16 (upstream runs `.half()` even on the CPU) every operation runs in float16 as transformers' does;
the weight-normed positional conv is folded in the dtype the model runs in (`load_state(..., dtype=)`),
because upstream recomputes it from float16 copies of g and v: folding in float32 and rounding afterwards
differs in the last bits.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, fields
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from mizuoto.core.errors import CheckpointError, InputError
from mizuoto.runtime import accel

ENCODER = accel.Site("wav2vec2.encoder")  # bidirectional over every real frame: approximate kernels are fine

MODEL_TYPES = ("wav2vec2", "hubert")
NORMS = ("group", "layer")
ACTIVATIONS = {"gelu": F.gelu, "relu": F.relu, "silu": F.silu, "swish": F.silu}


@dataclass(frozen=True)
class Wav2Vec2Config:
    """The config.json fields the encoder reads, with transformers' defaults (Wav2Vec2Config, HubertConfig)."""

    model_type: str = "wav2vec2"  # "wav2vec2" or "hubert": the checkpoint prefix and HuBERT's two options
    hidden_size: int = 768
    num_hidden_layers: int = 12
    num_attention_heads: int = 12
    intermediate_size: int = 3072
    hidden_act: str = "gelu"
    layer_norm_eps: float = 1e-5
    feat_extract_norm: str = "group"
    feat_extract_activation: str = "gelu"
    conv_dim: tuple[int, ...] = (512, 512, 512, 512, 512, 512, 512)
    conv_stride: tuple[int, ...] = (5, 2, 2, 2, 2, 2, 2)
    conv_kernel: tuple[int, ...] = (10, 3, 3, 3, 3, 2, 2)
    conv_bias: bool = False
    num_conv_pos_embeddings: int = 128
    num_conv_pos_embedding_groups: int = 16
    do_stable_layer_norm: bool = False
    feat_proj_layer_norm: bool = True  # HuBERT only: wav2vec 2.0 always normalises before the projection
    conv_pos_batch_norm: bool = False  # HuBERT only: a BatchNorm instead of weight norm at the positional conv

    def __post_init__(self):
        for name in ("conv_dim", "conv_stride", "conv_kernel"):
            object.__setattr__(self, name, tuple(int(v) for v in getattr(self, name)))
        if self.model_type not in MODEL_TYPES:
            raise CheckpointError(f"model_type {self.model_type!r} is not a wav2vec 2.0 / HuBERT encoder "
                                  f"(one of {', '.join(MODEL_TYPES)})")
        if self.feat_extract_norm not in NORMS:
            raise CheckpointError(f"feat_extract_norm {self.feat_extract_norm!r} is none of {', '.join(NORMS)}")
        for name in ("hidden_act", "feat_extract_activation"):
            if getattr(self, name) not in ACTIVATIONS:
                raise CheckpointError(f"{name} {getattr(self, name)!r} is not supported "
                                      f"(one of {', '.join(ACTIVATIONS)})")
        if not len(self.conv_dim) == len(self.conv_stride) == len(self.conv_kernel) or not self.conv_dim:
            raise CheckpointError(f"conv_dim, conv_stride and conv_kernel must have one entry per conv layer; "
                                  f"got {len(self.conv_dim)}, {len(self.conv_stride)} and {len(self.conv_kernel)}")
        if self.hidden_size % self.num_attention_heads:
            raise CheckpointError(f"hidden_size {self.hidden_size} is not a multiple of num_attention_heads "
                                  f"{self.num_attention_heads}")

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_attention_heads

    @property
    def checkpoint_prefix(self) -> str:
        """What transformers calls the base model inside a task model (its `base_model_prefix`)."""
        return self.model_type

    @classmethod
    def from_dict(cls, config: dict) -> "Wav2Vec2Config":
        """From a transformers config.json (Wav2Vec2Config / HubertConfig, any task head): the encoder's fields
        are read, the rest ignored; what this encoder does not implement is refused."""
        model_type = config.get("model_type", "wav2vec2")
        if model_type not in MODEL_TYPES:
            raise CheckpointError(f"config.json has model_type {model_type!r}; this encoder reads "
                                  f"{' and '.join(MODEL_TYPES)} models")
        if config.get("add_adapter") or config.get("adapter_attn_dim") is not None:
            raise CheckpointError("config.json asks for adapter layers (add_adapter / adapter_attn_dim), "
                                  "which this encoder does not implement")
        known = {f.name for f in fields(cls)}
        values = {k: v for k, v in config.items() if k in known}
        if model_type == "wav2vec2":  # the two HuBERT options do not exist there (its own defaults apply)
            values.pop("feat_proj_layer_norm", None)
            values.pop("conv_pos_batch_norm", None)
        return cls(**values)

    def to_dict(self) -> dict:
        return asdict(self)


# -- the convolutional feature encoder --------------------------------------------------------------------


class ConvLayer(nn.Module):
    """One strided conv of the feature encoder, its optional norm and the activation."""

    def __init__(self, config: Wav2Vec2Config, index: int, norm: str | None):
        super().__init__()
        channels_in = config.conv_dim[index - 1] if index > 0 else 1
        channels = config.conv_dim[index]
        self.conv = nn.Conv1d(channels_in, channels, kernel_size=config.conv_kernel[index],
                              stride=config.conv_stride[index], bias=config.conv_bias)
        self.norm = norm
        if norm == "group":  # one group per channel: each channel normalised over time, per utterance
            self.layer_norm = nn.GroupNorm(num_groups=channels, num_channels=channels, affine=True)
        elif norm == "layer":  # over the channels of each frame (transformers' default eps, not the config's)
            self.layer_norm = nn.LayerNorm(channels, elementwise_affine=True)
        self.activation = ACTIVATIONS[config.feat_extract_activation]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.conv(x)
        if self.norm == "group":
            x = self.layer_norm(x)
        elif self.norm == "layer":
            x = self.layer_norm(x.transpose(-2, -1)).transpose(-2, -1)
        return self.activation(x)


class FeatureEncoder(nn.Module):
    def __init__(self, config: Wav2Vec2Config):
        super().__init__()
        count = len(config.conv_dim)
        if config.feat_extract_norm == "group":
            norms = ["group"] + [None] * (count - 1)
        else:
            norms = ["layer"] * count
        self.conv_layers = nn.ModuleList(ConvLayer(config, i, norm) for i, norm in enumerate(norms))

    def forward(self, samples: torch.Tensor) -> torch.Tensor:
        """(batch, samples) -> (batch, channels, frames)."""
        x = samples[:, None]
        for layer in self.conv_layers:
            x = layer(x)
        return x


class FeatureProjection(nn.Module):
    def __init__(self, config: Wav2Vec2Config):
        super().__init__()
        if config.feat_proj_layer_norm:
            self.layer_norm = nn.LayerNorm(config.conv_dim[-1], eps=config.layer_norm_eps)
        else:
            self.layer_norm = None
        self.projection = nn.Linear(config.conv_dim[-1], config.hidden_size)

    def forward(self, features: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(batch, frames, channels) -> (projected, the normalised features wav2vec 2.0 also returns)."""
        if self.layer_norm is not None:
            features = self.layer_norm(features)
        return self.projection(features), features


# -- the transformer encoder ----------------------------------------------------------------------------


class PositionalConv(nn.Module):
    """The convolutional relative position embedding. `conv.weight` is the weight norm already folded
    (checkpoints store g and v; `fold_weight_norm`)."""

    def __init__(self, config: Wav2Vec2Config):
        super().__init__()
        kernel = config.num_conv_pos_embeddings
        self.conv = nn.Conv1d(config.hidden_size, config.hidden_size, kernel_size=kernel, padding=kernel // 2,
                              groups=config.num_conv_pos_embedding_groups)
        self.batch_norm = nn.BatchNorm1d(config.hidden_size) if config.conv_pos_batch_norm else None
        # padding k // 2 on both sides gives one frame too many for an even kernel: drop the last
        self.drop_last = kernel % 2 == 0
        self.activation = ACTIVATIONS[config.feat_extract_activation]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """(batch, frames, hidden) -> the embedding, same shape."""
        x = x.transpose(1, 2)
        if self.batch_norm is not None:
            x = self.batch_norm(x)
        x = self.conv(x)
        if self.drop_last:
            x = x[:, :, :-1]
        return self.activation(x).transpose(1, 2)


class SelfAttention(nn.Module):
    def __init__(self, config: Wav2Vec2Config):
        super().__init__()
        hidden = config.hidden_size
        self.head_dim = config.head_dim
        self.k_proj = nn.Linear(hidden, hidden)
        self.v_proj = nn.Linear(hidden, hidden)
        self.q_proj = nn.Linear(hidden, hidden)
        self.out_proj = nn.Linear(hidden, hidden)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None, mask_info) -> torch.Tensor:
        batch, length, _ = x.shape
        split = (batch, length, -1, self.head_dim)
        # heads stay strided views, as transformers hands them to SDPA; the scale is SDPA's argument
        q = self.q_proj(x).view(split).transpose(1, 2)
        k = self.k_proj(x).view(split).transpose(1, 2)
        v = self.v_proj(x).view(split).transpose(1, 2)
        out = accel.attention(q, k, v, site=ENCODER, mask=mask, scale=self.head_dim ** -0.5, mask_info=mask_info)
        return self.out_proj(out.transpose(1, 2).contiguous().reshape(batch, length, -1).contiguous())


class FeedForward(nn.Module):
    def __init__(self, config: Wav2Vec2Config):
        super().__init__()
        self.intermediate_dense = nn.Linear(config.hidden_size, config.intermediate_size)
        self.activation = ACTIVATIONS[config.hidden_act]
        self.output_dense = nn.Linear(config.intermediate_size, config.hidden_size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.output_dense(self.activation(self.intermediate_dense(x)))


class EncoderLayer(nn.Module):
    def __init__(self, config: Wav2Vec2Config):
        super().__init__()
        self.pre_norm = config.do_stable_layer_norm
        self.attention = SelfAttention(config)
        self.layer_norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.feed_forward = FeedForward(config)
        self.final_layer_norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None, mask_info) -> torch.Tensor:
        if self.pre_norm:
            x = x + self.attention(self.layer_norm(x), mask, mask_info)
            return x + self.feed_forward(self.final_layer_norm(x))
        x = self.layer_norm(x + self.attention(x, mask, mask_info))
        return self.final_layer_norm(x + self.feed_forward(x))


class Encoder(nn.Module):
    def __init__(self, config: Wav2Vec2Config):
        super().__init__()
        self.pre_norm = config.do_stable_layer_norm
        self.pos_conv_embed = PositionalConv(config)
        self.layer_norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.layers = nn.ModuleList(EncoderLayer(config) for _ in range(config.num_hidden_layers))

    def forward(self, x: torch.Tensor, frames: torch.Tensor | None = None,
                output_hidden_states: bool = False) -> tuple[torch.Tensor, tuple[torch.Tensor, ...] | None]:
        """x (batch, frames, hidden); `frames` (batch, frames) bool, True for real frames (None: all real)."""
        mask = mask_info = None
        if frames is not None:
            x = x.masked_fill(~frames[..., None], 0.0)  # padded frames enter the positional conv as zeros
            # transformers drops a mask that keeps every frame, so SDPA then runs without one
            if not bool(frames.all()):
                mask = additive_mask(frames, x.dtype)
                mask_info = accel.MaskInfo(keys=frames, padding="right")
        x = x + self.pos_conv_embed(x)
        if not self.pre_norm:
            x = self.layer_norm(x)
        states = []
        for layer in self.layers:
            if output_hidden_states:
                states.append(x)
            x = layer(x, mask, mask_info)
        if self.pre_norm:
            x = self.layer_norm(x)
        if output_hidden_states:
            states.append(x)
        return x, tuple(states) if output_hidden_states else None


def additive_mask(frames: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """(batch, frames) bool -> (batch, 1, frames, frames) in `dtype`: 0 where a key is real, the dtype's lowest
    value where it is padding, laid out as transformers builds it (a full, contiguous tensor)."""
    batch, length = frames.shape
    keys = frames[:, None, None, :].expand(batch, 1, length, length)
    return torch.zeros(keys.shape, dtype=dtype, device=frames.device).masked_fill(~keys, torch.finfo(dtype).min)


# -- the model ------------------------------------------------------------------------------------------


@dataclass
class Wav2Vec2Output:
    last_hidden_state: torch.Tensor  # (batch, frames, hidden)
    hidden_states: tuple[torch.Tensor, ...] | None  # every layer's input, then the output (output_hidden_states)
    extract_features: torch.Tensor  # (batch, frames, channels): the feature projection's normalised input


class Wav2Vec2(nn.Module):
    """transformers' Wav2Vec2Model / HubertModel in eval mode (no SpecAugment, no dropout)."""

    def __init__(self, config: Wav2Vec2Config):
        super().__init__()
        self.config = config
        self.feature_extractor = FeatureEncoder(config)
        self.feature_projection = FeatureProjection(config)
        self.encoder = Encoder(config)

    def keep_layers(self, count: int) -> "Wav2Vec2":
        """Keep the first `count` transformer layers, as Seed-VC truncates its XLS-R (`output_layer`)."""
        if not 1 <= count <= len(self.encoder.layers):
            raise InputError(f"cannot keep {count} layers of an encoder with {len(self.encoder.layers)}")
        self.encoder.layers = self.encoder.layers[:count]
        return self

    def frames_for(self, samples) -> torch.Tensor:
        """Frames per utterance for sample counts (an int or a tensor), by the conv stack's arithmetic."""
        lengths = torch.as_tensor(samples)
        for kernel, stride in zip(self.config.conv_kernel, self.config.conv_stride, strict=True):
            lengths = torch.div(lengths - kernel, stride, rounding_mode="floor") + 1
        return lengths

    def frame_mask(self, attention_mask: torch.Tensor, frames: int) -> torch.Tensor:
        """The feature extractor's (batch, samples) attention mask -> (batch, frames) bool, True for real
        frames: each utterance keeps the frames its real samples give (right padding)."""
        lengths = self.frames_for(attention_mask.sum(-1)).to(torch.long)
        if bool((lengths < 1).any()):
            raise InputError(f"an utterance of {int(attention_mask.sum(-1).min())} samples is too short for the "
                             f"speech encoder (it needs {self.shortest_input()} samples or more)")
        return torch.arange(frames, device=attention_mask.device)[None, :] < lengths[:, None]

    def shortest_input(self) -> int:
        """The fewest samples that still give one frame."""
        needed = 1
        for kernel, stride in reversed(list(zip(self.config.conv_kernel, self.config.conv_stride, strict=True))):
            needed = (needed - 1) * stride + kernel
        return needed

    def forward(self, input_values: torch.Tensor, attention_mask: torch.Tensor | None = None,
                output_hidden_states: bool = False) -> Wav2Vec2Output:
        """input_values (batch, samples), normalised as the model's feature extractor does
        (mizuoto.audio.wav2vec2_features); attention_mask (batch, samples), 1 for real samples, only for
        models whose feature extractor returns one (see there)."""
        if input_values.dim() != 2:
            raise InputError(f"the speech encoder takes (batch, samples) audio; got shape {tuple(input_values.shape)}")
        if input_values.shape[1] < self.shortest_input():
            raise InputError(f"{input_values.shape[1]} samples are too few for the speech encoder (it needs "
                             f"{self.shortest_input()} or more, {self.shortest_input() / 16000:.3f} s at 16 kHz)")
        if attention_mask is not None and attention_mask.shape != input_values.shape:
            raise InputError(f"the attention mask has shape {tuple(attention_mask.shape)}; the audio has "
                             f"{tuple(input_values.shape)}")
        features = self.feature_extractor(input_values).transpose(1, 2)
        frames = None if attention_mask is None else self.frame_mask(attention_mask, features.shape[1])
        hidden, features = self.feature_projection(features)
        hidden, states = self.encoder(hidden, frames, output_hidden_states)
        return Wav2Vec2Output(last_hidden_state=hidden, hidden_states=states, extract_features=features)


# -- loading ------------------------------------------------------------------------------------------------

_WEIGHT_NORM_NAMES = {  # both torch spellings of the positional conv's weight norm -> g, v
    "weight_g": "g", "weight_v": "v", "parametrizations.weight.original0": "g",
    "parametrizations.weight.original1": "v",
}
_POS_CONV = "encoder.pos_conv_embed.conv."


def fold_weight_norm(g: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """w = g * v / ||v||, norms over every dim but 2 (the kernel taps): torch's own kernel, the one weight
    norm's parametrization (and the older hook) calls on every forward."""
    return torch._weight_norm(v, g, 2)


def base_model_state(state: dict[str, torch.Tensor], config: Wav2Vec2Config) -> dict[str, torch.Tensor]:
    """A checkpoint's tensors under the base model's names, as `from_pretrained` of a Wav2Vec2Model /
    HubertModel takes them: when any name starts with the base model prefix ("wav2vec2" / "hubert", a
    ForPreTraining / ForCTC / ... checkpoint), only those names count, the prefix removed; otherwise the
    names are the base model's. The rest (heads, quantizer, masked_spec_embed) is ignored."""
    prefix = config.checkpoint_prefix
    if any(name.startswith(prefix) for name in state):
        return {name[len(prefix) + 1:]: t for name, t in state.items() if name.startswith(prefix + ".")}
    return dict(state)


def load_state(model: Wav2Vec2, state: dict[str, torch.Tensor], dtype: torch.dtype | None = None,
               assign: bool = False) -> Wav2Vec2:
    """Load a transformers state dict into `model` (converted to `dtype`, default the model's), folding the
    positional conv's weight norm in that dtype. Missing tensors or wrong shapes are a one-line CheckpointError.
    `assign`: the state's tensors become the parameters (no copy where the dtype already agrees; `model` may be on
    the meta device), so a load holds the weights once instead of twice."""
    dtype = dtype or next(model.parameters()).dtype
    state = base_model_state(state, model.config)
    weight_norm = {}
    mapped = {}
    for name, tensor in state.items():
        if name.startswith(_POS_CONV) and name[len(_POS_CONV):] in _WEIGHT_NORM_NAMES:
            weight_norm[_WEIGHT_NORM_NAMES[name[len(_POS_CONV):]]] = tensor
        else:
            mapped[name] = tensor
    if weight_norm:
        if set(weight_norm) != {"g", "v"}:
            raise CheckpointError("the checkpoint's positional conv has only half of its weight norm (g and v); "
                                  "download it again")
        mapped[_POS_CONV + "weight"] = fold_weight_norm(weight_norm["g"].to(dtype), weight_norm["v"].to(dtype))
    expected = model.state_dict()
    for name in expected:  # a BatchNorm's step counter: unused in eval mode, absent from some exports
        if name.endswith("num_batches_tracked") and name not in mapped:
            mapped[name] = torch.zeros((), dtype=torch.long)
    missing = [n for n in expected if n not in mapped]
    if missing:
        raise CheckpointError(f"the checkpoint lacks {len(missing)} tensors of this {model.config.model_type} "
                              f"encoder ({', '.join(missing[:3])}{', ...' if len(missing) > 3 else ''}); "
                              f"check that config.json belongs to it")
    for name, tensor in expected.items():
        if name in mapped and mapped[name].shape != tensor.shape:
            raise CheckpointError(f"{name} has shape {tuple(mapped[name].shape)} in the checkpoint and "
                                  f"{tuple(tensor.shape)} in the model its config.json describes")
    model.to(dtype)
    if assign:
        chosen = {n: mapped[n].to(dtype) if mapped[n].is_floating_point() else mapped[n] for n in expected}
        model.load_state_dict(chosen, strict=True, assign=True)
    else:
        model.load_state_dict({n: mapped[n] for n in expected if n in mapped}, strict=False)
    return model.eval()


def from_state(config: Wav2Vec2Config | dict, state: dict[str, torch.Tensor],
               dtype: torch.dtype = torch.float32) -> Wav2Vec2:
    """A model built from `config` (a Wav2Vec2Config or config.json's dict) with `state` loaded in `dtype`."""
    if isinstance(config, dict):
        config = Wav2Vec2Config.from_dict(config)
    with torch.device("meta"):
        model = Wav2Vec2(config)  # no memory: the state's own tensors become its parameters
    return load_state(model, state, dtype, assign=True)


WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin")


def load_folder(folder: str | Path, dtype: torch.dtype = torch.float32) -> Wav2Vec2:
    """A transformers model folder (config.json and model.safetensors or pytorch_model.bin) -> the encoder."""
    from mizuoto.nn.tensor_files import read_checkpoint

    folder = Path(folder)
    try:
        config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise CheckpointError(f"{folder} has no config.json; point at a wav2vec 2.0 / HuBERT model folder") from None
    except (OSError, ValueError) as error:
        raise CheckpointError(f"cannot read {folder / 'config.json'} ({error}); download it again") from None
    for name in WEIGHT_FILES:
        if (folder / name).is_file():
            return from_state(config, read_checkpoint(folder / name), dtype)
    raise CheckpointError(f"{folder} has neither {' nor '.join(WEIGHT_FILES)}; download the model's weights")

