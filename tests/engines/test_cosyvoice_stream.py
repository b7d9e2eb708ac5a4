"""CosyVoice 2 and CosyVoice 3 streaming (engine.speak_stream, engines/cosyvoice/stream.py) against upstream's own
CosyVoice2 / CosyVoice3 with stream=True (tests/parity/data/cosyvoice_stream, scripts/parity/
cosyvoice_stream_references.py, on cosyvoice_e2e's tiny release).

Upstream's LM thread and main loop ran in lockstep there (one token per poll), the schedule our stream defines; each
request started at token_hop_len 25. Per case (zero-shot and cross-lingual, one and two fragments, two to five
chunks a fragment), with ONNX Runtime's speaker embedding of the recording (cosyvoice_e2e's) fed in: every
fragment's LM tokens and every chunk's waveform, in order, identical where the set's
fingerprint is this machine's, not compared elsewhere (free running, tests/fallback.py). The chunks' boundaries are
checked everywhere: they follow from the token counts alone.
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
from mizuoto.engines.cosyvoice import engine, stream  # noqa: E402
from mizuoto.engines.cosyvoice.declaration import ENGINE  # noqa: E402
from mizuoto.engines.cosyvoice.llm import keep_silences  # noqa: E402
from mizuoto.runtime.context import RequestContext  # noqa: E402

SET = "cosyvoice_stream"
OPTIONS = RuntimeOptions("cosyvoice", "auto", False, True, (), {})


def folder(name: str = SET) -> Path:
    return reference_sets().SETS[name].committed


def committed() -> tuple[dict, dict]:
    return cosyvoice_parts.e2e_committed(folder())


def voices(out: Path) -> dict:
    return {v: engine.load(cosyvoice_parts.e2e_release(folder("cosyvoice_e2e"), out, v), torch.device("cpu"),
                           torch.float32, OPTIONS) for v in ("cv2", "cv3")}


def ort_embedding(e2e_info: dict, e2e_refs: dict, recording: str) -> torch.Tensor:
    """ONNX Runtime's CAM++ embedding of a recording, as cosyvoice_e2e recorded it (upstream is fed the same file
    here, so everything after the ONNX stage is compared from the same input)."""
    name = next(n for n, c in e2e_info["cases"].items() if c["args"].get("recording") == recording)
    return e2e_refs[f"{name}/embedding"]


def ours(root: Path, out: Path) -> dict:
    """The pinned run: every case's chunks and tokens, and how many chunks each fragment gave."""
    from safetensors.torch import save_file

    info, _ = cosyvoice_parts.e2e_committed(root)
    e2e_info, e2e_refs = cosyvoice_parts.e2e_committed(folder("cosyvoice_e2e"))
    loaded = voices(out.parent)
    results, chunks = {}, {}
    for name, case in info["cases"].items():
        voice, args = loaded[case["version"]], case["args"]
        params = {**ENGINE.speak_defaults(), "mode": case["method"]}
        ref = cosyvoice_parts.e2e_recording(e2e_refs, e2e_info, args["recording"])
        request = engine.build_request(voice, args["tts_text"], params, ref, args.get("prompt_text"))
        request = replace(request, embedding=ort_embedding(e2e_info, e2e_refs, args["recording"]))
        generator = RequestContext(case["seed"]).generator_for(torch.device("cpu"))
        prompt_text = torch.tensor([request.prompt_text], dtype=torch.int32).reshape(1, -1)
        chunks[name] = []
        for i, ids in enumerate(request.texts):
            tokens = []
            model = voice.model
            generate = model.lm.generate

            def recorded(*a, generate=generate, tokens=tokens, **k):
                for token in generate(*a, **k):
                    tokens.append(token)
                    yield token

            model.lm.generate = recorded
            try:
                waves = list(stream.stream_request(model, torch.tensor([ids], dtype=torch.int32), prompt_text,
                                                   request.llm_prompt_tokens, request.flow_prompt_tokens,
                                                   request.prompt_feat, request.embedding, generator=generator,
                                                   params=voice.sampling))
            finally:
                del model.lm.generate
            kept = list(keep_silences(tokens, voice.version))
            results[f"{name}/{i}/tokens"] = torch.tensor(kept, dtype=torch.int64)
            for j, wave in enumerate(waves):
                results[f"{name}/{i}/chunk{j}"] = wave
            chunks[name].append(len(waves))
    save_file({k: v.contiguous() for k, v in results.items()}, str(out))
    return {"chunks": chunks}


def test_upstreams_streaming_chunk_by_chunk(tmp_path, record_property):
    from safetensors.torch import load_file

    out = tmp_path / "ours.safetensors"
    chunks = run_pinned(__file__, folder(), out)["chunks"]
    comparison = Comparison.for_set(SET)
    info, theirs = committed()
    mine = load_file(str(out))
    for name, case in info["cases"].items():
        assert chunks[name] == case["chunks"], f"{name}: {chunks[name]} chunks per fragment, upstream {case['chunks']}"
        for i, count in enumerate(case["chunks"]):
            comparison.free_running(f"{name} fragment {i} speech tokens", mine[f"{name}/{i}/tokens"],
                                    theirs[f"{name}/{i}/tokens"])
            for j in range(count):
                comparison.free_running(f"{name} fragment {i} chunk {j}", mine[f"{name}/{i}/chunk{j}"],
                                        theirs[f"{name}/{i}/chunk{j}"])
    record_property("parity_mode", comparison.mode)
    print(f"{SET} parity: {comparison.mode} ({comparison.why})", *comparison.checked, sep="\n  ")


