"""The 12 Hz codec's encoder: a voice-clone reference -> its codes (16 codebooks x 12.5 frames a second).

qwen-tts 0.1.1 encodes a reference with `Qwen3TTSTokenizer.encode` -> `Qwen3TTSTokenizerV2Model.encode`
-> transformers 4.57.3 `MimiModel.encode` (the Qwen subclass only drops Mimi's decoder half). This
module computes the same, operation for operation, so on the same device, thread count and CPU kernel
level the codes are upstream's and the latents before quantisation bit for bit its latents:

1. the SEANet convolutional encoder (causal convs, ELU, residual blocks, strided downsampling by the
   reversed `upsampling_ratios`: 960 samples per 25 Hz frame for the released codec);
2. the transformer over those frames (mimi_transformer.py);
3. the downsampling conv (kernel 4, stride 2, replicate padding) to 12.5 Hz;
4. the split residual quantizer (mimi_quantizer.py), of which qwen-tts keeps the first
   `encoder_valid_num_quantizers` codes (16 of 32);
5. qwen-tts's trim: the first ceil(samples / encode_downsample_rate) frames.

Each causal conv pads (kernel - stride) on the left and, on the right, what makes its last window
complete; transformers computes that count with float32 division (`ceil((length - kernel + padding) /
stride + 1) - 1`), and so does this module, so even very long inputs get upstream's frame counts.
A streaming config (`use_streaming`) takes the left padding from transformers' first-call padding cache
instead (zeros, or the first sample for replicate convs) and pads nothing on the right.

Batches. Upstream encodes the references of one request that share a rate as one zero-padded batch
and trims each afterwards (`encode_batch` does the same), but references of different rates one by one
(`encode`). In a batch, the padding reaches the last frame of every shorter reference (its
replicate-padded downsampling sees latents of silence instead of a copy of its last latent), so that
frame usually differs from the same reference encoded alone.

Parameter names are transformers' (`encoder.layers.0.conv.weight`, `encoder_transformer.layers.0...`,
`downsample.conv.weight`, `quantizer...`): the `encoder.*` tensors of `speech_tokenizer/model.safetensors`
load with that prefix stripped.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from mizuoto.core.errors import CheckpointError, InputError

from .encoder_weights import assign, read_prefixed
from .mimi_config import MimiEncoderConfig
from .mimi_quantizer import SplitResidualVectorQuantizer
from .mimi_transformer import MimiTransformer
from .ref_audio import at_rate

WEIGHTS = "model.safetensors"
PREFIX = "encoder."  # the encoder's tensors in the speech tokenizer's model.safetensors


class MimiConv1d(nn.Module):
    """transformers' MimiConv1d: a Conv1d with causal (or centred) padding in `pad_mode`."""

    def __init__(self, config: MimiEncoderConfig, in_channels: int, out_channels: int, kernel_size: int,
                 stride: int = 1, dilation: int = 1, bias: bool = True, pad_mode: str | None = None):
        super().__init__()
        self.conv = nn.Conv1d(in_channels, out_channels, kernel_size, stride, dilation=dilation, bias=bias)
        self.causal = config.use_causal_conv
        self.streaming = config.use_streaming
        self.pad_mode = config.pad_mode if pad_mode is None else pad_mode
        self.stride = stride
        self.span = (kernel_size - 1) * dilation + 1  # the receptive field of one output
        self.padding_total = self.span - stride
        self.padding_right = self.padding_total // 2
        self.padding_left = self.padding_total - self.padding_right

    def extra_padding(self, length: int) -> int:
        """Right padding that completes the last window; float32 arithmetic, as transformers does it
        (its operands are int64 tensors, and true division of those gives float32)."""
        frames = np.float32(length - self.span + self.padding_total) / np.float32(self.stride) + np.float32(1)
        frames = int(np.ceil(frames)) - 1
        return frames * self.stride + self.span - self.padding_total - length

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.causal and self.streaming:
            # transformers' padding cache on its first call: left context of zeros, or of the first
            # sample for replicate padding, and no right padding at all (so a conv needs `stride` inputs).
            if x.shape[-1] < self.stride:
                raise InputError("the reference audio is too short for this streaming codec encoder; it needs at "
                                 "least one code frame of audio")
            if self.pad_mode == "replicate":
                cache = torch.ones(x.shape[0], x.shape[1], self.padding_total, dtype=x.dtype,
                                   device=x.device) * x[..., :1]
            else:
                cache = torch.zeros(x.shape[0], x.shape[1], self.padding_total, dtype=x.dtype, device=x.device)
            return self.conv(torch.cat([cache, x], dim=2))
        extra = self.extra_padding(x.shape[-1])
        if self.causal:
            x = _pad1d(x, (self.padding_total, extra), self.pad_mode)
        else:
            x = _pad1d(x, (self.padding_left, self.padding_right + extra), self.pad_mode)
        return self.conv(x)


