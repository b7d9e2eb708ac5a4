"""Live parity of Mizuoto's 12 Hz codec encoder (reference -> codes) against qwen-tts 0.1.1 (dev only).

Run it with the Python of the environment that has qwen-tts installed (transformers 4.57.3); our
modules are imported from the clone given by --ours (default: this clone):

    .venv-qwen3tts-upstream/bin/python scripts/parity/qwen3tts_mimi_live.py [--ours /path/to/clone]

It pins one intra-op thread (--threads) and ATEN_CPU_CAPABILITY=avx2 for both sides (re-executing itself
to set the variable before torch loads; ENGINES.md section 1 says why).

For each variant of a tiny `Qwen3TTSTokenizerV2Model` (the released encoder's structure, ratios
8-6-5-4 and a kernel-4 downsampling, at toy widths; variants: grouped key/value heads, bias in the
attention, replicate / reflect padding, `use_streaming`, non-causal convs, `use_cache`, a conv shortcut,
a tiny sliding window, bfloat16) whose encoder parameters and codebooks are re-randomised (LayerNorm, LayerScale,
codebook sums and usages start at constants), saved with `save_pretrained` plus an
EncodecFeatureExtractor `preprocessor_config.json` and loaded back on both sides from that folder
(upstream through `Qwen3TTSTokenizer.from_pretrained`, the way qwen-tts loads a model's
`speech_tokenizer/`; ours from config.json + model.safetensors):

- codes: upstream `Qwen3TTSTokenizer.encode(wave, sr=24000).audio_codes[0]` (T, Q) vs our
  `encode(wave)` (Q, T), transposed; must be identical; likewise a batch of four references (upstream
  pads references that share a rate into one batch) against our `encode_batch`;
- latents before quantisation: upstream's encoder -> transformer -> downsample vs our `latents`,
  maximum absolute difference, must be 0.0. Both sides keep the weights where the memory-mapped
  safetensors file has them (transformers does; our loader does it on purpose): on inputs of one or
  two frames some CPU conv kernels round differently (~1e-7) for weights at other alignments, and
  copying upstream's tensors to fresh memory shows it;
for synthetic references of several lengths (from one frame to 14 s). Then, on the default variant,
other rates: upstream resamples with librosa (soxr); our codes on librosa's 24 kHz output must be
identical, and with our own resampler the script reports the share of equal codes (informative).
Exit status 1 when anything that must be exact differs.

`--golden DIR` instead writes DIR/golden/mimi.json: upstream's latents before quantisation of the two test
references in DIR/references.safetensors through DIR/base/speech_tokenizer, which
tests/engines/test_qwen3tts_mimi.py compares with (the references hold only the codes). DIR is the qwen3tts
reference set being written (qwen3tts_references.py has written its references and model folders there
first): `python scripts/parity/reference_sets.py write qwen3tts` runs this so; the test reads the file through
`reference_dir("qwen3tts")`.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import tempfile
from pathlib import Path

from pinned import add_ours_argument, pin_process, write_golden  # beside this script


def _parse():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_ours_argument(parser)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--golden", type=Path, metavar="DIR",
                        help="instead: write upstream's latents of the test references of DIR (the qwen3tts "
                             "reference set being written; its base model) to DIR/golden/mimi.json, and exit")
    parser.add_argument("--full", action="store_true",
                        help="also the released encoder's size (MimiConfig defaults), random weights")
    return parser.parse_args()


pin_process()
ARGS = _parse()
sys.path.insert(0, str(ARGS.ours.resolve()))

import librosa  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402
from qwen_tts.core.tokenizer_12hz.configuration_qwen3_tts_tokenizer_v2 import (  # noqa: E402
    Qwen3TTSTokenizerV2Config,
)
from qwen_tts.core.tokenizer_12hz.modeling_qwen3_tts_tokenizer_v2 import Qwen3TTSTokenizerV2Model  # noqa: E402
from qwen_tts.inference.qwen3_tts_tokenizer import Qwen3TTSTokenizer  # noqa: E402

from mizuoto.core.errors import InputError  # noqa: E402
from mizuoto.engines.qwen3tts.mimi_encoder import load_mimi_encoder  # noqa: E402

RESULTS: list[tuple[str, float, bool]] = []

ENCODER = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=4, head_dim=8,
               num_filters=4, upsampling_ratios=[8, 6, 5, 4], codebook_size=64, codebook_dim=16, num_quantizers=8,
               vector_quantization_hidden_dimension=16, intermediate_size=64, _frame_rate=12.5, upsample_groups=32)
DECODER = dict(hidden_size=32, codebook_dim=16, num_hidden_layers=1, num_attention_heads=4, head_dim=8,
               num_key_value_heads=4, intermediate_size=64, sliding_window=8, upsample_rates=(2, 2),
               upsampling_ratios=(2,), latent_dim=32, decoder_dim=32, num_quantizers=4, codebook_size=32)
VARIANTS = {
    "default": {},
    "gqa 4q/2kv + attention bias": dict(num_key_value_heads=2, attention_bias=True),
    "replicate padding, 2 residual layers": dict(pad_mode="replicate", num_residual_layers=2),
    "reflect padding, conv shortcut": dict(pad_mode="reflect", use_conv_shortcut=True),
    "use_streaming": dict(use_streaming=True),
    "non-causal convs": dict(use_causal_conv=False),
    "use_cache, sliding_window 3": dict(use_cache=True, sliding_window=3),
    "vq width = hidden (no projections), 2 semantic": dict(vector_quantization_hidden_dimension=32,
                                                           codebook_dim=32, num_semantic_quantizers=2),
}
LENGTHS = (1, 1919, 1920 * 5, 24000 * 2 + 123, 24000 * 14 + 5)
PREPROCESSOR = {"feature_extractor_type": "EncodecFeatureExtractor", "feature_size": 1, "sampling_rate": 24000,
                "padding_side": "right", "padding_value": 0.0, "return_attention_mask": True,
                "chunk_length_s": None, "overlap": None}


def reference(samples: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    t = np.arange(samples) / 24000.0
    wave = 0.3 * np.sin(2 * np.pi * (rng.uniform(90, 250) + 200 * t) * t) + 0.1 * rng.standard_normal(samples)
    return (0.6 * wave / max(1e-9, np.abs(wave).max())).astype(np.float32)


def randomise(model: Qwen3TTSTokenizerV2Model) -> None:
    """Give every constant-initialised encoder tensor random values (LayerNorm 1/0, LayerScale 0.01,
    codebook sums 0 and usages 1), some usages below the 1e-5 floor, so the test can tell them apart."""
    with torch.no_grad():
        for name, p in model.encoder.named_parameters():
            if "layer_scale" in name:
                p.uniform_(0.1, 0.6)
            elif "layernorm" in name:
                p.copy_((1.0 if name.endswith("weight") else 0.0) + 0.2 * torch.randn_like(p))
            elif name.endswith("bias"):
                p.normal_(0.0, 0.1)
        for name, b in model.encoder.named_buffers():
            if name.endswith("embed_sum"):
                b.normal_()
            elif name.endswith("cluster_usage"):
                b.uniform_(0.05, 2.0)
                b[:2] = torch.tensor([1e-7, 0.0])


def build(folder: Path, overrides: dict, seed: int, dtype=torch.float32, valid: int = 5, base=ENCODER) -> tuple:
    torch.manual_seed(seed)
    config = Qwen3TTSTokenizerV2Config(encoder_config={**base, **overrides}, decoder_config=DECODER,
                                       encoder_valid_num_quantizers=valid)
    model = Qwen3TTSTokenizerV2Model(config)
    randomise(model)
    model.to(dtype).save_pretrained(folder)
    (folder / "preprocessor_config.json").write_text(json.dumps(PREPROCESSOR))
    upstream = Qwen3TTSTokenizer.from_pretrained(str(folder), dtype=dtype)
    ours = load_mimi_encoder(folder, dtype=dtype)
    return upstream, ours


@torch.inference_mode()
def upstream_latents(tokenizer, wave: np.ndarray) -> torch.Tensor:
    """What MimiModel._encode_frame computes before its quantizer, through upstream's own modules."""
    encoder = tokenizer.model.encoder
    x = torch.from_numpy(wave).to(tokenizer.model.dtype)[None, None]
    cache = None
    if encoder.config.use_streaming:  # the padding cache MimiModel.encode builds for streaming
        from transformers.models.mimi.modeling_mimi import MimiConv1dPaddingCache

        names = encoder.encoder._mimiconv1d_layer_names
        convs = [encoder.encoder.get_submodule(n) for n in names] + [encoder.downsample]
        cache = MimiConv1dPaddingCache(len(convs), [c.padding_total for c in convs], [c.pad_mode for c in convs],
                                       [c.in_channels for c in convs])
    h = encoder.encoder(x, padding_cache=cache)
    h = encoder.encoder_transformer(h.transpose(1, 2), return_dict=True).last_hidden_state.transpose(1, 2)
    return encoder.downsample(h, padding_cache=cache)


