"""CosyVoice 2 / 3 release folders at the released architectures, with random weights, for the benchmarks
(benchmarks/cosyvoice_vs_upstream.py --full-size / --memory) and the GPU check (scripts/cosyvoice_gpu_check.py).
Pure torch and Mizuoto: it runs in the project venv (no upstream package, no onnx, no onnxruntime) and in the
upstream oracle venv alike.

The sizes are the released ones (FunAudioLLM/CosyVoice @ace7c47, examples/libritts/cosyvoice2/conf/cosyvoice2.yaml
and cosyvoice3/conf/cosyvoice3.yaml; CosyVoice-BlankEN/config.json, Qwen2-0.5B):

    LM     Qwen2 0.5B: hidden 896, 24 layers, 14 heads over 2 key/value heads, intermediate 4864, rope theta 1e6,
           vocabulary 151936 (the text head tied, as released); CV2 Qwen2LM, CV3 CosyVoice3LM (200 stop rows)
    flow   CV2: the Conformer encoder 512 wide, 6 + 4 blocks, 8 heads, 2048 linear units, chunk 25; the Matcha U-Net
           at channels (256), n_blocks 4, 12 mid blocks, 8 heads x 64.  CV3: the pre-look-ahead layer (1024) and
           the DiT 1024 x 22, 16 heads x 64, ff_mult 2
    HiFT   base channels 512, upsample rates [8, 5, 3] (kernels [16, 11, 7]), istft 16 / 4, resblocks [3, 7, 11] x
           [1, 3, 5], source resblocks [7, 7, 11], F0 predictor 512 (CV3: the causal HiFT, conv_pre_look_right 4)
    S3     the speech tokenizers: n_state 1280, 20 heads, 6 blocks (v2) / 12 (v3), 128 mels
    CAM++  80 bins -> 192, growth 32, bottleneck 4, 128 initial channels (CosyVoice's campplus.onnx)

`tiny=True` gives the same folder at the parity sets' tiny sizes (a smoke test runs every code path in seconds).

Weights: every tensor drawn from its own seeded generator (scripts/parity/cosyvoice_weights.fill: nothing left at
upstream's zero inits, e.g. the DiT's AdaLN modulations; norm scales in [0.5, 1.5), biases small, weights at
1/sqrt(fan-in)); HiFT as the parity sets fill it (seedvc_weights.hift_state). The LM head is scaled by
DECODER_GAIN (peaked distributions, as the tiny sets) and its stop rows are raised so that a random LM ends a request
soon after min_len (2 x the text's tokens): CosyVoice 2 through its bias (row 6561), CosyVoice 3 (no bias) by scaling
its 200 stop rows (any of which ends a request, even before min_len, as upstream's sampling_ids masks only row
6561): at the full sizes CV2's end row is raised by 60 (the request ends exactly at min_len), CV3's rows are left
as drawn (about 2% a step: the count follows the seed). `stop=NEVER` instead makes every request run to max_len
(20 x the text's tokens: a chosen length, for the GPU check).

The ONNX files. `write_release` writes, by default, weights-only ONNX files: a graph holding each weight-bearing
node under the released files' node and initializer names (the S3 tokenizers: speech_tokenizer_v2.onnx's and
_v3.onnx's conventions, which mizuoto/nn/s3_tokenizer_weights.py reads; CAM++: its layers in forward order, every
BatchNorm kept, which mizuoto/nn/campplus_onnx.py reads), encoded here without the onnx package and read back with
our loaders to check every tensor. They are not runnable graphs: onnxruntime (upstream's frontend) cannot run them,
so the upstream benchmark passes real exports instead (`speech_tokenizer=`, `campplus=`; it makes them with
torch.onnx.export in the oracle venv, which has onnx).
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import numpy as np
import torch

REPO = Path(__file__).resolve().parents[1]
PARITY = REPO / "scripts" / "parity"
DATA = REPO / "tests" / "parity" / "data"
for _path in (PARITY, REPO):
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

import cosyvoice_release  # noqa: E402  (scripts/parity: pure torch and json)
import cosyvoice_weights  # noqa: E402
from seedvc_weights import campplus_state, hift_state, shapes_of  # noqa: E402

VERSIONS = ("cv2", "cv3")

# CosyVoice-BlankEN/config.json (Qwen2-0.5B), the fields the LM is built from
QWEN2_05B = {"hidden_size": 896, "intermediate_size": 4864, "num_hidden_layers": 24, "num_attention_heads": 14,
             "num_key_value_heads": 2, "max_position_embeddings": 32768, "rope_theta": 1000000.0,
             "rms_norm_eps": 1e-06, "vocab_size": 151936, "tie_word_embeddings": True, "use_sliding_window": False,
             "hidden_act": "silu", "torch_dtype": "bfloat16"}
QWEN_TINY = {**QWEN2_05B, "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
             "num_attention_heads": 4, "num_key_value_heads": 2, "torch_dtype": "float32"}

FLOW = {  # cosyvoice_release.yaml_text's `flow_configs`
    "encoder": {"attention_heads": 8, "linear_units": 2048, "num_blocks": 6, "static_chunk_size": 25},
    "unet": {"channels": [256], "attention_head_dim": 64, "n_blocks": 4, "num_mid_blocks": 12, "num_heads": 8},
    "dit": {"dim": 1024, "depth": 22, "heads": 16, "dim_head": 64, "ff_mult": 2, "static_chunk_size": 50},
    "lookahead": {"channels": 1024},
}
FLOW_TINY = {
    "encoder": {"attention_heads": 2, "linear_units": 64, "num_blocks": 1, "static_chunk_size": 25},
    "unet": {"channels": [32], "attention_head_dim": 16, "n_blocks": 1, "num_mid_blocks": 2, "num_heads": 2},
    "dit": {"dim": 64, "depth": 2, "heads": 2, "dim_head": 32, "ff_mult": 2, "static_chunk_size": 50},
    "lookahead": {"channels": 64},
}

HIFT = {"in_channels": 80, "base_channels": 512, "nb_harmonics": 8, "sampling_rate": 24000, "nsf_alpha": 0.1,
        "nsf_sigma": 0.003, "nsf_voiced_threshold": 10, "upsample_rates": [8, 5, 3],
        "upsample_kernel_sizes": [16, 11, 7], "istft_params": {"n_fft": 16, "hop_len": 4},
        "resblock_kernel_sizes": [3, 7, 11], "resblock_dilation_sizes": [[1, 3, 5], [1, 3, 5], [1, 3, 5]],
        "source_resblock_kernel_sizes": [7, 7, 11],
        "source_resblock_dilation_sizes": [[1, 3, 5], [1, 3, 5], [1, 3, 5]], "lrelu_slope": 0.1,
        "audio_limit": 0.99}
F0_PREDICTOR = {"num_class": 1, "in_channels": 80, "cond_channels": 512}
HIFT_POST_GAIN = 0.5  # conv_post's weight-norm gains x this (the parity sets' value)

S3 = {"v2": {"n_state": 1280, "n_head": 20, "n_layer": 6}, "v3": {"n_state": 1280, "n_head": 20, "n_layer": 12}}
S3_TINY = {"v2": {"n_state": 128, "n_head": 2, "n_layer": 2}, "v3": {"n_state": 64, "n_head": 1, "n_layer": 3}}
CAMPPLUS = {"feat_dim": 80, "embedding_size": 192}  # the other sizes at CAMPPlus's defaults, as released
CAMPPLUS_TINY = {"feat_dim": 80, "embedding_size": 192, "growth_rate": 4, "bn_size": 2, "init_channels": 8}

SEEDS = {"cv2": {"llm": 20_000, "flow": 21_000, "hift": 22_000, "s3": 23_000, "campplus": 24_000},
         "cv3": {"llm": 30_000, "flow": 31_000, "hift": 32_000, "s3": 33_000, "campplus": 34_000}}
DECODER_GAIN = cosyvoice_weights.DECODER_GAIN
# how far the stop rows are raised (see the module docstring); measured at the full sizes so that the benchmark's
# request ends a few tokens after min_len, and at the tiny sizes as the parity sets do it
STOP = {False: {"cv2": 60.0, "cv3": 1.0}, True: {"cv2": cosyvoice_weights.STOP_BIAS, "cv3": 1.0}}
# ... or never: CV2's end row lowered far below every other logit, CV3's 200 stop rows zeroed (logit 0 against the
# others' spread of about +-15: never in the nucleus, about 1e-4 of a full-softmax redraw): max_len tokens
NEVER = "never"
NEVER_STOP = {"cv2": -60.0, "cv3": 0.0}  # CV2: added to the bias of rows 6561..6563; CV3: the rows' scale


def sizes(version: str, tiny: bool = False) -> dict:
    """The sizes of a release: {"flow": yaml_text's flow_configs, "hift": its hift entry, "qwen": the Qwen2 config,
    "s3": the S3 tokenizer's, "campplus": CAM++'s}."""
    flow = FLOW_TINY if tiny else FLOW
    flow = {**flow, "dit": {**flow["dit"], "mel_dim": 80, "mu_dim": 80, "spk_dim": 80, "out_channels": 80}}
    hift = dict(HIFT)
    predictor = dict(F0_PREDICTOR)
    if tiny:
        hift.update(base_channels=16, nsf_voiced_threshold=50)
        predictor.update(cond_channels=12)
    if version == "cv3":
        hift["conv_pre_look_right"] = 4
    entry = {"class": "CausalHiFTGenerator" if version == "cv3" else "HiFTGenerator", "hift": hift,
             "f0_predictor": predictor}
    s3 = (S3_TINY if tiny else S3)["v" + version[2]]
    return {"flow": flow, "hift": entry, "qwen": QWEN_TINY if tiny else QWEN2_05B, "s3": s3,
            "campplus": CAMPPLUS_TINY if tiny else CAMPPLUS}


def yaml_for(version: str, tiny: bool = False) -> str:
    s = sizes(version, tiny)
    return cosyvoice_release.yaml_text(version, s["flow"], s["hift"], s["qwen"])


# ---------------------------------------------------------------------------------------------------------
# The state dicts, in upstream's names (our modules' names are upstream's: built on the meta device for the layout)


def _filled(layout: dict, seed: int) -> dict:
    """cosyvoice_weights.fill for every entry of {name: shape}, in sorted name order, entry i from seed + i."""
    return {name: cosyvoice_weights.fill(name, tuple(layout[name]), seed + i) for i, name in enumerate(sorted(layout))}


def _meta_layout(module: torch.nn.Module) -> tuple[dict, set]:
    state = module.state_dict()
    buffers = {name for name, _ in module.named_buffers() if name in state}
    return {k: tuple(v.shape) for k, v in state.items()}, buffers


def lm_state(version: str, qwen: dict, seed: int, stop: float | str) -> dict:
    """The LM's parameters; `stop` raises CV2's end row (bias) or scales CV3's 200 stop rows, NEVER lowers
    (CV2, all three of its stop rows) or zeroes (CV3) them."""
    from mizuoto.engines.cosyvoice import llm
    from mizuoto.nn.qwen import QwenConfig

    heads = qwen["num_attention_heads"]
    config = QwenConfig(qwen["hidden_size"], qwen["intermediate_size"], qwen["num_hidden_layers"], heads,
                        qwen["num_key_value_heads"], qwen["hidden_size"] // heads, qwen["rope_theta"],
                        qwen["rms_norm_eps"], qk_norm=False, qkv_bias=True, vocab_size=qwen["vocab_size"])
    with torch.device("meta"):
        model = llm.CosyVoiceLM(llm.LMConfig(int(version[2]), config))
    layout, buffers = _meta_layout(model)
    assert not buffers, f"the LM has persistent buffers {sorted(buffers)}; compute them here"
    state = _filled(layout, seed)
    state["llm_decoder.weight"] = state["llm_decoder.weight"] * DECODER_GAIN
    speech = model.config.speech_token_size
    if version == "cv2":
        rows = slice(speech, None) if stop == NEVER else slice(speech, speech + 1)
        state["llm_decoder.bias"][rows] += NEVER_STOP[version] if stop == NEVER else stop
    else:
        state["llm_decoder.weight"][speech:] *= NEVER_STOP[version] if stop == NEVER else stop
    state["llm.model.lm_head.weight"] = state["llm.model.model.embed_tokens.weight"]  # tied, as released
    return state


def flow_state(yaml: str, seed: int) -> dict:
    from mizuoto.engines.cosyvoice import config, flow, hyperyaml
    from mizuoto.nn.f5_dit import RotaryEmbedding

    flow_config = config.flow_config(hyperyaml.load(yaml, what="the yaml"))
    with torch.device("meta"):
        model = flow.Flow(flow_config)
    layout, buffers = _meta_layout(model)
    state = _filled({k: v for k, v in layout.items() if k not in buffers}, seed)
    for name in buffers:  # a flow.pt carries the DiT's rotary frequencies (x-transformers' persistent buffer)
        assert name.endswith("rotary_embed.inv_freq"), f"the flow has a buffer {name}; compute it here"
        state[name] = RotaryEmbedding(flow_config.dit.dim_head).inv_freq
    return state


def hift_config(entry: dict):
    from mizuoto.nn import hift, hift_causal

    section = {**entry["hift"], "f0_predictor": entry["f0_predictor"]}
    if entry["class"] == "CausalHiFTGenerator":
        return hift_causal.CausalHiFTConfig.from_cosyvoice(section)
    return hift.HiFTConfig.from_cosyvoice(section)


def hift_weights(entry: dict, seed: int) -> dict:
    from mizuoto.nn import hift

    return hift_state(hift.checkpoint_layout(hift_config(entry), "parametrized"), seed, HIFT_POST_GAIN)


def blank_en_weights(llm: dict) -> dict:
    """CosyVoice-BlankEN/model.safetensors as save_pretrained writes a Qwen2ForCausalLM with a tied head (no
    lm_head.weight), in bfloat16 as released: upstream's Qwen2Encoder loads it, then llm.pt overwrites it."""
    prefix = "llm.model.model."
    return {"model." + k[len(prefix):]: v.to(torch.bfloat16).contiguous() for k, v in llm.items()
            if k.startswith(prefix)}


