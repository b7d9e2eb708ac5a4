"""The Whisper audio encoder (conv stem + pre-LN transformer), shared by every engine that encodes speech with it.

Two numerics of the same network, chosen per model because each is some upstream's exact arithmetic:
- "openai": openai-whisper's `AudioEncoder` (the Whisper engine): LayerNorm in float32, SDPA with its default
  scale, heads as views;
- "transformers": transformers 4.57's `WhisperEncoder` (Seed-VC's content encoder, which upstream runs in
  float16 even on the CPU): LayerNorm in the model's dtype, the query scaled by d^-1/2 before SDPA with scale 1,
  contiguous heads, and each layer's output clamped to float16's range when in float16.

Parameter names are openai's; `hf_to_openai` maps transformers' names (WhisperModel and
WhisperForConditionalGeneration state dicts) onto them.
"""

from __future__ import annotations

import math
import re
from dataclasses import asdict, dataclass

import torch
import torch.nn.functional as F
from torch import nn

from mizuoto.core.errors import CheckpointError
from mizuoto.runtime import accel

ENCODER = accel.Site("whisper.encoder")
NUMERICS = ("openai", "transformers")


@dataclass(frozen=True)
class Dims:
    """openai-whisper's ModelDimensions, field for field."""

    n_mels: int
    n_audio_ctx: int
    n_audio_state: int
    n_audio_head: int
    n_audio_layer: int
    n_vocab: int
    n_text_ctx: int
    n_text_state: int
    n_text_head: int
    n_text_layer: int

    def to_dict(self) -> dict:
        return asdict(self)


class LayerNorm(nn.LayerNorm):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return super().forward(x.float()).type(x.dtype)


class Linear(nn.Linear):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(x, self.weight.to(x.dtype), None if self.bias is None else self.bias.to(x.dtype))


class Conv1d(nn.Conv1d):
    def _conv_forward(self, x, weight, bias):
        return super()._conv_forward(x, weight.to(x.dtype), None if bias is None else bias.to(x.dtype))


