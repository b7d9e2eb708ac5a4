"""The input transformers' `Wav2Vec2FeatureExtractor` (4.57.3) gives a wav2vec 2.0 / HuBERT encoder, computed the
same way (`models/wav2vec2/feature_extraction_wav2vec2.py`, Apache-2.0 code, read, not copied).

The extractor pads a batch on the right to its longest utterance (`padding=True`), returns a (batch, samples)
attention mask when asked (`return_attention_mask`; preprocessor_config.json says whether by default: the
"layer"-norm models such as XLS-R and HuBERT-large take one, the "group"-norm ones are meant to get none) and,
with `do_normalize`, brings each utterance to zero mean and unit variance: (x - mean) / sqrt(var + 1e-7),
the statistics over the utterance's real samples when an attention mask exists, the padding then set back to
`padding_value`; without a mask (or without padding) over the whole, padded, row.

The statistics are numpy's, computed here with numpy on the same float32 arrays, because that is the
arithmetic upstream does: numpy sums float32 pairwise, torch's reductions sum in another order, and numpy 1
and 2 promote the `+ 1e-7` differently (float64 before numpy 2, float32 since), which the same numpy
expression follows either way.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from mizuoto.core.errors import InputError

SAMPLE_RATE = 16000
EPSILON = 1e-7


@dataclass(frozen=True)
class FeatureConfig:
    """preprocessor_config.json's fields, with the extractor's defaults."""

    do_normalize: bool = True
    return_attention_mask: bool = False
    padding_value: float = 0.0
    sampling_rate: int = SAMPLE_RATE

    @classmethod
    def from_dict(cls, config: dict) -> "FeatureConfig":
        return cls(do_normalize=bool(config.get("do_normalize", True)),
                   return_attention_mask=bool(config.get("return_attention_mask", False)),
                   padding_value=float(config.get("padding_value", 0.0)),
                   sampling_rate=int(config.get("sampling_rate", SAMPLE_RATE)))


def _as_float32(wave) -> np.ndarray:
    if isinstance(wave, torch.Tensor):
        wave = wave.detach().to("cpu").numpy()
    array = np.asarray(wave)
    if array.ndim != 1:
        raise InputError(f"the speech encoder's features take mono audio, one 1-D array per utterance; "
                         f"got shape {array.shape}")
    if array.shape[0] == 0:
        raise InputError("an utterance for the speech encoder is empty")
    return array.astype(np.float32, copy=False)


def zero_mean_unit_var(row: np.ndarray, length: int | None = None, padding_value: float = 0.0) -> np.ndarray:
    """One float32 row normalised over its first `length` samples (all when None); the rest set to
    `padding_value`."""
    if length is None:
        return (row - row.mean()) / np.sqrt(row.var() + EPSILON)
    real = row[:length]
    normed = (row - real.mean()) / np.sqrt(real.var() + EPSILON)
    if length < normed.shape[0]:
        normed[length:] = padding_value
    return normed


def input_values(waves, config: FeatureConfig = FeatureConfig(), return_attention_mask: bool | None = None,
                 padding: bool = True, sampling_rate: int = SAMPLE_RATE
                 ) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Utterances (a 1-D tensor or array, or a sequence of them) -> (input_values (batch, samples) float32,
    attention_mask (batch, samples) int32 or None), as `extractor(waves, return_tensors="pt", padding=padding,
    return_attention_mask=..., sampling_rate=16000)` returns them. `return_attention_mask` None takes the
    config's default. Without `padding` every utterance must have the same length (a tensor batch)."""
    if sampling_rate != config.sampling_rate:
        raise InputError(f"the speech encoder takes {config.sampling_rate} Hz audio; got {sampling_rate} Hz, "
                         f"resample it first")
    if isinstance(waves, (torch.Tensor, np.ndarray)) and waves.ndim == 2:
        waves = list(waves)
    elif isinstance(waves, (torch.Tensor, np.ndarray)):
        waves = [waves]
    rows = [_as_float32(w) for w in waves]
    if not rows:
        raise InputError("no utterance was given to the speech encoder's features")
    with_mask = config.return_attention_mask if return_attention_mask is None else return_attention_mask
    lengths = [row.shape[0] for row in rows]
    longest = max(lengths)
    if not padding and len(set(lengths)) > 1:
        raise InputError(f"utterances of {min(lengths)} to {longest} samples need padding=True to form a batch")
    padded = [np.pad(row, (0, longest - row.shape[0]), "constant", constant_values=config.padding_value)
              if row.shape[0] < longest else row for row in rows]
    if config.do_normalize:
        # the statistics skip the padding only where the extractor has an attention mask and pads
        use_lengths = with_mask and padding
        padded = [zero_mean_unit_var(row, length if use_lengths else None, config.padding_value)
                  for row, length in zip(padded, lengths, strict=True)]
    values = torch.from_numpy(np.stack(padded).astype(np.float32, copy=False))
    if not with_mask:
        return values, None
    mask = torch.zeros(values.shape, dtype=torch.int32)
    for index, length in enumerate(lengths):
        mask[index, :length] = 1
    return values, mask
