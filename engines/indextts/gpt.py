"""UnifiedVoice v2, IndexTTS 2's GPT (upstream's indextts/gpt/model_v2.py at ee40fa7), on mizuoto.nn.gpt2's body.

    conditioning (conditioning.py)  speaker latents + emotion vector, speed rows             (B, 34, D)
    prompt       prepare_gpt_inputs [left padding][conds][start_text, text, stop_text]      (B, S, D) + mask (B, S+1)
    decode       GPT2InferenceModel.forward with its KV cache: the prefill appends mel_embedding(start_mel) +
                 mel_pos(0); a generated token is mel_embedding(token) + mel_pos(mask length - S); logits are
                 mel_head(final_norm(ln_f(hidden)))                                         (rows, V)
    latents      UnifiedVoice.forward as infer_v2 calls it (given speaker latents and emotion vector):
                 final_norm(gpt([conds][start_text, text, stop_text][start_mel, codes, stop_mel]))[mel rows][:-2]

The position quirk of the decode: upstream embeds the k-th generated token (k = 1, 2, ...) at mel position
attention_mask.shape[1] - S, and generate's mask then holds S + 1 + k entries, so it gets position k + 1; the
start token has position 0 and position 1 is never used, while UnifiedVoice.forward (the latents) puts the k-th
code at position k. `MelDecode` reproduces both exactly.

Attention goes through the accel site `indextts.gpt` (transformers 4.52.1's GPT-2 sdpa attention as reference,
approx_ok=False: an autoregressive site). Module and parameter names are gpt.pth's (upstream's attribute names, the
GPT-2 body under `gpt.h.N` / `gpt.ln_f`); `load_gpt` says which checkpoint keys are dropped and why.

What differs from upstream: nothing of its arithmetic. Its inputs are never changed in place (upstream's
set_text_padding and set_mel_padding write the stop tokens into the caller's tensors). Only what infer_v2 runs is
built: condition_type "conformer_perceiver", mel codes as input, no solo embeddings, no campplus speaker mode.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from mizuoto.core.errors import InputError
from mizuoto.nn.gpt2 import AttentionStep, GPT2Config, GPT2Decoder, transformers_sdpa
from mizuoto.runtime import accel
from mizuoto.runtime.graphs import Graphs, LayerSteps

from .conditioning import Conditioning, ConditioningConfig, ConditionModule

__all__ = ["ATTENTION", "DROPPED", "GptConfig", "MelDecode", "UnifiedVoice", "load_gpt"]

ATTENTION = accel.Site("indextts.gpt", reference=transformers_sdpa, approx_ok=False)


@dataclass(frozen=True)
class GptConfig:
    """config.yaml's `gpt` section (UnifiedVoice's keyword arguments); the defaults are UnifiedVoice's."""

    layers: int = 8
    model_dim: int = 512
    heads: int = 8
    max_text_tokens: int = 120
    max_mel_tokens: int = 250
    max_conditioning_inputs: int = 1
    mel_length_compression: int = 1024
    number_text_tokens: int = 256
    start_text_token: int = 0
    stop_text_token: int = 1
    number_mel_codes: int = 8194
    start_mel_token: int = 8192
    stop_mel_token: int = 8193
    train_solo_embeddings: bool = False
    use_mel_codes_as_input: bool = True
    checkpointing: bool = True  # training only
    types: int = 1
    condition_num_latent: int = 32
    condition_type: str = "conformer_perceiver"
    condition_module: ConditionModule = field(default_factory=ConditionModule)
    emo_condition_module: ConditionModule = field(
        default_factory=lambda: ConditionModule(512, 1024, 4, 4, "conv2d2", 2))
    spk_cond_mode: str = "conformer"
    use_accel: bool = False  # upstream's flash-attn engine switch: Mizuoto's attention runs through its accel sites

    def __post_init__(self):
        unsupported = {"condition_type": "conformer_perceiver", "use_mel_codes_as_input": True,
                       "train_solo_embeddings": False, "spk_cond_mode": "conformer"}
        for name, want in unsupported.items():
            if getattr(self, name) != want:
                raise InputError(f"IndexTTS GPT: config gpt.{name} = {getattr(self, name)!r} is not supported "
                                 f"(IndexTTS 2 uses {want!r})")

    @classmethod
    def from_dict(cls, values: Mapping) -> "GptConfig":
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise InputError(f"IndexTTS GPT: unknown config.yaml gpt keys: {', '.join(unknown)}")
        values = dict(values)
        for name in ("condition_module", "emo_condition_module"):
            if isinstance(values.get(name), Mapping):
                try:
                    values[name] = ConditionModule.from_dict(dict(values[name]))
                except ValueError as exc:
                    raise InputError(f"IndexTTS GPT: gpt.{name}: {exc}") from None
        return cls(**values)

    @property
    def mel_positions(self) -> int:
        return self.max_mel_tokens + 2 + self.max_conditioning_inputs

    @property
    def text_positions(self) -> int:
        return self.max_text_tokens + 2

    def conditioning(self) -> ConditioningConfig:
        return ConditioningConfig(self.model_dim, self.condition_module, self.emo_condition_module,
                                  self.condition_num_latent)


