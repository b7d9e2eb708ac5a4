#!/usr/bin/env python
"""Reference outputs of IndexTTS 2's MaskGCT semantic codec (RepCodec) and IndexTTS 2.5's EnhancedCodec, written by
upstream's own modules from an index-tts/index-tts checkout (GitHub only: tests/fallback.py compares on a machine
whose floats differ).

    python scripts/parity/indextts_codec_references.py OUTDIR --checkout PATH            # the set
    python scripts/parity/indextts_codec_references.py OUTDIR --checkout PATH --spread   # how far it moves

The interpreter: scripts/parity/indextts_upstream_env.sh (torch 2.13.0, einops, omegaconf, safetensors). Nothing is
stubbed: the codec's modules import torch, einops and numpy alone.

Tiny codecs built as infer_v2.py builds its codec (`indextts.codec.maskgct_codec.build_semantic_codec` on an
OmegaConf section shaped as config.yaml's `semantic_codec`: codebook_size 32, hidden_size 48, codebook_dim 8,
vocos_dim 16, vocos_intermediate_dim 32, vocos_num_layers 2), every parameter drawn from a seeded generator (nothing
left at upstream's zero biases, constant ConvNeXt gamma or LayerNorm ones/zeros), saved in the published layout
(safetensors with upstream's state-dict keys, the projections' weight_g / weight_v) and loaded back into a fresh
model with `safetensors.torch.load_model` (strict), as infer_v2.py loads amphion/MaskGCT's file:
- `repcodec`: the released layout (one quantizer); `repcodec.safetensors`;
- `rvq2`: the same with two quantizers (the residual path; num_quantizers is a config key); `rvq2.safetensors`;
- `enhanced`: infer_v2_5.py's EnhancedCodec (the same section, downsample_scale 2), saved as a codec.pth
  ({"model": state_dict}) and read back with upstream's `load_checkpoint`; `enhanced.pth`.
Recorded per feature tensor: quantize's codes and S_ref, and what localises a failure: the encoder's latents, the
first quantizer's projected latents z_e and its scores (-dist, latent2dist); vq2emb of quantize's codes as
infer_v2.py calls it (`vq2emb(codes.unsqueeze(1)).transpose(1, 2)`) and of random codes (every id hit), the
proper (N, B, T) form for a batch; the EnhancedCodec's decode of its codes and of random codes.
OUTDIR/references.safetensors holds the inputs and outputs; OUTDIR/references.json the configs, the files'
state-dict names and shapes, and the cases.
"""

from __future__ import annotations

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

SECTION = {"codebook_size": 32, "hidden_size": 48, "codebook_dim": 8, "vocos_dim": 16, "vocos_intermediate_dim": 32,
           "vocos_num_layers": 2}
CODECS = {  # name -> (extra config keys, seed, file)
    "repcodec": ({}, 1100, "repcodec.safetensors"),
    "rvq2": ({"num_quantizers": 2}, 1200, "rvq2.safetensors"),
    "enhanced": ({"downsample_scale": 2}, 1300, "enhanced.pth"),
}
FEATURES = {  # name -> (batch, frames); the EnhancedCodec's odd length gives ceil(T / 2) codes
    "repcodec": {"a": (1, 23), "b": (2, 9)},
    "rvq2": {"a": (1, 17), "b": (2, 6)},
    "enhanced": {"odd": (1, 11), "even": (2, 12)},
}
RANDOM_CODES = {"repcodec": (1, 40), "rvq2": (2, 2, 13), "enhanced": (1, 36)}
ABSENT = ("assets/IndexTTS2.mp4", "indextts/utils/maskgct/models/codec/facodec/modules/JDC/bst.t7")


def upstream(checkout: Path):
    sys.path.insert(0, str(checkout))
    import safetensors.torch
    from indextts.codec.maskgct_codec import build_semantic_codec
    from indextts.codec.models import EnhancedCodec
    from omegaconf import OmegaConf

    return build_semantic_codec, EnhancedCodec, OmegaConf, safetensors.torch


