"""GPT-SoVITS v2, v2ProPlus and v2Pro end to end (engines/gpt_sovits/engine.py through mizuoto.host) against upstream's
own TTS pipeline.

Against tests/parity/data/gpt_sovits_e2e (scripts/parity/gpt_sovits_e2e_references.py: TTS_infer_pack.TTS.TTS.run at
RVC-Boss/GPT-SoVITS 48b1a01, the class api_v2 serves, under the parity pins, CPU float32): the tiny models are
rebuilt from the set's record by scripts/parity/gpt_sovits_e2e_models.py (no weights are stored) in the layout our
loader reads (the SoVITS .pth with its GPT .ckpt beside it, pretrained_models/ with chinese-hubert-base,
chinese-roberta-wwm-ext-large, G2PWModel, fast_langdetect/lid.176.bin and, for v2Pro/v2ProPlus beside the v2 file,
sv/pretrained_eres2netv2w24s4ep4.ckpt: ERes2NetV2 at its released size, a 214 MB file written into the temporary
folder), each model loaded with mizuoto.host.load_model and spoken with mizuoto.host.speak from the stored reference
recording (read with mizuoto.audio.files), in a pinned subprocess. Compared per case, stage by stage so that a
difference says where it starts: each fragment's phones (exact everywhere: strings to integers), each fragment's and
the prompt's BERT features, the prompt's semantic tokens, for v2Pro/v2ProPlus the speaker embedding SoVITS received
(upstream's sv.SV.compute_embedding3 on _get_ref_spec's 16 kHz copy; ours as engine.speak computes it), the semantic
tokens each fragment decoded, and the final int16 audio; first of all, each case's probe (SoVITS' decode of
upstream's first fragment from its recorded tokens and seeded noise: the audio's arithmetic, nothing free-running).
Where the set's fingerprint is this machine's and the probes are bitwise, all of it is bitwise; elsewhere
tests/fallback.py compares the probes within PROBE_TOLERANCE, the BERT features within TOLERANCE (the speaker
embeddings within SPEAKER_TOLERANCE) and reports the free-running tokens and audio (and the prompt's tokens, an argmin
over floats) as not compared.

Upstream's first request with a reference differs from the later ones: TTS.run extracts the reference's prompt only
when its path changes, and CN-HuBERT's encoder (transformers' HubertEncoder) draws torch.rand([]) from the global
generator once per layer, in eval mode too (its LayerDrop test), after set_seed; so that request's T2S samples from a
generator advanced by that many draws. Every request of the engine is such a first request (engine.layerdrop_draws:
all_zh, and pro_all_zh and v2pro_all_zh, the first requests of the v2ProPlus and v2Pro TTS the writer built after the
v2 cases); the cases upstream ran with the reference cached (speed, ref_free, sampling, all_ja and ja_en (Japanese
text, over OpenJTalk, with the Chinese reference), zh_en, all_zh_cached, the
same request as all_zh once cached, and pro_speed) are compared with those draws switched off, so both of upstream's
behaviours are checked. The speaker path draws nothing (Kaldi's fbank with dither 0) and upstream caches only its
16 kHz audio.
"""

import io
import json
import sys
from pathlib import Path

import pytest
import torch

if __name__ == "__main__":  # run as the pinned script: tests/ (helpers.py) is not on the path yet
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from fallback import Comparison  # noqa: E402
from helpers import parity_module, reference_sets, run_pinned  # noqa: E402

SET = "gpt_sovits_e2e"
TOLERANCE = 2.5e-5  # BERT features in the fallback: 10x the measured spread (spread.json: at most 2.5e-6)
PROBE_TOLERANCE = 5e-4  # the probe's audio (up to 1): 9x the measured spread (spread.json: at most 5.4e-5, v2Pro)
SPEAKER_TOLERANCE = 1.5e-2  # the released-size ERes2NetV2 (values up to 94): 10x the spread (spread.json: 1.45e-3)
DATA = Path(__file__).resolve().parents[1] / "parity" / "data"


def committed() -> Path:
    return reference_sets().SETS[SET].committed


def rebuild(folder: Path, target: Path) -> dict:
    """The set's tiny files, rebuilt under `target`."""
    tiny = parity_module("gpt_sovits_e2e_models")
    info = json.loads((folder / "references.json").read_text())
    detector = info["inputs"]["detector"]
    english = DATA / "gpt_sovits_en_g2p" / "nltk_data" if info["inputs"]["english"] else None
    return tiny.write_models(target, info["models"], DATA / "gpt_sovits_zh_g2p" / "bert" / "vocab.txt",
                             DATA / "gpt_sovits_zh_g2p" / "g2pw", DATA / detector if detector else None, english)


