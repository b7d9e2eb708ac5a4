#!/usr/bin/env python
"""Reference outputs of CosyVoice's text bi-streaming LM decode, Qwen2LM.inference_bistream (CosyVoice 2) and the
same method under CosyVoice3LM (CosyVoice 3), written by upstream's own code from a FunAudioLLM/CosyVoice checkout
(GitHub only: tests/fallback.py compares on a machine whose floats differ).

    python scripts/parity/cosyvoice_bistream_references.py OUTDIR --checkout PATH            # the set
    python scripts/parity/cosyvoice_bistream_references.py OUTDIR --checkout PATH --spread   # how far it moves
    python scripts/parity/cosyvoice_bistream_references.py --search --checkout PATH          # finds SEEDS_FOUND

The interpreter: scripts/parity/cosyvoice_upstream_env.sh (transformers 4.51.3's Qwen2ForCausalLM).

The LMs are cosyvoice_llm's (cosyvoice_llm_references.build: a tiny Qwen2 at the released vocabulary, every
parameter from cosyvoice_weights.lm_state, CosyVoice 2's end row raised in its bias), CosyVoice 2's as it is. Random
weights draw CosyVoice 3's 200 special ids as often as any other, and inference_bistream raises on every one but
the fill while text arrives and on every one but the end after it (upstream's ValueError), so CosyVoice 3's special
rows of llm_decoder are zeroed (never drawn: their logit 0 is far below the kept ones) except the fill, kept, and the
end id, set to EOS_GAIN times the unit mean of the final normed hidden state over a fixed 200-position input
(recorded as cv3/eos_row): a chance to end at every step (it moves with the context), and so to end a request
early while text still arrives, an error as upstream's. Each case runs after torch.manual_seed(seed), the draws from
the global generator, with the text given as pieces of 1, 3 or 7 token ids, or in one piece; SEEDS_FOUND are the
first seeds from each case's base whose run ends as the case says (a stop, a stop after a drawn fill, or upstream's
ValueError while text arrives or after it) within MAX_TOKENS tokens, found by --search.

Recorded per case: the inputs, the speech tokens inference_bistream yielded, every step's token (`steps`: the fills
and the last, stopping or refused, id included, as upstream's out_tokens), which steps were drawn and with row
speech_token_size forbidden (its sampling_ids calls and their ignore_eos), the forced and drawn fills, the error,
and the llm_decoder's logits at every step (a forward hook): the sha256 of them all (27 kB a step in full) and each
step's TOP largest with their ids, for the teacher-forced fallback. OUTDIR/references.safetensors holds the ids,
tokens, steps, those logits and CosyVoice 3's end row (the tied embedding table is rebuilt by the test);
OUTDIR/references.json the Qwen2 config, the parameters' names and shapes, the rows changed, and the cases.
"""

from __future__ import annotations

import hashlib
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
from cosyvoice_llm_references import QWEN, SEEDS, SPEECH_TOKENS, build  # noqa: E402

