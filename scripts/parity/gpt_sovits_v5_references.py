#!/usr/bin/env python
"""Reference outputs of GPT-SoVITS v5's mel generator (v5dev, v5turbo), written by upstream's own
`module/v5_inference.py` (CFMV5.inference, synthesize_v5_mel) over its `f5_tts/model/backbones/dit.py` (the DiT with
use_step_embedding and the static cache), both from the cuda_graph_accel_v5 branch at commit
ac846f5bc7a0258423338b6122c574dd7ece9fc3, on the rest of an RVC-Boss/GPT-SoVITS checkout at 48b1a01.

    GPT_SOVITS_V5_FILES=DIR python scripts/parity/gpt_sovits_v5_references.py OUTDIR --checkout PATH  [--spread]

That branch is not in the git mirror this project reaches (main, fast_inference_ and revert-1660-main only); its
files are read one by one from the code-search index (read_file repo=RVC-Boss/GPT-SoVITS, path, commit=ac846f5...)
and saved byte for byte under DIR at their repository paths. The writer stages a copy of the checkout's
GPT_SoVITS/module and GPT_SoVITS/f5_tts with those two files in place (nothing else of the branch runs: modules.py
and commons.py, which they import, are 48b1a01's) and records each file's size, sha256 and git blob id, so that
a later reader of the real branch can check them; the checkout itself stays unmodified (its commit is recorded).
The interpreter: scripts/parity/gpt_sovits_upstream_env.sh.

One tiny DiT without a step embedding (SynthesizerTrnV3 builds DiT(dim=1024, depth=22, heads=16, ff_mult=2,
text_dim=512, conv_layers=4, use_step_embedding=False) for v5), filled by gpt_sovits_cfm_weights.cfm_state (nothing
at upstream's zero init), in CFMV5(100, dit). Recorded: the DiT's forward through the static cache with the
condition kept and dropped; synthesize_v5_mel after torch.manual_seed(seed) (the noise from the global generator)
for v5turbo's 4 steps without guidance, v5dev's guidance at 8 steps, the defaults resolved from the version (None,
None), and two rolling cases: a 520-frame reference (cut to its last 500, chunks of 500) over three chunks, and a
40-frame reference whose mel is longer than its features (chunks of 640, a prompt of 8 reference frames and the
previous chunk's last 32) over two; and TTS.py's resample(match_librosa=True) (resampy 0.4.3's kaiser_best, the v5
prompt's way to 16 kHz) of 3.3 s signals at six rates, one of them stereo. OUTDIR/references.safetensors holds the
inputs, upstream's inv_freq buffer and the outputs; OUTDIR/references.json the config, the parameters' names and
shapes, the cases and the v5 files.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import sys
import tempfile
from pathlib import Path
from types import SimpleNamespace

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gpt_sovits_cfm_weights import cfm_state  # noqa: E402
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

BRANCH_COMMIT = "ac846f5bc7a0258423338b6122c574dd7ece9fc3"  # cuda_graph_accel_v5, as the search index holds it
V5_FILES = ("GPT_SoVITS/module/v5_inference.py", "GPT_SoVITS/f5_tts/model/backbones/dit.py")
# TTS.py's resample(match_librosa=True) and its filter cache: the file's characters [1397, 4779) at the commit (the
# whole TTS.py imports the branch's tools.acceleration and tools.portable_runtime, which the index holds only at
# another commit, 25937fe); run with numpy as np, torch and resampy as TTS.py imports them
RESAMPLE_EXCERPT = "GPT_SoVITS/TTS_infer_pack/TTS.resample.py"
RESAMPLE_SPAN = (1397, 4779)
# (name, rate, channels): 3.3 s of a seeded sweep with noise at `rate` -> 16 kHz, the prompt's resampling
RESAMPLES = (("r32000", 32000, 1), ("r44100", 44100, 1), ("r48000_stereo", 48000, 2), ("r22050", 22050, 1),
             ("r24000", 24000, 1), ("r8000", 8000, 1))
FILES_VARIABLE = "GPT_SOVITS_V5_FILES"
CONFIG = {"dim": 64, "depth": 2, "heads": 4, "dim_head": 16, "ff_mult": 2, "text_dim": 32, "conv_layers": 2,
          "mel_dim": 100, "use_step_embedding": False}
SEED = 700
MELS = 100
FRAMES, PROMPT = 40, 12  # the DiT's forward: batch 2, the prompt's first PROMPT frames
# synthesize_v5_mel: name -> (version, reference mel frames, reference feature frames, target frames, steps, cfg,
# seed); None: the version's default (resolve_sampling)
CASES = {
    "turbo_4": ("v5turbo", 60, 60, 90, 4, 0.0, 1),
    "dev_cfg_8": ("v5dev", 50, 48, 70, 8, 1.3, 2),
    "defaults_turbo": ("v5turbo", 30, 30, 40, None, None, 3),
    "rolling_long_reference": ("v5dev", 520, 523, 1100, 4, 0.7, 4),
    "rolling_short_reference": ("v5turbo", 45, 40, 700, 16, 0.5, 5),
}


def files_folder() -> Path:
    folder = os.environ.get(FILES_VARIABLE)
    if not folder or not all((Path(folder) / name).is_file() for name in (*V5_FILES, RESAMPLE_EXCERPT)):
        raise SystemExit(f"set {FILES_VARIABLE} to a folder holding {', '.join(V5_FILES)} and {RESAMPLE_EXCERPT} as "
                         f"read at {BRANCH_COMMIT}")
    return Path(folder)


def file_record(path: Path) -> dict:
    data = path.read_bytes()
    return {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest(),
            "git_blob": hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()}


def staged(checkout: Path, v5: Path, into: Path) -> Path:
    """A folder with the checkout's GPT_SoVITS/module and f5_tts and the branch's two files over them."""
    for folder in ("module", "f5_tts"):
        shutil.copytree(checkout / "GPT_SoVITS" / folder, into / "GPT_SoVITS" / folder)
    for name in V5_FILES:
        shutil.copyfile(v5 / name, into / name)
    return into


def upstream(root: Path):
    sys.path.insert(0, str(root / "GPT_SoVITS"))  # dit.py imports module.commons
    sys.path.insert(0, str(root))  # and GPT_SoVITS.f5_tts.model.modules
    from f5_tts.model import DiT
    from module.v5_inference import CFMV5, synthesize_v5_mel

    return CFMV5, DiT, synthesize_v5_mel


def build(root: Path):
    cfm_class, dit_class, synthesize = upstream(root)
    model = cfm_class(MELS, dit_class(**CONFIG)).eval()
    assert model.estimator.d_embed is None and model.use_static_cache
    entries = [(k, list(v.shape)) for k, v in model.named_parameters()]
    with torch.no_grad():
        for name, value in cfm_state(entries, SEED).items():
            model.get_parameter(name).copy_(value)
    return model, entries, synthesize


def outputs(checkout: Path) -> tuple[dict, dict]:
    v5 = files_folder()
    with tempfile.TemporaryDirectory() as tmp:
        model, entries, synthesize = build(staged(checkout, v5, Path(tmp)))
        refs, info = run(model, entries, synthesize)
    refs.update(resampled(v5 / RESAMPLE_EXCERPT, info))
    info["v5_files"] = {"commit": BRANCH_COMMIT, "files": {name: file_record(v5 / name) for name in V5_FILES},
                        "excerpt": {"of": "GPT_SoVITS/TTS_infer_pack/TTS.py", "characters": list(RESAMPLE_SPAN),
                                    **file_record(v5 / RESAMPLE_EXCERPT)},
                        "source": "the code-search index's stored versions (read_file), joined byte for byte"}
    return refs, info


def resampled(excerpt: Path, info: dict) -> dict:
    """upstream's resample(audio, rate, 16000, "cpu", match_librosa=True) of each RESAMPLES signal."""
    import math

    import numpy as np
    import resampy

    namespace = {"np": np, "torch": torch}
    exec(compile(excerpt.read_text(), str(excerpt), "exec"), namespace)
    refs, info["resamples"] = {}, {}
    for name, rate, channels in RESAMPLES:
        g = torch.Generator().manual_seed(rate + channels)
        n = int(rate * 3.3) + 7
        t = torch.arange(n, dtype=torch.float64) / rate
        sweep = torch.sin(2 * math.pi * (100 * t + 0.5 * (rate / 2.2 - 100) / 3.3 * t ** 2))  # up to 0.45 x rate
        audio = (0.5 * sweep + 0.05 * torch.randn(channels, n, generator=g, dtype=torch.float64)).float()
        refs[f"resample/{name}/input"] = audio
        refs[f"resample/{name}/output"] = namespace["resample"](audio, rate, 16000, "cpu", match_librosa=True)
        info["resamples"][name] = {"rate": rate, "channels": channels, "samples": n}
    info["resampy"] = resampy.__version__
    return refs


