#!/usr/bin/env python
"""Reference outputs of CosyVoice 2 and CosyVoice 3 end to end, written by upstream's own CosyVoice2 / CosyVoice3
classes (cosyvoice/cli/cosyvoice.py: the yaml through HyperPyYAML, CosyVoiceFrontEnd with ONNX Runtime, the model)
from a tiny release folder, for every mode with stream=False.

    python scripts/parity/cosyvoice_e2e_references.py OUTDIR --checkout PATH            # the set
    python scripts/parity/cosyvoice_e2e_references.py OUTDIR --checkout PATH --spread   # how far it moves

The interpreter: scripts/parity/cosyvoice_upstream_env.sh. The release is scripts/parity/cosyvoice_release.py's,
from the committed sets: the flows, LMs and HiFTs of cosyvoice_flow / cosyvoice_llm / cosyvoice_model, the tiny
S3 tokenizers of nn/s3tokenizer (ONNX, in the released namings), the CAM++ of nn/campplus_onnx and the tokenizer
files of cosyvoice_text; CosyVoice-BlankEN also gets a random Qwen2 model.safetensors, which Qwen2Encoder loads and
llm.pt then overwrites.

Stand-ins, each for something the writer cannot reach, none of them computing anything upstream computes:
`modelscope` (snapshot_download, never called: the folder exists; wetext 0.0.4 calls it for its FSTs, fails, and
the frontend takes its own no-normaliser path, which is what is recorded), `matcha.utils` (its package imports hydra
and lightning; its `audio` module, the mel, is loaded from the checkout itself), and `torchaudio.load`: torchaudio
2.11 reads files only through torchcodec, so the recording is read as torchaudio 2.3's soundfile backend read it
(soundfile.read, float32, always 2-D, channels first).

Per case, after torch.manual_seed(seed), upstream's inference_* generator is run to its end. Recorded: the strings
given, the normalised fragments and their text ids, the prompt text's ids, the frontend's three reads of the
recording (the 24 kHz mel, ONNX Runtime's speech tokens and CAM++ embedding), every fragment's LM tokens and wave.
The recordings are synthetic (seeded sines, vibrato and noise) and stored as their int16 samples.
"""

from __future__ import annotations

import importlib.util
import logging
import sys
import tempfile
import types
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # mizuoto: the CAM++ the set's campplus.onnx exports
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

import cosyvoice_release  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402

DATA = Path(__file__).resolve().parents[2] / "tests" / "parity" / "data"
S3_ONNX = {"cv2": DATA / "nn" / "s3tokenizer" / "speech_tokenizer_v2_tiny.onnx",
           "cv3": DATA / "nn" / "s3tokenizer" / "speech_tokenizer_v3_tiny.onnx"}
CAMPPLUS = dict(feat_dim=80, embedding_size=192, growth_rate=4, bn_size=2, init_channels=8)  # CosyVoice's in/out
CAMPPLUS_SEED, CAMPPLUS_FILE = 61, "campplus.onnx"

# recordings: name -> (rate, channels, seconds, seed)
RECORDINGS = {"a": (24000, 1, 1.6, 5), "b": (16000, 1, 2.2, 6), "c": (44100, 2, 1.3, 7)}
SYSTEM = "You are a helpful assistant.<|endofprompt|>"
LONG_ZH = ("收到好友从远方寄来的生日礼物，那份意外的惊喜与深深的祝福让我心中充满了甜蜜的快乐，笑容如花儿般绽放。"
           "在他讲述那个荒诞故事的过程中，他突然停下来，因为他自己也被逗笑了。八百标兵奔北坡，北坡炮兵并排跑，"
           "炮兵怕把标兵碰，标兵怕碰炮兵炮。")