def _pad1d(x: torch.Tensor, paddings: tuple[int, int], mode: str) -> torch.Tensor:
    """F.pad, except that reflect padding longer than the input first extends it with zeros on the
    right (and cuts them off again), as transformers' `_pad1d` does."""
    if mode != "reflect":
        return F.pad(x, paddings, mode)
    length = x.shape[-1]
    extra = max(paddings) - length + 1 if length <= max(paddings) else 0
    if extra:
        x = F.pad(x, (0, extra))
    padded = F.pad(x, paddings, mode)
    return padded[..., :padded.shape[-1] - extra]


class MimiResnetBlock(nn.Module):
    """ELU -> conv (residual_kernel_size, dilated) -> ELU -> conv 1x1, plus the input (or a 1x1 conv of it)."""

    def __init__(self, config: MimiEncoderConfig, dim: int, dilations: tuple[int, int]):
        super().__init__()
        hidden = dim // config.compress
        kernels = (config.residual_kernel_size, 1)
        self.block = nn.ModuleList([
            nn.ELU(), MimiConv1d(config, dim, hidden, kernels[0], dilation=dilations[0]),
            nn.ELU(), MimiConv1d(config, hidden, dim, kernels[1], dilation=dilations[1]),
        ])
        self.shortcut = MimiConv1d(config, dim, dim, 1) if config.use_conv_shortcut else nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        residual = x
        for layer in self.block:
            x = layer(x)
        return self.shortcut(residual) + x


