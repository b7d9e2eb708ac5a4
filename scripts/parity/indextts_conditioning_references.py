#!/usr/bin/env python
"""Reference outputs of IndexTTS 2's GPT conditioning (UnifiedVoice v2: the Conformer encoders, the Perceivers, the
emotion vector, merge_emovec and the prompt's speed rows), written by upstream's own modules from an
index-tts/index-tts checkout (GitHub only: tests/fallback.py compares on a machine whose floats differ).

    python scripts/parity/indextts_conditioning_references.py OUTDIR --checkout PATH            # the set
    python scripts/parity/indextts_conditioning_references.py OUTDIR --checkout PATH --spread   # how far it moves

The interpreter: scripts/parity/indextts_upstream_env.sh (torch 2.13.0, transformers 4.52.1 for model_v2's GPT2
imports, einops, torchaudio with its compiled libraries removed: utils/common.py imports it, only make_pad_mask is
used). One module is stubbed: indextts.utils.tokenizer (it imports openai-whisper and tiktoken for IndexTTS 2.5;
model_v2 wants only its LANGUAGE_DICT, read in the campplus mode, which is not built here).

A tiny UnifiedVoice(condition_type "conformer_perceiver", model_dim 64, 2 GPT layers of 2 heads; condition_module
output_size 64, linear_units 128, attention_heads 2, num_blocks 1, conv2d2, perceiver_mult 2; emo_condition_module
output_size 48, linear_units 96, 2 heads, 2 blocks, perceiver_mult 2), built as upstream's __init__ builds it, its
conditioning parameters (conditioning_encoder, perceiver_encoder, speed_emb, emo_conditioning_encoder,
emo_perceiver_encoder, emovec_layer, emo_layer) all filled by cosyvoice_weights.state (nothing left at upstream's zero
speed_emb, LayerNorm ones and zeros, RMSNorm ones or latents' small normal); a separate ConformerEncoder with
macaron_style=True (32 wide, 2 heads, 1 block). The features are 1024 wide (hard-coded upstream).
Recorded: each Conformer on one row with infer_v2's lengths (features.shape[-1] = 1024: every frame valid) and on a
padded batch of two (lengths 23 and 15); the speaker Perceiver alone with and without a key mask; get_conditioning
and get_emo_conditioning, get_emovec and merge_emovec at alpha 1.0, 0.6 and 0.0 as infer_v2 calls them; and
inference_speech's conds_latent (speaker latents + emotion vector, speed_emb(1), speed_emb(0)) with a given emotion
vector and with none (inference_speech computes it), taken where it reaches prepare_gpt_inputs. inference_speech is
called positionally as infer_v2 calls it, (spk_cond_emb, text_tokens, emo_cond_emb, ...): the emotion features land
in `langs` (unread outside the campplus mode), so with no emotion vector upstream takes the speaker's features.
OUTDIR/references.safetensors holds the inputs and outputs; OUTDIR/references.json the configs, the sha256 of each
Conformer's position table (the persistent buffer embed.pos_enc.pe), the parameters' names, shapes and seeds (the
tests rebuild them), every state-dict name and the checkout's local changes.
"""

from __future__ import annotations

import hashlib
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
MACARON = {"input_size": 1024, "output_size": 32, "attention_heads": 2, "linear_units": 64, "num_blocks": 1,
           "input_layer": "conv2d2", "macaron_style": True}
PREFIXES = ("conditioning_encoder", "perceiver_encoder", "speed_emb", "emo_conditioning_encoder",
            "emo_perceiver_encoder", "emo_layer", "emovec_layer")
SEEDS = {"gpt": 1100, "macaron": 1300}
FRAMES, PADDED, EMO_FRAMES = 23, 15, 31
ALPHAS = (1.0, 0.6, 0.0)
# large binary files of ee40fa7 absent from the snapshot this writer ran on; nothing here reads them
ABSENT = ("assets/IndexTTS2.mp4", "indextts/utils/maskgct/models/codec/facodec/modules/JDC/bst.t7")


