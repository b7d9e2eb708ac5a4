"""CosyVoice 2's and CosyVoice 3's whole model for a request that is not streamed (engines/cosyvoice/model.py):
LM -> flow -> HiFT, as upstream's CosyVoice2Model / CosyVoice3Model.tts(stream=False).

Against tests/parity/data/cosyvoice_model (scripts/parity/cosyvoice_model_references.py: upstream's tts at
FunAudioLLM/CosyVoice ace7c47 under the parity pins, with the tiny LMs of cosyvoice_llm, the flows of cosyvoice_flow
and 80-band HiFTs built as cosyvoice_hift builds them; each case after torch.manual_seed, ours with a generator
seeded the same: CosyVoice 2's HiFT draws after the LM's). In a pinned subprocess, per case (zero-shot,
cross-lingual without the LM's prompt speech, a speed above 1 and one below): the speech tokens, the flow's mel on
them (a probe) and the waveform. Bitwise where the set's fingerprint is this machine's; elsewhere the mel within
TOLERANCE and the free-running tokens and waveform not compared (tests/fallback.py).
"""

import functools
import json
import sys
from pathlib import Path

import pytest
import torch

if __name__ == "__main__":  # run as the pinned script: tests/ (helpers.py) is not on the path yet
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import cosyvoice_parts  # noqa: E402
from fallback import Comparison  # noqa: E402
from helpers import reference_sets, run_pinned  # noqa: E402

from mizuoto.core.errors import InputError  # noqa: E402
from mizuoto.engines.cosyvoice.model import CosyVoiceModel  # noqa: E402

SET = "cosyvoice_model"
TOLERANCE = 1e-4


def folder(name: str) -> Path:
    return reference_sets().SETS[name].committed


def load(path: Path) -> tuple[dict, dict]:
    from safetensors.torch import load_file

    return json.loads((path / "references.json").read_text()), load_file(str(path / "references.safetensors"))


def models(root: Path) -> dict:
    """Ours from the three parts' committed sets (the flows' buffers, the LMs' recipes) and this set's HiFTs."""
    recorded, _ = load(root)
    flow_info, flow_refs = load(root.parent / "cosyvoice_flow")
    llm_info, _ = load(root.parent / "cosyvoice_llm")
    flows = cosyvoice_parts.flows(flow_info, flow_refs)
    return {v: CosyVoiceModel(cosyvoice_parts.lm(llm_info, v), flows[v],
                              cosyvoice_parts.vocoder(recorded["hift"][v])[0]) for v in ("cv2", "cv3")}


def speak(model: CosyVoiceModel, refs: dict, name: str, case: dict):
    g = torch.Generator().manual_seed(case["seed"])
    inputs = [refs[f"{name}/{k}"] for k in ("text", "prompt_text", "llm_prompt")]
    tokens = model.speech_tokens(*inputs, generator=g)
    wave = model.token2wav(tokens, refs[f"{name}/flow_prompt"], refs[f"{name}/feat"], refs[f"{name}/embedding"],
                           case["speed"], generator=g)
    return tokens, wave


def ours(root: Path, out: Path) -> dict:
    from safetensors.torch import save_file

    recorded, refs = load(root)
    voices = models(root)
    results = {}
    for name, case in recorded["cases"].items():
        model = voices[case["version"]]
        tokens, results[f"{name}/wave"] = speak(model, refs, name, case)
        results[f"{name}/tokens"] = torch.tensor(tokens, dtype=torch.int64)
        token = refs[f"{name}/tokens"].to(torch.int32)[None]
        results[f"{name}/mel"] = model.flow.inference(
            token, torch.tensor([token.shape[1]]), refs[f"{name}/flow_prompt"],
            torch.tensor([refs[f"{name}/flow_prompt"].shape[1]]), refs[f"{name}/feat"], refs[f"{name}/embedding"])
    save_file({k: v.contiguous() for k, v in results.items()}, str(out))
    return {"saved": str(out)}


@functools.cache
def committed() -> tuple[dict, dict]:
    return load(folder(SET))


def test_upstreams_tts_without_streaming(tmp_path, record_property):
    from safetensors.torch import load_file

    out = tmp_path / "ours.safetensors"
    run_pinned(__file__, folder(SET), out)
    comparison = Comparison.for_set(SET)
    recorded, theirs = committed()
    mine = load_file(str(out))
    for name in recorded["cases"]:
        comparison.deterministic(f"{name} flow mel on upstream's tokens", mine[f"{name}/mel"], theirs[f"{name}/mel"],
                                 TOLERANCE)
        comparison.free_running(f"{name} speech tokens", mine[f"{name}/tokens"], theirs[f"{name}/tokens"])
        comparison.free_running(f"{name} waveform", mine[f"{name}/wave"], theirs[f"{name}/wave"])
    record_property("parity_mode", comparison.mode)
    print(f"{SET} parity: {comparison.mode} ({comparison.why})", *comparison.checked, sep="\n  ")


def test_the_set_covers_both_versions_speeds_and_cross_lingual():
    recorded, refs = committed()
    assert recorded["upstream"]["commit"].startswith("ace7c47") and not recorded["upstream"]["modified"]
    cases = recorded["cases"]
    for version in ("cv2", "cv3"):
        mine = {n: c for n, c in cases.items() if c["version"] == version}
        assert any(c["speed"] == 1 for c in mine.values()) and any(c["speed"] != 1 for c in mine.values())
        assert any(refs[f"{n}/llm_prompt"].shape[1] == 0 for n in mine)  # cross-lingual: no LM prompt speech
    assert any(c["speed"] < 1 for c in cases.values()) and any(c["speed"] > 1 for c in cases.values())
    for name in cases:  # the waveform is real audio, not silence or the clamp
        wave = refs[f"{name}/wave"]
        assert wave.abs().max() > 1e-3 and wave.abs().mean() < 0.9
    # the mels are what the fallback compares; HiFT's F0-driven source amplifies them (the waves moved up to 1.8e-4)
    assert max(v for k, v in recorded["spread"]["max"].items() if k.endswith("/mel")) * 5 < TOLERANCE


def test_a_mismatched_voice_and_bad_speed_are_one_line_errors():
    voices = models(folder(SET))
    with pytest.raises(InputError, match="cannot drive"):
        CosyVoiceModel(voices["cv2"].lm, voices["cv3"].flow, voices["cv3"].hift)
    recorded, refs = committed()
    name = "cv3/zero_shot"
    with pytest.raises(InputError, match="speed must be above 0"):
        voices["cv3"].token2wav([1, 2, 3], refs[f"{name}/flow_prompt"], refs[f"{name}/feat"],
                                refs[f"{name}/embedding"], 0)


if __name__ == "__main__":  # the pinned subprocess
    print(json.dumps(ours(Path(sys.argv[1]), Path(sys.argv[2]))))