class SeanetEncoder(nn.Module):
    """Waveform (B, 1, samples) -> (B, hidden, frames): a conv, then per downsampling ratio (in reverse
    order) residual blocks, ELU and a strided conv doubling the channels, then ELU and a last conv.
    The ELUs are modules in the list, as upstream has them, so the layer indices match its keys."""

    def __init__(self, config: MimiEncoderConfig):
        super().__init__()
        layers = [MimiConv1d(config, config.audio_channels, config.num_filters, config.kernel_size)]
        scaling = 1
        for ratio in reversed(config.upsampling_ratios):
            channels = scaling * config.num_filters
            for j in range(config.num_residual_layers):
                layers.append(MimiResnetBlock(config, channels, (config.dilation_growth_rate ** j, 1)))
            layers += [nn.ELU(), MimiConv1d(config, channels, channels * 2, kernel_size=ratio * 2, stride=ratio)]
            scaling *= 2
        layers += [nn.ELU(), MimiConv1d(config, scaling * config.num_filters, config.hidden_size,
                                        config.last_kernel_size)]
        self.layers = nn.ModuleList(layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = layer(x)
        return x


class MimiEncoder(nn.Module):
    """The encoder half of Qwen3-TTS's 12 Hz codec: `encode(wave)` -> codes (Q, T), int64."""

    def __init__(self, config: MimiEncoderConfig | None = None):
        super().__init__()
        config = config or MimiEncoderConfig()
        config.check()
        self.config = config
        self.encoder = SeanetEncoder(config)
        self.encoder_transformer = MimiTransformer(config)
        self.downsample = MimiConv1d(config, config.hidden_size, config.hidden_size, config.downsample_kernel,
                                     stride=2, bias=False, pad_mode="replicate")
        self.quantizer = SplitResidualVectorQuantizer(config)

    def latents(self, waves: torch.Tensor) -> torch.Tensor:
        """(B, samples) in the model's dtype -> the 12.5 Hz latents before quantisation (B, hidden, frames)."""
        x = self.encoder(waves.unsqueeze(1))
        x = self.encoder_transformer(x.transpose(1, 2)).transpose(1, 2)
        return self.downsample(x)

    def frames(self, samples: int) -> int:
        """How many code frames qwen-tts keeps for a reference of `samples` samples: ceil(samples / 1920)."""
        return -(-samples // self.config.encode_downsample_rate)

    @torch.inference_mode()
    def encode(self, wave, sample_rate: int | None = None) -> torch.Tensor:
        """Mono float audio (samples,) -> codes (encoder_valid_num_quantizers, frames), int64, on the
        model's device; the transpose of what upstream's `Qwen3TTSTokenizer.encode` returns for it.

        At the tokenizer's rate (24 kHz) the codes are upstream's; another rate is resampled first,
        with upstream's librosa / soxr call (ref_audio.py)."""
        return self.encode_batch([wave], sample_rate)[0]

    @torch.inference_mode()
    def encode_batch(self, waves, sample_rate: int | None = None) -> list[torch.Tensor]:
        """Several mono references at one rate -> one codes tensor (Q, frames_i) each, as upstream's
        `create_voice_clone_prompt` encodes references that share a rate: zero-padded on the right to
        the longest, encoded as one batch, each trimmed to its own ceil(samples / 1920) frames. The
        padding reaches the last frame of a shorter reference (the replicate-padded downsampling sees
        latents of silence instead of a copy of its last latent), so that frame can differ from the
        reference's solo `encode`; upstream gives these batch codes, and so does this method."""
        rate = self.config.input_sample_rate
        waves = [at_rate(w, rate if sample_rate is None else sample_rate, rate) for w in waves]
        if not waves:
            raise InputError("no reference audio to encode")
        if any(w.shape[0] == 0 for w in waves):
            raise InputError("the reference audio is empty; the codec needs at least one sample")
        longest = max(w.shape[0] for w in waves)
        batch = torch.stack([F.pad(w, (0, longest - w.shape[0])) for w in waves])
        weight = self.downsample.conv.weight
        batch = batch.to(weight.device).to(weight.dtype)
        codes = self.quantizer.encode(self.latents(batch), self.config.encoder_valid_num_quantizers)
        return [codes[:, i, :self.frames(w.shape[0])] for i, w in enumerate(waves)]


def speech_tokenizer_folder(folder: str | Path) -> Path:
    """The codec's folder: `folder` itself, or the `speech_tokenizer/` of a Qwen3-TTS model folder."""
    folder = Path(folder)
    if not folder.is_dir():
        raise CheckpointError(f"{folder} is not a folder; point at a Qwen3-TTS model or its speech_tokenizer folder")
    inner = folder / "speech_tokenizer"
    return inner if (inner / "config.json").is_file() else folder


def read_encoder_config(folder: str | Path) -> MimiEncoderConfig:
    path = speech_tokenizer_folder(folder) / "config.json"
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise CheckpointError(f"{path} is not readable JSON ({' '.join(str(exc).split())[:120]})") from None
    if not isinstance(data, dict):
        raise CheckpointError(f"{path} does not hold a JSON object")
    return MimiEncoderConfig.from_tokenizer_config(data, str(path))


def load_mimi_encoder(folder: str | Path, device="cpu", dtype: torch.dtype = torch.float32,
                      config: MimiEncoderConfig | None = None) -> MimiEncoder:
    """The codec encoder of a speech tokenizer folder (config.json + model.safetensors), or of a
    Qwen3-TTS model folder holding one in `speech_tokenizer/`, on `device` in `dtype`, its tensors
    placed as transformers places them (encoder_weights.py)."""
    folder = speech_tokenizer_folder(folder)
    config = config or read_encoder_config(folder)
    state = read_prefixed([folder / WEIGHTS], PREFIX, torch.device(device), dtype)
    if not state:
        raise CheckpointError(f"{folder / WEIGHTS} has no {PREFIX}* tensors; the codec's encoder is needed to clone "
                              f"a voice")
    with torch.device("meta"):
        model = MimiEncoder(config)
    return assign(model, state, PREFIX, folder / WEIGHTS)
