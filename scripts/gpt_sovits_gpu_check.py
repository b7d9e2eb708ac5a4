"""GPT-SoVITS v2 and v2ProPlus on a GPU at the released architectures (random weights): the T2S decode's tokens per
second with its step as CUDA graph segments and without (bit for bit the same tokens), float32 and float16; the
SoVITS decode's real-time factor; one fragment's synthesis (T2S + SoVITS) as a real-time factor and the time to its
first audio, for v2 and for v2ProPlus (its ERes2NetV2 speaker embedding of a 5 s reference included, as each request
computes it); v4's CFM (eager and as CUDA graph segments, the same mel), its 48 kHz vocoder and one v4 fragment's
real-time factor; v5turbo's and v5dev's CFM over one fragment (eager and as graphs, the same mel); and the peak memory.

    python scripts/gpt_sovits_gpu_check.py [--json OUT.json] [--tokens 250] [--sample-steps 32] [--device cuda]

The models are Mizuoto's own modules at the released sizes (the GPT of s1longer-v2.yaml: 512 x 24, 16 heads,
1025 semantic tokens; the SoVITS of s2.json with v2's 732 symbols), so no upstream package and no download is
needed. EOS's row is pushed down so each request runs to `--tokens` tokens (about 10 s of speech at 25 Hz).
The issue's goal on the lent H200: v2ProPlus RTF <= 0.02 and first audio <= 150 ms (upstream claims 0.014 on an
RTX 4090). `--device cpu` runs the same script without graphs (to check it; its numbers mean nothing).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from mizuoto.engines.gpt_sovits import sovits, speaker, synthesize, t2s  # noqa: E402
from mizuoto.runtime.graphs import Graphs  # noqa: E402


def random_(module: torch.nn.Module, seed: int) -> torch.nn.Module:
    """Every parameter drawn (norm scales and the positional alphas in [0.5, 1.5), biases small, weights at
    1/sqrt(fan-in)), the codebook standard normal."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in module.named_parameters():
            if name.endswith(("alpha", "gamma")) or ("norm" in name and name.endswith("weight")):
                p.copy_(torch.rand(p.shape, generator=g) + 0.5)
            elif p.dim() == 1:
                p.copy_(torch.randn(p.shape, generator=g) * 0.1)
            else:
                p.copy_(torch.randn(p.shape, generator=g) / math.prod(p.shape[1:]) ** 0.5)
        for name, b in module.named_buffers():
            if name.endswith("embed"):
                b.copy_(torch.randn(b.shape, generator=g))
    return module.eval()


def gpt(device, dtype) -> t2s.Text2Semantic:
    config = t2s.T2SConfig.from_checkpoint({"model": t2s.RELEASED_V2})
    model = random_(t2s.Text2Semantic(config), 1)
    with torch.no_grad():
        model.ar_predict_layer.weight[config.eos] = -10 * model.blocks[-1].norm2.bias.sign()
    return model.to(device, dtype)


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize()


def timed(fn, device, repeats: int = 3):
    fn()
    sync(device)
    best, out = float("inf"), None
    for _ in range(repeats):
        start = time.perf_counter()
        out = fn()
        sync(device)
        best = min(best, time.perf_counter() - start)
    return best, out


