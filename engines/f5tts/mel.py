"""The log-mel spectrogram F5-TTS and Vocos compute, bit for bit, without torchaudio.

F5-TTS (`mel_spec_type="vocos"`) turns its reference audio into features with torchaudio's
`MelSpectrogram(sample_rate 24000, n_fft 1024, win_length 1024, hop_length 256, n_mels 100, power 1,
center, norm None, mel_scale "htk")` followed by `log(clamp(min=1e-5))`. Vocos's own feature extractor
(`MelSpectrogramFeatures`, used for copy-synthesis and training) is the same transform with a floor of
1e-7 instead, and optionally "same" padding (reflect-pad by (win - hop) / 2, then no centring).

Each step below performs the operations torchaudio 2.11 performs, in the same order and dtype, so on
the same device, thread count and CPU kernel level the result equals upstream's exactly:

- the filter bank is built on the CPU in float32 (as torchaudio builds it when the transform is made)
  and only then moved, so every device sees the same matrix;
- the periodic Hann window likewise;
- `torch.stft(center, reflect, onesided, complex)` then `abs()` (power 1 takes torchaudio's shortcut
  that skips `pow`);
- the projection is `(spec^T @ fb)^T`, upstream's operand order: `fb^T @ spec` happens to give the
  same bits at one thread on AVX2, but a transposed product may take another GEMM path (blocking,
  threads) elsewhere, so the order is kept rather than relied on.

Neither upstream module keeps anything this module needs in a checkpoint: F5's `MelSpec` registers only
a non-persistent `dummy` buffer (absent from its state dict), and the `feature_extractor.mel_spec.
spectrogram.window` / `feature_extractor.mel_spec.mel_scale.fb` tensors in Vocos's `pytorch_model.bin`
are the same window and bank rebuilt here, so loaders may ignore those keys.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import torch
import torch.nn.functional as F
from torch import nn

from mizuoto.core.errors import InputError

MEL_SCALES = ("htk", "slaney")
PADDINGS = ("center", "same")


@dataclass(frozen=True)
class MelSettings:
    """What fixes a log-mel spectrogram; the defaults are F5-TTS's (and vocos-mel-24khz's) transform."""

    sample_rate: int = 24000
    n_fft: int = 1024
    win_length: int = 1024
    hop_length: int = 256
    n_mels: int = 100
    f_min: float = 0.0
    f_max: float | None = None  # None: the Nyquist frequency, sample_rate // 2 (integer division, as upstream)
    mel_scale: str = "htk"
    norm: str | None = None  # None or "slaney" (area normalisation of each triangle)
    padding: str = "center"  # "same": Vocos's alternative, reflect-pad by (win - hop) // 2 without centring
    log_floor: float = 1e-5  # values are clamped to at least this before the natural log

    def __post_init__(self):
        if self.mel_scale not in MEL_SCALES:
            raise InputError(f"mel_scale must be one of {', '.join(MEL_SCALES)}, not {self.mel_scale!r}")
        if self.norm not in (None, "slaney"):
            raise InputError(f"mel norm must be None or 'slaney', not {self.norm!r}")
        if self.padding not in PADDINGS:
            raise InputError(f"mel padding must be one of {', '.join(PADDINGS)}, not {self.padding!r}")
        if self.win_length > self.n_fft:
            raise InputError(f"mel win_length {self.win_length} is longer than n_fft {self.n_fft}")

    @property
    def n_freqs(self) -> int:
        return self.n_fft // 2 + 1

    @property
    def top_frequency(self) -> float:
        return float(self.sample_rate // 2) if self.f_max is None else float(self.f_max)

    def frames(self, samples: int) -> int:
        """How many mel frames `samples` samples give."""
        if self.padding == "center":
            return samples // self.hop_length + 1
        padded = samples + 2 * ((self.win_length - self.hop_length) // 2)
        return (padded - self.n_fft) // self.hop_length + 1


F5_MEL = MelSettings()  # f5_tts.model.modules.MelSpec(mel_spec_type="vocos")
VOCOS_MEL = MelSettings(log_floor=1e-7)  # vocos.feature_extractors.MelSpectrogramFeatures (vocos's safe_log)


# ---------------------------------------------------------------------------------------------------
# The mel filter bank (torchaudio.functional.melscale_fbanks)


def hz_to_mel(frequency: float, mel_scale: str = "htk") -> float:
    """One frequency in Hz on the mel scale, in Python floats (double precision), as upstream does."""
    if mel_scale == "htk":
        return 2595.0 * math.log10(1.0 + frequency / 700.0)
    # Slaney: linear below 1 kHz (200/3 Hz per mel), logarithmic above with a step of ln(6.4) / 27.
    linear_step = 200.0 / 3
    if frequency < 1000.0:
        return frequency / linear_step
    return 1000.0 / linear_step + math.log(frequency / 1000.0) / (math.log(6.4) / 27.0)


def mel_to_hz(mels: torch.Tensor, mel_scale: str = "htk") -> torch.Tensor:
    """Mel values back to Hz, elementwise in the tensor's dtype (float32 for the filter bank)."""
    if mel_scale == "htk":
        return 700.0 * (10.0 ** (mels / 2595.0) - 1.0)
    linear_step = 200.0 / 3
    knee_mel = 1000.0 / linear_step
    log_step = math.log(6.4) / 27.0
    linear = 0.0 + linear_step * mels  # "0.0 +" keeps upstream's f_min term: it turns -0.0 into +0.0
    logarithmic = 1000.0 * torch.exp(log_step * (mels - knee_mel))
    return torch.where(mels >= knee_mel, logarithmic, linear)


