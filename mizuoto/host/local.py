"""Load a model and run requests on it in this process (the CLI and the nodes both use this)."""

from __future__ import annotations

import time
import weakref
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mizuoto import engines
from mizuoto.core.errors import CheckpointError, InputError
from mizuoto.core.options import RuntimeOptions
from mizuoto.engines.spec import EngineSpec
from mizuoto.runtime import graphs
from mizuoto.runtime.accel import AccelPolicy, features, policy_for
from mizuoto.runtime.context import RequestContext

from . import comfy
from . import settings as host_settings
from .devices import resolve_device, resolve_dtype
from .info import LoadedModelInfo
from .run import Run


@dataclass
class LoadedModel:
    spec: EngineSpec
    state: Any  # the engine's own loaded object
    info: LoadedModelInfo
    policy: AccelPolicy
    patcher: Any = None  # ComfyUI's ModelPatcher when the host manages the model's memory


@dataclass(frozen=True)
class Speech:
    waveform: Any  # torch.Tensor (channels, samples), float32, on the CPU
    sample_rate: int
    report: dict[str, Any]


def check_model_path(spec: EngineSpec, model: str | Path | None) -> Path | None:
    if model is None or str(model) == "":
        if spec.builtin_weights:
            return None
        raise InputError(f"engine {spec.id} needs a model file; pass one ending in "
                         f"{' or '.join(spec.checkpoint_suffixes)}")
    path = Path(model).expanduser()
    if not path.exists():
        raise CheckpointError(f"model file {path} does not exist")
    if path.is_file() and path.suffix.lower() not in spec.checkpoint_suffixes:
        raise CheckpointError(f"{path} is not a {spec.id} checkpoint; expected a file ending in "
                              f"{' or '.join(spec.checkpoint_suffixes)}")
    return path


# Engine states still in use, by what their weights depend on. A load that differs only in what
# the weights do not depend on (the attention policy, compile, CUDA graphs) reuses the weights
# (ComfyUI re-runs a loader whenever its policy input changes): only what must reload reloads.
# Every live state per key (the first load and its rebinds): whichever the host still holds serves the
# next load, so neither dropping the first load (ComfyUI replacing a loader's output) nor dropping a
# rebind reloads weights that are still in memory.
_states: dict[tuple, list[weakref.ref]] = {}


def _live_state(key: tuple):
    refs = [ref for ref in _states.get(key, ()) if ref() is not None]
    if refs:
        _states[key] = refs
    else:
        _states.pop(key, None)
    return refs[-1]() if refs else None


def _load_state(spec: EngineSpec, path: Path | None, device, dtype, options: RuntimeOptions):
    implementation = spec.implementation_module()
    stamp = None if path is None else (str(path.resolve()), path.stat().st_mtime_ns, path.stat().st_size)
    key = (spec.id, stamp, str(device), str(dtype), tuple(sorted(options.load_options.items())))
    previous = _live_state(key)
    rebind = getattr(implementation, "rebind", None)
    if previous is not None and rebind is not None:
        state = rebind(previous, options)
    else:
        state = implementation.load(path, device, dtype, options)
    _states.setdefault(key, []).append(weakref.ref(state))
    return state


def load_model(engine: str, model: str | Path | None = None, *, device: str = "auto",
               dtype: str = "float32", policy: str | None = None, strict: bool = False,
               settings_file=None, overrides: dict[str, Any] | None = None) -> LoadedModel:
    """Load `engine`'s model from `model` (or its built-in weights), with the settings in force now."""
    spec = engines.get(engine)
    overrides = dict(overrides or {})
    if policy is not None:
        policy_for(policy, strict)  # an unknown name fails here, with the list of known ones
        overrides[f"engines.{spec.id}.attention"] = policy
    options = RuntimeOptions.read(spec.id, host_settings.current(settings_file, overrides))
    accel_policy = policy_for(options.attention, strict)
    path = check_model_path(spec, model)
    torch_device, torch_dtype = resolve_device(device), resolve_dtype(dtype)
    accel_policy.check_device(torch_device)  # strict: refuse a named backend that cannot run here
    state = _load_state(spec, path, torch_device, torch_dtype, options)
    info = LoadedModelInfo(
        engine=spec.id,
        source=state.source,
        device=str(torch_device),
        dtype=dtype,
        attention=accel_policy.name,
        strict=accel_policy.strict,
        compile=options.compile,
        cuda_graphs=options.cuda_graphs,
        graphs=graphs.usable(torch_device, options.cuda_graphs),
        fused_projections=bool(getattr(state, "fused_projections", False)),
        fast=features.applied(),
        load_options=dict(options.load_options),
        details=dict(getattr(state, "details", None) or {}),
    )
    handle = getattr(state, "handle", None)
    patcher = comfy.managed(handle.modules, torch_device) if handle is not None else None
    return LoadedModel(spec, state, info, accel_policy, patcher)


