"""HiFT: CosyVoice's vocoder (HiFi-GAN upsampling + an inverse STFT, driven by a neural source filter).

Exact to seed-vc 0.4.3 `modules/hifigan/generator.py` (`HiFTGenerator`, `SourceModuleHnNSF`, `SineGen`,
`ResBlock`, `Snake`; CosyVoice's non-causal HiFT, which Seed-VC's real-time variant runs with
CosyVoice-300M's hift.pt); GPL-3.0 code, read not copied. CosyVoice 2's HiFTGenerator (FunAudioLLM/CosyVoice
ace7c47, Apache-2.0) is this module with `source="SineGen2"` (hift_sine2.py: its phase integrated at the frame
rate, other draws), which `HiFTConfig.from_cosyvoice` picks by upstream's rule, and `inference(mel, generator,
cache_source)` as CosyVoice2Model calls it. CosyVoice 3's CausalHiFTGenerator is hift_causal.py.

Data flow of `HiFTGenerator.forward(mel, generator)`, as Seed-VC calls it (`vocoder_fn(mel)`):

    mel (B, in_channels, T)
      -> F0 predictor (hift_f0.F0Predictor)                      f0 (B, T) Hz
      -> nearest upsampling by prod(upsample_rates) * hop_len    f0 per output sample (B, T')
      -> SourceModule: sines at f0 and its nb_harmonics overtones (random start phases except the
         fundamental's), zeroed where unvoiced (f0 <= nsf_voiced_threshold), plus Gaussian noise
         (std nsf_sigma voiced, nsf_alpha / 3 unvoiced); Linear over the harmonics, tanh  source (B, 1, T')
      -> decode(mel, source):
           STFT of the source (n_fft, hop_len, periodic Hann) -> real and imaginary parts (B, n_fft + 2, F)
           conv_pre; per upsampling stage: leaky ReLU, transposed conv (reflect-pad 1 on the left after
           the last), + ResBlock(strided conv of the source spectrum), mean of the stage's ResBlocks
           leaky ReLU (slope 0.01), conv_post -> exp(first n_fft/2 + 1 channels) = magnitude (at most 100),
           sin(the rest) = phase -> inverse STFT -> clamp to +-audio_limit                  wave (B, T')

Random draws: upstream's SineGen draws from the global generators: the start phases `Uniform(-pi, pi)`
(a `torch.rand` of shape (B, nb_harmonics + 1, 1) on the CPU, whatever the device), then the sine
noise `randn_like` (B, nb_harmonics + 1, T') on the signal's device, then the source module's unused
noise branch `randn_like` (B, T', 1). Ours makes the same draws, same shapes and order, from explicit
generators (`generator` on the signal's device, `cpu_generator` for the phases off the CPU), so a
seeded generator gives upstream's numbers under `torch.manual_seed` and leaves the same state after.

Checkpoints: upstream's parameter names. Every convolution except `source_downs.*` is weight-normed
there, as `weight_g` / `weight_v` (legacy `torch.nn.utils.weight_norm`: Seed-VC, CosyVoice-300M) or
`parametrizations.weight.original0` / `original1` (`torch.nn.utils.parametrizations.weight_norm`:
CosyVoice 2); `load_hift` folds either once with `torch._weight_norm(v, g, 0)`, the arithmetic of both
hooks, so the plain weights here are bitwise the ones upstream convolves with.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn

from mizuoto.core.errors import CheckpointError, InputError
from mizuoto.nn import ops
from mizuoto.nn.hift_f0 import F0Predictor, F0PredictorConfig
from mizuoto.nn.hift_sine2 import SineGen2Source

_INT_FIELDS = ("in_channels", "base_channels", "nb_harmonics", "sampling_rate", "n_fft", "hop_len")
_FLOAT_FIELDS = ("nsf_alpha", "nsf_sigma", "nsf_voiced_threshold", "lrelu_slope", "audio_limit")
_LIST_FIELDS = ("upsample_rates", "upsample_kernel_sizes", "resblock_kernel_sizes", "source_resblock_kernel_sizes")
_NESTED_FIELDS = ("resblock_dilation_sizes", "source_resblock_dilation_sizes")
SOURCES = ("SineGen", "SineGen2")


@dataclass(frozen=True)
class HiFTConfig:
    """The `hift` and `f0_predictor` sections of seed-vc's configs/hifigan.yml (CosyVoice's yaml has the same
    fields), upstream's defaults. `istft_params` is held as `n_fft` and `hop_len`."""

    in_channels: int = 80
    base_channels: int = 512
    nb_harmonics: int = 8
    sampling_rate: int = 22050
    nsf_alpha: float = 0.1  # sine amplitude (unvoiced noise std is a third of it)
    nsf_sigma: float = 0.003  # noise std where voiced
    nsf_voiced_threshold: float = 10  # Hz; f0 above it is voiced
    upsample_rates: tuple[int, ...] = (8, 8)
    upsample_kernel_sizes: tuple[int, ...] = (16, 16)
    n_fft: int = 16
    hop_len: int = 4
    resblock_kernel_sizes: tuple[int, ...] = (3, 7, 11)
    resblock_dilation_sizes: tuple[tuple[int, ...], ...] = ((1, 3, 5), (1, 3, 5), (1, 3, 5))
    # One source ResBlock per upsampling stage; upstream zips, so entries past the stages are ignored.
    source_resblock_kernel_sizes: tuple[int, ...] = (7, 11)
    source_resblock_dilation_sizes: tuple[tuple[int, ...], ...] = ((1, 3, 5), (1, 3, 5))
    lrelu_slope: float = 0.1
    audio_limit: float = 0.99
    f0_predictor: F0PredictorConfig = field(default_factory=F0PredictorConfig)
    # The harmonic source: "SineGen" (Seed-VC; CosyVoice at 22050 Hz) or "SineGen2" (CosyVoice 2 and 3, whose
    # upstream picks it when sampling_rate != 22050: HiFTConfig.from_cosyvoice applies that rule).
    source: str = "SineGen"

    def __post_init__(self):
        for name in _LIST_FIELDS:
            object.__setattr__(self, name, tuple(getattr(self, name)))
        for name in _NESTED_FIELDS:
            object.__setattr__(self, name, tuple(tuple(d) for d in getattr(self, name)))
        self._check()

    def _check(self) -> None:
        def need(ok: bool, message: str) -> None:
            if not ok:
                raise CheckpointError(f"hift config: {message}")

        def positive_int(value) -> bool:
            return isinstance(value, int) and not isinstance(value, bool) and value >= 1

        for name in _INT_FIELDS:
            need(positive_int(getattr(self, name)), f"{name} must be a positive integer, got {getattr(self, name)!r}")
        for name in _FLOAT_FIELDS:
            value = getattr(self, name)
            need(isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value),
                 f"{name} must be a finite number, got {value!r}")
        for name in (*_LIST_FIELDS, *_NESTED_FIELDS):
            values = getattr(self, name)
            flat = [v for d in values for v in d] if name in _NESTED_FIELDS else list(values)
            need(len(values) >= 1 and all(positive_int(v) for v in flat),
                 f"{name} must be a non-empty list of positive integers, got {values!r}")
        stages = len(self.upsample_rates)
        need(len(self.upsample_kernel_sizes) == stages,
             f"upsample_kernel_sizes has {len(self.upsample_kernel_sizes)} entries for {stages} upsample_rates")
        need(len(self.resblock_dilation_sizes) == len(self.resblock_kernel_sizes),
             "resblock_dilation_sizes needs one list per resblock_kernel_sizes entry")
        need(min(len(self.source_resblock_kernel_sizes), len(self.source_resblock_dilation_sizes)) >= stages,
             f"source_resblock_kernel_sizes and source_resblock_dilation_sizes need an entry per upsampling stage "
             f"({stages})")
        need(self.n_fft % 2 == 0, f"istft_params.n_fft must be even (magnitude and phase halves), got {self.n_fft}")
        need(self.hop_len <= self.n_fft, f"istft_params.hop_len ({self.hop_len}) exceeds n_fft ({self.n_fft})")
        need(self.base_channels >> stages >= 1,
             f"base_channels {self.base_channels} halves below one channel over {stages} stages")
        need(self.source in SOURCES, f"source must be one of {', '.join(SOURCES)}, got {self.source!r}")
        need(self.f0_predictor.in_channels == self.in_channels,
             f"f0_predictor.in_channels ({self.f0_predictor.in_channels}) differs from in_channels "
             f"({self.in_channels}): both read the same mel")

    @property
    def istft_params(self) -> dict[str, int]:
        return {"n_fft": self.n_fft, "hop_len": self.hop_len}

    @property
    def samples_per_frame(self) -> int:
        """Output samples per mel frame: prod(upsample_rates) * hop_len (256 for Seed-VC's, 480 for CosyVoice 2's)."""
        return math.prod(self.upsample_rates) * self.hop_len

    @classmethod
    def from_dict(cls, data) -> HiFTConfig:
        """From a hifigan.yml mapping: its `hift` section (upstream's constructor arguments) and, when present,
        its `f0_predictor` section; other top-level entries (pretrained_model_path) are ignored. Missing fields
        take upstream's defaults; unknown ones are refused in one line, as upstream's constructor would. The
        F0 predictor's arguments may also sit inside `hift` as `f0_predictor` (CosyVoice's yaml nests them)."""
        if not isinstance(data, Mapping) or not isinstance(data.get("hift"), Mapping):
            raise CheckpointError("a HiFT config needs a 'hift' mapping (configs/hifigan.yml's layout)")
        values = dict(data["hift"])
        nested = values.pop("f0_predictor", None)
        if nested is not None and data.get("f0_predictor") is not None:
            raise CheckpointError("the f0_predictor config is given twice: inside 'hift' and beside it")
        istft = values.pop("istft_params", {})
        if not isinstance(istft, Mapping) or set(istft) - {"n_fft", "hop_len"}:
            raise CheckpointError(f"hift.istft_params must be a mapping of n_fft and hop_len, got {istft!r}")
        known = {f for f in cls.__dataclass_fields__ if f not in ("n_fft", "hop_len", "f0_predictor")}
        unknown = sorted(set(values) - known)
        if unknown:
            raise CheckpointError(f"hift config has an unknown field {unknown[0]!r}")
        section = nested if nested is not None else data.get("f0_predictor")
        if section is not None and not isinstance(section, Mapping):
            raise CheckpointError(f"the f0_predictor config must be a mapping, got {type(section).__name__}")
        predictor = F0PredictorConfig.from_dict(dict(section or {}))
        return cls(**values, **dict(istft), f0_predictor=predictor)

    @classmethod
    def from_cosyvoice(cls, hift_section) -> HiFTConfig:
        """From the arguments of the `hift:` entry of a CosyVoice yaml (cosyvoice2.yaml: HiFTGenerator, its
        `f0_predictor` arguments nested, `sampling_rate` resolved), with upstream's choice of source: SineGen at
        22050 Hz, SineGen2 at any other rate (CosyVoice 2 and 3: 24000)."""
        if not isinstance(hift_section, Mapping):
            raise CheckpointError(f"a CosyVoice hift config must be a mapping, got {type(hift_section).__name__}")
        if "source" in hift_section:
            raise CheckpointError("a CosyVoice hift config has no 'source': upstream picks it from sampling_rate")
        rate = hift_section.get("sampling_rate", cls.__dataclass_fields__["sampling_rate"].default)
        source = "SineGen" if rate == 22050 else "SineGen2"
        return cls.from_dict({"hift": {**hift_section, "source": source}})


