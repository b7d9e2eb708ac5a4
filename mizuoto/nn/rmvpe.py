"""RMVPE: pitch (F0) estimation from 16 kHz audio, one value in Hz every 10 ms.

Exact to seed-vc 0.4.3 `modules/rmvpe.py` (`E2E` and its DeepUnet, `RMVPE.mel2hidden`, `decode`,
`to_local_average_cents`, `infer_from_audio`, `infer_from_audio_batch`); GPL-3.0 code, read not copied. The
checkpoint is RVC's `rmvpe.pt` (lj1995/VoiceConversionWebUI), a plain state dict of `E2E(4, 1, (2, 2))`; the
parameter names here are upstream's, so it loads as it is. Data flow:

    audio (S,) -> log-mel (1, 128, T)                     mizuoto/audio/rmvpe_mel.py
      -> padded with zeros to a multiple of 32 frames      (the U-Net halves time five times)
      -> (B, 1, T, 128): U-Net of residual conv blocks (BatchNorm, eval statistics):
           input BatchNorm -> 5 encoder stages (blocks, then 2x2 average pool; channels 16 -> 256, each stage's
           output kept as a skip) -> 4 intermediate stages (512 channels) -> 5 decoder stages (transposed conv
           2x up, concatenate the skip, blocks)
      -> 3x3 conv to 3 channels -> (B, T, 3 * 128) -> bidirectional GRU (256 a direction) -> Linear(512, 360)
      -> sigmoid: the salience of 360 pitch bins (20 cents apart from 1997.38 cents, about 31.7 Hz), cropped
         back to T frames
      -> decode (numpy, float64 as upstream's): per frame the salience-weighted mean of the cents of the 9 bins
         around the strongest one (zero salience beyond the ends), 0 where the strongest is <= `thred`,
         f0 = 10 * 2 ** (cents / 1200), and 10 Hz (zero cents) reported as 0.

Upstream returns the F0 as float64 numpy (its cents table is float64); so does `infer_from_audio` here. Only the
`is_half=False` path is reproduced (what Seed-VC's wrapper, inference and training use). Upstream's half path
does run on the CPU with torch 2.13 (half convolutions, GRU and log all have CPU kernels), but no caller here
wants it. E2E's `n_gru=0` branch is unreachable upstream (it reads `nn.N_MELS`, which torch.nn lacks), so
`n_gru` must be at least 1 here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from mizuoto.audio import rmvpe_mel
from mizuoto.core.errors import CheckpointError, InputError
from mizuoto.nn import ops

N_BINS = 360  # pitch classes of the salience
CENTS_STEP = 20.0
CENTS_OFFSET = 1997.3794084376191  # the first bin's pitch in cents above 10 Hz
WINDOW_RADIUS = 4  # the local average spans the strongest bin and 4 on each side
FRAME_MULTIPLE = 32  # upstream pads the mel to a multiple of 2 ** 5 frames, whatever the U-Net depth
GRU_HIDDEN = 256
DEFAULT_THRESHOLD = 0.03  # Seed-VC's `thred`


@dataclass(frozen=True)
class RMVPEConfig:
    """E2E's constructor arguments; the defaults are rmvpe.pt's `E2E(4, 1, (2, 2))`.

    `kernel_size` is both the encoder's average pool and the decoder's transposed-conv stride: (2, 2) halves
    time and mels, (1, 2) only mels (upstream then pads the transposed conv's output by (0, 1))."""

    n_blocks: int = 4  # residual conv blocks per stage
    n_gru: int = 1  # GRU layers
    kernel_size: tuple[int, int] = (2, 2)
    en_de_layers: int = 5
    inter_layers: int = 4
    en_out_channels: int = 16

    def __post_init__(self):
        object.__setattr__(self, "kernel_size", tuple(self.kernel_size))
        for name in ("n_blocks", "n_gru", "en_de_layers", "inter_layers", "en_out_channels"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise CheckpointError(f"RMVPE's {name} must be a positive integer, got {value!r}")
        if self.kernel_size not in ((2, 2), (1, 2)):
            raise CheckpointError(f"RMVPE's kernel_size must be (2, 2) or (1, 2), got {self.kernel_size!r}")
        # 128 mels halve en_de_layers times; with (2, 2) so do the 32-frame blocks upstream pads to
        most = 5 if self.kernel_size[0] == 2 else 7
        if self.en_de_layers > most:
            raise CheckpointError(f"RMVPE's en_de_layers must be at most {most} with kernel_size "
                                  f"{self.kernel_size}, got {self.en_de_layers}")


# --------------------------------------------------------------------------------------------------
# The network (upstream's attribute names, for its state dict keys)


def _bn(channels: int) -> nn.BatchNorm2d:
    # upstream's momentum (0.01) only matters in training; eval uses the running statistics
    return nn.BatchNorm2d(channels, momentum=0.01)


class ResidualConvBlock(nn.Module):
    """Two 3x3 conv -> BatchNorm -> ReLU, plus the input (through a 1x1 conv when the width changes).
    Upstream's `ConvBlockRes`; `conv` indices 0, 1, 3, 4 hold the parameters."""

    def __init__(self, channels_in: int, channels_out: int):
        super().__init__()
        self.conv = nn.Sequential(
            nn.Conv2d(channels_in, channels_out, 3, padding=1, bias=False), _bn(channels_out), nn.ReLU(),
            nn.Conv2d(channels_out, channels_out, 3, padding=1, bias=False), _bn(channels_out), nn.ReLU())
        self.shortcut = nn.Conv2d(channels_in, channels_out, 1) if channels_in != channels_out else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(x) + (x if self.shortcut is None else self.shortcut(x))


class ConvStack(nn.Module):
    """`blocks` residual blocks, the first changing the width (upstream's ResEncoderBlock without pooling)."""

    def __init__(self, channels_in: int, channels_out: int, blocks: int):
        super().__init__()
        self.conv = nn.ModuleList([ResidualConvBlock(channels_in if i == 0 else channels_out, channels_out)
                                   for i in range(blocks)])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.conv:
            x = block(x)
        return x


class DownStage(ConvStack):
    """A ConvStack whose output is kept for the skip connection and average-pooled for the next stage."""

    def __init__(self, channels_in: int, channels_out: int, blocks: int, pool: tuple[int, int]):
        super().__init__(channels_in, channels_out, blocks)
        self.pool = nn.AvgPool2d(kernel_size=pool)


class UpStage(nn.Module):
    """Transposed conv (stride `stride`, upsampling) -> BatchNorm -> ReLU, the skip concatenated after it on the
    channels, then residual blocks back to the narrower width (upstream's ResDecoderBlock)."""

    def __init__(self, channels_in: int, channels_out: int, blocks: int, stride: tuple[int, int]):
        super().__init__()
        # the output padding makes the size exactly `stride` times the input's (upstream pads (1, 1) for any
        # stride but (1, 2), which pads only the mel axis)
        output_padding = (0, 1) if stride == (1, 2) else (1, 1)
        self.conv1 = nn.Sequential(
            nn.ConvTranspose2d(channels_in, channels_out, 3, stride=stride, padding=1, output_padding=output_padding,
                               bias=False),
            _bn(channels_out), nn.ReLU())
        self.conv2 = nn.ModuleList([ResidualConvBlock(channels_out * 2 if i == 0 else channels_out, channels_out)
                                    for i in range(blocks)])

    def forward(self, x: torch.Tensor, skip: torch.Tensor) -> torch.Tensor:
        x = torch.cat((self.conv1(x), skip), dim=1)
        for block in self.conv2:
            x = block(x)
        return x


class _Stages(nn.Module):
    """A holder of stages under `layers` (upstream's Encoder, Intermediate and Decoder keys); the Encoder's
    input BatchNorm, when given, is its `bn`."""

    def __init__(self, stages: list[nn.Module], input_norm: nn.Module | None = None):
        super().__init__()
        if input_norm is not None:
            self.bn = input_norm
        self.layers = nn.ModuleList(stages)


class DeepUNet(nn.Module):
    """The U-Net over (time, mel): (B, 1, T, 128) -> (B, en_out_channels, T, 128)."""

    def __init__(self, config: RMVPEConfig):
        super().__init__()
        width, blocks = config.en_out_channels, config.n_blocks
        down = [DownStage(1 if i == 0 else width << (i - 1), width << i, blocks, config.kernel_size)
                for i in range(config.en_de_layers)]
        self.encoder = _Stages(down, input_norm=_bn(1))
        deepest = width << config.en_de_layers  # the middle runs at twice the last encoder's width
        self.intermediate = _Stages([ConvStack(deepest // 2 if i == 0 else deepest, deepest, blocks)
                                     for i in range(config.inter_layers)])
        self.decoder = _Stages([UpStage(deepest >> i, deepest >> (i + 1), blocks, config.kernel_size)
                                for i in range(config.en_de_layers)])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.encoder.bn(x)
        skips = []
        for stage in self.encoder.layers:
            x = stage(x)
            skips.append(x)
            x = stage.pool(x)
        for stage in self.intermediate.layers:
            x = stage(x)
        for stage, skip in zip(self.decoder.layers, reversed(skips), strict=True):
            x = stage(x, skip)
        return x


class BidirectionalGRU(nn.Module):
    """nn.GRU (batch first, both directions), returning only the outputs (upstream's BiGRU: key `gru`).

    On the CPU the GRU's arithmetic depends on whether its weights require gradients, and upstream's do (it
    runs under no_grad with trainable parameters): the kernel first projects the whole (time-major) input with
    one linear, and for a batch of two or more that input is a transposed, non-contiguous view, which matmul
    folds into one matrix (copy, mm, then the bias added) when a weight requires gradients but multiplies time
    step by time step (bmm) when none does; the two round differently (as in ops.Linear). A frozen GRU here
    therefore calls the same kernel nn.GRU calls with aliases of its weights flagged as requiring gradients,
    under no_grad: upstream's route, with no graph and no change to the module."""

    def __init__(self, features_in: int, hidden: int, layers: int):
        super().__init__()
        self.gru = nn.GRU(features_in, hidden, num_layers=layers, batch_first=True, bidirectional=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gru = self.gru
        if x.device.type != "cpu" or any(w.requires_grad for w in gru._flat_weights):
            return gru(x)[0]  # trainable weights take upstream's route already; cuDNN has no such split
        start = torch.zeros(gru.num_layers * 2, x.shape[0], gru.hidden_size, dtype=x.dtype, device=x.device)
        with torch.no_grad():
            weights = [w.detach().requires_grad_(True) for w in gru._flat_weights]
            # nn.GRU.forward's own call: (input, h0, weights, bias, layers, dropout, training, bidirectional,
            # batch_first)
            return torch._VF.gru(x, start, weights, gru.bias, gru.num_layers, 0.0, False, True, True)[0]


class E2E(nn.Module):
    """Log-mels (B, 128, T) -> pitch-bin salience (B, T, 360), T a multiple of the U-Net's time reduction."""

    def __init__(self, config: RMVPEConfig = RMVPEConfig()):
        super().__init__()
        self.config = config
        self.unet = DeepUNet(config)
        self.cnn = nn.Conv2d(config.en_out_channels, 3, 3, padding=1)
        # upstream's fc is Sequential(BiGRU, Linear, Dropout, Sigmoid): the dropout is a no-op in eval and holds
        # no parameters, so indices 0 and 1 (the keys) stay upstream's without it
        self.fc = nn.Sequential(BidirectionalGRU(3 * rmvpe_mel.N_MELS, GRU_HIDDEN, config.n_gru),
                                ops.Linear(2 * GRU_HIDDEN, N_BINS), nn.Sigmoid())

    def forward(self, mel: torch.Tensor) -> torch.Tensor:
        # (B, 128, T) -> (B, 1, T, 128): a strided view, as upstream feeds it to the input BatchNorm
        x = self.unet(mel.transpose(-1, -2).unsqueeze(1))
        x = self.cnn(x).transpose(1, 2).flatten(-2)  # (B, T, 3 * 128), the 3 channels outermost
        return self.fc(x)


# --------------------------------------------------------------------------------------------------
# Decoding the salience (numpy, upstream's operations)


def _cents_table() -> np.ndarray:
    # each bin's cents, with 4 zeros on each side (float64, as upstream's)
    return np.pad(CENTS_STEP * np.arange(N_BINS) + CENTS_OFFSET, (WINDOW_RADIUS, WINDOW_RADIUS))


CENTS = _cents_table()


def local_average_cents(salience: np.ndarray, thred: float = 0.05) -> np.ndarray:
    """(frames, 360) salience -> (frames,) cents, float64 (upstream's `to_local_average_cents`; its default
    threshold 0.05, though every caller passes one).

    Per frame: the salience-weighted mean of the cents of the 9 bins centred on the strongest (argmax: the first
    of equal maxima), the salience zero-padded by 4 bins on each side as upstream pads it; 0 where the strongest
    salience is <= thred. The 9-wide windows are gathered at once where upstream loops over frames: the same
    (frames, 9) arrays, the same sums."""
    frames = salience.shape[0]
    strongest = np.argmax(salience, axis=1)
    padded = np.pad(salience, ((0, 0), (WINDOW_RADIUS, WINDOW_RADIUS)))
    # in padded coordinates the window around bin c starts at c (c - 4 + 4) and spans 9 bins
    columns = strongest[:, np.newaxis] + np.arange(2 * WINDOW_RADIUS + 1)
    weights = padded[np.arange(frames)[:, np.newaxis], columns]
    cents = np.sum(weights * CENTS[columns], 1) / np.sum(weights, 1)
    cents[np.max(padded, axis=1) <= thred] = 0
    return cents


def decode(salience: np.ndarray, thred: float = DEFAULT_THRESHOLD) -> np.ndarray:
    """(frames, 360) float32 salience -> (frames,) F0 in Hz, float64; unvoiced frames 0."""
    cents = local_average_cents(salience, thred=thred)
    f0 = 10 * (2 ** (cents / 1200))
    f0[f0 == 10] = 0  # zero cents: below the threshold
    return f0


# --------------------------------------------------------------------------------------------------
# The estimator


class RMVPE(nn.Module):
    """The mel front end, E2E and the decoding, as upstream's RMVPE class runs them (float32)."""

    def __init__(self, config: RMVPEConfig = RMVPEConfig()):
        super().__init__()
        self.config = config
        self.model = E2E(config)

    @property
    def device(self) -> torch.device:
        return self.model.cnn.weight.device

    def mel(self, audio: torch.Tensor) -> torch.Tensor:
        """(batch, samples) 16 kHz audio -> log-mels (batch, 128, frames)."""
        return rmvpe_mel.rmvpe_log_mel(audio)

    def mel2hidden(self, mel: torch.Tensor) -> torch.Tensor:
        """Log-mels (batch, 128, frames) -> salience (batch, frames, 360), float32.

        The mel is zero-padded at the end to a multiple of 32 frames (0 is a log-mel of 1, louder than any
        clamped silence: upstream pads this way, the padded frames are cropped off again, but through the
        convolutions and the GRU's backward direction they still reach the last real frames)."""
        if mel.dim() != 3 or mel.shape[1] != rmvpe_mel.N_MELS or mel.shape[2] < 1:
            raise InputError(f"RMVPE takes log-mels of shape (batch, {rmvpe_mel.N_MELS}, frames), got "
                             f"{tuple(mel.shape)}")
        frames = mel.shape[-1]
        missing = -frames % FRAME_MULTIPLE
        if missing:
            mel = F.pad(mel, (0, missing), mode="constant")
        with torch.inference_mode():
            return self.model(mel.float())[:, :frames]

    def decode(self, hidden: np.ndarray, thred: float = DEFAULT_THRESHOLD) -> np.ndarray:
        """(frames, 360) salience as numpy -> F0 in Hz (frames,), float64."""
        return decode(hidden, thred=thred)

    def _audio(self, audio, dims: int) -> torch.Tensor:
        shape = "(samples,)" if dims == 1 else "(batch, samples)"
        if isinstance(audio, np.ndarray):
            try:
                audio = torch.from_numpy(audio)
            except (TypeError, ValueError):  # a dtype torch lacks, or negative strides
                raise InputError(f"RMVPE takes real 16 kHz audio of shape {shape}, got a numpy array of "
                                 f"{audio.dtype} that torch cannot take; pass float32") from None
        if not isinstance(audio, torch.Tensor):
            raise InputError(f"RMVPE takes real 16 kHz audio of shape {shape}, got {type(audio).__name__}")
        if audio.dim() != dims or audio.is_complex() or audio.dtype == torch.bool:
            raise InputError(f"RMVPE takes real 16 kHz audio of shape {shape}, got {audio.dtype} of shape "
                             f"{tuple(audio.shape)}")
        # upstream converts with .float() (integer samples keep their integer values)
        audio = audio.float().to(self.device)
        if not bool(torch.isfinite(audio).all()):
            raise InputError("the audio given to RMVPE holds NaN or infinite samples")
        return audio

    def infer_from_audio(self, audio, thred: float = DEFAULT_THRESHOLD) -> np.ndarray:
        """One 16 kHz waveform (numpy or tensor, (samples,)) -> F0 in Hz per 10 ms frame: float64 numpy of
        1 + samples // 160 values, 0 where unvoiced. Upstream's `RMVPE.infer_from_audio`."""
        hidden = self.mel2hidden(self.mel(self._audio(audio, 1).unsqueeze(0)))
        return self.decode(hidden.squeeze(0).cpu().numpy(), thred=thred)

    def infer_from_audio_batch(self, audio, thred: float = DEFAULT_THRESHOLD) -> torch.Tensor:
        """(batch, samples) 16 kHz audio -> F0 (batch, frames), a float64 tensor on the model's device (upstream's
        `infer_from_audio_batch`, which Seed-VC's trainer calls; each row decoded alone)."""
        audio = self._audio(audio, 2)
        hidden = self.mel2hidden(self.mel(audio)).cpu().numpy()
        f0 = np.stack([self.decode(row, thred=thred) for row in hidden])
        return torch.from_numpy(f0).to(self.device)


# --------------------------------------------------------------------------------------------------
# Checkpoints

_OPTIONAL = "num_batches_tracked"  # BatchNorm's training counter: unused in eval, absent from some dicts


def checkpoint_layout(config: RMVPEConfig = RMVPEConfig()) -> dict[str, tuple[int, ...]]:
    """Upstream's E2E state dict for `config`: key -> shape (BatchNorm's num_batches_tracked included)."""
    with torch.device("meta"):
        model = E2E(config)
    return {key: tuple(value.shape) for key, value in model.state_dict().items()}


def load_rmvpe(state: Mapping[str, torch.Tensor], config: RMVPEConfig = RMVPEConfig(), device="cpu",
               source: str = "rmvpe.pt") -> RMVPE:
    """RMVPE with the tensors of upstream's E2E state dict (rmvpe.pt), float32 on `device`, in eval mode
    without gradients.

    Keys are strict: a missing, unexpected or misshapen tensor is one CheckpointError naming the first (`source`
    names the file). BatchNorm's `num_batches_tracked` may be absent, as torch's load_state_dict fills it in for
    a plain dict. Floating tensors of any dtype (rmvpe.pt holds float16) are converted to float32 as upstream's
    load_state_dict copies them into its float32 parameters, then into fresh allocations."""
    if not isinstance(state, Mapping):
        raise CheckpointError(f"{source} does not hold a state dict (got {type(state).__name__})")
    layout = checkpoint_layout(config)
    missing = [k for k in layout if k not in state and not k.endswith(_OPTIONAL)]
    unexpected = sorted(set(state) - set(layout))
    if missing or unexpected:
        detail = f"missing {missing[0]}" if missing else f"unexpected {unexpected[0]}"
        raise CheckpointError(f"{source} does not fit RMVPE's E2E{_signature(config)} ({detail}; {len(missing)} "
                              f"missing, {len(unexpected)} unexpected tensors)")
    tensors = {}
    for key, shape in layout.items():
        if key not in state:
            continue
        value = state[key]
        counter = key.endswith(_OPTIONAL)
        if not isinstance(value, torch.Tensor) or tuple(value.shape) != shape or \
                (not counter and not value.is_floating_point()):
            got = f"{value.dtype} of shape {tuple(value.shape)}" if isinstance(value, torch.Tensor) else \
                type(value).__name__
            kind = "a tensor" if counter else "a float tensor"
            raise CheckpointError(f"{source}: {key} should be {kind} of shape {shape}, got {got}")
        tensors[key] = value
    with torch.device("meta"):
        model = RMVPE(config)
    model.to_empty(device=device)  # fresh allocations, filled by copying (as upstream's load_state_dict)
    with torch.no_grad():
        for key, param in model.model.state_dict().items():
            if key in tensors:
                param.copy_(tensors[key])
            else:
                param.zero_()  # an absent num_batches_tracked: torch's default
    return model.eval().requires_grad_(False)


def _count(state: Mapping, prefix: str) -> int:
    """How many numbered children `prefix.<i>.` the state dict has."""
    found = {key[len(prefix):].split(".", 1)[0] for key in state if key.startswith(prefix)}
    return len([i for i in found if i.isdigit()])


def config_from_state(state: Mapping[str, torch.Tensor], source: str = "rmvpe.pt") -> RMVPEConfig:
    """The E2E sizes a state dict was saved with (rmvpe.pt's are the defaults). The stride of the transposed
    convolutions is not in the weights' shapes: it is taken to be rmvpe.pt's (2, 2), which every Seed-VC and RVC
    caller builds."""
    first = state.get("unet.encoder.layers.0.conv.0.conv.0.weight") if isinstance(state, Mapping) else None
    if not isinstance(first, torch.Tensor) or first.dim() != 4:
        raise CheckpointError(f"{source} is no RMVPE state dict (it has no "
                              f"unet.encoder.layers.0.conv.0.conv.0.weight); use rmvpe.pt from "
                              f"lj1995/VoiceConversionWebUI")
    grus = [k for k in state if k.startswith("fc.0.gru.weight_ih_l") and not k.endswith("_reverse")]
    return RMVPEConfig(n_blocks=_count(state, "unet.encoder.layers.0.conv."), n_gru=len(grus) or 1,
                       en_de_layers=_count(state, "unet.encoder.layers."),
                       inter_layers=_count(state, "unet.intermediate.layers."), en_out_channels=int(first.shape[0]))


def load_rmvpe_file(path, config: RMVPEConfig | None = RMVPEConfig(), device="cpu") -> RMVPE:
    """RMVPE from rmvpe.pt (or a .safetensors holding the same state dict); `config` None: the sizes the file
    was saved with (config_from_state)."""
    from mizuoto.nn.tensor_files import read_checkpoint

    state = read_checkpoint(path)
    if config is None:
        config = config_from_state(state, str(Path(path)))
    return load_rmvpe(state, config, device=device, source=str(Path(path)))


def _signature(config: RMVPEConfig) -> str:
    return (f"({config.n_blocks}, {config.n_gru}, {config.kernel_size}, en_de_layers={config.en_de_layers}, "
            f"inter_layers={config.inter_layers}, en_out_channels={config.en_out_channels})")
