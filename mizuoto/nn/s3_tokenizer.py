"""CosyVoice's S3 speech tokenizers v2 and v3: 16 kHz speech -> 25 speech tokens a second, 6561 codes.

Exact to `s3tokenizer` 0.3.0 (PyPI, Apache-2.0; read, not copied): `model_v2.py::S3TokenizerV2` and
`model_v3.py::S3TokenizerV3`, its `utils.log_mel_spectrogram`, `make_non_pad_mask`, `mask_to_bias`, `padding` and
`merge_tokenized_segments`. CosyVoice 2 runs the released `speech_tokenizer_v2.onnx`, CosyVoice 3
`speech_tokenizer_v3.onnx`, through onnxruntime; s3tokenizer is the PyTorch network those files hold, and the
files' weights load here (mizuoto/nn/s3_tokenizer_weights.py). ONNX Runtime fuses and reorders the arithmetic, so
against the ONNX files only the tokens can agree, not the floats (ENGINES.md §1).

v2 and v3 are one network: v3 only has 12 blocks where v2 has 6 (and its ONNX file names its weights another way).
Data flow, log-mel (batch, n_mels, frames T) and lengths -> tokens (batch, T4) and lengths:
    conv1: kernel 3, stride 2, padding 1, GELU (input masked to each item's frames) -> (batch, n_state, T2)
    conv2: the same on n_state channels -> T4 = ceil(T / 4) positions (25 a second), masked again
    blocks: pre-norm transformer blocks; each attention is FSMN attention: q, k, v projections (k without bias),
        rotary positions on q and k (head_dim 64, base 10000, both halves of the head rotated as one 64-wide
        table), q and k each scaled by head_dim^-1/4, scores plus a -1e10 bias on padded keys, softmax in float32;
        beside it the "memory", a depthwise convolution (kernel 31, centred, no bias) over the masked values, plus
        those values, masked; the block adds out(attention) + memory, then a GELU MLP (4 x n_state)
    FSQ quantiser: a projection to 8 numbers, tanh, x 0.999, rounded to {-1, 0, 1}, + 1, read as 8 base-3 digits
        (digit i weighs 3^i) -> a code in [0, 6561).
The attention is handwritten, not an accel site: the scale sits on q and k separately (d^-1/4 each), which no
fused kernel does with the same rounding, and upstream's eager path (use_sdpa=False, what s3tokenizer runs by
default) is the reference. Every tensor keeps upstream's memory layout (the residual stream stays a permuted view
of conv2's output, as upstream's), so the same CPU kernels run on the same strides.

`quantize(mel, mel_len)` is upstream's: clips of at most 3000 frames (30 s) go through the network at once; when the
batch is longer than 3000 frames and an item's length exceeds it, every item becomes 30 s windows (a stride of
26 s, each padded with zeros to 3000 frames, the short items one window each), run as one batch, and each long
item's window tokens are merged, 50 tokens (2 s) dropped at each inner seam. The short path reads nothing back
from the device; the long one reads the lengths and tokens, as upstream.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import torch
import torch.nn.functional as F
from torch import nn

from mizuoto.audio.mel import librosa_slaney_bank
from mizuoto.core.errors import InputError

# The front end: openai-whisper's log-mel (s3tokenizer ships openai-whisper's filter banks; librosa's Slaney bank
# for 16 kHz and a 400-point FFT, which mizuoto.audio.mel computes bit for bit)
SAMPLE_RATE = 16000
N_FFT = 400
HOP_LENGTH = 160
N_MELS = 128

# The network's fixed parts (not configurable upstream either)
HEAD_DIM = 64  # the rotary table is 64 wide (precompute_freqs_cis(64, ...)): every head must be 64 wide
ROPE_BASE = 10000.0
ROPE_POSITIONS = 2048  # the table's rows: at most 2048 positions (8192 frames) in one pass
FSMN_KERNEL = 31
LEVELS = 3  # FSQ: 8 digits of {0, 1, 2}
DIGITS = 8
CODEBOOK_SIZE = LEVELS ** DIGITS  # 6561
FSQ_SCALE = 0.9990000128746033  # upstream's literal (0.999 in float32)
MASK_BIAS = -1.0e10

# Long audio (quantize): 30 s windows every 26 s, 2 s dropped on each side of an inner seam
WINDOW_FRAMES = 30 * SAMPLE_RATE // HOP_LENGTH  # 3000
OVERLAP_FRAMES = 4 * SAMPLE_RATE // HOP_LENGTH  # 400
STRIDE_FRAMES = WINDOW_FRAMES - OVERLAP_FRAMES  # 2600
TOKEN_RATE = 25
SEAM_TOKENS = (4 // 2) * TOKEN_RATE  # 50


@dataclass(frozen=True)
class S3TokenizerConfig:
    """The network's sizes. The released files: n_state 1280, 20 heads, 6 blocks (v2) or 12 (v3); the weights tell
    all but the heads, which follow from the fixed head width (n_state // 64)."""

    n_mels: int = N_MELS
    n_state: int = 1280
    n_head: int = 20
    n_layer: int = 6

    def __post_init__(self):
        for name in ("n_mels", "n_state", "n_head", "n_layer"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise InputError(f"S3 tokenizer {name} must be a positive integer, not {value!r}")
        if self.n_state != self.n_head * HEAD_DIM:
            raise InputError(f"S3 tokenizer heads must be {HEAD_DIM} wide (its rotary table is): n_state "
                             f"{self.n_state} with {self.n_head} heads gives {self.n_state / self.n_head:g}")


V2 = S3TokenizerConfig(n_layer=6)  # speech_tokenizer_v2.onnx (CosyVoice 2)
V3 = S3TokenizerConfig(n_layer=12)  # speech_tokenizer_v3.onnx (CosyVoice 3)


# ---------------------------------------------------------------------------------------------------
# The front end


@lru_cache(maxsize=4)
def _filters(n_mels: int) -> torch.Tensor:
    return torch.from_numpy(librosa_slaney_bank(SAMPLE_RATE, N_FFT, n_mels))


def log_mel(audio: torch.Tensor, n_mels: int = N_MELS, padding: int = 0) -> torch.Tensor:
    """s3tokenizer's log_mel_spectrogram (openai-whisper's): 16 kHz float32 audio (samples,) or (batch, samples)
    -> (n_mels, frames) or (batch, n_mels, frames), frames = (samples + padding) // 160. A centred STFT (400
    points, periodic Hann), the last frame dropped, power, the mel projection, log10 of max(x, 1e-10), a floor at
    the maximum minus 8 (the maximum of the whole input: a batch shares one), then (x + 4) / 4. CosyVoice computes
    it per clip, on (1, samples)."""
    if not torch.is_tensor(audio) or not audio.is_floating_point() or audio.dim() not in (1, 2):
        raise InputError("the S3 tokenizer's log-mel takes a float 16 kHz waveform (samples,) or (batch, samples); "
                         f"got {getattr(audio, 'shape', type(audio).__name__)}")
    if n_mels not in (80, 128):
        raise InputError(f"the S3 tokenizer's log-mel has filter banks for 80 and 128 bands, not {n_mels}")
    if padding > 0:
        audio = F.pad(audio, (0, padding))
    if audio.shape[-1] <= N_FFT // 2:  # torch.stft's reflection needs more than half a window
        raise InputError(f"the S3 tokenizer's log-mel needs more than {N_FFT // 2} samples; got {audio.shape[-1]}")
    window = torch.hann_window(N_FFT).to(audio.device)
    stft = torch.stft(audio, N_FFT, HOP_LENGTH, window=window, return_complex=True)
    power = stft[..., :-1].abs() ** 2
    mel = _filters(n_mels).to(audio.device) @ power
    log_spec = torch.clamp(mel, min=1e-10).log10()
    log_spec = torch.maximum(log_spec, log_spec.max() - 8.0)
    return (log_spec + 4.0) / 4.0


def pad_mels(mels: list[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """s3tokenizer's `padding`: (n_mels, frames_i) log-mels -> (batch, n_mels, longest) zero-padded and the int32
    frame counts, what `quantize` takes."""
    if not mels or any(m.dim() != 2 or m.shape[0] != mels[0].shape[0] for m in mels):
        raise InputError("pad_mels takes a non-empty list of (n_mels, frames) log-mels with the same n_mels")
    lengths = torch.tensor([m.shape[1] for m in mels], dtype=torch.int32)
    padded = nn.utils.rnn.pad_sequence([m.t() for m in mels], batch_first=True, padding_value=0)
    return padded.transpose(1, 2), lengths


# ---------------------------------------------------------------------------------------------------
# The network


def non_pad_mask(lengths: torch.Tensor, max_len: int) -> torch.Tensor:
    """(batch, max_len) bool, True on each item's first lengths[i] positions (no host read)."""
    positions = torch.arange(0, max_len, dtype=torch.int64, device=lengths.device)
    return ~(positions.unsqueeze(0).expand(lengths.size(0), max_len) >= lengths.unsqueeze(-1))


@lru_cache(maxsize=1)
def _rotary_table() -> tuple[torch.Tensor, torch.Tensor]:
    """(ROPE_POSITIONS, 64) cos and sin on the CPU, computed as upstream's precompute_freqs_cis does (through
    torch.polar, so the same kernels round them), both halves of the head sharing the 32 frequencies."""
    freqs = 1.0 / (ROPE_BASE ** (torch.arange(0, HEAD_DIM, 2)[:(HEAD_DIM // 2)].float() / HEAD_DIM))
    t = torch.arange(ROPE_POSITIONS, device=freqs.device)
    freqs = torch.outer(t, freqs).float()
    table = torch.polar(torch.ones_like(freqs), freqs)
    table = torch.view_as_real(torch.cat((table, table), dim=-1))
    return table[:, :, 0].contiguous(), table[:, :, 1].contiguous()


def rotary(positions: int, device, dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin (1, positions, 1, 64) for (batch, positions, heads, 64) queries and keys."""
    cos, sin = _rotary_table()
    cos = cos[:positions].unsqueeze(0).unsqueeze(2).to(device=device, dtype=dtype)
    sin = sin[:positions].unsqueeze(0).unsqueeze(2).to(device=device, dtype=dtype)
    return cos, sin


def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotary positions on (batch, positions, heads, 64): the second half negated before the first (rotate_half)."""
    half = x.shape[-1] // 2
    turned = torch.cat((-x[:, :, :, half:], x[:, :, :, :half]), dim=-1)
    return x * cos + turned * sin


class LayerNorm(nn.LayerNorm):
    """Upstream's LayerNorm: computed in float32, returned in the input's dtype."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.layer_norm(x.float(), self.normalized_shape, self.weight.float(), self.bias.float(),
                            self.eps).type(x.dtype)


class FSMNAttention(nn.Module):
    """FSMN multi-head attention (upstream's FSMNMultiHeadAttention / MultiHeadAttentionV3): (batch, T, n_state),
    the key bias (batch, 1, 1, T), the padding mask (batch, T, 1) and the rotary table -> (batch, T, n_state)."""

    def __init__(self, n_state: int, n_head: int):
        super().__init__()
        self.n_head = n_head
        self.query = nn.Linear(n_state, n_state)
        self.key = nn.Linear(n_state, n_state, bias=False)
        self.value = nn.Linear(n_state, n_state)
        self.out = nn.Linear(n_state, n_state)
        self.fsmn_block = nn.Conv1d(n_state, n_state, FSMN_KERNEL, stride=1, padding=0, groups=n_state, bias=False)
        self.left_padding = (FSMN_KERNEL - 1) // 2
        self.right_padding = FSMN_KERNEL - 1 - self.left_padding

    def memory(self, values: torch.Tensor, mask_pad: torch.Tensor) -> torch.Tensor:
        """The FSMN memory: a depthwise convolution over the masked values, plus them, masked."""
        batch, positions = values.shape[:2]
        inputs = values.view(batch, positions, -1)
        if mask_pad.size(2) > 0:
            inputs = inputs * mask_pad
        x = F.pad(inputs.transpose(1, 2), (self.left_padding, self.right_padding), "constant", 0.0)
        x = self.fsmn_block(x).transpose(1, 2)
        x += inputs
        return x * mask_pad

    def forward(self, x: torch.Tensor, bias: torch.Tensor, mask_pad: torch.Tensor, cos: torch.Tensor,
                sin: torch.Tensor) -> torch.Tensor:
        q, k, v = self.query(x), self.key(x), self.value(x)
        width = q.shape[2]
        scale = (width // self.n_head) ** -0.25
        q = q.view(*q.shape[:2], self.n_head, -1)
        k = k.view(*k.shape[:2], self.n_head, -1)
        v = v.view(*v.shape[:2], self.n_head, -1)
        q, k = rotate(q, cos, sin), rotate(k, cos, sin)
        memory = self.memory(v, mask_pad)
        q = q.permute(0, 2, 1, 3) * scale
        v = v.permute(0, 2, 1, 3)
        k = k.permute(0, 2, 3, 1) * scale
        scores = (q @ k + bias).float()
        weights = torch.softmax(scores, dim=-1).to(q.dtype)
        attended = (weights @ v).permute(0, 2, 1, 3).flatten(start_dim=2)
        return self.out(attended) + memory


class Block(nn.Module):
    """A pre-norm block: x + attention(attn_ln(x)), then x + mlp(mlp_ln(x))."""

    def __init__(self, n_state: int, n_head: int):
        super().__init__()
        self.attn = FSMNAttention(n_state, n_head)
        self.attn_ln = LayerNorm(n_state, eps=1e-5)
        self.mlp = nn.Sequential(nn.Linear(n_state, n_state * 4), nn.GELU(), nn.Linear(n_state * 4, n_state))
        self.mlp_ln = LayerNorm(n_state)

    def forward(self, x, bias, mask_pad, cos, sin):
        x = x + self.attn(self.attn_ln(x), bias, mask_pad, cos, sin)
        return x + self.mlp(self.mlp_ln(x))


def _downsampled(length, stride: int = 2):
    """Positions after a kernel-3, padding-1 convolution of `stride` (a tensor of lengths or an int)."""
    return (length + 2 - 1 * (3 - 1) - 1) // stride + 1


class AudioEncoder(nn.Module):
    """Upstream's AudioEncoderV2 / V3: log-mel (batch, n_mels, T) and lengths -> (batch, ceil(T / 4), n_state) and
    the lengths after both convolutions."""

    def __init__(self, config: S3TokenizerConfig):
        super().__init__()
        self.conv1 = nn.Conv1d(config.n_mels, config.n_state, kernel_size=3, stride=2, padding=1)
        self.conv2 = nn.Conv1d(config.n_state, config.n_state, kernel_size=3, stride=2, padding=1)
        self.blocks = nn.ModuleList([Block(config.n_state, config.n_head) for _ in range(config.n_layer)])

    def forward(self, x: torch.Tensor, x_len: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        frames = x.shape[-1]
        mask = non_pad_mask(x_len, frames).unsqueeze(1)
        x = F.gelu(self.conv1(x * mask))
        x_len, frames = _downsampled(x_len), _downsampled(frames)
        mask = non_pad_mask(x_len, frames).unsqueeze(1)
        x = F.gelu(self.conv2(x * mask))
        x_len, frames = _downsampled(x_len), _downsampled(frames)
        mask = non_pad_mask(x_len, frames).unsqueeze(1)
        x = x.permute(0, 2, 1)  # a view: the residual stream keeps conv2's layout, as upstream's
        mask_pad = mask.transpose(1, 2)
        bias = (1.0 - mask.to(x.dtype)) * MASK_BIAS
        cos, sin = rotary(x.size(1), x.device, x.dtype)
        for block in self.blocks:
            x = block(x, bias.unsqueeze(1), mask_pad, cos, sin)
        return x, x_len


class FSQCodebook(nn.Module):
    """The FSQ quantiser's one layer (upstream's `quantizer._codebook`): project_down to 8 digits."""

    def __init__(self, n_state: int):
        super().__init__()
        self.project_down = nn.Linear(n_state, DIGITS)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        """(batch, T, n_state) -> int32 codes (batch, T)."""
        batch, positions = hidden.shape[:2]
        h = self.project_down(hidden.reshape(-1, hidden.shape[-1])).float()
        h = (h.tanh() * FSQ_SCALE).round() + 1
        powers = torch.pow(LEVELS, torch.arange(DIGITS, device=hidden.device, dtype=h.dtype))
        return torch.sum(h * powers.unsqueeze(0), dim=-1).reshape(batch, positions).int()


class FSQuantizer(nn.Module):
    def __init__(self, n_state: int):
        super().__init__()
        self._codebook = FSQCodebook(n_state)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return self._codebook(hidden)


class S3Tokenizer(nn.Module):
    """S3 tokenizer v2 / v3 (upstream's S3TokenizerV2 / S3TokenizerV3, the same network): parameter names are
    upstream's, so s3tokenizer's state dicts load strictly (mizuoto/nn/s3_tokenizer_weights.py)."""

    def __init__(self, config: S3TokenizerConfig = V2):
        super().__init__()
        self.config = config
        self.encoder = AudioEncoder(config)
        self.quantizer = FSQuantizer(config.n_state)
        self.eval()

    def _check(self, mel: torch.Tensor, mel_len: torch.Tensor):
        n_mels = self.config.n_mels
        if not torch.is_tensor(mel) or mel.dim() != 3 or mel.shape[1] != n_mels or not mel.is_floating_point():
            raise InputError(f"the S3 tokenizer takes float log-mels (batch, {n_mels}, frames); got "
                             f"{getattr(mel, 'shape', type(mel).__name__)}")
        if mel.shape[0] == 0 or mel.shape[2] == 0:
            raise InputError(f"the S3 tokenizer needs at least one clip of at least one frame; got {tuple(mel.shape)}")
        if not torch.is_tensor(mel_len) or mel_len.dim() != 1 or mel_len.shape[0] != mel.shape[0] \
                or mel_len.is_floating_point() or mel_len.is_complex() or mel_len.dtype == torch.bool:
            raise InputError(f"the S3 tokenizer takes integer lengths (batch,) = ({mel.shape[0]},) beside the "
                             f"log-mels; got {getattr(mel_len, 'shape', type(mel_len).__name__)}")

    def encode(self, mel: torch.Tensor, mel_len: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The encoder's output (batch, ceil(frames / 4), n_state) and its lengths, in one pass."""
        self._check(mel, mel_len)
        if _downsampled(_downsampled(mel.shape[2])) > ROPE_POSITIONS:
            raise InputError(f"the S3 tokenizer runs at most {4 * ROPE_POSITIONS} frames in one pass (its rotary "
                             f"table); got {mel.shape[2]}: cut the padding or the clip")
        return self.encoder(mel, mel_len)

    @torch.inference_mode()
    def quantize(self, mel: torch.Tensor, mel_len: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Tokens (batch, T4) and their counts (batch,), as upstream's quantize: int32 tokens and lengths of
        mel_len's dtype when no item is longer than 3000 frames; otherwise 30 s windows merged, int64 both."""
        self._check(mel, mel_len)
        if mel.shape[2] > WINDOW_FRAMES and bool((mel_len > WINDOW_FRAMES).any()):
            return self._quantize_windows(mel, mel_len)
        hidden, lengths = self.encode(mel, mel_len)
        return self.quantizer(hidden), lengths

    forward = quantize

    def _quantize_windows(self, mel: torch.Tensor, mel_len: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        sizes = [int(n) for n in mel_len.tolist()]
        segments, counts, owners = [], [], []  # owners: (item, whether it is long)
        for item, size in enumerate(sizes):
            long = size > WINDOW_FRAMES
            starts = range(0, size, STRIDE_FRAMES) if long else [0]
            for start in starts:
                segment = mel[item, :, start:min(start + WINDOW_FRAMES, size)]
                count = segment.shape[1]
                if count < WINDOW_FRAMES:
                    segment = F.pad(segment, (0, WINDOW_FRAMES - count))
                segments.append(segment)
                counts.append(torch.tensor(count, device=mel.device))
                owners.append((item, long))
        hidden, lengths = self.encode(torch.stack(segments), torch.stack(counts))
        codes = self.quantizer(hidden)
        found: dict[int, list[list[int]]] = {}
        for index, (item, _) in enumerate(owners):
            found.setdefault(item, []).append(codes[index, :int(lengths[index])].tolist())
        merged = {item: merge_windows(windows) if sizes[item] > WINDOW_FRAMES else windows[0]
                  for item, windows in found.items()}
        longest = max(len(tokens) for tokens in merged.values())
        out = torch.zeros(len(sizes), longest, dtype=torch.long, device=mel.device)
        out_len = torch.zeros(len(sizes), dtype=torch.long, device=mel.device)
        for item, tokens in merged.items():
            out[item, :len(tokens)] = torch.tensor(tokens, dtype=torch.long, device=mel.device)
            out_len[item] = len(tokens)
        return out, out_len


def merge_windows(windows: list[list[int]]) -> list[int]:
    """upstream's merge_tokenized_segments(overlap=4, token_rate=25): each window's tokens with 50 dropped at
    each inner seam (none before the first window, none after the last)."""
    merged = []
    for i, tokens in enumerate(windows):
        left = 0 if i == 0 else SEAM_TOKENS
        right = -SEAM_TOKENS if i != len(windows) - 1 else len(tokens)
        merged.extend(tokens[left:right])
    return merged


def speech_tokens(model: S3Tokenizer, wave_16k: torch.Tensor) -> torch.Tensor:
    """(1, tokens) int32: one 16 kHz clip ((samples,) or (1, samples)) as CosyVoice's frontend tokenizes it: the
    128-band log-mel of (1, samples), all its frames as the length."""
    wave = wave_16k if wave_16k.dim() == 2 else wave_16k.reshape(1, -1)
    if wave.shape[0] != 1:
        raise InputError(f"speech_tokens takes one mono clip; got shape {tuple(wave_16k.shape)}")
    mel = log_mel(wave, model.config.n_mels)
    codes, _ = model.quantize(mel, torch.tensor([mel.shape[2]], dtype=torch.int32, device=mel.device))
    return codes
