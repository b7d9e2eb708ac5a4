"""Qwen3-TTS generation (token ids -> codes of every codebook) on tiny random models.

Two sets of references from upstream (qwen-tts 0.1.1, transformers 4.57.3, one thread,
ATEN_CPU_CAPABILITY=avx2), compared in a fresh process pinned the same way (the kernel level must be
set before torch loads), by running this file as a script:

- tests/parity/data/qwen3tts (scripts/parity/qwen3tts_references.py): 16 requests through upstream's
  wrapper on three tiny published-layout folders; compared bit for bit: the talker prefill embeddings,
  attention mask and trailing text, the prefill and step logits of the talker and the predictor where
  recorded, and every code;
- GOLDEN below (scripts/parity/qwen3tts_generate_live.py --golden): the tiny folders `model_folder`
  writes, among them one with 16 codebooks (the released models' 15 predictor draws per frame) and one
  with attention biases, through upstream's generate after transformers' from_pretrained.

The other tests run in this process and check how the codes are made: both attention sites
dispatched, one device wait per frame, CUDA graphs (emulated) giving the eager codes, the talker cache
growing without changing anything, the errors.
"""

from __future__ import annotations

import json
import sys
from contextlib import contextmanager
from functools import partial
from pathlib import Path

import pytest
import torch

from mizuoto.engines.qwen3tts import checkpoint, generate, prompt
from mizuoto.engines.qwen3tts.config import GenerationSettings, small_config

if __name__ == "__main__":  # run as the pinned script: tests/ (helpers.py) is not on the path yet
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from helpers import run_pinned  # noqa: E402

IM_START, IM_END, NL, ASSISTANT, USER = 193, 194, 10, 21, 22  # small_config's text vocabulary
# per kind: (codebooks per frame, predictor width, attention bias, weights seed); voice_design's predictor
# is as wide as the talker (no projection)
KINDS = {"custom_voice": (16, 32, False, 1), "voice_design": (4, 48, True, 2), "base": (4, 32, False, 3)}
MAX_NEW_TOKENS = 40


def text(*body: int) -> list[int]:
    return [IM_START, ASSISTANT, NL, *body, IM_END, NL, IM_START, ASSISTANT, NL]


def instruct(*body: int) -> list[int]:
    return [IM_START, USER, NL, *body, IM_END, NL]


def reference(*body: int) -> list[int]:
    return [IM_START, ASSISTANT, NL, *body, IM_END, NL]


def voice(seed: int) -> dict:
    """A Base model's reference: an x-vector and 12 frames of codes, drawn from a private generator."""
    g = torch.Generator().manual_seed(seed)
    return dict(xvec=torch.randn(48, generator=g), codes=torch.randint(0, 64, (12, 4), generator=g))


CV_A = dict(text=text(45, 12, 99, 3, 150, 77, 8, 61, 20), language="english", speaker="alice")
CV_B = dict(text=text(*range(100, 117)), language="auto", speaker="bob")  # bob speaks a dialect
VD_A = dict(text=text(9, 170, 33, 2, 81, 44, 120, 16), language="english", instruct=instruct(60, 61, 62, 63))
VD_B = dict(text=text(5, 80, 33), language="auto")
BASE_X = dict(text=text(30, 31, 32, 33, 34, 35), language="english", voice=1)
BASE_ICL = dict(text=text(7, 8, 9, 10, 11), language="auto", voice=2, ref_text=reference(70, 71, 72, 73, 74, 75, 76))
BASE_ICL_LONG = dict(text=text(*range(140, 160)), language="english", voice=3, ref_text=reference(90, 91))

# name -> (kind, requests, non-streaming, seed, sampling overrides)
CASES = {
    "cv_streaming": ("custom_voice", [CV_A], False, 7, {}),
    "cv_dialect_instruct_whole_text": ("custom_voice", [dict(CV_B, instruct=instruct(60, 61))], True, 8, {}),
    "cv_batch": ("custom_voice", [CV_A, CV_B], False, 9, {}),
    "cv_top_p_greedy_predictor": ("custom_voice", [CV_B], False, 10, dict(top_p=0.8, subtalker_dosample=False)),
    "vd_instruct": ("voice_design", [VD_A], True, 11, {}),
    "vd_batch": ("voice_design", [VD_A, VD_B], True, 12, dict(temperature=1.3, subtalker_top_k=7)),
    "vd_greedy_talker_streaming": ("voice_design", [dict(VD_A, language="chinese")], False, 13,
                                   dict(do_sample=False)),
    "base_x_vector": ("base", [BASE_X], False, 14, {}),
    "base_clone": ("base", [BASE_ICL], False, 15, {}),
    "base_clone_text_outlasts_codes": ("base", [BASE_ICL_LONG], False, 16, {}),
    "base_clone_whole_text": ("base", [BASE_ICL], True, 17, {}),
    "base_batch_clone_and_x_vector": ("base", [BASE_ICL, BASE_X], False, 18, {}),
}


def model_folder(kind: str, root: Path) -> Path:
    groups, predictor_hidden, bias, seed = KINDS[kind]
    data = small_config(kind, groups, predictor_hidden, bias)
    return checkpoint.write_folder(Path(root) / kind, data, checkpoint.random_talker(data, seed))


