#!/usr/bin/env python
"""Build tiny random upstream Qwen3-TTS models (qwen-tts 0.1.1, transformers 4.57.3) and write reference outputs
for the native port's tests, with upstream's own code.

Usage, in a venv holding upstream (see scripts/parity/qwen3tts_upstream_env.sh):
    python scripts/parity/qwen3tts_references.py tests/parity/data/qwen3tts

Writes into OUTDIR, one folder per model kind, each in the published Hugging Face layout
(Qwen/Qwen3-TTS-12Hz-*): config.json (model_type qwen3_tts), model.safetensors, generation_config.json (the
published sampling defaults), a tiny byte-level BPE Qwen2 text tokenizer (vocab.json, merges.txt,
tokenizer_config.json, tokenizer.json, special_tokens_map.json, added_tokens.json) and speech_tokenizer/
(config.json qwen3_tts_tokenizer_12hz, model.safetensors, preprocessor_config.json):
    custom_voice/   tts_model_type custom_voice, tts_model_size 1b7 (instruct allowed), 3 speakers, one dialect
    voice_design/   tts_model_type voice_design
    base/           tts_model_type base, speaker encoder (ECAPA), talker width == predictor width (Identity
                    small_to_mtp_projection, as in the 0.6B checkpoints)
    references.safetensors   every reference tensor (C-contiguous; float32 / int64 / bool)
    references.json          cases (texts, ids, seeds, options, tensor names), versions, threads, ATEN level

Everything is loaded back with upstream's loaders (Qwen3TTSModel.from_pretrained, which also loads the speech
tokenizer and generation_config.json) before any reference is produced, and every reference is produced through
upstream's public calls (generate_custom_voice / generate_voice_design / generate_voice_clone,
create_voice_clone_prompt, Qwen3TTSTokenizer.encode / decode) or one upstream module call. Harness-only
instrumentation (no upstream file is edited, numerics untouched): instance-level wrappers around
Qwen3TTSForConditionalGeneration.generate, talker.generate and speech_tokenizer.decode that record their
inputs/outputs, and forward hooks on the talker and the code predictor that record their logits.
"""

import json
import os
import shutil
import sys
import time

from pinned import pin_process  # noqa: E402  (beside this script)

pin_process()  # re-executes under the parity pins, then one thread and oneDNN off
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

import numpy as np  # noqa: E402
import torch  # noqa: E402
from pinned import environment, write_references  # noqa: E402  (beside this script)
from qwen_tts import Qwen3TTSModel  # noqa: E402
from qwen_tts.core.models import Qwen3TTSConfig, Qwen3TTSForConditionalGeneration  # noqa: E402
from qwen_tts.core.models.modeling_qwen3_tts import mel_spectrogram  # noqa: E402
from qwen_tts.core.tokenizer_12hz.configuration_qwen3_tts_tokenizer_v2 import Qwen3TTSTokenizerV2Config  # noqa: E402
from qwen_tts.core.tokenizer_12hz.modeling_qwen3_tts_tokenizer_v2 import Qwen3TTSTokenizerV2Model  # noqa: E402
from transformers import EncodecFeatureExtractor, Qwen2TokenizerFast  # noqa: E402
from transformers.models.qwen2.tokenization_qwen2 import bytes_to_unicode  # noqa: E402

T0 = time.time()
OUT = sys.argv[1] if len(sys.argv) > 1 else "tests/parity/data/qwen3tts"
KINDS = ("custom_voice", "voice_design", "base")
os.makedirs(OUT, exist_ok=True)
SR = 24000

REFS = {}  # name -> np array
CASES = []


def put(name, t):
    a = t.detach().cpu().numpy() if torch.is_tensor(t) else np.asarray(t)
    if a.dtype == np.float64:
        a = a.astype(np.float32)
    if a.dtype == np.int32:
        a = a.astype(np.int64)
    assert name not in REFS, name
    REFS[name] = np.ascontiguousarray(a)
    return name


# ----------------------------------------------------------------------------------------------------------------
# 1. configs. Special ids follow the real layout: control codes sit inside the top 1024 talker ids (which generate
#    suppresses, except EOS) and above the codebook (ids 0..63 here, 0..2047 in the real model).
# ----------------------------------------------------------------------------------------------------------------

TEXT_VOCAB = 288  # 256 byte tokens + 22 merges + 6 specials (278..283) + 4 unused rows
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<tts_pad>", "<tts_text_bos>", "<tts_text_eod>"]
CODEBOOK = 64
GROUPS = 4  # num_code_groups: 1 talker codebook + 3 predictor codebooks (16 = 1 + 15 in the real model)
CODEC_IDS = dict(codec_pad_id=1060, codec_bos_id=1061, codec_eos_token_id=1062, codec_think_id=1066,
                 codec_nothink_id=1067, codec_think_bos_id=1068, codec_think_eos_id=1069)  # real: 2148..2157
