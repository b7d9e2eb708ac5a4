"""GPT-SoVITS's text-to-semantic model (the "GPT"): `AR/models/t2s_model.py::Text2SemanticDecoder` at RVC-Boss/
GPT-SoVITS 48b1a01, as api_v2's `TTS` pipeline runs it (`infer_panel_batch_infer`, its default parallel_infer; a
prompt-free request falls back to `infer_panel_naive`).

    x = text_embedding(phones) + bert_proj(bert (1024, L))      + alpha_x * sine_table[:L]
    y = audio_embedding(prompt tokens)                          + alpha_y * sine_table[:P]
    [x, y] -> one prefill with a prefix-LM mask (text sees text, audio sees text and earlier audio) -> a token,
    then one step per token (no mask) until EOS (vocab_size - 1), upstream's 1500-step cap or its early stop

The blocks are post-norm (attention + residual -> LayerNorm -> ReLU MLP + residual -> LayerNorm) with a fused
qkv projection. What upstream does that is kept because it is its arithmetic and its draws:
- the key/value cache is (1, positions, hidden) per layer, as `torch.cat` grows it, viewed per head for SDPA;
  the prefill attends on the qkv projection's own chunks;
- the logits are `ar_predict_layer(h[:, -1])`; while fewer than 11 steps have run, EOS's column is cut off
  (`logits[:, :-1]`), so the draw runs over vocab_size - 1 entries (an exponential per entry);
- `logits_to_probs`: repetition penalty on every previous token (the prompt's too), top-p on the descending
  order only when top_p < 1, the temperature, a top-k pivot, softmax; then `multinomial_sample_one_no_sync`
  (argmax of p / Exp(1)) from the request's generator;
- a step stops when the drawn token or the argmax of the penalised logits is EOS.

Speed: the step between two attention calls replays as CUDA graph segments (runtime.graphs.LayerSteps) with the
sampling after them; the step reads one value back (did it stop?). Attention goes through the site
`gpt_sovits.t2s` (approx_ok=False: an approximate kernel changes which tokens are drawn).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import torch
import torch.nn.functional as F
from torch import nn

from mizuoto.core.errors import CheckpointError, InputError
from mizuoto.runtime import accel
from mizuoto.runtime.graphs import Graphs, LayerSteps
from mizuoto.runtime.sampling import check_race_sampling, multinomial1, repetition_penalty_seen

ATTENTION = accel.Site("gpt_sovits.t2s", approx_ok=False)

BERT_DIM = 1024  # bert_proj's input, hard-coded upstream (chinese-roberta-wwm-ext-large's hidden size)
MAX_STEPS = 1500  # infer_panel's loop
EOS_FROM = 11  # EOS's column is cut off at steps 0..10 ("at least 10 tokens before stopping")
SINE_POSITIONS = 4000  # SinePositionalEmbedding's table, extended when a sequence is longer
HZ = 50  # TTS.init_t2s_weights: early_stop_num = hz * config["data"]["max_sec"]
# The released v2 GPT's `model` config (configs/s1longer-v2.yaml): benchmarks and the GPU check build it
RELEASED_V2 = {"vocab_size": 1025, "phoneme_vocab_size": 732, "embedding_dim": 512, "hidden_dim": 512, "head": 16,
               "linear_units": 2048, "n_layer": 24, "dropout": 0, "EOS": 1024}


@dataclass(frozen=True)
class T2SConfig:
    """The `config` entry of a GPT weights file (`model` and `data.max_sec`), as Text2SemanticDecoder reads it."""

    vocab_size: int  # semantic tokens + EOS
    phoneme_vocab_size: int
    hidden_dim: int
    heads: int
    layers: int
    max_sec: float | None = None  # None: no early stop (upstream reads it; the released files hold 54)

    @property
    def eos(self) -> int:
        return self.vocab_size - 1

    @property
    def head_dim(self) -> int:
        return self.hidden_dim // self.heads

    @property
    def early_stop(self) -> int:
        """upstream's early_stop_num: stop once more tokens than this are drawn (-1: never)."""
        return -1 if self.max_sec is None else int(HZ * self.max_sec)

    @classmethod
    def from_checkpoint(cls, config) -> "T2SConfig":
        try:
            model = config["model"]
            made = cls(vocab_size=int(model["vocab_size"]), phoneme_vocab_size=int(model["phoneme_vocab_size"]),
                       hidden_dim=int(model["hidden_dim"]), heads=int(model["head"]), layers=int(model["n_layer"]))
            embedding, eos = int(model["embedding_dim"]), int(model["EOS"])
            data = config.get("data") or {}
            max_sec = data.get("max_sec")
        except (KeyError, TypeError, ValueError, AttributeError):
            raise CheckpointError("the GPT weights file has no readable config (model: vocab_size, "
                                  "phoneme_vocab_size, hidden_dim, embedding_dim, head, n_layer, EOS); use a "
                                  "GPT-SoVITS s1 .ckpt from GPT_weights_*") from None
        if eos != made.eos:
            raise CheckpointError(f"the GPT weights' config has EOS {eos}, not vocab_size - 1 = {made.eos} as "
                                  f"GPT-SoVITS requires; the file is not a GPT-SoVITS s1 checkpoint")
        if embedding != made.hidden_dim or made.hidden_dim % made.heads:
            raise CheckpointError(f"the GPT weights' config: embedding_dim {embedding} and hidden_dim "
                                  f"{made.hidden_dim} must agree and split into {made.heads} heads")
        if max_sec is not None:
            made = cls(**{**made.__dict__, "max_sec": float(max_sec)})
        return made


