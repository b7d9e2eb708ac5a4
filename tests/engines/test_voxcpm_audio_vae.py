"""VoxCPM's AudioVAE (v1 and v2), without upstream installed.

Against upstream (voxcpm 2.0.3): tests/parity/data/voxcpm/vae holds tiny random upstream VAEs in the
checkpoint layout and upstream's encode / decode / streamed outputs for them
(scripts/parity/voxcpm_vae_references.py); a subprocess at one thread and ATEN_CPU_CAPABILITY=avx2 loads
each folder with our loader and must reproduce every output bit for bit. Then, in process: the
configurations, the published key layouts, the loader's errors, input checks, streaming, the noise
generator, and that the decoder traces into one graph.
"""

import json
import math
import sys
from pathlib import Path

import pytest
import torch

from mizuoto.core.errors import CheckpointError, InputError
from mizuoto.engines.voxcpm.audio_vae import (
    AudioVAE,
    checkpoint_layout,
    load_audio_vae,
    read_audio_vae_weights,
)
from mizuoto.engines.voxcpm.audio_vae_config import AudioVAEConfig, AudioVAEV2Config, audio_vae_config
from mizuoto.engines.voxcpm.audio_vae_layers import Snake

if __name__ == "__main__":  # run as the pinned script: tests/ (helpers.py) is not on the path yet
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from helpers import reference_dir, run_pinned  # noqa: E402

REFERENCES = Path(__file__).resolve().parents[1] / "parity" / "data" / "voxcpm" / "vae"


# ---------------------------------------------------------------------------------------------------
# Against upstream's references (run in the pinned subprocess)


def load_folder(folder: Path) -> AudioVAE:
    data = json.loads((folder / "config.json").read_text())
    config = audio_vae_config(data["architecture"], data.get("audio_vae_config"), str(folder / "config.json"))
    state, path = read_audio_vae_weights(folder)
    return load_audio_vae(state, config, source=str(path))


def reference_diffs(root: Path) -> dict:
    """Each reference output name -> max |ours - upstream's| (None if the shapes differ)."""
    from safetensors.torch import load_file

    info = json.loads((root / "references.json").read_text())
    refs = load_file(str(root / "references.safetensors"))
    models = {name: load_folder(root / name) for name in info["models"]}
    diffs = {}

    def compare(name, ours):
        theirs = refs[name]
        same = ours.shape == theirs.shape and ours.dtype == theirs.dtype
        diffs[name] = (ours - theirs).abs().max().item() if same else None

    for case in info["cases"]:
        vae = models[case["model"]]
        generator = torch.Generator().manual_seed(case["noise_seed"]) if case.get("noise_seed") is not None else None
        if case["call"] == "encode":
            compare(case["output"], vae.encode(refs[case["input"]], case["sample_rate"]))
        elif case["call"] == "decode":
            compare(case["output"], vae.decode(refs[case["input"]], case["sample_rate"], generator=generator))
        else:
            with vae.stream(generator=generator) as stream:
                for inp, out in zip(case["inputs"], case["outputs"], strict=True):
                    compare(out, stream.decode_chunk(refs[inp]))
    return diffs


def _reference_names() -> list[str]:
    path = REFERENCES / "references.json"
    if not path.is_file():
        return []
    names = []
    for case in json.loads(path.read_text())["cases"]:
        names += [case["output"]] if "output" in case else case["outputs"]
    return names


@pytest.fixture(scope="module")
def ours_pinned():
    return run_pinned(__file__, reference_dir("voxcpm/vae"), timeout=300)


@pytest.mark.skipif(not _reference_names(), reason="no VoxCPM VAE references in tests/parity/data/voxcpm/vae")
@pytest.mark.parametrize("name", _reference_names())
def test_identical_to_upstreams_references(ours_pinned, name):
    assert ours_pinned[name] == 0.0


def test_references_cover_every_call_and_generation():
    info = json.loads((REFERENCES / "references.json").read_text())
    calls = {(c["model"], c["call"]) for c in info["cases"]}
    for model, spec in info["models"].items():
        assert (model, "encode") in calls and (model, "decode") in calls
        assert ((model, "stream") in calls) == (spec["architecture"] == "voxcpm2")
    assert info["environment"]["ATEN_CPU_CAPABILITY"] == "avx2" and info["environment"]["num_threads"] == 1
    size = sum(f.stat().st_size for f in REFERENCES.rglob("*") if f.is_file())
    assert size < 1_000_000


# ---------------------------------------------------------------------------------------------------
# Helpers


