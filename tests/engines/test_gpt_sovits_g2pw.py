"""G2PW, GPT-SoVITS's polyphone classifier, natively (engines/gpt_sovits/frontend/g2pw_model.py), its weights read
from the ONNX file without the onnx package (onnx_weights.py).

Against tests/parity/data/gpt_sovits_g2pw (scripts/parity/gpt_sovits_g2pw_references.py at RVC-Boss/GPT-SoVITS
48b1a01): a tiny G2PW exported from g2pw 0.1.2's own module.G2PW as the released g2pW.onnx was (opset 12,
TorchScript exporter, constant folding: its BERT's MatMul weights are anonymous initializers), with inputs from
upstream's prepare_onnx_input for six segments and their seventeen polyphonic queries, run by upstream's predict()
on all queries at once and by its sentence-dedup path (one sentence row, padded, shared by N query rows). In a
pinned subprocess our model loads the committed .onnx through `load_g2pw` and runs every recorded feed:
- against onnxruntime (upstream's runtime with its session options: ORT_ENABLE_ALL, two intra-op threads): the
  labels (the argmax predict() keeps) exactly, and the probabilities within ORT_TOLERANCE = 1e-5 on every machine.
  onnxruntime's kernels (fused attention and LayerNorm, its own GEMM) are not torch's, so no bitwise match is
  possible; the writer measured at most 5.4e-7 between onnxruntime and torch (references.json, `measured`), and
  every top-2 gap is at least 8e-2, so no label hangs on rounding;
- against the same weights through module.G2PW itself in torch (transformers' sdpa attention, under the pins):
  bitwise where the set's fingerprint is this machine's, else (tests/fallback.py) within TORCH_TOLERANCE.
In process: the sizes come from the weights and the graph, every MatMul weight lands where the graph uses it, a
shared sentence row gives what that row repeated gives, and bad files (not ONNX, external data, another network,
a variant of G2PW, a graph whose MatMul cannot be placed) and bad inputs are one-line errors.
"""

import functools
import json
import struct
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

if __name__ == "__main__":  # run as the pinned script: tests/ (helpers.py) is not on the path yet
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from fallback import Comparison  # noqa: E402
from helpers import reference_sets, run_pinned  # noqa: E402

from mizuoto.core.errors import CheckpointError, InputError  # noqa: E402
from mizuoto.engines.gpt_sovits.frontend import g2pw_model  # noqa: E402
from mizuoto.nn import onnx_weights  # noqa: E402

SET = "gpt_sovits_g2pw"
ORT_TOLERANCE = 1e-5  # onnxruntime vs torch kernels (measured 5.4e-7)
TORCH_TOLERANCE = 1e-5  # the fallback against module.G2PW on a machine with other floats


def committed() -> Path:
    return reference_sets().SETS[SET].committed


def info() -> dict:
    return json.loads((committed() / "references.json").read_text(encoding="utf-8"))


def runs(recorded: dict):
    """(case, run index) of every onnxruntime run the set recorded."""
    return [(case, k) for case, c in recorded["cases"].items() for k in range(len(c["runs"]))]


def feed(refs: dict, case: str, k: int) -> list[torch.Tensor]:
    return [refs[f"{case}/{k}/{name}"] for name in g2pw_model.INPUTS]


def ours(folder: Path, out: Path) -> dict:
    from safetensors.torch import load_file, save_file

    refs = load_file(str(folder / "references.safetensors"))
    model = g2pw_model.load_g2pw(folder / "G2PWModel" / "g2pW.onnx")
    results = {}
    with torch.inference_mode():
        for case, k in runs(json.loads((folder / "references.json").read_text(encoding="utf-8"))):
            results[f"{case}/{k}/probs"] = model(*feed(refs, case, k))
    save_file({k: v.contiguous() for k, v in results.items()}, str(out))
    return {"saved": str(out)}


def test_upstreams_labels_and_probabilities(tmp_path, record_property):
    from safetensors.torch import load_file

    out = tmp_path / "ours.safetensors"
    run_pinned(__file__, committed(), out)
    theirs, mine = load_file(str(committed() / "references.safetensors")), load_file(str(out))
    comparison = Comparison.for_set(SET)
    for case, k in runs(info()):
        probs, what = mine[f"{case}/{k}/probs"], f"{case} run {k}"
        assert torch.equal(probs.argmax(dim=1), theirs[f"{case}/{k}/labels"]), f"{what}: a label is not upstream's"
        worst = (probs - theirs[f"{case}/{k}/probs"]).abs().max().item()
        assert worst <= ORT_TOLERANCE, f"{what}: {worst:.2e} from onnxruntime's probabilities"
        comparison.checked.append(f"{what}: labels exact, onnxruntime's probabilities within {worst:.2e}")
        comparison.deterministic(f"{what}: module.G2PW's probabilities", probs, theirs[f"{case}/{k}/torch_probs"],
                                 TORCH_TOLERANCE)
    record_property("parity_mode", comparison.mode)
    print(f"{SET} parity: {comparison.mode} ({comparison.why})", *comparison.checked, sep="\n  ")


