"""GPT-SoVITS v3 and v4 end to end (engines/gpt_sovits/engine.py through mizuoto.host) against upstream's own TTS
pipeline.

Against tests/parity/data/gpt_sovits_e2e_v3v4 (scripts/parity/gpt_sovits_e2e_v3v4_references.py: TTS.run at
RVC-Boss/GPT-SoVITS 48b1a01 under the parity pins, CPU float32): the tiny files are rebuilt from the set's record (a
whole v3 file with BigVGAN, a v4 LoRA voice over its base with the v4 HiFi-GAN, the vocoders filled as the
gpt_sovits_vocoder set fills them), loaded with mizuoto.host.load_model and spoken with mizuoto.host.speak in a pinned
subprocess. The `layout` cases shrink T_ref / T_chunk on both sides (upstream's vocoder_configs, our LAYOUTS) so that a
fragment takes several CFM chunks at tiny lengths: parallel (one batch, SOLA joins) and rolling (parallel_infer off).
Compared first, each case's probe (the rolling path on upstream's first fragment, from its recorded tokens and prompt,
the CFM's noise seeded: the CFM's and the vocoder's arithmetic with nothing free-running); then per case, stage by
stage: phones (exact), BERT features, the prompt's tokens, each fragment's tokens and the int16 audio (bitwise where
the set's fingerprint is this machine's and the probes are bitwise; elsewhere tests/fallback.py).
"""

import json
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import torch

if __name__ == "__main__":  # run as the pinned script: tests/ (helpers.py) is not on the path yet
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from fallback import Comparison  # noqa: E402
from gpt_sovits_e2e_stages import compare, speak_cases  # noqa: E402
from helpers import parity_module, reference_sets, run_pinned  # noqa: E402

SET = "gpt_sovits_e2e_v3v4"
DATA = Path(__file__).resolve().parents[1] / "parity" / "data"
RATES = {"v3": 24000, "v4": 48000}


def committed() -> Path:
    return reference_sets().SETS[SET].committed


def rebuild(folder: Path, target: Path) -> dict:
    """The set's tiny files under `target`: gpt_sovits_e2e's GPT, HF folders and front-end files, then the v3 / v4
    files and the vocoders."""
    from safetensors.torch import load_file

    tiny = parity_module("gpt_sovits_e2e_models")
    info = json.loads((folder / "references.json").read_text())
    detector = info["inputs"]["detector"]
    paths = tiny.write_models(target, info["models"], DATA / "gpt_sovits_zh_g2p" / "bert" / "vocab.txt",
                              DATA / "gpt_sovits_zh_g2p" / "g2pw", DATA / detector if detector else None)
    refs = load_file(str(DATA / info["inputs"]["vocoders"] / "references.safetensors"))
    filters = {kind: refs[f"filter/{kind}"] for kind in tiny.BIGVGAN_FILTERS}
    return {**paths, **tiny.write_v3v4(target, info["models"], filters)}


def ours(folder: Path, out: Path) -> dict:
    from mizuoto.engines.gpt_sovits import vocoder_synthesis as mel_synthesis

    layouts = dict(mel_synthesis.LAYOUTS)

    def set_layout(model: str, layout: dict) -> None:  # upstream's vocoder_configs T_ref / T_chunk
        mel_synthesis.LAYOUTS[model] = replace(layouts[model], t_ref=layout.get("T_ref", layouts[model].t_ref),
                                               t_chunk=layout.get("T_chunk", layouts[model].t_chunk))

    try:
        return speak_cases(folder, out, rebuild(folder, out.parent / "models"), RATES, set_layout)
    finally:
        mel_synthesis.LAYOUTS.update(layouts)


@pytest.fixture(scope="module")
def ours_file(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("gpt_sovits_e2e_v3v4") / "ours.safetensors"
    run_pinned(__file__, committed(), out, timeout=900)
    return out


def test_upstreams_tts_pipeline_v3_v4(ours_file, record_property):
    """Every stage of every v3 / v4 case, the tokens of each fragment and the audio."""
    comparison = compare(committed(), ours_file, Comparison.for_set(SET))
    record_property("parity_mode", comparison.mode)
    print(f"{SET} parity: {comparison.mode} ({comparison.why})", *comparison.checked, sep="\n  ")
    assert sum("int16 audio" in line for line in comparison.checked) == 7


def test_the_set_covers_the_cases():
    info = json.loads((committed() / "references.json").read_text())
    cases = info["cases"]
    assert info["upstream"]["commit"].startswith("48b1a01") and not info["upstream"]["modified"]
    assert {c["model"] for c in cases.values()} == {"v3", "v4"}
    chunked = [n for n, c in cases.items() if c["layout"]]
    assert {cases[n]["inputs"]["parallel_infer"] for n in chunked} == {True, False}  # batched and rolling chunks
    assert any(c["inputs"]["speed_factor"] != 1 for c in cases.values())
    assert cases["v3_rolling"]["order"] == [1, 0, 2]  # bucketing only with parallel_infer off (and speed 1)
    assert cases["v3_all_zh"]["order"] == [0, 1]  # v3/v4 with parallel_infer: no bucketing
    assert {end for c in cases.values() for end in c["ends"]} == {"eos", "early_stop"}
    assert info["models"]["v3v4"]["v4_lora"]["rank"] == 4


def test_the_rebuilt_files_are_the_writers(tmp_path):
    """The v3 file's tag, the LoRA voice's pairs and its base, the vocoders' folders."""
    import io

    paths = rebuild(committed(), tmp_path)
    info = json.loads((committed() / "references.json").read_text())["models"]["v3v4"]
    assert paths["v3"].read_bytes()[:2] == b"02" and paths["v4"].read_bytes()[:2] == b"04"
    lora = torch.load(io.BytesIO(b"PK" + paths["v4"].read_bytes()[2:]), map_location="cpu", weights_only=True)
    assert lora["lora_rank"] == 4
    assert [[k, list(v.shape)] for k, v in lora["weight"].items()] == info["v4_lora"]["entries"]
    pairs = [k for k in lora["weight"] if k.endswith("lora_B.default.weight")]
    assert len(pairs) == 4 * info["dit"]["depth"] and all(lora["weight"][k].abs().sum() > 0 for k in pairs)
    assets = tmp_path / "pretrained_models"
    assert (assets / "gsv-v4-pretrained" / "s2Gv4.pth").read_bytes()[:2] == b"PK"
    assert (assets / "gsv-v4-pretrained" / "vocoder.pth").is_file()
    assert (assets / "models--nvidia--bigvgan_v2_24khz_100band_256x" / "bigvgan_generator.pt").is_file()


if __name__ == "__main__":  # the pinned subprocess
    print(json.dumps(ours(Path(sys.argv[1]), Path(sys.argv[2]))))
