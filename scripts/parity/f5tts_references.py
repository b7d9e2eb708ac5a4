#!/usr/bin/env python
"""Build tiny random upstream F5-TTS (f5-tts 1.1.22) + Vocos (0.1.0) models and write reference outputs
for tests/parity/test_f5tts.py, with upstream's own code.

Usage, in a venv holding upstream (see scripts/parity/f5tts_upstream_env.sh):
    python scripts/parity/f5tts_references.py tests/parity/data/f5tts

Writes into OUTDIR:
    model.safetensors          tiny F5TTS_v1-style DiT, published layout: "ema_model." + CFM keys, plus
                               "initted" (bool) and "step" (int64), exactly like F5TTS_v1_Base/model_1250000.safetensors
    model_base.safetensors     tiny F5TTS_Base-style DiT (text_mask_padding False, pe_attn_head 1), same layout
    F5TTS_tiny_v1.yaml, F5TTS_tiny_base.yaml   hydra-style configs (same schema as f5_tts/configs/*.yaml)
    model_config.json          both archs + mel settings + vocab info
    vocos/config.yaml, vocos/pytorch_model.bin  tiny Vocos in the charactr/vocos-mel-24khz layout
    ref_16k_stereo.wav         synthetic PCM16 reference used by the full API-path cases
    references.safetensors     all reference tensors (C-contiguous; float32 unless noted in references.json)
    references.json            cases (text, seed, options, tensor names, dtypes), versions, threads, ATEN level

All models are loaded back through upstream's own loaders (utils_infer.load_model / load_vocoder) before any
reference is produced. Harness-only patches (no upstream file is edited):
  * torchaudio.load -> soundfile reader (torchaudio 2.11 needs torchcodec+ffmpeg, absent here). Same values for
    PCM16 wavs (int/32768, float32, channels-first).
  * utils_infer.ThreadPoolExecutor -> max_workers=1, so chunks draw their noise from the global RNG in chunk order
    (upstream runs chunks concurrently; the order of their global-RNG draws is then a race).
"""

import hashlib
import json
import os
import sys
import time

from pinned import pin_process  # noqa: E402  (beside this script)

pin_process()  # re-executes under the parity pins, then one thread and oneDNN off

import functools  # noqa: E402
from concurrent.futures import ThreadPoolExecutor  # noqa: E402
from importlib.resources import files  # noqa: E402

import f5_tts.infer.utils_infer as UI  # noqa: E402
import numpy as np  # noqa: E402
import soundfile as sf  # noqa: E402
import torch  # noqa: E402
import torchaudio  # noqa: E402
import yaml  # noqa: E402
from f5_tts.model import CFM, DiT, UNetT  # noqa: E402
from f5_tts.model.utils import convert_char_to_pinyin, get_tokenizer, list_str_to_idx, seed_everything  # noqa: E402
from pinned import environment, write_references  # noqa: E402  (beside this script)
from safetensors.torch import save_file as pt_save_file  # noqa: E402
from vocos import Vocos  # noqa: E402
from vocos.feature_extractors import MelSpectrogramFeatures  # noqa: E402
from vocos.heads import ISTFTHead  # noqa: E402
from vocos.models import VocosBackbone  # noqa: E402

T0 = time.time()
OUT = sys.argv[1] if len(sys.argv) > 1 else "tests/parity/data/f5tts"
for sub in ("vocos", "v1", "base", "e2"):
    os.makedirs(os.path.join(OUT, sub), exist_ok=True)

SR = 24000
HOP = 256
MEL = dict(target_sample_rate=24000, n_mel_channels=100, hop_length=256, win_length=1024, n_fft=1024,
           mel_spec_type="vocos")
VOCAB_FILE = str(files("f5_tts").joinpath("infer/examples/vocab.txt"))
VOCAB, VOCAB_SIZE = get_tokenizer(VOCAB_FILE, "custom")

ARCH_V1 = dict(dim=64, depth=2, heads=4, dim_head=16, ff_mult=2, text_dim=32, text_mask_padding=True, qk_norm=None,
               conv_layers=2, pe_attn_head=None, attn_backend="torch", attn_mask_enabled=False,
               checkpoint_activations=False)
