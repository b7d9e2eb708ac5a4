"""The speaker encoder of the Base (voice-clone) models: an ECAPA-TDNN that turns a reference into the
x-vector the talker reads as its speaker embedding.

Computes what qwen-tts 0.1.1's `Qwen3TTSSpeakerEncoder` computes on the mels of `speaker_mel.py`,
operation for operation, so on the same device, thread count and CPU kernel level the x-vector is
upstream's bit for bit. Module and parameter names are upstream's: the `speaker_encoder.*` tensors of
a Base model's `model.safetensors` load with the prefix stripped.

The network (channels C = enc_channels): a TDNN (conv + ReLU) on the 128 mel bands, then SE-Res2Net
blocks (TDNN 1x1, Res2Net dilated TDNNs over channel groups, TDNN 1x1, squeeze-excitation, plus the
input), a TDNN over the concatenated block outputs ("multi-layer feature aggregation"), attentive
statistics pooling (a learnt softmax over time weights a per-channel mean and standard deviation;
plain tensor maths, no attention site), and a 1x1 conv to enc_dim. Every conv is
`padding="same", padding_mode="reflect"`, as upstream's: the reflection needs more frames than half
the widest dilated kernel, so very short references are refused with a clear message.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, fields
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from mizuoto.core.errors import CheckpointError, InputError

from . import speaker_mel
from .checkpoint import weight_files
from .encoder_weights import assign, read_prefixed
from .ref_audio import at_rate

PREFIX = "speaker_encoder."  # the encoder's tensors in a Base model's model.safetensors
POOLING_EPS = 1e-12  # the variance is clamped to at least this before its square root


@dataclass(frozen=True)
class SpeakerEncoderConfig:
    """`speaker_encoder_config` of a Base model's config.json; the defaults are upstream's."""

    mel_dim: int = 128
    enc_dim: int = 1024
    enc_channels: tuple = (512, 512, 512, 512, 1536)
    enc_kernel_sizes: tuple = (5, 3, 3, 3, 1)
    enc_dilations: tuple = (1, 2, 3, 4, 1)
    enc_attention_channels: int = 128
    enc_res2net_scale: int = 8
    enc_se_channels: int = 128
    sample_rate: int = 24000

    @classmethod
    def from_dict(cls, data: dict | None, where: str = "speaker_encoder_config") -> "SpeakerEncoderConfig":
        known = {f.name for f in fields(cls)}
        try:
            values = {key: tuple(int(v) for v in value) if isinstance(value, (list, tuple)) else int(value)
                      for key, value in (data or {}).items() if key in known and value is not None}
        except (TypeError, ValueError) as exc:
            raise CheckpointError(f"{where} has an unusable value ({' '.join(str(exc).split())[:120]})") from None
        config = cls(**values)
        config.check(where)
        return config

    def check(self, where: str = "speaker_encoder_config") -> None:
        n = len(self.enc_channels)
        if n < 2 or len(self.enc_kernel_sizes) != n or len(self.enc_dilations) != n:
            raise CheckpointError(f"{where}: enc_channels, enc_kernel_sizes and enc_dilations must have the same "
                                  f"length (at least 2)")
        for c in self.enc_channels[1:-1]:
            if c % self.enc_res2net_scale:
                raise CheckpointError(f"{where}: channels {c} do not split into enc_res2net_scale "
                                      f"{self.enc_res2net_scale} groups")
        if sum(self.enc_channels[1:-1]) != self.enc_channels[-1]:
            raise CheckpointError(f"{where}: the last of enc_channels ({self.enc_channels[-1]}) must be the sum of the "
                                  f"SE-Res2Net blocks' channels {self.enc_channels[1:-1]}, which it aggregates")
        if self.sample_rate != speaker_mel.SAMPLE_RATE:
            raise CheckpointError(f"{where}: sample_rate {self.sample_rate}; upstream computes the speaker mels "
                                  f"at {speaker_mel.SAMPLE_RATE} Hz only")

    @property
    def min_frames(self) -> int:
        """The fewest mel frames every reflect-padded conv accepts (its padding must be shorter)."""
        pairs = zip(self.enc_kernel_sizes, self.enc_dilations, strict=True)
        return max(-(-d * (k - 1) // 2) for k, d in pairs) + 1


def _conv(in_channels: int, out_channels: int, kernel_size: int, dilation: int = 1) -> nn.Conv1d:
    return nn.Conv1d(in_channels, out_channels, kernel_size, dilation=dilation, padding="same",
                     padding_mode="reflect")


class TimeDelayNetBlock(nn.Module):
    """conv (same length, reflect padding) -> ReLU."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int, dilation: int):
        super().__init__()
        self.conv = _conv(in_channels, out_channels, kernel_size, dilation)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.relu(self.conv(x))


