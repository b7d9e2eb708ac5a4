"""What an engine declares about itself, without importing torch.

The declaration is the single source for everything generated per engine: the settings schema
(`engines.<id>.*`), the CLI's options and the ComfyUI loader and speak nodes.
"""

from __future__ import annotations

import importlib
import math
from dataclasses import dataclass, field
from typing import Any

from mizuoto.core.errors import InputError
from mizuoto.core.settings import EngineSettings, Option


@dataclass(frozen=True)
class Param:
    """A speak parameter: a node widget and a CLI option of the same name."""

    name: str
    kind: type  # int, float, str or bool
    default: Any
    help: str
    min: float | None = None
    max: float | None = None
    step: float | None = None
    choices: tuple | None = None

    @property
    def cli_flag(self) -> str:
        return "--" + self.name.replace("_", "-")

    def check(self, value: Any) -> Any:
        """Convert and range-check `value`; a bad one is a one-line error naming the parameter."""
        try:
            if self.kind is bool and not isinstance(value, bool):
                raise ValueError
            value = self.kind(value)
        except (TypeError, ValueError):
            raise InputError(f"{self.name} must be a {self.kind.__name__}, got {value!r}") from None
        if self.kind is float and not math.isfinite(value):  # NaN passes every range check
            raise InputError(f"{self.name} must be a finite number, got {value!r}")
        if self.choices is not None and value not in self.choices:
            raise InputError(f"{self.name} must be one of {', '.join(map(str, self.choices))}, got {value!r}")
        if (self.min is not None and value < self.min) or (self.max is not None and value > self.max):
            raise InputError(f"{self.name} must be between {self.min} and {self.max}, got {value!r}")
        return value


@dataclass(frozen=True)
class Reference:
    """An engine's optional reference voice: audio between min and max seconds, and its transcript."""

    min_seconds: float
    max_seconds: float
    transcript: bool = False  # whether the engine reads the reference's transcript
    help: str = "a recording of the voice to speak with"
    channels: bool = False  # the engine takes every channel (it mixes them down itself, as its upstream)
    # the speak parameter that leaves the transcript unread: "name" (a bool, when on), "name=value" or
    # "name=value|other" (any of the values)
    transcript_unused_with: str | None = None
    # further recordings the engine can take beside it (GPT-SoVITS: more of the same voice, their timbres averaged;
    # IndexTTS: the emotion's recording), and what the node's tooltip says of each
    extra: int = 0
    extra_help: str = "another recording of the same voice: its timbre is averaged with the reference's"

    def needs_transcript(self, params: dict) -> bool:
        if not self.transcript:
            return False
        if not self.transcript_unused_with:
            return True
        name, is_value, value = self.transcript_unused_with.partition("=")
        unused = str(params.get(name)) in value.split("|") if is_value else bool(params.get(name))
        return not unused

    def check(self, waveform, sample_rate: int):
        """(channels, samples) or (samples,) audio -> mono float32 (samples,), or float32 (channels,
        samples) for an engine that takes `channels`; one-line errors."""
        waveform = checked_audio(waveform, sample_rate, "reference audio", "a recording of the voice")
        seconds = waveform.shape[-1] / sample_rate
        if not self.min_seconds <= seconds <= self.max_seconds:
            raise InputError(f"reference audio is {seconds:.2f} s long; give one between {self.min_seconds:g} "
                             f"and {self.max_seconds:g} seconds")
        return waveform if self.channels else waveform.mean(dim=0)

    def check_extra(self, waveform, sample_rate: int):
        """A further recording of the voice: any length (upstream reads only its timbre), else as `check`."""
        waveform = checked_audio(waveform, sample_rate, "extra reference audio", "a recording of the voice")
        return waveform if self.channels else waveform.mean(dim=0)


def checked_audio(waveform, sample_rate: int, what: str, wanted: str):
    """One clip of audio, (1, channels, samples), (channels, samples) or (samples,), as float32 (channels,
    samples), refused in one line when it is several clips, empty, at no real rate, or holds NaN or inf."""
    import torch

    waveform = torch.as_tensor(waveform)
    if waveform.dim() == 3:
        if waveform.shape[0] != 1:
            raise InputError(f"{what} holds {waveform.shape[0]} clips; give exactly one")
        waveform = waveform[0]
    if waveform.dim() == 1:
        waveform = waveform[None]
    if int(sample_rate) <= 0:
        raise InputError(f"{what}'s sample rate is {sample_rate}; give {wanted} with its real rate")
    if waveform.dim() != 2 or waveform.shape[-1] == 0:
        raise InputError(f"{what} is empty; give {wanted}")
    waveform = waveform.to(torch.float32)
    if not bool(torch.isfinite(waveform).all()):
        raise InputError(f"{what} contains NaN or infinite samples")
    return waveform


@dataclass(frozen=True)
class Asset:
    """A Hugging Face repo whose files an engine's downloaded models read beside them (upstream fetches them
    from their own repos: a vocoder, a speaker encoder), fetched with the model into models/tts/<engine>/."""

    repo: str
    files: tuple[str, ...] = ()  # file names or glob patterns; empty: the whole repo


