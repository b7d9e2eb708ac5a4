"""Loading the S3 speech tokenizers (mizuoto/nn/s3_tokenizer.py): the released ONNX files and s3tokenizer's state dicts.

CosyVoice ships `speech_tokenizer_v2.onnx` (CosyVoice 2) and `speech_tokenizer_v3.onnx` (CosyVoice 3) and runs them
through onnxruntime. s3tokenizer 0.3.0 (Apache-2.0) reads their weights into its PyTorch network with `onnx2torch`
(v2) and `onnx2torch_v3` (v3) in `utils.py`; this module reads the same tensors under the same rules (read, not
copied), through mizuoto/nn/onnx_weights.py (no onnx package). The files' initializers are not named after the
parameters: the rules go by the names of the graph's nodes that consume them.

speech_tokenizer_v2.onnx (`V2_NAMES` and `V2_RENAMES`), every initializer a node reads:
    - six initializers by their own names: `onnx::Conv_2216` / `_2217` conv1's weight and bias, `onnx::Conv_2218` /
      `_2219` conv2's, `quantizer.project_in.bias` and `onnx::MatMul_2536` (stored (in, out): transposed) the FSQ
      projection's;
    - a LayerNormalization node `/blocks.N/attn_ln/LayerNormalization` (or `mlp_ln`): its scale and bias inputs are
      `encoder.blocks.N.attn_ln.weight` and `.bias`;
    - any other node: named after the node, `/blocks.N/attn/query/MatMul` -> `encoder.blocks.N.attn.query.weight`
      ('/' -> '.', MatMul and Mul -> weight, Add and Add_1 -> bias, `mlp.mlp` -> `mlp`, `fsmn_block.Conv` ->
      `fsmn_block.weight`); MatMul weights are stored (in, out) and transposed (every 2-D tensor is).
speech_tokenizer_v3.onnx (`v3_state`), by node names, each tensor an initializer or a Constant node's value:
    - `/conv1/Conv`, `/conv2/Conv`: inputs 1 and 2 are the weight and bias;
    - `/blocks.N/...`: a LayerNorm decomposed into primitives (its `attn_ln/Mul` input 1 is the weight, the input of
      more than one element of an `attn_ln/Add` the bias; `mlp_ln` likewise), `attn/query/MatMul` input 1 the
      weight (transposed), the constant input of `attn/query/Add` the bias (query, key, value, out, `mlp/mlp.0`,
      `mlp/mlp.2`);
    - initializers named `...fsmn_block.weight` (with `encoder.` prepended) and `quantizer.project_in.bias`, and
      input 1 of any MatMul node whose name holds `quantizer` (transposed): the FSQ projection.
Where several tensors answer a name the graph's last wins, as in upstream's loop. Other initializers (shape
constants, the rotary tables of an exported graph) are not parameters and are not read.

s3tokenizer loads v3 files with strict=False, so a tensor the rules miss keeps its random initial value there; here a
file that lacks a tensor, or holds one of the wrong shape, is refused in one line naming it. The sizes come from the
tensors (`config_from_state`): n_mels and n_state from conv1, the blocks counted, n_head from the fixed head width.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import torch

from mizuoto.core.errors import CheckpointError, InputError
from mizuoto.nn.onnx_weights import OnnxModel, read_onnx
from mizuoto.nn.s3_tokenizer import HEAD_DIM, S3Tokenizer, S3TokenizerConfig

# speech_tokenizer_v2.onnx: the initializers onnx2torch knows by name
V2_NAMES = {"onnx::Conv_2216": "encoder.conv1.weight", "onnx::Conv_2217": "encoder.conv1.bias",
            "onnx::Conv_2218": "encoder.conv2.weight", "onnx::Conv_2219": "encoder.conv2.bias",
            "quantizer.project_in.bias": "quantizer._codebook.project_down.bias",
            "onnx::MatMul_2536": "quantizer._codebook.project_down.weight"}
# ... and how it turns a node name (its leading '/' dropped) into a parameter name, in this order
V2_RENAMES = (("/", "."), ("MatMul", "weight"), ("Add_1", "bias"), ("Mul", "weight"), ("Add", "bias"),
              ("mlp.mlp", "mlp"), ("fsmn_block.Conv", "fsmn_block.weight"))
# speech_tokenizer_v3.onnx: the block nodes onnx2torch_v3 reads: (part of the node name, its op or None, the parameter,
# which input: "ln_weight" input 1, "ln_bias" a constant input of more than one element, "weight" input 1 transposed,
# "bias" the first constant input). The first rule that matches a node decides, as upstream's chain of elifs.
V3_PROJECTIONS = (("attn/query", "attn.query"), ("attn/key", "attn.key"), ("attn/value", "attn.value"),
                  ("attn/out", "attn.out"), ("mlp/mlp.0", "mlp.0"), ("mlp/mlp.2", "mlp.2"))
V3_BLOCK_RULES = (("attn_ln/Mul", "Mul", "attn_ln.weight", "ln_weight"),
                  ("attn_ln/Add", "Add", "attn_ln.bias", "ln_bias"),
                  ("mlp_ln/Mul", "Mul", "mlp_ln.weight", "ln_weight"),
                  ("mlp_ln/Add", "Add", "mlp_ln.bias", "ln_bias"),
                  *(rule for part, name in V3_PROJECTIONS for rule in (
                      (f"{part}/MatMul", None, f"{name}.weight", "weight"),
                      (f"{part}/Add", None, f"{name}.bias", "bias"))))
VERSIONS = ("v2", "v3")
BLOCK_KEY = re.compile(r"^encoder\.blocks\.(\d+)\.")


# ---------------------------------------------------------------------------------------------------
# The released ONNX files' names


def _tensor(array: np.ndarray | None, transpose: bool) -> torch.Tensor | None:
    if array is None:
        return None
    tensor = torch.from_numpy(np.array(array))  # its own writable copy
    return tensor.t() if transpose and tensor.dim() <= 2 else tensor


def v2_state(graph: OnnxModel) -> dict[str, torch.Tensor]:
    """The parameters speech_tokenizer_v2.onnx's naming gives (onnx2torch's rules; see the module's docstring)."""
    found: dict[str, torch.Tensor] = {}
    for node in graph.nodes:
        for name in node.inputs:
            array = graph.initializers.get(name)
            if array is None:
                continue
            if name in V2_NAMES:
                found[V2_NAMES[name]] = _tensor(array, transpose=True)
            elif node.op_type == "LayerNormalization":
                prefix = node.name.replace("/LayerNormalization", "")
                for suffix, index in (("weight", 1), ("bias", 2)):
                    if index < len(node.inputs) and node.inputs[index] in graph.initializers:
                        found[f"{prefix}.{suffix}"] = _tensor(graph.initializers[node.inputs[index]], False)
            else:
                found[node.name] = _tensor(array, transpose=True)
    state = {}
    for key, tensor in found.items():
        if "quantizer" in key:
            if "project_down" in key:  # only V2_NAMES': the quantizer's node names are dropped
                state[key] = tensor
        elif "positional_embedding" in key or "conv" in key:
            state[key] = tensor  # kept as named: V2_NAMES' conv1 / conv2 (a node's name here fits no parameter)
        elif "blocks" in key:
            key = key[1:]
            for old, new in V2_RENAMES:
                key = key.replace(old, new)
            state[f"encoder.{key}"] = tensor
    return state


