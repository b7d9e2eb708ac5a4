"""What the GPT-SoVITS end-to-end tests of the vocoder versions share (test_gpt_sovits_e2e_v3v4.py, _e2e_v5.py): the
host's models with their GPT calls recorded, and the stage-by-stage comparison with a set written by upstream's
TTS.run (probes first, then per case the phones, BERT features, prompt tokens, each fragment's tokens and the audio)."""

import json
from pathlib import Path

import torch
from fallback import Comparison

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
