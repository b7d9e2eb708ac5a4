#!/usr/bin/env python
"""Reference outputs of G2PW, the polyphone classifier of GPT-SoVITS's Chinese front end, as upstream runs it: a
tiny G2PW exported to ONNX from g2pw 0.1.2's own module.G2PW (gpt_sovits_g2pw_tiny.py), its inputs built by
upstream's text/g2pw/dataset.py `prepare_onnx_input` and run through onnxruntime by text/g2pw/onnx_api.py's own
`predict` and `_predict_with_sentence_dedup`, from an RVC-Boss/GPT-SoVITS checkout (GitHub only).

    python scripts/parity/gpt_sovits_g2pw_references.py OUTDIR --checkout PATH

The interpreter needs what scripts/parity/gpt_sovits_upstream_env.sh installs (g2pw 0.1.2, transformers 4.57.3,
onnxruntime 1.32.0, onnx 1.23.2). dataset.py and utils.py are loaded from their files as a package of their own
(text/g2pw/__init__.py would import the whole converter: OpenCC, pypinyin, requests); `predict` and
`_predict_with_sentence_dedup` are taken from onnx_api.py by its syntax tree and run as they are, on an
onnxruntime session with G2PWOnnxConverter's options (ORT_ENABLE_ALL, sequential, intra_op_num_threads 2: two
threads whatever the parity pins say, as upstream runs it; onnxruntime does not read OMP_NUM_THREADS).

Writes
- OUTDIR/G2PWModel/: g2pW.onnx (the tiny model), config.py and POLYPHONIC_CHARS.txt, as the released folder has them;
- OUTDIR/bert/: vocab.txt and tokenizer_config.json, the tokenizer upstream's AutoTokenizer loads (model_source);
  one character of the sentences is left out of it, so one query's neighbour is [UNK], and 'GPT' is one too;
- OUTDIR/lowrank/: the same network with param_conditional's 'char+pos-second_lowrank' instead (a variant the port
  refuses: a file of the wrong structure);
- OUTDIR/references.safetensors: per case and onnxruntime run `<case>/<run>/<input>` (the six arrays fed),
  `<case>/<run>/probs` (onnxruntime's), `<case>/<run>/labels` (their argmax, predict()'s choice) and
  `<case>/<run>/torch_probs` (the same weights through module.G2PW itself, transformers' eager attention, under
  the parity pins); case `batch` is predict() on every query at once, case `dedup` the sentence-dedup path (a text
  with several queries fed as one sentence row and N query rows; a text with one query as it is);
- OUTDIR/references.json: the upstream commit, sentences, queries, labels, upstream's predictions and what was
  measured (onnxruntime against torch, the smallest top-2 gap).
"""

from __future__ import annotations

import argparse
import ast
import functools
import importlib.util
import json
import sys
import types
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from pinned import add_checkout_argument, checkout_record, environment, pin_process, write_references  # noqa: E402

pin_process()

import numpy as np  # noqa: E402
import torch  # noqa: E402
from gpt_sovits_g2pw_tiny import export_tiny_g2pw  # noqa: E402

# POLYPHONIC_CHARS.txt of the tiny folder (traditional characters, bopomofo with tone digits, as released): each
# word below is a character and one of its readings
POLYPHONIC = tuple((word[0], word[1:]) for word in (
    "行ㄒㄧㄥ2 行ㄏㄤ2 長ㄔㄤ2 長ㄓㄤ3 重ㄓㄨㄥ4 重ㄔㄨㄥ2 還ㄏㄞ2 還ㄏㄨㄢ2 了ㄌㄜ5 了ㄌㄧㄠ3 "
    "得ㄉㄜ2 得ㄉㄜ5 得ㄉㄟ3 樂ㄌㄜ4 樂ㄩㄝ4 為ㄨㄟ2 為ㄨㄟ4 都ㄉㄡ1 都ㄉㄨ1").split())
# the segments one _g2p call batches (G2PW sees them after OpenCC's s2tw): several queries on one text, a text with
# a single query, different lengths (padding), an English word and a character the vocabulary lacks
SENTENCES = ("銀行行長說他還要去還書了", "重要的是重新開始", "音樂讓我們都快樂得很", "好長", "他為了大家", "GPT行不行")
LEFT_OUT = "書"
SEED = 20261203
MODEL = {"hidden": 32, "layers": 2, "heads": 2, "intermediate": 48, "max_positions": 128}
LOWRANK = {"char+pos-second": False, "char+pos-second_lowrank": True, "lowrank_size": 4}


