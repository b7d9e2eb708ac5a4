"""End to end in a real ComfyUI server (PLATFORM.md §9.11): the pack loads, a workflow speaks and saves
FLAC, the loader's output is cached across prompts, and Cancel stops a long generation.

Needs a ComfyUI checkout and an interpreter that can run it (torch, torchvision, torchaudio and
ComfyUI's requirements):

    COMFYUI_DIR=/path/to/ComfyUI COMFYUI_PYTHON=/path/to/its/python pytest tests/host/test_comfyui_real.py

Skipped without COMFYUI_DIR. COMFYUI_PYTHON defaults to the interpreter running the tests. The server
runs with `--cpu` from a temporary base directory (`--base-directory`) whose custom_nodes/ holds a
link to this checkout, so the ComfyUI checkout itself is left untouched. HTTP with urllib only.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path

import pytest
from local_server import WebSocket, free_port, stop

COMFYUI_DIR = os.environ.get("COMFYUI_DIR")
if not COMFYUI_DIR:
    pytest.skip("COMFYUI_DIR is not set: point it at a ComfyUI checkout (and COMFYUI_PYTHON at an interpreter "
                "that runs it) to test the pack inside a real ComfyUI server", allow_module_level=True)

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
VOXCPM = REPO / "tests" / "parity" / "data" / "voxcpm" / "e2e"  # tiny random VoxCPM folders and recordings
PACK = "ComfyUI-Mizuoto"  # the folder name users clone the pack into
OUR_NODES = ("MizuotoDummyLoader", "MizuotoDummySpeak", "MizuotoAccelPolicy", "MizuotoDoctor")

START_TIMEOUT = 120.0  # server start-up until /system_stats answers
RUN_TIMEOUT = 120.0  # one short prompt, queued until it is in the history
INTERRUPT_TIMEOUT = 30.0  # from POST /interrupt until the prompt is in the history
# The dummy takes at most 1022 bytes and decodes 1-3 codes per byte: ~1000-3000 decode steps, which take
# only ~1 s on a CPU with torch 2.9 -- too short to cancel after a fixed wait, so the test watches the
# progress events ComfyUI sends over its websocket and cancels after the first decode steps.
LONG_TEXT = ("Hello there. " * 80)[:1000]


# -- the server -----------------------------------------------------------------------------------------------


class Server:
    def __init__(self, url: str, log: Path, output: Path, proc: subprocess.Popen):
        self.url, self.log, self.output, self.proc = url, log, output, proc

    def log_text(self) -> str:
        try:
            return self.log.read_text(errors="replace")
        except OSError as exc:
            return f"(no server log: {exc})"

    def log_tail(self, lines: int = 80) -> str:
        return "\n".join(self.log_text().splitlines()[-lines:])

    def _request(self, path: str, data: dict | None = None, timeout: float = 30.0):
        body = None if data is None else json.dumps(data).encode()
        req = urllib.request.Request(self.url + path, data=body, method="GET" if data is None else "POST",
                                     headers={"Content-Type": "application/json"} if body else {})
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            raw = resp.read()
        return json.loads(raw) if raw.strip() else None

    def get(self, path: str):
        return self._request(path)

    def post(self, path: str, data: dict):
        return self._request(path, data)

    def fail(self, message: str):
        pytest.fail(f"{message}\n--- server log (tail) ---\n{self.log_tail()}", pytrace=False)

    def queue(self, prompt: dict, client_id: str | None = None) -> str:
        body = {"prompt": prompt} if client_id is None else {"prompt": prompt, "client_id": client_id}
        try:
            answer = self.post("/prompt", body)
        except urllib.error.HTTPError as exc:
            self.fail(f"POST /prompt was refused ({exc.code}): {exc.read().decode(errors='replace')}")
        if answer.get("node_errors"):
            self.fail(f"POST /prompt reported node errors: {json.dumps(answer['node_errors'], indent=1)}")
        return answer["prompt_id"]

    def wait(self, prompt_id: str, timeout: float = RUN_TIMEOUT) -> dict:
        """The prompt's history entry once it has finished (success or not)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                self.fail(f"the server exited ({self.proc.returncode}) while prompt {prompt_id} ran")
            entry = self.get(f"/history/{prompt_id}").get(prompt_id)
            if entry is not None and entry.get("status", {}).get("completed") is not None:
                return entry
            time.sleep(0.25)
        self.fail(f"prompt {prompt_id} did not finish within {timeout:.0f} s; queue: {self.get('/queue')}")

    def run(self, prompt: dict, timeout: float = RUN_TIMEOUT) -> dict:
        """Queue a prompt, wait for it and require success."""
        prompt_id = self.queue(prompt)
        entry = self.wait(prompt_id, timeout)
        status = entry["status"]
        if status.get("status_str") != "success" or not status.get("completed"):
            self.fail(f"prompt {prompt_id} did not succeed: {json.dumps(status, indent=1)[:6000]}")
        return entry


