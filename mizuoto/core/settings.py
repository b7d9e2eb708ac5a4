"""Settings: defaults, then a settings file, then environment variables, then explicit arguments.

Keys are the dotted names of the acceleration page: `compute.fast`, `compute.compile`,
`compute.cuda_graphs`, `engines.<id>.attention`, `engines.<id>.load_options.<name>`. Which engines
and load options exist is declared by the engines themselves and handed in as a `Schema`, so this
module stays standard-library only and knows no engine.

A settings file is TOML (or JSON, by its suffix) with nested tables::

    [compute]
    compile = true

    [engines.dummy.load_options]
    sample_rate = 16000

An environment variable is `MIZUOTO_` followed by the key in upper case with `__` for each dot:
`MIZUOTO_COMPUTE__COMPILE=1`, `MIZUOTO_ENGINES__DUMMY__ATTENTION=auto`. Every value is checked;
an unknown key or a bad value is a one-line `SettingsError` naming the key, where it came from and
the allowed values.
"""

from __future__ import annotations

import difflib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping

from .errors import SettingsError

ENV_PREFIX = "MIZUOTO_"
ENV_SETTINGS_FILE = "MIZUOTO_SETTINGS"

# The attention policies a model can be loaded with: `auto` binds nothing and runs each site's
# reference; `host` puts ComfyUI's own choice first; `fast` takes the fastest backend that can run
# each call; every other name is one backend (mizuoto/runtime/accel/backends, same order).
POLICY_NAMES: tuple[str, ...] = (
    "auto", "host", "fast",
    "math", "cpu_flash", "sdpa_flash", "sdpa_efficient", "sdpa_cudnn",
    "flash", "xformers", "sage", "sage3",
)

# compute.fast switches (applied once at host start by runtime/accel/features.py). Every one of
# them changes results, so none is on by default.
FAST_SWITCHES: tuple[str, ...] = (
    "tf32",
    "fp16_accumulation",
    "math_sdp_reduction",
    "cudnn_benchmark",
)

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}


@dataclass(frozen=True)
class Option:
    """One setting: its key, value kind, default and allowed values."""

    key: str
    kind: type  # bool, int, float, str, or tuple for a set of names
    default: Any
    choices: tuple | None = None
    help: str = ""

    def describe_allowed(self) -> str:
        if self.kind is bool:
            return "true or false"
        if self.kind is tuple:
            return "a comma-separated list of " + ", ".join(self.choices or ()) + ", or all, or none"
        if self.choices is not None:
            return "one of " + ", ".join(str(c) for c in self.choices)
        return {int: "an integer", float: "a number", str: "a string"}[self.kind]


@dataclass(frozen=True)
class EngineSettings:
    """What an engine declares about its settings: its id and its load options."""

    id: str
    load_options: tuple[Option, ...] = ()


@dataclass(frozen=True)
class Schema:
    options: Mapping[str, Option]

    @classmethod
    def build(cls, engines: Iterable[EngineSettings]) -> "Schema":
        options = [
            Option("compute.fast", tuple, (), FAST_SWITCHES,
                   "process-wide GPU switches that change results (applied at host start)"),
            Option("compute.compile", bool, False, None,
                   "wrap hot modules in torch.compile; changes results slightly"),
            Option("compute.cuda_graphs", bool, True, None,
                   "replay decode steps as CUDA graphs; bit-identical to eager"),
        ]
        for engine in engines:
            options.append(Option(f"engines.{engine.id}.attention", str, "auto", POLICY_NAMES,
                                  f"attention policy for {engine.id} models loaded from now on"))
            for opt in engine.load_options:
                options.append(Option(f"engines.{engine.id}.load_options.{opt.key}", opt.kind,
                                      opt.default, opt.choices, opt.help))
        return cls({o.key: o for o in options})

    def option(self, key: str, source: str) -> Option:
        try:
            return self.options[key]
        except KeyError:
            close = difflib.get_close_matches(key, self.options, n=1)
            hint = f"; did you mean '{close[0]}'?" if close else f"; known settings: {', '.join(sorted(self.options))}"
            raise SettingsError(f"unknown setting '{key}' in {source}{hint}") from None


@dataclass(frozen=True)
class Settings:
    """Resolved values and, for each key, where its value came from."""

    values: Mapping[str, Any]
    sources: Mapping[str, str] = field(default_factory=dict)

    def __getitem__(self, key: str) -> Any:
        return self.values[key]

    def under(self, prefix: str) -> dict[str, Any]:
        """The values below `prefix.`, keyed by the rest of their key."""
        dot = prefix + "."
        return {k[len(dot):]: v for k, v in self.values.items() if k.startswith(dot)}