class LearnedPositions(nn.Module):
    """LearnedPositionEmbeddings: a table read from row 0 (`emb`, upstream's name)."""

    def __init__(self, length: int, dim: int):
        super().__init__()
        self.emb = nn.Embedding(length, dim)

    def forward(self, length: int, device=None) -> torch.Tensor:
        """Rows 0 .. length - 1, (length, D): upstream's forward(x) with length x.shape[1]."""
        return self.emb(torch.arange(0, length, device=device or self.emb.weight.device))


class UnifiedVoice(Conditioning):
    """The GPT with its conditioning modules (inherited: conditioning.Conditioning, the same top-level names)."""

    def __init__(self, config: GptConfig = GptConfig()):
        super().__init__(config.conditioning())
        self.gpt_config = config
        dim = config.model_dim
        self.text_embedding = nn.Embedding(config.number_text_tokens * config.types + 1, dim)
        self.mel_embedding = nn.Embedding(config.number_mel_codes, dim)
        self.gpt = GPT2Decoder(GPT2Config(dim, config.layers, config.heads), ATTENTION)
        self.mel_pos_embedding = LearnedPositions(config.mel_positions, dim)
        self.text_pos_embedding = LearnedPositions(config.text_positions, dim)
        self.final_norm = nn.LayerNorm(dim)
        self.text_head = nn.Linear(dim, config.number_text_tokens * config.types + 1)
        self.mel_head = nn.Linear(dim, config.number_mel_codes)
        self._steps: tuple | None = None  # (graphs, LayerSteps): decode_steps'

    # -- the prompt ---------------------------------------------------------------------------------------

    def prompt(self, conds: torch.Tensor, text_tokens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """prepare_gpt_inputs: conds (1 or B, C, D) from `prefix`, text_tokens (B, L) -> embeddings (B, S, D) and
        the attention mask (B, S + 1) long (the + 1: the start mel token the decode appends), S = C + L + 2.

        Each row drops its start/stop text tokens, is framed by start_text and stop_text, and is padded on the left
        with zero rows (mask 0) up to the longest possible row. Reads the tokens back from the device (once)."""
        c = self.gpt_config
        if text_tokens.dim() != 2 or text_tokens.shape[1] == 0:
            raise InputError(f"the GPT prompt takes text tokens (batch, length), got {tuple(text_tokens.shape)}")
        b, length = text_tokens.shape
        dim = c.model_dim
        if conds.dim() != 3 or conds.shape[-1] != dim or conds.shape[0] not in (1, b):
            raise InputError(f"the GPT prompt takes conditioning (1 or {b}, latents, {dim}) for {b} text rows, got "
                             f"{tuple(conds.shape)}")
        single = conds.shape[0] == 1
        device = text_tokens.device
        target = conds.shape[1] + length + 2
        rows, masks = [], []
        for i in range(b):
            tokens = text_tokens[i][(text_tokens[i] != c.stop_text_token) & (text_tokens[i] != c.start_text_token)]
            tokens = F.pad(F.pad(tokens, (1, 0), value=c.start_text_token), (0, 1), value=c.stop_text_token)
            text = self.text_embedding(tokens) + self.text_pos_embedding.emb(
                torch.arange(0, tokens.shape[-1], device=device))
            padding = length + 2 - tokens.shape[-1]
            parts = [conds[0] if single else conds[i], text]
            mask = torch.ones(target + 1, dtype=torch.long, device=device)
            if padding > 0:
                parts.insert(0, torch.zeros((padding, dim), dtype=text.dtype, device=device))
                mask[:padding] = 0
            rows.append(torch.cat(parts))
            masks.append(mask)
        return torch.stack(rows), torch.stack(masks)

    # -- the decode's pieces (MelDecode runs them) --------------------------------------------------------

    def start_embedding(self, rows: int, device=None) -> torch.Tensor:
        """What the first inference call appends to the cached prompt: mel_embedding(start_mel) + mel_pos(0),
        (rows, 1, D)."""
        device = device or self.mel_embedding.weight.device
        start = torch.full((rows, 1), self.gpt_config.start_mel_token, dtype=torch.long, device=device)
        emb = self.mel_embedding(start)
        return emb + self.mel_pos_embedding(emb.shape[1], device)

    def token_embedding(self, tokens: torch.Tensor, position: torch.Tensor) -> torch.Tensor:
        """A generated token's input: mel_embedding(tokens (R,)) + the fixed embedding of `position` ((1,) long,
        on the device: upstream's get_fixed_embedding(attention_mask.shape[1] - S)) -> (R, 1, D)."""
        return self.mel_embedding(tokens[:, None]) + self.mel_pos_embedding.emb(position).unsqueeze(0)

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """GPT2InferenceModel's lm_head = Sequential(final_norm, mel_head) on ln_f's output: (.., D) -> (.., V)."""
        return self.mel_head(self.final_norm(hidden))

    def decode_steps(self, graphs: Graphs | None) -> LayerSteps:
        """The one-token step as LayerSteps (CUDA graphs when `graphs` is given), kept while the graphs object is:
        its graphs, one per beam count, hold the weights' addresses and serve every later request."""
        if self._steps is None or self._steps[0] is not graphs:
            self._steps = (graphs, self.gpt.steps(self.token_embedding, lambda h: self.logits(h)[:, -1], graphs))
        return self._steps[1]

    def decode(self, embeds: torch.Tensor, mask: torch.Tensor, beams: int, max_new_tokens: int,
               graphs: Graphs | None = None) -> "MelDecode":
        """A decode of `prompt`'s output with `beams` rows per prompt row; see MelDecode."""
        return MelDecode(self, embeds, mask, beams, max_new_tokens, graphs)

    # -- the latents ----------------------------------------------------------------------------------------

    def latents(self, speaker_latents: torch.Tensor, emovec: torch.Tensor, text_tokens: torch.Tensor,
                codes: torch.Tensor, text_lengths: torch.Tensor | None = None,
                code_lengths: torch.Tensor | None = None) -> torch.Tensor:
        """UnifiedVoice.forward as infer_v2 calls it (speaker latents and emotion vector given, use_speed zeros):
        (B, 32, D), (B, D), text (B, L), codes (B, M) -> the final-normed hidden states of the codes (B, M, D).

        Text past text_lengths[b] becomes stop_text and codes past code_lengths[b] stop_mel (set_text_padding,
        set_mel_padding; None: the whole row, as infer_v2 passes); the text is framed by start/stop text tokens,
        the codes by start/stop mel tokens, each part gets its own positions from 0, and no mask is used."""
        c = self.gpt_config
        if codes.dim() != 2 or text_tokens.dim() != 2 or codes.shape[0] != text_tokens.shape[0]:
            raise InputError(f"the GPT latents take text tokens and codes (batch, length) with one batch, got "
                             f"{tuple(text_tokens.shape)} and {tuple(codes.shape)}")
        conds = self.prefix(speaker_latents, emovec)
        text = _framed(_padded(text_tokens, text_lengths, c.stop_text_token), c.start_text_token, c.stop_text_token)
        mel = _framed(_padded(codes, code_lengths, c.stop_mel_token), c.start_mel_token, c.stop_mel_token)
        text_emb = self.text_embedding(text) + self.text_pos_embedding(text.shape[1], text.device)
        mel_emb = self.mel_embedding(mel) + self.mel_pos_embedding(mel.shape[1], mel.device)
        hidden = self.gpt(torch.cat([conds, text_emb, mel_emb], dim=1))
        enc = self.final_norm(hidden[:, conds.shape[1]:])
        return enc[:, -mel_emb.shape[1]:][:, :-2]


def _padded(tokens: torch.Tensor, lengths: torch.Tensor | None, stop: int) -> torch.Tensor:
    """set_text_padding / set_mel_padding without writing into the caller's tensor."""
    if lengths is None:
        return tokens
    lengths = torch.as_tensor(lengths, device=tokens.device).reshape(-1)
    if lengths.shape[0] != tokens.shape[0]:
        raise InputError(f"the GPT latents take one length per row ({tokens.shape[0]}), got {lengths.shape[0]}")
    past = torch.arange(tokens.shape[1], device=tokens.device)[None, :] >= lengths[:, None]
    return tokens.masked_fill(past, stop)


def _framed(tokens: torch.Tensor, start: int, stop: int) -> torch.Tensor:
    """F.pad(.., (0, 1), stop) then build_aligned_inputs_and_targets' F.pad(.., (1, 0), start)."""
    return F.pad(F.pad(tokens, (0, 1), value=stop), (1, 0), value=start)


class MelDecode:
    """One request's decode over a KV cache: GPT2InferenceModel with kv_cache=True as beam search drives it.

        decode = model.decode(embeds, mask, beams=3, max_new_tokens=1500)
        logits = decode.prefill()                  # (B * beams, V)
        logits = decode.step(tokens, beam_idx)     # tokens (B * beams,) long; beam_idx (B * beams,) long or None

    The prompt rows are repeated `beams` times (repeat_interleave, as generate expands them); `step` first gathers
    the cache rows by `beam_idx` (row i continues what row beam_idx[i] held: _reorder_cache, in place), then feeds
    `tokens`. A step waits on nothing: the position is a device counter, the mask's padding was read at prefill.
    With `graphs` the step is runtime.graphs.LayerSteps with CUDA graphs, and the logits it returns live in a
    static buffer the next step rewrites: use (or clone) them before calling step again.
    """

    def __init__(self, model: UnifiedVoice, embeds: torch.Tensor, mask: torch.Tensor, beams: int,
                 max_new_tokens: int, graphs: Graphs | None = None):
        if embeds.dim() != 3 or mask.shape != (embeds.shape[0], embeds.shape[1] + 1):
            raise InputError(f"a GPT decode takes the prompt's embeddings (B, S, D) and mask (B, S + 1), got "
                             f"{tuple(embeds.shape)} and {tuple(mask.shape)}")
        if beams < 1 or max_new_tokens < 1:
            raise InputError(f"a GPT decode needs at least one beam and one new token, got {beams} and "
                             f"{max_new_tokens}")
        self.model, self.beams = model, beams
        self.embeds = embeds.repeat_interleave(beams, 0) if beams > 1 else embeds
        self.rows, self.prompt_length = self.embeds.shape[0], embeds.shape[1]
        capacity = self.prompt_length + 1 + max_new_tokens
        keys = torch.ones(self.rows, capacity, dtype=torch.bool, device=embeds.device)
        keys[:, : mask.shape[1]] = (mask.repeat_interleave(beams, 0) if beams > 1 else mask) != 0
        self.keys = keys  # the attention mask as generate grows it: the prompt's, then ones
        self.padded = not bool(keys.all())  # the one read of the mask; it only grows by ones
        self.cache = model.gpt.new_cache(self.rows, capacity, embeds.device, embeds.dtype)
        self.position = None  # the next generated token's mel position, a (1,) device tensor
        self.steps = model.decode_steps(graphs)

    def _mask(self, q_len: int):
        kv = self.cache.length + q_len
        keys = self.keys[:, :kv] if self.padded else None
        return self.model.gpt.mask_for(keys, q_len, kv, padded=self.padded, batch=self.rows,
                                       device=self.embeds.device, dtype=self.embeds.dtype)

    def prefill(self) -> torch.Tensor:
        """The first inference call: the prompt and the start mel token -> the next logits (rows, V)."""
        if self.cache.length:
            raise RuntimeError("this decode has already been prefilled")
        model = self.model
        x = torch.cat([self.embeds, model.start_embedding(self.rows, self.embeds.device)], dim=1)
        mask = self._mask(x.shape[1])
        hidden = model.gpt(x, self.cache, mask)
        self.position = torch.full((1,), 2, dtype=torch.long, device=x.device)  # mask length S + 2, minus S
        return model.logits(hidden)[:, -1]

    def step(self, tokens: torch.Tensor, beam_idx: torch.Tensor | None = None) -> torch.Tensor:
        """Reorder the cache by `beam_idx` (when given), then feed `tokens` (rows,) -> the next logits (rows, V)."""
        if self.position is None:
            raise RuntimeError("prefill the decode before stepping it")
        if tokens.shape != (self.rows,):
            raise InputError(f"a GPT step takes one token per row ({self.rows}), got {tuple(tokens.shape)}")
        if self.cache.length >= self.cache.capacity:
            raise InputError(f"the GPT decode was sized for {self.cache.capacity - self.prompt_length - 1} new "
                             f"tokens; raise max_new_tokens")
        if beam_idx is not None:
            self.cache.reorder(beam_idx)
        step = AttentionStep(self.cache, self._mask(1))
        logits = self.steps((tokens, self.position), (), step)
        self.cache.advance(1)
        self.position.add_(1)
        return logits


# ---------------------------------------------------------------------------------------------------------
# Loading gpt.pth

CONV1D = re.compile(r"gpt\.h\.\d+\.(attn\.c_attn|attn\.c_proj|mlp\.c_fc|mlp\.c_proj)\.weight")
# Keys a gpt.pth may carry that are not parameters of ours, and why each is dropped:
DROPPED = {
    # post_init_gpt2_config registers GPT2InferenceModel as `inference_model` (it holds the same gpt, mel_pos_embedding,
    # mel_embedding, final_norm and mel_head), and sets gpt.wte = mel_embedding: duplicates of kept parameters
    re.compile(r"inference_model\..*"): "duplicates (GPT2InferenceModel)",
    re.compile(r"gpt\.wte\.weight"): "a duplicate of mel_embedding.weight",
    # older transformers saved GPT2Attention's causal-mask buffers; 4.52.1 builds them (non-persistent)
    re.compile(r"gpt\.h\.\d+\.attn\.(bias|masked_bias)"): "transformers' causal-mask buffers",
    # upstream deletes GPT-2's own position table (wpe: null_position_embeddings)
    re.compile(r"gpt\.wpe\.weight"): "GPT-2's position table, unused upstream",
}


def _dropped(key: str) -> bool:
    return any(pattern.fullmatch(key) for pattern in DROPPED)


def load_gpt(source: str | Path | Mapping[str, torch.Tensor], config: GptConfig,
             device=None, dtype: torch.dtype | None = None) -> UnifiedVoice:
    """A UnifiedVoice with gpt.pth's weights: a path or a state dict (its "model" entry when it has one, as
    upstream's load_checkpoint takes it). The GPT-2 Conv1D weights are transposed into Linear's (out, in); the
    keys in DROPPED are dropped; any other key missing or left over is a one-line error (upstream loads with
    strict=False and prints them: a missing key there is a random weight)."""
    if isinstance(source, (str, Path)):
        path = Path(source)
        if not path.is_file():
            raise InputError(f"IndexTTS GPT checkpoint not found: {path}")
        try:
            state = torch.load(path, map_location="cpu", weights_only=True)
        except Exception as exc:
            raise InputError(f"IndexTTS GPT checkpoint {path.name} cannot be read ({type(exc).__name__}); "
                             f"point the loader at IndexTTS 2's gpt.pth") from None
    else:
        state = source
    if not isinstance(state, Mapping):
        raise InputError("an IndexTTS GPT checkpoint must hold a state dict (IndexTTS 2's gpt.pth)")
    if "model" in state and isinstance(state["model"], Mapping):
        state = state["model"]
    model = UnifiedVoice(config)
    ours = model.state_dict()
    kept = {}
    for key, value in state.items():
        if key in ours:
            kept[key] = value.t() if CONV1D.fullmatch(key) else value
        elif not _dropped(key):
            kept[key] = value  # reported below as unexpected
    missing = sorted(set(ours) - set(kept))
    unexpected = sorted(set(kept) - set(ours))
    if missing or unexpected:
        parts = []
        if missing:
            parts.append(f"{len(missing)} missing ({', '.join(missing[:3])}{', ...' if len(missing) > 3 else ''})")
        if unexpected:
            parts.append(f"{len(unexpected)} unexpected ({', '.join(unexpected[:3])}"
                         f"{', ...' if len(unexpected) > 3 else ''})")
        raise InputError(f"IndexTTS GPT checkpoint does not fit config.yaml's gpt section: {'; '.join(parts)} keys")
    for key, value in kept.items():
        if tuple(value.shape) != tuple(ours[key].shape):
            raise InputError(f"IndexTTS GPT checkpoint's {key} is {tuple(value.shape)}, config.yaml's gpt section "
                             f"makes it {tuple(ours[key].shape)}")
    model.load_state_dict(kept, strict=True)
    if device is not None or dtype is not None:
        model = model.to(device=device, dtype=dtype)
    return model.eval()
