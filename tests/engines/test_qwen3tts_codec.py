"""Qwen3-TTS's 12 Hz codec decoder, without upstream installed.

Bit-exactness against qwen-tts 0.1.1 is checked live by scripts/parity/qwen3tts_codec_live.py (in an
environment with upstream). Here, in a subprocess under the parity pins, against the qwen3tts reference
set valid on this machine (`reference_dir("qwen3tts")`: tests/parity/data/qwen3tts, or the set written here
by upstream; `python scripts/parity/reference_sets.py write qwen3tts` writes it):
- golden hashes of upstream's output for a tiny decoder whose weights and codes this file generates,
  golden/codec.json (written by that script's `--golden DIR` mode, which reads GOLDEN_DECODER,
  GOLDEN_CASES, `randomise` and `golden_codes` from this file: keep them plain torch);
- upstream's decoded waves of every generated utterance and the codec unit references
  (scripts/parity/qwen3tts_references.py), from the tiny models' own folders.
Then, in process: chunking and streaming, shapes, the clamps, the published key layout, the attention
site, and every way a checkpoint folder or the codes can be wrong.
"""

import hashlib
import json
import math
import sys
from pathlib import Path

import pytest
import torch

from mizuoto.core.errors import CheckpointError, InputError
from mizuoto.engines.qwen3tts import codec_transformer
from mizuoto.engines.qwen3tts.codec_config import CodecDecoderConfig
from mizuoto.engines.qwen3tts.codec_decoder import CodecDecoder, load_codec_decoder
from mizuoto.runtime.accel import dispatch, policy_for
from mizuoto.runtime.context import RequestContext

if __name__ == "__main__":  # run as the pinned script: tests/ (helpers.py) is not on the path yet
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from helpers import reference_dir, run_pinned  # noqa: E402

# the committed set: only its names parametrise the tests; the comparisons read reference_dir("qwen3tts")
REFERENCES = Path(__file__).resolve().parents[1] / "parity" / "data" / "qwen3tts"

# A tiny decoder (field names are upstream's too): grouped heads, head_dim != hidden / heads, a window
# of 8 frames and 12 samples per frame.
GOLDEN_DECODER = dict(codebook_size=32, codebook_dim=16, num_quantizers=4, latent_dim=24, hidden_size=32,
                      num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=12,
                      intermediate_size=48, sliding_window=8, upsampling_ratios=[2], upsample_rates=[2, 3],
                      decoder_dim=32)
# name: (batch, frames, chunk_size, left_context) for chunked_decode
GOLDEN_CASES = {
    "one_frame": (1, 1, 300, 25),
    "window": (2, 8, 300, 25),  # as long as the window: the band mask is all of the causal mask
    "small_chunks": (2, 23, 7, 3),
    "upstream_chunks": (1, 326, 300, 25),  # a second chunk behind 25 frames of context
}
# Upstream's hashes of GOLDEN_CASES (Qwen3TTSTokenizerV2Decoder.chunked_decode, qwen-tts 0.1.1, transformers
# 4.57.3, under the pins) are golden/codec.json of the reference set, written by
# `scripts/parity/qwen3tts_codec_live.py --golden DIR` (run by `reference_sets.py write qwen3tts`).


def randomise(named_parameters, seed: int, final_conv: str) -> None:
    """Every parameter uniform noise, each from its own generator (in name order): norms and usages
    near 1, LayerScale / gamma far from their tiny init, Snake alpha/beta around 0 (logarithms), three
    codebook usages below the clamp (with tiny sums, so the clamp decides those entries), and the
    residual units' last convs and the final conv small enough that most samples stay inside the clamp."""
    with torch.no_grad():
        for index, (name, p) in enumerate(sorted(named_parameters, key=lambda item: item[0])):
            generator = torch.Generator().manual_seed(seed + index)
            u = torch.rand(p.shape, generator=generator) * 2 - 1
            if name.endswith(("alpha", "beta")):
                p.copy_(0.4 * u)
            elif name.endswith("norm.weight"):
                p.copy_(1 + 0.3 * u)
            elif name.endswith("cluster_usage"):
                usage = 1.5 + u
                usage[:3] = torch.tensor([1e-7, 0.0, -2.0])
                p.copy_(usage)
            elif name.endswith("embedding_sum"):
                p.copy_(u)
                p[:3].mul_(1e-6)
            elif name.endswith(("scale", "gamma")):
                p.copy_(0.3 + 0.2 * u)
            elif name.endswith("bias"):
                p.copy_(0.1 * u)
            else:
                fan_in = p[0].numel() if p.dim() > 1 else p.numel()
                p.copy_(u * math.sqrt(3.0 / fan_in))
            if name == final_conv or name.endswith("conv2.conv.weight"):  # residual branches grow the wave
                p.mul_(0.3)