class Res2NetBlock(nn.Module):
    """The channels in `scale` groups: the first passes through, each later one goes through its own
    TDNN after adding the previous group's output (the second adds nothing)."""

    def __init__(self, in_channels: int, out_channels: int, scale: int, kernel_size: int, dilation: int):
        super().__init__()
        self.scale = scale
        self.blocks = nn.ModuleList(TimeDelayNetBlock(in_channels // scale, out_channels // scale, kernel_size,
                                                      dilation) for _ in range(scale - 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        outputs = []
        for i, part in enumerate(torch.chunk(x, self.scale, dim=1)):
            if i == 0:
                out = part
            elif i == 1:
                out = self.blocks[0](part)
            else:
                out = self.blocks[i - 1](part + out)
            outputs.append(out)
        return torch.cat(outputs, dim=1)


class SqueezeExcitationBlock(nn.Module):
    """Scales each channel by sigmoid(conv2(relu(conv1(mean over time))))."""

    def __init__(self, in_channels: int, se_channels: int, out_channels: int):
        super().__init__()
        self.conv1 = _conv(in_channels, se_channels, 1)
        self.conv2 = _conv(se_channels, out_channels, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        s = torch.sigmoid(self.conv2(F.relu(self.conv1(x.mean(dim=2, keepdim=True)))))
        return x * s


class SqueezeExcitationRes2NetBlock(nn.Module):
    """TDNN 1x1 -> Res2Net -> TDNN 1x1 -> squeeze-excitation, plus the block's input."""

    def __init__(self, in_channels: int, out_channels: int, res2net_scale: int, se_channels: int,
                 kernel_size: int, dilation: int):
        super().__init__()
        self.tdnn1 = TimeDelayNetBlock(in_channels, out_channels, 1, 1)
        self.res2net_block = Res2NetBlock(out_channels, out_channels, res2net_scale, kernel_size, dilation)
        self.tdnn2 = TimeDelayNetBlock(out_channels, out_channels, 1, 1)
        self.se_block = SqueezeExcitationBlock(out_channels, se_channels, out_channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.se_block(self.tdnn2(self.res2net_block(self.tdnn1(x)))) + x


def _statistics(x: torch.Tensor, weights: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Weighted mean and standard deviation over time, upstream's expressions (weights sum to 1)."""
    mean = (weights * x).sum(2)
    std = torch.sqrt((weights * (x - mean.unsqueeze(2)).pow(2)).sum(2).clamp(POOLING_EPS))
    return mean, std


class AttentiveStatisticsPooling(nn.Module):
    """(B, C, T) -> (B, 2C, 1): the mean and standard deviation of each channel under softmax weights
    over time that a small TDNN computes from the frames and their global (uniform) statistics."""

    def __init__(self, channels: int, attention_channels: int):
        super().__init__()
        self.tdnn = TimeDelayNetBlock(channels * 3, attention_channels, 1, 1)
        self.conv = _conv(attention_channels, channels, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        length = x.shape[-1]
        # Upstream builds a length mask (all ones: nothing is padded) and divides it by its own sum;
        # the uniform weights are therefore 1 / total in x's dtype, total summed in that dtype.
        mask = torch.ones(x.shape[0], 1, length, dtype=x.dtype, device=x.device)
        mean, std = _statistics(x, mask / mask.sum(dim=2, keepdim=True))
        context = torch.cat([x, mean.unsqueeze(2).repeat(1, 1, length), std.unsqueeze(2).repeat(1, 1, length)],
                            dim=1)
        weights = F.softmax(self.conv(torch.tanh(self.tdnn(context))), dim=2)
        mean, std = _statistics(x, weights)
        return torch.cat((mean, std), dim=1).unsqueeze(2)


class SpeakerEncoder(nn.Module):
    """qwen-tts's Qwen3TTSSpeakerEncoder: mels (B, T, mel_dim) -> x-vectors (B, enc_dim)."""

    def __init__(self, config: SpeakerEncoderConfig | None = None):
        super().__init__()
        config = config or SpeakerEncoderConfig()
        config.check()
        self.config = config
        ch, ks, dl = config.enc_channels, config.enc_kernel_sizes, config.enc_dilations
        self.blocks = nn.ModuleList([TimeDelayNetBlock(config.mel_dim, ch[0], ks[0], dl[0])])
        for i in range(1, len(ch) - 1):
            self.blocks.append(SqueezeExcitationRes2NetBlock(ch[i - 1], ch[i], config.enc_res2net_scale,
                                                             config.enc_se_channels, ks[i], dl[i]))
        # The aggregation reads the concatenated outputs of the SE-Res2Net blocks; upstream sizes it
        # enc_channels[-1], which the blocks' channels must add up to.
        self.mfa = TimeDelayNetBlock(ch[-1], ch[-1], ks[-1], dl[-1])
        self.asp = AttentiveStatisticsPooling(ch[-1], config.enc_attention_channels)
        self.fc = _conv(ch[-1] * 2, config.enc_dim, 1)

    def forward(self, mels: torch.Tensor) -> torch.Tensor:
        x = mels.transpose(1, 2)
        if x.shape[-1] < self.config.min_frames:
            raise InputError(f"the reference audio is too short for the speaker encoder: {x.shape[-1]} mel frames, "
                             f"it needs at least {self.config.min_frames}")
        outputs = []
        for block in self.blocks:
            x = block(x)
            outputs.append(x)
        x = self.mfa(torch.cat(outputs[1:], dim=1))
        return self.fc(self.asp(x)).squeeze(-1)

    @torch.inference_mode()
    def x_vector(self, wave, sample_rate: int = speaker_mel.SAMPLE_RATE) -> torch.Tensor:
        """Mono float audio (samples,) -> the x-vector (enc_dim,) in the model's dtype, on its device.

        At 24 kHz this is upstream's `extract_speaker_embedding` exactly; another rate is resampled
        first, with upstream's librosa / soxr call (ref_audio.py)."""
        if self.config.mel_dim != speaker_mel.N_MELS:
            raise CheckpointError(f"this speaker encoder reads {self.config.mel_dim} mel bands, but upstream always "
                                  f"computes {speaker_mel.N_MELS}; the checkpoint cannot take a reference")
        wave = at_rate(wave, sample_rate, speaker_mel.SAMPLE_RATE)
        weight = self.fc.weight
        mels = speaker_mel.speaker_mel(wave).to(weight.device).to(weight.dtype)
        return self(mels)[0]


def speaker_encoder_config(folder: str | Path) -> SpeakerEncoderConfig:
    """The `speaker_encoder_config` of a Base model folder's config.json."""
    path = Path(folder) / "config.json"
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise CheckpointError(f"{path} is not readable JSON ({' '.join(str(exc).split())[:120]})") from None
    kind = data.get("tts_model_type") if isinstance(data, dict) else None
    if kind != "base":  # upstream builds the speaker encoder for tts_model_type "base" only
        raise CheckpointError(f"{path} has tts_model_type {kind!r}; only the Base models have a speaker encoder "
                              f"and can clone a voice")
    return SpeakerEncoderConfig.from_dict(data.get("speaker_encoder_config"), f"{path}: speaker_encoder_config")


def load_speaker_encoder(folder: str | Path, device="cpu", dtype: torch.dtype = torch.float32,
                         config: SpeakerEncoderConfig | None = None) -> SpeakerEncoder:
    """The speaker encoder of a Base model folder (config.json + model.safetensors or its shards), on
    `device` in `dtype`, its tensors placed as transformers places them (encoder_weights.py)."""
    folder = Path(folder)
    if not folder.is_dir():
        raise CheckpointError(f"{folder} is not a folder; point at a Qwen3-TTS Base model folder")
    config = config or speaker_encoder_config(folder)
    files = weight_files(folder)
    paths = sorted({path for key, path in files.items() if key == "" or key.startswith(PREFIX)})
    state = read_prefixed(paths, PREFIX, torch.device(device), dtype)
    if not state:
        raise CheckpointError(f"{folder} has no {PREFIX}* tensors; only the Base (voice-clone) models carry a "
                              f"speaker encoder")
    with torch.device("meta"):
        model = SpeakerEncoder(config)
    return assign(model, state, PREFIX, folder)
