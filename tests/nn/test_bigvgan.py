"""BigVGAN v2 (mizuoto/nn/bigvgan.py, mizuoto/nn/alias_free.py), without upstream installed.

Against tests/parity/data/nn/bigvgan (scripts/parity/seedvc_bigvgan_references.py: seed-vc 0.4.3's
`modules/bigvgan`, torch path, torch 2.13, under the parity pins), compared bitwise in a pinned
subprocess:
- the kaiser-sinc filter (every beta branch, odd and even sizes), the up- and downsamplers and the
  low-pass filter alone, Snake and SnakeBeta alone and inside the anti-aliased activation;
- five tiny generators (resblock "1" and "2", snake and snakebeta, log scale on and off, tanh or clamp,
  conv_post bias on and off, 2 and 3 stages, rates 2 to 5), each loaded from upstream's weight-normed
  state dict (weight_g / weight_v folded at load) and from its plain state dict after
  remove_weight_norm(); each output against upstream's with weight norm applied and removed; the folded
  weights against upstream's; our built filters against the ones in upstream's state dict;
- the released 22.05 kHz 80-band 256x config with procedural weights (`procedural_state`, the
  writer's own, from scripts/parity/seedvc_weights.py), rebuilt here, on an 8-frame mel.
Upstream's resblock "2" forward lacks its return: the writer adds it (see its docstring).
In process: config parsing and its errors, checkpoint layout and key names, loading errors, mel errors,
shapes, and the weight-norm fold being upstream's hook computation.
"""

import functools
import json
import sys
from pathlib import Path

import pytest
import torch

from mizuoto.core.errors import CheckpointError, InputError
from mizuoto.nn import alias_free, bigvgan

if __name__ == "__main__":  # run as the pinned script: tests/ (helpers.py) is not on the path yet
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from helpers import parity_module, reference_dir, run_pinned  # noqa: E402

WEIGHTS = parity_module("seedvc_weights")  # the writer's seeded weights
procedural_state, POST_GAIN = WEIGHTS.bigvgan_state, WEIGHTS.BIGVGAN_POST_GAIN

REFERENCES = Path(__file__).resolve().parents[1] / "parity" / "data" / "nn" / "bigvgan"
REAL = "real/22khz_80band_256x"

# ---------------------------------------------------------------------------------------------------


def diff(ours: torch.Tensor, theirs: torch.Tensor):
    """0.0 when bitwise equal; the max abs difference otherwise; None when shape or dtype differ."""
    ours = ours.detach()
    if ours.shape != theirs.shape or ours.dtype != theirs.dtype:
        return None
    return 0.0 if torch.equal(ours, theirs) else (ours - theirs).abs().max().item()


def our_resampler(kind: str, args: dict) -> torch.nn.Module:
    if kind == "up":
        return alias_free.Upsampler(**args)
    if kind == "down":
        return alias_free.Downsampler(**args)
    return alias_free.LowPassFilter(**args)


def our_snake(case: dict, refs: dict) -> torch.nn.Module:
    kind = bigvgan.Snake if case["kind"] == "snake" else bigvgan.SnakeBeta
    snake = kind(case["channels"], logscale=case["logscale"])
    snake.load_state_dict({k: refs[v] for k, v in case["state"].items()}, strict=True)
    return snake


def model_diffs(name: str, case: dict, refs: dict) -> dict:
    out = {}
    config = bigvgan.BigVGANConfig.from_dict(case["config"])
    legacy = {k: refs[v] for k, v in case["state"].items()}
    from_legacy = bigvgan.load_bigvgan({"generator": legacy}, config)
    folded = {k: refs[v] for k, v in case["folded"].items()}
    plain = {k: (folded[k[: -len("_g")]] if k.endswith(".weight_g") else v) for k, v in legacy.items()
             if not k.endswith(".weight_v")}
    plain = {(k[: -len("_g")] if k.endswith(".weight_g") else k): v for k, v in plain.items()}
    from_plain = bigvgan.load_bigvgan(plain, config)
    ours = from_legacy.state_dict()
    for key, tensor in folded.items():
        out[f"{name}/folded/{key}"] = diff(ours[key], tensor)
    built = bigvgan.BigVGAN(config).state_dict()  # the filters we construct, against upstream's
    filters = [k for k in legacy if k.endswith(".filter")]
    out[f"{name}/built_filters"] = max((diff(built[k], legacy[k]) for k in filters), key=lambda d: -1 if d is None
                                       else d)
    with torch.inference_mode():
        for i, mel in enumerate(case["mels"]):
            for label, model in (("legacy", from_legacy), ("plain", from_plain)):
                got = model(refs[mel])
                out[f"{name}/{label}/mel{i}/wn"] = diff(got, refs[case["out_wn"][i]])
                out[f"{name}/{label}/mel{i}/removed"] = diff(got, refs[case["out_removed"][i]])
    return out


