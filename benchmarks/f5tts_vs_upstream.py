"""F5-TTS speed: Mizuoto vs upstream f5-tts 1.1.22 (+ vocos 0.1.0) on the same random weights, reference
and text, in one run; the waveforms must be identical first. Then, optionally, the `fast` attention
policy and torch.compile on our side: their speed-up and their largest sample difference.

Runs in a venv holding upstream (scripts/parity/f5tts_upstream_env.sh) with this clone on sys.path:
    .venv-f5tts-upstream/bin/python benchmarks/f5tts_vs_upstream.py [--size tiny|full] [--nfe 32]
        [--seconds 4] [--threads N] [--fast] [--compile]

`full` is F5TTS_v1_Base's architecture (1024 wide, 22 layers) and the released Vocos (512, 8 layers).
Real-time factor (RTF) = seconds of computing per second of generated audio; lower is faster.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import numpy as np  # noqa: E402
import torch  # noqa: E402

SIZES = {
    "tiny": (dict(dim=64, depth=2, heads=4, dim_head=16, ff_mult=2, text_dim=32, conv_layers=2), (64, 128, 2)),
    "full": (dict(dim=1024, depth=22, heads=16, dim_head=64, ff_mult=2, text_dim=512, conv_layers=4), (512, 1536, 8)),
}
REF_TEXT = "Some call me nature, others call me mother nature. "
GEN_TEXT = "I don't really care what you call me. I've been a silent spectator, watching species evolve."


def build(size: str, folder: Path):
    """Random upstream models (zero-initialised layers re-randomised) saved in the published layouts."""
    from importlib.resources import files

    import yaml
    from f5_tts.model import CFM, DiT
    from f5_tts.model.utils import get_tokenizer
    from safetensors.torch import save_file
    from vocos import Vocos
    from vocos.feature_extractors import MelSpectrogramFeatures
    from vocos.heads import ISTFTHead
    from vocos.models import VocosBackbone

    arch, (v_dim, v_inter, v_layers) = SIZES[size]
    arch = dict(arch, text_mask_padding=True, pe_attn_head=None, attn_backend="torch", attn_mask_enabled=False)
    vocab, n_vocab = get_tokenizer(str(files("f5_tts").joinpath("infer/examples/vocab.txt")), "custom")
    torch.manual_seed(0)
    cfm = CFM(transformer=DiT(**arch, text_num_embeds=n_vocab, mel_dim=100),
              mel_spec_kwargs=dict(n_fft=1024, hop_length=256, win_length=1024, n_mel_channels=100,
                                   target_sample_rate=24000, mel_spec_type="vocos"),
              odeint_kwargs=dict(method="euler"), vocab_char_map=vocab).eval()
    with torch.no_grad():
        for name, p in cfm.named_parameters():
            if ".attn_norm.linear." in name or "norm_out.linear." in name or "proj_out." in name:
                p.copy_(torch.randn_like(p) * 0.02)
            elif ".grn." in name:
                p.copy_(torch.randn_like(p) * 0.1)
    folder.mkdir(parents=True, exist_ok=True)
    save_file({"ema_model." + k: v.contiguous() for k, v in cfm.state_dict().items()},
              str(folder / "model.safetensors"))
    (folder / "F5TTS_bench.yaml").write_text(yaml.safe_dump({"model": {"backbone": "DiT", "arch": arch}}))
    vocos = Vocos(MelSpectrogramFeatures(24000, 1024, 256, 100, "center"), VocosBackbone(100, v_dim, v_inter, v_layers),
                  ISTFTHead(v_dim, 1024, 256, "center")).eval()
    (folder / "vocos").mkdir(exist_ok=True)
    (folder / "vocos" / "config.yaml").write_text(yaml.safe_dump({
        "feature_extractor": {"class_path": "vocos.feature_extractors.MelSpectrogramFeatures",
                              "init_args": {"sample_rate": 24000, "n_fft": 1024, "hop_length": 256, "n_mels": 100,
                                            "padding": "center"}},
        "backbone": {"class_path": "vocos.models.VocosBackbone",
                     "init_args": {"input_channels": 100, "dim": v_dim, "intermediate_dim": v_inter,
                                   "num_layers": v_layers}},
        "head": {"class_path": "vocos.heads.ISTFTHead",
                 "init_args": {"dim": v_dim, "n_fft": 1024, "hop_length": 256, "padding": "center"}}}))
    torch.save(vocos.state_dict(), folder / "vocos" / "pytorch_model.bin")
    return arch


def reference(seconds: float) -> torch.Tensor:
    g = torch.Generator().manual_seed(11)
    t = torch.arange(int(seconds * 24000)) / 24000
    wave = torch.sin(2 * torch.pi * (150 + 400 * t) * t) * (0.6 + 0.4 * torch.sin(2 * torch.pi * 3 * t))
    return (0.05 * (wave + 0.3 * torch.randn(t.shape, generator=g))).to(torch.float32)[None]


def upstream_run(folder: Path, arch: dict, ref: torch.Tensor, nfe: int, seed: int):
    import f5_tts.infer.utils_infer as UI
    from f5_tts.model import DiT
    from f5_tts.model.utils import seed_everything

    with contextlib.redirect_stdout(io.StringIO()):
        model = UI.load_model(DiT, dict(arch), str(folder / "model.safetensors"), mel_spec_type="vocos", device="cpu")
        vocoder = UI.load_vocoder("vocos", is_local=True, local_path=str(folder / "vocos"), device="cpu")

    def run():
        seed_everything(seed)
        batches = UI.chunk_text(GEN_TEXT, max_chars=10_000)
        wave, _, _ = next(UI.infer_batch_process((ref.clone(), 24000), REF_TEXT, batches, model, vocoder,
                                                 progress=None, device="cpu", nfe_step=nfe))
        return torch.from_numpy(np.asarray(wave, dtype=np.float32))

    return run


def ours_run(folder: Path, ref: torch.Tensor, nfe: int, seed: int, policy: str | None, compile_: bool):
    from mizuoto.host import load_model, speak

    overrides = {"compute.compile": compile_}
    loaded = load_model("f5tts", folder, device="cpu", policy=policy, overrides=overrides)

    def run():
        return speak(loaded, GEN_TEXT, seed=seed, reference=(ref[0], 24000), reference_text=REF_TEXT,
                     params={"nfe_step": nfe, "trim_reference": False}).waveform[0]  # as infer_batch_process

    return run


def timed(fn, repeats: int):
    times, out = [], None
    for _ in range(repeats):
        start = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - start)
    return min(times), out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", choices=sorted(SIZES), default="tiny")
    parser.add_argument("--nfe", type=int, default=32)
    parser.add_argument("--seconds", type=float, default=4.0, help="reference length")
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--fast", action="store_true", help="also time our `fast` attention policy")
    parser.add_argument("--compile", action="store_true", help="also time our torch.compile (after a warm-up)")
    opts = parser.parse_args()
    if opts.threads:
        torch.set_num_threads(opts.threads)
    ref = reference(opts.seconds)
    report = {"size": opts.size, "nfe_step": opts.nfe, "threads": torch.get_num_threads(),
              "reference_seconds": opts.seconds}
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "model"
        arch = build(opts.size, folder)
        theirs = upstream_run(folder, arch, ref, opts.nfe, seed=7)
        ours = ours_run(folder, ref, opts.nfe, 7, None, False)
        ours()  # first call: lazy tables, allocator warm-up (upstream's warm-up below)
        theirs()
        t_theirs, wave_theirs = timed(theirs, opts.repeats)
        t_ours, wave_ours = timed(ours, opts.repeats)
        seconds = wave_theirs.shape[-1] / 24000
        report.update(audio_seconds=round(seconds, 3), identical=bool(torch.equal(wave_ours, wave_theirs)),
                      rtf={"upstream": round(t_theirs / seconds, 4), "mizuoto": round(t_ours / seconds, 4)},
                      speedup=round(t_theirs / t_ours, 3))
        variants = []
        if opts.fast:
            variants.append(("fast", "fast", False))
        if opts.compile:
            variants.append(("compile", None, True))
        if opts.fast and opts.compile:
            variants.append(("fast+compile", "fast", True))
        for name, policy, compile_ in variants:
            run = ours_run(folder, ref, opts.nfe, 7, policy, compile_)
            start = time.perf_counter()
            run()  # compiles, when compiling
            warm = time.perf_counter() - start
            t, wave = timed(run, opts.repeats)
            report[name] = {"rtf": round(t / seconds, 4), "speedup_vs_exact": round(t_ours / t, 3),
                            "first_call_seconds": round(warm, 2),
                            "max_abs_difference": float((wave - wave_ours).abs().max())}
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
