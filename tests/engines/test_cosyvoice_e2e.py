"""CosyVoice 2 and CosyVoice 3 end to end through the engine (engines/cosyvoice/engine.py), against upstream's own
CosyVoice2 / CosyVoice3 classes on the same tiny release folder (tests/parity/data/cosyvoice_e2e, written by
scripts/parity/cosyvoice_e2e_references.py at FunAudioLLM/CosyVoice ace7c47).

The folder is rebuilt here exactly as the writer built it (scripts/parity/cosyvoice_release.py from the committed
sets, the set's own campplus.onnx, and spk2info.pt with the speakers the writer saved) and loaded by `engine.load`.
Per case (zero-shot in Chinese and English, a long text split into fragments, cross-lingual with fine-grained tags,
instruct2, CosyVoice 3's <|endofprompt|> prompts, a speaker saved by add_zero_shot_spk, a trained speaker):

- the text: our normalised fragments and prompt text, tokenised, are among upstream's tokeniser calls with the same
  ids (strings and integers: exact on any machine);
- the recording's three reads: the 24 kHz mel (deterministic), the S3 speech tokens (ours against ONNX Runtime's:
  identical), the CAM++ embedding (ours against ONNX Runtime's: within TOLERANCE_EMBEDDING, the measured
  ORT-vs-torch spread of nn/campplus_onnx times a margin);
- then, with upstream's embedding fed in (as the issue asks: everything after an ONNX stage from the same input),
  every fragment's speech tokens and waveform after RequestContext(seed): identical where the set's fingerprint is
  this machine's, not compared elsewhere (free running, tests/fallback.py).
"""

import json
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import torch

if __name__ == "__main__":  # run as the pinned script: tests/ (helpers.py) is not on the path yet
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import cosyvoice_parts  # noqa: E402
from fallback import Comparison  # noqa: E402
from helpers import reference_sets, run_pinned  # noqa: E402

from mizuoto.core.errors import InputError  # noqa: E402
from mizuoto.core.options import RuntimeOptions  # noqa: E402
from mizuoto.engines.cosyvoice import engine, reference  # noqa: E402
from mizuoto.engines.cosyvoice.declaration import ENGINE  # noqa: E402
from mizuoto.nn.s3_tokenizer import speech_tokens  # noqa: E402
from mizuoto.runtime.context import RequestContext  # noqa: E402

SET = "cosyvoice_e2e"
TOLERANCE_MEL = 5e-3  # the 24 kHz log-mel: near-silent bands sit on log(1e-5); measured spread 8.2e-4
TOLERANCE_EMBEDDING = 5e-4  # CAM++ vs ONNX Runtime, and the pins lifted: measured spread 3.6e-5
DEFAULTS = ENGINE.speak_defaults()
OPTIONS = RuntimeOptions("cosyvoice", "auto", False, True, (), {})
MODES = {"zero_shot": "zero_shot", "cross_lingual": "cross_lingual", "instruct2": "instruct", "sft": "zero_shot"}


def folder() -> Path:
    return reference_sets().SETS[SET].committed


def committed() -> tuple[dict, dict]:
    return cosyvoice_parts.e2e_committed(folder())


def params_of(case: dict) -> dict:
    args = case["args"]
    params = {"mode": MODES[case["method"]], "speed": case["speed"], "speaker": args.get("speaker", "")}
    if case["method"] == "instruct2":
        params["instruct_text"] = args["instruct_text"]
    return params


def ours(root: Path, out: Path) -> dict:
    """The pinned run: every case's reads, fragments' ids, tokens and waves."""
    from safetensors.torch import save_file

    info, refs = cosyvoice_parts.e2e_committed(root)
    loaded = {v: engine.load(cosyvoice_parts.e2e_release(root, out.parent, v), torch.device("cpu"), torch.float32,
                             OPTIONS) for v in ("cv2", "cv3")}
    results, texts = {}, {}
    for name, case in info["cases"].items():
        voice, args = loaded[case["version"]], case["args"]
        params = {**DEFAULTS, **params_of(case)}
        ref = cosyvoice_parts.e2e_recording(refs, info, args["recording"]) if "recording" in args else None
        request = engine.build_request(voice, args["tts_text"], params, ref, args.get("prompt_text"))
        texts[name] = {"texts": request.texts, "prompt_text": request.prompt_text}
        if ref is not None:
            wave, rate = ref
            results[f"{name}/feat"] = reference.speech_feat(reference.load_wav(wave, rate, 24000), voice.version)
            results[f"{name}/speech_tokens"] = speech_tokens(voice.speech_tokenizer,
                                                             reference.load_wav(wave, rate, 16000)).to(torch.int32)
            results[f"{name}/embedding"] = request.embedding
            request = replace(request, embedding=refs[f"{name}/embedding"])  # upstream's (ONNX Runtime's)
        ctx = RequestContext(case["seed"])
        for i, (tokens, wave) in enumerate(engine.fragments(voice, request, ctx, case["speed"])):
            results[f"{name}/{i}/tokens"] = torch.tensor(tokens, dtype=torch.int64)
            results[f"{name}/{i}/wave"] = wave
    save_file({k: v.contiguous() for k, v in results.items()}, str(out))
    return {"texts": texts}