def mel_filter_bank(n_freqs: int, f_min: float, f_max: float, n_mels: int, sample_rate: int,
                    norm: str | None = None, mel_scale: str = "htk") -> torch.Tensor:
    """The (n_freqs, n_mels) float32 matrix of triangular mel filters, built on the CPU.

    Column j rises linearly from mel point j to j + 1 and falls back to zero at j + 2, the n_mels + 2
    points being equally spaced in mels between f_min and f_max; rows are the STFT bins 0 .. sr / 2.
    With norm "slaney" each triangle is divided by half its width in Hz (equal area)."""
    if mel_scale not in MEL_SCALES:
        raise InputError(f"mel_scale must be one of {', '.join(MEL_SCALES)}, not {mel_scale!r}")
    bin_hz = torch.linspace(0, sample_rate // 2, n_freqs, dtype=torch.float32)
    mel_points = torch.linspace(hz_to_mel(f_min, mel_scale), hz_to_mel(f_max, mel_scale), n_mels + 2,
                                dtype=torch.float32)
    point_hz = mel_to_hz(mel_points, mel_scale)

    widths = point_hz[1:] - point_hz[:-1]  # (n_mels + 1,) Hz between neighbouring points
    offsets = point_hz.unsqueeze(0) - bin_hz.unsqueeze(1)  # (n_freqs, n_mels + 2): point minus bin
    rising = (-1.0 * offsets[:, :-2]) / widths[:-1]  # 0 at the left point, 1 at the centre
    falling = offsets[:, 2:] / widths[1:]  # 1 at the centre, 0 at the right point
    bank = torch.maximum(torch.zeros(1), torch.minimum(rising, falling))
    if norm == "slaney":
        bank = bank * (2.0 / (point_hz[2:n_mels + 2] - point_hz[:n_mels])).unsqueeze(0)
    return bank


@lru_cache(maxsize=None)
def _filter_bank(settings: MelSettings, device: torch.device, dtype: torch.dtype) -> torch.Tensor:
    bank = mel_filter_bank(settings.n_freqs, settings.f_min, settings.top_frequency, settings.n_mels,
                           settings.sample_rate, settings.norm, settings.mel_scale)
    return bank.to(device=device, dtype=dtype)


@lru_cache(maxsize=None)
def _hann_window(length: int, device: torch.device, dtype: torch.dtype) -> torch.Tensor:
    # Periodic Hann window made on the CPU in float32, then moved: what a torchaudio transform holds.
    return torch.hann_window(length).to(device=device, dtype=dtype)


# ---------------------------------------------------------------------------------------------------
# The spectrogram


def _as_batch(wave: torch.Tensor) -> tuple[torch.Tensor, bool]:
    """(batch, samples) and whether the input was one unbatched waveform."""
    if not torch.is_tensor(wave) or not wave.is_floating_point():
        raise InputError("the mel spectrogram needs a floating-point waveform tensor")
    if wave.dim() == 1:
        return wave.unsqueeze(0), True
    if wave.dim() == 3 and wave.shape[1] == 1:
        return wave.squeeze(1), False  # (batch, 1 channel, samples), as F5's MelSpec accepts
    if wave.dim() == 2:
        return wave, False
    raise InputError(f"the mel spectrogram takes a mono waveform (samples,), (batch, samples) or "
                     f"(batch, 1, samples), not shape {tuple(wave.shape)}")


def magnitude_spectrogram(wave: torch.Tensor, settings: MelSettings = F5_MEL) -> torch.Tensor:
    """|STFT| of (batch, samples) audio -> (batch, n_fft // 2 + 1, frames), in the wave's dtype."""
    samples = wave.shape[-1]
    if settings.padding == "same":
        pad = (settings.win_length - settings.hop_length) // 2
        if samples <= pad:
            raise InputError(f"audio of {samples} samples is too short for a mel spectrogram; "
                             f"give more than {pad} samples")
        wave = F.pad(wave, (pad, pad), mode="reflect")
    elif samples <= settings.n_fft // 2:
        # Centring reflects n_fft / 2 samples at each end; torch's own message for this is cryptic.
        raise InputError(f"audio of {samples} samples is too short for a mel spectrogram; "
                         f"give more than {settings.n_fft // 2} samples")
    window = _hann_window(settings.win_length, wave.device, wave.dtype)
    spectrum = torch.stft(wave, settings.n_fft, hop_length=settings.hop_length, win_length=settings.win_length,
                          window=window, center=settings.padding == "center", pad_mode="reflect",
                          normalized=False, onesided=True, return_complex=True)
    return spectrum.abs()


def mel_spectrogram(wave: torch.Tensor, settings: MelSettings = F5_MEL) -> torch.Tensor:
    """The linear (not yet logged) mel magnitudes of `wave`; shapes as in `log_mel`."""
    batch, unbatched = _as_batch(wave)
    magnitudes = magnitude_spectrogram(batch, settings)
    bank = _filter_bank(settings, batch.device, batch.dtype)
    mel = torch.matmul(magnitudes.transpose(-1, -2), bank).transpose(-1, -2)
    return mel[0] if unbatched else mel


def log_mel(wave: torch.Tensor, settings: MelSettings = F5_MEL) -> torch.Tensor:
    """The natural log of the mel magnitudes, floored at `settings.log_floor`.

    wave: mono audio at `settings.sample_rate`: (samples,) -> (n_mels, frames); (batch, samples) or
    (batch, 1, samples) -> (batch, n_mels, frames). With centring, frames = samples // hop + 1."""
    return mel_spectrogram(wave, settings).clamp(min=settings.log_floor).log()


class LogMel(nn.Module):
    """`log_mel` as a module with fixed settings. It holds no parameters or buffers, so it adds nothing
    to a state dict; the window and filter bank are cached per device and dtype."""

    def __init__(self, settings: MelSettings = F5_MEL):
        super().__init__()
        self.settings = settings

    def forward(self, wave: torch.Tensor) -> torch.Tensor:
        return log_mel(wave, self.settings)

    def extra_repr(self) -> str:
        return repr(self.settings)