LANGS = {"english": 1074, "chinese": 1075, "german": 1076, "sichuan_dialect": 1077, "beijing_dialect": 1078}


def predictor_cfg(hidden):
    return dict(vocab_size=CODEBOOK, hidden_size=hidden, intermediate_size=64, num_hidden_layers=2,
                num_attention_heads=4, num_key_value_heads=2, head_dim=8, num_code_groups=GROUPS, rope_theta=1000000,
                max_position_embeddings=65536, rms_norm_eps=1e-6,
                max_length=20)  # max_length 20 as in the published code_predictor_config


def talker_cfg(hidden, speakers, dialects):
    return dict(vocab_size=1088, hidden_size=hidden, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
                num_key_value_heads=2, head_dim=12, text_vocab_size=TEXT_VOCAB, text_hidden_size=40,
                num_code_groups=GROUPS, rope_theta=1000000, max_position_embeddings=32768, rms_norm_eps=1e-6,
                rope_scaling={"rope_type": "default", "mrope_section": [2, 2, 2], "interleaved": True},
                position_id_per_seconds=13, spk_id=speakers, spk_is_dialect=dialects, codec_language_id=dict(LANGS),
                code_predictor_config=predictor_cfg(32), **CODEC_IDS)


def top_cfg(kind, talker, speaker_encoder=None):
    return Qwen3TTSConfig(
        talker_config=talker, speaker_encoder_config=speaker_encoder or {}, tokenizer_type="qwen3_tts_tokenizer_12hz",
        tts_model_size="1b7" if kind != "base" else "0b6", tts_model_type=kind, im_start_token_id=279,
        im_end_token_id=280, tts_pad_token_id=281, tts_bos_token_id=282, tts_eos_token_id=283,
        assistant_token_id=263, architectures=["Qwen3TTSForConditionalGeneration"])


CFG = {
    "custom_voice": top_cfg("custom_voice", talker_cfg(
        48, {"vivian": 1040, "ryan": 1041, "eric": 1042},
        {"vivian": False, "ryan": False, "eric": "sichuan_dialect"})),
    "voice_design": top_cfg("voice_design", talker_cfg(48, {}, {})),
    # Base: talker width 32 == predictor width 32 -> small_to_mtp_projection is Identity (0.6B layout)
    "base": top_cfg("base", talker_cfg(32, {}, {}),
                    dict(mel_dim=128, enc_dim=32, enc_channels=[32, 32, 32, 32, 96], enc_kernel_sizes=[5, 3, 3, 3, 1],
                         enc_dilations=[1, 2, 3, 4, 1], enc_attention_channels=8, enc_res2net_scale=4,
                         enc_se_channels=8, sample_rate=24000)),
}

# 12 Hz codec, tiny: Mimi encoder hop 64 samples (SEANet 8*4, then the stride-2 downsample), decoder 64 samples
# per frame (upsampling_ratios 2*4, upsample_rates 4*2); decoder head_dim 16 != hidden 32 / 4 heads, as in the real
# config (hidden 512, 16 heads, head_dim 64).
HOP = 64
CODEC_CFG = Qwen3TTSTokenizerV2Config(
    encoder_config=dict(
        sampling_rate=SR, frame_rate=375.0, audio_channels=1, hidden_size=32, num_filters=4, num_residual_layers=1,
        upsampling_ratios=[4, 8], kernel_size=7, last_kernel_size=3, residual_kernel_size=3, dilation_growth_rate=2,
        use_causal_conv=True, pad_mode="constant", compress=2, trim_right_ratio=1.0, codebook_size=CODEBOOK,
        codebook_dim=16, num_quantizers=8, num_semantic_quantizers=1, upsample_groups=32,
        vector_quantization_hidden_dimension=16, num_hidden_layers=1, intermediate_size=64, num_attention_heads=4,
        num_key_value_heads=4, head_dim=8, max_position_embeddings=8000, sliding_window=16, rope_theta=10000.0,
        use_streaming=False),
    decoder_config=dict(
        codebook_size=CODEBOOK, codebook_dim=16, hidden_size=32, latent_dim=16, max_position_embeddings=8000,
        rope_theta=10000, num_attention_heads=4, num_key_value_heads=4, head_dim=16, attention_bias=False,
        sliding_window=8, intermediate_size=64, hidden_act="silu", layer_scale_initial_scale=0.01, rms_norm_eps=1e-5,
        num_hidden_layers=2, num_quantizers=GROUPS, upsample_rates=[4, 2], upsampling_ratios=[2, 4], decoder_dim=16,
        attention_dropout=0.0),
    encoder_valid_num_quantizers=GROUPS, input_sample_rate=SR, output_sample_rate=SR, decode_upsample_rate=HOP,
    encode_downsample_rate=HOP, architectures=["Qwen3TTSTokenizerV2Model"])

