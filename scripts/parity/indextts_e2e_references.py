#!/usr/bin/env python
"""End-to-end references of IndexTTS 2: upstream's own IndexTTS2.infer (indextts/infer_v2.py) on a tiny release
folder (scripts/parity/indextts_release.py), from an index-tts/index-tts checkout (GitHub only: tests/fallback.py
compares on a machine whose floats differ).

    python scripts/parity/indextts_e2e_references.py OUTDIR --checkout PATH            # the set
    python scripts/parity/indextts_e2e_references.py OUTDIR --checkout PATH --spread   # how far it moves

The interpreter: scripts/parity/indextts_upstream_env.sh's venv with librosa 0.10.2.post1 (upstream's pin; infer_v2
loads the references with librosa.load) and wetext installed. Stand-ins, each recorded in references.json:
- `modelscope` (infer_v2 imports its AutoModelForCausalLM for QwenEmotion, which these cases do not load:
  use_qwen_emo=False);
- `indextts.s2mel.dac.nn.quantize` (the length regulator's VectorQuantize, never built: vector_quantize is
  False; its package imports descript-audiotools);
- `matplotlib` (BigVGAN's utils import it for training plots);
- `indextts.utils.tokenizer` (IndexTTS 2.5's, it imports tiktoken and openai-whisper; model_v2 reads only its
  LANGUAGE_DICT in 2.5's campplus mode);
- TextNormalizer.load: upstream builds WeTextProcessing's FSTs on Linux and wetext's elsewhere; here both
  languages' normalisers are the identity (IDENTITY_NORMALISER), so every other step of TextNormalizer.normalize
  (its regexes, pinyin and name protection, the glossary) runs as upstream's and our side runs the same stand-in.
The w2v-BERT, codec, CAM++ and BigVGAN folders are the hf_cache/ ones, passed as `aux_paths` (what
ensure_models_available returns after its downloads).

Each case runs after torch.manual_seed(seed) and random.seed(seed) (upstream seeds neither: its draws are the
global generators') with fresh reference caches: the speaker's and the emotion's w2v-BERT passes (each draws one
torch.rand([]) per layer: LayerDrop's check, eval mode included), the GPT's beam-search sampling (one multinomial a
step), use_random's random.randint per emotion group, the s2mel CFM's randn. Recorded per case: the codes each
segment's inference_speech returned, the mel each segment's CFM solved (past the prompt's frames), BigVGAN's
output for it (before the clamp to PCM scale) and infer's int16 waveform (22.05 kHz), and the normalised text's
tokens and segments.
OUTDIR/references.safetensors holds the outputs, OUTDIR/references.json the release recipe (every file's tensor
names, shapes and seeds), the cases and the upstream record; OUTDIR/bpe.model the tokenizer (trained here by
sentencepiece, kept as bytes) and OUTDIR/speaker.wav, OUTDIR/emotion.wav the references.
"""

from __future__ import annotations

import json
import random
import sys
import tempfile
import types
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import indextts_release as release  # noqa: E402
from pinned import (  # noqa: E402
    checkout_writer_main,
    is_spread_child,
    lifted_runs,
    pin_process,
    save_spread,
    write_checkout_tensors,
)

if "--spread" not in sys.argv and not is_spread_child():
    pin_process()

import numpy as np  # noqa: E402
import torch  # noqa: E402

