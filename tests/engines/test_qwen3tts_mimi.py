"""Qwen3-TTS's 12 Hz codec encoder (reference audio -> codes), without upstream installed.

Bit-exactness against qwen-tts 0.1.1 / transformers 4.57.3 is checked live by
scripts/parity/qwen3tts_mimi_live.py (many configurations, lengths and rates). Here, in a subprocess under
the parity pins (those the references were written under), against the qwen3tts reference set valid on
this machine (`reference_dir("qwen3tts")`: tests/parity/data/qwen3tts, or the set written here by
upstream): the codes of the two test references through the set's tiny Base model's speech tokenizer
against the `ref_code_*` upstream's `create_voice_clone_prompt` returned there (written by
scripts/parity/qwen3tts_references.py), and the latents before quantisation against the set's
golden/mimi.json (written by the live script's `--golden DIR` mode; `python scripts/parity/reference_sets.py
write qwen3tts` runs both). Then, in process (on the committed folder's model): the `qwen3tts.mimi`
attention site (dispatched here, with its MaskInfo checked), frame counts and trimming, the released
configuration and key layout, and every way an input or a folder can be wrong.
"""

import hashlib
import json
import math
import shutil
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from mizuoto.core.errors import CheckpointError, InputError
from mizuoto.engines.qwen3tts import mimi_transformer
from mizuoto.engines.qwen3tts.mimi_config import MimiEncoderConfig
from mizuoto.engines.qwen3tts.mimi_encoder import MimiConv1d, MimiEncoder, load_mimi_encoder
from mizuoto.engines.qwen3tts.ref_audio import at_rate
from mizuoto.runtime.accel import dispatch, policy_for
from mizuoto.runtime.context import RequestContext

if __name__ == "__main__":  # run as the pinned script: tests/ (helpers.py) is not on the path yet
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from helpers import fingerprint, reference_dir, run_pinned  # noqa: E402

DATA = Path(__file__).resolve().parents[1] / "parity" / "data" / "qwen3tts"  # the committed set
BASE = DATA / "base"  # its tiny Base model, the input of the in-process tests
# code references (T, Q) of the upstream cases that cloned from each test reference alone
CODES = {
    "ref_a": ["bs_icl_streaming_s21/ref_code_0", "bs_icl_shorttext_s23/ref_code_0"],
    "ref_b": ["bs_icl_nonstreaming_s22/ref_code_0"],
}
# ... and from references at other rates, which upstream resamples to 24 kHz with librosa (soxr HQ) first
OTHER_RATES = {"ref_c16": (16000, "bs_icl_16k_s25/ref_code_0"), "ref_d48": (48000, "bs_icl_48k_s26/ref_code_0")}
# ... and from both in one request (upstream encodes them as one zero-padded batch)
BATCH_CODES = ["bs_batch2_icl_s24/ref_code_0", "bs_batch2_icl_s24/ref_code_1"]
# Upstream's encoder -> encoder_transformer -> downsample of MimiModel._encode_frame for each reference,
# with the set's base model's speech tokenizer (qwen-tts 0.1.1, transformers 4.57.3, under the pins), is
# golden/mimi.json of the reference set, written by `scripts/parity/qwen3tts_mimi_live.py --golden DIR`
# (run by `reference_sets.py write qwen3tts`).
# The released codec's encoder_config (the fields that differ from MimiConfig's defaults) and its layout:
# 225 encoder.* tensors, 56,234,304 values, names and shapes as transformers' MimiModel minus its decoder.
RELEASED = {"model_type": "qwen3_tts_tokenizer_12hz", "encoder_valid_num_quantizers": 16,
            "encode_downsample_rate": 1920, "input_sample_rate": 24000,
            "encoder_config": {"_frame_rate": 12.5, "codebook_size": 2048, "codebook_dim": 256, "num_quantizers": 32,
                               "hidden_size": 512, "upsampling_ratios": [8, 6, 5, 4], "sliding_window": 250}}