def _v3_array(graph: OnnxModel, name: str, constants: dict) -> np.ndarray | None:
    """An initializer, else a Constant node's `value` (onnx2torch_v3 reads biases from either)."""
    found = graph.initializers.get(name)
    return found if found is not None else constants.get(name)


def v3_state(graph: OnnxModel) -> dict[str, torch.Tensor | None]:
    """The parameters speech_tokenizer_v3.onnx's naming gives (onnx2torch_v3's rules; see the module's docstring)."""
    constants = {node.outputs[0]: node.attributes["value"] for node in graph.nodes
                 if node.op_type == "Constant" and isinstance(node.attributes.get("value"), np.ndarray)}

    def get(name, transpose=False):
        return _tensor(_v3_array(graph, name, constants), transpose)

    def first_constant(node):
        for name in node.inputs:
            tensor = get(name)
            if tensor is not None:
                return tensor
        return None

    state: dict[str, torch.Tensor | None] = {}
    for node in graph.nodes:
        if node.name in ("/conv1/Conv", "/conv2/Conv"):
            conv = node.name.split("/")[1]
            state[f"encoder.{conv}.weight"] = get(node.inputs[1])
            if len(node.inputs) > 2:
                state[f"encoder.{conv}.bias"] = get(node.inputs[2])
        elif node.name.startswith("/blocks."):
            prefix = f"encoder.blocks.{node.name.split('/')[1].split('.')[1]}"
            for part, op, key, source in V3_BLOCK_RULES:
                if part not in node.name or (op is not None and node.op_type != op):
                    continue
                second = node.inputs[1] if len(node.inputs) > 1 else ""
                if source == "ln_weight":
                    state[f"{prefix}.{key}"] = get(second)
                elif source == "ln_bias":
                    tensor = first_constant(node)
                    if tensor is not None and tensor.numel() > 1:  # not the epsilon's Add
                        state[f"{prefix}.{key}"] = tensor
                elif source == "weight":
                    state[f"{prefix}.{key}"] = get(second, transpose=True)
                else:
                    state[f"{prefix}.{key}"] = first_constant(node)
                break
    for name in graph.initializers:
        if "fsmn_block.weight" in name:
            state[f"encoder.{name}"] = get(name)
        if "quantizer.project_in.bias" in name:
            state["quantizer._codebook.project_down.bias"] = get(name)
    for node in graph.nodes:
        if "quantizer" in node.name and "MatMul" in node.op_type:
            second = node.inputs[1] if len(node.inputs) > 1 else ""
            state["quantizer._codebook.project_down.weight"] = get(second, transpose=True)
    return {k: v for k, v in state.items() if v is not None}