TINY_V2 = dict(encoder_dim=4, encoder_rates=[2, 3], latent_dim=8, decoder_dim=16, decoder_rates=[3, 3, 2])


def random_state(config, seed: int = 0) -> dict[str, torch.Tensor]:
    """A checkpoint-layout state dict with every tensor random (alphas and gains around 1)."""
    g = torch.Generator().manual_seed(seed)
    state = {}
    for key, shape in checkpoint_layout(config).items():
        if key == "decoder.sr_bin_boundaries":
            state[key] = torch.tensor(config.sr_bin_boundaries, dtype=torch.int32)
            continue
        u = torch.rand(shape, generator=g) * 2 - 1
        if key.endswith(("alpha", "weight_g", "scale_embed.weight")):
            u = 1 + 0.5 * u
            if key.endswith("block.3.weight_g"):
                u = 0.2 * u
        elif key.endswith("bias"):
            u = 0.1 * u
        state[key] = u
    return state


def tiny(seed: int = 0, **changes) -> AudioVAE:
    config = AudioVAEV2Config(**{**TINY_V2, **changes})
    return load_audio_vae(random_state(config, seed), config)


def _one_line(exc: pytest.ExceptionInfo) -> str:
    message = str(exc.value)
    assert "\n" not in message
    return message


# ---------------------------------------------------------------------------------------------------
# Configuration and layout

RELEASED_V2 = {"encoder_dim": 128, "encoder_rates": [2, 5, 8, 8], "latent_dim": 64, "decoder_dim": 2048,
               "decoder_rates": [8, 6, 5, 2, 2, 2], "sr_bin_boundaries": [20000, 30000, 40000],
               "sample_rate": 16000, "out_sample_rate": 48000}


def test_released_v2_config_reads_as_the_defaults():
    config = audio_vae_config("voxcpm2", RELEASED_V2)
    assert config == AudioVAEV2Config()
    assert (config.encode_sample_rate, config.output_sample_rate) == (16000, 48000)
    assert (config.chunk_size, config.decode_chunk_size, config.latent_dim) == (640, 1920, 64)
    assert config.conditioned and config.sr_buckets == 4


def test_absent_v1_entry_is_voxcpm_05b():
    config = audio_vae_config("voxcpm", None)
    assert config == AudioVAEConfig() and config.version == 1
    assert (config.decoder_dim, config.decoder_rates, config.depthwise) == (1536, (8, 8, 5, 2), True)
    assert (config.encode_sample_rate, config.output_sample_rate) == (16000, 16000)
    assert config.chunk_size == config.decode_chunk_size == 640 and not config.conditioned


def test_v1_ignores_v2_fields_and_lax_values_are_read_as_pydantic_does():
    config = audio_vae_config("voxcpm", {"sample_rate": 44100.0, "out_sample_rate": 48000, "depthwise": 0,
                                         "encoder_rates": [2, 3, 6, 7, 7], "decoder_rates": [7, 7, 6, 3, 2]})
    assert config.output_sample_rate == 44100 and config.depthwise is False
    assert config.chunk_size == config.decode_chunk_size == 1764  # 44.1 kHz at 25 latent frames per second
    assert audio_vae_config("VoxCPM2", {"sr_bin_boundaries": None}).conditioned is False


@pytest.mark.parametrize("architecture,data,expected", [
    ("voxcpm3", {}, "unknown VoxCPM architecture 'voxcpm3'"),
    ("voxcpm2", [], "must be a JSON object"),
    ("voxcpm2", {"latent_dim": 64.5}, "latent_dim must be an integer, got 64.5"),
    ("voxcpm2", {"latent_dim": None}, "latent_dim must be an integer, got None"),
    ("voxcpm2", {"depthwise": "yes"}, "depthwise must be true or false"),
    ("voxcpm2", {"encoder_rates": 8}, "encoder_rates must be a list of integers"),
    ("voxcpm2", {"decoder_rates": []}, "empty decoder_rates"),
    ("voxcpm2", {"decoder_rates": [2, 0]}, "a rate below 1"),
    ("voxcpm2", {"decoder_dim": 16, "decoder_rates": [2] * 5}, "decoder_dim 16 too small to halve 5 times"),
    ("voxcpm2", {"sr_bin_boundaries": [30000, 20000]}, "not ascending"),
    ("voxcpm2", {"cond_type": "film"}, "cond_type 'film'"),
    ("voxcpm2", {"cond_type": "concat"}, "without cond_out_layer"),
    ("voxcpm", {"sample_rate": 0}, "sample_rate 0"),
])
def test_bad_configs_give_one_line_checkpoint_errors(architecture, data, expected):
    with pytest.raises(CheckpointError) as exc:
        audio_vae_config(architecture, data)
    assert expected in _one_line(exc)


