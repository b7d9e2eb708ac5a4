"""CosyVoice's `campplus.onnx` (its speaker embedding, run by onnxruntime upstream) loaded into our CAM++.

CosyVoice 2 / 3 (FunAudioLLM/CosyVoice @ace7c47, cosyvoice/cli/frontend.py `_extract_spk_embedding`) feed the
mean-removed 80-bin Kaldi fbank of the 16 kHz prompt, (1, T, 80), to campplus.onnx and read 192 numbers. The file is
3D-Speaker's CAM++ (the network of mizuoto/nn/campplus.py) exported with torch.onnx.export. Its initializer names
depend on the exporter, so nothing here reads a name: the graph's weight-bearing nodes (Conv, BatchNormalization,
PRelu, and Gemm / MatMul for a 1x1 convolution) are walked in graph order, which is the order the exporter traced
the forward in, and matched one by one to our module's layers in our forward's execution order, every shape
checked. The sizes (feature bins, embedding size, growth rate, bottleneck, initial channels) are read from the
tensors first, as `config_from_state` does for a state dict.

Two forms of file are read:
- every BatchNorm kept as a BatchNormalization node (the dynamo exporter, or the TorchScript one with
  do_constant_folding=False): the values go into our BatchNorms as they are;
- the TorchScript exporter's eval-mode folding (do_constant_folding=True, `onnx::Conv_123` names): a BatchNorm that
  is the only reader of a convolution's output is folded into that convolution, which gains a bias. Our module
  then runs the folded convolution as the graph does: the convolution gets the graph's bias and the folded
  BatchNorm becomes an nn.Identity, so the arithmetic is the graph's (conv with bias), not a re-derived BatchNorm.
BatchNorms behind a concatenation (a dense layer's first one, a transit layer's) have several readers upstream and
stay BatchNormalization nodes in either form.

Anything else is refused in one line naming the file and what was expected.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import nn

from mizuoto.core.errors import CheckpointError, InputError
from mizuoto.nn.campplus import DENSE_BLOCKS, HEAD_BLOCKS, HEAD_CHANNELS, CAMPPlus, CampplusConfig
from mizuoto.nn.onnx_weights import Node, OnnxModel, read_onnx

WEIGHTED_OPS = ("Conv", "BatchNormalization", "PRelu", "Gemm", "MatMul")
BN_EPS = 1e-5  # upstream's BatchNorms' eps; ONNX stores it as the float32 nearest


@dataclass
class GraphOp:
    """One weight-bearing node of the graph: its kind ("conv", "bn", "prelu") and its constant inputs."""

    kind: str
    node: Node
    weight: np.ndarray | None = None  # conv (out, in, *kernel) / PReLU slopes / BN scale
    bias: np.ndarray | None = None  # conv bias / BN shift
    mean: np.ndarray | None = None
    var: np.ndarray | None = None
    eps: float = BN_EPS

    def describe(self) -> str:
        shape = None if self.weight is None else tuple(self.weight.shape)
        return f"{self.node.op_type} {self.node.name or self.node.outputs[0]!r} {shape}"


@dataclass
class Slot:
    """One layer of ours in forward order: a convolution (with the BatchNorm it may absorb), a BatchNorm or a
    PReLU, named by its module path."""

    kind: str
    path: str
    absorbs: str | None = None  # conv: the BatchNorm that is its output's only reader (foldable into it)


def graph_ops(graph: OnnxModel, where: str) -> list[GraphOp]:
    """The weight-bearing nodes in graph order, their constants resolved (initializers, Identity aliases, Constant
    nodes). A node whose weight is computed at run time is not one of CAM++'s layers: refused."""

    def const(node: Node, index: int, what: str, required: bool = True):
        if index >= len(node.inputs) or not node.inputs[index]:
            if required:
                raise CheckpointError(f"{where}: {node.op_type} {node.name!r} has no {what}; is this CosyVoice's "
                                      f"campplus.onnx?")
            return None
        value = graph.constant(node.inputs[index])
        if value is None:
            raise CheckpointError(f"{where}: the {what} of {node.op_type} {node.name!r} is computed, not stored; "
                                  f"expected CAM++'s exported weights (is this CosyVoice's campplus.onnx?)")
        if value.dtype != np.float32:
            raise CheckpointError(f"{where}: the {what} of {node.op_type} {node.name!r} is {value.dtype}, expected "
                                  f"float32")
        return value

    ops = []
    for node in graph.nodes:
        if node.op_type not in WEIGHTED_OPS:
            continue
        if node.op_type == "Conv":
            if node.attributes.get("group", 1) != 1:
                raise CheckpointError(f"{where}: Conv {node.name!r} is grouped; CAM++ has no grouped convolution")
            ops.append(GraphOp("conv", node, const(node, 1, "weight"), const(node, 2, "bias", required=False)))
        elif node.op_type == "BatchNormalization":
            ops.append(GraphOp("bn", node, const(node, 1, "scale"), const(node, 2, "shift"), const(node, 3, "mean"),
                               const(node, 4, "variance"), float(node.attributes.get("epsilon", BN_EPS))))
        elif node.op_type == "PRelu":
            ops.append(GraphOp("prelu", node, const(node, 1, "slope")))
        else:  # a 1x1 convolution written as a matrix product: weight as (out, in, 1)
            if graph.constant(node.inputs[1]) is None:
                continue  # a product of two computed tensors: not a layer (CAM++ has none, but do not guess)
            weight = const(node, 1, "weight")
            if weight.ndim != 2:
                raise CheckpointError(f"{where}: {node.op_type} {node.name!r} has a {weight.ndim}-D weight")
            if node.op_type == "MatMul" or not node.attributes.get("transB", 0):
                weight = weight.T  # (in, out) -> (out, in)
            if node.op_type == "Gemm" and (node.attributes.get("transA", 0) or
                                           node.attributes.get("alpha", 1.0) != 1.0 or
                                           node.attributes.get("beta", 1.0) != 1.0):
                raise CheckpointError(f"{where}: Gemm {node.name!r} scales or transposes its input; not CAM++'s")
            bias = const(node, 2, "bias", required=False) if node.op_type == "Gemm" else None
            ops.append(GraphOp("conv", node, np.ascontiguousarray(weight)[..., None], bias))
    return ops