# ---------------------------------------------------------------------------------------------------------
# Weights-only ONNX files (no onnx package): protobuf written by hand, the field numbers of onnx/onnx.proto


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _field(number: int, payload: bytes) -> bytes:  # a length-delimited field
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def _int_field(number: int, value: int) -> bytes:
    return _varint(number << 3) + _varint(value)


def _tensor_proto(name: str, array: np.ndarray) -> bytes:
    array = np.ascontiguousarray(array, dtype="<f4")
    dims = b"".join(_int_field(1, d) for d in array.shape)  # TensorProto.dims
    return dims + _int_field(2, 1) + _field(8, name.encode()) + _field(9, array.tobytes())  # FLOAT, name, raw_data


def _node_proto(op: str, name: str, inputs: list[str], outputs: list[str]) -> bytes:
    return (b"".join(_field(1, i.encode()) for i in inputs) + b"".join(_field(2, o.encode()) for o in outputs)
            + _field(3, name.encode()) + _field(4, op.encode()))


class Graph:
    """Nodes and initializers in order, written as one ModelProto."""

    def __init__(self, inputs: list[str]):
        self.inputs, self.nodes, self.initializers, self.count = inputs, [], [], 0

    def weight(self, name: str, value: torch.Tensor | np.ndarray) -> str:
        array = value.detach().cpu().float().numpy() if torch.is_tensor(value) else value
        self.initializers.append(_tensor_proto(name, array))
        return name

    def node(self, op: str, name: str, inputs: list[str]) -> str:
        self.count += 1
        output = f"{name}_output_{self.count}"
        self.nodes.append(_node_proto(op, name, inputs, [output]))
        return output

    def save(self, path: Path, output: str, opset: int) -> Path:
        values = b"".join(_field(11, _field(1, i.encode())) for i in self.inputs)
        values += _field(12, _field(1, output.encode()))
        graph = b"".join(_field(1, n) for n in self.nodes) + _field(2, b"mizuoto_weights_only") + b"".join(
            _field(5, t) for t in self.initializers) + values
        opset_id = _field(1, b"") + _int_field(2, opset)
        model = _int_field(1, 8) + _field(2, b"mizuoto") + _field(7, graph) + _field(8, opset_id)
        Path(path).write_bytes(model)
        return Path(path)


