"""Seed-VC v2's content tokens: HuBERT-large hidden states quantised by the ASTRAL quantizers, 50 tokens a second.

Exact to seed-vc 0.4.3's `modules/astral_quantization/default_model.py::AstralQuantizer.forward` (with
`convnext.py::ConvNeXtV2Stage` and `bsq.py::BinarySphericalQuantize`) and `modules/v2/vc_wrapper.py::
VoiceConversionWrapper._process_content_features` (GPL-3.0 code, read, not copied), in eval mode, inference only:

    16 kHz wave (1, samples) ─ Wav2Vec2FeatureExtractor's input (zero mean, unit variance: numpy 1's arithmetic,
      seed-vc's numpy < 2; padding=True and an attention mask, which for one utterance change nothing)
    ─ HuBERT (transformers' HubertModel: mizuoto/nn/wav2vec2.py) with its first `ssl_output_layer` layers and the
      final LayerNorm replaced by Identity, given the all-ones attention mask ─ last_hidden_state (1, frames, 1024),
      cut to samples // 320 frames (never shorter than the conv stack's output for its 320-sample hop)
    ─ ConvNeXt V2 stage: 1x1 input projection, blocks of depthwise conv (k 7) → channels-first LayerNorm (in
      float32) → Linear → GELU → GRN → Linear, each added to its input; 1x1 output projection where sized so
    ─ BSQ: Linear to log2(codebook_size) dims → L2-normalised → one bit per dim (> 0) → index, most significant
      bit first (the checkpoint's `quantizer.mask`, 2^(d-1) .. 1).

Two quantizers read the same HuBERT: the wide one (2048 codes: the CFM's content and the AR's prompt) and the
narrow one (32 codes: the AR's content; its yaml section has `skip_ssl`, it is handed the wide one's SSL model).
Each computes HuBERT anew, as upstream does, so each call draws what upstream's draws (below).

Audio longer than 30 s goes in windows as `_process_content_features` cuts it: the first 30 s, then windows of the
previous window's last 5 s followed by up to 25 s more; a later window's first 250 tokens are dropped. The
ConvNeXt's GRN normalises over the time axis of a window, so a window's tokens depend on all of its frames.

Numerics kept where they decide the bits: the numpy 1 statistics (numpy1_stats.py); upstream's Linear on the
transposed (non-contiguous) activations as a module whose parameters require gradients computes it
(mizuoto.nn.ops.Linear); the channels-first LayerNorm as `(x - u) / sqrt(s + eps)` in float32, cast back to the
input's dtype before the affine; GRN's `torch.norm` over time and `gamma * (x * Nx) + beta + x`; F.normalize
before the sign. Under an autocast (upstream runs this inside `torch.autocast(device_type, dtype)`) every op is
the one upstream calls, so autocast treats each the same way; the bits come out of float32 comparisons.

Generator draws: transformers' HuBERT encoder draws one `torch.rand([])` from the global CPU generator before each
of its (kept) layers, in eval too (its LayerDrop coin). Upstream's later draws (the AR's sampling, the CFM's noise)
come after those, so `content_indices` makes the same draws from the `cpu_generator` it is given: `layers` per
window, for the wide and the narrow quantizer alike.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from math import log2
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from mizuoto.audio import wav2vec2_features
from mizuoto.core.errors import CheckpointError, InputError
from mizuoto.nn import wav2vec2
from mizuoto.nn.ops import Linear
from mizuoto.nn.tensor_files import read_checkpoint

from . import numpy1_stats

SAMPLE_RATE = 16000
WINDOW_SECONDS = 30  # _process_content_features' window (and the longest audio taken in one piece)
OVERLAP_SECONDS = 5  # the part of the previous window each later window starts with
TOKENS_PER_SECOND = 50  # what upstream assumes when it drops a later window's overlap
SAMPLES_PER_FRAME = 320  # upstream's `attention_mask.sum(-1) // 320`: HuBERT's hop
LAYER_NORM_EPS = 1e-6  # ConvNextV2LayerNorm's default
GRN_EPS = 1e-6

# ConvNeXtV2Stage options the released yaml leaves unset and this port does not implement
_UNSUPPORTED_ENCODER = ("downsample_layer_indices", "upsample_layer_indices", "interpolation_layer_indices")


# ---------------------------------------------------------------------------------------------------
# Configuration: a content_extractor_wide / content_extractor_narrow section of vc_wrapper.yaml


@dataclass(frozen=True)
class EncoderConfig:
    """ConvNeXtV2Stage's arguments (its defaults where the yaml says nothing)."""

    dim: int = 512
    intermediate_dim: int = 2048
    num_blocks: int = 1
    dilation: int = 1
    input_dim: int | None = None  # None or == dim: no input projection
    output_dim: int | None = None  # None or == dim: no output projection

    @property
    def in_channels(self) -> int:
        return self.input_dim or self.dim

    @property
    def out_channels(self) -> int:
        return self.output_dim or self.dim


