"""Loading and speaking for the VoxCPM engine: upstream's `VoxCPM.generate` / `generate_streaming`
(voxcpm 2.0.3, core.py) for VoxCPM 0.5B and 1.5 (config.json architecture "voxcpm") and VoxCPM2 ("voxcpm2").

    text ─ clean ─ tokenizer ┐                                           ┌ AudioVAE decode ─ 16 / 44.1 / 48 kHz
    reference ─ VAE encode ──┼ prefill (prompt.py) ─ patch loop (generate.py)
                             ┘   [ref | text | prompt]    DiT + LMs      └ (streaming: patch by patch)

The host's one reference recording is used as `clone_mode` says: "continuation" is upstream's
prompt_wav_path + prompt_text (the transcript goes before the text and the speech continues the
recording), "reference" its reference_wav_path (VoxCPM2: the voice alone), "both" the same recording as
both. `control` is upstream's CLI voice design: the text becomes "(control)text".

Bad cases are retried as upstream's default does: an attempt of at least `retry_badcase_ratio_threshold`
patches per text token is drawn again (the random stream goes on), at most `retry_badcase_max_times`
attempts; the last one is kept. Streaming never retries (upstream's rule).

Reference audio at any rate is exact to upstream: another rate than the VAE's (16 kHz for VoxCPM 0.5B and 2,
44.1 kHz for 1.5) is resampled first as upstream resamples it, for v1 with torchaudio's resampler
(`torchaudio.functional.resample`), for v2 with librosa's (`librosa.load(sr=...)`: soxr HQ).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Iterator

import torch
from torch import nn

from mizuoto.audio.librosa_soxr import resample as librosa_resample
from mizuoto.audio.torchaudio_sinc import resample as torchaudio_resample
from mizuoto.core.errors import InputError
from mizuoto.core.options import RuntimeOptions
from mizuoto.runtime.compile import compile_module
from mizuoto.runtime.context import RequestContext
from mizuoto.runtime.handles import ModelHandle

from . import prompt
from .audio_vae import AudioVAE, load_audio_vae, read_audio_vae_weights
from .audio_vae_config import audio_vae_config
from .cfm import FlowOptions
from .config import VoxCPMConfig, read_config
from .generate import Attempt, Steps, iterate_patches
from .model import VoxCPMNet, load_net
from .tokenizer import TextTokenizer, clean_text, load_tokenizer


@dataclass
class VoxLoaded:
    config: VoxCPMConfig
    net: VoxCPMNet
    vae: AudioVAE  # float32 always, as upstream keeps it
    tokenizer: TextTokenizer
    source: str
    handle: ModelHandle
    options: RuntimeOptions
    vae_decoder: object = None  # compute.compile: the VAE decoder compiled (else None: eager)
    dit: object = None  # compute.compile: the local DiT compiled (else None: eager)
    _steps: list = field(default_factory=list)  # [(graphs, dit, Steps)]

    @property
    def device(self) -> torch.device:
        return self.net.device

    @property
    def sample_rate(self) -> int:
        return self.vae.output_sample_rate

    def steps(self) -> Steps:
        """The LM steps and the sampler, with CUDA graphs when usable (kept per graphs object and DiT)."""
        graphs = self.handle.graphs_for(self.options.cuda_graphs)
        for known, dit, steps in self._steps:
            if known is graphs and dit is self.dit:
                return steps
        steps = Steps(self.net, graphs, self.dit)
        self._steps[:] = [(graphs, self.dit, steps)]
        return steps


def load(source: str | Path | None, device: torch.device, dtype: torch.dtype, options: RuntimeOptions) -> VoxLoaded:
    if source is None:
        raise InputError("VoxCPM needs a model: a VoxCPM model folder (config.json, model.safetensors, "
                         "audiovae.safetensors, tokenizer.json)")
    source = Path(source)
    folder = source if source.is_dir() else source.parent
    config = read_config(folder)
    tokenizer = load_tokenizer(folder)
    net = load_net(folder, config, device, dtype)
    state, path = read_audio_vae_weights(folder)
    vae = load_audio_vae(state, audio_vae_config(config.architecture, config.audio_vae, "config.json audio_vae_config"),
                         device, torch.float32, path.name)
    loaded = VoxLoaded(config, net, vae, tokenizer, str(source), ModelHandle(nn.ModuleList([net, vae]), device),
                       options)
    return _compiled(loaded, options)


def _compiled(loaded: VoxLoaded, options: RuntimeOptions) -> VoxLoaded:
    """compute.compile: the VAE decoder and the local DiT compiled (None: eager)."""
    device = loaded.device
    return replace(loaded, options=options,
                   vae_decoder=compile_module(loaded.vae.decoder, options.compile, "voxcpm.vae", device=device),
                   dit=compile_module(loaded.net.feat_decoder.estimator, options.compile, "voxcpm.dit", device=device))


def rebind(previous: VoxLoaded, options: RuntimeOptions) -> VoxLoaded:
    """The same weights under other runtime options: nothing reloads; the handle, its CUDA graphs and
    the steps are shared; the compiled VAE decoder and DiT follow compute.compile."""
    if options.compile == previous.options.compile:
        return replace(previous, options=options)
    return _compiled(previous, options)


# --------------------------------------------------------------------------------------------------
# Requests


@dataclass
class Request:
    prefill: prompt.Prefill
    target_tokens: int  # the retry rule's text length
    flow: FlowOptions
    max_len: int
    min_len: int


def _encode(loaded: VoxLoaded, wave: torch.Tensor, rate: int, left_pad: bool) -> torch.Tensor:
    """Mono audio -> (patches, patch, latent) float32, as upstream's `_encode_wav` (v2) or
    `build_prompt_cache` (v1): resampled to the VAE's rate, padded to whole patches, encoded."""
    vae, patch = loaded.vae, loaded.config.patch_size
    wave = torch.as_tensor(wave, dtype=torch.float32).reshape(1, -1).cpu()
    if rate != vae.sample_rate:
        wave = torchaudio_resample(wave, rate, vae.sample_rate, transform_kernel=False) \
            if loaded.config.version == 1 else librosa_resample(wave, rate, vae.sample_rate)
    patch_len = patch * vae.chunk_size
    pad = -wave.shape[1] % patch_len
    wave = torch.nn.functional.pad(wave, (pad, 0) if left_pad else (0, pad))
    latents = vae.encode(wave.to(vae.device), vae.sample_rate).cpu()
    return latents.view(vae.latent_dim, -1, patch).permute(1, 2, 0)