@dataclass(frozen=True)
class T2SSampling:
    """logits_to_probs' parameters, api_v2's defaults."""

    top_k: int = 15
    top_p: float = 1.0
    temperature: float = 1.0
    repetition_penalty: float = 1.35

    def __post_init__(self):
        if self.top_k < 1:
            raise InputError(f"top_k must be at least 1, got {self.top_k}")
        check_race_sampling(self.top_p, self.temperature, self.repetition_penalty)


def sine_table(dim: int, positions: int) -> torch.Tensor:
    """SinePositionalEmbedding.extend_pe's table (1, positions, dim), float32: sin at even, cos at odd columns."""
    position = torch.arange(0, positions, dtype=torch.float32).unsqueeze(1)
    div_term = torch.exp(torch.arange(0, dim, 2, dtype=torch.float32) * -(math.log(10000.0) / dim))
    table = torch.zeros(positions, dim)
    table[:, 0::2] = torch.sin(position * div_term)
    table[:, 1::2] = torch.cos(position * div_term)
    return table.unsqueeze(0)


class TokenEmbedding(nn.Module):
    """Upstream's TokenEmbedding (its parameter sits at `word_embeddings`)."""

    def __init__(self, dim: int, vocab: int):
        super().__init__()
        self.word_embeddings = nn.Embedding(vocab, dim)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.word_embeddings(ids)


class SinePosition(nn.Module):
    """SinePositionalEmbedding(scale=False, alpha=True): x * 1.0 + alpha * table[positions]."""

    def __init__(self, dim: int):
        super().__init__()
        self.dim = dim
        self.alpha = nn.Parameter(torch.ones(1))
        self.register_buffer("table", sine_table(dim, SINE_POSITIONS), persistent=False)

    def rows(self, length: int) -> torch.Tensor:
        if length > self.table.shape[1]:  # upstream's extend_pe recomputes the table at the needed length
            self.table = sine_table(self.dim, length).to(self.table.device, self.table.dtype)
        return self.table[:, :length]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * 1.0 + self.alpha * self.rows(x.shape[1])

    def at(self, x: torch.Tensor, position: torch.Tensor) -> torch.Tensor:
        """A step's embedding (1, 1, dim) at `position` (1,) long, as infer_panel's update step writes it."""
        return x * 1.0 + self.alpha * self.table[:, position].to(x.dtype)


