#!/usr/bin/env python
"""Reference outputs of GPT-SoVITS's text-to-semantic model (the GPT stage), written by upstream's own
`Text2SemanticDecoder` from an RVC-Boss/GPT-SoVITS checkout (GitHub only: tests/fallback.py compares on a machine
whose floats differ).

    python scripts/parity/gpt_sovits_t2s_references.py OUTDIR --checkout PATH            # the set
    python scripts/parity/gpt_sovits_t2s_references.py OUTDIR --checkout PATH --spread   # how far it moves unpinned

The interpreter needs torch 2.13.0, torchmetrics and tqdm (what AR/models/t2s_model.py imports):
scripts/parity/gpt_sovits_upstream_env.sh builds it.

Writes OUTDIR/gpt.ckpt (a tiny GPT weights file in upstream's format, {"weight": {"model.*": ...}, "config"}:
random weights, LayerNorms, biases and the positional alphas included, the EOS row leaning to a shared
direction so that some requests stop at EOS and some at the early stop), OUTDIR/references.safetensors (the
inputs; per case upstream's tokens from TTS.run's own calls, infer_panel_batch_infer or infer_panel_naive, and
the generator's next draws after; the prefill's logits and the decode's logits teacher-forced on upstream's
tokens through upstream's T2STransformer) and OUTDIR/references.json.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from pinned import checkout_record, checkout_writer_main, is_spread_child, lifted_runs, pin_process, save_spread  # noqa: E402

if "--spread" not in sys.argv and not is_spread_child():
    pin_process()

import torch  # noqa: E402

CONFIG = {"model": {"vocab_size": 129, "phoneme_vocab_size": 80, "embedding_dim": 64, "hidden_dim": 64, "head": 4,
                    "linear_units": 256, "n_layer": 3, "dropout": 0, "EOS": 128},
          "data": {"max_sec": 1.2}}  # early stop after 60 tokens: one case reaches it
PHONES, PROMPT = 23, 17  # the reference's and target's phones together; the reference's semantic tokens
EOS_GAIN = 0.8  # how far EOS's row leans to a shared direction: some cases end at EOS, some at the early stop

# (name, loop, prompt?, sampling, seed): loop "batched" is infer_panel_batch_infer (api_v2's parallel_infer, the
# default), "naive" infer_panel_naive (parallel_infer off; prompt-free requests always)
CASES = (
    ("defaults", "batched", True, {"top_k": 15, "top_p": 1, "temperature": 1, "repetition_penalty": 1.35}, 1),
    ("defaults_naive", "naive", True, {"top_k": 15, "top_p": 1, "temperature": 1, "repetition_penalty": 1.35}, 1),
    ("top_p", "batched", True, {"top_k": 40, "top_p": 0.8, "temperature": 0.7, "repetition_penalty": 1.0}, 2),
    ("hot", "batched", True, {"top_k": 128, "top_p": 1, "temperature": 1.6, "repetition_penalty": 1.2}, 3),
    ("hot_naive", "naive", True, {"top_k": 128, "top_p": 1, "temperature": 1.6, "repetition_penalty": 1.2}, 3),
    ("prompt_free", "naive", False, {"top_k": 15, "top_p": 1, "temperature": 1, "repetition_penalty": 1.35}, 4),
    ("seed5", "batched", True, {"top_k": 15, "top_p": 1, "temperature": 1, "repetition_penalty": 1.35}, 5),
    ("seed5_naive", "naive", True, {"top_k": 15, "top_p": 1, "temperature": 1, "repetition_penalty": 1.35}, 5),
)


def upstream(checkout: Path):
    sys.path.insert(0, str(checkout / "GPT_SoVITS"))
    from AR.models.t2s_model import Text2SemanticDecoder

    return Text2SemanticDecoder


def build(checkout: Path):
    """Upstream's decoder for CONFIG with seeded random weights (nothing left at its init)."""
    model = upstream(checkout)(CONFIG, top_k=3).eval()
    g = torch.Generator().manual_seed(20261203)
    with torch.no_grad():
        for name, p in sorted(model.named_parameters()):
            if name.endswith("alpha"):
                p.copy_(torch.rand(p.shape, generator=g) + 0.5)
            elif "norm" in name and name.endswith("weight"):
                p.copy_(torch.rand(p.shape, generator=g) + 0.5)
            elif name.endswith("bias"):
                p.copy_(torch.randn(p.shape, generator=g) * 0.1)
            else:
                p.copy_(torch.randn(p.shape, generator=g) / p.shape[-1] ** 0.5 * (3.0 if "embedding" in name else 1))
        # EOS's row leans towards the last norm's bias (a direction every output shares), so EOS rises to the top
        last = model.h.layers[-1].norm2.bias
        model.ar_predict_layer.weight[CONFIG["model"]["EOS"]] += EOS_GAIN * last / last.norm()
    return model


def inputs() -> dict:
    g = torch.Generator().manual_seed(7)
    return {"phones": torch.randint(0, CONFIG["model"]["phoneme_vocab_size"], (PHONES,), generator=g),
            "bert": torch.randn(1024, PHONES, generator=g),
            "prompt": torch.randint(0, CONFIG["model"]["EOS"], (PROMPT,), generator=g)}