def test_upstreams_modes_end_to_end(tmp_path, record_property):
    from safetensors.torch import load_file

    out = tmp_path / "ours.safetensors"
    texts = run_pinned(__file__, folder(), out)["texts"]
    comparison = Comparison.for_set(SET)
    info, theirs = committed()
    mine = load_file(str(out))
    for name, case in info["cases"].items():
        calls = [(text, ids) for text, ids in case["texts"]]
        called_ids = [ids for _, ids in calls]
        assert all(ids in called_ids for ids in texts[name]["texts"]), f"{name}: text ids differ from upstream's"
        assert len(texts[name]["texts"]) == case["fragments"], f"{name}: {case['fragments']} fragments upstream"
        speaker = case["args"].get("speaker")
        if speaker == "saved":  # tokenised by add_zero_shot_spk, before this case
            assert texts[name]["prompt_text"] == theirs["speaker/saved/prompt_text"].reshape(-1).tolist()
        elif texts[name]["prompt_text"]:
            assert texts[name]["prompt_text"] in called_ids, f"{name}: prompt text ids differ from upstream's"
        if f"{name}/feat" in theirs:
            comparison.deterministic(f"{name} prompt mel", mine[f"{name}/feat"], theirs[f"{name}/feat"],
                                     TOLERANCE_MEL)
            assert torch.equal(mine[f"{name}/speech_tokens"], theirs[f"{name}/speech_tokens"]), \
                f"{name}: our S3 tokens differ from ONNX Runtime's"
            worst = float((mine[f"{name}/embedding"] - theirs[f"{name}/embedding"]).abs().max())
            assert worst <= TOLERANCE_EMBEDDING, f"{name}: CAM++ {worst:.2e} from ONNX Runtime's"
            comparison.checked.append(f"{name} CAM++ embedding vs ONNX Runtime: max |diff| {worst:.2e}")
        for i in range(case["fragments"]):
            comparison.free_running(f"{name} fragment {i} speech tokens", mine[f"{name}/{i}/tokens"],
                                    theirs[f"{name}/{i}/tokens"])
            comparison.free_running(f"{name} fragment {i} waveform", mine[f"{name}/{i}/wave"],
                                    theirs[f"{name}/{i}/wave"])
    record_property("parity_mode", comparison.mode)
    print(f"{SET} parity: {comparison.mode} ({comparison.why})", *comparison.checked, sep="\n  ")


def test_the_set_covers_every_mode_of_both_versions():
    info, refs = committed()
    assert info["upstream"]["commit"].startswith("ace7c47") and not info["upstream"]["modified"]
    cases = info["cases"]
    for version, methods in (("cv2", {"zero_shot", "cross_lingual", "instruct2", "sft"}),
                             ("cv3", {"zero_shot", "cross_lingual", "instruct2"})):
        assert methods <= {c["method"] for c in cases.values() if c["version"] == version}
    assert any(c["fragments"] > 1 for c in cases.values())  # split_paragraph's fragments
    assert any("speaker" in c["args"] and c["method"] == "zero_shot" for c in cases.values())
    assert {info["recordings"][c["args"]["recording"]][0] for c in cases.values() if "recording" in c["args"]} \
        == {16000, 24000, 44100}
    assert info["text_frontend"] == ""  # upstream's own no-normaliser path (wetext's FSTs are not reachable)
    for key, wave in refs.items():
        if key.endswith("/wave"):
            assert wave.abs().max() > 1e-3, f"{key} is silence"
    spread = info["spread"]["max"]
    assert max(v for k, v in spread.items() if k.endswith("/feat")) * 5 < TOLERANCE_MEL
    assert max(v for k, v in spread.items() if k.endswith("/embedding")) * 5 < TOLERANCE_EMBEDDING