@dataclass(frozen=True)
class Variant:
    """Another model one of an engine's repos publishes beside the one a plain download fetches (Seed-VC's
    repo holds its offline, real-time and singing models): offered as `hf:<repo>#<name>`, it fetches `files` of
    the repo into the same folder and `assets` beside it, and gives the loader the downloaded `entry` file."""

    name: str
    repo: str
    files: tuple[str, ...]
    entry: str  # the file of the download the loader takes (a checkpoint that says which model it is)
    assets: tuple[Asset, ...] = ()
    description: str = ""  # what a user gets, for `mizuoto models` and the doctor


@dataclass(frozen=True)
class Companion:
    """A second weights file a model loads with, chosen beside it (GPT-SoVITS: a voice is a SoVITS file and a GPT
    file, trained together): the loader lists the files ending in `suffixes` under models/tts/<engine>/ (and in
    its subfolders), the command line takes it as `--<option>`, and the engine reads the chosen path from its load
    option `option` ("" when the user left it to the engine: it looks beside the model)."""

    option: str  # a load option of the engine (declared in load_options as a str, default "")
    suffixes: tuple[str, ...]
    help: str

    @property
    def cli_flag(self) -> str:
        return "--" + self.option.replace("_", "-")


# What an engine does, which decides its nodes and its command: SPEAK text -> audio (a Speak node, `say`);
# TRANSCRIBE audio -> text (a Transcribe node, `transcribe`); CONVERT source audio + a reference voice -> the
# source's speech in that voice (a Convert node, `convert`).
SPEAK, TRANSCRIBE, CONVERT = "speak", "transcribe", "convert"
KINDS = (SPEAK, TRANSCRIBE, CONVERT)


@dataclass(frozen=True)
class EngineSpec:
    id: str
    display_name: str
    description: str
    implementation: str  # module (relative to the engine package) with load() and speak()
    weights_license: str
    license_acceptance: bool = False  # the weights' licence must be accepted before loading
    checkpoint_suffixes: tuple[str, ...] = (".safetensors",)
    builtin_weights: bool = False  # can build weights itself (tests, the dummy engine)
    load_options: tuple[Option, ...] = ()
    speak_params: tuple[Param, ...] = field(default_factory=tuple)
    reference: Reference | None = None  # an optional reference voice the speak node accepts
    repos: tuple[str, ...] = ()  # Hugging Face repo ids the loader offers, downloaded on first use
    repo_files: tuple[str, ...] = ()  # what a download of one of `repos` fetches (patterns); empty: everything
    assets: tuple[Asset, ...] = ()  # other repos a downloaded model needs beside it, fetched with it
    variants: tuple[Variant, ...] = ()  # further models of `repos`, each downloaded on its own
    kind: str = SPEAK  # one of KINDS
    # CONVERT only: the longest source the engine takes in one request (its upstream chunks longer ones itself)
    max_source_seconds: float | None = None
    # a second weights file chosen with the model (its models are files, listed from subfolders too)
    companion: Companion | None = None

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"engine {self.id}: kind {self.kind!r} is none of {', '.join(KINDS)}")
        if self.kind == CONVERT and self.reference is None:
            raise ValueError(f"engine {self.id} converts, so it declares the reference voice it takes")
        for variant in self.variants:
            if variant.repo not in self.repos or not variant.name.isidentifier():
                raise ValueError(f"engine {self.id}: variant {variant.name!r} needs a plain name and one of the "
                                 f"engine's repos, not {variant.repo!r}")
        if self.companion is not None and not any(o.key == self.companion.option for o in self.load_options):
            raise ValueError(f"engine {self.id}: its companion file is the load option {self.companion.option!r}, "
                             f"which it must declare")

    def variant(self, repo: str, name: str) -> Variant | None:
        return next((v for v in self.variants if v.repo == repo and v.name == name), None)

    def check_source(self, waveform, sample_rate: int):
        """A CONVERT engine's source audio -> float32 mono (samples,), or (channels, samples) where the
        engine's reference takes every channel; one-line errors."""
        waveform = checked_audio(waveform, sample_rate, "source audio", "the speech to convert")
        seconds = waveform.shape[-1] / sample_rate
        if self.max_source_seconds is not None and seconds > self.max_source_seconds:
            raise InputError(f"source audio is {seconds:.1f} s long; {self.display_name} converts at most "
                             f"{self.max_source_seconds:g} s at a time: cut it into parts")
        return waveform if self.reference.channels else waveform.mean(dim=0)

    def settings(self) -> EngineSettings:
        return EngineSettings(self.id, self.load_options)

    def implementation_module(self):
        """Import the engine's code (this is where torch gets imported)."""
        return importlib.import_module(f"mizuoto.engines.{self.id}.{self.implementation}")

    def speak_defaults(self) -> dict[str, Any]:
        return {p.name: p.default for p in self.speak_params}

    def check_speak_params(self, given: dict[str, Any] | None) -> dict[str, Any]:
        known = {p.name: p for p in self.speak_params}
        unknown = sorted(set(given or {}) - set(known))
        if unknown:
            raise InputError(f"engine {self.id} has no parameter {unknown[0]!r}; "
                             f"its parameters are: {', '.join(known) or 'none'}")
        values = self.speak_defaults()
        for name, value in (given or {}).items():
            if value is not None:
                values[name] = known[name].check(value)
        return values