def real_diffs(case: dict, refs: dict) -> dict:
    config = bigvgan.BigVGANConfig.from_dict(case["config"])
    layout = bigvgan.checkpoint_layout(config)
    parameters = {k: v for k, v in layout.items() if not k.endswith(".filter")}
    out = {f"{REAL}/layout": 0.0 if parameters == {k: tuple(v) for k, v in case["layout"].items()} else None}
    state = procedural_state(parameters, case["seed"], config.snake_logscale)
    filters = {k: v for k, v in bigvgan.BigVGAN(config).state_dict().items() if k.endswith(".filter")}
    model = bigvgan.load_bigvgan({"generator": {**state, **filters}}, config)
    with torch.inference_mode():
        got = model(refs[case["mel"]])
    out[REAL] = diff(got, refs[case["out_wn"]])
    out[f"{REAL}/removed"] = diff(got, refs[case["out_removed"]])
    return out


def reference_diffs(folder: Path) -> dict:
    """Everything in the references, ours against upstream's: name -> diff()."""
    from safetensors.torch import load_file

    refs = load_file(str(folder / "references.safetensors"))
    cases = json.loads((folder / "references.json").read_text())["cases"]
    out = {}
    with torch.inference_mode():
        for name, case in cases.items():
            kind = name.split("/")[0]
            if kind == "filter":
                got = alias_free.kaiser_sinc_filter(case["cutoff"], case["half_width"], case["kernel_size"])
                out[name] = diff(got, refs[case["out"]])
            elif kind == "resample":
                out[name] = diff(our_resampler(case["kind"], case["args"])(refs[case["x"]]), refs[case["out"]])
            elif kind == "snake":
                snake = our_snake(case, refs)
                out[name] = diff(snake(refs[case["x"]]), refs[case["out"]])
                wrapped = alias_free.AntiAliasedActivation(snake)
                out[f"{name}/anti_aliased"] = diff(wrapped(refs[case["x"]]), refs[case["anti_aliased"]])
    for name, case in cases.items():
        if name.startswith("model/"):
            out.update(model_diffs(name, case, refs))
        elif name == REAL:
            out.update(real_diffs(case, refs))
    return out


# ---------------------------------------------------------------------------------------------------
# Against upstream's references (pinned subprocess)


@functools.cache
def pinned_diffs() -> dict:
    return run_pinned(__file__, reference_dir("nn/bigvgan"), timeout=600)


def test_references_are_reproduced_bit_for_bit():
    got = pinned_diffs()
    cases = json.loads((REFERENCES / "references.json").read_text())["cases"]
    kinds = {kind: [n for n in cases if n.startswith(kind + "/")] for kind in ("filter", "resample", "snake", "model")}
    assert (len(kinds["filter"]), len(kinds["resample"]), len(kinds["snake"]), len(kinds["model"])) == (7, 9, 4, 5)
    for name in kinds["filter"] + kinds["resample"] + kinds["snake"]:
        assert name in got
    for name in kinds["model"]:
        runs = [n for n in got if n.startswith(name + "/") and n.endswith(("/wn", "/removed"))]
        assert len(runs) == 2 * 2 * len(cases[name]["mels"]), name  # legacy and plain, against wn and removed
        assert f"{name}/built_filters" in got
        assert sum(1 for n in got if n.startswith(f"{name}/folded/")) == len(cases[name]["folded"])
    assert {REAL, f"{REAL}/removed", f"{REAL}/layout"} <= set(got)
    bad = {name: value for name, value in got.items() if value != 0.0}
    assert not bad, bad


