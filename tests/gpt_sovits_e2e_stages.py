"""What the GPT-SoVITS end-to-end tests of the vocoder versions share (test_gpt_sovits_e2e_v3v4.py, _e2e_v5.py): our
side of a set written by upstream's TTS.run (each case spoken through mizuoto.host with its GPT calls and stages
recorded, and its probe), and the stage-by-stage comparison (probes first, then per case the phones, BERT features,
prompt tokens, each fragment's tokens and the audio)."""

import json
from collections.abc import Callable
from pathlib import Path

import torch
from fallback import Comparison
from helpers import parity_module

TOLERANCE = 2.5e-5  # BERT features in the fallback (as gpt_sovits_e2e)
PROBE_TOLERANCE = 1.5e-2  # a probe's audio (up to 1): 12x gpt_sovits_e2e_v3v4's measured spread (at most 1.24e-3)


class RecordingModels:
    """mizuoto.host models by name, loaded once, each GPT call's tokens appended to `calls`."""

    def __init__(self, paths: dict):
        self.paths, self.calls, self.models = paths, [], {}

    def __call__(self, model: str):
        from mizuoto.host import load_model

        if model not in self.models:
            loaded = load_model("gpt_sovits", str(self.paths[model]), device="cpu")
            generate = loaded.state.t2s.generate

            def recorded(*args, **kwargs):
                result = generate(*args, **kwargs)
                self.calls.append(result.tokens.clone())
                return result

            loaded.state.t2s.generate = recorded
            self.models[model] = loaded
        return self.models[model]

    def release(self) -> None:
        for loaded in self.models.values():
            del loaded.state.t2s.generate


def speak_cases(folder: Path, out: Path, paths: dict, rates: dict, set_layout: Callable[[str, dict], None],
                kaiser: bool = False) -> dict:
    """Every case of the set in `folder` through mizuoto.host on the rebuilt files `paths`, what it computed saved to
    `out`. `set_layout(model, layout)` applies a case's chunk layout on our side (the caller restores it); `kaiser`:
    the prompt resampled as v5's branch does it."""
    from safetensors.torch import load_file, save_file

    from mizuoto.audio import files
    from mizuoto.engines.gpt_sovits import engine
    from mizuoto.engines.gpt_sovits import reference as ref
    from mizuoto.host import speak

    tiny = parity_module("gpt_sovits_e2e_models")
    info = json.loads((folder / "references.json").read_text())
    theirs = load_file(str(folder / "references.safetensors"))
    wave, rate = files.read(folder / info["inputs"]["reference"], "reference audio")
    results, load = {}, RecordingModels(paths)
    draws = engine.layerdrop_draws
    try:
        for name, case in info["cases"].items():
            inputs, model = case["inputs"], case["model"]
            state = load(model).state
            assert state.sovits.config.version == model, state.sovits.config.version
            front = state.front_end()
            with torch.inference_mode():
                fragments = front.fragments(inputs["text"], inputs["text_lang"], inputs["text_split_method"])
                for i, fragment in enumerate(fragments):
                    results[f"{name}/fragment{i}/phones"] = torch.tensor(fragment.phones, dtype=torch.long)
                    results[f"{name}/fragment{i}/bert"] = fragment.bert.float().contiguous()
                phones, bert, _ = front.prompt(inputs["prompt_text"], inputs["prompt_lang"])
                results[f"{name}/prompt/phones"] = torch.tensor(phones, dtype=torch.long)
                results[f"{name}/prompt/bert"] = bert.float().contiguous()
                results[f"{name}/prompt/semantic"] = ref.prompt_tokens(
                    wave, rate, state.sampling_rate, state.hubert, state.sovits, kaiser=kaiser).long()
            load.calls.clear()
            set_layout(model, case["layout"] or {})
            # a request upstream ran with its reference cached: without CN-HuBERT's LayerDrop draws
            engine.layerdrop_draws = draws if case["reference_extracted"] else (lambda hubert, generator: None)
            speech = speak(load(model), inputs["text"], seed=inputs["seed"], params=tiny.speak_params(inputs),
                           reference=(wave, rate), reference_text=inputs["prompt_text"])
            assert speech.sample_rate == rates[model], speech.sample_rate
            for k, tokens in enumerate(load.calls):
                results[f"{name}/call{k}/tokens"] = tokens.long()
            results[f"{name}/audio"] = (speech.waveform[0] * 32768).round().to(torch.int16)
            results[f"{name}/probe"] = probe(state, (wave, rate), inputs, theirs, name)
    finally:
        engine.layerdrop_draws = draws
        load.release()
    save_file({k: v.contiguous() for k, v in results.items()}, str(out))
    return {"saved": str(out)}


