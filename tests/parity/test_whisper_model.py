"""The native Whisper network against openai-whisper's own model (tiny random weights): identical
encoder features and decoder logits, prefill and every cached step, and the handwritten score path
that word timestamps read. Plus the Hugging Face layout, mapped to openai's names."""

import pytest
import torch

whisper = pytest.importorskip("whisper")

from helpers import save_upstream_whisper, tiny_upstream_whisper  # noqa: E402

from mizuoto.engines.whisper import checkpoint  # noqa: E402
from mizuoto.engines.whisper.model import Dims  # noqa: E402

DIMS = dict(n_mels=80, n_audio_ctx=1500, n_audio_state=64, n_audio_head=2, n_audio_layer=2, n_vocab=51865,
            n_text_ctx=448, n_text_state=64, n_text_head=2, n_text_layer=2)
SOT = [50258, 50259, 50359, 50363]  # <|startoftranscript|><|en|><|transcribe|><|notimestamps|>


@pytest.fixture(scope="module")
def upstream(tmp_path_factory):
    model = tiny_upstream_whisper(DIMS)
    return model, save_upstream_whisper(model, DIMS, tmp_path_factory.mktemp("whisper") / "tiny.pt")


def test_pt_checkpoint_loads_and_encoder_matches(upstream):
    model, path = upstream
    ours = checkpoint.load(path)
    assert ours.dims == Dims(**DIMS) and ours.is_multilingual and ours.num_languages == model.num_languages
    mel = torch.randn(2, 80, 3000, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        assert torch.equal(ours.encoder(mel), model.encoder(mel))


def test_decoder_logits_for_prefill_and_every_step(upstream):
    model, path = upstream
    ours = checkpoint.load(path)
    mel = torch.randn(2, 80, 3000, generator=torch.Generator().manual_seed(2))
    tokens = torch.tensor([SOT, SOT])
    with torch.no_grad():
        audio = model.encoder(mel)
        cache, hooks = model.install_kv_cache_hooks()
        want = model.decoder(tokens, audio, kv_cache=cache)
        ours_cache = ours.decoder.new_cache(2)
        got = ours.decoder(tokens, audio, ours_cache)
        assert torch.equal(got, want)
        for step in range(6):
            nxt = want[:, -1].argmax(-1, keepdim=True)
            want = model.decoder(nxt, audio, kv_cache=cache)
            got = ours.decoder(nxt, audio, ours_cache)
            assert torch.equal(got, want), step
        for hook in hooks:
            hook.remove()


def test_score_path_matches_upstream_without_sdpa(upstream):
    """Word timestamps run the model with SDPA off and read each cross-attention's scores."""
    model, path = upstream
    ours = checkpoint.load(path)
    mel = torch.randn(1, 80, 3000, generator=torch.Generator().manual_seed(3))
    tokens = torch.tensor([SOT + [400, 401, 402]])
    scores = []
    hooks = [block.cross_attn.register_forward_hook(lambda _, ins, outs: scores.append(outs[-1]))
             for block in model.decoder.blocks]
    with torch.no_grad(), whisper.model.disable_sdpa():
        audio = model.encoder(mel)
        want = model.decoder(tokens, audio)
    for hook in hooks:
        hook.remove()
    alignment = []
    with torch.no_grad():
        got = ours.decoder(tokens, audio, ours.decoder.new_cache(1), alignment=alignment)
    assert torch.equal(got, want)
    assert len(alignment) == len(scores) and all(torch.equal(a, b) for a, b in zip(alignment, scores, strict=True))


def test_hugging_face_layout(upstream, tmp_path):
    """A transformers Whisper folder loads with its names mapped to openai's: same network."""
    transformers = pytest.importorskip("transformers")
    config = transformers.WhisperConfig(vocab_size=51865, num_mel_bins=80, d_model=64, encoder_layers=2,
                                        decoder_layers=2, encoder_attention_heads=2, decoder_attention_heads=2,
                                        encoder_ffn_dim=256, decoder_ffn_dim=256, max_source_positions=1500,
                                        max_target_positions=448)
    torch.manual_seed(4)
    hf = transformers.WhisperForConditionalGeneration(config).eval()
    hf.save_pretrained(tmp_path)
    ours = checkpoint.load(tmp_path)
    assert checkpoint.read(tmp_path)[2] == "huggingface"
    mel = torch.randn(1, 80, 3000, generator=torch.Generator().manual_seed(5))
    tokens = torch.tensor([SOT])
    with torch.no_grad():
        want = hf(input_features=mel, decoder_input_ids=tokens).logits
        got = ours.decoder(tokens, ours.encoder(mel), ours.decoder.new_cache(1))
    # transformers scales q by d^-1/2 before its matmul (a third rounding of the same attention)
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)


def test_bad_checkpoints(tmp_path):
    from mizuoto.core.errors import CheckpointError

    with pytest.raises(CheckpointError, match="does not exist"):
        checkpoint.load(tmp_path / "missing.pt")
    (tmp_path / "junk.pt").write_bytes(b"not a pickle")
    with pytest.raises(CheckpointError, match="not a readable Whisper checkpoint"):
        checkpoint.load(tmp_path / "junk.pt")
    torch.save({"something": 1}, tmp_path / "other.pt")
    with pytest.raises(CheckpointError, match="not an openai-whisper checkpoint"):
        checkpoint.load(tmp_path / "other.pt")
    (tmp_path / "folder").mkdir()
    with pytest.raises(CheckpointError, match="has no config.json"):
        checkpoint.load(tmp_path / "folder")
