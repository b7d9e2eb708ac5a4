import shutil
import subprocess
import sys

import pytest


def test_ruff_is_clean(repo):
    if shutil.which("ruff") is None and subprocess.run([sys.executable, "-m", "ruff", "--version"],
                                                       capture_output=True).returncode != 0:
        pytest.skip("ruff is not installed (it comes with the test extra)")
    out = subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", str(repo)], capture_output=True,
                         text=True, cwd=repo)
    assert out.returncode == 0, out.stdout + out.stderr
