#!/usr/bin/env python
"""Reference outputs of IndexTTS 2's GPT (UnifiedVoice v2 over transformers 4.52.1's GPT2Model: the latents forward,
prepare_gpt_inputs and GPT2InferenceModel's KV-cache decode with beam reorders), written by upstream's own modules
from an index-tts/index-tts checkout (GitHub only: tests/fallback.py compares on a machine whose floats differ).

    python scripts/parity/indextts_gpt_references.py OUTDIR --checkout PATH            # the set
    python scripts/parity/indextts_gpt_references.py OUTDIR --checkout PATH --spread   # how far it moves

The interpreter: scripts/parity/indextts_upstream_env.sh (torch 2.13.0, transformers 4.52.1, einops, torchaudio
with its compiled libraries removed). indextts.utils.tokenizer is stubbed as in indextts_conditioning_references.py.

A tiny UnifiedVoice (the conditioning set's configuration: model_dim 64, 2 GPT layers of 2 heads, max_text_tokens
40, max_mel_tokens 60, 100 text tokens, 66 mel codes with start/stop 64/65, conformer_perceiver), every parameter
filled by cosyvoice_weights.state (nothing left at upstream's zero speed_emb, LayerNorm ones or zero biases), then
post_init_gpt2_config(kv_cache=True) as infer_v2 calls it. Recorded:
- latents: UnifiedVoice.forward as infer_v2 calls it (speaker latents, int32 text, text_len, codes, code_len, the
  emotion features, cond lengths, emo_vec given, use_speed zeros) on one row and on a batch of two whose second row
  is shorter (text 5 of 7, codes 6 of 9: set_text_padding / set_mel_padding write stop tokens there);
- prompt: prepare_gpt_inputs' embeddings and attention mask for one text and for a left-padded batch of two (the
  second text carries stop tokens, which prepare_gpt_inputs drops: 3 real tokens, 4 rows of padding);
- decode: GPT2InferenceModel (kv_cache=True) driven as the vendored generate's beam search drives it:
  prepare_inputs_for_generation, forward, the attention mask grown by a 1 per step and _temporary_reorder_cache
  (DynamicCache.reorder_cache) with the recorded beam indices; the logits (rows, V) of the prefill and of every
  step, teacher-forced. "beams": one text, 3 identical rows (num_beams 3), 5 steps, reorders [2, 0, 0] and
  [1, 2, 0] after the rows have diverged; "padded": the left-padded batch of two x 2 beams (4 rows), 3 steps, a
  reorder [1, 0, 3, 2].
OUTDIR/references.safetensors holds the inputs and outputs; OUTDIR/references.json the configs, the parameters'
names, shapes and seed (the tests rebuild them), upstream's state-dict names before and after post_init_gpt2_config,
the decode scripts (tokens and beam indices per step) and the checkout's local changes.
"""

from __future__ import annotations

import sys
import tempfile
import types
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cosyvoice_weights import state  # noqa: E402
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

CONDITION = {"output_size": 64, "linear_units": 128, "attention_heads": 2, "num_blocks": 1, "input_layer": "conv2d2",
             "perceiver_mult": 2}
EMO_CONDITION = {"output_size": 48, "linear_units": 96, "attention_heads": 2, "num_blocks": 2,
                 "input_layer": "conv2d2", "perceiver_mult": 2}
GPT = {"layers": 2, "model_dim": 64, "heads": 2, "max_text_tokens": 40, "max_mel_tokens": 60,
       "number_text_tokens": 100, "number_mel_codes": 66, "start_mel_token": 64, "stop_mel_token": 65,
       "condition_type": "conformer_perceiver"}
