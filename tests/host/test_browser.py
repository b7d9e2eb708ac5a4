"""The web extension in a real browser on a real ComfyUI (PLATFORM.md §9.11): a dummy Speak run's summary
is drawn inside the node, in words, and is replaced by the failure when a run fails; the Doctor node's
title fits and it shows its summary; the Doctor command opens a dialog with a title, a Close button and
the models section. Run for the frontend the host pins, and for another one (the newest) in classic and
in Vue-nodes ("Nodes 2.0") mode when that frontend has the setting.

    COMFYUI_DIR=/path/to/ComfyUI COMFYUI_PYTHON=/path/to/its/python \\
    COMFYUI_FRONTEND_ROOT=/path/to/comfyui_frontend_package/static \\
    MIZUOTO_SHOTS=/tmp/shots pytest tests/host/test_browser.py

Needs COMFYUI_DIR (skipped without it) and a Chromium or Chrome (CHROMIUM, else `chromium`,
`chromium-browser`, `google-chrome` on PATH; skipped without one). COMFYUI_FRONTEND_ROOT is optional
(`pip download --no-deps comfyui-frontend-package` and unzip the wheel; its frontend runs with
--front-end-root); without it those cases are skipped. The browser is driven over the Chrome DevTools
Protocol with the standard library only. Screenshots (PNG) go to MIZUOTO_SHOTS, else to the test's
temporary folder.
"""

from __future__ import annotations

import base64
import json
import os
import re
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
from local_server import WebSocket, free_port, stop

COMFYUI_DIR = os.environ.get("COMFYUI_DIR")
if not COMFYUI_DIR:
    pytest.skip("COMFYUI_DIR is not set: point it at a ComfyUI checkout (and COMFYUI_PYTHON at an interpreter "
                "that runs it) to test the web extension in a browser", allow_module_level=True)
BROWSER = os.environ.get("CHROMIUM") or next(
    (found for name in ("chromium", "chromium-browser", "google-chrome", "chrome") if (found := shutil.which(name))),
    None)
if not BROWSER:
    pytest.skip("no Chromium or Chrome found (set CHROMIUM, or install one, e.g. apt-get install chromium)",
                allow_module_level=True)

pytestmark = pytest.mark.slow
SHOTS = os.environ.get("MIZUOTO_SHOTS")  # read now: tests/conftest.py clears MIZUOTO_* for each test

REPO = Path(__file__).resolve().parents[2]
PACK = "ComfyUI-Mizuoto"
TINY_VOXCPM = REPO / "tests" / "parity" / "data" / "voxcpm" / "e2e" / "v2"
START_TIMEOUT = 120.0
RUN_TIMEOUT = 120.0
DOCTOR_TIMEOUT = 120.0  # the doctor probes the attention backends in a child process
SUMMARY = re.compile(r"^\d+(\.\d+)? s of audio in \d+(\.\d+)? s \(\d+(\.\d+)?x real time\) · cpu · exact attention$")


# -- a minimal Chrome DevTools Protocol client --------------------------------------------------------------