RELEASED_LAYOUT = (225, 56234304)


def ours_pinned_results(data: Path) -> dict:
    """What this port gives for the test references of the set `data` (run in the pinned subprocess)."""
    torch.set_num_threads(1)
    refs = load_file(str(data / "references.safetensors"))
    model = load_mimi_encoder(data / "base")
    weights = hashlib.sha256((data / "base" / "speech_tokenizer" / "model.safetensors").read_bytes()).hexdigest()
    out = {}
    for name, keys in CODES.items():
        wave = refs[f"audio/{name}"]
        with torch.inference_mode():
            latents = model.latents(wave[None])
        out[f"latents/{name}"] = {"weights_sha256": weights, "audio_sha256": fingerprint(wave)["sha256"],
                                  **fingerprint(latents)}
        for key in keys:
            out[key] = _compared(model.encode(wave), refs[key])
    for name, (rate, key) in OTHER_RATES.items():
        out[key] = _compared(model.encode(refs[f"audio/{name}"], rate), refs[key])
    batch = model.encode_batch([refs["audio/ref_a"], refs["audio/ref_b"]])
    for key, codes in zip(BATCH_CODES, batch, strict=True):
        out[key] = _compared(codes, refs[key])
    return out


def _compared(codes: torch.Tensor, reference: torch.Tensor) -> dict:
    want = reference.T
    return {"shape": [list(codes.shape), list(want.shape)], "dtype": str(codes.dtype),
            "equal": codes.shape == want.shape and bool(torch.equal(codes, want))}


# ---------------------------------------------------------------------------------------------------
# Against upstream


@pytest.fixture(scope="module")
def references() -> Path:
    return reference_dir("qwen3tts")


@pytest.fixture(scope="module")
def ours_pinned(references):
    info = json.loads((references / "references.json").read_text())
    assert info["num_threads"] == 1 and info["ATEN_CPU_CAPABILITY"] == "avx2"
    return run_pinned(__file__, references, timeout=300)


@pytest.fixture(scope="module")
def golden_latents(references) -> dict:
    return json.loads((references / "golden" / "mimi.json").read_text())


@pytest.mark.parametrize("key", [k for keys in CODES.values() for k in keys] + BATCH_CODES
                         + [k for _, k in OTHER_RATES.values()])
def test_codes_identical_to_upstream(ours_pinned, key):
    got = ours_pinned[key]
    assert got["dtype"] == "torch.int64" and got["shape"][0] == got["shape"][1], got["shape"]
    assert got["equal"]


@pytest.mark.parametrize("name", list(CODES))
def test_latents_identical_to_upstream(ours_pinned, golden_latents, name):
    got, want = ours_pinned[f"latents/{name}"], golden_latents[name]
    changed = got["weights_sha256"] != want["weights_sha256"] or got["audio_sha256"] != want["audio_sha256"]
    assert not changed, \
        "the test model or references changed: rewrite the set (python scripts/parity/reference_sets.py write qwen3tts)"
    assert got["shape"] == want["shape"]
    assert got["sha256"] == want["sha256"], f"sum {got['sum']} vs upstream's {want['sum']}"


# ---------------------------------------------------------------------------------------------------
# The attention site (dispatched in this process, so MIZUOTO_TEST_ACCEL=count sees it)


def test_attention_goes_through_the_mimi_site(monkeypatch):
    site = mimi_transformer.SITE
    assert site.name == "qwen3tts.mimi" and not site.approx_ok
    monkeypatch.setattr(dispatch, "DEBUG", True)  # every call checks its MaskInfo against the dense arguments
    calls = []
    original = site.reference

    def reference(q, k, v, mask, causal, scale, enable_gqa, dropout_p):
        calls.append((tuple(q.shape), tuple(k.shape), mask, causal, scale, enable_gqa))
        return original(q, k, v, mask, causal, scale, enable_gqa, dropout_p)

    monkeypatch.setattr(site, "reference", reference)
    model = load_mimi_encoder(BASE)
    layers = model.config.num_hidden_layers
    model.encode(torch.rand(3000) - 0.5)  # 94 frames at the tiny codec's 750 Hz, far past its window of 16
    # transformers' sdpa path: no mask, is_causal, SDPA's own scale, heads already repeated
    assert calls == [((1, 4, 94, 8), (1, 4, 94, 8), None, True, None, False)] * layers
    calls.clear()
    model.encode(torch.rand(20) - 0.5)  # one frame: transformers passes is_causal only for several
    assert calls == [((1, 4, 1, 8), (1, 4, 1, 8), None, False, None, False)] * layers