def test_the_set_streams_several_chunks_in_both_versions():
    info, refs = committed()
    assert info["upstream"]["commit"].startswith("ace7c47") and not info["upstream"]["modified"]
    for version in ("cv2", "cv3"):
        counts = [n for c in info["cases"].values() if c["version"] == version for n in c["chunks"]]
        assert counts and min(counts) >= 2
    assert max(n for c in info["cases"].values() for n in c["chunks"]) >= 3  # the hop grows
    assert any(len(c["chunks"]) > 1 for c in info["cases"].values())  # several fragments
    for key, wave in refs.items():
        if "/chunk" in key:
            assert wave.shape[0] == 1 and wave.shape[1] > 0 and wave.abs().max() > 1e-4, key


def test_speak_stream_yields_the_chunks_and_refuses_a_speed(tmp_path):
    loaded = voices(tmp_path)
    info, _ = committed()
    e2e_info, e2e_refs = cosyvoice_parts.e2e_committed(folder("cosyvoice_e2e"))
    case = info["cases"]["cv3/stream_cross_lingual"]
    ref = cosyvoice_parts.e2e_recording(e2e_refs, e2e_info, case["args"]["recording"])
    params = {**ENGINE.speak_defaults(), "mode": "cross_lingual"}
    pieces = list(engine.speak_stream(loaded["cv3"], case["args"]["tts_text"], RequestContext(case["seed"]), params,
                                      ref))
    assert len(pieces) == sum(case["chunks"]) and all(p.dtype == torch.float32 and p.dim() == 2 for p in pieces)
    with pytest.raises(InputError, match="cannot be streamed"):
        next(engine.speak_stream(loaded["cv3"], "Hello.", RequestContext(1), {**params, "speed": 1.5}, ref))


@pytest.mark.parametrize("version", ["cv2", "cv3"])
def test_a_stream_cancelled_mid_way_stops_and_the_seed_then_repeats_its_chunks(tmp_path, version):
    from mizuoto.core.errors import Cancelled

    loaded = voices(tmp_path)[version]
    info, _ = committed()
    e2e_info, e2e_refs = cosyvoice_parts.e2e_committed(folder("cosyvoice_e2e"))
    case = next(c for k, c in info["cases"].items() if k.startswith(version) and sum(c["chunks"]) > 1)
    ref = cosyvoice_parts.e2e_recording(e2e_refs, e2e_info, case["args"]["recording"])
    params = {**ENGINE.speak_defaults(), "mode": "cross_lingual"}
    whole = list(engine.speak_stream(loaded, case["args"]["tts_text"], RequestContext(case["seed"]), params, ref))
    ctx = RequestContext(case["seed"])
    chunks = engine.speak_stream(loaded, case["args"]["tts_text"], ctx, params, ref)
    assert torch.equal(next(chunks), whole[0])
    ctx.cancel()
    with pytest.raises(Cancelled):
        next(chunks)
    again = list(engine.speak_stream(loaded, case["args"]["tts_text"], RequestContext(case["seed"]), params, ref))
    assert len(again) == len(whole) and all(torch.equal(a, b) for a, b in zip(again, whole, strict=True))


def test_a_text_arriving_in_pieces_is_spoken_chunk_by_chunk_through_the_bistream_lm(tmp_path):
    from itertools import islice

    from mizuoto.engines.cosyvoice import bistream

    loaded = voices(tmp_path)["cv2"]
    e2e_info, e2e_refs = cosyvoice_parts.e2e_committed(folder("cosyvoice_e2e"))
    case = e2e_info["cases"]["cv2/zero_shot"]
    ref = cosyvoice_parts.e2e_recording(e2e_refs, e2e_info, case["args"]["recording"])
    params = {**ENGINE.speak_defaults(), "mode": "zero_shot"}
    pieces = ["Hello there, ", "the text ", "arrives ", "as an LLM ", "writes it, piece by piece. " * 4]

    def first_chunks(seed):  # the tiny random LM need not stop: two chunks are enough
        chunks = engine.speak_text_stream(loaded, iter(pieces), RequestContext(seed), params, ref,
                                          case["args"]["prompt_text"])
        return list(islice(chunks, 2))

    first = first_chunks(4)
    assert len(first) == 2 and all(c.dim() == 2 and c.shape[1] > 0 for c in first)
    assert all(torch.equal(a, b) for a, b in zip(first_chunks(4), first, strict=True))
    # the same thing by hand: each piece tokenised on its own, upstream's inference_bistream, then the chunks
    request = engine.build_request(loaded, None, params, ref, case["args"]["prompt_text"])
    assert request.texts == []
    generator = RequestContext(4).generator_for(loaded.device)
    prompt_text = torch.tensor([request.prompt_text], dtype=torch.int32)
    ids = [[t] for p in pieces for t in loaded.tokenizer.encode(p)]
    tokens = bistream.generate_bistream(loaded.model.lm, ids, prompt_text, request.llm_prompt_tokens,
                                        generator=generator, params=loaded.sampling)
    by_hand = stream.stream_request(loaded.model, None, prompt_text, request.llm_prompt_tokens,
                                    request.flow_prompt_tokens, request.prompt_feat, request.embedding,
                                    generator=generator, params=loaded.sampling, lm_tokens=tokens)
    assert all(torch.equal(a, b) for a, b in zip(islice(by_hand, 2), first, strict=True))
    with pytest.raises(InputError, match="cannot be streamed"):
        next(engine.speak_text_stream(loaded, iter(pieces), RequestContext(1), {**params, "speed": 1.5}, ref,
                                      case["args"]["prompt_text"]))


if __name__ == "__main__":  # the pinned subprocess
    print(json.dumps(ours(Path(sys.argv[1]), Path(sys.argv[2]))))