def build_request(loaded: VoxLoaded, text: str, ctx: RequestContext, params: dict,
                  reference: tuple[torch.Tensor, int] | None = None, reference_text: str | None = None) -> Request:
    """The host's one recording in the roles `clone_mode` gives it (see `request`)."""
    mode = params.get("clone_mode", "continuation")
    if loaded.config.version == 1 and mode != "continuation":
        raise InputError(f"clone_mode {mode} needs a VoxCPM2 model; VoxCPM 0.5B / 1.5 clone by continuation")
    if reference is None:
        return request(loaded, text, ctx, params)
    prompt_audio = (*reference, reference_text) if mode in ("continuation", "both") else None
    return request(loaded, text, ctx, params, prompt_audio, reference if mode in ("reference", "both") else None)


def request(loaded: VoxLoaded, text: str, ctx: RequestContext, params: dict,
            prompt_audio: tuple[torch.Tensor, int, str] | None = None,
            reference: tuple[torch.Tensor, int] | None = None) -> Request:
    """Upstream's generate(text, prompt_wav_path + prompt_text, reference_wav_path) with the recordings
    given as (mono wave, rate[, transcript]): `prompt_audio` is continued, `reference` (v2) imitated."""
    if not (text or "").strip():
        raise InputError("the text is empty; give some words to speak")
    version = loaded.config.version
    control = (params.get("control") or "").strip()
    if version == 1 and control:
        raise InputError("control (voice design) needs a VoxCPM2 model; leave it empty for VoxCPM 0.5B / 1.5")
    if version == 1 and reference is not None:
        raise InputError("a reference recording needs a VoxCPM2 model; VoxCPM 0.5B / 1.5 clone by continuation")
    if prompt_audio is not None and control:
        raise InputError("control cannot be combined with a continuation (upstream refuses --control with a prompt "
                         "text); set clone_mode to reference, or leave control empty")
    if prompt_audio is not None and not (prompt_audio[2] or "").strip():
        raise InputError("cloning by continuation needs the reference's transcript (or clone_mode reference on "
                         "VoxCPM2)")
    target = clean_text(f"({control}){text}" if control else text)
    tokenizer = loaded.tokenizer
    ids = tokenizer((prompt_audio[2] if prompt_audio is not None else "") + target)
    limit, name = position_limit(loaded)
    if len(ids) + 1 > limit:  # the text alone (and the audio start): refused before any audio is encoded
        raise InputError(f"the text is {len(ids):,} tokens, more than this model's {name} {limit:,} (the positions "
                         f"of the text, the audio prompts and the generated patches together); shorten the text "
                         f"or split it")
    with ctx.step(), torch.inference_mode():
        prompt_feats = reference_feats = None
        if reference is not None:
            reference_feats = _encode(loaded, reference[0], reference[1], left_pad=False)
        if prompt_audio is not None:
            prompt_feats = _encode(loaded, prompt_audio[0], prompt_audio[1], left_pad=True)
        prefill = prompt.build(version, ids, loaded.config.patch_size, loaded.vae.latent_dim, prompt_feats,
                               reference_feats)
    flow = FlowOptions(n_timesteps=int(params.get("inference_timesteps", 10)),
                       cfg_value=float(params.get("cfg_value", 2.0)), mean_mode=loaded.config.dit_mean_mode)
    return Request(prefill, len(tokenizer(target)), flow, int(params.get("max_len", 4096)),
                   int(params.get("min_len", 2)))