@dataclass(frozen=True)
class QuantizerConfig:
    """BinarySphericalQuantize's arguments that decide the indices (the loss weights do nothing at inference)."""

    codebook_size: int
    dim: int
    spherical: bool = True
    codebook_scale: float = 1.0
    soft_clamp_input_value: float | None = None
    has_projections: bool = True
    projection_has_bias: bool = True

    @property
    def codebook_dim(self) -> int:
        return int(log2(self.codebook_size))


@dataclass(frozen=True)
class AstralConfig:
    ssl_output_layer: int  # HuBERT layers kept
    skip_ssl: bool  # True: the extractor reads another one's HuBERT (the narrow one reads the wide one's)
    encoder: EncoderConfig
    quantizer: QuantizerConfig

    @classmethod
    def from_section(cls, section: dict) -> "AstralConfig":
        """From vc_wrapper.yaml's `content_extractor_wide` or `content_extractor_narrow` (hydra's `_target_` keys
        may be there); what this port does not implement is refused in one line."""
        if not isinstance(section, dict):
            raise CheckpointError("a content_extractor section of vc_wrapper.yaml must be a mapping")
        _check_target(section, "AstralQuantizer", "content_extractor")
        layers = section.get("ssl_output_layer")
        if isinstance(layers, bool) or not isinstance(layers, int) or layers < 1:
            raise CheckpointError(f"content_extractor.ssl_output_layer must be a positive HuBERT layer count, "
                                  f"got {layers!r}")
        return cls(layers, bool(section.get("skip_ssl", False)),
                   _encoder_config(_subsection(section, "encoder")),
                   _quantizer_config(_subsection(section, "quantizer")))


def _subsection(section: dict, name: str) -> dict:
    node = section.get(name)
    if not isinstance(node, dict):
        raise CheckpointError(f"the content_extractor section of vc_wrapper.yaml has no {name} mapping")
    return node


def _check_target(node: dict, cls: str, where: str) -> None:
    target = node.get("_target_")
    if target is not None and str(target).rpartition(".")[2] != cls:
        raise CheckpointError(f"{where} is {target}; this port implements seed-vc's {cls} only")


def _positive_int(node: dict, name: str, default, where: str) -> int:
    value = node.get(name, default)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise CheckpointError(f"{where}.{name} must be a positive integer, got {value!r}")
    return value


def _encoder_config(node: dict) -> EncoderConfig:
    where = "content_extractor.encoder"
    _check_target(node, "ConvNeXtV2Stage", where)
    for name in _UNSUPPORTED_ENCODER:
        if node.get(name) is not None:
            raise CheckpointError(f"{where}.{name} is set; this port implements the stage without resampling "
                                  f"layers (as the released yaml has it)")
    if node.get("gin_channels", 0):
        raise CheckpointError(f"{where}.gin_channels is set; this port implements the unconditioned stage")
    defaults = EncoderConfig()
    dims = {name: _positive_int(node, name, getattr(defaults, name), where)
            for name in ("dim", "intermediate_dim", "num_blocks", "dilation")}
    optional = {name: None if node.get(name) is None else _positive_int(node, name, None, where)
                for name in ("input_dim", "output_dim")}
    return EncoderConfig(**dims, **optional)