def default_settings_file(environ: Mapping[str, str]) -> Path | None:
    """`MIZUOTO_SETTINGS` if set, else `$XDG_CONFIG_HOME/mizuoto/settings.toml` when it exists."""
    if environ.get(ENV_SETTINGS_FILE):
        return Path(environ[ENV_SETTINGS_FILE]).expanduser()
    base = Path(environ.get("XDG_CONFIG_HOME") or Path.home() / ".config")
    candidate = base / "mizuoto" / "settings.toml"
    return candidate if candidate.is_file() else None


def load(schema: Schema, file: str | os.PathLike | None = None,
         environ: Mapping[str, str] | None = None,
         overrides: Mapping[str, Any] | None = None) -> Settings:
    """Resolve every setting: defaults < file < environment < `overrides`."""
    environ = os.environ if environ is None else environ
    values = {key: opt.default for key, opt in schema.options.items()}
    sources = {key: "default" for key in schema.options}

    path = Path(file).expanduser() if file is not None else default_settings_file(environ)
    if path is not None:
        for key, raw in _read_file(path).items():
            _set(schema, values, sources, key, raw, str(path))
    for name, raw in sorted(environ.items()):
        key = _env_key(name)
        if key is not None:
            _set(schema, values, sources, key, raw, name)
    for key, raw in (overrides or {}).items():
        if raw is not None:
            _set(schema, values, sources, key, raw, "arguments")
    return Settings(values, sources)


def env_name(key: str) -> str:
    """The environment variable that sets `key`."""
    return ENV_PREFIX + key.replace(".", "__").upper()


def _env_key(name: str) -> str | None:
    # Only MIZUOTO_* names with a `__` are settings; others (MIZUOTO_SETTINGS, MIZUOTO_TEST_ACCEL)
    # are read by whoever owns them.
    if not name.startswith(ENV_PREFIX) or "__" not in name:
        return None
    return name[len(ENV_PREFIX):].lower().replace("__", ".")


def _read_file(path: Path) -> dict[str, Any]:
    if not path.is_file():
        raise SettingsError(f"settings file {path} does not exist; create it or unset {ENV_SETTINGS_FILE}")
    text = path.read_text(encoding="utf-8")
    try:
        if path.suffix.lower() == ".json":
            data = json.loads(text)
        else:
            import tomllib  # Python 3.11+; imported here so 3.10 hosts can still use JSON files

            data = tomllib.loads(text)
    except (ValueError, ImportError) as exc:
        raise SettingsError(f"cannot read settings file {path}: {exc}") from None
    if not isinstance(data, dict):
        raise SettingsError(f"settings file {path} must hold a table of settings")
    return dict(_flatten(data))


def _flatten(table: Mapping[str, Any], prefix: str = ""):
    for name, value in table.items():
        key = f"{prefix}{name}"
        # A table below a list setting has no meaning; tables nest keys, everything else is a value.
        if isinstance(value, dict):
            yield from _flatten(value, key + ".")
        else:
            yield key, value


def _set(schema, values, sources, key, raw, source):
    opt = schema.option(key, source)
    values[key] = parse(opt, raw, source)
    sources[key] = source


def parse(opt: Option, raw: Any, source: str) -> Any:
    """Check and convert one raw value (from a file, a string, or an argument) for `opt`."""

    def bad() -> SettingsError:
        return SettingsError(f"setting {opt.key} from {source}: expected {opt.describe_allowed()}, got {raw!r}")

    if opt.kind is bool:
        if isinstance(raw, bool):
            return raw
        if isinstance(raw, str) and raw.strip().lower() in _TRUE | _FALSE:
            return raw.strip().lower() in _TRUE
        raise bad()
    if opt.kind is tuple:
        return _parse_names(opt, raw, bad)
    if opt.kind is int:
        if isinstance(raw, bool):
            raise bad()
        try:
            value = int(raw) if isinstance(raw, (int, str)) else None
        except ValueError:
            value = None
        if value is None:
            raise bad()
    elif opt.kind is float:
        if isinstance(raw, bool):
            raise bad()
        try:
            value = float(raw)
        except (TypeError, ValueError):
            raise bad() from None
    else:
        if not isinstance(raw, str):
            raise bad()
        value = raw.strip()
    if opt.choices is not None and value not in opt.choices:
        raise bad()
    return value


def _parse_names(opt: Option, raw: Any, bad) -> tuple[str, ...]:
    choices = opt.choices or ()
    if isinstance(raw, bool):
        return tuple(choices) if raw else ()
    if isinstance(raw, str):
        text = raw.strip().lower()
        if text in ("", "none") or text in _FALSE:
            return ()
        if text == "all" or text in _TRUE:
            return tuple(choices)
        items = [part.strip() for part in text.split(",") if part.strip()]
    elif isinstance(raw, (list, tuple)) and all(isinstance(x, str) for x in raw):
        items = list(raw)
    else:
        raise bad()
    unknown = [x for x in items if x not in choices]
    if unknown:
        raise bad()
    # Keep the declared order so equal sets compare and report equal.
    return tuple(c for c in choices if c in items)
