"""CosyVoice 2 and 3's HiFT (mizuoto/nn/hift.py with hift_sine2.py's SineGen2; hift_causal.py) against upstream.

Against tests/parity/data/cosyvoice_hift (scripts/parity/cosyvoice_hift_references.py: FunAudioLLM/CosyVoice ace7c47's
HiFTGenerator and CausalHiFTGenerator with their F0 predictors, under the parity pins), in a pinned subprocess:
- four tiny configurations (CosyVoice 2's layout at 480 samples a frame with SineGen2, an odd SineGen2 one, CosyVoice
  3's causal layout with conv_pre_look_right 4, an odd causal one), every parameter rebuilt here from the recorded
  names and shapes by seedvc_weights' hift_state: per case (batch 1 and 2, 1 to 14 frames; finalize on and off) the
  F0 (float64 and float32 for the causal predictor), the source and the wave; CosyVoice 2's draws (upstream seeded
  with torch.manual_seed, ours given torch.Generator().manual_seed) and the generator's state after; CosyVoice 2's
  two-call stream with cache_source; CosyVoice 3's chunked streaming as generator.py checks it and as
  CosyVoice3Model.token2wav runs it;
- the causal noise tables: a tiny model's start phases, table rows and the generator's state after construction
  (from the same seed, through hift_causal.predictor_init_draws and CausalNoise.capture), and the tables of the
  real CosyVoice 3 built from its yaml (hift_causal.cosyvoice3_noise) at three offsets up to the table's end;
- the real state-dict layouts of both (parametrizations' original0/1).
Bitwise where the set's fingerprint is this machine's; elsewhere (tests/fallback.py) the floats within TOLERANCE and
the draws (machine-independent) still exact. In process: the draw contract, streaming lengths and equivalence,
lazy tables, loader and config errors in one line.
"""

import functools
import json
import math
import sys
from pathlib import Path

import pytest
import torch

if __name__ == "__main__":  # run as the pinned script: tests/ (helpers.py) is not on the path yet
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import cosyvoice_parts  # noqa: E402
from fallback import Comparison  # noqa: E402
from helpers import parity_module, reference_sets, run_pinned  # noqa: E402

from mizuoto.core.errors import CheckpointError, InputError  # noqa: E402
from mizuoto.nn import hift, hift_causal, hift_sine2  # noqa: E402
from mizuoto.nn.hift_f0 import F0PredictorConfig  # noqa: E402

SET = "cosyvoice_hift"
# the fallback's bound on a float output's max |diff|: about five times the spread the writer's --spread measured
# (3.8e-5 at most, with no pins or MKL_CBWR unset; oneDNN on 3.4e-5, 2 threads 1.4e-6; AMD EPYC, 2026-12)
TOLERANCE = 2e-4
hift_state = parity_module("seedvc_weights").hift_state  # the writer's seeded weights


def committed() -> Path:
    return reference_sets().SETS[SET].committed


@functools.cache
def info() -> dict:
    return json.loads((committed() / "references.json").read_text())


config_of, build = cosyvoice_parts.hift_config, cosyvoice_parts.vocoder


def diff(ours: torch.Tensor, theirs: torch.Tensor):
    """0.0 when bitwise equal; the max abs difference otherwise; None when shape or dtype differ."""
    if ours.shape != theirs.shape or ours.dtype != theirs.dtype:
        return None
    if torch.equal(ours, theirs):
        return 0.0
    return (ours.double() - theirs.double()).abs().max().item()


