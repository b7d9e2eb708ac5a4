#!/usr/bin/env python
"""End-to-end reference conversions of seed-vc 0.4.3's v2 voice conversion
(`modules/v2/vc_wrapper.py::VoiceConversionWrapper.convert_voice_with_streaming_arrays`, what its apps and
`convert_voice_arrays` run), for tests/engines/test_seedvc_v2.py.

Usage, in upstream's venv (scripts/parity/seedvc_upstream_env.sh):
    python scripts/parity/seedvc_v2_references.py [OUTDIR]     # default tests/parity/data/seedvc_v2
(restarts itself under the parity pins: one thread, avx2, MKL_CBWR, oneDNN off)

Writes
- OUTDIR/model/: a tiny random v2 model in the released files' layout (scripts/parity/seedvc_v2_models.py);
- OUTDIR/audio/*.wav: seedvc_references' synthetic recordings (and a 50 s one of its kind);
- OUTDIR/references.safetensors and OUTDIR/references.json: per case, upstream's output waveform and the
  intermediates of its run, with the case's files, options, seed and precision.

How upstream is run: the wrapper's parts instantiated from the tiny vc_wrapper.yaml (seedvc_v2_models), a
`VoiceConversionWrapper` made from them, and the checkpoints loaded as its `load_checkpoints` loads them (the
`module.` prefix stripped, `strict=False`) but from the files written instead of the network; then
`setup_ar_caches(max_batch_size=1, max_seq_len=4096, dtype)` as inference_v2.py / app_vc_v2.py do.
`convert_voice_with_streaming_arrays(..., stream_output=False)` is a generator function that never yields: it is
driven with `next()` and its result is the `StopIteration` value. `torch.manual_seed(seed)` runs right before:
the draws (the AR's exponential races, one `torch.randn` per CFM chunk) all come from the global generator.

Precision: "float32" passes dtype=torch.float32 (the CPU autocast disables itself for that dtype: everything runs
in float32) with float32 AR caches; "float16" is upstream's default dtype=torch.float16 with float16 caches, as its
apps set them up, for the style path only: the timbre path's CFM runs under `autocast(dtype=torch.float32)`, which
CUDA honours (casting the float16 style and condition up) but the CPU answers by disabling autocast, so upstream's
float16 timbre conversion fails on the CPU (float16 style into float32 weights) and has no CPU reference.

Intermediates, recorded by wrappers around upstream's own objects (what runs is unchanged): the 22.05 kHz and
16 kHz waves (`source_22k`, `reference_22k`: mel_fn's inputs; `source_16k`, `reference_16k`), the content indices
(`wide/source`, `wide/reference`, `narrow/source`, `narrow/reference`), `style` (compute_style's output),
`prompt_condition` and `cond` (the CFM regulator's outputs: the reference's, then the source's or each AR chunk's
as `cond/i`), per AR chunk `ar/i` (its tokens), per CFM chunk `vc_mel/i` (the vocoder's input) and `vc_wave/i` (the
vocoder's squeezed output, cloned before the cross-fade writes into it); the result as `output`.
Storage as seedvc_references (whole tensors up to FULL_LIMIT elements, else digest + strided sample).
"""

import contextlib
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from pinned import environment, pin_process, write_references  # noqa: E402  (beside this script)

pin_process()

import numpy as np  # noqa: E402
import seedvc_references as v1  # noqa: E402  (storage and audio helpers; imports upstream's stubs)
import seedvc_v2_models as models  # noqa: E402
import soundfile  # noqa: E402
import torch  # noqa: E402
import yaml  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
OUT = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "tests/parity/data/seedvc_v2"
MODEL_SEED = 2000

AUDIO = {**{name: v1.AUDIO[name] for name in ("source_2s_22050", "reference_3s_16000", "long_30.5s_8000")},
         # long enough that its narrow content, duplicates dropped, takes two of the AR's 1500-token windows
         "long_50s_8000": (8000, 50.0, 15, 190.0)}