def test_the_references_cover_the_options():
    cases = json.loads((REFERENCES / "references.json").read_text())["cases"]
    configs = [c["config"] for n, c in cases.items() if n.startswith("model/")]
    for field, values in (("resblock", {"1", "2"}), ("activation", {"snake", "snakebeta"}),
                          ("snake_logscale", {True, False}), ("use_tanh_at_final", {True, False}),
                          ("use_bias_at_final", {True, False})):
        assert {c[field] for c in configs} == values, field
    assert {len(c["upsample_rates"]) for c in configs} == {2, 3}
    clamp = [c for n, c in cases.items() if n.startswith("model/") and not c["config"]["use_tanh_at_final"]]
    assert any(0 < f < 0.5 for c in clamp for f in c["clipped_fraction"])  # the clamp acts, on peaks only
    assert 0 < cases[REAL]["clipped_fraction"] < 0.5
    batches = {(case["config"]["num_mels"], len(case["mels"])) for n, case in cases.items() if n.startswith("model/")}
    assert all(count == 3 for _, count in batches)


# ---------------------------------------------------------------------------------------------------
# In process

RELEASED_22K = {  # bigvgan_v2_22khz_80band_256x/config.json, generator fields, plus training-only ones
    "resblock": "1", "num_gpus": 0, "batch_size": 32, "learning_rate": 0.0001, "upsample_rates": [4, 4, 2, 2, 2, 2],
    "upsample_kernel_sizes": [8, 8, 4, 4, 4, 4], "upsample_initial_channel": 1536, "resblock_kernel_sizes": [3, 7, 11],
    "resblock_dilation_sizes": [[1, 3, 5], [1, 3, 5], [1, 3, 5]], "use_tanh_at_final": False,
    "use_bias_at_final": False, "activation": "snakebeta", "snake_logscale": True, "use_cqtd_instead_of_mrd": True,
    "mpd_reshapes": [2, 3, 5, 7, 11], "segment_size": 65536, "num_mels": 80, "num_freq": 1025, "n_fft": 1024,
    "hop_size": 256, "win_size": 1024, "sampling_rate": 22050, "fmin": 0, "fmax": None,
    "dist_config": {"dist_backend": "nccl"}}


def tiny_config(**changes) -> bigvgan.BigVGANConfig:
    base = dict(resblock="1", upsample_rates=[2, 2], upsample_kernel_sizes=[4, 4], upsample_initial_channel=16,
                resblock_kernel_sizes=[3, 5], resblock_dilation_sizes=[[1, 3], [1, 2]], activation="snakebeta",
                snake_logscale=True, use_tanh_at_final=False, use_bias_at_final=False, num_mels=6)
    return bigvgan.BigVGANConfig.from_dict({**base, **changes})


def legacy_state(config: bigvgan.BigVGANConfig, seed: int = 3) -> dict:
    layout = bigvgan.checkpoint_layout(config)
    state = procedural_state({k: v for k, v in layout.items() if not k.endswith(".filter")}, seed,
                             config.snake_logscale)
    built = bigvgan.BigVGAN(config).state_dict()
    return {**state, **{k: built[k] for k in layout if k.endswith(".filter")}}


def test_the_released_config_reads_as_data():
    config = bigvgan.BigVGANConfig.from_dict(RELEASED_22K)
    assert config.upsample_rates == (4, 4, 2, 2, 2, 2) and config.resblock_dilation_sizes == ((1, 3, 5),) * 3
    assert config.upsample_factor == 256 == config.hop_size and config.sampling_rate == 22050
    assert not config.use_tanh_at_final and not config.use_bias_at_final
    older = {k: v for k, v in RELEASED_22K.items() if k not in ("use_tanh_at_final", "use_bias_at_final")}
    assert bigvgan.BigVGANConfig.from_dict(older).use_tanh_at_final  # upstream's defaults for older configs
    assert bigvgan.BigVGANConfig.from_dict(older).use_bias_at_final


@pytest.mark.parametrize(("change", "words"), [
    (dict(resblock="3"), "resblock"), (dict(activation="relu"), "activation"),
    (dict(upsample_kernel_sizes=[8, 8, 4]), "upsample_kernel_sizes"),
    (dict(resblock_dilation_sizes=[[1, 3, 5]]), "resblock_dilation_sizes"),
    (dict(upsample_initial_channel=100), "halved"), (dict(snake_logscale="yes"), "snake_logscale"),
    (dict(num_mels=0), "positive"), (dict(upsample_rates="4422"), "not a list"),
    (dict(resblock_dilation_sizes=[[1, 3, 5], [], [1]]), "positive")])
def test_bad_configs_are_refused_in_one_line(change, words):
    with pytest.raises(CheckpointError, match=words) as error:
        bigvgan.BigVGANConfig.from_dict({**RELEASED_22K, **change})
    assert "\n" not in str(error.value)


