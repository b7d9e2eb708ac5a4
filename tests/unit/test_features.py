import json
import subprocess
import sys

# compute.fast changes process-wide state, so each check runs in its own process.
APPLY = """
import json, torch
from mizuoto.runtime.accel import features
from mizuoto.host import load_model
before = features.applied()
done = features.apply(["cudnn_benchmark", "tf32"])
print(json.dumps({
    "before": before, "done": done, "applied": features.applied(),
    "tf32": torch.backends.cuda.matmul.allow_tf32, "benchmark": torch.backends.cudnn.benchmark,
    "reported": load_model("dummy", device="cpu").info.report()["params"]["fast"],
}))
"""


def test_apply_sets_switches_and_every_output_lists_them():
    out = subprocess.run([sys.executable, "-c", APPLY], capture_output=True, text=True, check=True)
    got = json.loads(out.stdout)
    assert got["before"] == []
    assert got["done"] == ["tf32", "cudnn_benchmark"] or got["done"] == ["cudnn_benchmark", "tf32"]
    assert got["applied"] == ["tf32", "cudnn_benchmark"]  # declared order
    assert got["tf32"] is True and got["benchmark"] is True
    assert got["reported"] == ["tf32", "cudnn_benchmark"]


def test_unknown_switch():
    code = "from mizuoto.runtime.accel import features; features.apply(['warp'])"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode != 0 and "unknown compute.fast switch 'warp'" in out.stderr


def test_cli_applies_compute_fast_from_settings_once(tmp_path):
    settings = tmp_path / "s.toml"
    settings.write_text('[compute]\nfast = ["cudnn_benchmark"]\n')
    out = subprocess.run([sys.executable, "-m", "mizuoto", "say", "hi", "--engine", "dummy", "--settings",
                          str(settings), "-o", str(tmp_path / "o.wav")], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout)["params"]["fast"] == ["cudnn_benchmark"]
