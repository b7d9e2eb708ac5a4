"""Seed-VC v2's CFM, DiT and length regulators (engines/seedvc/cfm_v2.py, dit_v2.py, regulator_v2.py).

Against tests/parity/data/seedvc_dit_v2 (scripts/parity/seedvc_dit_v2_references.py: seed-vc 0.4.3's own v2 `CFM`,
`DiT` and `InterpolateRegulator`, torch 2.13, under the parity pins), compared bitwise in a pinned subprocess, for
two tiny configurations (the tiny v2 model's: time and style tokens; and every flag flipped, with a rotary table of
the file's own and a continuous regulator):
- the regulators alone (stretching, shrinking, no ratios, a (B, codebooks, T) id input, a 1x1 output conv);
- the DiT estimator alone, batch 2 with padding;
- `CFMV2.inference`: 1 to 10 steps, every guidance branch (both rates, one of them zero, none, random_voice),
  prompts of 0 and more frames, temperatures, a batch of two, float16 CPU autocast with a float16 style (the style
  path's call); and the generator's state after it (one randn);
- the estimator under bfloat16 CPU autocast (its output dtype too).
The weights come from `fill` (the writer's: scripts/parity/seedvc_weights.py), loaded through `load_cfm` /
`load_regulator` from upstream's own key names (the unused x_embedder and mask_token, a `module.` prefix): the
loaders are part of what is compared; upstream's computed rotary table is compared by digest.
In process: the tiny v2 model's real files load, the yaml sections parse, bad sections, checkpoints and inputs are
one-line errors, the guidance batch layout and schedule, no host reads in a solve, and every attention call's
MaskInfo against its dense mask.
"""

import functools
import hashlib
import json
import math
import sys
from pathlib import Path

import pytest
import torch
import yaml

if __name__ == "__main__":  # run as the pinned script: tests/ (helpers.py) is not on the path yet
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from helpers import HostReads, bit_diff, parity_module, reference_dir, run_pinned  # noqa: E402

from mizuoto.core.errors import CheckpointError, InputError  # noqa: E402
from mizuoto.engines.seedvc import cfm_v2, dit_v2, regulator_v2  # noqa: E402
from mizuoto.runtime.accel import dispatch  # noqa: E402

fill = parity_module("seedvc_weights").s2mel_fill  # the writer's seeded parameters

REFERENCES = Path(__file__).resolve().parents[1] / "parity" / "data" / "seedvc_dit_v2"
MODEL = Path(__file__).resolve().parents[1] / "parity" / "data" / "seedvc_v2" / "model"


def filled(record: dict) -> dict:
    return {name: fill(name, tuple(shape), record["seed"] + index) for index, (name, shape) in
            enumerate(record["params"])}


def upstream_cfm_state(entry: dict, refs: dict, prefix: str = "") -> dict:
    """Upstream's `net.cfm` for a recorded configuration: its parameters refilled, the file's rotary table where
    the writer gave it one (the other leaves it out: ours is computed), every key optionally under `prefix`."""
    record = entry["cfm"]
    state = filled(record)
    if "freqs_cis" in record:
        state["estimator.transformer.freqs_cis"] = refs[record["freqs_cis"]]
    assert set(state) <= set(record["state_keys"])
    return {prefix + k: v for k, v in state.items()}


def our_cfm(entry: dict, refs: dict, prefix: str = "") -> cfm_v2.CFMV2:
    config = dit_v2.DiTV2Config.from_section(entry["estimator"])
    return cfm_v2.load_cfm(upstream_cfm_state(entry, refs, prefix), config, "cpu")


def our_regulator(record: dict) -> regulator_v2.RegulatorV2:
    config = regulator_v2.RegulatorV2Config.from_section(record["section"])
    return regulator_v2.load_regulator(filled(record), config, "cpu")


def sha256(tensor: torch.Tensor) -> str:
    return hashlib.sha256(tensor.detach().float().contiguous().numpy().astype("<f4").tobytes()).hexdigest()


def autocast(dtype: str | None):
    """The writer's CPU autocast of a case (none when it names no dtype)."""
    return torch.autocast("cpu", dtype=getattr(torch, dtype or "float16"), enabled=dtype is not None)