def v4(report: dict, device, model, fragment, ref, refer, sampling, steps: int) -> bool:
    """v4 at its released size: the CFM's `steps` Euler steps over a batch of two chunks (one fragment of about
    8 s at T_chunk 1000) eager and as CUDA graph segments (the same bits), the 48 kHz vocoder, and one fragment's
    synthesis (T2S, features, CFM, vocoder) as a real-time factor, float32."""
    from mizuoto.engines.gpt_sovits import cfm, sovits_v3, vocoder, vocoder_synthesis

    config = sovits.SoVITSConfig.from_checkpoint("v4", sovits.RELEASED_V2, 732)
    synth = random_(sovits_v3.SynthesizerV3(config, cfm.CFM(cfm.CFMConfig())), 9).to(device)
    voc = random_(vocoder.HiFiGANVocoder(), 10).to(device)
    g = torch.Generator().manual_seed(11)
    mu = torch.randn(2, 1000, 512, generator=g).to(device)
    prompt = torch.randn(1, 100, 500, generator=g).to(device)
    lengths = torch.tensor([1000], device=device)
    runs = {}
    for graphs in ((None, Graphs(device)) if device.type == "cuda" else (None,)):
        def run(graphs=graphs):
            return synth.cfm.inference(mu, lengths, prompt, steps, generator=torch.Generator(device).manual_seed(12),
                                       graphs=graphs)
        runs["graphs" if graphs is not None else "eager"] = timed(run, device)
    for kind, (seconds, _) in runs.items():
        report[f"v4_cfm_{steps}_steps_{kind}_s"] = round(seconds, 3)
    same = "graphs" not in runs or bool(torch.equal(runs["graphs"][1], runs["eager"][1]))
    report["v4_cfm_graphs_same_mel"] = same
    seconds, wave = timed(lambda: torch.inference_mode()(voc)(prompt * 0.1 - 5), device)
    report["v4_vocoder_rtf"] = round(seconds / (wave.shape[-1] / 48000), 4)
    layout = vocoder_synthesis.LAYOUTS["v4"]
    graphs = Graphs(device) if device.type == "cuda" else None

    def speak():
        with torch.inference_mode():
            start = vocoder_synthesis.MelPrompt(prompt, torch.randn(1, 512, 500, generator=g).to(device),
                                                synth.timbre(refer))

            def decode(tokens, text):
                return vocoder_synthesis.render_batched(synth, voc, layout, start, [(tokens, text)], steps,
                                                        torch.Generator(device).manual_seed(13), graphs=graphs)[0]
            return synthesize.synthesize_with(model, decode, [fragment], ref, sampling,
                                              torch.Generator(device).manual_seed(6), vocoder=True, graphs=graphs,
                                              fragment_interval=0)
    seconds, wave = timed(speak, device)
    report["v4_fragment_audio_s"] = round(wave.shape[-1] / 48000, 2)
    report["v4_fragment_rtf"] = round(seconds / (wave.shape[-1] / 48000), 4)
    report["v4_first_audio_ms"] = round(seconds * 1000, 1)
    return same