ARCH_BASE = dict(ARCH_V1, text_mask_padding=False, pe_attn_head=1)
# E2TTS_Base's structure (UNetT, no text blocks, text width = mel width), shrunk
ARCH_E2 = dict(dim=64, depth=4, heads=4, dim_head=16, ff_mult=2, text_mask_padding=False, pe_attn_head=1)
VOCOS_CFG = {
    "feature_extractor": {"class_path": "vocos.feature_extractors.MelSpectrogramFeatures",
                          "init_args": {"sample_rate": 24000, "n_fft": 1024, "hop_length": 256, "n_mels": 100,
                                        "padding": "center"}},
    "backbone": {"class_path": "vocos.models.VocosBackbone",
                 "init_args": {"input_channels": 100, "dim": 64, "intermediate_dim": 128, "num_layers": 2}},
    "head": {"class_path": "vocos.heads.ISTFTHead",
             "init_args": {"dim": 64, "n_fft": 1024, "hop_length": 256, "padding": "center"}},
}

REFS = {}  # name -> np array
CASES = []


def put(name, t):
    a = t.detach().cpu().numpy() if torch.is_tensor(t) else np.asarray(t)
    if a.dtype == np.float64 and not name.endswith("_f64"):
        a = a.astype(np.float32)
    assert name not in REFS, name
    REFS[name] = np.ascontiguousarray(a)
    return name


# ----------------------------------------------------------------------------------------------------------------
# 1. build tiny models, re-randomise everything upstream zero-inits (or leaves at 0/1), save in published layouts
# ----------------------------------------------------------------------------------------------------------------


def rerandomise_dit(model, gen):
    with torch.no_grad():
        for name, p in model.named_parameters():
            n = name
            if (".attn_norm.linear." in n or n.startswith("transformer.norm_out.linear.")
                    or n.startswith("transformer.proj_out.")):
                fan_in = p.shape[-1] if p.ndim == 2 else model.transformer.dim
                p.copy_(torch.randn(p.shape, generator=gen) / fan_in**0.5)  # zero-init by initialize_weights
            elif ".grn." in n:
                p.copy_(0.2 * torch.randn(p.shape, generator=gen))  # GRN gamma/beta are zeros
            elif n.endswith(".norm.weight"):
                p.copy_(1 + 0.1 * torch.randn(p.shape, generator=gen))  # ConvNeXtV2 LayerNorm affine
            elif n.endswith(".norm.bias"):
                p.copy_(0.1 * torch.randn(p.shape, generator=gen))
            elif n.endswith(".g"):
                p.copy_(1 + 0.1 * torch.randn(p.shape, generator=gen))  # UNetT's RMSNorm gains start at one


def rerandomise_vocos(voc, gen):
    with torch.no_grad():
        for name, p in voc.named_parameters():
            if name.endswith(".gamma"):
                p.copy_(0.5 + 0.1 * torch.randn(p.shape, generator=gen))
            elif "norm" in name and name.endswith(".weight"):
                p.copy_(1 + 0.1 * torch.randn(p.shape, generator=gen))
            elif name.endswith(".bias"):
                p.copy_(0.02 * torch.randn(p.shape, generator=gen))


def build_and_save_cfm(arch, seed, path, backbone=DiT):
    torch.manual_seed(seed)
    cfm = CFM(
        transformer=backbone(**arch, text_num_embeds=VOCAB_SIZE, mel_dim=100),
        mel_spec_kwargs=MEL,
        odeint_kwargs=dict(method="euler"),
        vocab_char_map=VOCAB,
    )
    rerandomise_dit(cfm, torch.Generator().manual_seed(seed + 1))
    # published layout = ema_pytorch.EMA(model, include_online_model=False).state_dict():
    #   "ema_model.<CFM key>" ... + "initted" (bool scalar) + "step" (int64 scalar)
    sd = {"ema_model." + k: v.contiguous().clone() for k, v in cfm.state_dict().items()}
    sd["initted"] = torch.tensor(True)
    sd["step"] = torch.tensor(0)
    pt_save_file(sd, path)
    return cfm


