"""Seed-VC v2's AR style converter (engines/seedvc/ar.py).

Against tests/parity/data/seedvc_ar (scripts/parity/seedvc_ar_references.py: seed-vc 0.4.3's own `NaiveWrapper`
with its KV caches, torch 2.13, under the parity pins), compared bitwise in a pinned subprocess, for two tiny
configurations (the tiny v2 model's GQA one, and one without GQA, with q/k/v biases, upstream's intermediate-size
rule, another rope base and norm epsilon): `generate` for conditions of several lengths, prompts of 0 and more
tokens, upstream's default sampling and others (top-p below and at 1, temperatures, repetition penalties above
and below 1), in float32 and under float16 CPU autocast with float16 caches. Compared: every step's logits, the
tokens, and the generator's state after (every draw taken, none more).
The weights come from `fill` (the writer's: scripts/parity/seedvc_weights.py), loaded through `load_ar` from
upstream's own key names (a `module.` prefix, the `model.` nesting).
In process: the tiny v2 model's own AR file loads, the yaml section parses (the released one's sizes), separate
wq/wk/wv join, bad sections, checkpoints, inputs and sampling values are one-line errors, EOS waits for ten
tokens, a step reads one value back, and every step's MaskInfo describes its dense mask.
"""

import functools
import json
import sys
from pathlib import Path

import pytest
import torch
import yaml

if __name__ == "__main__":  # run as the pinned script: tests/ (helpers.py) is not on the path yet
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from helpers import EmulatedGraphs, HostReads, bit_diff, parity_module, reference_dir, run_pinned  # noqa: E402

from mizuoto.core.errors import CheckpointError, InputError  # noqa: E402
from mizuoto.engines.seedvc import ar  # noqa: E402
from mizuoto.runtime.accel import dispatch  # noqa: E402

fill = parity_module("seedvc_weights").s2mel_fill  # the writer's seeded parameters

REFERENCES = Path(__file__).resolve().parents[1] / "parity" / "data" / "seedvc_ar"
MODEL = Path(__file__).resolve().parents[1] / "parity" / "data" / "seedvc_v2" / "model"


def our_ar(record: dict) -> ar.StyleAR:
    state = {name: fill(name, tuple(shape), record["seed"] + index) for index, (name, shape) in
             enumerate(record["params"])}
    assert set(state) <= set(record["state_keys"])
    return ar.load_ar({f"module.{k}": v for k, v in state.items()}, ar.ARConfig.from_section(record["section"]), "cpu")


class Recorded:
    """Every call's scores of `StyleAR.logits` (the prefill's and each step's), as the writer records them."""

    def __init__(self, model: ar.StyleAR):
        self.model, self.rows = model, []

    def __enter__(self):
        original = self.model.logits

        def logits(x):
            out = original(x)
            self.rows.append(out[0, -1].clone())
            return out

        self.model.logits = logits
        return self

    def __exit__(self, *exc):
        del self.model.logits
        self.model._steps = None  # its LayerSteps holds the wrapper


def reference_diffs(folder: Path) -> dict:
    from safetensors.torch import load_file

    refs = load_file(str(folder / "references.safetensors"))
    info = json.loads((folder / "references.json").read_text())
    models = {name: our_ar(record) for name, record in info["configs"].items()}
    out = {}
    for name, case in info["cases"].items():
        model = models[case["config"]]
        float16 = case["precision"] == "float16"
        cond = refs[case["cond"]].half() if float16 else refs[case["cond"]]
        generator = torch.Generator().manual_seed(case["seed"])
        with Recorded(model) as recorded, torch.inference_mode(), \
                torch.autocast("cpu", dtype=torch.float16, enabled=float16):
            tokens = model.generate(cond, refs[case["prompt"]], ar.Sampling(**case["sampling"]), generator,
                                    torch.float16 if float16 else torch.float32)
        out[f"{name}/tokens"] = 0.0 if tokens[0].tolist() == case["tokens"] else None
        logits = torch.stack(recorded.rows)
        out[f"{name}/logits"] = bit_diff(logits, refs[case["logits"]])
        out[f"{name}/logits_dtype"] = 0.0 if str(logits.dtype) == f"torch.{case['logits_dtype']}" else None
        out[f"{name}/generator"] = bit_diff(torch.rand(4, generator=generator), refs[case["after"]])
    return out


