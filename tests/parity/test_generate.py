"""The decode loop against transformers' generate(): identical ids, seeded, with its processors."""

import pytest
import torch

transformers = pytest.importorskip("transformers")

from mizuoto.nn.qwen_lm import QwenLM  # noqa: E402
from mizuoto.runtime import decode, sampling  # noqa: E402
from mizuoto.runtime.accel import dispatch  # noqa: E402

from .test_qwen_decoder import VOCAB, tiny  # noqa: E402

SETTINGS = [
    dict(do_sample=True, temperature=0.8, top_k=20, top_p=0.9, repetition_penalty=1.3, min_new_tokens=4),
    dict(do_sample=True, temperature=1.0, top_k=None, top_p=1.0, repetition_penalty=1.0, min_new_tokens=0),
    dict(do_sample=False, temperature=1.0, top_k=None, top_p=1.0, repetition_penalty=1.1, min_new_tokens=2),
]


def ours(lm, ids, attention, settings, seed, max_new, eos, pad):
    params = sampling.SamplingParams(eos_token_ids=(eos,), **settings)
    sampler = sampling.Sampler(params, VOCAB, ids.device)
    logits = lm.start(ids, attention, max_new)
    seen = sampling.seen_mask(ids, VOCAB) if sampler.needs_history else None
    generator = torch.Generator().manual_seed(seed)
    tokens, n = decode.generate_tokens(lm.step, logits, sampler, generator, max_new, (eos,), pad, seen)
    return tokens


@pytest.mark.parametrize("settings", SETTINGS, ids=["all processors", "plain sampling", "greedy"])
@pytest.mark.parametrize("padded", [False, True])
@pytest.mark.parametrize("seed", [0, 7])
def test_same_ids_as_generate(settings, padded, seed, monkeypatch):
    monkeypatch.setattr(dispatch, "DEBUG", False)
    model = tiny("qwen3")
    lm = QwenLM.from_transformers(model).eval()
    ids = torch.randint(6, VOCAB, (2, 6), generator=torch.Generator().manual_seed(seed + 100))
    attention = torch.ones_like(ids)
    if padded:
        attention[1, :2] = 0
        ids[1, :2] = 0
    eos, pad, max_new = 5, 0, 16
    torch.manual_seed(seed)  # transformers draws from the global generator
    with torch.no_grad():
        want = model.generate(input_ids=ids, attention_mask=attention, max_new_tokens=max_new, eos_token_id=eos,
                              pad_token_id=pad, top_k=settings["top_k"] or 0, **{k: v for k, v in settings.items()
                                                                                  if k != "top_k"})
        got = ours(lm, ids, attention, settings, seed, max_new, eos, pad)
    assert torch.equal(got, want[:, ids.shape[1]:])


def test_finished_rows_are_padded_and_the_loop_stops_early(monkeypatch):
    monkeypatch.setattr(dispatch, "DEBUG", False)
    model = tiny("qwen3")
    lm = QwenLM.from_transformers(model).eval()
    ids = torch.randint(6, VOCAB, (2, 5), generator=torch.Generator().manual_seed(3))
    attention = torch.ones_like(ids)
    greedy = dict(do_sample=False, temperature=1.0, top_k=None, top_p=1.0, repetition_penalty=1.0, min_new_tokens=0)
    with torch.no_grad():
        free = model.generate(input_ids=ids, attention_mask=attention, max_new_tokens=12, do_sample=False,
                              eos_token_id=100, pad_token_id=0)[:, 5:]
        eos = int(free[0, 2])  # row 0 will stop at its third token
        want = model.generate(input_ids=ids, attention_mask=attention, max_new_tokens=12, do_sample=False,
                              eos_token_id=eos, pad_token_id=0)[:, 5:]
        got = ours(lm, ids, attention, greedy, 0, 12, eos, 0)
    assert torch.equal(got, want)
    assert (got[0, 3:] == 0).all()  # padded after its EOS
