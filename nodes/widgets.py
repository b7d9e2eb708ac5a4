"""ComfyUI widget declarations generated from an engine's declaration."""

from __future__ import annotations

from mizuoto.core.settings import Option
from mizuoto.engines.spec import Param

_TYPES = {int: "INT", float: "FLOAT", str: "STRING", bool: "BOOLEAN"}


def param_widget(param: Param) -> tuple:
    if param.choices is not None:
        return ([str(c) for c in param.choices], {"default": str(param.default), "tooltip": param.help})
    opts = {"default": param.default, "tooltip": param.help}
    for key in ("min", "max", "step"):
        if getattr(param, key) is not None:
            opts[key] = getattr(param, key)
    return (_TYPES[param.kind], opts)


def option_widget(option: Option) -> tuple:
    # Load options reach the loader as setting strings and are parsed like any other setting.
    if option.choices is not None:
        return ([str(c) for c in option.choices], {"default": str(option.default), "tooltip": option.help})
    if option.kind is bool:
        return ("BOOLEAN", {"default": option.default, "tooltip": option.help})
    return ("STRING", {"default": str(option.default), "tooltip": option.help})