def speak(loaded: LoadedModel, text: str, seed: int | None = None,
          params: dict[str, Any] | None = None, ctx: RequestContext | None = None,
          reference: tuple[Any, int] | None = None, reference_text: str | None = None,
          transcriber: LoadedModel | None = None, extra_references: list[tuple[Any, int]] | None = None) -> Speech:
    """Generate speech for `text`; `seed` fixes every random draw of the request.

    `reference` is (waveform, sample rate) of a voice recording, for engines that take one. Engines
    that read its transcript get `reference_text`; when that is empty, `transcriber` (a Whisper
    model) transcribes the recording, once per recording and model. `extra_references` are further recordings of the
    same voice, for engines that take them (`Reference.extra`).
    """
    from mizuoto.engines.spec import SPEAK

    if loaded.spec.kind != SPEAK:
        raise InputError(f"engine {loaded.spec.id} does not speak a text ({loaded.spec.kind} is what it does); "
                         f"load a text-to-speech model")
    values = loaded.spec.check_speak_params(params)
    extra = {}
    if reference is not None:
        if loaded.spec.reference is None:
            raise InputError(f"engine {loaded.spec.id} takes no reference audio; disconnect it")
        extra["reference"] = (loaded.spec.reference.check(*reference), reference[1])
        if loaded.spec.reference.needs_transcript(values):
            if not (reference_text or "").strip():
                if transcriber is None:
                    raise InputError(f"{loaded.spec.display_name} needs the reference audio's transcript: type "
                                     f"it, or connect a Whisper model to transcribe it")
                reference_text = reference_transcript(transcriber, *reference)
            extra["reference_text"] = reference_text
    if extra_references:
        most = loaded.spec.reference.extra if loaded.spec.reference is not None else 0
        if len(extra_references) > most:
            raise InputError(f"{loaded.spec.display_name} takes at most {most} extra reference recordings; got "
                             f"{len(extra_references)}")
        if "reference" not in extra:
            raise InputError("extra reference recordings go with a reference recording; give the reference too")
        extra["extra_references"] = [(loaded.spec.reference.check_extra(wave, rate), int(rate))
                                     for wave, rate in extra_references]
    comfy.ensure_loaded(loaded.patcher)
    ctx = ctx or RequestContext(seed, accel=loaded.policy.start())
    run = Run(ctx.seed, loaded.policy.name, ctx.accel)
    waveform, rate = loaded.spec.implementation_module().speak(loaded.state, text, ctx, values, **extra)
    run.finish()
    return _speech(loaded, ctx, run, "speak", values, waveform, rate)


def convert(loaded: LoadedModel, source: tuple[Any, int], reference: tuple[Any, int], seed: int | None = None,
            params: dict[str, Any] | None = None, ctx: RequestContext | None = None) -> Speech:
    """The speech of `source` in the voice of `reference` (each (waveform, sample rate), any rate: the
    engine resamples as its upstream does); `seed` fixes every random draw of the request. The same
    lifetime, progress, cancel and report as speak()."""
    from mizuoto.engines.spec import CONVERT

    spec = loaded.spec
    if spec.kind != CONVERT:
        raise InputError(f"engine {spec.id} does not convert voices; load a voice-conversion model")
    values = spec.check_speak_params(params)
    source = (spec.check_source(*source), int(source[1]))
    reference = (spec.reference.check(*reference), int(reference[1]))
    comfy.ensure_loaded(loaded.patcher)
    ctx = ctx or RequestContext(seed, accel=loaded.policy.start())
    run = Run(ctx.seed, loaded.policy.name, ctx.accel)
    waveform, rate = spec.implementation_module().convert(loaded.state, source, reference, ctx, values)
    run.finish()
    speech = _speech(loaded, ctx, run, "convert", values, waveform, rate)
    speech.report["source_seconds"] = round(source[0].shape[-1] / source[1], 4)
    return speech