ABSENT = ("assets/IndexTTS2.mp4", "indextts/utils/maskgct/models/codec/facodec/modules/JDC/bst.t7")
IDENTITY_NORMALISER = "identity (zh and en): TextNormalizer's own steps run around it"
GENERATION = {"max_mel_tokens": 24}  # infer's generation kwargs beyond its defaults (num_beams 3, top_k 30, ...)
# name -> (text, infer keywords, seed)
CASES = {
    "speaker": ("HELLO WORLD 你好", {}, 11),
    "emotion_audio": ("GOOD MORNING 早上好", {"emo_audio_prompt": "emotion.wav", "emo_alpha": 0.6}, 12),
    "emotion_vector": ("HELLO 你好世界", {"emo_vector": [0, 0.3, 0, 0, 0, 0, 0.5, 0]}, 13),
    "emotion_vector_random": ("WORLD 世界", {"emo_vector": [0.2, 0, 0, 0.4, 0, 0, 0, 0.1], "emo_alpha": 0.8,
                                             "use_random": True}, 14),
    "segments": ("HELLO WORLD. GOOD MORNING, 你好。早上好世界！", {"max_text_tokens_per_segment": 6,
                                                          "interval_silence": 120}, 15),
}
CORPUS = ["HELLO WORLD", "GOOD MORNING", "你好 世界 早上 好", "HELLO GOOD WORLD MORNING", "早 上 好 你 世 界",
          "THE SOUND OF A VOICE", "。 ， ！ ？ .", "A B C D E F G H I J K L M N O P Q R S T U V W X Y Z"]


def train_bpe(out: Path) -> Path:
    import sentencepiece as spm

    corpus = out / "corpus.txt"
    corpus.write_text("\n".join(CORPUS * 20) + "\n", encoding="utf-8")
    spm.SentencePieceTrainer.train(input=str(corpus), model_prefix=str(out / "bpe"), vocab_size=90,
                                   model_type="bpe", character_coverage=1.0, num_threads=1,
                                   bos_id=0, eos_id=1, unk_id=2, pad_id=-1, minloglevel=2)
    corpus.unlink()
    (out / "bpe.vocab").unlink()
    return out / "bpe.model"


def waves(out: Path) -> dict:
    """The speaker reference (24 kHz, 1.3 s) and the emotion reference (16 kHz, 0.9 s): tones and noise."""
    import soundfile as sf

    g = np.random.default_rng(5)
    files = {}
    for name, rate, seconds, tones in (("speaker", 24000, 1.3, (180, 410, 1250)), ("emotion", 16000, 0.9, (260, 700))):
        t = np.arange(int(rate * seconds)) / rate
        wave = sum(np.sin(2 * np.pi * f * t) / (i + 2) for i, f in enumerate(tones)) + 0.05 * g.standard_normal(t.size)
        path = out / f"{name}.wav"
        sf.write(path, (0.4 * wave / np.abs(wave).max()).astype(np.float32), rate, subtype="FLOAT")
        files[name] = path
    return files


class Identity:
    def normalize(self, text: str) -> str:
        return text


def upstream(checkout: Path):
    sys.path.insert(0, str(checkout))
    tokenizer = types.ModuleType("indextts.utils.tokenizer")
    tokenizer.LANGUAGE_DICT = {}
    sys.modules["indextts.utils.tokenizer"] = tokenizer
    import transformers

    sys.modules["modelscope"] = types.SimpleNamespace(AutoModelForCausalLM=transformers.AutoModelForCausalLM)
    # BigVGAN's utils import matplotlib for its training plots only
    plots = types.ModuleType("matplotlib")
    plots.use, plots.pylab = (lambda backend: None), types.ModuleType("matplotlib.pylab")
    sys.modules["matplotlib"], sys.modules["matplotlib.pylab"] = plots, plots.pylab
    # the length regulator imports s2mel/dac's VectorQuantize, whose package imports descript-audiotools; only
    # vector_quantize=True builds one (the released config has it False)
    quantize = types.ModuleType("indextts.s2mel.dac.nn.quantize")
    quantize.VectorQuantize = type("VectorQuantize", (), {})
    sys.modules["indextts.s2mel.dac.nn.quantize"] = quantize
    from indextts import infer_v2
    from indextts.utils import front

    def load(self):
        self.zh_normalizer, self.en_normalizer = Identity(), Identity()

    front.TextNormalizer.load = load
    return infer_v2


