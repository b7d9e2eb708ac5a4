"""GPT-SoVITS as users run it: the example workflow on the node classes, the same seed giving the same audio (also
after a cancelled request), a cancel between fragments, and the one-line errors of a bad request. On the tiny
models of the gpt_sovits_e2e set (rebuilt by scripts/parity/gpt_sovits_e2e_models.py; that set's test compares the
same engine with upstream's TTS.run)."""

import importlib.util
import json
from pathlib import Path

import pytest
import torch
from helpers import load_pack, parity_module, reference_sets, saved_audio

from mizuoto import host
from mizuoto.audio import files
from mizuoto.core.errors import CheckpointError, InputError
from mizuoto.runtime.context import Cancelled, RequestContext

DATA = Path(__file__).resolve().parents[1] / "parity" / "data"
TEXT = "这个重要的问题很重，银行的行长说。"
PROMPT = "他长得很高，长大了以后还是那么快乐"


@pytest.fixture(scope="module")
def voice(tmp_path_factory):
    """The e2e set's tiny v2 voice in the layout the loader reads, and its reference recording."""
    tiny = parity_module("gpt_sovits_e2e_models")
    folder = reference_sets().SETS["gpt_sovits_e2e"].committed
    info = json.loads((folder / "references.json").read_text())
    root = tmp_path_factory.mktemp("gsv_voice")
    v2 = {k: v for k, v in info["models"].items() if k not in ("sovits_pro", "speaker")}  # the v2 voice alone
    paths = tiny.write_models(root, v2, DATA / "gpt_sovits_zh_g2p" / "bert" / "vocab.txt",
                              DATA / "gpt_sovits_zh_g2p" / "g2pw", DATA / info["inputs"]["detector"],
                              DATA / "gpt_sovits_en_g2p" / "nltk_data")
    return paths, files.read(folder / info["inputs"]["reference"], "reference audio")


@pytest.fixture(scope="module")
def model(voice):
    return host.load_model("gpt_sovits", str(voice[0]["sovits"]), device="cpu")


def say(model, reference, seed=1, ctx=None, **params):
    return host.speak(model, params.pop("text", TEXT), seed=seed, params=params, ctx=ctx, reference=reference,
                      reference_text=params.pop("reference_text", PROMPT))


def test_example_workflow_runs_on_the_node_classes(voice, model):
    """workflows/api/gpt_sovits.json on the node classes, its loader pointed at the tiny voice: SaveAudio gets what
    the library gives for the same request."""
    graph = json.loads((Path(__file__).resolve().parents[2] / "workflows" / "api" / "gpt_sovits.json").read_text())
    loader = next(n for n in graph.values() if n["class_type"] == "MizuotoGPTSoVITSLoader")
    speaker = next(n for n in graph.values() if n["class_type"] == "MizuotoGPTSoVITSSpeak")
    assert speaker["inputs"]["top_k"] == 15 and speaker["inputs"]["text_split_method"] == "cut5"  # api_v2's
    loader["inputs"].update(model=str(voice[0]["sovits"]), device="cpu")
    speaker["inputs"].update(text=TEXT, reference_text=PROMPT)
    wave, rate = voice[1]
    saved = saved_audio(load_pack("mizuoto_pack_gpt_sovits"), graph, lambda name: (wave, rate))
    params = {k: v for k, v in speaker["inputs"].items() if k in {p.name for p in model.spec.speak_params}}
    want = host.speak(model, TEXT, seed=speaker["inputs"]["seed"], params=params, reference=(wave, rate),
                      reference_text=PROMPT).waveform
    assert saved["sample_rate"] == 32000 and torch.equal(saved["waveform"][0], want)


def test_the_same_seed_gives_the_same_audio_also_after_a_cancel(voice, model):
    first = say(model, voice[1], seed=4)
    assert first.report["sample_rate"] == 32000 and first.report["speak"]["text_lang"] == "all_zh"
    seen = []

    def progress(done, total):
        seen.append((done, total))
        if done == 1:
            ctx.cancel()

    ctx = RequestContext(4, progress=progress)
    with pytest.raises(Cancelled):
        say(model, voice[1], seed=4, ctx=ctx)
    assert seen == [(0, 2), (1, 2)]  # stopped before the second fragment
    assert torch.equal(say(model, voice[1], seed=4).waveform, first.waveform)
    assert not torch.equal(say(model, voice[1], seed=5).waveform, first.waveform)


@pytest.mark.skipif(importlib.util.find_spec("pyopenjtalk") is None, reason="pyopenjtalk is not installed")
def test_japanese_text_is_spoken(voice, model):
    # phones against upstream: test_gpt_sovits_ja_g2p.py; whole requests: test_gpt_sovits_e2e.py's all_ja and ja_en
    speech = say(model, voice[1], text="こんにちは。今日はいい天気ですね！", text_lang="all_ja", seed=3)
    assert speech.waveform.shape[-1] > 0 and speech.waveform.abs().max() > 0