def golden_codes(config: dict, batch: int, frames: int, name: str) -> torch.Tensor:
    generator = torch.Generator().manual_seed(sum(map(ord, name)))
    return torch.randint(0, config["codebook_size"], (batch, config["num_quantizers"], frames), generator=generator)


# ---------------------------------------------------------------------------------------------------
# Helpers


def final_conv(config: CodecDecoderConfig) -> str:
    return f"decoder.{len(config.upsample_rates) + 2}.conv.weight"


def tiny_decoder(seed: int = 0, config: CodecDecoderConfig | None = None) -> CodecDecoder:
    config = config or CodecDecoderConfig(**GOLDEN_DECODER, decode_upsample_rate=12)
    with torch.device("meta"):
        model = CodecDecoder(config)
    model.to_empty(device="cpu")
    randomise(model.named_parameters(), seed, final_conv(config))
    model.pre_transformer.reset_buffers()
    return model.eval().requires_grad_(False)


def config_json(decoder: dict | None = None, **top) -> dict:
    return {"architectures": ["Qwen3TTSTokenizerV2Model"], "model_type": "qwen3_tts_tokenizer_12hz",
            "encoder_valid_num_quantizers": 16, "input_sample_rate": 24000, "output_sample_rate": 24000,
            "decode_upsample_rate": 12, "encode_downsample_rate": 12, "encoder_config": {"hidden_size": 32},
            "decoder_config": dict(GOLDEN_DECODER if decoder is None else decoder), **top}


def write_folder(folder: Path, model: CodecDecoder, config: dict | None = None, state: dict | None = None) -> Path:
    from safetensors.torch import save_file

    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(config or config_json()))
    if state is None:
        state = {f"decoder.{k}": v for k, v in model.state_dict().items()}
        state["encoder.quantizer.semantic_residual_vector_quantizer.layers.0.codebook.embed_sum"] = torch.ones(4, 2)
    save_file({k: v.contiguous() for k, v in state.items()}, str(folder / "model.safetensors"))
    return folder


def codes_for(model: CodecDecoder, batch: int, frames: int, seed: int = 0) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    q, size = model.config.num_quantizers, model.config.codebook_size
    return torch.randint(0, size, (batch, q, frames), generator=generator)


def reference_outputs(data: Path) -> dict:
    """What this port gives for the codec references of scripts/parity/qwen3tts_references.py (run in the
    pinned subprocess): name -> (ours, upstream's). Upstream loaded each speech tokenizer through
    `Qwen3TTSModel.from_pretrained`; every wave of a generate case is `speech_tokenizer.decode` of its codes
    (after the reference codes, cut again, for voice cloning)."""
    from safetensors.torch import load_file

    info = json.loads((data / "references.json").read_text())
    refs = load_file(str(data / "references.safetensors"))
    decoders = {kind: load_codec_decoder(data / entry["folder"] / "speech_tokenizer")
                for kind, entry in info["kinds"].items()}
    out = {}
    with torch.no_grad():
        unit = decoders["base"]
        short, long, mid = (refs[f"unit/decode_codes_{n}"] for n in ("short", "long", "mid"))
        codes = short.T[None]
        out["unit/decoder_quantized_short"] = unit.quantizer.decode(codes)[0]
        out["unit/decoder_forward_short"] = unit(codes)[0, 0]
        out["unit/decoder_chunked_c6_l4_short"] = unit.chunked_decode(codes, 6, 4)[0, 0]
        out["unit/decode_wav_short"] = unit.decode_utterances([short])[0]
        out["unit/decode_wav_long"] = unit.decode_utterances([long])[0]
        out["unit/decode_wav_batch_0"], out["unit/decode_wav_batch_1"] = unit.decode_utterances([short, mid])
        for case in info["cases"]:
            tensors = case["tensors"]
            items = sorted(k for k in tensors if k.startswith("codes_"))
            refs_codes = [tensors.get(f"ref_code_{k[6:]}") for k in items]
            full = [torch.cat([refs[r], refs[tensors[k]]]) if r else refs[tensors[k]]
                    for k, r in zip(items, refs_codes, strict=True)]
            for k, r, codes_i, wave in zip(items, refs_codes, full, decoders[case["kind"]].decode_utterances(full),
                                           strict=True):
                if r:  # upstream cuts the reference's share of the wave, rounded down
                    wave = wave[int(refs[r].shape[0] / max(codes_i.shape[0], 1) * wave.shape[0]):]
                out[f"{case['name']}/wav_{k[6:]}"] = wave
    return {name: (ours, refs[name]) for name, ours in out.items()}