def ours(folder: Path, out: Path) -> dict:
    """Our engine on the set's cases: what its front end makes of each text and transcript, the prompt's tokens,
    the tokens each T2S call returned (in call order), the audio host.speak returns and the probe, saved to
    `out`."""
    from safetensors.torch import load_file, save_file

    from mizuoto.audio import files
    from mizuoto.engines.gpt_sovits import engine
    from mizuoto.engines.gpt_sovits import reference as ref
    from mizuoto.host import load_model

    info = json.loads((folder / "references.json").read_text())
    theirs = load_file(str(folder / "references.safetensors"))
    paths = rebuild(folder, out.parent / "models")
    wave, rate = files.read(folder / info["inputs"]["reference"], "reference audio")
    results = {}
    calls, speakers = [], []
    models = {}

    def load(model: str):
        """The case's model (v2, v2ProPlus, v2Pro), loaded once, its T2S calls recorded."""
        if model not in models:
            loaded = load_model("gpt_sovits", str(paths["sovits" if model == "v2" else model]), device="cpu")
            generate = loaded.state.t2s.generate

            def recorded(*args, **kwargs):
                result = generate(*args, **kwargs)
                calls.append(result.tokens.clone())
                return result

            loaded.state.t2s.generate = recorded
            models[model] = loaded
        return models[model]

    embed = engine.speaker_embedding

    def embedding(*args, **kwargs):
        result = embed(*args, **kwargs)
        speakers.append(result.clone())
        return result

    engine.speaker_embedding = embedding
    try:
        for name, case in info["cases"].items():
            inputs = case["inputs"]
            loaded = load(case.get("model", "v2"))
            state = loaded.state
            front = state.front_end()
            with torch.inference_mode():
                fragments = front.fragments(inputs["text"], inputs["text_lang"], inputs["text_split_method"])
                for i, fragment in enumerate(fragments):
                    results[f"{name}/fragment{i}/phones"] = torch.tensor(fragment.phones, dtype=torch.long)
                    results[f"{name}/fragment{i}/bert"] = fragment.bert.float().contiguous()
                if inputs["prompt_text"]:
                    phones, bert, _ = front.prompt(inputs["prompt_text"], inputs["prompt_lang"])
                    results[f"{name}/prompt/phones"] = torch.tensor(phones, dtype=torch.long)
                    results[f"{name}/prompt/bert"] = bert.float().contiguous()
                results[f"{name}/prompt/semantic"] = ref.prompt_tokens(
                    wave, rate, state.sampling_rate, state.hubert, state.sovits).long()
            calls.clear()
            speakers.clear()
            speech = speak_as_upstream(loaded, inputs, (wave, rate), first_request=case["reference_extracted"])
            assert speech.sample_rate == 32000
            for k, tokens in enumerate(calls):
                results[f"{name}/call{k}/tokens"] = tokens.long()
            assert len(speakers) == (case.get("model", "v2") != "v2"), f"{name}: {len(speakers)} speaker embeddings"
            if speakers:
                results[f"{name}/speaker"] = speakers[0].float().contiguous()
            results[f"{name}/audio"] = (speech.waveform[0] * 32768).round().to(torch.int16)
            results[f"{name}/probe"] = probe(state, (wave, rate), theirs[f"{name}/fragment0/tokens"],
                                             theirs[f"{name}/fragment0/phones"])
    finally:
        engine.speaker_embedding = embed
        for loaded in models.values():
            del loaded.state.t2s.generate
    save_file({k: v.contiguous() for k, v in results.items()}, str(out))
    return {"saved": str(out)}


def probe(state, reference: tuple, tokens: torch.Tensor, phones: torch.Tensor) -> torch.Tensor:
    """The writer's probe: SoVITS' decode of upstream's first fragment (its recorded tokens) with the reference's
    timbre, noise from PROBE_SEED."""
    from mizuoto.engines.gpt_sovits import engine

    seed = parity_module("gpt_sovits_e2e_models").PROBE_SEED
    with torch.inference_mode():
        refers, sv = engine.timbres(state, [reference])
        audio = state.sovits.decode(tokens.view(1, 1, -1), phones.view(1, -1), refers,
                                    torch.Generator().manual_seed(seed), speed=1.0, sv=sv)
    return audio[0, 0].float().contiguous()