class CDP:
    def __init__(self, ws_url: str, timeout: float = 30.0):
        host, rest = ws_url.removeprefix("ws://").split("/", 1)
        hostname, port = host.split(":")
        self.ws = WebSocket(hostname, int(port), f"/{rest}", timeout)
        self.next_id = 0
        self.console: list[str] = []

    def _send_frame(self, payload: bytes) -> None:
        self.ws.send(payload)

    def _message(self) -> dict:
        return json.loads(self.ws.receive()[1])

    def call(self, method: str, timeout: float = 60.0, **params):
        self.next_id += 1
        my_id = self.next_id
        self._send_frame(json.dumps({"id": my_id, "method": method, "params": params}).encode())
        self.ws.settimeout(timeout)
        while True:
            message = self._message()
            if message.get("method") == "Runtime.consoleAPICalled":
                args = message["params"].get("args", [])
                self.console.append(" ".join(str(a.get("value", a.get("description", ""))) for a in args))
            elif message.get("method") == "Page.javascriptDialogOpening":
                # "Leave site?" when the page is replaced: accept it (the answer is not waited for).
                self.next_id += 1
                self._send_frame(json.dumps({"id": self.next_id, "method": "Page.handleJavaScriptDialog",
                                             "params": {"accept": True}}).encode())
            elif message.get("method") == "Runtime.exceptionThrown":
                self.console.append("exception: " + json.dumps(message["params"].get("exceptionDetails", {}))[:500])
            if message.get("id") == my_id:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                return message.get("result", {})

    def js(self, expression: str, timeout: float = 60.0):
        """Evaluate an expression (a promise is awaited) and return its value as JSON."""
        result = self.call("Runtime.evaluate", timeout=timeout, expression=expression, awaitPromise=True,
                           returnByValue=True)
        if "exceptionDetails" in result:
            details = result["exceptionDetails"]
            raise AssertionError(f"page script failed: {details.get('exception', {}).get('description', details)}")
        return result.get("result", {}).get("value")

    def wait(self, expression: str, timeout: float, what: str):
        deadline = time.monotonic() + timeout
        while True:
            value = self.js(expression)
            if value:
                return value
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}; console: "
                                     f"{self.console[-15:]}")
            time.sleep(0.25)

    def screenshot(self, path: Path) -> Path:
        data = self.call("Page.captureScreenshot", format="png")["data"]
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(base64.b64decode(data))
        return path

    def click(self, x: float, y: float) -> None:
        for kind in ("mouseMoved", "mousePressed", "mouseReleased"):
            self.call("Input.dispatchMouseEvent", type=kind, x=x, y=y, button="left", clickCount=1)

    def close(self) -> None:
        self.ws.close()


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    profile = tmp_path_factory.mktemp("chromium")
    log = open(profile / "chromium.log", "wb+")
    proc = subprocess.Popen([BROWSER, "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                             "--remote-debugging-port=0", "--remote-allow-origins=*", f"--user-data-dir={profile}",
                             "--no-first-run", "--no-default-browser-check", "--window-size=1500,950",
                             "about:blank"], stdout=log, stderr=log, stdin=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        port = None
        while port is None:
            log.seek(0)
            found = re.search(rb"DevTools listening on ws://127\.0\.0\.1:(\d+)/", log.read())
            if found:
                port = int(found.group(1))
            elif proc.poll() is not None or time.monotonic() > deadline:
                log.seek(0)
                pytest.fail(f"{BROWSER} did not start: {log.read()[-2000:].decode(errors='replace')}", pytrace=False)
            else:
                time.sleep(0.2)
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=10) as resp:
            targets = json.loads(resp.read())
        page = next(t for t in targets if t.get("type") == "page")
        cdp = CDP(page["webSocketDebuggerUrl"])
        cdp.call("Page.enable")
        cdp.call("Runtime.enable")
        cdp.call("Emulation.setDeviceMetricsOverride", width=1500, height=950, deviceScaleFactor=1, mobile=False)
        yield cdp
        cdp.close()
    finally:
        stop(proc)
        log.close()


class Host:
    def __init__(self, url: str, proc: subprocess.Popen, log: Path, frontend: str):
        self.url, self.proc, self.log, self.frontend = url, proc, log, frontend

    def post(self, path: str, data) -> None:
        req = urllib.request.Request(self.url + path, data=json.dumps(data).encode(), method="POST",
                                     headers={"Content-Type": "application/json"})
        urllib.request.urlopen(req, timeout=30).read()

    def tail(self) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-60:])


def frontend_roots() -> list:
    newest = os.environ.get("COMFYUI_FRONTEND_ROOT")
    return ["pinned", pytest.param("newest", marks=pytest.mark.skipif(
        not newest, reason="COMFYUI_FRONTEND_ROOT is not set: point it at the static/ folder of another "
                           "comfyui-frontend-package (e.g. the newest from PyPI) to test that frontend too"))]