def our_golden() -> dict:
    """What this port gives for GOLDEN_CASES (run in the pinned subprocess)."""
    torch.set_num_threads(1)
    model = tiny_decoder(0)
    out = {}
    with torch.no_grad():
        for name, (batch, frames, chunk, context) in GOLDEN_CASES.items():
            wave = model.decode(golden_codes(GOLDEN_DECODER, batch, frames, name), chunk, context).contiguous()
            out[name] = {"sha256": hashlib.sha256(wave.numpy().tobytes()).hexdigest(),
                         "sum": round(float(wave.double().sum()), 9), "head": wave[0, :3].tolist()}
    return out


# ---------------------------------------------------------------------------------------------------
# Against upstream


@pytest.fixture(scope="module")
def references() -> Path:
    return reference_dir("qwen3tts")


@pytest.fixture(scope="module")
def ours_pinned(references):
    return run_pinned(__file__, references, timeout=300)


@pytest.fixture(scope="module")
def golden(references) -> dict:
    return json.loads((references / "golden" / "codec.json").read_text())


@pytest.mark.parametrize("case", list(GOLDEN_CASES))
def test_identical_to_upstream(ours_pinned, golden, case):
    got, want = ours_pinned["golden"][case], golden[case]
    assert got["sha256"] == want["sha256"], f"sum {got['sum']} vs upstream {want['sum']}, head {got['head']} vs " \
                                            f"{want['head']}"


def _reference_names() -> list[str]:
    path = REFERENCES / "references.json"
    if not path.is_file():
        return []
    info = json.loads(path.read_text())
    names = [n for n in info["tensors"] if n.startswith(("unit/decode_wav", "unit/decoder_"))]
    return names + [n for case in info["cases"] for k, n in case["tensors"].items() if k.startswith("wav_")]


@pytest.mark.skipif(not _reference_names(), reason="no Qwen3-TTS references in tests/parity/data/qwen3tts")
@pytest.mark.parametrize("name", _reference_names())
def test_identical_to_upstreams_references(ours_pinned, name):
    """Against scripts/parity/qwen3tts_references.py's output: the codec of its tiny models, loaded from
    their speech_tokenizer/ folders, decoding every generated utterance and the unit cases."""
    assert ours_pinned["references"][name] == 0.0


# ---------------------------------------------------------------------------------------------------
# Configuration and layout

PUBLISHED_DECODER_CONFIG = {
    "attention_bias": False, "attention_dropout": 0.0, "latent_dim": 1024, "codebook_dim": 512,
    "codebook_size": 2048, "decoder_dim": 1536, "hidden_act": "silu", "hidden_size": 512,
    "intermediate_size": 1024, "layer_scale_initial_scale": 0.01, "max_position_embeddings": 8000,
    "head_dim": 64, "num_attention_heads": 16, "num_hidden_layers": 8, "num_key_value_heads": 16,
    "num_quantizers": 16, "num_semantic_quantizers": 1, "rms_norm_eps": 1e-05, "rope_theta": 10000,
    "semantic_codebook_size": 4096, "sliding_window": 72, "upsample_rates": [8, 5, 4, 3],
    "upsampling_ratios": [2, 2], "vector_quantization_hidden_dimension": 512,
}