built_v1 = build_and_save_cfm(ARCH_V1, 1000, os.path.join(OUT, "v1", "model.safetensors"))
built_base = build_and_save_cfm(ARCH_BASE, 2000, os.path.join(OUT, "base", "model.safetensors"))
built_e2 = build_and_save_cfm(ARCH_E2, 4000, os.path.join(OUT, "e2", "model.safetensors"), backbone=UNetT)

torch.manual_seed(3000)
built_voc = Vocos(MelSpectrogramFeatures(24000, 1024, 256, 100, "center"), VocosBackbone(100, 64, 128, 2),
                  ISTFTHead(64, 1024, 256, "center"))
rerandomise_vocos(built_voc, torch.Generator().manual_seed(3001))
with open(os.path.join(OUT, "vocos", "config.yaml"), "w") as f:
    yaml.safe_dump(VOCOS_CFG, f, sort_keys=False)
torch.save({k: v.contiguous().clone() for k, v in built_voc.state_dict().items()},
           os.path.join(OUT, "vocos", "pytorch_model.bin"))

for nm, sub, arch, kind in (("F5TTS_tiny_v1", "v1", ARCH_V1, "DiT"), ("F5TTS_tiny_base", "base", ARCH_BASE, "DiT"),
                            ("E2TTS_tiny", "e2", ARCH_E2, "UNetT")):
    with open(os.path.join(OUT, sub, f"{nm}.yaml"), "w") as f:
        yaml.safe_dump({"model": {"name": nm, "tokenizer": "custom",
                                  "tokenizer_path": "f5_tts/infer/examples/vocab.txt", "backbone": kind, "arch": arch,
                                  "mel_spec": {k: v for k, v in MEL.items()}}}, f, sort_keys=False)
with open(os.path.join(OUT, "model_config.json"), "w") as f:
    json.dump({"v1/model.safetensors": {"backbone": "DiT", "arch": ARCH_V1},
               "base/model.safetensors": {"backbone": "DiT", "arch": ARCH_BASE},
               "e2/model.safetensors": {"backbone": "UNetT", "arch": ARCH_E2},
               "text_num_embeds": VOCAB_SIZE, "mel_dim": 100, "mel_spec": MEL,
               "vocab": "f5_tts/infer/examples/vocab.txt (from the f5-tts 1.1.22 wheel)",
               "vocab_sha256": hashlib.sha256(open(VOCAB_FILE, "rb").read()).hexdigest(),
               "vocos": VOCOS_CFG}, f, indent=1)

# load everything back through upstream's own loaders
model = UI.load_model(DiT, dict(ARCH_V1), os.path.join(OUT, "v1", "model.safetensors"), mel_spec_type="vocos",
                      vocab_file=VOCAB_FILE, ode_method="euler", use_ema=True, device="cpu")
model_base = UI.load_model(DiT, dict(ARCH_BASE), os.path.join(OUT, "base", "model.safetensors"), mel_spec_type="vocos",
                           vocab_file=VOCAB_FILE, ode_method="euler", use_ema=True, device="cpu")
model_e2 = UI.load_model(UNetT, dict(ARCH_E2), os.path.join(OUT, "e2", "model.safetensors"), mel_spec_type="vocos",
                         vocab_file=VOCAB_FILE, ode_method="euler", use_ema=True, device="cpu")
vocoder = UI.load_vocoder("vocos", is_local=True, local_path=os.path.join(OUT, "vocos"), device="cpu")
# load_model leaves the CFM in training mode (CFM.sample switches to eval itself); the direct DiT calls
# below must not run its dropout
model.eval()
model_base.eval()
model_e2.eval()
for a, b in ((model, built_v1), (model_base, built_base), (model_e2, built_e2), (vocoder, built_voc)):
    sa, sb = a.state_dict(), b.state_dict()
    assert sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) for k in sa)
    assert next(a.parameters()).dtype == torch.float32
del built_v1, built_base, built_e2, built_voc

# ----------------------------------------------------------------------------------------------------------------
# 2. synthetic reference audio
# ----------------------------------------------------------------------------------------------------------------


