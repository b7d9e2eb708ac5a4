"""ComfyUI entry point of the Mizuoto node pack.

ComfyUI imports this folder as a package under whatever name the folder has. The library inside
is made importable as `mizuoto` (the only top-level name the pack adds); the nodes, engines and
tests folders never become top-level modules, because other packs and ComfyUI itself use the names
`nodes`, `engines`, `utils` and `tests`.
"""

import importlib.util
import logging
import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))


def _import_library():
    library = os.path.join(_HERE, "mizuoto")
    loaded = sys.modules.get("mizuoto")
    if loaded is None:
        # Loaded from this folder directly (not via sys.path), so adding the pack to sys.path, which
        # would expose `nodes` and `engines` to every other pack, is never needed.
        spec = importlib.util.spec_from_file_location(
            "mizuoto", os.path.join(library, "__init__.py"), submodule_search_locations=[library])
        module = importlib.util.module_from_spec(spec)
        sys.modules["mizuoto"] = module
        try:
            spec.loader.exec_module(module)
        except BaseException:
            del sys.modules["mizuoto"]
            raise
    elif os.path.dirname(os.path.abspath(loaded.__file__)) != library:
        logging.getLogger("mizuoto").warning(
            "Mizuoto: using the mizuoto library already imported from %s, not the one in %s",
            os.path.dirname(loaded.__file__), library)


_import_library()


def _start_host():
    # ComfyUI's start-up is the host start-up: apply compute.fast from the settings once. A bad
    # settings file must not keep the nodes from loading; the error shows again at the first load.
    from mizuoto.core.errors import MizuotoError
    from mizuoto.host import startup

    try:
        startup.start()
    except MizuotoError as exc:
        logging.getLogger("mizuoto").error("Mizuoto: %s", exc)



if __package__:
    _start_host()
    from .nodes import NODE_CLASS_MAPPINGS, NODE_DISPLAY_NAME_MAPPINGS
else:
    # Imported as a lone module rather than as a package: pytest does this with the repository
    # root (it holds this file) when the folder's name is not a Python identifier. There is no
    # package to import the nodes from then, and no host to give them to.
    NODE_CLASS_MAPPINGS, NODE_DISPLAY_NAME_MAPPINGS = {}, {}

WEB_DIRECTORY = "./web"

__all__ = ["NODE_CLASS_MAPPINGS", "NODE_DISPLAY_NAME_MAPPINGS", "WEB_DIRECTORY"]