GENERATION_CONFIG = {"do_sample": True, "repetition_penalty": 1.05, "temperature": 0.9, "top_p": 1.0, "top_k": 50,
                     "subtalker_dosample": True, "subtalker_temperature": 0.9, "subtalker_top_p": 1.0,
                     "subtalker_top_k": 50, "max_new_tokens": 8192}
PREPROCESSOR = dict(feature_size=1, sampling_rate=SR, padding_value=0.0, chunk_length_s=None, overlap=None,
                    padding_side="right", return_attention_mask=True)

# ----------------------------------------------------------------------------------------------------------------
# 2. re-randomise: upstream leaves norms at 1, biases / SnakeBeta / codebooks at 0, LayerScale at 0.01, ConvNeXt
#    gamma at 1e-6 and linears at N(0, 0.02); all of that would hide bugs. Every float tensor gets a random value of
#    a sensible scale (linears/convs ~ 1/sqrt(fan_in) so activations stay O(1)).
# ----------------------------------------------------------------------------------------------------------------


def rerandomise(model, gen):
    def rn(t, std, mean=0.0):
        t.copy_(mean + std * torch.randn(t.shape, generator=gen, dtype=torch.float32))

    with torch.no_grad():
        for _, mod in model.named_modules():
            cls = type(mod).__name__
            params = dict(mod.named_parameters(recurse=False))
            bufs = dict(mod.named_buffers(recurse=False))
            if isinstance(mod, (torch.nn.Linear, torch.nn.Conv1d)):
                w = params["weight"]
                fan_in = w[0].numel()
                rn(w, fan_in ** -0.5)
                if mod.bias is not None:
                    rn(mod.bias, 0.1)
            elif isinstance(mod, torch.nn.ConvTranspose1d):
                w = params["weight"]  # (in, out/groups, k): each output sees in * k / stride inputs
                rn(w, (w.shape[0] * w.shape[2] / mod.stride[0]) ** -0.5)
                if mod.bias is not None:
                    rn(mod.bias, 0.1)
            elif isinstance(mod, torch.nn.Embedding):
                rn(params["weight"], 1.0)
            elif isinstance(mod, torch.nn.LayerNorm) or "RMSNorm" in cls:
                rn(params["weight"], 0.1, 1.0)
                if "bias" in params and params["bias"] is not None:
                    rn(params["bias"], 0.1)
            elif cls == "SnakeBeta":
                rn(params["alpha"], 0.2)  # log-scale parameters (exp() upstream)
                rn(params["beta"], 0.2)
            elif "LayerScale" in cls:
                rn(params["scale"], 0.05, 0.3)
            elif cls == "Qwen3TTSTokenizerV2ConvNeXtBlock":
                rn(params["gamma"], 0.05, 0.3)
            elif cls == "EuclideanCodebook":  # decoder codebook (parameters)
                rn(params["embedding_sum"], 1.0)
                params["cluster_usage"].copy_(0.5 + 1.5 * torch.rand(params["cluster_usage"].shape, generator=gen))
            elif cls == "MimiEuclideanCodebook":  # encoder codebook (persistent buffers)
                rn(bufs["embed_sum"], 1.0)
                bufs["cluster_usage"].copy_(0.5 + 1.5 * torch.rand(bufs["cluster_usage"].shape, generator=gen))
                mod._embed = None  # drop the lazily cached embed so it is rebuilt from the new buffers


def build_codec(gen_seed):
    torch.manual_seed(gen_seed)
    codec = Qwen3TTSTokenizerV2Model(CODEC_CFG).eval()
    rerandomise(codec, torch.Generator().manual_seed(gen_seed + 1))
    # scale the last conv so the wave (before the final clamp(-1, 1)) has rms ~0.15 for random codes: a wave
    # that mostly sits on the clamp would compare equal whatever the layers before it did
    last = codec.decoder.decoder[-1].conv
    seen = []
    hook = last.register_forward_hook(lambda mod, args, out: seen.append(out))
    with torch.no_grad():
        codes = torch.randint(0, CODEBOOK, (1, GROUPS, 40), generator=torch.Generator().manual_seed(gen_seed + 2))
        codec.decoder(codes)
        scale = 0.15 / seen[0].std().item()
        last.weight.mul_(scale)
        last.bias.mul_(scale)
    hook.remove()
    return codec


def build_model(kind, gen_seed):
    torch.manual_seed(gen_seed)
    model = Qwen3TTSForConditionalGeneration(CFG[kind]).eval()
    rerandomise(model, torch.Generator().manual_seed(gen_seed + 1))
    return model


