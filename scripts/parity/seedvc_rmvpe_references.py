#!/usr/bin/env python
"""Reference outputs of upstream's RMVPE pitch estimator (seed-vc 0.4.3 `modules/rmvpe.py`: MelSpectrogram, E2E,
RMVPE.mel2hidden / decode / infer_from_audio / infer_from_audio_batch), for tests/nn/test_rmvpe.py.

Usage, in upstream's venv (scripts/parity/seedvc_upstream_env.sh):
    python scripts/parity/seedvc_rmvpe_references.py [OUTDIR]    # default tests/parity/data/nn/rmvpe
(restarts itself under the parity pins; one thread, oneDNN off)

Writes OUTDIR/references.safetensors (C-contiguous arrays: audio as int16 PCM, mels and salience float32, F0
float64 as upstream returns it) and OUTDIR/references.json (cases, configs, seeds, thresholds, tensor names,
environment):

- bank: the sha256 of upstream's mel_basis buffer (librosa's HTK bank, 128 x 513 float32) and of its Hann
  window, and their shapes (the arrays themselves would be most of the set; the mels below check them too).
- config/<name>: three E2E configurations, every tensor (conv weights, every BatchNorm's affine and running
  statistics, the GRU, the head) drawn by `procedural_state` (a copy lives in the test, which rebuilds them; no
  weights are stored): "small" (1 block, 2 stages, 4 channels), "odd" (2 blocks so identity shortcuts, 2 GRU
  layers, kernel (1, 2): pooling the mels only, 3 stages, 2 channels) and "real" (rmvpe.pt's E2E(4, 1, (2, 2)),
  90 M parameters). Each is loaded by upstream's own RMVPE.__init__ (torch.load of a temporary file and a
  strict load_state_dict; for the two small ones with E2E's constructor arguments swapped in).
- case/<config>/<name>: a 16 kHz recording (int16 PCM / 32768, float32 or float64 as noted) and what upstream
  computes from it: the log-mel (`mel_extractor(audio.unsqueeze(0), center=True)`), the salience
  (`mel2hidden`), its cents (`to_local_average_cents`) and the F0 (`infer_from_audio(audio, thred)`), for
  several lengths: 600 samples (4 frames, not
  a multiple of the hop, under the 32-frame padding), 31 frames of silence, 0.6 s + 77 samples, a 2 s voiced
  tone with vibrato and harmonics; a batch of two through `infer_from_audio_batch`.
  Random weights make the decision voiced / unvoiced arbitrary: where the default threshold 0.03 keeps every
  frame of a case, an extra F0 at a threshold between the frames' strongest saliences is stored
  (`f0_split`), and for silence one just above its strongest salience so the threshold zeroes it all.
- decode/*: `decode` and `to_local_average_cents` on a designed salience (peaks at both ends of the 360 bins,
  where the 9-bin window reaches the zero padding; tied maxima; a maximum equal to the threshold; random rows)
  at several thresholds.

The F0 is numpy's float64 `10 * 2 ** (cents / 1200)`, whose last bits depend on the numpy build and the CPU
features it dispatches to (numpy 1.26.4 here and 2.4.6 differ by up to 2 ulps, on 22 % of values): the cents
are stored so that everything before that power can be compared bit for bit.
"""

import hashlib
import json
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from pinned import environment, pin_process, write_references  # noqa: E402  (beside this script)
from seedvc_weights import rmvpe_state as procedural_state  # noqa: E402  (the test's too)

pin_process()

import numpy as np  # noqa: E402
import seed_vc  # noqa: E402
import torch  # noqa: E402

sys.path.insert(0, os.path.dirname(seed_vc.__file__))  # upstream's modules import each other as `modules.*`
import modules.rmvpe as upstream  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
OUT = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "tests/parity/data/nn/rmvpe"
REFS, CASES = {}, {}
SAMPLE_RATE = 16000


def put(name, array):
    assert name not in REFS, name
    if isinstance(array, torch.Tensor):
        array = array.detach().contiguous().numpy()
    REFS[name] = np.ascontiguousarray(array)
    return name