def request_inputs(request: dict) -> dict:
    """A request as token-id tensors and tensors (what both sides take)."""
    out = dict(text=torch.tensor([request["text"]]), language=request["language"], speaker=request.get("speaker"))
    if "instruct" in request:
        out["instruct"] = torch.tensor([request["instruct"]])
    if "voice" in request:
        reference_voice = voice(request["voice"])
        out["xvec"] = reference_voice["xvec"]
        if "ref_text" in request:
            out["ref_text"] = torch.tensor([request["ref_text"]])
            out["ref_codes"] = reference_voice["codes"]
    return out


def batch_for(config, talker, requests: list[dict], non_streaming: bool) -> prompt.Batch:
    prompts = []
    for r in map(request_inputs, requests):
        prompts.append(prompt.build_prompt(
            talker, config, r["text"], language=r["language"], speaker=r["speaker"], x_vector=r.get("xvec"),
            instruct_ids=r.get("instruct"), reference_ids=r.get("ref_text"), reference_codes=r.get("ref_codes"),
            non_streaming=non_streaming))
    return prompt.batch_prompts(prompts, prompt.tts_specials(talker, config)[2])


def settings_for(overrides: dict) -> GenerationSettings:
    return GenerationSettings(max_new_tokens=MAX_NEW_TOKENS).with_overrides(**overrides)


def run_cases(root: Path) -> dict:
    """Ours on every case: codes (per row, frames x G) and the first prefill scores of each row."""
    from mizuoto.runtime.context import RequestContext

    loaded = {kind: checkpoint.load_talker(model_folder(kind, root)) for kind in KINDS}
    out = {}
    for name, (kind, requests, non_streaming, seed, overrides) in CASES.items():
        config, talker = loaded[kind]
        with torch.inference_mode():
            batch = batch_for(config, talker, requests, non_streaming)
            logits, _ = generate.prefill(talker, batch)
        codes = generate.generate_codes(talker, batch, settings_for(overrides), RequestContext(seed))
        out[name] = dict(codes=[c.tolist() for c in codes], logits=logits[:, :4].tolist())
    return out


REFERENCES = Path(__file__).resolve().parents[1] / "parity" / "data" / "qwen3tts"


def reference_requests(case: dict, tensors: dict) -> tuple[list[dict], bool, GenerationSettings]:
    """A references.json case as build_prompt arguments per row, its mode and its sampling settings."""
    name, options = case["name"], dict(case["generate_options"])
    non_streaming = options.pop("non_streaming_mode")
    rows = []
    for i, language in enumerate(case["languages"]):
        def get(key, i=i):
            return tensors.get(f"{name}/{key}_{i}")

        rows.append(dict(text_ids=get("input_ids"), language=language or "auto",
                         speaker=case["speakers"][i] if case.get("speakers") else None,
                         x_vector=get("ref_spk_embedding"), instruct_ids=get("instruct_ids"),
                         reference_ids=get("ref_ids"), reference_codes=get("ref_code")))
    return rows, non_streaming, GenerationSettings().with_overrides(**options)


@contextmanager
def recording_logits(talker):
    """Every float32 score row the talker (prefill included) and the predictor hand to sampling, from
    the modules' heads (prefill, DecoderSteps) and from the CPU's lean steps."""
    from mizuoto.engines.qwen3tts import lean

    steps = {"talker_step_logits": [], "predictor_step_logits": []}
    predictor = talker.code_predictor
    talker_logits, predictor_logits = talker.logits, predictor.logits
    lean_talker_logits, lean_logits = lean.LeanFrame._talker_logits, lean.LeanFrame._logits

    def talker_recorded(hidden, head=talker_logits):
        steps["talker_step_logits"].append(head(hidden))
        return steps["talker_step_logits"][-1]

    def predictor_recorded(j, hidden, head=predictor_logits):
        steps["predictor_step_logits"].append(head(j, hidden))
        return steps["predictor_step_logits"][-1]

    talker.logits, predictor.logits = talker_recorded, predictor_recorded
    lean.LeanFrame._talker_logits = lambda self, hidden: talker_recorded(hidden, partial(lean_talker_logits, self))
    lean.LeanFrame._logits = lambda self, j, hidden: predictor_recorded(j, hidden, partial(lean_logits, self))
    try:
        yield steps
    finally:
        del talker.logits, predictor.logits
        lean.LeanFrame._talker_logits, lean.LeanFrame._logits = lean_talker_logits, lean_logits


def compare_references(data: Path) -> dict:
    """Ours on every case of the reference data: per output, whether it equals upstream's bit for bit."""
    from safetensors.torch import load_file

    from mizuoto.runtime.context import RequestContext

    info = json.loads((data / "references.json").read_text())
    tensors = load_file(str(data / "references.safetensors"))
    loaded = {kind: checkpoint.load_talker(data / spec["folder"]) for kind, spec in info["kinds"].items()}
    out = {}
    for case in info["cases"]:
        name = case["name"]
        config, talker = loaded[case["kind"]]
        rows, non_streaming, settings = reference_requests(case, tensors)
        with torch.inference_mode():
            prompts = [prompt.build_prompt(talker, config, non_streaming=non_streaming, **row) for row in rows]
            batch = prompt.batch_prompts(prompts, prompt.tts_specials(talker, config)[2])
            state = generate._TalkerCache(talker.decoder, batch, 1)
            hidden = talker.decoder(batch.embeds, state.prefill_positions, state.cache, state.prefill_mask())
            ours = dict(talker_prefill_embeds=batch.embeds, talker_attention_mask=batch.attention,
                        trailing_text_hidden=batch.trailing, talker_prefill_logits=talker.codec_head(hidden))
        with recording_logits(talker) as steps:
            codes = generate.generate_codes(talker, batch, settings, RequestContext(case["seed"]))
        ours.update({f"codes_{i}": c for i, c in enumerate(codes)})
        for key in ("talker_step_logits", "predictor_step_logits"):
            if f"{name}/{key}" in tensors:
                ours[key] = torch.stack(steps[key][: tensors[f"{name}/{key}"].shape[0]])
        for key, got in ours.items():
            want = tensors.get(f"{name}/{key}")
            if want is None:
                continue
            if key == "talker_prefill_logits" and want.dim() == 2:
                got = got[:, -1]
            out[f"{name}/{key}"] = tuple(got.shape) == tuple(want.shape) and torch.equal(got.to(want.dtype), want)
    return out


