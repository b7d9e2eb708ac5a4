"""The talker's prefill for each kind of request, from token ids (upstream: the first half of
`Qwen3TTSForConditionalGeneration.generate` and `generate_icl_prompt`).

A request's text arrives as the ids of upstream's chat template (`assistant_text`): ids[:3] are
"<|im_start|>assistant\\n", ids[-5:] "<|im_end|>\\n<|im_start|>assistant\\n", the text between. The
prefill is

    [instruct]                     text embeddings of "<|im_start|>user\\n{instruct}<|im_end|>\\n"
    role                           text embeddings of ids[:3]
    control codes                  codec embeddings of (no)think, think_bos, [language], think_eos,
                                   [speaker], pad, each plus tts_pad (the last plus tts_bos)
    then, streaming text           ids[3] + codec bos; the rest of the text, then tts_eos, is fed one
                                   embedding per frame ("trailing"), then tts_pad
    or the whole text              every text id, then tts_eos, each + codec pad; then tts_pad + bos
    or the clone (ICL) block       reference text + text + tts_eos against codec bos + reference codes

The speaker is a codec id (CustomVoice), the x-vector of a reference recording (Base), or nothing
(VoiceDesign). Every text_projection call takes the same ids together as upstream's, since the MLP's
last bits depend on how many rows one call holds; all other pieces are exact lookups and sums.
Batches are left-padded with zero embeddings; the shorter trailing texts continue with tts_pad.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from mizuoto.core.errors import InputError

from .config import ModelConfig
from .talker import Talker

# template ids before the text ("<|im_start|>assistant\n") and after it ("<|im_end|>\n<|im_start|>assistant\n")
ROLE, TAIL = 3, 5
REF_TAIL = 2  # "<|im_end|>\n" after a reference transcript


def drops_instruct(config: ModelConfig) -> bool:
    """Whether upstream ignores a CustomVoice instruct for this model: `tts_model_size in "0b6"`, a
    substring test (so the 0.6B models, and a config without a size, take none)."""
    return config.kind == "custom_voice" and config.size in "0b6"


def assistant_text(text: str) -> str:
    return f"<|im_start|>assistant\n{text}<|im_end|>\n<|im_start|>assistant\n"


def reference_text(text: str) -> str:
    return f"<|im_start|>assistant\n{text}<|im_end|>\n"


def instruct_text(instruct: str) -> str:
    return f"<|im_start|>user\n{instruct}<|im_end|>\n"


@dataclass
class Prompt:
    """One request's prefill (1, L, hidden) and the text embeddings fed one per frame (1, T, hidden)."""

    embeds: torch.Tensor
    trailing: torch.Tensor


@dataclass
class Batch:
    """Prompts left-padded into one batch (upstream's layout)."""

    embeds: torch.Tensor  # (B, L, hidden), zeros before each shorter prompt
    attention: torch.Tensor  # (B, L) long: 1 for real positions
    trailing: torch.Tensor  # (B, T, hidden), tts_pad after each shorter text
    pad: torch.Tensor  # (1, 1, hidden): tts_pad, fed once a row's trailing text is used up
    lengths: tuple[int, ...]  # real prefill positions per row (host ints)

    @property
    def padded(self) -> bool:
        return min(self.lengths) < self.embeds.shape[1]


def _as_ids(ids, device, name: str, minimum: int) -> torch.Tensor:
    ids = torch.as_tensor(ids, device=device)
    if ids.dim() == 1:
        ids = ids[None]
    if ids.dim() != 2 or ids.shape[0] != 1 or ids.dtype not in (torch.int32, torch.int64):
        raise InputError(f"{name} must be one sequence of integer token ids, got shape {tuple(ids.shape)} "
                         f"and dtype {ids.dtype}")
    if ids.shape[1] < minimum:
        raise InputError(f"{name} holds {ids.shape[1]} token ids; the chat template alone takes {minimum - 1}, "
                         f"so the text is empty; give some words to speak")
    return ids