class Events:
    """ComfyUI's /ws event stream (tests/host/ws_client.py)."""

    def __init__(self, server: Server, client_id: str, timeout: float = 10.0):
        host, port = server.url.removeprefix("http://").split(":")
        self.ws = WebSocket(host, int(port), f"/ws?clientId={client_id}", timeout)

    def next(self, deadline: float) -> dict:
        """The next JSON event ({"type", "data"}); binary frames (previews) are skipped."""
        while True:
            self.ws.settimeout(max(deadline - time.monotonic(), 0.01))
            opcode, payload = self.ws.receive()
            if opcode == 1 and payload.startswith(b"{"):
                return json.loads(payload)

    def close(self) -> None:
        self.ws.close()


@pytest.fixture(scope="module")
def comfy(tmp_path_factory) -> Server:
    comfy_dir = Path(COMFYUI_DIR).resolve()
    main = comfy_dir / "main.py"
    if not main.is_file():
        pytest.fail(f"COMFYUI_DIR={COMFYUI_DIR} has no main.py", pytrace=False)
    python = os.environ.get("COMFYUI_PYTHON") or sys.executable
    cli = (comfy_dir / "comfy" / "cli_args.py").read_text(errors="replace")

    base = tmp_path_factory.mktemp("comfyui")
    port = free_port()
    args = [python, str(main), "--cpu", "--listen", "127.0.0.1", "--port", str(port), "--disable-auto-launch"]
    linked = None  # a link made inside COMFYUI_DIR, removed at the end
    if "--base-directory" in cli:
        # models/, custom_nodes/, input/, output/, temp/ and user/ all under the temporary base.
        (base / "custom_nodes").mkdir()
        (base / "custom_nodes" / PACK).symlink_to(REPO, target_is_directory=True)
        # a real engine's tiny model where the loader lists models, and a recording where LoadAudio reads
        shutil.copytree(VOXCPM / "v2", base / "models" / "tts" / "voxcpm" / "tiny_v2")
        (base / "input").mkdir()
        shutil.copy(VOXCPM / "prompt16.wav", base / "input" / "prompt16.wav")
        args += ["--base-directory", str(base)]
        output = base / "output"
    else:
        # Older ComfyUI: the pack has to be in the checkout's own custom_nodes/ for the test's duration.
        linked = comfy_dir / "custom_nodes" / PACK
        if linked.exists() or linked.is_symlink():
            pytest.fail(f"{linked} already exists; not replacing it", pytrace=False)
        linked.symlink_to(REPO, target_is_directory=True)
        output = base / "output"
        for flag, folder in (("--output-directory", output), ("--temp-directory", base / "temp"),
                             ("--input-directory", base / "input"), ("--user-directory", base / "user")):
            if flag in cli:
                folder.mkdir(exist_ok=True)
                args += [flag, str(folder)]
    if "--database-url" in cli:
        # Its default is <COMFYUI_DIR>/user/comfyui.db whatever the base directory is.
        args += ["--database-url", f"sqlite:///{base / 'comfyui.db'}"]

    env = {k: v for k, v in os.environ.items() if not k.startswith("MIZUOTO_")}  # as tests/conftest.py
    env.update(XDG_CONFIG_HOME=str(base / "config"), PYTHONUNBUFFERED="1",
               PYTHONDONTWRITEBYTECODE="1")  # no __pycache__ written into COMFYUI_DIR
    log = base / "comfyui.log"
    log_file = open(log, "wb")
    proc = subprocess.Popen(args, cwd=base, env=env, stdout=log_file, stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL, start_new_session=True)
    server = Server(f"http://127.0.0.1:{port}", log, output, proc)
    try:
        deadline = time.monotonic() + START_TIMEOUT
        while True:
            if proc.poll() is not None:
                server.fail(f"ComfyUI exited ({proc.returncode}) during start-up: {' '.join(args)}")
            try:
                server.get("/system_stats")
                break
            except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
                pass
            if time.monotonic() > deadline:
                server.fail(f"ComfyUI did not answer /system_stats within {START_TIMEOUT:.0f} s")
            time.sleep(0.5)
        yield server
    finally:
        stop(proc)
        log_file.close()
        if linked is not None and linked.is_symlink():
            linked.unlink()


