"""The Qwen3-TTS engine end to end, through the host (mizuoto.host.load_model / speak).

Parity: every single-utterance case of the qwen3tts reference set valid on this machine
(`reference_dir("qwen3tts")`: tests/parity/data/qwen3tts, or the set written here by upstream; written by
upstream's own wrapper, qwen-tts 0.1.1, under the parity pins) spoken through `host.speak` on the set's tiny
CustomVoice, VoiceDesign and Base folders, compared with the wave the wrapper returned, bit for bit, in
a fresh process pinned the same way (this file run as a script). The text tokenizer is replaced by a
table of the templates' recorded ids (the narrow hook: the loaded state's `tokenizer`), so that
the texts, instructions and transcripts reach the engine as upstream tokenized them; then the same
requests go through the folder's own tokenizer (tokenizer.py), when it is there. Base cases give
the recorded reference audio (24 kHz, and 16 kHz and 48 kHz, which upstream and the engine resample with
librosa's soxr call): the x-vector and reference codes are the engine's own. The
batched cases (several utterances in one call) are not the engine's to speak; their codes are checked
in test_qwen3tts_generate.py.

Streaming: `speak_stream` pieces, concatenated, against the same waves.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch

if __name__ == "__main__":  # run as the pinned script: tests/ (helpers.py) is not on the path yet
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from helpers import reference_dir, run_pinned  # noqa: E402

# the committed set: the tiny models and inputs of the in-process tests; parity reads reference_dir("qwen3tts")
DATA = Path(__file__).resolve().parents[1] / "parity" / "data" / "qwen3tts"


class TableTokenizer:
    """Recorded ids per template text (what the real tokenizer gave upstream)."""

    def __init__(self, table: dict[str, list[int]]):
        self.table = table

    def encode(self, text: str) -> list[int]:
        return list(self.table[text])


def case_inputs(case: dict, tensors: dict) -> tuple[dict, dict]:
    """A single-utterance case as (host.speak's keyword arguments, the tokenizer's table)."""
    from mizuoto.engines.qwen3tts import prompt

    name, request = case["name"], case["request"]
    options = dict(case["generate_options"])
    params = {k: v for k, v in options.items() if k != "non_streaming_mode"}
    params["non_streaming_mode"] = "on" if options["non_streaming_mode"] else "off"
    params["language"] = request.get("language") or "Auto"
    table = {prompt.assistant_text(request["text"]): tensors[f"{name}/input_ids_0"][0].tolist()}
    if case["kind"] == "custom_voice":
        params["speaker"] = listed_speaker(request["speaker"])  # upstream's call names it in lower case
    if request.get("instruct"):
        params["instruct"] = request["instruct"]
        table[prompt.instruct_text(request["instruct"])] = tensors[f"{name}/instruct_ids_0"][0].tolist()
    kwargs = dict(text=request["text"], seed=case["seed"] if case["seed"] is not None else 0, params=params)
    if "ref_audio" in request:
        kwargs["reference"] = (tensors[request["ref_audio"][0]], request["ref_sr"])
        if request.get("x_vector_only_mode"):
            params["x_vector_only"] = True
            kwargs["reference_text"] = "(not read)"  # the host asks for one; an x-vector clone ignores it
        else:
            kwargs["reference_text"] = request["ref_text"]
            table[prompt.reference_text(request["ref_text"])] = tensors[f"{name}/ref_ids_0"][0].tolist()
    return kwargs, table


def listed_speaker(name: str) -> str:
    """The speaker list's spelling of a preset speaker (upstream matches names without regard to case)."""
    from mizuoto.engines.qwen3tts.declaration import SPEAKERS

    (listed,) = [s for s in SPEAKERS if s.lower() == name.lower()]
    return listed


def single_cases(info: dict) -> list[dict]:
    return [case for case in info["cases"] if len(case["languages"]) == 1]