def position_limit(loaded: VoxLoaded) -> tuple[int, str]:
    """The positions a request's prefill and generated patches share, and the setting that sets them: the
    static cache's max_length (config.json), or the LMs' RoPE table (lm_config.max_position_embeddings)
    where that is shorter."""
    positions = loaded.net.lm_config.max_position_embeddings
    if positions < loaded.config.max_length:
        return positions, "max_position_embeddings"
    return loaded.config.max_length, "max_length"


def _attempt_limit(request: Request, params: dict) -> int:
    ratio = float(params.get("retry_badcase_ratio_threshold", 6.0))
    return min(int(request.target_tokens * ratio + 10), request.max_len)


def _generate(loaded: VoxLoaded, request: Request, ctx: RequestContext, params: dict):
    return iterate_patches(loaded.net, loaded.steps(), request.prefill, request.flow, ctx,
                           _attempt_limit(request, params), request.min_len, *position_limit(loaded))


# --------------------------------------------------------------------------------------------------
# Speaking


def speak(loaded: VoxLoaded, text: str, ctx: RequestContext, params: dict,
          reference: tuple[torch.Tensor, int] | None = None, reference_text: str | None = None
          ) -> tuple[torch.Tensor, int]:
    """Text -> (waveform (1, samples) float32 on the CPU, the VAE's output rate)."""
    return speak_request(loaded, build_request(loaded, text, ctx, params, reference, reference_text), ctx, params)


def speak_request(loaded: VoxLoaded, request: Request, ctx: RequestContext, params: dict) -> tuple[torch.Tensor, int]:
    """A built request -> (waveform (1, samples) float32 on the CPU, rate), with upstream's retries."""
    retry = bool(params.get("retry_badcase", True))
    ratio = float(params.get("retry_badcase_ratio_threshold", 6.0))
    for _ in range(max(int(params.get("retry_badcase_max_times", 3)), 1)):
        *_, (_, attempt) = _generate(loaded, request, ctx, params)  # the last patch's attempt: all of it
        # upstream counts v1's context patches with the generated ones, v2's not
        length = len(attempt.patches) if loaded.config.version == 1 else attempt.generated
        if not (retry and length >= request.target_tokens * ratio):
            break
    with ctx.step(), torch.inference_mode():
        wave = loaded.vae.decode(attempt.latents().to(loaded.vae.device), decoder=loaded.vae_decoder)
        wave = wave[..., request.prefill.cut_patches * _samples_per_patch(loaded):]
    return wave[:, 0].float().cpu(), loaded.sample_rate


def _samples_per_patch(loaded: VoxLoaded) -> int:
    """Output samples of one patch as upstream cuts them: v2 by the decoder's hop, v1 by the encoder's
    (its VAE has the same rate on both sides)."""
    vae = loaded.vae
    return loaded.config.patch_size * (vae.decode_chunk_size if loaded.config.version == 2 else vae.chunk_size)


def speak_stream(loaded: VoxLoaded, text: str, ctx: RequestContext, params: dict,
                 reference: tuple[torch.Tensor, int] | None = None, reference_text: str | None = None
                 ) -> Iterator[torch.Tensor]:
    """Like `speak`, but yields the waveform patch by patch, (1, n) float32 on the CPU, as upstream's
    generate_streaming: VoxCPM2 decodes each new patch with a streaming VAE decoder (its state carried
    from patch to patch, starting from silence); v1 decodes the last three patches (prompt patches
    included) and keeps the newest patch's samples. No retries, as upstream."""
    request = build_request(loaded, text, ctx, params, reference, reference_text)
    vae, window = loaded.vae, prompt.prefix_patches(loaded.config.version)
    per_patch = _samples_per_patch(loaded)
    stream = vae.stream(decoder=loaded.vae_decoder) if loaded.config.version == 2 else None
    for patch, attempt in _generate(loaded, request, ctx, params):
        with ctx.step(), torch.inference_mode():
            if stream is not None:
                latents = patch.permute(0, 2, 1).float()
                wave = stream.decode_chunk(latents.to(vae.device))
            else:
                recent = Attempt(attempt.patches[-window:], 0)
                wave = vae.decode(recent.latents().to(vae.device), decoder=loaded.vae_decoder)[..., -per_patch:]
        yield wave[:, 0].float().cpu()


__all__ = ["VoxLoaded", "Request", "build_request", "load", "rebind", "request", "speak", "speak_request",
           "speak_stream"]
