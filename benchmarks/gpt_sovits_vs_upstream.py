"""GPT-SoVITS speed on the CPU: Mizuoto vs upstream (RVC-Boss/GPT-SoVITS at the checkout given) on the same random
weights, inputs and seed, in one process under the parity pins at `--threads` threads; outputs are compared.

    VENV/bin/python benchmarks/gpt_sovits_vs_upstream.py --checkout PATH [--size tiny|full] [--threads 1]
        [--tokens 200] [--repeats 3]
(VENV: scripts/parity/gpt_sovits_upstream_env.sh; this clone goes on sys.path.)

- T2S: upstream's `infer_panel_batch_infer` (what api_v2's TTS.run calls) against Text2Semantic.generate, from the
  same GPT weights file; EOS's row is pushed down so that both run to the early stop (`--tokens`). Reported:
  tokens per second (higher is faster), the best of `--repeats` after a warm-up (the sides alternating), and
  whether the tokens agree.
- SoVITS: upstream's `SynthesizerTrn.decode` against SynthesizerV2.decode on `--tokens` semantic tokens (at 25 Hz)
  with a 5 s reference, from the same weights file; audio seconds per wall second, and the largest difference.

`tiny`: the parity sets' configurations; `full`: the released v2 architectures with random weights (the GPT of
s1longer-v2.yaml: 512 wide, 24 layers, 16 heads; SoVITS of s2.json: 192/768, HiFi-GAN 512 with 10-8-2-2-2).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "scripts" / "parity"))
sys.path.insert(0, str(REPO))
from pinned import pin_process  # noqa: E402

pin_process()

import torch  # noqa: E402


def best_of_both(upstream, ours, repeats: int) -> tuple[float, object, float, object]:
    """Each side's best time over `repeats` after a warm-up, the two sides alternating (a slower minute of this
    machine then touches both)."""
    results, times = [upstream(), ours()], [[], []]
    for _ in range(repeats):
        for side, fn in enumerate((upstream, ours)):
            start = time.perf_counter()
            results[side] = fn()
            times[side].append(time.perf_counter() - start)
    return min(times[0]), results[0], min(times[1]), results[1]


def quiet(fn):
    """Upstream prints a progress bar and a line per request: kept off the report."""
    def run():
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            return fn()
    return run


def bench_t2s(checkout: Path, size: str, tokens: int, repeats: int) -> dict:
    import gpt_sovits_t2s_references as writer

    from mizuoto.engines.gpt_sovits import t2s
    from mizuoto.engines.gpt_sovits.gpt_weights import load_gpt

    config = {"model": writer.CONFIG["model"] if size == "tiny" else t2s.RELEASED_V2, "data": {"max_sec": tokens / 50}}
    theirs = writer.upstream(checkout)(config, top_k=3).eval()
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for name, p in theirs.named_parameters():
            p.copy_(torch.rand(p.shape, generator=g) + 0.5 if name.endswith(("alpha", "norm1.weight", "norm2.weight"))
                    else torch.randn(p.shape, generator=g) / p.shape[-1] ** 0.5)
        theirs.ar_predict_layer.weight[config["model"]["EOS"]] = -10 * theirs.h.layers[-1].norm2.bias.sign()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "gpt.ckpt"
        torch.save({"weight": {f"model.{k}": v for k, v in theirs.state_dict().items()}, "config": config}, path)
        ours = load_gpt(path)
    phones, prompt_len = 60, 150
    model = config["model"]
    phone_ids = torch.randint(0, model["phoneme_vocab_size"], (phones,), generator=g)
    bert = torch.randn(1024, phones, generator=g)
    prompt = torch.randint(0, model["EOS"], (prompt_len,), generator=g)
    sampling = {"top_k": 15, "top_p": 1, "temperature": 1, "repetition_penalty": 1.35}

    def upstream():
        torch.manual_seed(0)
        with torch.no_grad():
            y, idx = theirs.infer_panel_batch_infer([phone_ids], torch.LongTensor([phones]), prompt.unsqueeze(0),
                                                    [bert], early_stop_num=tokens, max_len=phones, **sampling)
        return y[0][-idx[0]:].long()

    def mizuoto():
        with torch.inference_mode():
            return ours.generate(phone_ids, bert, prompt, t2s.T2SSampling(**sampling),
                                 torch.Generator().manual_seed(0)).tokens

    up_time, up_tokens, our_time, our_tokens = best_of_both(quiet(upstream), mizuoto, repeats)
    n = our_tokens.numel()
    return {"t2s_tokens": n, "upstream_tokens_per_s": round(n / up_time, 1),
            "ours_tokens_per_s": round(n / our_time, 1), "speedup": round(up_time / our_time, 3),
            "tokens_equal": bool(torch.equal(up_tokens, our_tokens))}


def bench_sovits(checkout: Path, size: str, tokens: int, repeats: int) -> dict:
    import gpt_sovits_sovits_references as writer
    from gpt_sovits_weights import sovits_file_bytes, sovits_state

    from mizuoto.engines.gpt_sovits import sovits
    from mizuoto.engines.gpt_sovits.sovits_weights import load_sovits

    spec = {"version": "v2", "model": {**(writer.TINY if size == "tiny" else sovits.RELEASED_V2), "gin_channels": 512}}
    data = {**writer.DATA, "data": {**writer.DATA["data"], "filter_length": 2048, "win_length": 2048}}
    config = {**data, "model": {**spec["model"], "version": "v2"}}
    theirs = writer.upstream(checkout)(1025, 32, n_speakers=300, **config["model"]).eval()
    entries = [(k, list(v.shape)) for k, v in theirs.state_dict().items()]
    raw = sovits_file_bytes(sovits_state(entries, 7), config, "v2")
    theirs.load_state_dict(torch.load(io.BytesIO(raw), map_location="cpu", weights_only=False)["weight"], strict=False)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "sovits.pth"
        path.write_bytes(raw)
        ours = load_sovits(path)
    g = torch.Generator().manual_seed(2)
    codes = torch.randint(0, 1024, (1, 1, tokens), generator=g)
    text = torch.randint(0, 732, (1, 80), generator=g)
    refer = torch.randn(1, 1025, 250, generator=g).abs()

    def upstream():
        torch.manual_seed(3)
        with torch.no_grad():
            return theirs.decode(codes, text, [refer], noise_scale=0.5, speed=1)

    def mizuoto():
        with torch.inference_mode():
            return ours.decode(codes, text, [refer], torch.Generator().manual_seed(3))

    up_time, up_audio, our_time, our_audio = best_of_both(upstream, mizuoto, repeats)
    seconds = our_audio.shape[-1] / 32000
    return {"sovits_audio_s": round(seconds, 2), "upstream_audio_s_per_s": round(seconds / up_time, 2),
            "ours_audio_s_per_s": round(seconds / our_time, 2), "sovits_speedup": round(up_time / our_time, 3),
            "sovits_max_abs_diff": float((up_audio - our_audio).abs().max())}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--checkout", type=Path, required=True)
    parser.add_argument("--size", choices=("tiny", "full"), default="tiny")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--tokens", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    checkout = args.checkout.resolve()
    commit = os.popen(f"git -C {checkout} rev-parse --short HEAD").read().strip()
    report = {"size": args.size, "threads": args.threads, "commit": commit}
    import gpt_sovits_sovits_references  # noqa: F401  (importing a writer pins one thread: first, then set)
    import gpt_sovits_t2s_references  # noqa: F401

    torch.set_num_threads(args.threads)
    report |= bench_t2s(checkout, args.size, args.tokens, args.repeats)
    report |= bench_sovits(checkout, args.size, args.tokens, args.repeats)
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