def test_the_set_covers_both_of_upstreams_paths():
    recorded = info()
    assert recorded["upstream"]["commit"].startswith("48b1a01") and not recorded["upstream"]["modified"]
    batch, dedup = recorded["cases"]["batch"], recorded["cases"]["dedup"]
    queries = len(recorded["query_ids"])
    assert batch["runs"] == [{"sentence_rows": queries, "queries": queries}]
    shared = [r for r in dedup["runs"] if r["sentence_rows"] == 1 < r["queries"]]
    assert len(shared) >= 4 and sum(r["queries"] for r in dedup["runs"]) == queries
    assert batch["preds"] == dedup["preds"] and len(set(batch["preds"])) > 5  # upstream's own two paths agree
    from safetensors.torch import load_file

    refs = load_file(str(committed() / "references.safetensors"))
    padded = [k for k, r in enumerate(dedup["runs"]) if r["sentence_rows"] == 1 < r["queries"]
              and (refs[f"dedup/{k}/attention_mask"] == 0).any()]
    assert padded  # a shared row padded to the batch's longest text
    assert recorded["measured"]["onnxruntime_vs_torch_max_abs"] * 5 < ORT_TOLERANCE
    assert recorded["measured"]["min_top2_gap"] > 100 * ORT_TOLERANCE


# ---------------------------------------------------------------------------------------------------
# In process


@functools.cache
def tiny() -> g2pw_model.G2PW:
    return g2pw_model.load_g2pw(committed() / "G2PWModel" / "g2pW.onnx")


def test_the_sizes_come_from_the_weights_and_the_graph():
    config, recorded = tiny().config, info()
    model = recorded["model"]
    bert = config.bert
    assert (bert.vocab_size, bert.hidden_size, bert.num_hidden_layers, bert.num_attention_heads) == \
        (model["vocab_size"], model["hidden"], model["layers"], model["heads"])
    assert (bert.intermediate_size, bert.max_position_embeddings, bert.layer_norm_eps) == \
        (model["intermediate"], model["max_positions"], 1e-12)
    assert (config.num_labels, config.num_chars, config.num_pos_tags) == \
        (len(recorded["labels"]), len(recorded["chars"]), 11)
    assert config.descriptors == ("descriptor_bias", "char_descriptor", "second_order_descriptor")
    assert not tiny().training


def test_every_matmul_weight_lands_where_the_graph_uses_it():
    graph = onnx_weights.read_onnx(committed() / "G2PWModel" / "g2pW.onnx")
    anonymous = [n for n in graph.initializers if n.startswith("onnx::MatMul_")]
    assert len(anonymous) == 6 * tiny().config.bert.num_hidden_layers  # q, k, v, output, intermediate, output
    assert not graph.aliases  # every weight re-randomised: none merged with another
    state = tiny().state_dict()
    placed = 0
    for node in graph.nodes:
        if node.op_type == "MatMul" and node.inputs[1] in anonymous:
            add = graph.consumers(node.outputs[0])[0]
            bias = next(i for i in add.inputs if i in graph.initializers)
            layer = bias.removesuffix(".bias")
            assert torch.equal(state[f"{layer}.weight"], torch.from_numpy(graph.initializers[node.inputs[1]].T)), layer
            assert torch.equal(state[f"{layer}.bias"], torch.from_numpy(graph.initializers[bias]))
            placed += 1
    assert placed == len(anonymous)
    assert torch.equal(state["classifier.weight"], torch.from_numpy(graph.initializers["classifier.weight"]))


def test_one_shared_row_gives_that_row_repeated():
    from safetensors.torch import load_file

    refs = load_file(str(committed() / "references.safetensors"))
    ids, types, mask, phonemes, chars, positions = feed(refs, "dedup", 1)
    queries = chars.shape[0]
    assert ids.shape[0] == 1 < queries and (mask == 0).any()
    with torch.inference_mode():
        shared = tiny()(ids, types, mask, phonemes, chars, positions)
        repeated = tiny()(ids.expand(queries, -1), types.expand(queries, -1), mask.expand(queries, -1), phonemes,
                          chars, positions)
    assert shared.shape == (queries, tiny().config.num_labels)
    torch.testing.assert_close(shared, repeated, rtol=0, atol=1e-6)
    assert torch.equal(shared.argmax(1), refs["dedup/1/labels"])


