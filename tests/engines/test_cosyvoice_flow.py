"""CosyVoice 2's and CosyVoice 3's flows (engines/cosyvoice/{flow,conformer,unet,dit,masks}.py).

Against tests/parity/data/cosyvoice_flow (scripts/parity/cosyvoice_flow_references.py: upstream's own modules at
FunAudioLLM/CosyVoice ace7c47 with Matcha-TTS dd9105b under the parity pins, tiny models filled by
cosyvoice_weights.fill). In a pinned subprocess: each estimator's forward (the Matcha U-Net at one and at two levels,
the DiT) on the solver's batch of two, streaming off and on; CosyVoice 2's Conformer encoder (streaming off, on,
with a look-ahead context, a padded batch); CosyVoice 3's look-ahead layer; and both flows' `inference` offline, as a
streaming chunk, as the last streaming chunk and without a prompt. Bitwise where the set's fingerprint is this
machine's; elsewhere (tests/fallback.py) within TOLERANCE (measured spread: spread.json). In process: the masks
need no host read, upstream's repair of a row that sees nothing, the fixed noise and the global generator, the
DiT's LayerSteps with emulated graphs, the whole solve without a host read and replayed through emulated graphs
(-m gpu: CUDA graphs) as the eager mel, every attention call at its site with upstream's mask, one-line errors.
"""

import functools
import json
import sys
from pathlib import Path

import pytest
import torch

if __name__ == "__main__":  # run as the pinned script: tests/ (helpers.py) is not on the path yet
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import cosyvoice_parts  # noqa: E402
from fallback import Comparison  # noqa: E402
from helpers import EmulatedGraphs, HostReads, reference_sets, run_pinned  # noqa: E402

from mizuoto.core.errors import InputError  # noqa: E402
from mizuoto.engines.cosyvoice import dit, flow, masks, unet  # noqa: E402

SET = "cosyvoice_flow"
TOLERANCE = 1e-4
weights = cosyvoice_parts.weights
ESTIMATOR_INPUTS = ("x", "mask", "mu", "t", "spks", "cond")


def committed() -> Path:
    return reference_sets().SETS[SET].committed


@functools.cache
def info() -> dict:
    return json.loads((committed() / "references.json").read_text())


@functools.cache
def inputs() -> dict:
    from safetensors.torch import load_file

    return load_file(str(committed() / "references.safetensors"))


def build(recorded: dict, refs: dict) -> dict:
    return cosyvoice_parts.flows(recorded, refs)


def estimator(models: dict, name: str):
    return models[name] if name == "unet2" else models[name].decoder.estimator


def run_flow(models: dict, refs: dict, key: str, case: dict, **kwargs) -> torch.Tensor:
    version = key.split("/")[0]
    return models[version].inference(
        refs[f"{key}/token"], torch.tensor([case["tokens"]], dtype=torch.int32), refs[f"{key}/prompt_token"],
        torch.tensor([case["prompt_tokens"]], dtype=torch.int32), refs[f"{key}/prompt_feat"], refs[f"{key}/embedding"],
        streaming=case["streaming"], finalize=case["finalize"], **kwargs)


def ours(folder: Path, out: Path) -> dict:
    from safetensors.torch import load_file, save_file

    refs = load_file(str(folder / "references.safetensors"))
    recorded = json.loads((folder / "references.json").read_text())
    models = build(recorded, refs)
    results = {}
    with torch.inference_mode():
        for name in recorded["seeds"]:
            args = [refs[f"{name}/estimator/{k}"] for k in ESTIMATOR_INPUTS]
            for mode, streaming in (("full", False), ("stream", True)):
                results[f"{name}/estimator/out_{mode}"] = estimator(models, name)(*args, streaming=streaming)
        encoder, xs = models["cv2"].encoder, refs["cv2/encoder/xs"]
        results["cv2/encoder/full"] = encoder(xs, torch.tensor([11]))
        results["cv2/encoder/stream"] = encoder(xs, torch.tensor([11]), streaming=True)
        results["cv2/encoder/context_stream"] = encoder(xs, torch.tensor([14]), context=refs["cv2/encoder/context"],
                                                        streaming=True)
        results["cv2/encoder/batch"] = encoder(refs["cv2/encoder/batch_xs"], torch.tensor([11, 7]))
        lookahead = models["cv3"].pre_lookahead_layer
        results["cv3/lookahead/plain"] = lookahead(refs["cv3/lookahead/inputs"])
        results["cv3/lookahead/with_context"] = lookahead(refs["cv3/lookahead/inputs"], refs["cv3/lookahead/context"])
        for key, case in recorded["cases"].items():
            results[f"{key}/mel"] = run_flow(models, refs, key, case)
    save_file({k: v.contiguous() for k, v in results.items()}, str(out))
    return {"saved": str(out)}


