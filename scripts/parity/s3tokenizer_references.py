#!/usr/bin/env python
"""Reference outputs of upstream's S3 speech tokenizers (s3tokenizer 0.3.0: S3TokenizerV2 / S3TokenizerV3, CosyVoice's
speech_tokenizer_v2.onnx / _v3.onnx networks), for tests/nn/test_s3_tokenizer.py.

Usage, in the CosyVoice oracle venv (scripts/parity/cosyvoice_upstream_env.sh, which installs s3tokenizer 0.3.0,
onnx and onnxruntime):
    python scripts/parity/s3tokenizer_references.py [OUTDIR]    # default tests/parity/data/nn/s3tokenizer
(restarts itself under the parity pins; one thread, oneDNN off)

Writes into OUTDIR:
- weights_v2.safetensors, weights_v3.safetensors: two tiny upstream models in s3tokenizer's own parameter names,
  v2 at n_audio_state 128, 2 heads, 2 blocks, v3 at 64, 1 head, 3 blocks (heads must be 64 wide). Every
  parameter is drawn (seeded): weights at 1/sqrt(fan in), biases, LayerNorm scales around 1 and shifts, the FSMN
  kernels; the FSQ projection is then scaled so that its 8 outputs spread around the rounding thresholds, so the
  codes are diverse (8 random mixtures of the encoder output's whitened leading principal directions; the count
  of distinct codes is recorded).
- references.safetensors / references.json: the waveforms (seeded: speech-like glides at 1 s and 3 s, odd-length
  noise, 0.05 s), upstream's log_mel_spectrogram of each (1-D, as CosyVoice's (1, samples), and a batch of two that
  shares one maximum), and per model: quantize and the encoder's output for each clip alone, for zero-padded
  batches of two and three (s3tokenizer's `padding`), and the long-audio path (a batch holding a clip of more than
  3000 frames: 30 s windows merged; the long log-mels are the stored ones tiled, `tiled_mel`).
- speech_tokenizer_v2_tiny.onnx, speech_tokenizer_v3_tiny.onnx: each model exported with torch.onnx.export (the
  TorchScript exporter; inputs feats, feats_length; outputs indices and the encoder's output) and renamed as the
  released files name their weights, which is how s3tokenizer's onnx2torch / onnx2torch_v3 find them: v2's graph
  at opset 17 (LayerNormalization nodes), conv1 / conv2 as onnx::Conv_2216..2219, the FSQ projection as
  onnx::MatMul_2536 and quantizer.project_in.bias; v3's at opset 14 (LayerNorms decomposed), its FSMN kernels as
  blocks.N.attn.fsmn_block.weight and its projection biases as Constant nodes. Every other initializer of the export
  (shape constants, the rotary table cut to 750 rows, the 30 s a window holds) becomes a Constant node, as in the
  released files (onnx2torch would otherwise take them for weights). The writer checks that upstream's converter
  reads back exactly the stored weights, then runs onnxruntime on the clips and batches and records its tokens
  and how far its encoder output is from torch's (ONNX Runtime fuses the arithmetic: only tokens can agree).
The export reads the rotary table as real numbers (torch's ONNX exporter cannot carry complex tensors): the same
cos and sin values, through a stand-in for torch.view_as_real while exporting.
"""

import json
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from pinned import environment, pin_process, write_references  # noqa: E402  (beside this script)

pin_process()

import numpy as np  # noqa: E402
import onnx  # noqa: E402
import onnxruntime  # noqa: E402
import s3tokenizer  # noqa: E402
import torch  # noqa: E402
from onnx import helper, numpy_helper  # noqa: E402
from s3tokenizer.model_v2 import ModelConfig, S3TokenizerV2  # noqa: E402
from s3tokenizer.model_v3 import ModelConfigV3, S3TokenizerV3  # noqa: E402
from safetensors.torch import save_file  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
OUT = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "tests/parity/data/nn/s3tokenizer"
REFS, CASES = {}, {}
MODELS = {  # name: (class, config class, model name, sizes, seed)
    "v2": (S3TokenizerV2, ModelConfig, "speech_tokenizer_v2_25hz", dict(n_audio_state=128, n_audio_head=2,
                                                                        n_audio_layer=2), 21),
    "v3": (S3TokenizerV3, ModelConfigV3, "speech_tokenizer_v3_25hz", dict(n_audio_state=64, n_audio_head=1,
                                                                          n_audio_layer=3), 22),
}
ONNX_OPSET = {"v2": 17, "v3": 14}
EXPORT_POSITIONS = 750  # the rotary rows a 30 s window needs (3000 frames / 4)
V2_NAMES = {"encoder.conv1.weight": "onnx::Conv_2216", "encoder.conv1.bias": "onnx::Conv_2217",
            "encoder.conv2.weight": "onnx::Conv_2218", "encoder.conv2.bias": "onnx::Conv_2219",
            "quantizer._codebook.project_down.weight": "onnx::MatMul_2536",
            "quantizer._codebook.project_down.bias": "quantizer.project_in.bias"}


