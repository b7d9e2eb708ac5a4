"""The s2mel stack (mizuoto/nn/s2mel_dit.py, wavenet.py, length_regulator.py, s2mel_cfm.py), without upstream.

Against tests/parity/data/nn/s2mel (scripts/parity/seedvc_s2mel_references.py: seed-vc 0.4.3's own `build_model`
nets, torch 2.13, under the parity pins), compared bitwise in a pinned subprocess, for four tiny configurations
(whisper-small-wavenet's flags, xlsr-tiny's time and style tokens, f0-44k's F0 regulator, and a causal one with a
dilated WaveNet, zero_prompt_speech_token and a regulator without sampling ratios) and the real-size
whisper-small-wavenet preset:
- the length regulator alone (stretching, shrinking, capped; with F0, and F0's coarse bins);
- the DiT estimator alone, batch 2 with padding;
- the full sampler: 1 to 10 steps, guidance 0 and > 0, prompts of 0 and more frames, temperatures.
The weights come from `fill` (the writer's: scripts/parity/seedvc_weights.py), loaded through
`S2Mel.load_nets` from upstream's own key names (`weight_g` / `weight_v`, unused keys, a `module.` prefix):
the loader is part of what is compared.
In process: preset parsing, strict keys and one-line errors, weight-norm folding, the reflect padding, the
sampler's draw and call layout, no host reads, and every attention call's MaskInfo against its dense mask.
"""

import copy
import functools
import json
import math
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from mizuoto.core.errors import CheckpointError, InputError
from mizuoto.nn import length_regulator, s2mel_cfm, s2mel_dit, wavenet
from mizuoto.runtime.accel import dispatch

if __name__ == "__main__":  # run as the pinned script: tests/ (helpers.py) is not on the path yet
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from helpers import HostReads, parity_module, reference_dir, run_pinned  # noqa: E402

fill = parity_module("seedvc_weights").s2mel_fill  # the writer's seeded parameters

REFERENCES = Path(__file__).resolve().parents[1] / "parity" / "data" / "nn" / "s2mel"
CONFIGS = ("wavenet", "xlsr_tiny", "f0_44k", "causal", "real")


def upstream_nets(entry: dict, refs: dict, prefix: str = "") -> dict:
    """Upstream's `state["net"]` for a recorded configuration: its parameters refilled, its buffers as stored,
    `input_pos` as upstream registers it; every key optionally under `prefix` (DDP's `module.`)."""
    nets = {}
    for net in s2mel_cfm.S2Mel.NETS:
        record = entry[net]
        state = {name: fill(name, tuple(shape), record["seed"] + index)
                 for index, (name, shape) in enumerate(record["params"])}
        state.update({name: refs[ref] for name, ref in record["buffers"].items()})
        if net == "cfm":
            state["estimator.input_pos"] = torch.arange(16384)
        assert sorted(state) == sorted(record["state_keys"])
        nets[net] = {prefix + k: v for k, v in state.items()}
    return nets


def our_model(entry: dict, refs: dict, prefix: str = "") -> s2mel_cfm.S2Mel:
    model = s2mel_cfm.S2Mel(s2mel_cfm.S2MelConfig.from_model_params(entry["model_params"]))
    model.load_nets(upstream_nets(entry, refs, prefix))
    return model.eval()


def diff(ours: torch.Tensor, theirs: torch.Tensor):
    """0.0 when bitwise equal; the max abs difference otherwise; None when shape or kind differ."""
    ours = ours.detach().float() if ours.is_floating_point() else ours.detach().long()
    if ours.shape != theirs.shape or ours.dtype != theirs.dtype:
        return None
    return 0.0 if torch.equal(ours, theirs) else (ours - theirs).abs().max().item()


