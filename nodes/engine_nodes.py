"""A loader node and the node of what the engine does (Speak, Transcribe or Convert) per engine, generated
from the engine's declaration."""

from __future__ import annotations

import json

from mizuoto.core.errors import InputError
from mizuoto.engines.spec import EngineSpec
from mizuoto.host import LoadedModel, comfy, convert, load_model, speak
from mizuoto.host.devices import DEVICES, DTYPES
from mizuoto.host.local import transcribe
from mizuoto.runtime.context import RequestContext

from . import models
from .types import AUDIO, CATEGORY, MODEL, POLICY, SEED_MAX, comfy_audio
from .widgets import option_widget, param_widget


def _class_name(spec: EngineSpec, role: str) -> str:
    # Node ids are saved in users' workflows: keep them stable. Letters and digits only ("F5-TTS" -> F5TTS).
    return f"Mizuoto{''.join(c for c in spec.display_name if c.isalnum())}{role}"


def make_loader(spec: EngineSpec) -> type:
    def INPUT_TYPES(cls):
        required = {
            "model": (models.choices(spec), {"tooltip": models.tooltip(spec)}),
        }
        if spec.companion is not None:  # chosen as a pair with the model
            required[spec.companion.option] = (models.companion_choices(spec), {"tooltip": spec.companion.help})
        required["device"] = (list(DEVICES), {"default": "auto"})
        required["dtype"] = (list(DTYPES), {"default": "float32"})
        for option in spec.load_options:
            if spec.companion is None or option.key != spec.companion.option:
                required[option.key] = option_widget(option)
        if spec.license_acceptance:
            required["accept_license"] = ("BOOLEAN", {
                "default": False, "tooltip": f"the weights are licensed under {spec.weights_license}; "
                                             f"turn on to accept that licence and load them"})
        return {"required": required,
                "optional": {"policy": (POLICY, {"tooltip": "from an Accel Policy node; default auto"})}}

    def load(self, model, device, dtype, policy=None, accept_license=False, **load_options):
        if spec.license_acceptance and not accept_license:
            raise InputError(f"{spec.display_name} weights are licensed under {spec.weights_license}; "
                             f"turn on accept_license in the loader to accept it")
        if spec.companion is not None:
            option = spec.companion.option
            load_options[option] = models.resolve_companion(spec, load_options.get(option))
        overrides = {f"engines.{spec.id}.load_options.{k}": v for k, v in load_options.items()}
        name, strict = None, False
        if policy is not None:
            name, strict = policy.name, policy.strict
            overrides.update(policy.overrides())
        return (load_model(spec.id, models.resolve(spec, model), device=device, dtype=dtype,
                           policy=name, strict=strict, overrides=overrides),)

    return type(_class_name(spec, "Loader"), (), {
        "INPUT_TYPES": classmethod(INPUT_TYPES),
        "RETURN_TYPES": (MODEL,),
        "RETURN_NAMES": ("model",),
        "FUNCTION": "load",
        "CATEGORY": f"{CATEGORY}/{spec.display_name}",
        "DESCRIPTION": f"Load a {spec.display_name} model. {spec.description}",
        "load": load,
    })


def _check_model(spec: EngineSpec, model, role: str) -> None:
    if not isinstance(model, LoadedModel) or model.spec.id != spec.id:
        got = model.spec.display_name if isinstance(model, LoadedModel) else type(model).__name__
        raise InputError(f"this {spec.display_name} {role} node got a {got} model; connect a "
                         f"{spec.display_name} Loader")


def _audio_result(speech) -> dict:
    report = json.dumps(speech.report, indent=2)
    # The "ui" part reaches the front end (web/mizuoto.js), which shows the report on the node.
    return {"ui": {"report": [report]}, "result": (comfy_audio(speech.waveform, speech.sample_rate), report)}


