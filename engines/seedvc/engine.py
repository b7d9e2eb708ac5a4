"""Loading and converting for Seed-VC (v1 offline: Whisper content, CAM++ style, the s2mel DiT, BigVGAN)."""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path

import torch
from torch import nn

from mizuoto.core.errors import CheckpointError, InputError
from mizuoto.core.options import RuntimeOptions
from mizuoto.nn import bigvgan, campplus
from mizuoto.nn.s2mel_cfm import S2Mel, S2MelConfig
from mizuoto.runtime.compile import compile_module
from mizuoto.runtime.context import RequestContext
from mizuoto.runtime.graphs import GraphedCall
from mizuoto.runtime.handles import ModelHandle

from . import assets
from .content import load_encoder
from .convert import MelSettings, autocast_for
from .convert import convert as run_conversion

SAMPLE_RATE = 22050  # v1 offline; the preset's sr


@dataclass
class SeedVCLoaded:
    s2mel: S2Mel
    content: nn.Module
    campplus: nn.Module
    vocoder: nn.Module
    mel: MelSettings
    float16: bool  # upstream's precision: the content encoder in float16, the CFM under float16 autocast
    source: str
    handle: ModelHandle
    options: RuntimeOptions
    compiled_vocoder: object = None  # compute.compile: BigVGAN compiled (None: eager)
    _flow: GraphedCall | None = None  # the CFM solve of one window, one CUDA graph per window length

    def flow(self) -> GraphedCall:
        """The CFM solve, replayed as one graph per window shape where CUDA graphs are usable (the graphs
        follow the weights: a model moved or offloaded captures again)."""
        graphs = self.handle.graphs_for(self.options.cuda_graphs)
        if self._flow is None or self._flow.graphs is not graphs:
            cfm = self.s2mel.cfm
            self._flow = GraphedCall(lambda mu, lengths, prompt, style, generator, **options:
                                     cfm.inference(mu, lengths, prompt, style, generator, **options), graphs)
        return self._flow

    @property
    def device(self) -> torch.device:
        return self.handle.device

    def autocast(self):
        return autocast_for(self.device, self.float16)

    def vocode(self, mel: torch.Tensor) -> torch.Tensor:
        return (self.compiled_vocoder or self.vocoder)(mel)


def _preset(path: Path) -> dict:
    import yaml

    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as error:
        raise CheckpointError(f"cannot read the Seed-VC preset {path} ({' '.join(str(error).split())[:120]})") \
            from None
    if not isinstance(data, dict) or not isinstance(data.get("model_params"), dict):
        raise CheckpointError(f"{path} is no Seed-VC preset (it has no model_params); use the .yml published "
                              f"beside the checkpoint")
    return data


def _repo(params: dict, section: str) -> str:
    name = (params.get(section) or {}).get("name")
    if not isinstance(name, str) or "/" not in name:
        raise CheckpointError(f"the Seed-VC preset names no {section} model ({section}.name)")
    return name


def _mel_settings(preset: dict, path: Path) -> MelSettings:
    try:
        spect = preset["preprocess_params"]["spect_params"]
        return MelSettings(int(preset["preprocess_params"]["sr"]), int(spect["n_fft"]), int(spect["win_length"]),
                           int(spect["hop_length"]), int(spect["n_mels"]))
    except (KeyError, TypeError, ValueError):
        raise CheckpointError(f"{path} has no complete preprocess_params (sr, spect_params)") from None


def _load_vocoder(folder: Path, device) -> nn.Module:
    try:
        config = bigvgan.BigVGANConfig.from_dict(json.loads((folder / "config.json").read_text(encoding="utf-8")))
    except (OSError, ValueError) as error:
        raise CheckpointError(f"cannot read {folder / 'config.json'} ({error})") from None
    checkpoint = folder / "bigvgan_generator.pt"
    try:
        state = torch.load(str(checkpoint), map_location="cpu", weights_only=True)
    except Exception as error:  # a damaged or foreign file, said in one line
        raise CheckpointError(f"{checkpoint} is not a readable checkpoint ({' '.join(str(error).split())[:160]})") \
            from None
    return bigvgan.load_bigvgan(state, config, device=device, source=str(checkpoint))


