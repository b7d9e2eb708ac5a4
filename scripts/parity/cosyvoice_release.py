"""A tiny CosyVoice release folder in the published layout, written the same way by the end-to-end writer (for
upstream's CosyVoice2 / CosyVoice3 classes, in the upstream venv) and by the tests (for our loader). Pure torch and
json, no upstream import.

    cosyvoice2.yaml | cosyvoice3.yaml   the model sections of the released yaml at the tiny sizes, in HyperPyYAML
    llm.pt, flow.pt, hift.pt            state dicts in upstream's names
    speech_tokenizer_v2.onnx | _v3.onnx, campplus.onnx      copied from the sets that hold them
    spk2info.pt                         optional
    CosyVoice-BlankEN/                  the tokenizer files (copied) and a Qwen2 config.json at the LM's tiny size

The sizes are the other CosyVoice sets' (`cosyvoice_flow`, `cosyvoice_llm`, `cosyvoice_model`'s 80-band HiFTs); the
yaml's `!ref`s and tags are written as the released files write them, so HyperPyYAML builds upstream's modules at
those sizes (and their constructors draw what they draw) and our reader reads the same numbers.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import cosyvoice_weights  # noqa: E402
from seedvc_weights import hift_state  # noqa: E402

YAML_NAME = {"cv2": "cosyvoice2.yaml", "cv3": "cosyvoice3.yaml"}
TOKENIZER_ONNX = {"cv2": "speech_tokenizer_v2.onnx", "cv3": "speech_tokenizer_v3.onnx"}
LM_CLASS = {"cv2": "Qwen2LM", "cv3": "CosyVoice3LM"}

HEAD = """sample_rate: 24000
llm_input_size: {hidden}
llm_output_size: {hidden}
spk_embed_dim: 192
qwen_pretrain_path: ''
token_frame_rate: 25
token_mel_ratio: 2
chunk_size: {chunk}
num_decoding_left_chunks: -1

llm: !new:cosyvoice.llm.llm.{lm_class}
    llm_input_size: !ref <llm_input_size>
    llm_output_size: !ref <llm_output_size>
    speech_token_size: 6561
    length_normalized_loss: True
    lsm_weight: 0
    mix_ratio: [5, 15]
    llm: !new:cosyvoice.llm.llm.Qwen2Encoder
        pretrain_path: !ref <qwen_pretrain_path>
    sampling: !name:cosyvoice.utils.common.ras_sampling
        top_p: 0.8
        top_k: 25
        win_size: 10
        tau_r: 0.1
"""
CFM = """    decoder: !new:cosyvoice.flow.flow_matching.CausalConditionalCFM
        in_channels: 240
        n_spks: 1
        spk_emb_dim: 80
        cfm_params: !new:omegaconf.DictConfig
            content:
                sigma_min: 1e-06
                solver: 'euler'
                t_scheduler: 'cosine'
                training_cfg_rate: 0.2
                inference_cfg_rate: 0.7
                reg_loss_type: 'l1'
"""
FLOW_HEAD = """
flow: !new:cosyvoice.flow.flow.{cls}
    input_size: {input_size}
    output_size: 80
    spk_embed_dim: !ref <spk_embed_dim>
    output_type: 'mel'
    vocab_size: 6561
    input_frame_rate: !ref <token_frame_rate>
    only_mask_loss: True
    token_mel_ratio: !ref <token_mel_ratio>
    pre_lookahead_len: 3
"""
CV2_FLOW = FLOW_HEAD.format(cls="CausalMaskedDiffWithXvec", input_size=512) + """\
    encoder: !new:cosyvoice.transformer.upsample_encoder.UpsampleConformerEncoder
        output_size: 512
        attention_heads: {e[attention_heads]}
        linear_units: {e[linear_units]}
        num_blocks: {e[num_blocks]}
        dropout_rate: 0.1
        positional_dropout_rate: 0.1
        attention_dropout_rate: 0.1
        normalize_before: True
        input_layer: 'linear'
        pos_enc_layer_type: 'rel_pos_espnet'
        selfattention_layer_type: 'rel_selfattn'
        input_size: 512
        use_cnn_module: False
        macaron_style: False
        static_chunk_size: !ref <chunk_size>
""" + CFM + """        estimator: !new:cosyvoice.flow.decoder.CausalConditionalDecoder
            in_channels: 320
            out_channels: 80
            channels: {u[channels]}
            dropout: 0.0
            attention_head_dim: {u[attention_head_dim]}
            n_blocks: {u[n_blocks]}
            num_mid_blocks: {u[num_mid_blocks]}
            num_heads: {u[num_heads]}
            act_fn: 'gelu'
            static_chunk_size: !ref <chunk_size> * <token_mel_ratio>
            num_decoding_left_chunks: !ref <num_decoding_left_chunks>