SEED = 1500
TEXT = [5, 9, 13, 22, 7, 41, 3]
PADDED_TEXT = [[5, 9, 13, 22, 7, 41, 3], [8, 30, 11, 1, 1, 1, 1]]
CODES = [[3, 17, 40, 9, 22, 5, 61, 0, 33], [12, 4, 50, 28, 7, 19, 44, 2, 8]]
LENGTHS = {"text": [7, 5], "codes": [9, 6]}
# teacher-forced decodes: per step the tokens fed (one per row) and the beam indices applied before the step
DECODES = {
    "beams": {"text": [TEXT], "beams": 3, "steps": [
        {"tokens": [5, 17, 30], "beam_idx": None},
        {"tokens": [9, 9, 41], "beam_idx": [2, 0, 0]},
        {"tokens": [12, 3, 60], "beam_idx": [1, 2, 0]},
        {"tokens": [65, 8, 8], "beam_idx": None},
        {"tokens": [1, 2, 3], "beam_idx": [0, 0, 1]},
    ]},
    "padded": {"text": PADDED_TEXT, "beams": 2, "steps": [
        {"tokens": [5, 6, 7, 8], "beam_idx": None},
        {"tokens": [11, 12, 13, 14], "beam_idx": [1, 0, 3, 2]},
        {"tokens": [20, 21, 22, 23], "beam_idx": None},
    ]},
}
# large binary files of ee40fa7 absent from the snapshot this writer ran on; nothing here reads them
ABSENT = ("assets/IndexTTS2.mp4", "indextts/utils/maskgct/models/codec/facodec/modules/JDC/bst.t7")


def upstream(checkout: Path):
    sys.path.insert(0, str(checkout))
    tokenizer = types.ModuleType("indextts.utils.tokenizer")
    tokenizer.LANGUAGE_DICT = {}  # read only by spk_cond_mode "campplus" (IndexTTS 2.5)
    sys.modules["indextts.utils.tokenizer"] = tokenizer
    from indextts.gpt import model_v2

    return model_v2


def decode(gpt, conds: torch.Tensor, text: list, beams: int, steps: list) -> tuple[dict, dict]:
    """GPT2InferenceModel's calls as the vendored _beam_search makes them, teacher-forced: -> ({name: logits},
    {name: inputs})."""
    model = gpt.inference_model
    input_ids, embeds, mask = gpt.prepare_gpt_inputs(conds, torch.tensor(text, dtype=torch.int32))
    model.store_mel_emb(embeds)
    input_ids, mask = input_ids.repeat_interleave(beams, 0), mask.repeat_interleave(beams, 0)  # generate's expansion
    out, inputs = {}, {"prompt": embeds, "mask": mask}
    past = None
    for i in range(len(steps) + 1):
        kwargs = model.prepare_inputs_for_generation(input_ids, past_key_values=past, attention_mask=mask,
                                                     use_cache=True)
        result = model(**kwargs, return_dict=True)
        out[f"step{i}"] = result.logits[:, -1, :].clone()
        past = result.past_key_values
        if i == len(steps):
            break
        step = steps[i]
        if step["beam_idx"] is not None:
            beam_idx = torch.tensor(step["beam_idx"])
            input_ids = input_ids[beam_idx, :]
            past = model._temporary_reorder_cache(past, beam_idx)
        input_ids = torch.cat([input_ids, torch.tensor(step["tokens"])[:, None]], dim=-1)
        mask = torch.cat([mask, mask.new_ones((mask.shape[0], 1))], dim=-1)
    return out, inputs