def reference_diffs(folder: Path) -> dict:
    """Ours against upstream's: {"floats": name -> diff, "draws": name -> diff (exact on any machine),
    "chunk_gaps": config -> our max |chunk - whole| per chunk}."""
    from safetensors.torch import load_file

    refs = load_file(str(folder / "references.safetensors"))
    recorded = json.loads((folder / "references.json").read_text())
    floats, draws, gaps = {}, {}, {}
    models = {}
    for name, entry in recorded["configs"].items():
        model, after = build(entry)
        models[name] = model
        if after is not None:
            draws[f"{name}/after_source_module"] = diff(after, refs[entry["after_source_module"]])
            draws[f"{name}/phases"] = diff(model.noise.phases("cpu"), refs[entry["phases"]])
            rows = refs[entry["table_rows"]].shape[1]
            draws[f"{name}/table_rows"] = diff(model.noise.sine_noise(rows, "cpu"), refs[entry["table_rows"]])
    with torch.inference_mode():
        for key, case in recorded["cases"].items():
            model = models[case["config"]]
            spf = model.config.samples_per_frame
            kind = case.get("kind")
            if kind is None and case["finalize"] is None:
                mel, g = refs[case["mel"]], torch.Generator().manual_seed(case["seed"])
                floats[f"{key}/f0"] = diff(model.predict_f0(mel), refs[case["f0"]])
                wave, source = model.inference(mel, g)
                floats[f"{key}/source"], floats[f"{key}/wave"] = diff(source, refs[case["source"]]), \
                    diff(wave, refs[case["wave"]])
                draws[f"{key}/after"] = diff(torch.rand(3, generator=g), refs[case["after"]])
            elif kind is None:
                mel, finalize = refs[case["mel"]], case["finalize"]
                floats[f"{key}/f0_64"] = diff(model.f0_predictor(mel.double(), finalize), refs[case["f0_64"]])
                floats[f"{key}/f0"] = diff(model.predict_f0(mel, finalize), refs[case["f0"]])
                wave, source = model.inference(mel, finalize)
                floats[f"{key}/source"], floats[f"{key}/wave"] = diff(source, refs[case["source"]]), \
                    diff(wave, refs[case["wave"]])
            elif kind == "cv2_stream":
                mels, g = [refs[m] for m in case["mels"]], torch.Generator().manual_seed(case["seed"])
                cache = case["cache_frames"]
                wave0, source0 = model.inference(mels[0], g)
                wave1, source1 = model.inference(torch.cat([mels[0][:, :, -cache:], mels[1]], dim=2), g,
                                                 cache_source=source0[:, :, -cache * spf:])
                for i, (w, s) in enumerate(((wave0, source0), (wave1, source1))):
                    floats[f"{key}/wave{i}"] = diff(w, refs[case["waves"][i]])
                    floats[f"{key}/source{i}"] = diff(s, refs[case["sources"][i]])
                draws[f"{key}/after"] = diff(torch.rand(3, generator=g), refs[case["after"]])
            elif kind == "cv3_chunks":
                mel, total, chunk, context = refs[case["mel"]], case["frames"], case["chunk"], case["context"]
                whole = model(mel)
                floats[f"{key}/whole"] = diff(whole, refs[case["whole"]])
                gaps[key] = []
                for index, start in enumerate(range(0, total, chunk)):
                    piece = model(mel[:, :, :start + chunk + context], finalize=start + chunk + context >= total)
                    piece = piece[:, start * spf:]
                    floats[f"{key}/{start}"] = diff(piece, refs[case["pieces"][index]])
                    gaps[key].append((whole[:, start * spf:start * spf + piece.shape[1]] - piece).abs().max().item()
                                     if piece.numel() else 0.0)
            elif kind == "cv3_token2wav":
                stream = hift_causal.CausalHiFTStream(model)
                mels = [refs[m] for m in case["mels"]]
                for i, mel in enumerate(mels):
                    floats[f"{key}/wave{i}"] = diff(stream.push(mel, finalize=i == len(mels) - 1),
                                                    refs[case["waves"][i]])
    real = recorded["real"]["cv3"]
    noise = hift_causal.cosyvoice3_noise()
    draws["real/cv3/phases"] = diff(noise.phases("cpu"), refs[real["phases"]])
    for name, (offset, ref) in real["rows"].items():
        draws[f"real/cv3/rows/{name}"] = diff(noise.sine_noise(offset + 16, "cpu")[:, offset:], refs[ref])
    noise.release()
    return {"floats": floats, "draws": draws, "chunk_gaps": gaps}


