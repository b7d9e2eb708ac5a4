"""BERT, with transformers 4.57.3's numerics (`BertModel` in eval mode with sdpa attention; Apache-2.0 code, read,
not copied). Module and parameter names are transformers', so a released folder loads as it is (`from_state`
takes a BertModel or BertForMaskedLM state dict: the `bert.` prefix, the pooler and the MLM head are skipped).

GPT-SoVITS reads chinese-roberta-wwm-ext-large's `hidden_states[-3]` per character (its Chinese text features);
G2PW's polyphone model is a BERT-base too.

    ids -> word + token type (0) + absolute position embeddings -> LayerNorm
    -> N x post-norm layers: self-attention (SDPA; a padded batch gets transformers' additive mask of 0 and the
       dtype's lowest value; an unpadded one none, as transformers drops an all-ones mask) + residual ->
       LayerNorm -> dense, GELU (erf), dense + residual -> LayerNorm
`hidden_states` is transformers' tuple: the embeddings' output, then every layer's.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields

import torch
from torch import nn

from mizuoto.core.errors import CheckpointError
from mizuoto.runtime import accel

from .wav2vec2 import ACTIVATIONS, additive_mask

ATTENTION = accel.Site("bert.attn")


@dataclass(frozen=True)
class BertConfig:
    """The config.json fields BertModel reads, with transformers' defaults."""

    vocab_size: int = 30522
    hidden_size: int = 768
    num_hidden_layers: int = 12
    num_attention_heads: int = 12
    intermediate_size: int = 3072
    hidden_act: str = "gelu"
    max_position_embeddings: int = 512
    type_vocab_size: int = 2
    layer_norm_eps: float = 1e-12
    pad_token_id: int = 0

    @classmethod
    def from_dict(cls, data: dict) -> "BertConfig":
        known = {f.name for f in fields(cls)}
        config = cls(**{k: v for k, v in data.items() if k in known})
        if config.hidden_size % config.num_attention_heads:
            raise CheckpointError(f"the BERT config's hidden_size {config.hidden_size} does not split into "
                                  f"{config.num_attention_heads} heads")
        if config.hidden_act not in ACTIVATIONS:
            raise CheckpointError(f"the BERT config's hidden_act {config.hidden_act!r} is not one of "
                                  f"{sorted(ACTIVATIONS)}")
        if data.get("position_embedding_type", "absolute") != "absolute":
            raise CheckpointError("the BERT config asks for relative position embeddings; only absolute ones "
                                  "(every released Chinese BERT's) are supported")
        return config


class Embeddings(nn.Module):
    def __init__(self, config: BertConfig):
        super().__init__()
        self.word_embeddings = nn.Embedding(config.vocab_size, config.hidden_size, padding_idx=config.pad_token_id)
        self.position_embeddings = nn.Embedding(config.max_position_embeddings, config.hidden_size)
        self.token_type_embeddings = nn.Embedding(config.type_vocab_size, config.hidden_size)
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)

    def forward(self, ids: torch.Tensor, token_types: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(ids.shape[1], device=ids.device).expand(1, -1)
        x = self.word_embeddings(ids) + self.token_type_embeddings(token_types)
        x += self.position_embeddings(positions)
        return self.LayerNorm(x)


def eager_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """transformers' eager BertSelfAttention (4.57.3, the ops torch's exporter wrote into G2PW's ONNX file):
    q·kᵀ, divided by √d, plus the additive mask, softmax, times v. Handwritten, not a site (the seed lists G2PW's
    BERT among the attentions that stay handwritten)."""
    scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores + mask
    return torch.matmul(torch.softmax(scores, dim=-1), v)


def site_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    return accel.attention(q, k, v, site=ATTENTION, mask=mask)


class SelfAttention(nn.Module):
    def __init__(self, config: BertConfig, attend=site_attention):
        super().__init__()
        self.attend = attend
        hidden = config.hidden_size
        self.heads, self.head_dim = config.num_attention_heads, hidden // config.num_attention_heads
        self.query = nn.Linear(hidden, hidden)
        self.key = nn.Linear(hidden, hidden)
        self.value = nn.Linear(hidden, hidden)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        b, n, _ = x.shape
        q, k, v = (proj(x).view(b, -1, self.heads, self.head_dim).transpose(1, 2)
                   for proj in (self.query, self.key, self.value))
        out = self.attend(q, k, v, mask)
        return out.transpose(1, 2).reshape(b, n, self.heads * self.head_dim)


class DenseNorm(nn.Module):
    """BertSelfOutput / BertOutput: dense, then LayerNorm of it plus the residual."""

    def __init__(self, inputs: int, config: BertConfig):
        super().__init__()
        self.dense = nn.Linear(inputs, config.hidden_size)
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)

    def forward(self, x: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        return self.LayerNorm(self.dense(x) + residual)


class Attention(nn.Module):
    def __init__(self, config: BertConfig, attend=site_attention):
        super().__init__()
        self.self = SelfAttention(config, attend)
        self.output = DenseNorm(config.hidden_size, config)


class Intermediate(nn.Module):
    def __init__(self, config: BertConfig):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.intermediate_size)
        self.activation = ACTIVATIONS[config.hidden_act]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.activation(self.dense(x))