class SelfAttention(nn.Module):
    """nn.MultiheadAttention's parameter layout (in_proj_weight/bias, out_proj), computed as T2SBlock does."""

    def __init__(self, dim: int):
        super().__init__()
        self.in_proj_weight = nn.Parameter(torch.empty(3 * dim, dim))
        self.in_proj_bias = nn.Parameter(torch.empty(3 * dim))
        self.out_proj = nn.Linear(dim, dim)


class KVCache:
    """Keys and values (1, positions, hidden) per layer, written in place; `length` is what is written."""

    def __init__(self, config: T2SConfig, positions: int, device, dtype: torch.dtype):
        shape = (1, positions, config.hidden_dim)
        # never read beyond what is written (a step attends to [:length + 1]): no need to clear it
        self.keys = [torch.empty(shape, device=device, dtype=dtype) for _ in range(config.layers)]
        self.values = [torch.empty(shape, device=device, dtype=dtype) for _ in range(config.layers)]
        self.positions = positions
        self.length = 0


class Block(nn.Module):
    """One post-norm block, split at its attention call (before -> attend -> after) for LayerSteps."""

    def __init__(self, config: T2SConfig, index: int):
        super().__init__()
        dim = config.hidden_dim
        self.index, self.heads, self.dim = index, config.heads, dim
        self.self_attn = SelfAttention(dim)
        self.linear1 = nn.Linear(dim, 4 * dim)
        self.linear2 = nn.Linear(4 * dim, dim)
        self.norm1 = nn.LayerNorm(dim, eps=1e-5)
        self.norm2 = nn.LayerNorm(dim, eps=1e-5)

    def split_heads(self, t: torch.Tensor) -> torch.Tensor:
        return t.view(t.shape[0], t.shape[1], self.heads, -1).transpose(1, 2)

    def before(self, x: torch.Tensor, _position=None):
        q, k, v = F.linear(x, self.self_attn.in_proj_weight, self.self_attn.in_proj_bias).chunk(3, dim=-1)
        return q, k, v, x

    def attend(self, q, k, v, cache: KVCache) -> torch.Tensor:
        """A step's q, k, v (1, 1, hidden): k, v appended to the cache, q attending to everything written."""
        n = cache.length + 1
        keys, values = cache.keys[self.index], cache.values[self.index]
        keys[:, n - 1: n].copy_(k)
        values[:, n - 1: n].copy_(v)
        out = accel.attention(self.split_heads(q), self.split_heads(keys[:, :n]), self.split_heads(values[:, :n]),
                              site=ATTENTION)
        return out.transpose(1, 2).reshape(1, 1, self.dim)

    def attend_prompt(self, q, k, v, cache: KVCache, mask: torch.Tensor) -> torch.Tensor:
        """The prefill: q, k, v (1, L, hidden) written at 0..L-1, attending under `mask` (True: attend)."""
        length = q.shape[1]
        cache.keys[self.index][:, :length].copy_(k)
        cache.values[self.index][:, :length].copy_(v)
        out = accel.attention(self.split_heads(q), self.split_heads(k), self.split_heads(v), site=ATTENTION,
                              mask=mask)
        return out.transpose(1, 2).reshape(1, length, self.dim)

    def after(self, attended: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        x = self.norm1(residual + self.self_attn.out_proj(attended))
        x = x + self.linear2(F.relu(self.linear1(x)))
        return self.norm2(x)


@dataclass(frozen=True)
class T2SResult:
    tokens: torch.Tensor  # (n,) long: the semantic tokens upstream hands to SoVITS (item[-idx:])
    steps: int  # upstream's idx: the step that stopped
    stopped_by: str  # "eos", "early_stop" or "max_steps"


class Text2Semantic(nn.Module):
    """Text2SemanticDecoder's inference, its parameter names (a GPT weights file's `model.` entries)."""

    def __init__(self, config: T2SConfig):
        super().__init__()
        self.config = config
        dim = config.hidden_dim
        self.bert_proj = nn.Linear(BERT_DIM, dim)
        self.ar_text_embedding = TokenEmbedding(dim, config.phoneme_vocab_size)
        self.ar_text_position = SinePosition(dim)
        self.ar_audio_embedding = TokenEmbedding(dim, config.vocab_size)
        self.ar_audio_position = SinePosition(dim)
        self.h = nn.Module()
        self.h.layers = nn.ModuleList(Block(config, i) for i in range(config.layers))
        self.ar_predict_layer = nn.Linear(dim, config.vocab_size, bias=False)
        self._steps: tuple | None = None  # (graphs, LayerSteps)

    @property
    def blocks(self) -> nn.ModuleList:
        return self.h.layers

    def embed_step(self, token: torch.Tensor, position: torch.Tensor) -> torch.Tensor:
        return self.ar_audio_position.at(self.ar_audio_embedding(token), position)

    def logits(self, x: torch.Tensor) -> torch.Tensor:
        return self.ar_predict_layer(x[:, -1])

    def steps(self, graphs: Graphs | None) -> LayerSteps:
        """The one-token step as LayerSteps segments (graphs when given), kept while the graphs object is."""
        if self._steps is None or self._steps[0] is not graphs:
            self._steps = (graphs, LayerSteps(self.blocks, self.embed_step, self.logits, graphs))
        return self._steps[1]

    def embed_prompt(self, phones: torch.Tensor, bert: torch.Tensor, prompt: torch.Tensor | None) -> torch.Tensor:
        """[text, audio] embeddings (1, L + P, hidden) for phones (L,), bert (1024, L) and prompt tokens (P,)."""
        x = self.ar_text_embedding(phones.unsqueeze(0))
        x = x + self.bert_proj(bert.transpose(0, 1).unsqueeze(0))
        x = self.ar_text_position(x)
        if prompt is None:
            return x
        return torch.cat([x, self.ar_audio_position(self.ar_audio_embedding(prompt.unsqueeze(0)))], dim=1)

    def prefill(self, xy: torch.Tensor, text_length: int, cache: KVCache) -> torch.Tensor:
        """The prompt through every block under the prefix-LM mask -> the last position's logits (1, V)."""
        total = xy.shape[1]
        audio = total - text_length
        blocked = torch.cat([
            F.pad(torch.zeros(text_length, text_length, dtype=torch.bool, device=xy.device), (0, audio), value=True),
            F.pad(torch.triu(torch.ones(audio, audio, dtype=torch.bool, device=xy.device), diagonal=1),
                  (text_length, 0), value=False),
        ])
        allowed = ~blocked.view(1, 1, total, total).expand(1, self.config.heads, total, total)
        x = xy
        for block in self.blocks:
            q, k, v, residual = block.before(x)
            x = block.after(block.attend_prompt(q, k, v, cache, allowed), residual)
        cache.length = total
        return self.logits(x)

    def generate(self, phones: torch.Tensor, bert: torch.Tensor, prompt: torch.Tensor | None,
                 sampling: T2SSampling, generator: torch.Generator, parallel_infer: bool = True,
                 graphs: Graphs | None = None, before_step: Callable[[], None] | None = None) -> T2SResult:
        """Semantic tokens for phones (L,) long (the reference's phones then the target's), their BERT features
        (1024, L) and the reference's prompt tokens (P,) long (None: upstream's prompt-free mode).
        `parallel_infer`: api_v2's option, which only decides which of upstream's two loops' endings is kept
        when a request stops without EOS (both compute every token alike)."""
        config = self.config
        _check_inputs(config, phones, bert, prompt)
        device = self.bert_proj.weight.device
        prompted = 0 if prompt is None else prompt.shape[0]
        limit = MAX_STEPS if config.early_stop < 0 else min(MAX_STEPS, config.early_stop + 1)
        cache = KVCache(config, phones.shape[0] + prompted + limit, device, self.bert_proj.weight.dtype)
        xy = self.embed_prompt(phones, bert, prompt)
        seen = torch.zeros(1, config.vocab_size, dtype=torch.bool, device=device)
        if prompt is not None:
            seen[0, prompt] = True
        logits = self.prefill(xy, phones.shape[0], cache)
        step = self.steps(graphs)
        positions = torch.arange(prompted, prompted + limit, device=device)
        drawn = []
        stopped_by = "max_steps"
        for idx in range(limit):
            if idx:
                if before_step is not None:
                    before_step()
                logits = step((drawn[-1].view(1, 1), positions[idx - 1: idx]), (), cache)
                cache.length += 1
            token, stop = choose(logits, seen, idx, config.eos, sampling, generator)
            drawn.append(token)
            if bool(stop):  # the step's one wait
                stopped_by = "eos"
                break
            if config.early_stop >= 0 and idx + 1 > config.early_stop:
                stopped_by = "early_stop"
                break
            seen[0, token] = True
        tokens = torch.cat(drawn)
        return T2SResult(_kept(tokens, stopped_by, prompt is not None and parallel_infer, prompt is None), idx,
                         stopped_by)


def _kept(tokens: torch.Tensor, stopped_by: str, batched: bool, prompt_free: bool) -> torch.Tensor:
    """What TTS.run hands to SoVITS, `y[-idx:]`. infer_panel_batch_infer (api_v2's loop when there is a prompt)
    drops the last draw however it stopped. infer_panel_naive (prompt-free, or parallel_infer off) drops it only
    at EOS; otherwise y keeps it, and `y[-idx:]` then drops the first draw instead, or with no prompt (idx 0)
    keeps them all."""
    if batched or stopped_by == "eos":
        return tokens[:-1]
    return tokens if prompt_free else tokens[1:]


def choose(logits: torch.Tensor, seen: torch.Tensor, idx: int, eos: int, sampling: T2SSampling,
           generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """Upstream's `sample(logits, y, ...)` and its stop test at step `idx`: -> (token (1,) long, stop () bool)."""
    if idx < EOS_FROM:
        logits, seen = logits[:, :-1], seen[:, :-1]
    if sampling.repetition_penalty != 1.0:
        logits = repetition_penalty_seen(logits, seen, sampling.repetition_penalty)
    if sampling.top_p < 1.0:
        ordered, order = torch.sort(logits, descending=True)
        beyond = torch.cumsum(F.softmax(ordered, dim=-1), dim=-1) > sampling.top_p
        beyond[:, 0] = False  # keep at least one
        filtered = logits.masked_fill(beyond.scatter(1, order, beyond), -float("inf"))
    else:
        filtered = logits
    filtered = filtered / max(sampling.temperature, 1e-5)
    pivot = torch.topk(filtered, min(sampling.top_k, filtered.shape[-1])).values[:, -1:]
    filtered = torch.where(filtered < pivot, -float("inf"), filtered)
    token = multinomial1(F.softmax(filtered, dim=-1), generator)[0][0]
    # the stop test reads the penalised logits (upstream's penalty is an in-place scatter into them)
    stop = (token[0] == eos) | (logits[0].argmax() == eos)
    return token, stop


def _check_inputs(config: T2SConfig, phones, bert, prompt) -> None:
    if phones.dim() != 1 or phones.is_floating_point() or phones.shape[0] == 0:
        raise InputError(f"the GPT-SoVITS T2S takes phone ids (L,) with L > 0, got {tuple(phones.shape)} "
                         f"of {phones.dtype}")
    if bert.shape != (BERT_DIM, phones.shape[0]):
        raise InputError(f"the GPT-SoVITS T2S takes BERT features ({BERT_DIM}, {phones.shape[0]}) for "
                         f"{phones.shape[0]} phones, got {tuple(bert.shape)}")
    if int(phones.max()) >= config.phoneme_vocab_size or int(phones.min()) < 0:
        raise InputError(f"a phone id is outside the GPT model's {config.phoneme_vocab_size} phones; the "
                         f"text front end and the GPT weights are of different versions")
    if prompt is not None:
        if prompt.dim() != 1 or prompt.is_floating_point():
            raise InputError(f"the GPT-SoVITS T2S takes prompt tokens (P,), got {tuple(prompt.shape)} "
                             f"of {prompt.dtype}")
        if prompt.numel() and (int(prompt.max()) >= config.eos or int(prompt.min()) < 0):
            raise InputError(f"a prompt token is outside the GPT model's {config.eos} semantic tokens; the "
                             f"SoVITS and GPT weights are of different models")