# ---------------------------------------------------------------------------------------------------
# Against upstream's references (pinned subprocess)


@functools.cache
def pinned_diffs() -> dict:
    return run_pinned(__file__, reference_dir("seedvc_ar"), timeout=600)


@functools.cache
def recorded() -> dict:
    return json.loads((REFERENCES / "references.json").read_text())


def test_references_are_reproduced_bit_for_bit():
    got = pinned_diffs()
    cases = recorded()["cases"]
    assert len(cases) == 8 and {c["config"] for c in cases.values()} == {"tiny", "wide"}
    assert {c["precision"] for c in cases.values()} == {"float32", "float16"}
    assert any(c["sampling"]["repetition_penalty"] != 1.0 for c in cases.values())
    for name in cases:
        for part in ("tokens", "logits", "logits_dtype", "generator"):
            assert f"{name}/{part}" in got, (name, part)
    # the generations are long enough to have passed the ten suppressed-EOS tokens and ended by EOS
    assert all(ar.MIN_TOKENS < len(c["tokens"]) < ar.MAX_STEPS for c in cases.values())
    bad = {name: value for name, value in got.items() if value != 0.0}
    assert not bad, bad


# ---------------------------------------------------------------------------------------------------
# In process


@functools.cache
def tiny_ar() -> ar.StyleAR:
    config = ar.ARConfig.from_section(yaml.safe_load((MODEL / "v2" / "vc_wrapper.yaml").read_text())["ar"])
    net = torch.load(str(MODEL / "v2" / "ar_base.pth"), map_location="cpu", weights_only=True)["net"]
    return ar.load_ar(net["ar"], config, "cpu")


def test_the_tiny_models_file_loads():
    model = tiny_ar()
    config = model.config
    # the yaml says head_dim 16 and upstream overrides it with dim // n_head
    assert (config.dim, config.n_head, config.n_local_heads, config.head_dim, config.eos) == (64, 4, 2, 16, 64)
    net = torch.load(str(MODEL / "v2" / "ar_base.pth"), map_location="cpu", weights_only=True)["net"]["ar"]
    assert torch.equal(model.sep_token_emb, net["module.sep_token_emb"])
    assert torch.equal(model.layers[1].attention.wqkv.weight, net["module.model.layers.1.attention.wqkv.weight"])
    assert model.freqs_cis.dtype == torch.bfloat16 and model.freqs_cis.shape == (4096, 8, 2)
    assert not model.training


def test_the_released_section_parses():
    from mizuoto.engines.seedvc.loaded_v2 import RELEASED

    config = ar.ARConfig.from_section(RELEASED["ar"])
    assert (config.dim, config.n_head, config.n_local_heads, config.head_dim, config.n_layer, config.vocab_size,
            config.intermediate_size, config.eos) == (768, 12, 2, 64, 12, 2049, 2304, 2048)
    # NaiveModelArgs' rule where the yaml gives no intermediate_size: 2/3 of 4 * dim, up to a multiple of 256
    assert ar.ARConfig.from_section({"model": {"config": {"dim": 48, "n_head": 3}}}).intermediate_size == 256
    assert ar.ARConfig.from_section({"model": {"config": {"dim": 48, "n_head": 3}}}).n_local_heads == 3


