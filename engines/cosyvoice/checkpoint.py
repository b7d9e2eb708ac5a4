"""A released CosyVoice folder, loaded as upstream's CosyVoice2 / CosyVoice3 classes load it (cosyvoice/cli/
cosyvoice.py), without HyperPyYAML, ONNX Runtime, transformers or Matcha-TTS:

    FunAudioLLM/CosyVoice2-0.5B            FunAudioLLM/Fun-CosyVoice3-0.5B-2512
      cosyvoice2.yaml                        cosyvoice3.yaml          sizes, read as data (hyperyaml.py, config.py)
      llm.pt  flow.pt  hift.pt               the same                 plain state dicts, loaded strictly
      speech_tokenizer_v2.onnx               speech_tokenizer_v3.onnx the S3 tokenizer, ported (mizuoto/nn)
      campplus.onnx                          campplus.onnx            CAM++, ported (mizuoto/nn)
      spk2info.pt (optional)                 spk2info.pt (optional)   saved speakers
      CosyVoice-BlankEN/                     CosyVoice-BlankEN/       the Qwen2 sizes (config.json) and tokenizer

upstream's strictness is kept: every tensor of llm.pt, flow.pt and hift.pt must fit (`generator.` stripped from
hift.pt's keys, as upstream strips it), except the LM's tied text head `llm.model.lm_head.weight`, which upstream
loads and never uses. Bad files are one CheckpointError naming the file and what to do.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from mizuoto.core.errors import CheckpointError
from mizuoto.nn import hift, hift_causal
from mizuoto.nn.qwen import QwenConfig
from mizuoto.nn.rotary import inverse_frequencies
from mizuoto.nn.s3_tokenizer_weights import load_s3_tokenizer
from mizuoto.nn.tensor_files import read_checkpoint

from . import config, hyperyaml
from .flow import Flow
from .llm import CosyVoiceLM, LMConfig
from .ras import RasParams

log = logging.getLogger(__name__)

YAMLS = {"cosyvoice2.yaml": 2, "cosyvoice3.yaml": 3}
SPEECH_TOKENIZERS = {2: "speech_tokenizer_v2.onnx", 3: "speech_tokenizer_v3.onnx"}
BLANK_EN = "CosyVoice-BlankEN"
UNUSED_LM_KEYS = ("llm.model.lm_head.weight",)  # the tied text head: in llm.pt, never read by inference


@dataclass(frozen=True)
class Files:
    folder: Path
    version: int
    yaml: Path
    llm: Path
    flow: Path
    hift: Path
    speech_tokenizer: Path
    campplus: Path
    spk2info: Path | None
    blank_en: Path


def find_files(source: str | Path) -> Files:
    """The files of the release `source` is (its folder) or lies in (any of its files)."""
    source = Path(source)
    folder = source if source.is_dir() else source.parent
    if not folder.is_dir():
        raise CheckpointError(f"{source} does not exist; point at a CosyVoice2-0.5B or Fun-CosyVoice3-0.5B-2512 "
                              "folder")
    yamls = [name for name in YAMLS if (folder / name).is_file()]
    if not yamls:
        if (folder / "cosyvoice.yaml").is_file():
            raise CheckpointError(f"{folder} is CosyVoice 1 (cosyvoice.yaml); Mizuoto loads CosyVoice 2 and 3: "
                                  "download FunAudioLLM/CosyVoice2-0.5B or Fun-CosyVoice3-0.5B-2512")
        raise CheckpointError(f"{folder} has neither cosyvoice2.yaml nor cosyvoice3.yaml; download the whole "
                              "CosyVoice folder (FunAudioLLM/CosyVoice2-0.5B or Fun-CosyVoice3-0.5B-2512)")
    if len(yamls) > 1:
        raise CheckpointError(f"{folder} holds both cosyvoice2.yaml and cosyvoice3.yaml; keep each release in its "
                              "own folder")
    version = YAMLS[yamls[0]]
    names = {"llm": "llm.pt", "flow": "flow.pt", "hift": "hift.pt", "speech_tokenizer": SPEECH_TOKENIZERS[version],
             "campplus": "campplus.onnx"}
    paths = {role: folder / name for role, name in names.items()}
    missing = [p.name for p in paths.values() if not p.is_file()]
    if not (folder / BLANK_EN / "config.json").is_file():
        missing.append(f"{BLANK_EN}/config.json")
    if missing:
        raise CheckpointError(f"{folder} lacks {', '.join(missing)}; download the whole CosyVoice {version} folder")
    spk2info = folder / "spk2info.pt"
    return Files(folder, version, folder / yamls[0], spk2info=spk2info if spk2info.is_file() else None,
                 blank_en=folder / BLANK_EN, **paths)


def read_yaml(path: Path) -> dict:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise CheckpointError(f"{path} cannot be read ({exc.__class__.__name__}); download it again") from None
    return hyperyaml.load(text, what=path.name)


def qwen_config(blank_en: Path) -> QwenConfig:
    """The LM's Qwen2 sizes from CosyVoice-BlankEN/config.json (upstream's Qwen2Encoder builds from it)."""
    path = blank_en / "config.json"
    try:
        c = json.loads(path.read_text(encoding="utf-8"))
        heads = int(c["num_attention_heads"])
        return QwenConfig(int(c["hidden_size"]), int(c["intermediate_size"]), int(c["num_hidden_layers"]), heads,
                          int(c.get("num_key_value_heads", heads)), int(c["hidden_size"]) // heads,
                          float(c.get("rope_theta", 10000.0)), float(c.get("rms_norm_eps", 1e-6)), qk_norm=False,
                          qkv_bias=True, vocab_size=int(c["vocab_size"]))
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise CheckpointError(f"{path} is not a Qwen2 config ({exc.__class__.__name__}: {exc}); download "
                              f"{BLANK_EN} again") from None


def load_strict(module: nn.Module, path: Path, device, dtype: torch.dtype, rename=None,
                unused: tuple[str, ...] = ()) -> nn.Module:
    """`module` (built on the meta device) with every tensor of `path`, as upstream's load_state_dict(strict=True);
    `unused` keys may be in the file and are dropped."""
    state = read_checkpoint(path)
    if rename is not None:
        state = {rename(k): v for k, v in state.items()}
    wanted = module.state_dict(keep_vars=True)
    missing = [k for k in wanted if k not in state]
    if missing:
        raise CheckpointError(f"{path.name} lacks {len(missing)} tensors the yaml's model needs (first: "
                              f"{missing[0]}); the file is incomplete or of another CosyVoice release")
    extra = [k for k in state if k not in wanted and k not in unused]
    if extra:
        raise CheckpointError(f"{path.name} holds {len(extra)} tensors the yaml's model has no place for (first: "
                              f"{extra[0]}); the yaml and {path.name} are of different models")
    tensors = {}
    for key, meta in wanted.items():
        value = state[key]
        if tuple(value.shape) != tuple(meta.shape):
            raise CheckpointError(f"{path.name}: {key} has shape {tuple(value.shape)}, the yaml implies "
                                  f"{tuple(meta.shape)}; the yaml and the weights are of different models")
        float_dtype = dtype if meta.is_floating_point() and not key.endswith("inv_freq") else value.dtype
        tensors[key] = value.to(device=device, dtype=float_dtype)
    module.load_state_dict(tensors, assign=True)
    return module.eval().requires_grad_(False)


def check_materialised(module: nn.Module, what: str) -> None:
    """Nothing of `module` left on the meta device (a buffer this loader forgot to compute)."""
    left = [name for name, t in [*module.named_parameters(), *module.named_buffers()] if t.is_meta]
    if left:
        raise RuntimeError(f"{what}: {left[0]} was not computed after building on the meta device")


def load_lm(files: Files, doc: dict, device, dtype: torch.dtype) -> CosyVoiceLM:
    lm_section = doc["llm"]
    size = lm_section.get("speech_token_size", 6561)
    with torch.device("meta"):
        lm = CosyVoiceLM(LMConfig(files.version, qwen_config(files.blank_en), speech_token_size=int(size)))
    lm = load_strict(lm, files.llm, device, dtype, unused=UNUSED_LM_KEYS)
    # the rotary frequencies are not in llm.pt: computed on the weights' device, in float32 as transformers keeps them
    qwen = lm.config.qwen
    rotary = lm.decoder.rotary
    rotary.register_buffer("inv_freq", inverse_frequencies(qwen.head_dim, qwen.rope_theta).to(device),
                           persistent=False)
    rotary._tables.clear()
    return lm


def load_flow(files: Files, doc: dict, device, dtype: torch.dtype) -> Flow:
    flow_config = config.flow_config(doc, files.yaml.name)
    with torch.device("meta"):
        flow = Flow(flow_config)
    return load_strict(flow, files.flow, device, dtype)


def load_vocoder(files: Files, doc: dict, device, dtype: torch.dtype) -> nn.Module:
    section = doc.get("hift")
    if not isinstance(section, hyperyaml.Node):
        raise CheckpointError(f"{files.yaml.name} has no `hift:` vocoder section: use the yaml released with the model")
    state = {k.replace("generator.", ""): v for k, v in read_checkpoint(files.hift).items()}
    fields = dict(section.fields)
    if isinstance(fields.get("f0_predictor"), hyperyaml.Node):  # its constructor's arguments
        fields["f0_predictor"] = dict(fields["f0_predictor"].fields)
    if files.version == 2:
        return hift.load_hift(state, hift.HiFTConfig.from_cosyvoice(fields), device, dtype, source=files.hift.name)
    hift_config = hift_causal.CausalHiFTConfig.from_cosyvoice(fields)
    flow = doc["flow"]
    flow_sizes = {k: int(flow[k]) for k in hift_causal.FLOW_SIZES}
    return hift_causal.load_causal_hift(state, hift_config, device, dtype, source=files.hift.name,
                                        noise=hift_causal.cosyvoice3_noise(hift_config, flow_sizes))


def load_speakers(files: Files) -> dict[str, dict[str, torch.Tensor]]:
    """spk2info.pt: speaker id -> its tensors ('embedding' for a trained speaker; a zero-shot speaker saved by
    add_zero_shot_spk also has prompt_text, the speech tokens, the prompt mel and both embeddings)."""
    if files.spk2info is None:
        return {}
    try:
        speakers = torch.load(str(files.spk2info), map_location="cpu", weights_only=True)
    except Exception as exc:  # any reader failure is a bad file, said in one line
        raise CheckpointError(f"{files.spk2info} is not readable ({' '.join(str(exc).split())[:120]}); download it "
                              "again or remove it") from None
    if not isinstance(speakers, dict) or not all(
            isinstance(v, dict) and torch.is_tensor(v.get("embedding", v.get("flow_embedding")))
            for v in speakers.values()):
        raise CheckpointError(f"{files.spk2info} is not a CosyVoice speaker table (id -> {{'embedding': ...}}); "
                              "remove it or use the one released with the model")
    return {str(k): v for k, v in speakers.items()}


def load_campplus(files: Files, device) -> nn.Module:
    from mizuoto.nn.campplus_onnx import load_campplus_onnx

    return load_campplus_onnx(files.campplus, device=device)


def load_speech_tokenizer(files: Files, device) -> nn.Module:
    return load_s3_tokenizer(files.speech_tokenizer, f"v{files.version}", device=device)


def sampling(files: Files, doc: dict) -> RasParams:
    return config.ras_params(doc, files.yaml.name)


def sample_rate(files: Files, doc: dict) -> int:
    rate = doc.get("sample_rate", 24000)
    if rate != 24000:
        raise CheckpointError(f"{files.yaml.name} sets sample_rate {rate}; the released CosyVoice 2 and 3 run at "
                              "24000 Hz")
    return int(rate)
