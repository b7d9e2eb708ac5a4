"""Vocos, the mel -> waveform vocoder F5-TTS speaks through, native and exact to vocos 0.1.0 (MIT).

The model is a ConvNeXt stack over mel frames whose last layer predicts, per frame, a log-magnitude
and a phase for each STFT bin; an inverse STFT turns those into audio. Only the configuration of the
published `charactr/vocos-mel-24khz` is implemented: mel features, the ConvNeXt backbone without
AdaLayerNorm, and the ISTFT head with "center" padding (which is plain `torch.istft`).

Parameter and buffer names are vocos's own, so its `pytorch_model.bin` loads as it is. Its
`feature_extractor.*` tensors (the mel window and filter bank) are accepted and ignored: `mel.py`
rebuilds the same ones.

On the same device, thread count and CPU kernel level, `decode` equals upstream's `Vocos.decode` bit
for bit in float32: every step is the same torch operation with the same operands in the same order.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from mizuoto.core.errors import CheckpointError, InputError

from .mel import MelSettings

FEATURE_EXTRACTOR = "vocos.feature_extractors.MelSpectrogramFeatures"
BACKBONE = "vocos.models.VocosBackbone"
HEAD = "vocos.heads.ISTFTHead"
LAYER_NORM_EPS = 1e-6
MAX_MAGNITUDE = 1e2  # vocos caps exp(log-magnitude) here so that an outlier cannot blow up the output

# State-dict keys of the published file that this port does not use (they hold the mel window and bank).
IGNORED_PREFIX = "feature_extractor."


@dataclass(frozen=True)
class VocosConfig:
    """The hyper-parameters of a Vocos checkpoint; the defaults are vocos-mel-24khz's."""

    n_mels: int = 100  # backbone input_channels
    dim: int = 512
    intermediate_dim: int = 1536
    num_layers: int = 8
    layer_scale: float | None = None  # the blocks' gamma initial value; None: 1 / num_layers
    n_fft: int = 1024
    hop_length: int = 256
    # The feature extractor's settings: unused by decode, they say which mel the vocoder expects.
    features: MelSettings = field(default_factory=lambda: MelSettings(log_floor=1e-7))

    @property
    def has_layer_scale(self) -> bool:
        # Upstream replaces a falsy value (0 or None) by 1 / num_layers and drops gamma only when the
        # result is not positive.
        return (self.layer_scale or 1 / self.num_layers) > 0


# ---------------------------------------------------------------------------------------------------
# The network


class ConvNeXtBlock(nn.Module):
    """Depthwise conv k7 -> LayerNorm -> Linear -> GELU -> Linear -> per-channel scale, plus the input."""

    def __init__(self, dim: int, intermediate_dim: int, layer_scale: bool):
        super().__init__()
        self.dwconv = nn.Conv1d(dim, dim, kernel_size=7, padding=3, groups=dim)
        self.norm = nn.LayerNorm(dim, eps=LAYER_NORM_EPS)
        self.pwconv1 = nn.Linear(dim, intermediate_dim)
        self.pwconv2 = nn.Linear(intermediate_dim, dim)
        self.gamma = nn.Parameter(torch.ones(dim)) if layer_scale else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (B, dim, T) -> (B, dim, T)
        y = self.dwconv(x).transpose(1, 2)
        y = self.pwconv2(F.gelu(self.pwconv1(self.norm(y))))
        if self.gamma is not None:
            y = self.gamma * y
        return x + y.transpose(1, 2)


class Backbone(nn.Module):
    """Mel frames (B, n_mels, T) -> hidden frames (B, T, dim)."""

    def __init__(self, config: VocosConfig):
        super().__init__()
        self.embed = nn.Conv1d(config.n_mels, config.dim, kernel_size=7, padding=3)
        self.norm = nn.LayerNorm(config.dim, eps=LAYER_NORM_EPS)
        self.convnext = nn.ModuleList(ConvNeXtBlock(config.dim, config.intermediate_dim, config.has_layer_scale)
                                      for _ in range(config.num_layers))
        self.final_layer_norm = nn.LayerNorm(config.dim, eps=LAYER_NORM_EPS)

    def forward(self, mel: torch.Tensor) -> torch.Tensor:
        x = self.norm(self.embed(mel).transpose(1, 2)).transpose(1, 2)
        for block in self.convnext:
            x = block(x)
        return self.final_layer_norm(x.transpose(1, 2))


class InverseSTFT(nn.Module):
    """Centred inverse STFT with a periodic Hann window; `window` is a buffer because the checkpoint
    stores it (as `head.istft.window`)."""

    def __init__(self, n_fft: int, hop_length: int):
        super().__init__()
        self.n_fft = n_fft
        self.hop_length = hop_length
        self.register_buffer("window", torch.hann_window(n_fft))

    def forward(self, spectrum: torch.Tensor) -> torch.Tensor:  # (B, n_fft // 2 + 1, T) complex -> (B, samples)
        window = self.window.to(spectrum.real.dtype)  # a no-op in float32
        return torch.istft(spectrum, self.n_fft, self.hop_length, self.n_fft, window, center=True)


