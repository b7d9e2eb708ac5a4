"""GPT-SoVITS's Chinese front end on the CPU: Mizuoto vs upstream (RVC-Boss/GPT-SoVITS at the checkout given), in
one process at `--threads` threads (onnxruntime's intra-op threads and torch's alike; upstream's own session
asks for 2), outputs compared.

    VENV/bin/python benchmarks/gpt_sovits_frontend_vs_upstream.py --checkout PATH [--threads 2] [--repeats 5]
(VENV: scripts/parity/gpt_sovits_upstream_env.sh; this clone goes on sys.path.)

- G2PW network: upstream's onnxruntime session (its SessionOptions: all graph optimisations, sequential) against
  our G2PW loaded from the same ONNX file, on the queries of one 60-character sentence with `--queries`
  polyphonic characters (one shared BERT row, as the sentence de-duplication feeds it) and on a padded batch of
  distinct sentences. The file is the released architecture with random weights: BERT-base (768 wide, 12 layers,
  12 heads, 21128 tokens) and `--chars` / `--labels` (the released counts are not written anywhere we can read;
  the defaults are the CPP data set's polyphonic characters and readings as GitYCC's paper gives them, about).
  Reported: milliseconds per call (lower is faster), best of `--repeats` after a warm-up, the largest probability
  difference and whether the argmax agrees.
- Whole front end: upstream's chinese2.text_normalize + g2p against ours (frontend/chinese.py) on a paragraph,
  with the tiny G2PW folder of the parity set gpt_sovits_zh_g2p (the network is then a small share: this
  measures jieba, pypinyin, the sandhi and the bookkeeping); phones compared.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "scripts" / "parity"))
sys.path.insert(0, str(REPO))

PARAGRAPH = ("银行的行长说，我们还要还钱，这个重要的问题很重。他长得很高，长大了以后还是那么快乐，音乐也好听。"
             "2024年3月15日，气温是零下三度，价格为十二点五元，增长了百分之二十五。小孩儿在哪儿玩？花儿开了。") * 4


def best(fn, repeats: int) -> tuple[float, object]:
    result = fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - start)
    return min(times), result


def g2pw_network(args, tmp: Path) -> None:
    import numpy as np
    import onnxruntime
    import torch
    from gpt_sovits_g2pw_tiny import export_tiny_g2pw

    from mizuoto.engines.gpt_sovits.frontend.g2pw_model import load_g2pw

    labels = [f"L{i:04d}5" for i in range(args.labels)]
    chars = [chr(0x4E00 + i) for i in range(args.chars)]
    onnx_path = tmp / "g2pW.onnx"
    start = time.perf_counter()
    export_tiny_g2pw(onnx_path, vocab_size=21128, labels=labels, chars=chars, hidden=768, layers=12, heads=12,
                     intermediate=3072)
    print(f"exported the released-size G2PW ({onnx_path.stat().st_size / 2**20:.0f} MiB) in "
          f"{time.perf_counter() - start:.0f} s")
    ours = load_g2pw(onnx_path)
    rng = np.random.default_rng(0)

    def inputs(rows: int, length: int, queries: int) -> dict[str, np.ndarray]:
        ids = rng.integers(5, 21128, size=(rows, length)).astype(np.int64)
        ids[:, 0], ids[:, -1] = 101, 102
        mask = (rng.random((queries, args.labels)) < 0.004).astype(np.float32)
        mask[np.arange(queries), rng.integers(0, args.labels, queries)] = 1.0
        return {"input_ids": ids, "token_type_ids": np.zeros_like(ids), "attention_mask": np.ones_like(ids),
                "phoneme_mask": mask, "char_ids": rng.integers(0, args.chars, queries).astype(np.int64),
                "position_ids": rng.integers(1, length - 1, queries).astype(np.int64)}

    def run_ours(feed):
        with torch.inference_mode():
            return ours(**{k: torch.from_numpy(v) for k, v in feed.items()}).numpy()

    feeds = {"one sentence, shared row": inputs(1, 62, args.queries), "8 sentences, padded batch": inputs(8, 62, 8)}
    # Ours first: onnxruntime's pool threads spin for a while after each run and would take the cores from it.
    mine = {name: best(lambda feed=feed: run_ours(feed), args.repeats) for name, feed in feeds.items()}
    options = onnxruntime.SessionOptions()
    options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.execution_mode = onnxruntime.ExecutionMode.ORT_SEQUENTIAL
    options.intra_op_num_threads = args.threads
    session = onnxruntime.InferenceSession(str(onnx_path), sess_options=options, providers=["CPUExecutionProvider"])
    for name, feed in feeds.items():
        upstream_time, theirs = best(lambda feed=feed: session.run([], feed)[0], args.repeats)
        our_time, probs = mine[name]
        print(f"G2PW {name}: upstream (onnxruntime) {upstream_time * 1e3:.1f} ms, ours {our_time * 1e3:.1f} ms "
              f"({upstream_time / our_time:.2f}x), max |dp| {np.abs(theirs - probs).max():.1e}, argmax "
              f"{'agrees' if (theirs.argmax(1) == probs.argmax(1)).all() else 'DIFFERS'}")


def whole_front_end(args, checkout: Path, tmp: Path) -> None:
    from mizuoto.engines.gpt_sovits.bert_features import load_tokenizer
    from mizuoto.engines.gpt_sovits.frontend import chinese
    from mizuoto.engines.gpt_sovits.frontend.g2pw import G2PW

    folder = REPO / "tests" / "parity" / "data" / "gpt_sovits_zh_g2p"
    shutil.copytree(checkout / "GPT_SoVITS" / "text", tmp / "text")
    shutil.copytree(folder / "g2pw", tmp / "GPT_SoVITS" / "text" / "G2PWModel")
    os.environ["bert_path"] = str(folder / "bert")
    sys.path.insert(0, str(tmp))
    here = os.getcwd()
    os.chdir(tmp)
    from text import chinese2  # noqa: PLC0415

    os.chdir(here)
    g2pw = G2PW.load(folder / "g2pw", load_tokenizer(folder / "bert"))
    upstream_time, theirs = best(lambda: chinese2.g2p(chinese2.text_normalize(PARAGRAPH)), args.repeats)
    our_time, mine = best(lambda: chinese.g2p(chinese.text_normalize(PARAGRAPH), g2pw), args.repeats)
    print(f"front end, {len(PARAGRAPH)} characters: upstream {upstream_time * 1e3:.0f} ms, ours {our_time * 1e3:.0f} "
          f"ms ({upstream_time / our_time:.2f}x), phones {'identical' if theirs == mine else 'DIFFER'}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--checkout", type=Path, required=True)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--queries", type=int, default=6)
    parser.add_argument("--chars", type=int, default=623)
    parser.add_argument("--labels", type=int, default=876)
    parser.add_argument("--skip-network", action="store_true")
    args = parser.parse_args()
    import torch

    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as tmp:
        if not args.skip_network:
            g2pw_network(args, Path(tmp))
        whole_front_end(args, args.checkout.resolve(), Path(tmp))


if __name__ == "__main__":
    main()
