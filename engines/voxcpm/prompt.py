"""The prefill sequence of a request, laid out as upstream's `_generate_with_prompt_cache` lays it out.

Every position carries a text token and an audio patch, and two masks say which one counts:

    zero-shot      [ text ids, audio_start ]
    continuation   [ prompt text + text ids, audio_start ] [ prompt patches ]            (v1 and v2)
    reference      [ ref_start ] [ reference patches ] [ ref_end ] [ text ids, audio_start ]     (v2)
    both           [ ref_start ] [ reference patches ] [ ref_end ] [ prompt text + text ids,
                   audio_start ] [ prompt patches ]                                              (v2)

Text positions hold zero patches; audio positions hold token id 0. The reference is the voice to imitate
("structurally isolated" by its control ids); the prompt is a recording whose speech the output
continues, so its transcript goes before the text. Prompt audio is padded on the left to whole patches
(its end touches the generated audio), reference audio on the right.

`context_patches` is how many of the prompt's last patches go before the generated ones when decoding,
so the VAE's causal convolutions start from real audio, and whose samples are then cut off: v2 takes
min(streaming_prefix_len - 1, prompt patches) = up to 3 when the sequence ends in audio, v1 always
streaming_prefix_len - 1 = 2 when there is any prompt audio (its non-streaming cut does not look at the
count, its context does; see `cut_patches`).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

AUDIO_START, AUDIO_END, REF_START, REF_END = 101, 102, 103, 104  # upstream hard-codes these ids
V1_PREFIX_PATCHES = 3  # upstream's streaming_prefix_len: v1 (_generate_with_prompt_cache default)
V2_PREFIX_PATCHES = 4  # and v2


@dataclass
class Prefill:
    tokens: torch.Tensor  # (1, T) int64
    text_mask: torch.Tensor  # (1, T) int32
    feats: torch.Tensor  # (1, T, patch, latent) float32
    audio_mask: torch.Tensor  # (1, T) int32
    context: list[torch.Tensor]  # prompt patches (1, 1, patch, latent) the decode starts from
    cut_patches: int  # patches of decoded audio the non-streaming output drops from its start

    @property
    def length(self) -> int:
        return int(self.tokens.shape[1])


def _zeros(n: int, patch: int, latent: int) -> torch.Tensor:
    return torch.zeros((n, patch, latent), dtype=torch.float32)


def _ones(n: int) -> torch.Tensor:
    return torch.ones(n, dtype=torch.int32)


def _none(n: int) -> torch.Tensor:
    return torch.zeros(n, dtype=torch.int32)


def build(version: int, text_ids: list[int], patch: int, latent: int, prompt_feats: torch.Tensor | None = None,
          reference_feats: torch.Tensor | None = None) -> Prefill:
    """`text_ids`: the tokenized (prompt text +) target text; `prompt_feats` / `reference_feats`:
    (patches, patch, latent) from the VAE, or None."""
    text = torch.tensor([*text_ids, AUDIO_START], dtype=torch.int64)
    n_text = text.shape[0]
    tokens, feats, text_mask, audio_mask = [text], [_zeros(n_text, patch, latent)], [_ones(n_text)], [_none(n_text)]
    if reference_feats is not None:
        if version != 2:
            raise ValueError("reference audio needs a VoxCPM2 model")  # the engine explains this to users
        n_ref = reference_feats.shape[0]
        tokens.insert(0, torch.tensor([REF_START, *[0] * n_ref, REF_END], dtype=torch.int64))
        feats.insert(0, torch.cat([_zeros(1, patch, latent), reference_feats.float(), _zeros(1, patch, latent)]))
        text_mask.insert(0, torch.cat([_ones(1), _none(n_ref), _ones(1)]))
        audio_mask.insert(0, torch.cat([_none(1), _ones(n_ref), _none(1)]))
    n_prompt = 0 if prompt_feats is None else prompt_feats.shape[0]
    if n_prompt:
        tokens.append(torch.zeros(n_prompt, dtype=torch.int64))
        feats.append(prompt_feats.float())
        text_mask.append(_none(n_prompt))
        audio_mask.append(_ones(n_prompt))
    prefill = Prefill(torch.cat(tokens)[None], torch.cat(text_mask)[None], torch.cat(feats)[None],
                      torch.cat(audio_mask)[None], [], 0)
    if version == 2:
        if n_prompt:  # the sequence ends in audio: continue from its last patches
            keep = min(V2_PREFIX_PATCHES - 1, n_prompt)
            prefill.context = list(prefill.feats[:, -keep:].split(1, dim=1))
            prefill.cut_patches = keep
    else:
        audio = int(prefill.audio_mask.sum())
        if audio:
            keep = min(V1_PREFIX_PATCHES - 1, audio)
            prefill.context = list(prefill.feats[:, -keep:].split(1, dim=1))
            prefill.cut_patches = V1_PREFIX_PATCHES - 1
    return prefill


def prefix_patches(version: int) -> int:
    """How many patches the streaming decode keeps as context (upstream's streaming_prefix_len)."""
    return V2_PREFIX_PATCHES if version == 2 else V1_PREFIX_PATCHES
