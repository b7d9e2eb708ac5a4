"""The GPU check script and the probe entry point run end to end (here on the CPU alone)."""

import json
import subprocess
import sys


def test_gpu_check_runs_and_passes_on_this_machine(repo, tmp_path):
    out = subprocess.run([sys.executable, str(repo / "scripts" / "gpu_check.py"), "--json", str(tmp_path / "r.json")],
                         capture_output=True, text=True, cwd=tmp_path)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    assert "0 failure(s)" in out.stdout
    result = json.loads((tmp_path / "r.json").read_text())
    cases = {(r["backend"], r["case"]) for r in result["rows"]}
    assert ("cpu_flash", "decode step, left padding float32") in cases
    assert ("gpu_check_broken", "raising kernel") in cases and result["failures"] == []


def test_probe_entry_point_prints_json():
    out = subprocess.run([sys.executable, "-m", "mizuoto.runtime.accel"], capture_output=True, text=True, check=True)
    devices = json.loads(out.stdout)
    assert devices[0]["device"] == "cpu" and devices[0]["backends"]["math"]["ok"]