def test_identical_to_the_reference_data(tmp_path):
    info = json.loads((REFERENCES / "references.json").read_text())
    assert info["num_threads"] == 1 and info["ATEN_CPU_CAPABILITY"] == "avx2"
    results = run_self_pinned("references", REFERENCES)
    expected = {f"{case['name']}/{key}" for case in info["cases"] for key in case["tensors"]
                if not key.startswith(("wav_", "input_ids_", "instruct_ids_", "ref_"))}
    assert set(results) == expected
    assert [name for name, same in results.items() if not same] == []


def run_self_pinned(what: str, where: Path) -> dict:
    """This file as a script in a process at one thread and ATEN_CPU_CAPABILITY=avx2 -> its JSON."""
    return run_pinned(__file__, what, where)


def frames(row: str) -> list[list[int]]:
    """A GOLDEN row: frames separated by '/', each its G codes."""
    return [[int(code) for code in frame.split()] for frame in row.split("/")] if row.strip() else []


def test_identical_to_the_golden_codes(tmp_path):
    ours = run_self_pinned("golden", tmp_path)
    assert set(ours) == set(GOLDEN)
    for name, expected in GOLDEN.items():
        got = ours[name]
        assert got["logits"] == expected["logits"], f"{name}: prefill scores differ"
        want = [frames(row) for row in expected["codes"]]
        assert [len(row) for row in got["codes"]] == [len(row) for row in want], f"{name}: frame counts differ"
        assert got["codes"] == want, f"{name}: codes differ"


# --------------------------------------------------------------------------------------------------
# How the codes are made (in this process)


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("qwen3tts")
    return {kind: checkpoint.load_talker(model_folder(kind, root)) for kind in KINDS}


def codes_of(models, name: str, steps=None, **overrides) -> list[torch.Tensor]:
    from mizuoto.runtime.context import RequestContext

    kind, requests, non_streaming, seed, case_overrides = CASES[name]
    config, talker = models[kind]
    batch = batch_for(config, talker, requests, non_streaming)
    settings = settings_for({**case_overrides, **overrides})
    return generate.generate_codes(talker, batch, settings, RequestContext(seed), steps)


def test_both_attention_sites_dispatch_with_their_masks(models, monkeypatch):
    """Every talker and predictor attention call goes through its own site (with DEBUG's check that each
    mask_info describes its dense mask): the talker once per layer for the prefill and for each frame,
    the predictor once per layer for each of its G-1 draws of each frame."""
    from mizuoto.engines.qwen3tts import predictor, talker

    calls = {"qwen3tts.talker": 0, "qwen3tts.predictor": 0}
    for site in (talker.ATTN, predictor.ATTN):
        reference = site.reference

        def counted(*args, r=reference, n=site.name):
            calls[n] += 1
            return r(*args)

        monkeypatch.setattr(site, "reference", counted)
    (codes,) = codes_of(models, "cv_streaming")
    n, groups = codes.shape
    assert n > 2 and calls == {"qwen3tts.talker": 2 * (1 + n), "qwen3tts.predictor": 2 * (groups - 1) * n}
    calls.update({"qwen3tts.talker": 0, "qwen3tts.predictor": 0})
    rows = codes_of(models, "base_batch_clone_and_x_vector")  # left-padded: dense masks
    longest = max(len(r) for r in rows)
    assert calls["qwen3tts.talker"] == 2 * (1 + longest) and calls["qwen3tts.predictor"] == 2 * 3 * longest


def test_one_device_wait_per_frame(models, monkeypatch):
    from helpers import HostReads

    from mizuoto.runtime.accel import dispatch
    from mizuoto.runtime.context import RequestContext

    monkeypatch.setattr(dispatch, "DEBUG", False)  # DEBUG's mask check reads tensors on purpose
    # int(tensor) dispatches as item under inference_mode
    kind, requests, non_streaming, seed, overrides = CASES["vd_batch"]
    config, talker = models[kind]
    batch = batch_for(config, talker, requests, non_streaming)
    with HostReads() as mode:
        frames = list(generate.iterate_frames(talker, batch, settings_for(overrides), RequestContext(seed)))
    # one read per talker draw: a draw per frame, then the draw that stops (EOS everywhere, or the limit)
    assert len(frames) > 10 and len(mode.reads) == len(frames) + 1


@pytest.mark.parametrize("fail", [(), (2,), (7,)], ids=["captured", "a talker capture fails",
                                                        "a predictor capture fails"])