def periodic_hann(n: int) -> torch.Tensor:
    """scipy.signal.get_window("hann", n, fftbins=True) as float32, which upstream's STFT window is.

    Computed as scipy does, in float64: a linspace of n + 1 points from -pi to pi (numpy's: i * step + start),
    0.5 + 0.5 * cos of each, the last point dropped; then rounded once to float32."""
    if n <= 1:
        return torch.ones(n, dtype=torch.float32)
    step = (math.pi - -math.pi) / n
    return torch.tensor([0.5 + 0.5 * math.cos(i * step + -math.pi) for i in range(n)], dtype=torch.float64).float()


class Snake(nn.Module):
    """x + sin(alpha x)^2 / (alpha + 1e-9), one alpha per channel (linear scale, as HiFT's ResBlocks use it)."""

    def __init__(self, channels: int):
        super().__init__()
        self.alpha = nn.Parameter(torch.ones(channels))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        alpha = self.alpha[None, :, None]
        return x + (1.0 / (alpha + 1e-9)) * torch.sin(x * alpha).pow(2)


class ResBlock(nn.Module):
    """Per dilation: Snake, dilated conv, Snake, conv, added to the input (HiFi-GAN's ResBlock1 with Snake)."""

    def __init__(self, channels: int, kernel_size: int, dilations: tuple[int, ...]):
        super().__init__()

        def conv(dilation: int) -> nn.Conv1d:  # "same" padding
            return nn.Conv1d(channels, channels, kernel_size, dilation=dilation,
                             padding=(kernel_size * dilation - dilation) // 2)

        self.convs1 = nn.ModuleList(conv(d) for d in dilations)
        self.convs2 = nn.ModuleList(conv(1) for _ in dilations)
        self.activations1 = nn.ModuleList(Snake(channels) for _ in dilations)
        self.activations2 = nn.ModuleList(Snake(channels) for _ in dilations)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for act1, conv1, act2, conv2 in zip(self.activations1, self.convs1, self.activations2, self.convs2,
                                            strict=True):
            x = conv2(act2(conv1(act1(x)))) + x
        return x


def _check_generator(generator, device: torch.device, role: str) -> None:
    if not isinstance(generator, torch.Generator):
        raise InputError(f"HiFT draws its {role} at random: pass a torch.Generator (got {type(generator).__name__})")
    if generator.device.type != device.type:
        raise InputError(f"HiFT draws its {role} on {device.type}, but the generator given is on "
                         f"{generator.device.type}")


class SourceModule(nn.Module):
    """Upstream's SourceModuleHnNSF with its SineGen: per-sample f0 -> the harmonic excitation (B, 1, T')."""

    def __init__(self, config: HiFTConfig):
        super().__init__()
        self.harmonics = config.nb_harmonics + 1  # the fundamental and its overtones
        self.sampling_rate = config.sampling_rate
        self.sine_amp = config.nsf_alpha
        self.noise_std = config.nsf_sigma
        self.voiced_threshold = config.nsf_voiced_threshold
        # merges the harmonics into one excitation; per sample over a transposed view, hence ops.Linear
        self.l_linear = ops.Linear(self.harmonics, 1)

    @torch.no_grad()
    def sines(self, f0: torch.Tensor, generator: torch.Generator, cpu_generator: torch.Generator | None = None):
        """f0 (B, 1, T') Hz -> (sines with noise (B, harmonics, T'), voiced flags (B, 1, T')), upstream's SineGen.

        Built in float32 (upstream's zeros-then-fill matrix is float32 whatever f0 is), each harmonic's frequency
        computed in f0's dtype before it is stored there (under float16 autocast the predicted f0 is float16, and
        upstream's `f0 * (i + 1) / sr` stays float16)."""
        batch = f0.shape[0]
        multiples = torch.arange(1, self.harmonics + 1, device=f0.device).to(f0.dtype)[None, :, None]
        frequencies = (f0 * multiples / self.sampling_rate).to(torch.float32)  # cycles per sample, each harmonic
        # the phase as a fraction of a cycle, wrapped before it is scaled (float32 keeps its precision)
        theta = 2 * math.pi * (torch.cumsum(frequencies, dim=-1) % 1)
        # Start phases: Uniform(-pi, pi) drawn on the CPU as torch.distributions does (low + rand * (high - low),
        # float32 bounds); the fundamental starts at 0.
        low, high = torch.tensor(-math.pi, dtype=torch.float32), torch.tensor(math.pi, dtype=torch.float32)
        draw = torch.rand((batch, self.harmonics, 1), generator=cpu_generator or generator, dtype=torch.float32)
        start = low + draw * (high - low)
        start[:, 0, :] = 0
        sines = self.sine_amp * torch.sin(theta + start.to(f0.device))
        voiced = (f0 > self.voiced_threshold).to(torch.float32)
        # noise std: noise_std where voiced, a third of the sine amplitude where not
        noise_amp = voiced * self.noise_std + (1 - voiced) * self.sine_amp / 3
        noise = noise_amp * torch.randn(sines.shape, generator=generator, device=sines.device, dtype=torch.float32)
        return sines * voiced + noise, voiced

    def forward(self, f0: torch.Tensor, generator: torch.Generator,
                cpu_generator: torch.Generator | None = None) -> torch.Tensor:
        """f0 per output sample (B, T') Hz -> the source signal (B, 1, T')."""
        _check_generator(generator, f0.device, "source noise")
        if f0.device.type != "cpu":
            if cpu_generator is None:
                raise InputError("HiFT draws its start phases on the CPU (as upstream's Uniform does): pass "
                                 "cpu_generator when the model runs on another device")
            _check_generator(cpu_generator, torch.device("cpu"), "start phases")
        elif cpu_generator is not None and cpu_generator is not generator:
            raise InputError("on the CPU HiFT draws everything from `generator`: leave cpu_generator out")
        sines, voiced = self.sines(f0[:, None, :], generator, cpu_generator)
        merged = torch.tanh(self.l_linear(sines.transpose(1, 2).to(self.l_linear.weight.dtype)))  # (B, T', 1)
        # Upstream also draws a noise branch of shape (B, T', 1) that HiFT never uses: drawn and dropped,
        # so the generator advances as upstream's global one does.
        torch.randn(voiced.transpose(1, 2).shape, generator=generator, device=voiced.device, dtype=torch.float32)
        return merged.transpose(1, 2)


class HiFTGenerator(nn.Module):
    """Upstream's HiFTGenerator with its F0 predictor, plain convolution weights (load_hift folds weight norm)."""

    def __init__(self, config: HiFTConfig = HiFTConfig()):
        super().__init__()
        self.config = config
        base, stages, n_fft = config.base_channels, len(config.upsample_rates), config.n_fft
        self.num_kernels = len(config.resblock_kernel_sizes)
        self.m_source = SourceModule(config) if config.source == "SineGen" else SineGen2Source(config)
        self.conv_pre = nn.Conv1d(config.in_channels, base, 7, 1, padding=3)
        self.ups = nn.ModuleList(
            nn.ConvTranspose1d(base >> i, base >> (i + 1), k, u, padding=(k - u) // 2)
            for i, (u, k) in enumerate(zip(config.upsample_rates, config.upsample_kernel_sizes, strict=True)))
        # The source spectrum (n_fft + 2 channels, one frame per hop) joins stage i after a conv that
        # downsamples it to that stage's rate: by the product of the later stages' rates.
        self.source_downs = nn.ModuleList()
        self.source_resblocks = nn.ModuleList()
        for i in range(stages):
            width, stride = base >> (i + 1), math.prod(config.upsample_rates[i + 1:])
            if stride == 1:
                self.source_downs.append(nn.Conv1d(n_fft + 2, width, 1, 1))
            else:
                self.source_downs.append(nn.Conv1d(n_fft + 2, width, stride * 2, stride, padding=stride // 2))
            self.source_resblocks.append(ResBlock(width, config.source_resblock_kernel_sizes[i],
                                                  config.source_resblock_dilation_sizes[i]))
        # flat, as upstream stores them: stage i's blocks at i * num_kernels + j
        self.resblocks = nn.ModuleList(
            ResBlock(base >> (i + 1), k, d) for i in range(stages)
            for k, d in zip(config.resblock_kernel_sizes, config.resblock_dilation_sizes, strict=True))
        self.conv_post = nn.Conv1d(base >> stages, n_fft + 2, 7, 1, padding=3)
        self.register_buffer("stft_window", periodic_hann(n_fft), persistent=False)  # not in upstream's state
        self.f0_predictor = F0Predictor(config.f0_predictor)

    # -- the three stages ----------------------------------------------------------------------------

    def predict_f0(self, mel: torch.Tensor) -> torch.Tensor:
        """mel (B, in_channels, T) -> f0 (B, T) Hz."""
        self._check_mel(mel)
        return self.f0_predictor(mel)

    def source(self, f0: torch.Tensor, generator: torch.Generator,
               cpu_generator: torch.Generator | None = None) -> torch.Tensor:
        """f0 per frame (B, T) Hz -> the excitation (B, 1, T * samples_per_frame): nearest upsampling (the
        same interpolation call as upstream's nn.Upsample) and the source module. SineGen2 draws everything from
        `generator`, on every device: `cpu_generator` is SineGen's alone."""
        if f0.dim() != 2:
            raise InputError(f"HiFT takes f0 of shape (batch, frames), got {tuple(f0.shape)}")
        per_sample = F.interpolate(f0[:, None], scale_factor=float(self.config.samples_per_frame), mode="nearest")
        if self.config.source == "SineGen2":
            if cpu_generator is not None:
                raise InputError("HiFT's SineGen2 source draws everything from `generator`: leave cpu_generator out")
            return self.m_source(per_sample.transpose(1, 2), generator)
        return self.m_source(per_sample[:, 0], generator, cpu_generator)

    def decode(self, mel: torch.Tensor, source: torch.Tensor) -> torch.Tensor:
        """mel (B, in_channels, T) and its excitation (B, 1, T * samples_per_frame) -> wave (B, same samples)."""
        self._check_mel(mel)
        if source.dim() != 3 or source.shape[1] != 1 or source.shape[0] != mel.shape[0]:
            raise InputError(f"HiFT's source must be (batch {mel.shape[0]}, 1, samples), got {tuple(source.shape)}")
        config = self.config
        window = self.stft_window
        spectrum = torch.view_as_real(torch.stft(source[:, 0], config.n_fft, config.hop_len, config.n_fft,
                                                 window=window, return_complex=True))
        source_spec = torch.cat([spectrum[..., 0], spectrum[..., 1]], dim=1)  # (B, n_fft + 2, frames)

        x = self.conv_pre(mel)
        for i, up in enumerate(self.ups):
            x = up(F.leaky_relu(x, config.lrelu_slope))
            if i == len(self.ups) - 1:
                x = F.pad(x, (1, 0), mode="reflect")  # one more step: as many as the source spectrum's frames
            x = x + self.source_resblocks[i](self.source_downs[i](source_spec))
            blocks = self.resblocks[i * self.num_kernels:(i + 1) * self.num_kernels]
            total = blocks[0](x)
            for block in blocks[1:]:
                total += block(x)
            x = total / self.num_kernels
        x = self.conv_post(F.leaky_relu(x))  # torch's default slope (0.01) here, as upstream
        half = config.n_fft // 2 + 1
        magnitude = torch.exp(x[:, :half]).clamp(max=1e2)
        phase = torch.sin(x[:, half:])  # upstream's: a sine of the phase, not the phase itself
        with warnings.catch_warnings():  # under float16 autocast the spectrum is complex32, as upstream's is
            warnings.filterwarnings("ignore", message="ComplexHalf support is experimental")
            wave = torch.istft(torch.complex(magnitude * torch.cos(phase), magnitude * torch.sin(phase)),
                               config.n_fft, config.hop_len, config.n_fft, window=window)
        return wave.clamp(-config.audio_limit, config.audio_limit)

    def forward(self, mel: torch.Tensor, generator: torch.Generator, f0: torch.Tensor | None = None,
                cpu_generator: torch.Generator | None = None) -> torch.Tensor:
        """mel (B, in_channels, T) -> wave (B, T * samples_per_frame); upstream's forward / inference. `f0`
        (B, T) Hz replaces the predicted one, as upstream's argument does."""
        if f0 is None:
            f0 = self.predict_f0(mel)
        elif f0.shape != (mel.shape[0], mel.shape[-1]):
            raise InputError(f"HiFT's f0 must be (batch, frames) = {(mel.shape[0], mel.shape[-1])} for this mel, "
                             f"got {tuple(f0.shape)}")
        return self.decode(mel, self.source(f0, generator, cpu_generator))

    def inference(self, mel: torch.Tensor, generator: torch.Generator, cache_source: torch.Tensor | None = None,
                  cpu_generator: torch.Generator | None = None, decode=None) -> tuple[torch.Tensor, torch.Tensor]:
        """Upstream's `inference(speech_feat, cache_source)`, as CosyVoice2Model.token2wav calls it: mel -> (wave,
        source). The source's first samples are replaced by `cache_source` (B, 1, n) when given (the previous
        chunk's source, so a stream keeps its phase); the draws are made first, as upstream makes them. `decode`:
        this model's `compile_decode`, else its eager decode."""
        source = self.source(self.predict_f0(mel), generator, cpu_generator)
        if cache_source is not None and cache_source.shape[-1] != 0:
            if cache_source.dim() != 3 or cache_source.shape[:2] != source.shape[:2] \
                    or cache_source.shape[2] > source.shape[2]:
                raise InputError(f"HiFT's cache_source must be (batch {source.shape[0]}, 1, at most "
                                 f"{source.shape[2]} samples), got {tuple(cache_source.shape)}")
            source[:, :, :cache_source.shape[2]] = cache_source
        return (decode or self.decode)(mel, source), source

    def _check_mel(self, mel: torch.Tensor) -> None:
        if not isinstance(mel, torch.Tensor) or mel.dim() != 3 or mel.shape[1] != self.config.in_channels \
                or mel.shape[-1] < 1:
            got = tuple(mel.shape) if isinstance(mel, torch.Tensor) else type(mel).__name__
            raise InputError(f"HiFT takes a mel of shape (batch, {self.config.in_channels}, frames >= 1), got {got}")


# ---------------------------------------------------------------------------------------------------
# Checkpoints

LEGACY = ("weight_g", "weight_v")  # torch.nn.utils.weight_norm
PARAMETRIZED = ("parametrizations.weight.original0", "parametrizations.weight.original1")  # parametrizations


class Decode(nn.Module):
    """A HiFT's `decode` (mel + source -> wave) as a module of its own, so it can be compiled alone."""

    def __init__(self, hift: nn.Module):
        super().__init__()
        self.hift = hift

    def forward(self, mel: torch.Tensor, source: torch.Tensor, *finalize: bool) -> torch.Tensor:
        return self.hift.decode(mel, source, *finalize)


def compile_decode(hift: nn.Module, option: bool, name: str, device=None):
    """compute.compile for a HiFT (this one or hift_causal's): its decode alone, the convolution stack and the
    inverse STFT that take nearly all its time; None where the option is off (runtime.compile.compile_module).
    The F0 predictor and the source stay eager: the f0 sets the source's phase sample after sample, so a compiled
    predictor's last-bit differences would grow along the utterance (the seed measured 1e-2 in the audio), where
    the decode's stay at the rounding of its own outputs."""
    from mizuoto.runtime.compile import compile_module

    return compile_module(Decode(hift), option, name, device)


def weight_normed(model: HiFTGenerator) -> list[str]:
    """The modules whose weight upstream keeps weight-normed: every convolution but the source downsamplers."""
    return [name for name, module in model.named_modules()
            if isinstance(module, (nn.Conv1d, nn.ConvTranspose1d)) and not name.startswith("source_downs.")]


def _model_class(config: HiFTConfig) -> type[nn.Module]:
    """HiFTGenerator, or hift_causal.CausalHiFTGenerator for its config (imported here: it builds on this module)."""
    if hasattr(config, "conv_pre_look_right"):
        from mizuoto.nn.hift_causal import CausalHiFTGenerator

        return CausalHiFTGenerator
    return HiFTGenerator


def checkpoint_layout(config: HiFTConfig, flavour: str = "legacy") -> dict[str, tuple[int, ...]]:
    """Every tensor of an upstream HiFT state dict for `config` -> its shape, weight norm stored as
    `weight_g` / `weight_v` ("legacy") or `parametrizations.weight.original0` / `original1` ("parametrized")."""
    g_name, v_name = {"legacy": LEGACY, "parametrized": PARAMETRIZED}[flavour]
    with torch.device("meta"):
        model = _model_class(config)(config)
    normed = set(weight_normed(model))
    layout = {}
    for key, tensor in model.state_dict().items():
        owner = key.rpartition(".")[0]
        if owner in normed and key.endswith(".weight"):
            layout[f"{owner}.{g_name}"] = (tensor.shape[0],) + (1,) * (tensor.dim() - 1)
            layout[f"{owner}.{v_name}"] = tuple(tensor.shape)
        else:
            layout[key] = tuple(tensor.shape)
    return layout


def load_hift(state: Mapping[str, torch.Tensor], config: HiFTConfig = HiFTConfig(), device="cpu",
              dtype: torch.dtype = torch.float32, source: str = "hift.pt") -> HiFTGenerator:
    """The HiFT of `config` with the tensors of an upstream state dict (hift.pt, f0_predictor included), on
    `device` in `dtype`, in eval mode without gradients.

    A weight-normed conv may come in either flavour (or as a plain `weight`, already folded); it is folded
    once on `device` in float32 with torch._weight_norm(v, g, 0), as upstream's hook computes it before
    every call, then cast to `dtype`. Missing, unexpected or misshapen tensors are one CheckpointError
    naming the first; `source` names the file in it."""
    if hasattr(config, "conv_pre_look_right"):
        raise CheckpointError("a causal HiFT config (CosyVoice 3): load it with hift_causal.load_causal_hift")
    with torch.device("meta"):
        model = HiFTGenerator(config)
    return load_weights(model, state, device, dtype, source)


def load_weights(model: nn.Module, state: Mapping[str, torch.Tensor], device, dtype: torch.dtype, source: str,
                 float64: str | None = None) -> nn.Module:
    """load_hift's loading, for any HiFT built on the meta device: `model` given the tensors of `state`, folded,
    on `device` in `dtype` (the modules under the prefix `float64` in float64 instead, their weight norm folded in
    float64, as upstream computes them once it moves them there), in eval mode without gradients."""
    if not isinstance(state, Mapping):
        raise CheckpointError(f"{source} does not hold a state dict (got {type(state).__name__})")
    config = model.config
    normed = set(weight_normed(model))
    tensors: dict[str, torch.Tensor] = {}
    used: set[str] = set()
    missing: list[str] = []

    def take(key: str, shape: tuple[int, ...], wide: bool = False) -> torch.Tensor:
        value = state[key]
        if not isinstance(value, torch.Tensor) or not value.is_floating_point() or tuple(value.shape) != shape:
            got = f"{value.dtype} of shape {tuple(value.shape)}" if isinstance(value, torch.Tensor) else \
                type(value).__name__
            raise CheckpointError(f"{source}: {key} should be a float tensor of shape {shape}, got {got}")
        used.add(key)
        value = value.to(device=device, dtype=torch.float32)  # upstream's float32 parameters hold it first
        return value.double() if wide else value

    for key, meta in model.state_dict().items():
        owner = key.rpartition(".")[0]
        shape = tuple(meta.shape)
        wide = float64 is not None and key.startswith(float64)
        target = torch.float64 if wide else dtype
        if owner in normed and key.endswith(".weight") and key not in state:
            pair = next(((f"{owner}.{g}", f"{owner}.{v}") for g, v in (LEGACY, PARAMETRIZED)
                         if f"{owner}.{g}" in state or f"{owner}.{v}" in state), None)
            if pair is None:
                missing.append(f"{owner}.weight_g")
                continue
            if pair[0] not in state or pair[1] not in state:
                missing.append(pair[0] if pair[0] not in state else pair[1])
                continue
            g = take(pair[0], (shape[0],) + (1,) * (len(shape) - 1), wide)
            tensors[key] = torch._weight_norm(take(pair[1], shape, wide), g, 0).to(target)
        elif key in state:
            tensors[key] = take(key, shape, wide).to(target)
        else:
            missing.append(key)
    unexpected = sorted(set(state) - used)
    if missing or unexpected:
        detail = f"missing {missing[0]}" if missing else f"unexpected {unexpected[0]}"
        raise CheckpointError(f"{source} does not fit this HiFT config ({detail}; {len(missing)} missing, "
                              f"{len(unexpected)} unexpected tensors)")
    model.load_state_dict(tensors, assign=True)
    model.stft_window = periodic_hann(config.n_fft).to(device)  # the buffer was built on the meta device
    return model.eval().requires_grad_(False)