def s3_weights(config, seed: int) -> dict:
    """The S3 tokenizer's parameters in s3tokenizer's names, drawn as cosyvoice_weights.fill draws."""
    from mizuoto.nn.s3_tokenizer import S3Tokenizer

    with torch.device("meta"):
        layout, _ = _meta_layout(S3Tokenizer(config))
    return _filled(layout, seed)


def write_s3_onnx(path: Path, version: str, state: dict) -> Path:
    """speech_tokenizer_v2.onnx's or _v3.onnx's naming (see mizuoto/nn/s3_tokenizer_weights.py) for `state`."""
    g = Graph(["feats", "feats_length"])
    v2 = version == "v2"
    x = "feats"
    conv_names = iter(["onnx::Conv_2216", "onnx::Conv_2217", "onnx::Conv_2218", "onnx::Conv_2219"])
    for conv in ("conv1", "conv2"):
        w, b = state[f"encoder.{conv}.weight"], state[f"encoder.{conv}.bias"]
        names = (next(conv_names), next(conv_names)) if v2 else (f"{conv}.w", f"{conv}.b")
        x = g.node("Conv", f"/{conv}/Conv", [x, g.weight(names[0], w), g.weight(names[1], b)])
    blocks = sorted({int(k.split(".")[2]) for k in state if k.startswith("encoder.blocks.")})
    for n in blocks:
        p, key = f"/blocks.{n}", f"encoder.blocks.{n}"
        for ln, parts in (("attn_ln", ("attn/query", "attn/key", "attn/value", "fsmn", "attn/out")),
                          ("mlp_ln", ("mlp/mlp.0", "mlp/mlp.2"))):
            weight, bias = state[f"{key}.{ln}.weight"], state[f"{key}.{ln}.bias"]
            if v2:
                x = g.node("LayerNormalization", f"{p}/{ln}/LayerNormalization",
                           [x, g.weight(f"{p}/{ln}.w", weight), g.weight(f"{p}/{ln}.b", bias)])
            else:
                x = g.node("Mul", f"{p}/{ln}/Mul", [x, g.weight(f"{p}/{ln}.w", weight)])
                x = g.node("Add", f"{p}/{ln}/Add_1", [x, g.weight(f"{p}/{ln}.b", bias)])
            for part in parts:
                if part == "fsmn":
                    weight = g.weight(f"blocks.{n}.attn.fsmn_block.weight", state[f"{key}.attn.fsmn_block.weight"])
                    g.node("Conv", f"{p}/attn/fsmn_block/Conv", [x, weight])  # both files name it so
                    continue
                param = f"{key}.{part.replace('attn/', 'attn.').replace('mlp/mlp.', 'mlp.')}"
                y = g.node("MatMul", f"{p}/{part}/MatMul", [x, g.weight(f"{p}/{part}.w", state[f"{param}.weight"].t())])
                if f"{param}.bias" in state:
                    y = g.node("Add", f"{p}/{part}/Add", [g.weight(f"{p}/{part}.b", state[f"{param}.bias"]), y])
            x = y
    w = state["quantizer._codebook.project_down.weight"].t()
    y = g.node("MatMul", "/quantizer/project_in/MatMul", [x, g.weight("onnx::MatMul_2536" if v2 else "fsq.w", w)])
    y = g.node("Add", "/quantizer/project_in/Add",
               [y, g.weight("quantizer.project_in.bias", state["quantizer._codebook.project_down.bias"])])
    return g.save(path, y, 17 if v2 else 14)