def compare_codes(name: str, ours: torch.Tensor, theirs: torch.Tensor) -> None:
    theirs = theirs.transpose(0, 1)
    same = ours.shape == theirs.shape and ours.dtype == theirs.dtype and torch.equal(ours, theirs)
    RESULTS.append((f"codes {name} {tuple(ours.shape)} vs {tuple(theirs.shape)} {theirs.dtype}",
                    0.0 if same else float("inf"), True))


def compare_latents(name: str, ours: torch.Tensor, theirs: torch.Tensor, exact: bool = True) -> None:
    diff = (ours.double() - theirs.double()).abs().max().item() if ours.shape == theirs.shape else float("inf")
    RESULTS.append((f"latents {name} {tuple(ours.shape)}", diff, exact))


def misaligned(module: torch.nn.Module) -> int:
    """How many of the module's tensors do not start on a 64-byte boundary (informative: both sides
    keep the weights where the memory-mapped file has them, so both see the same alignment)."""
    return sum(t.data_ptr() % 64 != 0 for t in [*module.parameters(), *module.buffers()])


def fingerprint(t: torch.Tensor) -> dict:
    """What the CI tests compare (tests/engines/test_qwen3tts_*.py compute it the same way)."""
    a = t.detach().contiguous().cpu().numpy()
    return {"shape": list(a.shape), "sha256": hashlib.sha256(a.tobytes()).hexdigest(),
            "sum": round(float(a.astype(np.float64).sum()), 6)}