def test_graphs_give_the_eager_codes(models, fail):
    """The talker and predictor steps through DecoderSteps with CUDA graphs emulated on the CPU (each
    'graph' re-runs its segment into its static outputs, as a replay does): the same codes as eager."""
    from helpers import EmulatedGraphs

    eager = codes_of(models, "base_batch_clone_and_x_vector")
    emulated = EmulatedGraphs(fail=fail)
    steps = generate.Steps(models["base"][1], emulated)
    first = codes_of(models, "base_batch_clone_and_x_vector", steps)
    again = codes_of(models, "base_batch_clone_and_x_vector", steps)  # replays only
    assert all(torch.equal(a, b) and torch.equal(a, c) for a, b, c in zip(eager, first, again, strict=True))
    if not fail:  # talker: 3 segments of 2 layers; predictor: 3 steps of 3 segments
        assert emulated.captures == 3 + 3 * 3


@pytest.mark.parametrize("name, greedy", [("cv_streaming", False), ("cv_top_p_greedy_predictor", False),
                                          ("vd_batch", True), ("base_batch_clone_and_x_vector", False)])
def test_lean_steps_are_the_module_steps(models, name, greedy, monkeypatch):
    """On the CPU the frame loop runs lean.py's steps: the codes of the modules' own steps (DecoderSteps
    without graphs), sampled and greedy, padded batches included (all cases: against upstream's data)."""
    from mizuoto.engines.qwen3tts import lean
    from mizuoto.runtime.accel import dispatch

    monkeypatch.setattr(dispatch, "DEBUG", False)  # the masks are checked by the other tests; this one is speed
    overrides = dict(max_new_tokens=16, **(dict(do_sample=False, subtalker_dosample=False) if greedy else {}))
    modules = codes_of(models, name, generate.Steps(models[CASES[name][0]][1], lean=False), **overrides)
    draws = []
    monkeypatch.setattr(lean.LeanFrame, "draw", lambda self, *a, f=lean.LeanFrame.draw: draws.append(1) or f(self, *a))
    fast = codes_of(models, name, **overrides)
    assert draws and all(torch.equal(a, b) for a, b in zip(modules, fast, strict=True))


@pytest.mark.parametrize("variant", ["fused_projections", "bfloat16"])
def test_lean_steps_follow_fused_projections_and_bfloat16(tmp_path, variant, monkeypatch):
    from mizuoto.runtime.accel import dispatch
    from mizuoto.runtime.context import RequestContext

    monkeypatch.setattr(dispatch, "DEBUG", False)

    dtype = torch.bfloat16 if variant == "bfloat16" else torch.float32
    config, talker = checkpoint.load_talker(model_folder("custom_voice", tmp_path), dtype=dtype)
    if variant == "fused_projections":
        talker.decoder.fuse()
        talker.code_predictor.decoder.fuse()
    with torch.inference_mode():
        batch = batch_for(config, talker, [CV_A, CV_B], False)
    settings = settings_for(dict(max_new_tokens=12))
    modules = generate.generate_codes(talker, batch, settings, RequestContext(4), generate.Steps(talker, lean=False))
    fast = generate.generate_codes(talker, batch, settings, RequestContext(4))
    assert all(torch.equal(a, b) for a, b in zip(modules, fast, strict=True))


def test_growing_the_talker_cache_changes_nothing(models, monkeypatch, tmp_path):
    whole = codes_of(models, "vd_batch")
    monkeypatch.setattr(generate, "CACHE_GROWTH", 2)
    fresh = {"voice_design": checkpoint.load_talker(model_folder("voice_design", tmp_path))}  # rotary tables unused
    grown = codes_of(fresh, "vd_batch")
    assert max(len(r) for r in whole) > 20
    assert all(torch.equal(a, b) for a, b in zip(whole, grown, strict=True))


def test_streaming_frames_are_the_codes(models):
    from mizuoto.runtime.context import RequestContext

    kind, requests, non_streaming, seed, overrides = CASES["base_clone"]
    config, talker = models[kind]
    batch = batch_for(config, talker, requests, non_streaming)
    frames = list(generate.iterate_frames(talker, batch, settings_for(overrides), RequestContext(seed)))
    (codes,) = codes_of(models, "base_clone")
    assert torch.equal(torch.stack(frames, dim=1)[0, : len(codes)], codes)


def test_the_limit_and_the_seed(models):
    limited = codes_of(models, "cv_batch", max_new_tokens=5)
    assert [len(r) for r in limited] == [4, 4]  # five draws: the fifth has no frame
    state = torch.random.get_rng_state()
    a, b = codes_of(models, "base_x_vector"), codes_of(models, "base_x_vector")
    c = codes_of(models, "base_x_vector", temperature=1.5)
    assert torch.equal(a[0], b[0]) and not torch.equal(a[0], c[0][: len(a[0])])
    assert torch.equal(state, torch.random.get_rng_state())  # the global generator is never touched


def test_half_precision_loads_and_runs(tmp_path):
    from mizuoto.runtime.context import RequestContext

    folder = model_folder("base", tmp_path)
    config, talker = checkpoint.load_talker(folder, dtype=torch.bfloat16)
    assert {p.dtype for p in talker.parameters()} == {torch.bfloat16}
    with torch.inference_mode():
        batch = batch_for(config, talker, [BASE_ICL], False)
    (codes,) = generate.generate_codes(talker, batch, settings_for(dict(max_new_tokens=6)), RequestContext(1))
    assert 2 <= codes.shape[0] <= 5 and codes.shape[1] == 4 and codes.dtype == torch.long