def recipe(infer_v2, checkout: Path, text_tokens: int) -> dict:
    """Every file's tensor names and shapes, from upstream's modules built as IndexTTS2.__init__ builds them."""
    from indextts.s2mel.modules.campplus.DTDNN import CAMPPlus
    from omegaconf import OmegaConf
    from transformers import Wav2Vec2BertConfig

    config = release.tiny_config(text_tokens)
    cfg = OmegaConf.create(config)
    torch.manual_seed(0)  # upstream's constructors draw; every value is replaced
    gpt = infer_v2.UnifiedVoice(**cfg.gpt)
    s2mel = infer_v2.MyModel(cfg.s2mel, use_gpt_latent=True)
    codec = infer_v2.build_semantic_codec(cfg.semantic_codec)
    w2v = Wav2Vec2BertConfig(**release.W2V_CONFIG)
    w2v_model = infer_v2.Wav2Vec2BertModel(w2v)
    released = json.loads((checkout / "indextts/s2mel/modules/bigvgan/config.json").read_text())
    bigvgan_config = release.bigvgan_config(released)
    from indextts.s2mel.modules.bigvgan import bigvgan

    vocoder = bigvgan.BigVGAN(bigvgan.AttrDict(bigvgan_config), use_cuda_kernel=False)

    def params(module):
        return [[k, list(v.shape)] for k, v in module.named_parameters()]

    assert [k for k, _ in codec.named_buffers()] == [], "the codec file is loaded strictly: buffers need values"
    return {"config": config, "seeds": release.SEEDS, "gpt": params(gpt),
            **{name: params(s2mel.models[name]) for name in ("cfm", "length_regulator", "gpt_layer")},
            # the s2mel nets' persistent buffers (the timestep embedders' frequencies), built, not trained: a
            # released s2mel.pth holds them
            "s2mel_buffers": {name: {k: [list(v.shape), v.flatten().tolist()]
                                     for k, v in s2mel.models[name].state_dict().items()
                                     if k not in dict(s2mel.models[name].named_parameters())}
                              for name in ("cfm", "length_regulator", "gpt_layer")},
            "codec": params(codec), "w2v_bert": params(w2v_model), "w2v_bert_config": w2v.to_dict(),
            "campplus": [[k, list(v.shape), str(v.dtype).removeprefix("torch.")]
                         for k, v in CAMPPlus(feat_dim=80, embedding_size=192).state_dict().items()],
            "bigvgan": params(vocoder), "bigvgan_config": bigvgan_config,
            # the anti-aliasing filters are persistent buffers the strict load wants; they are built, not trained
            "bigvgan_buffers": {k: [list(v.shape), v.flatten().tolist()] for k, v in vocoder.named_buffers()}}


