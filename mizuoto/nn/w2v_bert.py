"""The w2v-BERT 2.0 encoder (transformers 4.52.1 `Wav2Vec2BertModel`, facebook/w2v-bert-2.0), as IndexTTS 2 runs it.

    input_features (B, T, 160) from mizuoto/audio/seamless_features.py, attention_mask (B, T)
      -> feature_projection: LayerNorm(160) -> Linear(160, hidden)
      -> padded frames zeroed; additive mask (1 - m) * finfo.min over the keys      (only when a mask is given)
      -> Conformer layers: x + 0.5 FFN1(LN x); + SelfAttn(LN x); + Conv(x); + 0.5 FFN2(LN x); final LayerNorm
    -> hidden_states: the projection's output (index 0), then each layer's output (index i = after layer i - 1)

IndexTTS takes `hidden_states[17]` (the output of layer 16 of 24) and normalises it by the shipped statistics
(`wav2vec2bert_stats.pt` {"mean", "var"}: (h - mean) / sqrt(var), `SemanticStats`); the later layers are unused,
so `load_state(..., layers=17)` builds and `W2vBert.hidden_state(..., 17)` runs only the first 17.

The self-attention is `position_embeddings_type="relative_key"`: scores QK^T / sqrt(d) plus a distance-embedding
term einsum("bhld,lrd->bhlr", Q, E[clamp(j - i, -left, right) + left]) / sqrt(d), then the mask, softmax and the
product with V. It is handwritten (the seed's HANDWRITTEN kind, DESIGN.md 3: relative positions inside the softmax,
so no accel site): the operations and their layouts are upstream's, so the float results are too.
The convolution module: LN -> padded frames zeroed -> pointwise Conv1d(2C, no bias) -> GLU -> causal left pad of
k - 1 -> depthwise Conv1d (no bias) -> LN -> swish -> pointwise Conv1d (no bias).

Random draws: upstream's encoder draws `torch.rand([])` from the global CPU generator once before each of its
layers, in eval mode too (its LayerDrop coin; the layer is skipped only in training): every layer of the checkpoint
draws, also the ones IndexTTS never reads, so a reference costs `layerdrop_draws(config)` (24 for w2v-bert-2.0)
draws. This module draws nothing; an engine keeping upstream's order calls `draw_layerdrop(generator, config)`
where upstream's forward runs.

Module and parameter names are transformers' (model.safetensors' keys). `masked_spec_embed` (present when the
config's mask_time_prob or mask_feature_prob is above 0: SpecAugment, training only) is checked where the file has
it, and unused.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, fields
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from mizuoto.core.errors import CheckpointError, InputError

FEATURES = 160  # SeamlessM4T's stacked fbank (2 x 80)
INDEXTTS_LAYER = 17  # IndexTTS 2 reads hidden_states[17]


@dataclass(frozen=True)
class W2vBertConfig:
    """The fields of Wav2Vec2BertConfig this encoder reads (defaults: facebook/w2v-bert-2.0's)."""

    hidden_size: int = 1024
    num_hidden_layers: int = 24
    num_attention_heads: int = 16
    intermediate_size: int = 4096
    feature_projection_input_dim: int = FEATURES
    hidden_act: str = "swish"
    layer_norm_eps: float = 1e-5
    conv_depthwise_kernel_size: int = 31
    position_embeddings_type: str = "relative_key"
    left_max_position_embeddings: int = 64
    right_max_position_embeddings: int = 8
    mask_time_prob: float = 0.05
    mask_feature_prob: float = 0.0
    add_adapter: bool = False
    use_intermediate_ffn_before_adapter: bool = False

    def __post_init__(self):
        if self.position_embeddings_type != "relative_key":
            raise CheckpointError(f"position_embeddings_type {self.position_embeddings_type!r} is not supported; this "
                                  f"encoder runs w2v-BERT 2.0's 'relative_key'")
        if self.hidden_act not in ("swish", "silu"):
            raise CheckpointError(f"hidden_act {self.hidden_act!r} is not supported; w2v-BERT 2.0 uses 'swish'")
        if self.add_adapter or self.use_intermediate_ffn_before_adapter:
            raise CheckpointError("config.json asks for an adapter (add_adapter / use_intermediate_ffn_before_adapter),"
                                  " which w2v-BERT 2.0 as IndexTTS runs it does not have")
        if self.hidden_size % self.num_attention_heads:
            raise CheckpointError(f"hidden_size {self.hidden_size} is not a multiple of num_attention_heads "
                                  f"{self.num_attention_heads}")
        if self.conv_depthwise_kernel_size % 2 == 0:
            raise CheckpointError(f"conv_depthwise_kernel_size {self.conv_depthwise_kernel_size} must be odd")

    @classmethod
    def from_dict(cls, data: dict) -> "W2vBertConfig":
        """config.json's dict: the fields above (their defaults are transformers' for the ones it leaves out)."""
        if data.get("model_type", "wav2vec2-bert") != "wav2vec2-bert":
            raise CheckpointError(f"config.json has model_type {data.get('model_type')!r}; this encoder reads "
                                  f"'wav2vec2-bert' (facebook/w2v-bert-2.0)")
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names})

    @property
    def has_masked_spec_embed(self) -> bool:
        return self.mask_time_prob > 0.0 or self.mask_feature_prob > 0.0


