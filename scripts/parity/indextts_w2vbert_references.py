#!/usr/bin/env python
"""Reference outputs of transformers 4.52.1's SeamlessM4TFeatureExtractor and Wav2Vec2BertModel as IndexTTS 2 runs
them (infer_v2.py: `extract_features(audio_16k, sampling_rate=16000, return_tensors="pt")`, then
`semantic_model(input_features=..., attention_mask=..., output_hidden_states=True).hidden_states[17]`, normalised by
wav2vec2bert_stats.pt), for tests/nn/test_w2v_bert.py and tests/audio/test_seamless_features.py.

Usage, in the environment scripts/parity/indextts_upstream_env.sh builds:
    python scripts/parity/indextts_w2vbert_references.py tests/parity/data/indextts/w2vbert

Writes into OUTDIR:
    model/config.json, model/model.safetensors   a tiny random Wav2Vec2BertModel saved by save_pretrained (the
                                                 published facebook/w2v-bert-2.0 layout: hidden 32, 18 layers,
                                                 2 heads, FFN 64, depthwise kernel 5, relative_key 64 / 8)
    stats.pt                                     {"mean", "var"} (32,) as wav2vec2bert_stats.pt holds them
    references.safetensors                       waveforms, the extractor's outputs, hidden states (C-contiguous)
    references.json                              the cases, the LayerDrop draws measured, versions, pins

Every parameter is re-randomised (transformers starts LayerNorms at 1 / 0, biases at 0 and Linear weights at
std 0.02): each from its own generator, in name order. The extractor is w2v-bert-2.0's (padding_value 1.0).
Waveforms: 560 samples (two frames, one stacked row), 5000 (29 frames: a padded pair, its row masked), 16123 and
48000 (3 s, 299 frames); each as IndexTTS passes it, a (1, samples) tensor; and a batch of two 1-D arrays of
different lengths (padding, masks of different lengths). For each: the features and mask, hidden_states 0, 1,
17 and 18 (the last), last_hidden_state, and hidden_states[17] normalised as get_emb does.
The LayerDrop draws: after manual_seed, one forward, then torch.rand(8); the number of torch.rand([]) draws that
gives the same eight numbers is recorded (upstream draws one per layer in eval mode too).
"""

import json
import os
import sys
import time

from pinned import pin_process  # noqa: E402  (beside this script)

pin_process()  # re-executes under the parity pins, then one thread and oneDNN off

import warnings  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402
from pinned import environment, write_references  # noqa: E402  (beside this script)
from transformers import SeamlessM4TFeatureExtractor, Wav2Vec2BertConfig, Wav2Vec2BertModel  # noqa: E402
from transformers.utils import logging as hf_logging  # noqa: E402

warnings.filterwarnings("ignore")
hf_logging.set_verbosity_error()

T0 = time.time()
OUT = sys.argv[1] if len(sys.argv) > 1 else "tests/parity/data/indextts/w2vbert"
os.makedirs(OUT, exist_ok=True)

CONFIG = dict(hidden_size=32, num_hidden_layers=18, num_attention_heads=2, intermediate_size=64,
              conv_depthwise_kernel_size=5, position_embeddings_type="relative_key", add_adapter=False)
PADDING_VALUE = 1.0  # facebook/w2v-bert-2.0's preprocessor_config.json
LAYERS = (0, 1, 17, 18)

REFS = {}
CASES = []


def put(name, t):
    assert name not in REFS, name
    a = t.detach().cpu().numpy() if isinstance(t, torch.Tensor) else np.asarray(t)
    REFS[name] = np.ascontiguousarray(a)
    return name


def randomise(model, seed):
    with torch.no_grad():
        for index, (name, p) in enumerate(sorted(model.named_parameters())):
            g = torch.Generator().manual_seed(seed * 1000 + index)
            u = torch.rand(p.shape, generator=g) * 2 - 1
            if "layer_norm" in name and name.endswith("weight"):
                p.copy_(1.0 + 0.3 * u)
            elif name.endswith("bias"):
                p.copy_(0.2 * u)
            elif name.endswith("distance_embedding.weight") or name == "masked_spec_embed":
                p.copy_(u)
            else:  # Linear / Conv1d weights: uniform with fan-in scaling
                fan_in = p[0].numel()
                p.copy_(u * (1.5 / fan_in ** 0.5))