# ---------------------------------------------------------------------------------------------------------
# Against upstream's references (pinned subprocess)


@functools.cache
def pinned_diffs() -> dict:
    return run_pinned(__file__, committed(), timeout=300)


def test_references_are_reproduced_bit_for_bit(record_property):
    got = pinned_diffs()
    cases = info()["cases"]
    # every recorded output was compared
    assert len(got["floats"]) == 69, len(got["floats"])
    assert {k for k in cases if "/" in k} >= {"cv2/stream", "cv3/chunks", "cv3/token2wav", "cv3_odd/chunks"}
    bad_draws = {k: v for k, v in got["draws"].items() if v != 0.0}
    assert not bad_draws, bad_draws  # the random draws do not depend on the machine's floats
    assert len(got["draws"]) == 6 + 6 + 1 + 4  # 2 causal x 3 tables, 6 cv2 cases, the stream, the real tables
    comparison = Comparison.for_set(SET)
    for name, value in got["floats"].items():
        assert value is not None, f"{name}: shape or dtype differs from upstream's"
        if comparison.exact:
            assert value == 0.0, f"{name}: max |diff| {value:.3e} where the floats are the writer's"
        else:
            assert value <= TOLERANCE, f"{name}: max |diff| {value:.3e} over {TOLERANCE:.1e}"
    comparison.checked.append(f"{len(got['floats'])} outputs, worst {max(got['floats'].values()):.3e}")
    if comparison.exact:  # upstream's own chunks differ from its whole wave by roundings: ours by the same
        for key, gaps in got["chunk_gaps"].items():
            assert gaps == cases[key]["max_abs_chunk_minus_whole"], (key, gaps)
    record_property("parity_mode", comparison.mode)


def test_the_real_layouts_are_upstreams_state_dicts():
    real = info()["real"]
    cv3 = hift_causal.CausalHiFTConfig.from_cosyvoice(REAL_CV3)
    assert real["cv3"]["class"] == "CausalHiFTGenerator"
    assert hift.checkpoint_layout(cv3, "parametrized") == {k: tuple(v) for k, v in real["cv3"]["layout"].items()}
    cv2 = hift.HiFTConfig.from_cosyvoice({k: v for k, v in REAL_CV3.items() if k != "conv_pre_look_right"})
    assert cv2.source == "SineGen2" == real["cv2"]["source"]
    assert hift.checkpoint_layout(cv2, "parametrized") == {k: tuple(v) for k, v in real["cv2"]["layout"].items()}
    assert real["cv3"]["table_shapes"] == [[1, hift_sine2.TABLE_ROWS, 9], [1, hift_sine2.TABLE_ROWS, 1]]


# ---------------------------------------------------------------------------------------------------------
# In process

# cosyvoice3.yaml's hift arguments (cosyvoice2.yaml's are these without conv_pre_look_right)
REAL_CV3 = {"in_channels": 80, "base_channels": 512, "nb_harmonics": 8, "sampling_rate": 24000, "nsf_alpha": 0.1,
            "nsf_sigma": 0.003, "nsf_voiced_threshold": 10, "upsample_rates": [8, 5, 3],
            "upsample_kernel_sizes": [16, 11, 7], "istft_params": {"n_fft": 16, "hop_len": 4},
            "resblock_kernel_sizes": [3, 7, 11], "resblock_dilation_sizes": [[1, 3, 5]] * 3,
            "source_resblock_kernel_sizes": [7, 7, 11], "source_resblock_dilation_sizes": [[1, 3, 5]] * 3,
            "lrelu_slope": 0.1, "audio_limit": 0.99, "conv_pre_look_right": 4,
            "f0_predictor": {"num_class": 1, "in_channels": 80, "cond_channels": 512}}