def layerdrop_draws(config: W2vBertConfig) -> int:
    """How many `torch.rand([])` upstream's forward draws from the global CPU generator: one per layer."""
    return config.num_hidden_layers


def draw_layerdrop(generator: torch.Generator, config: W2vBertConfig) -> None:
    """Advance `generator` (a CPU one) as one upstream forward advances the global CPU generator."""
    for _ in range(layerdrop_draws(config)):
        torch.rand((), generator=generator)


class FeatureProjection(nn.Module):
    def __init__(self, config: W2vBertConfig):
        super().__init__()
        self.layer_norm = nn.LayerNorm(config.feature_projection_input_dim, eps=config.layer_norm_eps)
        self.projection = nn.Linear(config.feature_projection_input_dim, config.hidden_size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.projection(self.layer_norm(x))


class FeedForward(nn.Module):
    def __init__(self, config: W2vBertConfig):
        super().__init__()
        self.intermediate_dense = nn.Linear(config.hidden_size, config.intermediate_size)
        self.output_dense = nn.Linear(config.intermediate_size, config.hidden_size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.output_dense(F.silu(self.intermediate_dense(x)))


class ConvolutionModule(nn.Module):
    def __init__(self, config: W2vBertConfig):
        super().__init__()
        c, k = config.hidden_size, config.conv_depthwise_kernel_size
        self.layer_norm = nn.LayerNorm(c, eps=config.layer_norm_eps)
        self.pointwise_conv1 = nn.Conv1d(c, 2 * c, 1, bias=False)
        self.depthwise_conv = nn.Conv1d(c, c, k, groups=c, bias=False)
        self.depthwise_layer_norm = nn.LayerNorm(c, eps=config.layer_norm_eps)
        self.pointwise_conv2 = nn.Conv1d(c, c, 1, bias=False)

    def forward(self, x: torch.Tensor, keep: torch.Tensor | None) -> torch.Tensor:
        x = self.layer_norm(x)
        if keep is not None:
            x = x.masked_fill(~keep.unsqueeze(-1), 0.0)
        x = F.glu(self.pointwise_conv1(x.transpose(1, 2)), dim=1)
        x = self.depthwise_conv(F.pad(x, (self.depthwise_conv.kernel_size[0] - 1, 0)))
        x = F.silu(self.depthwise_layer_norm(x.transpose(1, 2)).transpose(1, 2))
        return self.pointwise_conv2(x).transpose(1, 2)


class SelfAttention(nn.Module):
    """relative_key self-attention, handwritten as upstream computes it (no accel site: the module docstring)."""

    def __init__(self, config: W2vBertConfig):
        super().__init__()
        c = config.hidden_size
        self.heads = config.num_attention_heads
        self.head_size = c // self.heads
        self.left = config.left_max_position_embeddings
        self.right = config.right_max_position_embeddings
        self.linear_q = nn.Linear(c, c)
        self.linear_k = nn.Linear(c, c)
        self.linear_v = nn.Linear(c, c)
        self.linear_out = nn.Linear(c, c)
        self.distance_embedding = nn.Embedding(self.left + self.right + 1, self.head_size)

    def forward(self, x: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        b, t, _ = x.shape
        q = self.linear_q(x).view(b, -1, self.heads, self.head_size).transpose(1, 2)
        k = self.linear_k(x).view(b, -1, self.heads, self.head_size).transpose(1, 2)
        v = self.linear_v(x).view(b, -1, self.heads, self.head_size).transpose(1, 2)
        scores = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(self.head_size)
        positions = torch.arange(t, dtype=torch.long, device=x.device)
        distance = torch.clamp(positions.view(1, -1) - positions.view(-1, 1), -self.left, self.right)
        table = self.distance_embedding(distance + self.left).to(dtype=q.dtype)
        scores = scores + torch.einsum("bhld,lrd->bhlr", q, table) / math.sqrt(self.head_size)
        if bias is not None:
            scores = scores + bias
        out = torch.matmul(torch.softmax(scores, dim=-1), v)
        return self.linear_out(out.transpose(1, 2).reshape(b, -1, self.heads * self.head_size))


class EncoderLayer(nn.Module):
    def __init__(self, config: W2vBertConfig):
        super().__init__()
        c, eps = config.hidden_size, config.layer_norm_eps
        self.ffn1_layer_norm = nn.LayerNorm(c, eps=eps)
        self.ffn1 = FeedForward(config)
        self.self_attn_layer_norm = nn.LayerNorm(c, eps=eps)
        self.self_attn = SelfAttention(config)
        self.conv_module = ConvolutionModule(config)
        self.ffn2_layer_norm = nn.LayerNorm(c, eps=eps)
        self.ffn2 = FeedForward(config)
        self.final_layer_norm = nn.LayerNorm(c, eps=eps)

    def forward(self, x: torch.Tensor, bias: torch.Tensor | None, keep: torch.Tensor | None) -> torch.Tensor:
        x = self.ffn1(self.ffn1_layer_norm(x)) * 0.5 + x
        x = self.self_attn(self.self_attn_layer_norm(x), bias) + x
        x = x + self.conv_module(x, keep)
        x = self.ffn2(self.ffn2_layer_norm(x)) * 0.5 + x
        return self.final_layer_norm(x)


class Encoder(nn.Module):
    def __init__(self, config: W2vBertConfig, layers: int):
        super().__init__()
        self.layers = nn.ModuleList(EncoderLayer(config) for _ in range(layers))


class W2vBert(nn.Module):
    """Wav2Vec2BertModel without SpecAugment or adapter; `layers` of the config's encoder layers are built
    (all by default)."""

    def __init__(self, config: W2vBertConfig, layers: int | None = None):
        super().__init__()
        layers = config.num_hidden_layers if layers is None else layers
        if not 1 <= layers <= config.num_hidden_layers:
            raise ValueError(f"layers must be 1 to {config.num_hidden_layers}, got {layers}")
        self.config = config
        self.feature_projection = FeatureProjection(config)
        self.encoder = Encoder(config, layers)

    def hidden_states(self, features: torch.Tensor, attention_mask: torch.Tensor | None = None,
                      layers: int | None = None) -> list[torch.Tensor]:
        """[hidden_states[0], ..., hidden_states[layers]] as upstream's output_hidden_states gives them (the
        projection, then each layer's output); `layers` defaults to every built layer."""
        layers = len(self.encoder.layers) if layers is None else layers
        if not 0 <= layers <= len(self.encoder.layers):
            raise InputError(f"this encoder has {len(self.encoder.layers)} layers loaded; {layers} were asked for")
        weight = self.feature_projection.projection.weight
        if features.dim() != 3 or features.shape[-1] != self.config.feature_projection_input_dim:
            raise InputError(f"w2v-BERT features must be (batch, frames, {self.config.feature_projection_input_dim}),"
                             f" got {tuple(features.shape)}")
        if features.shape[1] == 0:
            raise InputError("w2v-BERT features have no frames; the reference audio is too short")
        x = self.feature_projection(features.to(device=weight.device, dtype=weight.dtype))
        bias = keep = None
        if attention_mask is not None:
            if tuple(attention_mask.shape) != tuple(features.shape[:2]):
                raise InputError(f"attention_mask {tuple(attention_mask.shape)} does not match the features' "
                                 f"(batch, frames) {tuple(features.shape[:2])}")
            mask = attention_mask.to(x.device)
            keep = mask.bool()
            x = x.masked_fill(~keep.unsqueeze(-1), 0.0)
            bias = (1.0 - mask[:, None, None, :].to(dtype=x.dtype)) * torch.finfo(x.dtype).min
            bias = bias.expand(bias.shape[0], 1, bias.shape[-1], bias.shape[-1])
        states = [x]
        for layer in self.encoder.layers[:layers]:
            x = layer(x, bias, keep)
            states.append(x)
        return states

    def hidden_state(self, features: torch.Tensor, attention_mask: torch.Tensor | None = None,
                     index: int = INDEXTTS_LAYER) -> torch.Tensor:
        """hidden_states[index] alone, running only the first `index` layers."""
        return self.hidden_states(features, attention_mask, index)[index]

    def forward(self, features: torch.Tensor, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        """last_hidden_state (every built layer)."""
        return self.hidden_states(features, attention_mask)[-1]


@dataclass(frozen=True)
class SemanticStats:
    """IndexTTS 2's w2v-BERT statistics: mean and std = sqrt(var), as infer_v2 keeps them."""

    mean: torch.Tensor
    std: torch.Tensor

    @classmethod
    def from_state(cls, stats: dict, hidden_size: int | None = None, source: str = "wav2vec2bert_stats.pt"):
        if not isinstance(stats, dict) or not {"mean", "var"} <= set(stats):
            raise CheckpointError(f"{source} must hold {{'mean', 'var'}}; found "
                                  f"{sorted(stats) if isinstance(stats, dict) else type(stats).__name__}")
        mean, var = stats["mean"], stats["var"]
        for name, t in (("mean", mean), ("var", var)):
            if not isinstance(t, torch.Tensor) or t.dim() != 1 or (hidden_size and t.shape[0] != hidden_size):
                raise CheckpointError(f"{source}: {name} must be a ({hidden_size or 'hidden'},) tensor, got "
                                      f"{tuple(t.shape) if isinstance(t, torch.Tensor) else type(t).__name__}")
        return cls(mean=mean, std=torch.sqrt(var))

    @classmethod
    def load(cls, path: str | Path, hidden_size: int | None = None) -> "SemanticStats":
        try:
            stats = torch.load(str(path), map_location="cpu", weights_only=True)
        except FileNotFoundError:
            raise CheckpointError(f"{path} not found; it ships with the IndexTTS 2 checkpoint") from None
        except Exception as error:  # a corrupt or foreign file: one line, not torch's traceback
            raise CheckpointError(f"cannot read {path} ({type(error).__name__}); download it again") from None
        return cls.from_state(stats, hidden_size, str(path))

    def normalise(self, hidden: torch.Tensor) -> torch.Tensor:
        """(h - mean) / std, as infer_v2's get_emb."""
        return (hidden - self.mean.to(hidden.device)) / self.std.to(hidden.device)


def checkpoint_layout(config: W2vBertConfig, layers: int | None = None) -> dict[str, tuple[int, ...]]:
    """model.safetensors' names and shapes for `config` (every layer, or the first `layers`)."""
    with torch.device("meta"):
        model = W2vBert(config, layers)
    layout = {name: tuple(t.shape) for name, t in model.state_dict().items()}
    if config.has_masked_spec_embed:
        layout["masked_spec_embed"] = (config.hidden_size,)
    return layout


def load_state(config: W2vBertConfig, state: dict[str, torch.Tensor], layers: int | None = None,
               source: str = "model.safetensors") -> W2vBert:
    """Strictly: every tensor of the checkpoint must be one of `config`'s with its shape (the layers past `layers`
    are checked and dropped); a missing, extra or misshapen tensor is a one-line CheckpointError."""
    full = checkpoint_layout(config)
    if "masked_spec_embed" not in state:  # unused (SpecAugment): a file saved without it is accepted
        full.pop("masked_spec_embed", None)
    missing = [n for n in full if n not in state]
    extra = [n for n in state if n not in full]
    if missing:
        raise CheckpointError(f"{source} lacks {len(missing)} tensors of this w2v-BERT ({', '.join(missing[:3])}"
                              f"{', ...' if len(missing) > 3 else ''}); check that config.json belongs to it")
    if extra:
        raise CheckpointError(f"{source} has {len(extra)} tensors this w2v-BERT does not ({', '.join(extra[:3])}"
                              f"{', ...' if len(extra) > 3 else ''}); check that config.json belongs to it")
    for name, shape in full.items():
        if tuple(state[name].shape) != shape:
            raise CheckpointError(f"{name} has shape {tuple(state[name].shape)} in {source} and {shape} in the "
                                  f"model its config.json describes")
    with torch.device("meta"):
        model = W2vBert(config, layers)
    kept = {n: state[n].to(torch.float32) if state[n].is_floating_point() else state[n] for n in model.state_dict()}
    model.load_state_dict(kept, strict=True, assign=True)
    return model.eval()


def load_folder(folder: str | Path, layers: int | None = None) -> W2vBert:
    """A facebook/w2v-bert-2.0 folder (config.json, model.safetensors) -> the encoder (float32)."""
    from mizuoto.nn.tensor_files import read_safetensors

    folder = Path(folder)
    try:
        data = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise CheckpointError(f"{folder} has no config.json; point at the w2v-bert-2.0 model folder") from None
    except (OSError, ValueError) as error:
        raise CheckpointError(f"cannot read {folder / 'config.json'} ({error}); download it again") from None
    if not (folder / "model.safetensors").is_file():
        raise CheckpointError(f"{folder} has no model.safetensors; download w2v-bert-2.0's weights")
    path = folder / "model.safetensors"
    return load_state(W2vBertConfig.from_dict(data), read_safetensors(path), layers, str(path))
