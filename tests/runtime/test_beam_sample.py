"""Beam-search multinomial sampling (mizuoto/runtime/beam_sample.py), as IndexTTS 2's GPT generates.

Against tests/parity/data/indextts/beam (scripts/parity/indextts_beam_references.py: upstream's vendored
GenerationMixin at index-tts/index-tts ee40fa7 with transformers 4.52.1's BeamSearchScorer, driving a tiny toy
language model under the parity pins). In a pinned subprocess, per case: our tokens from the toy's logits (the same
ops rebuilt here), and the toy's logits on upstream's sequences. Where the set's fingerprint is this machine's the
logits are bitwise and the tokens equal; elsewhere (tests/fallback.py) the logits are within TOLERANCE and the
tokens, which follow from free running, are not compared. In process, on any machine: the same tokens as a host
loop over transformers' own BeamSearchScorer and logits processors (this venv's 4.57.3, whose scorer is 4.52.1's)
on logits with ties; one host read per step; one-line errors.
"""

import functools
import inspect
import json
import sys
from pathlib import Path

import pytest
import torch

if __name__ == "__main__":  # run as the pinned script: tests/ (helpers.py) is not on the path yet
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from fallback import Comparison  # noqa: E402
from helpers import HostReads, reference_sets, run_pinned  # noqa: E402

from mizuoto.core.errors import InputError  # noqa: E402
from mizuoto.runtime.beam_sample import beam_sample  # noqa: E402

SET = "indextts/beam"
TOLERANCE = 1e-5
PARAMETERS = ("embed", "w1", "b1", "w_out", "b_out")


def committed() -> Path:
    return reference_sets().SETS[SET].committed


@functools.cache
def info() -> dict:
    return json.loads((committed() / "references.json").read_text())


@functools.cache
def references() -> dict:
    from safetensors.torch import load_file

    return load_file(str(committed() / "references.safetensors"))


def toy_logits(p: dict, ids: torch.Tensor) -> torch.Tensor:
    """The writer's toy model, the same ops: embedding, causal running mean, tanh layer, head."""
    x = torch.nn.functional.embedding(ids, p["embed"])
    positions = torch.arange(1, ids.shape[1] + 1, dtype=x.dtype)
    h = x.cumsum(dim=1) / positions[:, None]
    h = torch.tanh(h @ p["w1"] + p["b1"])
    return h @ p["w_out"] + p["b_out"]


