"""Live parity of Mizuoto's Qwen3-TTS 12 Hz codec decoder against qwen-tts 0.1.1 (dev only).

Run it with the Python of an environment that has upstream installed (qwen-tts, transformers 4.57.3);
our modules are imported from the clone given by --ours (default: this clone):

    .venv-qwen3tts-upstream/bin/python scripts/parity/qwen3tts_codec_live.py [--ours /path/to/clone] [--full]

It pins one intra-op thread and ATEN_CPU_CAPABILITY=avx2 for both sides (the variable must be set
before torch loads, so the script re-executes itself with it when missing; ENGINES.md section 1 says why).

Tiny random speech tokenizers are built with upstream's classes, every decoder parameter re-randomised
(LayerScale, ConvNeXt gamma, Snake alpha/beta, norms, cluster usage with some entries below the clamp),
saved with upstream's `save_pretrained` (config.json + model.safetensors + preprocessor_config.json,
the published layout) and loaded back by both sides: upstream through `Qwen3TTSTokenizer.from_pretrained`,
ours through `load_codec_decoder`. Compared, each by the maximum absolute difference, which must be 0.0:
- `Qwen3TTSTokenizer.decode` (300-frame chunks, 25 frames of context) against `decode_utterances`, for
  single utterances around the window and chunk edges (1 ... 651 frames) and a padded batch;
- the decoder's `chunked_decode` with small chunk sizes against ours, and against `CodecStream` fed
  frames in irregular pieces;
- one window (`forward`), and the wave before the final clamp;
- with --full, the released Qwen3-TTS-Tokenizer-12Hz decoder architecture with random weights.
Exit status 1 when anything differs.

`--golden DIR` instead writes DIR/golden/codec.json: the hashes the CI test (tests/engines/test_qwen3tts_codec.py)
compares with, of upstream's decoder on the weights and codes that test generates (its definitions are read
from its source). DIR is the qwen3tts reference set being written: `python scripts/parity/reference_sets.py
write qwen3tts` runs this so; the test reads the file through `reference_dir("qwen3tts")`.
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import json
import math
import sys
import tempfile
from pathlib import Path

from pinned import add_ours_argument, pin_process, write_golden  # beside this script
from qwen3tts_released import RELEASED_DECODER  # beside this script


def _parse():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_ours_argument(parser)
    parser.add_argument("--full", action="store_true", help="also check the released full-size architecture")
    parser.add_argument("--golden", type=Path, metavar="DIR",
                        help="instead: write the CI test's golden hashes to DIR/golden/codec.json (DIR: the "
                             "qwen3tts reference set being written), and exit")
    parser.add_argument("--threads", type=int, default=1)
    return parser.parse_args()


pin_process()
ARGS = _parse()
sys.path.insert(0, str(ARGS.ours.resolve()))

import numpy as np  # noqa: E402
import torch  # noqa: E402
from qwen_tts import Qwen3TTSTokenizer  # noqa: E402
from qwen_tts.core.tokenizer_12hz.configuration_qwen3_tts_tokenizer_v2 import (  # noqa: E402
    Qwen3TTSTokenizerV2Config,
    Qwen3TTSTokenizerV2DecoderConfig,
)
from qwen_tts.core.tokenizer_12hz.modeling_qwen3_tts_tokenizer_v2 import (  # noqa: E402
    Qwen3TTSTokenizerV2Decoder,
    Qwen3TTSTokenizerV2Model,
)
from safetensors.torch import save_file  # noqa: E402
from transformers import EncodecFeatureExtractor  # noqa: E402

from mizuoto.engines.qwen3tts.codec_config import CodecDecoderConfig  # noqa: E402
from mizuoto.engines.qwen3tts.codec_decoder import CodecDecoder, load_codec_decoder  # noqa: E402

torch.set_num_threads(ARGS.threads)
RESULTS: list[tuple[str, float, bool]] = []

# A tiny Mimi encoder: only there so that upstream's model (and its save/load) is complete.
TINY_ENCODER = dict(hidden_size=32, num_hidden_layers=1, num_attention_heads=4, num_key_value_heads=4, head_dim=8,
                    intermediate_size=64, num_filters=4, upsampling_ratios=[4, 4], upsample_groups=32,
                    codebook_size=32, codebook_dim=16, num_quantizers=4, vector_quantization_hidden_dimension=16,
                    num_semantic_quantizers=1)
# Two tiny decoders: grouped heads, head_dim != hidden / heads, window 8, 12 samples per frame; and
# ungrouped heads with biased projections, window 5, three ratios and three rates (64 samples per frame).
TINY_DECODERS = {
    "gqa": dict(codebook_size=32, codebook_dim=16, num_quantizers=4, latent_dim=24, hidden_size=32, num_hidden_layers=2,
                num_attention_heads=4, num_key_value_heads=2, head_dim=12, intermediate_size=48, sliding_window=8,
                upsampling_ratios=[2], upsample_rates=[2, 3], decoder_dim=32),
    "biased": dict(codebook_size=24, codebook_dim=8, num_quantizers=3, latent_dim=16, hidden_size=16,
                   num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=2, intermediate_size=40,
                   attention_bias=True, sliding_window=5, rope_theta=500.0, upsampling_ratios=[2, 2, 1],
                   upsample_rates=[2, 2, 4], decoder_dim=24),
}
def compare(name: str, ours: torch.Tensor, theirs: torch.Tensor):
    ours, theirs = torch.as_tensor(ours), torch.as_tensor(theirs)
    same_shape = ours.shape == theirs.shape and ours.dtype == theirs.dtype
    diff = (ours.double() - theirs.double()).abs().max().item() if same_shape and ours.numel() else float("nan")
    exact = same_shape and torch.equal(ours, theirs)
    if same_shape and not ours.numel():
        diff = 0.0
    RESULTS.append((name, diff, exact))
    shape = tuple(ours.shape) if same_shape else f"{tuple(ours.shape)} vs {tuple(theirs.shape)}"
    clipped = (theirs.abs() >= 1).float().mean().item() if theirs.numel() else 0.0
    rms = theirs.double().pow(2).mean().sqrt().item() if theirs.numel() else 0.0
    print(f"{'OK  ' if exact else 'DIFF'} {name:58s} max|diff| {diff:.3e}  {shape}  rms {rms:.3f}  "
          f"clipped {clipped:.0%}", flush=True)


def load_test_definitions() -> dict:
    """The CI test's golden definitions (its config, cases, `randomise` and `golden_codes`), taken from
    its source so that one copy exists: the test imports pytest, which this environment lacks."""
    path = ARGS.ours.resolve() / "tests" / "engines" / "test_qwen3tts_codec.py"
    tree = ast.parse(path.read_text())
    wanted = {"GOLDEN_DECODER", "GOLDEN_CASES", "randomise", "golden_codes"}
    nodes = [n for n in tree.body
             if (isinstance(n, ast.FunctionDef) and n.name in wanted)
             or (isinstance(n, ast.Assign) and {getattr(t, "id", None) for t in n.targets} & wanted)]
    namespace = {"torch": torch, "math": math}
    exec(compile(ast.Module(body=nodes, type_ignores=[]), str(path), "exec"), namespace)
    missing = wanted - set(namespace)
    assert not missing, f"{path} lacks {missing}"
    return namespace


TEST = load_test_definitions()
randomise = TEST["randomise"]


def random_codes(config: dict, batch: int, frames: int, generator) -> torch.Tensor:
    return torch.randint(0, config["codebook_size"], (batch, config["num_quantizers"], frames), generator=generator)


def final_conv(config: dict) -> str:
    return f"decoder.{len(config['upsample_rates']) + 2}.conv.weight"


def build_tiny(name: str, folder: Path, seed: int) -> tuple[Qwen3TTSTokenizer, CodecDecoder, dict]:
    decoder_config = TINY_DECODERS[name]
    config = Qwen3TTSTokenizerV2Config(encoder_config=TINY_ENCODER, decoder_config=decoder_config)
    torch.manual_seed(0)  # upstream's init draws from the global generator (this is a script, not library code)
    model = Qwen3TTSTokenizerV2Model(config).eval()
    randomise(model.decoder.named_parameters(), seed, final_conv(decoder_config))
    model.save_pretrained(folder)
    EncodecFeatureExtractor(feature_size=1, sampling_rate=24000).save_pretrained(folder)
    tokenizer = Qwen3TTSTokenizer.from_pretrained(str(folder))
    assert tokenizer.model.decoder.config._attn_implementation == "sdpa"
    return tokenizer, load_codec_decoder(folder), decoder_config


def pre_clamp(decoder_module, codes):
    """The last conv's output (the wave before the clamp) when `decoder_module` decodes one window."""
    seen = []
    handle = decoder_module.decoder[-1].register_forward_hook(lambda m, i, o: seen.append(o.detach().clone()))
    try:
        decoder_module(codes)
    finally:
        handle.remove()
    return torch.cat(seen, dim=-1)