# -- the workflow ---------------------------------------------------------------------------------------------

def workflow(text: str = "Hello from a real ComfyUI.", seed: int = 7) -> dict:
    """Accel Policy -> Dummy Loader -> Dummy Speak -> core SaveAudio, in ComfyUI's API format."""
    return {
        "1": {"class_type": "MizuotoAccelPolicy",
              "inputs": {"policy": "auto", "strict": False, "compile": False, "cuda_graphs": True}},
        "2": {"class_type": "MizuotoDummyLoader",
              "inputs": {"model": "(built-in weights)", "device": "cpu", "dtype": "float32",
                         "sample_rate": "24000", "policy": ["1", 0]}},
        "3": {"class_type": "MizuotoDummySpeak",
              "inputs": {"model": ["2", 0], "text": text, "seed": seed, "speed": 1.0, "temperature": 0.9,
                         "top_k": 50, "top_p": 0.95, "repetition_penalty": 1.05}},
        "4": {"class_type": "SaveAudio", "inputs": {"audio": ["3", 0], "filename_prefix": "mizuoto_test"}},
    }


def messages(entry: dict, event: str) -> list[dict]:
    return [data for name, data in entry["status"].get("messages", []) if name == event]


def report_of(server: Server, entry: dict) -> dict:
    ui = entry.get("outputs", {}).get("3", {})
    if not ui.get("report"):
        server.fail(f"the speak node's UI output has no report: {json.dumps(entry.get('outputs'))[:3000]}")
    return json.loads(ui["report"][0])


def saved_flac(server: Server, entry: dict) -> Path:
    files = entry.get("outputs", {}).get("4", {}).get("audio", [])
    if len(files) != 1:
        server.fail(f"SaveAudio reported {files!r}, expected one file; outputs: {list(server.output.rglob('*'))}")
    path = server.output / files[0].get("subfolder", "") / files[0]["filename"]
    if not path.is_file():
        server.fail(f"SaveAudio reported {path}, which does not exist; outputs: {list(server.output.rglob('*'))}")
    data = path.read_bytes()
    assert path.suffix == ".flac" and data[:4] == b"fLaC" and len(data) > 1000, (path, len(data), data[:4])
    return path


def combo_options(spec: list) -> list:
    """A COMBO input's options as /object_info lists them: `[[options], {...}]` or `["COMBO", {"options"}]`."""
    if isinstance(spec[0], list):
        return spec[0]
    assert spec[0] == "COMBO", spec
    return spec[1]["options"]


# -- the tests ------------------------------------------------------------------------------------------------

def test_pack_imports_and_lists_its_nodes(comfy):
    log = comfy.log_text()
    failed = [line for line in log.splitlines() if "IMPORT FAILED" in line and ("Mizuoto" in line or PACK in line)]
    assert not failed, f"the pack failed to import: {failed}\n--- server log (tail) ---\n{comfy.log_tail()}"
    assert any(PACK in line and "seconds" in line for line in log.splitlines()), \
        f"ComfyUI never reported importing {PACK}\n--- server log (tail) ---\n{comfy.log_tail()}"

    info = comfy.get("/object_info")
    missing = [name for name in OUR_NODES if name not in info]
    mizuoto = sorted(name for name in info if name.startswith("Mizuoto"))
    assert not missing, f"/object_info lacks {missing} (it has {mizuoto})\n--- server log ---\n{comfy.log_tail()}"

    loader, speak = info["MizuotoDummyLoader"], info["MizuotoDummySpeak"]
    assert "(built-in weights)" in combo_options(loader["input"]["required"]["model"])
    assert "24000" in combo_options(loader["input"]["required"]["sample_rate"])
    assert loader["input"]["optional"]["policy"][0] == "MIZUOTO_POLICY"
    assert loader["output"] == ["MIZUOTO_MODEL"]
    assert speak["input"]["required"]["model"][0] == "MIZUOTO_MODEL"
    assert speak["output"] == ["AUDIO", "STRING"]