# ---------------------------------------------------------------------------------------------------------

CONFIGS = {  # E2E's arguments
    "small": {"n_blocks": 1, "n_gru": 1, "kernel_size": [2, 2], "en_de_layers": 2, "inter_layers": 1,
              "en_out_channels": 4},
    "odd": {"n_blocks": 2, "n_gru": 2, "kernel_size": [1, 2], "en_de_layers": 3, "inter_layers": 2,
            "en_out_channels": 2},
    "real": {"n_blocks": 4, "n_gru": 1, "kernel_size": [2, 2], "en_de_layers": 5, "inter_layers": 4,
             "en_out_channels": 16},
}
SEEDS = {"small": 100, "odd": 200, "real": 300}


def recording(kind: str, samples: int, seed: int) -> np.ndarray:
    """int16 PCM: 'tone' a 150 to 400 Hz glide with 5.5 Hz vibrato (+-60 cents), four harmonics and a little
    noise, faded in and out; 'noise' white noise; 'silence' zeros."""
    rng = np.random.default_rng(seed)
    if kind == "silence":
        return np.zeros(samples, dtype=np.int16)
    if kind == "noise":
        wave = 0.2 * rng.standard_normal(samples)
    else:
        t = np.arange(samples) / SAMPLE_RATE
        base = 150 * (400 / 150) ** (t / max(t[-1], 1e-9))
        f0 = base * 2 ** (0.6 * np.sin(2 * np.pi * 5.5 * t) / 12)
        phase = 2 * np.pi * np.cumsum(f0) / SAMPLE_RATE
        wave = sum(0.3 / k * np.sin(k * phase) for k in range(1, 5)) + 0.005 * rng.standard_normal(samples)
        fade = np.minimum(1, np.minimum(np.arange(samples), np.arange(samples)[::-1]) / 400)
        wave = wave * fade
    return np.clip(np.round(wave * 32767), -32768, 32767).astype(np.int16)


CASE_AUDIO = {  # config: {case: (kind, samples, seed, passed as)}
    "small": {"short_600": ("tone", 600, 1, "float32"), "silence_31": ("silence", 30 * 160 + 5, 2, "float32"),
              "tone_odd_length": ("tone", 9600 + 77, 3, "float64"), "tone_2s": ("tone", 2 * SAMPLE_RATE, 4,
                                                                                 "float32")},
    "odd": {"short_600": ("noise", 600, 11, "float32"), "tone_1s": ("tone", SAMPLE_RATE + 33, 12, "float32"),
            "silence_40": ("silence", 40 * 160, 13, "float32")},
    "real": {"tone_half_s": ("tone", 8000 + 123, 21, "float32")},
}
BATCHES = {"small": ("tone", "noise", 4000 + 11, 31), "odd": ("noise", "tone", 3300, 32)}  # kinds, samples, seed


def as_audio(pcm: np.ndarray, passed_as: str):
    """What upstream is given: a float32 tensor, or a float64 numpy array (upstream converts with .float())."""
    if passed_as == "float64":
        return pcm.astype(np.float64) / 32768
    return torch.from_numpy(pcm.astype(np.int64)).float() / 32768


def build(name: str, state: dict, folder: Path):
    """Upstream's RMVPE object, built by its own __init__ from a temporary rmvpe.pt holding `state` (E2E's
    constructor arguments swapped for the config's while it runs)."""
    path = folder / f"{name}.pt"
    torch.save(state, path)
    original = upstream.E2E.__init__  # RMVPE.__init__ calls E2E(4, 1, (2, 2)); E2E's own super() needs the class
    arguments = dict(CONFIGS[name], kernel_size=tuple(CONFIGS[name]["kernel_size"]))
    upstream.E2E.__init__ = lambda self, *_: original(self, **arguments)
    try:
        estimator = upstream.RMVPE(str(path), is_half=False, device="cpu")
    finally:
        upstream.E2E.__init__ = original
        path.unlink()
    assert all(torch.equal(estimator.model.state_dict()[k].float(), v.float()) for k, v in state.items())
    return estimator


