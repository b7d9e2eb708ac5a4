#!/usr/bin/env python
"""Reference outputs of CosyVoice 2 and 3's vocoders, written by upstream's own classes from a FunAudioLLM/CosyVoice
checkout (GitHub only: tests/fallback.py compares on a machine whose floats differ), for
tests/nn/test_hift_cosyvoice.py (mizuoto/nn/hift.py with hift_sine2.py, and hift_causal.py).

    python scripts/parity/cosyvoice_hift_references.py OUTDIR --checkout PATH            # the set
    python scripts/parity/cosyvoice_hift_references.py OUTDIR --checkout PATH --spread   # how far it moves

The interpreter: scripts/parity/cosyvoice_upstream_env.sh. `cosyvoice/hifigan/generator.py` and `f0_predictor.py`
import nothing heavy; the real-size CosyVoice 3 build below goes through HyperPyYAML and the flow, whose
Matcha-TTS base imports `matcha.utils.pylogger` (hydra, lightning): that one logger module is stood in by
logging.getLogger (no numerics).

- config/<name>: four tiny configurations of upstream's classes with every parameter drawn by seedvc_weights'
  hift_state (weight norm's g and v in upstream's parametrizations layout, Snake alphas, biases, the F0 predictor;
  upstream inits some to constants; conv_post's g times POST_GAIN): `cv2` (HiFTGenerator as cosyvoice2.yaml builds it
  at width 16: 24 kHz, so SineGen2; rates [8, 5, 3], 480 samples a frame; its voiced threshold 50 Hz rather than 10,
  so that the random F0 predictor's output has unvoiced stretches), `cv2_odd` (16 kHz, 3 harmonics, rates [4, 2],
  n_fft 8 hop 2, other thresholds), `cv3` (CausalHiFTGenerator as cosyvoice3.yaml builds it at width 16,
  conv_pre_look_right 4, CausalConvRNNF0Predictor) and `cv3_odd` (rates [4, 2], n_fft 8 hop 2, look-right 3, uneven
  dilations). Only the names and shapes are stored; the test rebuilds the values. Each is built as HyperPyYAML builds
  it (the F0 predictor first) right after torch.manual_seed(seed): for the causal ones the start phases and the first
  rows of the noise table the constructor drew are stored, and for all of them three draws from the global generator's
  state recorded as SourceModuleHnNSF's constructor returns (its __init__ wrapped for that: the causal tables, the
  Linear's init and the unused table take 72 M draws).
- case/cv2*/<name>: a seeded mel (batch 1 or 2, 1 to 7 frames) through upstream's `inference(speech_feat)` (under
  its inference_mode) right after torch.manual_seed(seed): the F0 predictor's output, the source, the wave and
  three draws after; `stream` cases chain two calls as CosyVoice2Model.token2wav does (the second's mel starts with
  the first's last mel frames, its cache_source is the first's last samples of source).
- case/cv3*/<name>: `inference(speech_feat, finalize)`: f0 (float64 before the cast, and float32), source, wave;
  finalize on and off, batch 1 and 2; `chunks` cases run generator.py's own streaming check (prefixes of one mel,
  finalize once the prefix reaches the end, each output's samples from the prefix's first new frame) and record
  every chunk, the whole mel's wave and upstream's measured max |chunk - whole|; `token2wav` cases run
  CosyVoice3Model.token2wav's HiFT part (the mel so far vocoded again per chunk, the samples past the offset kept).
- real/cv3: CosyVoice 3's yaml at the checkout (examples/libritts/cosyvoice3/conf/cosyvoice3.yaml, llm left out,
  the entries from its GAN section on dropped) built as CosyVoice3 builds it: its HiFT's start phases and rows of
  its noise table at three offsets (the flow's CausalConditionalCFM reseeds with 0 before them), and its hift
  state dict's names and shapes (the released hift.pt's layout); real/cv2: HiFTGenerator at cosyvoice2.yaml's
  sizes, names and shapes.
"""

from __future__ import annotations