def v5(report: dict, device) -> bool:
    """v5 at its released size (v4's DiT without d_embed): one fragment of 640 target frames after a 500-frame
    reference through cfm_v5.synthesize for v5turbo (4 steps, no guidance) and v5dev (32 steps, guidance 1.3), eager
    and as CUDA graph segments (the same bits), float32."""
    from mizuoto.engines.gpt_sovits import cfm, cfm_v5

    model = random_(cfm_v5.CFMV5(cfm.CFMConfig(step_embedding=False)), 14).to(device)
    g = torch.Generator().manual_seed(15)
    reference = torch.randn(1, 512, 500, generator=g).to(device)
    target = torch.randn(1, 512, 640, generator=g).to(device)
    mel = torch.randn(1, 100, 500, generator=g).to(device)
    same = True
    for version in ("v5turbo", "v5dev"):
        steps, rate = cfm_v5.v5_sampling(version, None, None)
        runs = {}
        for graphs in ((None, Graphs(device)) if device.type == "cuda" else (None,)):
            def run(graphs=graphs, steps=steps, rate=rate):
                with torch.inference_mode():
                    return cfm_v5.synthesize(model, reference, target, mel, steps, rate,
                                             torch.Generator(device).manual_seed(16), graphs)
            runs["graphs" if graphs is not None else "eager"] = timed(run, device)
        for kind, (seconds, _) in runs.items():
            report[f"{version}_cfm_{kind}_s"] = round(seconds, 3)
            report[f"{version}_cfm_{kind}_rtf"] = round(seconds / 6.4, 4)  # 640 frames: 6.4 s of speech
        if "graphs" in runs:
            report[f"{version}_cfm_graphs_same_mel"] = bool(torch.equal(runs["graphs"][1], runs["eager"][1]))
            same &= report[f"{version}_cfm_graphs_same_mel"]
    return same


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path)
    parser.add_argument("--tokens", type=int, default=250)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--sample-steps", type=int, default=32, help="v4's CFM steps (api_v2's default)")
    args = parser.parse_args()
    device = torch.device(args.device)
    report, ok = {"device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"}, True
    g = torch.Generator().manual_seed(2)
    phones, prompt = torch.randint(0, 732, (60,), generator=g), torch.randint(0, 1024, (150,), generator=g)
    bert = torch.randn(1024, 60, generator=g)
    sampling = t2s.T2SSampling()
    for dtype in (torch.float32, torch.float16):
        model = gpt(device, dtype)
        model.config = t2s.T2SConfig(**{**model.config.__dict__, "max_sec": args.tokens / 50})
        runs = {}
        for graphs in ((None, Graphs(device)) if device.type == "cuda" else (None,)):
            def run(graphs=graphs, model=model, dtype=dtype):
                with torch.inference_mode():
                    return model.generate(phones.to(device), bert.to(device, dtype), prompt.to(device), sampling,
                                          torch.Generator(device).manual_seed(3), graphs=graphs).tokens
            seconds, tokens = timed(run, device)
            runs["graphs" if graphs is not None else "eager"] = (seconds, tokens)
        name = str(dtype).removeprefix("torch.")
        for kind, (seconds, tokens) in runs.items():
            report[f"t2s_{name}_{kind}_tokens_per_s"] = round(tokens.numel() / seconds, 1)
        if "graphs" in runs:
            same = bool(torch.equal(runs["graphs"][1], runs["eager"][1]))
            report[f"t2s_{name}_graphs_same_tokens"] = same
            ok &= same
    config = sovits.SoVITSConfig.from_checkpoint("v2", sovits.RELEASED_V2, 732)
    synth = random_(sovits.SynthesizerV2(config), 4).to(device)
    codes = torch.randint(0, 1024, (1, 1, args.tokens), generator=g).to(device)
    text = torch.randint(0, 732, (1, 80), generator=g).to(device)
    refer = torch.randn(1, 1025, 250, generator=g).abs().to(device)
    seconds, audio = timed(lambda: synth.decode(codes, text, [refer], torch.Generator(device).manual_seed(5)), device)
    report["sovits_rtf"] = round(seconds / (audio.shape[-1] / 32000), 4)
    model = gpt(device, torch.float32)
    model.config = t2s.T2SConfig(**{**model.config.__dict__, "max_sec": args.tokens / 50})
    graphs = Graphs(device) if device.type == "cuda" else None
    fragment = synthesize.Fragment(tuple(phones[30:].tolist()), bert[:, 30:], "x" * 30)
    ref = synthesize.Prompt(tuple(phones[:30].tolist()), bert[:, :30], prompt)

    def speak():
        with torch.inference_mode():
            return synthesize.synthesize(model, synth, [fragment], ref, [refer], sampling,
                                         torch.Generator(device).manual_seed(6), graphs=graphs, fragment_interval=0)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    seconds, wave = timed(speak, device)
    report["fragment_audio_s"] = round(wave.shape[-1] / 32000, 2)
    report["fragment_rtf"] = round(seconds / (wave.shape[-1] / 32000), 4)
    report["first_audio_ms"] = round(seconds * 1000, 1)  # one fragment: its audio is the first audio
    plus = random_(sovits.SynthesizerV2(sovits.SoVITSConfig.from_checkpoint("v2ProPlus", sovits.RELEASED_V2PRO_PLUS,
                                                                             732)), 7).to(device)
    encoder = random_(speaker.ERes2NetV2(**speaker.RELEASED), 8).to(device)
    reference_16k = (torch.randn(1, 5 * 16000, generator=g) * 0.1).to(device)
    seconds_sv, sv = timed(lambda: torch.inference_mode()(speaker.embedding)(encoder, reference_16k), device)
    report["v2proplus_speaker_embedding_ms"] = round(seconds_sv * 1000, 1)

    def speak_plus():
        with torch.inference_mode():
            embedding = speaker.embedding(encoder, reference_16k)
            return synthesize.synthesize(model, plus, [fragment], ref, [refer], sampling,
                                         torch.Generator(device).manual_seed(6), sv=[embedding], graphs=graphs,
                                         fragment_interval=0)
    seconds, wave = timed(speak_plus, device)
    report["v2proplus_fragment_rtf"] = round(seconds / (wave.shape[-1] / 32000), 4)
    report["v2proplus_first_audio_ms"] = round(seconds * 1000, 1)
    report["goal_v2proplus_rtf_0.02_first_audio_150ms"] = bool(report["v2proplus_fragment_rtf"] <= 0.02
                                                               and report["v2proplus_first_audio_ms"] <= 150)
    ok &= v4(report, device, model, fragment, ref, refer, sampling, args.sample_steps)
    ok &= v5(report, device)
    if device.type == "cuda":
        report["peak_memory_gib"] = round(torch.cuda.max_memory_allocated(device) / 2 ** 30, 2)
    report["ok"] = ok
    print(json.dumps(report, indent=1))
    if args.json:
        args.json.write_text(json.dumps(report, indent=1) + "\n")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
