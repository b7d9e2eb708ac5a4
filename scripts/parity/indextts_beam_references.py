#!/usr/bin/env python
"""Reference tokens of IndexTTS 2's GPT generation (beam-search multinomial sampling), written by upstream's own
GenerationMixin from an index-tts/index-tts checkout driving a tiny deterministic toy language model.

    python scripts/parity/indextts_beam_references.py OUTDIR --checkout PATH            # the set
    python scripts/parity/indextts_beam_references.py OUTDIR --checkout PATH --spread   # how far it moves

The interpreter: scripts/parity/indextts_upstream_env.sh (torch 2.13.0, transformers 4.52.1). GPT2InferenceModel's
generate is upstream's vendored GenerationMixin (indextts/gpt/transformers_generation_utils.py, reached through
transformers_gpt2.GPT2PreTrainedModel -> transformers_modeling_utils.PreTrainedModel), whose `_beam_search` samples
when do_sample and drives transformers 4.52.1's BeamSearchScorer (the vendored transformers_beam_search.py is
imported by nothing). The toy model here is a GPT2PreTrainedModel too, so generate runs that same code; it stands
in for the GPT so the set tests the sampler alone: token embedding, the causal running mean over positions,
tanh(h @ w1 + b1), h @ w_out + b_out; no cache (use_cache False: each step recomputes from input_ids, whose rows
the beam search reorders). Vocabulary 70, start_mel_token 68, stop_mel_token 69 (eos = pad); prompts are
upstream's placeholder input ids (1s, then start_mel_token), which the repetition penalty sees. generate is called
as inference_speech calls it (bos, pad, eos, attention_mask, max_length, an empty LogitsProcessorList) with
infer_v2's settings and variants, after torch.manual_seed(seed) (upstream's torch.multinomial takes the default
generator). Two weight sets: "toy", and "eager" (the same with stop_mel_token's bias raised, so beams end early).
OUTDIR/references.safetensors holds each model's parameters (model/<name>/<param>), each case's prompt ids, its
generated tokens (upstream's output[:, trunc_index:]) and the toy's logits on prompt + tokens (the fallback's
deterministic check); OUTDIR/references.json the cases' settings, seeds and what each exercised.
"""

from __future__ import annotations

import math
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from pinned import (  # noqa: E402
    checkout_writer_main,
    is_spread_child,
    lifted_runs,
    pin_process,
    save_spread,
    write_checkout_tensors,
)

if "--spread" not in sys.argv and not is_spread_child():
    pin_process()

import torch  # noqa: E402

VOCAB, WIDTH, START, STOP, PROMPT = 70, 16, 68, 69, 6
SEEDS = {"toy": 2100}
EAGER_STOP_BIAS = 2.5
INDEXTTS2 = {"num_beams": 3, "top_p": 0.8, "top_k": 30, "temperature": 0.8, "repetition_penalty": 10.0,
             "length_penalty": 0.0}


def case(model="toy", seed=0, max_new=40, prompts=1, **changes) -> dict:
    return {"model": model, "seed": seed, "max_new_tokens": max_new, "prompts": prompts, "generate": {
        **INDEXTTS2, **changes}}