def test_grouped_heads_are_repeated_before_the_site(monkeypatch):
    monkeypatch.setattr(dispatch, "DEBUG", True)
    shapes = []
    original = mimi_transformer.SITE.reference
    monkeypatch.setattr(mimi_transformer.SITE, "reference",
                        lambda q, k, v, *rest: shapes.append((tuple(q.shape), tuple(k.shape))) or original(q, k, v,
                                                                                                          *rest))
    config = MimiEncoderConfig(hidden_size=16, num_filters=2, upsampling_ratios=(4, 4), frame_rate=750.0,
                               num_hidden_layers=1, num_attention_heads=4, num_key_value_heads=2, head_dim=4,
                               intermediate_size=32, codebook_size=16, codebook_dim=8, num_quantizers=4,
                               vector_quantization_hidden_dimension=8, encoder_valid_num_quantizers=3,
                               encode_downsample_rate=32)
    torch.manual_seed(0)
    codes = MimiEncoder(config).encode(torch.rand(200) - 0.5)
    assert codes.shape == (3, math.ceil(200 / 32)) and shapes == [((1, 4, 13, 4), (1, 4, 13, 4))]


def test_a_bound_policy_runs_the_mimi_attention():
    model = load_mimi_encoder(BASE)
    wave = torch.rand(2000) - 0.5
    expected, latents = model.encode(wave), model.latents(wave[None])
    run = policy_for("math").start()
    with RequestContext(0, accel=run).step():
        codes, bound = model.encode(wave), model.latents(wave[None])
    assert sum(run.used.values()) == 2 * model.config.num_hidden_layers
    assert torch.allclose(bound, latents, atol=1e-5, rtol=0)
    assert (codes == expected).float().mean() > 0.9  # a code may flip where two entries are nearly as close


# ---------------------------------------------------------------------------------------------------
# Frames, trimming, inputs


@pytest.mark.parametrize("samples", [1, 63, 64, 65, 1000, 4800])
def test_codes_are_trimmed_to_ceil_samples_over_the_frame(samples):
    model = load_mimi_encoder(BASE)
    codes = model.encode(torch.rand(samples) - 0.5)
    assert codes.shape == (4, math.ceil(samples / 64)) and codes.dtype == torch.int64
    assert int(codes.min()) >= 0 and int(codes.max()) < model.config.codebook_size


def test_encoding_is_causal_so_a_prefix_keeps_its_codes():
    model = load_mimi_encoder(BASE)
    wave = torch.rand(4800) - 0.5
    assert torch.equal(model.encode(wave[:3200])[:, :-1], model.encode(wave)[:, :49])


def test_a_batch_is_zero_padded_and_each_reference_trimmed():
    model = load_mimi_encoder(BASE)
    long, short = torch.rand(3000) - 0.5, torch.rand(1000) - 0.5
    both = model.encode_batch([long, short])
    assert [c.shape for c in both] == [(4, 47), (4, 16)]
    assert torch.equal(both[0], model.encode(long))  # the longest needs no padding
    padded = model.encode(torch.cat([short, torch.zeros(2000)]))
    assert torch.equal(both[1], padded[:, :16])  # the short one is encoded as if followed by silence
    assert torch.equal(model.encode_batch([short])[0], model.encode(short))
    with pytest.raises(InputError, match="no reference"):
        model.encode_batch([])