def check_tiny(name: str, seed: int, generator):
    with tempfile.TemporaryDirectory() as tmp:
        tokenizer, ours, config = build_tiny(name, Path(tmp), seed)
    upstream = tokenizer.model.decoder
    window = config["sliding_window"]
    with torch.no_grad():
        for frames in sorted({1, 2, window - 1, window, window + 1, 37, 299, 300, 301, 325, 326, 651}):
            codes = random_codes(config, 1, frames, generator)
            item = codes[0].T.contiguous()  # (T, Q): what the talker hands the tokenizer
            theirs, _ = tokenizer.decode([{"audio_codes": item}])
            mine = ours.decode_utterances([item])
            compare(f"{name} tokenizer.decode T={frames}", mine[0], torch.from_numpy(theirs[0]))
            compare(f"{name} decode (B,Q,T) T={frames}", ours.decode(codes)[0], torch.from_numpy(theirs[0]))
        lengths = [40, 310, 7]
        items = [random_codes(config, 1, n, generator)[0].T.contiguous() for n in lengths]
        theirs, _ = tokenizer.decode([{"audio_codes": c} for c in items])
        mine = ours.decode_utterances(items)
        for i in range(len(lengths)):
            compare(f"{name} tokenizer.decode batch {lengths} item {i}", mine[i], torch.from_numpy(theirs[i]))
        padded = torch.nn.utils.rnn.pad_sequence(items, batch_first=True, padding_value=-1)
        mine = ours.decode_utterances(padded)
        for i in range(len(lengths)):
            compare(f"{name} padded (B,T,Q) tensor item {i}", mine[i], torch.from_numpy(theirs[i]))

        for chunk, context in ((7, 3), (16, 25), (1, 0), (5, 5)):
            codes = random_codes(config, 2, 61, generator)
            theirs = upstream.chunked_decode(codes, chunk_size=chunk, left_context_size=context)
            mine = ours.chunked_decode(codes, chunk, context)
            compare(f"{name} chunked_decode chunk {chunk} context {context}", mine, theirs)
            stream, pieces = ours.stream(batch=2, chunk_size=chunk, left_context=context), []
            start = 0
            for size in (3, 1, 9, 0, 20, 2, 26):
                pieces.append(stream.push(codes[..., start:start + size]))
                start += size
            pieces.append(stream.flush())
            compare(f"{name} stream chunk {chunk} context {context}", torch.cat(pieces, dim=-1), theirs[:, 0])
        codes = random_codes(config, 1, 651, generator)
        stream = ours.stream()
        streamed = torch.cat([stream.push(codes[..., i:i + 50]) for i in range(0, 651, 50)] + [stream.flush()], -1)
        theirs, _ = tokenizer.decode([{"audio_codes": codes[0].T}])
        compare(f"{name} stream 300/25 vs tokenizer.decode T=651", streamed[0], torch.from_numpy(theirs[0]))

        for frames in (1, window, 40):
            codes = random_codes(config, 2, frames, generator)
            compare(f"{name} forward (one window) T={frames}", ours(codes), upstream(codes))
            compare(f"{name} before the clamp T={frames}", pre_clamp(ours, codes),
                    pre_clamp(upstream, codes))