def test_published_config_reads_as_the_released_one():
    config = CodecDecoderConfig.from_dict(config_json(PUBLISHED_DECODER_CONFIG, decode_upsample_rate=1920))
    assert config == CodecDecoderConfig.released()
    assert config.samples_per_frame == config.decode_upsample_rate == 1920
    assert config.output_sample_rate / config.samples_per_frame == 12.5


def test_missing_fields_take_upstreams_class_defaults():
    config = CodecDecoderConfig.from_dict(config_json({"codebook_dim": 512}))
    assert (config.hidden_size, config.intermediate_size, config.head_dim) == (1024, 3072, 64)
    assert (config.sliding_window, config.upsample_rates, config.upsampling_ratios) == (72, (8, 5, 4, 3), (2, 2))


def test_released_layout_has_the_published_271_tensors():
    with torch.device("meta"):
        model = CodecDecoder(CodecDecoderConfig.released())
    state = model.state_dict()
    assert len(state) == 271
    for key, shape in {"quantizer.rvq_first.vq.layers.0._codebook.embedding_sum": (2048, 256),
                       "quantizer.rvq_rest.vq.layers.14._codebook.cluster_usage": (2048,),
                       "quantizer.rvq_first.output_proj.weight": (512, 256, 1),
                       "quantizer.rvq_rest.input_proj.weight": (256, 512, 1),
                       "pre_conv.conv.weight": (1024, 512, 3),
                       "pre_transformer.input_proj.weight": (512, 1024),
                       "pre_transformer.layers.7.self_attn.q_proj.weight": (1024, 512),
                       "pre_transformer.layers.7.self_attn_layer_scale.scale": (512,),
                       "upsample.1.0.conv.weight": (1024, 1024, 2),
                       "upsample.1.1.dwconv.conv.weight": (1024, 1, 7),
                       "upsample.1.1.gamma": (1024,),
                       "decoder.1.block.1.conv.weight": (1536, 768, 16),
                       "decoder.4.block.4.conv1.conv.weight": (96, 96, 7),
                       "decoder.5.alpha": (96,),
                       "decoder.6.conv.weight": (1, 96, 7)}.items():
        assert tuple(state[key].shape) == shape, key
    assert "pre_transformer.inv_freq" not in state  # computed, not loaded


# ---------------------------------------------------------------------------------------------------
# Decoding: shapes, chunks, streams


@pytest.mark.parametrize("frames", [1, 7, 8, 9, 20])
def test_one_window_gives_samples_per_frame_each(frames):
    model = tiny_decoder()
    wave = model(codes_for(model, 2, frames))
    assert wave.shape == (2, 1, frames * 12) and wave.dtype == torch.float32
    assert wave.abs().max() <= 1


def test_chunked_decode_is_windows_with_left_context_cut():
    model = tiny_decoder()
    codes = codes_for(model, 2, 23)
    expected = torch.cat([model(codes[..., 0:7]), model(codes[..., 4:14])[..., 36:],
                          model(codes[..., 11:21])[..., 36:], model(codes[..., 18:23])[..., 36:]], dim=-1)
    assert torch.equal(model.chunked_decode(codes, 7, 3), expected)
    # a context longer than the start uses every earlier frame
    expected = torch.cat([model(codes[..., 0:7]), model(codes[..., 0:14])[..., 84:],
                          model(codes[..., 0:21])[..., 168:], model(codes[..., 0:23])[..., 252:]], dim=-1)
    assert torch.equal(model.chunked_decode(codes, 7, 100), expected)
    # one chunk: one window
    assert torch.equal(model.chunked_decode(codes, 300, 25), model(codes))


def test_decode_is_chunked_float32_and_batch_independent():
    model = tiny_decoder()
    codes = codes_for(model, 3, 40)
    wave = model.decode(codes, chunk_size=16)
    assert wave.shape == (3, 480) and wave.dtype == torch.float32
    assert torch.equal(wave, model.chunked_decode(codes, 16, 25)[:, 0])
    for i in range(3):
        assert torch.allclose(model.decode(codes[i:i + 1], chunk_size=16)[0], wave[i], atol=1e-5, rtol=0)