def make_speaker(spec: EngineSpec) -> type:
    def INPUT_TYPES(cls):
        required = {
            "model": (MODEL,),
            "text": ("STRING", {"multiline": True, "default": "Hello from Mizuoto."}),
            "seed": ("INT", {"default": 0, "min": 0, "max": SEED_MAX, "control_after_generate": True}),
        }
        for param in spec.speak_params:
            required[param.name] = param_widget(param)
        optional = {}
        if spec.reference is not None:
            optional["reference_audio"] = (AUDIO, {"tooltip": f"{spec.reference.help} "
                                                              f"({spec.reference.min_seconds:g}-"
                                                              f"{spec.reference.max_seconds:g} s)"})
            for i in range(1, spec.reference.extra + 1):
                optional[f"extra_reference_{i}"] = (AUDIO, {"tooltip": spec.reference.extra_help})
            if spec.reference.transcript:
                optional["reference_text"] = ("STRING", {"multiline": True, "default": "",
                                                         "tooltip": "what the reference audio says"})
                # lazy: the host runs the Whisper loader (which may download a model) only when
                # check_lazy_status asks for it, i.e. when there is a reference and no transcript
                optional["transcriber"] = (MODEL, {"lazy": True, "tooltip": "a Whisper Loader's model: transcribes "
                                                                            "the reference when reference_text is "
                                                                            "empty"})
        return {"required": required, "optional": optional, "hidden": {"unique_id": "UNIQUE_ID"}}

    def generate(self, model, text, seed, unique_id=None, reference_audio=None, reference_text=None,
                 transcriber=None, **params):
        _check_model(spec, model, "Speak")
        ctx = RequestContext(seed, accel=model.policy.start(), progress=comfy.progress(unique_id),
                             interrupted=comfy.interrupted())
        reference = None
        if reference_audio is not None:
            reference = (reference_audio["waveform"], int(reference_audio["sample_rate"]))
        extras = [params.pop(name) for name in sorted(params) if name.startswith("extra_reference_")]
        extras = [(audio["waveform"], int(audio["sample_rate"])) for audio in extras if audio is not None]
        return _audio_result(speak(model, text, params=params, ctx=ctx, reference=reference,
                                   reference_text=reference_text, transcriber=transcriber, extra_references=extras))

    def check_lazy_status(self, model=None, text=None, seed=None, unique_id=None, reference_audio=None,
                          reference_text=None, transcriber=None, **params):
        """The inputs still to be evaluated: the transcriber, only when it will transcribe."""
        params = {k: v for k, v in params.items() if not k.startswith("extra_reference_")}
        if transcriber is not None or reference_audio is None or (reference_text or "").strip():
            return []
        try:
            values = spec.check_speak_params(params)
        except InputError:
            return []  # generate() reports the bad parameter
        return ["transcriber"] if spec.reference.needs_transcript(values) else []

    return type(_class_name(spec, "Speak"), (), {
        "INPUT_TYPES": classmethod(INPUT_TYPES),
        "RETURN_TYPES": (AUDIO, "STRING"),
        "RETURN_NAMES": ("audio", "report"),
        "FUNCTION": "generate",
        "CATEGORY": f"{CATEGORY}/{spec.display_name}",
        "DESCRIPTION": f"Speak a text with {spec.display_name}; returns the audio and a JSON run report.",
        "generate": generate,
        **({"check_lazy_status": check_lazy_status} if spec.reference is not None and spec.reference.transcript
           else {}),
    })


def make_transcriber(spec: EngineSpec) -> type:
    """A Transcribe node: AUDIO in; text, language and the segments (JSON) out."""

    def INPUT_TYPES(cls):
        required = {"model": (MODEL,), "audio": (AUDIO,),
                    "seed": ("INT", {"default": 0, "min": 0, "max": SEED_MAX,
                                     "tooltip": "draws of temperature fallback sampling"})}
        for param in spec.speak_params:
            required[param.name] = param_widget(param)
        return {"required": required, "hidden": {"unique_id": "UNIQUE_ID"}}

    def run(self, model, audio, seed, unique_id=None, **params):
        if not isinstance(model, LoadedModel) or model.spec.id != spec.id:
            raise InputError(f"this {spec.display_name} node needs a {spec.display_name} Loader's model")
        ctx = RequestContext(seed, accel=model.policy.start(), progress=comfy.progress(unique_id),
                             interrupted=comfy.interrupted())
        result = transcribe(model, audio["waveform"], int(audio["sample_rate"]), params=params, ctx=ctx)
        segments = json.dumps(result["segments"], indent=2, ensure_ascii=False)
        return {"ui": {"text": [result["text"]]}, "result": (result["text"].strip(), result["language"], segments)}

    return type(_class_name(spec, "Transcribe"), (), {
        "INPUT_TYPES": classmethod(INPUT_TYPES),
        "RETURN_TYPES": ("STRING", "STRING", "STRING"),
        "RETURN_NAMES": ("text", "language", "segments"),
        "FUNCTION": "run",
        "CATEGORY": f"{CATEGORY}/{spec.display_name}",
        "DESCRIPTION": f"Transcribe audio with {spec.display_name}; returns the text, its language and the "
                       f"segments with timestamps as JSON.",
        "run": run,
    })


def make_converter(spec: EngineSpec) -> type:
    """A Convert node: source AUDIO and a reference voice's AUDIO in; the source's speech in that voice
    (AUDIO) and the JSON run report out."""

    def INPUT_TYPES(cls):
        required = {
            "model": (MODEL,),
            "source_audio": (AUDIO, {"tooltip": "the speech (or singing) to convert"}),
            "reference_audio": (AUDIO, {"tooltip": f"{spec.reference.help} ({spec.reference.min_seconds:g}-"
                                                   f"{spec.reference.max_seconds:g} s)"}),
            "seed": ("INT", {"default": 0, "min": 0, "max": SEED_MAX, "control_after_generate": True}),
        }
        for param in spec.speak_params:
            required[param.name] = param_widget(param)
        return {"required": required, "hidden": {"unique_id": "UNIQUE_ID"}}

    def run(self, model, source_audio, reference_audio, seed, unique_id=None, **params):
        _check_model(spec, model, "Convert")
        ctx = RequestContext(seed, accel=model.policy.start(), progress=comfy.progress(unique_id),
                             interrupted=comfy.interrupted())
        source = (source_audio["waveform"], int(source_audio["sample_rate"]))
        reference = (reference_audio["waveform"], int(reference_audio["sample_rate"]))
        return _audio_result(convert(model, source, reference, params=params, ctx=ctx))

    return type(_class_name(spec, "Convert"), (), {
        "INPUT_TYPES": classmethod(INPUT_TYPES),
        "RETURN_TYPES": (AUDIO, "STRING"),
        "RETURN_NAMES": ("audio", "report"),
        "FUNCTION": "run",
        "CATEGORY": f"{CATEGORY}/{spec.display_name}",
        "DESCRIPTION": f"Convert a recording into the reference's voice with {spec.display_name}; returns the audio "
                       f"and a JSON run report.",
        "run": run,
    })