END_OF_PROMPT = 151646
EOS_GAIN = 3.5  # CosyVoice 3's end row: this times the unit mean hidden state
TOP = 32  # logits kept per step
MAX_TOKENS = 120  # a run that has not ended by then does not end as wanted (upstream has no limit)
# group -> (prompt text ids before <|endofprompt|>, after it, text ids, prompt speech tokens); CosyVoice 2's prompt
# text is the two parts' lengths together, without <|endofprompt|>
GROUPS = {
    "prompted": (3, 2, 20, 17),  # the first fill after 13 tokens (15 x 2 - 17)
    "unprompted": (3, 2, 20, 0),  # CV2 waits for 5 text tokens, CV3 starts on its prompt alone
    "whole_chunks": (2, 1, 10, 15),  # a multiple of 15 prompt speech tokens: the first fill after 15
    "no_prompt_text": (0, 0, 12, 0),  # CV2: sos alone; CV3: <|endofprompt|> alone
    "text_ends_mixing": (2, 1, 6, 40),  # the text ends before the prompt speech is mixed in: the rest is dropped
}
# case -> (group, tokens per piece (0: one piece), how it ends: "stop", "text error", "final error")
CASES = {
    "prompted_1": ("prompted", 1, "stop"),
    "prompted_3": ("prompted", 3, "stop"),
    "prompted_7": ("prompted", 7, "stop"),  # pieces longer than 5: the text cache runs ahead of the rounds
    "prompted_all": ("prompted", 0, "stop"),
    "unprompted_1": ("unprompted", 1, "stop"),
    "unprompted_3": ("unprompted", 3, "stop"),
    "unprompted_all": ("unprompted", 0, "stop"),
    "whole_chunks_1": ("whole_chunks", 1, "stop"),
    "no_prompt_text_1": ("no_prompt_text", 1, "stop"),
    "text_ends_mixing_1": ("text_ends_mixing", 1, "stop"),
    "error_while_text_arrives": ("prompted", 1, "text error"),
    "error_after_text": ("unprompted", 1, "final error"),
    "drawn_fill_1": ("unprompted", 1, "stop after a drawn fill"),  # a fill drawn while text arrives, not forced
}
# version -> case -> seed (found by --search from BASE_SEED + 100 x the case's index, at most SEARCH_TRIES seeds:
# CosyVoice 2 never raised there, so it has no error cases; CosyVoice 3 drew no fill within a run that stopped)
SEEDS_FOUND = {
    "cv2": {"prompted_1": 3000, "prompted_3": 3100, "prompted_7": 3200, "prompted_all": 3300, "unprompted_1": 3400,
            "unprompted_3": 3500, "unprompted_all": 3600, "whole_chunks_1": 3700, "no_prompt_text_1": 3800,
            "text_ends_mixing_1": 3900, "drawn_fill_1": 4281},
    "cv3": {"prompted_1": 3013, "prompted_3": 3102, "prompted_7": 3205, "prompted_all": 3306, "unprompted_1": 3400,
            "unprompted_3": 3502, "unprompted_all": 3603, "whole_chunks_1": 3700, "no_prompt_text_1": 3801,
            "text_ends_mixing_1": 3910, "error_while_text_arrives": 4000, "error_after_text": 4146},
}
BASE_SEED = 3000
SEARCH_TRIES = 100


def upstream_code() -> str:
    return ("cosyvoice/llm/llm.py Qwen2LM.inference_bistream (CosyVoice3LM inherits it), cosyvoice/utils/common.py "
            "ras_sampling")


def tweak(models: dict) -> torch.Tensor:
    """CosyVoice 3's special rows as the module docstring says; returns the end row."""
    model = models["cv3"][0]
    g = torch.Generator().manual_seed(77)
    with torch.no_grad():
        decoder = model.llm.model.model
        x = torch.cat([decoder.embed_tokens(torch.randint(0, 151643, (1, 100), generator=g)),
                       model.speech_embedding(torch.randint(0, SPEECH_TOKENS, (1, 100), generator=g))], dim=1)
        x = x[:, torch.randperm(200, generator=g)]
        mean = model.llm.model(inputs_embeds=x, output_hidden_states=True).hidden_states[-1][0].mean(dim=0)
        row = (EOS_GAIN * mean / mean.norm()).contiguous()
        weight = model.llm_decoder.weight
        fill = weight[SPEECH_TOKENS + 3].clone()
        weight[SPEECH_TOKENS:] = 0
        weight[SPEECH_TOKENS + 1] = row
        weight[SPEECH_TOKENS + 3] = fill
    return row


def group_ids(g, version: str, before: int, after: int, text: int, speech: int) -> tuple:
    head = torch.randint(0, 151643, (1, before), generator=g, dtype=torch.int32)
    tail = torch.randint(0, 151643, (1, after), generator=g, dtype=torch.int32)
    parts = [head, torch.tensor([[END_OF_PROMPT]], dtype=torch.int32), tail] if version == "cv3" else [head, tail]
    return (torch.randint(0, 151643, (1, text), generator=g, dtype=torch.int32), torch.cat(parts, dim=1),
            torch.randint(0, SPEECH_TOKENS, (1, speech), generator=g, dtype=torch.int32))


def pieces(text: torch.Tensor, size: int):
    size = size or text.shape[1]
    for i in range(0, text.shape[1], size):
        yield text[:, i:i + size]