"""
CV3_FLOW = FLOW_HEAD.format(cls="CausalMaskedDiffWithDiT", input_size=80) + """\
    pre_lookahead_layer: !new:cosyvoice.transformer.upsample_encoder.PreLookaheadLayer
        in_channels: 80
        channels: {look[channels]}
        pre_lookahead_len: 3
""" + CFM + """        estimator: !new:cosyvoice.flow.DiT.dit.DiT
            dim: {d[dim]}
            depth: {d[depth]}
            heads: {d[heads]}
            dim_head: {d[dim_head]}
            ff_mult: {d[ff_mult]}
            mel_dim: 80
            mu_dim: 80
            spk_dim: 80
            out_channels: 80
            static_chunk_size: !ref <chunk_size> * <token_mel_ratio>
            num_decoding_left_chunks: !ref <num_decoding_left_chunks>
"""
HIFT = """
hift: !new:cosyvoice.hifigan.generator.{cls}
    in_channels: 80
    base_channels: {h[base_channels]}
    nb_harmonics: {h[nb_harmonics]}
    sampling_rate: !ref <sample_rate>
    nsf_alpha: {h[nsf_alpha]}
    nsf_sigma: {h[nsf_sigma]}
    nsf_voiced_threshold: {h[nsf_voiced_threshold]}
    upsample_rates: {h[upsample_rates]}
    upsample_kernel_sizes: {h[upsample_kernel_sizes]}
    istft_params:
        n_fft: {h[istft_params][n_fft]}
        hop_len: {h[istft_params][hop_len]}
    resblock_kernel_sizes: {h[resblock_kernel_sizes]}
    resblock_dilation_sizes: {h[resblock_dilation_sizes]}
    source_resblock_kernel_sizes: {h[source_resblock_kernel_sizes]}
    source_resblock_dilation_sizes: {h[source_resblock_dilation_sizes]}
    lrelu_slope: {h[lrelu_slope]}
    audio_limit: {h[audio_limit]}
{look_right}    f0_predictor: !new:cosyvoice.hifigan.f0_predictor.{predictor}
        num_class: {f[num_class]}
        in_channels: 80
        cond_channels: {f[cond_channels]}
"""
TAIL = """
feat_extractor: !name:matcha.utils.audio.mel_spectrogram
    n_fft: 1920
    num_mels: 80
    sampling_rate: !ref <sample_rate>
    hop_size: 480
    win_size: 1920
    fmin: 0
    fmax: {fmax}
    center: False

get_tokenizer: !name:cosyvoice.tokenizer.tokenizer.get_qwen_tokenizer
    token_path: !ref <qwen_pretrain_path>
    skip_special_tokens: True
{tokenizer_version}allowed_special: 'all'
"""


def yaml_text(version: str, flow_configs: dict, hift_entry: dict, qwen: dict) -> str:
    """The release yaml of `version` ("cv2" / "cv3") at the sets' sizes: `flow_configs` as cosyvoice_flow records
    them, `hift_entry` one of cosyvoice_model's HiFT recipes, `qwen` the LM's Qwen2 config."""
    chunk = flow_configs["encoder"]["static_chunk_size"] if version == "cv2" else \
        flow_configs["dit"]["static_chunk_size"] // 2
    text = HEAD.format(hidden=qwen["hidden_size"], chunk=chunk, lm_class=LM_CLASS[version])
    if version == "cv2":
        text += CV2_FLOW.format(e=flow_configs["encoder"], u=flow_configs["unet"])
    else:
        text += CV3_FLOW.format(look=flow_configs["lookahead"], d=flow_configs["dit"])
    causal = hift_entry["class"] == "CausalHiFTGenerator"
    look_right = f"    conv_pre_look_right: {hift_entry['hift']['conv_pre_look_right']}\n" if causal else ""
    text += HIFT.format(cls=hift_entry["class"], h=hift_entry["hift"], f=hift_entry["f0_predictor"],
                        look_right=look_right,
                        predictor="CausalConvRNNF0Predictor" if causal else "ConvRNNF0Predictor")
    text += TAIL.format(fmax=8000 if version == "cv2" else "null",
                        tokenizer_version="    version: cosyvoice3\n" if version == "cv3" else "")
    return text


def qwen_config_json(qwen: dict) -> dict:
    """A Qwen2 config.json for CosyVoice-BlankEN at the LM's size (what Qwen2Encoder builds from)."""
    return {"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "bos_token_id": 151643,
            "eos_token_id": 151643, "attention_dropout": 0.0, "initializer_range": 0.02, "max_window_layers": 24,
            "sliding_window": 32768, **qwen}