class ConvertStream:
    """What convert_stream() returns: iterate it for each source chunk's converted piece as soon as it is made (a
    Speech whose report says the chunk's index, its audio seconds and the wall seconds it took); `report` is the
    whole stream's (as convert()'s, with the chunk count), once the stream has ended."""

    def __init__(self, loaded: LoadedModel, ctx: RequestContext, values: dict):
        self._loaded, self.ctx, self._values = loaded, ctx, values
        self._run = Run(ctx.seed, loaded.policy.name, ctx.accel)
        self.pieces = iter(())  # the engine's (piece, rate) iterator, set by convert_stream()
        self.source_seconds = 0.0
        self.report: dict[str, Any] | None = None

    def checked(self, chunks):
        """The source chunks, each checked as convert() checks a source (mono float32)."""
        for waveform, rate in chunks:
            waveform = self._loaded.spec.check_source(waveform, rate)
            self.source_seconds += waveform.shape[-1] / int(rate)
            yield waveform, int(rate)

    def __iter__(self):
        index, samples, rate, started, walls = 0, 0, None, time.perf_counter(), []
        for waveform, rate in self.pieces:
            samples += int(waveform.shape[-1])
            walls.append(time.perf_counter() - started)  # from asking for the chunk to its audio: its latency
            yield Speech(waveform, rate, {"chunk": index, "samples": int(waveform.shape[-1]),
                                          "audio_seconds": round(waveform.shape[-1] / rate, 4),
                                          "wall_seconds": round(walls[-1], 4)})
            index, started = index + 1, time.perf_counter()
        self._run.finish()
        self.report = {**_report(self._loaded, self.ctx, self._run, "convert", self._values, rate, 1, samples),
                       "source_seconds": round(self.source_seconds, 4), "stream_chunks": index,
                       "chunk_wall_seconds": {"mean": round(sum(walls) / len(walls), 4) if walls else None,
                                              "max": round(max(walls), 4) if walls else None}}


def convert_stream(loaded: LoadedModel, chunks, reference: tuple[Any, int], seed: int | None = None,
                   params: dict[str, Any] | None = None, ctx: RequestContext | None = None,
                   live: dict[str, Any] | None = None) -> ConvertStream:
    """convert() chunk by chunk, for engines with a streaming mode (Seed-VC's real-time model): `chunks` yields
    the source's (waveform, sample rate) pieces in order (a microphone's blocks, a file cut up); the result yields
    converted audio as soon as it is made. `live` (the engine's live settings, {} for its defaults) asks for the
    engine's low-latency block mode instead of converting each chunk alone. One request: one seed, one report."""
    from mizuoto.engines.spec import CONVERT

    spec = loaded.spec
    if spec.kind != CONVERT:
        raise InputError(f"engine {spec.id} does not convert voices; load a voice-conversion model")
    implementation = spec.implementation_module()
    if not hasattr(implementation, "convert_stream"):
        raise InputError(f"engine {spec.id} has no streaming mode; convert the whole recording with convert()")
    values = spec.check_speak_params(params)
    reference = (spec.reference.check(*reference), int(reference[1]))
    comfy.ensure_loaded(loaded.patcher)
    stream = ConvertStream(loaded, ctx or RequestContext(seed, accel=loaded.policy.start()), values)
    stream.pieces = implementation.convert_stream(loaded.state, stream.checked(chunks), reference, stream.ctx, values,
                                                  live=live)
    return stream


def _speech(loaded: LoadedModel, ctx: RequestContext, run: Run, request: str, values: dict, waveform,
            rate: int) -> Speech:
    """The engine's audio, checked, with the request's report ("speak" or "convert": its parameters)."""
    if waveform.dim() != 2 or waveform.dtype.is_complex or not bool(waveform.isfinite().all()):
        raise RuntimeError(f"engine {loaded.spec.id} produced an invalid waveform "
                           f"(shape {tuple(waveform.shape)}); this is a bug in Mizuoto")
    return Speech(waveform, rate, _report(loaded, ctx, run, request, values, rate, int(waveform.shape[0]),
                                          int(waveform.shape[-1])))