# name -> (version, method, arguments after the recording / speaker, seed, speed)
CASES = {
    "cv2/zero_shot": ("cv2", "zero_shot", {"tts_text": "Hello there, it is 3 o'clock.",
                                           "prompt_text": "希望你以后能够做的比我还好呦。", "recording": "a"}, 11, 1.0),
    "cv2/zero_shot_long": ("cv2", "zero_shot", {"tts_text": LONG_ZH, "prompt_text": "The weather is nice today.",
                                                "recording": "b"}, 12, 1.0),
    "cv2/cross_lingual": ("cv2", "cross_lingual", {"tts_text": "他突然[laughter]停下来。[breath]",
                                                   "recording": "c"}, 13, 1.0),
    "cv2/instruct2": ("cv2", "instruct2", {"tts_text": "今天天气真不错，我们出去走走吧。",
                                           "instruct_text": "用四川话说这句话<|endofprompt|>", "recording": "a"},
                      14, 1.2),
    "cv2/saved_speaker": ("cv2", "zero_shot", {"tts_text": "A saved voice speaks again.", "prompt_text": "",
                                               "speaker": "saved"}, 15, 1.0),
    "cv2/sft": ("cv2", "sft", {"tts_text": "A trained speaker.", "speaker": "trained"}, 16, 1.0),
    "cv3/zero_shot": ("cv3", "zero_shot", {"tts_text": "八百标兵奔北坡，北坡炮兵并排跑。",
                                           "prompt_text": SYSTEM + "希望你以后能够做的比我还好呦。", "recording": "a"},
                      21, 1.0),
    "cv3/zero_shot_en": ("cv3", "zero_shot", {"tts_text": "We meet at 10, then walk 25 miles.",
                                              "prompt_text": SYSTEM + "The weather is nice today.", "recording": "c"},
                         22, 0.9),
    "cv3/cross_lingual": ("cv3", "cross_lingual", {"tts_text": SYSTEM + "[breath]因为他们那一辈人[breath]在乡里面住。",
                                                   "recording": "b"}, 23, 1.0),
    "cv3/instruct2": ("cv3", "instruct2", {
        "tts_text": "好少咯，一般系放嗰啲国庆啊。",
        "instruct_text": "You are a helpful assistant. 请用广东话表达。<|endofprompt|>", "recording": "a"}, 24, 1.0),
}
SAVED = {"prompt_text": "希望你以后能够做的比我还好呦。", "recording": "b"}  # add_zero_shot_spk's speaker "saved"


def recording(name: str) -> np.ndarray:
    """(samples, channels) int16: a voiced sound with vibrato, a few harmonics and noise."""
    rate, channels, seconds, seed = RECORDINGS[name]
    rng = np.random.default_rng(seed)
    t = np.arange(int(rate * seconds)) / rate
    f0 = 140.0 + 30.0 * np.sin(2 * np.pi * 3.0 * t) + rng.uniform(-10, 10)
    phase = 2 * np.pi * np.cumsum(f0) / rate
    wave = sum(np.sin(k * phase) / k for k in range(1, 6)) * (0.5 + 0.5 * np.sin(2 * np.pi * 1.1 * t) ** 2)
    wave = 0.25 * wave + 0.01 * rng.standard_normal(t.shape)
    out = np.stack([wave * (0.8 + 0.2 * c) for c in range(channels)], axis=1)
    return np.round(np.clip(out, -1, 1) * 32767).astype(np.int16)


def stand_ins(checkout: Path) -> None:
    for path in (checkout / "third_party" / "Matcha-TTS", checkout):
        sys.path.insert(0, str(path))
    pylogger = types.ModuleType("matcha.utils.pylogger")
    pylogger.get_pylogger = logging.getLogger
    utils = types.ModuleType("matcha.utils")
    utils.__path__ = []
    utils.pylogger = pylogger
    sys.modules.update({"matcha.utils": utils, "matcha.utils.pylogger": pylogger})
    spec = importlib.util.spec_from_file_location(
        "matcha.utils.audio", checkout / "third_party" / "Matcha-TTS" / "matcha" / "utils" / "audio.py")
    audio = importlib.util.module_from_spec(spec)
    sys.modules["matcha.utils.audio"] = audio
    spec.loader.exec_module(audio)
    utils.audio = audio
    import matcha  # the checkout's package: HyperPyYAML's pydoc.locate walks its attributes

    matcha.utils = utils
    modelscope = types.ModuleType("modelscope")

    def snapshot_download(*args, **kwargs):
        raise RuntimeError("no model hub in the reference writer")

    modelscope.snapshot_download = snapshot_download
    sys.modules["modelscope"] = modelscope
    import soundfile
    import torchaudio

    def load(path, *args, **kwargs):  # torchaudio 2.3's soundfile backend
        data, rate = soundfile.read(str(path), dtype="float32", always_2d=True)
        return torch.from_numpy(data.T.copy()), rate

    torchaudio.load = load