def test_default_layouts_have_upstreams_tensor_counts():
    v1, v2 = checkpoint_layout(AudioVAEConfig()), checkpoint_layout(AudioVAEV2Config())
    assert len(v1) == 243 and len(v2) == 312  # as many as upstream's state dicts (the released audiovae.pth: 312)
    assert v2["decoder.sr_bin_boundaries"] == (3,)
    for key, shape in {"encoder.block.0.weight_g": (128, 1, 1), "encoder.block.0.weight_v": (128, 1, 7),
                       "encoder.block.4.block.4.weight_v": (2048, 1024, 16),
                       "encoder.block.1.block.0.block.1.weight_v": (128, 1, 7),
                       "encoder.fc_mu.weight_v": (64, 2048, 3), "encoder.fc_logvar.bias": (64,),
                       "decoder.model.0.weight_v": (64, 1, 7), "decoder.model.0.bias": (64,),
                       "decoder.model.1.weight_v": (2048, 64, 1),
                       "decoder.model.2.block.0.alpha": (1, 2048, 1),
                       "decoder.model.2.block.1.weight_g": (2048, 1, 1),
                       "decoder.model.2.block.1.weight_v": (2048, 1024, 16),
                       "decoder.model.7.block.4.block.3.weight_v": (32, 32, 1),
                       "decoder.model.8.alpha": (1, 32, 1), "decoder.model.9.weight_v": (1, 32, 7),
                       "decoder.sr_cond_model.2.scale_embed.weight": (4, 2048),
                       "decoder.sr_cond_model.7.bias_embed.weight": (4, 64)}.items():
        assert v2[key] == shape, key
    assert v1["decoder.model.6.alpha"] == (1, 96, 1) and v1["decoder.model.7.weight_g"] == (1, 1, 1)
    assert not any("sr_" in key for key in v1)
    noisy = checkpoint_layout(AudioVAEV2Config(use_noise_block=True))
    assert noisy["decoder.model.2.block.2.linear.weight_v"] == (1024, 1024, 1)
    assert "decoder.model.2.block.2.linear.bias" not in noisy


# ---------------------------------------------------------------------------------------------------
# Loading


def test_weight_norm_is_folded_with_torchs_own_kernel():
    config = AudioVAEV2Config(**TINY_V2)
    state = random_state(config, 3)
    vae = load_audio_vae(state, config)
    for key in ("encoder.block.0", "decoder.model.2.block.1", "decoder.model.0"):
        weight = dict(vae.named_parameters())[key + ".weight"]
        assert torch.equal(weight, torch._weight_norm(state[key + ".weight_v"], state[key + ".weight_g"], 0))
    assert not any(p.requires_grad for p in vae.parameters())
    # every weight in an aligned allocation of its own (a folded weight is new; the rest are the reader's
    # fresh tensors, adopted): a matmul on an unaligned view can round differently from upstream's
    assert all(p.data_ptr() % 64 == 0 for p in vae.parameters())


def test_checkpoint_boundaries_replace_the_configs_and_are_optional():
    config = AudioVAEV2Config(**TINY_V2)
    state = random_state(config)
    state["decoder.sr_bin_boundaries"] = torch.tensor([10000, 50000, 60000], dtype=torch.int32)
    assert load_audio_vae(state, config).decoder.sr_bin_boundaries.tolist() == [10000, 50000, 60000]
    del state["decoder.sr_bin_boundaries"]
    vae = load_audio_vae(state, config)
    assert vae.decoder.sr_bin_boundaries.tolist() == [20000, 30000, 40000]
    assert vae.decoder.sr_bin_boundaries.dtype == torch.int32


def test_state_dict_wrapper_logvar_and_dtype():
    config = AudioVAEV2Config(**TINY_V2)
    state = {k: v for k, v in random_state(config).items() if not k.startswith("encoder.fc_logvar.")}
    vae = load_audio_vae({"state_dict": state}, config, dtype=torch.float64)
    assert vae.dtype == torch.float64 and vae.decoder.sr_bin_boundaries.dtype == torch.int32
    assert vae.decode(torch.zeros(1, 8, 2)).dtype == torch.float64


