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
from gpt_sovits_e2e_stages import RecordingModels, compare  # noqa: E402
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
    from safetensors.torch import load_file, save_file

    from mizuoto.audio import files
    from mizuoto.engines.gpt_sovits import engine
    from mizuoto.engines.gpt_sovits import reference as ref
    from mizuoto.engines.gpt_sovits import vocoder_synthesis as mel_synthesis
    from mizuoto.host import speak

    tiny = parity_module("gpt_sovits_e2e_models")
    info = json.loads((folder / "references.json").read_text())
    theirs = load_file(str(folder / "references.safetensors"))
    paths = rebuild(folder, out.parent / "models")
    wave, rate = files.read(folder / info["inputs"]["reference"], "reference audio")
    results, load = {}, RecordingModels(paths)
    calls = load.calls
    layouts = dict(mel_synthesis.LAYOUTS)

    draws = engine.layerdrop_draws
    try:
        for name, case in info["cases"].items():
            inputs, model = case["inputs"], case["model"]
            loaded = load(model)
            state = loaded.state
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
                    wave, rate, state.sampling_rate, state.hubert, state.sovits).long()
            calls.clear()
            layout = case["layout"] or {}
            mel_synthesis.LAYOUTS[model] = replace(layouts[model], t_ref=layout.get("T_ref", layouts[model].t_ref),
                                                   t_chunk=layout.get("T_chunk", layouts[model].t_chunk))
            # a request upstream ran with its reference cached: without CN-HuBERT's LayerDrop draws
            engine.layerdrop_draws = draws if case["reference_extracted"] else (lambda hubert, generator: None)
            speech = speak(loaded, inputs["text"], seed=inputs["seed"], params=tiny.speak_params(inputs),
                           reference=(wave, rate), reference_text=inputs["prompt_text"])
            assert speech.sample_rate == RATES[model], speech.sample_rate
            for k, tokens in enumerate(calls):
                results[f"{name}/call{k}/tokens"] = tokens.long()
            results[f"{name}/audio"] = (speech.waveform[0] * 32768).round().to(torch.int16)
            results[f"{name}/probe"] = probe(state, (wave, rate), inputs, theirs, name)
    finally:
        engine.layerdrop_draws = draws
        mel_synthesis.LAYOUTS.update(layouts)
        load.release()
    save_file({k: v.contiguous() for k, v in results.items()}, str(out))
    return {"saved": str(out)}


def probe(state, reference: tuple, inputs: dict, theirs: dict, name: str) -> torch.Tensor:
    """The writer's probe: the rolling path (using_vocoder_synthesis) of upstream's first fragment, from its recorded
    tokens and prompt, at speed 1 with the CFM's noise from PROBE_SEED, at the case's layout (LAYOUTS is still
    patched)."""
    from mizuoto.engines.gpt_sovits import engine
    from mizuoto.engines.gpt_sovits.synthesize import Prompt

    seed = parity_module("gpt_sovits_e2e_models").PROBE_SEED
    prompt = Prompt(tuple(theirs[f"{name}/prompt/phones"].tolist()), theirs[f"{name}/prompt/bert"],
                    theirs[f"{name}/prompt/semantic"])
    params = {"sample_steps": inputs["sample_steps"], "speed_factor": 1.0, "parallel_infer": False}
    with torch.inference_mode():
        refers, _ = engine.timbres(state, [reference])
        decode = engine.mel_decoder(state, *reference, prompt, refers[0], params, torch.Generator().manual_seed(seed),
                                    None, None)
        tokens, phones = theirs[f"{name}/fragment0/tokens"], theirs[f"{name}/fragment0/phones"]
        return decode(tokens.view(1, 1, -1), phones.view(1, -1)).float().contiguous()


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