def test_other_rates_are_resampled_first():
    model = load_mimi_encoder(BASE)
    wave = torch.rand(3000) - 0.5
    assert torch.equal(model.encode(wave, sample_rate=16000), model.encode(at_rate(wave, 16000)))
    assert model.encode(wave, sample_rate=16000).shape[1] == math.ceil(math.ceil(3000 * 1.5) / 64)


@pytest.mark.parametrize("wave, expected", [
    (torch.zeros(0), "empty"),
    (torch.zeros(2, 100), "mono"),
    (torch.zeros(100, dtype=torch.int32), "float"),
])
def test_bad_audio_gives_input_errors(wave, expected):
    with pytest.raises(InputError, match=expected):
        load_mimi_encoder(BASE).encode(wave)


def test_bfloat16_load_gives_the_same_kind_of_codes():
    model = load_mimi_encoder(BASE, dtype=torch.bfloat16)
    assert model.downsample.conv.weight.dtype == torch.bfloat16
    assert model.encode(torch.rand(640) - 0.5).shape == (4, 10)


# ---------------------------------------------------------------------------------------------------
# The causal convs' padding (transformers' MimiConv1d)


def _transformers_extra_padding(length: int, kernel: int, stride: int) -> int:
    # The expression transformers evaluates on int64 tensors, whose true division gives float32.
    k, s = torch.tensor(kernel), torch.tensor(stride)
    frames = torch.ceil((length - k + (k - s)) / s + 1).to(torch.int64) - 1
    return int(frames * s + k - (k - s) - length)


@pytest.mark.parametrize("length", [1, 2, 7, 959, 960, 961, 100_003, 16_777_217, 50_331_651, 123_456_789])
@pytest.mark.parametrize("kernel, stride", [(7, 1), (8, 4), (16, 8), (4, 2), (10, 5)])
def test_extra_padding_is_transformers_float32_count(length, kernel, stride):
    conv = MimiConv1d(MimiEncoderConfig(), 1, 1, kernel, stride=stride)
    assert conv.extra_padding(length) == _transformers_extra_padding(length, kernel, stride)


def test_streaming_config_pads_from_the_first_call_cache_only():
    config = MimiEncoderConfig(use_streaming=True)
    conv = MimiConv1d(config, 1, 1, 4, stride=2, bias=False, pad_mode="replicate")
    with torch.no_grad():
        conv.conv.weight.fill_(1.0)
    x = torch.arange(1.0, 7.0)[None, None]  # replicate cache: two copies of the first sample, nothing on the right
    assert conv(x).flatten().tolist() == [1 + 1 + 1 + 2, 1 + 2 + 3 + 4, 3 + 4 + 5 + 6]
    with pytest.raises(InputError, match="too short"):
        conv(x[..., :1])


# ---------------------------------------------------------------------------------------------------
# Configuration, layout, loading


def test_released_config_and_layout():
    config = MimiEncoderConfig.from_tokenizer_config(RELEASED)
    assert config.hop_length == 960 and config.encodec_frame_rate == 25 and config.downsample_kernel == 4
    assert config.attention_head_dim == 64 and config.encoder_valid_num_quantizers == 16
    with torch.device("meta"):
        model = MimiEncoder(config)
    state = model.state_dict()
    assert (len(state), sum(t.numel() for t in state.values())) == RELEASED_LAYOUT
    for name in ("encoder.layers.0.conv.weight", "encoder.layers.1.block.1.conv.bias", "encoder.layers.14.conv.weight",
                 "encoder_transformer.layers.7.self_attn.o_proj.weight", "encoder_transformer.layers.0.mlp.fc1.weight",
                 "encoder_transformer.layers.3.mlp_layer_scale.scale", "downsample.conv.weight",
                 "quantizer.semantic_residual_vector_quantizer.layers.0.codebook.embed_sum",
                 "quantizer.acoustic_residual_vector_quantizer.layers.30.codebook.cluster_usage",
                 "quantizer.acoustic_residual_vector_quantizer.output_proj.weight"):
        assert name in state, name
    assert state["downsample.conv.weight"].shape == (512, 512, 4)