def test_bad_sections_and_checkpoints_are_one_line_errors():
    with pytest.raises(CheckpointError, match="no readable model.config"):
        ar.ARConfig.from_section({"model": {}})
    with pytest.raises(CheckpointError, match="even-sized heads"):
        ar.ARConfig.from_section({"model": {"config": {"dim": 64, "n_head": 3}}})
    with pytest.raises(CheckpointError, match="even-sized heads"):
        ar.ARConfig.from_section({"model": {"config": {"dim": 64, "n_head": 4, "n_local_heads": 3}}})
    state = dict(tiny_ar().state_dict())
    del state["output.weight"]
    with pytest.raises(CheckpointError, match="missing.*output.weight"):
        ar.load_ar(state, tiny_ar().config, "cpu")
    with pytest.raises(CheckpointError, match="not a state dict"):
        ar.load_ar([1, 2], tiny_ar().config, "cpu")


def test_separate_projections_join_as_upstreams_load_hook():
    model = tiny_ar()
    state = {k: v for k, v in model.state_dict().items()}
    for i in range(model.config.n_layer):
        q, k, v = state.pop(f"layers.{i}.attention.wqkv.weight").split(model.layers[i].attention.sizes)
        state.update({f"model.layers.{i}.attention.wq.weight": q, f"model.layers.{i}.attention.wk.weight": k,
                      f"model.layers.{i}.attention.wv.weight": v})
    joined = ar.load_ar(state, model.config, "cpu")
    assert all(torch.equal(a, b) for a, b in zip(joined.state_dict().values(), model.state_dict().values(),
                                                     strict=True))


def test_bad_inputs_and_sampling_values_are_one_line_errors():
    model = tiny_ar()
    with pytest.raises(InputError, match=r"one condition \(1, tokens, 64\)"):
        model.generate(torch.zeros(1, 5, 32), torch.zeros(1, 3, dtype=torch.long), ar.Sampling(), None, torch.float32)
    with pytest.raises(InputError, match="prompt token ids"):
        model.generate(torch.zeros(1, 5, 64), torch.zeros(1, 3), ar.Sampling(), None, torch.float32)
    with pytest.raises(InputError, match="use a shorter reference"):
        model.generate(torch.zeros(1, 3000, 64), torch.zeros(1, 1090, dtype=torch.long), ar.Sampling(), None,
                       torch.float32)
    for values, message in (({"top_p": 0.0}, "top_p"), ({"temperature": 0.0}, "temperature"),
                            ({"repetition_penalty": -1.0}, "repetition_penalty")):
        with pytest.raises(InputError, match=message):
            ar.Sampling(**values)


def generate(model, seed: int, sampling: ar.Sampling | None = None, cond_len: int = 13, prompt_len: int = 8):
    sampling = sampling or ar.Sampling()
    g = torch.Generator().manual_seed(seed)
    cond = torch.randn(1, cond_len, model.config.dim, generator=g)
    prompt = torch.randint(0, model.config.eos, (1, prompt_len), generator=g)
    with torch.inference_mode():
        return model.generate(cond, prompt, sampling, torch.Generator().manual_seed(seed), torch.float32)


def test_eos_waits_for_ten_tokens_and_is_never_returned():
    model = tiny_ar()
    lengths = []
    for seed in range(6):
        tokens = generate(model, seed, ar.Sampling(top_p=1.0, temperature=5.0))  # near uniform: EOS comes early
        assert tokens.dtype == torch.long and tokens.shape[0] == 1
        assert not (tokens == model.config.eos).any()
        lengths.append(tokens.shape[1])
    assert min(lengths) >= ar.MIN_TOKENS and min(lengths) < 40, lengths


