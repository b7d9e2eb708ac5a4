"""CosyVoice's speech-token language model: Qwen2LM (CosyVoice 2) and CosyVoice3LM (upstream's cosyvoice/llm/llm.py
`inference` and `inference_wrapper`), on the shared Qwen decoder (mizuoto/nn/qwen.py).

    lm_input = [sos, embed_tokens(prompt text + text), task_id, speech_embedding(prompt speech tokens)]
    prefill, then one token a step: llm_decoder(last hidden).log_softmax -> ras sampling (ras.py) -> the token's
    speech_embedding row is the next input; a stop id ends it (CV2: 6561..6563, CV3: 6561..6760); the end id
    (speech_token_size) is forbidden for the first min_len = 2 x text tokens; at most max_len = 20 x text tokens.

CosyVoice 2 keeps sos and task_id in `llm_embedding` (2 rows) and its llm_decoder has a bias; CosyVoice 3 keeps
them inside `speech_embedding` (rows 6561 + 0 and + 2), has no bias, and its text must hold <|endofprompt|> (id
151646). `silent_tokens` are the ids CosyVoice3Model.llm_job stops keeping after 5 in a row.

Module and parameter names are upstream's (llm.pt's keys): the Qwen2 model under `llm.model.model.`; its lm_head
(`llm.model.lm_head.weight`, the tied text head, 136 M parameters at real size) is never used and is not loaded.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

import torch
from torch import nn

from mizuoto.core.errors import InputError
from mizuoto.nn.qwen import AttentionStep, QwenConfig, QwenDecoder, repeat_kv
from mizuoto.runtime import accel
from mizuoto.runtime.accel import sdpa_reference
from mizuoto.runtime.graphs import DecoderSteps, Graphs

from .ras import RELEASED, DeviceRas, RasParams, ras


def transformers_4_51_sdpa(q, k, v, mask, causal, scale, enable_gqa, dropout_p):
    """transformers 4.51.3's sdpa attention (CosyVoice's pin): the key/value heads are always repeated, SDPA never
    does GQA itself."""
    if enable_gqa:
        groups = q.shape[1] // k.shape[1]
        k, v = repeat_kv(k, groups), repeat_kv(v, groups)
    return sdpa_reference(q, k, v, mask, causal, scale, False, dropout_p)


ATTENTION = accel.Site("cosyvoice.llm", reference=transformers_4_51_sdpa, approx_ok=False)

SPEECH_TOKENS = 6561  # speech_token_size of both released models (FSQ 3^8)
END_OF_PROMPT = 151646  # <|endofprompt|>: CosyVoice 3's text must contain it
SILENT_TOKENS = (1, 2, 28, 29, 55, 248, 494, 2241, 2242, 2322, 2323)  # CosyVoice3Model's
MAX_SILENT = 5
MIN_TOKEN_TEXT_RATIO, MAX_TOKEN_TEXT_RATIO = 2, 20


@dataclass(frozen=True)
class LMConfig:
    version: int  # 2: Qwen2LM, 3: CosyVoice3LM
    qwen: QwenConfig
    speech_token_size: int = SPEECH_TOKENS

    @property
    def extra_ids(self) -> int:
        """Rows after the speech tokens in speech_embedding / llm_decoder: CV2 3 (end, ..., fill), CV3 200."""
        return 3 if self.version == 2 else 200

    @property
    def stop_ids(self) -> range:
        return range(self.speech_token_size, self.speech_token_size + self.extra_ids)


class Holder(nn.Module):
    """Upstream's nesting (Qwen2LM.llm = Qwen2Encoder, .model = Qwen2ForCausalLM, .model = Qwen2Model), kept so the
    keys read `llm.model.model.*`."""

    def __init__(self, inner: nn.Module):
        super().__init__()
        self.model = inner


class CosyVoiceLM(nn.Module):
    def __init__(self, config: LMConfig):
        super().__init__()
        if config.version not in (2, 3):
            raise ValueError(f"CosyVoice LM version must be 2 or 3, got {config.version}")
        self.config = config
        hidden, rows = config.qwen.hidden_size, config.speech_token_size + config.extra_ids
        if config.version == 2:
            self.llm_embedding = nn.Embedding(2, hidden)  # sos, task_id
        self.llm = Holder(Holder(QwenDecoder(config.qwen, site=ATTENTION)))
        self.llm_decoder = nn.Linear(hidden, rows, bias=config.version == 2)
        self.speech_embedding = nn.Embedding(rows, hidden)

    @property
    def decoder(self) -> QwenDecoder:
        return self.llm.model.model

    def specials(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(sos, task_id) embeddings, each (1, 1, hidden)."""
        if self.config.version == 2:
            table, sos, task = self.llm_embedding.weight, 0, 1
        else:
            table, sos, task = self.speech_embedding.weight, self.config.speech_token_size, \
                self.config.speech_token_size + 2
        return table[sos].reshape(1, 1, -1), table[task].reshape(1, 1, -1)

    def prompt(self, text: torch.Tensor, prompt_text: torch.Tensor, prompt_speech_token: torch.Tensor) -> torch.Tensor:
        """lm_input (1, L, hidden)."""
        text = torch.concat([prompt_text, text], dim=1)
        if self.config.version == 3 and not bool((text == END_OF_PROMPT).any()):
            raise InputError("CosyVoice 3's text or prompt text must contain <|endofprompt|>: end the instruction "
                             "(or 'You are a helpful assistant.') with it")
        text_emb = self.decoder.embed_tokens(text)
        sos, task = self.specials()
        if prompt_speech_token.shape[1] != 0:
            speech = self.speech_embedding(prompt_speech_token)
        else:
            speech = torch.zeros(1, 0, text_emb.shape[-1], dtype=text_emb.dtype, device=text_emb.device)
        return torch.concat([sos, text_emb, task, speech], dim=1)

    def steps(self, graphs: Graphs | None = None) -> DecoderSteps:
        """The one-token decode step as runtime.graphs.DecoderSteps: the fed speech_embedding row through the
        layers (CUDA graphs of everything but attention when `graphs` is given), the final norm and llm_decoder's
        logits. Keep it with the loaded model: its graphs hold the weights' addresses."""
        return DecoderSteps(self.decoder, graphs, head=lambda h: self.llm_decoder(h[:, -1]), embed=lambda x: x)

    def decode(self, lm_input: torch.Tensor, max_len: int, choose: Callable[[int, torch.Tensor], int | None],
               before_step: Callable[[], None] | None = None, steps: DecoderSteps | None = None) -> Iterator[int]:
        """upstream's inference_wrapper loop: prefill lm_input, then per step the llm_decoder's logits (V,) go to
        `choose(step, logits)`, which returns the token (None: stop); each token's speech_embedding row is fed
        next, through `steps` when given (the same kernels as the eager forward). Yields the tokens."""
        decoder = self.decoder
        length = lm_input.shape[1]
        cache = decoder.new_cache(1, length + max_len)
        x, positions = lm_input, torch.arange(length, device=lm_input.device)[None]
        for i in range(max_len):
            if before_step is not None:
                before_step()
            kv_len = cache.length + x.shape[1]
            if i == 0 or steps is None:
                hidden = decoder(x, positions, cache, decoder.mask_for(None, x.shape[1], kv_len))
                logits = self.llm_decoder(hidden[:, -1])
            else:
                step = AttentionStep(cache, decoder.mask_for(None, 1, kv_len))
                logits = steps(x, decoder.rope(positions, x.dtype), step)
                cache.advance(1)
            top = choose(i, logits.squeeze(dim=0))
            if top is None:
                return
            yield top
            x = self.speech_embedding.weight[top].reshape(1, 1, -1)
            positions = torch.tensor([[kv_len]], device=x.device)

    @torch.inference_mode()
    def generate(self, text: torch.Tensor, prompt_text: torch.Tensor, prompt_speech_token: torch.Tensor, *,
                 generator: torch.Generator | None = None, params: RasParams = RELEASED,
                 before_step: Callable[[], None] | None = None, steps: DecoderSteps | None = None,
                 on_device: bool | None = None) -> Iterator[int]:
        """upstream's inference: text (1, N) and prompt_text (1, P) text ids, prompt_speech_token (1, S) -> the
        speech tokens one by one (a stop id ends them and is not yielded). `on_device`: sample with ras.DeviceRas
        (one host read a step; upstream's draws on CUDA) rather than ras.ras; None: on CUDA."""
        if text.shape[0] != 1:
            raise InputError(f"the LM speaks one request at a time, got a batch of {text.shape[0]}")
        lm_input = self.prompt(text, prompt_text, prompt_speech_token)
        min_len = int(text.shape[1] * MIN_TOKEN_TEXT_RATIO)
        max_len = int(text.shape[1] * MAX_TOKEN_TEXT_RATIO)
        stops, end, out = self.config.stop_ids, self.config.speech_token_size, []
        if on_device is None:
            on_device = lm_input.device.type == "cuda"
        sampler = DeviceRas(params, lm_input.device) if on_device else None

        def choose(step: int, logits: torch.Tensor) -> int | None:
            logp = logits.log_softmax(dim=-1)
            if step < min_len:
                logp[end] = -float("inf")
            top = sampler(logp, generator) if sampler is not None else ras(logp, out, params, generator)
            if top in stops:
                return None
            out.append(top)
            return top

        yield from self.decode(lm_input, max_len, choose, before_step, steps)

    @torch.inference_mode()
    def teacher_forced(self, lm_input: torch.Tensor, tokens: list[int]) -> torch.Tensor:
        """The llm_decoder's logits (len(tokens) + 1, V) along given tokens (a stop after them)."""
        logits = []

        def choose(step: int, step_logits: torch.Tensor) -> int | None:
            logits.append(step_logits)
            return tokens[step] if step < len(tokens) else None

        for _ in self.decode(lm_input, len(tokens) + 1, choose):
            pass
        return torch.stack(logits)


def keep_silences(tokens: Iterator[int], version: int) -> Iterator[int]:
    """CosyVoice3Model.llm_job: after MAX_SILENT silent tokens in a row, further ones are dropped (CV2 keeps all)."""
    run = 0
    for token in tokens:
        if version == 3 and token in SILENT_TOKENS:
            run += 1
            if run > MAX_SILENT:
                continue
        else:
            run = 0
        yield token