def synth(n, sr, seed, amp=0.05, f0=180.0, f1=2600.0):
    g = torch.Generator().manual_seed(seed)
    t = torch.arange(n, dtype=torch.float64) / sr
    dur = n / sr
    phase = 2 * torch.pi * (f0 * t + (f1 - f0) * t**2 / (2 * dur))
    env = 0.6 + 0.4 * torch.sin(2 * torch.pi * 3.0 * t)
    x = env * (torch.sin(phase) + 0.35 * torch.sin(2 * phase + 0.5)) + 0.3 * torch.randn(n, generator=g,
                                                                                          dtype=torch.float64)
    return (amp * x / x.abs().max()).to(torch.float32)


ref24 = synth(int(1.5 * SR), SR, 11)[None]  # (1, 60000) float32, rms < 0.1
put("audio/ref24k", ref24)

# ----------------------------------------------------------------------------------------------------------------
# 3. unit references (each an upstream call)
# ----------------------------------------------------------------------------------------------------------------

with torch.inference_mode():
    put("unit/cond_mel_ref24k", model.mel_spec(ref24))  # (1, 100, 235) = log(clamp(mel, 1e-5))

# text frontend
TEXTS = [
    "Some call me nature, others call me mother nature.  I don't really care what you call me.",
    "对，这就是我，万人敬仰的太乙真人。",
    "我们一起去吧！Hello world 你好 F5-TTS，测试123。",
    "一个 不是 “引号” ‘单’; 分号",
    "Ünïcödé café naïve — dash… ellipsis",
    "日本語のテキスト 한국어 ㄅㄆ ２０２４年",
    "喂喂，你好啊 hello。。",
]
frontend = []
for s in TEXTS:
    py = convert_char_to_pinyin([s])[0]
    ids = list_str_to_idx([py], VOCAB)[0].tolist()
    frontend.append({"text": s, "tokens": py, "ids": ids})
batch_py = convert_char_to_pinyin(TEXTS[:2])
frontend_batch = {"texts": TEXTS[:2], "ids_padded": list_str_to_idx(batch_py, VOCAB).tolist()}

CHUNK_TEXT = ("I don't really care what you call me. I've been a silent spectator, watching species evolve, empires "
              "rise and fall. But always remember, I am mighty and enduring! Respect me and I'll nurture you; ignore "
              "me and you shall face the consequences. 对，这就是我，万人敬仰的太乙真人。"
              "虽然有点婴儿肥，但也掩不住我逼人的帅气！")
chunks = {str(mc): UI.chunk_text(CHUNK_TEXT, max_chars=mc) for mc in (20, 50, 80, 135, 1000)}

# one DiT forward (cfg packed) and one plain forward, fixed inputs
g = torch.Generator().manual_seed(21)
N = 120
x_in = torch.randn(1, N, 100, generator=g)
cond_in = torch.randn(1, N, 100, generator=g)
cond_in[:, 60:] = 0
txt_ids = list_str_to_idx(convert_char_to_pinyin(["Hello 你好, world."]), VOCAB)
put("unit/dit_x", x_in)
put("unit/dit_cond", cond_in)
put("unit/dit_text", txt_ids)
with torch.inference_mode():
    for nm, m in (("v1", model), ("base", model_base), ("e2", model_e2)):
        tr = m.transformer
        put(f"unit/dit_{nm}_cfg_t0.3", tr(x=x_in, cond=cond_in, text=txt_ids, time=torch.tensor(0.3), cfg_infer=True,
                                          cache=False))
        put(f"unit/dit_{nm}_plain_t0.7", tr(x=x_in, cond=cond_in, text=txt_ids, time=torch.tensor(0.7), cache=False))
        put(f"unit/dit_{nm}_drop_t0.7", tr(x=x_in, cond=cond_in, text=txt_ids, time=torch.tensor(0.7),
                                           drop_audio_cond=True, drop_text=True, cache=False))
        tr.clear_cache()
    # vocoder decode of a fixed mel
    mel_in = torch.randn(1, 100, 50, generator=g) * 2 - 4
    put("unit/vocos_mel_in", mel_in)
    put("unit/vocos_wave", vocoder.decode(mel_in))
    # resampler as used by infer_batch_process (16 kHz -> 24 kHz)
    w16 = synth(16000, 16000, 12)[None]
    put("unit/resample_in16k", w16)
    put("unit/resample_out24k", torchaudio.transforms.Resample(16000, 24000)(w16))

