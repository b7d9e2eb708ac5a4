"""MaskGCT's semantic codec (RepCodec) as IndexTTS 2 runs it, and IndexTTS 2.5's 25 Hz EnhancedCodec.

Exact to index-tts ee40fa7 `indextts/utils/maskgct/models/codec/kmeans/{repcodec_model,vocos}.py` and
`.../amphion_codec/quantize/{residual_vq,factorized_vector_quantize}.py` (Amphion's MIT code, read not copied),
with `indextts/codec/models.py::EnhancedCodec` for 2.5 (the same blocks, a stride-2 convolution in front and a
nearest x2 upsampling with a convolution behind the decoder).

IndexTTS 2 quantises the normalised w2v-BERT features of the speaker reference, `(B, T, hidden)`:
  x -> [down: Conv1d(k3, s2, p1) -> GELU, 2.5 only] -> encoder (VocosBackbone -> Linear) -> (B, hidden, T)
  -> per quantizer (one in the released files): in_project (weight-normed 1x1 conv) -> z_e (B, d, T);
     L2-normalised z_e rows against the L2-normalised codebook: dist = |e|^2 - (2e) @ c^T + |c|^2,
     code = argmax(-dist) (torch's max, first of equals); z_q = codebook[code] (the raw, unnormalised row);
     z_q = z_e + (z_q - z_e) (the straight-through sum: NOT bit-equal to z_q, kept); out_project -> (B, hidden, T);
     summed over quantizers (0.0 + the first), the residual minus each.
  quantize -> codes (B, T) (one quantizer; (N, B, T) otherwise) and the sum transposed: (B, T, hidden) = `S_ref`.
`vq2emb(codes (N, B, T))` -> sum of out_project(codebook[codes]) -> (B, hidden, T); IndexTTS 2 calls it as
`vq2emb(codes.unsqueeze(1)).transpose(1, 2)` for its one row (`embed` here). 2.5's `decode(codes)` runs vq2emb,
the decoder VocosBackbone -> Linear, nearest x2 and the `up` convolution: (B, 2T, hidden) at 50 Hz.

VocosBackbone (no AdaLayerNorm): embed Conv1d(k7, p3) -> LayerNorm(eps 1e-6) -> ConvNeXt blocks (depthwise
Conv1d k7 -> LayerNorm -> Linear -> GELU -> Linear -> gamma * x, + the block's input) -> final LayerNorm: (B, T, dim).

Weights: `load_semantic_codec` reads amphion/MaskGCT `semantic_codec/model.safetensors` as upstream's
`safetensors.torch.load_model` does (strict: every published key, nothing more); `load_enhanced_codec` reads 2.5's
`codec.pth` (`["model"]`; upstream keeps its random init for a missing or misshapen key, here that is refused).
The weight-normed projections (`weight_g`, `weight_v`) are folded once, `torch._weight_norm(v, g, 0)` as
upstream's hook computes it before every call (`wavenet.fold_weight_norm`). The sizes are read off the file;
a `config` (config.yaml's `semantic_codec` section) given as well must agree.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from mizuoto.core.errors import CheckpointError, InputError
from mizuoto.nn.wavenet import LEGACY, PARAMETRIZED, fold_weight_norm


@dataclass(frozen=True)
class CodecConfig:
    """config.yaml's `semantic_codec` section (the released IndexTTS 2 values are the defaults); 2.5's
    EnhancedCodec is the same with downsample_scale 2."""

    codebook_size: int = 8192
    hidden_size: int = 1024
    codebook_dim: int = 8
    vocos_dim: int = 384
    vocos_intermediate_dim: int = 2048
    vocos_num_layers: int = 12
    num_quantizers: int = 1
    downsample_scale: int = 1

    @classmethod
    def from_section(cls, section, downsample_scale: int = 1) -> "CodecConfig":
        """The config from a mapping (config.yaml's semantic_codec); keys it does not name keep their defaults
        (`downsample_scale` as given: 1 for RepCodec, 2 for 2.5's EnhancedCodec)."""
        values = dict(section)
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise CheckpointError(f"semantic_codec config has unknown key(s) {', '.join(unknown)}; "
                                  f"expected some of {', '.join(sorted(known))}")
        if values.get("downsample_scale") is None:  # upstream reads a None scale as no downsampling
            values["downsample_scale"] = downsample_scale if "downsample_scale" not in values else 1
        try:
            return cls(**{k: int(v) for k, v in values.items()})
        except (TypeError, ValueError):
            raise CheckpointError(f"semantic_codec config values must be integers, got {values}") from None


class ConvNeXtBlock(nn.Module):
    def __init__(self, dim: int, intermediate_dim: int, num_layers: int):
        super().__init__()
        self.dwconv = nn.Conv1d(dim, dim, kernel_size=7, padding=3, groups=dim)
        self.norm = nn.LayerNorm(dim, eps=1e-6)
        self.pwconv1 = nn.Linear(dim, intermediate_dim)
        self.act = nn.GELU()
        self.pwconv2 = nn.Linear(intermediate_dim, dim)
        self.gamma = nn.Parameter(torch.full((dim,), 1 / num_layers))

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (B, C, T) -> (B, C, T)
        y = self.dwconv(x).transpose(1, 2)
        y = self.pwconv2(self.act(self.pwconv1(self.norm(y))))
        return x + (self.gamma * y).transpose(1, 2)


class VocosBackbone(nn.Module):
    def __init__(self, input_channels: int, dim: int, intermediate_dim: int, num_layers: int):
        super().__init__()
        self.embed = nn.Conv1d(input_channels, dim, kernel_size=7, padding=3)
        self.norm = nn.LayerNorm(dim, eps=1e-6)
        self.convnext = nn.ModuleList([ConvNeXtBlock(dim, intermediate_dim, num_layers) for _ in range(num_layers)])
        self.final_layer_norm = nn.LayerNorm(dim, eps=1e-6)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (B, C_in, T) -> (B, T, dim)
        x = self.norm(self.embed(x).transpose(1, 2)).transpose(1, 2)
        for block in self.convnext:
            x = block(x)
        return self.final_layer_norm(x.transpose(1, 2))


class FactorizedVQ(nn.Module):
    """One quantizer: 1x1 projections to and from the codebook's width (weights folded), cosine nearest row."""

    def __init__(self, input_dim: int, codebook_size: int, codebook_dim: int):
        super().__init__()
        self.projected = input_dim != codebook_dim
        if self.projected:
            self.in_project = nn.Conv1d(input_dim, codebook_dim, kernel_size=1)
            self.out_project = nn.Conv1d(codebook_dim, input_dim, kernel_size=1)
        self.codebook = nn.Embedding(codebook_size, codebook_dim)

    def project_in(self, z: torch.Tensor) -> torch.Tensor:
        return self.in_project(z) if self.projected else z

    def project_out(self, z: torch.Tensor) -> torch.Tensor:
        return self.out_project(z) if self.projected else z

    def scores(self, z_e: torch.Tensor) -> torch.Tensor:
        """-dist (B*T, codebook_size) of the projected latents z_e (B, d, T), upstream's expression."""
        rows = z_e.permute(0, 2, 1).reshape(-1, z_e.shape[1])
        rows = F.normalize(rows)
        codebook = F.normalize(self.codebook.weight)
        dist = rows.pow(2).sum(1, keepdim=True) - (2 * rows) @ codebook.t() + codebook.pow(2).sum(1, keepdim=True).t()
        return -dist

    def forward(self, z: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """z (B, hidden, T) -> (out_project of the straight-through sum (B, hidden, T), codes (B, T))."""
        z_e = self.project_in(z)
        codes = self.scores(z_e).max(1)[1].view(z.shape[0], -1)
        z_q = F.embedding(codes, self.codebook.weight).transpose(1, 2)
        return self.project_out(z_e + (z_q - z_e)), codes

    def vq2emb(self, codes: torch.Tensor) -> torch.Tensor:  # (B, T) -> (B, hidden, T)
        return self.project_out(F.embedding(codes, self.codebook.weight).transpose(1, 2))


class ResidualVQ(nn.Module):
    def __init__(self, config: CodecConfig):
        super().__init__()
        self.quantizers = nn.ModuleList([FactorizedVQ(config.hidden_size, config.codebook_size, config.codebook_dim)
                                         for _ in range(config.num_quantizers)])


class SemanticCodec(nn.Module):
    """RepCodec (downsample_scale 1, IndexTTS 2) or EnhancedCodec (downsample_scale 2, IndexTTS 2.5); module names
    are upstream's, so the state dict's keys are the published ones (with each projection's weight folded)."""

    def __init__(self, config: CodecConfig = CodecConfig()):
        super().__init__()
        self.config = config
        h = config.hidden_size
        if config.downsample_scale > 1:
            self.down = nn.Conv1d(h, h, kernel_size=3, stride=2, padding=1)
            self.up = nn.Conv1d(h, h, kernel_size=3, stride=1, padding=1)

        def backbone():
            return nn.Sequential(VocosBackbone(h, config.vocos_dim, config.vocos_intermediate_dim,
                                               config.vocos_num_layers), nn.Linear(config.vocos_dim, h))

        self.encoder = backbone()
        self.decoder = backbone()
        self.quantizer = ResidualVQ(config)

    @property
    def downsampled(self) -> bool:
        return self.config.downsample_scale > 1

    def encode(self, features: torch.Tensor) -> torch.Tensor:
        """Features (B, T, hidden) -> the encoder's latents (B, hidden, T') that the quantizers read."""
        self._check_features(features)
        x = features
        if self.downsampled:
            x = F.gelu(self.down(x.transpose(1, 2))).transpose(1, 2)
        return self.encoder(x.transpose(1, 2)).transpose(1, 2)

    def quantize(self, features: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Upstream's `quantize`: features (B, T, hidden) -> (codes (B, T') int64 with one quantizer, else
        (N, B, T'); the quantised, out-projected sum (B, T', hidden), IndexTTS 2's `S_ref`). T' = T, or
        ceil(T / 2) for the EnhancedCodec."""
        residual = self.encode(features)
        total, codes = None, []
        for quantizer in self.quantizer.quantizers:
            z_q, index = quantizer(residual)
            total = z_q + 0.0 if total is None else total + z_q  # upstream starts its sum from the float 0.0
            residual = residual - z_q
            codes.append(index)
        codes = torch.stack(codes)
        return (codes.squeeze(0) if codes.shape[0] == 1 else codes), total.transpose(1, 2)

    def vq2emb(self, codes: torch.Tensor) -> torch.Tensor:
        """Upstream's `quantizer.vq2emb`: codes (N, B, T) -> the sum of each quantizer's out-projected rows,
        (B, hidden, T)."""
        codes = self._check_codes(codes, 3)
        total = None
        for quantizer, index in zip(self.quantizer.quantizers, codes, strict=True):
            emb = quantizer.vq2emb(index)
            total = emb + 0.0 if total is None else total + emb
        return total

    def embed(self, codes: torch.Tensor) -> torch.Tensor:
        """Codes (B, T) of a one-quantizer codec -> (B, T, hidden): IndexTTS 2's
        `quantizer.vq2emb(codes.unsqueeze(1)).transpose(1, 2)` (which reads row 0 alone: the same for B = 1)."""
        codes = self._check_codes(codes, 2)
        return self.vq2emb(codes.unsqueeze(0)).transpose(1, 2)

    def decode(self, codes: torch.Tensor) -> torch.Tensor:
        """2.5's EnhancedCodec.decode: codes (B, T) or (N, B, T) -> (B, 2T, hidden)."""
        if not self.downsampled:
            raise InputError("decode is the EnhancedCodec's (IndexTTS 2.5, downsample_scale 2); RepCodec's codes "
                             "become embeddings with vq2emb / embed")
        if codes.dim() == 2:
            codes = codes.unsqueeze(0)
        x = self.decoder(self.vq2emb(codes)).transpose(1, 2)
        return self.up(F.interpolate(x, scale_factor=2, mode="nearest")).transpose(1, 2)

    def _check_features(self, features: torch.Tensor) -> None:
        h = self.config.hidden_size
        if not isinstance(features, torch.Tensor) or features.dim() != 3 or features.shape[-1] != h:
            shape = tuple(features.shape) if isinstance(features, torch.Tensor) else type(features).__name__
            raise InputError(f"semantic codec features must be (batch, frames, {h}), got {shape}")
        if features.shape[1] < 1 or features.shape[0] < 1:
            raise InputError(f"semantic codec features have no frames ({tuple(features.shape)}); give at least one")
        if not features.is_floating_point():
            raise InputError(f"semantic codec features must be floating point, got {features.dtype}")

    def _check_codes(self, codes: torch.Tensor, dims: int) -> torch.Tensor:
        n, size = self.config.num_quantizers, self.config.codebook_size
        what = "(batch, frames)" if dims == 2 else f"({n}, batch, frames)"
        if not isinstance(codes, torch.Tensor) or codes.dim() != dims or (dims == 3 and codes.shape[0] != n) \
                or (dims == 2 and n != 1):
            shape = tuple(codes.shape) if isinstance(codes, torch.Tensor) else type(codes).__name__
            raise InputError(f"semantic codes must be {what} for a codec of {n} quantizer(s), got {shape}")
        if codes.dtype.is_floating_point or codes.dtype.is_complex or codes.dtype == torch.bool:
            raise InputError(f"semantic codes must be integers, got {codes.dtype}")
        if codes.numel() == 0:
            raise InputError(f"semantic codes are empty ({tuple(codes.shape)}); give at least one frame")
        low, high = int(codes.min()), int(codes.max())
        if low < 0 or high >= size:
            raise InputError(f"semantic codes must lie in [0, {size}), got values from {low} to {high}")
        return codes.long()


# ---------------------------------------------------------------------------------------------------
# Loading


def config_from_state(state: dict, downsample_scale: int | None = None) -> CodecConfig:
    """The sizes a published state dict (weight_g / weight_v unfolded or folded) was built with."""
    def shape(key):
        if key not in state:
            raise CheckpointError(f"not a MaskGCT semantic codec file: it has no {key}")
        return tuple(state[key].shape)

    codebook_size, codebook_dim = shape("quantizer.quantizers.0.codebook.weight")
    vocos_dim, hidden_size, _ = shape("encoder.0.embed.weight")
    intermediate, _ = shape("encoder.0.convnext.0.pwconv1.weight")
    layers = 0
    while f"encoder.0.convnext.{layers}.gamma" in state:
        layers += 1
    quantizers = 0
    while f"quantizer.quantizers.{quantizers}.codebook.weight" in state:
        quantizers += 1
    scale = downsample_scale if downsample_scale is not None else (2 if "down.weight" in state else 1)
    return CodecConfig(codebook_size, hidden_size, codebook_dim, vocos_dim, intermediate, layers, quantizers, scale)


def build_from_state(state: dict, path, config: CodecConfig | None = None, downsample_scale: int | None = None,
                     device="cpu") -> SemanticCodec:
    """A codec holding `state` (upstream's key names, projections weight-normed or folded), strict: every key
    the model has, nothing else, each of its shape; `config` (if given) must be the file's."""
    bad = [k for k, v in state.items() if not isinstance(v, torch.Tensor)]
    if bad:
        raise CheckpointError(f"{path} is not a semantic codec state dict ({bad[0]} is not a tensor)")
    found = config_from_state(state, downsample_scale)
    if config is not None and config != found:
        diff = {k: (v, asdict(found)[k]) for k, v in asdict(config).items() if asdict(found)[k] != v}
        raise CheckpointError(f"{path} does not match the semantic_codec config: (config, file) {diff}")
    model = SemanticCodec(found)
    floats = {k: v for k, v in state.items()}
    folded = fold_weight_norm(floats, torch.float32)
    expected = model.state_dict()
    missing = [k for k in expected if k not in folded]
    extra = [k for k in folded if k not in expected]
    if missing or extra:
        hint = "; the file's weight-normed projections lack a pair" if any(
            k.endswith(LEGACY + PARAMETRIZED) for k in extra) else ""
        raise CheckpointError(f"{path} is not a complete MaskGCT semantic codec: missing {missing[:3]}"
                              f"{' ...' if len(missing) > 3 else ''}, unexpected {extra[:3]}"
                              f"{' ...' if len(extra) > 3 else ''}{hint}; download it again")
    for key, value in expected.items():
        if tuple(folded[key].shape) != tuple(value.shape):
            raise CheckpointError(f"{path}: {key} has shape {tuple(folded[key].shape)}, the codec needs "
                                  f"{tuple(value.shape)}; download it again")
        if not folded[key].is_floating_point():
            raise CheckpointError(f"{path}: {key} is {folded[key].dtype}, not a float tensor; download it again")
    model.load_state_dict({k: v.to(torch.float32) for k, v in folded.items()})
    return model.eval().requires_grad_(False).to(device)


def load_semantic_codec(path: str | Path, config: CodecConfig | None = None, device="cpu") -> SemanticCodec:
    """amphion/MaskGCT `semantic_codec/model.safetensors` (IndexTTS 2's `hf_cache/semantic_codec_model.safetensors`)
    -> RepCodec, as upstream's strict `safetensors.torch.load_model`."""
    from mizuoto.nn.tensor_files import read_safetensors

    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"semantic codec file {path} not found; download amphion/MaskGCT "
                              f"semantic_codec/model.safetensors")
    return build_from_state(read_safetensors(path), path, config, downsample_scale=1, device=device)


def load_enhanced_codec(path: str | Path, config: CodecConfig | None = None, device="cpu") -> SemanticCodec:
    """IndexTTS 2.5's `codec.pth` (a torch file, its state dict under "model") -> EnhancedCodec."""
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"codec file {path} not found; download IndexTTS 2.5's codec.pth")
    try:
        checkpoint = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as error:  # a truncated or foreign file: pickle, zip and torch errors alike
        raise CheckpointError(f"cannot read {path} as a torch checkpoint ({type(error).__name__}); "
                              f"download it again") from None
    if not isinstance(checkpoint, dict) or not isinstance(checkpoint.get("model"), dict):
        raise CheckpointError(f"{path} has no 'model' state dict; is it IndexTTS 2.5's codec.pth?")
    return build_from_state(checkpoint["model"], path, config, device=device)
