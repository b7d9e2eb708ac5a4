"""Doctor: what Mizuoto sees of this machine (torch, GPUs, attention backends, engines and their models,
settings), as a node and as GET /mizuoto/doctor (JSON; `?format=readable` adds the titled sections the
front end's dialog shows, and the same as plain text)."""

from __future__ import annotations

import json

from .types import CATEGORY


def report_json() -> str:
    from mizuoto import doctor

    return json.dumps(doctor.report(), indent=2)


def readable_json() -> str:
    """The report with its readable forms: {"title", "sections", "text", "summary", "report"}."""
    from mizuoto import doctor, doctor_text

    rep = doctor.report()
    return json.dumps({"title": doctor_text.TITLE, "sections": doctor_text.sections(rep),
                       "text": doctor_text.readable(rep), "summary": doctor_text.summary(rep), "report": rep},
                      indent=2)


class MizuotoDoctor:
    DESCRIPTION = ("Checks this machine for Mizuoto: torch and GPUs, which attention backends run (with the "
                   "install command for each missing optional kernel), each engine's installed models and "
                   "their folder, and the settings in force. Its output is the report as JSON.")

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
        from mizuoto import doctor, doctor_text

        rep = doctor.report()
        text = json.dumps(rep, indent=2)
        # "text": the JSON (kept for older front ends); "summary": the lines web/mizuoto.js shows on the node.
        return {"ui": {"text": [text], "summary": [doctor_text.summary(rep)]}, "result": (text,)}


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

        build = readable_json if request.query.get("format") == "readable" else report_json
        # The probes run in a child process and take seconds: keep the server's loop free.
        text = await asyncio.get_running_loop().run_in_executor(None, build)
        return web.Response(text=text, content_type="application/json")

    return True