def reference_diffs(folder: Path) -> dict:
    """Everything in the references, ours against upstream's: name -> bit_diff()."""
    from safetensors.torch import load_file

    refs = load_file(str(folder / "references.safetensors"))
    info = json.loads((folder / "references.json").read_text())
    out, models = {}, {}
    for name, entry in info["configs"].items():
        # the tiny configuration's keys carry DDP's prefix, as some checkpoints do
        models[name] = our_cfm(entry, refs, "module." if name == "tiny" else "")
        table = cfm_v2.CFMV2(dit_v2.DiTV2Config.from_section(entry["estimator"])).estimator.transformer.freqs_cis
        computed = entry["cfm"]["computed_freqs_cis"]
        out[f"{name}/computed_freqs_cis"] = 0.0 if (list(table.shape) == computed["shape"] and table.dtype ==
                                                   torch.bfloat16 and sha256(table) == computed["sha256"]) else None
    for name, case in info["cases"].items():
        config, kind, _ = name.split("/")
        entry, model = info["configs"][config], models[config]
        with torch.inference_mode():
            if kind == "regulator":
                regulator = our_regulator(entry["regulator/" + case["regulator"]])
                ylens = refs[case["ylens"]] if "ylens" in case else None
                out[name] = bit_diff(regulator(refs[case["x"]], ylens), refs[case["out"]])
            elif kind == "dit":
                with autocast(case.get("autocast")):
                    got = model.estimator(*(refs[a] for a in case["args"]))
                out[name] = bit_diff(got, refs[case["out"]])
                out[f"{name}/dtype"] = 0.0 if got.dtype == getattr(torch, case.get("autocast") or "float32") else None
            else:
                generator = torch.Generator().manual_seed(case["seed"])
                style = refs[case["style"]].half() if case.get("autocast") else refs[case["style"]]
                with autocast(case.get("autocast")):
                    got = model.inference(refs[case["mu"]], refs[case["x_lens"]], refs[case["prompt"]], style,
                                          case["steps"], generator, temperature=case["temperature"],
                                          cfg_rates=tuple(case["cfg_rates"]), random_voice=case["random_voice"])
                out[name] = bit_diff(got, refs[case["out"]])
                out[f"{name}/generator"] = bit_diff(torch.rand(4, generator=generator), refs[case["after"]])
    return out


# ---------------------------------------------------------------------------------------------------
# Against upstream's references (pinned subprocess)


@functools.cache
def pinned_diffs() -> dict:
    return run_pinned(__file__, reference_dir("seedvc_dit_v2"), timeout=600)


@functools.cache
def recorded() -> dict:
    return json.loads((REFERENCES / "references.json").read_text())


def test_references_are_reproduced_bit_for_bit():
    got = pinned_diffs()
    cases = recorded()["cases"]
    assert set(cases) <= set(got) and len(cases) == 20
    for config in ("tiny", "flipped"):
        kinds = {name.split("/")[1] for name in cases if name.startswith(config + "/")}
        assert kinds == {"regulator", "dit", "cfm"}, config
        assert f"{config}/dit/autocast_bfloat16" in cases
        assert f"{config}/computed_freqs_cis" in got
    assert sum(name.endswith("/generator") for name in got) == sum("/cfm/" in name for name in cases)
    bad = {name: value for name, value in got.items() if value != 0.0}
    assert not bad, bad


# ---------------------------------------------------------------------------------------------------
# In process: the tiny v2 model's files and the yaml sections


@functools.cache
def tiny_yaml() -> dict:
    return yaml.safe_load((MODEL / "v2" / "vc_wrapper.yaml").read_text())


@functools.cache
def tiny_nets() -> dict:
    nets = torch.load(str(MODEL / "v2" / "cfm_small.pth"), map_location="cpu", weights_only=True)["net"]
    ar = torch.load(str(MODEL / "v2" / "ar_base.pth"), map_location="cpu", weights_only=True)["net"]
    return {"cfm": nets["cfm"], "cfm_regulator": nets["length_regulator"], "ar_regulator": ar["length_regulator"]}


@functools.cache
def tiny_cfm() -> cfm_v2.CFMV2:
    return cfm_v2.load_cfm(tiny_nets()["cfm"], dit_v2.DiTV2Config.from_section(tiny_yaml()["cfm"]["estimator"]),
                           "cpu")