def build_text_tokenizer(folder):
    """Byte-level BPE with the Qwen2 pre-tokenizer: 256 byte tokens, merges that make 'assistant' and 'user' one
    token each (generate slices the template by token count), then the chat / TTS special tokens."""
    b2u = bytes_to_unicode()
    vocab = {b2u[b]: b for b in range(256)}
    merges = []
    for word in ("assistant", "user", "Ġthe", "Ġhe", "er", "in", "Ġa", "ll", "ĠH", "Ġw"):
        cur = word[0]
        for ch in word[1:]:
            if (cur, ch) not in merges:
                merges.append((cur, ch))
            cur += ch
    for a, b in merges:
        vocab.setdefault(a + b, len(vocab))
    tmp = os.path.join(folder, "_tok_tmp")
    os.makedirs(tmp, exist_ok=True)
    with open(os.path.join(tmp, "vocab.json"), "w", encoding="utf-8") as f:
        json.dump(vocab, f, ensure_ascii=False)
    with open(os.path.join(tmp, "merges.txt"), "w", encoding="utf-8") as f:
        f.write("#version: 0.2\n" + "".join(f"{a} {b}\n" for a, b in merges))
    tok = Qwen2TokenizerFast(vocab_file=os.path.join(tmp, "vocab.json"), merges_file=os.path.join(tmp, "merges.txt"),
                             unk_token=None, bos_token=None, eos_token=SPECIALS[0], pad_token=SPECIALS[0])
    tok.add_special_tokens({"additional_special_tokens": SPECIALS[1:]})
    assert tok.convert_tokens_to_ids(SPECIALS) == list(range(278, 284)), tok.convert_tokens_to_ids(SPECIALS)
    assert tok.convert_tokens_to_ids("assistant") == 263
    tok.save_pretrained(folder)
    shutil.rmtree(tmp)


def save_kind(kind, model, codec):
    folder = os.path.join(OUT, kind)
    shutil.rmtree(folder, ignore_errors=True)
    os.makedirs(os.path.join(folder, "speech_tokenizer"))
    model.save_pretrained(folder, safe_serialization=True)
    # Qwen3TTSSpeakerEncoderConfig takes no **kwargs: drop the "model_type" that PretrainedConfig.to_dict adds, or
    # from_pretrained fails (the published configs carry only the encoder's own fields there)
    with open(os.path.join(folder, "config.json")) as f:
        cfg = json.load(f)
    cfg["speaker_encoder_config"].pop("model_type", None)
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2, sort_keys=True)
    with open(os.path.join(folder, "generation_config.json"), "w") as f:  # replaces HF's GenerationConfig dump
        json.dump(GENERATION_CONFIG, f, indent=2)
    build_text_tokenizer(folder)
    codec.save_pretrained(os.path.join(folder, "speech_tokenizer"), safe_serialization=True)
    EncodecFeatureExtractor(**PREPROCESSOR).save_pretrained(os.path.join(folder, "speech_tokenizer"))


built = {}
codec_built = build_codec(900)
for i, kind in enumerate(KINDS):
    built[kind] = build_model(kind, 100 * (i + 1))
    save_kind(kind, built[kind], codec_built)

# load back through upstream's own loaders; check every tensor survived the round trip
TTS = {kind: Qwen3TTSModel.from_pretrained(os.path.join(OUT, kind)) for kind in KINDS}
for kind in KINDS:
    m = TTS[kind].model
    assert m.training is False and m.speech_tokenizer.model.training is False
    for a, b in ((m, built[kind]), (m.speech_tokenizer.model, codec_built)):
        sa, sb = a.state_dict(), b.state_dict()
        assert sa.keys() == sb.keys(), (kind, set(sa) ^ set(sb))
        assert all(torch.equal(sa[k], sb[k]) for k in sa), kind
    assert next(m.parameters()).dtype == torch.float32
del built
ATTN = {kind: {"talker": TTS[kind].model.talker.config._attn_implementation,
               "code_predictor": TTS[kind].model.talker.code_predictor.config._attn_implementation,
               "codec_decoder": TTS[kind].model.speech_tokenizer.model.decoder.config._attn_implementation,
               "codec_encoder": TTS[kind].model.speech_tokenizer.model.encoder.config._attn_implementation}
        for kind in KINDS}

# ----------------------------------------------------------------------------------------------------------------
# 3. instrumentation (harness only): record what generate hands to the talker, the codes it returns, the wave
#    decode sees, and the logits every talker / predictor forward produces.
# ----------------------------------------------------------------------------------------------------------------