def speak_as_upstream(loaded, inputs: dict, reference: tuple, first_request: bool):
    """host.speak on api_v2's request; for a request upstream ran with its reference already extracted, without
    CN-HuBERT's LayerDrop draws (the engine's default is the first request's)."""
    from mizuoto.engines.gpt_sovits import engine
    from mizuoto.host import speak

    tiny = parity_module("gpt_sovits_e2e_models")

    def run():
        return speak(loaded, inputs["text"], seed=inputs["seed"], params=tiny.speak_params(inputs), reference=reference,
                     reference_text=inputs["prompt_text"] or None)

    if first_request:
        return run()
    draws = engine.layerdrop_draws
    engine.layerdrop_draws = lambda hubert, generator: None
    try:
        return run()
    finally:
        engine.layerdrop_draws = draws


def compare(folder: Path, ours_file: Path, comparison: Comparison) -> Comparison:
    """Every case's stages, each fragment's tokens and the audio."""
    from safetensors.torch import load_file

    theirs, mine = load_file(str(folder / "references.safetensors")), load_file(str(ours_file))
    info = json.loads((folder / "references.json").read_text())
    for name in info["cases"]:  # before anything free-running: a probe that moved turns exact mode off
        comparison.probe(f"{name}: SoVITS decode of upstream's first fragment (probe)", mine[f"{name}/probe"],
                         theirs[f"{name}/probe"], PROBE_TOLERANCE)
    for name, case in info["cases"].items():
        count = len(case["normalized"])
        got = sorted(k for k in mine if k.startswith(f"{name}/fragment") and k.endswith("/phones"))
        assert len(got) == count, f"{name}: {len(got)} fragments, upstream {count} ({case['normalized']})"
        for i in range(count):
            key = f"{name}/fragment{i}"
            assert torch.equal(mine[f"{key}/phones"], theirs[f"{key}/phones"]), \
                f"{key}: phones {mine[f'{key}/phones'].tolist()} vs upstream's {theirs[f'{key}/phones'].tolist()}"
            comparison.deterministic(f"{key}: BERT features", mine[f"{key}/bert"], theirs[f"{key}/bert"], TOLERANCE)
        if case["inputs"]["prompt_text"]:
            assert torch.equal(mine[f"{name}/prompt/phones"], theirs[f"{name}/prompt/phones"]), f"{name}: prompt phones"
            comparison.deterministic(f"{name}: prompt BERT features", mine[f"{name}/prompt/bert"],
                                     theirs[f"{name}/prompt/bert"], TOLERANCE)
        comparison.free_running(f"{name}: prompt semantic tokens", mine[f"{name}/prompt/semantic"],
                                theirs[f"{name}/prompt/semantic"])
        if case.get("model", "v2") != "v2":
            comparison.deterministic(f"{name}: speaker embedding ({case['model']})", mine[f"{name}/speaker"],
                                     theirs[f"{name}/speaker"], SPEAKER_TOLERANCE)
        for k, i in enumerate(case["order"]):
            comparison.free_running(f"{name}: fragment {i}'s tokens (T2S call {k})", mine[f"{name}/call{k}/tokens"],
                                    theirs[f"{name}/fragment{i}/tokens"])
        comparison.free_running(f"{name}: int16 audio", mine[f"{name}/audio"], theirs[f"{name}/audio"])
    return comparison


