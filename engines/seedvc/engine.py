"""Loading and converting for Seed-VC v1: the offline model (Whisper content, BigVGAN), the real-time one
(XLS-R content, HiFT) and the singing one (Whisper content, F0 from RMVPE, the 44 kHz BigVGAN), all with CAM++
style and the s2mel DiT; the preset's `speech_tokenizer.type`, `vocoder.type` and `f0_condition` choose the
encoder, the vocoder and the F0 input, as upstream's loaders do. The real-time model also converts as a stream
(stream.py: upstream's library streaming; live.py: its real-time app's blocks)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

import torch
from torch import nn

from mizuoto.core.errors import CheckpointError, InputError
from mizuoto.core.options import RuntimeOptions
from mizuoto.nn import bigvgan, campplus, hift, rmvpe
from mizuoto.nn.s2mel_cfm import S2Mel, S2MelConfig
from mizuoto.runtime.compile import compile_module
from mizuoto.runtime.context import RequestContext
from mizuoto.runtime.graphs import GraphedCall
from mizuoto.runtime.handles import ModelHandle

from . import assets, stream
from . import live as live_blocks
from .content import load_encoder, load_xlsr
from .convert import MelSettings, autocast_for
from .convert import convert as run_conversion
from .declaration import REPO
from .pitch import Pitch


@dataclass
class SeedVCLoaded:
    s2mel: S2Mel
    content: nn.Module
    campplus: nn.Module
    vocoder: nn.Module
    mel: MelSettings
    float16: bool  # upstream's precision: the CFM under float16 autocast (and the Whisper encoder in float16)
    source: str
    handle: ModelHandle
    options: RuntimeOptions
    rmvpe: rmvpe.RMVPE | None = None  # the singing model's F0 estimator (None: a model without F0 input)
    compiled_vocoder: object = None  # compute.compile: BigVGAN compiled (None: eager; HiFT always eager)
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

    def solve(self, prompt_condition: torch.Tensor, cond: torch.Tensor, prompt_mel: torch.Tensor,
              style: torch.Tensor, generator: torch.Generator, steps: int, cfg_rate: float) -> torch.Tensor:
        """The CFM over [prompt_condition, cond] with the reference's mel as its prompt, the prompt's frames
        dropped from the result: the mel of `cond`'s frames (the caller holds the step and the autocast)."""
        condition = torch.cat([prompt_condition, cond], dim=1)
        lengths = torch.tensor([condition.size(1)], dtype=torch.long, device=self.device)
        return self.flow()((condition, lengths, prompt_mel, style), generator, steps=steps,
                           cfg_rate=cfg_rate)[:, :, prompt_mel.size(-1):]

    def autocast(self):
        return autocast_for(self.device, self.float16)

    def vocode(self, mel: torch.Tensor, generator: torch.Generator, ctx: RequestContext) -> torch.Tensor:
        """(1, mels, frames) -> (1, samples). HiFT draws its source's phases and noise from `generator` (right
        after the window's CFM noise, as upstream's global generator); off the CPU its phases come from the
        request's CPU generator, as upstream draws them on the CPU."""
        if isinstance(self.vocoder, hift.HiFTGenerator):
            cpu = None if self.device.type == "cpu" else ctx.generator_for(torch.device("cpu"))
            return self.vocoder(mel, generator, cpu_generator=cpu)
        return (self.compiled_vocoder or self.vocoder)(mel)[0]


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


def _mel_settings(preset: dict, path: Path, realtime: bool) -> MelSettings:
    """The offline wrapper takes fmin 0 and fmax None whatever the preset says; the real-time loader takes the
    preset's fmin (default 0) and fmax 8000 unless the preset's fmax is the string "None" (whatever its value)."""
    try:
        spect = preset["preprocess_params"]["spect_params"]
        sizes = (int(preset["preprocess_params"]["sr"]), int(spect["n_fft"]), int(spect["win_length"]),
                 int(spect["hop_length"]), int(spect["n_mels"]))
        if not realtime:
            return MelSettings(*sizes)
        return MelSettings(*sizes, f_min=float(spect.get("fmin", 0)),
                           f_max=None if spect.get("fmax", "None") == "None" else 8000.0)
    except (KeyError, TypeError, ValueError):
        raise CheckpointError(f"{path} has no complete preprocess_params (sr, spect_params)") from None


def _load_hift(checkpoint: Path, device) -> hift.HiFTGenerator:
    """hift.pt with seed-vc's configs/hifigan.yml (HiFTConfig's defaults), or a hifigan.yml beside it."""
    import yaml

    config = hift.HiFTConfig()
    custom = checkpoint.parent / assets.HIFT_CONFIG
    if custom.is_file():
        try:
            config = hift.HiFTConfig.from_dict(yaml.safe_load(custom.read_text(encoding="utf-8")))
        except (OSError, yaml.YAMLError) as error:
            raise CheckpointError(f"cannot read {custom} ({' '.join(str(error).split())[:120]})") from None
    try:
        state = torch.load(str(checkpoint), map_location="cpu", weights_only=True)
    except Exception as error:  # a damaged or foreign file, said in one line
        raise CheckpointError(f"{checkpoint} is not a readable checkpoint ({' '.join(str(error).split())[:160]})") \
            from None
    return hift.load_hift(state, config, device=device, source=str(checkpoint))