def write_campplus_onnx(path: Path, model) -> Path:
    """CAM++'s weight-bearing nodes in forward order, every BatchNorm kept (reading its convolution's output, so
    campplus_onnx folds none), for campplus_onnx.load_campplus_onnx."""
    from mizuoto.nn.campplus_onnx import forward_slots

    g = Graph(["input"])
    modules = dict(model.named_modules())
    x = "input"
    for slot in forward_slots(model.config):
        m = modules[slot.path]
        if slot.kind == "conv":
            inputs = [x, g.weight(f"{slot.path}.weight", m.weight)]
            if m.bias is not None:
                inputs.append(g.weight(f"{slot.path}.bias", m.bias))
            x = g.node("Conv", slot.path, inputs)
        elif slot.kind == "bn":
            c = m.running_mean.shape[0]
            scale = m.weight if m.affine else torch.ones(c)
            shift = m.bias if m.affine else torch.zeros(c)
            x = g.node("BatchNormalization", slot.path, [
                x, g.weight(f"{slot.path}.scale", scale), g.weight(f"{slot.path}.shift", shift),
                g.weight(f"{slot.path}.mean", m.running_mean), g.weight(f"{slot.path}.var", m.running_var)])
        else:
            x = g.node("PRelu", slot.path, [x, g.weight(f"{slot.path}.slope", m.weight)])
    return g.save(path, x, 13)