class Recorder:
    def __init__(self, tts):
        self.tts = tts
        m = tts.model
        self.calls = []
        self.talker_logits = []  # per talker forward: logits[:, -1] (B, V); prefill kept whole separately
        self.talker_prefill_logits = None
        self.predictor_logits = []  # per predictor forward: logits[:, -1] (B, codebook)
        orig_generate, orig_talker_generate = m.generate, m.talker.generate
        orig_decode = m.speech_tokenizer.decode

        def generate(**kw):
            codes, hiddens = orig_generate(**kw)
            self.calls.append({"generate_kwargs": kw, "codes": codes})
            return codes, hiddens

        def talker_generate(**kw):
            self.talker_inputs = {k: kw[k] for k in ("inputs_embeds", "attention_mask", "trailing_text_hidden",
                                                     "tts_pad_embed")}
            self.talker_kwargs = {k: v for k, v in kw.items() if not torch.is_tensor(v)}
            return orig_talker_generate(**kw)

        def decode(encoded):
            wavs, sr = orig_decode(encoded)
            self.decoded = (encoded, wavs, sr)
            return wavs, sr

        m.generate, m.talker.generate, m.speech_tokenizer.decode = generate, talker_generate, decode

        def talker_hook(mod, args, kwargs, out):
            if out.logits.shape[1] > 1:
                self.talker_prefill_logits = out.logits.detach().clone()
            self.talker_logits.append(out.logits[:, -1].detach().clone())

        def predictor_hook(mod, args, kwargs, out):
            self.predictor_logits.append(out.logits[:, -1].detach().clone())

        m.talker.register_forward_hook(talker_hook, with_kwargs=True)
        m.talker.code_predictor.register_forward_hook(predictor_hook, with_kwargs=True)

    def reset(self):
        self.calls.clear()
        self.talker_logits.clear()
        self.predictor_logits.clear()
        self.talker_prefill_logits = None
        self.talker_inputs = self.talker_kwargs = self.decoded = None


REC = {kind: Recorder(TTS[kind]) for kind in KINDS}

# ----------------------------------------------------------------------------------------------------------------
# 4. synthetic reference audio (24 kHz float32, |x| < 0.1)
# ----------------------------------------------------------------------------------------------------------------


def synth(n, seed, amp=0.08, f0=180.0, f1=2600.0, rate=SR):
    g = torch.Generator().manual_seed(seed)
    t = torch.arange(n, dtype=torch.float64) / rate
    dur = n / rate
    phase = 2 * torch.pi * (f0 * t + (f1 - f0) * t**2 / (2 * dur))
    env = 0.6 + 0.4 * torch.sin(2 * torch.pi * 3.0 * t)
    x = env * (torch.sin(phase) + 0.35 * torch.sin(2 * phase + 0.5)) + 0.3 * torch.randn(n, generator=g,
                                                                                          dtype=torch.float64)
    return (amp * x / x.abs().max()).to(torch.float32)


REF_A = synth(4800, 11)  # 0.2 s: 75 codec frames, 18 speaker-encoder mel frames
REF_B = synth(3100, 12, amp=0.05, f0=240.0, f1=1800.0)  # 3100 / 64 = 48.4 -> 49 frames (ceil trim)
# references at other rates: upstream resamples them to 24 kHz with librosa (soxr HQ) before both encoders
REF_C16 = synth(3200, 13, f0=200.0, f1=2200.0, rate=16000)  # 0.2 s at 16 kHz
REF_D48 = synth(7200, 14, amp=0.06, f0=160.0, f1=3000.0, rate=48000)  # 0.15 s at 48 kHz
REF_NAMES = {id(REF_A): "audio/ref_a", id(REF_B): "audio/ref_b", id(REF_C16): "audio/ref_c16",
             id(REF_D48): "audio/ref_d48"}
for _ref, _name in ((REF_A, "audio/ref_a"), (REF_B, "audio/ref_b"), (REF_C16, "audio/ref_c16"),
                    (REF_D48, "audio/ref_d48")):
    put(_name, _ref)

# ----------------------------------------------------------------------------------------------------------------
# 5. generation cases, through the public wrapper API
# ----------------------------------------------------------------------------------------------------------------

TEXT_EN = "Hello the world, he will be there."
TEXT_ZH = "你好，世界！123"
TEXT_MIX = "Hi, 你好 in the hall."
INSTRUCT_A = "Speak slowly, with a warm and low voice."
INSTRUCT_B = "Whisper."
REF_TEXT_A = "Well, the weather is fine."
REF_TEXT_B = "He is in."


def tokenize(tts, text):
    return tts._tokenize_texts([text])[0]