# name: source, reference, precision, seed, options (convert_voice_with_streaming_arrays' keywords)
CASES = {
    "timbre_float32": ("source_2s_22050", "reference_3s_16000", "float32", 201, {"diffusion_steps": 4}),
    "timbre_one_rate_float32": ("source_2s_22050", "reference_3s_16000", "float32", 202,
                                {"diffusion_steps": 3, "intelligebility_cfg_rate": 0.0,
                                 "similarity_cfg_rate": 0.5}),
    "timbre_long_source_float32": ("long_30.5s_8000", "reference_3s_16000", "float32", 203,
                                   {"diffusion_steps": 2, "similarity_cfg_rate": 0.0}),
    "style_float32": ("source_2s_22050", "reference_3s_16000", "float32", 204,
                      {"diffusion_steps": 4, "convert_style": True}),
    "style_sampling_float32": ("source_2s_22050", "reference_3s_16000", "float32", 205,
                               {"diffusion_steps": 3, "convert_style": True, "top_p": 0.7, "temperature": 0.7,
                                "repetition_penalty": 1.5, "length_adjust": 0.8,
                                "intelligebility_cfg_rate": 0.3, "similarity_cfg_rate": 0.0}),
    "anonymization_float32": ("source_2s_22050", "reference_3s_16000", "float32", 206,
                              {"diffusion_steps": 3, "convert_style": True, "anonymization_only": True}),
    "style_float16": ("source_2s_22050", "reference_3s_16000", "float16", 204,
                      {"diffusion_steps": 4, "convert_style": True}),
    "style_long_source_float32": ("long_50s_8000", "reference_3s_16000", "float32", 207,
                                  {"diffusion_steps": 2, "convert_style": True, "temperature": 0.8}),
    "timbre_anonymization_float32": ("source_2s_22050", "reference_3s_16000", "float32", 208,
                                     {"diffusion_steps": 3, "anonymization_only": True}),
}


def load_state(module, state: dict, what: str) -> None:
    """load_state_dict(strict=False) as upstream's load_checkpoints, checked to have taken every saved tensor."""
    module.load_state_dict(state, strict=False)  # (CAM++'s own load_state_dict returns nothing)
    kept = module.state_dict()
    for key, value in state.items():
        assert key in kept and torch.equal(kept[key], value), (what, key)


def build_wrapper(model_dir: Path, precision: str):
    from modules.v2.vc_wrapper import VoiceConversionWrapper

    config = yaml.safe_load((model_dir / "v2" / models.CONFIG).read_text())
    with contextlib.redirect_stdout(sys.stderr):  # BigVGAN.from_pretrained prints where it reads from
        parts = models.build_parts(config, model_dir)
    wrapper = VoiceConversionWrapper(sr=config["sr"], hop_size=config["hop_size"], **parts)
    strip = VoiceConversionWrapper.strip_prefix
    cfm = torch.load(str(model_dir / models.CFM_CHECKPOINT), map_location="cpu")["net"]
    load_state(wrapper.cfm, strip(cfm["cfm"], "module."), "cfm")
    load_state(wrapper.cfm_length_regulator, strip(cfm["length_regulator"], "module."), "cfm regulator")
    ar = torch.load(str(model_dir / models.AR_CHECKPOINT), map_location="cpu")["net"]
    load_state(wrapper.ar, strip(ar["ar"], "module."), "ar")
    load_state(wrapper.ar_length_regulator, strip(ar["length_regulator"], "module."), "ar regulator")
    astral = models.asset_folder(model_dir, models.ASTRAL_REPO)
    load_state(wrapper.content_extractor_narrow, torch.load(str(astral / models.NARROW_CHECKPOINT)), "narrow")
    load_state(wrapper.content_extractor_wide, torch.load(str(astral / models.WIDE_CHECKPOINT)), "wide")
    load_state(wrapper.style_encoder, torch.load(str(model_dir / "campplus_cn_common.bin")), "campplus")
    wrapper.vocoder.remove_weight_norm()  # as BigVGAN's users do before inference (inference_v2 loads it so)
    wrapper.eval()
    dtype = torch.float16 if precision == "float16" else torch.float32
    wrapper.setup_ar_caches(max_batch_size=1, max_seq_len=4096, dtype=dtype, device=torch.device("cpu"))
    return wrapper


