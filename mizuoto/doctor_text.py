"""The doctor report for a person: titled sections (the Doctor dialog), plain text (`doctor --text`) and a
few lines for the Doctor node, from `mizuoto.doctor.report()`'s dict."""

from __future__ import annotations

from typing import Any

TITLE = "Mizuoto Doctor"
MENU_PATH = "Mizuoto → Mizuoto Doctor"  # where the ComfyUI menu has the full report (web/mizuoto.js)


def _item(text: str, *, code: str | None = None, level: str = "info", indent: int = 0) -> dict[str, Any]:
    """One line of a section: `level` is ok, info, warn or muted; `code` a command to copy."""
    item = {"text": text, "level": level, "indent": indent}
    if code:
        item["code"] = code
    return item


def _value(value) -> str:
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, (list, tuple)):
        return ", ".join(str(v) for v in value) or "(none)"
    if value == "" or value is None:
        return "(not set)"
    return str(value)


def _probe_words(name: str, found: dict) -> tuple[str, bool]:
    if found.get("ok"):
        return name, True
    reason = found.get("reason") or "does not run"
    return f"{name} ✗ ({reason})", False


def sections(rep: dict[str, Any]) -> list[dict[str, Any]]:
    """The report in three titled sections -- what runs here, engines and their models, settings in force --
    each a list of items (see `_item`); `readable()` and the ComfyUI dialog draw the same sections."""
    return [_what_runs(rep), _engines(rep), _settings(rep)]


def _what_runs(rep) -> dict[str, Any]:
    items = [_item(f"Mizuoto {rep.get('mizuoto', '?')} · Python {rep.get('python', '?')} · "
                   f"torch {rep.get('torch', '?')} · {rep.get('platform', '?')}")]
    cpu_info = rep.get("cpu", {})
    applied = cpu_info.get("applied") or {}
    line = f"CPU: {cpu_info.get('capability', '?')}, {cpu_info.get('threads', '?')} threads"
    if applied:
        line += " (set for speed: " + ", ".join(f"{k}={v}" for k, v in applied.items()) + ")"
    items.append(_item(line))
    cuda = rep.get("cuda", {})
    gpus = cuda.get("devices") or []
    if gpus:
        items.append(_item("GPU: " + ", ".join(f"cuda:{i} {name}" for i, name in enumerate(gpus)), level="ok"))
    else:
        items.append(_item("GPU: none (torch sees no CUDA device; engines run on the CPU)", level="muted"))

    accel = rep.get("acceleration", {})
    devices = accel.get("devices")
    if isinstance(devices, dict):  # the probe process failed
        items.append(_item(f"Attention backends could not be probed: {devices.get('error')}", level="warn"))
    else:
        for device in devices or []:
            words = [_probe_words(name, found) for name, found in device.get("backends", {}).items()]
            label = device["device"] if device.get("name") in (None, device["device"]) \
                else f"{device['device']} ({device['name']})"
            running = [w for w, ok in words if ok]
            failing = [w for w, ok in words if not ok]
            items.append(_item(f"Attention on {label}: " + (", ".join(running) or "nothing runs"),
                               level="ok" if running else "warn"))
            if failing:
                items.append(_item("not here: " + ", ".join(failing), level="muted", indent=1))

    kernels = accel.get("kernels")
    if kernels is None:  # a report from before "kernels": rebuild it from packages and install
        install = accel.get("install", {})
        names = {"flash-attn": "flash", "xformers": "xformers", "sageattention": "sage", "sageattn3": "sage3"}
        kernels = [{"package": p, "version": v, "install": install.get(names.get(p, p))}
                   for p, v in accel.get("packages", {}).items()]
    for kernel in kernels:
        package = kernel["package"]
        gpu_only = "cpu" not in kernel.get("devices", ["cuda"])
        where = " (CUDA GPUs only)" if gpu_only else ""
        if kernel.get("version"):
            items.append(_item(f"Optional kernel {package} {kernel['version']}: installed{where}", level="ok"))
        elif kernel.get("install"):
            items.append(_item(f"Optional kernel {package}{where}: not installed; to add it (keeps your torch):",
                               code=kernel["install"], level="muted"))
        else:
            items.append(_item(f"Optional kernel {package}{where}: not installed (no build known for this torch)",
                               level="muted"))
    fast = accel.get("fast_applied") or []
    if fast:
        items.append(_item("Faster arithmetic switched on: " + ", ".join(fast), level="warn"))

    audio = rep.get("audio_files") or {}
    if audio:
        reads = audio.get("reads") or []
        common = [f for f in ("WAV", "FLAC", "MP3", "OGG") if f in reads]
        others = len(reads) - len(common)
        writes = ", ".join(audio.get("writes") or []) or "nothing"
        items.append(_item(f"Audio files: libsndfile {audio.get('libsndfile', '?')} reads "
                           + (", ".join(common) or "nothing") + (f" and {others} more" if others > 0 else "")
                           + f"; writes {writes}"))
    return {"title": "What runs here", "items": items}