def _report(loaded: LoadedModel, ctx: RequestContext, run: Run, request: str, values: dict, rate: int | None,
            channels: int, samples: int) -> dict[str, Any]:
    seconds = samples / rate if rate else 0.0
    return {
        **loaded.info.report(),
        "seed": ctx.seed,
        request: values,
        "attention": run.attention_report(),
        "sample_rate": rate,
        "channels": channels,
        "samples": samples,
        "audio_seconds": round(seconds, 4),
        "wall_seconds": round(run.wall_seconds, 4),
        # null, not infinity, for no audio: JSON has no infinity and browsers refuse to parse it
        "real_time_factor": round(run.wall_seconds / seconds, 4) if seconds > 0 else None,
        "warnings": run.warnings,
    }


def transcribe(loaded: LoadedModel, waveform, sample_rate: int, params: dict[str, Any] | None = None,
               seed: int | None = None, ctx: RequestContext | None = None) -> dict[str, Any]:
    """Audio (channels, samples) at any rate -> the transcription engine's result dict, plus a report.

    The audio is mixed to mono and resampled to the engine's rate with mizuoto/audio/resample.py (exact
    to upstream only when it already is at that rate: upstream resamples with ffmpeg)."""
    from mizuoto.engines.spec import TRANSCRIBE

    if loaded.spec.kind != TRANSCRIBE:
        raise InputError(f"engine {loaded.spec.id} does not transcribe; load a Whisper model")
    values = loaded.spec.check_speak_params(params)
    implementation = loaded.spec.implementation_module()
    audio = _mono_at(waveform, sample_rate, implementation.SAMPLE_RATE)
    comfy.ensure_loaded(loaded.patcher)
    ctx = ctx or RequestContext(seed, accel=loaded.policy.start())
    run = Run(ctx.seed, loaded.policy.name, ctx.accel)
    result = implementation.transcribe(loaded.state, audio, ctx, values)
    run.finish()
    seconds = audio.shape[-1] / implementation.SAMPLE_RATE
    result["report"] = {**loaded.info.report(), "seed": ctx.seed, "options": values,
                        "attention": run.attention_report(), "audio_seconds": round(seconds, 4),
                        "wall_seconds": round(run.wall_seconds, 4),
                        "real_time_factor": round(run.wall_seconds / seconds, 4) if seconds > 0 else None,
                        "warnings": run.warnings}
    return result


_transcripts: "OrderedDict[tuple, str]" = OrderedDict()
TRANSCRIPTS_KEPT = 64


def reference_transcript(transcriber: LoadedModel, waveform, sample_rate: int) -> str:
    """The text of a reference recording, transcribed with `transcriber` once and remembered (by the
    model and the recording's exact samples), so a workflow re-run does not transcribe it again."""
    import hashlib

    import torch

    samples = torch.as_tensor(waveform, dtype=torch.float32).contiguous()
    digest = hashlib.sha256(samples.numpy().tobytes()).hexdigest()
    key = (transcriber.info.source, transcriber.info.device, digest, int(sample_rate))
    text = _transcripts.get(key)
    if text is None:
        result = transcribe(transcriber, samples, sample_rate, seed=0)
        text = _transcripts[key] = result["text"].strip()
        while len(_transcripts) > TRANSCRIPTS_KEPT:
            _transcripts.popitem(last=False)
    else:
        _transcripts.move_to_end(key)
    return text


def _mono_at(waveform, sample_rate: int, rate: int):
    import torch

    waveform = torch.as_tensor(waveform, dtype=torch.float32)
    if waveform.dim() == 3:
        if waveform.shape[0] != 1:
            raise InputError(f"the audio holds {waveform.shape[0]} clips; give exactly one")
        waveform = waveform[0]
    if int(sample_rate) <= 0:
        raise InputError(f"the audio's sample rate is {sample_rate}; give audio with its real rate")
    mono = waveform if waveform.dim() == 1 else waveform.mean(dim=0)
    if mono.shape[-1] == 0:
        raise InputError("the audio is empty")
    if not bool(torch.isfinite(mono).all()):
        raise InputError("the audio holds NaN or infinite samples")
    if sample_rate != rate:
        from mizuoto.audio.resample import resample

        mono = resample(mono, sample_rate, rate)
    return mono