def check_full(seed: int, generator):
    """The released architecture, random weights, decoder only (the Mimi encoder is not needed)."""
    config = Qwen3TTSTokenizerV2DecoderConfig(**RELEASED_DECODER)
    torch.manual_seed(0)
    upstream = Qwen3TTSTokenizerV2Decoder(config).eval()
    assert upstream.config._attn_implementation == "sdpa"
    randomise(upstream.named_parameters(), seed, final_conv(RELEASED_DECODER))
    ours_config = CodecDecoderConfig.released()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        (folder / "config.json").write_text(json.dumps({"model_type": "qwen3_tts_tokenizer_12hz",
                                                        "output_sample_rate": 24000, "decode_upsample_rate": 1920,
                                                        "decoder_config": RELEASED_DECODER}))
        save_file({f"decoder.{k}": v.contiguous() for k, v in upstream.state_dict().items()},
                  str(folder / "model.safetensors"))
        ours = load_codec_decoder(folder)
    assert ours.config == ours_config, (ours.config, ours_config)
    print(f"full size: {sum(p.numel() for p in ours.parameters()) / 1e6:.1f} M parameters, "
          f"{len(ours.state_dict())} tensors", flush=True)
    with torch.no_grad():
        for batch, frames in ((1, 3), (2, 80)):
            codes = random_codes(RELEASED_DECODER, batch, frames, generator)
            compare(f"released architecture chunked_decode B={batch} T={frames}", ours.decode(codes),
                    upstream.chunked_decode(codes)[:, 0])
            compare(f"released architecture before the clamp B={batch} T={frames}",
                    pre_clamp(ours, codes), pre_clamp(upstream, codes))


