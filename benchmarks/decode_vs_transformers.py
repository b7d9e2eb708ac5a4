"""Decode speed: Mizuoto's loop on the shared QwenDecoder vs transformers' generate(), on the same
tiny Qwen3 weights shaped like the dummy engine's code decoder, with the same logits processors and
seed; the ids must be identical, then tokens per second are compared, measured in the same run.

    python benchmarks/decode_vs_transformers.py [--tokens 200] [--repeats 5] [--threads N]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch
import transformers

from mizuoto.engines.dummy.config import DummyConfig
from mizuoto.nn.qwen_lm import QwenLM
from mizuoto.runtime import decode, sampling

SETTINGS = dict(do_sample=True, temperature=0.8, top_k=30, top_p=0.9, repetition_penalty=1.1)


def tiny_qwen3(vocab: int):
    """A Qwen3 with the dummy engine's decoder shape (engines/dummy/config.py)."""
    dummy = DummyConfig()
    config = transformers.Qwen3Config(vocab_size=vocab, hidden_size=dummy.dim, intermediate_size=dummy.decoder_mlp,
                                      num_hidden_layers=dummy.decoder_layers, num_attention_heads=dummy.decoder_heads,
                                      num_key_value_heads=dummy.decoder_kv_heads, head_dim=dummy.decoder_head_dim,
                                      rope_theta=10000.0, max_position_embeddings=4096, tie_word_embeddings=False)
    config._attn_implementation = "sdpa"
    torch.manual_seed(0)
    return transformers.Qwen3ForCausalLM(config).eval()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tokens", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--fused", action="store_true",
                        help="also time the opt-in fused projections (QwenDecoder.fuse; may change results)")
    opts = parser.parse_args()
    if opts.threads:
        torch.set_num_threads(opts.threads)
    vocab = DummyConfig().codes + 2
    model = tiny_qwen3(vocab)
    lm = QwenLM.from_transformers(model).eval()
    ids = torch.randint(0, vocab, (1, 16), generator=torch.Generator().manual_seed(1))
    attention = torch.ones_like(ids)
    n = opts.tokens
    params = sampling.SamplingParams(**SETTINGS)
    sampler = sampling.Sampler(params, vocab, "cpu")

    def theirs(seed):
        torch.manual_seed(seed)
        return model.generate(input_ids=ids, attention_mask=attention, max_new_tokens=n, min_new_tokens=n,
                              eos_token_id=None, pad_token_id=0, **SETTINGS)[:, ids.shape[1]:]

    def ours(seed):
        logits = lm.start(ids, attention, n, padded=False)
        seen = sampling.seen_mask(ids, vocab)
        tokens, _ = decode.generate_tokens(lm.step, logits, sampler, torch.Generator().manual_seed(seed), n,
                                           seen=seen)
        return tokens

    runs = [("transformers", theirs), ("mizuoto", ours)]
    extra = {}
    with torch.inference_mode():
        assert torch.equal(ours(0), theirs(0)), "the ids differ: the comparison would be meaningless"
        if opts.fused:
            fused = QwenLM.from_transformers(model).eval()
            fused.model.fuse()

            def ours_fused(seed):
                logits = fused.start(ids, attention, n, padded=False)
                tokens, _ = decode.generate_tokens(fused.step, logits, sampler, torch.Generator().manual_seed(seed),
                                                   n, seen=sampling.seen_mask(ids, vocab))
                return tokens

            extra["fused_ids_identical"] = bool(torch.equal(ours_fused(0), theirs(0)))
            runs.append(("mizuoto fused projections", ours_fused))
        times = {name: [] for name, _ in runs}
        for repeat in range(opts.repeats):  # interleaved, so machine noise hits all of them
            for name, run in runs:
                start = time.perf_counter()
                run(repeat)
                times[name].append(time.perf_counter() - start)
    rate = {name: n / statistics.median(t) for name, t in times.items()}
    print(json.dumps({"torch": torch.__version__, "transformers": transformers.__version__,
                      "threads": torch.get_num_threads(), "tokens": n, "ids_identical": True, **extra,
                      "tokens_per_second": {k: round(v, 1) for k, v in rate.items()},
                      "speedup": {k: round(v / rate["transformers"], 2) for k, v in rate.items()
                                  if k != "transformers"}}, indent=2))


if __name__ == "__main__":
    main()
