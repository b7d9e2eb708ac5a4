#!/usr/bin/env python
"""References for loading CosyVoice's campplus.onnx into our CAM++ by structure (mizuoto/nn/campplus_onnx.py), for
tests/nn/test_campplus_onnx.py.

Usage, in the CosyVoice oracle venv (scripts/parity/cosyvoice_upstream_env.sh: torch 2.13.0, onnx, onnxruntime):
    python scripts/parity/campplus_onnx_references.py [OUTDIR]    # default tests/parity/data/nn/campplus_onnx
(restarts itself under the parity pins; one thread, oneDNN off)

CosyVoice (FunAudioLLM/CosyVoice ace7c47, cli/frontend.py `_extract_spk_embedding`) runs campplus.onnx, 3D-Speaker's
CAM++ exported with torch.onnx.export, through onnxruntime. The released file cannot be fetched here, so the writer
exports CAM++ itself: Mizuoto's CAMPPlus (mizuoto/nn/campplus.py, bitwise seed-vc 0.4.3's, which is 3D-Speaker's code:
the nn/campplus set) filled by seedvc_weights.campplus_state (every weight, BatchNorm scale, shift and running
statistic drawn: nothing is an identity), in the two forms torch's TorchScript exporter writes (onnxscript, which the
dynamo exporter needs, is not in the venv):
- "kept": do_constant_folding=False, every BatchNorm a BatchNormalization node, initializers in the parameters' names;
- "folded": do_constant_folding=True, the eval-mode peephole folding each BatchNorm that alone reads a convolution
  into it (`onnx::Conv_N` weight and a new bias), as a default export does.
Three models: a tiny one (16 bins, kept at opset 11 and folded at 13), a tiny PReLU one of odd widths (24 bins,
folded at opset 17) and the real size (80 bins -> 192, kept and folded at opset 13). The time axis is dynamic. During
the export only, the CAM layers' segment means are written as upstream writes them (avg_pool1d, then expand and
reshape: the same copies as our repeat_interleave, which opset 11 cannot export with an unknown length).

Writes into OUTDIR:
- references.safetensors / references.json: four speech-like waveforms (0.45 s, 1.6 s, 3.5 s, 7 s: 43 to 698 frames),
  CosyVoice's features of each (torchaudio's kaldi.fbank(num_mel_bins=80, dither=0, sample_frequency=16000) minus the
  mean over frames), the tiny models' inputs (the leading bins of those features); per model and form:
  onnxruntime's embedding with CosyVoice's session options (ORT_ENABLE_ALL, one intra-op thread, CPU), the exported
  torch model's embedding and, for the folded form, the graph's own arithmetic in torch (the torch model with each
  folded convolution given the graph's weight and bias and its BatchNorm removed): what our loader must reproduce
  bitwise. The ORT-vs-torch distances are recorded: per case, per form, and `ort_spread` (per form, the largest
  max |ORT - graph| / max |graph| over the inputs); `folding_gap`: how far the folded graph's arithmetic is from the
  unfolded model's.
- campplus_<model>_<form>.onnx: the tiny models' files as exported (under 2 MB each);
- campplus_real_<form>.skeleton.onnx: the real-size files without their large initializers (over SKELETON_ELEMENTS
  values); references.json records for each removed tensor its shape, sha256 and how it is rebuilt (`recipe`): a
  parameter of campplus_state (kept), or `fold_conv_bn` of a convolution and its BatchNorm (folded: the peephole's
  arithmetic, checked bitwise against the exported tensor here).
"""

import hashlib
import json
import math
import sys
from pathlib import Path

if __name__ == "__main__":  # the pins before torch is imported (the tests import this file for its helpers)
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from pinned import pin_process

    pin_process()