def config_from_graph(ops: list[GraphOp], where: str) -> CampplusConfig:
    """CAM++'s sizes from the first convolutions' shapes and the last one's (the embedding)."""
    convs = [op.weight.shape for op in ops if op.kind == "conv"]
    one_d = [s for s in convs if len(s) == 3]
    head = convs[0] if convs else None
    if head is None or len(head) != 4 or head[1] != 1 or len(one_d) < 4:
        found = "no convolution" if head is None else f"a first convolution of shape {tuple(head)}"
        raise CheckpointError(f"{where}: expected CAM++'s 2-D head (a 3x3 convolution of one input channel) and its "
                              f"1-D trunk, found {found} and {len(one_d)} 1-D convolutions; is this CosyVoice's "
                              f"campplus.onnx?")
    if head[0] != HEAD_CHANNELS:
        raise CheckpointError(f"{where}: CAM++'s head has {HEAD_CHANNELS} channels, this graph's first convolution "
                              f"{head[0]}")
    tdnn, bottleneck, local, dense = one_d[0], one_d[1], one_d[2], one_d[-1]
    if tdnn[1] % HEAD_CHANNELS or bottleneck[0] % local[0] or len(tdnn) != 3 or tdnn[2] != 5:
        raise CheckpointError(f"{where}: the trunk's first convolutions {tuple(tdnn)}, {tuple(bottleneck)}, "
                              f"{tuple(local)} are not CAM++'s (a kernel-5 TDNN, a 1x1 bottleneck, a context "
                              f"convolution)")
    config_str = "batchnorm-prelu" if any(op.kind == "prelu" for op in ops) else "batchnorm-relu"
    try:
        return CampplusConfig(feat_dim=tdnn[1] // HEAD_CHANNELS * 8, embedding_size=dense[0],
                              growth_rate=local[0], bn_size=bottleneck[0] // local[0], init_channels=tdnn[0],
                              config_str=config_str)
    except InputError as error:
        raise CheckpointError(f"{where}: the tensors give CAM++ sizes it cannot have ({error})") from None