def reference_diffs(folder: Path) -> dict:
    """Everything in the references, ours against upstream's: name -> diff()."""
    from safetensors.torch import load_file

    refs = load_file(str(folder / "references.safetensors"))
    info = json.loads((folder / "references.json").read_text())
    out = {"f0_mel_range": 0.0 if info["f0_mel_range"] == [length_regulator.F0_MEL_MIN, length_regulator.F0_MEL_MAX]
           else None}
    models = {}
    for name, case in info["cases"].items():
        config, kind, _ = name.split("/")
        if config not in models:  # one configuration's keys carry DDP's prefix, as some checkpoints do
            models[config] = our_model(info["configs"][config], refs, "module." if config == "wavenet" else "")
        model = models[config]
        with torch.inference_mode():
            if kind == "regulator":
                f0 = refs[case["f0"]] if "f0" in case else None
                got, lens = model.length_regulator(refs[case["x"]], refs[case["ylens"]], f0)
                out[name] = diff(got, refs[case["out"]])
                out[f"{name}/lengths"] = diff(lens, refs[case["olens"]])
                if f0 is not None:
                    bins = model.length_regulator.config.n_f0_bins
                    out[f"{name}/coarse"] = diff(length_regulator.coarse_f0(f0, bins), refs[case["coarse"]])
            elif kind == "dit":
                out[name] = diff(model.cfm.estimator(*(refs[a] for a in case["args"])), refs[case["out"]])
            else:
                got = model.cfm.inference(refs[case["mu"]], refs[case["x_lens"]], refs[case["prompt"]],
                                          refs[case["style"]], torch.Generator().manual_seed(case["seed"]),
                                          steps=case["steps"], cfg_rate=case["cfg_rate"],
                                          temperature=case["temperature"])
                out[name] = diff(got, refs[case["out"]])
    return out


# ---------------------------------------------------------------------------------------------------
# Against upstream's references (pinned subprocess)


@functools.cache
def pinned_diffs() -> dict:
    return run_pinned(__file__, reference_dir("nn/s2mel"), timeout=600)


def test_references_are_reproduced_bit_for_bit():
    got = pinned_diffs()
    cases = json.loads((REFERENCES / "references.json").read_text())["cases"]
    assert set(cases) <= set(got) and len(cases) == 25
    for config in CONFIGS:
        kinds = {name.split("/")[1] for name in cases if name.startswith(config + "/")}
        assert kinds == {"regulator", "dit", "cfm"}, config
    assert {"f0_44k/regulator/f0/coarse", "f0_mel_range"} <= set(got)
    bad = {name: value for name, value in got.items() if value != 0.0}
    assert not bad, bad


# ---------------------------------------------------------------------------------------------------
# In process: configuration


@functools.cache
def recorded() -> dict:
    return json.loads((REFERENCES / "references.json").read_text())


def test_the_released_presets_read_as_their_flags():
    presets = {name: s2mel_cfm.S2MelConfig.from_model_params(p) for name, p in recorded()["presets"].items()}
    small = presets["config_dit_mel_seed_uvit_whisper_small_wavenet.yml"]
    assert (small.dit.final_layer_type, small.dit.hidden_dim, small.dit.depth, small.dit.num_heads) == \
        ("wavenet", 512, 13, 8)
    assert small.dit.long_skip_connection and small.dit.uvit_skip_connection and not small.dit.is_causal
    assert small.dit.wavenet == s2mel_dit.WaveNetConfig(512, 8, 5, 1) and small.dit.feed_forward_dim == 1536
    assert small.regulator == length_regulator.RegulatorConfig(512, (1, 1, 1, 1), False, 768, 2048, False, 512)
    tiny = presets["config_dit_mel_seed_uvit_xlsr_tiny.yml"]
    assert tiny.dit.time_as_token and tiny.dit.style_as_token and tiny.dit.final_layer_type == "mlp"
    assert tiny.dit.wavenet is None and tiny.dit.tokens == 2 and tiny.regulator.in_channels == 1024
    f0 = presets["config_dit_mel_seed_uvit_whisper_base_f0_44k.yml"]
    assert f0.dit.in_channels == 128 and f0.dit.final_layer_type == "mlp" and f0.dit.depth == 17
    assert f0.regulator.f0_condition and f0.regulator.n_f0_bins == 256
    assert not any(p.zero_prompt_speech_token for p in presets.values())


def small_params(**dit) -> dict:
    """The tiny wavenet configuration's model_params (a copy), with DiT fields changed."""
    params = copy.deepcopy(recorded()["configs"]["wavenet"]["model_params"])
    params["DiT"].update(dit)
    return params