def test_the_tiny_models_files_load_with_their_own_tables():
    config = dit_v2.DiTV2Config.from_section(tiny_yaml()["cfm"]["estimator"])
    assert (config.hidden_dim, config.depth, config.tokens, config.head_dim, config.feed_forward_dim) == \
        (48, 3, 2, 24, 256)
    state = tiny_cfm().state_dict()
    saved = tiny_nets()["cfm"]
    assert state["estimator.transformer.freqs_cis"].dtype == torch.bfloat16
    assert torch.equal(state["estimator.transformer.freqs_cis"], saved["estimator.transformer.freqs_cis"])
    assert "estimator.transformer.causal_mask" not in saved and "estimator.transformer.causal_mask" not in state
    assert not any("x_embedder" in k for k in state)
    assert not tiny_cfm().training
    for name, section in (("cfm_regulator", "cfm_length_regulator"), ("ar_regulator", "ar_length_regulator")):
        reg_config = regulator_v2.RegulatorV2Config.from_section(tiny_yaml()[section])
        module = regulator_v2.load_regulator(tiny_nets()[name], reg_config, "cpu")
        assert torch.equal(module.state_dict()["embedding.weight"], tiny_nets()[name]["module.embedding.weight"]
                           if name == "ar_regulator" else tiny_nets()[name]["embedding.weight"])
    ar = regulator_v2.load_regulator(tiny_nets()["ar_regulator"], regulator_v2.RegulatorV2Config.from_section(
        tiny_yaml()["ar_length_regulator"]), "cpu")
    with torch.inference_mode():
        assert ar(torch.tensor([[1, 2, 3, 3, 7]])).shape == (1, 5, 64)  # no ratios: no ylens needed


def test_the_released_sections_parse():
    released = {"time_as_token": True, "style_as_token": True, "uvit_skip_connection": False, "block_size": 8192,
                "depth": 13, "num_heads": 8, "hidden_dim": 512, "in_channels": 80, "content_dim": 512,
                "style_encoder_dim": 192, "class_dropout_prob": 0.1, "dropout_rate": 0.0, "attn_dropout_rate": 0.0}
    config = dit_v2.DiTV2Config.from_section(released)
    assert (config.head_dim, config.feed_forward_dim, config.tokens) == (64, 1536, 2)
    wide = regulator_v2.RegulatorV2Config.from_section(
        {"channels": 512, "is_discrete": True, "codebook_size": 2048, "sampling_ratios": [1, 1, 1, 1],
         "f0_condition": False})
    narrow = regulator_v2.RegulatorV2Config.from_section(
        {"channels": 768, "is_discrete": True, "codebook_size": 32, "sampling_ratios": [], "f0_condition": False})
    assert wide.sampling_ratios == (1, 1, 1, 1) and narrow.sampling_ratios == () and narrow.outputs == 768


@pytest.mark.parametrize(("change", "words"), [
    (dict(num_heads=5), "heads"), (dict(depth=0), "depth"), (dict(hidden_dim="48"), "hidden_dim"),
])
def test_bad_estimator_sections_are_one_line_errors(change, words):
    section = {**tiny_yaml()["cfm"]["estimator"], **change}
    with pytest.raises(CheckpointError, match=words):
        dit_v2.DiTV2Config.from_section(section)
    section = {k: v for k, v in tiny_yaml()["cfm"]["estimator"].items() if k != "style_encoder_dim"}
    with pytest.raises(CheckpointError, match="style_encoder_dim"):
        dit_v2.DiTV2Config.from_section(section)
    with pytest.raises(CheckpointError, match="mapping"):
        dit_v2.DiTV2Config.from_section(None)


def test_bad_regulator_sections_are_one_line_errors():
    section = dict(tiny_yaml()["cfm_length_regulator"])
    with pytest.raises(CheckpointError, match="f0_condition"):
        regulator_v2.RegulatorV2Config.from_section({**section, "f0_condition": True})
    with pytest.raises(CheckpointError, match="channels"):
        regulator_v2.RegulatorV2Config.from_section({k: v for k, v in section.items() if k != "channels"})
    with pytest.raises(CheckpointError, match="in_channels"):
        regulator_v2.RegulatorV2Config.from_section({**section, "is_discrete": False})
    with pytest.raises(CheckpointError, match="groups"):
        regulator_v2.RegulatorV2Config.from_section({**section, "groups": 3})