import torch  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
SKELETON_ELEMENTS = 4096  # real-size initializers with more values are rebuilt by the test, not stored
# name: (CampplusConfig arguments, seed of campplus_state, {form: opset}, stored whole)
MODELS = {
    "tiny": (dict(feat_dim=16, embedding_size=24, growth_rate=4, bn_size=2, init_channels=8), 41,
             {"kept": 11, "folded": 13}, True),
    "prelu": (dict(feat_dim=24, embedding_size=20, growth_rate=6, bn_size=3, init_channels=20,
                   config_str="batchnorm-prelu"), 42, {"folded": 17}, True),
    "real": (dict(feat_dim=80, embedding_size=192), 43, {"kept": 13, "folded": 13}, False),
}
WAVES = {"w045": (0.45, 150), "w160": (1.6, 120), "w350": (3.5, 105), "w700": (7.0, 180)}  # seconds, pitch


def campplus_config(name: str):
    from mizuoto.nn.campplus import CampplusConfig

    return CampplusConfig(**MODELS[name][0])


def seeded_model(name: str):
    """The model `name` with campplus_state's seeded values (eval mode)."""
    from seedvc_weights import campplus_state, shapes_of

    from mizuoto.nn.campplus import CAMPPlus, build_campplus

    config = campplus_config(name)
    with torch.device("meta"):
        shapes = shapes_of(CAMPPlus(config))
    return build_campplus(campplus_state(shapes, MODELS[name][1]), config)


def fold_conv_bn(weight: torch.Tensor, bn: dict) -> tuple[torch.Tensor, torch.Tensor]:
    """torch's ONNX eval peephole's folding of a BatchNorm (its weight, bias, running_mean, running_var, eps) into
    the bias-free convolution before it, in the same operations (the writer checks the bits against the export)."""
    scale = bn["weight"] / torch.sqrt(bn["running_var"] + bn["eps"])
    return weight * scale.reshape([-1] + [1] * (weight.dim() - 1)), bn["bias"] - bn["running_mean"] * scale


def rebuilt(recipe: dict, state: dict) -> torch.Tensor:
    """A removed initializer of a skeleton from its recipe and the model's seeded state dict."""
    if "state" in recipe:
        return state[recipe["state"]]
    conv, bn = recipe["fold"]
    stats = {k: state[f"{bn}.{k}"] for k in ("weight", "bias", "running_mean", "running_var")}
    weight, bias = fold_conv_bn(state[f"{conv}.weight"], {**stats, "eps": 1e-5})
    return weight if recipe["part"] == "weight" else bias


def speech(seconds: float, pitch: float, seed: int) -> torch.Tensor:
    """A speech-like glide with harmonics, an envelope and a little noise (float32, 16 kHz)."""
    g = torch.Generator().manual_seed(seed)
    t = torch.arange(int(16000 * seconds), dtype=torch.float64) / 16000
    f0 = pitch + 35 * torch.sin(2 * math.pi * 0.7 * t)
    phase = 2 * math.pi * torch.cumsum(f0, 0) / 16000
    envelope = 0.3 + 0.7 * torch.sin(2 * math.pi * 2.1 * t) ** 2
    voice = sum(torch.sin(k * phase) / k for k in range(1, 16)) * envelope
    return (0.2 * voice + 0.01 * torch.randn(len(t), generator=g, dtype=torch.float64)).float()


# ---------------------------------------------------------------------------------------------------------------
# the writer


def module_path(node_name: str) -> str:
    """The module a TorchScript-exported node belongs to, from its scope name: "/head/layer1/layer1.0/conv1/Conv"
    -> "head.layer1.0.conv1" (a Sequential's child appears as "<parent>.<index>")."""
    return ".".join(part.rsplit(".", 1)[-1] for part in node_name.strip("/").split("/")[:-1])


def folded_bn(conv: str) -> str:
    """The BatchNorm that alone reads convolution `conv` in CAM++ (the one the peephole folds into it)."""
    if conv.startswith("head."):  # conv1 -> bn1, conv2 -> bn2, shortcut.0 -> shortcut.1
        parent, _, child = conv.rpartition(".")
        return f"{parent}.1" if child == "0" else f"{parent}.{child.replace('conv', 'bn')}"
    if conv == "xvector.tdnn.linear":
        return "xvector.tdnn.nonlinear.batchnorm"
    if conv.endswith(".linear1") and "cam_layer" not in conv:
        return conv[:-len("linear1")] + "nonlinear2.batchnorm"
    if conv == "xvector.transit3.linear":
        return "xvector.out_nonlinear.batchnorm"
    raise AssertionError(f"the exporter folded a BatchNorm into {conv}, which none reads alone")