@pytest.mark.parametrize(("change", "words"), [
    (dict(final_layer_type="conv"), "final_layer_type"),
    (dict(num_heads=3), "multiple of num_heads"),
    (dict(style_condition=False), "style_condition"),
    (dict(time_as_token=True), "time_as_token"),
])
def test_bad_configs_are_one_line_errors(change, words):
    with pytest.raises(CheckpointError, match=words):
        s2mel_cfm.S2MelConfig.from_model_params(small_params(**change))


def test_missing_config_sections_are_named():
    params = small_params()
    del params["wavenet"]
    with pytest.raises(CheckpointError, match="wavenet"):
        s2mel_cfm.S2MelConfig.from_model_params(params)
    params = small_params()
    del params["DiT"]["hidden_dim"]
    with pytest.raises(CheckpointError, match="hidden_dim"):
        s2mel_cfm.S2MelConfig.from_model_params(params)
    with pytest.raises(CheckpointError, match="length_regulator"):
        s2mel_cfm.S2MelConfig.from_model_params({k: v for k, v in small_params().items() if k != "length_regulator"})


def test_a_preset_file_reads(tmp_path):
    import yaml

    path = tmp_path / "config.yml"
    path.write_text(yaml.safe_dump({"model_params": small_params()}))
    assert s2mel_cfm.S2MelConfig.from_yaml(path).dit.hidden_dim == 64
    path.write_text("log_dir: x\n")
    with pytest.raises(CheckpointError, match="model_params"):
        s2mel_cfm.S2MelConfig.from_yaml(path)


# ---------------------------------------------------------------------------------------------------
# In process: checkpoint keys


@functools.cache
def computed_buffers() -> dict:
    """The recorded buffers (the time embedders' 128 frequencies) recomputed as upstream computes them, for the
    in-process tests (the pinned comparison reads upstream's stored values)."""
    half = 128
    freqs = torch.exp(-math.log(10000) * torch.arange(half, dtype=torch.float32) / half)
    return {ref: freqs for entry in recorded()["configs"].values()
            for record in (entry["cfm"], entry["length_regulator"]) for ref in record["buffers"].values()}


@pytest.mark.parametrize("config", ["wavenet", "xlsr_tiny", "f0_44k", "causal"])
def test_upstream_keys_load_strictly_with_weight_norm_folded(config):
    entry = recorded()["configs"][config]
    nets = upstream_nets(entry, computed_buffers())
    model = our_model(entry, computed_buffers())
    state = model.state_dict()
    for key in ("estimator.wavenet.in_layers.0.conv.conv", "estimator.final_layer.linear"):
        if key + ".weight_g" in nets["cfm"]:
            folded = torch._weight_norm(nets["cfm"][key + ".weight_v"], nets["cfm"][key + ".weight_g"], 0)
            assert torch.equal(state["cfm." + key + ".weight"], folded)
            assert "cfm." + key + ".weight_g" not in state
    assert not any(".weight_g" in k or "x_embedder" in k or "input_pos" in k for k in state)
    assert "length_regulator.embedding.weight" not in state and "length_regulator.mask_token" not in state


def test_checkpoint_mismatches_are_one_line_errors():
    entry = recorded()["configs"]["wavenet"]
    model = s2mel_cfm.S2Mel(s2mel_cfm.S2MelConfig.from_model_params(entry["model_params"]))
    nets = upstream_nets(entry, computed_buffers())
    broken = {**nets, "cfm": {k: v for k, v in nets["cfm"].items() if "wqkv" not in k}}
    with pytest.raises(CheckpointError, match="missing"):
        model.load_nets(broken)
    broken = {**nets, "cfm": {**nets["cfm"], "estimator.surprise.weight": torch.zeros(1)}}
    with pytest.raises(CheckpointError, match="unexpected"):
        model.load_nets(broken)
    broken = {**nets, "length_regulator": {**nets["length_regulator"], "model.0.bias": torch.zeros(3)}}
    with pytest.raises(CheckpointError, match="shapes differ"):
        model.load_nets(broken)
    with pytest.raises(CheckpointError, match="no s2mel nets"):
        model.load_nets({"cfm": nets["cfm"]})
    other = recorded()["configs"]["xlsr_tiny"]
    with pytest.raises(CheckpointError, match="belong together"):
        model.load_nets(upstream_nets(other, computed_buffers()))