@pytest.fixture(scope="module", params=frontend_roots())
def host(request, tmp_path_factory):
    comfy_dir = Path(COMFYUI_DIR).resolve()
    python = os.environ.get("COMFYUI_PYTHON") or sys.executable
    cli = (comfy_dir / "comfy" / "cli_args.py").read_text(errors="replace")
    if "--base-directory" not in cli:
        pytest.skip("this ComfyUI has no --base-directory; the browser test needs one")
    base = tmp_path_factory.mktemp(f"comfyui-{request.param}")
    (base / "custom_nodes").mkdir()
    (base / "custom_nodes" / PACK).symlink_to(REPO, target_is_directory=True)
    if TINY_VOXCPM.is_dir():  # an installed model for the Doctor to list
        shutil.copytree(TINY_VOXCPM, base / "models" / "tts" / "voxcpm" / "tiny_v2")
    port = free_port()
    args = [python, str(comfy_dir / "main.py"), "--cpu", "--listen", "127.0.0.1", "--port", str(port),
            "--disable-auto-launch", "--base-directory", str(base)]
    if "--database-url" in cli:
        args += ["--database-url", f"sqlite:///{base / 'comfyui.db'}"]
    frontend = "pinned by the host"
    if request.param == "newest":
        root = Path(os.environ["COMFYUI_FRONTEND_ROOT"]).resolve()
        if not (root / "index.html").is_file():
            pytest.fail(f"COMFYUI_FRONTEND_ROOT={root} has no index.html", pytrace=False)
        args += ["--front-end-root", str(root)]
        frontend = str(root)
    env = {k: v for k, v in os.environ.items() if not k.startswith("MIZUOTO_")}
    env.update(XDG_CONFIG_HOME=str(base / "config"), PYTHONUNBUFFERED="1", PYTHONDONTWRITEBYTECODE="1")
    log = base / "comfyui.log"
    with open(log, "wb") as log_file:
        proc = subprocess.Popen(args, cwd=base, env=env, stdout=log_file, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)
    server = Host(f"http://127.0.0.1:{port}", proc, log, frontend)
    try:
        deadline = time.monotonic() + START_TIMEOUT
        while True:
            if proc.poll() is not None:
                pytest.fail(f"ComfyUI exited ({proc.returncode}) during start-up:\n{server.tail()}", pytrace=False)
            try:
                urllib.request.urlopen(server.url + "/system_stats", timeout=5).read()
                break
            except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
                if time.monotonic() > deadline:
                    pytest.fail(f"ComfyUI did not answer within {START_TIMEOUT:.0f} s:\n{server.tail()}", pytrace=False)
                time.sleep(0.5)
        server.name = request.param
        yield server
    finally:
        stop(proc)


@pytest.fixture
def shots(tmp_path) -> Path:
    return Path(SHOTS or tmp_path)


APP_READY = ("!!(window.app && window.app.graph && window.LiteGraph && window.app.canvas"
             " && window.LiteGraph.registered_node_types"
             " && window.LiteGraph.registered_node_types['MizuotoDummySpeak'])")


def open_page(browser: CDP, host: Host, vue: bool) -> None:
    # Settings before the page loads: no first-run template browser, and the node renderer asked for.
    host.post("/settings/Comfy.TutorialCompleted", True)
    host.post("/settings/Comfy.VueNodes.Enabled", vue)
    browser.call("Page.navigate", url=host.url + "/")
    browser.wait(APP_READY, 90, f"the ComfyUI page ({host.frontend}) with the Mizuoto nodes registered")
    if vue:
        known = browser.js("(() => { try { return window.app.extensionManager.setting.get('Comfy.VueNodes.Enabled'); }"
                           " catch (e) { return null; } })()")
        if known is None:
            pytest.skip("this frontend has no Vue-nodes setting (Comfy.VueNodes.Enabled)")
        assert known is True
    time.sleep(1.0)  # let the first workflow's load finish before replacing it
    browser.js("document.querySelectorAll('.p-dialog-mask .p-dialog-close-button, .p-dialog-header-close')"
               ".forEach((b) => b.click())")