def test_bad_inputs_are_one_line_errors():
    from safetensors.torch import load_file

    refs = load_file(str(committed() / "references.safetensors"))
    ids, types, mask, phonemes, chars, positions = feed(refs, "batch", 0)
    cases = (((ids[:2], types[:2], mask[:2], phonemes[:3], chars[:3], positions[:3]), "2 sentence rows for 3 queries"),
             ((ids, types, mask, phonemes, chars, positions + ids.shape[1]), "outside its row"),
             ((ids, types, mask, phonemes, chars, -positions), "outside its row"),
             ((ids, types, mask, phonemes, chars + 100, positions), "outside the model's 9 polyphonic"),
             ((ids, types, mask, phonemes[:, :3], chars, positions), "phoneme_mask"),
             ((ids.float(), types, mask, phonemes, chars, positions), "token ids"),
             ((ids, types[:, :2], mask, phonemes, chars, positions), "token_type_ids"),
             ((ids, types, mask, phonemes, chars.float(), positions), "as integers"),
             ((ids.repeat(1, 10), types.repeat(1, 10), mask.repeat(1, 10), phonemes, chars, positions),
              "at most 128 tokens"))
    for args, message in cases:
        with pytest.raises(InputError, match=message):
            tiny()(*args)


# --- files that are not the one expected -----------------------------------------------------------


def varint(value: int) -> bytes:
    value &= (1 << 64) - 1
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def record(number: int, payload) -> bytes:
    """One protobuf field: an int is a varint, a float a fixed32, bytes and str are length-delimited."""
    if isinstance(payload, int):
        return varint(number << 3) + varint(payload)
    if isinstance(payload, float):
        return varint(number << 3 | 5) + struct.pack("<f", payload)
    payload = payload.encode() if isinstance(payload, str) else payload
    return varint(number << 3 | 2) + varint(len(payload)) + payload


def packed(values, fmt: str | None = None) -> bytes:
    return b"".join(struct.pack(f"<{fmt}", v) if fmt else varint(v) for v in values)


def model_bytes(nodes=(), initializers=(), inputs=("x",), outputs=("y",), opset=13) -> bytes:
    """A ModelProto: ir_version, producer, opset, graph (nodes, initializers, inputs, outputs)."""
    graph = b"".join(record(1, n) for n in nodes) + b"".join(record(5, t) for t in initializers)
    graph += b"".join(record(11, record(1, name)) for name in inputs)
    graph += b"".join(record(12, record(1, name)) for name in outputs)
    return record(1, 8) + record(2, "handmade") + record(8, record(2, opset)) + record(7, graph)


def test_the_reader_reads_raw_and_typed_tensors_and_attributes(tmp_path):
    raw = np.arange(6, dtype="<f4").reshape(2, 3)
    tensors = (record(1, packed([2, 3])) + record(2, 1) + record(8, "raw") + record(9, raw.tobytes()),
               record(1, packed([3])) + record(2, 1) + record(8, "floats") + record(4, packed([0.5, -1.0, 2.0], "f")),
               record(1, packed([2])) + record(2, 7) + record(8, "longs") + record(7, packed([-3, 1 << 40])),
               record(1, packed([2])) + record(2, 10) + record(8, "halves") + record(5, packed([0x3C00, 0xC000])),
               record(2, 6) + record(8, "scalar") + record(5, packed([7])))
    constant = record(1, "value") + record(20, 4) + record(5, record(1, packed([1])) + record(2, 7) +
                                                      record(7, packed([12])))
    gemm = record(5, record(1, "transB") + record(3, 1)) + record(5, record(1, "alpha") + record(2, 0.5)) + \
        record(5, record(1, "perm") + record(8, packed([0, 2])))
    nodes = (record(1, "x") + record(1, "raw") + record(2, "m") + record(3, "mm") + record(4, "MatMul"),
             record(2, "c") + record(4, "Constant") + record(5, constant),
             record(1, "m") + record(2, "y") + record(4, "Gemm") + gemm,
             record(1, "raw") + record(2, "alias") + record(4, "Identity"))
    path = tmp_path / "hand.onnx"
    path.write_bytes(model_bytes(nodes, tensors, inputs=("x", "raw")))
    model = onnx_weights.read_onnx(path)
    assert model.inputs == ["x"] and model.outputs == ["y"] and model.opset == 13  # a listed weight is no input
    assert np.array_equal(model.initializers["raw"], raw) and model.initializers["raw"].dtype == np.float32
    assert model.initializers["floats"].tolist() == [0.5, -1.0, 2.0]
    assert model.initializers["longs"].tolist() == [-3, 1 << 40] and model.initializers["longs"].dtype == np.int64
    assert model.initializers["halves"].dtype == np.float16 and model.initializers["halves"].tolist() == [1.0, -2.0]
    assert model.initializers["scalar"].shape == () and int(model.initializers["scalar"]) == 7
    assert model.constant("c").tolist() == [12] and model.constant("m") is None
    assert model.nodes[2].attributes == {"transB": 1, "alpha": 0.5, "perm": [0, 2]}
    assert model.resolve("alias") == "raw" and model.weight("alias") is model.initializers["raw"]
    assert [n.op_type for n in model.consumers("m")] == ["Gemm"] and model.producer("m").name == "mm"
    with pytest.raises(CheckpointError, match="not G2PW's.*without 'input_ids'"):
        g2pw_model.load_g2pw(path)