def outputs(checkout: Path) -> tuple[dict, dict]:
    infer_v2 = upstream(checkout)
    work = Path(tempfile.mkdtemp())
    bpe = train_bpe(work)
    import sentencepiece as spm

    text_tokens = spm.SentencePieceProcessor(model_file=str(bpe)).GetPieceSize()
    made = recipe(infer_v2, checkout, text_tokens)
    folder = release.write(work / "IndexTTS-2", made, bpe)
    files = waves(work)
    cache = folder / "hf_cache"
    tts = infer_v2.IndexTTS2(cfg_path=str(folder / "config.yaml"), model_dir=str(folder), device="cpu",
                             use_qwen_emo=False,
                             aux_paths={"w2v_bert": str(cache / "w2v-bert-2.0"),
                                        "semantic_codec": str(cache / "semantic_codec_model.safetensors"),
                                        "campplus": str(cache / "campplus_cn_common.bin"),
                                        "bigvgan": str(cache / "bigvgan")})
    captured = {}
    inference_speech, cfm_inference = tts.gpt.inference_speech, tts.s2mel.models["cfm"].inference

    def speech(*args, **kwargs):
        codes, latent = inference_speech(*args, **kwargs)
        captured.setdefault("codes", []).append(codes.clone())
        return codes, latent

    def solve(*args, **kwargs):
        mel = cfm_inference(*args, **kwargs)
        prompt = args[2].size(-1)  # ref_mel: infer_generator cuts its frames off next
        captured.setdefault("mel", []).append(mel[:, :, prompt:].clone())
        return mel

    tts.gpt.inference_speech, tts.s2mel.models["cfm"].inference = speech, solve
    tts.bigvgan.register_forward_hook(lambda module, args, out: captured.setdefault("vocoded", []).append(out.clone()))
    refs, cases = {}, {}
    for name, (text, keywords, seed) in CASES.items():
        keywords = dict(keywords)
        if "emo_audio_prompt" in keywords:
            keywords["emo_audio_prompt"] = str(files["emotion"])
        tts.cache_spk_cond = tts.cache_emo_cond = None  # every case computes its references afresh
        captured.clear()
        torch.manual_seed(seed)
        random.seed(seed)
        with torch.inference_mode():
            rate, wave = tts.infer(str(files["speaker"]), text, None, **keywords, **GENERATION)
        tokens = tts.tokenizer.tokenize(text)
        limit = keywords.get("max_text_tokens_per_segment", 120)
        segments = tts.tokenizer.split_segments(tokens, limit)
        cases[name] = {"text": text, "keywords": {k: v for k, v in keywords.items() if k != "emo_audio_prompt"},
                       "emotion_audio": "emo_audio_prompt" in keywords, "seed": seed, "rate": rate,
                       "tokens": tokens, "segments": segments, "segment_count": len(captured["codes"])}
        refs[f"{name}/wave"] = torch.from_numpy(np.ascontiguousarray(wave[:, 0]))
        for i, (codes, mel, vocoded) in enumerate(zip(captured["codes"], captured["mel"], captured["vocoded"],
                                                      strict=True)):
            refs[f"{name}/codes/{i}"] = codes.to(torch.int64)
            refs[f"{name}/mel/{i}"] = mel
            refs[f"{name}/vocoded/{i}"] = vocoded
    info = {"release": made, "cases": cases, "generation": GENERATION, "normaliser": IDENTITY_NORMALISER,
            "stand_ins": ["modelscope (unused: use_qwen_emo=False)", "indextts.utils.tokenizer (2.5's)",
                          f"TextNormalizer.load: {IDENTITY_NORMALISER}"],
            "absent_from_checkout": list(ABSENT), "_work": str(work)}
    return {k: v.contiguous().clone() for k, v in refs.items()}, info


def floats(refs: dict) -> list:
    """The outputs a spread is measured on: the mels and the int16 waves (codes are integers)."""
    return [k for k in refs if "/mel/" in k or "/vocoded/" in k or k.endswith("/wave")]


def write(out: Path, checkout: Path) -> None:
    import shutil
    import subprocess

    refs, info = outputs(checkout)
    work = Path(info.pop("_work"))
    out.mkdir(parents=True, exist_ok=True)
    for name in ("bpe.model", "speaker.wav", "emotion.wav"):
        source = work / "IndexTTS-2" / name if name == "bpe.model" else work / name
        shutil.copyfile(source, out / name)
    changes = subprocess.run(["git", "-C", str(checkout), "status", "--porcelain", "--untracked-files=no"],
                             capture_output=True, text=True, check=True).stdout.splitlines()
    info["checkout_changes"] = changes
    write_checkout_tensors(out, refs, info, checkout,
                           "indextts/infer_v2.py IndexTTS2 (__init__ and infer: infer_generator) with everything it "
                           "runs: gpt/model_v2.py, codec/, s2mel/modules/, utils/front.py, utils/common.py",
                           ["torch", "transformers", "librosa", "soxr", "sentencepiece", "numpy", "scipy", "einops",
                            "omegaconf"], repository="index-tts/index-tts")
    shutil.rmtree(work, ignore_errors=True)


def spread(out: Path, checkout: Path) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        runs = lifted_runs(__file__, ["--checkout", checkout], tmp)
    pinned = runs.pop("pinned")
    names = floats(pinned)
    report = {label: {k: float((r[k].double() - pinned[k].double()).abs().max()) for k in names}
              for label, r in runs.items()}
    save_spread(out, report, names)


if __name__ == "__main__":
    checkout_writer_main(__doc__.split("\n\n")[0], write, spread, outputs)