def audio(length, seed):
    g = torch.Generator().manual_seed(seed)
    t = torch.arange(length, dtype=torch.float32) / 16000
    tone = torch.sin(2 * torch.pi * (180 + 300 * torch.rand(1, generator=g)) * t)
    return (0.3 * tone + 0.05 * torch.randn(length, generator=g)).float()


def draws_of(model, inputs):
    """How many torch.rand([]) one forward takes from the global CPU generator."""
    torch.manual_seed(1234)
    with torch.no_grad():
        model(**inputs, output_hidden_states=True)
    after = torch.rand(8)
    for n in range(200):
        torch.manual_seed(1234)
        for _ in range(n):
            torch.rand([])
        if torch.equal(torch.rand(8), after):
            return n, after
    raise AssertionError("the forward's draws are not torch.rand([]) draws")


def run_case(name, model, extractor, stats, raw, kind):
    inputs = extractor(raw, sampling_rate=16000, return_tensors="pt")
    features, mask = inputs["input_features"], inputs["attention_mask"]
    with torch.no_grad():
        out = model(input_features=features, attention_mask=mask, output_hidden_states=True)
        again = model(input_features=features, attention_mask=mask, output_hidden_states=True)
    assert torch.equal(out.last_hidden_state, again.last_hidden_state)
    assert len(out.hidden_states) == CONFIG["num_hidden_layers"] + 1
    emb = (out.hidden_states[17] - stats["mean"]) / torch.sqrt(stats["var"])
    if kind == "batch":
        waves = [put(f"{name}/audio_{i}", torch.from_numpy(r)) for i, r in enumerate(raw)]
    else:
        waves = [put(f"{name}/audio", raw)]
    CASES.append({"name": name, "kind": kind, "audio": waves,
                  "features": put(f"{name}/input_features", features), "mask": put(f"{name}/attention_mask", mask),
                  "hidden_states": {str(i): put(f"{name}/hidden_states_{i}", out.hidden_states[i]) for i in LAYERS},
                  "last_hidden_state": put(f"{name}/last_hidden_state", out.last_hidden_state),
                  "emb": put(f"{name}/emb", emb)})


def main():
    config = Wav2Vec2BertConfig(**CONFIG)
    torch.manual_seed(0)
    model = Wav2Vec2BertModel(config)
    randomise(model, 1)
    model.eval()
    folder = os.path.join(OUT, "model")
    model.save_pretrained(folder, safe_serialization=True)
    g = torch.Generator().manual_seed(7)
    stats = {"mean": (torch.rand(32, generator=g) * 2 - 1) * 0.5, "var": 0.5 + torch.rand(32, generator=g) * 2}
    torch.save(stats, os.path.join(OUT, "stats.pt"))

    extractor = SeamlessM4TFeatureExtractor(padding_value=PADDING_VALUE)
    for i, length in enumerate((560, 5000, 16123, 48000)):
        run_case(f"single_{length}", model, extractor, stats, audio(length, 10 + i)[None], "single")
    batch = [audio(5000, 20).numpy(), audio(3300, 21).numpy()]
    run_case("batch_5000_3300", model, extractor, stats, batch, "batch")

    inputs = extractor(audio(16123, 12)[None], sampling_rate=16000, return_tensors="pt")
    draws, after = draws_of(model, dict(input_features=inputs["input_features"],
                                        attention_mask=inputs["attention_mask"]))
    layerdrop = {"seed": 1234, "draws_in_eval": draws, "rand8_after": put("layerdrop/rand8_after", after),
                 "num_hidden_layers": CONFIG["num_hidden_layers"], "layerdrop": config.layerdrop}

    write_references(REFS, os.path.join(OUT, "references.safetensors"))
    info = {"config": CONFIG, "padding_value": PADDING_VALUE, "layers": list(LAYERS), "cases": CASES,
            "layerdrop": layerdrop, "parameters": sum(p.numel() for p in model.parameters()),
            "environment": environment(["transformers", "torch", "numpy", "safetensors"])}
    with open(os.path.join(OUT, "references.json"), "w") as f:
        json.dump(info, f, indent=1)
    print(json.dumps({"cases": len(CASES), "tensors": len(REFS), "bytes": sum(a.nbytes for a in REFS.values()),
                      "draws": draws, "seconds": round(time.time() - T0, 1)}))


main()