class Recompute:
    """A step function that keeps every row's ids, reorders them by the rows it is given and recomputes the
    model on all of them (as upstream's generate does with use_cache False)."""

    def __init__(self, model, prompt: torch.Tensor, rows_per_item: int):
        self.model, self.ids, self.calls = model, prompt.repeat_interleave(rows_per_item, dim=0), 0

    def first(self) -> torch.Tensor:
        return self.model(self.ids)[:, -1]

    def __call__(self, tokens: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        self.ids = torch.cat([self.ids.index_select(0, rows), tokens[:, None]], dim=1)
        return self.model(self.ids)[:, -1]


def rows_per_item(settings: dict) -> int:
    return settings["num_beams"] if settings["num_beams"] > 1 else settings.get("num_return_sequences", 1)


def run_case(refs: dict, recorded: dict, name: str) -> torch.Tensor:
    c = recorded["cases"][name]
    p = {k: refs[f"model/{c['model']}/{k}"] for k in PARAMETERS}
    prompt = refs[f"{name}/prompt"]
    step = Recompute(functools.partial(toy_logits, p), prompt, rows_per_item(c["generate"]))
    stop = recorded["stop_mel_token"]
    return beam_sample(step, step.first(), prompt, eos=stop, pad=stop, max_new_tokens=c["max_new_tokens"],
                       generator=torch.Generator().manual_seed(c["seed"]), **c["generate"])


def ours(folder: Path, out: Path) -> dict:
    from safetensors.torch import load_file, save_file

    refs = load_file(str(folder / "references.safetensors"))
    recorded = json.loads((folder / "references.json").read_text())
    results = {}
    with torch.inference_mode():
        for name, c in recorded["cases"].items():
            results[f"{name}/tokens"] = run_case(refs, recorded, name)
            p = {k: refs[f"model/{c['model']}/{k}"] for k in PARAMETERS}
            upstream_ids = torch.cat([refs[f"{name}/prompt"].repeat_interleave(
                refs[f"{name}/tokens"].shape[0] // refs[f"{name}/prompt"].shape[0], dim=0), refs[f"{name}/tokens"]], 1)
            results[f"{name}/logits"] = toy_logits(p, upstream_ids)
    save_file({k: v.contiguous() for k, v in results.items()}, str(out))
    return {"saved": str(out)}


def test_upstreams_beam_sampling(tmp_path, record_property):
    from safetensors.torch import load_file

    out = tmp_path / "ours.safetensors"
    run_pinned(__file__, committed(), out)
    comparison = Comparison.for_set(SET)
    theirs, mine = references(), load_file(str(out))
    assert {k for k in mine if k.endswith("/logits")} == set(info()["spread"]["max"]) - {"tokens_differing"}
    for name in sorted(info()["cases"]):
        comparison.deterministic(f"{name}/logits", mine[f"{name}/logits"], theirs[f"{name}/logits"], TOLERANCE)
        comparison.free_running(f"{name}/tokens", mine[f"{name}/tokens"], theirs[f"{name}/tokens"])
    record_property("parity_mode", comparison.mode)
    print(f"{SET} parity: {comparison.mode} ({comparison.why})", *comparison.checked, sep="\n  ")


def test_the_set_covers_indextts2_settings_ends_and_the_scorers_paths():
    recorded, refs = info(), references()
    assert recorded["upstream"]["commit"].startswith("ee40fa7")
    assert all(line.startswith("D ") for line in recorded["checkout_changes"])
    cases, facts = recorded["cases"], recorded["facts"]
    # the released settings (infer_v2.py) are the first case's and our defaults
    defaults = {k: v.default for k, v in inspect.signature(beam_sample).parameters.items()
                if v.default is not inspect.Parameter.empty}
    released = {"num_beams": 3, "top_p": 0.8, "top_k": 30, "temperature": 0.8, "repetition_penalty": 10.0,
                "length_penalty": 0.0}
    assert cases["indextts2"]["generate"] == released
    assert all(defaults[k] == v for k, v in released.items())
    assert defaults["early_stopping"] is False and defaults["num_return_sequences"] == 1
    assert {c["generate"]["num_beams"] for c in cases.values()} == {1, 2, 3, 4}
    # upstream's placeholder prompt: 1s, then start_mel_token
    assert (refs["indextts2/prompt"][0, :-1] == 1).all() and refs["indextts2/prompt"][0, -1] == recorded[
        "start_mel_token"]
    # beams that end (a hypothesis on eos), outputs cut by max_length, lists that replace and reject
    assert any(f["rows_ended"] for n, f in facts.items() if cases[n]["generate"]["num_beams"] > 1)
    cut = [n for n, f in facts.items() if f["first_stop"] == [None] and f["width"] == cases[n]["max_new_tokens"]]
    assert {"max_length", "max_length1", "indextts2"} <= set(cut)
    assert any(f["hypotheses"].get("replaced") for f in facts.values())
    assert any(f["hypotheses"].get("rejected") for f in facts.values())
    assert facts["batch2"]["rows"] == 2 and len(set(facts["batch2"]["first_stop"])) == 2  # items end apart
    assert facts["return2"]["rows"] == 2 and facts["beams1/return2"]["rows"] == 2
    assert recorded["spread"]["max"]["tokens_differing"] == 0
    assert max(v for k, v in recorded["spread"]["max"].items() if k != "tokens_differing") * 5 < TOLERANCE


# ---------------------------------------------------------------------------------------------------
# In process: transformers' own scorer and processors as the oracle, on this machine's floats


def transformers_generate(step, first_logits, prompt, *, eos, pad, max_new_tokens, num_beams, top_k, top_p,
                          temperature, repetition_penalty, length_penalty, early_stopping=False,
                          num_return_sequences=1, generator=None):
    """The loop of upstream's `_beam_search` (do_sample) and `_sample`, on the host, with transformers' classes."""
    from transformers.generation import beam_search, logits_process

    k = num_beams
    keep = 2 if k > 1 else 1
    processors = logits_process.LogitsProcessorList()
    if repetition_penalty != 1.0:
        processors.append(logits_process.RepetitionPenaltyLogitsProcessor(float(repetition_penalty)))
    if temperature != 1.0:
        processors.append(logits_process.TemperatureLogitsWarper(temperature))
    if top_k:
        processors.append(logits_process.TopKLogitsWarper(top_k, min_tokens_to_keep=keep))
    if top_p < 1.0:
        processors.append(logits_process.TopPLogitsWarper(top_p, min_tokens_to_keep=keep))
    per_item = k if k > 1 else num_return_sequences
    batch, prompt_len = prompt.shape
    ids = prompt.repeat_interleave(per_item, dim=0)
    logits, max_length = first_logits, prompt_len + max_new_tokens
    eos_tensor = torch.tensor([eos])
    if k == 1:
        running = torch.ones(ids.shape[0], dtype=torch.long)
        while True:
            scores = processors(ids, logits.float())
            tokens = torch.multinomial(torch.softmax(scores, dim=-1), 1, generator=generator).squeeze(1)
            tokens = tokens * running + pad * (1 - running)
            ids = torch.cat([ids, tokens[:, None]], dim=1)
            running = running & (tokens != eos).long()
            if running.max() == 0 or ids.shape[1] >= max_length:
                return ids[:, prompt_len:]
            logits = step(tokens, torch.arange(ids.shape[0]))
    scorer = beam_search.BeamSearchScorer(batch, k, ids.device, length_penalty=length_penalty,
                                          do_early_stopping=early_stopping, num_beam_hyps_to_keep=num_return_sequences,
                                          max_length=max_length)
    beam_scores = torch.zeros((batch, k))
    beam_scores[:, 1:] = -1e9
    beam_scores = beam_scores.view(-1)
    while True:
        scores = processors(ids, torch.log_softmax(logits.float(), dim=-1)) + beam_scores[:, None]
        v = scores.shape[-1]
        scores = scores.view(batch, k * v)
        drawn = torch.multinomial(torch.softmax(scores, dim=-1), 2 * k, generator=generator)
        scores, order = torch.sort(torch.gather(scores, -1, drawn), descending=True, dim=1)
        drawn = torch.gather(drawn, -1, order)
        chosen = scorer.process(ids, scores, drawn % v, torch.div(drawn, v, rounding_mode="floor"), pad_token_id=pad,
                                eos_token_id=eos_tensor, decoder_prompt_len=prompt_len)
        beam_scores, tokens, rows = chosen["next_beam_scores"], chosen["next_beam_tokens"], chosen["next_beam_indices"]
        ids = torch.cat([ids[rows, :], tokens[:, None]], dim=-1)
        if bool(scorer.is_done) or ids.shape[1] >= max_length:
            break
        logits = step(tokens, rows)
    out = scorer.finalize(ids, beam_scores, None, None, pad_token_id=pad, eos_token_id=eos_tensor,
                          max_length=max_length, decoder_prompt_len=prompt_len)["sequences"]
    return out[:, prompt_len:]


def quantized_toy(seed: int, vocab: int, width: int = 8, step: float = 0.25):
    """A toy whose logits are multiples of `step`: equal scores happen, so sort and hypothesis ties are met."""
    g = torch.Generator().manual_seed(seed)
    p = {"embed": torch.randn(vocab, width, generator=g), "w1": torch.randn(width, width, generator=g) * 0.6,
         "b1": torch.randn(width, generator=g) * 0.2, "w_out": torch.randn(width, vocab, generator=g) * 1.5,
         "b_out": torch.randn(vocab, generator=g) * 0.5}
    p["b_out"][vocab - 1] += 2.0  # eos, often enough to fill the lists

    def model(ids):
        return (toy_logits(p, ids) / step).round() * step

    return model


SETTINGS = [
    dict(num_beams=3, top_k=30, top_p=0.8, temperature=0.8, repetition_penalty=10.0, length_penalty=0.0),
    dict(num_beams=2, top_k=None, top_p=1.0, temperature=1.0, repetition_penalty=1.0, length_penalty=1.0),
    dict(num_beams=4, top_k=3, top_p=0.9, temperature=1.2, repetition_penalty=2.0, length_penalty=-0.5,
         early_stopping=True),
    dict(num_beams=3, top_k=10, top_p=0.95, temperature=0.7, repetition_penalty=1.5, length_penalty=2.0,
         early_stopping="never", num_return_sequences=2),
    dict(num_beams=5, top_k=1, top_p=1.0, temperature=1.0, repetition_penalty=1.0, length_penalty=0.0),
    dict(num_beams=1, top_k=30, top_p=0.8, temperature=0.8, repetition_penalty=10.0, length_penalty=0.0,
         num_return_sequences=2),
]


@pytest.mark.parametrize("settings", SETTINGS, ids=lambda s: f"beams{s['num_beams']}-lp{s['length_penalty']}-"
                         f"{s.get('early_stopping', False)}")
@pytest.mark.parametrize("seed", range(4))
def test_the_tokens_are_transformers_scorers_in_process(settings, seed):
    vocab, eos = 23, 22
    model = quantized_toy(seed, vocab)
    prompt = torch.ones(2, 4, dtype=torch.long)
    prompt[:, -1], prompt[1, 0] = 21, 5
    per_item = rows_per_item(settings)
    results = []
    for fn in (beam_sample, transformers_generate):
        step = Recompute(model, prompt, per_item)
        results.append(fn(step, step.first(), prompt, eos=eos, pad=eos, max_new_tokens=12 + seed * 5,
                          generator=torch.Generator().manual_seed(100 + seed), **settings))
    assert torch.equal(results[0], results[1]), (results[0], results[1])


def tied_model(vocab: int, eos_logit: tuple[float, float]):
    """Every row's logits the same, eos's rising with the length (start, slope): equal beam scores within a step,
    several hypotheses of equal score, and later ones better or worse (the lists' tie rules decide)."""
    start, slope = eos_logit

    def model(ids):
        logits = torch.zeros(ids.shape[0], ids.shape[1], vocab)
        logits[..., vocab - 1] = start + slope * (ids.shape[1] - 3)
        return logits

    return model


TIES = [
    dict(length_penalty=0.0), dict(length_penalty=1.0), dict(length_penalty=-1.0),
    dict(length_penalty=1.0, early_stopping="never"), dict(length_penalty=0.0, early_stopping=True),
    dict(length_penalty=1.0, repetition_penalty=2.0),
]


@pytest.mark.parametrize("settings", TIES, ids=lambda s: "-".join(f"{k}{v}" for k, v in s.items()))
@pytest.mark.parametrize("eos_logit", ((2.5, 0.0), (-2.0, 0.8), (-1.0, 0.3)))
@pytest.mark.parametrize("seed", range(3))
def test_every_kept_hypothesis_is_transformers_when_scores_tie(settings, eos_logit, seed):
    vocab, beams = 9, 3
    model, prompt = tied_model(vocab, eos_logit), torch.ones(1, 3, dtype=torch.long)
    settings = {**dict(num_beams=beams, num_return_sequences=beams, top_k=None, top_p=1.0, temperature=1.0,
                       repetition_penalty=1.0), **settings}
    results = []
    for fn in (beam_sample, transformers_generate):
        step = Recompute(model, prompt, beams)
        results.append(fn(step, step.first(), prompt, eos=vocab - 1, pad=vocab - 1, max_new_tokens=10,
                          generator=torch.Generator().manual_seed(seed), **settings))
    assert torch.equal(results[0], results[1]), (results[0], results[1])


def test_exactly_one_host_read_per_step():
    vocab = 23
    model = quantized_toy(0, vocab)
    prompt = torch.ones(1, 4, dtype=torch.long)
    for beams, finalize_reads in ((3, 1), (1, 0)):
        step = Recompute(model, prompt, beams)
        first = step.first()
        with HostReads() as reads:
            out = beam_sample(step, first, prompt, eos=vocab - 1, pad=vocab - 1, max_new_tokens=30, num_beams=beams,
                              generator=torch.Generator().manual_seed(0))
        steps = step.calls + 1  # the first step used the prefill's logits
        assert steps > 5 and out.shape[1] <= steps
        assert len(reads.reads) == steps + finalize_reads, reads.reads


@pytest.mark.parametrize("beams", (1, 3))
def test_lookahead_gives_the_same_tokens_with_one_read_per_step(beams):
    vocab = 23
    model, prompt = quantized_toy(1, vocab), torch.ones(1, 4, dtype=torch.long)
    results, calls = [], []
    for lookahead in (False, True):
        step = Recompute(model, prompt, beams)
        first = step.first()
        with HostReads() as reads:
            results.append(beam_sample(step, first, prompt, eos=vocab - 1, pad=vocab - 1, max_new_tokens=30,
                                       num_beams=beams, generator=torch.Generator().manual_seed(3),
                                       lookahead=lookahead))
        calls.append(step.calls)
        assert len(reads.reads) == calls[0] + 1 + (beams > 1)  # the steps (without lookahead's extra call)
    assert torch.equal(results[0], results[1])
    assert calls[1] == calls[0] + 1  # the ended step's logits were asked for, and not used


def test_the_penalty_sees_the_placeholder_prompt():
    """Upstream's prompt (1s, then start_mel_token) is in input_ids: with one step and a huge penalty those ids
    are never drawn where others are possible."""
    vocab = 12
    logits = torch.zeros(3, vocab)
    logits[:, 1] = logits[:, 10] = 5.0  # the prompt's ids would win without the penalty
    prompt = torch.tensor([[1, 1, 1, 10]])
    for seed in range(5):
        out = beam_sample(lambda t, r: logits, logits, prompt, eos=11, pad=11, max_new_tokens=1, top_k=None,
                          top_p=1.0, temperature=1.0, repetition_penalty=1e6, generator=torch.Generator().manual_seed(
                              seed))
        assert out[0, 0] not in (1, 10)


BAD = [
    (dict(num_beams=0), "num_beams"),
    (dict(num_beams=2.5), "num_beams"),
    (dict(max_new_tokens=0), "max_new_tokens"),
    (dict(num_return_sequences=4), "num_return_sequences"),
    (dict(early_stopping="sometimes"), "early_stopping"),
    (dict(early_stopping=2), "early_stopping"),
    (dict(length_penalty=float("nan")), "length_penalty"),
    (dict(eos=99), "eos"),
    (dict(pad=-1), "pad"),
    (dict(top_k=-3), "top_k"),
    (dict(top_p=1.5), "top_p"),
    (dict(temperature=0.0), "temperature"),
    (dict(repetition_penalty=-1.0), "repetition_penalty"),
    (dict(first_logits=torch.zeros(2, 12)), "first_logits"),
    (dict(first_logits=torch.zeros(3, 12, dtype=torch.long)), "first_logits"),
    (dict(prompt_ids=torch.ones(1, 4)), "prompt_ids"),
]


@pytest.mark.parametrize("change,names", BAD, ids=[f"{i}-{n}" for i, (_, n) in enumerate(BAD)])
def test_bad_arguments_are_one_line_input_errors(change, names):
    args = dict(first_logits=torch.zeros(3, 12), prompt_ids=torch.ones(1, 4, dtype=torch.long), eos=11, pad=11,
                max_new_tokens=4)
    args.update(change)
    first, prompt = args.pop("first_logits"), args.pop("prompt_ids")
    with pytest.raises(InputError) as error:
        beam_sample(lambda t, r: first, first, prompt, **args)
    message = str(error.value)
    assert "\n" not in message and names in message


def test_invalid_probabilities_raise_torch_multinomials_error_at_the_read():
    logits = torch.full((3, 12), float("nan"))
    with pytest.raises(RuntimeError, match="probability tensor contains"):
        beam_sample(lambda t, r: logits, logits, torch.ones(1, 4, dtype=torch.long), eos=11, pad=11,
                    max_new_tokens=4)


if __name__ == "__main__":  # the pinned subprocess
    print(json.dumps(ours(Path(sys.argv[1]), Path(sys.argv[2]))))