def probe(state, reference: tuple, inputs: dict, theirs: dict, name: str) -> torch.Tensor:
    """The writers' probe: the rolling path (using_vocoder_synthesis) of upstream's first fragment, from its recorded
    tokens and prompt, at speed 1 with the CFM's noise from PROBE_SEED, at the case's layout (still applied)."""
    from mizuoto.engines.gpt_sovits import engine
    from mizuoto.engines.gpt_sovits.synthesize import Prompt

    tiny = parity_module("gpt_sovits_e2e_models")
    prompt = Prompt(tuple(theirs[f"{name}/prompt/phones"].tolist()), theirs[f"{name}/prompt/bert"],
                    theirs[f"{name}/prompt/semantic"])
    params = {**tiny.speak_params(inputs), "speed_factor": 1.0, "parallel_infer": False}
    with torch.inference_mode():
        refers, _ = engine.timbres(state, [reference])
        decode = engine.mel_decoder(state, *reference, prompt, refers[0], params,
                                    torch.Generator().manual_seed(tiny.PROBE_SEED), None, None)
        tokens, phones = theirs[f"{name}/fragment0/tokens"], theirs[f"{name}/fragment0/phones"]
        return decode(tokens.view(1, 1, -1), phones.view(1, -1)).float().contiguous()


def compare(folder: Path, ours_file: Path, comparison: Comparison) -> Comparison:
    from safetensors.torch import load_file

    theirs, mine = load_file(str(folder / "references.safetensors")), load_file(str(ours_file))
    info = json.loads((folder / "references.json").read_text())
    for name, case in info["cases"].items():  # before anything free-running: a probe that moved turns exact mode off
        comparison.probe(f"{name}: CFM and vocoder of upstream's first fragment (probe, {case['model']})",
                         mine[f"{name}/probe"], theirs[f"{name}/probe"], PROBE_TOLERANCE)
    for name, case in info["cases"].items():
        for i in range(len(case["normalized"])):
            key = f"{name}/fragment{i}"
            assert torch.equal(mine[f"{key}/phones"], theirs[f"{key}/phones"]), f"{key}: phones"
            comparison.deterministic(f"{key}: BERT features", mine[f"{key}/bert"], theirs[f"{key}/bert"], TOLERANCE)
        assert torch.equal(mine[f"{name}/prompt/phones"], theirs[f"{name}/prompt/phones"]), f"{name}: prompt phones"
        comparison.deterministic(f"{name}: prompt BERT features", mine[f"{name}/prompt/bert"],
                                 theirs[f"{name}/prompt/bert"], TOLERANCE)
        comparison.free_running(f"{name}: prompt semantic tokens", mine[f"{name}/prompt/semantic"],
                                theirs[f"{name}/prompt/semantic"])
        for k, i in enumerate(case["order"]):
            comparison.free_running(f"{name}: fragment {i}'s tokens (T2S call {k})", mine[f"{name}/call{k}/tokens"],
                                    theirs[f"{name}/fragment{i}/tokens"])
        comparison.free_running(f"{name}: int16 audio ({case['model']}, {case['samples']} samples)",
                                mine[f"{name}/audio"], theirs[f"{name}/audio"])
    return comparison