def write_frontend(folder: Path, version: str, tiny: bool = False) -> tuple[Path, Path]:
    """Weights-only speech_tokenizer_v{2,3}.onnx and campplus.onnx under `folder`, each read back with our loaders
    and checked tensor for tensor. -> (speech tokenizer, campplus)."""
    from mizuoto.nn import campplus
    from mizuoto.nn.campplus_onnx import load_campplus_onnx
    from mizuoto.nn.s3_tokenizer import S3TokenizerConfig
    from mizuoto.nn.s3_tokenizer_weights import load_s3_tokenizer

    s = sizes(version, tiny)
    seeds = SEEDS[version]
    folder.mkdir(parents=True, exist_ok=True)
    kind = "v" + version[2]
    state = s3_weights(S3TokenizerConfig(**s["s3"]), seeds["s3"])
    s3_path = write_s3_onnx(folder / cosyvoice_release.TOKENIZER_ONNX[version], kind, state)
    back = load_s3_tokenizer(s3_path, kind).state_dict()
    assert back.keys() == state.keys() and all(torch.equal(back[k], state[k]) for k in state), "S3 tokenizer ONNX"
    config = campplus.CampplusConfig(**s["campplus"])
    with torch.device("meta"):
        shapes = shapes_of(campplus.CAMPPlus(config))
    model = campplus.build_campplus(campplus_state(shapes, seeds["campplus"]), config)
    cam_path = write_campplus_onnx(folder / "campplus.onnx", model)
    want, got = model.state_dict(), load_campplus_onnx(cam_path).state_dict()
    assert all(torch.equal(want[k], got[k]) for k in want if not k.endswith("num_batches_tracked")), "CAM++ ONNX"
    return s3_path, cam_path


