"""g2p_en 2.1.0's spelling -> ARPAbet predictor, which GPT-SoVITS's English front end asks for the words no dictionary
has: a one-layer GRU encoder over the letters and a GRU decoder that emits one phone at a time (greedy, at most 20).

Its weights are g2p_en's checkpoint20.npz (Apache-2.0; shipped as ../assets/g2p_en-checkpoint20.npz, see the README
there). The arithmetic is g2p_en's numpy arithmetic, float32, in its order (the input and hidden projections each a
matmul by the transposed weight plus the bias, the gates' sigmoid as 1 / (1 + exp(-x)), the new state
(1 - z) * n + z * h), so the same numpy gives the same logits, and the same argmax picks each phone."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from mizuoto.core.errors import InputError

LETTERS = ("<pad>", "<unk>", "</s>", *"abcdefghijklmnopqrstuvwxyz")
_VOWELS = ("AA", "AE", "AH", "AO", "AW", "AY", "EH", "ER", "EY", "IH", "IY", "OW", "OY", "UH", "UW")
_CONSONANTS = ("B", "CH", "D", "DH", "F", "G", "HH", "JH", "K", "L", "M", "N", "NG", "P", "R", "S", "SH", "T", "TH",
               "V", "W", "Y", "Z", "ZH")
# The output table: four specials, then every stressed vowel and consonant in alphabetical order (plus a bare UW).
PHONES = ("<pad>", "<unk>", "<s>", "</s>",
          *sorted([f"{v}{stress}" for v in _VOWELS for stress in "012"] + list(_CONSONANTS) + ["UW"]))
_START, _STOP = 2, 3
MAX_PHONES = 20
NAMES = ("enc_emb", "enc_w_ih", "enc_w_hh", "enc_b_ih", "enc_b_hh", "dec_emb", "dec_w_ih", "dec_w_hh", "dec_b_ih",
         "dec_b_hh", "fc_w", "fc_b")


def _cell(x, h, w_ih, w_hh, b_ih, b_hh):
    gates_x = np.matmul(x, w_ih.T) + b_ih
    gates_h = np.matmul(h, w_hh.T) + b_hh
    split = gates_x.shape[-1] * 2 // 3  # reset and update gates first, the candidate last
    rz = 1 / (1 + np.exp(-(gates_x[:, :split] + gates_h[:, :split])))
    r, z = np.split(rz, 2, -1)
    n = np.tanh(gates_x[:, split:] + r * gates_h[:, split:])
    return (1 - z) * n + z * h


class Predictor:
    def __init__(self, weights: dict[str, np.ndarray]):
        self.w = weights
        self.letter_ids = {letter: i for i, letter in enumerate(LETTERS)}

    @classmethod
    def load(cls, path: Path) -> Predictor:
        if not Path(path).is_file():
            raise InputError(f"GPT-SoVITS's English front end needs g2p_en's checkpoint20.npz: {path} is missing")
        with np.load(path) as archive:
            missing = [name for name in NAMES if name not in archive]
            if missing:
                raise InputError(f"{path} is not g2p_en's checkpoint20.npz (it has no {', '.join(missing)})")
            return cls({name: archive[name] for name in NAMES})

    def __call__(self, word: str) -> list[str]:
        w = self.w
        ids = [self.letter_ids.get(c, 1) for c in [*word, "</s>"]]  # any other character is <unk>
        letters = np.take(w["enc_emb"], np.expand_dims(ids, 0), axis=0)
        h = np.zeros((1, w["enc_w_hh"].shape[-1]), np.float32)
        for t in range(len(ids)):
            h = _cell(letters[:, t, :], h, w["enc_w_ih"], w["enc_w_hh"], w["enc_b_ih"], w["enc_b_hh"])
            # g2p_en stores each state in a float32 array and decodes from the last one stored.
            h = h.astype(np.float32, copy=False)
        previous = np.take(w["dec_emb"], [_START], axis=0)
        phones = []
        for _ in range(MAX_PHONES):
            h = _cell(previous, h, w["dec_w_ih"], w["dec_w_hh"], w["dec_b_ih"], w["dec_b_hh"])
            best = int((np.matmul(h, w["fc_w"].T) + w["fc_b"]).argmax())
            if best == _STOP:
                break
            phones.append(PHONES[best])
            previous = np.take(w["dec_emb"], [best], axis=0)
        return phones