def test_a_checkpoint_file_loads_and_a_bad_one_is_refused(tmp_path):
    entry = recorded()["configs"]["causal"]
    config = s2mel_cfm.S2MelConfig.from_model_params(entry["model_params"])
    nets = upstream_nets(entry, computed_buffers(), "module.")
    nets["gpt_layer"] = {"0.weight": torch.zeros(2, 2)}  # IndexTTS 2's extra net is left alone
    torch.save({"net": nets, "epoch": 3, "iters": 10}, tmp_path / "s2mel.pth")
    model = s2mel_cfm.S2Mel.from_checkpoint(tmp_path / "s2mel.pth", config)
    assert not model.training
    assert torch.equal(model.state_dict()["length_regulator.model.0.weight"],
                       nets["length_regulator"]["module.model.0.weight"])
    (tmp_path / "bad.pth").write_bytes(b"not a checkpoint")
    with pytest.raises(CheckpointError, match="not a readable checkpoint"):
        s2mel_cfm.S2Mel.from_checkpoint(tmp_path / "bad.pth", config)


# ---------------------------------------------------------------------------------------------------
# In process: weight norm and padding


@pytest.mark.filterwarnings("ignore:.*weight_norm.*:FutureWarning")  # upstream's own (legacy) weight norm
def test_fold_weight_norm_is_upstreams_weight_in_both_spellings():
    torch.manual_seed(0)
    legacy = torch.nn.utils.weight_norm(torch.nn.Conv1d(4, 6, 3))
    modern = torch.nn.utils.parametrizations.weight_norm(torch.nn.Linear(5, 3))
    with torch.no_grad():
        legacy.weight_g.mul_(1.7)
        modern.parametrizations.weight.original0.mul_(0.6)
    for module in (legacy, modern):
        module(torch.randn(1, 4, 8) if isinstance(module, torch.nn.Conv1d) else torch.randn(2, 5))  # hooks run
        folded = wavenet.fold_weight_norm(module.state_dict())
        assert sorted(folded) == ["bias", "weight"] and torch.equal(folded["weight"], module.weight)


@pytest.mark.parametrize("length", [1, 2, 3, 7])
def test_reflect_pad_is_encodecs_pad1d(length):
    x = torch.arange(1.0, length + 1)[None, None]
    got = wavenet.reflect_pad(x, 2, 2)
    if length > 2:
        assert torch.equal(got, F.pad(x, (2, 2), "reflect"))
    else:  # zeros appended until reflection is possible, their share cut again
        padded = F.pad(F.pad(x, (0, 3 - length)), (2, 2), "reflect")
        assert torch.equal(got, padded[..., : padded.shape[-1] - (3 - length)])
    assert got.shape[-1] == length + 4


def test_the_wavenet_keeps_length_with_dilation_and_masks():
    net = wavenet.WaveNet(8, 3, 2, 3, gin_channels=8)
    mask = (torch.arange(10) < 7)[None, None]
    with torch.no_grad():
        out = net(torch.randn(1, 8, 10), mask, torch.randn(1, 8, 1))
    assert out.shape == (1, 8, 10) and not out[..., 7:].any()
    with pytest.raises(ValueError, match="odd"):
        wavenet.WaveNet(8, 4, 1, 2)


# ---------------------------------------------------------------------------------------------------
# In process: the regulator


def test_coarse_f0_bins():
    f0 = torch.tensor([[0.0, 50.0, 1100.0, 1300.0, 200.0, -5.0]])
    bins = length_regulator.coarse_f0(f0, 256)
    assert bins.dtype == torch.int64 and bins[0, 0] == 1 and bins[0, 1] == 1 and bins[0, 2] == 255
    assert bins[0, 3] == 0 and 1 < bins[0, 4] < 255 and bins[0, 5] == 1  # above the range: upstream's 0


