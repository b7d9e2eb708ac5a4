"""Decoding one 30-second window: exact to openai-whisper 20250625's `whisper/decoding.py` (MIT).

Same options, same rules, same numbers: language detection from the start-of-transcript logits; the
initial tokens (previous-text prompt after <|startofprev|>, sot sequence, prefix); the logit filters in
upstream's order (SuppressBlank, SuppressTokens, ApplyTimestampRules); greedy / temperature sampling
with best_of candidates, or beam search with patience; ranking by summed log probability under length
normalisation or Google NMT's length penalty; no-speech probability, average log probability and the
zlib compression ratio of the text.

Where we differ from upstream's code, the results do not:

- Draws come from the `generator` passed to `decode` (the request's), never from a seeded global
  generator. The probabilities are those `Categorical(logits=logits / T)` builds (logits normalised by
  their logsumexp, then softmax) and the draw is torch.multinomial's own, so a generator seeded with N
  gives what upstream gives after `torch.manual_seed(N)`. Without a generator the default one is used,
  as upstream does.
- A greedy / sampling step waits on the device once (whether every row has ended, read together with
  the validity of the sampling distribution); the timestamp rules run on the device for all rows at
  once. Upstream waits several times per row per step. Beam search reads its candidates once per step
  (upstream reads each one with `.item()`).
- `fp16` is kept for compatibility but does not cast: the network runs in the dtype it was loaded in
  (upstream's `fp16=False` on a float32 model is what a float32 model gives here).
- Upstream 20250625 cannot decode several audio at once with beam search or best_of (its cross
  attention gets n_audio rows of audio for n_audio * n_group rows of text and raises; openai/whisper
  PRs #2197, #2389). Here each audio is then decoded on its own, exactly as upstream decodes one audio,
  one after the other (drawing from the generator in that order).
- Beam search reorders only the self-attention cache, as upstream's rearrange_kv_cache: the audio's
  cross-attention keys and values (one row per audio, broadcast over its beams as upstream does, which
  is also what makes the attention bit-identical to upstream's) are set aside around
  `DecoderCache.reorder`.
- Bad options raise `InputError` (a ValueError) with upstream's messages, also where upstream asserts;
  `suppress_tokens` takes any iterable of ids (upstream asserts a list, and extends the caller's list in
  place, which we do not).
- `detect_language`'s dicts list the languages in token order (upstream's order follows set iteration,
  which varies with the hash seed); the dicts compare equal.
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Callable, Iterable, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field, replace

import numpy as np
import torch
import torch.nn.functional as F

from mizuoto.core.errors import InputError
from mizuoto.runtime.sampling import multinomial1

from .audio import CHUNK_LENGTH
from .steps import DecoderSteps
from .tokenizer import Tokenizer, get_tokenizer

NEG_INF = -float("inf")

__all__ = ["DecodingOptions", "DecodingResult", "categorical_probs", "compression_ratio", "decode", "detect_language"]


def compression_ratio(text: str) -> float:
    """Bytes of the UTF-8 text over bytes of its zlib stream (default level), as upstream's utils."""
    data = text.encode("utf-8")
    return len(data) / len(zlib.compress(data))


def categorical_probs(logits: torch.Tensor, temperature: float) -> torch.Tensor:
    """`Categorical(logits=logits / temperature).probs`, bit for bit: the scaled logits less their
    logsumexp, then softmax (not the same bits as a softmax of the scaled logits). A row that
    Categorical's argument check rejects comes out all nan."""
    scaled = logits / temperature
    return F.softmax(scaled - scaled.logsumexp(dim=-1, keepdim=True), dim=-1)


def _features(model, mel: torch.Tensor) -> torch.Tensor:
    """Audio features of `mel` (B, n_mels, frames), or `mel` itself when it already is (B, ctx, state)."""
    weight = model.decoder.token_embedding.weight
    mel = mel.to(device=weight.device, dtype=weight.dtype)
    if tuple(mel.shape[-2:]) == (model.dims.n_audio_ctx, model.dims.n_audio_state):
        return mel
    return model.encoder(mel)


