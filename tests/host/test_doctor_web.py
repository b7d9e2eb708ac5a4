"""web/mizuoto.js under node, without a browser or a ComfyUI: the run summary's wording, the summary widget
inside Speak and Doctor nodes (read-only, never saved or sent), and how run events clear it.

The extension is copied into a temporary folder beside stub `scripts/app.js` and `scripts/api.js` (the
paths it imports), with a few lines of fake DOM. Skipped without node (`node` on PATH or NODE).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
NODE = os.environ.get("NODE") or shutil.which("node")
pytestmark = pytest.mark.skipif(not NODE, reason="node is not installed: the web extension's tests run it")

APP_STUB = """
export const app = { extensions: [], registerExtension(ext) { this.extensions.push(ext); } };
"""
API_STUB = """
export const api = {
  listeners: {},
  addEventListener(name, fn) { (this.listeners[name] ||= []).push(fn); },
  emit(name, detail) { for (const fn of this.listeners[name] || []) fn({ detail }); },
  async fetchApi() { throw new Error("no server in this test"); },
};
"""
# Just enough DOM for the summary widget: elements with children, text, style and data attributes.
FAKE_DOM = """
class El {
  constructor(tag) { this.tagName = tag; this.children = []; this.style = {}; this.dataset = {}; this.attrs = {};
                     this.textContent = ""; this.className = ""; }
  setAttribute(k, v) { this.attrs[k] = v; }
  appendChild(c) { this.children.push(c); return c; }
  append(...cs) { this.children.push(...cs); }
  replaceChildren(...cs) { this.children = cs; }
  addEventListener() {}
  get text() { return this.children.length ? this.children.map((c) => c.textContent).join("\\n") : this.textContent; }
}
globalThis.document = { createElement: (tag) => new El(tag), getElementById: () => null,
                        head: new El("head"), body: new El("body") };
"""


def run_js(tmp_path: Path, body: str):
    """Run `body` (an async function body with `ext`, `api`, `m` -- the extension module -- in scope) and
    return what it passes to `done(value)` as JSON."""
    (tmp_path / "scripts").mkdir(exist_ok=True)
    (tmp_path / "scripts" / "app.js").write_text(APP_STUB)
    (tmp_path / "scripts" / "api.js").write_text(API_STUB)
    ext_dir = tmp_path / "extensions" / "mizuoto"
    ext_dir.mkdir(parents=True, exist_ok=True)
    shutil.copy(REPO / "web" / "mizuoto.js", ext_dir / "mizuoto.js")
    (tmp_path / "package.json").write_text('{"type": "module"}')
    script = tmp_path / "run.mjs"
    script.write_text(FAKE_DOM + """
