"""Qwen3-TTS's 12 Hz codec decoder: 16 codes per frame -> 1920 samples at 24 kHz, native.

Exact to qwen-tts 0.1.1's `Qwen3TTSTokenizerV2Decoder` (with transformers 4.57.3 and its default sdpa
attention): on the same device, thread count and CPU kernel level, float32 output is bit-identical.

    codes (B, 16, T) -> RVQ dequantisation (entry = embedding_sum / clamp(cluster_usage)), summed
    -> causal conv (kernel 3) -> transformer (8 layers, sliding window 72, RoPE, LayerScale)
    -> 2 x (causal ConvTranspose x2 + ConvNeXt) -> conv -> 4 SnakeBeta blocks (x8, x5, x4, x3)
    -> Snake -> conv to 1 channel -> clamp to [-1, 1]

Everything is causal, so upstream decodes long utterances in chunks of 300 frames, each with up to 25
frames of left context that are decoded again and cut from the output (`chunked_decode`). The chunks
and contexts are what fix the output's bits (the transformer only sees frames inside a chunk), so
`decode` chunks exactly as upstream, and `CodecStream` decodes frames as they arrive with the same
rule: its output equals `chunked_decode` with its chunk size, and upstream's default decode when the
chunk size is 300.

Parameter names are upstream's: `load_codec_decoder` loads the `decoder.*` tensors of
`speech_tokenizer/model.safetensors` as they are (271 tensors for the released tokenizer).
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Sequence

import torch
from torch import nn

from mizuoto.core.errors import CheckpointError, InputError

from .codec_config import CodecDecoderConfig, read_config
from .codec_layers import (
    CausalConv1d,
    CausalConvTranspose1d,
    ConvNeXtBlock,
    DecoderBlock,
    SnakeBeta,
    SplitResidualQuantizer,
)
from .codec_transformer import CodecTransformer
from .encoder_weights import assign

CHUNK_SIZE = 300  # frames per chunk in upstream's chunked_decode
LEFT_CONTEXT = 25  # frames of left context decoded again before each chunk but the first
PREFIX = "decoder."  # the decoder's tensors in speech_tokenizer/model.safetensors
WEIGHTS = "model.safetensors"


class CodecDecoder(nn.Module):
    def __init__(self, config: CodecDecoderConfig):
        super().__init__()
        self.config = config
        self.samples_per_frame = config.samples_per_frame
        self.pre_transformer = CodecTransformer(config)
        self.quantizer = SplitResidualQuantizer(config.num_quantizers, config.codebook_dim // 2,
                                                config.codebook_size, config.codebook_dim)
        self.pre_conv = CausalConv1d(config.codebook_dim, config.latent_dim, kernel_size=3)
        latent = config.latent_dim
        self.upsample = nn.ModuleList(
            nn.ModuleList([CausalConvTranspose1d(latent, latent, ratio, ratio), ConvNeXtBlock(latent)])
            for ratio in config.upsampling_ratios)
        widths = [config.decoder_dim // 2 ** i for i in range(len(config.upsample_rates) + 1)]
        self.decoder = nn.ModuleList([
            CausalConv1d(latent, config.decoder_dim, 7),
            *(DecoderBlock(widths[i], widths[i + 1], rate) for i, rate in enumerate(config.upsample_rates)),
            SnakeBeta(widths[-1]),
            CausalConv1d(widths[-1], 1, 7),
        ])

    # -- one window ----------------------------------------------------------------------------------

    def forward(self, codes: torch.Tensor, tables: list[torch.Tensor] | None = None) -> torch.Tensor:
        """codes (B, Q, T) -> wave (B, 1, T * samples_per_frame) in [-1, 1], the T frames decoded as one
        sequence. `tables` (the dequantisation entries, `quantizer.tables()`) saves recomputing them
        for every chunk; they are the same bits either way."""
        hidden = self.quantizer.decode(codes, tables)
        hidden = self.pre_conv(hidden).transpose(1, 2)
        hidden = self.pre_transformer(hidden).permute(0, 2, 1)
        for stage in self.upsample:
            for layer in stage:
                hidden = layer(hidden)
        for layer in self.decoder:
            hidden = layer(hidden)
        return hidden.clamp(min=-1, max=1)

    # -- whole utterances ----------------------------------------------------------------------------

    def chunked_decode(self, codes: torch.Tensor, chunk_size: int = CHUNK_SIZE,
                       left_context: int = LEFT_CONTEXT, window: Callable | None = None) -> torch.Tensor:
        """codes (B, Q, T) -> (B, 1, T * samples_per_frame): upstream's chunked_decode. Chunks of
        `chunk_size` frames from the start; each but the first is decoded after min(left_context,
        start) earlier frames, whose samples are cut. `window` decodes one window instead of this
        module's forward (its compiled form, under compute.compile)."""
        window = window or self
        tables = self.quantizer.tables()
        waves, start, total = [], 0, codes.shape[-1]
        while start < total:
            end = min(start + chunk_size, total)
            context = min(left_context, start)
            wave = window(codes[..., start - context:end], tables)
            waves.append(wave[..., context * self.samples_per_frame:])
            start = end
        if not waves:
            return codes.new_zeros((codes.shape[0], 1, 0), dtype=self.dtype)
        return torch.cat(waves, dim=-1)

    @torch.no_grad()
    def decode(self, codes: torch.Tensor, chunk_size: int = CHUNK_SIZE,
               left_context: int = LEFT_CONTEXT, window: Callable | None = None) -> torch.Tensor:
        """codes (B, Q, T) long -> wave (B, T * samples_per_frame) float32, chunked as upstream."""
        codes = self.check_codes(codes)
        _check_chunking(chunk_size, left_context)
        return self.chunked_decode(codes, chunk_size, left_context, window)[:, 0].float()

    @torch.no_grad()
    def decode_utterances(self, codes: Sequence[torch.Tensor] | torch.Tensor,
                          window: Callable | None = None) -> list[torch.Tensor]:
        """Upstream's tokenizer decode: a list of (T_i, Q) code tensors (or one (B, T, Q) tensor padded
        with -1 at the end) -> one float32 wave of T_i * decode_upsample_rate samples per utterance.

        The utterances are padded into one batch (padding decoded as code 0, as upstream does) and
        decoded together, then each wave is cut to its own length."""
        if isinstance(codes, torch.Tensor):
            if codes.dim() == 2:
                codes = codes[None]
            if codes.dim() != 3:
                raise InputError(f"codes must be (T, Q) or (B, T, Q), got shape {tuple(codes.shape)}")
            padded = codes.to(device=self.device)  # (an integer dtype is checked below)
            lengths = (padded[..., 0] > -1).sum(1).tolist()  # upstream counts frames this way
        else:
            items = [torch.as_tensor(c) for c in codes]
            if not items or any(c.dim() != 2 for c in items):
                raise InputError("codes must be a non-empty list of (frames, quantizers) tensors")
            if any(c.numel() and int(c.min()) < 0 for c in items):
                raise InputError("codes of an utterance must be non-negative (-1 only pads a batch tensor)")
            lengths = [c.shape[0] for c in items]
            padded = nn.utils.rnn.pad_sequence([c.to(self.device) for c in items], batch_first=True,
                                               padding_value=-1)
        waves = self.chunked_decode(self.check_codes(padded.clamp(min=0).transpose(1, 2)), window=window)[:, 0]
        rate = self.config.decode_upsample_rate
        return [wave[: n * rate].float() for wave, n in zip(waves, lengths, strict=True)]

    def stream(self, batch: int = 1, chunk_size: int = CHUNK_SIZE, left_context: int = LEFT_CONTEXT,
               window: Callable | None = None) -> "CodecStream":
        """A decoder for frames as they arrive (see CodecStream)."""
        return CodecStream(self, batch, chunk_size, left_context, window)

    # -- checks and properties -----------------------------------------------------------------------

    def check_codes(self, codes: torch.Tensor) -> torch.Tensor:
        """Raise InputError unless codes is (B, num_quantizers, T) of integers in [0, codebook_size)."""
        q = self.config.num_quantizers
        if not isinstance(codes, torch.Tensor) or codes.dim() != 3 or codes.shape[1] != q:
            shape = tuple(codes.shape) if isinstance(codes, torch.Tensor) else type(codes).__name__
            raise InputError(f"codes must be (batch, {q} quantizers, frames), got {shape}")
        if codes.dtype.is_floating_point or codes.dtype.is_complex or codes.dtype == torch.bool:
            raise InputError(f"codes must be integers, got {codes.dtype}")
        if codes.numel():
            low, high = (int(v) for v in torch.aminmax(codes))
            if low < 0 or high >= self.config.codebook_size:
                raise InputError(f"codes must lie in [0, {self.config.codebook_size}), got values from {low} "
                                 f"to {high}")
        return codes.to(device=self.device, dtype=torch.long)

    @property
    def device(self) -> torch.device:
        return self.pre_conv.conv.weight.device

    @property
    def dtype(self) -> torch.dtype:
        return self.pre_conv.conv.weight.dtype


