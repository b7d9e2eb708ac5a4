"""A tiny G2PW exported to ONNX the way the released `G2PWModel_1.1/g2pW.onnx` was, for tests of the native port
(engines/gpt_sovits/frontend/g2pw_model.py) and of GPT-SoVITS's Chinese front end. Runs in the upstream
environment (scripts/parity/gpt_sovits_upstream_env.sh: g2pw 0.1.2, transformers 4.57.3, torch 2.13.0):

    sys.path.insert(0, "scripts/parity"); from gpt_sovits_g2pw_tiny import export_tiny_g2pw
    model = export_tiny_g2pw(folder / "g2pW.onnx", vocab_size=..., labels=..., chars=...)

The network is g2pw 0.1.2's own `module.G2PW` (GitYCC/g2pW; upstream's text/g2pw/onnx_api.py at RVC-Boss/GPT-SoVITS
@48b1a01 runs the file onnxruntime reads), built with a tiny BertConfig and the released folder's config.py as
g2pw's `utils.load_config(use_default=True)` completes it. Its values, as the released folder has them (a copy is
in fishaudio/Bert-VITS2's g2pW/config.py; GitYCC/g2pW's configs/config_cpp.py trained it): model_source
'bert-base-chinese', window_size 32, use_mask, use_conditional with param_conditional {bias, char-linear,
char+pos-second: True; pos-linear: False}, use_pos with param_pos {weight 0.1, pos_joint_training: True}. The file
has no 'affect_location', so load_config's default, 'softmax', applies (the descriptors reweight the softmax; the
descriptors' width is then the label count, which is what a loader can check), and no use_focal (False).

The export is GitYCC/g2pW's scripts/export_onnx_model.py's (read, not copied): torch's TorchScript exporter
(`dynamo=False`), opset 12, constant folding, the six inputs predict() feeds, output `probs`, dynamic batch and
sequence axes. As then, BERT's attention is the eager one (matmul, scale, mask, softmax: what transformers had in
2022; its sdpa attention would need opset 14). Constant folding transposes every Linear applied to (B, L, H) into
an anonymous MatMul initializer (`onnx::MatMul_<n>`), the situation the loader must map through the graph; and
the exporter merges initializers of equal value (zero biases, LayerNorm ones) into one with Identity aliases, so
every parameter is re-randomised from `seed` first (otherwise the file would hide whether each lands right).
"""

from __future__ import annotations

import warnings
from pathlib import Path

POS_TAGS = ("UNK", "A", "C", "D", "I", "N", "P", "T", "V", "DE", "SHI")  # g2pw's TextDataset.POS_TAGS
INPUT_NAMES = ("input_ids", "token_type_ids", "attention_mask", "phoneme_mask", "char_ids", "position_ids")
OPSET = 12  # the released export's (scripts/export_onnx_model.py)
DYNAMIC_AXES = {"input_ids": [0, 1], "token_type_ids": [0, 1], "attention_mask": [0, 1], "phoneme_mask": [0],
                "char_ids": [0], "position_ids": [0], "probs": [0]}

CONFIG_PY = """\
# G2PW model config, as G2PWModel_1.1's config.py sets it (read by g2pw's utils.load_config(use_default=True),
# which adds what is missing: param_conditional['affect_location'] = 'softmax', use_focal = False, ...)
manual_seed = 1313
model_source = {model_source!r}
window_size = 32
num_workers = 2
use_mask = True
use_conditional = True
param_conditional = {{
    'bias': True,
    'char-linear': True,
    'pos-linear': False,
    'char+pos-second': True,
}}

batch_size = 256
use_pos = True
param_pos = {{
    'weight': 0.1,
    'pos_joint_training': True,
}}
"""


def write_config(path: Path, model_source: str = "bert-base-chinese", extra: dict | None = None) -> Path:
    """The folder's config.py; `extra` adds keys to param_conditional (a variant the port must refuse)."""
    text = CONFIG_PY.format(model_source=model_source)
    if extra:
        text += f"param_conditional.update({extra!r})\n"
    path.write_text(text, encoding="utf-8")
    return path