def test_files_are_read_as_upstream_reads_them(tmp_path):
    from safetensors.torch import save_file

    config = AudioVAEV2Config(**TINY_V2)
    state = random_state(config)
    torch.save({"state_dict": state}, tmp_path / "audiovae.pth")
    read, path = read_audio_vae_weights(tmp_path)
    assert path.name == "audiovae.pth" and read.keys() == state.keys()
    save_file({k: v * 0 for k, v in state.items()}, str(tmp_path / "audiovae.safetensors"))
    read, path = read_audio_vae_weights(tmp_path)  # safetensors first, as upstream
    assert path.name == "audiovae.safetensors" and all(not v.any() for v in read.values())
    (tmp_path / "audiovae.safetensors").write_bytes(b"\x00" * 16)
    with pytest.raises(CheckpointError) as exc:
        read_audio_vae_weights(tmp_path)
    assert "audiovae.safetensors has a damaged header; download it again" in _one_line(exc)
    with pytest.raises(CheckpointError) as exc:
        read_audio_vae_weights(tmp_path / "nothing")
    assert "holds neither audiovae.safetensors nor audiovae.pth" in _one_line(exc)


def _drop(key):
    return lambda s: s.pop(key)


@pytest.mark.parametrize("change,expected", [
    (_drop("encoder.block.0.weight_g"), "missing encoder.block.0.weight_g; 1 missing, 0 unexpected"),
    (_drop("decoder.sr_cond_model.3.scale_embed.weight"), "missing decoder.sr_cond_model.3.scale_embed.weight"),
    (lambda s: s.update({"decoder.model.99.alpha": torch.ones(1)}), "unexpected decoder.model.99.alpha"),
    (lambda s: s.update({"decoder.model.0.weight": torch.ones(8, 1, 7)}), "unexpected decoder.model.0.weight"),
    (lambda s: s.update({"decoder.model.1.weight_v": torch.ones(16, 8, 3)}),
     "decoder.model.1.weight_v has shape (16, 8, 3), the audio_vae_config implies (16, 8, 1)"),
    (lambda s: s.update({"decoder.sr_bin_boundaries": torch.ones(2, dtype=torch.int32)}),
     "decoder.sr_bin_boundaries has shape (2,)"),
    (lambda s: s.update({"encoder.fc_mu.bias": [0.0] * 8}), "encoder.fc_mu.bias is a list, not a tensor"),
])
def test_bad_state_dicts_give_one_line_checkpoint_errors(change, expected):
    config = AudioVAEV2Config(**TINY_V2)
    state = random_state(config)
    change(state)
    with pytest.raises(CheckpointError) as exc:
        load_audio_vae(state, config, source="audiovae.pth")
    assert expected in _one_line(exc) and _one_line(exc).startswith("audiovae.pth")


def test_a_v1_checkpoint_does_not_load_as_v2():
    v1 = AudioVAEConfig(**{**TINY_V2, "decoder_dim": 16})
    with pytest.raises(CheckpointError) as exc:
        load_audio_vae(random_state(v1), AudioVAEV2Config(**TINY_V2))
    assert "missing decoder.sr_cond_model.2" in _one_line(exc)


# ---------------------------------------------------------------------------------------------------
# Encoding and decoding


def test_snake_is_upstreams_formula():
    snake = Snake(3)
    with torch.no_grad():
        snake.alpha.copy_(torch.tensor([0.5, 1.0, 2.0]).view(1, 3, 1))
    x = torch.linspace(-3, 3, 12).view(1, 3, 4)
    alpha = snake.alpha
    assert torch.equal(snake(x), x + (alpha + 1e-9).reciprocal() * torch.sin(alpha * x).pow(2))


@pytest.mark.parametrize("length", [1, 6, 7, 61])
def test_encode_pads_to_whole_frames(length):
    vae = tiny()
    audio = torch.rand(2, length) - 0.5
    latents = vae.encode(audio, 16000)
    assert latents.shape == (2, 8, math.ceil(length / 6)) and latents.dtype == torch.float32
    padded = torch.nn.functional.pad(audio, (0, -length % 6))
    assert torch.equal(vae.encode(padded[:, None]), latents)  # (B, 1, T) too; the rate defaults to the VAE's


def test_decoded_length_and_rate():
    vae = tiny()
    audio = vae.decode(torch.randn(2, 8, 5))
    assert audio.shape == (2, 1, 5 * 18) and audio.abs().max() <= 1
    assert (vae.sample_rate, vae.output_sample_rate, vae.chunk_size, vae.decode_chunk_size) == (16000, 48000, 6, 18)


def test_decode_conditions_on_the_output_rate():
    vae = tiny()
    z = torch.randn(1, 8, 4)
    default = vae.decode(z)
    assert torch.equal(default, vae.decode(z, 48000)) and torch.equal(default, vae.decode(z, 40001))
    assert torch.equal(vae.decode(z, 30000), vae.decode(z, torch.tensor([20001])))  # bucket 1 both
    assert not torch.equal(default, vae.decode(z, 30000))
    plain = tiny(sr_bin_boundaries=None)
    assert torch.equal(plain.decode(z), plain.decode(z, 16000))  # no conditioning: the rate is ignored