@pytest.mark.parametrize("chunk,context,pieces", [(300, 25, [5, 40, 0, 1, 60]), (7, 3, [3, 1, 9, 0, 20, 2, 26]),
                                                  (1, 0, [4, 4]), (10, 25, [33, 18])])
def test_stream_equals_chunked_decode_whatever_the_pieces(chunk, context, pieces):
    model = tiny_decoder()
    codes = codes_for(model, 2, sum(pieces))
    stream = model.stream(batch=2, chunk_size=chunk, left_context=context)
    out, start = [], 0
    for size in pieces:
        wave = stream.push(codes[..., start:start + size])
        start += size
        assert wave.shape[0] == 2 and wave.shape[1] % 12 == 0 and wave.dtype == torch.float32
        assert stream.held.shape[-1] <= context + chunk  # only the context and what is pending are kept
        out.append(wave)
    out.append(stream.flush())
    assert stream.pending == 0 and stream.flush().shape == (2, 0)
    assert torch.equal(torch.cat(out, dim=-1), model.chunked_decode(codes, chunk, context)[:, 0])


def test_stream_emits_each_chunk_as_soon_as_it_is_complete():
    model = tiny_decoder()
    stream = model.stream(chunk_size=4, left_context=2)
    assert stream.push(codes_for(model, 1, 3)).shape == (1, 0)
    assert stream.push(codes_for(model, 1, 6, seed=1)).shape == (1, 96)  # frames 0-3 and 4-7
    assert stream.flush().shape == (1, 12)


def test_decode_utterances_is_upstreams_tokenizer_decode():
    model = tiny_decoder()
    items = [codes_for(model, 1, n, seed=n)[0].T for n in (9, 30, 1)]
    waves = model.decode_utterances(items)
    assert [w.shape[0] for w in waves] == [108, 360, 12]
    padded = torch.full((3, 30, 4), -1, dtype=torch.long)
    for i, item in enumerate(items):
        padded[i, : item.shape[0]] = item
    # the batch is padded with code 0 (upstream clamps -1 to 0) and decoded together
    batch = model.chunked_decode(padded.clamp(min=0).transpose(1, 2))[:, 0]
    for wave, again, row, n in zip(waves, model.decode_utterances(padded), batch, (9, 30, 1), strict=True):
        assert torch.equal(wave, again) and torch.equal(wave, row[: n * 12])
    assert model.decode_utterances(items[1])[0].shape == (360,)  # one (T, Q) tensor


def test_no_frames_give_no_samples():
    model = tiny_decoder()
    assert model.decode(torch.zeros(2, 4, 0, dtype=torch.long)).shape == (2, 0)


# ---------------------------------------------------------------------------------------------------
# Clamps


def test_output_is_clamped_to_plus_minus_one():
    model = tiny_decoder()
    with torch.no_grad():
        model.decoder[-1].conv.weight.mul_(1000)
    seen = []
    model.decoder[-1].register_forward_hook(lambda m, i, o: seen.append(o))
    wave = model(codes_for(model, 1, 10))
    assert seen[0].abs().max() > 1
    assert torch.equal(wave, seen[0].clamp(-1, 1)) and (wave.abs() == 1).any()


def test_codebook_usage_is_clamped_before_dividing():
    model = tiny_decoder()
    codebook = model.quantizer.rvq_rest.vq.layers[0]._codebook
    table = codebook.table()
    assert torch.equal(table[:3], codebook.embedding_sum[:3] / 1e-5)  # usages 1e-7, 0 and -2
    assert torch.equal(table[3:], codebook.embedding_sum[3:] / codebook.cluster_usage[3:, None])


# ---------------------------------------------------------------------------------------------------
# Attention site


def test_mask_is_transformers_sliding_window_mask():
    mask = codec_transformer.sliding_window_mask(2, 6, 3, "cpu")
    assert mask.shape == (2, 1, 6, 6) and mask.dtype == torch.bool and mask.is_contiguous()
    assert mask[0, 0].int().tolist() == [[1, 0, 0, 0, 0, 0], [1, 1, 0, 0, 0, 0], [1, 1, 1, 0, 0, 0],
                                         [0, 1, 1, 1, 0, 0], [0, 0, 1, 1, 1, 0], [0, 0, 0, 1, 1, 1]]