@pytest.mark.parametrize("field", ["num_mels", "resblock", "activation", "snake_logscale", "upsample_rates"])
def test_a_config_without_a_required_field_is_refused(field):
    with pytest.raises(CheckpointError, match=field):
        bigvgan.BigVGANConfig.from_dict({k: v for k, v in RELEASED_22K.items() if k != field})


def test_the_checkpoint_keys_are_upstreams():
    config = tiny_config()
    layout = bigvgan.checkpoint_layout(config)
    assert layout["conv_pre.weight_g"] == (16, 1, 1) and layout["conv_pre.weight_v"] == (16, 6, 7)
    assert layout["ups.0.0.weight_g"] == (16, 1, 1) and layout["ups.0.0.weight_v"] == (16, 8, 4)  # (in, out, k)
    assert layout["resblocks.0.convs1.1.weight_v"] == (8, 8, 3) and layout["resblocks.3.convs2.1.bias"] == (4,)
    assert layout["resblocks.2.activations.3.act.beta"] == (4,)
    assert layout["resblocks.0.activations.0.upsample.filter"] == (1, 1, 12)
    assert layout["resblocks.0.activations.0.downsample.lowpass.filter"] == (1, 1, 12)
    assert layout["activation_post.act.alpha"] == (4,) and "conv_post.bias" not in layout
    assert sum(k.startswith("resblocks.") and k.endswith(".weight_v") for k in layout) == 2 * 2 * (2 + 2)
    plain = bigvgan.checkpoint_layout(config, weight_norm=False)
    assert not any("weight_g" in k or "weight_v" in k for k in plain) and plain["conv_pre.weight"] == (16, 6, 7)
    assert set(plain) == set(bigvgan.BigVGAN(config).state_dict())
    block2 = bigvgan.checkpoint_layout(tiny_config(resblock="2", activation="snake", use_bias_at_final=True))
    assert "resblocks.0.convs.1.weight_v" in block2 and not any("convs1" in k for k in block2)
    assert "resblocks.0.activations.1.act.alpha" in block2 and "conv_post.bias" in block2


@pytest.mark.filterwarnings("ignore:`torch.nn.utils.weight_norm` is deprecated:FutureWarning")
def test_the_legacy_weight_norm_is_folded_as_upstreams_hook_computes_it():
    config = tiny_config()
    state = legacy_state(config)
    model = bigvgan.load_bigvgan({"generator": state}, config)
    for key in ("conv_pre", "ups.1.0", "resblocks.3.convs1.0", "conv_post"):
        want = torch._weight_norm(state[key + ".weight_v"], state[key + ".weight_g"], 0)
        assert torch.equal(model.get_submodule(key).weight, want)
    # the same with torch's own legacy hook on a module of that shape
    conv = torch.nn.ConvTranspose1d(16, 8, 4, 2, padding=1)
    hooked = torch.nn.utils.weight_norm(conv)
    with torch.no_grad():
        hooked.weight_g.copy_(state["ups.0.0.weight_g"])
        hooked.weight_v.copy_(state["ups.0.0.weight_v"])
        hooked.bias.copy_(state["ups.0.0.bias"])
    x = torch.randn(1, 16, 5)
    assert torch.equal(hooked(x), model.ups[0][0](x))
    assert not any(p.requires_grad for p in model.parameters()) and not model.training


def test_a_plain_state_dict_gives_the_same_model():
    config = tiny_config(activation="snake", use_tanh_at_final=True, use_bias_at_final=True)
    state = legacy_state(config)
    folded = bigvgan.load_bigvgan(state, config).state_dict()
    again = bigvgan.load_bigvgan(dict(folded), config)
    mel = torch.randn(2, 6, 5)
    with torch.inference_mode():
        assert torch.equal(again(mel), bigvgan.load_bigvgan(state, config)(mel))


def test_filters_come_from_the_checkpoint():
    config = tiny_config()
    state = legacy_state(config)
    key = "resblocks.1.activations.2.upsample.filter"
    state[key] = state[key].flip(-1) * 0.5
    model = bigvgan.load_bigvgan(state, config)
    assert torch.equal(model.get_submodule(key[: -len(".filter")]).filter, state[key])