ONNX_RULES = {"v2": v2_state, "v3": v3_state}


def onnx_state(graph: OnnxModel, version: str | None = None, where: str = "the ONNX file") -> tuple[dict, str]:
    """(state dict in s3tokenizer's names, the naming used): the released file's tensors under the naming of
    `version` ("v2" or "v3"); None takes whichever naming gives a complete network (v2's first)."""
    if version is not None and version not in VERSIONS:
        raise InputError(f"S3 tokenizer ONNX naming {version!r} is unknown; use 'v2' or 'v3' (or None to detect)")
    tried = []
    for name in (version,) if version else VERSIONS:
        state = ONNX_RULES[name](graph)
        problem = _mismatch(state)
        if problem is None:
            return state, name
        tried.append((name, problem))
    name, problem = tried[0] if version else min(tried, key=lambda t: t[1][0])
    raise CheckpointError(f"{where} is not a CosyVoice speech tokenizer in speech_tokenizer_{name}.onnx's naming "
                          f"({problem[1]}); use the released speech_tokenizer_v2.onnx or _v3.onnx")


# ---------------------------------------------------------------------------------------------------
# Sizes, checks, building


def _read_config(state: dict) -> tuple[S3TokenizerConfig | None, str]:
    conv1 = state.get("encoder.conv1.weight")
    if conv1 is None or conv1.dim() != 3:
        return None, "no 3-D encoder.conv1.weight"
    n_state, n_mels = int(conv1.shape[0]), int(conv1.shape[1])
    blocks = {int(m.group(1)) for k in state if (m := BLOCK_KEY.match(k))}
    if not blocks:
        return None, "no encoder.blocks"
    if n_state % HEAD_DIM:
        return None, f"n_state {n_state} is not a multiple of the {HEAD_DIM}-wide heads"
    return S3TokenizerConfig(n_mels=n_mels, n_state=n_state, n_head=n_state // HEAD_DIM, n_layer=max(blocks) + 1), ""


def config_from_state(state: dict[str, torch.Tensor], where: str = "the S3 tokenizer weights") -> S3TokenizerConfig:
    """The sizes a state dict was built with: n_mels and n_state from conv1, the blocks counted, 64-wide heads."""
    config, problem = _read_config(state)
    if config is None:
        raise CheckpointError(f"{where} holds no S3 tokenizer ({problem}); check the file")
    return config


def _mismatch(state: dict, config: S3TokenizerConfig | None = None) -> tuple[int, str] | None:
    """None when `state` fits the network exactly; else (how many tensors are wrong, the first said in words)."""
    if config is None:
        config, problem = _read_config(state)
        if config is None:
            return 10 ** 6, problem
    with torch.device("meta"):
        expected = S3Tokenizer(config).state_dict()
    missing = [k for k in expected if k not in state]
    unexpected = [k for k in state if k not in expected]
    wrong = [f"{k} has shape {tuple(state[k].shape)}, expected {tuple(v.shape)}" for k, v in expected.items()
             if k in state and tuple(state[k].shape) != tuple(v.shape)]
    if not (missing or unexpected or wrong):
        return None
    first = f"it lacks {missing[0]}" if missing else wrong[0] if wrong else f"it has an unknown {unexpected[0]}"
    sizes = f"n_mels {config.n_mels}, n_state {config.n_state}, {config.n_layer} blocks"
    return len(missing) + len(unexpected) + len(wrong), (
        f"{first}; {len(missing)} missing, {len(wrong)} misshapen, {len(unexpected)} unknown for {sizes}")


def build_s3_tokenizer(state: dict[str, torch.Tensor], config: S3TokenizerConfig | None = None, device="cpu",
                       dtype: torch.dtype = torch.float32, where: str = "the S3 tokenizer weights") -> S3Tokenizer:
    """S3Tokenizer holding `state` (s3tokenizer's parameter names), eval mode, no gradients; `config` None reads
    the sizes from the tensors. The values are copied into fresh parameters, as upstream's load_state_dict does
    (nothing is drawn from the global generator). A missing, surplus or misshapen tensor is one CheckpointError."""
    config = config or config_from_state(state, where)
    problem = _mismatch(state, config)
    if problem is not None:
        raise CheckpointError(f"{where} does not fit the S3 tokenizer ({problem[1]}); check the file")
    with torch.device("meta"):
        model = S3Tokenizer(config)
    model.to_empty(device=device)
    model.load_state_dict(state, strict=True)
    return model.to(dtype=dtype).eval().requires_grad_(False)


def load_s3_tokenizer(path: str | Path, version: str | None = None, device="cpu",
                      dtype: torch.dtype = torch.float32) -> S3Tokenizer:
    """The speech tokenizer at `path`: a released `speech_tokenizer_v2.onnx` / `_v3.onnx` (its initializers read
    under that file's naming: `version` "v2" or "v3", None from the file name, else whichever fits), or a state
    dict in s3tokenizer's own names (.pt, .pth, .bin, .safetensors)."""
    from mizuoto.nn.tensor_files import read_checkpoint

    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"{path} is not a file; point at CosyVoice's speech_tokenizer_v2.onnx or _v3.onnx")
    if path.suffix == ".onnx":
        if version is None:
            version = next((v for v in VERSIONS if v in path.name.lower()), None)
        state, _ = onnx_state(read_onnx(path), version, where=str(path))
    else:
        state = read_checkpoint(path)
    return build_s3_tokenizer(state, None, device, dtype, where=str(path))
