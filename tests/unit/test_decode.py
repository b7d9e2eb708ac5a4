"""The decode loop waits on the device exactly once per step."""

import pytest
import torch
from helpers import HostReads

from mizuoto.nn.qwen import QwenConfig
from mizuoto.nn.qwen_lm import QwenLM
from mizuoto.runtime import decode, sampling
from mizuoto.runtime.accel import dispatch


def lm(seed=0):
    config = QwenConfig(hidden_size=32, intermediate_size=64, num_layers=2, num_heads=4, num_kv_heads=2,
                        head_dim=8, vocab_size=50)
    model = QwenLM(config)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.3)
    return model.eval()


@pytest.mark.parametrize("padded", [False, True])
def test_one_host_read_per_step(monkeypatch, padded):
    monkeypatch.setattr(dispatch, "DEBUG", False)  # DEBUG's mask check reads tensors on purpose
    model = lm()
    ids = torch.randint(0, 50, (2, 5), generator=torch.Generator().manual_seed(1))
    attention = torch.ones_like(ids)
    if padded:
        attention[0, :2] = 0
    params = sampling.SamplingParams(temperature=0.7, top_k=10, top_p=0.9, repetition_penalty=1.2, min_new_tokens=3,
                                     eos_token_ids=(7,))
    sampler = sampling.Sampler(params, 50, "cpu")
    steps = []
    with torch.no_grad():
        logits = model.start(ids, attention, 20, padded=padded)
        seen = sampling.seen_mask(ids, 50)
        with HostReads() as mode:
            tokens, n = decode.generate_tokens(model.step, logits, sampler, torch.Generator().manual_seed(2), 20,
                                               (7,), 0, seen, before_step=steps.append)
    assert n == len(steps) and n >= 4
    assert mode.reads == ["aten._local_scalar_dense.default"] * n


def test_invalid_probabilities_raise_torch_multinomials_error(monkeypatch):
    model = lm()
    sampler = sampling.Sampler(sampling.SamplingParams(), 50, "cpu")
    logits = torch.full((1, 50), float("nan"))
    with pytest.raises(RuntimeError, match="probability tensor contains either `inf`, `nan` or element < 0"):
        decode.generate_tokens(model.step, logits, sampler, None, 5)