# ---------------------------------------------------------------------------------------------------------
# The folder


def write_release(folder: Path, version: str, tiny: bool = False, *, speech_tokenizer: Path | None = None,
                  campplus: Path | None = None, blank_en_model: bool = False, stop: float | str | None = None
                  ) -> Path:
    """The release folder of `version` ("cv2" / "cv3") at the released (or `tiny`) sizes, random weights.
    `speech_tokenizer` / `campplus`: ONNX files to copy in (default: weights-only ones written here);
    `blank_en_model`: also CosyVoice-BlankEN/model.safetensors, which upstream's Qwen2Encoder reads; `stop`: the
    stop rows' raise (default STOP's; NEVER_STOP: every request runs to max_len = 20 x its text tokens)."""
    from safetensors.torch import save_file

    folder = Path(folder)
    s, seeds = sizes(version, tiny), SEEDS[version]
    yaml = yaml_for(version, tiny)
    if speech_tokenizer is None or campplus is None:
        made = write_frontend(folder.parent / f"{folder.name}_onnx", version, tiny)
        speech_tokenizer, campplus = speech_tokenizer or made[0], campplus or made[1]
    tokenizer = cosyvoice_release.tokenizer_folder(DATA, folder.parent / f"{folder.name}_tokenizer")
    stop = STOP[tiny][version] if stop is None else stop
    llm = lm_state(version, s["qwen"], seeds["llm"], stop)
    parts = {"yaml": yaml, "llm": llm, "flow": flow_state(yaml, seeds["flow"]),
             "hift": hift_weights(s["hift"], seeds["hift"]), "qwen": s["qwen"]}
    cosyvoice_release.write_release(folder, version, tokenizer_files=tokenizer, speech_tokenizer=speech_tokenizer,
                                    campplus=campplus, **parts)
    if blank_en_model:
        save_file(blank_en_weights(llm), str(folder / "CosyVoice-BlankEN" / "model.safetensors"),
                  metadata={"format": "pt"})
    (folder / "mizuoto_random_release.json").write_text(json.dumps(
        {"version": version, "tiny": tiny, "sizes": s, "seeds": seeds, "decoder_gain": DECODER_GAIN,
         "stop": stop}, indent=1))
    return folder


