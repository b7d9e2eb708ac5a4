"""How the dummy engine's code decoder is compared with transformers' own Qwen3 (tests/parity/data/dummy, written by
scripts/parity/dummy_references.py): the first user of tests/fallback.py, the comparison GitHub-only upstreams
get on a machine whose floats are not the writer's.

The set is treated as if its upstream could not be installed here: it is never rewritten. Where the recorded
fingerprint is this machine's, prefill, teacher-forced decode and free-running greedy tokens are identical.
Elsewhere the prefill and the teacher-forced logits are within TOLERANCE, with upstream's greedy choice wherever
its top-2 gap is wider than that; the free-running tokens are not compared.

TOLERANCE: the spread measured on the writer's machine (spread.json in the set, `dummy_references.py --spread`)
is at most 1.4e-6 on every output when any pin is lifted (2 threads, avx512, MKL's own code path, oneDNN on, or
all at once), on logits of magnitude ~1; 1e-5 leaves a factor of 7 for another CPU's kernels and is still
far below a real error (a wrong norm or position moves these logits by 1e-2 or more).
"""

import json
import sys
from pathlib import Path

import torch

if __name__ == "__main__":  # run as the pinned script: tests/ (helpers.py) is not on the path yet
    sys.path.insert(0, str(Path(__file__).resolve().parent))
from fallback import Comparison  # noqa: E402
from helpers import run_pinned  # noqa: E402

TOLERANCE = 1e-5


def ours(folder: Path, out: Path) -> dict:
    """Our dummy engine on the recorded prompt: the prefill, the decode steps fed upstream's tokens (the
    engine's own step, DecoderSteps), and free-running greedy tokens; saved to `out`."""
    from safetensors.torch import load_file, save_file

    from mizuoto.engines.dummy import engine
    from mizuoto.host import load_model
    from mizuoto.nn.qwen import AttentionStep

    refs = load_file(str(folder / "references.safetensors"))
    loaded = load_model("dummy", folder / "model.safetensors", device="cpu").state
    model, decoder, codes = loaded.model, loaded.model.decoder, loaded.config.codes
    prompt, upstream_tokens = refs["prompt"][None], refs["decode/tokens"]
    length, steps = prompt.shape[1], upstream_tokens.shape[0]
    positions = torch.arange(length + steps)[None]
    results = {}
    with torch.inference_mode():
        for forced in (True, False):
            cache = decoder.new_cache(1, length + steps)
            hidden = decoder(prompt, positions[:, :length], cache, decoder.mask_for(None, length, length))
            logits = model.code_head(hidden[:, -1]).float()
            step = engine.decode_steps(loaded)
            tokens, step_logits = [], []
            for i in range(steps):
                token = upstream_tokens[i].view(1, 1) if forced else logits[:, :codes].argmax(-1, keepdim=True)
                tokens.append(token[0, 0])
                at = length + i
                logits = step(token, decoder.rope(positions[:, at: at + 1], prompt.dtype),
                              AttentionStep(cache, decoder.mask_for(None, 1, at + 1, padded=False)))
                cache.advance(1)
                step_logits.append(logits[0])
            if forced:
                results |= {"prefill/hidden": hidden[0], "decode/logits": torch.stack(step_logits)}
            else:
                results["decode/tokens"] = torch.stack(tokens)
        results["prefill/logits"] = model.code_head(results["prefill/hidden"][-1]).float()
    save_file({k: v.contiguous() for k, v in results.items()}, str(out))
    return {"saved": str(out)}


def compare(folder: Path, ours_file: Path, comparison: Comparison) -> Comparison:
    from safetensors.torch import load_file

    theirs, mine = load_file(str(folder / "references.safetensors")), load_file(str(ours_file))
    comparison.deterministic("prefill hidden states", mine["prefill/hidden"], theirs["prefill/hidden"], TOLERANCE)
    comparison.deterministic("prefill logits", mine["prefill/logits"], theirs["prefill/logits"], TOLERANCE)
    comparison.teacher_forced("decode logits", mine["decode/logits"], theirs["decode/logits"], TOLERANCE)
    comparison.free_running("greedy tokens", mine["decode/tokens"], theirs["decode/tokens"])
    return comparison


def run_and_compare(folder: Path, tmp_path: Path, comparison: Comparison | None = None) -> Comparison:
    """Ours in a pinned process, then compared with the set in `folder` (by default as its fingerprint says)."""
    out = tmp_path / "ours.safetensors"
    run_pinned(__file__, folder, out)
    return compare(folder, out, comparison or Comparison.for_folder("dummy", folder))


if __name__ == "__main__":  # the pinned subprocess
    print(json.dumps(ours(Path(sys.argv[1]), Path(sys.argv[2]))))