def _language_id(config: ModelConfig, language: str, speaker: str | None) -> int | None:
    talker = config.talker
    name = (language or "auto").lower()
    if name != "auto" and name not in talker.codec_language_id:
        raise InputError(f"language {language!r} is not supported by this model; use one of "
                         f"{', '.join(config.languages)}")
    language_id = None if name == "auto" else talker.codec_language_id[name]
    # a dialect speaker speaks its dialect when the language is Chinese or left to the model
    if name in ("chinese", "auto") and speaker:
        dialect = talker.spk_is_dialect.get(speaker.lower(), False)
        if dialect is not False:
            if dialect not in talker.codec_language_id:
                raise InputError(f"speaker {speaker!r} speaks {dialect!r}, which this model's languages lack")
            language_id = talker.codec_language_id[dialect]
    return language_id


def speaker_embedding(talker: Talker, config: ModelConfig, speaker: str) -> torch.Tensor:
    """A CustomVoice speaker's embedding (hidden,)."""
    spk = config.talker.spk_id.get((speaker or "").lower())
    if spk is None:
        names = ", ".join(config.speakers) or "none"
        raise InputError(f"speaker {speaker!r} is not one of this model's speakers ({names})")
    return talker.codec(torch.tensor(spk, device=talker.device))


def tts_specials(talker: Talker, config: ModelConfig) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """tts_bos, tts_eos, tts_pad embeddings, each (1, 1, hidden), projected together as upstream does."""
    ids = torch.tensor([[config.tts_bos_token_id, config.tts_eos_token_id, config.tts_pad_token_id]],
                       device=talker.device)
    return talker.text(ids).chunk(3, dim=1)


def build_prompt(talker: Talker, config: ModelConfig, text_ids, language: str = "auto",
                 speaker: str | None = None, x_vector: torch.Tensor | None = None, instruct_ids=None,
                 reference_ids=None, reference_codes: torch.Tensor | None = None,
                 non_streaming: bool = False) -> Prompt:
    """One request's prefill.

    `text_ids`: ids of `assistant_text(text)`. `speaker`: a CustomVoice speaker name (also picks a
    dialect); `x_vector`: a Base model's speaker embedding (hidden,) instead. `instruct_ids`: ids of
    `instruct_text(...)` or None. `reference_ids` (ids of `reference_text(transcript)`) with
    `reference_codes` (T, G): the Base model's in-context clone. `non_streaming`: the whole text in the
    prefill (upstream's default for CustomVoice and VoiceDesign) instead of one text id per frame.
    """
    device, t = talker.device, config.talker
    ids = _as_ids(text_ids, device, "text_ids", ROLE + TAIL + 1)
    tts_bos, tts_eos, tts_pad = tts_specials(talker, config)

    def codec_ids(values: list[int]) -> torch.Tensor:
        return talker.codec(torch.tensor([values], device=device))

    if x_vector is not None:
        if speaker:
            raise InputError("give either a speaker name or a reference voice (x-vector), not both")
        if x_vector.numel() != talker.hidden_size:
            raise InputError(f"the x-vector has {x_vector.numel()} values; this model takes {talker.hidden_size}")
        speaker_embed = x_vector.to(device=device, dtype=talker.dtype)
    else:
        speaker_embed = speaker_embedding(talker, config, speaker) if speaker else None
    language_id = _language_id(config, language, speaker)
    controls = ([t.codec_nothink_id, t.codec_think_bos_id, t.codec_think_eos_id] if language_id is None else
                [t.codec_think_id, t.codec_think_bos_id, language_id, t.codec_think_eos_id])
    codec = [codec_ids(controls)]
    if speaker_embed is not None:
        codec.append(speaker_embed.view(1, 1, -1))
    codec.append(codec_ids([t.codec_pad_id, t.codec_bos_id]))
    codec = torch.cat(codec, dim=1)

    role = talker.text(ids[:, :ROLE])
    body = torch.cat((tts_pad.expand(-1, codec.shape[1] - 2, -1), tts_bos), dim=1) + codec[:, :-1]
    parts = []
    if instruct_ids is not None:
        parts.append(talker.text(_as_ids(instruct_ids, device, "instruct_ids", 1)))
    parts += [role, body]

    if reference_codes is not None:
        if reference_ids is None:
            raise InputError("an in-context clone needs the reference transcript's ids with the reference codes")
        icl, trailing = _icl_block(talker, ids, _as_ids(reference_ids, device, "reference_ids", ROLE + REF_TAIL + 1),
                                   reference_codes, tts_pad, tts_eos, non_streaming, config)
        parts.append(icl)
    elif non_streaming:
        text = ids[:, ROLE:-TAIL]
        parts.append(torch.cat((talker.text(text), tts_eos), dim=1) + codec_ids([t.codec_pad_id] * (text.shape[1] + 1)))
        parts.append(tts_pad + codec_ids([t.codec_bos_id]))
        trailing = tts_pad
    else:
        parts.append(talker.text(ids[:, ROLE: ROLE + 1]) + codec[:, -1:])
        trailing = torch.cat((talker.text(ids[:, ROLE + 1: -TAIL]), tts_eos), dim=1)
    return Prompt(torch.cat(parts, dim=1), trailing)