def run_case(model, data: dict, loop: str, prompted: bool, sampling: dict, seed: int):
    """(tokens as TTS.run keeps them, y[-idx:], and idx) from upstream's own loop, seeded as set_seed seeds."""
    early_stop = 50 * CONFIG["data"]["max_sec"]  # TTS.run: self.configs.hz * self.configs.max_sec
    prompt = data["prompt"].unsqueeze(0) if prompted else None
    torch.manual_seed(seed)
    with torch.no_grad():
        if loop == "batched":
            y, idx = model.infer_panel_batch_infer([data["phones"]], torch.LongTensor([PHONES]), prompt,
                                                   [data["bert"]], early_stop_num=early_stop, max_len=PHONES,
                                                   **sampling)
        else:
            y, idx = model.infer_panel_naive_batched([data["phones"]], torch.LongTensor([PHONES]), prompt,
                                                     [data["bert"]], early_stop_num=early_stop, **sampling)
    return y[0][-idx[0]:].long(), idx[0]


def teacher_forced(model, data: dict, tokens: torch.Tensor, prompted: bool):
    """Upstream's prefill logits and each decode step's logits with `tokens` fed back, through its
    T2STransformer (process_prompt, then decode_next_token), as its loops build the inputs."""
    with torch.no_grad():
        x = model.ar_text_embedding(data["phones"].unsqueeze(0))
        x = model.ar_text_position(x + model.bert_proj(data["bert"].transpose(0, 1).unsqueeze(0)))
        y_len = PROMPT if prompted else 0
        if prompted:
            xy = torch.cat([x, model.ar_audio_position(model.ar_audio_embedding(data["prompt"].unsqueeze(0)))], 1)
        else:
            xy = x
        total = PHONES + y_len
        mask = torch.cat([
            torch.nn.functional.pad(torch.zeros(PHONES, PHONES, dtype=torch.bool), (0, y_len), value=True),
            torch.nn.functional.pad(torch.triu(torch.ones(y_len, y_len, dtype=torch.bool), 1), (PHONES, 0)),
        ]).view(1, 1, total, total).expand(1, CONFIG["model"]["head"], -1, -1)
        h, k, v = model.t2s_transformer.process_prompt(xy, mask, None)
        prefill = model.ar_predict_layer(h[:, -1])
        steps = []
        for i, token in enumerate(tokens.tolist()):
            emb = model.ar_audio_embedding(torch.tensor([[token]]))
            xy = emb * model.ar_audio_position.x_scale + model.ar_audio_position.alpha * \
                model.ar_audio_position.pe[:, y_len + i].to(dtype=emb.dtype)
            h, k, v = model.t2s_transformer.decode_next_token(xy, k, v)
            steps.append(model.ar_predict_layer(h[:, -1])[0])
    return prefill[0], torch.stack(steps)


def outputs(checkout: Path) -> tuple[dict, dict, object]:
    model = build(checkout)
    data = inputs()
    refs = dict(data)
    info = {}
    for name, loop, prompted, sampling, seed in CASES:
        tokens, idx = run_case(model, data, loop, prompted, sampling, seed)
        refs[f"{name}/tokens"] = tokens
        refs[f"{name}/after"] = torch.rand(4)  # the global generator after the loop: every draw taken, no more
        info[name] = {"loop": loop, "prompt": prompted, "sampling": sampling, "seed": seed, "idx": idx,
                      "tokens": tokens.numel()}
    for prompted, case in ((True, "defaults"), (False, "prompt_free")):
        prefill, steps = teacher_forced(model, data, refs[f"{case}/tokens"], prompted)
        refs[f"{case}/prefill_logits"] = prefill
        refs[f"{case}/forced_logits"] = steps
    return {k: v.contiguous().clone() for k, v in refs.items()}, info, model


FLOATS = ("defaults/prefill_logits", "defaults/forced_logits", "prompt_free/prefill_logits",
          "prompt_free/forced_logits")


def write(out: Path, checkout: Path) -> None:
    from pinned import environment
    from safetensors.torch import load_file, save_file

    out.mkdir(parents=True, exist_ok=True)
    refs, cases, model = outputs(checkout)
    weights = {f"model.{k}": v.clone() for k, v in model.state_dict().items()}
    torch.save({"weight": weights, "config": CONFIG, "info": "mizuoto parity: tiny random GPT"}, out / "gpt.ckpt")
    save_file(refs, str(out / "references.safetensors"))
    back = load_file(str(out / "references.safetensors"))
    assert all(torch.equal(back[k], refs[k]) for k in refs)
    info = {"upstream": {"repository": "RVC-Boss/GPT-SoVITS", **checkout_record(checkout),
                         "code": "AR/models/t2s_model.py Text2SemanticDecoder (infer_panel_batch_infer, "
                                 "infer_panel_naive_batched as TTS.run calls them)"},
            "config": CONFIG, "cases": cases, "eos_gain": EOS_GAIN,
            "tensors": {k: list(v.shape) for k, v in refs.items()},
            "environment": environment(["torch", "torchmetrics"])}
    spread_file = out / "spread.json"
    if spread_file.exists():
        info["spread"] = json.loads(spread_file.read_text())
    (out / "references.json").write_text(json.dumps(info, indent=1) + "\n")




def spread(out: Path, checkout: Path) -> None:
    """Max |difference| of the float outputs between the pinned run and runs with a pin lifted, and whether the
    tokens stayed: OUTDIR/spread.json, which the test's tolerance is set from."""
    with tempfile.TemporaryDirectory() as tmp:
        runs = lifted_runs(__file__, ["--checkout", checkout], tmp)
    pinned = runs.pop("pinned")
    report = {label: {k: float((r[k] - pinned[k]).abs().max()) for k in FLOATS}
              | {"tokens_equal": all(torch.equal(r[k], pinned[k]) for k in r if k.endswith(("/tokens", "/after")))}
              for label, r in runs.items()}
    save_spread(out, report, FLOATS)


if __name__ == "__main__":
    checkout_writer_main(__doc__.split("\n\n")[0], write, spread, outputs)