def test_a_step_reads_one_value_back():
    model = tiny_ar()
    g = torch.Generator().manual_seed(3)
    cond, prompt = torch.randn(1, 9, 64, generator=g), torch.randint(0, 64, (1, 4), generator=g)
    cache = ar.KVCache(model.config, "cpu", torch.float32)
    with torch.inference_mode():
        rope = model.freqs_cis[cache.steps[:15]]
        logits = model.prefill(torch.cat([model.sep_token_emb.expand(1, 1, -1), cond,
                                          model.sep_token_emb.expand(1, 1, -1), model.embeddings(prompt)], dim=1),
                               torch.cat([cache.steps[:10], cache.steps[:5]]), cache)
        assert rope.shape[0] == 15 and logits.shape == (1, 1, 65)
        suppress = torch.zeros(65, dtype=torch.bool)
        token = ar.choose(logits, None, suppress, ar.Sampling(repetition_penalty=1.3), g)
        previous, dispatch.DEBUG = dispatch.DEBUG, False  # (the tests' MaskInfo checks read back)
        try:
            with HostReads() as mode:
                logits = model.steps(None)(token.view(1, 1), model.freqs_cis[cache.steps[5:6]],
                                           ar.StepContext.at(cache, cache.steps[15:16]))
                token = ar.choose(logits, token, suppress, ar.Sampling(repetition_penalty=1.3), g)
        finally:
            dispatch.DEBUG = previous
        assert mode.reads == []  # the EOS check (int(token)) is generate's one read


def test_every_step_mask_info_describes_its_dense_mask():
    model = tiny_ar()
    previous = dispatch.DEBUG
    dispatch.DEBUG = True  # every attention call checks its MaskInfo against its dense mask
    try:
        tokens = generate(model, 4)
    finally:
        dispatch.DEBUG = previous
    assert tokens.shape[1] >= ar.MIN_TOKENS


def emulated_run(model, graphs, seed: int = 6):
    g = torch.Generator().manual_seed(seed)
    cond, prompt = torch.randn(1, 11, 64, generator=g), torch.randint(0, 64, (1, 7), generator=g)
    with torch.inference_mode():
        return model.generate(cond, prompt, ar.Sampling(top_p=0.8, repetition_penalty=1.4),
                              torch.Generator().manual_seed(seed), torch.float32, graphs)


def test_graph_segments_give_eager_tokens_and_a_failed_capture_runs_eagerly():
    """The step as LayerSteps segments under emulated CUDA graphs (captured once, then replayed from static
    buffers): the eager tokens; a capture that fails (the second segment) leaves that step eager, same tokens."""
    model = ar.StyleAR(tiny_ar().config)
    model.load_state_dict(tiny_ar().state_dict())
    want = emulated_run(model, None)
    graphs = EmulatedGraphs()
    assert torch.equal(emulated_run(model, graphs), want) and want.shape[1] > ar.MIN_TOKENS
    assert graphs.captures == model.config.n_layer + 1  # every segment once; every later step replays
    assert torch.equal(emulated_run(model, graphs), want) and graphs.captures == model.config.n_layer + 1
    failing = EmulatedGraphs(fail={2})
    assert torch.equal(emulated_run(model, failing), want)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("float16", [False, True])
def test_on_cuda_graph_segments_give_eager_tokens(float16):
    from mizuoto.runtime.graphs import Graphs

    model = tiny_ar().to("cuda")
    try:
        g = torch.Generator("cuda").manual_seed(2)
        cond = torch.randn(1, 40, 64, device="cuda", generator=g)
        prompt = torch.randint(0, 64, (1, 30), device="cuda", generator=g)
        runs = []
        for graphs in (None, Graphs("cuda")):
            with torch.inference_mode(), torch.autocast("cuda", dtype=torch.float16, enabled=float16):
                runs.append(model.generate(cond, prompt, ar.Sampling(), torch.Generator("cuda").manual_seed(3),
                                           torch.float16 if float16 else torch.float32, graphs))
        assert torch.equal(runs[0], runs[1]) and runs[0].shape[1] > ar.MIN_TOKENS
    finally:
        model.to("cpu")
        model._steps = None


def test_the_site_is_exact_only():
    assert ar.ATTENTION.name == "seedvc.ar" and not ar.ATTENTION.approx_ok


if __name__ == "__main__":  # the pinned subprocess of the reference test
    torch.set_num_threads(1)
    print(json.dumps(reference_diffs(Path(sys.argv[1]))))