def record_case(name, kind, call, request, seed, keep_logits=False):
    rec = REC[kind]
    rec.reset()
    if seed is not None:
        torch.manual_seed(seed)
    wavs, sr = call()
    assert sr == SR and len(rec.calls) == 1
    gkw = rec.calls[0]["generate_kwargs"]
    codes = rec.calls[0]["codes"]
    case = {"name": name, "kind": kind, "api": call.__name__, "request": request, "seed": seed, "tensors": {}}
    opts = {k: v for k, v in gkw.items() if not k.endswith("_ids") and k not in ("voice_clone_prompt", "languages",
                                                                              "speakers")}
    case["generate_options"] = opts
    case["languages"], case["speakers"] = gkw.get("languages"), gkw.get("speakers")
    case["talker_generate_kwargs"] = {k: v for k, v in rec.talker_kwargs.items()
                                      if k not in ("suppress_tokens",)}
    sup = rec.talker_kwargs["suppress_tokens"]
    case["suppress_tokens"] = [int(min(sup)), int(max(sup)), len(sup)]  # first, last, count (EOS left out)
    t = case["tensors"]
    for i, ids in enumerate(gkw["input_ids"]):
        t[f"input_ids_{i}"] = put(f"{name}/input_ids_{i}", ids)
    for i, ids in enumerate(gkw.get("instruct_ids") or []):
        if ids is not None:
            t[f"instruct_ids_{i}"] = put(f"{name}/instruct_ids_{i}", ids)
    for i, ids in enumerate(gkw.get("ref_ids") or []):
        if ids is not None:
            t[f"ref_ids_{i}"] = put(f"{name}/ref_ids_{i}", ids)
    vcp = gkw.get("voice_clone_prompt")
    if vcp is not None:
        case["x_vector_only_mode"], case["icl_mode"] = vcp["x_vector_only_mode"], vcp["icl_mode"]
        for i, e in enumerate(vcp["ref_spk_embedding"]):
            t[f"ref_spk_embedding_{i}"] = put(f"{name}/ref_spk_embedding_{i}", e)
        for i, c in enumerate(vcp["ref_code"]):
            if c is not None:
                t[f"ref_code_{i}"] = put(f"{name}/ref_code_{i}", c)
    for i, c in enumerate(codes):
        t[f"codes_{i}"] = put(f"{name}/codes_{i}", c)  # (frames, num_code_groups) int64, EOS frame excluded
    case["frames"] = [int(c.shape[0]) for c in codes]
    case["hit_eos"] = [bool(c.shape[0] < gkw["max_new_tokens"] - 1) for c in codes]
    encoded, dec_wavs, _ = rec.decoded
    for i, wav in enumerate(wavs):
        t[f"wav_{i}"] = put(f"{name}/wav_{i}", wav)  # what the wrapper returns (reference part cut for ICL)
    # ICL: decode ran on cat(ref_code, codes); the wrapper then drops int(ref_len / total_len * len(wav)) samples
    case["decoded_lengths"] = [int(w.shape[0]) for w in dec_wavs]
    ti = rec.talker_inputs
    t["talker_prefill_embeds"] = put(f"{name}/talker_prefill_embeds", ti["inputs_embeds"])
    t["talker_attention_mask"] = put(f"{name}/talker_attention_mask", ti["attention_mask"])
    t["trailing_text_hidden"] = put(f"{name}/trailing_text_hidden", ti["trailing_text_hidden"])
    if keep_logits:  # raw model logits (before any processor), float32; kept short to keep the data small
        full = keep_logits == "full"
        prefill = rec.talker_prefill_logits if full else rec.talker_prefill_logits[:, -1]
        t["talker_prefill_logits"] = put(f"{name}/talker_prefill_logits", prefill)
        steps = rec.talker_logits[:LOGIT_STEPS]  # [0] = prefill's last position, [k] = forward of frame k-1
        t["talker_step_logits"] = put(f"{name}/talker_step_logits", torch.stack(steps, 0))
        pred = rec.predictor_logits[:LOGIT_STEPS * (GROUPS - 1)]  # (GROUPS-1) forwards per frame, frame-major
        t["predictor_step_logits"] = put(f"{name}/predictor_step_logits", torch.stack(pred, 0))
    CASES.append(case)
    return case


CV, VD, BS = TTS["custom_voice"], TTS["voice_design"], TTS["base"]
MAXN = 40
LOGIT_STEPS = 5


def cv(text, speaker, language=None, instruct=None, **kw):
    def generate_custom_voice():
        return CV.generate_custom_voice(text=text, speaker=speaker, language=language, instruct=instruct,
                                        max_new_tokens=MAXN, **kw)
    return generate_custom_voice, {"text": text, "speaker": speaker, "language": language, "instruct": instruct, **kw}


def vd(text, instruct, language=None, **kw):
    def generate_voice_design():
        return VD.generate_voice_design(text=text, instruct=instruct, language=language, max_new_tokens=MAXN, **kw)
    return generate_voice_design, {"text": text, "instruct": instruct, "language": language, **kw}


def bs(text, ref_audio, ref_text, language=None, rate=SR, **kw):
    def generate_voice_clone():
        audio = [(a.numpy(), rate) for a in ref_audio] if isinstance(ref_audio, list) else (ref_audio.numpy(), rate)
        return BS.generate_voice_clone(text=text, ref_audio=audio, ref_text=ref_text, language=language,
                                       max_new_tokens=MAXN, **kw)
    names = [REF_NAMES[id(a)] for a in (ref_audio if isinstance(ref_audio, list) else [ref_audio])]
    return generate_voice_clone, {"text": text, "ref_audio": names, "ref_sr": rate, "ref_text": ref_text,
                                  "language": language, **kw}


