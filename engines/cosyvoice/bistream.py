"""CosyVoice's text bi-streaming LM decode: the speech tokens of a text that arrives in pieces, upstream's
Qwen2LM.inference_bistream (cosyvoice/llm/llm.py; CosyVoice3LM inherits it), which CosyVoice2Model /
CosyVoice3Model.llm_job run when the text is a generator. Upstream's frontend tokenises each arriving string on its
own and hands the LM one token at a time, so the pipeline's pieces are one token each.

What upstream does, per request (mix ratio 5 text : 15 speech tokens):
  - the input starts with sos; CosyVoice 3 feeds its prompt text up to and including <|endofprompt|> right after it
    (a prompt text without it is refused), the rest of the prompt text starts the text cache;
  - each piece's embeddings join the text cache; while prompt speech tokens remain and the cache holds 5 text
    tokens, [5 text, the next (up to) 15 prompt speech tokens] are appended to the input;
  - once the prompt speech is used up, a decode round: the pending input goes onto the KV cache and one token a
    step is drawn (ras sampling with row speech_token_size forbidden, upstream's ignore_eos: CV2's end id but CV3's
    sos, so CV3 may draw its end id here; each token's speech_embedding row is fed next) until a fill token (CV2
    6563, CV3 6564) ends the round; the fill is forced where the schedule says: first when 15 x (floor(S / 15) + 1)
    - S tokens are out (S prompt speech tokens), then 15 tokens after each fill, drawn or forced; a drawn special
    id other than the fill is an error;
  - the next round needs 5 new text tokens (they replace the pending input: the fill is never fed) and waits for
    more pieces otherwise; the very first round needs them too when nothing but sos is pending, and starts
    without them when prompt tokens are pending;
  - after the last piece: [the pending input, the rest of the text cache, task_id] goes onto the cache and tokens
    are drawn without any mask until the end id (CV2 6561, CV3 6562); another special id is an error.
Upstream's pending input is whatever it fed last when a round ended on a fill, so the final step feeds that input a
second time (the last speech token's row, or the text chunk or prompt the fill came right after), at new positions;
prompt speech tokens not yet mixed in when the text ends are dropped. There is no length limit. The fill and end
tokens are not yielded (fills do count in the repetition window). Several positions fed at once attend causally,
bottom-right aligned on the cache (transformers' 4-D mask for past + new keys; SDPA's is_causal on the first feed).

Ours runs that schedule token for token on CosyVoiceLM's parts (specials, speech_embedding, the Qwen decoder with
the mask `mask_for` builds, llm_decoder, DecoderSteps for the one-token steps) and ras.ras in upstream's draw
order, so the tokens are upstream's. The KV cache grows by doubling (upstream's grows by concatenation); upstream's
ValueError and assertion are one-line InputErrors (a ValueError too) after the same tokens.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence

import torch

from mizuoto.core.errors import InputError
from mizuoto.nn.qwen import AttentionStep, KVCache
from mizuoto.runtime.graphs import DecoderSteps

from .llm import END_OF_PROMPT, CosyVoiceLM
from .ras import RELEASED, RasParams, ras

MIX_RATIO = (5, 15)  # both yamls' mix_ratio: text tokens, speech tokens per interleaved chunk
FIRST_CAPACITY = 64  # KV positions reserved at first; doubled whenever a feed needs more

# the three kinds of step `choose` is asked about
FORCED_FILL = "forced fill"  # the schedule's fill: upstream draws nothing
TEXT_ARRIVING = "text arriving"  # drawn with row speech_token_size forbidden; a fill ends the round
FINAL = "final"  # drawn freely; the end id stops


def end_id(lm: CosyVoiceLM) -> int:
    size = lm.config.speech_token_size
    return size if lm.config.version == 2 else size + 1


def fill_id(lm: CosyVoiceLM) -> int:
    size = lm.config.speech_token_size
    return size + 2 if lm.config.version == 2 else size + 3


class _Feed:
    """The decoder's KV cache over one request: feeding positions returns the llm_decoder's logits (V,) at the last
    one. One position onto a non-empty cache goes through `steps` when given, several through the eager forward."""

    def __init__(self, lm: CosyVoiceLM, steps: DecoderSteps | None, before_step: Callable[[], None] | None):
        self.lm, self.steps, self.before_step = lm, steps, before_step
        self.cache: KVCache | None = None

    def _reserve(self, needed: int) -> KVCache:
        decoder, cache = self.lm.decoder, self.cache
        if cache is not None and needed <= cache.capacity:
            return cache
        capacity = max(FIRST_CAPACITY, needed) if cache is None else max(2 * cache.capacity, needed)
        grown = decoder.new_cache(1, capacity)
        if cache is not None:
            for old, new in zip((*cache.k, *cache.v), (*grown.k, *grown.v), strict=True):
                new.narrow(2, 0, cache.length).copy_(old.narrow(2, 0, cache.length))
            grown.length = cache.length
        self.cache = grown
        return grown

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        if self.before_step is not None:
            self.before_step()
        decoder, n = self.lm.decoder, x.shape[1]
        cache = self._reserve((0 if self.cache is None else self.cache.length) + n)
        start = cache.length
        kv_len = start + n
        positions = torch.arange(start, kv_len, device=x.device)[None]
        # n == kv_len: SDPA's is_causal; one query: no mask; else the bottom-right causal mask of past + new keys
        mask = decoder.mask_for(None, n, kv_len)
        if n == 1 and start > 0 and self.steps is not None:
            logits = self.steps(x, decoder.rope(positions, x.dtype), AttentionStep(cache, mask))
            cache.advance(1)
        else:
            logits = self.lm.llm_decoder(decoder(x, positions, cache, mask)[:, -1])
        return logits.squeeze(dim=0)


Choose = Callable[[torch.Tensor, str, Sequence[int]], int]
Piece = Sequence[int] | torch.Tensor  # one arriving text piece's token ids


def run_bistream(lm: CosyVoiceLM, text_ids: Iterable[Piece], prompt_text: torch.Tensor,
                 prompt_speech_token: torch.Tensor, choose: Choose, *, before_step: Callable[[], None] | None = None,
                 steps: DecoderSteps | None = None) -> Iterator[int]:
    """upstream's inference_bistream schedule; `choose(logits, kind, tokens so far)` gives each step's token (kind:
    FORCED_FILL, TEXT_ARRIVING or FINAL; the tokens so far include the fills). Yields the speech tokens."""
    if prompt_text.shape[0] != 1 or prompt_speech_token.shape[0] != 1:
        raise InputError(f"the LM speaks one request at a time, got a batch of {prompt_text.shape[0]}")
    config, decoder = lm.config, lm.decoder
    size, fill, end = config.speech_token_size, fill_id(lm), end_id(lm)
    text_ratio, speech_ratio = MIX_RATIO
    sos, task = lm.specials()
    device, hidden = sos.device, sos.shape[-1]
    speech = lm.speech_embedding(prompt_speech_token.to(device)) if prompt_speech_token.shape[1] != 0 else \
        torch.zeros(1, 0, hidden, dtype=sos.dtype, device=device)
    pending = sos  # upstream's lm_input
    prompt_text = prompt_text.to(device)
    if config.version == 3:
        ids = prompt_text.flatten().tolist()
        if END_OF_PROMPT not in ids:
            raise InputError("CosyVoice 3's prompt text must contain <|endofprompt|>: end the instruction (or "
                             "'You are a helpful assistant.') with it")
        eop = ids.index(END_OF_PROMPT)
        pending = torch.concat([pending, decoder.embed_tokens(prompt_text[:, :eop + 1])], dim=1)
        prompt_text = prompt_text[:, eop + 1:]
    text_cache = decoder.embed_tokens(prompt_text)
    prompted = prompt_speech_token.shape[1]
    next_fill = (prompted // speech_ratio + 1) * speech_ratio - prompted
    out: list[int] = []
    feed = _Feed(lm, steps, before_step)

    def special(token: int, when: str) -> InputError:
        return InputError(f"CosyVoice {config.version}'s LM drew the special token {token} {when} (upstream's "
                          f"inference_bistream stops with a ValueError there too): try another seed, or give the "
                          f"text in one piece")

    for piece in text_ids:
        if isinstance(piece, torch.Tensor):
            piece = piece.reshape(1, -1).to(device)
        else:
            piece = torch.tensor(list(piece), dtype=torch.long, device=device).reshape(1, -1)
        text_cache = torch.concat([text_cache, decoder.embed_tokens(piece)], dim=1)
        while speech.shape[1] != 0:  # mix the prompt speech in, 5 text : 15 speech
            if text_cache.shape[1] < text_ratio:
                break
            pending = torch.concat([pending, text_cache[:, :text_ratio], speech[:, :speech_ratio]], dim=1)
            text_cache, speech = text_cache[:, text_ratio:], speech[:, speech_ratio:]
        if speech.shape[1] != 0:
            continue
        after_fill = len(out) != 0 and out[-1] == fill
        if after_fill or (len(out) == 0 and pending.shape[1] == 1):
            if text_cache.shape[1] < text_ratio:
                continue  # wait for more text
            chunk = text_cache[:, :text_ratio]
            pending = chunk if after_fill else torch.concat([pending, chunk], dim=1)
            text_cache = text_cache[:, text_ratio:]
        while True:  # one decode round, until a fill
            logits = feed(pending)
            if next_fill != -1 and len(out) == next_fill:
                top = choose(logits, FORCED_FILL, out)
            else:
                top = choose(logits, TEXT_ARRIVING, out)
            if top == fill:
                next_fill = len(out) + speech_ratio + 1
            out.append(top)
            if top >= size:
                if top == fill:
                    break
                raise special(top, "while the text was still arriving")
            yield top
            pending = lm.speech_embedding.weight[top].reshape(1, 1, -1)

    pending = torch.concat([pending, text_cache, task], dim=1)
    while True:  # the rest of the text, then until the end id
        top = choose(feed(pending), FINAL, out)
        out.append(top)
        if top >= size:
            if top == end:
                return
            raise special(top, "after the last text")
        yield top
        pending = lm.speech_embedding.weight[top].reshape(1, 1, -1)


@torch.inference_mode()
def generate_bistream(lm: CosyVoiceLM, text_ids: Iterable[Piece], prompt_text: torch.Tensor,
                      prompt_speech_token: torch.Tensor, *, generator: torch.Generator | None,
                      params: RasParams = RELEASED, before_step: Callable[[], None] | None = None,
                      steps: DecoderSteps | None = None) -> Iterator[int]:
    """upstream's inference_bistream: `text_ids` the token ids of each arriving text piece (the pipeline: one token
    each), prompt_text (1, P) text ids, prompt_speech_token (1, S) -> the speech tokens one by one (fills and the end
    id are not yielded). Draws from `generator` as upstream draws from the global one."""
    yield from run_bistream(lm, text_ids, prompt_text, prompt_speech_token, sampler(lm, params, generator),
                            before_step=before_step, steps=steps)


def sampler(lm: CosyVoiceLM, params: RasParams, generator: torch.Generator | None) -> Choose:
    """upstream's choice at each step: the forced fill as it is; else log_softmax, the row speech_token_size set to
    -inf while text arrives (upstream's ignore_eos: CV2's end id, CV3's sos), then ras sampling."""
    size, fill = lm.config.speech_token_size, fill_id(lm)

    def choose(logits: torch.Tensor, kind: str, out: Sequence[int]) -> int:
        if kind == FORCED_FILL:
            return fill
        logp = logits.log_softmax(dim=-1)
        if kind == TEXT_ARRIVING:
            logp[size] = -float("inf")
        return ras(logp, out, params, generator)

    return choose


@torch.inference_mode()
def teacher_forced_bistream(lm: CosyVoiceLM, text_ids: Iterable[Piece], prompt_text: torch.Tensor,
                            prompt_speech_token: torch.Tensor, tokens: Sequence[int],
                            steps: DecoderSteps | None = None) -> torch.Tensor:
    """The llm_decoder's logits (steps, V) at every step of the schedule along given tokens (upstream's out_tokens:
    the fills and the last, stopping or refused, id included), for comparisons where one rounding could change a
    draw."""
    logits: list[torch.Tensor] = []

    def choose(step_logits: torch.Tensor, kind: str, out: Sequence[int]) -> int:
        logits.append(step_logits)
        return tokens[len(logits) - 1]

    try:
        for _ in run_bistream(lm, text_ids, prompt_text, prompt_speech_token, choose, steps=steps):
            pass
    except InputError:
        if len(logits) != len(tokens):  # not the refused last token
            raise
    return torch.stack(logits)