def upstream(checkout: Path):
    """(dataset module, predict, _predict_with_sentence_dedup) from the checkout's text/g2pw/."""
    folder = checkout / "GPT_SoVITS" / "text" / "g2pw"
    package = types.ModuleType("upstream_g2pw")  # a package of just these files: dataset's `from .utils` resolves
    package.__path__ = [str(folder)]
    sys.modules["upstream_g2pw"] = package
    modules = {}
    for name in ("utils", "dataset"):
        spec = importlib.util.spec_from_file_location(f"upstream_g2pw.{name}", folder / f"{name}.py")
        modules[name] = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = modules[name]
        spec.loader.exec_module(modules[name])
    source = (folder / "onnx_api.py").read_text(encoding="utf-8")
    for setting in ("ORT_ENABLE_ALL", "ORT_SEQUENTIAL", "intra_op_num_threads = 2"):
        assert setting in source, f"upstream's session options changed ({setting} is gone): update session()"
    tree = ast.parse(source)
    nodes = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "predict"]
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == "_G2PWBaseOnnxConverter":
            nodes += [n for n in node.body if isinstance(n, ast.FunctionDef)
                      and n.name == "_predict_with_sentence_dedup"]
    assert len(nodes) == 2, "upstream's predict / _predict_with_sentence_dedup moved"
    namespace = {"np": np, "Any": object, "Dict": dict, "List": list, "Tuple": tuple}
    exec(compile(ast.Module(body=nodes, type_ignores=[]), "onnx_api.py", "exec"), namespace)
    return modules["dataset"], namespace["predict"], namespace["_predict_with_sentence_dedup"]


def session(path: Path):
    """An onnxruntime session with G2PWOnnxConverter's options, on the CPU."""
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.execution_mode = onnxruntime.ExecutionMode.ORT_SEQUENTIAL
    options.intra_op_num_threads = 2
    return onnxruntime.InferenceSession(str(path), sess_options=options, providers=["CPUExecutionProvider"])


class Recording:
    """A session that keeps every feed and output of its runs."""

    def __init__(self, inner):
        self.inner, self.runs = inner, []

    def run(self, names, feed):
        out = self.inner.run(names, feed)
        self.runs.append(({k: np.array(v) for k, v in feed.items()}, out[0]))
        return out


def write_folders(out: Path, dataset):
    """The tiny G2PWModel/, its tokenizer and the refused variant; -> (labels, chars, char2phonemes, model)."""
    labels, char2phonemes = dataset.get_phoneme_labels([list(p) for p in POLYPHONIC])
    chars = sorted(char2phonemes)
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    vocab += sorted({c for s in SENTENCES for c in s.lower() if c != LEFT_OUT and not c.isascii()})
    (out / "bert").mkdir(parents=True, exist_ok=True)
    (out / "bert" / "vocab.txt").write_text("\n".join(vocab) + "\n", encoding="utf-8")
    (out / "bert" / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "BertTokenizer",
                                                                    "do_lower_case": True}) + "\n")
    folder = out / "G2PWModel"
    model = export_tiny_g2pw(folder / "g2pW.onnx", vocab_size=len(vocab), labels=labels, chars=chars, seed=SEED,
                             **MODEL)
    (folder / "POLYPHONIC_CHARS.txt").write_text("".join(f"{c}\t{p}\n" for c, p in POLYPHONIC), encoding="utf-8")
    export_tiny_g2pw(out / "lowrank" / "g2pW.onnx", vocab_size=len(vocab), labels=labels, chars=chars, seed=SEED,
                     extra_conditional=LOWRANK, **{**MODEL, "max_positions": 16})
    return labels, chars, char2phonemes, model


def queries(chars) -> tuple[list[str], list[int]]:
    """_prepare_data's texts and query ids: one entry per polyphonic character of each segment (every segment is
    shorter than its 16-character context, so none is cropped)."""
    texts, ids = [], []
    for sentence in SENTENCES:
        for i, char in enumerate(sentence):
            if char in chars:
                texts.append(sentence)
                ids.append(i)
    return texts, ids


