"""Doctor: what Mizuoto sees of this machine (torch, GPUs, attention backends, settings), as a node
and as GET /mizuoto/doctor."""

from __future__ import annotations

import json

from .types import CATEGORY


def report_json() -> str:
    from mizuoto import doctor

    return json.dumps(doctor.report(), indent=2)


class MizuotoDoctor:
    DESCRIPTION = "Shows the doctor report: torch, GPUs, which attention backends run, settings, install commands."

    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {}}

    RETURN_TYPES = ("STRING",)
    RETURN_NAMES = ("report",)
    FUNCTION = "examine"
    CATEGORY = CATEGORY
    OUTPUT_NODE = True

    @classmethod
    def IS_CHANGED(cls):
        return float("nan")  # the machine may have changed: always run

    def examine(self):
        text = report_json()
        return {"ui": {"text": [text]}, "result": (text,)}


def register_route() -> bool:
    """GET /mizuoto/doctor on ComfyUI's server, when the server exists (it does before packs load)."""
    try:
        from server import PromptServer
    except ImportError:
        return False
    instance = getattr(PromptServer, "instance", None)
    if instance is None:
        return False
    from aiohttp import web

    @instance.routes.get("/mizuoto/doctor")
    async def doctor_route(request):
        import asyncio

        # The probes run in a child process and take seconds: keep the server's loop free.
        text = await asyncio.get_running_loop().run_in_executor(None, report_json)
        return web.Response(text=text, content_type="application/json")

    return True