@pytest.fixture(scope="module")
def voices(tmp_path_factory):
    out = tmp_path_factory.mktemp("cosyvoice_e2e")
    return {v: engine.load(cosyvoice_parts.e2e_release(folder(), out, v), torch.device("cpu"), torch.float32, OPTIONS)
            for v in ("cv2", "cv3")}


def test_what_a_request_refuses_is_one_line(voices):
    info, refs = committed()
    ref = cosyvoice_parts.e2e_recording(refs, info, "a")
    defaults = dict(DEFAULTS)
    with pytest.raises(InputError, match="text is empty"):
        engine.build_request(voices["cv2"], "  ", defaults, ref, "hi")
    with pytest.raises(InputError, match="connect a reference recording, or name a saved speaker"):
        engine.build_request(voices["cv2"], "Hello.", defaults)
    with pytest.raises(InputError, match="needs the reference's transcript"):
        engine.build_request(voices["cv2"], "Hello.", defaults, ref, "")
    with pytest.raises(InputError, match="either a reference recording or a saved speaker"):
        engine.build_request(voices["cv2"], "Hello.", {**defaults, "speaker": "saved"}, ref, "hi")
    with pytest.raises(InputError, match="not in the model's spk2info.pt; its speakers: saved, trained"):
        engine.build_request(voices["cv2"], "Hello.", {**defaults, "speaker": "nobody"})
    with pytest.raises(InputError, match="trained speaker"):
        engine.build_request(voices["cv2"], "Hello.", {**defaults, "speaker": "trained", "mode": "instruct",
                                                       "instruct_text": "slowly"})
    with pytest.raises(InputError, match="needs instruct_text"):
        engine.build_request(voices["cv3"], "Hello.", {**defaults, "mode": "instruct"}, ref)
    with pytest.raises(InputError, match="16000 Hz or more"):
        engine.build_request(voices["cv3"], "Hello.", {**defaults, "mode": "cross_lingual"},
                             (torch.zeros(8000), 8000))
    with pytest.raises(InputError, match="at most 30 s"):
        engine.build_request(voices["cv3"], "Hello.", {**defaults, "mode": "cross_lingual"},
                             (torch.zeros(16000 * 31), 16000))


def test_cosyvoice_3_prompts_get_the_system_prompt_and_end_of_prompt(voices):
    info, refs = committed()
    ref = cosyvoice_parts.e2e_recording(refs, info, "a")
    voice = voices["cv3"]
    defaults = dict(DEFAULTS)
    tokenizer = voice.tokenizer
    request = engine.build_request(voice, "Hello.", defaults, ref, "The weather is nice.")
    assert request.prompt_text == tokenizer.encode("You are a helpful assistant.<|endofprompt|>The weather is nice.")
    request = engine.build_request(voice, "Hello.", {**defaults, "mode": "cross_lingual"}, ref)
    assert request.texts == [tokenizer.encode("You are a helpful assistant.<|endofprompt|>Hello.")]
    assert request.prompt_text == [] and request.llm_prompt_tokens.shape[1] == 0
    request = engine.build_request(voice, "Hello.", {**defaults, "mode": "instruct", "instruct_text": "Speak slowly."},
                                   ref)
    assert request.prompt_text == tokenizer.encode("You are a helpful assistant. Speak slowly.<|endofprompt|>")
    cv2 = engine.build_request(voices["cv2"], "Hello.", {**defaults, "mode": "instruct", "instruct_text": "慢一点"},
                               ref)
    assert cv2.prompt_text == voices["cv2"].tokenizer.encode("慢一点<|endofprompt|>")


def test_speak_joins_the_fragments_and_a_seed_repeats(voices):
    info, refs = committed()
    ref = cosyvoice_parts.e2e_recording(refs, info, "b")
    params = {**DEFAULTS, "mode": "cross_lingual"}
    text = info["cases"]["cv2/zero_shot_long"]["args"]["tts_text"]
    first, rate = engine.speak(voices["cv2"], text, RequestContext(5), params, ref)
    again, _ = engine.speak(voices["cv2"], text, RequestContext(5), params, ref)
    assert rate == 24000 and first.shape[0] == 1 and torch.equal(first, again)
    request = engine.build_request(voices["cv2"], text, params, ref)
    assert len(request.texts) > 1
    pieces = [w for _, w in engine.fragments(voices["cv2"], request, RequestContext(5))]
    assert torch.equal(torch.cat(pieces, dim=1), first)


