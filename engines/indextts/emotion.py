"""IndexTTS 2's emotion-vector mixing (upstream: the emo_vector part of `IndexTTS2.infer_generator` and
`find_most_similar_cosine`, indextts/infer_v2.py at ee40fa7).

An emotion vector gives eight strengths (happy, angry, sad, afraid, disgusted, melancholic, surprised, calm), typed
by the user or read from text by emotion_text.py. The checkpoint keeps, per emotion, a few recorded examples: feat2.pt
(`emo_matrix`) holds their GPT emotion vectors, feat1.pt (`spk_matrix`) the CAM++ styles of their speakers, both
split into eight groups by config.yaml's `emo_num` (73 rows: 3, 17, 2, 8, 4, 5, 10, 24). Per group one example is
taken, the one whose speaker style is most like the reference speaker's (cosine similarity, first of equals), or
with `use_random` one drawn by Python's `random.randint(0, n - 1)`, group by group in order (upstream draws from the
`random` module's global generator; pass `rng` a random.Random to keep a request's draws its own). Then

    emovec_mat = sum_i strength_i * example_i
    emovec     = emovec_mat + (1 - sum_i strength_i) * merge_emovec(speaker, emotion audio, alpha=1)

Before that, emo_alpha below 1 scales the strengths, each truncated to four decimals as upstream prints them
(`scale_strengths`). upstream's normalize_emo_vec (per-emotion bias, sum capped at 0.8) is called only by its web UI,
never by infer, and is not part of this port.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F

from mizuoto.core.errors import CheckpointError, InputError

EMOTION_COUNT = 8
RELEASED_EMO_NUM = (3, 17, 2, 8, 4, 5, 10, 24)  # IndexTTS-2's config.yaml


def check_strengths(strengths) -> list[float]:
    try:
        values = [float(v) for v in strengths]
    except (TypeError, ValueError):
        raise InputError(f"the emotion vector must be {EMOTION_COUNT} numbers, got {strengths!r}") from None
    if len(values) != EMOTION_COUNT:
        raise InputError(f"the emotion vector must be {EMOTION_COUNT} numbers (happy, angry, sad, afraid, "
                         f"disgusted, melancholic, surprised, calm), got {len(values)}")
    return values


def scale_strengths(strengths, alpha: float) -> list[float]:
    """infer_generator's emo_alpha on a given vector: alpha clamped to [0, 1]; below 1 each strength becomes
    int(x * alpha * 10000) / 10000 (truncated towards zero), at 1 they are left as they are."""
    values = check_strengths(strengths)
    scale = max(0.0, min(1.0, float(alpha)))
    if scale == 1.0:
        return values
    return [int(x * scale * 10000) / 10000 for x in values]


def most_similar(style: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
    """The index (a 0-d tensor) of the row of `rows` (n, d) closest to `style` (1, d) by cosine similarity."""
    return torch.argmax(F.cosine_similarity(style.float(), rows.float(), dim=1))


@dataclass
class EmotionBank:
    """feat2 (emotion vectors) and feat1 (speaker styles), each split into the eight groups of `counts`."""

    emotion_rows: tuple[torch.Tensor, ...]
    speaker_rows: tuple[torch.Tensor, ...]
    counts: tuple[int, ...]

    @classmethod
    def from_matrices(cls, emo_matrix: torch.Tensor, spk_matrix: torch.Tensor, emo_num) -> EmotionBank:
        counts = tuple(int(n) for n in emo_num)
        if len(counts) != EMOTION_COUNT or min(counts) < 1:
            raise CheckpointError(f"emo_num must be {EMOTION_COUNT} positive counts, got {list(emo_num)}")
        for name, matrix in (("feat2 (emo_matrix)", emo_matrix), ("feat1 (spk_matrix)", spk_matrix)):
            if matrix.dim() != 2 or matrix.shape[0] != sum(counts):
                raise CheckpointError(f"{name} is {tuple(matrix.shape)}; emo_num {list(counts)} wants "
                                      f"{sum(counts)} rows")
        return cls(torch.split(emo_matrix, counts), torch.split(spk_matrix, counts), counts)

    @classmethod
    def load(cls, folder: str | Path, emo_num=RELEASED_EMO_NUM, emo_matrix: str = "feat2.pt",
             spk_matrix: str = "feat1.pt", device="cpu") -> EmotionBank:
        folder = Path(folder)
        matrices = []
        for name in (emo_matrix, spk_matrix):
            path = folder / name
            if not path.is_file():
                raise CheckpointError(f"{path} is missing; point at IndexTTS 2's checkpoint folder")
            try:
                matrices.append(torch.load(path, map_location=device, weights_only=True))
            except Exception as error:  # noqa: BLE001 - any unreadable file is the same one-line message
                raise CheckpointError(f"cannot read {path}: {type(error).__name__}") from None
        return cls.from_matrices(matrices[0], matrices[1], emo_num)

    def picks(self, style: torch.Tensor | None, use_random: bool = False, rng=None) -> list:
        """The example chosen in each group: random.randint per group in order (from `rng`, default the random
        module), else the speaker row most like `style`."""
        if use_random:
            draw = rng if rng is not None else random
            return [draw.randint(0, n - 1) for n in self.counts]
        if style is None:
            raise InputError("choosing emotion examples by similarity needs the reference speaker's style")
        return [most_similar(style, rows) for rows in self.speaker_rows]

    def examples(self, picks) -> torch.Tensor:
        """The chosen emotion rows stacked, (8, d)."""
        return torch.cat([rows[index].unsqueeze(0) for index, rows in zip(picks, self.emotion_rows, strict=True)], 0)


def emotion_mix(strengths, bank: EmotionBank, style: torch.Tensor | None, use_random: bool = False,
                rng=None, device=None) -> tuple[torch.Tensor, torch.Tensor]:
    """(the strengths as a tensor, emovec_mat (1, d)): infer_generator's choice and weighting of examples, done once
    per request before its segments."""
    values = check_strengths(strengths)
    weights = torch.tensor(values, device=device if device is not None else bank.emotion_rows[0].device)
    chosen = bank.examples(bank.picks(style, use_random, rng))
    return weights, torch.sum(weights.unsqueeze(1) * chosen, 0).unsqueeze(0)


def mix_emotion_vector(emovec: torch.Tensor, weights: torch.Tensor, emovec_mat: torch.Tensor) -> torch.Tensor:
    """The emotion vector a segment's GPT gets: emovec_mat + (1 - sum(strengths)) * emovec, where emovec is
    merge_emovec of the speaker's and the emotion audio's conditioning (alpha 1)."""
    return emovec_mat + (1 - torch.sum(weights)) * emovec
