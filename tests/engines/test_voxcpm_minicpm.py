"""VoxCPM's MiniCPM-4 stacks, local encoder and local DiTs, without upstream installed.

Against upstream (voxcpm 2.0.3): tests/parity/data/voxcpm/minicpm holds the weights, inputs and outputs of
tiny upstream models (scripts/parity/voxcpm_minicpm_references.py, one thread, ATEN_CPU_CAPABILITY=avx2),
compared bit for bit in a process pinned the same way (this file run as a script): the LongRoPE tables, the
scaled text embeddings, causal and bidirectional prefills with the keys/values they return, decode steps
against the static cache at upstream's capacity (128) and at smaller ones that are multiples of 8 (the
cache-capacity trap, see minicpm.KVCache), the keys written, the local encoder and both DiT versions.

In process: the config (reading, derivations, errors), the decode step's graph contract (LayerSteps
segments and a whole-step capture, emulated, give the eager bits; no device reads), the attention sites,
the caches' errors and building on the meta device.
"""

from __future__ import annotations

import json
import math
import sys
from functools import partial
from pathlib import Path

import pytest
import torch

from mizuoto.core.errors import CheckpointError
from mizuoto.engines.voxcpm import minicpm
from mizuoto.engines.voxcpm.local import LocalDiT, LocalEncoder, timestep_embedding
from mizuoto.engines.voxcpm.minicpm import DecodeSteps, KVCache, MiniCPM, MiniCPMConfig, capacity_for
from mizuoto.runtime.accel import dispatch, policy_for
from mizuoto.runtime.context import RequestContext

if __name__ == "__main__":  # run as the pinned script: tests/ (helpers.py) is not on the path yet
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from helpers import reference_dir, run_pinned  # noqa: E402

DATA = Path(__file__).resolve().parents[1] / "parity" / "data" / "voxcpm" / "minicpm"


# ---------------------------------------------------------------------------------------------------
# Against upstream's references


def build(name: str, case: dict, refs: dict):
    """Our module for a reference case, with upstream's weights loaded by their own names."""
    config = MiniCPMConfig.from_dict(case["config"])
    if case["kind"] == "lm":
        module = MiniCPM(config)
    elif case["kind"] == "encoder":
        module = LocalEncoder(config, case["feat_dim"])
    else:
        module = LocalDiT(config, case["in_channels"], case["version"])
    prefix = f"{name}/weights/"
    module.load_state_dict({k[len(prefix):]: v for k, v in refs.items() if k.startswith(prefix)}, strict=True)
    return module.eval()


def decode(model: MiniCPM, case: dict, refs: dict, name: str, capacity: int, steps=None) -> dict:
    """Prefill, fill a cache of `capacity`, then the recorded steps (through `steps` when given)."""
    _, keys_values = model(refs[f"{name}/prefill_in"], causal=True)
    cache = model.new_cache(case["batch"], capacity)
    cache.fill(keys_values)
    out = {}
    for s in range(case["steps"]):
        x, position = refs[f"{name}/step{s}_in"], cache.position()
        out[f"{name}/step{s}_out"] = (model.step(x, position, cache) if steps is None else steps(x, position, cache)
                                      ).clone()
        cache.advance()
    n = case["prompt"] + case["steps"]
    out[f"{name}/cache_k"], out[f"{name}/cache_v"] = cache.keys[:, :, :, :n], cache.values[:, :, :, :n]
    return out