def test_checkpoint_mismatches_are_one_line_errors():
    config = dit_v2.DiTV2Config.from_section(tiny_yaml()["cfm"]["estimator"])
    saved = tiny_nets()["cfm"]
    broken = {k: v for k, v in saved.items() if "wqkv" not in k}
    with pytest.raises(CheckpointError, match=r"missing \['estimator.transformer.layers.0.attention.wqkv"):
        cfm_v2.load_cfm(broken, config, "cpu")
    broken = {**saved, "estimator.final_mlp.2.bias": torch.zeros(3)}
    with pytest.raises(CheckpointError, match="shapes differ"):
        cfm_v2.load_cfm(broken, config, "cpu")
    broken = {**saved, "estimator.transformer.freqs_cis": torch.zeros(10, 12, 2)}
    with pytest.raises(CheckpointError, match="shapes differ"):
        cfm_v2.load_cfm(broken, config, "cpu")
    deeper = dit_v2.DiTV2Config.from_section({**tiny_yaml()["cfm"]["estimator"], "depth": 4})
    with pytest.raises(CheckpointError, match="belong together"):
        cfm_v2.load_cfm(saved, deeper, "cpu")
    with pytest.raises(CheckpointError, match="not a state dict"):
        cfm_v2.load_cfm(None, config, "cpu")
    # what upstream's strict=False load leaves unused is ignored as there
    extra = {**saved, "estimator.transformer.causal_mask": torch.ones(4, 4, dtype=torch.bool),
             "estimator.something_new.weight": torch.zeros(2)}
    assert torch.equal(cfm_v2.load_cfm(extra, config, "cpu").state_dict()["estimator.style_in.weight"],
                       saved["estimator.style_in.weight"])
    reg_config = regulator_v2.RegulatorV2Config.from_section(tiny_yaml()["cfm_length_regulator"])
    regulator = tiny_nets()["cfm_regulator"]
    with pytest.raises(CheckpointError, match=r"missing \['embedding.weight'\]"):
        regulator_v2.load_regulator({k: v for k, v in regulator.items() if k != "embedding.weight"}, reg_config,
                                    "cpu")
    with pytest.raises(CheckpointError, match="shapes differ"):
        regulator_v2.load_regulator({**regulator, "model.0.weight": torch.zeros(40, 40, 5)}, reg_config, "cpu")


# ---------------------------------------------------------------------------------------------------
# In process: the regulator's inputs


def test_bad_regulator_inputs_are_refused():
    reg_config = regulator_v2.RegulatorV2Config.from_section(tiny_yaml()["cfm_length_regulator"])
    module = regulator_v2.load_regulator(tiny_nets()["cfm_regulator"], reg_config, "cpu")
    ids = torch.randint(0, 64, (1, 6))
    with torch.inference_mode():
        out = module(ids, torch.tensor([9]))
        assert out.shape == (1, 9, 40)
        with pytest.raises(InputError, match="needs ylens"):
            module(ids)
        with pytest.raises(InputError, match="needs ylens"):
            module(ids, torch.tensor([9.0]))
        with pytest.raises(InputError, match="token ids"):
            module(torch.randn(1, 6))
        with pytest.raises(InputError, match="at least one frame"):
            module(ids, torch.tensor([0]))
    continuous = regulator_v2.RegulatorV2(regulator_v2.RegulatorV2Config(8, (1,), in_channels=4)).eval()
    with torch.inference_mode(), pytest.raises(InputError, match="content features"):
        continuous(torch.randn(1, 5, 3), torch.tensor([7]))


# ---------------------------------------------------------------------------------------------------
# In process: the sampler


class Spy(torch.nn.Module):
    """An estimator that records its calls (the sampler reads only its config)."""

    def __init__(self, config: dit_v2.DiTV2Config):
        super().__init__()
        self.config, self.calls = config, []

    def forward(self, x, prompt_x, x_lens, t, style, mu):
        self.calls.append((x.clone(), prompt_x.clone(), x_lens.clone(), t.clone(), style.clone(), mu.clone()))
        return torch.sin(x * 3) + t[:, None, None] - 0.1 * prompt_x


def spied(time_as_token=True):
    config = dit_v2.DiTV2Config(hidden_dim=8, num_heads=2, depth=1, in_channels=80, content_dim=6, style_dim=5,
                                block_size=64, time_as_token=time_as_token)
    model = cfm_v2.CFMV2(config)
    model.estimator = Spy(config)
    return model, model.estimator.calls


def inputs(batch=1, frames=12, prompt=4, content=6, style=5, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(batch, frames, content, generator=g), torch.full((batch,), frames),
            torch.randn(batch, 80, prompt, generator=g), torch.randn(batch, style, generator=g))