class SpectrumHead(nn.Module):
    """Hidden frames (B, T, dim) -> log-magnitude and phase per STFT bin -> waveform (B, (T - 1) * hop)."""

    def __init__(self, config: VocosConfig):
        super().__init__()
        self.out = nn.Linear(config.dim, config.n_fft + 2)
        self.istft = InverseSTFT(config.n_fft, config.hop_length)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        # The ISTFT runs in float32 whatever the model's dtype (complex half is barely supported);
        # for a float32 model the cast is a no-op.
        coefficients = self.out(hidden).transpose(1, 2).float()
        log_magnitude, phase = coefficients.chunk(2, dim=1)  # the first n_fft / 2 + 1 rows are magnitudes
        magnitude = torch.clip(torch.exp(log_magnitude), max=MAX_MAGNITUDE)
        # Built as mag * (cos + i sin) from real parts, the exact complex values upstream builds;
        # going through exp(i * phase) would round differently.
        spectrum = magnitude * (torch.cos(phase) + 1j * torch.sin(phase))
        return self.istft(spectrum)


class Vocos(nn.Module):
    """The vocoder: `decode(mel)` turns (B, n_mels, frames) log-mels into (B, (frames - 1) * hop) audio."""

    def __init__(self, config: VocosConfig | None = None):
        super().__init__()
        config = config or VocosConfig()
        self.config = config
        self.backbone = Backbone(config)
        self.head = SpectrumHead(config)

    @property
    def sample_rate(self) -> int:
        return self.config.features.sample_rate

    def forward(self, mel: torch.Tensor) -> torch.Tensor:
        return self.head(self.backbone(mel))

    @torch.no_grad()
    def decode(self, mel: torch.Tensor) -> torch.Tensor:
        """Log-mel frames (B, n_mels, frames) -> float32 waveform (B, (frames - 1) * hop_length)."""
        if not torch.is_tensor(mel) or mel.dim() != 3 or mel.shape[1] != self.config.n_mels:
            shape = tuple(mel.shape) if torch.is_tensor(mel) else type(mel).__name__
            raise InputError(f"Vocos decodes mels shaped (batch, {self.config.n_mels}, frames), not {shape}")
        if mel.shape[2] < 2:
            raise InputError(f"Vocos needs at least 2 mel frames to make audio, not {mel.shape[2]}")
        weight = self.backbone.embed.weight
        return self(mel.to(device=weight.device, dtype=weight.dtype)).float()


# ---------------------------------------------------------------------------------------------------
# Loading a published checkpoint folder (config.yaml + pytorch_model.bin or model.safetensors)

_ALLOWED_ARGS = {
    FEATURE_EXTRACTOR: {"sample_rate", "n_fft", "hop_length", "n_mels", "padding"},
    BACKBONE: {"input_channels", "dim", "intermediate_dim", "num_layers", "layer_scale_init_value",
               "adanorm_num_embeddings"},
    HEAD: {"dim", "n_fft", "hop_length", "padding"},
}


def _section(config: dict, name: str, class_path: str, source: Path) -> dict:
    entry = config.get(name)
    if not isinstance(entry, dict) or "class_path" not in entry:
        raise CheckpointError(f"{source} has no '{name}' entry with a class_path; is this a Vocos config.yaml?")
    if entry["class_path"] != class_path:
        raise CheckpointError(f"{source}: {name} class {entry['class_path']} is not supported; Mizuoto's Vocos "
                              f"runs {class_path} (use a mel Vocos such as charactr/vocos-mel-24khz)")
    args = entry.get("init_args") or {}
    if not isinstance(args, dict):
        raise CheckpointError(f"{source}: {name}.init_args must be a mapping")
    unknown = sorted(set(args) - _ALLOWED_ARGS[class_path])
    if unknown:
        raise CheckpointError(f"{source}: {name}.init_args has unknown keys {', '.join(unknown)}")
    return args


def _required(args: dict, key: str, name: str, source: Path):
    if key not in args:
        raise CheckpointError(f"{source}: {name}.init_args needs '{key}'")
    return args[key]