def put(name, tensor):
    assert name not in REFS, name
    REFS[name] = tensor.detach().contiguous().numpy()
    return name


def waveforms() -> dict:
    g = torch.Generator().manual_seed(5)

    def speech(seconds, base):
        t = torch.arange(int(16000 * seconds), dtype=torch.float64) / 16000
        pitch = base + 40 * torch.sin(2 * math.pi * 0.9 * t)
        phase = 2 * math.pi * torch.cumsum(pitch, 0) / 16000
        envelope = 0.4 + 0.6 * torch.sin(2 * math.pi * 2.5 * t) ** 2
        voice = sum(torch.sin(k * phase) / k for k in range(1, 14)) * envelope
        return (0.25 * voice + 0.02 * torch.randn(len(t), generator=g, dtype=torch.float64)).float()

    return {"speech_1s": speech(1.0, 140), "speech_3s": speech(3.0, 110),
            "noise_11713": torch.randn(11713, generator=g) * torch.linspace(0.02, 0.3, 11713),
            "short_801": torch.randn(801, generator=g) * 0.1}


def tiled_mel(mel: torch.Tensor, frames: int) -> torch.Tensor:
    """(n_mels, frames): a stored log-mel repeated along time and cut (the long-audio cases' input)."""
    return mel.repeat(1, -(-frames // mel.shape[1]))[:, :frames].contiguous()


def randomised(kind: str, mel: torch.Tensor):
    cls, config_cls, name, sizes, seed = MODELS[kind]
    torch.manual_seed(seed)
    model = cls(name, config_cls(**sizes)).eval()
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for key, p in model.named_parameters():
            if key.endswith("_ln.weight"):
                p.copy_(1 + 0.2 * torch.randn(p.shape, generator=g))
            elif p.dim() == 1:
                p.copy_(0.1 * torch.randn(p.shape, generator=g))
            else:
                p.copy_(torch.randn(p.shape, generator=g) / math.sqrt(p[0].numel()))
        hidden, _ = model.encoder(mel[None], torch.tensor([mel.shape[1]], dtype=torch.int32))
        # the FSQ projection reads 8 random mixtures of the encoder output's 12 leading principal directions,
        # whitened: its 8 inputs are about independent N(0, 1.2), so all three levels of every digit occur
        h = hidden.reshape(-1, hidden.shape[-1]).double()
        mean = h.mean(dim=0)
        _, s, vt = torch.linalg.svd(h - mean, full_matrices=False)
        mix = torch.randn(8, 12, generator=g, dtype=torch.float64) / math.sqrt(12)
        weight = 1.2 * mix @ (vt[:12] * (math.sqrt(h.shape[0]) / s[:12, None]))
        project = model.quantizer._codebook.project_down
        project.weight.copy_(weight.float())
        project.bias.copy_((0.1 * torch.randn(8, generator=g, dtype=torch.float64) - weight @ mean).float())
    return model


def quantize(model, mel, lengths):
    with torch.inference_mode():
        return model.quantize(mel, lengths)


def model_cases(kind: str, model, mels: dict):
    state = {k: v.contiguous() for k, v in model.state_dict().items()}
    save_file(state, str(OUT / f"weights_{kind}.safetensors"))
    codes_seen = set()
    CASES[kind] = {"config": MODELS[kind][3], "seed": MODELS[kind][4], "weights": f"weights_{kind}.safetensors",
                   "keys": len(state)}

    def run(case, mel, lengths, hidden=True, mel_name=None):
        codes, code_len = quantize(model, mel, lengths)
        entry = {"mel": mel_name,  # None: rebuilt by the test from the stored log-mels
                 "mel_len": put(f"{case}/mel_len", lengths), "codes": put(f"{case}/codes", codes),
                 "code_len": put(f"{case}/code_len", code_len)}
        if hidden:
            with torch.inference_mode():
                out, out_len = model.encoder(mel, lengths)
            entry |= {"hidden": put(f"{case}/hidden", out), "hidden_len": put(f"{case}/hidden_len", out_len)}
        codes_seen.update(codes.flatten().tolist())
        CASES[case] = entry
        return entry

    for wave in WAVES:
        mel = mels[wave]
        run(f"{kind}/one/{wave}", mel[None], torch.tensor([mel.shape[1]], dtype=torch.int32), mel_name=f"mel/{wave}")
    for name, rows in BATCHES.items():
        mel, lengths = s3tokenizer.padding([mels[w] for w in rows])
        run(f"{kind}/{name}", mel, lengths)["rows"] = rows
    for name, (frames, rows) in LONG[kind].items():
        parts = [tiled_mel(mels[w], n) for w, n in zip(rows, frames, strict=True)]
        mel, lengths = s3tokenizer.padding(parts)
        run(f"{kind}/{name}", mel, lengths, hidden=False).update(rows=rows, frames=frames)
    CASES[kind]["distinct_codes"] = len(codes_seen)
    assert len(codes_seen) >= 100, (kind, len(codes_seen))  # not one id: many of the 6561 occur


WAVES = ("speech_1s", "speech_3s", "noise_11713", "short_801")
BATCHES = {"batch2": ("speech_3s", "noise_11713"), "batch3": ("noise_11713", "speech_1s", "short_801")}
LONG = {"v2": {"long_mixed": ((3123, 100), ("speech_3s", "speech_1s"))},  # 2 windows and a short item
        "v3": {"long_three": ((5300,), ("speech_3s",)),  # 3 windows, the last shorter than a seam
               "long_two": ((3001, 2999), ("speech_1s", "speech_3s"))}}


# ---------------------------------------------------------------------------------------------------------
# The ONNX files


class Exported(torch.nn.Module):
    """The upstream model's modules under the released graph's scope names: conv1, conv2, blocks.N at the top,
    the FSQ projection as quantizer.project_in (applied to the 3-D encoder output: a MatMul, as released)."""

    def __init__(self, model):
        super().__init__()
        encoder = model.encoder
        self.conv1, self.conv2, self.blocks, self.stride = encoder.conv1, encoder.conv2, encoder.blocks, encoder.stride
        self.quantizer = ExportedFSQ(model.quantizer._codebook.project_down)
        self.freqs_cis = torch.view_as_real(encoder.freqs_cis[:EXPORT_POSITIONS]).contiguous()
        self.encoder_forward = type(encoder).forward

    def forward(self, feats, feats_length):
        hidden, _ = self.encoder_forward(self, feats, feats_length)
        return self.quantizer(hidden), hidden


class ExportedFSQ(torch.nn.Module):
    """FSQCodebook.encode on the 3-D encoder output, its nodes under /quantizer/ as in the released graphs."""

    def __init__(self, project):
        super().__init__()
        self.project_in = project

    def forward(self, hidden):
        h = self.project_in(hidden).float().tanh() * 0.9990000128746033
        h = h.round() + 1
        powers = torch.pow(3, torch.arange(8, dtype=h.dtype))
        return torch.sum(h * powers, dim=-1).int()


def export(kind: str, model, path: Path, example):
    real = torch.view_as_real
    torch.view_as_real = lambda t: t if not t.is_complex() else real(t)  # the table is stored real already
    try:
        torch.onnx.export(Exported(model), example, str(path), dynamo=False, opset_version=ONNX_OPSET[kind],
                          input_names=["feats", "feats_length"], output_names=["indices", "hidden"],
                          dynamic_axes={"feats": {0: "batch", 2: "frames"}, "feats_length": {0: "batch"},
                                        "indices": {0: "batch", 1: "tokens"}, "hidden": {0: "batch", 1: "tokens"}})
    finally:
        torch.view_as_real = real
    graph = onnx.load(str(path))
    rename_as_released(kind, graph, model.state_dict())
    onnx.checker.check_model(graph)
    data = graph.SerializeToString(deterministic=True)
    path.write_bytes(data)
    return graph


def rename_as_released(kind: str, graph, state):
    """Initializers that are parameters renamed as the released files name them, every other one a Constant node."""
    g = graph.graph
    params = {}  # initializer name -> parameter name (matched by value: a MatMul's weight is stored transposed)
    for init in g.initializer:
        array = numpy_helper.to_array(init)
        for key, value in state.items():
            v = value.numpy()
            if (array.shape == v.shape and np.array_equal(array, v)) or \
                    (array.ndim == 2 and array.shape == v.T.shape and np.array_equal(array, v.T)):
                params[init.name] = key
                break
    consumers = {}
    for node in g.node:
        for i, name in enumerate(node.input):
            consumers.setdefault(name, []).append((node, i))
    new_names, constants = {}, []
    for init in list(g.initializer):
        key = params.get(init.name)
        if key is None or (kind == "v3" and key.endswith(".bias") and ".attn." in key or
                           kind == "v3" and key.endswith(".bias") and ".mlp." in key):
            constants.append(init)  # a Constant node: not read as a weight by name
            continue
        if kind == "v2" and key in V2_NAMES:
            new_names[init.name] = V2_NAMES[key]
        elif kind == "v3" and key.endswith("fsmn_block.weight"):
            new_names[init.name] = key[len("encoder."):]
        elif kind == "v3" and key == "quantizer._codebook.project_down.bias":
            new_names[init.name] = "quantizer.project_in.bias"
    taken = {i.name for i in g.initializer}
    assert not (set(new_names.values()) & (taken - set(new_names))), "a released name is taken"
    for init in g.initializer:
        if init.name in new_names:
            old, init.name = init.name, new_names[init.name]
            for node, i in consumers.get(old, []):
                node.input[i] = init.name
    nodes = [helper.make_node("Constant", [], [init.name], name=f"/Constant_{init.name}", value=init)
             for init in constants]
    for init in constants:
        g.initializer.remove(init)
    # graph inputs that were initializers (old exporters list them) are not here: torch lists only real inputs
    old = list(g.node)
    del g.node[:]
    g.node.extend(nodes + old)


def onnx_cases(kind: str, model, mels: dict, spread: dict):
    path = OUT / f"speech_tokenizer_{kind}_tiny.onnx"
    first = mels[WAVES[0]]
    export(kind, model, path, (first[None], torch.tensor([first.shape[1]], dtype=torch.int32)))
    converted = (s3tokenizer.onnx2torch if kind == "v2" else s3tokenizer.onnx2torch_v3)(str(path), None, False)
    state = model.state_dict()
    assert converted.keys() == state.keys(), (kind, sorted(set(state) ^ set(converted)))
    assert all(torch.equal(converted[k], state[k]) for k in state), "onnx2torch read other values"
    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    inputs = [i.name for i in session.get_inputs()]
    entry = {"file": path.name, "opset": ONNX_OPSET[kind], "inputs": inputs,
             "initializers": sorted(i.name for i in onnx.load(str(path)).graph.initializer), "cases": {}}
    worst, flips = 0.0, 0
    for case in [f"{kind}/one/{w}" for w in WAVES] + [f"{kind}/{b}" for b in BATCHES]:
        rows = CASES[case].get("rows") or [case.rsplit("/", 1)[1]]
        mel, lengths = s3tokenizer.padding([mels[w] for w in rows])
        assert np.array_equal(lengths.numpy(), REFS[CASES[case]["mel_len"]])
        indices, hidden = session.run(None, {inputs[0]: mel.numpy(), inputs[1]: lengths.numpy()})
        codes, torch_hidden = REFS[CASES[case]["codes"]], REFS[CASES[case]["hidden"]]
        # tokens past each item's length are padding: compared within the lengths only
        valid = np.arange(codes.shape[1])[None, :] < REFS[CASES[case]["code_len"]][:, None]
        flips += int(((indices != codes) & valid).sum())
        diff = float(np.abs(hidden - torch_hidden)[valid].max())
        worst = max(worst, diff)
        entry["cases"][case] = {"indices": put(f"onnx/{case}/indices", torch.from_numpy(indices)),
                                "hidden_max_abs_diff": diff, "tokens_equal_within_lengths": bool(
                                    ((indices == codes) | ~valid).all())}
    entry |= {"max_abs_hidden_diff": worst, "tokens_differing": flips}
    spread[kind] = worst
    CASES[f"onnx/{kind}"] = entry


def main():
    OUT.mkdir(parents=True, exist_ok=True)
    waves = waveforms()
    mels = {}
    for name, wave in waves.items():
        put(f"wave/{name}", wave)
        mels[name] = s3tokenizer.log_mel_spectrogram(wave)
        CASES[f"mel/{name}"] = {"wave": f"wave/{name}", "out": put(f"mel/{name}", mels[name])}
    two = s3tokenizer.log_mel_spectrogram(waves["speech_1s"][None])  # CosyVoice's call: (1, samples)
    CASES["mel/speech_1s/2d"] = {"wave": "wave/speech_1s", "out": put("mel/speech_1s/2d", two)}
    pair = torch.stack((waves["speech_1s"], waves["speech_3s"][:16000] * 3))
    CASES["mel/batch"] = {"waves": ["speech_1s", "speech_3s"], "stop": 16000, "gain": [1, 3],
                          "out": put("mel/batch", s3tokenizer.log_mel_spectrogram(pair))}
    spread = {}
    for kind in MODELS:
        model = randomised(kind, mels["speech_3s"])
        model_cases(kind, model, mels)
        onnx_cases(kind, model, mels, spread)
    write_references(REFS, OUT / "references.safetensors")
    info = {"cases": CASES, "onnx_hidden_spread": spread,
            "environment": environment(["s3tokenizer", "torch", "onnx", "onnxruntime", "numpy", "safetensors"]),
            "note": "compare bitwise; onnx/*: onnxruntime's tokens (discrete) and its encoder output's distance"}
    (OUT / "references.json").write_text(json.dumps(info, indent=1, sort_keys=True) + "\n")
    size = sum(p.stat().st_size for p in OUT.iterdir())
    print({k: CASES[k]["distinct_codes"] for k in MODELS})
    print(f"wrote {len(REFS)} tensors, {len(CASES)} cases, {size} bytes to {OUT}; onnx spread {spread}")


if __name__ == "__main__":
    main()