def run_predict(predict, session, labels, model_input):
    """G2PWOnnxConverter._predict: upstream's predict on the converter's session."""
    return predict(session=session, onnx_input=model_input, labels=labels)


def torch_probs(model, feed: dict) -> np.ndarray:
    """The same feed through module.G2PW itself."""
    with torch.no_grad():
        return model(*(torch.from_numpy(feed[name]) for name in ("input_ids", "token_type_ids", "attention_mask",
                                                                  "phoneme_mask", "char_ids", "position_ids"))).numpy()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path)
    add_checkout_argument(parser)
    args = parser.parse_args()
    checkout, out = args.checkout.resolve(), args.out
    out.mkdir(parents=True, exist_ok=True)
    dataset, predict, dedup = upstream(checkout)
    labels, chars, char2phonemes, eager = write_folders(out, dataset)
    reference = eager  # module.G2PW with transformers' eager attention, the one the export wrote and ours computes

    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(out / "bert"))
    texts, query_ids = queries(chars)
    model_input = dataset.prepare_onnx_input(tokenizer=tokenizer, labels=labels, char2phonemes=char2phonemes,
                                             chars=chars, texts=texts, query_ids=query_ids, use_mask=True,
                                             window_size=None, char2id={c: i for i, c in enumerate(chars)})
    ort = session(out / "G2PWModel" / "g2pW.onnx")
    refs, cases, gaps, worst = {}, {}, [], 0.0
    for case in ("batch", "dedup"):
        recording = Recording(ort)
        if case == "batch":
            preds, confidences = predict(recording, model_input, labels)
        else:  # the converter's method on a stand-in whose _predict is upstream's predict on this session
            stand_in = types.SimpleNamespace(_predict=functools.partial(run_predict, predict, recording, labels))
            preds, confidences = dedup(stand_in, model_input, texts)
        rows = []
        for k, (feed, probs) in enumerate(recording.runs):
            for name, value in feed.items():
                refs[f"{case}/{k}/{name}"] = value
            refs[f"{case}/{k}/probs"] = probs
            refs[f"{case}/{k}/labels"] = probs.argmax(axis=1).astype(np.int64)
            refs[f"{case}/{k}/torch_probs"] = torch_probs(reference, feed)
            worst = max(worst, float(np.abs(refs[f"{case}/{k}/torch_probs"] - probs).max()))
            top2 = np.sort(probs, axis=1)[:, -2:]
            gaps.append(float((top2[:, 1] - top2[:, 0]).min()))
            rows.append({"sentence_rows": int(feed["input_ids"].shape[0]), "queries": int(feed["char_ids"].shape[0])})
        cases[case] = {"runs": rows, "preds": preds, "confidences": confidences}
    assert any(r["sentence_rows"] == 1 < r["queries"] for r in cases["dedup"]["runs"]), "no shared-row run"
    assert min(gaps) > 1e-3, f"a top-2 gap of {min(gaps):.1e}: the labels would hang on rounding (change SEED)"
    write_references(refs, out / "references.safetensors")
    info = {"upstream": {"repository": "RVC-Boss/GPT-SoVITS", **checkout_record(checkout),
                         "code": "text/g2pw/dataset.py prepare_onnx_input; text/g2pw/onnx_api.py predict, "
                                 "_predict_with_sentence_dedup and G2PWOnnxConverter's session options"},
            "network": "g2pw 0.1.2 module.G2PW (gpt_sovits_g2pw_tiny.py: opset 12, TorchScript exporter)",
            "model": {**MODEL, "seed": SEED, "vocab_size": eager.bert.config.vocab_size},
            "onnxruntime_session": {"graph_optimization_level": "ORT_ENABLE_ALL", "execution_mode": "ORT_SEQUENTIAL",
                                    "intra_op_num_threads": 2, "providers": ["CPUExecutionProvider"]},
            "sentences": list(SENTENCES), "left_out_of_vocab": LEFT_OUT, "texts": texts, "query_ids": query_ids,
            "labels": labels, "chars": chars, "cases": cases,
            "measured": {"onnxruntime_vs_torch_max_abs": worst, "min_top2_gap": min(gaps)},
            "tensors": {k: list(v.shape) for k, v in refs.items()},
            "environment": environment(["torch", "transformers", "onnxruntime", "onnx", "g2pw", "numpy"])}
    (out / "references.json").write_text(json.dumps(info, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