def compare(data: Path) -> dict:
    """Per case: whether host.speak's wave and the streamed pieces equal upstream's wave."""
    from safetensors.torch import load_file

    from mizuoto import host
    from mizuoto.engines.qwen3tts import engine
    from mizuoto.runtime.context import RequestContext

    info = json.loads((data / "references.json").read_text())
    tensors = load_file(str(data / "references.safetensors"))
    out = {}
    for case in single_cases(info):
        loaded = host.load_model("qwen3tts", data / info["kinds"][case["kind"]]["folder"], device="cpu")
        kwargs, table = case_inputs(case, tensors)
        real = loaded.state.tokenizer  # the folder's own, once tokenizer.py is in (None before)
        loaded.state.tokenizer = TableTokenizer(table)
        want = tensors[f"{case['name']}/wav_0"]
        speech = host.speak(loaded, **kwargs)
        real_same = None
        if real is not None:
            loaded.state.tokenizer = real
            real_same = torch.equal(host.speak(loaded, **kwargs).waveform[0], want)
        values = loaded.spec.check_speak_params(kwargs["params"])
        pieces = list(engine.speak_stream(loaded.state, kwargs["text"], RequestContext(kwargs["seed"]), values,
                                          kwargs.get("reference"), kwargs.get("reference_text")))
        streamed = torch.cat(pieces, dim=-1)[0]
        got = speech.waveform[0]
        out[case["name"]] = dict(
            same=tuple(got.shape) == tuple(want.shape) and torch.equal(got, want),
            real_tokenizer_same=real_same,
            rate=speech.sample_rate,
            # the stream cuts a clone's reference at whole frames; upstream's float cut may keep one more sample
            stream_lead=int(want.shape[0] - streamed.shape[0]),
            stream_same=torch.equal(streamed, want[want.shape[0] - streamed.shape[0]:]))
    return out


@pytest.fixture(scope="module")
def references() -> Path:
    return reference_dir("qwen3tts")


@pytest.fixture(scope="module")
def results(references):
    info = json.loads((references / "references.json").read_text())
    assert info["num_threads"] == 1 and info["ATEN_CPU_CAPABILITY"] == "avx2"
    return run_pinned(__file__, references)


def test_every_single_utterance_case_is_compared(results, references):
    info = json.loads((references / "references.json").read_text())
    names = [case["name"] for case in single_cases(info)]
    assert sorted(results) == sorted(names) and len(names) == 15
    assert {kind for kind in (c["kind"] for c in single_cases(info))} == {"custom_voice", "voice_design", "base"}


def test_identical_to_upstream_wrapper(results):
    assert [name for name, r in results.items() if not r["same"]] == []
    assert {r["rate"] for r in results.values()} == {24000}


def test_identical_with_the_folders_own_tokenizer(results):
    """The same requests as plain text through the folder's tokenizer (tokenizer.py) instead of the table."""
    if any(r["real_tokenizer_same"] is None for r in results.values()):
        pytest.skip("engines/qwen3tts/tokenizer.py is not there yet")
    assert [name for name, r in results.items() if not r["real_tokenizer_same"]] == []


def test_streamed_pieces_are_the_wave(results):
    """Pieces concatenate to the whole wave; an in-context clone's may start one sample later (upstream
    cuts the reference's part at int(r / n * samples), one sample short when the float rounds down)."""
    assert all(r["stream_same"] for r in results.values())
    assert all(r["stream_lead"] == 0 for name, r in results.items() if not name.startswith("bs_icl"))
    assert all(r["stream_lead"] in (0, 1) for r in results.values())


# --------------------------------------------------------------------------------------------------
# In this process: requests, errors, dispatch


@pytest.fixture(scope="module")
def models():
    from mizuoto import host

    return {kind: host.load_model("qwen3tts", DATA / kind, device="cpu")
            for kind in ("custom_voice", "voice_design", "base")}


def ids_request(loaded, text_ids=None, **params):
    """host-checked params, then engine.speak_ids on the recorded ids of the first case of that kind."""
    from safetensors.torch import load_file

    from mizuoto.engines.qwen3tts import engine
    from mizuoto.runtime.context import RequestContext

    tensors = load_file(str(DATA / "references.safetensors"))
    text_ids = tensors["cv_en_vivian_s0/input_ids_0"] if text_ids is None else text_ids
    reference = params.pop("reference", None)
    reference_ids = params.pop("reference_ids", None)
    values = loaded.spec.check_speak_params(dict(dict(max_new_tokens=12), **params))
    return engine.speak_ids(loaded.state, text_ids, RequestContext(3), values, reference=reference,
                            reference_ids=reference_ids)


def test_speaker_is_a_list_of_the_released_presets():
    """The widget lists the nine speakers of the released CustomVoice models (their config.json spk_id
    keys, in the model cards' spelling) after "" for VoiceDesign and Base; typed names go in custom_speaker."""
    from mizuoto import engines
    from mizuoto.core.errors import InputError

    spec = engines.get("qwen3tts")
    params = {p.name: p for p in spec.speak_params}
    assert params["speaker"].choices == ("", "Vivian", "Serena", "Uncle_Fu", "Dylan", "Eric", "Ryan", "Aiden",
                                         "Ono_Anna", "Sohee")
    assert params["speaker"].default == "" and params["custom_speaker"].choices is None
    assert [p.name for p in spec.speak_params][:2] == ["speaker", "custom_speaker"]
    with pytest.raises(InputError, match="speaker must be one of"):  # the list's own spelling only
        spec.check_speak_params({"speaker": "vivian"})