def run(model, entries, synthesize) -> tuple[dict, dict]:
    g = torch.Generator().manual_seed(71)
    text_dim = CONFIG["text_dim"]
    refs = {"inv_freq": model.estimator.rotary_embed.inv_freq.clone()}
    info = {"config": CONFIG, "seed": SEED, "entries": entries, "state_dict": list(model.state_dict()), "cases": {}}
    x = refs["forward/x"] = torch.randn(2, MELS, FRAMES, generator=g)
    cond = torch.zeros(2, MELS, FRAMES)
    cond[..., :PROMPT] = torch.randn(2, MELS, PROMPT, generator=g)
    refs["forward/cond"] = cond
    text = refs["forward/text"] = torch.randn(2, text_dim, FRAMES, generator=g)
    time = refs["forward/time"] = torch.rand(2, generator=g)
    lengths = torch.LongTensor([FRAMES, FRAMES])
    with torch.inference_mode():
        cache = model.estimator.prepare_static_cache(cond, lengths, text)
        for name, dropped in (("static", False), ("static_dropped", True)):
            refs[f"forward/{name}"] = model.estimator(x, cond, lengths, time, None, text, drop_audio_cond=dropped,
                                                      static_cache=cache, infer=True)[0]
        for name, (version, mel_frames, fea_frames, target, steps, cfg, seed) in CASES.items():
            refs[f"{name}/reference_mel"] = torch.randn(1, MELS, mel_frames, generator=g) * 0.5
            refs[f"{name}/reference_features"] = torch.randn(1, text_dim, fea_frames, generator=g)
            refs[f"{name}/target_features"] = torch.randn(1, text_dim, target, generator=g)
            torch.manual_seed(seed)
            refs[f"{name}/mel"] = synthesize(SimpleNamespace(version=version, cfm=model),
                                             refs[f"{name}/reference_features"], refs[f"{name}/target_features"],
                                             refs[f"{name}/reference_mel"], steps, cfg)
            info["cases"][name] = {"version": version, "reference_mel": mel_frames, "reference_features": fea_frames,
                                   "target": target, "sample_steps": steps, "cfg_rate": cfg, "seed": seed}
    return {k: v.contiguous().clone() for k, v in refs.items()}, info


FLOATS = ("forward/static", "forward/static_dropped", *(f"{name}/mel" for name in CASES),
          *(f"resample/{r[0]}/output" for r in RESAMPLES))


def write(out: Path, checkout: Path) -> None:
    refs, info = outputs(checkout)
    write_checkout_tensors(out, refs, info, checkout,
                           f"module/v5_inference.py synthesize_v5_mel and CFMV5.inference, f5_tts/model/backbones/"
                           f"dit.py DiT (static cache) at {BRANCH_COMMIT[:7]}, over 48b1a01's f5_tts modules",
                           ["torch", "einops", "x-transformers", "resampy", "numpy"])


def spread(out: Path, checkout: Path) -> None:
    """Max |difference| of each output between the pinned run and runs with a pin lifted: OUTDIR/spread.json."""
    with tempfile.TemporaryDirectory() as tmp:
        runs = lifted_runs(__file__, ["--checkout", checkout], tmp)
    pinned = runs.pop("pinned")
    report = {label: {k: float((r[k] - pinned[k]).abs().max()) for k in FLOATS} for label, r in runs.items()}
    save_spread(out, report, FLOATS)


if __name__ == "__main__":
    checkout_writer_main(__doc__.split("\n\n")[0], write, spread, outputs)
