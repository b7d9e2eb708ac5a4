"""mizuoto.runtime.sampling against its oracles: transformers' own logits processors (built directly, through
`GenerationMixin._get_logits_processor`, and inside a real `generate`) and `torch.multinomial`. Scores must
be bit-identical, and draws must give the same ids and leave the generator in the same state."""

import contextlib
import functools
import itertools
import math
import warnings

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from torch.utils._python_dispatch import TorchDispatchMode

from mizuoto.core.errors import InputError
from mizuoto.runtime import sampling
from mizuoto.runtime.sampling import (
    INVALID_PROBS,
    Sampler,
    SamplingParams,
    apply_repetition_penalty,
    mark_seen,
    multinomial1,
    multinomial_draws,
    raise_if_invalid,
    repetition_penalty_seen,
    sample,
    seen_mask,
    token_mask,
)

transformers = pytest.importorskip("transformers")
from transformers import LogitsProcessorList  # noqa: E402
from transformers.generation import logits_process as lp  # noqa: E402

SETTINGS = settings(deadline=None, max_examples=100, suppress_health_check=[HealthCheck.too_slow])
INF = math.inf


def bits_equal(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Same dtype, shape and bits (so -0.0 differs from 0.0, and -inf positions must agree)."""
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    as_int = {torch.float32: torch.int32, torch.float64: torch.int64}.get(a.dtype, torch.int16)
    return torch.equal(a.contiguous().view(as_int), b.contiguous().view(as_int))


def make_scores(seed: int, batch: int, vocab: int, kind: str, scale: float) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    if kind == "ties":  # few distinct values, zeros of both signs
        sign = torch.where(torch.rand(batch, vocab, generator=g) < 0.5, -1.0, 1.0)
        return torch.randint(0, 4, (batch, vocab), generator=g).float() / 2 * sign
    x = torch.randn(batch, vocab, generator=g) * scale
    if kind == "neg_inf":
        x = x.masked_fill(torch.rand(batch, vocab, generator=g) < 0.35, -INF)
    if kind == "all_neg_inf_row":
        x[0] = -INF
    if kind == "nan":
        x[0, vocab // 2] = math.nan
    return x


@st.composite
def cases(draw, do_sample=None):
    """(scores (B, V), prompt ids (B, T), params, new_tokens)."""
    batch, vocab = draw(st.integers(1, 3)), draw(st.one_of(st.integers(2, 40), st.sampled_from([1000, 4099])))
    kind = draw(st.sampled_from(["normal", "normal", "ties", "neg_inf", "all_neg_inf_row", "nan"]))
    seed = draw(st.integers(0, 2**32 - 1))
    scores = make_scores(seed, batch, vocab, kind, draw(st.sampled_from([0.3, 3.0, 30.0])))
    prompt = torch.randint(0, vocab, (batch, draw(st.integers(1, 6))), generator=torch.Generator().manual_seed(seed))
    params = SamplingParams(
        do_sample=draw(st.booleans()) if do_sample is None else do_sample,
        temperature=draw(st.one_of(st.just(1.0), st.floats(0.1, 2.0))),
        top_k=draw(st.sampled_from([None, 0, 1, 2, 5, vocab, vocab + 3])),
        top_p=draw(st.one_of(st.just(1.0), st.floats(0.0, 1.0, exclude_min=True))),
        repetition_penalty=draw(st.one_of(st.just(1.0), st.floats(0.5, 2.0))),
        min_new_tokens=draw(st.integers(0, 4)),
        suppress_tokens=tuple(draw(st.lists(st.integers(0, vocab + 2), max_size=4))),
        eos_token_ids=tuple(draw(st.lists(st.integers(0, vocab - 1), max_size=3))),
        min_tokens_to_keep=draw(st.sampled_from([1, 1, 2, 3])),
    )
    return scores, prompt, params, draw(st.integers(0, 5))


def hf_processors(params: SamplingParams, prompt_length: int, device="cpu") -> LogitsProcessorList:
    """transformers' processors built directly, in `_get_logits_processor`'s order."""
    procs = LogitsProcessorList()
    if params.repetition_penalty != 1.0:
        procs.append(lp.RepetitionPenaltyLogitsProcessor(params.repetition_penalty))
    if params.min_new_tokens > 0 and params.eos_token_ids:
        procs.append(lp.MinNewTokensLengthLogitsProcessor(prompt_length, params.min_new_tokens,
                                                          list(params.eos_token_ids), device=device))
    if params.suppress_tokens:
        procs.append(lp.SuppressTokensLogitsProcessor(params.suppress_tokens, device=device))
    if params.do_sample:
        if params.temperature != 1.0:
            procs.append(lp.TemperatureLogitsWarper(params.temperature))
        if params.top_k:
            procs.append(lp.TopKLogitsWarper(params.top_k, min_tokens_to_keep=params.min_tokens_to_keep))
        if params.top_p < 1.0:
            procs.append(lp.TopPLogitsWarper(params.top_p, min_tokens_to_keep=params.min_tokens_to_keep))
    return procs


def history(prompt: torch.Tensor, new_tokens: int, vocab: int) -> torch.Tensor:
    """The prompt followed by `new_tokens` generated ids: transformers' input_ids at that step."""
    drawn = torch.randint(0, vocab, (prompt.shape[0], new_tokens), generator=torch.Generator().manual_seed(new_tokens))
    return torch.cat([prompt, drawn], dim=1)


# ---------------------------------------------------------------------------------------------------
# Processors


@SETTINGS
@given(cases())
def test_processors_match_transformers(case):
    scores, prompt, params, new_tokens = case
    vocab = scores.shape[-1]
    input_ids = history(prompt, new_tokens, vocab)
    expected = hf_processors(params, prompt.shape[1])(input_ids, scores.clone())
    sampler = Sampler(params, vocab, "cpu")
    by_ids = sampler.process(scores, new_tokens, input_ids=input_ids)
    by_seen = sampler.process(scores, new_tokens, seen=seen_mask(input_ids, vocab))
    assert bits_equal(by_ids, expected)
    assert bits_equal(by_seen, expected)


@functools.lru_cache(maxsize=None)
def tiny_model(vocab: int = 48):
    config = transformers.Qwen3Config(vocab_size=vocab, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                      num_attention_heads=2, num_key_value_heads=1, head_dim=8,
                                      max_position_embeddings=64)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)  # tests may seed the global generator; library code never does
        return transformers.Qwen3ForCausalLM(config).eval()


