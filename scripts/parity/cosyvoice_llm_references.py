#!/usr/bin/env python
"""Reference outputs of CosyVoice 2's Qwen2LM and CosyVoice 3's CosyVoice3LM, written by upstream's own
`inference` from a FunAudioLLM/CosyVoice checkout (GitHub only: tests/fallback.py compares on a machine whose floats
differ).

    python scripts/parity/cosyvoice_llm_references.py OUTDIR --checkout PATH            # the set
    python scripts/parity/cosyvoice_llm_references.py OUTDIR --checkout PATH --spread   # how far it moves

The interpreter: scripts/parity/cosyvoice_upstream_env.sh (transformers 4.51.3's Qwen2ForCausalLM, which
Qwen2Encoder loads with from_pretrained from a folder written here).

A tiny Qwen2 (hidden 64, 2 layers, 4 query and 2 key/value heads, intermediate 128, rope theta 1e6, the released
vocabulary size 151936 with tied embeddings: <|endofprompt|> is id 151646) under each LM class at the released speech
vocabulary (6561 + 3 rows for CV2, + 200 for CV3), every parameter from cosyvoice_weights.lm_state (the LM head
scaled so that top-p keeps fewer than 25 ids and repetitions are redrawn; CV2's stop rows raised in its bias).
Sampling is ras_sampling as both yamls configure it. Recorded per case (each after torch.manual_seed(seed), the
draws from the global generator): the speech tokens, and the llm_decoder's logits at every step (a forward hook), for
the teacher-forced fallback. OUTDIR/references.safetensors holds the ids, tokens and logits, and the tied embedding
table is rebuilt by the test; OUTDIR/references.json the Qwen2 config, the parameters' names and shapes, every
state-dict name (llm.pt's keys) and the cases.
"""

from __future__ import annotations

import functools
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cosyvoice_weights import lm_state  # noqa: E402
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

QWEN = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
        "num_key_value_heads": 2, "max_position_embeddings": 32768, "rope_theta": 1000000.0, "rms_norm_eps": 1e-6,
        "vocab_size": 151936, "tie_word_embeddings": True, "use_sliding_window": False, "hidden_act": "silu",
        "torch_dtype": "float32"}
SPEECH_TOKENS = 6561
SEEDS = {"cv2": 1100, "cv3": 1200}
END_OF_PROMPT = 151646
# name -> (prompt text ids, text ids, prompt speech tokens, seed); CV3's prompt texts end with <|endofprompt|>
CASES = {
    "zero_shot": (5, 4, 8, 1),
    "zero_shot_seed2": (5, 4, 8, 2),
    "long_text": (3, 9, 6, 3),
    "no_prompt_speech": (4, 3, 0, 4),
    "no_prompt": (0, 4, 0, 5),
    "short_text": (3, 1, 4, 6),  # max_len 20: reached
}


def upstream(checkout: Path):
    sys.path.insert(0, str(checkout))
    from cosyvoice.llm.llm import CosyVoice3LM, Qwen2Encoder, Qwen2LM
    from cosyvoice.utils.common import ras_sampling

    return Qwen2Encoder, Qwen2LM, CosyVoice3LM, ras_sampling


def build(checkout: Path, folder: Path) -> dict:
    from transformers import Qwen2Config, Qwen2ForCausalLM

    encoder_class, cv2_class, cv3_class, ras_sampling = upstream(checkout)
    Qwen2ForCausalLM(Qwen2Config(**QWEN)).save_pretrained(folder)
    sampling = functools.partial(ras_sampling, top_p=0.8, top_k=25, win_size=10, tau_r=0.1)
    models = {}
    for name, cls in (("cv2", cv2_class), ("cv3", cv3_class)):
        model = cls(llm_input_size=64, llm_output_size=64, speech_token_size=SPEECH_TOKENS,
                    llm=encoder_class(str(folder)), sampling=sampling, length_normalized_loss=True, lsm_weight=0,
                    mix_ratio=[5, 15])
        entries = [(k, list(v.shape)) for k, v in model.named_parameters()]  # the tied head is one parameter
        with torch.no_grad():
            for key, value in lm_state(entries, SEEDS[name], SPEECH_TOKENS).items():
                model.get_parameter(key).copy_(value)
        models[name] = (model.eval(), entries)
    return models