def test_unknown_speaker_lists_the_speakers(models):
    from mizuoto.core.errors import InputError

    names = r"\(Eric, Ryan, Vivian\); set speaker to one of them"
    with pytest.raises(InputError, match=r"speaker 'Aiden' is not one of this model's speakers " + names):
        ids_request(models["custom_voice"], speaker="Aiden")  # a preset this (tiny) model lacks
    with pytest.raises(InputError, match=r"speaker 'Nobody' is not one of this model's speakers " + names):
        ids_request(models["custom_voice"], speaker="Vivian", custom_speaker="Nobody")
    with pytest.raises(InputError, match="set speaker to one of Eric, Ryan, Vivian$"):
        ids_request(models["custom_voice"])


def test_custom_speaker_is_matched_without_regard_to_case(models):
    """A typed speaker overrides the list and is matched as upstream matches it: "VIVIAN" is Vivian."""
    listed, _ = ids_request(models["custom_voice"], speaker="Vivian")
    typed, _ = ids_request(models["custom_voice"], speaker="Ryan", custom_speaker=" VIVIAN ")
    assert torch.equal(listed, typed)
    other, _ = ids_request(models["custom_voice"], speaker="Ryan")
    assert not torch.equal(listed, other)


def test_a_fine_tunes_own_speakers_are_named_in_the_error(models):
    """A fine-tune whose speakers the list lacks: the error names them and points at custom_speaker."""
    from dataclasses import replace

    from mizuoto.core.errors import InputError
    from mizuoto.engines.qwen3tts import engine

    state = models["custom_voice"].state
    talker = replace(state.config.talker, spk_id={"vivian": 1040, "my_voice": 1041})
    tuned = replace(state, config=replace(state.config, talker=talker))
    assert engine.speaker_names(tuned.config) == ["Vivian", "my_voice"]
    hint = r"set speaker \(or custom_speaker, for my_voice\) to one of Vivian, my_voice$"
    with pytest.raises(InputError, match=hint):
        engine.build_request(tuned, torch.tensor([[1, 2]]), None, {"speaker": ""})
    engine._check_kind(tuned, {"speaker": "", "custom_speaker": "My_Voice"}, None, None)  # accepted


def test_requests_that_do_not_fit_the_kind(models):
    from mizuoto import host
    from mizuoto.core.errors import InputError

    with pytest.raises(InputError, match="Base model clones a voice: give reference audio"):
        ids_request(models["base"])
    with pytest.raises(InputError, match="only CustomVoice models have"):
        ids_request(models["voice_design"], speaker="Vivian")
    with pytest.raises(InputError, match="leave speaker and custom_speaker empty"):
        ids_request(models["base"], custom_speaker="vivian")
    with pytest.raises(InputError, match="takes no reference audio"):
        ids_request(models["voice_design"], reference=(torch.zeros(4800), 24000))
    with pytest.raises(InputError, match="the text is empty"):
        host.speak(models["custom_voice"], "  ", params=dict(speaker="Vivian"))
    with pytest.raises(InputError, match="non_streaming_mode must be one of auto, on, off"):
        ids_request(models["custom_voice"], speaker="Vivian", non_streaming_mode="yes")
    with pytest.raises(InputError, match="language 'Klingon' is not supported"):
        ids_request(models["custom_voice"], speaker="Vivian", language="Klingon")


def test_clone_needs_a_transcript_unless_x_vector_only(models):
    from safetensors.torch import load_file

    from mizuoto.core.errors import InputError

    reference = (load_file(str(DATA / "references.safetensors"))["audio/ref_a"], 24000)
    with pytest.raises(InputError, match="needs its transcript"):
        ids_request(models["base"], reference=reference)
    wave, rate = ids_request(models["base"], reference=reference, x_vector_only=True)
    assert rate == 24000 and wave.dim() == 2 and wave.dtype == torch.float32 and wave.shape[-1] > 0


def test_all_attention_sites_dispatch(models, monkeypatch):
    """A clone runs the talker, the predictor, the codec decoder and the Mimi encoder, each through its
    own site: the talker once per layer for the prefill and each frame, the predictor once per layer
    for each of its G-1 draws per frame."""
    from safetensors.torch import load_file

    from mizuoto.engines.qwen3tts import codec_transformer, mimi_transformer, predictor, talker

    tensors = load_file(str(DATA / "references.safetensors"))
    calls = {}
    for site in (talker.ATTN, predictor.ATTN, codec_transformer.SITE, mimi_transformer.SITE):
        original = site.reference
        if original is None:
            continue

        def counted(*args, r=original, n=site.name, **kwargs):
            calls[n] = calls.get(n, 0) + 1
            return r(*args, **kwargs)

        monkeypatch.setattr(site, "reference", counted)
    loaded = models["base"]
    wave, _ = ids_request(loaded, tensors["bs_icl_streaming_s21/input_ids_0"],
                          reference=(tensors["audio/ref_a"], 24000),
                          reference_ids=tensors["bs_icl_streaming_s21/ref_ids_0"], max_new_tokens=8)
    frames, config = 7, loaded.state.config.talker  # 8 draws: the last has no frame (no EOS on this seed)
    assert wave.shape[-1] > 0
    assert calls["qwen3tts.talker"] == config.decoder.num_layers * (1 + frames)
    assert calls["qwen3tts.predictor"] == config.predictor.decoder.num_layers * (config.num_code_groups - 1) * frames
    assert calls.get("qwen3tts.codec", 0) > 0