def test_regulator_shapes_and_errors():
    config = length_regulator.RegulatorConfig(16, (1, 1), in_channels=8, f0_condition=True, n_f0_bins=32)
    module = length_regulator.LengthRegulator(config).eval()
    with torch.no_grad():
        out, lens = module(torch.randn(2, 5, 8), torch.tensor([9, 6]))
    assert out.shape == (2, 9, 16) and torch.equal(lens, torch.tensor([9, 6])) and not out[1, 6:].any()
    with pytest.raises(InputError, match="ylens"):
        module(torch.randn(2, 5, 8), torch.tensor([9.0, 6.0]))
    with pytest.raises(InputError, match="content features"):
        module(torch.randn(2, 5, 7), torch.tensor([9, 6]))
    flat = length_regulator.LengthRegulator(length_regulator.RegulatorConfig(16, (), in_channels=8)).eval()
    with pytest.raises(InputError, match="does not stretch"):
        flat(torch.randn(1, 5, 8), torch.tensor([4]))
    discrete = length_regulator.LengthRegulator(length_regulator.RegulatorConfig(16, (1,), is_discrete=True,
                                                                                 content_codebook_size=10)).eval()
    with torch.no_grad():
        assert discrete(torch.randint(0, 10, (1, 4)), torch.tensor([6]))[0].shape == (1, 6, 16)


# ---------------------------------------------------------------------------------------------------
# In process: the sampler and the DiT


def spy(channels=80):
    calls = []

    def estimator(x, prompt_x, x_lens, t, style, mu):
        calls.append((x.clone(), prompt_x.clone(), x_lens.clone(), t.clone(), style.clone(), mu.clone()))
        return torch.sin(x * 3) + t.mean() - 0.1 * prompt_x

    return estimator, calls


def inputs(batch=1, frames=12, prompt=4, content=6, style=5, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(batch, frames, content, generator=g), torch.full((batch,), frames),
            torch.randn(batch, 80, prompt, generator=g), torch.randn(batch, style, generator=g))


def test_noise_is_upstreams_global_draw_and_the_generator_advances_as_one_randn():
    mu, lens, prompt, style = inputs(prompt=3)
    torch.manual_seed(7)
    want = torch.randn([1, 80, 12]) * 0.5
    after = torch.random.get_rng_state()
    generator = torch.Generator().manual_seed(7)
    estimator, calls = spy()
    s2mel_cfm.sample(estimator, mu, lens, prompt, style, generator, steps=3, cfg_rate=0.7, temperature=0.5)
    assert torch.equal(generator.get_state(), after)
    want[..., :3] = 0
    assert torch.equal(calls[0][0][:1], want)


@pytest.mark.parametrize("rate", [0.0, 0.7])
def test_the_guidance_batch_layout(rate):
    mu, lens, prompt, style = inputs()
    estimator, calls = spy()
    out = s2mel_cfm.sample(estimator, mu, lens, prompt, style, torch.Generator().manual_seed(0), steps=4,
                           cfg_rate=rate)
    assert len(calls) == 4 and out.shape == (1, 80, 12) and not out[..., :4].any()
    t = torch.tensor(0.0)
    for k, (x, prompt_x, x_lens, times, style_in, mu_in) in enumerate(calls):
        rows = 2 if rate else 1
        assert x.shape == (rows, 80, 12) and torch.equal(x[0], x[-1]) and not x[..., :4].any()
        assert torch.equal(prompt_x[0, :, :4], prompt[0]) and not prompt_x[0, :, 4:].any()
        assert torch.equal(x_lens, lens) and torch.equal(style_in[0], style[0]) and torch.equal(mu_in[0], mu[0])
        if rate:
            assert not prompt_x[1].any() and not style_in[1].any() and not mu_in[1].any()
        assert times.shape == (rows,) and torch.equal(times, t.expand(rows))
        t = t + (torch.linspace(0, 1, 5)[k + 1] - torch.linspace(0, 1, 5)[k])


def test_a_guided_batch_of_two_doubles_lengths_and_times():
    mu, lens, prompt, style = inputs(batch=2)
    estimator, calls = spy()
    s2mel_cfm.sample(estimator, mu, torch.tensor([12, 9]), prompt, style, torch.Generator().manual_seed(0),
                     steps=2, cfg_rate=0.7)
    x, prompt_x, x_lens, times, style_in, mu_in = calls[0]
    assert x.shape[0] == 4 and torch.equal(x_lens, torch.tensor([12, 9, 12, 9])) and times.shape == (4,)
    assert not mu_in[2:].any() and torch.equal(mu_in[:2], mu)