# ----------------------------------------------------------------------------------------------------------------
# 4. (a) CFM.sample directly
# ----------------------------------------------------------------------------------------------------------------

times_seen = []


def _hook(mod, args, kwargs):
    times_seen.append(float(kwargs["time"]))


EN_REF = "Some call me nature, others call me mother nature. "
EN_GEN = "I don't really care what you call me."
ZH_REF = "对，这就是我，万人敬仰的太乙真人。"
ZH_GEN = "虽然有点婴儿肥，但也掩不住我逼人的帅气。"


def dur_formula(ref_frames, ref_text, gen_text, speed=1.0):
    return ref_frames + int(ref_frames / len(ref_text.encode("utf-8")) * len(gen_text.encode("utf-8")) / speed)


def run_sample(name, m, cond, texts, duration, seed, steps, cfg, sway, lens=None, keep_traj=False, vocode=True):
    py = convert_char_to_pinyin(texts)
    h = m.transformer.register_forward_pre_hook(_hook, with_kwargs=True)
    times_seen.clear()
    with torch.inference_mode():
        out, traj = m.sample(cond=cond, text=py, duration=duration, lens=lens, steps=steps, cfg_strength=cfg,
                             sway_sampling_coef=sway, seed=seed)
    h.remove()
    folder = {id(model): "v1", id(model_base): "base", id(model_e2): "e2"}[id(m)]
    case = {"name": name, "kind": "CFM.sample", "model": folder,
            "texts": texts, "pinyin": py, "seed": seed, "steps": steps, "cfg_strength": cfg,
            "sway_sampling_coef": sway, "duration": duration if isinstance(duration, int) else duration.tolist(),
            "lens": None if lens is None else lens.tolist(), "use_epss": True,
            "cond": "audio/ref24k" if cond is ref24 else f"{name}/cond_wave",
            "t_grid_seen": times_seen[:], "tensors": {}}
    if cond is not ref24:
        case["tensors"]["cond_wave"] = put(f"{name}/cond_wave", cond)
    case["tensors"]["text_ids"] = put(f"{name}/text_ids", list_str_to_idx(py, VOCAB))
    case["tensors"]["out_mel"] = put(f"{name}/out_mel", out)  # (b, max_dur, 100), cond frames copied in
    if keep_traj:
        case["tensors"]["trajectory"] = put(f"{name}/trajectory", traj)
    if vocode:
        ref_frames = cond.shape[-1] // HOP
        gen = out[:, ref_frames:, :].permute(0, 2, 1)
        with torch.inference_mode():
            case["tensors"]["wave"] = put(f"{name}/wave", vocoder.decode(gen))
        case["vocoded_from_frame"] = ref_frames
    CASES.append(case)


RF = ref24.shape[-1] // HOP  # 234
D_EN = dur_formula(RF, EN_REF + " ", EN_GEN)
D_ZH = dur_formula(RF, ZH_REF, ZH_GEN)
run_sample("a_en_s0_nfe16", model, ref24, [EN_REF + " " + EN_GEN], D_EN, 0, 16, 2.0, -1.0)
run_sample("a_en_s1234_nfe8", model, ref24, [EN_REF + " " + EN_GEN], D_EN, 1234, 8, 2.0, -1.0)
run_sample("a_en_s0_nfe7", model, ref24, [EN_REF + " " + EN_GEN], D_EN, 0, 7, 2.0, -1.0)
run_sample("a_zh_s42_nfe8", model, ref24, [ZH_REF + ZH_GEN], D_ZH, 42, 8, 2.0, -1.0)
run_sample("a_en_s3_nfe8_cfg0", model, ref24, [EN_REF + " " + EN_GEN], D_EN, 3, 8, 0.0, -1.0)
run_sample("a_en_s3_nfe8_nosway", model, ref24, [EN_REF + " " + EN_GEN], D_EN, 3, 8, 2.0, None)
run_sample("a_base_en_s0_nfe16", model_base, ref24, [EN_REF + " " + EN_GEN], D_EN, 0, 16, 2.0, -1.0)
run_sample("a_base_zh_s5_nfe8", model_base, ref24, [ZH_REF + ZH_GEN], D_ZH, 5, 8, 2.0, -1.0)
run_sample("a_e2_en_s0_nfe16", model_e2, ref24, [EN_REF + " " + EN_GEN], D_EN, 0, 16, 2.0, -1.0)
run_sample("a_e2_zh_s6_nfe8_cfg0", model_e2, ref24, [ZH_REF + ZH_GEN], D_ZH, 6, 8, 0.0, -1.0)

