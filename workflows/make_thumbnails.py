"""Draws the template browser's thumbnail for each example workflow: workflows/<name>.jpg beside <name>.json.

ComfyUI's template browser shows a custom node's template as its file name and the picture
GET /api/workflow_templates/<pack>/<name>.jpg, so each card here is the example's own title and its graph
(each node where the workflow places it, each link between them), nothing it does not hold.

    pip install pillow && python workflows/make_thumbnails.py

Run it again after changing an example's name or graph; tests/host/test_workflows.py checks that every
example has its thumbnail, a square JPEG under 30 KB.
"""

import json
import sys
import textwrap
from pathlib import Path

from PIL import Image, ImageDraw, ImageFont

HERE = Path(__file__).resolve().parent
SIZE = 512
BACKGROUND, PANEL, TEXT, MUTED = (22, 27, 34), (33, 40, 50), (236, 240, 244), (150, 160, 172)
ACCENT = (90, 170, 220)
LINK_COLOURS = {"AUDIO": (120, 200, 140), "MIZUOTO_MODEL": (200, 160, 90), "MIZUOTO_POLICY": (170, 130, 210),
                "STRING": (120, 170, 230)}
CORE_TITLES = {"LoadAudio": "Load Audio", "SaveAudio": "Save Audio", "PreviewAudio": "Preview Audio",
               "PreviewAny": "Preview Any"}


def font(size):
    return ImageFont.load_default(size=size)


def label(node_type: str) -> str:
    if node_type in CORE_TITLES:
        return CORE_TITLES[node_type]
    name = node_type.removeprefix("Mizuoto")
    for role in ("Loader", "Speak", "Transcribe", "Policy"):
        if name.endswith(role) and name != role:
            return f"{name[: -len(role)]} {role}"
    return name


def draw_card(workflow: Path) -> Image.Image:
    graph = json.loads(workflow.read_text())
    engine, _, description = workflow.stem.partition(" - ")
    image = Image.new("RGB", (SIZE, SIZE), BACKGROUND)
    draw = ImageDraw.Draw(image)
    # The newest frontend lays a "Node graph" badge over the top-left corner: the text starts below it.
    draw.text((SIZE - 28, 24), "MIZUOTO", font=font(16), fill=ACCENT, anchor="ra")
    draw.text((28, 64), engine, font=font(40), fill=TEXT)
    y = 116
    for line in textwrap.wrap(description, 34)[:3]:
        draw.text((28, y), line, font=font(22), fill=MUTED)
        y += 28

    # The graph, scaled into the panel below the text.
    top, margin = max(y + 16, 216), 28
    draw.rounded_rectangle((margin - 12, top - 12, SIZE - margin + 12, SIZE - 20), 14, fill=PANEL)
    nodes = {n["id"]: n for n in graph["nodes"]}
    x0 = min(n["pos"][0] for n in nodes.values())
    y0 = min(n["pos"][1] for n in nodes.values())
    x1 = max(n["pos"][0] + n["size"][0] for n in nodes.values())
    y1 = max(n["pos"][1] + n["size"][1] for n in nodes.values())
    scale = min((SIZE - 2 * margin) / (x1 - x0), (SIZE - 32 - top) / (y1 - y0))
    top += ((SIZE - 32 - top) - (y1 - y0) * scale) / 2  # centred in the panel

    def box(node):
        left = margin + (node["pos"][0] - x0) * scale
        upper = top + (node["pos"][1] - y0) * scale
        return left, upper, left + node["size"][0] * scale, upper + min(node["size"][1] * scale, 70)

    for _, origin, _, target, _, kind in graph["links"]:
        a, b = box(nodes[origin]), box(nodes[target])
        start, end = (a[2], (a[1] + a[3]) / 2), (b[0], (b[1] + b[3]) / 2)
        middle = (start[0] + end[0]) / 2
        draw.line([start, (middle, start[1]), (middle, end[1]), end], fill=LINK_COLOURS.get(kind, MUTED), width=3)
    for node in nodes.values():
        left, upper, right, lower = box(node)
        draw.rounded_rectangle((left, upper, right, lower), 6, fill=(52, 62, 76), outline=(90, 102, 118))
        words = textwrap.wrap(label(node["type"]), max(6, int((right - left) / 9)))[:2]
        for i, line in enumerate(words):
            draw.text((left + 6, upper + 6 + i * 17), line, font=font(15), fill=TEXT)
    return image


def main() -> int:
    for workflow in sorted(HERE.glob("*.json")):
        target = workflow.with_suffix(".jpg")
        draw_card(workflow).save(target, "JPEG", quality=80, optimize=True)
        print(f"{target.name}: {target.stat().st_size} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
