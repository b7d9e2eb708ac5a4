#!/usr/bin/env python
"""Reference outputs of CosyVoice 2's and CosyVoice 3's flows, written by upstream's own modules from a
FunAudioLLM/CosyVoice checkout with its third_party/Matcha-TTS submodule (GitHub only: tests/fallback.py compares on
a machine whose floats differ).

    python scripts/parity/cosyvoice_flow_references.py OUTDIR --checkout PATH            # the set
    python scripts/parity/cosyvoice_flow_references.py OUTDIR --checkout PATH --spread   # how far it moves

The interpreter: scripts/parity/cosyvoice_upstream_env.sh (diffusers 0.29.0 for Matcha's transformer block,
x-transformers 2.11.24 for the DiT's rotary embedding, conformer, omegaconf). matcha.utils' logger is the one
module stubbed (its package imports hydra and lightning for training); nothing it provides is computed.

Tiny models built as the released yamls build them (cosyvoice2.yaml / cosyvoice3.yaml), every parameter from
cosyvoice_weights.fill (nothing left at upstream's zero or xavier init):
- CosyVoice 2: CausalMaskedDiffWithXvec(512 -> 80) over UpsampleConformerEncoder(512, 2 heads, 64 units, 1 block;
  512 is hard-coded upstream in its look-ahead and upsampling layers) and CausalConditionalCFM over
  CausalConditionalDecoder(320 -> 80, channels [32], 2 heads of 16, 1 block, 2 mid blocks); chunks of 5 tokens
  (10 frames) so that streaming masks show in short inputs. A second decoder with channels [32, 32] (a down- and
  an up-sampling level) is compared on its own.
- CosyVoice 3: CausalMaskedDiffWithDiT(80 -> 80) over PreLookaheadLayer(80, 64) and CausalConditionalCFM over
  DiT(dim 64, depth 2, 2 heads of 32: the rotation of head 0 alone shows, ff_mult 2), chunks of 10 frames.
Recorded: each estimator's forward on a batch of two (as the solver calls it) with streaming off and on; CV2's
encoder alone (one row streaming off and on, with a look-ahead context, and a padded batch of two); CV3's
look-ahead layer with and without context; and each flow's `inference` offline (streaming off, finalize), as a
streaming chunk (streaming, not finalize: the last 3 tokens are look-ahead) and as a last streaming chunk. The
solver's noise is upstream's rand_noise (CausalConditionalCFM seeds the global generator with 0 at construction).
OUTDIR/references.safetensors holds the inputs and outputs; OUTDIR/references.json the configs, the parameters'
names and shapes (the tests rebuild them), every state-dict name of each flow (flow.pt's keys) and the cases.
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

CHUNK = 5  # tokens per streaming chunk (static_chunk_size); the decoders' is twice that in frames
ENCODER = {"input_size": 512, "output_size": 512, "attention_heads": 2, "linear_units": 64, "num_blocks": 1,
           "dropout_rate": 0.1, "positional_dropout_rate": 0.1, "attention_dropout_rate": 0.1,
           "normalize_before": True, "input_layer": "linear", "pos_enc_layer_type": "rel_pos_espnet",
           "selfattention_layer_type": "rel_selfattn", "use_cnn_module": False, "macaron_style": False,
           "static_chunk_size": CHUNK}
UNET = {"in_channels": 320, "out_channels": 80, "channels": [32], "dropout": 0.0, "attention_head_dim": 16,
        "n_blocks": 1, "num_mid_blocks": 2, "num_heads": 2, "act_fn": "gelu", "static_chunk_size": CHUNK * 2,
        "num_decoding_left_chunks": -1}
UNET_TWO_LEVELS = {**UNET, "channels": [32, 32]}
DIT = {"dim": 64, "depth": 2, "heads": 2, "dim_head": 32, "ff_mult": 2, "mel_dim": 80, "mu_dim": 80, "spk_dim": 80,
       "out_channels": 80, "static_chunk_size": CHUNK * 2, "num_decoding_left_chunks": -1}
LOOKAHEAD = {"in_channels": 80, "channels": 64, "pre_lookahead_len": 3}
CFM = {"in_channels": 240, "n_spks": 1, "spk_emb_dim": 80}
CFM_PARAMS = {"sigma_min": 1e-06, "solver": "euler", "t_scheduler": "cosine", "training_cfg_rate": 0.2,
              "inference_cfg_rate": 0.7, "reg_loss_type": "l1"}
FLOW = {"output_size": 80, "spk_embed_dim": 192, "output_type": "mel", "vocab_size": 6561, "input_frame_rate": 25,
        "only_mask_loss": True, "token_mel_ratio": 2, "pre_lookahead_len": 3}
SEEDS = {"cv2": 700, "cv3": 800, "unet2": 900}
FRAMES = 36  # the estimators' forward
# flow.inference: name -> (prompt tokens, tokens, prompt mel frames, streaming, finalize)
FLOW_CASES = {
    "offline": (6, 13, 12, False, True),
    "stream_chunk": (6, 13, 12, True, False),
    "stream_last": (6, 13, 12, True, True),
    "no_prompt": (0, 9, 0, False, True),
}


def upstream(checkout: Path):
    for path in (checkout / "third_party" / "Matcha-TTS", checkout):
        sys.path.insert(0, str(path))
    # matcha/utils/__init__.py imports hydra and lightning (training); flow_matching.py only wants its logger
    import logging

    pylogger = types.ModuleType("matcha.utils.pylogger")
    pylogger.get_pylogger = logging.getLogger
    utils = types.ModuleType("matcha.utils")
    utils.__path__ = []
    utils.pylogger = pylogger
    sys.modules.update({"matcha.utils": utils, "matcha.utils.pylogger": pylogger})
    from cosyvoice.flow import decoder, flow, flow_matching
    from cosyvoice.flow.DiT import dit
    from cosyvoice.transformer import upsample_encoder
    from omegaconf import DictConfig

    return types.SimpleNamespace(
        DictConfig=DictConfig, CausalConditionalDecoder=decoder.CausalConditionalDecoder, DiT=dit.DiT,
        CausalMaskedDiffWithDiT=flow.CausalMaskedDiffWithDiT, CausalMaskedDiffWithXvec=flow.CausalMaskedDiffWithXvec,
        CausalConditionalCFM=flow_matching.CausalConditionalCFM, PreLookaheadLayer=upsample_encoder.PreLookaheadLayer,
        UpsampleConformerEncoder=upsample_encoder.UpsampleConformerEncoder)


def seeded(model, seed: int):
    entries = [(k, list(v.shape)) for k, v in model.named_parameters()]
    with torch.no_grad():
        for name, value in state(entries, seed).items():
            model.get_parameter(name).copy_(value)
    return model.eval(), entries


def build(up):
    cfm = lambda estimator: up.CausalConditionalCFM(**CFM, cfm_params=up.DictConfig(CFM_PARAMS),  # noqa: E731
                                                    estimator=estimator)
    cv2 = up.CausalMaskedDiffWithXvec(input_size=512, **FLOW, encoder=up.UpsampleConformerEncoder(**ENCODER),
                                      decoder=cfm(up.CausalConditionalDecoder(**UNET)))
    cv3 = up.CausalMaskedDiffWithDiT(input_size=80, **FLOW, pre_lookahead_layer=up.PreLookaheadLayer(**LOOKAHEAD),
                                     decoder=cfm(up.DiT(**DIT)))
    unet2 = up.CausalConditionalDecoder(**UNET_TWO_LEVELS)
    return {name: seeded(model, SEEDS[name]) for name, model in (("cv2", cv2), ("cv3", cv3), ("unet2", unet2))}


def estimator_inputs(g, prefix: str, refs: dict) -> tuple:
    x = torch.randn(2, 80, FRAMES, generator=g)
    mask = torch.ones(2, 1, FRAMES)
    mu = torch.randn(2, 80, FRAMES, generator=g)
    mu[1] = 0  # the solver's unconditioned row
    t = torch.rand(2, generator=g)
    spks = torch.randn(2, 80, generator=g)
    spks[1] = 0
    cond = torch.zeros(2, 80, FRAMES)
    cond[0, :, :11] = torch.randn(80, 11, generator=g)
    for k, v in zip(("x", "mask", "mu", "t", "spks", "cond"), (x, mask, mu, t, spks, cond), strict=True):
        refs[f"{prefix}/{k}"] = v
    return x, mask, mu, t, spks, cond


def outputs(checkout: Path) -> tuple[dict, dict]:
    up = upstream(checkout)
    models = build(up)
    g = torch.Generator().manual_seed(31)
    refs, cases = {}, {}
    info = {"configs": {"encoder": ENCODER, "unet": UNET, "unet_two_levels": UNET_TWO_LEVELS, "dit": DIT,
                        "lookahead": LOOKAHEAD, "cfm": CFM, "cfm_params": CFM_PARAMS, "flow": FLOW},
            "seeds": SEEDS, "entries": {name: entries for name, (_, entries) in models.items()},
            "state_dict": {name: list(model.state_dict()) for name, (model, _) in models.items()},
            "buffers": {name: [k for k, _ in model.named_buffers()] for name, (model, _) in models.items()}}
    with torch.inference_mode():
        estimators = {"cv2": models["cv2"][0].decoder.estimator, "cv3": models["cv3"][0].decoder.estimator,
                      "unet2": models["unet2"][0]}
        for name, estimator in estimators.items():
            inputs = estimator_inputs(g, f"{name}/estimator", refs)
            for streaming in (False, True):
                refs[f"{name}/estimator/out_{'stream' if streaming else 'full'}"] = estimator(
                    *inputs, streaming=streaming)
        for name, (model, _) in models.items():
            for buffer, value in model.named_buffers():
                refs[f"{name}/buffer/{buffer}"] = value
        encoder = models["cv2"][0].encoder
        xs = torch.randn(1, 11, 512, generator=g)
        context = torch.randn(1, 3, 512, generator=g)
        refs["cv2/encoder/xs"], refs["cv2/encoder/context"] = xs, context
        refs["cv2/encoder/full"] = encoder(xs, torch.tensor([11]))[0]
        refs["cv2/encoder/stream"] = encoder(xs, torch.tensor([11]), streaming=True)[0]
        refs["cv2/encoder/context_stream"] = encoder(xs, torch.tensor([14]), context=context, streaming=True)[0]
        batch = torch.randn(2, 11, 512, generator=g)
        batch[1, 7:] = 0
        refs["cv2/encoder/batch_xs"] = batch
        refs["cv2/encoder/batch"], refs["cv2/encoder/batch_masks"] = encoder(batch, torch.tensor([11, 7]))
        refs["cv2/encoder/batch_masks"] = refs["cv2/encoder/batch_masks"].to(torch.uint8)
        lookahead = models["cv3"][0].pre_lookahead_layer
        tokens = torch.randn(1, 9, 80, generator=g)
        refs["cv3/lookahead/inputs"], refs["cv3/lookahead/context"] = tokens, torch.randn(1, 3, 80, generator=g)
        refs["cv3/lookahead/plain"] = lookahead(tokens)
        refs["cv3/lookahead/with_context"] = lookahead(tokens, context=refs["cv3/lookahead/context"])
        for version in ("cv2", "cv3"):
            flow = models[version][0]
            for case, (prompt, count, feat_frames, streaming, finalize) in FLOW_CASES.items():
                key = f"{version}/flow/{case}"
                refs[f"{key}/token"] = torch.randint(0, 6561, (1, count), generator=g, dtype=torch.int32)
                refs[f"{key}/prompt_token"] = torch.randint(0, 6561, (1, prompt), generator=g, dtype=torch.int32)
                refs[f"{key}/prompt_feat"] = torch.randn(1, feat_frames, 80, generator=g)
                refs[f"{key}/embedding"] = torch.randn(1, 192, generator=g)
                refs[f"{key}/mel"], _ = flow.inference(
                    refs[f"{key}/token"], torch.tensor([count], dtype=torch.int32), refs[f"{key}/prompt_token"],
                    torch.tensor([prompt], dtype=torch.int32), refs[f"{key}/prompt_feat"],
                    torch.tensor([feat_frames], dtype=torch.int32), refs[f"{key}/embedding"], streaming=streaming,
                    finalize=finalize)
                cases[key] = {"prompt_tokens": prompt, "tokens": count, "prompt_frames": feat_frames,
                              "streaming": streaming, "finalize": finalize}
    info["cases"] = cases
    return {k: v.contiguous().clone() for k, v in refs.items()}, info


FLOATS = (*(f"{n}/estimator/out_{m}" for n in SEEDS for m in ("full", "stream")),
          "cv2/encoder/full", "cv2/encoder/stream", "cv2/encoder/context_stream", "cv2/encoder/batch",
          "cv3/lookahead/plain", "cv3/lookahead/with_context",
          *(f"{v}/flow/{c}/mel" for v in ("cv2", "cv3") for c in FLOW_CASES))


def write(out: Path, checkout: Path) -> None:
    refs, info = outputs(checkout)
    matcha = checkout / "third_party" / "Matcha-TTS"
    from pinned import checkout_record

    info["matcha"] = {"repository": "shivammehta25/Matcha-TTS", **checkout_record(matcha)}
    write_checkout_tensors(out, refs, info, checkout,
                           "cosyvoice/flow/flow.py CausalMaskedDiffWithXvec/CausalMaskedDiffWithDiT.inference, "
                           "flow_matching.py CausalConditionalCFM, decoder.py CausalConditionalDecoder, DiT/dit.py "
                           "DiT, transformer/upsample_encoder.py UpsampleConformerEncoder and PreLookaheadLayer",
                           ["torch", "diffusers", "x-transformers", "einops", "omegaconf"],
                           repository="FunAudioLLM/CosyVoice")


def spread(out: Path, checkout: Path) -> None:
    """Max |difference| of each output between the pinned run and runs with a pin lifted: OUTDIR/spread.json."""
    with tempfile.TemporaryDirectory() as tmp:
        runs = lifted_runs(__file__, ["--checkout", checkout], tmp)
    pinned = runs.pop("pinned")
    report = {label: {k: float((r[k] - pinned[k]).abs().max()) for k in FLOATS} for label, r in runs.items()}
    save_spread(out, report, FLOATS)


if __name__ == "__main__":
    checkout_writer_main(__doc__.split("\n\n")[0], write, spread, outputs)