@pytest.mark.parametrize("call,args,expected", [
    ("encode", (torch.zeros(1, 60), 24000), "encodes 16000 Hz audio, got 24000 Hz"),
    ("encode", (torch.zeros(1, 2, 60),), "must be mono"),
    ("encode", (torch.zeros(1, 0),), "audio is empty"),
    ("encode", (torch.zeros(1, 60, dtype=torch.long),), "audio must be a float tensor"),
    ("decode", (torch.zeros(1, 7, 3),), "latents must be a float tensor (batch, 8, frames)"),
    ("decode", (torch.zeros(1, 8, 0),), "latents have no frames"),
    ("decode", (torch.zeros(1, 8, 2), 48000.0), "sample_rate must be an integer"),
    ("decode", (torch.zeros(1, 8, 2), torch.tensor([4.8e4])), "sample_rate must be an integer or"),
])
def test_bad_inputs_give_one_line_input_errors(call, args, expected):
    with pytest.raises(InputError) as exc:
        getattr(tiny(), call)(*args)
    assert expected in _one_line(exc)


# ---------------------------------------------------------------------------------------------------
# Streaming


@pytest.mark.parametrize("sizes", [[4, 4, 1, 3], [1] * 6, [13]])
def test_stream_is_a_decode_up_to_rounding(sizes):
    vae = tiny(1)
    z = torch.randn(2, 8, sum(sizes))
    with vae.stream() as stream:
        chunks, start = [], 0
        for n in sizes:
            chunks.append(stream.decode_chunk(z[..., start:start + n]))
            assert chunks[-1].shape == (2, 1, n * 18)
            start += n
    assert torch.allclose(torch.cat(chunks, dim=-1), vae.decode(z), atol=1e-5, rtol=0)


def test_stream_states_are_fixed_size_and_reset():
    vae = tiny()
    shapes = [tuple(s.shape) for s in vae.decoder.new_states(3)]
    # per decoder: the depthwise kernel-7 conv, per block the up conv and 3 dilated convs, the last conv
    assert len(shapes) == 1 + 3 * 4 + 1 and shapes[0] == (3, 8, 6) and shapes[-1] == (3, 2, 6)
    assert (3, 16, 1) in shapes and (3, 8, 54) in shapes  # the first up conv; dilation 9 at width 8
    stream = vae.stream()
    first = stream.decode_chunk(torch.ones(1, 8, 2))
    assert [tuple(s.shape) for s in stream.states] == [(1,) + s[1:] for s in shapes]
    assert not torch.equal(stream.decode_chunk(torch.ones(1, 8, 2)), first)  # carries the first chunk
    with pytest.raises(InputError, match="decodes a batch of 1, got a chunk of 2"):
        stream.decode_chunk(torch.ones(2, 8, 2))
    stream.reset()
    assert torch.equal(stream.decode_chunk(torch.ones(1, 8, 2)), first)


def test_noise_block_draws_from_the_given_generator():
    vae = tiny(use_noise_block=True)
    z = torch.randn(1, 8, 3)

    def decode(seed):
        return vae.decode(z, generator=torch.Generator().manual_seed(seed))

    assert torch.equal(decode(5), decode(5)) and not torch.equal(decode(5), decode(6))
    torch.manual_seed(5)
    assert torch.equal(vae.decode(z), decode(5))  # without one: the global generator, as upstream


# ---------------------------------------------------------------------------------------------------
# Compile


@pytest.mark.parametrize("streaming", [False, True])
def test_decoder_traces_in_one_graph(streaming):
    torch._dynamo.reset()
    vae = tiny()
    compiled = torch.compile(vae.decoder, backend="eager", fullgraph=True)
    z = torch.randn(1, 8, 4)
    if streaming:
        with vae.stream() as eager, vae.stream(decoder=compiled) as traced:
            for part in (z[..., :3], z[..., 3:]):
                assert torch.equal(traced.decode_chunk(part), eager.decode_chunk(part))
    else:
        assert torch.equal(vae.decode(z, decoder=compiled), vae.decode(z))


if __name__ == "__main__":  # the pinned subprocess of the tests against upstream
    folder = Path(sys.argv[1])  # the set valid on this machine (helpers.reference_dir)
    print(json.dumps(reference_diffs(folder) if (folder / "references.json").is_file() else {}))