import json
import logging
import math
import sys
import tempfile
import types
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from pinned import (  # noqa: E402  (beside this script)
    checkout_record,
    checkout_writer_main,
    environment,
    is_spread_child,
    lifted_runs,
    pin_process,
    save_spread,
)
from seedvc_weights import hift_state  # noqa: E402  (the test's too)

if "--spread" not in sys.argv and not is_spread_child():
    pin_process()

import torch  # noqa: E402

SAMPLE_RATE = 24000
CV2 = {"in_channels": 8, "base_channels": 16, "nb_harmonics": 8, "sampling_rate": SAMPLE_RATE, "nsf_alpha": 0.1,
       "nsf_sigma": 0.003, "nsf_voiced_threshold": 50, "upsample_rates": [8, 5, 3],
       "upsample_kernel_sizes": [16, 11, 7], "istft_params": {"n_fft": 16, "hop_len": 4},
       "resblock_kernel_sizes": [3, 7, 11], "resblock_dilation_sizes": [[1, 3, 5], [1, 3, 5], [1, 3, 5]],
       "source_resblock_kernel_sizes": [7, 7, 11],
       "source_resblock_dilation_sizes": [[1, 3, 5], [1, 3, 5], [1, 3, 5]], "lrelu_slope": 0.1, "audio_limit": 0.99}
ODD = {"in_channels": 5, "base_channels": 12, "nb_harmonics": 3, "sampling_rate": 16000, "nsf_alpha": 0.3,
       "nsf_sigma": 0.01, "nsf_voiced_threshold": 50, "upsample_rates": [4, 2], "upsample_kernel_sizes": [8, 4],
       "istft_params": {"n_fft": 8, "hop_len": 2}, "resblock_kernel_sizes": [3, 5],
       "resblock_dilation_sizes": [[1, 2], [3]], "source_resblock_kernel_sizes": [3, 5],
       "source_resblock_dilation_sizes": [[1, 3], [2]], "lrelu_slope": 0.2, "audio_limit": 0.9}
TINY = {  # name: (class, hift arguments, f0 predictor arguments, seed)
    "cv2": ("HiFTGenerator", CV2, {"num_class": 1, "in_channels": 8, "cond_channels": 12}, 100),
    "cv2_odd": ("HiFTGenerator", ODD, {"num_class": 1, "in_channels": 5, "cond_channels": 7}, 200),
    "cv3": ("CausalHiFTGenerator", {**CV2, "conv_pre_look_right": 4},
            {"num_class": 1, "in_channels": 8, "cond_channels": 12}, 300),
    "cv3_odd": ("CausalHiFTGenerator", {**ODD, "nb_harmonics": 8, "sampling_rate": SAMPLE_RATE,
                                        "conv_pre_look_right": 3},
                {"num_class": 1, "in_channels": 5, "cond_channels": 7}, 400),
}
CASES = {  # config: {case: (batch, frames, finalize)}; finalize None: the non-causal inference
    "cv2": {"b1_t2": (1, 2, None), "b1_t7": (1, 7, None), "b2_t4": (2, 4, None), "b1_t1": (1, 1, None)},
    "cv2_odd": {"b1_t6": (1, 6, None), "b2_t3": (2, 3, None)},
    "cv3": {"b1_t12": (1, 12, True), "b2_t10": (2, 10, True), "b1_t12_open": (1, 12, False),
            "b2_t14_open": (2, 14, False), "b1_t1": (1, 1, True)},
    "cv3_odd": {"b1_t9": (1, 9, True), "b1_t11_open": (1, 11, False), "b2_t8_open": (2, 8, False)},
}
STREAMS = {"cv2": (1, 6, 4, 2)}  # CV2 token2wav: (batch, first frames, new frames, mel cache frames)
CHUNKS = {"cv3": (30, 6, 4), "cv3_odd": (20, 5, 4)}  # generator.py's check: (mel frames, chunk, context)
TOKEN2WAV = {"cv3": (10, 6, 6, 5)}  # CosyVoice3Model.token2wav: the frames of each chunk's mel
POST_GAIN = 0.5  # conv_post's g scaled: the clamp at audio_limit then cuts peaks only
TABLE_ROWS = 64  # rows of a tiny causal model's noise table stored (the test makes the same)
REAL_ROWS = {"head": 0, "middle": 3_000_000, "tail": 300 * 24000 - 16}
FLOATS: list[str] = []  # the tensors a --spread run compares (filled by outputs())