def _icl_block(talker: Talker, ids, reference_ids, codes: torch.Tensor, tts_pad, tts_eos, non_streaming: bool,
               config: ModelConfig):
    """upstream's generate_icl_prompt: reference transcript + text + tts_eos against codec bos +
    reference codes, either summed position by position (streaming: the longer text continues one id
    per frame) or one after the other (non-streaming)."""
    t = config.talker
    codes = torch.as_tensor(codes, device=talker.device)
    if codes.dim() != 2 or codes.shape[1] != t.num_code_groups or codes.shape[0] < 1:
        raise InputError(f"reference codes must be (frames, {t.num_code_groups}), got {tuple(codes.shape)}")
    text = talker.text(torch.cat([reference_ids[:, ROLE:-REF_TAIL], ids[:, ROLE:-TAIL]], dim=-1))
    text = torch.cat([text, tts_eos], dim=1)
    bos = talker.codec(torch.tensor([[t.codec_bos_id]], device=talker.device))
    codec = torch.cat([bos, talker.codes_embedding(codes.long()).sum(1).unsqueeze(0)], dim=1)
    text_len, codec_len = text.shape[1], codec.shape[1]
    if non_streaming:
        pads = talker.codec(torch.tensor([[t.codec_pad_id] * text_len], device=talker.device))
        return torch.cat([text + pads, codec + tts_pad], dim=1), tts_pad
    if text_len > codec_len:
        return text[:, :codec_len] + codec, text[:, codec_len:]
    text = torch.cat([text] + [tts_pad] * (codec_len - text_len), dim=1)
    return text + codec, tts_pad


def batch_prompts(prompts: list[Prompt], pad: torch.Tensor) -> Batch:
    """Left-pad the prefills with zeros and right-pad the trailing texts with tts_pad (`pad`)."""
    if not prompts:
        raise InputError("nothing to generate: no request in the batch")
    width = max(p.embeds.shape[1] for p in prompts)
    trail = max(p.trailing.shape[1] for p in prompts)
    first = prompts[0].embeds
    hidden = first.shape[-1]
    embeds = first.new_zeros(len(prompts), width, hidden)
    attention = torch.zeros(len(prompts), width, dtype=torch.long, device=first.device)
    trailing = pad.reshape(1, 1, hidden).expand(len(prompts), trail, hidden).clone()
    for row, p in enumerate(prompts):
        n, m = p.embeds.shape[1], p.trailing.shape[1]
        embeds[row, width - n:] = p.embeds[0]
        attention[row, width - n:] = 1
        trailing[row, :m] = p.trailing[0]
    return Batch(embeds, attention, trailing, pad.reshape(1, 1, hidden), tuple(p.embeds.shape[1] for p in prompts))