def test_the_schedule_is_upstreams_cosine_grid():
    time_steps = cfm_v2.time_steps(7, "cpu")
    grid = torch.linspace(0, 1, 8)
    grid = grid + (-1) * (torch.cos(torch.pi / 2 * grid) - 1 + grid)
    t = torch.tensor(0.0)
    for k, (t_k, dt_k) in enumerate(time_steps):
        assert torch.equal(t_k, t) and t_k.dim() == 0
        t = t + dt_k
        assert torch.allclose(t, grid[k + 1], atol=1e-6)
    assert len(time_steps) == 7 and abs(float(t) - 1.0) < 1e-6
    assert math.isclose(float(time_steps[0][1]), 1 - math.cos(math.pi / 14), rel_tol=1e-5)


def test_noise_is_upstreams_global_draw_and_the_generator_advances_as_one_randn():
    model, calls = spied()
    mu, lens, prompt, style = inputs(prompt=3)
    torch.manual_seed(7)
    want = torch.randn([1, 80, 12]) * 0.5
    after = torch.random.get_rng_state()
    generator = torch.Generator().manual_seed(7)
    out = model.inference(mu, lens, prompt, style, 3, generator, temperature=0.5)
    assert torch.equal(generator.get_state(), after) and out.shape == (1, 80, 12) and not out[..., :3].any()
    want[..., :3] = 0
    assert torch.equal(calls[0][0][:1], want)


@pytest.mark.parametrize(("rates", "random_voice", "rows"), [
    ((0.7, 0.3), False, [("p", "s", "mu"), ("0", "0", "mu"), ("0", "0", "0")]),
    ((0.0, 0.3), False, [("p", "s", "mu"), ("0", "0", "mu")]),
    ((0.7, 0.0), False, [("p", "s", "mu"), ("0", "0", "0")]),
    ((0.0, 0.0), False, [("p", "s", "mu")]),
    ((0.0, 0.0), True, [("0", "0", "mu"), ("0", "0", "0")]),
])
def test_the_guidance_batch_layout(rates, random_voice, rows):
    model, calls = spied()
    mu, lens, prompt, style = inputs(batch=2)
    lens = torch.tensor([12, 9])
    model.inference(mu, lens, prompt, style, 3, torch.Generator().manual_seed(0), cfg_rates=rates,
                    random_voice=random_voice)
    assert len(calls) == 3
    shapes = {tuple(tuple(t.shape) for t in call) for call in calls}
    assert len(shapes) == 1  # every step the same shapes (one CUDA graph captures the solve)
    for x, prompt_x, x_lens, times, style_in, mu_in in calls:
        assert x.shape == (2 * len(rows), 80, 12) and not x[..., :4].any()
        assert torch.equal(x_lens, lens.repeat(len(rows))) and times.shape == (2 * len(rows),)
        assert torch.equal(times, times[:1].expand_as(times))
        for index, (p, s, m) in enumerate(rows):
            part = slice(2 * index, 2 * index + 2)
            assert torch.equal(x[part], x[:2])
            assert torch.equal(prompt_x[part, :, :4], prompt) if p == "p" else not prompt_x[part].any()
            assert not prompt_x[part, :, 4:].any()
            assert torch.equal(style_in[part], style) if s == "s" else not style_in[part].any()
            assert torch.equal(mu_in[part], mu) if m == "mu" else not mu_in[part].any()


def test_times_are_upstreams_k_copies_where_its_call_runs():
    for time_as_token, batch, rates, want in ((True, 1, (0.7, 0.7), 3), (False, 2, (0.0, 0.0), 1),
                                               (True, 2, (0.0, 0.0), 2), (False, 2, (0.7, 0.0), 4)):
        model, calls = spied(time_as_token)
        mu, lens, prompt, style = inputs(batch=batch)
        model.inference(mu, lens, prompt, style, 1, torch.Generator().manual_seed(0), cfg_rates=rates)
        assert calls[0][3].shape == (want,), (time_as_token, batch, rates)