CONTENT_TYPES = ("whisper", "xlsr")  # v1 offline, v1 real-time
VOCODER_TYPES = ("bigvgan", "hifigan")


def _model_types(params: dict, preset_path: Path) -> tuple[str, str, bool]:
    """The preset's content encoder and vocoder types and whether it takes F0, refused in one line where we have
    no port."""
    content = (params.get("speech_tokenizer") or {}).get("type", "whisper")
    vocoder = (params.get("vocoder") or {}).get("type", "bigvgan")
    if content not in CONTENT_TYPES:
        raise CheckpointError(f"{preset_path} uses the {content} content encoder; only Whisper (v1 offline) and "
                              f"XLS-R (v1 real-time) are supported so far")
    if vocoder not in VOCODER_TYPES:
        raise CheckpointError(f"{preset_path} uses the {vocoder} vocoder; only BigVGAN (v1 offline) and HiFT "
                              f"(v1 real-time) are supported so far")
    f0 = bool((params.get("length_regulator") or {}).get("f0_condition")
              or (params.get("DiT") or {}).get("f0_condition"))
    if f0 and content != "whisper":
        raise CheckpointError(f"{preset_path} takes F0 with the {content} content encoder; Seed-VC's singing "
                              f"model (and this port) takes it with Whisper only")
    return content, vocoder, f0


def load(path: Path | None, device: torch.device, dtype: torch.dtype, options: RuntimeOptions) -> SeedVCLoaded:
    if dtype != torch.float32:
        raise InputError("Seed-VC loads in float32 (upstream's float16 is its precision option: "
                         "engines.seedvc.load_options.precision); choose dtype float32")
    if path is None:
        raise InputError("Seed-VC needs a model: the folder of Plachta/Seed-VC's v1 files, or its v2/cfm_small.pth")
    v2 = assets.v2_folder(Path(path))
    if v2 is not None:
        from . import loaded_v2

        return _compiled(loaded_v2.load(v2, device, options), options)
    preset_path = assets.dit_files(Path(path))[1]
    preset = _preset(preset_path)
    params = preset["model_params"]
    content_type, vocoder_type, f0 = _model_types(params, preset_path)
    vocoder_repo = assets.HIFT_REPO if vocoder_type == "hifigan" else _repo(params, "vocoder")
    files = assets.locate(Path(path), (content_type, _repo(params, "speech_tokenizer")), (vocoder_type, vocoder_repo),
                          f0)
    float16 = options.load_options.get("precision", "float16") == "float16"
    s2mel = S2Mel.from_checkpoint(files.checkpoint, S2MelConfig.from_model_params(params)).to(device)
    if content_type == "xlsr":  # float16 in either precision, as upstream's `.half()`
        content = load_xlsr(files.content, params["speech_tokenizer"].get("output_layer"), device)
    else:
        content = load_encoder(files.content, device, torch.float16 if float16 else torch.float32)
    speaker = campplus.load_campplus(files.campplus, config=None, device=device)
    vocoder = (_load_hift(files.vocoder, device) if vocoder_type == "hifigan"
               else bigvgan.load_folder(files.vocoder, device))
    # upstream's RMVPE(is_half=False): float32 whatever the precision
    pitch = rmvpe.load_rmvpe_file(files.rmvpe, config=None, device=device) if f0 else None
    modules = nn.ModuleList([s2mel, content, speaker, vocoder] + ([pitch] if pitch is not None else []))
    loaded = SeedVCLoaded(s2mel, content, speaker, vocoder, _mel_settings(preset, preset_path, content_type == "xlsr"),
                          float16, str(files.checkpoint), ModelHandle(modules, device), options, pitch)
    return _compiled(loaded, options)


def _compiled(loaded: SeedVCLoaded, options: RuntimeOptions) -> SeedVCLoaded:
    """compute.compile: BigVGAN compiled (the vocoder's share of the time grows with the audio's length). HiFT
    stays eager: its random draws take the request's generator."""
    if isinstance(loaded.vocoder, hift.HiFTGenerator):
        return replace(loaded, options=options)
    return replace(loaded, options=options,
                   compiled_vocoder=compile_module(loaded.vocoder, options.compile, "seedvc.bigvgan",
                                                   device=loaded.device))


def rebind(previous: SeedVCLoaded, options: RuntimeOptions) -> SeedVCLoaded:
    """The same weights under other runtime options: nothing reloads (the precision is a load option, so a
    change of it loads anew); the compiled vocoder follows compute.compile."""
    if options.compile == previous.options.compile:
        return replace(previous, options=options)
    return _compiled(previous, options)