def _check_chunking(chunk_size: int, left_context: int) -> None:
    if chunk_size < 1 or left_context < 0:
        raise InputError(f"chunk_size must be at least 1 and left_context at least 0, got {chunk_size} and "
                         f"{left_context}")


class CodecStream:
    """Decodes code frames as they come, chunk by chunk with upstream's left context.

    `push(codes)` takes the next (B, Q, n) frames and returns the samples of every chunk completed so
    far ((B, 0) when none is); `flush()` decodes what remains. Everything returned, concatenated, equals
    `decoder.chunked_decode(all codes, chunk_size, left_context)` bit for bit, whatever the sizes pushed:
    with the default 300 frames that is upstream's decode; smaller chunks trade identical-to-upstream
    output for latency (each chunk still sees `left_context` frames before it). Only the context and the
    pending frames are kept. The dequantisation tables are computed once, when the stream starts.
    """

    def __init__(self, decoder: CodecDecoder, batch: int = 1, chunk_size: int = CHUNK_SIZE,
                 left_context: int = LEFT_CONTEXT, window: Callable | None = None):
        _check_chunking(chunk_size, left_context)
        self.decoder, self.chunk_size, self.left_context = decoder, chunk_size, left_context
        self.window = window or decoder
        q = decoder.config.num_quantizers
        self.held = torch.zeros((batch, q, 0), dtype=torch.long, device=decoder.device)
        self.context = 0  # leading frames of `held` already decoded (the next chunk's left context)
        self.emitted = 0  # frames decoded so far
        with torch.no_grad():
            self.tables = decoder.quantizer.tables()

    @property
    def pending(self) -> int:
        return self.held.shape[-1] - self.context

    @torch.no_grad()
    def push(self, codes: torch.Tensor) -> torch.Tensor:
        if codes.dim() != 3 or codes.shape[:2] != self.held.shape[:2]:
            raise InputError(f"stream codes must be (batch, quantizers, frames) = {tuple(self.held.shape[:2])} x n, "
                             f"got {tuple(codes.shape)}")
        self.held = torch.cat([self.held, codes.to(self.held.device, torch.long)], dim=-1)
        waves = []
        while self.pending >= self.chunk_size:
            waves.append(self._decode(self.chunk_size))
        return self._join(waves)

    @torch.no_grad()
    def flush(self) -> torch.Tensor:
        """The samples of the frames still pending (a last, shorter chunk)."""
        return self._join([self._decode(self.pending)] if self.pending else [])

    def _decode(self, frames: int) -> torch.Tensor:
        end = self.context + frames
        wave = self.window(self.held[..., :end], self.tables)[:, 0, self.context * self.decoder.samples_per_frame:]
        self.emitted += frames
        keep = min(self.left_context, self.emitted)  # upstream: min(left_context, chunk start)
        self.held = self.held[..., end - keep:]
        self.context = keep
        return wave.float()

    def _join(self, waves: list[torch.Tensor]) -> torch.Tensor:
        if not waves:
            return torch.zeros((self.held.shape[0], 0), device=self.held.device)
        return waves[0] if len(waves) == 1 else torch.cat(waves, dim=-1)