def randomised(model, seed: int):
    """Every parameter redrawn: weights ~ N(0, 1/fan_in), biases and LayerNorm shifts ~ 0.1 N, LayerNorm scales
    1 + 0.1 N, gamma 0.5 + 0.1 N, weight_g 1 + 0.2 |N|, codebooks N(0, 1)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            n = torch.randn(p.shape, generator=g)
            leaf = name.rsplit(".", 1)[-1]
            if leaf == "weight_g":
                value = 1 + 0.2 * n.abs()
            elif leaf == "gamma":
                value = 0.5 + 0.1 * n
            elif name.endswith("codebook.weight"):
                value = n
            elif leaf == "bias":
                value = 0.1 * n
            elif p.dim() == 1:  # LayerNorm weight
                value = 1 + 0.1 * n
            else:
                value = n / (p[0].numel() ** 0.5)
            p.copy_(value)
    return model.eval()


def outputs(checkout: Path, folder: Path | None = None) -> tuple[dict, dict]:
    build_semantic_codec, EnhancedCodec, OmegaConf, st = upstream(checkout)
    refs, info = {}, {"configs": {}, "files": {}, "state_dict": {}, "cases": {}}
    own = folder or Path(tempfile.mkdtemp())
    for name, (extra, seed, file) in CODECS.items():
        cfg = OmegaConf.create({**SECTION, **extra})
        info["configs"][name] = {**SECTION, **extra}
        info["files"][name] = file
        if name == "enhanced":
            made = randomised(EnhancedCodec(**cfg, cfg=cfg), seed)
            torch.save({"model": made.state_dict()}, own / file)
            model = EnhancedCodec(**cfg, cfg=cfg)
            model.load_checkpoint(str(own / file))
            model.eval()
        else:
            made = randomised(build_semantic_codec(cfg), seed)
            st.save_file({k: v.contiguous() for k, v in made.state_dict().items()}, str(own / file))
            model = build_semantic_codec(cfg)
            st.load_model(model, str(own / file))  # strict, as infer_v2.py
        assert all(torch.equal(a, b) for a, b in zip(made.state_dict().values(), model.state_dict().values(),
                                                         strict=True))
        info["state_dict"][name] = [[k, list(v.shape)] for k, v in model.state_dict().items()]
        g = torch.Generator().manual_seed(seed + 1)
        vq = model.quantizer
        with torch.no_grad():
            for case, (batch, frames) in FEATURES[name].items():
                key = f"{name}/{case}"
                x = torch.randn(batch, frames, SECTION["hidden_size"], generator=g)
                refs[f"{key}/features"] = x
                codes, s_ref = model.quantize(x)
                refs[f"{key}/codes"], refs[f"{key}/s_ref"] = codes, s_ref
                # the stages quantize runs, recomputed by upstream's own modules
                h = x
                if name == "enhanced":
                    h = torch.nn.functional.gelu(model.down(h.transpose(1, 2))).transpose(1, 2)
                latents = model.encoder(h.transpose(1, 2)).transpose(1, 2)
                refs[f"{key}/latents"] = latents
                z_e = vq.quantizers[0].in_project(latents)
                refs[f"{key}/z_e"] = z_e
                scores, indices, _ = vq.quantizers[0].latent2dist(z_e)
                refs[f"{key}/scores"] = scores
                assert torch.equal(indices, codes if codes.dim() == 2 else codes[0])
                grouped = codes if codes.dim() == 3 else codes.unsqueeze(0)
                refs[f"{key}/vq2emb"] = vq.vq2emb(grouped)  # (N, B, T) -> (B, hidden, T)
                if batch == 1 and name != "rvq2":  # infer_v2.py's call (row 0 only)
                    refs[f"{key}/embed"] = vq.vq2emb(codes.unsqueeze(1)).transpose(1, 2)
                if name == "enhanced":
                    refs[f"{key}/decode"] = model.decode(codes)
                info["cases"][key] = {"batch": batch, "frames": frames, "codes": list(codes.shape)}
            shape = RANDOM_CODES[name]
            size = SECTION["codebook_size"]
            codes = torch.randint(0, size, shape, generator=g)
            codes.view(-1)[:size] = torch.randperm(size, generator=g)  # every id once at least
            key = f"{name}/random"
            refs[f"{key}/codes"] = codes
            if name == "enhanced":
                refs[f"{key}/decode"] = model.decode(codes)
                refs[f"{key}/vq2emb"] = vq.vq2emb(codes.unsqueeze(0))
            elif name == "rvq2":
                refs[f"{key}/vq2emb"] = vq.vq2emb(codes)
            else:
                refs[f"{key}/embed"] = vq.vq2emb(codes.unsqueeze(1)).transpose(1, 2)
                refs[f"{key}/vq2emb"] = vq.vq2emb(codes.unsqueeze(0))
            info["cases"][key] = {"codes": list(codes.shape)}
    return {k: v.contiguous().clone() for k, v in refs.items()}, info


def floats(refs: dict) -> list[str]:
    return sorted(k for k, v in refs.items() if v.is_floating_point() and not k.endswith("/features"))


def write(out: Path, checkout: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    refs, info = outputs(checkout, out)
    absent = [p for p in ABSENT if not (checkout / p).exists()]
    info["checkout_note"] = (f"the checkout lacks {', '.join(absent)} (large binaries absent from the snapshot, "
                             "deleted in its work tree: hence modified); no code the codec runs is changed"
                             if absent else "")
    write_checkout_tensors(out, refs, info, checkout,
                           "indextts/codec/maskgct_codec.py build_semantic_codec -> "
                           "indextts/utils/maskgct/models/codec/kmeans/repcodec_model.py RepCodec.quantize, "
                           "kmeans/vocos.py VocosBackbone, amphion_codec/quantize/residual_vq.py ResidualVQ(.vq2emb), "
                           "factorized_vector_quantize.py "
                           "FactorizedVectorQuantize(.latent2dist); indextts/codec/models.py EnhancedCodec "
                           "(.quantize, .decode, .load_checkpoint); safetensors.torch.load_model",
                           ["torch", "einops", "omegaconf", "safetensors", "numpy"],
                           repository="index-tts/index-tts")


def spread(out: Path, checkout: Path) -> None:
    """Max |difference| of each output between the pinned run and runs with a pin lifted: OUTDIR/spread.json."""
    with tempfile.TemporaryDirectory() as tmp:
        runs = lifted_runs(__file__, ["--checkout", checkout], tmp)
    pinned = runs.pop("pinned")
    names = floats(pinned)
    report = {label: {k: float((r[k] - pinned[k]).abs().max()) for k in names} for label, r in runs.items()}
    for label, r in runs.items():  # codes are compared as integers
        report[label]["codes_differing"] = sum(int((r[k] != pinned[k]).sum()) for k in pinned if k.endswith("codes"))
    save_spread(out, report, [*names, "codes_differing"])


if __name__ == "__main__":
    checkout_writer_main(__doc__.split("\n\n")[0], write, spread, outputs)
