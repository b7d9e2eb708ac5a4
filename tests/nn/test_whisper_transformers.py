"""The shared Whisper encoder with transformers' numerics, and transformers' feature extractor, against
transformers 4.57.3 live in this process (a test extra): Seed-VC's content encoder path.

- `mizuoto.audio.whisper_features.log_mel` equals `WhisperFeatureExtractor(...)(...).input_features` bit for
  bit (short, odd, exactly 30 s and longer-than-30 s audio; 80 and 128 bands);
- `AudioEncoder(numerics="transformers")` loaded from a `WhisperModel`'s state dict through `hf_to_openai`
  equals `WhisperModel.encoder(...).last_hidden_state` bit for bit in float32 and in float16 (upstream forces
  float16 on the CPU), every parameter randomised;
- the openai numerics are not transformers' (the query scale's place differs), which is why both exist.
"""

import pytest
import torch

transformers = pytest.importorskip("transformers")

from mizuoto.audio import whisper_features  # noqa: E402
from mizuoto.nn import whisper_encoder  # noqa: E402


def tiny_whisper(seed: int, n_mels: int = 80):
    # head size 24: a scale of 24^-1/2 is inexact, so where the scale is applied shows (16 would hide it)
    config = transformers.WhisperConfig(
        vocab_size=64, num_mel_bins=n_mels, encoder_layers=2, encoder_attention_heads=2, decoder_layers=1,
        decoder_attention_heads=2, d_model=48, encoder_ffn_dim=192, decoder_ffn_dim=192, max_source_positions=1500,
        max_target_positions=32, pad_token_id=0, bos_token_id=1, eos_token_id=2, decoder_start_token_id=1,
        suppress_tokens=None, begin_suppress_tokens=None, attn_implementation="sdpa")
    torch.manual_seed(seed)
    model = transformers.WhisperModel(config).eval()
    with torch.no_grad():  # layer norms start at 1 and 0: move them, or they prove nothing
        g = torch.Generator().manual_seed(seed + 1)
        for name, p in model.named_parameters():
            if "layer_norm" in name:
                p.copy_((1.0 if name.endswith("weight") else 0.0) + 0.2 * torch.randn(p.shape, generator=g))
    return model


def ours_from(model) -> whisper_encoder.AudioEncoder:
    dims = whisper_encoder.dims_from_hf(model.config.to_dict())
    state = whisper_encoder.hf_to_openai(model.state_dict())
    encoder = whisper_encoder.AudioEncoder(dims, numerics="transformers")
    encoder.load_state_dict({k[len("encoder."):]: v for k, v in state.items() if k.startswith("encoder.")})
    return encoder.eval()


def waves(seed: int):
    g = torch.Generator().manual_seed(seed)
    for samples in (1600, 16001, 16000 * 30, 16000 * 31 + 7):
        yield 0.3 * torch.randn(samples, generator=g)


@pytest.mark.parametrize("n_mels", [80, 128])
def test_features_are_the_feature_extractors(n_mels):
    extractor = transformers.WhisperFeatureExtractor(feature_size=n_mels)
    for wave in waves(n_mels):
        theirs = extractor([wave.numpy()], return_tensors="pt", return_attention_mask=True,
                           sampling_rate=16000).input_features
        ours = whisper_features.log_mel(wave, n_mels)
        assert ours.shape == theirs.shape == (1, n_mels, 3000)
        assert torch.equal(ours, theirs), (wave.shape, (ours - theirs).abs().max())


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_encoder_is_transformers_whisper_encoder(dtype):
    model = tiny_whisper(3).to(dtype)
    ours = ours_from(model).to(dtype)
    extractor = transformers.WhisperFeatureExtractor()
    for wave in list(waves(5))[:2]:
        features = extractor([wave.numpy()], return_tensors="pt", sampling_rate=16000).input_features
        with torch.inference_mode():
            theirs = model.encoder(features.to(dtype), return_dict=True).last_hidden_state
            got = ours(features.to(dtype))
        assert got.dtype == dtype and got.shape == theirs.shape == (1, 1500, 48)
        assert torch.equal(got, theirs), (dtype, (got.float() - theirs.float()).abs().max())


def test_a_whisper_model_state_dict_maps_with_or_without_the_generation_wrapper():
    model = tiny_whisper(4)
    plain = whisper_encoder.hf_to_openai(model.state_dict())
    wrapped = whisper_encoder.hf_to_openai({f"model.{k}": v for k, v in model.state_dict().items()})
    assert plain.keys() == wrapped.keys() and "encoder.blocks.1.attn.query.weight" in plain


def test_the_openai_numerics_differ_from_transformers():
    model = tiny_whisper(6)
    ours = ours_from(model)
    openai = whisper_encoder.AudioEncoder(whisper_encoder.dims_from_hf(model.config.to_dict()))
    openai.load_state_dict(ours.state_dict())
    features = whisper_features.log_mel(next(waves(7)))
    with torch.inference_mode():
        assert not torch.equal(openai.eval()(features), ours(features))


def test_unknown_numerics_are_refused():
    dims = whisper_encoder.dims_from_hf(tiny_whisper(1).config.to_dict())
    with pytest.raises(ValueError, match="numerics 'fast' is none of openai, transformers"):
        whisper_encoder.AudioEncoder(dims, numerics="fast")