# ---------------------------------------------------------------------------------------------------
# Loading


def speech_tokenizer_folder(folder: Path | str) -> Path:
    """The folder holding the codec: `folder` itself, or its `speech_tokenizer/` (a Qwen3-TTS model)."""
    folder = Path(folder)
    if not folder.is_dir():
        raise CheckpointError(f"speech tokenizer folder {folder} does not exist")
    inner = folder / "speech_tokenizer"
    # A Qwen3-TTS model folder's own config.json is the talker's; its codec is in speech_tokenizer/.
    return inner if (inner / "config.json").is_file() else folder


def read_decoder_weights(path: Path) -> dict[str, torch.Tensor]:
    """The `decoder.*` tensors of a speech tokenizer's safetensors file, without the prefix."""
    if not path.is_file():
        raise CheckpointError(f"{path.parent} has no {path.name}: the speech tokenizer's weights are missing")
    from safetensors import SafetensorError, safe_open

    try:
        with safe_open(str(path), framework="pt", device="cpu") as file:
            return {key[len(PREFIX):]: file.get_tensor(key) for key in file.keys() if key.startswith(PREFIX)}
    except (SafetensorError, OSError, RuntimeError) as exc:
        reason = " ".join(str(exc).split())[:120]
        raise CheckpointError(f"{path} is not a readable safetensors file ({reason})") from None


def load_codec_decoder(folder: Path | str, device="cpu", dtype: torch.dtype = torch.float32) -> CodecDecoder:
    """The codec decoder of a speech tokenizer folder (config.json + model.safetensors), or of a
    Qwen3-TTS model folder holding one in `speech_tokenizer/`, on `device` in `dtype`."""
    folder = speech_tokenizer_folder(folder)
    config = read_config(folder)
    path = folder / WEIGHTS
    state = read_decoder_weights(path)
    if not state:
        raise CheckpointError(f"{path} holds no decoder.* tensors: not a Qwen3-TTS speech tokenizer")
    # Built on the meta device: no random initialisation (it would draw from the global generator).
    with torch.device("meta"):
        model = CodecDecoder(config)
    # The file's own tensors become the parameters, as transformers leaves them when no cast or move is
    # needed: they sit at the file's offsets, not 64-byte aligned, and on the CPU a one-frame window's
    # matrix-vector products round differently at another alignment (1e-7; longer windows do not care).
    assign(model, state, PREFIX, f"{path} (with its config.json)")
    model.pre_transformer.reset_buffers()
    model = model.to(device=device, dtype=dtype)  # a cast or a move copies, as it does upstream
    model.pre_transformer.reset_buffers()  # float32 RoPE frequencies, as upstream keeps them
    return model.eval().requires_grad_(False)
