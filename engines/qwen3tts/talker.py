"""The talker: a Qwen3 decoder over text and codec embeddings that draws codebook 0 of each frame.

Upstream: `Qwen3TTSTalkerForConditionalGeneration`. Its inputs are sums of embeddings: text token ids
go through `text_embedding` and the `text_projection` MLP into the talker's width, codec ids (codes,
control codes, speakers, languages) through `codec_embedding`; `codec_head` scores the codec ids.

Its rotary embedding is interleaved multimodal RoPE (`mrope_section`), but for text and codec
positions all three position streams are equal, so every section rotates by the same angle and it is
exactly the 1-D RoPE of the shared QwenDecoder (cos/sin computed by the same expression per position).

A frame's input (after the prefill) is the sum of the embeddings of its G codes (codebook 0 through
`codec_embedding`, codebook i through the predictor's table i-1, concatenated then summed over the
codebook axis, as upstream does) plus the next text embedding, or the tts_pad embedding once the text
is used up.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from mizuoto.nn.ops import Linear
from mizuoto.nn.qwen import transformers_sdpa
from mizuoto.nn.rotary import inverse_frequencies
from mizuoto.runtime import accel

from .config import TalkerConfig
from .predictor import CodePredictor, sited_decoder

ATTN = accel.Site("qwen3tts.talker", reference=transformers_sdpa, approx_ok=False)


class TextProjection(nn.Module):
    """upstream's `Qwen3TTSTalkerResizeMLP`: fc2(silu(fc1(x))), both with bias."""

    def __init__(self, input_size: int, intermediate_size: int, output_size: int):
        super().__init__()
        self.linear_fc1 = Linear(input_size, intermediate_size, bias=True)
        self.linear_fc2 = Linear(intermediate_size, output_size, bias=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear_fc2(F.silu(self.linear_fc1(x)))


class Talker(nn.Module):
    """Parameter names follow upstream's `talker.*` (checkpoint.py maps `model.layers`/`model.norm` to
    `decoder.` and `model.codec_embedding`/`model.text_embedding` to the attributes of those names);
    the code predictor lives inside it, as upstream's does."""

    def __init__(self, config: TalkerConfig):
        super().__init__()
        self.config = config
        hidden = config.decoder.hidden_size
        self.decoder = sited_decoder(config.decoder.qwen(), ATTN)
        self.codec_embedding = nn.Embedding(config.vocab_size, hidden)
        self.text_embedding = nn.Embedding(config.text_vocab_size, config.text_hidden_size)
        self.text_projection = TextProjection(config.text_hidden_size, config.text_hidden_size, hidden)
        self.codec_head = Linear(hidden, config.vocab_size, bias=False)
        self.code_predictor = CodePredictor(config.predictor, hidden)

    @property
    def hidden_size(self) -> int:
        return self.config.decoder.hidden_size

    @property
    def device(self) -> torch.device:
        return self.codec_head.weight.device

    @property
    def dtype(self) -> torch.dtype:
        return self.codec_head.weight.dtype

    def reset_buffers(self) -> None:
        """Recompute the rotary frequencies (not stored in checkpoints) on the weights' device, in
        float32 as upstream keeps them; needed after building on the meta device."""
        for decoder, shape in ((self.decoder, self.config.decoder), (self.code_predictor.decoder,
                                                                     self.config.predictor.decoder)):
            inv_freq = inverse_frequencies(shape.head_dim, shape.rope_theta).to(self.device)
            decoder.rotary.register_buffer("inv_freq", inv_freq, persistent=False)
            decoder.rotary._tables.clear()

    # -- embeddings ----------------------------------------------------------------------------------

    def text(self, ids: torch.Tensor) -> torch.Tensor:
        """Text token ids (1, n) -> (1, n, hidden). The MLP's result depends (in the last bits) on how
        many rows one call holds, so callers group ids exactly as upstream does."""
        return self.text_projection(self.text_embedding(ids))

    def codec(self, ids: torch.Tensor) -> torch.Tensor:
        return self.codec_embedding(ids)

    def codes_embedding(self, codes: torch.Tensor) -> torch.Tensor:
        """Codes (..., G) of one or more frames -> (..., G, hidden): codebook 0 through codec_embedding,
        codebook i through the predictor's table i-1."""
        tables = self.code_predictor.codec_embedding
        parts = [self.codec_embedding(codes[..., :1])]
        parts += [tables[i - 1](codes[..., i: i + 1]) for i in range(1, codes.shape[-1])]
        return torch.cat(parts, dim=-2)

    def frame_input(self, codes: torch.Tensor, text: torch.Tensor) -> torch.Tensor:
        """A frame's codes (B, G) and its text embedding (B, 1, hidden) -> the next input (B, 1, hidden)."""
        return self.codes_embedding(codes).sum(1, keepdim=True) + text

    # -- outputs -------------------------------------------------------------------------------------

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """codec_head over every position (as upstream computes it), the last one's scores in float32."""
        return self.codec_head(hidden)[:, -1].float()