class Layer(nn.Module):
    def __init__(self, config: BertConfig, attend=site_attention):
        super().__init__()
        self.attention = Attention(config, attend)
        self.intermediate = Intermediate(config)
        self.output = DenseNorm(config.intermediate_size, config)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        x = self.attention.output(self.attention.self(x, mask), x)
        return self.output(self.intermediate(x), x)


@dataclass
class BertOutput:
    last_hidden_state: torch.Tensor  # (batch, tokens, hidden)
    hidden_states: tuple[torch.Tensor, ...] | None  # the embeddings' output, then each layer's


class Bert(nn.Module):
    """`attend(q, k, v, additive mask or None)`: the `bert.attn` site unless a model's upstream computes its
    attention in a way a fused kernel does not (G2PW: eager_attention)."""

    def __init__(self, config: BertConfig, attend=site_attention):
        super().__init__()
        self.config = config
        self.embeddings = Embeddings(config)
        self.encoder = nn.Module()
        self.encoder.layer = nn.ModuleList(Layer(config, attend) for _ in range(config.num_hidden_layers))

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                token_type_ids: torch.Tensor | None = None, output_hidden_states: bool = False) -> BertOutput:
        if input_ids.dim() != 2 or input_ids.is_floating_point():
            raise ValueError(f"BERT takes token ids (batch, tokens), got {tuple(input_ids.shape)} of {input_ids.dtype}")
        if input_ids.shape[1] > self.config.max_position_embeddings:
            raise ValueError(f"BERT takes at most {self.config.max_position_embeddings} tokens, got "
                             f"{input_ids.shape[1]}")
        types = torch.zeros_like(input_ids) if token_type_ids is None else token_type_ids
        x = self.embeddings(input_ids, types)
        mask = None
        if attention_mask is not None and not bool((attention_mask == 1).all()):
            mask = additive_mask(attention_mask.bool(), x.dtype)
        states = [x] if output_hidden_states else None
        for layer in self.encoder.layer:
            x = layer(x, mask)
            if states is not None:
                states.append(x)
        return BertOutput(x, tuple(states) if states is not None else None)


def from_state(config: BertConfig | dict, state: dict[str, torch.Tensor], dtype: torch.dtype = torch.float32) -> Bert:
    """A Bert in eval mode from a BertModel or BertForMaskedLM state dict; a missing or misshapen weight is a
    one-line error. The model is built on the meta device and takes the state's own tensors (cast only where the
    dtype differs), so loading holds one copy of the weights, not two (chinese-roberta-wwm-ext-large: 1.3 GB)."""
    config = config if isinstance(config, BertConfig) else BertConfig.from_dict(config)
    with torch.device("meta"):
        model = Bert(config)
    plain = {k.removeprefix("bert."): v for k, v in state.items()}
    expected = model.state_dict()
    missing = sorted(k for k in expected if k not in plain)
    wrong = sorted(k for k in expected if k in plain and plain[k].shape != expected[k].shape)
    if missing or wrong:
        problem = f"missing {missing[:3]}" if missing else f"shapes differ for {wrong[:3]}"
        raise CheckpointError(f"the BERT checkpoint does not match its config ({problem}); download it again")
    model.load_state_dict({k: plain[k].to(dtype) for k in expected}, assign=True)
    return model.eval()