def test_attention_goes_through_the_codec_site(monkeypatch):
    assert codec_transformer.SITE.name == "qwen3tts.codec" and not codec_transformer.SITE.approx_ok
    monkeypatch.setattr(dispatch, "DEBUG", True)  # every call checks its MaskInfo against the dense mask
    calls = []
    original = codec_transformer.SITE.reference

    def reference(q, k, v, mask, causal, scale, enable_gqa, dropout_p):
        calls.append((tuple(q.shape), tuple(k.shape), tuple(mask.shape), causal, scale, enable_gqa))
        return original(q, k, v, mask, causal, scale, enable_gqa, dropout_p)

    monkeypatch.setattr(codec_transformer.SITE, "reference", reference)
    model = tiny_decoder()
    model.decode(codes_for(model, 2, 13), chunk_size=10, left_context=2)
    # 2 layers x 2 chunks (10 frames, then 2 + 3); 4 query heads over 2 key heads, head_dim 12
    assert calls == [((2, 4, 10, 12), (2, 2, 10, 12), (2, 1, 10, 10), False, 12 ** -0.5, True)] * 2 + \
                    [((2, 4, 5, 12), (2, 2, 5, 12), (2, 1, 5, 5), False, 12 ** -0.5, True)] * 2


def test_a_bound_policy_runs_the_codec_attention():
    model = tiny_decoder()
    codes = codes_for(model, 1, 20)
    expected = model.decode(codes)
    run = policy_for("math").start()
    with RequestContext(0, accel=run).step():
        wave = model.decode(codes)
    assert sum(run.used.values()) == 2  # one window, two layers
    assert torch.allclose(wave, expected, atol=1e-5, rtol=0)


# ---------------------------------------------------------------------------------------------------
# Loading


def test_load_round_trip_in_both_folder_layouts(tmp_path):
    model = tiny_decoder(seed=5)
    codes = codes_for(model, 1, 11)
    write_folder(tmp_path / "model" / "speech_tokenizer", model)
    (tmp_path / "model" / "config.json").write_text(json.dumps({"model_type": "qwen3_tts"}))  # the talker's
    for folder in (write_folder(tmp_path / "codec", model), tmp_path / "model"):
        loaded = load_codec_decoder(folder)
        assert loaded.config == model.config
        assert all(torch.equal(v, loaded.state_dict()[k]) for k, v in model.state_dict().items())
        assert torch.equal(loaded.pre_transformer.inv_freq, model.pre_transformer.inv_freq)
        # (not bit-compared: the loaded weights keep the file's memory alignment, see load_codec_decoder)
        assert torch.allclose(loaded.decode(codes), model.decode(codes), atol=1e-6, rtol=0)
        assert not any(p.requires_grad for p in loaded.parameters())


def test_load_in_bfloat16_keeps_rope_frequencies_in_float32(tmp_path):
    loaded = load_codec_decoder(write_folder(tmp_path, tiny_decoder()), dtype=torch.bfloat16)
    assert loaded.pre_conv.conv.weight.dtype == torch.bfloat16
    assert loaded.pre_transformer.inv_freq.dtype == torch.float32
    assert torch.equal(loaded.pre_transformer.inv_freq, tiny_decoder().pre_transformer.inv_freq)
    wave = loaded.decode(codes_for(loaded, 1, 5))
    assert wave.dtype == torch.float32 and wave.shape == (1, 60)


def _one_line(exc: pytest.ExceptionInfo) -> str:
    message = str(exc.value)
    assert "\n" not in message
    return message