# ----------------------------------------------------------------------------------------------------------------
# 5. (b) inference-process paths (utils_infer), default parameters unless stated
# ----------------------------------------------------------------------------------------------------------------


def _sf_load(path, *a, **k):  # stands in for torchaudio.load (torchcodec/ffmpeg absent); PCM16 -> int/32768
    data, sr = sf.read(path, dtype="float32", always_2d=True)
    return torch.from_numpy(np.ascontiguousarray(data.T)), sr


torchaudio.load = _sf_load
if os.environ.get("F5REF_NO_THREAD_PATCH") != "1":  # set to 1 to observe upstream's concurrent chunk scheduling
    UI.ThreadPoolExecutor = functools.partial(ThreadPoolExecutor, max_workers=1)


def record_process(name, kind, result, meta):
    wave, sr, spec = result
    meta.update({"name": name, "kind": kind, "sr": sr, "wave_dtype": str(wave.dtype), "tensors": {}})
    # float32 like every output Mizuoto returns (a cross-fade makes upstream's wave float64)
    meta["tensors"]["final_wave"] = put(f"{name}/final_wave", wave.astype(np.float32))
    CASES.append(meta)


EN_LONG = ("I don't really care what you call me. I've been a silent spectator, watching species evolve, empires "
           "rise and fall. But always remember, I am mighty and enduring.")

# b1: infer_batch_process directly with an already-preprocessed 24 kHz mono prompt (no pydub, no file I/O)
for name, ref_text, gen, seed, extra in (
    ("b1_en_1chunk_s0", EN_REF, EN_GEN, 0, {}),
    ("b1_en_3chunks_s1", EN_REF, EN_LONG, 1, {"max_chars": 70, "nfe_step": 8}),
    ("b1_zh_2chunks_s2", ZH_REF, ZH_GEN + "我是一个测试句子，用来检查分块。", 2, {"max_chars": 40, "nfe_step": 8}),
    ("b1_en_short_speed0.3_s3", EN_REF, "Hi there", 3, {}),
    ("b1_en_3chunks_fixdur_s4", EN_REF, EN_LONG, 4, {"max_chars": 70, "fix_duration": 6.0, "nfe_step": 8}),
    ("b1_en_nfe16_nocf_s5", EN_REF, EN_LONG, 5, {"max_chars": 70, "nfe_step": 16, "cross_fade_duration": 0.0}),
):
    mc = extra.pop("max_chars", None)
    if mc is None:  # infer_process's own formula
        mc = int(len(ref_text.encode("utf-8")) / (ref24.shape[-1] / SR) * (22 - ref24.shape[-1] / SR) * 1.0)
    batches = UI.chunk_text(gen, max_chars=mc)
    seed_everything(seed)
    res = next(UI.infer_batch_process((ref24.clone(), SR), ref_text, batches, model, vocoder, mel_spec_type="vocos",
                                      progress=None, device="cpu", **extra))
    record_process(name, "infer_batch_process", res,
                   {"ref_audio": "audio/ref24k", "ref_sr": SR, "ref_text": ref_text, "gen_text": gen,
                    "max_chars": mc, "gen_text_batches": batches, "seed_everything": seed,
                    "options": dict({"nfe_step": 32, "cfg_strength": 2.0, "sway_sampling_coef": -1, "speed": 1,
                                     "target_rms": 0.1, "cross_fade_duration": 0.15, "fix_duration": None}, **extra)})