def _engines(rep) -> dict[str, Any]:
    items = []
    for engine_id, engine in rep.get("engines", {}).items():
        items.append(_item(f"{engine.get('name', engine_id)} ({engine_id}) · weights licence "
                           f"{engine.get('weights_license', '?')}", level="info"))
        found = engine.get("models")
        if engine.get("builtin_weights"):
            items.append(_item("built-in weights: nothing to install", level="ok", indent=1))
        if not isinstance(found, dict):
            if not engine.get("builtin_weights"):
                items.append(_item("models: not reported", level="muted", indent=1))
            continue
        if found.get("error"):
            items.append(_item(f"models: {found['error']}", level="warn", indent=1))
            continue
        if found.get("folder"):
            items.append(_item("put models in:", code=found["folder"], level="info", indent=1))
        installed = found.get("installed") or []
        if installed:
            for model in installed:
                items.append(_item(f"installed: {model.get('name')}", code=model.get("path"), level="ok",
                                   indent=1))
        elif not engine.get("builtin_weights"):
            items.append(_item("installed: none yet", level="muted", indent=1))
        downloadable = found.get("downloadable") or []
        if downloadable:
            done = [d["choice"] for d in downloadable if d.get("downloaded")]
            todo = [d["choice"] for d in downloadable if not d.get("downloaded")]
            if done:
                items.append(_item("downloaded: " + ", ".join(done), level="ok", indent=1))
            if todo:
                items.append(_item("the loader downloads on first use: " + ", ".join(todo), level="muted",
                                   indent=1))
    return {"title": "Engines and their models", "items": items}


def _settings(rep) -> dict[str, Any]:
    file = rep.get("settings_file")
    items = [_item(f"Settings file: {file}" if file else
                   "Settings file: none (defaults; MIZUOTO_SETTINGS or ~/.config/mizuoto/settings.toml)",
                   level="info" if file else "muted")]
    for key, entry in rep.get("settings", {}).items():
        source = entry.get("from", "default")
        where = "default" if source == "default" else f"from {source}"
        items.append(_item(f"{key} = {_value(entry.get('value'))} ({where})",
                           level="muted" if source == "default" else "info"))
    return {"title": "Settings in force", "items": items}


def readable(rep: dict[str, Any]) -> str:
    """The report as plain text for a person: a title, then each section with its lines (commands and
    folders indented on their own line, ready to copy)."""
    lines = [f"{TITLE} (Mizuoto {rep.get('mizuoto', '?')})", ""]
    for section in sections(rep):
        lines.append(section["title"])
        lines.append("-" * len(section["title"]))
        for item in section["items"]:
            pad = "  " * (item["indent"] + 1)
            mark = "! " if item["level"] == "warn" else ""
            lines.append(f"{pad}{mark}{item['text']}")
            if item.get("code"):
                lines.append(f"{pad}    {item['code']}")
        lines.append("")
    return "\n".join(lines).rstrip() + "\n"


def summary(rep: dict[str, Any]) -> str:
    """A few lines for the Doctor node: torch and the GPUs, what attention runs, the missing optional
    kernels, how many models each engine has, and where the full report is."""
    gpus = (rep.get("cuda") or {}).get("devices") or []
    lines = [f"torch {rep.get('torch', '?')} · " + (", ".join(gpus) if gpus else "CPU only (no CUDA GPU)")]
    accel = rep.get("acceleration", {})
    devices = accel.get("devices")
    if isinstance(devices, dict):
        lines.append(f"⚠ attention backends could not be probed: {devices.get('error')}")
    else:
        for device in devices or []:
            running = [name for name, found in device.get("backends", {}).items() if found.get("ok")]
            lines.append(f"attention on {device['device']}: " + (", ".join(running) or "nothing runs"))
    missing = [p for p, v in (accel.get("packages") or {}).items() if not v]
    if missing:
        lines.append("not installed (optional): " + ", ".join(missing))
    counts = []
    for engine_id, engine in rep.get("engines", {}).items():
        found = engine.get("models") if isinstance(engine.get("models"), dict) else {}
        n = len(found.get("installed") or [])
        counts.append(f"{engine_id} built-in" if engine.get("builtin_weights") and not n else f"{engine_id} {n}")
    if counts:
        lines.append("models installed: " + ", ".join(counts))
    lines.append(f"Full report: {MENU_PATH} in the menu")
    return "\n".join(lines)