def sha256(array: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(array).tobytes()).hexdigest()


def split_threshold(strongest: np.ndarray) -> float:
    """A threshold between the frames' strongest saliences (their median, rounded to float32)."""
    return float(np.float32(np.median(strongest)))


def run_case(estimator, config: str, name: str, kind: str, samples: int, seed: int, passed_as: str) -> dict:
    prefix = f"case/{config}/{name}"
    pcm = recording(kind, samples, seed)
    audio = as_audio(pcm, passed_as)
    with torch.no_grad():
        tensor = torch.from_numpy(audio) if isinstance(audio, np.ndarray) else audio
        mel = estimator.mel_extractor(tensor.float().unsqueeze(0), center=True)
        hidden = estimator.mel2hidden(mel)
    f0 = estimator.infer_from_audio(audio, thred=0.03)
    salience = hidden[0].numpy()
    strongest = salience.max(axis=1)
    entry = {"kind": kind, "samples": samples, "seed": seed, "passed_as": passed_as, "pcm": put(f"{prefix}/pcm", pcm),
             "mel": put(f"{prefix}/mel", mel), "hidden": put(f"{prefix}/hidden", hidden), "thred": 0.03,
             "cents": put(f"{prefix}/cents", estimator.to_local_average_cents(salience, thred=0.03)),
             "f0": put(f"{prefix}/f0", f0), "voiced_at_default": float((f0 > 0).mean())}
    assert f0.dtype == np.float64 and f0.shape == (1 + samples // 160,), (f0.dtype, f0.shape)
    if kind == "silence":  # a threshold just above every frame's strongest salience zeroes the whole track
        thred = float(np.nextafter(np.float32(strongest.max()), np.float32(1)))
        zeroed = estimator.infer_from_audio(audio, thred=thred)
        assert not zeroed.any()
        entry.update(thred_zeroing=thred, f0_zeroed=put(f"{prefix}/f0_zeroed", zeroed),
                     cents_zeroed=put(f"{prefix}/cents_zeroed", estimator.to_local_average_cents(salience, thred)))
    elif entry["voiced_at_default"] in (0.0, 1.0):  # all frames one way at 0.03: split them
        thred = split_threshold(strongest)
        split = estimator.infer_from_audio(audio, thred=thred)
        assert 0 < (split > 0).mean() < 1, name
        entry.update(thred_split=thred, f0_split=put(f"{prefix}/f0_split", split),
                     cents_split=put(f"{prefix}/cents_split", estimator.to_local_average_cents(salience, thred)))
    return entry


def run_batch(estimator, config: str) -> dict:
    first, second, samples, seed = BATCHES[config]
    pcm = np.stack([recording(first, samples, seed), recording(second, samples, seed + 1)])
    audio = as_audio(pcm, "float32")
    with torch.no_grad():
        mel = estimator.mel_extractor(audio.float(), center=True)
        hidden = estimator.mel2hidden(mel)
    thred = split_threshold(hidden.numpy().max(axis=2))
    f0 = estimator.infer_from_audio_batch(audio, thred=thred)
    assert f0.dtype == torch.float64 and 0 < (f0 > 0).double().mean() < 1
    prefix = f"batch/{config}"
    cents = np.stack([estimator.to_local_average_cents(row, thred=thred) for row in hidden.numpy()])
    return {"kinds": [first, second], "samples": samples, "seed": seed, "pcm": put(f"{prefix}/pcm", pcm),
            "mel": put(f"{prefix}/mel", mel), "hidden": put(f"{prefix}/hidden", hidden), "thred": thred,
            "cents": put(f"{prefix}/cents", cents), "f0": put(f"{prefix}/f0", f0)}


def designed_salience() -> np.ndarray:
    """Rows that reach every corner of the local average (float32, as the model's salience is)."""
    rng = np.random.default_rng(7)
    rows = []
    for peak in (0, 1, 3, 4, 5, 180, 354, 355, 356, 358, 359):  # the window reaches the zero padding near the ends
        row = rng.uniform(0, 0.02, 360)
        row[max(peak - 4, 0):peak + 5] += rng.uniform(0.1, 0.5, len(row[max(peak - 4, 0):peak + 5]))
        row[peak] = 0.9
        rows.append(row)
    tied = rng.uniform(0, 0.1, 360)
    tied[[40, 200]] = 0.7  # argmax takes the first
    rows.append(tied)
    rows.append(np.full(360, 0.03))  # exactly at the threshold (float32 0.03): zeroed, since <= thred
    above = rng.uniform(0, 0.02, 360)
    above[77] = np.nextafter(np.float32(0.03), np.float32(1))
    rows.append(above)
    rows.append(np.zeros(360) + 1e-7)  # tiny everywhere: a 0 / 0-free but degenerate average
    sigmoid = 1 / (1 + np.exp(-rng.normal(-3, 2, (8, 360))))
    rows.extend(sigmoid)
    return np.stack(rows).astype(np.float32)


def decode_cases(estimator):
    salience = designed_salience()
    CASES["decode"] = {"salience": put("decode/salience", salience), "thresholds": [0.03, 0.05, 0.3, 0.95],
                       "f0": {}, "cents": {}, "cents_default": put("decode/cents_default",
                                                                   estimator.to_local_average_cents(salience))}
    for thred in CASES["decode"]["thresholds"]:
        CASES["decode"]["f0"][str(thred)] = put(f"decode/f0/{thred}", estimator.decode(salience, thred=thred))
        CASES["decode"]["cents"][str(thred)] = put(f"decode/cents/{thred}",
                                                   estimator.to_local_average_cents(salience, thred=thred))


def main():
    OUT.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        for name, arguments in CONFIGS.items():
            kernel = tuple(arguments["kernel_size"])
            layout_model = upstream.E2E(**dict(arguments, kernel_size=kernel))
            layout = {k: list(v.shape) for k, v in layout_model.state_dict().items()}
            del layout_model
            state = procedural_state(layout, SEEDS[name])
            estimator = build(name, state, Path(tmp))
            CASES[f"config/{name}"] = {"arguments": arguments, "seed": SEEDS[name], "layout": layout}
            for case, (kind, samples, seed, passed_as) in CASE_AUDIO[name].items():
                CASES[f"case/{name}/{case}"] = run_case(estimator, name, case, kind, samples, seed, passed_as)
            if name in BATCHES:
                CASES[f"batch/{name}"] = run_batch(estimator, name)
            if name == "small":
                decode_cases(estimator)
                bank = estimator.mel_extractor.mel_basis.numpy()
                window = estimator.mel_extractor.hann_window["0_cpu"].numpy()
                CASES["bank"] = {"mel_basis_sha256": sha256(bank), "mel_basis_shape": list(bank.shape),
                                 "mel_basis_dtype": str(bank.dtype), "nonzero": int((bank != 0).sum()),
                                 "hann_window_sha256": sha256(window), "hann_window_shape": list(window.shape)}
            del estimator
    voiced = [c["voiced_at_default"] for n, c in CASES.items() if n.startswith("case/") and c["kind"] != "silence"]
    assert any(0 < v < 1 for v in voiced) or any("thred_split" in c for c in CASES.values()), voiced
    write_references(REFS, OUT / "references.safetensors")
    info = {"cases": CASES, "environment": environment(["seed-vc", "torch", "librosa", "numpy", "safetensors"]),
            "note": "RMVPE references (seed-vc 0.4.3); pcm int16, mels and salience float32, F0 float64 as "
                    "upstream returns it; compare bitwise"}
    (OUT / "references.json").write_text(json.dumps(info, indent=1) + "\n")
    size = (OUT / "references.safetensors").stat().st_size
    print(f"wrote {len(REFS)} tensors ({size} bytes), {len(CASES)} cases to {OUT}")


if __name__ == "__main__":
    main()