def test_fresh_weights_are_aligned_copies(tmp_path):
    folder = model_folder("voice_design", tmp_path)
    _, mapped = checkpoint.load_talker(folder)
    _, fresh = checkpoint.load_talker(folder, fresh=True)
    pairs = list(zip(mapped.state_dict().values(), fresh.state_dict().values(), strict=True))
    assert all(torch.equal(a, b) and a.data_ptr() != b.data_ptr() for a, b in pairs)
    assert all(b.data_ptr() % 64 == 0 for _, b in pairs)


def test_sharded_weights_load_as_one_file(tmp_path):
    from safetensors.torch import load_file, save_file

    folder = model_folder("base", tmp_path)
    _, whole = checkpoint.load_talker(folder)
    tensors = load_file(str(folder / "model.safetensors"))
    (folder / "model.safetensors").unlink()
    names = sorted(tensors)
    shards = {"model-00001-of-00002.safetensors": names[::2], "model-00002-of-00002.safetensors": names[1::2]}
    for file, keys in shards.items():
        save_file({k: tensors[k] for k in keys}, str(folder / file), metadata={"format": "pt"})
    index = {"weight_map": {k: file for file, keys in shards.items() for k in keys}}
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    _, sharded = checkpoint.load_talker(folder)
    assert all(torch.equal(a, b) for a, b in zip(whole.state_dict().values(), sharded.state_dict().values(),
                                                  strict=True))


@pytest.mark.parametrize("change, message", [
    (dict(speaker="carol"), "is not one of this model's speakers (alice, bob)"),
    (dict(language="klingon"), "language 'klingon' is not supported by this model; use one of auto, english"),
    (dict(text=text()), "the text is empty"),
    (dict(x_vector=torch.zeros(47), speaker=None), "the x-vector has 47 values; this model takes 48"),
    (dict(x_vector=torch.zeros(48)), "give either a speaker name or a reference voice"),
    (dict(reference_codes=torch.zeros(3, 16, dtype=torch.long)), "needs the reference transcript's ids"),
    (dict(reference_codes=torch.zeros(3, 4, dtype=torch.long), reference_ids=reference(1)),
     "reference codes must be (frames, 16), got (3, 4)"),
    (dict(text=torch.zeros(2, 12, dtype=torch.long)), "must be one sequence of integer token ids"),
])
def test_bad_requests(models, change, message):
    from mizuoto.core.errors import InputError

    config, talker = models["custom_voice"]
    kwargs = dict(text=CV_A["text"], language="english", speaker="alice") | change
    with pytest.raises(InputError) as info:
        prompt.build_prompt(talker, config, kwargs.pop("text"), **kwargs)
    assert message in str(info.value) and "\n" not in str(info.value)


def _edit_config(folder: Path, edit) -> None:
    data = json.loads((folder / "config.json").read_text())
    edit(data)
    (folder / "config.json").write_text(json.dumps(data))


@pytest.mark.parametrize("breakage, message", [
    (lambda f: (f / "config.json").unlink(), "config.json does not exist"),
    (lambda f: (f / "model.safetensors").unlink(), "holds neither model.safetensors nor model.safetensors.index.json"),
    (lambda f: (f / "model.safetensors").write_bytes(b"not safetensors"), "is not a readable safetensors file"),
    (lambda f: (f / "config.json").write_text("{"), "is not readable JSON"),
    (lambda f: _edit_config(f, lambda d: d.update(model_type="qwen2")), "describes a 'qwen2' model, not qwen3_tts"),
    (lambda f: _edit_config(f, lambda d: d.update(tts_model_type="chat")), "tts_model_type 'chat'"),
    (lambda f: _edit_config(f, lambda d: d["talker_config"].update(rope_scaling={"rope_type": "yarn"})),
     "only default RoPE is supported"),
    (lambda f: _edit_config(f, lambda d: d["talker_config"].update(hidden_size=64)),
     "weight has shape (64, 48), config.json implies (64, 64)"),
    (lambda f: _edit_config(f, lambda d: d["talker_config"].update(num_hidden_layers=3)),
     "missing talker.model.layers.2."),
    (lambda f: _edit_config(f, lambda d: d["talker_config"]["code_predictor_config"].update(num_code_groups=8)),
     "the talker has 4 code groups but its code predictor 8"),
])
def test_bad_model_folders(tmp_path, breakage, message):
    from mizuoto.core.errors import CheckpointError

    folder = model_folder("base", tmp_path)
    breakage(folder)
    with pytest.raises(CheckpointError) as info:
        checkpoint.load_talker(folder)
    assert message in str(info.value) and "\n" not in str(info.value)


def test_configuration_files(tmp_path):
    from mizuoto.engines.qwen3tts import config as qconfig

    folder = model_folder("custom_voice", tmp_path)
    config = qconfig.read_model_config(folder)
    assert config.languages == ("auto", "english", "chinese") and config.speakers == ("alice", "bob")
    assert config.talker.suppressed == tuple(i for i in range(64, 1088) if i != 1070)
    assert qconfig.read_generation_settings(folder) == qconfig.GenerationSettings()  # no file: upstream's
    (folder / "generation_config.json").write_text(json.dumps(dict(top_k=30, max_new_tokens=8192, unknown=1)))
    settings = qconfig.read_generation_settings(folder)
    assert (settings.top_k, settings.max_new_tokens, settings.temperature) == (30, 8192, 0.9)
    assert settings.with_overrides(top_k=None, temperature=0.5).temperature == 0.5
    # entries a config.json leaves out take upstream's constructor defaults
    bare = qconfig.model_config_from_dict({"tts_model_type": "base", "talker_config": {"vocab_size": 4300}})
    talker = bare.talker
    assert (talker.num_code_groups, talker.codec_eos_token_id, talker.text_hidden_size) == (32, 4198, 2048)
    assert (talker.predictor.decoder.num_layers, talker.decoder.head_dim) == (5, 64)
    assert prompt.drops_instruct(config) is False
    small = qconfig.model_config_from_dict(dict(small_config("custom_voice"), tts_model_size="0b6"))
    assert prompt.drops_instruct(small)