def test_upstreams_flows(tmp_path, record_property):
    from safetensors.torch import load_file

    out = tmp_path / "ours.safetensors"
    run_pinned(__file__, committed(), out)
    comparison = Comparison.for_set(SET)
    theirs, mine = inputs(), load_file(str(out))
    assert set(mine) == set(info()["spread"]["max"])  # every output the writer measured is compared
    for name in sorted(mine):
        comparison.deterministic(name, mine[name], theirs[name], TOLERANCE)
    record_property("parity_mode", comparison.mode)
    print(f"{SET} parity: {comparison.mode} ({comparison.why})", *comparison.checked, sep="\n  ")


def test_the_set_covers_streaming_padding_both_versions_and_every_parameter():
    recorded, refs = info(), inputs()
    assert recorded["upstream"]["commit"].startswith("ace7c47") and not recorded["upstream"]["modified"]
    assert recorded["matcha"]["commit"].startswith("dd9105b") and not recorded["matcha"]["modified"]
    assert recorded["configs"]["dit"]["heads"] > 1  # head 0 alone is rotated: observable only with several heads
    assert len(recorded["configs"]["unet_two_levels"]["channels"]) == 2  # the down/up-sampling levels run
    cases = recorded["cases"].values()
    assert {(c["streaming"], c["finalize"]) for c in cases} == {(False, True), (True, False), (True, True)}
    assert any(c["prompt_tokens"] == 0 for c in cases)
    for name in recorded["seeds"]:  # the streaming masks are seen
        assert not torch.equal(refs[f"{name}/estimator/out_full"], refs[f"{name}/estimator/out_stream"])
    assert not torch.equal(refs["cv2/encoder/full"], refs["cv2/encoder/stream"])
    models = build(recorded, refs)
    for name, model in models.items():  # our module names are upstream's (flow.pt's keys)
        assert list(model.state_dict()) == recorded["state_dict"][name]
    for entries in recorded["entries"].values():  # nothing is left at upstream's zero init
        for name, shape in entries:
            assert weights.fill(name, tuple(shape), 0).abs().max() > 0, name
    assert max(recorded["spread"]["max"].values()) * 5 < TOLERANCE


# ---------------------------------------------------------------------------------------------------
# In process


@pytest.fixture(scope="module")
def models():
    return build(info(), inputs())


