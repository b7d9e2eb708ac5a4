"""The seeded weights of CosyVoice's tiny reference models, defined once: the writers (in the upstream venv) fill
upstream's modules with them, the tests fill ours from the names and shapes a set records. Pure torch, no upstream
import.
"""

from __future__ import annotations

import math

import torch


def fill(name: str, shape: tuple, seed: int) -> torch.Tensor:
    """One parameter, nothing left at upstream's init (zeroed AdaLN modulations, LayerNorm ones, wenet's
    xavier position biases): norm scales in [0.5, 1.5), biases and position biases small, every other weight at
    1/sqrt(fan-in) (an embedding's rows at unit scale over its width)."""
    g = torch.Generator().manual_seed(seed)
    leaf = name.rsplit(".", 1)[-1]
    if len(shape) == 1 and leaf == "weight":  # LayerNorm / GroupNorm scales
        return torch.rand(shape, generator=g) + 0.5
    if leaf == "bias" or leaf.startswith("pos_bias_"):
        return torch.randn(shape, generator=g) * 0.1
    return torch.randn(shape, generator=g) / math.sqrt(math.prod(shape[1:]))


def state(entries: list, seed: int) -> dict:
    """The parameters for [(name, shape)] in that order, entry i drawn from seed + i."""
    return {name: fill(name, tuple(shape), seed + i) for i, (name, shape) in enumerate(entries)}


DECODER_GAIN = 4.0  # the LM head's weights x this: peaked distributions, so top-p keeps fewer than top_k
STOP_BIAS = 11.0  # added to CV2's end row of the LM head's bias: requests end before max_len


def lm_state(entries: list, seed: int, speech_tokens: int) -> dict:
    """An LM's parameters: `state`, then llm_decoder scaled by DECODER_GAIN, and CosyVoice 2's end row (id
    speech_tokens, the one min_len forbids) raised by STOP_BIAS in its bias. CosyVoice 3's head has no bias: its 200
    stop rows end requests by their number alone."""
    values = state(entries, seed)
    values["llm_decoder.weight"] = values["llm_decoder.weight"] * DECODER_GAIN
    if "llm_decoder.bias" in values:
        values["llm_decoder.bias"][speech_tokens] += STOP_BIAS
    return values
