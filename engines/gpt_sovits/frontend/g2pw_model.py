"""G2PW, the polyphone classifier of GPT-SoVITS's Chinese front end, natively, with its weights read straight from
the released ONNX file (`G2PWModel/g2pW.onnx`).

Upstream (RVC-Boss/GPT-SoVITS @48b1a01, text/g2pw/onnx_api.py `predict`, dataset.py `prepare_onnx_input`) runs
that file through onnxruntime. The file was exported from g2pw's `module.G2PW` (GitYCC/g2pW, whose 0.1.2 release
has the same forward; scripts/export_onnx_model.py: TorchScript exporter, opset 12, constant folding) with the released
folder's config.py as g2pw's `load_config(use_default=True)` completes it: descriptors on the softmax, a bias
descriptor, a per-character one and a per-(character, predicted part of speech) one, and the part of speech from
a jointly trained classifier. Read, not copied. At inference its forward is:

    BERT(input_ids, token_type_ids, attention_mask) -> hidden (B, L, H)
    selected = hidden[row, position_ids]              the query character's token, one row per query
    pos = argmax(pos_classifier(selected))            the predicted part of speech (11 tags)
    affect = bias + char_descriptor[char] (+ pos_descriptor[pos]) + second_order_descriptor[char * tags + pos]
    weights = phoneme_mask * sigmoid(affect)          the character's possible labels, reweighted
    probs = clamp(exp(l - max l) * weights / sum(...), 1e-6, 1 - 1e-6)   with l = classifier(selected)

The BERT is mizuoto/nn/bert.py's (a plain BertModel: erf GELU, absolute positions, post-norm) with its handwritten
eager attention (nn/bert.eager_attention, transformers' eager ops as the file has them), not the `bert.attn` site:
the seed keeps G2PW's BERT handwritten.

Rows and queries: the exported graph picks the query tokens from the flattened hidden states at
`row * L + position`, with `row = arange(B)` broadcast against the N queries. So B == N (one sentence row per
query, predict()'s batch) and B == 1 (one row shared by N queries: upstream's `_predict_with_sentence_dedup`
feeds input_ids, token_type_ids and attention_mask with one row and the rest with N) both work, and give the same
probabilities as that one row repeated N times. Any other pair fails in onnxruntime (B != N, both above one) or
gives one result per row (B rows, one query), and a position outside its row reads a token of another row there;
here each is a one-line error.

The weights: torch's exporter names most initializers after the module's parameters, but a Linear applied to a
(B, L, H) tensor is exported as MatMul with the weight transposed and constant-folded into an anonymous initializer
(`onnx::MatMul_123`); its bias stays named, in the Add that follows. So each MatMul (or Gemm) weight is identified
through the graph: the bias its output is added to names the layer. Equal weights were merged by the exporter
into one initializer with Identity nodes naming the others; those aliases are followed. Sizes (layers, hidden,
labels, characters, tags) come from the weights' shapes, the heads from the attention's Reshape, the LayerNorm eps
from its constant.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import nn

from mizuoto.core.errors import CheckpointError, InputError
from mizuoto.nn.bert import Bert, BertConfig, eager_attention
from mizuoto.nn.onnx_weights import OnnxModel, read_onnx

from ..checkpoint import mismatch

INPUTS = ("input_ids", "token_type_ids", "attention_mask", "phoneme_mask", "char_ids", "position_ids")
EPS = 1e-6  # _weighted_softmax's clamp (forward's default eps; predict() never passes another)
# the conditional descriptors upstream can add, in the order its forward sums them
DESCRIPTORS = ("descriptor_bias", "char_descriptor", "pos_descriptor", "second_order_descriptor")
# variants of module.G2PW this file does not implement (none is in the released model): their weights' names
UNSUPPORTED = {"second_lowrank_descriptor": "char+pos-second_lowrank", "second_fm_char_emb": "char+pos-second_fm",
               "second_fm_pos_emb": "char+pos-second_fm", "char_fix_emb": "fix_mode", "char_pos_fix_emb": "fix_mode"}


@dataclass(frozen=True)
class G2PWConfig:
    bert: BertConfig
    num_labels: int
    num_chars: int
    num_pos_tags: int  # 0: no part-of-speech classifier (a model whose descriptors do not read the tag)
    descriptors: tuple[str, ...]  # which of DESCRIPTORS the model has


class G2PW(nn.Module):
    """module.G2PW at inference, the softmax-weighting variant (parameter names are upstream's)."""

    def __init__(self, config: G2PWConfig):
        super().__init__()
        self.config = config
        hidden, labels = config.bert.hidden_size, config.num_labels
        self.bert = Bert(config.bert, attend=eager_attention)
        self.classifier = nn.Linear(hidden, labels)
        rows = {"descriptor_bias": 1, "char_descriptor": config.num_chars, "pos_descriptor": config.num_pos_tags,
                "second_order_descriptor": config.num_chars * config.num_pos_tags}
        for name in config.descriptors:
            setattr(self, name, nn.Embedding(rows[name], labels))
        if config.num_pos_tags:
            self.pos_classifier = nn.Linear(hidden, config.num_pos_tags)

    def forward(self, input_ids: torch.Tensor, token_type_ids: torch.Tensor, attention_mask: torch.Tensor,
                phoneme_mask: torch.Tensor, char_ids: torch.Tensor, position_ids: torch.Tensor) -> torch.Tensor:
        """probs (N, num_labels) for N queries; the sentence inputs have N rows or one shared row."""
        self.check(input_ids, token_type_ids, attention_mask, phoneme_mask, char_ids, position_ids)
        hidden = self.bert(input_ids, attention_mask, token_type_ids).last_hidden_state
        rows = torch.arange(hidden.shape[0], device=hidden.device)  # (1,) broadcasts against the N queries
        selected = hidden[rows, position_ids]
        weights = phoneme_mask
        if self.config.descriptors:
            weights = phoneme_mask * torch.sigmoid(self.affect(selected, char_ids))
        return weighted_softmax(self.classifier(selected), weights)

    def affect(self, selected: torch.Tensor, char_ids: torch.Tensor) -> torch.Tensor:
        """The descriptors' sum, in upstream's order (bias, character, tag, character x tag)."""
        terms = []
        pos = None
        if self.config.num_pos_tags:
            pos = self.pos_classifier(selected).argmax(dim=-1)  # at inference the tag is predicted, never given
        for name in self.config.descriptors:
            if name == "descriptor_bias":
                ids = torch.zeros_like(char_ids)
            elif name == "char_descriptor":
                ids = char_ids
            elif name == "pos_descriptor":
                ids = pos
            else:
                ids = char_ids * self.config.num_pos_tags + pos
            terms.append(getattr(self, name)(ids))
        total = terms[0]
        for term in terms[1:]:
            total = total + term
        return total

    def check(self, input_ids, token_type_ids, attention_mask, phoneme_mask, char_ids, position_ids) -> None:
        """One-line errors for what the graph would reject or read wrongly (see the module docstring)."""
        if input_ids.dim() != 2 or input_ids.is_floating_point():
            raise InputError(f"G2PW takes input_ids as token ids (rows, tokens), got {tuple(input_ids.shape)} of "
                             f"{input_ids.dtype}")
        for name, value in (("token_type_ids", token_type_ids), ("attention_mask", attention_mask)):
            if value.shape != input_ids.shape:
                raise InputError(f"G2PW's {name} is {tuple(value.shape)}, not input_ids' {tuple(input_ids.shape)}")
        queries = char_ids.shape[0] if char_ids.dim() == 1 else -1
        if queries < 1 or position_ids.shape != char_ids.shape or char_ids.is_floating_point() \
                or position_ids.is_floating_point():
            raise InputError(f"G2PW takes char_ids and position_ids as integers (queries,), got "
                             f"{tuple(char_ids.shape)} and {tuple(position_ids.shape)}")
        if phoneme_mask.shape != (queries, self.config.num_labels):
            raise InputError(f"G2PW's phoneme_mask is {tuple(phoneme_mask.shape)}, not ({queries}, "
                             f"{self.config.num_labels}) (queries, labels)")
        rows, tokens = input_ids.shape
        if tokens > self.config.bert.max_position_embeddings:  # prepare_onnx_input cuts a text to fit
            raise InputError(f"G2PW takes at most {self.config.bert.max_position_embeddings} tokens a row, got "
                             f"{tokens}")
        if rows not in (1, queries):
            raise InputError(f"G2PW got {rows} sentence rows for {queries} queries: give one row per query, or one "
                             f"row that every query shares")
        if bool(((position_ids < 0) | (position_ids >= tokens)).any()):
            raise InputError(f"a G2PW query position is outside its row of {tokens} tokens")
        if bool(((char_ids < 0) | (char_ids >= self.config.num_chars)).any()):
            raise InputError(f"a G2PW char id is outside the model's {self.config.num_chars} polyphonic characters")


def weighted_softmax(logits: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """_weighted_softmax: a softmax whose terms are scaled by `weights` before normalising, then clamped."""
    scaled = torch.exp(logits - logits.max(dim=-1, keepdim=True).values) * weights
    return torch.clamp(scaled / scaled.sum(dim=-1, keepdim=True), min=EPS, max=1 - EPS)


# ---------------------------------------------------------------------------------------------------
# the ONNX file -> parameters


def linear_weights(model: OnnxModel, path: Path) -> dict[str, np.ndarray]:
    """{'<layer>.weight': (out, in)} for every MatMul / Gemm of the graph whose weight is an initializer, named
    after the bias added to its output (MatMul + Add) or given to it (Gemm's C)."""
    found: dict[str, np.ndarray] = {}
    for node in model.nodes:
        if node.op_type not in ("MatMul", "Gemm") or len(node.inputs) < 2:
            continue
        weight = model.weight(node.inputs[1])
        if weight is None:
            continue  # attention's MatMuls multiply two computed tensors
        if node.op_type == "Gemm":
            if node.attributes.get("transA", 0):
                raise CheckpointError(f"{path}: Gemm {node.name!r} transposes its input; not a G2PW export")
            bias = node.inputs[2] if len(node.inputs) > 2 else None
            matrix = weight if node.attributes.get("transB", 0) else weight.T
        else:
            adds = [n for n in model.consumers(node.outputs[0]) if n.op_type == "Add"]
            bias = next((i for n in adds for i in n.inputs if model.weight(i) is not None), None) \
                if len(adds) == 1 else None
            matrix = weight.T
        if bias is None or not bias.endswith(".bias"):
            raise CheckpointError(f"{path}: the weight of {node.op_type} {node.name or node.outputs[0]!r} has no named "
                                  f"bias to tell which layer it is; not a G2PW export this loader knows")
        name = bias.removesuffix("bias") + "weight"
        if name in found:
            raise CheckpointError(f"{path}: two MatMul weights add the bias {bias!r}; not a G2PW export")
        found[name] = matrix  # a transposed view: made contiguous once, when the module takes it
    return found


def state_from_onnx(model: OnnxModel, path: Path) -> dict[str, np.ndarray]:
    """Every parameter the graph holds, under upstream's names: named initializers and their Identity aliases,
    plus the MatMul / Gemm weights mapped through the graph."""
    state = {name: array for name, array in model.initializers.items() if array.dtype.kind == "f"}
    state.update({alias: model.initializers[target] for alias, target in model.aliases.items()
                  if model.initializers[target].dtype.kind == "f"})
    state.update(linear_weights(model, path))
    return state


def attention_heads(model: OnnxModel, state: dict, hidden: int, path: Path) -> int:
    """The heads of layer 0's attention, from the Reshape that splits its query into (..., heads, head_dim)."""
    query = state.get("bert.encoder.layer.0.attention.self.query.weight")
    for node in model.nodes:
        if node.op_type != "Add" or "bert.encoder.layer.0.attention.self.query.bias" not in node.inputs:
            continue
        for reshape in model.consumers(node.outputs[0]):
            if reshape.op_type != "Reshape" or len(reshape.inputs) < 2:
                continue
            shape = model.constant(reshape.inputs[1])
            if shape is None:  # built at run time: a Concat of the batch dims and constant (heads, head_dim)
                concat = model.producer(reshape.inputs[1])
                parts = [model.constant(i) for i in concat.inputs] if concat and concat.op_type == "Concat" else []
                shape = np.concatenate([p.reshape(-1) for p in parts[-2:]]) \
                    if len(parts) >= 2 and all(p is not None for p in parts[-2:]) else None
            if shape is not None and shape.size >= 2:
                heads, size = int(shape.reshape(-1)[-2]), int(shape.reshape(-1)[-1])
                if heads > 0 and heads * size == hidden:
                    return heads
    raise CheckpointError(f"{path}: cannot read the number of attention heads from the graph (query "
                          f"{'found' if query is not None else 'missing'}); not a G2PW export this loader knows")


def layer_norm_eps(model: OnnxModel, path: Path) -> float:
    """The embeddings' LayerNorm epsilon: a LayerNormalization's attribute, or the constant added to the variance
    before the Sqrt of the decomposed form (opset < 17: x - mean, / sqrt(mean(d ** 2) + eps), * weight + bias)."""
    for node in model.consumers("bert.embeddings.LayerNorm.weight"):
        if node.op_type == "LayerNormalization":
            return float(node.attributes.get("epsilon", 1e-5))
        if node.op_type == "Mul":
            div = next((model.producer(i) for i in node.inputs if model.producer(i) is not None), None)
            sqrt = model.producer(div.inputs[1]) if div is not None and div.op_type == "Div" else None
            add = model.producer(sqrt.inputs[0]) if sqrt is not None and sqrt.op_type == "Sqrt" else None
            if add is not None and add.op_type == "Add":
                value = next((model.constant(i) for i in add.inputs if model.constant(i) is not None), None)
                if value is not None and value.size == 1:  # the float32 the exporter wrote, as its author wrote it
                    return float(str(np.float32(value.reshape(()))))
    raise CheckpointError(f"{path}: cannot find the embeddings' LayerNorm epsilon in the graph; not a G2PW export "
                          f"this loader knows")


def config_from(model: OnnxModel, state: dict, path: Path) -> G2PWConfig:
    """The sizes, from the weights' shapes and the graph."""
    needed = ("bert.embeddings.word_embeddings.weight", "bert.embeddings.position_embeddings.weight",
              "bert.embeddings.token_type_embeddings.weight", "classifier.weight", "char_descriptor.weight",
              "bert.encoder.layer.0.intermediate.dense.weight")
    missing = [n for n in needed if n not in state]
    if missing:
        raise CheckpointError(f"{path} is an ONNX model but not G2PW's (no {missing[0]}); G2PWModel/ needs the "
                              f"g2pW.onnx of G2PWModel_1.1")
    for name, option in UNSUPPORTED.items():
        if any(k.startswith(name + ".") or k == name for k in state):
            raise CheckpointError(f"{path}: this G2PW was trained with {option!r}, which only the released model's "
                                  f"variant (softmax descriptors: bias, character, character x tag) is ported for")
    vocab, hidden = state["bert.embeddings.word_embeddings.weight"].shape
    layers = 0
    while f"bert.encoder.layer.{layers}.attention.self.query.weight" in state:
        layers += 1
    eps = layer_norm_eps(model, path)
    if not any(n.op_type == "Erf" for n in model.nodes):
        raise CheckpointError(f"{path}: its BERT's activation is not erf GELU; not a G2PW export this loader knows")
    bert = BertConfig(vocab_size=vocab, hidden_size=hidden, num_hidden_layers=layers,
                      num_attention_heads=attention_heads(model, state, hidden, path),
                      intermediate_size=state["bert.encoder.layer.0.intermediate.dense.weight"].shape[0],
                      max_position_embeddings=state["bert.embeddings.position_embeddings.weight"].shape[0],
                      type_vocab_size=state["bert.embeddings.token_type_embeddings.weight"].shape[0],
                      layer_norm_eps=eps)
    labels = state["classifier.weight"].shape[0]
    descriptors = tuple(n for n in DESCRIPTORS if f"{n}.weight" in state)
    widths = {n: state[f"{n}.weight"].shape[-1] for n in descriptors}
    if any(w != labels for w in widths.values()):
        raise CheckpointError(f"{path}: its descriptors are {widths} wide, not the {labels} labels (a G2PW that "
                              f"applies them to the BERT embedding is not supported)")
    tags = state["pos_classifier.weight"].shape[0] if "pos_classifier.weight" in state else 0
    if not tags and {"pos_descriptor", "second_order_descriptor"} & set(descriptors):
        raise CheckpointError(f"{path}: its descriptors read a part-of-speech tag but it has no pos_classifier")
    return G2PWConfig(bert, labels, state["char_descriptor.weight"].shape[0], tags, descriptors)


def load_g2pw(onnx_path: str | Path, device="cpu", dtype: torch.dtype = torch.float32) -> G2PW:
    """G2PW from its ONNX file, in eval mode: every parameter mapped from the graph, at its shape, and every
    float weight of the graph used (a weight left over means a structure this port does not compute)."""
    path = Path(onnx_path)
    model = read_onnx(path)
    absent = [name for name in INPUTS if name not in model.inputs]
    if absent:
        raise CheckpointError(f"{path} is an ONNX model but not G2PW's: its inputs are {model.inputs}, without "
                              f"{absent[0]!r}")
    state = state_from_onnx(model, path)
    config = config_from(model, state, path)
    with torch.device("meta"):  # shapes only: the weights come from the file, not from an initialisation
        g2pw = G2PW(config)
    expected = g2pw.state_dict()
    problem = mismatch(expected, state)
    if problem:
        raise CheckpointError(f"{path}: its weights do not make a G2PW of its own sizes ({problem}); download "
                              f"G2PWModel again")
    unused = sorted(k for k in state if k not in expected and k.endswith((".weight", ".bias")))
    if unused:
        raise CheckpointError(f"{path}: weights this port does not compute ({unused[:3]}); not the G2PW variant "
                              f"GPT-SoVITS ships")
    # the file's arrays become the parameters: copied only where a MatMul weight is transposed, or where the
    # exporter merged equal weights into one array (each parameter keeps storage of its own)
    tensors, taken = {}, set()
    for name in expected:
        array = np.ascontiguousarray(state.pop(name), dtype=np.float32)
        tensors[name] = torch.from_numpy(array.copy() if id(array) in taken else array)
        taken.add(id(array))
    g2pw.load_state_dict(tensors, assign=True)
    return g2pw.to(device=device, dtype=dtype).eval()