def reference_outputs(folder: Path) -> dict:
    """name -> (ours, upstream's) for every reference (run in the pinned subprocess)."""
    from safetensors.torch import load_file

    info = json.loads((folder / "references.json").read_text())
    # copied into fresh (64-byte aligned) memory, as upstream's inputs were: CPU matrix kernels round some
    # small products differently for data at the file's offsets
    refs = {k: v.clone() for k, v in load_file(str(folder / "references.safetensors")).items()}
    out = {}
    with torch.no_grad():
        for name, case in info["cases"].items():
            module = build(name, case, refs)
            if case["kind"] == "lm":
                ours = {}
                if module.rope is not None:
                    ours[f"{name}/rope_cos"], ours[f"{name}/rope_sin"] = module.rope.cos, module.rope.sin
                if f"{name}/ids" in refs:
                    ours[f"{name}/embedded"] = module.embed(refs[f"{name}/ids"])
                hidden, keys_values = module(refs[f"{name}/prefill_in"], causal=True)
                ours[f"{name}/prefill_out"] = hidden
                for i, (k, v) in enumerate(keys_values):
                    ours[f"{name}/prefill_k{i}"], ours[f"{name}/prefill_v{i}"] = k, v
                ours[f"{name}/bidirectional_out"] = module(refs[f"{name}/bidirectional_in"], causal=False)[0]
                out.update({k: (v, refs[k]) for k, v in ours.items()})
                n = case["prompt"] + case["steps"]
                # upstream's capacity, the rounded one the engine uses, the tightest multiple of 8
                for capacity in sorted({case["cache_length"], capacity_for(n), -(-n // 8) * 8}):
                    for key, value in decode(module, case, refs, name, capacity).items():
                        out[f"{key}@{capacity}"] = (value, refs[key])
            elif case["kind"] == "encoder":
                out[f"{name}/out"] = (module(refs[f"{name}/in"]), refs[f"{name}/out"])
                out[f"{name}/one_patch_out"] = (module(refs[f"{name}/one_patch_in"]), refs[f"{name}/one_patch_out"])
            else:
                for call in range(case["calls"]):
                    args = [refs[f"{name}/call{call}_{k}"] for k in ("x", "mu", "t", "cond", "dt")]
                    out[f"{name}/call{call}_out"] = (module(*args), refs[f"{name}/call{call}_out"])
    return out


def _reference_names() -> list[str]:
    path = DATA / "references.json"
    if not path.is_file():
        return []
    info = json.loads(path.read_text())
    inputs = ("_in", "/in", "/ids", "_x", "_mu", "_t", "_cond", "_dt")
    return sorted(n for n in info["tensors"] if "/weights/" not in n and not n.endswith(inputs))


@pytest.fixture(scope="module")
def ours_pinned():
    return run_pinned(__file__, reference_dir("voxcpm/minicpm"), timeout=300)


def test_references_are_there():
    assert len(_reference_names()) > 40, "run scripts/parity/voxcpm_minicpm_references.py"


@pytest.mark.skipif(not _reference_names(), reason="no references in tests/parity/data/voxcpm/minicpm")
@pytest.mark.parametrize("name", _reference_names())
def test_identical_to_upstreams_references(ours_pinned, name):
    compared = {k: v for k, v in ours_pinned.items() if k == name or k.startswith(name + "@")}
    assert compared, f"{name} was not compared"
    assert all(v == 0.0 for v in compared.values()), compared


def test_decode_is_compared_at_several_capacities(ours_pinned):
    capacities = {k.rpartition("@")[2] for k in ours_pinned if k.startswith("lm_mup_long/step0_out@")}
    assert capacities == {"40", "64", "128"}  # 29 + 7 positions: multiple of 8, capacity_for, upstream's


# ---------------------------------------------------------------------------------------------------
# Configuration

LM_CONFIG = {  # VoxCPM2's lm_config, its factor lists shortened to what a head dim of 8 needs
    "bos_token_id": 1, "eos_token_id": 2, "hidden_size": 32, "intermediate_size": 48,
    "max_position_embeddings": 64, "num_attention_heads": 4, "num_hidden_layers": 2, "num_key_value_heads": 2,
    "rms_norm_eps": 1e-05, "rope_theta": 10000, "kv_channels": 8,
    "rope_scaling": {"type": "longrope", "long_factor": [1.0, 2.0, 3.0, 4.0], "short_factor": [1.0, 1.5, 1.7, 2.0],
                     "original_max_position_embeddings": 64},
    "vocab_size": 40, "use_mup": False, "scale_emb": 12, "dim_model_base": 256, "scale_depth": 1.4,
}


def test_config_reads_lm_config_and_derives_the_other_stacks():
    config = MiniCPMConfig.from_dict(LM_CONFIG)
    assert (config.head_dim, config.embedding_scale, config.residual_scale, config.rope_scale) == (8, 1.0, None, 1.0)
    assert config.rope_factors == (1.0, 1.5, 1.7, 2.0)  # max == original: the short factors
    assert isinstance(config.rope_theta, float) and config.kv_channels == 8 and not config.no_rope
    residual = config.residual(8, no_rope=True)  # VoxCPM2
    assert (residual.num_hidden_layers, residual.vocab_size, residual.no_rope, residual.hidden_size) == (8, 0, True, 32)
    assert config.residual(6).no_rope is False  # VoxCPM 0.5B / 1.5 keep lm_config's
    local = config.local(16, 32, 2, 1, kv_channels=None, source="dit_config")
    assert (local.hidden_size, local.intermediate_size, local.num_attention_heads, local.num_hidden_layers,
            local.kv_channels, local.vocab_size, local.num_key_value_heads, local.head_dim) == (16, 32, 2, 1, None,
                                                                                                0, 2, 8)
    mup = MiniCPMConfig.from_dict({**LM_CONFIG, "use_mup": True, "max_position_embeddings": 128})
    assert mup.embedding_scale == 12.0 and mup.residual_scale == 1.4 / math.sqrt(2)
    assert mup.rope_factors == (1.0, 2.0, 3.0, 4.0) and mup.rope_scale == math.sqrt(1 + math.log(2) / math.log(64))
    defaults = MiniCPMConfig.from_dict({k: v for k, v in LM_CONFIG.items() if k not in ("use_mup", "kv_channels")})
    assert defaults.use_mup and defaults.kv_channels is None and defaults.head_dim == 8


def _one_line(exc: pytest.ExceptionInfo) -> str:
    assert "\n" not in str(exc.value)
    return str(exc.value)


@pytest.mark.parametrize("change,expected", [
    (lambda d: d.pop("hidden_size"), "lm_config lacks hidden_size"),
    (lambda d: d.pop("eos_token_id"), "lm_config lacks eos_token_id"),
    (lambda d: d.update(rope_scaling=None), "lm_config.rope_scaling is missing"),
    (lambda d: d["rope_scaling"].pop("original_max_position_embeddings"),
     "lm_config.rope_scaling lacks original_max_position_embeddings"),
    (lambda d: d["rope_scaling"].update(long_factor=[]), "long_factor must be a non-empty list of numbers"),
    (lambda d: d["rope_scaling"].update(short_factor=[1.0, 2.0]), "short_factor has 2 entries; the head dim 8 needs 4"),
    (lambda d: d.update(num_key_value_heads=3), "4 attention heads cannot share 3 key/value heads"),
    (lambda d: d.update(hidden_size="32"), "lm_config.hidden_size must be an integer, got '32'"),
    (lambda d: d.update(num_hidden_layers=2.5), "num_hidden_layers must be an integer"),
    (lambda d: d.update(use_mup="yes"), "use_mup must be true or false"),
    (lambda d: d.update(num_hidden_layers=0), "num_hidden_layers must be at least 1, got 0"),
    (lambda d: d.update(kv_channels=7), "the head dim 7 must be even"),
    (lambda d: d.update(vocab_size=-1), "vocab_size must be 0"),
    (lambda d: d["rope_scaling"].update(original_max_position_embeddings=1), "must be at least 2, got 1"),
])
def test_bad_configs_give_one_line_checkpoint_errors(change, expected):
    data = json.loads(json.dumps(LM_CONFIG))
    change(data)
    with pytest.raises(CheckpointError) as exc:
        MiniCPMConfig.from_dict(data)
    assert expected in _one_line(exc)


def test_derived_configs_are_checked_and_name_their_section():
    config = MiniCPMConfig.from_dict(LM_CONFIG)
    with pytest.raises(CheckpointError, match="dit_config: 3 attention heads cannot share 2"):
        config.local(18, 32, 3, 1, kv_channels=8, source="dit_config")
    with pytest.raises(CheckpointError, match=r"encoder_config: rope_scaling.long_factor has 4 entries; the head "
                                              r"dim 16 needs 8"):
        config.local(32, 32, 2, 1)  # head dim 32 / 2 against the LM's 4 factors: upstream fails too
    assert config.residual(1, no_rope=True).local(32, 32, 2, 1).no_rope  # no RoPE, no factor check
    with pytest.raises(TypeError):
        config.replace(hidden=3)
    with pytest.raises(CheckpointError, match="must be a JSON object"):
        MiniCPMConfig.from_dict([1])


# ---------------------------------------------------------------------------------------------------
# Modules on a tiny random config


def randomised(module, seed: int = 0):
    with torch.no_grad():
        for index, (name, p) in enumerate(sorted(module.named_parameters())):
            u = torch.rand(p.shape, generator=torch.Generator().manual_seed(seed * 100 + index)) * 2 - 1
            p.copy_(1 + 0.3 * u if name.endswith("norm.weight") else u * (3.0 / p.shape[-1]) ** 0.5)
    return module.eval()


@pytest.fixture(scope="module")
def lm():
    return randomised(MiniCPM(MiniCPMConfig.from_dict({**LM_CONFIG, "use_mup": True})))


def prefilled(model: MiniCPM, capacity: int = 32, length: int = 5, batch: int = 1):
    x = torch.randn(batch, length, model.config.hidden_size, generator=torch.Generator().manual_seed(3))
    _, keys_values = model(x.to(model.norm.weight.device))
    cache = model.new_cache(batch, capacity)
    cache.fill(keys_values)
    return cache


def inputs(model: MiniCPM, n: int, batch: int = 1) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(4)
    return [torch.randn(batch, model.config.hidden_size, generator=g) for _ in range(n)]


@torch.no_grad()
def test_steps_equal_the_prefill_of_the_whole_sequence(lm):
    """A step is the prefill's last position (up to SDPA's last bit: another kernel shape)."""
    x = torch.randn(1, 9, 32, generator=torch.Generator().manual_seed(5))
    whole, keys_values = lm(x)
    cache = lm.new_cache(1, 16)
    cache.fill(lm(x[:, :6])[1])
    for i in range(6, 9):
        out = lm.step(x[:, i], cache.position(), cache)
        cache.advance()
        assert torch.allclose(out, whole[:, i], atol=1e-5, rtol=0)
    assert torch.allclose(cache.keys[1, :, :, :9], keys_values[1][0], atol=1e-5, rtol=0)
    assert cache.keys[:, :, :, 9:].abs().sum() == 0  # the rest stays as fill left it: zero


@pytest.mark.parametrize("fail", [(), (2,)], ids=["captured", "a capture fails"])
@torch.no_grad()
def test_graph_segments_give_the_eager_bits(lm, fail):
    from helpers import EmulatedGraphs

    emulated = EmulatedGraphs(fail=fail)
    steps = DecodeSteps(lm, emulated, embed=lambda x: x * 2, head=lambda h: (h, h.sum(-1)))
    for batch in (1, 2):  # two sets of shapes, two sets of graphs
        eager, graphed = prefilled(lm, batch=batch), prefilled(lm, batch=batch)
        for x in inputs(lm, 4, batch):
            want = lm.step(x * 2, eager.position(), eager)
            got, total = steps(x, graphed.position(), graphed)
            assert torch.equal(got, want) and torch.equal(total, want.sum(-1))
            eager.advance()
            graphed.advance()
        assert torch.equal(eager.keys, graphed.keys) and torch.equal(eager.values, graphed.values)
    if not fail:
        assert emulated.captures == 2 * (len(lm.layers) + 1)  # one graph per segment, per batch size


@torch.no_grad()
def test_the_whole_step_captures_as_one_graph(lm):
    """Static x and position buffers, one cache: every replay is the eager step."""
    from helpers import EmulatedGraphs

    emulated = EmulatedGraphs()
    eager, cache = prefilled(lm), prefilled(lm)
    static_x, static_position = torch.zeros(1, 32), cache.position().clone()
    graph = emulated.capture(partial(lm.step, static_x, static_position, cache), state=(cache.keys, cache.values))
    assert torch.equal(cache.keys, eager.keys)  # capturing changed nothing
    for x in inputs(lm, 5):
        static_x.copy_(x)
        static_position.copy_(cache.position())
        graph.graph.replay()  # (Graph.replay would enter the graph's CUDA device)
        assert torch.equal(graph.outputs, lm.step(x, eager.position(), eager))
        cache.advance()
        eager.advance()
    assert torch.equal(cache.keys, eager.keys) and torch.equal(cache.values, eager.values)


@torch.no_grad()
def test_a_step_and_the_local_stacks_never_read_the_device(lm, monkeypatch):
    from helpers import HostReads

    monkeypatch.setattr(dispatch, "DEBUG", False)  # DEBUG's mask check reads tensors on purpose
    cache = prefilled(lm)
    steps = DecodeSteps(lm)
    local = MiniCPMConfig.from_dict(LM_CONFIG).local(16, 32, 2, 1, 8)
    encoder, dit = LocalEncoder(local, 4), LocalDiT(local, 4, version=2)
    dit_inputs = (torch.zeros(2, 4, 3), torch.zeros(2, 32), torch.ones(2), torch.zeros(2, 4, 3), torch.zeros(2))
    dit(*dit_inputs)  # first use: the shared norm checks once (reading the device) whether its fused form is exact
    with HostReads() as mode:
        for x in inputs(lm, 3):
            position = cache.position()
            lm.step(x, position, cache)
            steps(x, position, cache)
            cache.advance()
        encoder(torch.zeros(1, 1, 3, 4))  # the local stacks, for a whole-call capture
        dit(*dit_inputs)
    assert mode.reads == []


def test_attention_goes_through_the_sites(lm, monkeypatch):
    assert minicpm.LM_SITE.name == "voxcpm.lm" and not minicpm.LM_SITE.approx_ok
    assert minicpm.LOCAL_SITE.name == "voxcpm.local" and minicpm.LOCAL_SITE.approx_ok
    calls = []
    for site in (minicpm.LM_SITE, minicpm.LOCAL_SITE):
        original = site.reference

        def reference(q, k, v, mask, causal, scale, enable_gqa, dropout_p, original=original, site=site):
            calls.append((site.name, tuple(q.shape), tuple(k.shape), None if mask is None else tuple(mask.shape),
                          causal, scale, enable_gqa))
            return original(q, k, v, mask, causal, scale, enable_gqa, dropout_p)

        monkeypatch.setattr(site, "reference", reference)
    with torch.no_grad():
        cache = prefilled(lm, capacity=24, length=5)
        lm.step(inputs(lm, 1)[0], cache.position(), cache)
        encoder = LocalEncoder(MiniCPMConfig.from_dict(LM_CONFIG).local(16, 32, 2, 1, 8), 4)
        encoder(torch.zeros(1, 2, 3, 4))
    # upstream's SDPA arguments: is_causal for the prefill, the whole cache under a bool mask for a step,
    # enable_gqa=True always (also with as many key heads as query heads), the default scale
    assert calls == [("voxcpm.lm", (1, 4, 5, 8), (1, 2, 5, 8), None, True, None, True)] * 2 + \
                    [("voxcpm.lm", (1, 4, 1, 8), (1, 2, 24, 8), (1, 1, 1, 24), False, None, True)] * 2 + \
                    [("voxcpm.local", (2, 2, 4, 8), (2, 2, 4, 8), None, False, None, True)]


def test_a_bound_policy_runs_the_lm_attention(lm):
    with torch.no_grad():
        cache = prefilled(lm)
        x = inputs(lm, 1)[0]
        expected = lm.step(x, cache.position(), cache)
        run = policy_for("math").start()
        with RequestContext(0, accel=run).step():
            got = lm.step(x, cache.position(), cache)
    assert sum(run.used.values()) == len(lm.layers)
    assert torch.allclose(got, expected, atol=1e-5, rtol=0)


def test_cache_bookkeeping_and_errors(lm):
    cache = lm.new_cache(1, 6)
    assert cache.keys.shape == (2, 1, 2, 6, 8) and cache.length == 0 and cache.position().tolist() == [0]
    with torch.no_grad():
        keys_values = lm(torch.zeros(1, 6, 32))[1]
        cache.fill(keys_values)
        with pytest.raises(RuntimeError, match="the KV cache is full"):
            cache.position()
        with pytest.raises(RuntimeError, match="a prefill of 7 positions does not fit a KV cache of 6"):
            cache.fill(lm(torch.zeros(1, 7, 32))[1])
        with pytest.raises(ValueError, match="the cache holds 2 layers, the prefill has 1"):
            cache.fill(keys_values[:1])
    with pytest.raises(ValueError, match="a KV cache of 65 positions exceeds the 64 RoPE positions"):
        lm.new_cache(1, 65)
    with pytest.raises(ValueError, match="at least 1"):
        KVCache(1, 1, 1, 8, 0)
    assert [capacity_for(n) for n in (0, 1, 64, 65)] == [64, 64, 64, 128]


def test_rope_rows_and_meta_building(lm):
    config = lm.config
    short = MiniCPM(config, rope_positions=10)
    assert short.rope.cos.shape == (10, 8) and torch.equal(short.rope.cos, lm.rope.cos[:10])
    with pytest.raises(RuntimeError, match="a sequence of 11 positions exceeds the 10"):
        short(torch.zeros(1, 11, 32))
    with pytest.raises(ValueError, match=r"rope positions must be in \[1, 64\]"):
        MiniCPM(config, rope_positions=65)
    with torch.device("meta"):
        meta = MiniCPM(config)
    meta.to_empty(device="cpu")
    meta.load_state_dict(lm.state_dict())
    meta.reset_buffers()
    assert torch.equal(meta.rope.cos, lm.rope.cos) and torch.equal(meta.rope.sin, lm.rope.sin)
    assert set(lm.state_dict()) == set(meta.state_dict())  # the tables are not checkpoint tensors
    half = MiniCPM(config).to(torch.bfloat16)  # cast with the model, as upstream's buffers are
    assert half.rope.cos.dtype == torch.bfloat16 and torch.equal(half.rope.cos, lm.rope.cos.to(torch.bfloat16))
    with pytest.raises(RuntimeError, match="no token embeddings"):
        MiniCPM(config.residual(1)).embed(torch.zeros(1, 1, dtype=torch.long))


def test_state_dict_names_are_upstreams(lm):
    names = set(lm.state_dict())
    assert {"embed_tokens.weight", "norm.weight", "layers.1.self_attn.q_proj.weight",
            "layers.1.self_attn.o_proj.weight", "layers.0.mlp.gate_proj.weight", "layers.0.input_layernorm.weight",
            "layers.0.post_attention_layernorm.weight"} <= names and len(names) == 2 + 2 * 9
    dit = LocalDiT(MiniCPMConfig.from_dict(LM_CONFIG).local(16, 32, 2, 1, 8), 4, version=2)
    assert {n for n in dit.state_dict() if not n.startswith("decoder.")} == {
        f"{m}.{p}" for m in ("in_proj", "cond_proj", "out_proj", "time_mlp.linear_1", "time_mlp.linear_2",
                             "delta_time_mlp.linear_1", "delta_time_mlp.linear_2") for p in ("weight", "bias")}
    encoder = LocalEncoder(MiniCPMConfig.from_dict(LM_CONFIG).local(16, 32, 2, 1, 8), 4)
    assert {n for n in encoder.state_dict() if not n.startswith("encoder.")} == {
        "special_token", "in_proj.weight", "in_proj.bias"}


def test_local_modules_refuse_what_upstream_cannot_run():
    config = MiniCPMConfig.from_dict(LM_CONFIG)
    with pytest.raises(ValueError, match="versions 1 .* and 2"):
        LocalDiT(config.local(16, 32, 2, 1, 8), 4, version=3)
    with pytest.raises(ValueError, match="takes no tokens"):
        LocalEncoder(config, 4)
    dit = LocalDiT(config.local(16, 32, 2, 1, 8), 4, version=2)
    with pytest.raises(ValueError, match="whole vectors of 16, got width 24"):
        dit(torch.zeros(2, 4, 3), torch.zeros(2, 24), torch.zeros(2), torch.zeros(2, 4, 3), torch.zeros(2))
    assert timestep_embedding(torch.tensor(0.5), 8).shape == (1, 8)


CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


@pytest.mark.gpu
@CUDA
@torch.no_grad()
def test_real_cuda_graphs_give_the_eager_steps(lm):
    from mizuoto.runtime.graphs import Graphs

    model = MiniCPM(lm.config).cuda().eval()
    model.load_state_dict(lm.state_dict())
    graphs = Graphs("cuda")
    steps = DecodeSteps(model, graphs)
    eager, graphed = prefilled(model), prefilled(model)
    static_x, static_position = torch.zeros(1, 32, device="cuda"), eager.position().clone()
    whole_cache = prefilled(model)
    whole = graphs.capture(partial(model.step, static_x, static_position, whole_cache),
                           state=(whole_cache.keys, whole_cache.values))
    for x in inputs(lm, 6):
        x = x.cuda()
        want = model.step(x, eager.position(), eager)
        assert torch.equal(steps(x, graphed.position(), graphed), want)
        static_x.copy_(x)
        static_position.copy_(whole_cache.position())
        assert torch.equal(whole.replay(), want)
        for cache in (eager, graphed, whole_cache):
            cache.advance()


if __name__ == "__main__":  # the pinned subprocess of the tests against upstream
    compared = {}
    for name, (ours, theirs) in reference_outputs(Path(sys.argv[1])).items():
        same = ours.shape == theirs.shape and ours.dtype == theirs.dtype
        compared[name] = ((ours - theirs).abs().max().item() if ours.numel() else 0.0) if same else None
    print(json.dumps(compared))
