"""GPT-SoVITS v5 (v5dev, v5turbo) end to end (engines/gpt_sovits/engine.py through mizuoto.host) against the
cuda_graph_accel_v5 branch's own TTS pipeline.

Against tests/parity/data/gpt_sovits_e2e_v5 (scripts/parity/gpt_sovits_e2e_v5_references.py: TTS.run of the branch at
ac846f5, its files read from the code-search index, over RVC-Boss/GPT-SoVITS 48b1a01, under the parity pins, CPU
float32): the tiny files are rebuilt from the set's record (v5dev and v5turbo SoVITS files, the GPT and HF folders of
gpt_sovits_e2e, the v5 vocoder as the gpt_sovits_vocoder set fills the v4 one), loaded with mizuoto.host.load_model and
spoken with mizuoto.host.speak in a pinned subprocess. The `layout` cases shrink v5's chunk constants on both sides
(upstream's V5_* of v5_inference.py, our cfm_v5's) so that a fragment rolls over several chunks at tiny lengths.
Compared first, each case's probe (the first fragment's recorded tokens through the CFM and the vocoder, the noise
seeded); then per case, stage by stage: phones (exact), BERT features, the prompt's tokens (the reference resampled
to 16 kHz with resampy's kaiser_best, as the branch does), each fragment's tokens and the int16 audio (bitwise where
the set's fingerprint and census are this machine's and the probes are bitwise; elsewhere tests/fallback.py).
"""

import json
import sys
from pathlib import Path

import pytest

if __name__ == "__main__":  # run as the pinned script: tests/ (helpers.py) is not on the path yet
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from fallback import Comparison  # noqa: E402
from gpt_sovits_e2e_stages import compare, speak_cases  # noqa: E402
from helpers import parity_module, reference_sets, run_pinned  # noqa: E402

SET = "gpt_sovits_e2e_v5"
DATA = Path(__file__).resolve().parents[1] / "parity" / "data"
RATES = {"v5dev": 48000, "v5turbo": 48000}
# upstream's v5_inference constants -> ours (cfm_v5), for the `layout` cases
CONSTANTS = {"V5_REFERENCE_FRAMES": "REFERENCE_FRAMES", "V5_TOTAL_CHUNK_FRAMES": "TOTAL_CHUNK_FRAMES",
             "V5_MAX_TARGET_CHUNK_FRAMES": "MAX_TARGET_CHUNK_FRAMES"}


def committed() -> Path:
    return reference_sets().SETS[SET].committed


def rebuild(folder: Path, target: Path) -> dict:
    """The set's tiny files under `target`: gpt_sovits_e2e's GPT, HF folders and front-end files, then the v5 files
    and their vocoder."""
    tiny = parity_module("gpt_sovits_e2e_models")
    info = json.loads((folder / "references.json").read_text())
    detector = info["inputs"]["detector"]
    paths = tiny.write_models(target, info["models"], DATA / "gpt_sovits_zh_g2p" / "bert" / "vocab.txt",
                              DATA / "gpt_sovits_zh_g2p" / "g2pw", DATA / detector if detector else None)
    return {**paths, **tiny.write_v5(target, info["models"])}


def ours(folder: Path, out: Path) -> dict:
    from mizuoto.engines.gpt_sovits import cfm_v5

    constants = {ours_name: getattr(cfm_v5, ours_name) for ours_name in CONSTANTS.values()}

    def set_layout(model: str, layout: dict) -> None:  # v5_inference's V5_* chunk constants
        for upstream_name, ours_name in CONSTANTS.items():
            setattr(cfm_v5, ours_name, layout.get(upstream_name, constants[ours_name]))

    try:
        return speak_cases(folder, out, rebuild(folder, out.parent / "models"), RATES, set_layout, kaiser=True)
    finally:
        for ours_name, value in constants.items():
            setattr(cfm_v5, ours_name, value)


@pytest.fixture(scope="module")
def ours_file(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("gpt_sovits_e2e_v5") / "ours.safetensors"
    run_pinned(__file__, committed(), out, timeout=900)
    return out


def test_the_branchs_tts_pipeline_v5(ours_file, record_property):
    """Every stage of every v5dev / v5turbo case, the tokens of each fragment and the audio."""
    comparison = compare(committed(), ours_file, Comparison.for_set(SET))
    record_property("parity_mode", comparison.mode)
    print(f"{SET} parity: {comparison.mode} ({comparison.why})", *comparison.checked, sep="\n  ")
    assert sum("int16 audio" in line for line in comparison.checked) == len(json.loads(
        (committed() / "references.json").read_text())["cases"])


def test_the_set_covers_the_cases():
    info = json.loads((committed() / "references.json").read_text())
    cases = info["cases"]
    assert info["upstream"]["commit"].startswith("48b1a01") and not info["upstream"]["modified"]
    assert {f["commit"][:7] for f in info["branch"].values()} == {"ac846f5", "25937fe"}
    assert {c["model"] for c in cases.values()} == {"v5dev", "v5turbo"}
    turbo = cases["v5turbo_all_zh"]["inputs"]
    assert turbo["sample_steps"] is None and turbo["cfg_rate"] is None  # the version's 4 steps, no guidance
    chunked = [n for n, c in cases.items() if c["layout"]]
    assert {cases[n]["inputs"]["parallel_infer"] for n in chunked} == {True, False}
    assert any(c["inputs"]["speed_factor"] != 1 for c in cases.values())
    # guidance: v5dev's default (1.3) and a rate of the request's
    assert cases["v5dev_steps_8"]["inputs"]["cfg_rate"] is None and cases["v5dev_chunks_cfg"]["inputs"]["cfg_rate"] > 0


def test_the_rebuilt_files_are_the_writers(tmp_path):
    paths = rebuild(committed(), tmp_path)
    info = json.loads((committed() / "references.json").read_text())["models"]
    assert paths["v5dev"].read_bytes()[:2] == b"07" and paths["v5turbo"].read_bytes()[:2] == b"08"
    assert not any(".d_embed." in name for name, _ in info["v5"]["entries"])
    assert (tmp_path / "pretrained_models" / "gsv-v5-pretrained" / "vocoder.pth").is_file()


if __name__ == "__main__":  # the pinned subprocess
    print(json.dumps(ours(Path(sys.argv[1]), Path(sys.argv[2]))))