def upstream(checkout: Path):
    for path in (checkout, checkout / "third_party" / "Matcha-TTS"):
        if str(path) not in sys.path:
            sys.path.insert(0, str(path))
    from cosyvoice.hifigan import f0_predictor, generator

    return generator, f0_predictor


def build(checkout: Path, name: str):
    generator, f0_predictor = upstream(checkout)
    kind, args, predictor_args, seed = TINY[name]
    causal = kind == "CausalHiFTGenerator"
    states = []  # the global generator's state once the source module (which draws the causal tables) is built
    original = generator.SourceModuleHnNSF.__init__

    def recording(self, *arguments, **keywords):
        original(self, *arguments, **keywords)
        states.append(torch.get_rng_state())

    generator.SourceModuleHnNSF.__init__ = recording
    try:
        torch.manual_seed(seed)  # HyperPyYAML builds the F0 predictor first, then the generator
        predictor = (f0_predictor.CausalConvRNNF0Predictor if causal else f0_predictor.ConvRNNF0Predictor)(
            **predictor_args)
        model = getattr(generator, kind)(**args, f0_predictor=predictor)
    finally:
        generator.SourceModuleHnNSF.__init__ = original
    after = torch.rand(3, generator=torch.Generator().set_state(states[0]))
    layout = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    model.load_state_dict(hift_state(layout, seed + 1, POST_GAIN), strict=True)
    return model.eval(), layout, after