BUILD = """(async () => {
  const app = window.app, LG = window.LiteGraph;
  app.graph.clear();
  const make = (type, x, y) => { const n = LG.createNode(type); n.pos = [x, y]; app.graph.add(n); return n; };
  const loader = make("MizuotoDummyLoader", 20, 60);
  const speak = make("MizuotoDummySpeak", 480, 60);
  loader.connect(0, speak, 0);
  const doctor = make("MizuotoDoctor", 20, 330);
  speak.widgets.find((w) => w.name === "text").value = "Hello from the browser test.";
  app.canvas.ds.scale = 1; app.canvas.ds.offset = [70, 40];  // clear of the side bar, at the default zoom
  app.graph.setDirtyCanvas(true, true);
  await new Promise((r) => setTimeout(r, 500));
  // Under the Speak node, where the old summary was drawn (Vue nodes may be taller than size says).
  const preview = make("PreviewAudio", 480, speak.pos[1] + speak.size[1] + 90);
  speak.connect(0, preview, 0);
  window.__mizuoto = { speak, doctor, preview };
  return { speak: speak.id, doctor: doctor.id, preview: preview.id };
})()"""

QUEUE = """(async () => {
  const app = window.app;
  if (typeof app.queuePrompt === "function") { await app.queuePrompt(0, 1); return "app.queuePrompt"; }
  await app.extensionManager.command.execute("Comfy.QueuePrompt"); return "command";
})()"""

# Where a node's summary is: its text, its box, the node's box on screen, what is at its centre.
WHERE = """((name) => {
  const node = window.__mizuoto[name], s = node.mizuotoSummary, app = window.app;
  const r = s.el.getBoundingClientRect();
  let box;
  const vueEl = document.querySelector(`[data-node-id="${node.id}"]`);
  if (vueEl && vueEl.contains(s.el)) {
    const b = vueEl.getBoundingClientRect(); box = [b.left, b.top, b.right, b.bottom];
  } else {
    const c = app.canvas.canvas.getBoundingClientRect(), ds = app.canvas.ds, title = window.LiteGraph.NODE_TITLE_HEIGHT;
    const x = c.left + (node.pos[0] + ds.offset[0]) * ds.scale, y = c.top + (node.pos[1] + ds.offset[1]) * ds.scale;
    box = [x, y - title * ds.scale, x + node.size[0] * ds.scale, y + node.size[1] * ds.scale];
  }
  const hit = document.elementFromPoint(r.left + r.width / 2, r.top + Math.min(10, r.height / 2));
  const line = s.el.firstElementChild?.getBoundingClientRect();
  return { text: s.el.innerText, state: s.el.dataset.state, rect: [r.left, r.top, r.right, r.bottom], node: box,
           vue: !!(vueEl && vueEl.contains(s.el)), visible: r.width > 0 && r.height > 0 && !!s.el.offsetParent,
           onTop: !!hit && s.el.contains(hit), lineHeight: line ? line.height : 0,
           fontSize: parseFloat(getComputedStyle(s.el.firstElementChild || s.el).fontSize)
             * (app.canvas.ds.scale || 1) };
})"""

TITLE_FITS = """(() => {
  const node = window.__mizuoto.doctor, LG = window.LiteGraph;
  const vueEl = document.querySelector(`[data-node-id="${node.id}"]`);
  if (vueEl && vueEl.offsetParent) {
    const el = [...vueEl.querySelectorAll("*")]
      .find((e) => e.childElementCount === 0 && e.textContent.trim() === node.title);
    return { title: node.title, fits: !!el && el.scrollWidth <= el.clientWidth + 1, mode: "vue" };
  }
  const ctx = document.createElement("canvas").getContext("2d");
  ctx.font = node.titleFontStyle || `${LG.NODE_TEXT_SIZE}px Arial`;
  const needed = ctx.measureText(node.title).width + LG.NODE_TITLE_HEIGHT + 10;
  return { title: node.title, fits: node.size[0] >= needed, width: node.size[0], needed, mode: "canvas" };
})()"""


def inside(inner, outer, slack: float = 2.0) -> bool:
    return (inner[0] >= outer[0] - slack and inner[1] >= outer[1] - slack and inner[2] <= outer[2] + slack
            and inner[3] <= outer[3] + slack)