def forward_slots(config: CampplusConfig) -> list[Slot]:
    """Our layers in the order our forward runs them (the order a trace of upstream's forward records them)."""
    slots = [Slot("conv", "head.conv1", "head.bn1"), Slot("bn", "head.bn1")]
    for stage in range(1, len(HEAD_BLOCKS) + 1):
        for block in range(HEAD_BLOCKS[stage - 1]):
            p = f"head.layer{stage}.{block}"
            slots += [Slot("conv", f"{p}.conv1", f"{p}.bn1"), Slot("bn", f"{p}.bn1"),
                      Slot("conv", f"{p}.conv2", f"{p}.bn2"), Slot("bn", f"{p}.bn2")]
            if block == 0:  # the first block of a stage halves the bins: its residual has a 1x1 convolution
                slots += [Slot("conv", f"{p}.shortcut.0", f"{p}.shortcut.1"), Slot("bn", f"{p}.shortcut.1")]
    slots += [Slot("conv", "head.conv2", "head.bn2"), Slot("bn", "head.bn2")]

    def nonlinear(path: str) -> list[Slot]:
        parts = [Slot("bn", f"{path}.batchnorm")]
        return parts + ([Slot("prelu", f"{path}.prelu")] if "prelu" in config.config_str else [])

    slots += [Slot("conv", "xvector.tdnn.linear", "xvector.tdnn.nonlinear.batchnorm")]
    slots += nonlinear("xvector.tdnn.nonlinear")
    for b, (layers, _, _) in enumerate(DENSE_BLOCKS, start=1):
        for i in range(1, layers + 1):
            p = f"xvector.block{b}.tdnnd{i}"
            slots += nonlinear(f"{p}.nonlinear1")  # behind a concatenation: never folded
            slots += [Slot("conv", f"{p}.linear1", f"{p}.nonlinear2.batchnorm")] + nonlinear(f"{p}.nonlinear2")
            slots += [Slot("conv", f"{p}.cam_layer.linear_local"), Slot("conv", f"{p}.cam_layer.linear1"),
                      Slot("conv", f"{p}.cam_layer.linear2")]
        slots += nonlinear(f"xvector.transit{b}.nonlinear")
        # the last transit's output is read by out_nonlinear alone; the others' also by the next block's concat
        last = b == len(DENSE_BLOCKS)
        slots += [Slot("conv", f"xvector.transit{b}.linear", "xvector.out_nonlinear.batchnorm" if last else None)]
    slots += nonlinear("xvector.out_nonlinear")
    slots += [Slot("conv", "dense.linear", "dense.nonlinear.batchnorm"), Slot("bn", "dense.nonlinear.batchnorm")]
    return slots


RESHAPING_OPS = ("Squeeze", "Unsqueeze", "Reshape", "Flatten", "Identity")


def reads(graph: OnnxModel, reader: Node, node: Node) -> bool:
    """Whether `reader`'s first input is `node`'s output, directly or through reshapes (upstream's last layer
    squeezes its convolution's one frame away before its BatchNorm)."""
    name = reader.inputs[0] if reader.inputs else ""
    for _ in range(4):
        if name in node.outputs:
            return True
        producer = graph.producer(name)
        if producer is None or producer.op_type not in RESHAPING_OPS or not producer.inputs:
            return False
        name = producer.inputs[0]
    return False


def _tensor(array: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.array(array, dtype=np.float32, copy=True))