# b2: the F5TTS.infer path: seed_everything -> preprocess_ref_audio_text (pydub, wav only) -> infer_process
#     prompt: 16 kHz stereo PCM16 with leading/trailing silence, low level -> exercises trim, downmix, rms, resample
n16 = int(1.5 * 16000)
left = synth(n16, 16000, 13, amp=0.04)
right = synth(n16, 16000, 14, amp=0.03, f0=220.0, f1=2000.0)
sil = torch.zeros(int(0.4 * 16000))
stereo = torch.stack([torch.cat([sil, left, sil]), torch.cat([sil, right, sil])], dim=1).numpy()  # (n, 2)
wav_path = os.path.join(OUT, "ref_16k_stereo.wav")
sf.write(wav_path, stereo, 16000, subtype="PCM_16")
# the file as a host hands it over (16-bit samples / 32768): Mizuoto's whole path starts from it
put("audio/ref_16k_stereo", sf.read(wav_path, dtype="float32", always_2d=True)[0].T)

for name, ref_text, gen, seed, extra in (
    ("b2_en_api_s0", "Some call me nature, others call me mother nature", EN_LONG, 0, {"nfe_step": 8}),
    ("b2_zh_api_s1", ZH_REF, ZH_GEN, 1, {"nfe_step": 16}),
):
    UI._ref_audio_cache.clear()
    seed_everything(seed)
    ref_file, ref_text_pp = UI.preprocess_ref_audio_text(wav_path, ref_text, show_info=lambda *a: None)
    pp_audio, pp_sr = _sf_load(ref_file)
    res = UI.infer_process(ref_file, ref_text_pp, gen, model, vocoder, mel_spec_type="vocos",
                           show_info=lambda *a: None, progress=None, device="cpu", **extra)
    ref_sec = pp_audio.shape[-1] / pp_sr
    mc = int(len(ref_text_pp.encode("utf-8")) / ref_sec * (22 - ref_sec) * 1.0)
    meta = {"ref_audio_file": "ref_16k_stereo.wav", "original": "audio/ref_16k_stereo", "original_sr": 16000,
            "ref_text_in": ref_text, "ref_text_after_preprocess": ref_text_pp,
            "gen_text": gen, "seed_everything": seed, "max_chars": mc, "gen_text_batches": UI.chunk_text(gen, mc),
            "preprocessed_sr": pp_sr, "preprocessed_shape": list(pp_audio.shape),
            "options": dict({"nfe_step": 32, "cfg_strength": 2.0, "sway_sampling_coef": -1, "speed": 1,
                             "target_rms": 0.1, "cross_fade_duration": 0.15, "fix_duration": None}, **extra)}
    meta["tensors_preprocessed_ref"] = "audio/preprocessed_ref"
    if "audio/preprocessed_ref" in REFS:
        assert np.array_equal(REFS["audio/preprocessed_ref"], pp_audio.numpy())  # the same file each time
    else:
        put("audio/preprocessed_ref", pp_audio)
    record_process(name, "preprocess_ref_audio_text+infer_process", res, meta)
    os.remove(ref_file)
os.remove(wav_path)  # the preprocessed reference is what the tests need

# ----------------------------------------------------------------------------------------------------------------
# 6. write + verify
# ----------------------------------------------------------------------------------------------------------------

PACKAGES = ("f5-tts", "vocos", "x-transformers", "torchdiffeq", "torchaudio", "numpy",
            "pypinyin", "rjieba", "safetensors", "pydub", "soundfile", "librosa")
ref_path = os.path.join(OUT, "references.safetensors")
write_references(REFS, ref_path)


info = {
    **environment(PACKAGES),
    "harness_patches": ["torchaudio.load -> soundfile (PCM16 wav, float32, channels-first)",
                        "f5_tts.infer.utils_infer.ThreadPoolExecutor -> max_workers=1 (chunk order = RNG order)"],
    "frontend": frontend, "frontend_batch": frontend_batch, "chunk_text": {"text": CHUNK_TEXT, "by_max_chars": chunks},
    "cases": CASES,
    "tensors": {k: {"dtype": str(a.dtype), "shape": list(a.shape)} for k, a in REFS.items()},
}  # no timing in the file: writing again on the same floats gives the same bytes
with open(os.path.join(OUT, "references.json"), "w") as f:
    json.dump(info, f, ensure_ascii=False, indent=1)
print(f"wrote {len(REFS)} tensors, {len(CASES)} cases to {OUT} in {time.time() - T0:.2f} s")