def config_from_yaml(data: dict, source: Path | str = "config.yaml") -> VocosConfig:
    """A `VocosConfig` from vocos's parsed config.yaml (feature_extractor / backbone / head entries with
    class_path and init_args); unsupported classes or options raise CheckpointError."""
    source = Path(source)
    if not isinstance(data, dict):
        raise CheckpointError(f"{source} is not a Vocos config (expected a mapping at the top)")
    features = _section(data, "feature_extractor", FEATURE_EXTRACTOR, source)
    backbone = _section(data, "backbone", BACKBONE, source)
    head = _section(data, "head", HEAD, source)

    if backbone.get("adanorm_num_embeddings") is not None:
        raise CheckpointError(f"{source}: backbone.adanorm_num_embeddings is set; Mizuoto's Vocos runs only "
                              f"unconditioned mel models (remove it or use charactr/vocos-mel-24khz)")
    # ISTFTHead's own default padding is "same", so a config without the key means "same".
    if head.get("padding", "same") != "center":
        raise CheckpointError(f"{source}: head.init_args.padding is {head.get('padding', 'same')!r}; "
                              f"Mizuoto's Vocos supports only 'center' (as vocos-mel-24khz)")
    dim = _required(backbone, "dim", "backbone", source)
    if _required(head, "dim", "head", source) != dim:
        raise CheckpointError(f"{source}: head.dim {head['dim']} differs from backbone.dim {dim}")
    try:
        mel = MelSettings(sample_rate=int(features.get("sample_rate", 24000)),
                          n_fft=int(features.get("n_fft", 1024)), win_length=int(features.get("n_fft", 1024)),
                          hop_length=int(features.get("hop_length", 256)), n_mels=int(features.get("n_mels", 100)),
                          padding=features.get("padding", "center"), log_floor=1e-7)
    except (InputError, TypeError, ValueError) as exc:
        raise CheckpointError(f"{source}: feature_extractor.init_args are not usable ({exc})") from None
    layer_scale = backbone.get("layer_scale_init_value")
    return VocosConfig(n_mels=int(_required(backbone, "input_channels", "backbone", source)), dim=int(dim),
                       intermediate_dim=int(_required(backbone, "intermediate_dim", "backbone", source)),
                       num_layers=int(_required(backbone, "num_layers", "backbone", source)),
                       layer_scale=None if layer_scale is None else float(layer_scale),
                       n_fft=int(_required(head, "n_fft", "head", source)),
                       hop_length=int(_required(head, "hop_length", "head", source)), features=mel)


def read_config(folder: Path | str) -> VocosConfig:
    import yaml

    path = Path(folder) / "config.yaml"
    if not path.is_file():
        raise CheckpointError(f"{folder} has no config.yaml; give the folder of a Vocos checkpoint "
                              f"(config.yaml + pytorch_model.bin), e.g. charactr/vocos-mel-24khz")
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        raise CheckpointError(f"{path} is not readable YAML ({type(exc).__name__})") from None
    return config_from_yaml(data, path)


def read_weights(folder: Path | str) -> dict[str, torch.Tensor]:
    """The state dict of a Vocos folder: model.safetensors if present, else pytorch_model.bin."""
    folder = Path(folder)
    safetensors_path, pickle_path = folder / "model.safetensors", folder / "pytorch_model.bin"
    try:
        if safetensors_path.is_file():
            from safetensors.torch import load_file

            return load_file(str(safetensors_path))
        if pickle_path.is_file():
            # weights_only: a checkpoint cannot run code while it loads.
            state = torch.load(pickle_path, map_location="cpu", weights_only=True)
            if not isinstance(state, dict):
                raise CheckpointError(f"{pickle_path} does not hold a state dict")
            return state
    except CheckpointError:
        raise
    except Exception as exc:  # truncated file, a pickle torch refuses: all the same to the user
        raise CheckpointError(f"Vocos weights in {folder} are not readable ({type(exc).__name__})") from None
    raise CheckpointError(f"{folder} has no pytorch_model.bin or model.safetensors next to its config.yaml")


def load_vocos(folder: Path | str, device="cpu", dtype: torch.dtype = torch.float32) -> Vocos:
    """The Vocos vocoder in a published checkpoint folder, ready for `decode`."""
    folder = Path(folder)
    if not folder.is_dir():
        raise CheckpointError(f"Vocos folder {folder} does not exist")
    config = read_config(folder)
    state = {k: v for k, v in read_weights(folder).items() if not k.startswith(IGNORED_PREFIX)}
    # Built on the meta device: no random initialisation (it would draw from the global generator).
    with torch.device("meta"):
        model = Vocos(config)
    model.to_empty(device="cpu")
    expected = model.state_dict()
    window_key = "head.istft.window"
    if window_key not in state:
        state[window_key] = torch.hann_window(config.n_fft)  # deterministic; some exports drop buffers
    missing = [k for k in expected if k not in state]
    unexpected = [k for k in state if k not in expected]
    wrong = [f"{k} {tuple(state[k].shape)} vs {tuple(v.shape)}" for k, v in expected.items()
             if k in state and state[k].shape != v.shape]
    if missing or unexpected or wrong:
        raise CheckpointError(f"{folder} does not match its config.yaml ({_describe(config)}): "
                              f"missing {missing[:3]}, unexpected {unexpected[:3]}, wrong shapes {wrong[:3]}")
    model.load_state_dict(state)
    return model.to(device=device, dtype=dtype).eval()


def _describe(config: VocosConfig) -> str:
    shown = ("n_mels", "dim", "intermediate_dim", "num_layers", "n_fft", "hop_length")
    return ", ".join(f"{f.name} {getattr(config, f.name)}" for f in fields(config) if f.name in shown)