def seeded_mel(batch: int, frames: int, channels: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(batch, channels, frames, generator=g) * 1.5 - 2


def outputs(checkout: Path) -> tuple[dict, dict]:
    refs: dict[str, torch.Tensor] = {}
    info: dict = {"configs": {}, "cases": {}}

    def put(key: str, tensor: torch.Tensor, compared: bool = True) -> str:
        assert key not in refs, key
        refs[key] = tensor.detach().contiguous().clone()
        if compared and tensor.is_floating_point() and key not in FLOATS:
            FLOATS.append(key)
        return key

    for index, (name, (kind, args, predictor_args, seed)) in enumerate(TINY.items()):
        model, layout, after = build(checkout, name)
        entry = {"class": kind, "hift": args, "f0_predictor": predictor_args, "seed": seed, "weights_seed": seed + 1,
                 "post_gain": POST_GAIN,
                 "layout": {k: list(v) for k, v in layout.items()},
                 "after_source_module": put(f"config/{name}/after_source_module", after, False)}
        causal = kind == "CausalHiFTGenerator"
        if causal:
            sine = model.m_source.l_sin_gen
            entry["phases"] = put(f"config/{name}/phases", sine.rand_ini, False)
            entry["table_rows"] = put(f"config/{name}/table_rows", sine.sine_waves[:, :TABLE_ROWS], False)
        info["configs"][name] = entry
        for case_index, (case, (batch, frames, finalize)) in enumerate(CASES[name].items()):
            case_seed = 1000 * (index + 1) + case_index
            mel = seeded_mel(batch, frames, args["in_channels"], case_seed + 7)
            prefix = f"case/{name}/{case}"
            record = {"config": name, "seed": case_seed, "finalize": finalize, "mel": put(f"{prefix}/mel", mel, False)}
            torch.manual_seed(case_seed)
            if causal:
                wave, source = model.inference(mel, finalize=finalize)
                with torch.inference_mode():  # the predictor is float64 now, as inference left it
                    f0_64 = model.f0_predictor(mel.to(torch.float64), finalize=finalize)
                record["f0_64"] = put(f"{prefix}/f0_64", f0_64)
            else:
                wave, source = model.inference(mel)
            after_case = torch.rand(3)
            with torch.inference_mode():
                f0 = model.f0_predictor(mel) if not causal else f0_64.to(mel)
            record.update(f0=put(f"{prefix}/f0", f0), source=put(f"{prefix}/source", source),
                          wave=put(f"{prefix}/wave", wave), after=put(f"{prefix}/after", after_case, False))
            voiced = float((f0 > args["nsf_voiced_threshold"]).float().mean())
            record["voiced_share"] = round(voiced, 4)
            record["clamped_share"] = round(float((wave.abs() >= args["audio_limit"]).float().mean()), 4)
            info["cases"][f"{name}/{case}"] = record
        if name in STREAMS:
            batch, first, new, cache = STREAMS[name]
            seed = 1000 * (index + 1) + 50
            mels = [seeded_mel(batch, first, args["in_channels"], seed), seeded_mel(batch, new, args["in_channels"],
                                                                                      seed + 1)]
            torch.manual_seed(seed)
            wave1, source1 = model.inference(mels[0])
            samples = math.prod(args["upsample_rates"]) * args["istft_params"]["hop_len"]
            cache_mel, cache_source = mels[0][:, :, -cache:], source1[:, :, -cache * samples:]
            wave2, source2 = model.inference(torch.cat([cache_mel, mels[1]], dim=2), cache_source=cache_source)
            prefix = f"stream/{name}"
            info["cases"][f"{name}/stream"] = {
                "config": name, "seed": seed, "kind": "cv2_stream", "cache_frames": cache,
                "mels": [put(f"{prefix}/mel{i}", m, False) for i, m in enumerate(mels)],
                "waves": [put(f"{prefix}/wave0", wave1), put(f"{prefix}/wave1", wave2)],
                "sources": [put(f"{prefix}/source0", source1), put(f"{prefix}/source1", source2)],
                "after": put(f"{prefix}/after", torch.rand(3), False)}
        if name in CHUNKS:
            total, chunk, context = CHUNKS[name]
            mel = seeded_mel(1, total, args["in_channels"], 1000 * (index + 1) + 60)
            samples = math.prod(args["upsample_rates"]) * args["istft_params"]["hop_len"]
            whole, _ = model.inference(mel)
            pieces, worst = [], []
            for start in range(0, total, chunk):
                finalize = start + chunk + context >= total
                piece, _ = model.inference(mel[:, :, :start + chunk + context], finalize=finalize)
                piece = piece[:, start * samples:]
                pieces.append(put(f"chunks/{name}/{start}", piece))
                worst.append(float((whole[:, start * samples:start * samples + piece.shape[1]] - piece).abs().max())
                             if piece.numel() else 0.0)
            info["cases"][f"{name}/chunks"] = {
                "config": name, "kind": "cv3_chunks", "frames": total, "chunk": chunk, "context": context,
                "mel": put(f"chunks/{name}/mel", mel, False), "whole": put(f"chunks/{name}/whole", whole),
                "pieces": pieces, "max_abs_chunk_minus_whole": worst}
        if name in TOKEN2WAV:
            sizes = TOKEN2WAV[name]
            mels = [seeded_mel(1, n, args["in_channels"], 1000 * (index + 1) + 70 + i) for i, n in enumerate(sizes)]
            so_far, offset, waves = None, 0, []
            for i, chunk_mel in enumerate(mels):  # CosyVoice3Model.token2wav, speed 1
                so_far = chunk_mel if so_far is None else torch.concat([so_far, chunk_mel], dim=2)
                speech, _ = model.inference(speech_feat=so_far, finalize=i == len(mels) - 1)
                speech = speech[:, offset:]
                offset += speech.shape[1]
                waves.append(put(f"token2wav/{name}/wave{i}", speech))
            info["cases"][f"{name}/token2wav"] = {
                "config": name, "kind": "cv3_token2wav",
                "mels": [put(f"token2wav/{name}/mel{i}", m, False) for i, m in enumerate(mels)], "waves": waves}
    real(checkout, refs, info, put)
    return refs, info


def real(checkout: Path, refs: dict, info: dict, put) -> None:
    """CosyVoice 3's HiFT as its yaml builds it (its noise tables and state layout) and CosyVoice 2's layout."""
    generator, f0_predictor = upstream(checkout)
    for name in ("matcha.utils", "matcha.utils.pylogger"):  # a logger (hydra, lightning); no numerics
        module = types.ModuleType(name)
        module.__path__, module.get_pylogger = [], logging.getLogger
        sys.modules.setdefault(name, module)
    from hyperpyyaml import load_hyperpyyaml

    yaml_path = checkout / "examples/libritts/cosyvoice3/conf/cosyvoice3.yaml"
    text = yaml_path.read_text().split("# gan related module")[0]
    built = load_hyperpyyaml(text, overrides={"llm": None})
    hift = built["hift"]
    sine = hift.m_source.l_sin_gen
    entry = {"yaml": str(yaml_path.relative_to(checkout)), "class": type(hift).__name__,
             "phases": put("real/cv3/phases", sine.rand_ini, False),
             "rows": {k: [v, put(f"real/cv3/rows/{k}", sine.sine_waves[:, v:v + 16], False)]
                      for k, v in REAL_ROWS.items()},
             "table_shapes": [list(sine.sine_waves.shape), list(hift.m_source.uv.shape)],
             "layout": {k: list(v.shape) for k, v in hift.state_dict().items()}}
    info["real"] = {"cv3": entry}
    del built, hift, sine
    cv2 = generator.HiFTGenerator(**{**CV2, "in_channels": 80, "base_channels": 512, "nsf_voiced_threshold": 10},
                                  f0_predictor=f0_predictor.ConvRNNF0Predictor(1, 80, 512))
    info["real"]["cv2"] = {"layout": {k: list(v.shape) for k, v in cv2.state_dict().items()},
                           "source": type(cv2.m_source.l_sin_gen).__name__}


def write(out: Path, checkout: Path) -> None:
    from safetensors.torch import load_file, save_file

    refs, info = outputs(checkout)
    out.mkdir(parents=True, exist_ok=True)
    save_file(refs, str(out / "references.safetensors"))
    back = load_file(str(out / "references.safetensors"))
    assert back.keys() == refs.keys() and all(torch.equal(back[k], refs[k]) for k in refs)
    info["upstream"] = {"repository": "FunAudioLLM/CosyVoice", **checkout_record(checkout),
                        "code": "cosyvoice/hifigan/generator.py HiFTGenerator.inference (SineGen2) and "
                                "CausalHiFTGenerator.inference with f0_predictor.py's predictors"}
    info["environment"] = environment(["torch", "numpy", "scipy", "HyperPyYAML", "safetensors"])
    spread_file = out / "spread.json"
    if spread_file.exists():
        info["spread"] = json.loads(spread_file.read_text())
    (out / "references.json").write_text(json.dumps(info, indent=1) + "\n")
    print(f"wrote {len(refs)} tensors to {out}")


def spread(out: Path, checkout: Path) -> None:
    """Max |difference| of each float output between the pinned run and runs with a pin lifted: OUT/spread.json."""
    with tempfile.TemporaryDirectory() as tmp:
        runs = lifted_runs(__file__, ["--checkout", checkout], tmp)
    pinned = runs.pop("pinned")
    outputs_names = [k for k in pinned if pinned[k].is_floating_point() and k.split("/")[-1] not in
                     ("mel", "after", "after_source_module", "phases", "table_rows") and not k.startswith("real/")
                     and "/mel" not in k]
    report = {label: {k: float((r[k].double() - pinned[k].double()).abs().max()) if r[k].numel() else 0.0
                      for k in outputs_names} for label, r in runs.items()}
    save_spread(out, report, outputs_names)


if __name__ == "__main__":
    checkout_writer_main(__doc__.split("\n\n")[0], write, spread, outputs)