CASE_SPECS = [
    # CustomVoice (wrapper default non_streaming_mode=True)
    ("cv_en_vivian_s0", "custom_voice", cv(TEXT_EN, "Vivian", "English"), 0, "full"),
    ("cv_zh_eric_dialect_s1", "custom_voice", cv(TEXT_ZH, "eric", "Chinese"), 1, False),
    ("cv_auto_ryan_streaming_s2", "custom_voice", cv(TEXT_MIX, "ryan", None, non_streaming_mode=False), 2, False),
    ("cv_instruct_s3", "custom_voice", cv(TEXT_EN, "vivian", "English", INSTRUCT_A), 3, False),
    ("cv_batch2_s4", "custom_voice", cv([TEXT_EN, TEXT_ZH], ["vivian", "eric"], ["English", "Auto"],
                                        [INSTRUCT_B, ""]), 4, True),
    ("cv_greedy", "custom_voice", cv(TEXT_MIX, "vivian", "German", do_sample=False, subtalker_dosample=False), None,
     False),
    ("cv_topp_s5", "custom_voice", cv(TEXT_EN, "ryan", "English", top_p=0.8, top_k=20, temperature=0.7,
                                      repetition_penalty=1.3, subtalker_top_p=0.9, subtalker_top_k=10,
                                      subtalker_temperature=1.1), 5, True),
    # VoiceDesign (wrapper default non_streaming_mode=True)
    ("vd_en_s10", "voice_design", vd(TEXT_EN, INSTRUCT_A, "English"), 10, True),
    ("vd_zh_noinstruct_s11", "voice_design", vd(TEXT_ZH, "", "Chinese"), 11, False),
    ("vd_streaming_s12", "voice_design", vd(TEXT_MIX, INSTRUCT_B, None, non_streaming_mode=False), 12, False),
    ("vd_batch2_s13", "voice_design", vd([TEXT_ZH, TEXT_EN], [INSTRUCT_A, INSTRUCT_B], ["Chinese", "English"]), 13,
     True),
    # Base voice clone (wrapper default non_streaming_mode=False)
    ("bs_xvec_s20", "base", bs(TEXT_EN, REF_A, None, "English", x_vector_only_mode=True), 20, True),
    ("bs_icl_streaming_s21", "base", bs(TEXT_EN, REF_A, REF_TEXT_A, "English"), 21, True),
    ("bs_icl_nonstreaming_s22", "base", bs(TEXT_ZH, REF_B, REF_TEXT_B, "Chinese", non_streaming_mode=True), 22,
     False),
    ("bs_icl_shorttext_s23", "base", bs("Hi.", REF_A, REF_TEXT_A, None), 23, False),
    ("bs_batch2_icl_s24", "base", bs([TEXT_EN, TEXT_MIX], [REF_A, REF_B], [REF_TEXT_A, REF_TEXT_B],
                                     ["English", "Auto"]), 24, True),
    # references at 16 kHz and 48 kHz, resampled by upstream (librosa, soxr HQ) for the codes and the x-vector
    ("bs_icl_16k_s25", "base", bs(TEXT_EN, REF_C16, REF_TEXT_A, "English", rate=16000), 25, False),
    ("bs_icl_48k_s26", "base", bs(TEXT_MIX, REF_D48, REF_TEXT_B, "Auto", rate=48000), 26, False),
]
for name, kind, (call, request), seed, keep in CASE_SPECS:
    record_case(name, kind, call, request, seed, keep_logits=keep)

# two runs of one case in one process must agree (no hidden state across generate calls)
again = record_case("cv_en_vivian_s0_again", "custom_voice", *cv(TEXT_EN, "Vivian", "English"), 0)
assert np.array_equal(REFS["cv_en_vivian_s0/codes_0"], REFS["cv_en_vivian_s0_again/codes_0"])
assert np.array_equal(REFS["cv_en_vivian_s0/wav_0"], REFS["cv_en_vivian_s0_again/wav_0"])
CASES.pop()
for k in [k for k in REFS if k.startswith("cv_en_vivian_s0_again/")]:
    del REFS[k]

# ----------------------------------------------------------------------------------------------------------------
# 6. unit references: speaker encoder, Mimi encoder, codec decoder (chunked), text tokenizer
# ----------------------------------------------------------------------------------------------------------------