def generation_config(params: SamplingParams, beams: int = 1, **extra):
    return transformers.GenerationConfig(
        do_sample=params.do_sample, temperature=params.temperature, top_k=params.top_k, top_p=params.top_p,
        repetition_penalty=params.repetition_penalty, min_new_tokens=params.min_new_tokens,
        suppress_tokens=list(params.suppress_tokens) or None, eos_token_id=list(params.eos_token_ids) or None,
        num_beams=beams, **extra)


@SETTINGS
@given(cases(), st.booleans())
def test_processors_match_get_logits_processor(case, beams):
    """Which processors transformers enables, in which order, and with which min_tokens_to_keep (len(eos) + 1
    in beam sampling), as generate() builds them."""
    scores, prompt, params, new_tokens = case
    vocab = scores.shape[-1]
    if beams and params.do_sample:
        keep = len(params.eos_token_ids) + 1 if params.eos_token_ids else 2
        params = SamplingParams(**{**params.__dict__, "min_tokens_to_keep": keep})
    elif params.min_tokens_to_keep != 1:
        params = SamplingParams(**{**params.__dict__, "min_tokens_to_keep": 1})
    model = tiny_model()
    config = generation_config(params, beams=2 if beams else 1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model._prepare_special_tokens(config, device="cpu")
        procs = model._get_logits_processor(config, input_ids_seq_length=prompt.shape[1], encoder_input_ids=prompt,
                                            logits_processor=LogitsProcessorList(), device="cpu")
    direct = hf_processors(params, prompt.shape[1])
    assert [type(p) for p in procs] == [type(p) for p in direct]
    input_ids = history(prompt, new_tokens, vocab)
    expected = procs(input_ids, scores.clone())
    assert bits_equal(Sampler(params, vocab, "cpu").process(scores, new_tokens, input_ids=input_ids), expected)


@settings(deadline=None, max_examples=40, suppress_health_check=[HealthCheck.too_slow])
@given(cases(), st.integers(0, 2**63 - 1), st.integers(0, 47))
def test_generate_loop_matches_transformers(case, seed, pad):
    """A whole `generate` on a tiny Qwen3: its processed scores, its ids and the generator's final state,
    reproduced from its raw logits with the seen mask, our own generator and padding of finished rows."""
    _, prompt, params, _ = case
    params = SamplingParams(**{**params.__dict__, "min_tokens_to_keep": 1})  # as generate() without beams
    model = tiny_model()
    vocab = model.config.vocab_size
    prompt = prompt % vocab
    config = generation_config(params, max_new_tokens=5, pad_token_id=pad, output_scores=True, output_logits=True,
                               return_dict_in_generate=True)
    with torch.random.fork_rng(devices=[]), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.manual_seed(seed)
        out = model.generate(prompt, attention_mask=torch.ones_like(prompt), generation_config=config)
        state_after = torch.get_rng_state()

    sampler = Sampler(params, vocab, "cpu")
    generator = torch.Generator().manual_seed(seed)
    seen = seen_mask(prompt, vocab)
    eos = token_mask(params.eos_token_ids, vocab, "cpu")
    unfinished = torch.ones(prompt.shape[0], dtype=torch.bool)
    for step, (raw, expected) in enumerate(zip(out.logits, out.scores, strict=True)):
        assert bits_equal(sampler.process(raw, step, seen=seen), expected)
        ids, invalid = sample(raw, sampler, step, generator, seen=seen)
        raise_if_invalid(invalid)
        ids = torch.where(unfinished, ids, pad)
        assert torch.equal(ids, out.sequences[:, prompt.shape[1] + step])
        mark_seen(seen, ids)
        unfinished &= ~eos[ids]
    assert out.sequences.shape[1] == prompt.shape[1] + len(out.logits)
    assert torch.equal(generator.get_state(), state_after)


@SETTINGS
@given(cases(), st.integers(1, 5))
def test_seen_mask_over_steps_matches_growing_input_ids(case, steps):
    scores, prompt, params, _ = case
    params = SamplingParams(repetition_penalty=params.repetition_penalty if params.repetition_penalty != 1 else 1.3)
    vocab = scores.shape[-1]
    processor = lp.RepetitionPenaltyLogitsProcessor(params.repetition_penalty)
    seen, input_ids = seen_mask(prompt, vocab), prompt
    g = torch.Generator().manual_seed(steps)
    for _ in range(steps):
        step_scores = scores + torch.randn(scores.shape, generator=g)
        expected = processor(input_ids, step_scores.clone())
        assert bits_equal(repetition_penalty_seen(step_scores, seen, params.repetition_penalty), expected)
        assert bits_equal(apply_repetition_penalty(step_scores, input_ids, params.repetition_penalty), expected)
        drawn = torch.randint(0, vocab, (scores.shape[0],), generator=g)
        mark_seen(seen, drawn)
        input_ids = torch.cat([input_ids, drawn[:, None]], dim=1)
    assert seen.shape == scores.shape


def test_one_dimensional_input_ids_are_one_id_per_row():
    scores = torch.randn(3, 7, generator=torch.Generator().manual_seed(0))
    ids = torch.tensor([1, 4, 4])
    expected = lp.RepetitionPenaltyLogitsProcessor(1.5)(ids, scores.clone())
    assert bits_equal(apply_repetition_penalty(scores, ids, 1.5), expected)


# ---------------------------------------------------------------------------------------------------
# Drawing


@st.composite
def probabilities(draw):
    shape = draw(st.sampled_from([(1, 7), (3, 11), (4, 64), (2, 3), (9,), (2, 200), (3, 5000)]))
    dtype = draw(st.sampled_from([torch.float32, torch.bfloat16, torch.float16, torch.float64]))
    g = torch.Generator().manual_seed(draw(st.integers(0, 2**32 - 1)))
    kind = draw(st.sampled_from(["softmax", "unnormalised", "zeros", "ties"]))
    if kind == "ties":
        p = torch.randint(1, 3, shape, generator=g).double()
    else:
        p = torch.rand(shape, generator=g, dtype=torch.float64) * 5
    if kind == "softmax":
        p = (torch.randn(shape, generator=g, dtype=torch.float64) * 3).softmax(-1)
    if kind == "zeros":  # some zero entries, every row keeps its largest
        p = p.masked_fill((torch.rand(shape, generator=g) < 0.6) & (p < p.amax(-1, keepdim=True)), 0)
    p = p.to(dtype)
    if draw(st.booleans()) and p.dim() == 2:  # not contiguous
        p = p.t().contiguous().t()
    return p


@SETTINGS
@given(probabilities(), st.integers(0, 2**63 - 1))
def test_multinomial1_matches_torch_multinomial(probs, seed):
    g1, g2 = torch.Generator().manual_seed(seed), torch.Generator().manual_seed(seed)
    expected = torch.multinomial(probs, 1, generator=g1)
    ids, invalid = multinomial1(probs, g2)
    assert ids.dtype == torch.long and torch.equal(ids, expected)
    assert torch.equal(g1.get_state(), g2.get_state())
    assert invalid.shape == probs.shape[:-1] and not invalid.any()


@SETTINGS
@given(probabilities(), st.integers(0, 2**63 - 1), st.data())
def test_multinomial_draws_matches_torch_multinomial(probs, seed, data):
    n = data.draw(st.integers(1, probs.shape[-1]))
    g1, g2 = torch.Generator().manual_seed(seed), torch.Generator().manual_seed(seed)
    expected = torch.multinomial(probs, n, replacement=False, generator=g1)
    ids, invalid = multinomial_draws(probs, n, g2)
    assert torch.equal(ids, expected)
    assert torch.equal(g1.get_state(), g2.get_state())
    assert not invalid.any()


def test_multinomial_draws_rejects_impossible_counts():
    probs = torch.ones(2, 4)
    for n in (0, 5):
        with pytest.raises(ValueError):
            multinomial_draws(probs, n)


def torch_message(probs: torch.Tensor) -> str:
    with pytest.raises(RuntimeError) as caught:
        torch.multinomial(probs, 1)
    return str(caught.value)


BAD_ROWS = {"nan": [0.5, math.nan, 0.5], "inf": [0.5, INF, 0.5], "negative": [0.5, -0.1, 0.6],
            "all_nan": [math.nan] * 3, "zero_sum": [0.0, 0.0, 0.0]}


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("bad", list(BAD_ROWS))
def test_invalid_rows_are_recorded_not_raised(bad, dtype):
    probs = torch.tensor([[0.2, 0.3, 0.5], BAD_ROWS[bad], [1.0, 0.0, 0.0]], dtype=dtype)
    ids, invalid = multinomial1(probs, torch.Generator().manual_seed(0))
    assert invalid.tolist() == [False, True, False]
    assert ids.shape == (3, 1)
    _, invalid = multinomial_draws(probs, 2, torch.Generator().manual_seed(0))
    assert invalid.tolist() == [False, True, False]
    with pytest.raises(RuntimeError) as caught:
        raise_if_invalid(invalid)
    if bad != "zero_sum":  # torch says "invalid multinomial distribution (sum of probabilities <= 0)" there
        assert str(caught.value) == torch_message(probs) == INVALID_PROBS


def test_raise_if_invalid_takes_tensors_and_host_bools():
    raise_if_invalid(torch.zeros(3, dtype=torch.bool))
    raise_if_invalid(False)
    with pytest.raises(RuntimeError, match="probability tensor contains either `inf`, `nan` or element < 0"):
        raise_if_invalid(True)


@pytest.mark.parametrize("do_sample", [True, False])
def test_sample_is_one_step_of_transformers_sample(do_sample):
    g = torch.Generator().manual_seed(3)
    logits = (torch.randn(2, 4, 30, generator=g) * 4).to(torch.bfloat16)
    input_ids = torch.randint(0, 30, (2, 6), generator=g)
    params = SamplingParams(do_sample=do_sample, temperature=0.8, top_k=20, top_p=0.9, repetition_penalty=1.2,
                            min_new_tokens=2, eos_token_ids=(0,), suppress_tokens=(5, 6))
    scores = hf_processors(params, 4)(input_ids, logits[:, -1, :].to(copy=True, dtype=torch.float32))
    g1, g2 = torch.Generator().manual_seed(9), torch.Generator().manual_seed(9)
    if do_sample:
        expected = torch.multinomial(torch.nn.functional.softmax(scores, dim=-1), 1, generator=g1).squeeze(1)
    else:
        expected = torch.argmax(scores, dim=-1)
    ids, invalid = sample(logits, Sampler(params, 30, "cpu"), 1, g2, input_ids=input_ids)
    assert torch.equal(ids, expected) and not invalid.any()
    assert torch.equal(g1.get_state(), g2.get_state())


def test_sample_records_a_row_with_every_token_suppressed():
    params = SamplingParams(suppress_tokens=(0, 1, 2))
    scores = torch.tensor([[1.0, 2.0, 3.0, 4.0], [1.0, 2.0, 3.0, -INF]])
    _, invalid = sample(scores, Sampler(params, 4, "cpu"), 0, torch.Generator().manual_seed(0))
    assert invalid.tolist() == [False, True]


# ---------------------------------------------------------------------------------------------------
# No host reads inside a step


class OpRecorder(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.problems = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = str(func.overloadpacket)
        tensors = [a for a in args if isinstance(a, torch.Tensor)]
        if name in WAITING_OPS:
            self.problems.append(name)
        elif name in ("aten.index_put_", "aten.index_put", "aten.index") and any(
                isinstance(i, torch.Tensor) and i.dtype == torch.bool for i in (args[1] if len(args) > 1 else ())
                if i is not None):
            self.problems.append(f"{name} with a boolean mask")
        elif name == "aten.fill_" and len(tensors) > 1:
            self.problems.append("fill_ from a tensor")
        elif name == "aten.copy_" and tensors[1].dim() == 0:
            self.problems.append("copy_ from a scalar")
        elif name == "aten._to_copy" and kwargs.get("device", tensors[0].device) != tensors[0].device:
            self.problems.append("_to_copy to another device")
        return func(*args, **kwargs)


# Ops that read a value back to the host (a wait on CUDA), or turn host data or a Python scalar into a tensor.
WAITING_OPS = {"aten._local_scalar_dense", "aten.item", "aten.is_nonzero", "aten.equal", "aten.nonzero",
               "aten.nonzero_static", "aten.masked_select", "aten._assert_async", "aten._assert_scalar",
               "aten.lift_fresh", "aten.lift_fresh_copy", "aten.scalar_tensor", "aten.allclose", "aten.unique_dim",
               "aten._unique2", "aten.repeat_interleave"}


@contextlib.contextmanager
def no_host_data():
    """Tensors from Python data, and the Python-level reads, fail while it is active."""

    def refuse(*args, **kwargs):
        raise AssertionError("host data or a host read inside a step")

    with pytest.MonkeyPatch.context() as patch:
        for owner, name in [(torch, "tensor"), (torch, "as_tensor"), (torch, "from_numpy"), (torch.Tensor, "tolist"),
                            (torch.Tensor, "item"), (torch.Tensor, "cpu"), (torch.Tensor, "numpy"),
                            (torch.Tensor, "__bool__")]:
            patch.setattr(owner, name, refuse)
        yield


def test_recorder_catches_host_reads():
    x = torch.randn(3, 4)
    with OpRecorder() as recorder:
        x.sum().item()
        x.nonzero()
        x[x > 0] = 0.0
        torch.where(x > 0, 0.0, x)
    assert recorder.problems == ["aten._local_scalar_dense", "aten.nonzero", "aten.lift_fresh",
                                 "aten.index_put_ with a boolean mask", "aten.scalar_tensor"]


@pytest.mark.parametrize("logits_dtype", [torch.float32, torch.bfloat16])
def test_a_step_never_reads_the_device(logits_dtype):
    vocab = 50
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(3, 2, vocab, generator=g).to(logits_dtype)
    params = SamplingParams(temperature=0.7, top_k=10, top_p=0.8, repetition_penalty=1.3, min_new_tokens=4,
                            eos_token_ids=(1, 2), suppress_tokens=(3,), min_tokens_to_keep=2)
    greedy = Sampler(SamplingParams(**{**params.__dict__, "do_sample": False}), vocab, "cpu")
    sampler = Sampler(params, vocab, "cpu")  # masks are built here, before the step
    seen = torch.zeros(3, vocab, dtype=torch.bool)
    with no_host_data(), OpRecorder() as recorder:
        scores = sampler.process(logits[:, -1].float(), 2, seen=seen)
        ids, invalid = multinomial1(scores.softmax(-1), g)
        mark_seen(seen, ids)
        multinomial_draws(scores.softmax(-1), 4, g)
        ids, invalid = sample(logits, sampler, 0, g, seen=seen)
        mark_seen(seen, ids)
        sample(logits, greedy, 0, g, seen=seen)
    assert recorder.problems == []


def test_new_tokens_must_be_a_host_int():
    sampler = Sampler(SamplingParams(min_new_tokens=2, eos_token_ids=(0,)), 5, "cpu")
    with pytest.raises(TypeError):
        sampler.process(torch.zeros(1, 5), torch.tensor(1))


def test_the_penalty_needs_history():
    sampler = Sampler(SamplingParams(repetition_penalty=1.2), 5, "cpu")
    assert sampler.needs_history
    with pytest.raises(ValueError):
        sampler.process(torch.zeros(1, 5), 0)


# ---------------------------------------------------------------------------------------------------
# Masks and parameters


def test_masks_are_built_once_per_device():
    params = SamplingParams(suppress_tokens=(4, 2), eos_token_ids=(7,), min_new_tokens=1)
    a, b = Sampler(params, 10, "cpu"), Sampler(params, 10, torch.device("cpu"))
    assert a.suppress_mask is b.suppress_mask and a.eos_mask is b.eos_mask
    assert token_mask([2, 4, 2], 10, "cpu") is a.suppress_mask
    assert a.suppress_mask.tolist() == [i in (2, 4) for i in range(10)]
    elsewhere = Sampler(params, 10, "meta")
    assert elsewhere.suppress_mask.device.type == "meta" and elsewhere.suppress_mask is not a.suppress_mask


def test_ids_outside_the_vocabulary_match_nothing():
    assert not token_mask([-1, 10, 11], 10, "cpu").any()


def test_unused_processors_are_off():
    sampler = Sampler(SamplingParams(do_sample=False, temperature=0.5, top_k=5, top_p=0.5, min_new_tokens=3), 9, "cpu")
    assert (sampler.temperature, sampler.top_k, sampler.top_p, sampler.eos_mask) == (None, None, None, None)
    scores = torch.randn(2, 9)
    assert sampler.process(scores, 0) is scores


@pytest.mark.parametrize("fields", [dict(temperature=0.0), dict(temperature=-1.0), dict(top_k=-1), dict(top_k=2.5),
                                    dict(top_p=1.5), dict(top_p=-0.1), dict(repetition_penalty=0.0),
                                    dict(min_new_tokens=-1), dict(min_tokens_to_keep=0)])
def test_bad_parameters_are_input_errors(fields):
    with pytest.raises(InputError):
        SamplingParams(**fields)


def test_greedy_ignores_sampling_parameters_as_transformers_does():
    SamplingParams(do_sample=False, temperature=0.0, top_k=-1)


def test_parameters_are_normalised():
    params = SamplingParams(temperature=2, suppress_tokens=[3, 1], eos_token_ids=5)
    assert params.temperature == 2.0 and isinstance(params.temperature, float)
    assert params.suppress_tokens == (3, 1) and params.eos_token_ids == (5,)


def test_other_devices_fall_back_to_torch_multinomial(monkeypatch):
    monkeypatch.setattr(sampling, "OWN_ALGORITHM_DEVICES", ())
    probs = torch.rand(2, 6)
    g1, g2 = torch.Generator().manual_seed(1), torch.Generator().manual_seed(1)
    ids, invalid = multinomial1(probs, g1)
    assert torch.equal(ids, torch.multinomial(probs, 1, generator=g2)) and not invalid.any()
    ids, _ = multinomial_draws(probs, 3, g1)
    assert torch.equal(ids, torch.multinomial(probs, 3, generator=g2))


# ---------------------------------------------------------------------------------------------------
# CUDA (run where a GPU is present)

cuda_only = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


@pytest.mark.gpu
@cuda_only
def test_cuda_draws_match_torch_multinomial():
    shapes = [(1, 151936), (4, 2048), (3, 7), (5,)]
    for dtype, shape, seed in itertools.product([torch.float32, torch.bfloat16], shapes, range(4)):
        g = torch.Generator(device="cuda").manual_seed(1000 + seed)
        probs = (torch.randn(shape, device="cuda", generator=g) * 3).softmax(-1).to(dtype)
        if seed % 2:
            probs = probs * 7  # not normalised
        for n in (1, 4):
            g1 = torch.Generator(device="cuda").manual_seed(seed)
            g2 = torch.Generator(device="cuda").manual_seed(seed)
            expected = torch.multinomial(probs, n, replacement=False, generator=g1)
            ids, invalid = multinomial_draws(probs, n, g2)
            assert torch.equal(ids, expected) and not invalid.any(), (dtype, shape, seed, n)
            assert torch.equal(g1.get_state(), g2.get_state())


@pytest.mark.gpu
@cuda_only
def test_cuda_processors_match_transformers_without_waiting():
    for seed in range(6):
        check_cuda_step(seed)


def check_cuda_step(seed):
    vocab, device = 3000, torch.device("cuda", torch.cuda.current_device())
    g = torch.Generator().manual_seed(seed)
    scores = (torch.randn(3, vocab, generator=g) * 4).to(device)
    prompt = torch.randint(0, vocab, (3, 9), generator=g).to(device)
    params = SamplingParams(temperature=0.1 + seed / 4, top_k=[None, 1, 50, 4000][seed % 4],
                            top_p=[1.0, 0.8, 0.3][seed % 3], repetition_penalty=1.3, min_new_tokens=2,
                            eos_token_ids=(0, 7), suppress_tokens=(5, 6), min_tokens_to_keep=1 + seed % 2)
    sampler = Sampler(params, vocab, device)
    seen = seen_mask(prompt, vocab)
    expected = hf_processors(params, 9, device)(prompt, scores.clone())
    g1 = torch.Generator(device=device).manual_seed(seed)
    g2 = torch.Generator(device=device).manual_seed(seed)
    torch.cuda.synchronize()
    previous = torch.cuda.get_sync_debug_mode()
    torch.cuda.set_sync_debug_mode("error")  # any wait on the device raises
    try:
        processed = sampler.process(scores, 0, seen=seen)
        ids, invalid = multinomial1(processed.softmax(-1), g2)
        mark_seen(seen, ids)
        stepped, _ = sample(scores[:, None, :], sampler, 1, g2, seen=seen)
        mark_seen(seen, stepped)
    finally:
        torch.cuda.set_sync_debug_mode(previous)
    assert bits_equal(processed, expected)
    assert torch.equal(ids, torch.multinomial(expected.softmax(-1), 1, generator=g1)) and not invalid.any()