def upstream(checkout: Path):
    sys.path.insert(0, str(checkout))
    tokenizer = types.ModuleType("indextts.utils.tokenizer")
    tokenizer.LANGUAGE_DICT = {}  # read only by spk_cond_mode "campplus" (IndexTTS 2.5)
    sys.modules["indextts.utils.tokenizer"] = tokenizer
    from indextts.gpt import conformer_encoder, model_v2

    return types.SimpleNamespace(UnifiedVoice=model_v2.UnifiedVoice,
                                 ConformerEncoder=conformer_encoder.ConformerEncoder)


def seeded(model, seed: int, prefixes=None):
    entries = [(k, list(v.shape)) for k, v in model.named_parameters()
               if prefixes is None or k.split(".")[0] in prefixes]
    with torch.no_grad():
        for name, value in state(entries, seed).items():
            model.get_parameter(name).copy_(value)
    return model.eval(), entries


class Reached(Exception):
    pass


def conds_latent(gpt, *args, **kwargs) -> torch.Tensor:
    """inference_speech's conds_latent, caught where it is handed to prepare_gpt_inputs."""
    def stop(conds, text_inputs, langs=None):
        raise Reached(conds)

    gpt.prepare_gpt_inputs = stop
    try:
        gpt.inference_speech(*args, **kwargs)
    except Reached as reached:
        return reached.args[0]
    finally:
        del gpt.prepare_gpt_inputs
    raise AssertionError("inference_speech did not reach prepare_gpt_inputs")


def outputs(checkout: Path) -> tuple[dict, dict]:
    up = upstream(checkout)
    torch.manual_seed(0)  # upstream's constructors draw from the global generator; every draw is overwritten
    gpt, entries = seeded(up.UnifiedVoice(**GPT, condition_module=CONDITION, emo_condition_module=EMO_CONDITION),
                          SEEDS["gpt"], PREFIXES)
    macaron, macaron_entries = seeded(up.ConformerEncoder(**MACARON), SEEDS["macaron"])
    g = torch.Generator().manual_seed(41)
    refs = {}
    info = {"configs": {"gpt": GPT, "condition_module": CONDITION, "emo_condition_module": EMO_CONDITION,
                        "macaron": MACARON},
            "seeds": SEEDS, "entries": {"gpt": entries, "macaron": macaron_entries},
            "state_dict": {"gpt": [k for k in gpt.state_dict() if k.split(".")[0] in PREFIXES],
                           "macaron": list(macaron.state_dict())},
            "frames": {"all": FRAMES, "padded": PADDED, "emotion": EMO_FRAMES}, "alphas": list(ALPHAS),
            "absent_from_checkout": list(ABSENT), "position_tables": {}}
    with torch.inference_mode():
        spk = torch.randn(1, FRAMES, 1024, generator=g)
        emo = torch.randn(1, EMO_FRAMES, 1024, generator=g)
        batch = torch.randn(2, FRAMES, 1024, generator=g)
        full = torch.tensor([spk.shape[-1]])  # infer_v2: cond_lengths = features.shape[-1] (1024)
        lengths = torch.tensor([FRAMES, PADDED])
        refs.update({"in/speaker": spk, "in/emotion": emo, "in/batch": batch, "in/batch_lengths": lengths})
        encoders = {"conformer": gpt.conditioning_encoder, "emo_conformer": gpt.emo_conditioning_encoder,
                    "macaron": macaron}
        for name, encoder in encoders.items():
            pe = encoder.embed.pos_enc.pe
            info["position_tables"][name] = {"shape": list(pe.shape),
                                             "sha256": hashlib.sha256(pe.contiguous().numpy().tobytes()).hexdigest()}
            refs[f"{name}/all"], mask = encoder(spk, full)
            refs[f"{name}/all_mask"] = mask.to(torch.uint8)
            refs[f"{name}/padded"], mask = encoder(batch, lengths)
            refs[f"{name}/padded_mask"] = mask.to(torch.uint8)
        context = torch.randn(2, 11, CONDITION["output_size"], generator=g)
        keys = torch.ones(2, 32 + 11, dtype=torch.bool)
        keys[1, 32 + 7:] = False
        refs.update({"in/perceiver_context": context, "in/perceiver_keys": keys.to(torch.uint8)})
        refs["perceiver/masked"] = gpt.perceiver_encoder(context, keys)
        refs["perceiver/unmasked"] = gpt.perceiver_encoder(context)
        refs["speaker/all"] = gpt.get_conditioning(spk.transpose(1, 2), full)
        refs["speaker/padded"] = gpt.get_conditioning(batch.transpose(1, 2), lengths)
        refs["emotion/all"] = gpt.get_emo_conditioning(emo.transpose(1, 2), torch.tensor([emo.shape[-1]]))
        refs["emotion/padded"] = gpt.get_emo_conditioning(batch.transpose(1, 2), lengths)
        refs["emovec/all"] = gpt.get_emovec(emo, torch.tensor([emo.shape[-1]]))
        for alpha in ALPHAS:
            refs[f"merge/{alpha}"] = gpt.merge_emovec(spk, emo, torch.tensor([spk.shape[-1]]),
                                                      torch.tensor([emo.shape[-1]]), alpha=alpha)
        text = torch.tensor([[5, 9, 13]], dtype=torch.int32)
        given = refs["merge/0.6"]
        refs["prefix/given"] = conds_latent(gpt, spk, text, emo, cond_lengths=torch.tensor([spk.shape[-1]]),
                                            emo_cond_lengths=torch.tensor([emo.shape[-1]]), emo_vec=given)
        refs["prefix/computed"] = conds_latent(gpt, spk, text, emo, cond_lengths=torch.tensor([spk.shape[-1]]),
                                               emo_cond_lengths=torch.tensor([emo.shape[-1]]))
    return {k: v.contiguous().clone() for k, v in refs.items()}, info