def test_fused_projections_load_option():
    from mizuoto import host

    loaded = host.load_model("qwen3tts", DATA / "voice_design", device="cpu",
                             overrides={"engines.qwen3tts.load_options.fused_projections": True})
    state = loaded.state
    assert loaded.info.fused_projections and state.talker.decoder.fused_projections
    assert state.talker.code_predictor.decoder.fused_projections
    wave, rate = ids_request(loaded, language="English")
    assert rate == 24000 and wave.shape[-1] > 0


def test_small_stream_chunks_arrive_early(models):
    """Chunks of 4 frames: pieces come while frames are drawn, and equal the codec's chunked decode of
    the same codes with those sizes."""
    from safetensors.torch import load_file

    from mizuoto.engines.qwen3tts import engine, generate
    from mizuoto.runtime.context import RequestContext

    loaded = models["voice_design"]
    tensors = load_file(str(DATA / "references.safetensors"))
    ids = tensors["vd_en_s10/input_ids_0"]
    values = loaded.spec.check_speak_params(dict(max_new_tokens=15))
    pieces = list(engine.stream_ids(loaded.state, ids, RequestContext(5), values, chunk_frames=4, left_context=2))
    request = engine.build_request(loaded.state, ids, RequestContext(5), values)
    (codes,) = generate.generate_codes(loaded.state.talker, engine._batch(loaded.state, request), request.settings,
                                       RequestContext(5))
    whole = loaded.state.codec.decode(codes.T[None], 4, 2)
    assert len(pieces) == -(-codes.shape[0] // 4) and torch.equal(torch.cat(pieces, dim=-1), whole)


def test_rebind_shares_the_weights(models):
    from mizuoto.engines.qwen3tts import engine

    state = models["custom_voice"].state
    again = engine.rebind(state, state.options)
    assert again.talker is state.talker and again.handle is state.handle


if __name__ == "__main__":
    torch.set_num_threads(1)
    print(json.dumps(compare(Path(sys.argv[1]))))


def test_compile_decodes_through_the_compiled_codec_window(monkeypatch):
    """compute.compile: every codec window goes through the compiled decoder (a recording stand-in
    for torch.compile here), in whole-clip and streaming decodes; a rebind with compile off goes back
    to the module itself and gives the same samples."""
    import torch
    from helpers import record_compiles

    from mizuoto.engines.qwen3tts import engine as qwen_engine
    from mizuoto.host import load_model

    calls = record_compiles(monkeypatch)
    folder = DATA / "custom_voice"
    compiled = load_model("qwen3tts", folder, device="cpu", overrides={"compute.compile": True})
    groups = compiled.state.config.talker.num_code_groups
    codes = torch.randint(0, 16, (12, groups), generator=torch.Generator().manual_seed(0))
    with torch.inference_mode():
        wave = qwen_engine.decode(compiled.state, codes)
    assert calls == ["CodecDecoder"]
    plain = load_model("qwen3tts", folder, device="cpu")
    assert plain.state.codec is compiled.state.codec and plain.state.codec_window is None
    with torch.inference_mode():
        assert torch.equal(qwen_engine.decode(plain.state, codes), wave)


def test_host_asks_for_no_transcript_when_cloning_from_the_x_vector_alone():
    """x_vector_only leaves the transcript unread: the host neither asks for it nor transcribes."""
    from safetensors.torch import load_file

    from mizuoto.core.errors import InputError
    from mizuoto.host import load_model, speak

    loaded = load_model("qwen3tts", DATA / "base", device="cpu")
    reference = (load_file(str(DATA / "references.safetensors"))["audio/ref_a"], 24000)
    params = {"max_new_tokens": 6, "language": "English"}
    with pytest.raises(InputError, match="needs the reference audio's transcript"):
        speak(loaded, "Hello there.", seed=1, reference=reference, reference_text="", params=params)
    speech = speak(loaded, "Hello there.", seed=1, reference=reference, reference_text="",
                   params=dict(params, x_vector_only=True))
    assert speech.sample_rate == 24000 and speech.waveform.shape[0] == 1