def campplus_from_graph(graph: OnnxModel, where: str = "campplus.onnx", device="cpu",
                        dtype: torch.dtype = torch.float32) -> CAMPPlus:
    """CAM++ holding the weights of an exported CAM++ graph, matched by structure; eval mode, no gradients."""
    if len(graph.inputs) != 1:
        raise CheckpointError(f"{where}: expected one input (features (1, frames, 80)), found {len(graph.inputs)} "
                              f"({', '.join(graph.inputs) or 'none'}); is this CosyVoice's campplus.onnx?")
    ops = graph_ops(graph, where)
    config = config_from_graph(ops, where)
    slots = forward_slots(config)
    with torch.device("meta"):  # no initialisation, no draws from the global generator
        model = CAMPPlus(config)
    modules = dict(model.named_modules())
    want = sum(s.kind == "conv" for s in slots)
    have = sum(op.kind == "conv" for op in ops)
    if want != have:
        raise CheckpointError(f"{where}: expected {want} convolutions in CAM++'s order, found {have} — is this "
                              f"CosyVoice's campplus.onnx?")

    values: dict[str, torch.Tensor] = {}  # parameter / buffer path -> value
    folded: list[str] = []  # BatchNorm paths that the graph folded into the convolution before them
    pos = 0

    def mismatch(slot: Slot, op: GraphOp | None, expected) -> CheckpointError:
        found = "the end of the graph" if op is None else op.describe()
        return CheckpointError(f"{where}: expected {slot.path} ({expected}) in CAM++'s order, found {found}; is "
                               f"this CosyVoice's campplus.onnx?")

    for index, slot in enumerate(slots):
        if slot.kind == "bn" and slot.path in folded:
            continue
        op = ops[pos] if pos < len(ops) else None
        module = modules[slot.path]
        if slot.kind == "conv":
            expected = tuple(module.weight.shape)
            if op is None or op.kind != "conv" or tuple(op.weight.shape) != expected:
                raise mismatch(slot, op, f"a convolution of weight {expected}")
            values[f"{slot.path}.weight"] = _tensor(op.weight)
            following = ops[pos + 1] if pos + 1 < len(ops) else None
            # the graph kept the BatchNorm after this convolution (the next weight-bearing node is one), or folded
            # it: then the convolution carries its bias, and only a BatchNorm that alone reads it can be folded
            kept = following is not None and following.kind == "bn" and reads(graph, following.node, op.node)
            fold = slot.absorbs is not None and slots[index + 1].path == slot.absorbs and not kept
            if op.bias is not None:
                if op.bias.shape != (expected[0],):
                    raise mismatch(slot, op, f"a bias of {expected[0]}")
                if module.bias is None:  # a folded BatchNorm's shift (or a bias the exporter added): run as is
                    module.bias = nn.Parameter(torch.empty(expected[0], device="meta"), requires_grad=False)
                values[f"{slot.path}.bias"] = _tensor(op.bias)
                if fold:
                    folded.append(slot.absorbs)
            elif module.bias is not None:
                raise mismatch(slot, op, f"a convolution with a bias of {expected[0]}")
            elif fold:  # no BatchNorm and no bias: nothing holds the BatchNorm's values
                raise mismatch(slots[index + 1], following, "a BatchNormalization after the convolution")
        elif slot.kind == "bn":
            channels = module.running_mean.shape[0]
            if op is None or op.kind != "bn" or any(a.shape != (channels,) for a in (op.weight, op.bias, op.mean,
                                                                                     op.var)):
                raise mismatch(slot, op, f"a BatchNormalization of {channels} channels")
            if module.affine:
                values[f"{slot.path}.weight"], values[f"{slot.path}.bias"] = _tensor(op.weight), _tensor(op.bias)
            elif not (np.all(op.weight == 1) and np.all(op.bias == 0)):  # upstream's last BatchNorm has no affine
                raise mismatch(slot, op, "a BatchNormalization without scale and shift (ones and zeros)")
            values[f"{slot.path}.running_mean"], values[f"{slot.path}.running_var"] = _tensor(op.mean), _tensor(op.var)
            values[f"{slot.path}.num_batches_tracked"] = torch.tensor(0)
            if np.float32(op.eps) != np.float32(BN_EPS):  # else upstream's double eps, as the exported model had
                module.eps = op.eps
        else:
            channels = module.weight.shape[0]
            if op is None or op.kind != "prelu" or op.weight.size != channels or \
                    any(d != 1 for d in op.weight.shape[1:]) or op.weight.shape[:1] != (channels,):
                raise mismatch(slot, op, f"a PReLU of {channels} slopes")
            values[f"{slot.path}.weight"] = _tensor(op.weight.reshape(channels))
        pos += 1
    if pos != len(ops):
        raise CheckpointError(f"{where}: {len(ops) - pos} weight-bearing nodes after CAM++'s last layer, the first "
                              f"{ops[pos].describe()}; is this CosyVoice's campplus.onnx?")

    for path in folded:  # the folded BatchNorm is the graph's: nothing left to compute
        parent, _, child = path.rpartition(".")
        setattr(modules[parent], child, nn.Identity())
    model.to_empty(device=device)
    state = model.state_dict(keep_vars=True)
    missing = [k for k in state if k not in values]
    if missing:  # every parameter and statistic comes from the graph; a gap is a bug of the walk above
        raise CheckpointError(f"{where}: no value for {missing[0]} ({len(missing)} in all)")
    with torch.no_grad():
        for key, tensor in state.items():
            tensor.copy_(values[key])
    return model.to(dtype=dtype).eval().requires_grad_(False)


def load_campplus_onnx(path: str | Path, device="cpu", dtype: torch.dtype = torch.float32) -> CAMPPlus:
    """CosyVoice's campplus.onnx as our CAM++ (no onnx or onnxruntime needed): feed it `campplus_features` of the
    16 kHz prompt, (1, frames, 80), for CosyVoice's 192-number speaker embedding."""
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"{path} is not a file; point at the model folder's campplus.onnx")
    return campplus_from_graph(read_onnx(path), where=str(path), device=device, dtype=dtype)