def test_policy_and_doctor_nodes(comfy):
    info = comfy.get("/object_info")
    for name in ("MizuotoAccelPolicy", "MizuotoDoctor"):
        if name not in info:
            comfy.fail(f"/object_info has no {name}")
    policy = info["MizuotoAccelPolicy"]
    required = policy["input"]["required"]
    assert "auto" in combo_options(required["policy"]), required["policy"]
    for flag in ("strict", "compile", "cuda_graphs"):
        assert required[flag][0] == "BOOLEAN", (flag, required[flag])
    assert policy["output"] == ["MIZUOTO_POLICY"], policy["output"]

    doctor = info["MizuotoDoctor"]
    assert doctor["output_node"] is True, doctor
    assert not doctor["input"].get("required"), doctor["input"]
    assert "STRING" in doctor["output"], doctor["output"]


def test_speak_and_save_flac(comfy):
    entry = comfy.run(workflow())
    report = report_of(comfy, entry)
    assert report["engine"] == "dummy" and report["seed"] == 7, report
    saved_flac(comfy, entry)


def test_voxcpm_example_workflow_clones_a_voice(comfy):
    """workflows/api/voxcpm.json as a user queues it, pointed at a tiny VoxCPM2 in the models folder and a
    recording in the input folder (LoadAudio), with six patches for time: a real engine's loader, speak
    node and reference audio through ComfyUI's own nodes, saved as FLAC."""
    listed = combo_options(comfy.get("/object_info/MizuotoVoxCPMLoader")["MizuotoVoxCPMLoader"]["input"]
                           ["required"]["model"])
    if "voxcpm/tiny_v2" not in listed:
        pytest.skip("this ComfyUI has no --base-directory: the test's model folder is not listed")
    graph = json.loads((REPO / "workflows" / "api" / "voxcpm.json").read_text())
    for node in graph.values():
        node.pop("_meta", None)
        if node["class_type"] == "LoadAudio":
            node["inputs"]["audio"] = "prompt16.wav"
        elif node["class_type"] == "MizuotoVoxCPMLoader":
            node["inputs"].update(model="voxcpm/tiny_v2", device="cpu", dtype="float32")
        elif node["class_type"] == "MizuotoVoxCPMSpeak":
            node["inputs"].update(max_len=6, min_len=6, retry_badcase=False, reference_text="a prompt")
        elif node["class_type"] == "SaveAudio":
            node["inputs"]["filename_prefix"] = "mizuoto_voxcpm"
    (speak_id,) = [i for i, n in graph.items() if n["class_type"] == "MizuotoVoxCPMSpeak"]
    # A Whisper loader on the transcriber input, as the UI example has one, naming a download: the input is
    # lazy and the transcript is given, so the host never runs that loader (no network here: it would fail).
    graph["90"] = {"class_type": "MizuotoWhisperLoader",
                   "inputs": {"model": "hf:openai/whisper-tiny", "device": "cpu", "dtype": "float32"}}
    graph[speak_id]["inputs"]["transcriber"] = ["90", 0]
    entry = comfy.run(graph)
    report = json.loads(entry["outputs"][speak_id]["report"][0])
    assert report["engine"] == "voxcpm" and report["sample_rate"] == 48000, report
    assert report["samples"] == 6 * 4 * 96 and report["speak"]["clone_mode"] == "continuation", report
    (save_id,) = [i for i, n in graph.items() if n["class_type"] == "SaveAudio"]
    files = entry["outputs"][save_id]["audio"]
    path = comfy.output / files[0].get("subfolder", "") / files[0]["filename"]
    assert path.read_bytes()[:4] == b"fLaC"


def test_second_prompt_reuses_the_cached_loader(comfy):
    first = comfy.run(workflow("Warm the cache.", seed=7))
    second = comfy.run(workflow("A second line, same model.", seed=7))
    cached = [data["nodes"] for data in messages(second, "execution_cached")]
    assert cached, f"no execution_cached message: {second['status']}"
    assert "2" in cached[0] and "1" in cached[0], f"loader not cached: {cached[0]}"
    assert "3" not in cached[0] and "4" not in cached[0], f"speak/save did not re-run: {cached[0]}"
    assert messages(second, "execution_success"), second["status"]
    assert report_of(comfy, second)["engine"] == "dummy"
    assert saved_flac(comfy, second) != saved_flac(comfy, first)  # SaveAudio ran again: a new file


