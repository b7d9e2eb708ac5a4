"""The pack's ComfyUI nodes (classic V1 classes: plain Python, testable without the host)."""

import os

from mizuoto import engines
from mizuoto.engines.spec import CONVERT, SPEAK, TRANSCRIBE
from mizuoto.host import comfy

from .doctor import MizuotoDoctor, register_route
from .engine_nodes import make_converter, make_loader, make_speaker, make_transcriber
from .policy import MizuotoAccelPolicy

comfy.register_model_folder()  # models/tts, when ComfyUI is the host
register_route()

NODE_CLASS_MAPPINGS = {"MizuotoAccelPolicy": MizuotoAccelPolicy, "MizuotoDoctor": MizuotoDoctor}
NODE_DISPLAY_NAME_MAPPINGS = {"MizuotoAccelPolicy": "Mizuoto Accel Policy", "MizuotoDoctor": "Mizuoto Doctor"}

# Per engine: its loader, and the node of what it does.
_ROLES = {SPEAK: (make_speaker, "Speak"), TRANSCRIBE: (make_transcriber, "Transcribe"),
          CONVERT: (make_converter, "Convert")}

for _spec in engines.all_engines().values():
    _make, _name = _ROLES[_spec.kind]
    for _cls, _role in ((make_loader(_spec), "Loader"), (_make(_spec), _name)):
        NODE_CLASS_MAPPINGS[_cls.__name__] = _cls
        NODE_DISPLAY_NAME_MAPPINGS[_cls.__name__] = f"Mizuoto {_spec.display_name} {_role}"

# In a wheel the front end is installed beside this package (mizuoto/web); a clone serves ./web
# through the top-level entry instead.
WEB_DIRECTORY = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "web")

__all__ = ["NODE_CLASS_MAPPINGS", "NODE_DISPLAY_NAME_MAPPINGS", "WEB_DIRECTORY"]