CASES = [("classic", False), ("vue", True)]


@pytest.mark.parametrize("mode, vue", CASES, ids=[c[0] for c in CASES])
def test_run_summary_inside_the_node_and_the_doctor_dialog(browser, host, shots, mode, vue):
    if vue and host.name == "pinned":
        pytest.skip("Vue nodes are checked on the newest frontend (the pinned one has them only as an experiment)")
    label = f"{host.name}-{mode}"
    open_page(browser, host, vue)
    browser.js(BUILD)
    before = browser.js(WHERE + "('speak')")
    assert before["state"] == "empty" and "Run the workflow" in before["text"], before

    browser.js(QUEUE)
    browser.wait("(() => { const t = window.__mizuoto.speak.mizuotoSummary.el.innerText;"
                 " return / s of audio in /.test(t) && t; })()", RUN_TIMEOUT, f"the run summary ({label})")
    browser.wait("window.__mizuoto.doctor.mizuotoSummary.el.innerText.startsWith('torch ')", DOCTOR_TIMEOUT,
                 f"the Doctor node's summary ({label})")
    time.sleep(0.5)
    where = browser.js(WHERE + "('speak')")
    shot = browser.screenshot(shots / f"{label}-summary.png")
    lines = where["text"].splitlines()
    assert SUMMARY.match(lines[0]), (lines, shot)
    assert re.match(r"^(Faster|Slower) than real time: 1 s of audio took [\d.]+ s to make\.$|^About real time",
                    lines[1]), lines
    assert where["visible"] and where["onTop"], (where, shot)  # nothing covers it
    assert inside(where["rect"], where["node"]), (where, shot)  # drawn inside the node
    assert where["vue"] == vue, where
    assert where["fontSize"] >= 12 and where["lineHeight"] >= 14, where  # readable at the default zoom

    doctor_node = browser.js(WHERE + "('doctor')")
    assert doctor_node["text"].startswith("torch ") and "models installed:" in doctor_node["text"], doctor_node
    assert inside(doctor_node["rect"], doctor_node["node"]), doctor_node
    title = browser.js(TITLE_FITS)
    assert title["fits"], title

    # The Doctor command: a dialog with a title, a close button and the models section.
    browser.js("window.app.extensionManager.command.execute('mizuoto.doctor')")
    browser.wait("document.querySelector('dialog.mizuoto-doctor')?.dataset.state", DOCTOR_TIMEOUT,
                 f"the Doctor dialog ({label})")
    dialog = browser.js("""(() => {
      const d = document.querySelector('dialog.mizuoto-doctor'), x = d.querySelector('header button[aria-label=Close]');
      const r = x.getBoundingClientRect(), dr = d.getBoundingClientRect();
      return { state: d.dataset.state, open: d.open, title: d.querySelector('h2').innerText,
               sections: [...d.querySelectorAll('h3')].map((h) => h.innerText), text: d.innerText,
               close: [r.left + r.width / 2, r.top + r.height / 2], closeVisible: r.width > 0,
               footer: [...d.querySelectorAll('footer button')].map((b) => b.innerText), box: [dr.width, dr.height] };
    })()""")
    browser.screenshot(shots / f"{label}-doctor.png")
    assert dialog["state"] == "report" and dialog["open"], dialog
    assert dialog["title"].startswith("Mizuoto Doctor"), dialog["title"]
    assert dialog["sections"] == ["What runs here", "Engines and their models", "Settings in force"], dialog
    assert dialog["closeVisible"] and "Close" in dialog["footer"], dialog
    assert "Attention on cpu:" in dialog["text"] and "Dummy (dummy)" in dialog["text"]
    assert "built-in weights: nothing to install" in dialog["text"]
    assert "put models in:" in dialog["text"] and "models/tts/voxcpm" in dialog["text"], dialog["text"]
    if TINY_VOXCPM.is_dir():
        assert "installed: voxcpm/tiny_v2" in dialog["text"], dialog["text"]
    assert "{" not in dialog["text"], "the dialog shows JSON"
    browser.click(*dialog["close"])
    browser.wait("!document.querySelector('dialog.mizuoto-doctor')", 10, "the dialog to close")

    # A failed run: the old summary goes, the node says why.
    browser.js("window.__mizuoto.speak.widgets.find((w) => w.name === 'text').value = '   '")
    browser.js(QUEUE)
    failed = browser.wait("(() => { const t = window.__mizuoto.speak.mizuotoSummary.el.innerText;"
                          " return t.startsWith('Failed:') && t; })()", RUN_TIMEOUT, f"the failure ({label})")
    assert failed == "Failed: text is empty; give some words to speak", failed
    time.sleep(0.5)  # ComfyUI's own error dialog opens too: close it for the picture
    browser.js("document.querySelectorAll('.p-dialog-close-button, .p-dialog-header-close').forEach((b) => b.click())")
    time.sleep(0.5)
    browser.screenshot(shots / f"{label}-failed.png")