def outputs(checkout: Path) -> tuple[dict, dict]:
    model_v2 = upstream(checkout)
    torch.manual_seed(0)  # upstream's constructors draw from the global generator; every draw is overwritten
    gpt = model_v2.UnifiedVoice(**GPT, condition_module=CONDITION, emo_condition_module=EMO_CONDITION)
    entries = [(k, list(v.shape)) for k, v in gpt.named_parameters()]
    with torch.no_grad():
        for name, value in state(entries, SEED).items():
            gpt.get_parameter(name).copy_(value)
    before = list(gpt.state_dict())
    gpt.post_init_gpt2_config(use_deepspeed=False, kv_cache=True, half=False)
    gpt.eval()
    after = list(gpt.state_dict())
    info = {"configs": {"gpt": GPT, "condition_module": CONDITION, "emo_condition_module": EMO_CONDITION},
            "seed": SEED, "entries": entries, "state_dict": {"unified_voice": before, "after_post_init": after},
            "attn_implementation": gpt.gpt.config._attn_implementation,
            "activation_function": gpt.gpt.config.activation_function,
            "lengths": LENGTHS, "decodes": DECODES, "absent_from_checkout": list(ABSENT)}
    g = torch.Generator().manual_seed(43)
    dim = GPT["model_dim"]
    refs = {}
    with torch.inference_mode():
        speaker = torch.randn(2, 32, dim, generator=g)
        emovec = torch.randn(2, dim, generator=g)
        emo_features = torch.randn(2, 13, 1024, generator=g)  # unread: emo_vec is given, as infer_v2 gives it
        refs.update({"in/speaker": speaker, "in/emovec": emovec})
        text = torch.tensor([TEXT, TEXT[::-1]], dtype=torch.int32)
        codes = torch.tensor(CODES)
        refs.update({"in/text": text, "in/codes": codes})
        # infer_v2: text_len = text_tokens.shape[-1], code_len = codes.shape[-1], cond lengths = features' width
        refs["latents/one"] = gpt(speaker[:1], text[:1].clone(), torch.tensor([text.shape[-1]]), codes[:1].clone(),
                                  torch.tensor([codes.shape[-1]]), emo_features[:1],
                                  cond_mel_lengths=torch.tensor([1024]), emo_cond_mel_lengths=torch.tensor([1024]),
                                  emo_vec=emovec[:1], use_speed=torch.zeros(1).long())
        refs["latents/padded"] = gpt(speaker, text.clone(), torch.tensor(LENGTHS["text"]), codes.clone(),
                                     torch.tensor(LENGTHS["codes"]), emo_features,
                                     cond_mel_lengths=torch.tensor([1024, 1024]),
                                     emo_cond_mel_lengths=torch.tensor([1024, 1024]), emo_vec=emovec,
                                     use_speed=torch.zeros(2).long())
        conds = torch.randn(1, 34, dim, generator=g)  # inference_speech's conds_latent (conditioning set)
        refs["in/conds"] = conds
        for name, d in DECODES.items():
            logits, inputs = decode(gpt, conds, d["text"], d["beams"], d["steps"])
            refs[f"prompt/{name}/embeds"] = inputs["prompt"]
            refs[f"prompt/{name}/mask"] = inputs["mask"][::d["beams"]]
            refs.update({f"decode/{name}/{k}": v for k, v in logits.items()})
        pair = torch.randn(2, 34, dim, generator=g)  # one conditioning per text row
        refs["in/conds_pair"] = pair
        _, embeds, mask = gpt.prepare_gpt_inputs(pair, torch.tensor(PADDED_TEXT, dtype=torch.int32))
        refs["prompt/pair/embeds"], refs["prompt/pair/mask"] = embeds, mask
    return {k: v.contiguous().clone() for k, v in refs.items()}, info


def floats(refs: dict) -> list:
    return sorted(k for k in refs if not k.startswith("in/") and not k.endswith("/mask"))


def write(out: Path, checkout: Path) -> None:
    import subprocess

    refs, info = outputs(checkout)
    changes = subprocess.run(["git", "-C", str(checkout), "status", "--porcelain", "--untracked-files=no"],
                             capture_output=True, text=True, check=True).stdout.splitlines()
    info["checkout_changes"] = changes  # expected: the two absent binaries, deleted in the snapshot
    write_checkout_tensors(out, refs, info, checkout,
                           "indextts/gpt/model_v2.py UnifiedVoice (forward, prepare_gpt_inputs, "
                           "post_init_gpt2_config), GPT2InferenceModel (prepare_inputs_for_generation, forward, "
                           "the vendored generation utils' _temporary_reorder_cache) over transformers' GPT2Model",
                           ["torch", "transformers", "einops", "packaging"], repository="index-tts/index-tts")


def spread(out: Path, checkout: Path) -> None:
    """Max |difference| of each output between the pinned run and runs with a pin lifted: OUTDIR/spread.json."""
    with tempfile.TemporaryDirectory() as tmp:
        runs = lifted_runs(__file__, ["--checkout", checkout], tmp)
    pinned = runs.pop("pinned")
    names = floats(pinned)
    report = {label: {k: float((r[k] - pinned[k]).abs().max()) for k in names} for label, r in runs.items()}
    save_spread(out, report, names)


if __name__ == "__main__":
    checkout_writer_main(__doc__.split("\n\n")[0], write, spread, outputs)