def test_interrupt_stops_a_long_generation_and_the_model_stays_usable(comfy):
    client_id = uuid.uuid4().hex
    events = Events(comfy, client_id)  # progress events go only to the client that queued the prompt
    try:
        prompt_id = comfy.queue(workflow(LONG_TEXT, seed=424242), client_id=client_id)
        deadline = time.monotonic() + RUN_TIMEOUT
        seen = []  # the speak node's progress values
        while True:
            try:
                event = events.next(deadline)
            except (TimeoutError, socket.timeout):
                comfy.fail(f"no progress from the speak node within {RUN_TIMEOUT:.0f} s (events seen: {seen})")
            data = event.get("data", {})
            if data.get("prompt_id") not in (None, prompt_id):
                continue
            if event["type"] in ("execution_success", "execution_error", "executed") and not seen:
                comfy.fail(f"the speak node ran without reporting progress: {event}")
            if event["type"] == "progress" and data.get("node") == "3":
                seen.append((data["value"], data["max"]))
                if data["value"] >= 5:  # a few decode steps done: generation is under way
                    break
        at_interrupt = seen[-1]
        comfy.post("/interrupt", {"prompt_id": prompt_id})
        interrupted_at = time.monotonic()
        deadline = interrupted_at + INTERRUPT_TIMEOUT
        while True:  # the stream until the interruption: how far decoding went
            try:
                event = events.next(deadline)
            except (TimeoutError, socket.timeout):
                break
            data = event.get("data", {})
            if event["type"] == "progress" and data.get("node") == "3" and data.get("prompt_id") == prompt_id:
                seen.append((data["value"], data["max"]))
            if event["type"] in ("execution_interrupted", "execution_success", "execution_error") \
                    and data.get("prompt_id") == prompt_id:
                break
    finally:
        events.close()
    entry = comfy.wait(prompt_id, timeout=max(deadline - time.monotonic(), 1.0))
    took = time.monotonic() - interrupted_at

    status = entry["status"]
    stopped = messages(entry, "execution_interrupted")
    last, total = seen[-1]
    print(f"\ninterrupt: requested at progress {at_interrupt[0]}/{at_interrupt[1]}, last progress "
          f"{last}/{total}, finished {took:.2f} s later")
    if status.get("status_str") != "error" or not stopped:
        comfy.fail(f"the prompt was not interrupted (progress {last}/{total}, {took:.1f} s after POST "
                   f"/interrupt): {json.dumps(status, indent=1)[:4000]}")
    # Interrupted inside the speak node, not after it at the next node (SaveAudio): generation stopped.
    assert stopped[0]["node_id"] == "3", f"interrupted at node {stopped[0]['node_id']}, not the speak node: {status}"
    assert last < total, f"decoding ran to its end ({last}/{total}) before stopping"
    assert not messages(entry, "execution_success"), status

    after = comfy.run(workflow("Still here after the cancel.", seed=8))
    cached = [data["nodes"] for data in messages(after, "execution_cached")]
    assert cached and "2" in cached[0], f"the loaded model was not reused after the cancel: {cached}"
    assert report_of(comfy, after)["seed"] == 8
    saved_flac(comfy, after)


def test_doctor_route_answers_json(comfy):
    report = comfy.get("/mizuoto/doctor")
    devices = report["acceleration"]["devices"]
    assert report["engines"]["dummy"] and isinstance(devices, list) and devices[0]["device"] == "cpu", devices


def test_bad_input_reaches_the_error_dialog_as_our_message(comfy):
    prompt_id = comfy.queue(workflow(text="   "))
    entry = comfy.wait(prompt_id)
    errors = messages(entry, "execution_error")
    assert entry["status"]["status_str"] == "error" and errors, entry["status"]
    assert errors[0]["exception_message"].strip() == "text is empty; give some words to speak", errors[0]
    assert errors[0]["node_id"] == "3"


def test_free_drops_the_model_and_the_next_prompt_loads_it_again(comfy):
    comfy.run(workflow("Loaded before /free.", seed=3))
    comfy.post("/free", {"unload_models": True, "free_memory": True})
    time.sleep(1.0)  # /free is handled by the prompt worker between prompts
    entry = comfy.run(workflow("Loaded again after /free.", seed=3))
    cached = [data["nodes"] for data in messages(entry, "execution_cached")]
    assert not cached or "2" not in cached[0], f"the loader came from cache after /free: {cached}"
    assert report_of(comfy, entry)["engine"] == "dummy"