def _quantizer_config(node: dict) -> QuantizerConfig:
    where = "content_extractor.quantizer"
    _check_target(node, "BinarySphericalQuantize", where)
    if node.get("num_codebooks", 1) != 1:
        raise CheckpointError(f"{where}.num_codebooks is {node['num_codebooks']!r}; this port implements one")
    for name in ("cosine_sim_project_in", "channel_first"):
        if node.get(name):
            raise CheckpointError(f"{where}.{name} is set; this port implements the released quantizer without it")
    size = node.get("codebook_size")
    if size is None:  # upstream: 2 ** dim codes when only dim is given
        size = 2 ** _positive_int(node, "dim", None, where)
    if isinstance(size, bool) or not isinstance(size, int) or size < 2 or not log2(size).is_integer():
        raise CheckpointError(f"{where}.codebook_size must be a power of 2 (BSQ gives one bit per dimension), "
                              f"got {size!r}")
    codebook_dim = int(log2(size))
    dim = _positive_int(node, "dim", codebook_dim, where) if node.get("dim") is not None else codebook_dim
    scale = node.get("codebook_scale", 1.0)
    if isinstance(scale, bool) or not isinstance(scale, (int, float)) or not scale > 0:
        raise CheckpointError(f"{where}.codebook_scale must be a positive number, got {scale!r}")
    clamp = node.get("soft_clamp_input_value")
    if clamp is not None and (isinstance(clamp, bool) or not isinstance(clamp, (int, float)) or clamp < scale):
        raise CheckpointError(f"{where}.soft_clamp_input_value must be a number >= codebook_scale, got {clamp!r}")
    projections = node.get("has_projections")
    projections = dim != codebook_dim if projections is None else bool(projections)
    if not projections and dim != codebook_dim:
        raise CheckpointError(f"{where}: has_projections is off but dim {dim} is not log2(codebook_size) "
                              f"{codebook_dim}")
    return QuantizerConfig(size, dim, bool(node.get("spherical", True)), float(scale),
                           None if clamp is None else float(clamp), projections,
                           bool(node.get("projection_has_bias", True)))


# ---------------------------------------------------------------------------------------------------
# The ConvNeXt V2 stage


class ChannelsFirstLayerNorm(nn.Module):
    """ConvNextV2LayerNorm(data_format="channels_first") over (batch, channels, time): the statistics and the
    division in float32, the result cast back to the input's dtype, then the affine in the type promotion of
    the float32 weights (under autocast: a float16 input comes out float32)."""

    def __init__(self, channels: int):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(channels))
        self.bias = nn.Parameter(torch.zeros(channels))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dtype = x.dtype
        x = x.float()
        mean = x.mean(1, keepdim=True)
        variance = (x - mean).pow(2).mean(1, keepdim=True)
        x = ((x - mean) / torch.sqrt(variance + LAYER_NORM_EPS)).to(dtype)
        return self.weight[None, :, None] * x + self.bias[None, :, None]


class GRN(nn.Module):
    """Global response normalisation of (batch, time, channels): each channel's L2 norm over time, relative to
    the mean over channels of those norms."""

    def __init__(self, channels: int):
        super().__init__()
        self.gamma = nn.Parameter(torch.zeros(1, 1, channels))
        self.beta = nn.Parameter(torch.zeros(1, 1, channels))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        norms = torch.norm(x, p=2, dim=1, keepdim=True)
        relative = norms / (norms.mean(dim=-1, keepdim=True) + GRN_EPS)
        return self.gamma * (x * relative) + self.beta + x