CASES = {
    "indextts2": case(),
    "indextts2/seed1": case(seed=1),
    "indextts2/eager": case("eager", seed=2),
    "indextts2/eager_seed3": case("eager", seed=3),
    "beams1": case(num_beams=1),
    "beams1/eager": case("eager", seed=4, num_beams=1),
    "beams2": case(num_beams=2),
    "beams4": case("eager", seed=5, num_beams=4),
    "topk5_temp1.3": case(seed=6, top_k=5, top_p=1.0, temperature=1.3),
    "no_topk_topp0.5": case(seed=7, top_k=0, top_p=0.5, temperature=1.0),
    "topk1": case(seed=8, top_k=1),
    "no_penalty": case(seed=9, repetition_penalty=1.0),
    "max_length": case(seed=10, max_new=6),
    "max_length1": case(seed=11, max_new=1),
    "length_penalty1": case("eager", seed=12, length_penalty=1.0),
    "length_penalty-1": case("eager", seed=13, length_penalty=-1.0),
    "early_stopping": case("eager", seed=14, early_stopping=True),
    "early_stopping_never": case("eager", seed=15, early_stopping="never", length_penalty=1.0),
    "never_lp0": case("eager", seed=19, early_stopping="never"),
    "length_penalty2_long": case("eager", seed=20, length_penalty=2.0, max_new=60),
    "batch2": case("eager", seed=16, prompts=2),
    "return2": case("eager", seed=17, num_return_sequences=2),
    "beams1/return2": case(seed=18, num_beams=1, num_return_sequences=2),
}


def toy_parameters() -> dict:
    g = torch.Generator().manual_seed(SEEDS["toy"])

    def draw(*shape, scale):
        return (torch.randn(*shape, generator=g) * scale).contiguous()

    toy = {"embed": draw(VOCAB, WIDTH, scale=1.0), "w1": draw(WIDTH, WIDTH, scale=0.6), "b1": draw(WIDTH, scale=0.2),
           "w_out": draw(WIDTH, VOCAB, scale=1.2), "b_out": draw(VOCAB, scale=0.5)}
    eager = dict(toy, b_out=toy["b_out"].clone())
    eager["b_out"][STOP] += EAGER_STOP_BIAS
    return {"toy": toy, "eager": eager}


def toy_logits(p: dict, ids: torch.Tensor) -> torch.Tensor:
    """(R, T) ids -> (R, T, V) logits; the test computes the same ops."""
    x = torch.nn.functional.embedding(ids, p["embed"])
    positions = torch.arange(1, ids.shape[1] + 1, dtype=x.dtype)
    h = x.cumsum(dim=1) / positions[:, None]
    h = torch.tanh(h @ p["w1"] + p["b1"])
    return h @ p["w_out"] + p["b_out"]


def prompts(count: int) -> torch.Tensor:
    ids = torch.ones(count, PROMPT, dtype=torch.long)
    ids[:, -1] = START
    if count > 1:
        ids[1, -2] = 7  # a second, different prompt (upstream's ids are all 1s: the GPT reads embeddings)
    return ids


def upstream(checkout: Path):
    sys.path.insert(0, str(checkout))
    from indextts.gpt.transformers_gpt2 import GPT2PreTrainedModel
    from transformers import GPT2Config, LogitsProcessorList
    from transformers.modeling_outputs import CausalLMOutputWithCrossAttentions

    class ToyLM(GPT2PreTrainedModel):
        def __init__(self, parameters):
            super().__init__(GPT2Config(vocab_size=VOCAB, n_embd=WIDTH, n_layer=1, n_head=1))
            self.toy = torch.nn.ParameterDict(
                {k: torch.nn.Parameter(v, requires_grad=False) for k, v in parameters.items()})

        def prepare_inputs_for_generation(self, input_ids, **kwargs):
            return {"input_ids": input_ids}

        def forward(self, input_ids=None, attention_mask=None, return_dict=None, **kwargs):
            return CausalLMOutputWithCrossAttentions(logits=toy_logits(self.toy, input_ids))

    return ToyLM, LogitsProcessorList


def counting_hypotheses():
    """Wraps transformers' BeamHypotheses.add to count what the scorer did: added below K, replaced the worst,
    rejected (-> a dict the caller resets per case)."""
    from transformers.generation import beam_search

    counts = {}
    add = beam_search.BeamHypotheses.add

    def counted(self, hyp, sum_logprobs, beam_indices=None, generated_len=None):
        before = len(self)
        score = sum_logprobs / (generated_len ** self.length_penalty)
        kind = "below_k" if before < self.num_beams else "replaced" if score > self.worst_score else "rejected"
        counts[kind] = counts.get(kind, 0) + 1
        return add(self, hyp, sum_logprobs, beam_indices=beam_indices, generated_len=generated_len)

    beam_search.BeamHypotheses.add = counted
    return counts