def run(model, text, prompt_text, prompt_speech, size: int, seed: int) -> dict:
    """One inference_bistream call after torch.manual_seed(seed): what it yielded, drew and raised."""
    calls, logits = [], []
    drawn = model.sampling_ids

    def sampling_ids(weighted_scores, decoded_tokens, sampling, ignore_eos=True):
        top = drawn(weighted_scores, decoded_tokens, sampling, ignore_eos=ignore_eos)
        calls.append((len(decoded_tokens), bool(ignore_eos), int(top)))
        return top

    model.sampling_ids = sampling_ids
    hook = model.llm_decoder.register_forward_hook(lambda m, a, out: logits.append(out.detach().clone()))
    tokens, error, ended = [], None, "stop"
    torch.manual_seed(seed)
    try:
        for token in model.inference_bistream(
                text=pieces(text, size), prompt_text=prompt_text,
                prompt_text_len=torch.tensor([prompt_text.shape[1]], dtype=torch.int32),
                prompt_speech_token=prompt_speech,
                prompt_speech_token_len=torch.tensor([prompt_speech.shape[1]], dtype=torch.int32),
                embedding=torch.zeros(1, 0)):
            tokens.append(int(token))
            if len(tokens) >= MAX_TOKENS:
                ended = "runaway"
                break
    except ValueError as e:
        error = str(e)
    finally:
        hook.remove()
        del model.sampling_ids
    fill = model.fill_token
    drawn_at = {i: (forbid, top) for i, forbid, top in calls}
    steps = [drawn_at[i][1] if i in drawn_at else fill for i in range(len(logits))]
    if error is not None:
        ended = "text error" if drawn_at[len(steps) - 1][0] else "final error"
    elif ended == "stop" and schedule_fills(steps, fill, prompt_speech.shape[1])[1]:
        ended = "stop after a drawn fill"
    return {"tokens": tokens, "steps": steps, "logits": torch.cat(logits) if logits else torch.zeros(0),
            "drawn": [i in drawn_at for i in range(len(steps))],
            "forbid_end": [drawn_at[i][0] if i in drawn_at else True for i in range(len(steps))],
            "error": error, "ended": ended}