const { app } = await import("./scripts/app.js");
const { api } = await import("./scripts/api.js");
const m = await import("./extensions/mizuoto/mizuoto.js");
const ext = app.extensions[0];
const done = (value) => console.log("RESULT " + JSON.stringify(value));
""" + body)
    result = subprocess.run([NODE, str(script)], capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert result.returncode == 0, f"node failed:\n{result.stderr}\n{result.stdout}"
    (line,) = [x for x in result.stdout.splitlines() if x.startswith("RESULT ")]
    return json.loads(line.removeprefix("RESULT "))


# A real dummy run's report (python -m mizuoto say ... --engine dummy), trimmed.
REPORT = {"engine": "dummy", "device": "cpu", "dtype": "float32", "seed": 7, "attention": {"policy": "auto"},
          "audio_seconds": 2.08, "wall_seconds": 1.3422, "real_time_factor": 0.6453, "warnings": []}


def summary_of(tmp_path, report):
    return run_js(tmp_path, f"done(m.runSummary({json.dumps(report)}));")


def test_summary_reads_like_a_sentence(tmp_path):
    lines = summary_of(tmp_path, REPORT)
    assert [line["text"] for line in lines] == [
        "2.1 s of audio in 1.3 s (1.5x real time) · cpu · exact attention",
        "Faster than real time: 1 s of audio took 0.65 s to make.",
        "dummy · float32 · seed 7",
    ]


def test_summary_of_the_issues_example_is_slower_than_real_time(tmp_path):
    report = dict(REPORT, audio_seconds=3.4, wall_seconds=5.8, real_time_factor=1.7059)
    lines = [line["text"] for line in summary_of(tmp_path, report)]
    assert lines[0] == "3.4 s of audio in 5.8 s (0.6x real time) · cpu · exact attention"
    assert lines[1] == "Slower than real time: 1 s of audio took 1.7 s to make."
    assert not any("RTF" in line or "reference" in line for line in lines)


def test_summary_names_the_kernel_policy_and_fallbacks(tmp_path):
    report = dict(REPORT, device="cuda:0", dtype="bfloat16",
                  attention={"policy": "fast", "used": {"sdpa_flash": 60},
                             "fallbacks": {"flash->math": {"mask": 3}}},
                  warnings=["attention fell back flash->math", "text was cut at 1022 bytes"])
    lines = summary_of(tmp_path, report)
    texts = [line["text"] for line in lines]
    assert texts[0].endswith("· cuda:0 · sdpa_flash attention")
    assert texts[2] == "dummy · bfloat16 · seed 7 · policy fast"
    assert {"text": "⚠ text was cut at 1022 bytes", "level": "warn"} in lines
    assert {"text": "⚠ attention fell back flash->math: mask ×3", "level": "warn"} in lines
    assert sum("fell back" in t for t in texts) == 1  # the warning is not repeated as it is
    two = dict(REPORT, attention={"policy": "fast", "used": {"cpu_flash": 80, "math": 4}})
    assert summary_of(tmp_path, two)[0]["text"].endswith("· attention cpu_flash ×80, math ×4")


def test_numbers_for_people(tmp_path):
    got = run_js(tmp_path, """done([m.seconds(0.4567), m.seconds(3.456), m.seconds(123.4), m.seconds("x"),
                                   m.speed(3.4, 5.8), m.speed(30, 2), m.speed(0.1, 5), m.speed(1, 0)]);""")
    assert got == ["0.46", "3.5", "123", "?", "0.6x", "15x", "0.02x", None]


NODE_LIFE = """
const nodes = [];
function NodeType() {}
NodeType.prototype.setDirtyCanvas = function () {};
NodeType.prototype.computeSize = function () { return [300, 40 + (this.widgets || []).reduce(
  (h, w) => h + w.options.getMinHeight(), 0)]; };
NodeType.prototype.setSize = function (size) { this.size = size; };
NodeType.prototype.addDOMWidget = function (name, type, element, options) {
  const widget = { name, type, element, options, get value() { return options.getValue(); } };
  (this.widgets ||= []).push(widget);
  return widget;
};
async function make(name, id) {
  const type = function () {};
  type.prototype = Object.create(NodeType.prototype);
  await ext.beforeRegisterNodeDef(type, { name });
  const node = new type();
  node.id = id; node.size = [200, 60];
  node.onNodeCreated?.();
  return node;
}
await ext.setup();
const speak = await make("MizuotoDummySpeak", 3);
const other = await make("MizuotoVoxCPMSpeak", 5);
const doctor = await make("MizuotoDoctor", 9);
const loader = await make("MizuotoDummyLoader", 2);
const converter = await make("MizuotoSeedVCConvert", 11);
const text = (node) => node.mizuotoSummary.el.text;
const out = {};
const w = speak.widgets[0];
out.widget = { name: w.name, serialize: w.serialize, optionSerialize: w.options.serialize, value: w.value,
               empty: text(speak), state: speak.mizuotoSummary.el.dataset.state };
out.loaderWidgets = (loader.widgets || []).length;
out.doctorWidth = doctor.size[0];
const report = JSON.stringify({engine: "dummy", device: "cpu", dtype: "float32", seed: 7, attention: {policy: "auto"},
                               audio_seconds: 2.08, wall_seconds: 1.3422, real_time_factor: 0.6453, warnings: []});