SMALL = {**REAL_CV3, "in_channels": 6, "base_channels": 8, "upsample_rates": [4, 2], "upsample_kernel_sizes": [8, 4],
         "resblock_kernel_sizes": [3], "resblock_dilation_sizes": [[1, 3]], "source_resblock_kernel_sizes": [3, 5],
         "source_resblock_dilation_sizes": [[1], [1]], "f0_predictor": {"in_channels": 6, "cond_channels": 6}}


def small_causal(seed: int = 0):
    config = hift_causal.CausalHiFTConfig.from_cosyvoice(SMALL)
    state = hift_state(hift.checkpoint_layout(config, "parametrized"), seed, 0.5)
    return hift_causal.load_causal_hift(state, config, noise=hift_sine2.CausalNoise(
        torch.Generator().manual_seed(seed).get_state()))


def small_cv2(seed: int = 0):
    section = {k: v for k, v in SMALL.items() if k != "conv_pre_look_right"}
    config = hift.HiFTConfig.from_cosyvoice(section)
    return hift.load_hift(hift_state(hift.checkpoint_layout(config, "parametrized"), seed), config)


def test_cosyvoice_configs_pick_upstreams_source():
    assert hift.HiFTConfig.from_cosyvoice({"sampling_rate": 24000}).source == "SineGen2"
    assert hift.HiFTConfig.from_cosyvoice({"sampling_rate": 22050}).source == "SineGen"
    assert hift.HiFTConfig().source == "SineGen"  # Seed-VC's, whatever its rate
    config = hift_causal.CausalHiFTConfig.from_cosyvoice(REAL_CV3)
    assert config.conv_pre_look_right == 4 and config.samples_per_frame == 480
    assert config.f0_predictor == F0PredictorConfig(1, 80, 512)


def test_sinegen2_draws_phases_then_sine_noise_in_the_sines_layout_then_the_noise_branch():
    model = small_cv2()
    f0 = torch.tensor([[0.0, 120.0, 240.0], [300.0, 5.0, 60.0]])
    g = torch.Generator().manual_seed(11)
    with torch.inference_mode():
        model.source(f0, g)
    want = torch.Generator().manual_seed(11)
    harmonics, samples = 9, 3 * model.config.samples_per_frame
    torch.rand(2, harmonics, generator=want)
    torch.empty(2, harmonics, samples).transpose(1, 2).normal_(generator=want)  # randn_like of transposed sines
    torch.empty(2, samples, 1).normal_(generator=want)
    assert torch.equal(g.get_state(), want.get_state())
    other = torch.Generator().manual_seed(11)
    torch.rand(2, harmonics, generator=other)
    torch.randn(2, samples, harmonics, generator=other)  # a contiguous draw would consume differently
    torch.randn(2, samples, 1, generator=other)
    assert not torch.equal(g.get_state(), other.get_state())


def test_the_causal_model_draws_nothing_at_run_time_and_its_tables_are_one_draw():
    model = small_causal(3)
    g_state = torch.random.get_rng_state()
    with torch.inference_mode():
        model(torch.randn(1, 6, 5, generator=torch.Generator().manual_seed(0)))
    assert torch.equal(torch.random.get_rng_state(), g_state)
    noise = hift_sine2.CausalNoise(torch.Generator().manual_seed(5).get_state())
    short = noise.sine_noise(7, "cpu").clone()
    long = noise.sine_noise(300_000, "cpu")  # grows: made again from the start, the same prefix
    want = torch.Generator().manual_seed(5)
    phases = torch.rand(1, 9, generator=want)
    phases[:, 0] = 0
    assert torch.equal(noise.phases("cpu"), phases)
    assert torch.equal(long, torch.rand(1, 300_000, 9, generator=want)) and torch.equal(short, long[:, :7])
    with pytest.raises(InputError) as error:
        noise.sine_noise(hift_sine2.TABLE_ROWS + 1, "cpu")
    assert "300 s" in str(error.value) and "\n" not in str(error.value)