def golden(data: Path) -> int:
    """Upstream's pre-quantisation latents of the test references of the set `data` through its base
    model's codec, the CI test's golden values (the references hold only the codes)."""
    from safetensors.torch import load_file

    refs = load_file(str(data / "references.safetensors"))
    tokenizer = Qwen3TTSTokenizer.from_pretrained(str(data / "base" / "speech_tokenizer"))
    weights = hashlib.sha256((data / "base" / "speech_tokenizer" / "model.safetensors").read_bytes()).hexdigest()
    out = {name: {"weights_sha256": weights, "audio_sha256": fingerprint(refs[f"audio/{name}"])["sha256"],
                  **fingerprint(upstream_latents(tokenizer, refs[f"audio/{name}"].numpy()))}
           for name in ("ref_a", "ref_b")}
    print(f"wrote {write_golden(data, 'mimi', out)}")
    return 0


def main() -> int:
    torch.set_num_threads(ARGS.threads)
    if ARGS.golden is not None:
        return golden(ARGS.golden.resolve())
    with tempfile.TemporaryDirectory() as tmp:
        for index, (label, overrides) in enumerate([*VARIANTS.items(), ("bfloat16", {})]):
            dtype = torch.bfloat16 if label == "bfloat16" else torch.float32
            upstream, ours = build(Path(tmp) / f"v{index}", overrides, seed=index, dtype=dtype)
            attention = type(upstream.model.encoder.encoder_transformer.layers[0].self_attn).__name__
            unaligned = misaligned(upstream.model.encoder)
            for n in LENGTHS:
                wave = reference(n, 7 * index + n)
                try:
                    theirs = upstream.encode(wave, sr=24000).audio_codes[0]
                except RuntimeError as exc:  # a streaming encoder cannot take less than a frame
                    try:
                        ours.encode(wave)
                        RESULTS.append((f"[{label}] {n} samples: upstream fails ({exc}), ours does not",
                                        float("inf"), True))
                    except InputError as ours_exc:
                        RESULTS.append((f"[{label}] {n} samples: both refuse ({ours_exc})", 0.0, True))
                    continue
                compare_codes(f"[{label}, {attention}] {n} samples", ours.encode(wave), theirs)
                compare_latents(f"[{label}] {n} samples", ours.latents(torch.from_numpy(wave)[None].to(dtype)),
                                upstream_latents(upstream, wave))
            batch = [reference(n, 11 * index + n) for n in (24000 * 3 + 77, 9140, 24961, 24000 * 3 + 77)]
            theirs = upstream.encode(batch, sr=24000).audio_codes  # qwen-tts batches references of one rate
            for i, (mine, want) in enumerate(zip(ours.encode_batch(batch), theirs, strict=True)):
                compare_codes(f"[{label}] batch of 4, item {i} ({batch[i].shape[0]} samples)", mine, want)
            RESULTS.append((f"[{label}] tensors not 64-byte aligned: upstream {unaligned}, "
                            f"ours {misaligned(ours)}", 0.0, False))

        if ARGS.full:
            upstream, ours = build(Path(tmp) / "full", {}, seed=123, valid=16, base={"_frame_rate": 12.5})
            for n in (24000 * 3 + 17, 24000 * 9):
                wave = reference(n, n)
                theirs = upstream.encode(wave, sr=24000).audio_codes[0]
                compare_codes(f"[released size] {n} samples", ours.encode(wave), theirs)
                compare_latents(f"[released size] {n} samples", ours.latents(torch.from_numpy(wave)[None]),
                                upstream_latents(upstream, wave))

        upstream, ours = build(Path(tmp) / "rates", {}, seed=99)
        for rate in (16000, 22050, 44100, 48000):
            wave = reference(rate * 4 + 3, rate)
            theirs = upstream.encode(wave, sr=rate).audio_codes[0]
            resampled = librosa.resample(y=wave, orig_sr=rate, target_sr=24000)
            compare_codes(f"from {rate} Hz via librosa's resampled audio", ours.encode(resampled), theirs)
            mine = ours.encode(wave, sample_rate=rate)
            agree = (mine == theirs.T).double().mean().item() if mine.shape == theirs.T.shape else 0.0
            RESULTS.append((f"codes from {rate} Hz with our resampler: {mine.shape} vs {tuple(theirs.T.shape)}, "
                            f"{100 * agree:.1f}% equal", 1.0 - agree, False))

    failed = False
    for name, diff, exact in RESULTS:
        bad = exact and diff != 0.0
        failed |= bad
        print(f"{'FAIL' if bad else 'ok  '} {diff:.3e}  {name}{'' if exact else '  (informative)'}")
    print(f"threads {torch.get_num_threads()}, ATEN_CPU_CAPABILITY avx2, torch {torch.__version__}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