def test_the_mix_is_upstreams_expression():
    v = torch.randn(3, 2, 5)
    a, b = 0.7, 0.3
    assert torch.equal(cfm_v2.mix(v, 1, (a, b), False), (1.0 + a + b) * v[0:1] - a * v[2:3] - b * v[1:2])
    assert torch.equal(cfm_v2.mix(v[:2], 1, (0.0, b), False), (1.0 + b) * v[0:1] - b * v[1:2])
    assert torch.equal(cfm_v2.mix(v[:2], 1, (a, 0.0), False), (1.0 + a) * v[0:1] - a * v[1:2])
    assert torch.equal(cfm_v2.mix(v[:2], 1, (0.0, b), True), 1.0 * v[0:1] - 0.0 * v[1:2])
    assert torch.equal(cfm_v2.mix(v[:1], 1, (0.0, 0.0), False), v[:1])


@pytest.mark.parametrize(("change", "words"), [
    (dict(steps=0), "steps"), (dict(steps=2.0), "steps"), (dict(steps=True), "steps"),
    (dict(cfg_rates=(0.7,)), "cfg_rates"), (dict(cfg_rates=(0.7, float("nan"))), "cfg_rates"),
    (dict(temperature=float("inf")), "temperature"), (dict(generator=None), "Generator"),
    (dict(prompt=torch.zeros(1, 80, 13)), "longer"), (dict(prompt=torch.zeros(1, 40, 2)), "prompt mel"),
    (dict(x_lens=torch.tensor([12.0])), "x_lens"), (dict(style=torch.zeros(2, 5)), "style"),
])
def test_bad_sampler_inputs_are_refused(change, words):
    model, _ = spied()
    mu, lens, prompt, style = inputs()
    args = dict(mu=mu, x_lens=lens, prompt=prompt, style=style, generator=torch.Generator(), steps=2)
    args.update(change)
    with pytest.raises(InputError, match=words):
        model.inference(**args)


# ---------------------------------------------------------------------------------------------------
# In process: the DiT


def test_every_attention_call_describes_its_mask_and_no_host_reads(monkeypatch):
    monkeypatch.setattr(dispatch, "DEBUG", True)  # every call checks its MaskInfo against the dense mask
    model = tiny_cfm()
    g = torch.Generator().manual_seed(1)
    x, prompt_x = torch.randn(2, 80, 9, generator=g), torch.zeros(2, 80, 9)
    style, cond = torch.randn(2, 192, generator=g), torch.randn(2, 9, 40, generator=g)
    with torch.inference_mode():
        out = model.estimator(x, prompt_x, torch.tensor([9, 6]), torch.rand(2, generator=g), style, cond)
    assert out.shape == (2, 80, 9) and torch.isfinite(out).all()
    monkeypatch.setattr(dispatch, "DEBUG", False)  # DEBUG's mask check reads tensors on purpose
    with torch.inference_mode(), HostReads() as mode:
        model.inference(cond[:1], torch.tensor([9]), torch.zeros(1, 80, 2), style[:1], 2,
                        torch.Generator().manual_seed(0), cfg_rates=(0.7, 0.7))
    assert mode.reads == []


def test_padding_frames_do_not_change_the_real_ones():
    model = tiny_cfm()
    g = torch.Generator().manual_seed(2)
    x, prompt_x = torch.randn(1, 80, 7, generator=g), torch.randn(1, 80, 7, generator=g)
    style, cond, t = torch.randn(1, 192, generator=g), torch.randn(1, 7, 40, generator=g), torch.rand(1, generator=g)
    with torch.inference_mode():
        short = model.estimator(x, prompt_x, torch.tensor([7]), t, style, cond)
        padded = model.estimator(torch.cat([x, torch.randn(1, 80, 3, generator=g)], dim=2),
                                 torch.cat([prompt_x, torch.zeros(1, 80, 3)], dim=2), torch.tensor([7]), t, style,
                                 torch.cat([cond, torch.randn(1, 3, 40, generator=g)], dim=1))
    assert torch.allclose(short, padded[..., :7], atol=1e-5)


def test_the_site_and_a_too_long_input():
    assert dit_v2.ATTENTION.name == "seedvc.dit_v2" and dit_v2.ATTENTION.approx_ok
    model = tiny_cfm()
    with pytest.raises(InputError, match="8190 frames"):
        model.estimator(torch.zeros(1, 80, 8191), torch.zeros(1, 80, 8191), torch.tensor([8191]), torch.zeros(1),
                        torch.zeros(1, 192), torch.zeros(1, 8191, 40))


if __name__ == "__main__":  # the pinned subprocess of the reference test
    torch.set_num_threads(1)
    print(json.dumps(reference_diffs(Path(sys.argv[1]))))