def test_capture_advances_past_every_draw_of_upstreams_constructor():
    g = torch.Generator().manual_seed(9)
    hift_sine2.CausalNoise.capture(g)
    want = torch.Generator().manual_seed(9)
    torch.rand(1, 9, generator=want)
    torch.rand(1, hift_sine2.TABLE_ROWS, 9, generator=want)
    torch.nn.init.kaiming_uniform_(torch.empty(1, 9), a=math.sqrt(5), generator=want)
    torch.nn.init.uniform_(torch.empty(1), -1 / 3, 1 / 3, generator=want)
    torch.rand(1, hift_sine2.TABLE_ROWS, 1, generator=want)
    assert torch.equal(g.get_state(), want.get_state())


@pytest.mark.parametrize("frames", [9, 13, 16])
def test_streaming_lengths_and_chunks_against_the_whole(frames):
    """generator.py's own check: a prefix's non-final wave is the whole wave's start, up to roundings."""
    model = small_causal()
    spf, look = model.config.samples_per_frame, model.config.conv_pre_look_right
    mel = torch.randn(2, 6, frames, generator=torch.Generator().manual_seed(frames))
    with torch.inference_mode():
        whole = model(mel)
        open_wave, source = model.inference(mel, finalize=False)
        stream = hift_causal.CausalHiFTStream(model)
        pieces = [stream.push(mel[:, :, :8], False), stream.push(mel[:, :, 8:], True)]
    assert whole.shape == (2, frames * spf)
    assert open_wave.shape == (2, (frames - hift_causal.F0_LOOK_AHEAD - look - 1) * spf)
    assert source.shape == (2, 1, (frames - hift_causal.F0_LOOK_AHEAD) * spf)
    assert pieces[0].shape == (2, 0)  # 8 frames: 3 + 4 look-ahead, the last frame left to the next call
    assert torch.allclose(open_wave, whole[:, :open_wave.shape[1]], atol=1e-5)
    assert torch.allclose(torch.cat(pieces, 1), whole, atol=1e-5)


def test_the_causal_checkpoint_layout_and_float64_predictor():
    config = hift_causal.CausalHiFTConfig.from_cosyvoice(SMALL)
    layout = hift.checkpoint_layout(config, "parametrized")
    assert layout["ups.0.parametrizations.weight.original0"] == (4, 1, 1)  # a conv (out, in, k), g over out
    assert layout["conv_pre.parametrizations.weight.original1"] == (8, 6, 5)  # kernel conv_pre_look_right + 1
    assert layout["f0_predictor.condnet.0.parametrizations.weight.original1"] == (6, 6, 4)
    assert "source_downs.0.weight" in layout and "m_source.l_linear.weight" in layout
    state = hift_state(layout, 4)
    model = hift_causal.load_causal_hift(state, config, noise=hift_sine2.CausalNoise(torch.Generator().get_state()))
    g, v = (state[f"f0_predictor.condnet.2.parametrizations.weight.original{i}"] for i in (0, 1))
    assert torch.equal(model.f0_predictor.condnet[2].weight, torch._weight_norm(v.double(), g.double(), 0))
    assert model.conv_pre.weight.dtype == torch.float32 and not model.training
    assert not any(p.requires_grad for p in model.parameters())
    with torch.inference_mode():
        assert model.predict_f0(torch.randn(1, 6, 5)).dtype == torch.float32