def test_chunk_masks_are_upstreams_rule_without_a_host_read():
    keys = torch.tensor([[True] * 7, [True] * 4 + [False] * 3, [False] * 7])[:, None]
    with HostReads() as mode:
        full, chunks = masks.chunk_mask(keys), masks.chunk_mask(keys, 3)
    assert mode.reads == []
    # upstream: padding only without chunks, & the block-causal chunks with them; rows seeing nothing see all
    assert torch.equal(full[:2], keys[:2]) and full[2].all()
    block = torch.tensor([[j < (i // 3 + 1) * 3 for j in range(7)] for i in range(7)])
    assert torch.equal(chunks[0], block) and torch.equal(chunks[1], block & keys[1]) and chunks[2].all()
    assert torch.equal(masks.to_bias(torch.tensor([True, False]), torch.float32), torch.tensor([0.0, -1.0e10]))


def test_the_fixed_noise_is_upstreams_and_leaves_the_global_generator_alone():
    before = torch.random.get_rng_state()
    noise = flow.fixed_noise()
    assert torch.equal(torch.random.get_rng_state(), before)
    torch.manual_seed(0)  # upstream: set_all_random_seed(0), then randn([1, 80, 50 * 300])
    assert torch.equal(noise, torch.randn([1, 80, 50 * 300]))
    torch.random.set_rng_state(before)


def estimator_args(name: str) -> list:
    return [inputs()[f"{name}/estimator/{k}"] for k in ESTIMATOR_INPUTS]


@pytest.mark.parametrize("streaming", [False, True], ids=["full", "streaming"])
def test_the_dit_through_emulated_graphs_is_the_eager_forward(models, streaming):
    est = estimator(models, "cv3")
    with torch.inference_mode():
        want = est(*estimator_args("cv3"), streaming=streaming)
        graphs = EmulatedGraphs()
        got = est(*estimator_args("cv3"), streaming=streaming, graphs=graphs)
    assert torch.equal(got, want) and graphs.captures == est.config.depth + 1


@pytest.mark.parametrize("name,site", [("cv2", "unet"), ("cv3", "dit")])
def test_every_attention_call_is_the_sites_with_upstreams_mask(models, monkeypatch, name, site):
    module = {"unet": unet, "dit": dit}[site]
    calls = []
    reference = module.ATTENTION.reference
    monkeypatch.setattr(module.ATTENTION, "reference", lambda q, k, v, mask, *rest: calls.append((q.shape, mask))
                        or reference(q, k, v, mask, *rest))
    key = f"{name}/flow/stream_last"
    with torch.inference_mode():
        run_flow(models, inputs(), key, info()["cases"][key])
    est = estimator(models, name)
    per_forward = (len(est.down_blocks) + len(est.mid_blocks) + len(est.up_blocks)) * est.config.n_blocks \
        if site == "unet" else est.config.depth
    assert len(calls) == per_forward * flow.STEPS  # the guided batch of two: one call per block and step
    shape, mask = calls[0]
    frames, chunk = shape[2], est.config.static_chunk_size
    block = masks.block_causal(frames, chunk)
    if site == "unet":  # additive 0 / -1e10, repeated per head as diffusers prepares it
        assert mask.dtype == torch.float32 and mask.shape == (2, shape[1], frames, frames)
        assert torch.equal(mask == 0, block.expand(2, shape[1], frames, frames))
    else:  # boolean (B, 1, T, T)
        assert mask.dtype == torch.bool and mask.shape == (2, 1, frames, frames)
        assert torch.equal(mask, block.expand(2, 1, frames, frames))
    assert module.ATTENTION.name == f"cosyvoice.{site}" and module.ATTENTION.approx_ok


def test_a_bound_policy_runs_the_sites(models):
    from mizuoto.runtime.accel import policy_for
    from mizuoto.runtime.context import RequestContext

    refs, key = inputs(), "cv3/flow/offline"
    case = info()["cases"][key]
    with torch.inference_mode():
        auto = run_flow(models, refs, key, case)
        run = policy_for("math").start()
        with RequestContext(0, accel=run).step():
            math = run_flow(models, refs, key, case)
    assert sum(run.used.values()) == models["cv3"].config.dit.depth * flow.STEPS
    torch.testing.assert_close(math, auto, rtol=0, atol=1e-3)


def test_before_step_runs_before_every_euler_step(models):
    refs, key = inputs(), "cv2/flow/no_prompt"
    calls = []
    with torch.inference_mode():
        run_flow(models, refs, key, info()["cases"][key], before_step=lambda: calls.append(1))
    assert len(calls) == flow.STEPS


@pytest.mark.parametrize("version", ["cv2", "cv3"])
def test_the_solve_reads_nothing_back_from_the_device(models, version):
    key = f"{version}/flow/stream_chunk"
    case = info()["cases"][key]
    model = models[version]
    with torch.inference_mode():
        model.decoder.noise(1, torch.zeros(1))  # the fixed table is built once per device, before any capture
        with HostReads() as mode:
            run_flow(models, inputs(), key, case)
    assert mode.reads == []


@pytest.mark.parametrize("version", ["cv2", "cv3"])
def test_the_solve_replayed_through_emulated_graphs_is_the_eager_mel(models, version):
    refs, recorded = inputs(), info()
    graphs = EmulatedGraphs()
    solve = flow.SolveGraphs(models[version].decoder, graphs)
    cases = {k: c for k, c in recorded["cases"].items() if k.startswith(version)}
    checks = []
    with torch.inference_mode():
        for _ in range(2):  # the second round replays what the first captured
            for key, case in cases.items():
                want = run_flow(models, refs, key, case)
                got = run_flow(models, refs, key, case, solve=solve, generator=graphs.generator,
                               before_step=lambda: checks.append(1))
                assert torch.equal(got, want), key
    signatures = {(refs[f"{k}/token"].shape[1] + refs[f"{k}/prompt_token"].shape[1], c["streaming"], c["finalize"])
                  for k, c in cases.items()}
    assert graphs.captures == len(signatures) and len(checks) == 2 * len(cases)  # one check per graphed solve


@pytest.mark.gpu
@pytest.mark.parametrize("version", ["cv2", "cv3"])
def test_on_cuda_the_graphed_solve_is_the_eager_mel(version):
    from mizuoto.runtime.graphs import Graphs

    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    device = torch.device("cuda")
    refs = {k: v.to(device) for k, v in inputs().items()}
    models = {k: v.to(device) for k, v in build(info(), inputs()).items()}
    graphs = Graphs(device)
    solve = flow.SolveGraphs(models[version].decoder, graphs)
    generator = torch.Generator(device).manual_seed(0)
    with torch.inference_mode(), torch.cuda.device(device):
        for key, case in info()["cases"].items():
            if key.startswith(version):
                want = run_flow(models, refs, key, case)
                for _ in range(2):  # the capture, then a replay
                    got = run_flow(models, refs, key, case, solve=solve, generator=generator)
                    assert torch.equal(got, want), key


def test_bad_requests_are_one_line_errors(models):
    refs, key = inputs(), "cv3/flow/offline"
    model = models["cv3"]
    with pytest.raises(InputError, match="more than its"):
        model.inference(refs[f"{key}/token"][:, :2], torch.tensor([2]), refs[f"{key}/prompt_token"][:, :1],
                        torch.tensor([1]), refs[f"{key}/prompt_feat"], refs[f"{key}/embedding"])
    with pytest.raises(InputError, match="one request at a time"):
        model.inference(refs[f"{key}/token"].expand(2, -1), torch.tensor([13, 13]), refs[f"{key}/prompt_token"],
                        torch.tensor([6]), refs[f"{key}/prompt_feat"], refs[f"{key}/embedding"])
    with pytest.raises(InputError, match="speak a shorter text"):
        model.decoder.noise(flow.NOISE_FRAMES + 1, torch.zeros(1))
    assert "\n" not in str(InputError("x"))
    with pytest.raises(ValueError, match="version must be 2 or 3"):
        flow.Flow(flow.FlowConfig(1))


if __name__ == "__main__":  # the pinned subprocess
    print(json.dumps(ours(Path(sys.argv[1]), Path(sys.argv[2]))))