FLOATS = (*(f"{n}/{c}" for n in ("conformer", "emo_conformer", "macaron") for c in ("all", "padded")),
          "perceiver/masked", "perceiver/unmasked", "speaker/all", "speaker/padded", "emotion/all", "emotion/padded",
          "emovec/all", *(f"merge/{a}" for a in ALPHAS), "prefix/given", "prefix/computed")


def write(out: Path, checkout: Path) -> None:
    import subprocess

    refs, info = outputs(checkout)
    changes = subprocess.run(["git", "-C", str(checkout), "status", "--porcelain", "--untracked-files=no"],
                             capture_output=True, text=True, check=True).stdout.splitlines()
    info["checkout_changes"] = changes  # expected: the two absent binaries, deleted in the snapshot
    write_checkout_tensors(out, refs, info, checkout,
                           "indextts/gpt/model_v2.py UnifiedVoice (get_conditioning, get_emo_conditioning, "
                           "get_emovec, merge_emovec, inference_speech up to prepare_gpt_inputs), "
                           "gpt/conformer_encoder.py ConformerEncoder and gpt/conformer/*, gpt/perceiver.py "
                           "PerceiverResampler", ["torch", "transformers", "einops", "packaging"],
                           repository="index-tts/index-tts")


def spread(out: Path, checkout: Path) -> None:
    """Max |difference| of each output between the pinned run and runs with a pin lifted: OUTDIR/spread.json."""
    with tempfile.TemporaryDirectory() as tmp:
        runs = lifted_runs(__file__, ["--checkout", checkout], tmp)
    pinned = runs.pop("pinned")
    report = {label: {k: float((r[k] - pinned[k]).abs().max()) for k in FLOATS} for label, r in runs.items()}
    save_spread(out, report, FLOATS)


if __name__ == "__main__":
    checkout_writer_main(__doc__.split("\n\n")[0], write, spread, outputs)