def upstream_segment_means(x, segment=100):
    """3D-Speaker's seg_pooling (DTDNN's CAMLayer): the same copies as campplus.segment_means, exportable at opset
    11 with a dynamic length."""
    import torch.nn.functional as F

    means = F.avg_pool1d(x, kernel_size=segment, stride=segment, ceil_mode=True)
    shape = means.shape
    return means.unsqueeze(-1).expand(*shape, segment).reshape(*shape[:-1], -1)[..., :x.shape[-1]]


def main():
    import copy

    import numpy as np
    import onnx
    import onnxruntime
    import torchaudio.compliance.kaldi as kaldi
    from onnx import numpy_helper
    from pinned import environment, write_references

    from mizuoto.nn import campplus

    out = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "tests/parity/data/nn/campplus_onnx"
    out.mkdir(parents=True, exist_ok=True)
    refs, cases = {}, {}

    def put(name, tensor):
        assert name not in refs, name
        refs[name] = tensor.detach().contiguous().numpy()
        return name

    features = {}
    for i, (name, (seconds, pitch)) in enumerate(WAVES.items()):
        wave = speech(seconds, pitch, 60 + i)
        feat = kaldi.fbank(wave[None], num_mel_bins=80, dither=0, sample_frequency=16000)  # CosyVoice's call
        feat = feat - feat.mean(dim=0, keepdim=True)
        features[name] = feat
        cases[f"input/{name}"] = {"wave": put(f"wave/{name}", wave), "features": put(f"features/{name}", feat),
                                  "frames": feat.shape[0]}
    assert min(f.shape[0] for f in features.values()) < 100 < 300 < max(f.shape[0] for f in features.values())

    option = onnxruntime.SessionOptions()  # CosyVoiceFrontEnd's
    option.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_ENABLE_ALL
    option.intra_op_num_threads = 1
    spread, folding_gap = {}, {}
    for name, (_, seed, forms, whole) in MODELS.items():
        model = seeded_model(name)
        feat_dim = model.config.feat_dim
        inputs = {w: f[None, :, :feat_dim].contiguous() for w, f in features.items()}
        with torch.inference_mode():
            torch_out = {w: model(x) for w, x in inputs.items()}
        for w, y in torch_out.items():
            put(f"{name}/torch/{w}", y)
        cases[name] = {"config": MODELS[name][0], "seed": seed, "forms": {}}
        for form, opset in forms.items():
            key = f"{name}/{form}"
            path = out / f"campplus_{name}_{form}.onnx"
            exported = campplus.segment_means
            campplus.segment_means = upstream_segment_means
            try:
                torch.onnx.export(model, (inputs["w160"],), str(path), dynamo=False, opset_version=opset,
                                  do_constant_folding=form == "folded", input_names=["input"],
                                  output_names=["embedding"], dynamic_axes={"input": {1: "frames"}})
            finally:
                campplus.segment_means = exported
            graph = onnx.load(str(path))
            onnx.checker.check_model(graph)
            initializers = {i.name: numpy_helper.to_array(i) for i in graph.graph.initializer}
            # the graph's own arithmetic in torch: folded convolutions with the graph's values, their BatchNorm gone
            as_graph = copy.deepcopy(model)
            modules = dict(as_graph.named_modules())
            state = model.state_dict()
            recipes, folds = {}, 0
            for node in graph.graph.node:
                if node.op_type != "Conv" or len(node.input) < 3 or node.input[2] in state:
                    continue
                conv = module_path(node.name)
                bn = folded_bn(conv)
                w, b = (torch.from_numpy(initializers[n].copy()) for n in node.input[1:3])
                stats = {k: state[f"{bn}.{k}"] for k in ("weight", "bias", "running_mean", "running_var")}
                fw, fb = fold_conv_bn(state[f"{conv}.weight"], {**stats, "eps": modules[bn].eps})
                assert torch.equal(fw, w) and torch.equal(fb, b), f"{key}: {conv} is not folded as fold_conv_bn"
                modules[conv].weight = torch.nn.Parameter(w, requires_grad=False)
                modules[conv].bias = torch.nn.Parameter(b, requires_grad=False)
                parent, _, child = bn.rpartition(".")
                setattr(modules[parent], child, torch.nn.Identity())
                recipes[node.input[1]] = {"fold": [conv, bn], "part": "weight"}
                recipes[node.input[2]] = {"fold": [conv, bn], "part": "bias"}
                folds += 1
            assert (folds > 0) == (form == "folded"), (key, folds)
            for init_name, array in initializers.items():
                if init_name in state:
                    assert np.array_equal(array, state[init_name].numpy()), (key, init_name)
                    recipes[init_name] = {"state": init_name}
            session = onnxruntime.InferenceSession(str(path), sess_options=option,
                                                   providers=["CPUExecutionProvider"])
            input_name = session.get_inputs()[0].name
            entry = {"opset": opset, "folded_convolutions": folds, "input": input_name,
                     "nodes": len(graph.graph.node), "initializers": len(initializers), "cases": {}}
            worst = relative = gap = 0.0
            for w, x in inputs.items():
                ort = session.run(None, {input_name: x.numpy()})[0]
                with torch.inference_mode():
                    mine = as_graph(x)
                graph_key = put(f"{key}/graph/{w}", mine) if form == "folded" else f"{name}/torch/{w}"
                d = float(np.abs(ort - refs[graph_key]).max())
                scale = float(np.abs(refs[graph_key]).max())  # the embeddings' sizes differ by model: relative
                entry["cases"][w] = {"ort": put(f"{key}/ort/{w}", torch.from_numpy(ort)), "graph": graph_key,
                                     "torch": f"{name}/torch/{w}", "ort_max_abs_diff": d,
                                     "ort_relative_diff": d / scale}
                worst, relative = max(worst, d), max(relative, d / scale)
                gap = max(gap, (mine - torch_out[w]).abs().max().item())
            if form == "kept":
                assert gap == 0.0, (key, gap)  # the kept graph is the torch model itself
            entry["ort_max_abs_diff"], entry["ort_relative_diff"] = worst, relative
            spread[key] = relative
            folding_gap[key] = gap
            if whole:
                entry["file"] = path.name
                assert path.stat().st_size < 2_000_000, (path, path.stat().st_size)
            else:  # the large initializers leave; the test rebuilds them from their recipes
                removed = {}
                for init in list(graph.graph.initializer):
                    array = initializers[init.name]
                    if array.size > SKELETON_ELEMENTS:
                        assert init.name in recipes, (key, init.name)
                        removed[init.name] = {"shape": list(array.shape), "recipe": recipes[init.name],
                                              "sha256": hashlib.sha256(array.tobytes()).hexdigest()}
                        graph.graph.initializer.remove(init)
                skeleton = out / f"campplus_{name}_{form}.skeleton.onnx"
                skeleton.write_bytes(graph.SerializeToString(deterministic=True))
                path.unlink()
                entry |= {"skeleton": skeleton.name, "removed": removed}
            cases[name]["forms"][form] = entry
    write_references(refs, out / "references.safetensors")
    info = {"cases": cases, "ort_spread": spread, "folding_gap": folding_gap,
            "environment": environment(["torch", "onnx", "onnxruntime", "numpy", "safetensors", "torchaudio"]),
            "note": "ours bitwise the graph in torch (`graph`); onnxruntime's within a tolerance above ort_spread"}
    (out / "references.json").write_text(json.dumps(info, indent=1, sort_keys=True) + "\n")
    size = sum(p.stat().st_size for p in out.iterdir())
    print(f"wrote {len(refs)} tensors, {size} bytes to {out}; ORT spread {spread}; folding gap {folding_gap}")


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))  # mizuoto's CAMPPlus (bitwise seed-vc's) is the exported model
    main()