@pytest.fixture(scope="module")
def ours_file(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("gpt_sovits_e2e") / "ours.safetensors"
    run_pinned(__file__, committed(), out, timeout=900)
    return out


def test_upstreams_tts_pipeline(ours_file, record_property):
    """Every stage of every case, the tokens of each fragment and the audio."""
    comparison = compare(committed(), ours_file, Comparison.for_set(SET))
    record_property("parity_mode", comparison.mode)
    print(f"{SET} parity: {comparison.mode} ({comparison.why})", *comparison.checked, sep="\n  ")
    assert len(comparison.checked) >= 20
    assert sum("speaker embedding" in line for line in comparison.checked) == 3


def test_the_engine_is_upstreams_first_request_with_a_reference():
    """all_zh and all_zh_cached are one request before and after upstream cached its reference: only the draws
    differ, and a plain host.speak (compared in test_upstreams_tts_pipeline) gives the first."""
    cases = json.loads((committed() / "references.json").read_text())["cases"]
    assert cases["all_zh"]["reference_extracted"] and not cases["all_zh_cached"]["reference_extracted"]
    assert cases["all_zh"]["hubert_draws"] == 2  # the tiny CN-HuBERT's two layers
    assert cases["all_zh"]["inputs"] == cases["all_zh_cached"]["inputs"]
    # each v2Pro model's TTS: a fresh prompt cache, so its first case is a first request and the next one cached
    assert cases["pro_all_zh"]["reference_extracted"] and cases["pro_all_zh"]["hubert_draws"] == 2
    assert cases["v2pro_all_zh"]["reference_extracted"] and cases["v2pro_all_zh"]["hubert_draws"] == 2
    assert not cases["pro_speed"]["reference_extracted"]


def test_the_set_covers_the_cases():
    info = json.loads((committed() / "references.json").read_text())
    cases = info["cases"]
    assert info["upstream"]["commit"].startswith("48b1a01") and not info["upstream"]["modified"]
    assert {"all_zh", "speed", "ref_free", "sampling", "all_ja", "ja_en"} <= set(cases)
    assert cases["all_ja"]["inputs"]["text_lang"] == "all_ja" and cases["ja_en"]["inputs"]["text_lang"] == "ja"
    # upstream's japanese.py read its user dictionary: the commit's own file (it ignores a missing one)
    assert info["inputs"]["japanese_userdict"]["blob"] == "2be580b461185ce18c9000d9ec6c8032623e17fd"
    pro = {name: c["model"] for name, c in cases.items() if "model" in c}
    assert pro == {"pro_all_zh": "v2ProPlus", "pro_speed": "v2ProPlus", "v2pro_all_zh": "v2Pro"}, pro
    # upstream embeds the reference once per batch (batch_size 1: once per fragment), the same each time
    assert all(cases[n]["speaker_calls"] == len(cases[n]["normalized"]) for n in pro)
    assert cases["all_zh"]["order"] == [1, 0] and cases["speed"]["order"] == [0, 1]  # bucketing only at speed 1
    assert all(len(c["normalized"]) >= 2 for c in cases.values())
    ends = {end for c in cases.values() for end in c["ends"]}
    assert ends == {"eos", "early_stop"}, ends
    if "spread" in info:
        bert = [v for k, v in info["spread"]["max"].items() if k.endswith("/bert")]
        assert max(bert) * 5 < TOLERANCE
        speaker = [v for k, v in info["spread"]["max"].items() if k.endswith("/speaker")]
        assert len(speaker) == 3 and max(speaker) * 5 < SPEAKER_TOLERANCE


def test_the_rebuilt_files_are_the_writers(tmp_path):
    """The rebuilt weights are what the writer ran: the record's names and shapes, the GPT's EOS lean."""
    paths = rebuild(committed(), tmp_path)
    info = json.loads((committed() / "references.json").read_text())["models"]
    gpt = torch.load(str(paths["gpt"]), map_location="cpu", weights_only=True)
    assert [[k, list(v.shape)] for k, v in gpt["weight"].items()] == info["gpt"]["entries"]
    assert gpt["config"]["model"]["phoneme_vocab_size"] == 732 and gpt["config"]["model"]["EOS"] == 1024
    from safetensors.torch import load_file

    hubert = load_file(str(paths["hubert"] / "model.safetensors"))
    assert sorted(hubert) == sorted(name for name, _ in info["hubert"]["entries"])
    assert (paths["assets"] / "G2PWModel" / "g2pW.onnx").is_file()
    assert paths["sovits"].read_bytes()[:2] == b"PK"
    for name, tag in (("v2ProPlus", b"06"), ("v2Pro", b"05")):  # my_save2's version tags over the zip magic
        assert paths[name].read_bytes()[:2] == tag
        pro = torch.load(io.BytesIO(b"PK" + paths[name].read_bytes()[2:]), map_location="cpu", weights_only=True)
        expected = [[k, shape] for k, shape in info["sovits_pro"][name]["entries"] if "enc_q" not in k]
        assert [[k, list(v.shape)] for k, v in pro["weight"].items()] == expected
        assert pro["weight"]["sv_emb.weight"].shape == (1024, 20480)
    speaker = torch.load(str(paths["speaker"]), map_location="cpu", weights_only=True)
    assert [[k, list(v.shape)] for k, v in speaker.items()] == info["speaker"]["entries"]
    assert sum(v.numel() for v in speaker.values()) > 53_000_000  # the released size


if __name__ == "__main__":  # the pinned subprocess
    print(json.dumps(ours(Path(sys.argv[1]), Path(sys.argv[2]))))
