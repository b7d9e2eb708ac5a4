"""CosyVoice 2's and 3's HiFT under compute.compile on the CPU: how far the compiled vocoder's audio is from the
eager one, and how much faster it is, at the released sizes (cosyvoice2.yaml / cosyvoice3.yaml's `hift:`) with
random weights.

    .venv/bin/python benchmarks/cosyvoice_hift_compile.py --yamls CHECKOUT/examples/libritts [--seconds 4]
        [--threads 2] [--repeats 3] [--json OUT]

compute.compile compiles HiFT's decode alone (mizuoto.nn.hift.compile_decode: the convolution stack and the inverse
STFT); the F0 predictor and the source stay eager. Measured here, for each version, on one random mel of
`--seconds` of audio:
  - decode distance: max |compiled - eager| of the wave, from the same mel and source;
  - whole distance: the same through `inference` (F0 and source eager, then the compiled decode), and for contrast
    what compiling the whole HiFT (F0 predictor and source included) gives;
  - time: eager and compiled `inference`, the best of `--repeats` after a warm-up, and their ratio.
Each side is given the same mel; CosyVoice 2's draws come from generators seeded alike. The compile happens at the
warm-up (Inductor, a C++ compiler needed; tens of seconds a version on two cores).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from mizuoto.engines.cosyvoice import hyperyaml  # noqa: E402
from mizuoto.nn import hift, hift_causal  # noqa: E402
from mizuoto.runtime.compile import Compiled  # noqa: E402

FRAMES_PER_SECOND = 50  # 24000 Hz / 480 samples a mel frame
FLOW_SIZES = {"vocab_size": 6561, "input_size": 80, "spk_embed_dim": 192, "output_size": 80}  # cosyvoice3.yaml


def section(yamls: Path, version: int) -> dict:
    doc = hyperyaml.load((yamls / f"cosyvoice{version}" / "conf" / f"cosyvoice{version}.yaml").read_text())
    fields = dict(doc["hift"].fields)
    fields["f0_predictor"] = dict(fields["f0_predictor"].fields)
    return fields


def random_hift(yamls: Path, version: int) -> torch.nn.Module:
    """The released architecture with N(0, 0.02) weights: a mel then gives a voiced f0 and a bounded wave."""
    fields = section(yamls, version)
    if version == 2:
        model = hift.HiFTGenerator(hift.HiFTConfig.from_cosyvoice(fields))
    else:
        config = hift_causal.CausalHiFTConfig.from_cosyvoice(fields)
        model = hift_causal.CausalHiFTGenerator(config, noise=hift_causal.cosyvoice3_noise(config, FLOW_SIZES))
    generator = torch.Generator().manual_seed(version)
    with torch.no_grad():
        for name, param in model.named_parameters():
            param.copy_(torch.randn(param.shape, generator=generator) * 0.02 + (1.0 if name.endswith("alpha") else 0))
    return model.eval()


def run(model, mel: torch.Tensor, version: int, decode=None, seed: int = 0) -> torch.Tensor:
    if version == 2:
        generator = torch.Generator().manual_seed(seed)
        return model.inference(mel, generator, cache_source=torch.zeros(1, 1, 0), decode=decode)[0]
    return model.inference(mel, finalize=True, decode=decode)[0]


def best(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def measure(yamls: Path, version: int, seconds: float, repeats: int) -> dict:
    model = random_hift(yamls, version)
    mel = torch.randn(1, 80, int(seconds * FRAMES_PER_SECOND), generator=torch.Generator().manual_seed(7)) - 4.0
    decode = hift.compile_decode(model, True, f"bench.cosyvoice{version}.hift")
    whole = Compiled(_Whole(model, version), f"bench.cosyvoice{version}.hift.whole")
    with torch.inference_mode():
        eager = run(model, mel, version)
        start = time.perf_counter()
        compiled = run(model, mel, version, decode)  # the compile happens here
        compile_s = time.perf_counter() - start
        source = model.inference(mel, torch.Generator().manual_seed(0), cache_source=torch.zeros(1, 1, 0))[1] \
            if version == 2 else model.inference(mel)[1]
        decode_only = (decode(mel, source) - model.decode(mel, source)).abs().max().item() if version == 2 \
            else (decode(mel, source, True) - model.decode(mel, source, True)).abs().max().item()
        if version == 2:  # the draws too: the generator goes in as eager code's
            compiled_whole = whole(mel, torch.Generator().manual_seed(0))
        else:
            compiled_whole = whole(mel)
        eager_s = best(lambda: run(model, mel, version), repeats)
        compiled_s = best(lambda: run(model, mel, version, decode), repeats)
    assert not decode.eager, f"the compile of CosyVoice {version}'s decode fell back to eager"
    return {"seconds_of_audio": seconds, "peak": eager.abs().max().item(),
            "decode_max_abs_diff": decode_only, "inference_max_abs_diff": (compiled - eager).abs().max().item(),
            "whole_hift_compiled_max_abs_diff": (compiled_whole - eager).abs().max().item(),
            "compile_s": compile_s, "eager_s": eager_s, "compiled_s": compiled_s, "speedup": eager_s / compiled_s}


class _Whole(torch.nn.Module):
    """The whole HiFT inference as one module, F0 predictor and source included (compiled for the contrast)."""

    def __init__(self, model, version: int):
        super().__init__()
        self.model, self.version = model, version

    def forward(self, mel, generator=None):
        if self.version == 2:
            return self.model.inference(mel, generator, cache_source=torch.zeros(1, 1, 0))[0]
        return self.model.inference(mel, finalize=True)[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--yamls", type=Path, required=True, help="a CosyVoice checkout's examples/libritts")
    parser.add_argument("--seconds", type=float, default=4.0)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    results = {"threads": args.threads, "torch": torch.__version__}
    for version in (2, 3):
        results[f"cv{version}"] = measure(args.yamls, version, args.seconds, args.repeats)
        print(f"cv{version}", json.dumps(results[f"cv{version}"]), flush=True)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