@torch.no_grad()
def detect_language(model, mel: torch.Tensor, tokenizer: Tokenizer | None = None):
    """(language token ids, language probabilities) of each audio, from the logits after one
    <|startoftranscript|>; all other tokens are masked out. Shapes as upstream: a (n_audio,) tensor and
    a list of {code: probability} dicts, or a 0-d tensor and one dict for a single (n_mels, frames) mel.
    `mel` may also be encoded audio features (n_audio_ctx, n_audio_state in its last two dimensions)."""
    if tokenizer is None:
        tokenizer = get_tokenizer(model.is_multilingual, num_languages=model.num_languages)
    if tokenizer.language is None or tokenizer.language_token not in tokenizer.sot_sequence:
        raise InputError("This model doesn't have language tokens so it can't perform lang id")
    single = mel.ndim == 2
    if single:
        mel = mel.unsqueeze(0)
    audio = _features(model, mel)
    n_audio = audio.shape[0]
    sot = torch.full((n_audio, 1), tokenizer.sot, dtype=torch.long, device=audio.device)
    logits = model.decoder(sot, audio, model.decoder.new_cache(n_audio, capacity=1))[:, 0]
    language_ids = torch.tensor(tokenizer.all_language_tokens, dtype=torch.long, device=logits.device)
    others = torch.ones(logits.shape[-1], dtype=torch.bool, device=logits.device).index_fill_(0, language_ids, False)
    logits = logits.masked_fill(others, NEG_INF)
    tokens = logits.argmax(dim=-1)
    probs = logits.softmax(dim=-1)[:, language_ids].tolist()
    codes = tokenizer.all_language_codes
    language_probs = [dict(zip(codes, row, strict=True)) for row in probs]
    if single:
        return tokens[0], language_probs[0]
    return tokens, language_probs


@dataclass(frozen=True)
class DecodingOptions:
    """upstream's DecodingOptions, field for field (validated when decoding starts, as upstream)."""

    task: str = "transcribe"  # "transcribe" (X -> X), "translate" (X -> English) or "lang_id"
    language: str | None = None  # None: detect it

    temperature: float = 0.0
    sample_len: int | None = None  # most tokens to sample; None: n_text_ctx // 2
    best_of: int | None = None  # independent samples when temperature > 0
    beam_size: int | None = None  # beams when temperature == 0
    patience: float | None = None  # beam search patience (arXiv:2204.05424)
    length_penalty: float | None = None  # Google NMT's alpha, or None: divide by the length

    prompt: str | list[int] | None = None  # previous text (after <|startofprev|>)
    prefix: str | list[int] | None = None  # start of the current text

    # token ids (or comma-separated ids) to suppress; "-1" means the tokenizer's non-speech tokens
    suppress_tokens: str | Iterable[int] | None = "-1"
    suppress_blank: bool = True  # no blank or end of text as the first sampled token

    without_timestamps: bool = False  # <|notimestamps|>: text tokens only
    max_initial_timestamp: float | None = 1.0

    # Kept for upstream compatibility; ignored: the network computes in the dtype it was loaded in.
    fp16: bool = True


@dataclass(frozen=True)
class DecodingResult:
    audio_features: torch.Tensor
    language: str
    language_probs: dict[str, float] | None = None
    tokens: list[int] = field(default_factory=list)
    text: str = ""
    avg_logprob: float = np.nan
    no_speech_prob: float = np.nan
    temperature: float = np.nan
    compression_ratio: float = np.nan


# ---------------------------------------------------------------------------------------------------
# Logit filters: each takes the (rows, vocab) logits of the step and the (rows, length) tokens so far,
# and returns the filtered logits. Nothing here reads from the device.