def test_files_that_are_not_onnx_are_one_line_errors(tmp_path):
    for name, content in (("text.onnx", "this is not a model\n".encode()), ("zeros.onnx", bytes(64)),
                          ("random.onnx", np.random.default_rng(0).bytes(4096)), ("cut.onnx", model_bytes()[:-3])):
        (tmp_path / name).write_bytes(content)
        with pytest.raises(CheckpointError, match="is not an ONNX model file"):
            onnx_weights.read_onnx(tmp_path / name)
    torch.save({"weight": torch.zeros(3)}, tmp_path / "pickle.onnx")
    with pytest.raises(CheckpointError, match="is not an ONNX model file"):
        onnx_weights.read_onnx(tmp_path / "pickle.onnx")
    (tmp_path / "empty.onnx").write_bytes(b"")
    with pytest.raises(CheckpointError, match="is empty"):
        onnx_weights.read_onnx(tmp_path / "empty.onnx")
    with pytest.raises(CheckpointError, match="does not exist"):
        g2pw_model.load_g2pw(tmp_path / "absent.onnx")
    location = record(13, record(1, "location") + record(2, "w.bin"))
    external = record(1, packed([4])) + record(2, 1) + record(8, "w") + location + record(14, 1)
    (tmp_path / "external.onnx").write_bytes(model_bytes(initializers=(external,)))
    with pytest.raises(CheckpointError, match="external file.*single-file ONNX model"):
        onnx_weights.read_onnx(tmp_path / "external.onnx")


def renamed(tmp_path: Path, old: str, new: str) -> Path:
    """The committed tiny file with one name changed everywhere (same length: the protobuf stays valid)."""
    assert len(old.encode()) == len(new.encode())
    data = (committed() / "G2PWModel" / "g2pW.onnx").read_bytes()
    assert old.encode() in data
    path = tmp_path / f"{new}.onnx"
    path.write_bytes(data.replace(old.encode(), new.encode()))
    return path


def test_other_structures_are_one_line_errors(tmp_path):
    with pytest.raises(CheckpointError, match="trained with 'char\\+pos-second_lowrank'"):
        g2pw_model.load_g2pw(committed() / "lowrank" / "g2pW.onnx")
    # a MatMul whose bias does not say which layer it is
    dense = "bert.encoder.layer.1.output.dense.bias"
    with pytest.raises(CheckpointError, match="no named bias to tell which layer"):
        g2pw_model.load_g2pw(renamed(tmp_path, dense, dense[:-1] + "_"))
    # a weight the port does not compute (a descriptor it does not know)
    with pytest.raises(CheckpointError, match="weights this port does not compute.*descriptor_biaz"):
        g2pw_model.load_g2pw(renamed(tmp_path, "descriptor_bias", "descriptor_biaz"))
    # no per-character descriptor: another network
    with pytest.raises(CheckpointError, match="not G2PW's \\(no char_descriptor.weight\\)"):
        g2pw_model.load_g2pw(renamed(tmp_path, "char_descriptor.weight", "char_descriptoz.weight"))
    # descriptors that read the part-of-speech tag without the classifier that predicts it
    with pytest.raises(CheckpointError, match="read a part-of-speech tag but it has no pos_classifier"):
        g2pw_model.load_g2pw(renamed(tmp_path, "pos_classifier", "pos_classifiez"))
    # an input upstream feeds is missing
    with pytest.raises(CheckpointError, match="without 'phoneme_mask'"):
        g2pw_model.load_g2pw(renamed(tmp_path, "phoneme_mask", "phoneme_mast"))


if __name__ == "__main__":  # the pinned subprocess
    print(json.dumps(ours(Path(sys.argv[1]), Path(sys.argv[2]))))
