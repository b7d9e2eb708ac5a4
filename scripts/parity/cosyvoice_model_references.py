#!/usr/bin/env python
"""Reference outputs of CosyVoice 2's and CosyVoice 3's whole model for a request that is not streamed, written by
upstream's own CosyVoice2Model / CosyVoice3Model.tts(stream=False) from a FunAudioLLM/CosyVoice checkout (GitHub
only: tests/fallback.py compares on a machine whose floats differ).

    python scripts/parity/cosyvoice_model_references.py OUTDIR --checkout PATH            # the set
    python scripts/parity/cosyvoice_model_references.py OUTDIR --checkout PATH --spread   # how far it moves

The interpreter: scripts/parity/cosyvoice_upstream_env.sh. The parts are the other CosyVoice sets' tiny models,
built by their writers' own functions: the LMs of cosyvoice_llm_references, the flows of cosyvoice_flow_references
and, at 80 mel bands, a HiFTGenerator (SineGen2) and a CausalHiFTGenerator as cosyvoice_hift_references builds them
(the causal one's noise tables drawn at construction from its seed). Per case, after torch.manual_seed(seed): the
int16-free float waveform upstream yields (the LM in its thread, then token2wav with finalize and speed), the LM's
speech tokens (recorded from tts_speech_token_dict through llm_job) and, for the fallback, the flow's mel on those
tokens (a probe: deterministic, no draws). OUTDIR/references.safetensors holds the inputs and outputs;
OUTDIR/references.json the recipes of the parts and the cases.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import cosyvoice_flow_references as flow_refs  # noqa: E402
import cosyvoice_hift_references as hift_refs  # noqa: E402
import cosyvoice_llm_references as llm_refs  # noqa: E402
import torch  # noqa: E402
from pinned import (  # noqa: E402
    checkout_writer_main,
    lifted_runs,
    save_spread,
    write_checkout_tensors,
)

HIFT = {  # the parts' HiFT at 80 bands (cosyvoice_hift_references' CV2 layout otherwise)
    "cv2": ("HiFTGenerator", {**hift_refs.CV2, "in_channels": 80},
            {"num_class": 1, "in_channels": 80, "cond_channels": 12}, 600),
    "cv3": ("CausalHiFTGenerator", {**hift_refs.CV2, "in_channels": 80, "conv_pre_look_right": 4},
            {"num_class": 1, "in_channels": 80, "cond_channels": 12}, 700),
}
# name -> (version, prompt text ids, text ids, LM prompt speech tokens, flow prompt speech tokens, speed, seed)
CASES = {
    "cv2/zero_shot": ("cv2", 5, 4, 6, 6, 1.0, 11),
    "cv2/cross_lingual": ("cv2", 0, 5, 0, 6, 1.0, 12),
    "cv2/speed": ("cv2", 5, 4, 6, 6, 1.5, 13),
    "cv3/zero_shot": ("cv3", 5, 4, 6, 6, 1.0, 21),
    "cv3/cross_lingual": ("cv3", 0, 5, 0, 6, 1.0, 22),
    "cv3/slow": ("cv3", 5, 3, 6, 6, 0.8, 23),
}


def build(checkout: Path) -> dict:
    up = flow_refs.upstream(checkout)
    flows = flow_refs.build(up)
    with tempfile.TemporaryDirectory() as tmp:
        lms = llm_refs.build(checkout, Path(tmp))
    from cosyvoice.cli.model import CosyVoice2Model, CosyVoice3Model

    models, recipes = {}, {}
    for version, cls in (("cv2", CosyVoice2Model), ("cv3", CosyVoice3Model)):
        hift_refs.TINY[f"model_{version}"] = HIFT[version]
        hift, layout, _ = hift_refs.build(checkout, f"model_{version}")
        kind, args, predictor_args, seed = HIFT[version]
        recipes[version] = {"class": kind, "hift": args, "f0_predictor": predictor_args, "seed": seed,
                            "weights_seed": seed + 1, "post_gain": hift_refs.POST_GAIN,
                            "layout": {k: list(v) for k, v in layout.items()}}
        models[version] = cls(lms[version][0], flows[version][0], hift, fp16=False)
    return models, recipes


def outputs(checkout: Path) -> tuple[dict, dict]:
    models, recipes = build(checkout)
    g = torch.Generator().manual_seed(51)
    refs, cases = {}, {}
    for name, (version, prompt, text, llm_speech, flow_speech, speed, seed) in CASES.items():
        model = models[version]
        text_ids, prompt_text, _ = llm_refs.case_ids(g, version, prompt, text, 0)
        flow_prompt = torch.randint(0, llm_refs.SPEECH_TOKENS, (1, flow_speech), generator=g, dtype=torch.int32)
        llm_prompt = flow_prompt[:, :llm_speech]
        feat = torch.randn(1, 2 * flow_speech, 80, generator=g)
        embedding = torch.randn(1, 192, generator=g)
        tokens = []
        original = model.llm_job

        def recording(*args, original=original, tokens=tokens, model=model):
            original(*args)
            tokens.extend(model.tts_speech_token_dict[args[-1]])

        model.llm_job = recording
        torch.manual_seed(seed)
        waves = [out["tts_speech"] for out in model.tts(
            text=text_ids, flow_embedding=embedding, llm_embedding=embedding, prompt_text=prompt_text,
            llm_prompt_speech_token=llm_prompt, flow_prompt_speech_token=flow_prompt, prompt_speech_feat=feat,
            stream=False, speed=speed)]
        model.llm_job = original
        assert len(waves) == 1
        with torch.inference_mode():
            token = torch.tensor(tokens, dtype=torch.int32)[None]
            mel, _ = model.flow.inference(token, torch.tensor([token.shape[1]], dtype=torch.int32), flow_prompt,
                                          torch.tensor([flow_speech], dtype=torch.int32), feat,
                                          torch.tensor([feat.shape[1]], dtype=torch.int32), embedding,
                                          streaming=False, finalize=True)
        for key, value in (("text", text_ids), ("prompt_text", prompt_text), ("llm_prompt", llm_prompt),
                           ("flow_prompt", flow_prompt), ("feat", feat), ("embedding", embedding),
                           ("tokens", torch.tensor(tokens, dtype=torch.int64)), ("mel", mel), ("wave", waves[0])):
            refs[f"{name}/{key}"] = value
        cases[name] = {"version": version, "speed": speed, "seed": seed, "tokens": len(tokens)}
    info = {"hift": recipes, "llm": {"qwen": llm_refs.QWEN, "seeds": llm_refs.SEEDS},
            "flow": {"seeds": flow_refs.SEEDS}, "cases": cases}
    return {k: v.contiguous().clone() for k, v in refs.items()}, info


FLOATS = tuple(f"{c}/{k}" for c in CASES for k in ("mel", "wave"))


def write(out: Path, checkout: Path) -> None:
    refs, info = outputs(checkout)
    write_checkout_tensors(out, refs, info, checkout,
                           "cosyvoice/cli/model.py CosyVoice2Model/CosyVoice3Model.tts(stream=False): llm_job, "
                           "token2wav", ["torch", "transformers", "diffusers", "x-transformers"],
                           repository="FunAudioLLM/CosyVoice")


def spread(out: Path, checkout: Path) -> None:
    """Max |difference| of the probe mels and the waves between the pinned run and runs with a pin lifted (a run
    that drew other tokens compares nothing of that case: its length differs)."""
    with tempfile.TemporaryDirectory() as tmp:
        runs = lifted_runs(__file__, ["--checkout", checkout], tmp)
    pinned = runs.pop("pinned")

    def moved(r, k):
        return float((r[k] - pinned[k]).abs().max()) if r[k].shape == pinned[k].shape else float("nan")

    report = {label: {k: moved(r, k) for k in FLOATS} for label, r in runs.items()}
    save_spread(out, report, FLOATS)


if __name__ == "__main__":
    checkout_writer_main(__doc__.split("\n\n")[0], write, spread, outputs)