def test_every_report_says_which_text_normaliser_ran(tmp_path, monkeypatch):
    from mizuoto.engines.cosyvoice import text
    from mizuoto.host import load_model, speak

    info, refs = committed()
    release = cosyvoice_parts.e2e_release(folder(), tmp_path, "cv2")
    wave, rate = cosyvoice_parts.e2e_recording(refs, info, "a")
    for frontend, said in ((text.NO_FRONTEND, "upstream's rules without wetext (wetext is not installed)"),
                           (text.TextFrontend("wetext", zh=None, en=None), "wetext")):
        monkeypatch.setattr(engine, "text_frontend", lambda frontend=frontend: frontend)
        assert engine.load(release, torch.device("cpu"), torch.float32, OPTIONS).details == {"text_normaliser": said}
    monkeypatch.undo()
    loaded = load_model("cosyvoice", release)  # the process's own normaliser, in the host's report
    report = speak(loaded, "Hello.", seed=1, params={"mode": "cross_lingual"}, reference=(wave[None], rate)).report
    assert report["details"] == {"text_normaliser": engine.NORMALISERS[text.text_frontend().name]}


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bfloat16", "float16"])
def test_half_precisions_speak_both_versions(tmp_path, dtype):
    """The loader's lower precisions (upstream's fp16 runs the LM and the flow in half): the reference's float32
    embedding meets the half flow, RAS sums its nucleus in the scores' dtype; HiFT stays float32."""
    info, refs = committed()
    ref = cosyvoice_parts.e2e_recording(refs, info, "a")
    for version in ("cv2", "cv3"):
        voice = engine.load(cosyvoice_parts.e2e_release(folder(), tmp_path, version), torch.device("cpu"), dtype,
                            OPTIONS)
        assert next(voice.model.lm.parameters()).dtype == dtype and next(voice.model.hift.parameters()).dtype == \
            torch.float32
        wave, rate = engine.speak(voice, "Hello there.", RequestContext(2), {**DEFAULTS, "mode": "cross_lingual"},
                                  ref)
        assert wave.dtype == torch.float32 and wave.shape[1] > 0 and bool(wave.isfinite().all())


def test_fused_projections_is_an_opt_in_load_option_close_to_the_exact_lm(voices, tmp_path):
    fused = engine.load(cosyvoice_parts.e2e_release(folder(), tmp_path, "cv2"), torch.device("cpu"), torch.float32,
                        replace(OPTIONS, load_options={"fused_projections": True}))
    exact = voices["cv2"]
    assert fused.fused_projections and not exact.fused_projections
    assert hasattr(fused.model.lm.decoder.layers[0].self_attn, "qkv_proj")
    ids = torch.tensor([exact.tokenizer.encode("Hello there.")], dtype=torch.int32)
    lm_input = exact.model.lm.prompt(ids, torch.zeros(1, 0, dtype=torch.int32), torch.zeros(1, 0, dtype=torch.int32))
    tokens = [5, 17, 300, 42]
    torch.testing.assert_close(fused.model.lm.teacher_forced(lm_input, tokens),
                               exact.model.lm.teacher_forced(lm_input, tokens), rtol=0, atol=1e-4)


@pytest.mark.parametrize("version", ["cv2", "cv3"])
def test_compute_compile_compiles_hifts_decode_alone_and_a_rebind_turns_it_off(voices, monkeypatch, version):
    from mizuoto.runtime.compile import Compiled

    compiled = []

    def fake_compile(module, dynamic):  # what torch.compile is given, run as it is (the same audio)
        compiled.append(type(module).__name__)

        def run(*args):
            compiled.append("call")
            return module(*args)
        return run

    monkeypatch.setattr(torch, "compile", fake_compile)
    info, refs = committed()
    ref = cosyvoice_parts.e2e_recording(refs, info, "a")
    params = {**DEFAULTS, "mode": "cross_lingual"}
    eager, _ = engine.speak(voices[version], "Hello there.", RequestContext(3), params, ref)
    on = engine.rebind(voices[version], replace(OPTIONS, compile=True))
    assert isinstance(on.compiled_decode, Compiled) and on.handle is voices[version].handle
    wave, _ = engine.speak(on, "Hello there.", RequestContext(3), params, ref)
    assert torch.equal(wave, eager) and compiled[0] == "Decode" and compiled.count("call") == 1
    streamed = list(engine.speak_stream(on, "Hello there.", RequestContext(3), params, ref))
    assert compiled.count("call") == 1 + len(streamed)  # every chunk's vocoding
    assert engine.rebind(on, OPTIONS).compiled_decode is None


if __name__ == "__main__":  # the pinned subprocess
    print(json.dumps(ours(Path(sys.argv[1]), Path(sys.argv[2]))))