def load(path: Path | None, device: torch.device, dtype: torch.dtype, options: RuntimeOptions) -> SeedVCLoaded:
    if dtype != torch.float32:
        raise InputError("Seed-VC loads in float32 (upstream's float16 is its precision option: "
                         "engines.seedvc.load_options.precision); choose dtype float32")
    if path is None:
        raise InputError("Seed-VC needs a model: the folder of Plachta/Seed-VC's v1 files")
    preset_path = assets.dit_files(Path(path))[1]
    preset = _preset(preset_path)
    params = preset["model_params"]
    if (params.get("speech_tokenizer") or {}).get("type", "whisper") != "whisper":
        raise CheckpointError(f"{preset_path} uses the {params['speech_tokenizer']['type']} content encoder; only "
                              f"the Whisper one (v1 offline) is supported so far")
    if (params.get("vocoder") or {}).get("type", "bigvgan") != "bigvgan":
        raise CheckpointError(f"{preset_path} uses the {params['vocoder']['type']} vocoder; only BigVGAN "
                              f"(v1 offline) is supported so far")
    if (params.get("length_regulator") or {}).get("f0_condition") or (params.get("DiT") or {}).get("f0_condition"):
        raise CheckpointError(f"{preset_path} is the singing (F0) model; only v1 offline speech is supported so far")
    files = assets.locate(Path(path), _repo(params, "speech_tokenizer"), _repo(params, "vocoder"))
    float16 = options.load_options.get("precision", "float16") == "float16"
    s2mel = S2Mel.from_checkpoint(files.checkpoint, S2MelConfig.from_model_params(params)).to(device)
    content = load_encoder(files.whisper, device, torch.float16 if float16 else torch.float32)
    speaker = campplus.load_campplus(files.campplus, config=None, device=device)
    vocoder = _load_vocoder(files.bigvgan, device)
    modules = nn.ModuleList([s2mel, content, speaker, vocoder])
    loaded = SeedVCLoaded(s2mel, content, speaker, vocoder, _mel_settings(preset, preset_path), float16,
                          str(files.checkpoint), ModelHandle(modules, device), options)
    return _compiled(loaded, options)


def _compiled(loaded: SeedVCLoaded, options: RuntimeOptions) -> SeedVCLoaded:
    """compute.compile: BigVGAN compiled (the vocoder's share of the time grows with the audio's length)."""
    return replace(loaded, options=options,
                   compiled_vocoder=compile_module(loaded.vocoder, options.compile, "seedvc.bigvgan",
                                                   device=loaded.device))


def rebind(previous: SeedVCLoaded, options: RuntimeOptions) -> SeedVCLoaded:
    """The same weights under other runtime options: nothing reloads (the precision is a load option, so a
    change of it loads anew); the compiled vocoder follows compute.compile."""
    if options.compile == previous.options.compile:
        return replace(previous, options=options)
    return _compiled(previous, options)


def convert(state: SeedVCLoaded, source, reference, ctx: RequestContext, values: dict):
    """The host's convert(): (waveform (1, samples), rate)."""
    wave = run_conversion(state, source, reference, ctx, values["diffusion_steps"], values["length_adjust"],
                          values["inference_cfg_rate"])
    return wave, state.mel.sample_rate


def convert_with_trace(state: SeedVCLoaded, source, reference, ctx: RequestContext, values: dict):
    """convert(), and every intermediate tensor by upstream's name (source_22k, reference_22k, source_16k,
    reference_16k, S_alt, S_ori, mel, mel2, feat2, style2, cond, prompt_condition, vc_target/i, vc_wave/i),
    for comparisons."""
    trace: dict = {}
    wave = run_conversion(state, source, reference, ctx, values["diffusion_steps"], values["length_adjust"],
                          values["inference_cfg_rate"], trace)
    return wave, state.mel.sample_rate, trace
