"""mizuoto/nn/bert.py against transformers 4.57.3's own BertModel and BertForMaskedLM (the test oracle installed
with the test extra), live, in this process and so at the same threads and kernels: tiny random models (every
LayerNorm and bias drawn, not left at init), one unpadded sentence (transformers drops the all-ones mask), a
padded batch (its additive mask), token types, and every hidden state, bitwise."""

import pytest
import torch

from mizuoto.core.errors import CheckpointError
from mizuoto.nn import bert

CONFIG = {"vocab_size": 300, "hidden_size": 64, "num_hidden_layers": 3, "num_attention_heads": 4,
          "intermediate_size": 96, "max_position_embeddings": 40, "type_vocab_size": 2, "layer_norm_eps": 1e-12,
          "hidden_act": "gelu", "model_type": "bert"}


def upstream(masked_lm: bool = False):
    transformers = pytest.importorskip("transformers")
    config = transformers.BertConfig(**CONFIG, attn_implementation="sdpa")
    model = (transformers.BertForMaskedLM if masked_lm else transformers.BertModel)(config).eval()
    g = torch.Generator().manual_seed(3)
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.copy_(torch.rand(p.shape, generator=g) + 0.5 if "LayerNorm.weight" in name
                    else torch.randn(p.shape, generator=g) * (0.1 if name.endswith("bias") else 0.2))
    return model


def ids(batch: int, length: int, seed: int = 0):
    return torch.randint(1, CONFIG["vocab_size"], (batch, length), generator=torch.Generator().manual_seed(seed))


def test_one_sentence_and_every_hidden_state_are_transformers():
    theirs = upstream()
    ours = bert.from_state(CONFIG, theirs.state_dict())
    x = ids(1, 17)
    with torch.inference_mode():
        want = theirs(input_ids=x, attention_mask=torch.ones_like(x), output_hidden_states=True)
        got = ours(x, torch.ones_like(x), output_hidden_states=True)
    assert len(got.hidden_states) == len(want.hidden_states) == 4
    for a, b in zip(got.hidden_states, want.hidden_states, strict=True):
        assert torch.equal(a, b)
    assert torch.equal(got.last_hidden_state, want.last_hidden_state)


def test_a_padded_batch_with_token_types_is_transformers():
    theirs = upstream()
    ours = bert.from_state(CONFIG, theirs.state_dict())
    x = ids(3, 12, seed=1)
    mask = torch.ones_like(x)
    mask[1, 8:] = 0
    mask[2, 3:] = 0
    types = (torch.arange(12) >= 6).long().expand(3, -1)
    with torch.inference_mode():
        want = theirs(input_ids=x, attention_mask=mask, token_type_ids=types).last_hidden_state
        got = ours(x, mask, types).last_hidden_state
    assert torch.equal(got, want)


def test_a_masked_lm_checkpoint_loads_without_its_head():
    theirs = upstream(masked_lm=True)
    ours = bert.from_state(CONFIG, theirs.state_dict())
    x = ids(1, 9, seed=2)
    with torch.inference_mode():
        want = theirs(input_ids=x, output_hidden_states=True).hidden_states[-3]
        got = ours(x, output_hidden_states=True).hidden_states[-3]
    assert torch.equal(got, want)


def test_bad_configs_checkpoints_and_inputs_are_one_line_errors():
    with pytest.raises(CheckpointError, match="does not split into 5 heads"):
        bert.BertConfig.from_dict({**CONFIG, "num_attention_heads": 5})
    with pytest.raises(CheckpointError, match="relative position embeddings"):
        bert.BertConfig.from_dict({**CONFIG, "position_embedding_type": "relative_key"})
    state = bert.Bert(bert.BertConfig.from_dict(CONFIG)).state_dict()
    del state["encoder.layer.2.output.dense.weight"]
    with pytest.raises(CheckpointError, match="missing.*encoder.layer.2.output.dense.weight"):
        bert.from_state(CONFIG, state)
    model = bert.Bert(bert.BertConfig.from_dict(CONFIG))
    with pytest.raises(ValueError, match="at most 40 tokens"):
        model(ids(1, 41))