out.convertEmpty = text(converter);
speak.onExecuted({ report: [report] });
other.onExecuted({ report: [report] });
converter.onExecuted({ report: [report] });
out.convertAfterRun = text(converter);
out.afterRun = text(speak);
out.value = w.value;
out.grown = speak.size[1] >= speak.computeSize()[1];
api.emit("execution_start", { prompt_id: "p2" });
out.afterStart = [text(speak), speak.mizuotoSummary.el.dataset.state];
api.emit("execution_cached", { nodes: ["2", "5"], prompt_id: "p2" });
out.cachedOther = text(other);
api.emit("executing", "3");
out.running = text(speak);
api.emit("executing", "11");
out.converting = text(converter);
api.emit("execution_error", { node_id: "3", exception_message: "text is empty; give some words to speak\\n" });
out.failed = text(speak);
out.failedLevel = speak.mizuotoSummary.state.lines[0].level;
out.otherAfterFail = text(other);
api.emit("execution_start", { prompt_id: "p3" });
api.emit("executing", "5");
api.emit("execution_interrupted", { node_id: "5" });
out.stopped = text(other);
out.speakAfterSecondStart = speak.mizuotoSummary.el.dataset.state;
doctor.onExecuted({ text: ["{}"],
                    summary: ["torch 2.13 · CPU only (no CUDA GPU)\\n"
                              + "Full report: Mizuoto → Mizuoto Doctor in the menu"] });
out.doctor = text(doctor);
speak.onExecuted({ report: ["not json"] });
out.broken = text(speak);
speak.onExecuted({});
out.noReport = speak.mizuotoSummary.el.dataset.state;
done(out);
"""


def test_summary_widget_lives_inside_the_node_and_run_events_clear_it(tmp_path):
    out = run_js(tmp_path, NODE_LIFE)
    assert out["widget"] == {"name": "mizuoto_summary", "serialize": False, "optionSerialize": False, "value": "",
                             "empty": "Run the workflow: how long speaking took shows here.", "state": "empty"}
    assert out["loaderWidgets"] == 0  # only Speak, Convert and Doctor nodes get one
    assert out["doctorWidth"] >= 420  # the Doctor's title and lines fit
    assert out["afterRun"].startswith("2.1 s of audio in 1.3 s (1.5x real time) · cpu · exact attention\n")
    assert out["value"] == out["afterRun"] and out["grown"]
    # a run starts: the old text goes; a cached node gets its own back (its output is unchanged)
    assert out["afterStart"] == ["Run the workflow: how long speaking took shows here.", "empty"]
    assert out["cachedOther"] == out["afterRun"]
    assert out["running"] == "Speaking…"
    # a Convert node returns audio with the same run report: the same summary, its own words while it runs
    assert out["convertEmpty"] == "Run the workflow: how long converting took shows here."
    assert out["convertAfterRun"] == out["afterRun"] and out["converting"] == "Converting…"
    assert out["failed"] == "Failed: text is empty; give some words to speak" and out["failedLevel"] == "error"
    assert out["otherAfterFail"] == out["afterRun"]  # the cached node's text is still its output's
    assert out["stopped"] == "Stopped before it finished."
    assert out["speakAfterSecondStart"] == "empty"  # the failure's text went when the next run started
    assert out["doctor"] == "torch 2.13 · CPU only (no CUDA GPU)\nFull report: Mizuoto → Mizuoto Doctor in the menu"
    assert out["broken"] == "The run report could not be read."
    assert out["noReport"] == "empty"


def test_doctor_command_is_registered_for_the_menu(tmp_path):
    out = run_js(tmp_path, "done({commands: ext.commands.map((c) => [c.id, c.label, typeof c.function]),"
                           " menu: ext.menuCommands});")
    assert out["commands"] == [["mizuoto.doctor", "Mizuoto Doctor", "function"]]
    assert out["menu"] == [{"path": ["Mizuoto"], "commands": ["mizuoto.doctor"]}]