EXAMPLES = sorted(p.stem for p in (REPO / "workflows").glob("*.json"))

# The template browser's entry for the pack (its folder name), clicked wherever this frontend shows it.
OPEN_PACK = """((pack) => {
  const leaves = [...document.querySelectorAll('.p-dialog *, [role=dialog] *')]
    .filter((e) => e.offsetParent && e.textContent.trim() === pack);
  const target = leaves.find((e) => e.childElementCount === 0) || leaves[0];
  if (!target) return false;
  (target.closest('[role=option], li, button, a') || target).click();
  return true;
})"""

# Each example's card: its title on the page, and the thumbnails shown (the frontend fetches each
# <name>.jpg and shows it from a blob: URL; ours are 512 x 512, which the host's own thumbnails are not).
CARDS = """((names) => {
  const text = document.body.innerText;
  const shown = [...document.querySelectorAll('.p-dialog img, [role=dialog] img')]
    .filter((i) => i.complete && i.naturalWidth === 512 && i.naturalHeight === 512);
  return { titles: names.filter((n) => text.includes(n)), thumbnails: shown.length };
})"""


def test_the_template_browser_lists_every_example_with_title_and_thumbnail(browser, host, shots):
    """Point 6: ComfyUI lists workflows/*.json as the pack's templates; the browser shows each under its file
    name (the title, which carries the one-line description) with the .jpg beside it as its thumbnail."""
    listed = json.loads(urllib.request.urlopen(host.url + "/api/workflow_templates", timeout=10).read())
    assert sorted(listed.get(PACK, [])) == EXAMPLES, listed
    open_page(browser, host, False)
    browser.js("window.app.extensionManager.command.execute('Comfy.BrowseTemplates')")
    browser.wait(f"({OPEN_PACK})({json.dumps(PACK)})", 30, f"the pack's entry in the template browser ({host.name})")
    time.sleep(1.0)
    browser.screenshot(shots / f"{host.name}-templates.png")
    # every card's title and thumbnail, scrolled through (cards below the fold may be rendered, and their
    # images loaded, only once they come into view)
    seen_titles, most_thumbnails = set(), 0
    for _ in range(8):
        cards = browser.js(f"({CARDS})({json.dumps(EXAMPLES)})")
        seen_titles.update(cards["titles"])
        most_thumbnails = max(most_thumbnails, cards["thumbnails"])
        if len(seen_titles) == len(EXAMPLES) and most_thumbnails >= len(EXAMPLES):
            break
        browser.js("document.querySelectorAll('.p-dialog *, [role=dialog] *').forEach((e) => {"
                   " if (e.scrollHeight > e.clientHeight + 4) e.scrollTop += 400; })")
        time.sleep(0.75)
    assert sorted(seen_titles) == EXAMPLES, (seen_titles, cards)
    assert most_thumbnails >= 3, cards  # at least the first row's, as loaded pictures
    for name in EXAMPLES:  # and each one is served where the browser asks for it
        url = f"{host.url}/api/workflow_templates/{urllib.parse.quote(PACK)}/{urllib.parse.quote(name)}.jpg"
        with urllib.request.urlopen(url, timeout=10) as response:
            assert response.read(3) == b"\xff\xd8\xff", name
