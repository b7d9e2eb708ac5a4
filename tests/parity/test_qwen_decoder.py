"""QwenDecoder against transformers' own Qwen3 and Qwen2 models: identical logits, prefill and every
decode step, with and without left padding (eager float32 on the CPU, same thread count)."""

import pytest
import torch

transformers = pytest.importorskip("transformers")

from mizuoto.nn.qwen import QwenConfig, QwenDecoder  # noqa: E402
from mizuoto.runtime.accel import dispatch  # noqa: E402

VOCAB = 101


def tiny(kind: str):
    common = dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                  rms_norm_eps=1e-6, rope_theta=10000.0, tie_word_embeddings=False)
    if kind == "qwen3":
        config = transformers.Qwen3Config(head_dim=16, attention_bias=False, **common)
        model_class = transformers.Qwen3ForCausalLM
    else:
        config = transformers.Qwen2Config(**common)
        model_class = transformers.Qwen2ForCausalLM
    config._attn_implementation = "sdpa"
    torch.manual_seed(0)  # tests may seed the global generator; library code never does
    model = model_class(config).eval()
    with torch.no_grad():
        # RMSNorm weights start at one and biases at zero: re-randomise them, or a wrong norm or a
        # missing bias would pass unnoticed.
        for name, param in model.named_parameters():
            if "norm" in name:
                param.copy_(1 + 0.2 * torch.randn_like(param))
            elif name.endswith("bias"):
                param.copy_(0.1 * torch.randn_like(param))
    return model


def ours_for(model):
    decoder = QwenDecoder(QwenConfig.from_transformers(model.config)).eval()
    state = {k.removeprefix("model."): v for k, v in model.state_dict().items() if k.startswith("model.")}
    decoder.load_state_dict(state)
    return decoder


def positions_for(mask):
    # What generate() computes: positions count real tokens only; padding gets position 1.
    return (mask.long().cumsum(-1) - 1).masked_fill(mask == 0, 1)


@pytest.mark.parametrize("kind", ["qwen3", "qwen2"])
@pytest.mark.parametrize("padded", [False, True])
@pytest.mark.parametrize("grad", [False, True])
def test_logits_identical_for_prefill_and_every_step(kind, padded, grad, monkeypatch):
    monkeypatch.setattr(dispatch, "DEBUG", True)
    model = tiny(kind)
    decoder = ours_for(model)
    batch, prompt, steps = 2, 7, 6
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(0, VOCAB, (batch, prompt), generator=g)
    attention = torch.ones(batch, prompt, dtype=torch.long)
    if padded:
        attention[0, :3] = 0  # left padding, as generate() pads a batch
    context = torch.enable_grad() if grad else torch.no_grad()
    with context:
        positions = positions_for(attention)
        out = model(input_ids=ids, attention_mask=attention, position_ids=positions, use_cache=True)
        cache = decoder.new_cache(batch, prompt + steps)
        mask = decoder.mask_for(attention.bool(), prompt, prompt)
        hidden = decoder(decoder.embed_tokens(ids), positions, cache, mask)
        logits = model.lm_head(hidden)
        real = attention.bool()
        assert torch.equal(logits[real], out.logits[real])
        past = out.past_key_values
        for _ in range(steps):
            token = logits[:, -1].argmax(-1, keepdim=True)
            attention = torch.cat([attention, torch.ones(batch, 1, dtype=torch.long)], dim=1)
            position = positions_for(attention)[:, -1:]
            out = model(input_ids=token, attention_mask=attention, position_ids=position, past_key_values=past,
                        use_cache=True)
            past = out.past_key_values
            mask = decoder.mask_for(attention.bool(), 1, attention.shape[1])
            logits = model.lm_head(decoder(decoder.embed_tokens(token), position, cache, mask))
            assert torch.equal(logits, out.logits)


@pytest.mark.parametrize("kind", ["qwen3", "qwen2"])
def test_chunked_prefill_matches(kind):
    """Queries against more keys than queries, no padding: transformers builds a dense causal mask."""
    model = tiny(kind)
    decoder = ours_for(model)
    ids = torch.randint(0, VOCAB, (1, 9), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        first = model(input_ids=ids[:, :4], use_cache=True)
        second = model(input_ids=ids[:, 4:], past_key_values=first.past_key_values, use_cache=True)
        cache = decoder.new_cache(1, 9)
        positions = torch.arange(9)[None]
        decoder(decoder.embed_tokens(ids[:, :4]), positions[:, :4], cache, decoder.mask_for(None, 4, 4))
        mask = decoder.mask_for(None, 5, 9)
        assert mask.dense is not None and not mask.causal
        hidden = decoder(decoder.embed_tokens(ids[:, 4:]), positions[:, 4:], cache, mask)
        assert torch.equal(model.lm_head(hidden), second.logits)


def test_known_padding_skips_the_device_check():
    decoder = ours_for(tiny("qwen3"))
    keys = torch.ones(2, 5, dtype=torch.bool)
    assert decoder.mask_for(keys, 5, 5).dense is None  # looked, found no padding
    keys[0, 0] = False
    assert decoder.mask_for(keys, 5, 5).dense is not None
    # The caller says there is none: trusted, no device read.
    assert decoder.mask_for(keys, 5, 5, padded=False).dense is None


def test_fused_projections_stay_close_and_are_listed():
    model = tiny("qwen3")
    decoder = ours_for(model)
    ids = torch.randint(0, VOCAB, (2, 6), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        plain = decoder(decoder.embed_tokens(ids), torch.arange(6)[None].expand(2, 6), decoder.new_cache(2, 6),
                        decoder.mask_for(None, 6, 6, batch=2))
        decoder.fuse()
        fused = decoder(decoder.embed_tokens(ids), torch.arange(6)[None].expand(2, 6), decoder.new_cache(2, 6),
                        decoder.mask_for(None, 6, 6, batch=2))
    assert decoder.fused_projections
    assert not hasattr(decoder.layers[0].self_attn, "q_proj")
    torch.testing.assert_close(fused, plain, rtol=1e-5, atol=1e-5)


def test_cache_overflow_is_a_clear_error():
    decoder = ours_for(tiny("qwen3"))
    cache = decoder.new_cache(1, 4)
    with pytest.raises(RuntimeError, match="KV cache holds 4 positions; this step needs 6"), torch.no_grad():
        decoder(torch.zeros(1, 6, 64), torch.arange(6)[None], cache, decoder.mask_for(None, 6, 6, batch=2))