def test_zero_prompt_speech_token_leaves_the_callers_mu_alone():
    mu, lens, prompt, style = inputs()
    kept = mu.clone()
    estimator, calls = spy()
    s2mel_cfm.sample(estimator, mu, lens, prompt, style, torch.Generator().manual_seed(0), steps=1, cfg_rate=0.0,
                     zero_prompt_speech_token=True)
    assert torch.equal(mu, kept) and not calls[0][5][..., :4].any() and torch.equal(calls[0][5][..., 4:], mu[..., 4:])


@pytest.mark.parametrize(("change", "words"), [
    (dict(steps=0), "steps"), (dict(steps=2.0), "steps"), (dict(steps=True), "steps"),
    (dict(cfg_rate=float("nan")), "cfg_rate"), (dict(cfg_rate=-0.1), "cfg_rate"),
    (dict(temperature=float("inf")), "temperature"), (dict(generator=None), "Generator"),
    (dict(prompt=torch.zeros(1, 80, 13)), "longer"), (dict(prompt=torch.zeros(1, 40, 2)), "prompt mel"),
    (dict(x_lens=torch.tensor([12.0])), "x_lens"), (dict(style=torch.zeros(2, 5)), "style"),
])
def test_bad_sampler_inputs_are_refused(change, words):
    mu, lens, prompt, style = inputs()
    args = dict(mu=mu, x_lens=lens, prompt=prompt, style=style, generator=torch.Generator(), steps=2, cfg_rate=0.7)
    args.update(change)
    estimator, _ = spy()
    with pytest.raises(InputError, match=words):
        s2mel_cfm.sample(estimator, **args)


@functools.cache
def tiny(config: str) -> s2mel_cfm.S2Mel:
    return our_model(recorded()["configs"][config], computed_buffers())


@pytest.mark.parametrize("config", ["wavenet", "xlsr_tiny", "causal"])
def test_every_attention_call_describes_its_mask_and_no_host_reads(config, monkeypatch):
    monkeypatch.setattr(dispatch, "DEBUG", True)  # every call checks its MaskInfo against the dense mask
    model = tiny(config)
    dit = model.cfm.estimator.config
    g = torch.Generator().manual_seed(1)
    x, prompt_x = torch.randn(2, 80, 9, generator=g), torch.zeros(2, 80, 9)
    style, cond = torch.randn(2, dit.style_dim, generator=g), torch.randn(2, 9, dit.content_dim, generator=g)
    with torch.inference_mode():
        for lens in (torch.tensor([9, 6]), torch.tensor([9])):  # padding; the guided batch's one length
            out = model.cfm.estimator(x, prompt_x, lens, torch.rand(2, generator=g), style, cond)
            assert out.shape == (2, 80, 9) and torch.isfinite(out).all()
    monkeypatch.setattr(dispatch, "DEBUG", False)  # DEBUG's mask check reads tensors on purpose
    with torch.inference_mode(), HostReads() as mode:
        model.cfm.inference(cond[:1], torch.tensor([9]), torch.zeros(1, 80, 2), style[:1],
                            torch.Generator().manual_seed(0), steps=2, cfg_rate=0.7)
    assert mode.reads == []


def test_the_site_and_a_too_long_input():
    assert s2mel_dit.ATTENTION.name == "s2mel.dit" and s2mel_dit.ATTENTION.approx_ok
    model = tiny("causal")
    with pytest.raises(InputError, match="8192 frames"):
        model.cfm.estimator(torch.zeros(1, 80, 8193), torch.zeros(1, 80, 8193), torch.tensor([8193]),
                            torch.zeros(1), torch.zeros(1, 192), torch.zeros(1, 8193, 32))


def test_the_rope_table_rows_do_not_depend_on_the_table_length():
    assert torch.equal(s2mel_dit.rope_table(16, 40), s2mel_dit.rope_table(16)[:40])
    x = torch.randn(1, 5, 2, 16)
    rotated = s2mel_dit.rotate(x, s2mel_dit.rope_table(16, 5))
    assert torch.allclose(rotated.norm(dim=-1), x.norm(dim=-1), atol=1e-5)  # a rotation keeps lengths
    assert torch.equal(rotated[:, 0], x[:, 0])  # position 0: the identity


if __name__ == "__main__":  # the pinned subprocess of the reference test
    torch.set_num_threads(1)
    print(json.dumps(reference_diffs(Path(sys.argv[1]))))