@contextlib.contextmanager
def recording(wrapper):
    """Record one conversion's intermediates by pass-through wrappers around the wrapper's own parts."""
    trace, counts = {}, {}
    undo = []

    def wrap(owner, name, record):
        original, own = getattr(owner, name), name in vars(owner)

        def call(*args, **kwargs):
            out = original(*args, **kwargs)
            record(args, kwargs, out)
            return out

        setattr(owner, name, call)
        undo.append(lambda: setattr(owner, name, original) if own else delattr(owner, name))

    def numbered(key):
        index = counts.get(key, 0)
        counts[key] = index + 1
        return f"{key}/{index}"

    def mel(args, kwargs, out):
        trace["source_22k" if "source_22k" not in trace else "reference_22k"] = args[0].clone()

    def content(args, kwargs, out):
        side = "narrow" if kwargs.get("is_narrow") else "wide"
        who = "source" if f"{side}/source" not in trace else "reference"
        trace[f"{side}/{who}"] = out.clone()
        trace.setdefault(f"{who}_16k", args[0].clone())

    def style(args, kwargs, out):
        trace["style"] = out.clone()

    def regulator(args, kwargs, out):
        name = "prompt_condition" if "prompt_condition" not in trace else numbered("cond")
        trace[name] = out[0].clone()

    def generate(args, kwargs, out):
        trace[numbered("ar")] = out.clone()

    def vocoder(args, kwargs, out):
        trace[numbered("vc_mel")] = args[0].clone()
        trace[numbered("vc_wave")] = out.squeeze().clone()

    wrap(wrapper, "mel_fn", mel)
    wrap(wrapper, "_process_content_features", content)
    wrap(wrapper, "compute_style", style)
    wrap(wrapper.cfm_length_regulator, "forward", regulator)
    wrap(wrapper.ar, "generate", generate)
    wrap(wrapper.vocoder, "forward", vocoder)
    try:
        yield trace
    finally:
        for step in reversed(undo):
            step()


def run_case(wrappers, folder: Path, name: str, case: tuple) -> dict:
    source, reference, precision, seed, options = case
    wrapper = wrappers[precision]
    dtype = torch.float16 if precision == "float16" else torch.float32
    waves = {}
    for side, audio in (("source", source), ("reference", reference)):
        samples, rate = soundfile.read(str(folder / "audio" / f"{audio}.wav"), dtype="float32")
        waves[side] = (samples, rate)
    with recording(wrapper) as trace:
        torch.manual_seed(seed)
        calls = wrapper.convert_voice_with_streaming_arrays(
            waves["source"][0], waves["reference"][0], waves["source"][1], waves["reference"][1],
            device=torch.device("cpu"), dtype=dtype, stream_output=False, **options)
        try:
            next(calls)
            raise AssertionError("convert_voice_with_streaming_arrays yielded with stream_output=False")
        except StopIteration as done:
            rate, output = done.value
    assert rate == wrapper.sr and isinstance(output, np.ndarray) and output.ndim == 1, (rate, type(output))
    tensors = {}
    for key, value in trace.items():
        if value.dtype in (torch.int64, torch.int32):
            tensors[key] = {"tokens": value.reshape(-1).tolist(), "shape": list(value.shape)}
        else:
            tensors[key] = v1.put(f"{name}/{key}", value)
    tensors["output"] = v1.put(f"{name}/output", output.astype(np.float32))
    return {"source": f"audio/{source}.wav", "reference": f"audio/{reference}.wav", "seed": seed,
            "precision": precision, "options": options, "chunks": sum(k.startswith("vc_wave/") for k in trace),
            "tensors": tensors}


def main():
    OUT.mkdir(parents=True, exist_ok=True)
    record = models.write_models(OUT / "model", MODEL_SEED)
    audio = v1.write_audio(OUT / "audio", AUDIO)
    wrappers = {p: build_wrapper(OUT / "model", p) for p in ("float16", "float32")}
    cases = {}
    for name, case in CASES.items():
        cases[name] = run_case(wrappers, OUT, name, case)
        ar = [len(v["tokens"]) for k, v in cases[name]["tensors"].items() if k.startswith("ar/")]
        print(f"{name}: {cases[name]['chunks']} chunk(s), AR tokens {ar}, "
              f"{cases[name]['tensors']['output']['shape']} samples", file=sys.stderr)
    write_references(v1.REFS, OUT / "references.safetensors")
    info = {"models": record, "audio": audio, "cases": cases,
            "storage": {"full_limit": v1.FULL_LIMIT, "sample_size": v1.SAMPLE_SIZE,
                        "digest": "sha256 of the float32 little-endian C-order bytes"},
            "environment": environment(["seed-vc", "torch", "transformers", "librosa", "soxr", "soundfile", "numpy",
                                        "safetensors"]),
            "note": "convert_voice_with_streaming_arrays(stream_output=False) on the files in model/ and audio/; "
                    "float tensors float32; token ids as lists; compare bitwise (torch.equal, or the digest where "
                    "only a sample is stored)"}
    (OUT / "references.json").write_text(json.dumps(info, indent=1) + "\n")
    size = sum(p.stat().st_size for p in OUT.rglob("*") if p.is_file())
    print(f"wrote {len(v1.REFS)} tensors, {len(cases)} cases, {size} bytes in all to {OUT}")


if __name__ == "__main__":
    main()