def randomise(model, seed: int) -> None:
    """Every parameter drawn from `seed` (sorted by name, so the draw does not depend on construction order):
    matrices at unit gain, embeddings and descriptors at unit scale, LayerNorm gains around 1, small biases;
    the classifier a little sharper, so that the predictions are clear-cut (their top-2 gaps are far above the
    float differences between runtimes)."""
    import torch

    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in sorted(model.named_parameters()):
            if "LayerNorm.weight" in name:
                p.copy_(torch.rand(p.shape, generator=g) + 0.5)
            elif name.endswith("bias") and "descriptor" not in name:
                p.copy_(torch.randn(p.shape, generator=g) * 0.1)
            elif "embeddings" in name or "descriptor" in name:
                p.copy_(torch.randn(p.shape, generator=g))
            else:
                gain = 3.0 if name.startswith("classifier") else 1.0
                p.copy_(torch.randn(p.shape, generator=g) * gain / p.shape[-1] ** 0.5)


def build_g2pw(config_path: Path, *, vocab_size: int, labels, chars, pos_tags=POS_TAGS, seed: int = 0,
               hidden: int = 32, layers: int = 2, heads: int = 2, intermediate: int | None = None,
               max_positions: int = 512, attention: str = "eager"):
    """g2pw's module.G2PW for the config at `config_path` (as upstream's export builds it) with a tiny BERT and
    seeded random weights, in eval mode."""
    import transformers
    from g2pw.module import G2PW
    from g2pw.utils import load_config

    config = load_config(str(config_path), use_default=True)
    bert = transformers.BertConfig(vocab_size=vocab_size, hidden_size=hidden, num_hidden_layers=layers,
                                   num_attention_heads=heads, intermediate_size=intermediate or hidden * 3 // 2,
                                   max_position_embeddings=max_positions, attn_implementation=attention)
    model = G2PW(bert, list(labels), list(chars), list(pos_tags), use_conditional=config.use_conditional,
                 param_conditional=config.param_conditional, use_focal=config.use_focal,
                 param_focal=config.param_focal, use_pos=config.use_pos, param_pos=config.param_pos)
    randomise(model, seed)
    return model.eval()


def six_inputs(model):
    """`model` whose forward takes exactly predict()'s six inputs: torch's exporter otherwise appends forward's
    defaults (pos_ids, label_ids, eps) and makes `eps` a graph input that upstream never feeds."""
    plain = type(model).forward

    def forward(input_ids, token_type_ids, attention_mask, phoneme_mask, char_ids, position_ids):
        return plain(model, input_ids, token_type_ids, attention_mask, phoneme_mask, char_ids, position_ids)

    model.forward = forward
    return model


def export(model, onnx_path: Path) -> Path:
    """torch.onnx.export as the released file was made, from a one-query dummy batch (upstream's was '重要')."""
    import torch

    labels = model.classifier.out_features
    dummy = (torch.tensor([[2, 4, 4, 3]]), torch.zeros(1, 4, dtype=torch.long), torch.ones(1, 4, dtype=torch.long),
             torch.ones(1, labels), torch.tensor([0]), torch.tensor([1]))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # dynamic axes given as lists, the legacy exporter's deprecation
        torch.onnx.export(six_inputs(model), dummy, str(onnx_path), export_params=True, opset_version=OPSET,
                          do_constant_folding=True, input_names=list(INPUT_NAMES), output_names=["probs"],
                          dynamic_axes=DYNAMIC_AXES, dynamo=False)
    return onnx_path


def export_tiny_g2pw(onnx_path, *, vocab_size: int, labels, chars, pos_tags=POS_TAGS, seed: int = 0,
                     hidden: int = 32, layers: int = 2, heads: int = 2, intermediate: int | None = None,
                     max_positions: int = 512, model_source: str = "bert-base-chinese", extra_conditional=None):
    """Write `onnx_path` (a tiny G2PW, as G2PWModel's g2pW.onnx) and config.py beside it; return the torch model
    it was exported from (eval mode, eager attention). `labels` and `chars` are what the folder's
    POLYPHONIC_CHARS.txt gives (dataset.get_phoneme_labels: sorted labels; sorted characters); the BERT's
    vocabulary is the tokenizer's (`vocab_size` rows). `extra_conditional` switches on a variant of the network
    (e.g. {'char+pos-second': False, 'char+pos-second_lowrank': True, 'lowrank_size': 4})."""
    onnx_path = Path(onnx_path)
    onnx_path.parent.mkdir(parents=True, exist_ok=True)
    config = write_config(onnx_path.parent / "config.py", model_source, extra_conditional)
    model = build_g2pw(config, vocab_size=vocab_size, labels=labels, chars=chars, pos_tags=pos_tags, seed=seed,
                       hidden=hidden, layers=layers, heads=heads, intermediate=intermediate,
                       max_positions=max_positions)
    export(model, onnx_path)
    del model.forward  # the class's forward again, for the caller
    return model