class ConvNeXtBlock(nn.Module):
    def __init__(self, config: EncoderConfig):
        super().__init__()
        dim = config.dim
        self.dwconv = nn.Conv1d(dim, dim, kernel_size=7, padding=config.dilation * 3, groups=dim,
                                dilation=config.dilation)
        self.norm = ChannelsFirstLayerNorm(dim)
        self.pwconv1 = Linear(dim, config.intermediate_dim)
        self.grn = GRN(config.intermediate_dim)
        self.pwconv2 = Linear(config.intermediate_dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """(batch, dim, time) -> the same shape."""
        h = self.norm(self.dwconv(x)).transpose(1, 2)  # the pointwise layers see (batch, time, dim) views
        h = self.pwconv2(self.grn(F.gelu(self.pwconv1(h))))
        return x + h.transpose(1, 2)


class ConvNeXtStage(nn.Module):
    def __init__(self, config: EncoderConfig):
        super().__init__()
        self.input_projection = nn.Conv1d(config.in_channels, config.dim, kernel_size=1) \
            if config.in_channels != config.dim else nn.Identity()
        self.blocks = nn.ModuleList(ConvNeXtBlock(config) for _ in range(config.num_blocks))
        self.output_projection = nn.Conv1d(config.dim, config.out_channels, kernel_size=1) \
            if config.out_channels != config.dim else nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """(batch, input_dim, time) -> (batch, output_dim, time)."""
        x = self.input_projection(x)
        for block in self.blocks:
            x = block(x)
        return self.output_projection(x)


# ---------------------------------------------------------------------------------------------------
# Binary spherical quantisation (indices only)


class BSQ(nn.Module):
    def __init__(self, config: QuantizerConfig):
        super().__init__()
        self.config = config
        self.project_in = Linear(config.dim, config.codebook_dim, bias=config.projection_has_bias) \
            if config.has_projections else nn.Identity()
        # each dimension's bit weight, most significant first (a persistent buffer: checkpoints hold it)
        self.register_buffer("mask", bit_weights(config.codebook_dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """(batch, time, dim) -> indices (batch, time) int64."""
        config = self.config
        x = self.project_in(x)
        if config.soft_clamp_input_value is not None:
            x = (x / config.soft_clamp_input_value).tanh() * config.soft_clamp_input_value
        if config.spherical:
            x = F.normalize(x, dim=-1) * config.codebook_scale
        # upstream quantises to +-codebook_scale in float32 and reads the bits back as `quantized > 0`: with a
        # positive scale that is the sign test itself
        bits = x.float() > 0
        return (bits.int() * self.mask.int()).sum(dim=-1)


def bit_weights(bits: int) -> torch.Tensor:
    return 2 ** torch.arange(bits - 1, -1, -1)


class AstralQuantizer(nn.Module):
    """An ASTRAL content quantizer: the ConvNeXt V2 stage and the BSQ indices (upstream's encoder and quantizer;
    the SSL model is HuBERT, loaded on its own by `load_hubert`)."""

    def __init__(self, config: AstralConfig):
        super().__init__()
        if config.encoder.out_channels != config.quantizer.dim:
            raise CheckpointError(f"the content extractor's encoder gives {config.encoder.out_channels} channels "
                                  f"and its quantizer takes dim {config.quantizer.dim}; make them agree")
        self.config = config
        self.encoder = ConvNeXtStage(config.encoder)
        self.quantizer = BSQ(config.quantizer)

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        """HuBERT's hidden states (batch, frames, input_dim) -> content indices (batch, frames) int64 (upstream
        hands the encoder feature lengths too, which it ignores)."""
        if features.dim() != 3 or features.shape[-1] != self.config.encoder.in_channels:
            raise InputError(f"the ASTRAL quantizer takes (batch, frames, {self.config.encoder.in_channels}) "
                             f"features; got shape {tuple(features.shape)}")
        hidden = self.encoder(features.transpose(1, 2)).transpose(1, 2)
        return self.quantizer(hidden)


def load_quantizer(path: Path, config: AstralConfig, device) -> AstralQuantizer:
    """An ASTRAL checkpoint (bsq2048_light.pth / bsq32_light.pth: a state dict of `encoder.*` and `quantizer.*`
    tensors) in float32 on `device`. Upstream loads it with strict=False: the quantizer's `project_out` (only its
    decoded vectors use it) and any other extra key are ignored here too, `quantizer.mask` is taken when present
    (else the bit weights it starts with); a missing encoder or quantizer tensor is a one-line error."""
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"{path} does not exist; download Plachta/ASTRAL-quantization's {path.name}")
    state = read_checkpoint(path)
    if not config.skip_ssl and any(name.startswith("ssl_model.") for name in state):
        raise CheckpointError(f"{path} holds its own ssl_model weights, which upstream would load over HuBERT's "
                              f"and this port does not; use the released light checkpoint")
    with torch.device("meta"):
        model = AstralQuantizer(config)
    expected = model.state_dict()
    state.setdefault("quantizer.mask", bit_weights(config.quantizer.codebook_dim))
    missing = [name for name in expected if name not in state]
    if missing:
        raise CheckpointError(f"{path} lacks {len(missing)} tensors of the ASTRAL quantizer ({', '.join(missing[:3])}"
                              f"{', ...' if len(missing) > 3 else ''}); check that it is the file for this "
                              f"content_extractor section and its sizes")
    for name, tensor in expected.items():
        if state[name].shape != tensor.shape:
            raise CheckpointError(f"{path}: {name} has shape {tuple(state[name].shape)}, the content_extractor "
                                  f"section's sizes give {tuple(tensor.shape)}; check the yaml against the file")
    model.to_empty(device="cpu")
    model.load_state_dict({name: state[name] for name in expected}, strict=True)  # copies cast to float32 / int64
    return model.to(device).eval().requires_grad_(False)


# ---------------------------------------------------------------------------------------------------
# HuBERT


class HubertContent(nn.Module):
    """The SSL model of the wide extractor: HuBERT cut to `ssl_output_layer` layers, its final LayerNorm replaced
    by Identity, with its feature extractor's settings (preprocessor_config.json)."""

    def __init__(self, encoder: wav2vec2.Wav2Vec2, features: wav2vec2_features.FeatureConfig):
        super().__init__()
        self.encoder = encoder
        self.features = features

    @property
    def layers(self) -> int:
        return len(self.encoder.encoder.layers)

    def forward(self, wave_16k: torch.Tensor) -> torch.Tensor:
        """One utterance (1, samples) -> the hidden states upstream hands its quantizer, (1, frames, hidden)."""
        values, attention = wav2vec2_features.input_values(wave_16k[0], replace(self.features, do_normalize=False),
                                                           return_attention_mask=True, padding=True)
        if self.features.do_normalize:  # seed-vc runs numpy 1: its statistics, computed the same way here
            values = torch.from_numpy(numpy1_stats.zero_mean_unit_var(values[0].numpy()))[None]
        device = next(self.encoder.parameters()).device
        attention = attention.to(device)
        hidden = self.encoder(values.to(device), attention_mask=attention).last_hidden_state
        return hidden[:, : attention.shape[-1] // SAMPLES_PER_FRAME]


def load_hubert(folder: Path, device, layers: int) -> HubertContent:
    """A transformers HubertModel folder (config.json, model.safetensors or pytorch_model.bin, and
    preprocessor_config.json, whose absence means Wav2Vec2FeatureExtractor's defaults) in float32, as
    `AutoModel.from_pretrained` loads it, cut to `layers` (the wide section's ssl_output_layer)."""
    folder = Path(folder)
    if isinstance(layers, bool) or not isinstance(layers, int) or layers < 1:
        raise CheckpointError(f"ssl_output_layer must be a positive HuBERT layer count, got {layers!r}")
    preprocessor = {}
    if (folder / "preprocessor_config.json").is_file():
        try:
            preprocessor = json.loads((folder / "preprocessor_config.json").read_text(encoding="utf-8"))
        except (OSError, ValueError) as error:
            raise CheckpointError(f"cannot read {folder / 'preprocessor_config.json'} ({error}); download it "
                                  f"again") from None
    encoder = wav2vec2.load_folder(folder, dtype=torch.float32)
    if layers > len(encoder.encoder.layers):
        raise CheckpointError(f"the content extractor keeps {layers} HuBERT layers (ssl_output_layer); {folder} "
                              f"has {len(encoder.encoder.layers)}")
    encoder.keep_layers(layers)
    encoder.encoder.layer_norm = nn.Identity()  # upstream takes the last kept layer's output as it is
    content = HubertContent(encoder, wav2vec2_features.FeatureConfig.from_dict(preprocessor))
    return content.to(device).eval().requires_grad_(False)


# ---------------------------------------------------------------------------------------------------
# _process_content_features


def _window_indices(hubert: HubertContent, quantizer: AstralQuantizer, window: torch.Tensor,
                    cpu_generator: torch.Generator | None) -> torch.Tensor:
    indices = quantizer(hubert(window))
    if cpu_generator is not None:
        for _ in range(hubert.layers):  # transformers' LayerDrop coins, drawn in eval too
            torch.rand((), generator=cpu_generator)
    return indices


def content_indices(hubert: HubertContent, quantizer: AstralQuantizer, wave_16k: torch.Tensor,
                    cpu_generator: torch.Generator | None = None) -> torch.Tensor:
    """(1, samples) float32 16 kHz audio -> content indices (1, tokens) int64 on the quantizer's device, as
    `_process_content_features` computes them (the wide or the narrow quantizer, the same HuBERT).
    `cpu_generator` (a CPU torch.Generator) takes the draws upstream's HuBERT makes from the global generator
    (`hubert.layers` per window); None draws nothing."""
    if wave_16k.dim() != 2 or wave_16k.shape[0] != 1:
        raise InputError(f"content_indices takes one utterance, (1, samples); got shape {tuple(wave_16k.shape)}")
    window, overlap = SAMPLE_RATE * WINDOW_SECONDS, SAMPLE_RATE * OVERLAP_SECONDS
    samples = wave_16k.shape[-1]
    with torch.no_grad():
        if samples <= window:
            return _window_indices(hubert, quantizer, wave_16k, cpu_generator)
        pieces, buffer, done = [], None, 0
        while done < samples:
            if buffer is None:
                chunk = wave_16k[:, done:done + window]
            else:
                chunk = torch.cat([buffer, wave_16k[:, done:done + window - overlap]], dim=-1)
            indices = _window_indices(hubert, quantizer, chunk, cpu_generator)
            pieces.append(indices if done == 0 else indices[:, TOKENS_PER_SECOND * OVERLAP_SECONDS:])
            buffer = chunk[:, -overlap:]
            done += window if done == 0 else chunk.shape[-1] - overlap
        return torch.cat(pieces, dim=1)