@pytest.mark.parametrize("change,expected", [
    (lambda f: (f / "config.json").unlink(), "has no config.json"),
    (lambda f: (f / "config.json").write_text("{not json"), "not readable JSON"),
    (lambda f: (f / "config.json").write_text(json.dumps(config_json(model_type="qwen3_tts_tokenizer_25hz"))),
     "only 12 Hz"),
    (lambda f: (f / "config.json").write_text(json.dumps({**config_json(), "decoder_config": None})),
     "no decoder_config"),
    (lambda f: (f / "config.json").write_text(json.dumps(config_json(
        {k: v for k, v in GOLDEN_DECODER.items() if k != "codebook_dim"}))), "lacks codebook_dim"),
    (lambda f: (f / "config.json").write_text(json.dumps(config_json({**GOLDEN_DECODER, "hidden_act": "relu"}))),
     "hidden_act 'relu'"),
    (lambda f: (f / "config.json").write_text(json.dumps(config_json({**GOLDEN_DECODER, "num_key_value_heads": 3}))),
     "4 attention heads for 3"),
    (lambda f: (f / "config.json").write_text(json.dumps(config_json(
        {**GOLDEN_DECODER, "rope_scaling": {"rope_type": "yarn", "factor": 2.0}}))), "'yarn' RoPE"),
    (lambda f: (f / "config.json").write_text(json.dumps(config_json({**GOLDEN_DECODER, "num_hidden_layers": 3}))),
     "missing decoder.pre_transformer.layers.2"),
    (lambda f: (f / "config.json").write_text(json.dumps(config_json({**GOLDEN_DECODER, "codebook_size": 64}))),
     "_codebook.cluster_usage (32,) vs (64,) expected"),
    (lambda f: (f / "model.safetensors").unlink(), "has no model.safetensors"),
    (lambda f: (f / "model.safetensors").write_bytes(b"\x00" * 40), "not a readable safetensors file"),
])
def test_bad_folders_give_one_line_checkpoint_errors(tmp_path, change, expected):
    folder = write_folder(tmp_path, tiny_decoder())
    change(folder)
    with pytest.raises(CheckpointError) as exc:
        load_codec_decoder(folder)
    assert expected in _one_line(exc)


def test_foreign_or_extra_tensors_are_refused(tmp_path):
    state = {f"decoder.{k}": v for k, v in tiny_decoder().state_dict().items()}
    with pytest.raises(CheckpointError) as exc:
        load_codec_decoder(write_folder(tmp_path / "a", None, state={"encoder.x": torch.ones(2)}))
    assert "holds no decoder.* tensors" in _one_line(exc)
    with pytest.raises(CheckpointError) as exc:
        load_codec_decoder(write_folder(tmp_path / "b", None, state={**state, "decoder.extra.weight": torch.ones(2)}))
    assert "unexpected decoder.extra.weight" in _one_line(exc)
    with pytest.raises(CheckpointError) as exc:
        load_codec_decoder(tmp_path / "missing")
    assert "does not exist" in _one_line(exc)


@pytest.mark.parametrize("codes,expected", [
    (torch.zeros(1, 3, 5, dtype=torch.long), "(batch, 4 quantizers, frames), got (1, 3, 5)"),
    (torch.zeros(4, 5, dtype=torch.long), "got (4, 5)"),
    (torch.zeros(1, 4, 5), "must be integers"),
    (torch.full((1, 4, 5), 32), "[0, 32), got values from 32 to 32"),
    (torch.full((1, 4, 5), -1), "got values from -1 to -1"),
])
def test_bad_codes_give_one_line_input_errors(codes, expected):
    with pytest.raises(InputError) as exc:
        tiny_decoder().decode(codes)
    assert expected in _one_line(exc)


def test_bad_utterances_streams_and_chunking_give_input_errors():
    model = tiny_decoder()
    with pytest.raises(InputError, match="non-negative"):
        model.decode_utterances([torch.full((3, 4), -1)])
    with pytest.raises(InputError, match="non-empty list"):
        model.decode_utterances([])
    with pytest.raises(InputError, match="must be integers"):
        model.decode_utterances(torch.zeros(2, 5, 4))
    with pytest.raises(InputError, match="chunk_size must be at least 1"):
        model.decode(codes_for(model, 1, 3), chunk_size=0)
    with pytest.raises(InputError, match=r"\(1, 4\) x n"):
        model.stream().push(torch.zeros(2, 4, 1, dtype=torch.long))


if __name__ == "__main__":  # the pinned subprocess of the tests against upstream: its argument is the set
    torch.set_num_threads(1)
    compared, data = {}, Path(sys.argv[1])
    if (data / "references.json").is_file():
        for name, (ours, theirs) in reference_outputs(data).items():
            same = ours.shape == theirs.shape and ours.dtype == theirs.dtype
            compared[name] = (ours - theirs).abs().max().item() if same and ours.numel() else None if not same else 0.0
    print(json.dumps({"golden": our_golden(), "references": compared}))
