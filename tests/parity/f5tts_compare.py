"""Runs Mizuoto's F5-TTS on the cases of tests/parity/data/f5tts (written by upstream's own code with
scripts/parity/f5tts_references.py) and prints, as JSON, each output's largest difference from upstream's.

Run in a fresh process: the CPU kernel level must be fixed before torch loads, and both sides ran at
one thread (ENGINES.md, cross-cutting facts):
    ATEN_CPU_CAPABILITY=avx2 python tests/parity/f5tts_compare.py [DATA_DIR]
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import numpy as np
import torch
from safetensors.numpy import load_file

from mizuoto.engines.f5tts import audio, engine, flow, text
from mizuoto.engines.f5tts.mel import log_mel
from mizuoto.host import load_model
from mizuoto.runtime.context import RequestContext

DATA = Path(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).parent / "data" / "f5tts")


def difference(ours, theirs) -> dict:
    ours = ours.detach().cpu().numpy() if isinstance(ours, torch.Tensor) else np.asarray(ours)
    theirs = np.asarray(theirs)
    if ours.shape != theirs.shape:
        return {"shape": [list(ours.shape), list(theirs.shape)], "max_abs": None}
    return {"shape": list(ours.shape), "max_abs": float(np.abs(ours.astype(np.float64) - theirs).max(initial=0.0))}


def chunks_as_upstream_planned(case: dict, ref_samples_24k: int) -> list[text.Chunk]:
    """The chunks infer_batch_process made of the case's own text batches (cut with its max_chars)."""
    options = case["options"]
    spaced = text.space_reference_text(case["ref_text"])
    ref_frames = text.reference_frames(ref_samples_24k)
    batches = case["gen_text_batches"]
    durations = text.allocate_fix_durations(options["fix_duration"], ref_frames, batches,
                                            options["cross_fade_duration"])
    return [text.Chunk(gen, text.model_text(spaced, gen),
                       text.estimate_duration(ref_frames, spaced, gen, options["speed"]) if seconds is None
                       else text.fixed_duration_frames(seconds))
            for gen, seconds in zip(batches, durations, strict=True)]


def main() -> dict:
    torch.set_num_threads(1)
    info = json.loads((DATA / "references.json").read_text())
    refs = load_file(str(DATA / "references.safetensors"))
    models = {name: load_model("f5tts", DATA / name / "model.safetensors", device="cpu")
              for name in ("v1", "base", "e2")}
    results = {}
    with torch.inference_mode():
        v1 = models["v1"].state
        results["unit/cond_mel"] = difference(log_mel(torch.from_numpy(refs["audio/ref24k"])),
                                              refs["unit/cond_mel_ref24k"])
        x, cond = torch.from_numpy(refs["unit/dit_x"]), torch.from_numpy(refs["unit/dit_cond"])
        ids = torch.from_numpy(refs["unit/dit_text"])[0]
        for name, loaded in models.items():
            model = loaded.state.model
            texts = model.text_embeddings(ids[None], x.shape[1])
            results[f"unit/dit_{name}_guided"] = difference(model(x, cond, texts, torch.tensor(0.3)),
                                                            refs[f"unit/dit_{name}_cfg_t0.3"])
            results[f"unit/dit_{name}_plain"] = difference(model(x, cond, texts, torch.tensor(0.7), guided=False),
                                                           refs[f"unit/dit_{name}_plain_t0.7"])
            dropped = (texts[1], texts[1])
            results[f"unit/dit_{name}_dropped"] = difference(
                model(x, torch.zeros_like(cond), dropped, torch.tensor(0.7), guided=False),
                refs[f"unit/dit_{name}_drop_t0.7"])
        results["unit/vocos"] = difference(v1.vocoder.decode(torch.from_numpy(refs["unit/vocos_mel_in"])),
                                           refs["unit/vocos_wave"])
        results["unit/resample"] = difference(audio.resample(torch.from_numpy(refs["unit/resample_in16k"]), 16000,
                                                             24000), refs["unit/resample_out24k"])

        for case in info["cases"]:
            name = case["name"]
            if case["kind"] == "CFM.sample":
                loaded = models[case["model"]].state
                wave = torch.from_numpy(refs[case["cond"]])
                cond = log_mel(wave)[0].transpose(0, 1)
                ids = text.tokens_to_ids(text.convert_char_to_pinyin(case["texts"]), loaded.vocab)[0]
                mel = flow.sample(loaded.model, cond, ids, case["duration"],
                                  torch.Generator().manual_seed(case["seed"]), steps=case["steps"],
                                  cfg_strength=case["cfg_strength"], sway_sampling_coef=case["sway_sampling_coef"])
                results[f"{name}/mel"] = difference(mel, refs[case["tensors"]["out_mel"]][0])
                vocoded = loaded.vocoder.decode(mel[case["vocoded_from_frame"]:].transpose(0, 1)[None])
                results[f"{name}/wave"] = difference(vocoded, refs[case["tensors"]["wave"]])
            elif case["kind"] == "infer_batch_process":
                ref_24k, rms = audio.prepare_reference(torch.from_numpy(refs[case["ref_audio"]]), case["ref_sr"])
                options = case["options"]
                params = {"nfe_step": options["nfe_step"], "cfg_strength": options["cfg_strength"],
                          "sway_sampling_coef": options["sway_sampling_coef"]}
                waves = engine.generate(v1, ref_24k, rms, chunks_as_upstream_planned(case, ref_24k.shape[-1]),
                                        RequestContext(case["seed_everything"]), params)
                joined = audio.cross_fade(waves, engine.SAMPLE_RATE, options["cross_fade_duration"])
                results[f"{name}/wave"] = difference(joined.astype(np.float32), refs[case["tensors"]["final_wave"]])
            else:  # upstream's whole API path from the file: our speak() from the host, trimming included
                from mizuoto.host import speak

                options = case["options"]
                params = {"nfe_step": options["nfe_step"], "speed": options["speed"]}
                original = torch.from_numpy(refs[case["original"]]), case["original_sr"]
                speech = speak(models["v1"], case["gen_text"], seed=case["seed_everything"], reference=original,
                               reference_text=case["ref_text_in"], params=params)
                results[f"{name}/wave"] = difference(speech.waveform[0], refs[case["tensors"]["final_wave"]])
                # and from upstream's preprocessed file, with our trimming off
                reference = torch.from_numpy(refs[case["tensors_preprocessed_ref"]]), case["preprocessed_sr"]
                speech = speak(models["v1"], case["gen_text"], seed=case["seed_everything"], reference=reference,
                               reference_text=case["ref_text_after_preprocess"],
                               params=dict(params, trim_reference=False))
                results[f"{name}/wave_from_preprocessed"] = difference(speech.waveform[0],
                                                                       refs[case["tensors"]["final_wave"]])
    return results


if __name__ == "__main__":
    if os.environ.get("ATEN_CPU_CAPABILITY") != "avx2":
        sys.exit("run with ATEN_CPU_CAPABILITY=avx2: the references were computed at that CPU kernel level")
    print(json.dumps(main()))