def schedule_fills(steps: list[int], fill: int, prompted: int) -> tuple[int, int]:
    """(forced, drawn) fills along upstream's out_tokens: forced where the schedule's next_fill_index says."""
    next_fill, forced, drawn = (prompted // 15 + 1) * 15 - prompted, 0, 0
    for i, token in enumerate(steps):
        if token == fill:
            forced, drawn = (forced + 1, drawn) if i == next_fill else (forced, drawn + 1)
            next_fill = i + 16
    return forced, drawn


def setup(checkout: Path, folder: Path) -> tuple[dict, torch.Tensor, dict]:
    sys.path.insert(0, str(checkout))
    models = build(checkout, folder)
    row = tweak(models)
    g = torch.Generator().manual_seed(43)
    inputs = {v: {name: group_ids(g, v, *spec) for name, spec in GROUPS.items()} for v in SEEDS}
    return models, row, inputs


def search(checkout: Path, only: list[str]) -> None:
    """Print, per version and case (those in `only`, or all), the first seed from its base whose run ends as the
    case says."""
    with tempfile.TemporaryDirectory() as tmp:
        models, _, inputs = setup(checkout, Path(tmp))
    found = {}
    for version, (model, _) in models.items():
        found[version] = {}
        for index, (case, (group, size, wanted)) in enumerate(CASES.items()):
            if only and case not in only:
                continue
            for seed in range(BASE_SEED + 100 * index, BASE_SEED + 100 * index + SEARCH_TRIES):
                result = run(model, *inputs[version][group], size, seed)
                if result["ended"] == wanted:
                    found[version][case] = seed
                    print(version, case, seed, len(result["tokens"]), len(result["steps"]), flush=True)
                    break
            else:
                print(version, case, f"none of {SEARCH_TRIES} seeds ends with {wanted}", flush=True)
    print(found)


def outputs(checkout: Path) -> tuple[dict, dict]:
    with tempfile.TemporaryDirectory() as tmp:
        models, row, inputs = setup(checkout, Path(tmp))
    refs, cases = {"cv3/eos_row": row}, {}
    info = {"qwen": QWEN, "speech_tokens": SPEECH_TOKENS, "seeds": SEEDS, "eos_gain": EOS_GAIN,
            "mix_ratio": [5, 15], "entries": {n: e for n, (_, e) in models.items()},
            "state_dict": {n: list(m.state_dict()) for n, (m, _) in models.items()},
            "cv3_rows": {"zeroed": [SPEECH_TOKENS, SPEECH_TOKENS + 200], "kept": SPEECH_TOKENS + 3,
                         "end": SPEECH_TOKENS + 1, "end_row": "cv3/eos_row"}}
    for version, (model, _) in models.items():
        for case, (group, size, wanted) in CASES.items():
            seed = SEEDS_FOUND.get(version, {}).get(case)
            if seed is None:
                continue
            key = f"{version}/{case}"
            text, prompt_text, prompt_speech = inputs[version][group]
            result = run(model, text, prompt_text, prompt_speech, size, seed)
            if not is_spread_child():
                assert result["ended"] == wanted, f"{key}: seed {seed} ended with {result['ended']}, not {wanted}"
            refs[f"{key}/text"], refs[f"{key}/prompt_text"], refs[f"{key}/prompt_speech"] = \
                text, prompt_text, prompt_speech
            refs[f"{key}/tokens"] = torch.tensor(result["tokens"], dtype=torch.int64)
            refs[f"{key}/steps"] = torch.tensor(result["steps"], dtype=torch.int64)
            # the full logits are 27 kB a step: their sha256, and each step's TOP largest (values, ids) for the
            # teacher-forced fallback
            logits = result["logits"].contiguous()
            values, ids = logits.sort(dim=-1, descending=True, stable=True)
            refs[f"{key}/top_logits"], refs[f"{key}/top_ids"] = values[:, :TOP], ids[:, :TOP]
            forced, drawn = schedule_fills(result["steps"], model.fill_token, prompt_speech.shape[1])
            final = [i for i, forbid in enumerate(result["forbid_end"]) if not forbid]
            cases[key] = {"group": group, "piece": size, "seed": seed, "ended": result["ended"],
                          "error": result["error"], "tokens": len(result["tokens"]), "steps": len(result["steps"]),
                          "drawn": result["drawn"], "forbid_end": result["forbid_end"],
                          "final_from": final[0] if final else None, "forced_fills": forced, "drawn_fills": drawn,
                          "logits_sha256": hashlib.sha256(logits.numpy().tobytes()).hexdigest()}
    info["cases"] = cases
    return {k: v.contiguous().clone() for k, v in refs.items()}, info


def floats(keys) -> tuple:
    return tuple(k for k in keys if k.endswith("/top_logits"))


def write(out: Path, checkout: Path) -> None:
    refs, info = outputs(checkout)
    write_checkout_tensors(out, refs, info, checkout, upstream_code(), ["torch", "transformers"],
                           repository="FunAudioLLM/CosyVoice")


def spread(out: Path, checkout: Path) -> None:
    """Max |difference| of each case's logits between the pinned run and runs with a pin lifted: OUTDIR/spread.json
    (only the common length is measured; a lifted run that drew other tokens compares other logits after them)."""
    with tempfile.TemporaryDirectory() as tmp:
        runs = lifted_runs(__file__, ["--checkout", checkout], tmp)
    pinned = runs.pop("pinned")
    keys = floats(pinned)

    def moved(r, k):
        n = min(len(r[k]), len(pinned[k]))
        return float((r[k][:n] - pinned[k][:n]).abs().max())

    report = {label: {k: moved(r, k) for k in keys} for label, r in runs.items()}
    save_spread(out, report, keys)


if __name__ == "__main__":
    if "--search" in sys.argv:
        import argparse

        parser = argparse.ArgumentParser(description="the seeds of SEEDS_FOUND")
        parser.add_argument("--search", action="store_true")
        parser.add_argument("--checkout", type=Path, required=True)
        parser.add_argument("--case", action="append", default=[], help="only these cases")
        args = parser.parse_args()
        search(args.checkout.resolve(), args.case)
    else:
        checkout_writer_main(__doc__.split("\n\n")[0], write, spread, outputs)
