"""Live parity of Mizuoto's Qwen3-TTS speaker encoder (x-vector) against qwen-tts 0.1.1 (dev only).

Run it with the Python of the environment that has qwen-tts installed; our modules are imported from
the clone given by --ours (default: this clone):

    .venv-qwen3tts-upstream/bin/python scripts/parity/qwen3tts_speaker_live.py [--ours /path/to/clone]

It pins one intra-op thread (--threads) and ATEN_CPU_CAPABILITY=avx2 for both sides (re-executing itself
to set the variable before torch loads; ENGINES.md section 1 says why). Compared, by maximum absolute
difference, which must be exactly 0.0:

- the mel filter bank against `librosa.filters.mel(sr=24000, n_fft=1024, n_mels=128, fmin=0, fmax=12000)`;
- `speaker_mel` against upstream's `mel_spectrogram(...)` with `extract_speaker_embedding`'s settings;
- x-vectors: a tiny and a full-size (default config) `Qwen3TTSSpeakerEncoder` with random weights,
  saved as a Base model folder (config.json, `speaker_encoder.*` in model.safetensors) that both
  sides load from (upstream keeps the memory-mapped tensors as from_pretrained does), on synthetic 24 kHz
  references of several lengths: upstream's `extract_speaker_embedding` vs our `x_vector`, in float32
  and (tiny) bfloat16;
- other rates (16, 22.05, 44.1, 48 kHz): upstream resamples with `librosa.resample` (soxr) first. Our
  x_vector on librosa's 24 kHz output must be exact; on the original audio (our resampler) it is only
  close, and the script reports how close (not a failure).
Exit status 1 when anything that must be exact differs.

`--golden DIR` instead writes DIR/golden/speaker.json: upstream's mels (as `extract_speaker_embedding` computes
them) of the two test references in DIR/references.safetensors, which tests/engines/test_qwen3tts_speaker.py
compares with. DIR is the qwen3tts reference set being written (qwen3tts_references.py has written its
references there first): `python scripts/parity/reference_sets.py write qwen3tts` runs this so; the test
reads the file through `reference_dir("qwen3tts")`.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import tempfile
import types
from pathlib import Path

from pinned import add_ours_argument, pin_process, write_golden  # beside this script


def _parse():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_ours_argument(parser)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--golden", type=Path, metavar="DIR",
                        help="instead: write upstream's mels of the test references of DIR (the qwen3tts reference "
                             "set being written) to DIR/golden/speaker.json, and exit")
    return parser.parse_args()


pin_process()
ARGS = _parse()
sys.path.insert(0, str(ARGS.ours.resolve()))

import librosa  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402
from qwen_tts.core.models.configuration_qwen3_tts import Qwen3TTSSpeakerEncoderConfig  # noqa: E402
from qwen_tts.core.models.modeling_qwen3_tts import (  # noqa: E402
    Qwen3TTSForConditionalGeneration,
    Qwen3TTSSpeakerEncoder,
    mel_spectrogram,
)
from safetensors import safe_open  # noqa: E402
from safetensors.torch import save_file  # noqa: E402

from mizuoto.engines.qwen3tts import speaker_mel  # noqa: E402
from mizuoto.engines.qwen3tts.speaker import load_speaker_encoder  # noqa: E402

RESULTS: list[tuple[str, float, bool]] = []
TINY = dict(mel_dim=128, enc_dim=24, enc_channels=[32, 32, 32, 32, 96], enc_kernel_sizes=[5, 3, 3, 3, 1],
            enc_dilations=[1, 2, 3, 4, 1], enc_attention_channels=8, enc_res2net_scale=4, enc_se_channels=8)


def compare(name: str, ours, theirs, exact: bool = True) -> None:
    ours, theirs = torch.as_tensor(ours), torch.as_tensor(theirs)
    if ours.shape != theirs.shape:
        RESULTS.append((f"{name}: shapes {tuple(ours.shape)} vs {tuple(theirs.shape)}", float("inf"), exact))
        return
    RESULTS.append((name, (ours.double() - theirs.double()).abs().max().item() if ours.numel() else 0.0, exact))


def reference(samples: int, seed: int) -> np.ndarray:
    """Noise plus a few sweeping tones with an envelope, peak about 0.6: speech-like enough for a test."""
    rng = np.random.default_rng(seed)
    t = np.arange(samples) / 24000.0
    tone = sum(np.sin(2 * np.pi * (f0 + 300 * t) * t * k) / k for k, f0 in ((1, rng.uniform(90, 250)), (2, 400.0),
                                                                             (3, 900.0)))
    wave = 0.25 * tone * (0.6 + 0.4 * np.sin(2 * np.pi * 3 * t)) + 0.05 * rng.standard_normal(samples)
    return (0.6 * wave / max(1e-9, np.abs(wave).max())).astype(np.float32)


def upstream_x_vector(encoder, audio: np.ndarray, sr: int, dtype=torch.float32) -> torch.Tensor:
    """qwen-tts's own path: `create_voice_clone_prompt` resamples with librosa, then
    `extract_speaker_embedding` (called unbound on a stand-in that has the attributes it reads)."""
    if sr != 24000:
        audio = librosa.resample(y=audio.astype(np.float32), orig_sr=int(sr), target_sr=24000)
    model = types.SimpleNamespace(speaker_encoder=encoder, device=torch.device("cpu"), dtype=dtype)
    return Qwen3TTSForConditionalGeneration.extract_speaker_embedding(model, audio, 24000)


def build_pair(config: dict, folder: Path, seed: int, dtype=torch.float32):
    """A random upstream encoder saved in a Base model folder's layout (config.json with
    speaker_encoder_config, `speaker_encoder.*` in model.safetensors); both sides then take the
    weights from that file, upstream as transformers' from_pretrained does (the memory-mapped tensors
    themselves), ours through our loader."""
    torch.manual_seed(seed)
    upstream = Qwen3TTSSpeakerEncoder(Qwen3TTSSpeakerEncoderConfig(**config)).eval()
    # PyTorch's default init leaves nothing at zero or one here (no norms); scale the biases up a
    # little so that they matter as much as the weights.
    with torch.no_grad():
        for name, p in upstream.named_parameters():
            if name.endswith("bias"):
                p.normal_(0.0, 0.1)
    folder = folder / f"model-{seed}"
    folder.mkdir()
    full_config = Qwen3TTSSpeakerEncoderConfig(**config).to_dict()
    (folder / "config.json").write_text(json.dumps({"model_type": "qwen3_tts", "tts_model_type": "base",
                                                    "speaker_encoder_config": full_config}))
    save_file({f"speaker_encoder.{k}": v.to(dtype).contiguous() for k, v in upstream.state_dict().items()},
              str(folder / "model.safetensors"))
    with safe_open(str(folder / "model.safetensors"), framework="pt") as file:
        mapped = {k[len("speaker_encoder."):]: file.get_tensor(k) for k in file.keys()}
    upstream.load_state_dict(mapped, assign=True)
    return upstream, load_speaker_encoder(folder, dtype=dtype)


def fingerprint(t: torch.Tensor) -> dict:
    """What the CI tests compare (tests/engines/test_qwen3tts_*.py compute it the same way)."""
    a = t.detach().contiguous().cpu().numpy()
    return {"shape": list(a.shape), "sha256": hashlib.sha256(a.tobytes()).hexdigest(),
            "sum": round(float(a.astype(np.float64).sum()), 6)}


def golden(folder: Path) -> int:
    """Upstream's speaker mels of the test references of the set `folder`, the CI test's golden values."""
    from safetensors.torch import load_file

    refs = load_file(str(folder / "references.safetensors"))
    out = {}
    for name in ("ref_a", "ref_b"):
        wave = refs[f"audio/{name}"]
        out[name] = {"audio_sha256": fingerprint(wave)["sha256"]}
        out[name] |= fingerprint(mel_spectrogram(wave.unsqueeze(0), n_fft=1024, num_mels=128, sampling_rate=24000,
                                                hop_size=256, win_size=1024, fmin=0, fmax=12000).transpose(1, 2))
    print(f"wrote {write_golden(folder, 'speaker', out)}")
    return 0


def main() -> int:
    torch.set_num_threads(ARGS.threads)
    if ARGS.golden is not None:
        return golden(ARGS.golden.resolve())
    bank = librosa.filters.mel(sr=24000, n_fft=1024, n_mels=128, fmin=0, fmax=12000)
    ours_bank = speaker_mel.slaney_mel_bank()
    compare("mel filter bank vs librosa", torch.from_numpy(ours_bank), torch.from_numpy(bank))
    RESULTS.append(("mel filter bank vs librosa, every byte (signed zeros too)",
                    0.0 if ours_bank.tobytes() == bank.tobytes() else float("inf"), True))

    lengths = (385, 6000, 24000 * 3 + 77, 24000 * 11 + 1)
    for n in lengths:
        wave = reference(n, n)
        theirs = mel_spectrogram(torch.from_numpy(wave).unsqueeze(0), n_fft=1024, num_mels=128, sampling_rate=24000,
                                 hop_size=256, win_size=1024, fmin=0, fmax=12000).transpose(1, 2)
        compare(f"speaker mel, {n} samples", speaker_mel.speaker_mel(wave), theirs)

    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        for label, config, dtype, seeds in (("tiny", TINY, torch.float32, (1, 2)),
                                            ("tiny bf16", TINY, torch.bfloat16, (3,)),
                                            ("full-size", {}, torch.float32, (4,))):
            for seed in seeds:
                upstream, ours = build_pair(config, folder, seed, dtype)
                for n in lengths[1:]:
                    wave = reference(n, seed * 1000 + n)
                    compare(f"x-vector {label} seed {seed}, {n} samples", ours.x_vector(wave),
                            upstream_x_vector(upstream, wave, 24000, dtype))
        upstream, ours = build_pair(TINY, folder, 5)
        for rate in (16000, 22050, 44100, 48000):
            wave = reference(rate * 3 + 11, rate)
            theirs = upstream_x_vector(upstream, wave, rate)
            resampled = librosa.resample(y=wave, orig_sr=rate, target_sr=24000)
            compare(f"x-vector from {rate} Hz, librosa's resampled audio", ours.x_vector(resampled), theirs)
            mine = ours.x_vector(wave, sample_rate=rate)
            cosine = torch.nn.functional.cosine_similarity(mine, theirs, dim=0).item()
            compare(f"x-vector from {rate} Hz, our resampler (cosine {cosine:.6f})", mine, theirs, exact=False)

    failed = False
    for name, diff, exact in RESULTS:
        bad = exact and diff != 0.0
        failed |= bad
        print(f"{'FAIL' if bad else 'ok  '} {diff:.3e}  {name}{'' if exact else '  (informative)'}")
    print(f"threads {torch.get_num_threads()}, ATEN_CPU_CAPABILITY avx2, torch {torch.__version__}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