def _pitch(state: SeedVCLoaded, values: dict) -> Pitch | None:
    """The singing model's F0 settings; a pitch shift asked of a model without F0 input is refused."""
    if state.rmvpe is None:
        if values.get("pitch_shift", 0):
            raise InputError(f"pitch_shift needs Seed-VC's singing model (hf:{REPO}#singing); this model takes no "
                             f"F0: set pitch_shift to 0")
        return None
    return Pitch(state.rmvpe, bool(values.get("auto_f0_adjust", True)), int(values.get("pitch_shift", 0)))


# the parameters only one generation reads, at their defaults where the other runs
V2_ONLY = {"intelligibility_cfg_rate": 0.7, "similarity_cfg_rate": 0.7, "convert_style": False,
           "anonymization_only": False, "top_p": 0.9, "temperature": 1.0, "repetition_penalty": 1.0}
V1_ONLY = {"inference_cfg_rate": 0.7, "pitch_shift": 0}
# what v2 reads only with convert_style (upstream's timbre path keeps the source's length and samples nothing)
STYLE_ONLY = {"length_adjust": 1.0, "top_p": 0.9, "temperature": 1.0, "repetition_penalty": 1.0}


def _refuse_foreign(values: dict, foreign: dict, model: str, instead: str) -> None:
    for name, default in foreign.items():
        if values.get(name, default) != default:
            raise InputError(f"{name} does not apply to Seed-VC {model} models ({instead}); set it to {default}")


def _run_v2(state, source, reference, ctx: RequestContext, values: dict, trace: dict | None):
    from .ar import Sampling
    from .convert_v2 import Style
    from .convert_v2 import convert as convert_v2

    _refuse_foreign(values, V1_ONLY, "v2", "v2 guides with intelligibility_cfg_rate and similarity_cfg_rate")
    style = None
    if values["convert_style"]:
        style = Style(Sampling(values["top_p"], values["temperature"], values["repetition_penalty"]),
                      values["length_adjust"])
    else:
        for name, default in STYLE_ONLY.items():
            if values[name] != default:
                raise InputError(f"{name} steers Seed-VC v2's style converter, which is off: turn convert_style on, "
                                 f"or set {name} to {default}")
    return convert_v2(state, source, reference, ctx, values["diffusion_steps"],
                      (values["intelligibility_cfg_rate"], values["similarity_cfg_rate"]), style,
                      values["anonymization_only"], trace)


def _run(state: SeedVCLoaded, source, reference, ctx: RequestContext, values: dict, trace: dict | None):
    if not isinstance(state, SeedVCLoaded):
        return _run_v2(state, source, reference, ctx, values, trace)
    _refuse_foreign(values, V2_ONLY, "v1", "v1 guides with inference_cfg_rate")
    return run_conversion(state, source, reference, ctx, values["diffusion_steps"], values["length_adjust"],
                          values["inference_cfg_rate"], trace, pitch=_pitch(state, values))


def convert(state: SeedVCLoaded, source, reference, ctx: RequestContext, values: dict):
    """The host's convert(): (waveform (1, samples), rate)."""
    return _run(state, source, reference, ctx, values, None), state.mel.sample_rate


def convert_stream(state: SeedVCLoaded, chunks, reference, ctx: RequestContext, values: dict, live=None):
    """The host's convert_stream(): converted pieces ((1, samples), rate) in order, for the real-time model.
    Without `live`, each chunk is converted alone (stream.py, upstream's library streaming); with `live` (a dict
    of live.LiveSettings, {} for the defaults), the audio runs block by block through the real-time app's
    buffers (live.py) and each block of output comes as its input completes."""
    stream.check_streamable(state)
    _pitch(state, values)  # the real-time model takes no F0: a pitch shift is refused as in convert()
    rate = state.mel.sample_rate
    if live is None:
        pieces = stream.stream(state, chunks, reference, ctx, values["diffusion_steps"], values["length_adjust"],
                               values["inference_cfg_rate"])
        return ((piece, rate) for piece in pieces)
    settings = live_blocks.LiveSettings.from_dict(live)
    if values["length_adjust"] != 1.0:
        raise InputError("length_adjust does not apply to live streaming (the output keeps the input's pace); "
                         "set it to 1.0")
    blocks = live_blocks.live(state, chunks, reference, ctx, values["diffusion_steps"], values["inference_cfg_rate"],
                              settings)
    return ((block, rate) for block in blocks)


def convert_with_trace(state: SeedVCLoaded, source, reference, ctx: RequestContext, values: dict):
    """convert(), and every intermediate tensor by upstream's name (source_22k, reference_22k, source_16k,
    reference_16k, S_alt, S_ori, mel, mel2, feat2, style2, with F0 F0_ori, F0_alt, shifted_f0_alt, then cond,
    prompt_condition, vc_target/i, vc_wave/i; the waves at the model's rate whatever their names say), for
    comparisons."""
    trace: dict = {}
    wave = _run(state, source, reference, ctx, values, trace)
    return wave, state.mel.sample_rate, trace