def test_bad_requests_are_one_line_errors(voice, model):
    wave, rate = voice[1]
    with pytest.raises(InputError, match="needs the reference audio's transcript"):
        say(model, voice[1], reference_text="")
    assert say(model, voice[1], reference_text="", ref_free=True).waveform.shape[-1] > 0
    with pytest.raises(InputError, match="reference audio is 1.00 s long; give one between 3 and 10"):
        say(model, (wave[:, :rate], rate))
    with pytest.raises(InputError, match="text_lang must be one of"):
        say(model, voice[1], text_lang="fr")
    with pytest.raises(InputError, match="nothing to speak"):
        say(model, voice[1], text="……")
    with pytest.raises(InputError, match="nothing is left to speak after the text's normalisation"):
        say(model, voice[1], text="😀😀😀😀😀。")
    with pytest.raises(InputError, match="speaks in the voice of a reference"):
        host.speak(model, TEXT, seed=1, params={})


def test_a_voice_needs_its_gpt_and_the_pretrained_parts(voice, tmp_path):
    lonely = tmp_path / "voice.pth"
    lonely.write_bytes(voice[0]["sovits"].read_bytes())
    with pytest.raises(CheckpointError, match=r"no GPT weights file \(\.ckpt\) beside voice.pth"):
        host.load_model("gpt_sovits", str(lonely), device="cpu")
    (tmp_path / "voice.ckpt").write_bytes(voice[0]["gpt"].read_bytes())
    with pytest.raises(CheckpointError, match="needs its pretrained parts"):
        host.load_model("gpt_sovits", str(lonely), device="cpu")
    loaded = host.load_model("gpt_sovits", str(lonely), device="cpu",
                             overrides={"engines.gpt_sovits.load_options.assets": str(voice[0]["assets"])})
    assert loaded.info.source.endswith("voice.pth + voice.ckpt")


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_on_cuda_the_graphed_request_gives_the_eager_audio(voice, dtype):
    """A whole request with the GPT's step as CUDA graph segments gives the eager audio bit for bit, captured and
    then replayed (the graphs stay with the loaded model)."""
    eager = host.load_model("gpt_sovits", str(voice[0]["sovits"]), device="cuda", dtype=dtype,
                            overrides={"compute.cuda_graphs": False})
    graphed = host.load_model("gpt_sovits", str(voice[0]["sovits"]), device="cuda", dtype=dtype)
    assert graphed.info.graphs and not eager.info.graphs
    want = say(eager, voice[1], seed=6).waveform
    for _ in range(2):
        assert torch.equal(say(graphed, voice[1], seed=6).waveform, want)


def test_extra_references_average_their_timbre_in(voice, model):
    """api_v2's aux_ref_audio_paths: the same recording again averages to the same timbre (the same audio, bit for
    bit); another recording changes it; more than the node offers, or extras without a reference, are refused."""
    wave, rate = voice[1]
    alone = say(model, voice[1], seed=2).waveform
    assert torch.equal(host.speak(model, TEXT, seed=2, reference=voice[1], reference_text=PROMPT,
                                  extra_references=[voice[1]]).waveform, alone)
    other = (torch.roll(wave, 12345, dims=-1) * 0.5, rate)
    assert not torch.equal(host.speak(model, TEXT, seed=2, reference=voice[1], reference_text=PROMPT,
                                      extra_references=[other]).waveform, alone)
    node = load_pack("mizuoto_pack_gpt_sovits_extra").NODE_CLASS_MAPPINGS["MizuotoGPTSoVITSSpeak"]
    assert [n for n in node.INPUT_TYPES()["optional"] if n.startswith("extra")] == [
        "extra_reference_1", "extra_reference_2", "extra_reference_3"]
    params = {**model.spec.speak_defaults(), "text": TEXT, "seed": 2, "reference_text": PROMPT}
    got = node().generate(model, reference_audio={"waveform": wave[None], "sample_rate": rate},
                          extra_reference_2={"waveform": other[0][None], "sample_rate": rate}, **params)
    assert torch.equal(got["result"][0]["waveform"][0], host.speak(
        model, TEXT, seed=2, reference=voice[1], reference_text=PROMPT, extra_references=[other]).waveform)
    with pytest.raises(InputError, match="takes at most 3 extra reference recordings; got 4"):
        host.speak(model, TEXT, seed=2, reference=voice[1], reference_text=PROMPT, extra_references=[other] * 4)
    with pytest.raises(InputError, match="extra reference recordings go with a reference recording"):
        host.speak(model, TEXT, seed=2, extra_references=[other])