def test_missing_entries_take_mimi_config_defaults():
    config = MimiEncoderConfig.from_tokenizer_config({"model_type": "qwen3_tts_tokenizer_12hz"})
    assert config == MimiEncoderConfig()
    assert config.effective_frame_rate == 12.5  # sampling_rate / (hop * 2) when _frame_rate is absent


def test_model_folder_and_speech_tokenizer_folder_load_the_same():
    a, b = load_mimi_encoder(BASE), load_mimi_encoder(BASE / "speech_tokenizer")
    wave = torch.rand(700) - 0.5
    assert torch.equal(a.encode(wave), b.encode(wave))
    assert not any(p.requires_grad for p in a.parameters())


def _copy_codec(tmp_path: Path, config_change=None, tensors_change=None) -> Path:
    folder = tmp_path / "speech_tokenizer"
    shutil.copytree(BASE / "speech_tokenizer", folder)
    if config_change:
        config = json.loads((folder / "config.json").read_text())
        config_change(config)
        (folder / "config.json").write_text(json.dumps(config))
    if tensors_change:
        tensors = load_file(str(folder / "model.safetensors"))
        tensors_change(tensors)
        save_file(tensors, str(folder / "model.safetensors"))
    return folder


@pytest.mark.parametrize("config_change, tensors_change, expected", [
    (lambda c: c.update(model_type="qwen3_tts_tokenizer_25hz"), None, "only the 12 Hz tokenizer"),
    (lambda c: c["encoder_config"].update(pad_mode="circular"), None, "pad_mode 'circular'"),
    (lambda c: c["encoder_config"].update(use_streaming=True, pad_mode="reflect"), None, "reflect"),
    (lambda c: c["encoder_config"].update(use_streaming=True, use_causal_conv=False), None, "need causal"),
    (lambda c: c["encoder_config"].update(num_semantic_quantizers=8), None, "num_semantic_quantizers 8"),
    (lambda c: c["encoder_config"].update(hidden_act="relu"), None, "only gelu"),
    (lambda c: c["encoder_config"].update(_frame_rate=750.0), None, "no downsampling layer"),
    (lambda c: c.update(encoder_valid_num_quantizers=9), None, "encoder_valid_num_quantizers 9"),
    (lambda c: c["encoder_config"].update(num_attention_heads=3), None, "do not share"),
    (lambda c: c["encoder_config"].update(hidden_size="wide"), None, "unusable value"),
    (None, lambda t: t.pop("encoder.downsample.conv.weight"), "missing encoder.downsample.conv.weight"),
    (None, lambda t: t.update({"encoder.upsample.conv.weight": torch.zeros(1)}), "unexpected encoder.upsample"),
    (None, lambda t: [t.pop(k) for k in list(t) if k.startswith("encoder.")], "no encoder"),
    (lambda c: c["encoder_config"].update(num_filters=8), None, "wrongly shaped"),
])
def test_bad_folders_give_one_line_checkpoint_errors(tmp_path, config_change, tensors_change, expected):
    folder = _copy_codec(tmp_path, config_change, tensors_change)
    with pytest.raises(CheckpointError, match=expected) as info:
        load_mimi_encoder(folder)
    assert "\n" not in str(info.value)


def test_unreadable_folders_are_checkpoint_errors(tmp_path):
    with pytest.raises(CheckpointError, match="is not a folder"):
        load_mimi_encoder(tmp_path / "nowhere")
    (tmp_path / "config.json").write_text("{not json")
    with pytest.raises(CheckpointError, match="not readable JSON"):
        load_mimi_encoder(tmp_path)


if __name__ == "__main__":  # the pinned subprocess of the *_identical_to_upstream tests: its argument is the set
    print(json.dumps(ours_pinned_results(Path(sys.argv[1]))))