# Recorded from upstream by scripts/parity/qwen3tts_generate_live.py --golden (see the module docstring):
# per case, the first four prefill scores of each row and each row's codes.
GOLDEN = {
    'cv_streaming': dict(
        logits=[
            [-0.19503630697727203, 2.02689266204834, -0.40375474095344543, 1.265433669090271],
        ],
        codes=[
            '16 5 43 2 4 36 7 25 35 18 18 5 61 61 61 7 / 24 53 34 18 30 10 15 3 42 36 61 28 33 55 28 54 / 26 38 '
            '17 52 51 21 53 2 48 42 1 7 47 57 28 7 / 27 1 15 9 6 21 15 5 35 22 61 28 63 61 28 44 / 36 22 43 34 15 '
            '45 0 28 44 42 20 7 55 60 17 44 / 60 42 39 41 60 35 11 30 0 7 19 8 23 41 56 46 / 54 34 47 19 53 29 42 '
            '36 35 13 2 11 62 57 0 44 / 23 36 61 46 49 32 52 10 59 37 18 7 7 7 17 9 / 54 25 3 24 29 60 15 36 61 '
            '38 18 25 14 2 55 54 / 43 43 11 53 1 10 19 34 15 45 61 60 56 13 54 32 / 55 23 43 1 60 25 2 32 18 55 '
            '36 58 51 50 50 35 / 15 56 17 50 41 44 25 5 35 22 61 7 62 52 43 54 / 41 41 21 17 2 20 29 31 35 15 28 '
            '7 62 60 4 46 / 62 31 12 22 42 48 2 30 14 47 28 26 48 60 50 54 / 46 11 43 3 24 32 24 54 9 18 43 37 51 '
            '61 40 1 / 13 1 40 17 42 32 25 12 29 48 28 21 57 60 38 44 / 53 53 4 3 57 28 46 25 35 13 18 38 62 17 '
            '58 45',
        ]),
    'cv_dialect_instruct_whole_text': dict(
        logits=[
            [-0.22672098875045776, 2.0622458457946777, -0.4676860272884369, 1.183531641960144],
        ],
        codes=[
            '16 34 43 38 60 53 10 23 35 42 18 63 7 19 4 46 / 63 34 44 24 49 31 2 25 35 26 28 21 48 37 24 52 / 35 '
            '12 1 40 2 10 35 24 35 30 10 41 42 48 28 44 / 10 20 26 53 30 10 43 2 35 22 56 60 14 48 40 44 / 16 53 '
            '3 42 1 32 61 5 49 47 7 1 48 15 18 35 / 57 23 62 4 49 37 32 24 35 15 20 57 48 50 9 62 / 12 29 5 53 49 '
            '12 25 36 35 38 0 25 42 22 43 45 / 1 53 35 17 49 58 52 51 53 16 33 52 39 37 38 54 / 15 14 43 53 18 60 '
            '15 1 56 41 28 58 48 39 11 7 / 58 17 24 44 2 36 17 28 34 46 63 7 14 57 17 0 / 6 1 33 5 60 4 15 45 35 '
            '40 31 11 58 48 16 44 / 1 14 26 30 7 36 7 36 35 26 35 11 62 55 47 54 / 26 2 62 1 54 45 3 34 9 9 9 54 '
            '48 48 58 16 / 34 39 24 17 60 45 6 3 3 46 43 12 48 21 28 53',
        ]),
    'cv_batch': dict(
        logits=[
            [-0.19503630697727203, 2.02689266204834, -0.40375474095344543, 1.265433669090271],
            [-0.2540918290615082, 1.9838229417800903, -0.41463345289230347, 1.303464412689209],
        ],
        codes=[
            '24 1 54 44 46 22 15 1 8 15 18 11 62 57 47 45 / 0 53 0 50 48 13 29 31 35 22 2 39 31 57 40 44 / 39 1 '
            '26 44 57 62 22 25 35 2 43 37 48 9 7 54 / 29 19 24 40 38 48 41 36 17 56 19 7 62 17 40 54 / 47 53 3 17 '
            '48 45 10 5 14 11 6 62 62 59 39 54 / 35 19 16 41 63 32 38 60 16 7 63 6 62 12 11 36 / 24 53 58 22 53 '
            '54 17 6 35 42 2 4 25 35 28 32 / 0 1 21 40 19 32 7 60 54 15 28 7 62 41 45 54 / 42 1 43 46 25 32 11 5 '
            '14 26 4 7 7 52 50 47 / 31 56 29 45 48 32 26 25 35 42 28 26 48 35 50 44 / 62 19 59 4 30 46 47 39 33 '
            '41 28 7 48 19 28 14 / 28 1 58 32 60 16 22 62 6 13 61 63 62 2 55 54 / 34 53 58 7 30 32 15 25 35 48 54 '
            '25 44 57 54 63 / 12 40 61 22 18 21 0 26 55 12 18 52 62 48 4 37 / 14 19 26 17 2 4 61 17 34 49 32 7 39 '
            '19 44 10 / 53 11 58 24 60 4 7 60 14 35 2 7 48 18 40 47 / 6 4 1 17 7 21 15 25 38 22 39 36 48 26 54 54 '
            '/ 60 28 4 40 14 45 32 32 35 2 25 7 63 19 40 37 / 57 35 17 18 8 20 22 41 6 42 63 7 62 40 59 53 / 63 1 '
            '24 20 30 47 11 32 40 48 63 7 44 61 56 47 / 31 2 27 3 1 45 32 60 39 34 18 7 48 41 50 13 / 6 1 47 34 '
            '63 16 17 2 35 5 18 57 7 16 62 55 / 32 56 43 17 7 24 32 32 15 42 35 41 50 54 28 44 / 6 35 1 55 58 58 '
            '42 10 35 47 42 58 60 48 28 11 / 46 19 38 44 49 57 11 28 7 55 53 60 7 61 38 54 / 49 29 63 19 48 10 30 '
            '45 35 16 25 7 26 40 42 61 / 58 51 43 52 14 21 15 36 35 18 28 50 10 61 16 13 / 37 28 21 37 58 41 26 1 '
            '35 13 63 28 62 16 16 37 / 33 1 43 46 46 10 25 50 40 26 34 7 23 48 38 53 / 9 29 0 12 2 21 15 25 47 44 '
            '28 31 47 48 4 37 / 59 41 33 38 1 58 15 34 48 22 25 12 14 59 16 44 / 16 1 43 46 60 6 26 59 9 5 36 28 '
            '62 19 13 36 / 1 34 62 50 43 58 11 37 34 38 12 0 20 5 42 32 / 54 53 37 44 42 29 29 62 45 14 26 21 39 '
            '5 13 50 / 43 49 27 34 34 36 26 60 55 15 25 63 7 39 17 10 / 61 30 54 57 2 58 52 18 35 32 62 7 62 49 7 '
            '36 / 45 19 58 21 29 32 57 35 33 9 17 7 62 40 42 50 / 41 35 58 17 34 6 11 34 35 42 50 11 51 40 30 46 '
            '/ 40 34 41 20 34 8 11 5 35 1 7 7 62 48 45 15',
            '1 19 63 41 12 47 39 28 18 2 18 52 62 48 58 40 / 57 23 62 50 41 18 38 32 1 36 20 12 14 0 28 10 / 48 '
            '46 8 44 1 10 26 5 48 26 28 43 56 12 17 4 / 16 33 43 57 2 32 35 34 6 40 28 61 7 60 12 51',
        ]),
    'cv_top_p_greedy_predictor': dict(
        logits=[
            [-0.2540918290615082, 1.9838229417800903, -0.41463345289230347, 1.303464412689209],
        ],
        codes=[
            '28 53 43 17 49 10 2 36 35 42 28 7 62 57 28 44 / 26 1 43 24 49 10 15 36 35 26 18 7 62 57 28 44',
        ]),
    'vd_instruct': dict(
        logits=[
            [-0.4028923511505127, 0.3592527508735657, -0.2160429209470749, 0.040528152137994766],
        ],
        codes=[
            '63 22 24 25 / 13 25 20 25 / 46 9 45 62 / 45 53 28 55 / 37 27 38 28 / 15 26 58 33 / 12 6 23 12 / 43 '
            '43 23 47 / 25 15 32 48 / 26 36 59 37 / 61 58 26 24 / 45 5 25 53 / 48 10 44 30 / 26 29 15 18 / 39 21 '
            '50 49 / 7 23 43 40 / 23 29 34 42 / 52 14 25 0 / 58 47 46 8 / 23 63 42 10 / 0 52 32 14 / 28 35 1 27 / '
            '25 58 58 25 / 8 24 7 59 / 0 14 45 30 / 41 20 3 52 / 23 58 61 1 / 52 40 46 28 / 33 22 62 33 / 9 43 7 '
            '52 / 13 39 45 17 / 43 14 8 33',
        ]),
    'vd_batch': dict(
        logits=[
            [-0.4028923511505127, 0.3592527508735657, -0.2160429209470749, 0.040528152137994766],
            [-0.4050239324569702, 0.3248763382434845, -0.2109241634607315, 0.072368323802948],
        ],
        codes=[
            '9 59 23 20 / 55 9 27 7 / 46 27 16 27 / 41 63 42 59 / 16 5 11 41 / 20 63 19 63 / 5 11 16 27 / 41 63 5 '
            '8 / 25 27 11 11 / 51 35 53 28 / 25 19 28 23 / 43 14 27 33 / 13 41 34 50 / 38 0 29 38 / 23 63 5 44 / '
            '57 14 27 7 / 18 40 49 8 / 23 57 30 39 / 18 26 50 8 / 46 31 63 59 / 38 22 62 15 / 39 21 0 8 / 56 53 '
            '42 59 / 3 6 45 44 / 51 62 55 1 / 56 48 34 12 / 43 38 50 0 / 51 62 6 37 / 14 51 49 16 / 49 9 57 34 / '
            '55 59 25 1 / 45 39 46 3 / 56 56 43 15 / 56 9 53 28 / 37 0 13 53 / 49 9 27 33',
            '44 1 47 39 / 4 9 27 0 / 34 0 50 8 / 23 63 43 37 / 17 25 9 42 / 11 8 0 12 / 44 19 29 41 / 31 24 7 12 '
            '/ 56 53 30 47 / 45 53 33 57 / 13 42 24 19 / 43 20 22 30 / 48 34 10 40 / 20 11 37 11 / 11 18 38 29 / '
            '59 30 42 6 / 18 26 62 15 / 44 63 8 59 / 13 58 58 59 / 24 58 24 8 / 43 28 7 59 / 21 52 40 63 / 7 23 '
            '14 63 / 50 4 24 19 / 37 4 9 42 / 18 24 53 1 / 62 32 46 32 / 43 12 23 20 / 48 36 22 51 / 54 14 40 35 '
            '/ 46 31 55 1 / 34 9 53 20 / 40 1 59 10 / 18 14 27 33 / 49 16 48 58 / 38 0 50 8 / 23 58 48 42 / 63 46 '
            '32 16 / 4 26 18 27',
        ]),
    'vd_greedy_talker_streaming': dict(
        logits=[
            [-0.28978219628334045, 0.4269767701625824, -0.13758039474487305, -0.033096782863140106],
        ],
        codes=[
            '63 47 50 9 / 44 45 22 32 / 26 6 45 26 / 38 48 34 42 / 8 24 61 1 / 34 2 0 32 / 63 58 58 33 / 40 49 18 '
            '24 / 18 26 21 51 / 24 26 18 15 / 23 19 0 3 / 63 47 0 60 / 44 13 59 51 / 23 58 12 59 / 52 14 27 59 / '
            '14 33 8 32 / 44 63 51 55 / 53 33 56 24 / 23 58 43 37 / 63 58 24 29 / 39 34 10 60 / 58 17 50 30 / 7 '
            '54 31 22 / 55 9 53 20 / 20 31 31 19 / 18 26 58 39 / 23 58 35 19 / 25 38 5 25 / 12 34 13 51 / 63 54 '
            '46 0 / 33 51 36 61 / 43 57 26 39 / 63 34 0 6 / 44 63 51 52 / 53 7 32 19 / 18 26 58 12 / 49 9 53 20',
        ]),
    'base_x_vector': dict(
        logits=[
            [0.5874714255332947, 1.9163482189178467, 0.6296650171279907, 2.3374435901641846],
        ],
        codes=[
            '44 29 37 0 / 49 0 42 25 / 60 60 3 41 / 18 39 4 40 / 7 60 46 2 / 16 7 55 53 / 17 0 28 53 / 19 14 4 32 '
            '/ 18 60 37 8 / 26 15 19 37 / 44 63 17 35 / 52 2 37 9 / 1 48 9 53 / 62 39 35 53 / 18 12 4 10 / 26 55 '
            '22 37 / 3 34 12 23 / 28 40 13 8 / 2 0 48 53 / 6 0 4 10 / 57 36 45 59',
        ]),
    'base_clone': dict(
        logits=[
            [1.9977916479110718, 1.726976990699768, 2.2595865726470947, -0.7831192016601562],
        ],
        codes=[
            '12 15 28 37 / 47 15 35 58 / 34 41 46 53 / 33 34 22 59 / 23 7 26 45 / 17 0 63 33 / 53 28 35 59 / 53 '
            '10 56 53 / 46 41 23 17 / 37 55 2 0 / 39 0 17 59 / 51 0 60 33 / 29 25 17 43 / 3 55 20 61 / 48 12 10 '
            '59 / 62 41 35 12 / 29 13 37 53 / 56 10 2 8 / 49 15 4 53 / 5 26 17 24 / 23 6 4 7 / 25 0 61 10 / 15 55 '
            '42 61',
        ]),
    'base_clone_text_outlasts_codes': dict(
        logits=[
            [3.324845790863037, 0.1760118007659912, -1.281630516052246, -1.7166717052459717],
        ],
        codes=[
            '26 26 2 41 / 25 16 37 53 / 62 0 60 26 / 28 60 46 37 / 28 54 17 47 / 57 3 43 59',
        ]),
    'base_clone_whole_text': dict(
        logits=[
            [1.9696311950683594, 1.6743956804275513, 2.297457218170166, -0.7281776666641235],
        ],
        codes=[
            '8 0 60 47 / 38 26 47 7 / 2 55 54 10 / 9 41 17 6 / 46 13 46 59 / 13 61 16 0 / 38 0 37 53 / 1 0 19 10 '
            '/ 5 60 11 10',
        ]),
    'base_batch_clone_and_x_vector': dict(
        logits=[
            [1.9977916479110718, 1.726976990699768, 2.2595865726470947, -0.7831192016601562],
            [0.5874714255332947, 1.9163482189178467, 0.6296650171279907, 2.3374435901641846],
        ],
        codes=[
            '38 26 4 47 / 40 6 31 14 / 16 0 45 53 / 17 15 19 33 / 61 11 1 10 / 40 15 27 53 / 60 0 10 10 / 8 7 46 '
            '10',
            '57 12 35 10 / 29 0 45 10 / 17 41 45 53 / 45 45 35 47 / 4 11 22 35 / 40 33 39 47 / 48 17 22 10 / 63 '
            '33 45 2 / 28 15 17 29 / 3 55 17 53 / 55 45 37 32 / 52 39 37 33 / 1 39 30 32',
        ]),
}


if __name__ == "__main__":  # the pinned process of run_pinned
    torch.set_num_threads(1)
    what, where = sys.argv[1], Path(sys.argv[2])
    print(json.dumps(compare_references(where) if what == "references" else run_cases(where)))