def export_campplus(path: Path) -> Path:
    """A narrow CAM++ with CosyVoice's 80 bins in and 192 numbers out, seeded as the nn/campplus_onnx set seeds its
    models, exported as a default torch.onnx.export writes it (TorchScript, constant folding: each BatchNorm after a
    convolution folded into it), the way campplus_onnx_references exports."""
    import campplus_onnx_references as exports
    from seedvc_weights import campplus_state, shapes_of

    from mizuoto.nn import campplus

    config = campplus.CampplusConfig(**CAMPPLUS)
    with torch.device("meta"):
        shapes = shapes_of(campplus.CAMPPlus(config))
    model = campplus.build_campplus(campplus_state(shapes, CAMPPLUS_SEED), config)
    exported, campplus.segment_means = campplus.segment_means, exports.upstream_segment_means
    try:
        torch.onnx.export(model, (torch.randn(1, 160, 80, generator=torch.Generator().manual_seed(0)),), str(path),
                          dynamo=False, opset_version=13, do_constant_folding=True, input_names=["input"],
                          output_names=["embedding"], dynamic_axes={"input": {1: "frames"}})
    finally:
        campplus.segment_means = exported
    return path


def release(folder: Path, version: str, campplus_file: Path) -> Path:
    from transformers import Qwen2Config, Qwen2ForCausalLM

    parts = cosyvoice_release.parts_from_sets(DATA, version)
    tokenizer = cosyvoice_release.tokenizer_folder(DATA, folder.parent / f"tokenizer_{version}")
    cosyvoice_release.write_release(folder, version, tokenizer_files=tokenizer, speech_tokenizer=S3_ONNX[version],
                                    campplus=campplus_file, **parts)
    torch.manual_seed(0)
    Qwen2ForCausalLM(Qwen2Config(**parts["qwen"])).save_pretrained(folder / "CosyVoice-BlankEN")
    return folder


