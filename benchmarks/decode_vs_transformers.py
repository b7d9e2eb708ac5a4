"""Decode speed: Mizuoto's loop on the shared QwenDecoder vs transformers' generate(), same tiny Qwen3
weights, same logits processors, same seed; the ids must be identical, then tokens per second are
compared, measured in the same run.

    python benchmarks/decode_vs_transformers.py [--tokens 200] [--repeats 5] [--threads N]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch
import transformers

from mizuoto.nn.qwen_lm import QwenLM
from mizuoto.runtime import decode, sampling

SETTINGS = dict(do_sample=True, temperature=0.8, top_k=30, top_p=0.9, repetition_penalty=1.1)


def tiny_qwen3():
    config = transformers.Qwen3Config(vocab_size=1024, hidden_size=128, intermediate_size=384, num_hidden_layers=4,
                                      num_attention_heads=8, num_key_value_heads=2, head_dim=16,
                                      max_position_embeddings=4096, tie_word_embeddings=False)
    config._attn_implementation = "sdpa"
    torch.manual_seed(0)
    return transformers.Qwen3ForCausalLM(config).eval()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tokens", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=None)
    opts = parser.parse_args()
    if opts.threads:
        torch.set_num_threads(opts.threads)
    model = tiny_qwen3()
    lm = QwenLM.from_transformers(model).eval()
    ids = torch.randint(0, 1024, (1, 16), generator=torch.Generator().manual_seed(1))
    attention = torch.ones_like(ids)
    n = opts.tokens
    params = sampling.SamplingParams(**SETTINGS)
    sampler = sampling.Sampler(params, 1024, "cpu")

    def theirs(seed):
        torch.manual_seed(seed)
        return model.generate(input_ids=ids, attention_mask=attention, max_new_tokens=n, min_new_tokens=n,
                              eos_token_id=None, pad_token_id=0, **SETTINGS)[:, ids.shape[1]:]

    def ours(seed):
        logits = lm.start(ids, attention, n, padded=False)
        seen = sampling.seen_mask(ids, 1024)
        tokens, _ = decode.generate_tokens(lm.step, logits, sampler, torch.Generator().manual_seed(seed), n,
                                           seen=seen)
        return tokens

    with torch.inference_mode():
        assert torch.equal(ours(0), theirs(0)), "the ids differ: the comparison would be meaningless"
        times = {"transformers": [], "mizuoto": []}
        for repeat in range(opts.repeats):  # interleaved, so machine noise hits both
            for name, run in (("transformers", theirs), ("mizuoto", ours)):
                start = time.perf_counter()
                run(repeat)
                times[name].append(time.perf_counter() - start)
    rate = {name: n / statistics.median(t) for name, t in times.items()}
    print(json.dumps({"torch": torch.__version__, "transformers": transformers.__version__,
                      "threads": torch.get_num_threads(), "tokens": n, "ids_identical": True,
                      "tokens_per_second": {k: round(v, 1) for k, v in rate.items()},
                      "speedup": round(rate["mizuoto"] / rate["transformers"], 2)}, indent=2))


if __name__ == "__main__":
    main()
