"""Qwen3-TTS generation (token ids -> codes of every codebook) on tiny random models.

Two sets of references from upstream (qwen-tts 0.1.1, transformers 4.57.3, under the parity pins), both
in the qwen3tts reference set valid on this machine (`reference_dir("qwen3tts")`: tests/parity/data/qwen3tts,
or the set written here by upstream; `python scripts/parity/reference_sets.py write qwen3tts` writes it),
compared in a fresh process under the same pins (the kernel level must be set before torch loads), by
running this file as a script:

- the set's references (scripts/parity/qwen3tts_references.py): 16 requests through upstream's
  wrapper on three tiny published-layout folders; compared bit for bit: the talker prefill embeddings,
  attention mask and trailing text, the prefill and step logits of the talker and the predictor where
  recorded, and every code;
- the set's golden/generate.json (scripts/parity/qwen3tts_generate_live.py --golden DIR, which reads
  this file's cases and `model_folder`): the tiny folders `model_folder` writes, among them one with 16
  codebooks (the released models' 15 predictor draws per frame) and one with attention biases, through
  upstream's generate after transformers' from_pretrained.

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
from helpers import reference_dir, run_pinned  # noqa: E402

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
    references = reference_dir("qwen3tts")
    info = json.loads((references / "references.json").read_text())
    assert info["num_threads"] == 1 and info["ATEN_CPU_CAPABILITY"] == "avx2"
    results = run_self_pinned("references", references)
    expected = {f"{case['name']}/{key}" for case in info["cases"] for key in case["tensors"]
                if not key.startswith(("wav_", "input_ids_", "instruct_ids_", "ref_"))}
    assert set(results) == expected
    assert [name for name, same in results.items() if not same] == []


def run_self_pinned(what: str, where: Path) -> dict:
    """This file as a script in a process at one thread and ATEN_CPU_CAPABILITY=avx2 -> its JSON."""
    return run_pinned(__file__, what, where)


def test_identical_to_the_golden_codes(tmp_path):
    """Against upstream on CASES (golden/generate.json): per case, each row's codes (frames x G) and the
    first four prefill scores of each row."""
    golden = json.loads((reference_dir("qwen3tts") / "golden" / "generate.json").read_text())
    ours = run_self_pinned("golden", tmp_path)
    assert set(ours) == set(golden) == set(CASES)
    for name, expected in golden.items():
        got = ours[name]
        assert got["logits"] == expected["logits"], f"{name}: prefill scores differ"
        want = expected["codes"]
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


if __name__ == "__main__":  # the pinned process of run_pinned
    torch.set_num_threads(1)
    what, where = sys.argv[1], Path(sys.argv[2])
    print(json.dumps(compare_references(where) if what == "references" else run_cases(where)))