def outputs(checkout: Path) -> tuple[dict, dict]:
    toy_lm, processors = upstream(checkout)
    counts = counting_hypotheses()
    parameters = toy_parameters()
    models = {name: toy_lm(p).eval() for name, p in parameters.items()}
    refs = {f"model/{name}/{k}": v.clone() for name, p in parameters.items() for k, v in p.items()}
    facts = {}
    for name, c in CASES.items():
        ids = prompts(c["prompts"])
        counts.clear()
        torch.manual_seed(c["seed"])
        with torch.no_grad():
            out = models[c["model"]].generate(ids, bos_token_id=START, pad_token_id=STOP, eos_token_id=STOP,
                                              attention_mask=torch.ones_like(ids), max_length=PROMPT +
                                              c["max_new_tokens"], logits_processor=processors(), do_sample=True,
                                              use_cache=False, **c["generate"])
        tokens = out[:, PROMPT:].contiguous()
        refs[f"{name}/prompt"], refs[f"{name}/tokens"] = ids, tokens
        with torch.no_grad():
            refs[f"{name}/logits"] = toy_logits(parameters[c["model"]], out).contiguous()
        ended = (tokens == STOP).any(dim=1)
        facts[name] = {"width": tokens.shape[1], "rows_ended": int(ended.sum()), "rows": tokens.shape[0],
                       "first_stop": [int((row == STOP).nonzero()[0]) if (row == STOP).any() else None
                                      for row in tokens], "hypotheses": dict(counts)}
    info = {"cases": CASES, "facts": facts, "vocab": VOCAB, "width": WIDTH, "start_mel_token": START,
            "stop_mel_token": STOP, "prompt_length": PROMPT, "seeds": SEEDS, "eager_stop_bias": EAGER_STOP_BIAS}
    return refs, info


FLOATS = tuple(f"{name}/logits" for name in CASES)


def write(out: Path, checkout: Path) -> None:
    import subprocess

    refs, info = outputs(checkout)
    changes = subprocess.run(["git", "-C", str(checkout), "status", "--porcelain", "--untracked-files=no"],
                             capture_output=True, text=True, check=True).stdout.splitlines()
    info["checkout_changes"] = changes  # expected: the two absent binaries, deleted in the snapshot
    write_checkout_tensors(out, refs, info, checkout,
                           "indextts/gpt/transformers_generation_utils.py GenerationMixin (generate, _beam_search "
                           "with do_sample, _sample, _get_logits_processor) through transformers_gpt2."
                           "GPT2PreTrainedModel; transformers 4.52.1 BeamSearchScorer, BeamHypotheses and logits "
                           "processors", ["torch", "transformers"], repository="index-tts/index-tts")


def spread(out: Path, checkout: Path) -> None:
    """Max |difference| of each output between the pinned run and runs with a pin lifted: OUTDIR/spread.json
    (the tokens are reported as the count of differing ones)."""
    with tempfile.TemporaryDirectory() as tmp:
        runs = lifted_runs(__file__, ["--checkout", checkout], tmp)
    pinned = runs.pop("pinned")
    report = {}
    for label, r in runs.items():
        report[label] = {k: float((r[k] - pinned[k]).abs().max()) if r[k].shape == pinned[k].shape else math.inf
                         for k in FLOATS}
        report[label]["tokens_differing"] = sum(
            int((r[f"{n}/tokens"] != pinned[f"{n}/tokens"]).sum()) if r[f"{n}/tokens"].shape ==
            pinned[f"{n}/tokens"].shape else r[f"{n}/tokens"].numel() for n in CASES)
    save_spread(out, report, (*FLOATS, "tokens_differing"))


if __name__ == "__main__":
    checkout_writer_main(__doc__.split("\n\n")[0], write, spread, outputs)
