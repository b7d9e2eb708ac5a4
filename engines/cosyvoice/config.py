"""What a released CosyVoice yaml says, as our configs: which version it is, the flow's sizes, the sampler's
settings and the guidance rate (the LM's Qwen2 sizes are in CosyVoice-BlankEN/config.json, the vocoder's in the
`hift` section).

The released files: cosyvoice2.yaml (CausalMaskedDiffWithXvec, Qwen2LM, HiFTGenerator) and cosyvoice3.yaml
(CausalMaskedDiffWithDiT, CosyVoice3LM, CausalHiFTGenerator). A yaml naming other classes is not one of them.
"""

from __future__ import annotations

from mizuoto.core.errors import CheckpointError

from .conformer import EncoderConfig
from .dit import DiTConfig
from .flow import FlowConfig
from .hyperyaml import Node
from .ras import RasParams
from .unet import UNetConfig

FLOWS = {"cosyvoice.flow.flow.CausalMaskedDiffWithXvec": 2, "cosyvoice.flow.flow.CausalMaskedDiffWithDiT": 3}
LMS = {"cosyvoice.llm.llm.Qwen2LM": 2, "cosyvoice.llm.llm.CosyVoice3LM": 3}


def _section(doc: dict, key: str, what: str) -> Node:
    node = doc.get(key)
    if not isinstance(node, Node):
        raise CheckpointError(f"{what} has no `{key}:` model section: use cosyvoice2.yaml or cosyvoice3.yaml as "
                              "released")
    return node


def version(doc: dict, what: str = "the yaml") -> int:
    """2 or 3, from the flow's and the LM's classes (which must agree)."""
    flow, lm = _section(doc, "flow", what), _section(doc, "llm", what)
    if flow.target not in FLOWS or lm.target not in LMS:
        raise CheckpointError(f"{what} builds {flow.target} and {lm.target}, not CosyVoice 2's or 3's flow and LM: "
                              "this loader reads CosyVoice2-0.5B and Fun-CosyVoice3-0.5B")
    if FLOWS[flow.target] != LMS[lm.target]:
        raise CheckpointError(f"{what} mixes CosyVoice {LMS[lm.target]}'s LM with CosyVoice {FLOWS[flow.target]}'s "
                              "flow: use the yaml released with the model")
    return FLOWS[flow.target]


def _fields(node, what: str, *keys):
    try:
        return [node[k] for k in keys]
    except (KeyError, TypeError) as exc:
        raise CheckpointError(f"{what} lacks {exc}: use the yaml released with the model") from None


def flow_config(doc: dict, what: str = "the yaml") -> FlowConfig:
    v = version(doc, what)
    flow = doc["flow"]
    input_size, output_size, spk, vocab, ratio, look = _fields(
        flow, f"{what}'s flow", "input_size", "output_size", "spk_embed_dim", "vocab_size", "token_mel_ratio",
        "pre_lookahead_len")
    estimator = _fields(flow, f"{what}'s flow", "decoder")[0]
    estimator = _fields(estimator, f"{what}'s flow decoder", "estimator")[0]
    common = {"cfg_rate": guidance(doc, what), "input_size": input_size, "output_size": output_size,
              "spk_embed_dim": spk, "vocab_size": vocab,
              "token_mel_ratio": ratio, "pre_lookahead_len": look}
    if v == 2:
        enc = flow["encoder"]
        size, heads, units, blocks, chunk = _fields(enc, f"{what}'s encoder", "output_size", "attention_heads",
                                                    "linear_units", "num_blocks", "static_chunk_size")
        est = _fields(estimator, f"{what}'s estimator", "in_channels", "out_channels", "channels",
                      "attention_head_dim", "n_blocks", "num_mid_blocks", "num_heads", "static_chunk_size")
        return FlowConfig(2, **common, encoder=EncoderConfig(size, heads, units, blocks, static_chunk_size=chunk,
                                                             pre_lookahead=look),
                          unet=UNetConfig(est[0], est[1], tuple(est[2]), *est[3:]))
    channels = _fields(flow["pre_lookahead_layer"], f"{what}'s pre_lookahead_layer", "channels")[0]
    dim, depth, heads, dim_head, mult, mel, mu, spk_dim, chunk = _fields(
        estimator, f"{what}'s DiT", "dim", "depth", "heads", "dim_head", "ff_mult", "mel_dim", "mu_dim", "spk_dim",
        "static_chunk_size")
    return FlowConfig(3, **common, pre_lookahead_channels=channels,
                      dit=DiTConfig(dim, depth, heads, dim_head, mult, mel, mu, spk_dim, chunk))


def guidance(doc: dict, what: str = "the yaml") -> float:
    """inference_cfg_rate of the flow's CFM (0.7 in both releases)."""
    params = _fields(doc["flow"]["decoder"], f"{what}'s flow decoder", "cfm_params")[0]
    content = params.fields.get("content", params.fields) if isinstance(params, Node) else params
    return float(_fields(content, f"{what}'s cfm_params", "inference_cfg_rate")[0])


def ras_params(doc: dict, what: str = "the yaml") -> RasParams:
    sampling = _fields(_section(doc, "llm", what), f"{what}'s llm", "sampling")[0]
    if not isinstance(sampling, Node) or not sampling.target.endswith("ras_sampling"):
        raise CheckpointError(f"{what}'s LM samples with {getattr(sampling, 'target', sampling)}, not ras_sampling")
    top_p, top_k, win, tau = _fields(sampling, f"{what}'s sampling", "top_p", "top_k", "win_size", "tau_r")
    return RasParams(float(top_p), int(top_k), int(win), float(tau))