def golden() -> dict:
    """Hashes of upstream's output on the CI test's own tiny weights and codes (see that test)."""
    config = TEST["GOLDEN_DECODER"]
    upstream = Qwen3TTSTokenizerV2Decoder(Qwen3TTSTokenizerV2DecoderConfig(**config)).eval()
    assert upstream.config._attn_implementation == "sdpa"
    randomise(upstream.named_parameters(), 0, final_conv(config))
    out = {}
    with torch.no_grad():
        for name, (batch, frames, chunk, context) in TEST["GOLDEN_CASES"].items():
            codes = TEST["golden_codes"](config, batch, frames, name)
            wave = upstream.chunked_decode(codes, chunk_size=chunk, left_context_size=context)[:, 0].contiguous()
            out[name] = {"sha256": hashlib.sha256(wave.numpy().tobytes()).hexdigest(),
                         "sum": round(float(wave.double().sum()), 9), "head": wave[0, :3].tolist()}
    return out


def main() -> int:
    print(f"torch {torch.__version__}, threads {torch.get_num_threads()}, "
          f"capability {torch.backends.cpu.get_cpu_capability()}", flush=True)
    if ARGS.golden is not None:
        print(f"wrote {write_golden(ARGS.golden.resolve(), 'codec', golden())}")
        return 0
    generator = torch.Generator().manual_seed(1234)
    for seed, name in enumerate(TINY_DECODERS):
        check_tiny(name, 100 * seed, generator)
    if ARGS.full:
        check_full(1000, generator)
    worst = max((d for _, d, _ in RESULTS if not np.isnan(d)), default=0.0)
    failed = [name for name, _, exact in RESULTS if not exact]
    print(f"\n{len(RESULTS) - len(failed)}/{len(RESULTS)} identical, worst max|diff| {worst:.3e}")
    for name in failed:
        print(f"  differs: {name}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