def write_release(folder: Path, version: str, *, yaml: str, llm: dict, flow: dict, hift: dict, qwen: dict,
                  tokenizer_files: Path, speech_tokenizer: Path, campplus: Path, spk2info: dict | None = None) -> Path:
    """Write the release folder; `tokenizer_files` is a folder of tokenizer files copied into CosyVoice-BlankEN/."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / YAML_NAME[version]).write_text(yaml, encoding="utf-8")
    for name, state in (("llm.pt", llm), ("flow.pt", flow), ("hift.pt", hift)):
        torch.save({k: v.contiguous() for k, v in state.items()}, folder / name)
    shutil.copyfile(speech_tokenizer, folder / TOKENIZER_ONNX[version])
    shutil.copyfile(campplus, folder / "campplus.onnx")
    if spk2info is not None:
        torch.save(spk2info, folder / "spk2info.pt")
    blank = folder / "CosyVoice-BlankEN"
    blank.mkdir(exist_ok=True)
    for path in Path(tokenizer_files).iterdir():
        if path.is_file() and path.name != "config.json":
            shutil.copyfile(path, blank / path.name)
    (blank / "config.json").write_text(json.dumps(qwen_config_json(qwen), indent=1), encoding="utf-8")
    return folder


def parts_from_sets(sets: Path, version: str) -> dict:
    """The release of `version` ("cv2" / "cv3") from the committed sets under `sets` (tests/parity/data): the flow of
    cosyvoice_flow, the LM of cosyvoice_llm and cosyvoice_model's 80-band HiFT, each from its recorded names, shapes
    and seeds (the flow's buffers as recorded). -> the yaml text, the three state dicts and the Qwen2 config."""
    from safetensors.torch import load_file

    sets = Path(sets)
    flow_info = json.loads((sets / "cosyvoice_flow" / "references.json").read_text())
    flow_refs = load_file(str(sets / "cosyvoice_flow" / "references.safetensors"))
    llm_info = json.loads((sets / "cosyvoice_llm" / "references.json").read_text())
    hift_entry = json.loads((sets / "cosyvoice_model" / "references.json").read_text())["hift"][version]
    flow = cosyvoice_weights.state(flow_info["entries"][version], flow_info["seeds"][version])
    flow.update({b: flow_refs[f"{version}/buffer/{b}"] for b in flow_info["buffers"][version]})
    llm = cosyvoice_weights.lm_state(llm_info["entries"][version], llm_info["seeds"][version],
                                     llm_info["speech_tokens"])
    llm["llm.model.lm_head.weight"] = llm["llm.model.model.embed_tokens.weight"]  # tied, as released
    layout = {k: tuple(v) for k, v in hift_entry["layout"].items()}
    hift = hift_state(layout, hift_entry["weights_seed"], hift_entry["post_gain"])
    qwen = llm_info["qwen"]
    return {"yaml": yaml_text(version, flow_info["configs"], hift_entry, qwen), "llm": llm, "flow": flow,
            "hift": hift, "qwen": qwen}


def padded_tokenizer(core: Path, folder: Path, filler: str, first_special: int, clean_up: bool = False) -> Path:
    """A tokenizer folder from a stored core (vocab_core.json, merges.txt, tokenizer_config.json): the vocabulary
    padded with `filler` tokens up to `first_special` (json.dumps, ensure_ascii=False, no spaces), the rest as stored
    (`clean_up`: the config's clean_up_tokenization_spaces turned on)."""
    vocab = json.loads((core / "vocab_core.json").read_text(encoding="utf-8"))
    vocab.update({filler.format(i): i for i in range(len(vocab), first_special)})
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False, separators=(",", ":")), encoding="utf-8")
    (folder / "merges.txt").write_bytes((core / "merges.txt").read_bytes())
    config = (core / "tokenizer_config.json").read_text(encoding="utf-8")
    if clean_up:
        config = config.replace('"clean_up_tokenization_spaces": false', '"clean_up_tokenization_spaces": true')
    (folder / "tokenizer_config.json").write_text(config, encoding="utf-8")
    return folder


def tokenizer_folder(sets: Path, folder: Path, clean_up: bool = False) -> Path:
    """The tiny CosyVoice-BlankEN tokenizer upstream read when cosyvoice_text was written, rebuilt from that set
    (its core files, padded with the recorded filler up to the first special id, 151643, as released)."""
    text_set = Path(sets) / "cosyvoice_text"
    spec = json.loads((text_set / "golden" / "cosyvoice_text.json").read_text(encoding="utf-8"))["folder"]
    return padded_tokenizer(text_set / "blanken", folder, spec["filler"], spec["first_special"], clean_up)