@pytest.mark.parametrize(("edit", "words"), [
    (lambda s: s.pop("conv_post.weight_g"), "missing conv_post.weight_g"),
    (lambda s: s.pop("resblocks.0.activations.0.upsample.filter"), "missing resblocks.0.activations.0.upsample"),
    (lambda s: s.update({"conv_post.bias": torch.zeros(1)}), "unexpected conv_post.bias"),
    (lambda s: s.update({"conv_pre.weight_v": torch.zeros(16, 5, 7)}), "has shape"),
    (lambda s: s.update({"activation_post.act.alpha": torch.zeros(4, dtype=torch.int64)}), "not a float"),
    (lambda s: s.update({"activation_post.act.beta": [1.0] * 4}), "list")])
def test_a_checkpoint_that_does_not_fit_is_refused_in_one_line(edit, words):
    config = tiny_config()
    state = legacy_state(config)
    edit(state)
    with pytest.raises(CheckpointError, match=words) as error:
        bigvgan.load_bigvgan({"generator": state}, config, source="g.pt")
    assert str(error.value).startswith("g.pt") and "\n" not in str(error.value)


def test_something_that_is_not_a_state_dict_is_refused():
    with pytest.raises(CheckpointError, match="does not hold"):
        bigvgan.load_bigvgan([1, 2], tiny_config())


@pytest.mark.parametrize("mel", [torch.randn(6, 5), torch.randn(1, 7, 5), torch.randn(1, 6, 0),
                                 torch.zeros(1, 6, 5, dtype=torch.int64), "mel"])
def test_a_wrong_mel_is_refused_in_one_line(mel):
    model = bigvgan.load_bigvgan(legacy_state(tiny_config()), tiny_config())
    with pytest.raises(InputError, match="BigVGAN takes"):
        model(mel)


@pytest.mark.parametrize("resblock", ["1", "2"])
def test_shapes_and_range(resblock):
    config = tiny_config(resblock=resblock, upsample_rates=[3, 2], upsample_kernel_sizes=[7, 4])
    model = bigvgan.load_bigvgan(legacy_state(config), config)
    with torch.inference_mode():
        wave = model(torch.randn(2, 6, 7) * 3)
    assert wave.shape == (2, 1, 7 * 6) and config.upsample_factor == 6
    assert wave.abs().max() <= 1 and torch.isfinite(wave).all()


def test_the_generator_runs_in_half_precision():
    config = tiny_config()
    model = bigvgan.load_bigvgan(legacy_state(config), config, dtype=torch.bfloat16)
    assert model.activation_post.upsample.filter.dtype == torch.bfloat16
    with torch.inference_mode():
        assert model(torch.randn(1, 6, 4, dtype=torch.bfloat16)).dtype == torch.bfloat16


def test_kaiser_filters_sum_to_one_and_are_symmetric():
    for cutoff, half_width, size in ((0.25, 0.3, 12), (0.25, 0.3, 8), (0.25, 0.3, 4), (0.25, 0.3, 11)):
        taps = alias_free.kaiser_sinc_filter(cutoff, half_width, size)
        assert taps.shape == (1, 1, size) and taps.dtype == torch.float32
        assert abs(float(taps.sum()) - 1) < 1e-6 and torch.allclose(taps, taps.flip(-1), atol=1e-7)
    assert alias_free.kaiser_beta(2, 0.3) == 0.0  # below 21 dB: a rectangular window
    assert 0 < alias_free.kaiser_beta(4, 0.3) < alias_free.kaiser_beta(6, 0.3)
    with pytest.raises(ValueError):
        alias_free.kaiser_sinc_filter(0.0, 0.3, 12)


def test_resamplers_keep_the_length_and_pass_a_constant():
    x = torch.full((1, 2, 9), 0.7)
    up = alias_free.Upsampler(2, 12)(x)
    assert up.shape == (1, 2, 18) and torch.allclose(up, torch.full_like(up, 0.7), atol=1e-5)
    assert alias_free.Downsampler(2, 12)(up).shape == (1, 2, 9)
    assert alias_free.Upsampler(3)(x).shape == (1, 2, 27) and alias_free.Downsampler(3)(torch.randn(1, 2, 27)).shape \
        == (1, 2, 9)
    assert alias_free.LowPassFilter(0.3, 0.4, 1, 11)(x).shape == (1, 2, 9)
    act = alias_free.AntiAliasedActivation(torch.nn.Identity())
    signal = torch.sin(torch.arange(64.0) * 0.2)[None, None]
    assert torch.allclose(act(signal)[..., 8:-8], signal[..., 8:-8], atol=1e-2)  # band-limited: passes through


if __name__ == "__main__":  # the pinned subprocess of the reference tests
    torch.set_num_threads(1)
    print(json.dumps(reference_diffs(Path(sys.argv[1]))))