@pytest.mark.parametrize("change", ["missing", "unexpected", "shape", "legacy_config", "causal_to_load_hift"])
def test_bad_checkpoints_are_one_line_errors(change):
    config = hift_causal.CausalHiFTConfig.from_cosyvoice(SMALL)
    state = hift_state(hift.checkpoint_layout(config, "parametrized"), 1)
    noise = hift_sine2.CausalNoise(torch.Generator().get_state())
    with pytest.raises(CheckpointError) as error:
        if change == "missing":
            del state["f0_predictor.classifier.bias"]
        elif change == "unexpected":
            state["m_source.l_sin_gen.sine_waves"] = torch.zeros(1)
        elif change == "shape":
            state["conv_post.bias"] = torch.zeros(3)
        if change == "legacy_config":
            hift_causal.load_causal_hift(state, hift.HiFTConfig(), noise=noise)
        elif change == "causal_to_load_hift":
            hift.load_hift(state, config)
        else:
            hift_causal.load_causal_hift(state, config, source="hift.pt", noise=noise)
    assert "\n" not in str(error.value)
    assert {"missing": "missing f0_predictor.classifier.bias", "unexpected": "unexpected m_source.l_sin_gen",
            "shape": "conv_post.bias", "legacy_config": "CausalHiFTConfig",
            "causal_to_load_hift": "load_causal_hift"}[change] in str(error.value)


@pytest.mark.parametrize(("change", "words"), [
    ({"nb_harmonics": 7}, "nb_harmonics must be 8"),
    ({"conv_pre_look_right": 0}, "conv_pre_look_right"),
    ({"resblock_kernel_sizes": [4], "resblock_dilation_sizes": [[2]]}, "even dilation"),
    ({"sampling_rate": 22050}, "22050"),
    ({"source": "SineGen"}, "runs SineGen2"),
    ({"f0_predictor": 3}, "mapping"),
])
def test_bad_causal_configs_are_one_line_errors(change, words):
    with pytest.raises(CheckpointError) as error:
        hift_causal.CausalHiFTConfig.from_cosyvoice({**SMALL, **change})
    assert words in str(error.value) and "\n" not in str(error.value)


@pytest.mark.parametrize("bad", ["cpu_generator", "no_generator", "cache_shape", "short_mel", "generator_given"])
def test_bad_inputs_are_one_line_errors(bad):
    cv2, cv3 = small_cv2(), small_causal()
    mel, g = torch.randn(1, 6, 3), torch.Generator().manual_seed(0)
    with pytest.raises(InputError) as error, torch.inference_mode():
        if bad == "cpu_generator":
            cv2(mel, g, cpu_generator=torch.Generator())
        elif bad == "no_generator":
            cv2(mel, None)
        elif bad == "cache_shape":
            cv2.inference(mel, g, cache_source=torch.zeros(1, 2, 5))
        elif bad == "short_mel":
            cv3(torch.randn(1, 6, 3), finalize=False)
        else:
            cv3.m_source(torch.zeros(1, 16, 1), g)
    assert "\n" not in str(error.value)


def test_cache_source_replaces_the_first_samples():
    model = small_cv2()
    mel = torch.randn(1, 6, 4, generator=torch.Generator().manual_seed(1))
    cache = torch.full((1, 1, 20), 0.25)
    with torch.inference_mode():
        _, plain = model.inference(mel, torch.Generator().manual_seed(2))
        _, cached = model.inference(mel, torch.Generator().manual_seed(2), cache_source=cache)
    assert torch.equal(cached[:, :, :20], cache) and torch.equal(cached[:, :, 20:], plain[:, :, 20:])


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_on_cuda_sinegen2_draws_from_the_device_generator_and_tables_are_made_there():
    cv2 = small_cv2().cuda()
    mel = torch.randn(1, 6, 3, device="cuda")
    with torch.inference_mode():
        first = cv2(mel, torch.Generator("cuda").manual_seed(5))
        again = cv2(mel, torch.Generator("cuda").manual_seed(5))
    assert torch.equal(first, again)
    cv3 = small_causal().cuda()
    with torch.inference_mode():
        wave = cv3(mel)
    assert wave.device.type == "cuda" and torch.equal(cv3.noise.phases("cuda").cpu(), cv3.noise.phases("cpu"))


if __name__ == "__main__":  # the pinned subprocess of the reference test
    torch.set_num_threads(1)
    print(json.dumps(reference_diffs(Path(sys.argv[1]))))