def checkpoint_bytes(folder: Path) -> dict:
    """Sizes of the release's files: llm.pt, flow.pt, hift.pt, their sum `checkpoints`, and every file `all`."""
    folder = Path(folder)
    out = {name: (folder / name).stat().st_size for name in ("llm.pt", "flow.pt", "hift.pt")}
    out["checkpoints"] = sum(out.values())
    out["all"] = sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())
    return out


# ---------------------------------------------------------------------------------------------------------
# Where a request's time goes


class Split:
    """Wall seconds per stage of our engine's request: the LM (model.speech_tokens), the flow (flow.inference)
    and HiFT (hift.inference), wrapped on one loaded model (instance attributes; `remove` puts them back); `cpu`
    the same in process CPU seconds (time.process_time: what a busy shared machine moves least). `sync` waits for
    the device before each clock read (for a GPU: the stages' own time, at the cost of the waits)."""

    def __init__(self, loaded, sync=None):
        self.model = loaded.model
        self.sync = sync or (lambda: None)
        self.seconds = {"lm": 0.0, "flow": 0.0, "hift": 0.0}
        self.cpu = dict(self.seconds)
        self.tokens = 0
        self.speech = []  # each fragment's speech tokens
        self._wrap(self.model, "speech_tokens", "lm")
        self._wrap(self.model.flow, "inference", "flow")
        self._wrap(self.model.hift, "inference", "hift")

    def _wrap(self, owner, attr, stage):
        import time

        original = getattr(owner, attr)

        def timed(*args, **kwargs):
            self.sync()
            start, cpu = time.perf_counter(), time.process_time()
            out = original(*args, **kwargs)
            self.sync()
            self.seconds[stage] += time.perf_counter() - start
            self.cpu[stage] += time.process_time() - cpu
            if stage == "lm":
                self.tokens += len(out)
                self.speech.append(list(out))
            return out

        setattr(owner, attr, timed)

    def reset(self) -> None:
        self.seconds = dict.fromkeys(self.seconds, 0.0)
        self.cpu = dict(self.seconds)
        self.tokens = 0
        self.speech = []

    def remove(self) -> None:
        for owner, attr in ((self.model, "speech_tokens"), (self.model.flow, "inference"),
                            (self.model.hift, "inference")):
            owner.__dict__.pop(attr, None)


def vm_kib(field: str = "VmHWM") -> int:
    """A /proc/self/status field in KiB (VmHWM: the peak resident set so far; VmRSS: now)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"no {field} in /proc/self/status")


def speech(seconds: float, rate: int = 24000, seed: int = 5) -> torch.Tensor:
    """A speech-like mono recording (a glide with vibrato, a few harmonics, a little noise), float32 in [-1, 1]."""
    g = torch.Generator().manual_seed(seed)
    t = torch.arange(int(rate * seconds), dtype=torch.float64) / rate
    f0 = 140.0 + 30.0 * torch.sin(2 * math.pi * 3.0 * t)
    phase = 2 * math.pi * torch.cumsum(f0, 0) / rate
    wave = sum(torch.sin(k * phase) / k for k in range(1, 6)) * (0.5 + 0.5 * torch.sin(2 * math.pi * 1.1 * t) ** 2)
    wave = 0.25 * wave + 0.01 * torch.randn(t.shape, generator=g, dtype=torch.float64)
    return wave.clamp(-1, 1).float()


__all__ = ["Split", "VERSIONS", "checkpoint_bytes", "sizes", "speech", "vm_kib", "write_frontend", "write_release",
           "yaml_for"]