UNITS = {}
bm = BS.model
with torch.inference_mode():
    for nm, ref in (("ref_a", REF_A), ("ref_b", REF_B)):
        mel = mel_spectrogram(ref[None], n_fft=1024, num_mels=128, sampling_rate=SR, hop_size=256, win_size=1024,
                              fmin=0, fmax=12000).transpose(1, 2)
        put(f"unit/speaker_mel_{nm}", mel)  # (1, frames, 128): log(clamp(mel, 1e-5)), reflect-padded, center=False
        put(f"unit/xvector_{nm}", bm.extract_speaker_embedding(ref.numpy(), SR))  # (enc_dim,)

    st = bm.speech_tokenizer
    for nm, ref in (("ref_a", REF_A), ("ref_b", REF_B)):
        put(f"unit/mimi_codes_{nm}", st.encode(ref.numpy(), sr=SR).audio_codes[0])  # (frames, 4)
    batch_codes = st.encode([REF_A.numpy(), REF_B.numpy()], sr=SR).audio_codes  # right-padded batch of two
    put("unit/mimi_codes_batch_0", batch_codes[0])
    put("unit/mimi_codes_batch_1", batch_codes[1])

    g = torch.Generator().manual_seed(31)
    short = torch.randint(0, CODEBOOK, (20, GROUPS), generator=g)
    long = torch.randint(0, CODEBOOK, (330, GROUPS), generator=g)  # > 300 frames: chunked_decode's 2nd chunk runs
    mid = torch.randint(0, CODEBOOK, (13, GROUPS), generator=g)
    put("unit/decode_codes_short", short)
    put("unit/decode_codes_long", long)
    put("unit/decode_codes_mid", mid)
    put("unit/decode_wav_short", st.decode({"audio_codes": short})[0][0])
    put("unit/decode_wav_long", st.decode({"audio_codes": long})[0][0])
    bw = st.decode([{"audio_codes": short}, {"audio_codes": mid}])[0]  # padded with -1, then clamp(0), cut
    put("unit/decode_wav_batch_0", bw[0])
    put("unit/decode_wav_batch_1", bw[1])
    dec = st.model.decoder
    codes_bkt = short.T[None]  # (1, groups, frames)
    put("unit/decoder_forward_short", dec(codes_bkt)[0, 0])  # one forward, no chunking
    put("unit/decoder_chunked_c6_l4_short", dec.chunked_decode(codes_bkt, chunk_size=6, left_context_size=4)[0, 0])
    put("unit/decoder_quantized_short", dec.quantizer.decode(codes_bkt)[0])  # (codebook_dim, frames) before pre_conv
UNITS["decoder"] = {"total_upsample": int(dec.total_upsample), "chunked_decode_defaults": [300, 25],
                    "decode_upsample_rate": HOP}
wav = REFS["unit/decode_wav_long"]
UNITS["wave_health"] = {"rms": float(np.sqrt((wav**2).mean())), "clipped_fraction": float((np.abs(wav) >= 1).mean())}

tok = CV.processor.tokenizer
TOK_TEXTS = [TEXT_EN, TEXT_ZH, TEXT_MIX, INSTRUCT_A, "it's   a  test\n\nok", "ÀÉ ü 1234 x/y"]
UNITS["text_tokenizer"] = [{"text": s, "ids": tok(s)["input_ids"],
                            "assistant_ids": CV.processor(text=CV._build_assistant_text(s))["input_ids"][0]}
                           for s in TOK_TEXTS]

# ----------------------------------------------------------------------------------------------------------------
# 7. write + verify
# ----------------------------------------------------------------------------------------------------------------

PACKAGES = ("qwen-tts", "transformers", "accelerate", "tokenizers", "safetensors", "numpy",
            "librosa", "scipy", "torchaudio", "soundfile")
ref_path = os.path.join(OUT, "references.safetensors")
write_references(REFS, ref_path)


def jsonable(x):
    if isinstance(x, dict):
        return {k: jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [jsonable(v) for v in x]
    if torch.is_tensor(x):
        return x.tolist()
    return x


info = {
    **environment(PACKAGES),
    "cpu_capability_seen": torch.backends.cpu.get_cpu_capability(),
    "attn_implementation": ATTN,
    "instrumentation": ["instance wrappers around model.generate, model.talker.generate, speech_tokenizer.decode "
                        "(record inputs/outputs only)",
                        "forward hooks on model.talker and model.talker.code_predictor (record logits only)"],
    "kinds": {kind: {"folder": kind, "tts_model_type": kind, "tts_model_size": CFG[kind].tts_model_size,
                     "talker_hidden": CFG[kind].talker_config.hidden_size} for kind in KINDS},
    "codec": {"hop": HOP, "codebook_size": CODEBOOK, "num_code_groups": GROUPS},
    "special_text_ids": dict(zip(SPECIALS, range(278, 284), strict=True), assistant=263),
    "texts": {"TEXT_EN": TEXT_EN, "TEXT_ZH": TEXT_ZH, "TEXT_MIX": TEXT_MIX, "INSTRUCT_A": INSTRUCT_A,
              "INSTRUCT_B": INSTRUCT_B, "REF_TEXT_A": REF_TEXT_A, "REF_TEXT_B": REF_TEXT_B},
    "units": UNITS,
    "cases": jsonable(CASES),
    "tensors": {k: {"dtype": str(a.dtype), "shape": list(a.shape)} for k, a in REFS.items()},
}  # no timing in the file: writing again on the same floats gives the same bytes
with open(os.path.join(OUT, "references.json"), "w") as f:
    json.dump(info, f, ensure_ascii=False, indent=1)
print(f"wrote {len(REFS)} tensors, {len(CASES)} cases to {OUT} in {time.time() - T0:.2f} s")
for c in CASES:
    print(f"  {c['name']:28s} frames={c['frames']} eos={c['hit_eos']}")
print("wave health", UNITS["wave_health"])