def outputs(checkout: Path, campplus_file: Path | None = None) -> tuple[dict, dict]:
    """-> (the reference tensors, the recipe); `campplus_file`: where the exported CAM++ is kept (the set's copy)."""
    import soundfile

    stand_ins(checkout)
    from cosyvoice.cli.cosyvoice import CosyVoice2, CosyVoice3

    refs, cases = {}, {}
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        wavs = {}
        for name, (rate, *_rest) in RECORDINGS.items():
            samples = recording(name)
            refs[f"recording/{name}"] = torch.from_numpy(samples.astype(np.int32))
            wavs[name] = tmp / f"{name}.wav"
            soundfile.write(str(wavs[name]), samples, rate, subtype="PCM_16")
        campplus_file = export_campplus(campplus_file or tmp / CAMPPLUS_FILE)
        voices = {}
        for version, cls in (("cv2", CosyVoice2), ("cv3", CosyVoice3)):
            voices[version] = voice = cls(str(release(tmp / version, version, campplus_file)))
            assert voice.frontend.text_frontend == "", voice.frontend.text_frontend
        cv2 = voices["cv2"]
        cv2.add_zero_shot_spk(SAVED["prompt_text"], str(wavs[SAVED["recording"]]), "saved")
        saved = cv2.frontend.spk2info["saved"]
        g = torch.Generator().manual_seed(3)
        trained = torch.randn(1, 192, generator=g)
        cv2.frontend.spk2info["trained"] = {"embedding": trained}
        for key in ("prompt_text", "llm_prompt_speech_token", "prompt_speech_feat", "flow_embedding"):
            refs[f"speaker/saved/{key}"] = saved[key].contiguous()
        refs["speaker/trained/embedding"] = trained

        for name, (version, method, args, seed, speed) in CASES.items():
            voice = voices[version]
            frontend, record = voice.frontend, {"fragments": [], "texts": []}
            originals = {}

            def wrap(attr, key, frontend=frontend, record=record, originals=originals):
                original = originals[attr] = getattr(frontend, attr)

                def recorded(*a, **k):
                    out = original(*a, **k)
                    record.setdefault(key, out)
                    return out

                setattr(frontend, attr, recorded)

            wrap("_extract_speech_feat", "feat")
            wrap("_extract_speech_token", "tokens")
            wrap("_extract_spk_embedding", "embedding")
            model, tokens = voice.model, []
            llm_job = model.llm_job

            def recording_job(*a, original=llm_job, model=model, tokens=tokens):
                original(*a)
                tokens.append(list(model.tts_speech_token_dict[a[-1]]))

            model.llm_job = recording_job
            text_token = frontend._extract_text_token

            def text_ids(text, original=text_token, record=record):
                ids, lengths = original(text)
                record["texts"].append((text, ids[0].tolist()))
                return ids, lengths

            frontend._extract_text_token = text_ids
            wav = str(wavs[args["recording"]]) if "recording" in args else ""
            spk = args.get("speaker", "")
            torch.manual_seed(seed)
            if method == "zero_shot":
                run = voice.inference_zero_shot(args["tts_text"], args["prompt_text"], wav, zero_shot_spk_id=spk,
                                                stream=False, speed=speed)
            elif method == "cross_lingual":
                run = voice.inference_cross_lingual(args["tts_text"], wav, stream=False, speed=speed)
            elif method == "instruct2":
                run = voice.inference_instruct2(args["tts_text"], args["instruct_text"], wav, stream=False,
                                                speed=speed)
            else:
                run = voice.inference_sft(args["tts_text"], spk, stream=False, speed=speed)
            waves = [out["tts_speech"] for out in run]
            model.llm_job = llm_job
            frontend._extract_text_token = text_token
            for attr, original in originals.items():
                setattr(frontend, attr, original)
            for i, (wave, fragment) in enumerate(zip(waves, tokens, strict=True)):
                refs[f"{name}/{i}/wave"] = wave.contiguous()
                refs[f"{name}/{i}/tokens"] = torch.tensor(fragment, dtype=torch.int64)
            if "feat" in record:
                refs[f"{name}/feat"] = record["feat"][0].contiguous()
                refs[f"{name}/speech_tokens"] = record["tokens"][0].contiguous()
                refs[f"{name}/embedding"] = record["embedding"].contiguous()
            cases[name] = {"version": version, "method": method, "args": args, "seed": seed, "speed": speed,
                           "fragments": len(waves), "texts": record["texts"]}
    info = {"recordings": {k: list(v) for k, v in RECORDINGS.items()}, "saved": SAVED, "cases": cases,
            "text_frontend": "", "campplus": {"config": CAMPPLUS, "seed": CAMPPLUS_SEED, "file": CAMPPLUS_FILE}}
    return {k: v.contiguous().clone() for k, v in refs.items()}, info


FLOATS = tuple(f"{c}/feat" for c in CASES if "speaker" not in CASES[c][2]) + tuple(
    f"{c}/embedding" for c in CASES if "speaker" not in CASES[c][2])


def write(out: Path, checkout: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    refs, info = outputs(checkout, out / CAMPPLUS_FILE)
    write_checkout_tensors(out, refs, info, checkout,
                           "cosyvoice/cli/cosyvoice.py CosyVoice2/CosyVoice3 inference_zero_shot, "
                           "inference_cross_lingual, inference_instruct2, inference_sft, add_zero_shot_spk "
                           "(stream=False); cli/frontend.py CosyVoiceFrontEnd with onnxruntime",
                           ["torch", "transformers", "diffusers", "x-transformers", "onnxruntime", "HyperPyYAML",
                            "openai-whisper", "inflect"], repository="FunAudioLLM/CosyVoice")


def spread(out: Path, checkout: Path) -> None:
    """Max |difference| of the recordings' mels and embeddings between the pinned run and runs with a pin lifted."""
    with tempfile.TemporaryDirectory() as tmp:
        runs = lifted_runs(__file__, ["--checkout", checkout], tmp)
    pinned = runs.pop("pinned")
    report = {label: {k: float((r[k] - pinned[k]).abs().max()) for k in FLOATS} for label, r in runs.items()}
    save_spread(out, report, FLOATS)


if __name__ == "__main__":
    checkout_writer_main(__doc__.split("\n\n")[0], write, spread, outputs)