def case_ids(g, version: str, prompt: int, text: int, speech: int) -> tuple:
    prompt_text = torch.randint(0, 151643, (1, prompt), generator=g, dtype=torch.int32)
    if version == "cv3":
        prompt_text = torch.cat([prompt_text, torch.tensor([[END_OF_PROMPT]], dtype=torch.int32)], dim=1)
    return (torch.randint(0, 151643, (1, text), generator=g, dtype=torch.int32), prompt_text,
            torch.randint(0, SPEECH_TOKENS, (1, speech), generator=g, dtype=torch.int32))


def outputs(checkout: Path) -> tuple[dict, dict]:
    with tempfile.TemporaryDirectory() as tmp:
        models = build(checkout, Path(tmp))
    g = torch.Generator().manual_seed(41)
    refs, cases = {}, {}
    info = {"qwen": QWEN, "speech_tokens": SPEECH_TOKENS, "seeds": SEEDS,
            "entries": {n: e for n, (_, e) in models.items()},
            "state_dict": {n: list(m.state_dict()) for n, (m, _) in models.items()}}
    for version, (model, _) in models.items():
        steps = []
        model.llm_decoder.register_forward_hook(
            lambda module, args, out, steps=steps: steps.append(out.detach().clone()))
        for case, (prompt, text, speech, seed) in CASES.items():
            key = f"{version}/{case}"
            text_ids, prompt_text, prompt_speech = case_ids(g, version, prompt, text, speech)
            steps.clear()
            torch.manual_seed(seed)
            tokens = list(model.inference(
                text=text_ids, text_len=torch.tensor([text_ids.shape[1]], dtype=torch.int32),
                prompt_text=prompt_text, prompt_text_len=torch.tensor([prompt_text.shape[1]], dtype=torch.int32),
                prompt_speech_token=prompt_speech,
                prompt_speech_token_len=torch.tensor([prompt_speech.shape[1]], dtype=torch.int32),
                embedding=torch.zeros(1, 0)))
            refs[f"{key}/text"], refs[f"{key}/prompt_text"], refs[f"{key}/prompt_speech"] = \
                text_ids, prompt_text, prompt_speech
            refs[f"{key}/tokens"] = torch.tensor(tokens, dtype=torch.int64)
            refs[f"{key}/logits"] = torch.cat(steps)
            cases[key] = {"seed": seed, "tokens": len(tokens), "steps": len(steps),
                          "max_len": text_ids.shape[1] * 20, "stopped": len(steps) > len(tokens)}
    info["cases"] = cases
    return {k: v.contiguous().clone() for k, v in refs.items()}, info


FLOATS = tuple(f"{v}/{c}/logits" for v in SEEDS for c in CASES)


def write(out: Path, checkout: Path) -> None:
    refs, info = outputs(checkout)
    write_checkout_tensors(out, refs, info, checkout,
                           "cosyvoice/llm/llm.py Qwen2LM/CosyVoice3LM.inference (inference_wrapper without vllm), "
                           "cosyvoice/utils/common.py ras_sampling",
                           ["torch", "transformers"], repository="FunAudioLLM/CosyVoice")


def spread(out: Path, checkout: Path) -> None:
    """Max |difference| of each output between the pinned run and runs with a pin lifted: OUTDIR/spread.json (steps
    where a lifted run drew other tokens compare other logits: only the common length is measured, tokens aside)."""
    with tempfile.TemporaryDirectory() as tmp:
        runs = lifted_runs(__file__, ["--checkout", checkout], tmp)
    pinned = runs.pop("pinned")

    def moved(r, k):
        n = min(len(r[k]), len(pinned[k]))
        return float((r[k][:n] - pinned[k][:n]).abs().max())

    report = {label: {k: moved(r, k) for k in FLOATS} for label, r in runs.items()}
    save_spread(out, report, FLOATS)


if __name__ == "__main__":
    checkout_writer_main(__doc__.split("\n\n")[0], write, spread, outputs)