class _Filter:
    def __call__(self, logits: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError


class _SuppressBlank(_Filter):
    """No blank (" ") and no end of text as the first sampled token."""

    def __init__(self, tokenizer: Tokenizer, sample_begin: int, device):
        self.ids = torch.tensor(tokenizer.encode(" ") + [tokenizer.eot], dtype=torch.long, device=device)
        self.sample_begin = sample_begin

    def __call__(self, logits, tokens):
        if tokens.shape[1] == self.sample_begin:
            logits = logits.index_fill(1, self.ids, NEG_INF)
        return logits


class _SuppressTokens(_Filter):
    def __init__(self, ids: Sequence[int], device):
        self.ids = torch.tensor(list(ids), dtype=torch.long, device=device)

    def __call__(self, logits, tokens):
        return logits.index_fill(1, self.ids, NEG_INF)


class _TimestampRules(_Filter):
    """upstream's ApplyTimestampRules for every row at once.

    Per row of sampled tokens: <|notimestamps|> never; after a lone timestamp (one not preceded by
    another), a timestamp or the end of text; after a pair (or a timestamp first), text; timestamps never
    below the last one, and above it unless it opens a segment; the first token a timestamp no later
    than max_initial_timestamp; and text is ruled out when the timestamps together are more probable
    than the likeliest text token.
    """

    def __init__(self, tokenizer: Tokenizer, sample_begin: int, max_initial_timestamp_index: int | None,
                 vocab: int, device):
        self.sample_begin = sample_begin
        self.begin = tokenizer.timestamp_begin
        self.eot = tokenizer.eot
        self.no_timestamps = None
        if tokenizer.no_timestamps is not None:
            self.no_timestamps = torch.tensor([tokenizer.no_timestamps], dtype=torch.long, device=device)
        self.max_initial_index = max_initial_timestamp_index
        self.columns = torch.arange(vocab, device=device)

    def __call__(self, logits, tokens):
        begin, columns = self.begin, self.columns
        if self.no_timestamps is not None:
            logits = logits.index_fill(1, self.no_timestamps, NEG_INF)

        sampled = tokens[:, self.sample_begin:]
        n = sampled.shape[1]  # the same for every row: known on the host
        if n >= 1:
            is_timestamp = sampled >= begin
            last = is_timestamp[:, -1]
            penultimate = is_timestamp[:, -2] if n >= 2 else torch.ones_like(last)
            lone = last & ~penultimate  # a segment is open: its end must come (or the end of text)
            banned = (last & penultimate)[:, None] & (columns >= begin)[None, :]
            banned |= lone[:, None] & (columns < self.eot)[None, :]
            # the last timestamp sampled (by position), if any
            positions = torch.arange(1, n + 1, device=tokens.device)
            where = torch.where(is_timestamp, positions, 0).argmax(dim=-1, keepdim=True)
            latest = sampled.gather(1, where)[:, 0]
            floor = torch.where(lone, latest, latest + 1)
            below = (columns[None, :] >= begin) & (columns[None, :] < floor[:, None])
            banned |= below & is_timestamp.any(dim=-1)[:, None]
            logits = logits.masked_fill(banned, NEG_INF)

        if n == 0:
            logits = logits.clone()
            logits[:, :begin] = NEG_INF  # the first sampled token is a timestamp
            if self.max_initial_index is not None:
                logits[:, begin + self.max_initial_index + 1:] = NEG_INF

        logprobs = F.log_softmax(logits.float(), dim=-1)
        timestamp_logprob = logprobs[:, begin:].logsumexp(dim=-1)
        max_text_logprob = logprobs[:, :begin].max(dim=-1).values
        text_banned = (timestamp_logprob > max_text_logprob)[:, None] & (columns < begin)[None, :]
        return logits.masked_fill(text_banned, NEG_INF)


# ---------------------------------------------------------------------------------------------------
# The decode task.


def _reorder_self_attention(cache, order: list[int], device) -> None:
    """Keep the self-attention rows `order` picks, as upstream's rearrange_kv_cache; the audio's
    cross-attention keys and values are the same for every beam of an audio and stay as they are."""
    cross, cache.cross = cache.cross, None
    try:
        cache.reorder(torch.tensor(order, dtype=torch.long, device=device))
    finally:
        cache.cross = cross


class _Task:
    def __init__(self, model, options: DecodingOptions, generator: torch.Generator | None,
                 steps: DecoderSteps | None = None, scope: Callable[[], AbstractContextManager] | None = None):
        self.model = model
        self.steps = steps or DecoderSteps(model.decoder)
        self.scope = scope or nullcontext
        self.options = options = _verify(options)
        self.generator = generator
        self.tokenizer = tokenizer = get_tokenizer(model.is_multilingual, num_languages=model.num_languages,
                                                   language=options.language or "en", task=options.task)
        self.n_group = options.beam_size or options.best_of or 1
        self.n_ctx = model.dims.n_text_ctx
        self.sample_len = options.sample_len or model.dims.n_text_ctx // 2
        sot_sequence = tokenizer.sot_sequence
        if options.without_timestamps:
            sot_sequence = tokenizer.sot_sequence_including_notimestamps
        self.initial_tokens = self._initial_tokens(sot_sequence)
        self.sample_begin = len(self.initial_tokens)
        self.sot_index = self.initial_tokens.index(tokenizer.sot)
        self.eot = tokenizer.eot
        if options.beam_size is not None:
            self.patience = options.patience or 1.0
            self.max_candidates = round(options.beam_size * self.patience)
            if not self.max_candidates > 0:
                raise InputError(f"Invalid beam size ({options.beam_size}) or patience ({options.patience})")
        self.device = model.decoder.token_embedding.weight.device

        filters: list[_Filter] = []
        if options.suppress_blank:
            filters.append(_SuppressBlank(tokenizer, self.sample_begin, self.device))
        if options.suppress_tokens:
            filters.append(_SuppressTokens(self._suppressed(), self.device))
        if not options.without_timestamps:
            precision = CHUNK_LENGTH / model.dims.n_audio_ctx  # 0.02 s
            index = None
            if options.max_initial_timestamp:
                index = round(options.max_initial_timestamp / precision)
            filters.append(_TimestampRules(tokenizer, self.sample_begin, index, model.dims.n_vocab, self.device))
        self.filters = filters

    def _initial_tokens(self, sot_sequence) -> tuple[int, ...]:
        tokens = list(sot_sequence)
        prefix, prompt = self.options.prefix, self.options.prompt
        if prefix:
            ids = self.tokenizer.encode(" " + prefix.strip()) if isinstance(prefix, str) else list(prefix)
            # upstream's slice: with the default sample_len the bound is 0 and keeps the whole prefix
            ids = ids[-(self.n_ctx // 2 - self.sample_len):]
            tokens += ids
        if prompt:
            ids = self.tokenizer.encode(" " + prompt.strip()) if isinstance(prompt, str) else list(prompt)
            tokens = [self.tokenizer.sot_prev] + ids[-(self.n_ctx // 2 - 1):] + tokens
        return tuple(tokens)

    def _suppressed(self) -> tuple[int, ...]:
        tok = self.tokenizer
        ids = self.options.suppress_tokens
        if isinstance(ids, str):
            ids = [int(t) for t in ids.split(",")]
        ids = list(ids)
        if -1 in ids:
            ids = [t for t in ids if t >= 0] + list(tok.non_speech_tokens)
        ids += [tok.transcribe, tok.translate, tok.sot, tok.sot_prev, tok.sot_lm]
        if tok.no_speech is not None:
            ids.append(tok.no_speech)  # its probability is reported separately
        return tuple(sorted(set(ids)))

    # -- running -------------------------------------------------------------------------------------

    def run(self, mel: torch.Tensor) -> list[DecodingResult]:
        if self.n_group > 1 and mel.shape[0] > 1 and self.options.task != "lang_id":
            return [result for i in range(mel.shape[0]) for result in self._run(mel[i:i + 1])]
        return self._run(mel)

    def _run(self, mel: torch.Tensor) -> list[DecodingResult]:
        tokenizer, options = self.tokenizer, self.options
        n_audio = mel.shape[0]
        audio = _features(self.model, mel)
        tokens = torch.tensor([self.initial_tokens], device=audio.device).repeat(n_audio, 1)

        languages = [options.language] * n_audio
        language_probs = None
        if options.language is None or options.task == "lang_id":
            language_tokens, language_probs = detect_language(self.model, audio, tokenizer)
            languages = [max(probs, key=probs.get) for probs in language_probs]
            if options.language is None:
                tokens[:, self.sot_index + 1] = language_tokens
        if options.task == "lang_id":
            return [DecodingResult(audio_features=features, language=language, language_probs=probs)
                    for features, language, probs in zip(audio, languages, language_probs, strict=True)]

        tokens = tokens.repeat_interleave(self.n_group, dim=0)
        if options.beam_size is not None:
            candidates, sums, no_speech = self._beam_search(audio, tokens)
        else:
            candidates, sums, no_speech = self._sample(audio, tokens)
        no_speech = no_speech[::self.n_group]

        # each candidate from its first sampled token up to its first end of text
        texts_ids = [[seq[self.sample_begin: seq.index(self.eot)] for seq in group] for group in candidates]
        chosen = [_rank(group, group_sums, options.length_penalty)
                  for group, group_sums in zip(texts_ids, sums, strict=True)]
        picked = [group[i] for i, group in zip(chosen, texts_ids, strict=True)]
        picked_sums = [group_sums[i] for i, group_sums in zip(chosen, sums, strict=True)]
        results = []
        for i, ids in enumerate(picked):
            text = tokenizer.decode(ids).strip()
            results.append(DecodingResult(
                audio_features=audio[i], language=languages[i], tokens=ids, text=text,
                avg_logprob=picked_sums[i] / (len(ids) + 1), no_speech_prob=no_speech[i],
                temperature=options.temperature, compression_ratio=compression_ratio(text)))
        return results

    def _logits(self, tokens, audio, cache, step: int, no_speech: list):
        """The filtered logits of the last position; at the first step also the no-speech probability
        at the start-of-transcript position (left on the device). The first step runs the initial
        tokens through the decoder; the next ones run one token each through the step (its graphs)."""
        with self.scope():
            logits = self.model.decoder(tokens, audio, cache) if step == 0 else self.steps(tokens[:, -1:], cache)
        if step == 0 and self.tokenizer.no_speech is not None:
            no_speech.append(logits[:, self.sot_index].float().softmax(dim=-1)[:, self.tokenizer.no_speech])
        logits = logits[:, -1]
        for apply in self.filters:
            logits = apply(logits, tokens)
        return logits

    def _sample(self, audio, tokens):
        """Greedy (temperature 0) or sampled decoding of every row: (token lists grouped per audio,
        summed log probabilities grouped the same way, no-speech probability per row)."""
        eot, temperature = self.eot, self.options.temperature
        rows = tokens.shape[0]
        cache = self.model.decoder.new_cache(rows)
        sums = torch.zeros(rows, device=audio.device)
        no_speech: list[torch.Tensor] = []
        for step in range(self.sample_len):
            logits = self._logits(tokens, audio, cache, step, no_speech)
            invalid = None
            if temperature == 0:
                chosen = logits.argmax(dim=-1)
            else:
                drawn, invalid = multinomial1(categorical_probs(logits, temperature), self.generator)
                chosen, invalid = drawn[:, 0], invalid.any()  # rows Categorical would reject (nan)
            logprobs = F.log_softmax(logits.float(), dim=-1)
            current = logprobs.gather(1, chosen[:, None])[:, 0]
            ended = tokens[:, -1] == eot
            sums += current * ~ended
            chosen = torch.where(ended, eot, chosen)
            tokens = torch.cat([tokens, chosen[:, None]], dim=-1)
            completed = (chosen == eot).all()
            # the step's one wait on the device
            if invalid is None:
                done = bool(completed)
            else:
                done, bad = torch.stack([completed, invalid]).tolist()
                if bad:
                    raise InputError("Categorical(logits=logits / temperature) got invalid values (nan) "
                                     "at a sampling step")
            if done or tokens.shape[-1] > self.n_ctx:
                break
        # make sure each sequence ends with an end of text
        tokens = F.pad(tokens, (0, 1), value=eot)
        n_audio = rows // self.n_group
        token_lists = tokens.reshape(n_audio, self.n_group, -1).tolist()
        sum_lists = sums.reshape(n_audio, self.n_group).tolist()
        no_speech_list = no_speech[0].tolist() if no_speech else [np.nan] * rows
        return token_lists, sum_lists, no_speech_list

    def _beam_search(self, audio, tokens):
        """Beam search as upstream's BeamSearchDecoder: per audio, the beam_size best unfinished
        continuations go on; finished ones are kept (up to beam_size * patience) until every audio
        has enough of them."""
        eot, beam = self.eot, self.options.beam_size
        rows = tokens.shape[0]
        n_audio = rows // beam
        cache = self.model.decoder.new_cache(rows)
        sums = np.zeros(rows, dtype=np.float32)  # on the host; upstream's float32 additions, bit for bit
        no_speech: list[torch.Tensor] = []
        sequences = tokens.tolist()
        finished_all: list[dict[tuple[int, ...], float]] = [{} for _ in range(n_audio)]
        for step in range(self.sample_len):
            logits = self._logits(tokens, audio, cache, step, no_speech)
            top = F.log_softmax(logits.float(), dim=-1).topk(beam + 1)
            # the step's one wait: values (their float32 bits) and ids in one transfer
            packed = torch.cat([top.values.view(torch.int32), top.indices.to(torch.int32)], dim=1).cpu().numpy()
            values, indices = packed[:, :beam + 1].view(np.float32), packed[:, beam + 1:]
            scores_all = (sums[:, None] + values).tolist()
            indices = indices.tolist()

            next_sequences, sources, next_sums, newly_finished = [], [], [], []
            for i in range(n_audio):
                scores: dict[tuple[int, ...], float] = {}
                source: dict[tuple[int, ...], int] = {}
                for row in range(i * beam, (i + 1) * beam):
                    for score, token in zip(scores_all[row], indices[row], strict=True):
                        sequence = (*sequences[row], token)
                        scores[sequence] = score
                        source[sequence] = row
                finished: dict[tuple[int, ...], float] = {}
                saved = 0
                for sequence in sorted(scores, key=scores.get, reverse=True):
                    if sequence[-1] == eot:
                        finished[sequence] = scores[sequence]
                    else:
                        next_sequences.append(list(sequence))
                        sources.append(source[sequence])
                        next_sums.append(scores[sequence])
                        saved += 1
                        if saved == beam:
                            break
                newly_finished.append(finished)

            sequences = next_sequences
            sums = np.array(next_sums, dtype=np.float32)
            tokens = torch.tensor(sequences, device=tokens.device)
            if sources != list(range(len(sources))):
                _reorder_self_attention(cache, sources, audio.device)
            for kept, new in zip(finished_all, newly_finished, strict=True):
                for sequence in sorted(new, key=new.get, reverse=True):
                    if len(kept) >= self.max_candidates:
                        break
                    kept[sequence] = new[sequence]
            if all(len(kept) >= self.max_candidates for kept in finished_all) or tokens.shape[-1] > self.n_ctx:
                break

        # not enough finished: add the unfinished ones, best first
        sums = sums.reshape(n_audio, beam)
        for i, kept in enumerate(finished_all):
            if len(kept) < beam:
                for j in list(np.argsort(sums[i]))[::-1]:
                    kept[(*sequences[i * beam + j], eot)] = sums[i][j].item()
                    if len(kept) >= beam:
                        break
        token_lists = [[list(sequence) for sequence in kept] for kept in finished_all]
        sum_lists = [list(kept.values()) for kept in finished_all]
        no_speech_list = no_speech[0].tolist() if no_speech else [np.nan] * rows
        return token_lists, sum_lists, no_speech_list


def _rank(candidates: list[list[int]], sums: list[float], length_penalty: float | None) -> int:
    """upstream's MaximumLikelihoodRanker: the best summed log probability over the length (or over
    Google NMT's ((5 + length) / 6) ** alpha); the first on ties. An empty candidate (an end of text
    first, possible with suppress_blank=False) ranks last under length normalisation, where upstream
    divides by zero and raises."""
    scores = []
    for ids, total in zip(candidates, sums, strict=True):
        length = len(ids)
        penalty = length if length_penalty is None else ((5 + length) / 6) ** length_penalty
        scores.append(total / penalty if penalty else -math.inf)
    return int(np.argmax(scores))


def _verify(options: DecodingOptions) -> DecodingOptions:
    if options.beam_size is not None and options.best_of is not None:
        raise InputError("beam_size and best_of can't be given together")
    if options.temperature == 0 and options.best_of is not None:
        raise InputError("best_of with greedy sampling (T=0) is not compatible")
    if options.patience is not None and options.beam_size is None:
        raise InputError("patience requires beam_size to be given")
    if options.length_penalty is not None and not 0 <= options.length_penalty <= 1:
        raise InputError("length_penalty (alpha) should be a value between 0 and 1")
    return options


@torch.no_grad()
def decode(model, mel: torch.Tensor, options: DecodingOptions = DecodingOptions(),
           generator: torch.Generator | None = None, *, steps: DecoderSteps | None = None,
           step_scope: Callable[[], AbstractContextManager] | None = None,
           **kwargs) -> DecodingResult | list[DecodingResult]:
    """Decode 30-second window(s): `mel` (n_mels, 3000) gives one DecodingResult, (n_audio, n_mels, 3000)
    a list. `mel` may be encoded audio features instead. Keyword arguments replace fields of `options`.
    `generator` supplies the draws when temperature > 0 (the default generator when None).
    `steps`: the decoder's one-token step kept with the model (its CUDA graphs); None runs it eagerly.
    `step_scope()` is entered around every decoder call: a host binds its attention policy and checks
    for cancellation there."""
    single = mel.ndim == 2
    if single:
        mel = mel.unsqueeze(0)
    if kwargs:
        options = replace(options, **kwargs)
    results = _Task(model, options, generator, steps, step_scope).run(mel)
    return results[0] if single else results