def sinusoids(length: int, channels: int, max_timescale: float = 10000) -> torch.Tensor:
    """The encoder's fixed positions, by upstream's formula (its step is computed in float64 by numpy)."""
    increment = math.log(max_timescale) / (channels // 2 - 1)
    inv = torch.exp(-increment * torch.arange(channels // 2))
    scaled = torch.arange(length)[:, None] * inv[None, :]
    return torch.cat([torch.sin(scaled), torch.cos(scaled)], dim=1)


def heads(x: torch.Tensor, n_head: int) -> torch.Tensor:
    """(B, T, state) -> (B, H, T, state / H), as a view; already split tensors pass through."""
    return x if x.dim() == 4 else x.view(*x.shape[:2], n_head, -1).permute(0, 2, 1, 3)


class Attention(nn.Module):
    """openai-whisper's MultiHeadAttention: the key projection has no bias."""

    def __init__(self, n_state: int, n_head: int):
        super().__init__()
        self.n_head = n_head
        self.query = Linear(n_state, n_state)
        self.key = Linear(n_state, n_state, bias=False)
        self.value = Linear(n_state, n_state)
        self.out = Linear(n_state, n_state)

    def attend(self, q, k, v, site: accel.Site, causal: bool = False, mask_info=None) -> torch.Tensor:
        """(B, T, state) projections -> output (B, T, state) through the dispatcher."""
        return self.out(self.attend_heads(q, k, v, site, causal, mask_info))

    def attend_heads(self, q, k, v, site: accel.Site, causal: bool = False, mask_info=None) -> torch.Tensor:
        """The attention alone, heads merged back: (B, T, state) before the output projection."""
        a = accel.attention(heads(q, self.n_head), heads(k, self.n_head), heads(v, self.n_head), site=site,
                            causal=causal, mask_info=mask_info)
        return a.permute(0, 2, 1, 3).flatten(start_dim=2)

    def scores(self, q, k, v, mask: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """The handwritten path that also returns the pre-softmax scores (word timestamps read the
        cross-attention weights): q and k each scaled by d^-1/4, an additive causal mask, float32
        softmax. Not an attention site: no fused kernel returns the score matrix."""
        n_ctx, n_state = q.shape[1], q.shape[2]
        scale = (n_state // self.n_head) ** -0.25
        q, k, v = heads(q, self.n_head), heads(k, self.n_head), heads(v, self.n_head)
        qk = (q * scale) @ (k * scale).transpose(-1, -2)
        if mask is not None:
            qk = qk + mask[:n_ctx, :n_ctx]
        qk = qk.float()
        w = F.softmax(qk, dim=-1).to(q.dtype)
        return self.out((w @ v).permute(0, 2, 1, 3).flatten(start_dim=2)), qk.detach()


class Block(nn.Module):
    def __init__(self, n_state: int, n_head: int, cross_attention: bool = False):
        super().__init__()
        self.attn = Attention(n_state, n_head)
        self.attn_ln = LayerNorm(n_state)
        self.cross_attn = Attention(n_state, n_head) if cross_attention else None
        self.cross_attn_ln = LayerNorm(n_state) if cross_attention else None
        self.mlp = nn.Sequential(Linear(n_state, n_state * 4), nn.GELU(), Linear(n_state * 4, n_state))
        self.mlp_ln = LayerNorm(n_state)


class AudioEncoder(nn.Module):
    def __init__(self, dims: Dims, numerics: str = "openai"):
        super().__init__()
        if numerics not in NUMERICS:
            raise ValueError(f"numerics {numerics!r} is none of {', '.join(NUMERICS)}")
        self.numerics = numerics
        self.conv1 = Conv1d(dims.n_mels, dims.n_audio_state, kernel_size=3, padding=1)
        self.conv2 = Conv1d(dims.n_audio_state, dims.n_audio_state, kernel_size=3, stride=2, padding=1)
        self.register_buffer("positional_embedding", sinusoids(dims.n_audio_ctx, dims.n_audio_state))
        self.blocks = nn.ModuleList(Block(dims.n_audio_state, dims.n_audio_head) for _ in range(dims.n_audio_layer))
        self.ln_post = LayerNorm(dims.n_audio_state)

    def forward(self, mel: torch.Tensor, handwritten: bool = False) -> torch.Tensor:
        """mel (B, n_mels, 3000) -> audio features (B, 1500, state).

        `handwritten` runs every attention on the handwritten path (`Attention.scores`), as upstream's
        encoder runs under `disable_sdpa()` when word timestamps re-encode a window: its features
        differ from the SDPA ones in the last bits."""
        x = F.gelu(self.conv1(mel))
        x = F.gelu(self.conv2(x)).permute(0, 2, 1)
        if x.shape[1:] != self.positional_embedding.shape:
            raise ValueError(f"audio features of shape {tuple(x.shape[1:])}; the encoder expects "
                             f"{tuple(self.positional_embedding.shape)} (30 s of 16 kHz audio)")
        x = (x + self.positional_embedding).to(x.dtype)
        if self.numerics == "transformers":
            for block in self.blocks:
                x = transformers_layer(block, x)
            return F.layer_norm(x, self.ln_post.normalized_shape, self.ln_post.weight, self.ln_post.bias,
                                self.ln_post.eps)
        for block in self.blocks:
            h = block.attn_ln(x)
            q, k, v = block.attn.query(h), block.attn.key(h), block.attn.value(h)
            x = x + (block.attn.scores(q, k, v)[0] if handwritten else block.attn.attend(q, k, v, ENCODER))
            x = x + block.mlp(block.mlp_ln(x))
        return self.ln_post(x)


def transformers_layer(block: Block, x: torch.Tensor) -> torch.Tensor:
    """One encoder layer as transformers' WhisperEncoderLayer computes it (sdpa attention, eval)."""
    def norm(ln: nn.LayerNorm, h: torch.Tensor) -> torch.Tensor:
        return F.layer_norm(h, ln.normalized_shape, ln.weight, ln.bias, ln.eps)

    attn, n_head = block.attn, block.attn.n_head
    h = norm(block.attn_ln, x)
    batch, length, state = h.shape
    scale = (state // n_head) ** -0.5
    q = (attn.query(h) * scale).view(batch, length, n_head, -1).transpose(1, 2).contiguous()
    k = attn.key(h).view(batch, length, n_head, -1).transpose(1, 2).contiguous()
    v = attn.value(h).view(batch, length, n_head, -1).transpose(1, 2).contiguous()
    a = accel.attention(q, k, v, site=ENCODER, scale=1.0)  # the query already carries the scale
    x = x + attn.out(a.transpose(1, 2).contiguous().reshape(batch, length, state).contiguous())
    x = x + block.mlp(norm(block.mlp_ln, x))
    if x.dtype == torch.float16:  # transformers keeps float16 activations finite after every layer
        limit = torch.finfo(torch.float16).max - 1000
        x = torch.clamp(x, min=-limit, max=limit)
    return x


# transformers' names -> openai's, per layer part (after "model.encoder.layers.N." / "model.decoder.layers.N.")
_LAYER_PARTS = {
    "self_attn.q_proj": "attn.query", "self_attn.k_proj": "attn.key", "self_attn.v_proj": "attn.value",
    "self_attn.out_proj": "attn.out", "self_attn_layer_norm": "attn_ln",
    "encoder_attn.q_proj": "cross_attn.query", "encoder_attn.k_proj": "cross_attn.key",
    "encoder_attn.v_proj": "cross_attn.value", "encoder_attn.out_proj": "cross_attn.out",
    "encoder_attn_layer_norm": "cross_attn_ln", "fc1": "mlp.0", "fc2": "mlp.2", "final_layer_norm": "mlp_ln",
}
_TOP = {
    "model.encoder.conv1": "encoder.conv1", "model.encoder.conv2": "encoder.conv2",
    "model.encoder.layer_norm": "encoder.ln_post", "model.decoder.embed_tokens": "decoder.token_embedding",
    "model.decoder.layer_norm": "decoder.ln",
}
_LAYER = re.compile(r"^model\.(encoder|decoder)\.layers\.(\d+)\.(.+)\.(weight|bias)$")


def hf_to_openai(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    out = {}
    for name, tensor in state.items():
        name = name.removeprefix("whisper.")  # some exports nest the model one level deeper
        if name.startswith(("encoder.", "decoder.")):
            name = "model." + name  # a WhisperModel's own state dict (no generation head around it)
        match = _LAYER.match(name)
        if match:
            side, index, part, kind = match.groups()
            if part not in _LAYER_PARTS:
                raise CheckpointError(f"unexpected Whisper parameter {name}")
            out[f"{side}.blocks.{index}.{_LAYER_PARTS[part]}.{kind}"] = tensor
        elif name == "model.decoder.embed_positions.weight":
            out["decoder.positional_embedding"] = tensor
        elif name == "model.encoder.embed_positions.weight":
            out["encoder.positional_embedding"] = tensor
        elif name == "proj_out.weight":
            continue  # tied to the token embedding
        else:
            base, _, kind = name.rpartition(".")
            if base not in _TOP:
                raise CheckpointError(f"unexpected Whisper parameter {name}")
            out[f"{_TOP[base]}.{kind}"] = tensor
    return out


def dims_from_hf(config: dict) -> Dims:
    try:
        return Dims(n_mels=config["num_mel_bins"], n_audio_ctx=config["max_source_positions"],
                    n_audio_state=config["d_model"], n_audio_head=config["encoder_attention_heads"],
                    n_audio_layer=config["encoder_layers"], n_vocab=config["vocab_size"],
                    n_text_ctx=config["max_target_positions"], n_text_state=config["d_model"],
                    n_text_head=config["decoder_attention_heads"], n_text_layer=config["decoder_layers"])
    except KeyError as exc:
        raise CheckpointError(f"config.json is not a Whisper configuration (no {exc.args[0]})") from None
