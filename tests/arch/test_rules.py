"""Architecture tests: the rules of DESIGN.md principles 1-2 and sections 2-3, on the real tree and on
planted violations, plus what importing the library really pulls in (checked in fresh processes)."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def _load_rules():
    # The test folders are not packages (pytest runs in importlib mode), so rules.py is loaded by path.
    # It is registered in sys.modules first because dataclasses look their module up there.
    name = "mizuoto_arch_rules"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, Path(__file__).with_name("rules.py"))
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


rules = _load_rules()


def plant(root: Path, rel: str, code: str) -> Path:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(code).lstrip("\n"), encoding="utf-8")
    return path


def located(findings: list[str]) -> list[tuple[str, int]]:
    """(file, line) of each finding."""
    return [(f.split(":")[0], int(f.split(":")[1])) for f in findings]


# ---------------------------------------------------------------------------------------------------
# The real tree

@pytest.mark.parametrize("check", rules.ALL_CHECKS, ids=lambda c: c.__name__)
def test_real_tree_has_no_findings(check):
    findings = check(REPO)
    assert findings == []


def test_the_scan_covers_the_shipped_code():
    scanned = {p.relative_to(REPO).as_posix() for p in rules.python_files(REPO)}
    assert {"__init__.py", "mizuoto/runtime/accel/features.py", "mizuoto/core/compute/cpu.py",
            "engines/dummy/model.py", "nodes/__init__.py"} <= scanned
    assert not any(p.startswith(("tests/", "benchmarks/", "scripts/")) for p in scanned)


@pytest.mark.parametrize("real, planted, check", [
    # The exempt modules really do what the rules forbid elsewhere, so the rules are not vacuous.
    ("mizuoto/runtime/accel/site.py", "engines/x/site.py", rules.check_sdpa_outside_accel),
    ("mizuoto/runtime/accel/features.py", "mizuoto/runtime/accel/other.py",
     rules.check_process_wide_switches),
])
def test_exempt_code_is_flagged_elsewhere(tmp_path, real, planted, check):
    plant(tmp_path, planted, (REPO / real).read_text(encoding="utf-8"))
    assert check(tmp_path) != []
    plant(tmp_path, real, (REPO / real).read_text(encoding="utf-8"))
    (tmp_path / planted).unlink()
    assert check(tmp_path) == []


def test_unparsable_file_is_a_finding(tmp_path):
    plant(tmp_path, "mizuoto/broken.py", "def f(:\n")
    for check in rules.ALL_CHECKS:
        assert located(check(tmp_path)) == [("mizuoto/broken.py", 1)]


# ---------------------------------------------------------------------------------------------------
# Helpers

@pytest.mark.parametrize("parts, expected", [
    (("mizuoto", "host", "local.py"), ("mizuoto.host.local", False)),
    (("mizuoto", "__init__.py"), ("mizuoto", True)),
    (("engines", "dummy", "model.py"), ("mizuoto.engines.dummy.model", False)),
    (("engines", "dummy", "__init__.py"), ("mizuoto.engines.dummy", True)),
    (("nodes", "models.py"), ("mizuoto.nodes.models", False)),
    (("__init__.py",), (rules.PACK, True)),
])
def test_module_name(parts, expected):
    assert rules.module_name(parts) == expected


@pytest.mark.parametrize("package, level, module, expected", [
    ("mizuoto.host", 0, "os", "os"),
    ("mizuoto.host", 1, "run", "mizuoto.host.run"),
    ("mizuoto.host", 1, None, "mizuoto.host"),
    ("mizuoto.host", 2, None, "mizuoto"),
    ("mizuoto.host", 2, "nodes", "mizuoto.nodes"),
    ("mizuoto.host", 3, None, None),
    ("mizuoto.engines.dummy", 3, "nodes", "mizuoto.nodes"),
])
def test_absolute_module(package, level, module, expected):
    assert rules.absolute_module(package, level, module) == expected


# ---------------------------------------------------------------------------------------------------
# Rule 1: SDPA and its aten kernels only inside mizuoto/runtime/accel/

SDPA_CASES = [
    ("import torch.nn.functional as F\nout = F.scaled_dot_product_attention(q, k, v)\n", [2]),
    ("from torch.nn.functional import scaled_dot_product_attention as s\nout = s(q, k, v)\n", [1, 2]),
    ("from torch.nn import functional\nout = functional.scaled_dot_product_attention(q, k, v)\n", [2]),
    ("import torch\nout = torch.nn.functional.scaled_dot_product_attention(q, k, v)\n", [2]),
    ("import torch\nout = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(q, k, v)[0]\n", [2]),
    ("import torch as t\nout = t.ops.aten._flash_attention_forward.default(q, k, v)\n", [2]),
    ("import torch\nout = torch._C._nn.scaled_dot_product_attention(q, k, v)\n", [2]),
    ("import torch\nout = torch.ops.aten._scaled_dot_product_cudnn_attention(q, k, v)\n", [2]),
    ("import torch\nchoice = torch._fused_sdp_choice(q, k, v)\n", [2]),
    ("import torch\nout = getattr(torch.ops.aten, '_efficient_attention_forward')(q, k, v)\n", [2]),
    ("import torch\naten = torch.ops.aten\n"
     "out = aten._scaled_dot_product_efficient_attention(q, k, v)\n", [3]),
    ("def attend(q, k, v):\n    import torch.nn.functional as F\n\n"
     "    return F.scaled_dot_product_attention(q, k, v)\n", [4]),
    ("import torch.nn.functional as F\nF.scaled_dot_product_attention = my_attention\n", [2]),
]


@pytest.mark.parametrize("code, lines", SDPA_CASES)
def test_sdpa_outside_accel_is_flagged(tmp_path, code, lines):
    plant(tmp_path, "engines/x/model.py", code)
    findings = rules.check_sdpa_outside_accel(tmp_path)
    assert located(findings) == [("engines/x/model.py", line) for line in lines]
    assert all(f.endswith("outside mizuoto/runtime/accel/") for f in findings)


@pytest.mark.parametrize("code, lines", SDPA_CASES)
def test_sdpa_inside_accel_is_allowed(tmp_path, code, lines):
    plant(tmp_path, "mizuoto/runtime/accel/backends.py", code)
    assert rules.check_sdpa_outside_accel(tmp_path) == []


@pytest.mark.parametrize("rel", ["mizuoto/nn/attention.py", "nodes/x.py", "__init__.py",
                                 "mizuoto/runtime/accel_extra.py", "mizuoto/runtime/accelerated/x.py"])
def test_sdpa_is_flagged_everywhere_else(tmp_path, rel):
    plant(tmp_path, rel, "import torch.nn.functional as F\nout = F.scaled_dot_product_attention(q, k, v)\n")
    assert located(rules.check_sdpa_outside_accel(tmp_path)) == [(rel, 2)]


@pytest.mark.parametrize("rel", ["tests/engines/test_x.py", "benchmarks/attn.py", "scripts/x.py"])
def test_tests_benchmarks_and_scripts_are_not_scanned(tmp_path, rel):
    plant(tmp_path, rel, "import torch\ntorch.manual_seed(0)\n"
                         "out = torch.nn.functional.scaled_dot_product_attention(q, k, v)\n")
    for check in rules.ALL_CHECKS:
        assert check(tmp_path) == []


def test_sdpa_lookalikes_are_not_flagged(tmp_path):
    plant(tmp_path, "engines/x/model.py", """
        import torch
        from mizuoto.runtime import accel

        SITE = accel.Site("x.attn")
        out = accel.attention(q, k, v, site=SITE)
        out = self.scaled_dot_product_attention(q, k, v)
        ok = torch.backends.cuda.can_use_flash_attention(params)
        ok = torch.backends.cuda.flash_sdp_enabled()
    """)
    assert rules.check_sdpa_outside_accel(tmp_path) == []


# ---------------------------------------------------------------------------------------------------
# Rule 2: process-wide switches only in mizuoto/runtime/accel/features.py

SWITCH_CASES = [
    ("import torch\ntorch.backends.cuda.matmul.allow_tf32 = True\n", [2]),
    ("from torch.backends import cudnn\ncudnn.benchmark = True\n", [2]),
    ("from torch import backends\nbackends.cudnn.allow_tf32 = True\n", [2]),
    ("import torch.backends.cudnn as cudnn\ncudnn.deterministic: bool = True\n", [2]),
    ("import torch\ntorch.backends.cudnn.benchmark |= True\n", [2]),
    ("import torch\nsetattr(torch.backends.cudnn, 'benchmark', True)\n", [2]),
    ("import torch\nmatmul = torch.backends.cuda.matmul\nmatmul.allow_fp16_accumulation = True\n", [3]),
    ("def fast():\n    import torch\n\n    torch.backends.cudnn.benchmark = True\n", [4]),
    ("import torch\ntorch.backends.cuda.enable_flash_sdp(False)\n", [2]),
    ("from torch.backends.cuda import enable_math_sdp\nenable_math_sdp(True)\n", [1, 2]),
    ("import torch\ntorch.backends.cuda.allow_fp16_bf16_reduction_math_sdp(True)\n", [2]),
    ("import torch\nwith torch.backends.cudnn.flags(enabled=False):\n    pass\n", [2]),
    ("import torch\ntorch.backends.cuda.preferred_linalg_library('magma')\n", [2]),
    ("import torch\ntorch.set_float32_matmul_precision('high')\n", [2]),
    ("import torch\ntorch.use_deterministic_algorithms(True)\n", [2]),
    ("import torch as th\nth.set_default_dtype(th.float64)\n", [2]),
    ("from torch import set_default_dtype\n", [1]),
    ("from torch.nn.attention import SDPBackend, sdpa_kernel\nwith sdpa_kernel(SDPBackend.MATH):\n    pass\n",
     [1, 2]),
    ("import torch.nn.attention as attn\nwith attn.sdpa_kernel([attn.SDPBackend.MATH]):\n    pass\n", [2]),
    ("import torch\nwith torch.nn.attention.sdpa_kernel(backends):\n    pass\n", [2]),
]


@pytest.mark.parametrize("code, lines", SWITCH_CASES)
def test_process_wide_switch_is_flagged(tmp_path, code, lines):
    plant(tmp_path, "mizuoto/runtime/graphs.py", code)
    findings = rules.check_process_wide_switches(tmp_path)
    assert located(findings) == [("mizuoto/runtime/graphs.py", line) for line in lines]
    assert all(f.endswith("outside mizuoto/runtime/accel/features.py") for f in findings)


@pytest.mark.parametrize("code, lines", SWITCH_CASES)
def test_process_wide_switch_is_allowed_in_features(tmp_path, code, lines):
    plant(tmp_path, "mizuoto/runtime/accel/features.py", code)
    assert rules.check_process_wide_switches(tmp_path) == []


def test_process_wide_switch_is_not_allowed_elsewhere_in_accel(tmp_path):
    rel = "mizuoto/runtime/accel/backends.py"
    plant(tmp_path, rel, "import torch\ntorch.backends.cudnn.benchmark = True\n")
    assert located(rules.check_process_wide_switches(tmp_path)) == [(rel, 2)]


def test_reading_backend_flags_is_not_flagged(tmp_path):
    plant(tmp_path, "engines/x/model.py", """
        import torch
        from torch.backends import cudnn
        from torch.backends.cuda import matmul

        if torch.backends.cuda.matmul.allow_tf32 or cudnn.benchmark:
            fast = matmul.allow_fp16_accumulation
        ok = torch.backends.cuda.can_use_efficient_attention(params)
        ok = torch.backends.mps.is_available() and torch.backends.cuda.flash_sdp_enabled()
        lib = torch.backends.cuda.preferred_linalg_library()
        has = hasattr(torch.backends.cuda.matmul, "allow_fp16_accumulation")
        cap = torch.backends.cpu.get_cpu_capability()
        flags = {"tf32": getattr(torch.backends.cudnn, "allow_tf32")}
        self.backends = {}  # an attribute of our own called backends
        benchmark = True  # a local name, not torch's flag
    """)
    assert rules.check_process_wide_switches(tmp_path) == []


# ---------------------------------------------------------------------------------------------------
# Rule 3: no global seeding

SEEDING_CASES = [
    ("import torch\ntorch.manual_seed(0)\n", [2]),
    ("import torch\ntorch.random.manual_seed(0)\n", [2]),
    ("import torch\nseed = torch.seed()\n", [2]),
    ("import torch\ntorch.cuda.manual_seed(0)\n", [2]),
    ("import torch\ntorch.cuda.manual_seed_all(0)\n", [2]),
    ("import torch\ntorch.cuda.seed()\n", [2]),
    ("import torch\ntorch.cuda.seed_all()\n", [2]),
    ("import torch\ntorch.set_rng_state(state)\n", [2]),
    ("import torch\ntorch.cuda.set_rng_state(state)\n", [2]),
    ("import torch\ntorch.cuda.set_rng_state_all(states)\n", [2]),
    ("import torch\ntorch.default_generator.manual_seed(0)\n", [2]),
    ("import torch\ntorch.cuda.default_generators[0].manual_seed(0)\n", [2]),
    ("from torch import manual_seed as ms\nms(1)\n", [1, 2]),
    ("from torch import cuda\ncuda.manual_seed_all(1)\n", [2]),
    ("import numpy as np\nnp.random.seed(0)\n", [2]),
    ("from numpy import random as npr\nnpr.seed(0)\n", [2]),
    ("import numpy.random\nnumpy.random.set_state(state)\n", [2]),
    ("from random import seed\nseed(0)\n", [1, 2]),
    ("import random as rnd\nrnd.seed(0)\n", [2]),
    ("def step():\n    import torch\n\n    torch.cuda.manual_seed(1)\n", [4]),
]


@pytest.mark.parametrize("rel", ["engines/x/model.py", "mizuoto/runtime/sampling.py", "nodes/x.py"])
@pytest.mark.parametrize("code, lines", SEEDING_CASES)
def test_global_seeding_is_flagged(tmp_path, rel, code, lines):
    plant(tmp_path, rel, code)
    findings = rules.check_global_seeding(tmp_path)
    assert located(findings) == [(rel, line) for line in lines]
    assert all(f.endswith("seeds a global random generator") for f in findings)


def test_own_generators_are_not_flagged(tmp_path):
    plant(tmp_path, "engines/x/generate.py", """
        import random

        import numpy as np
        import torch

        g = torch.Generator()
        g.manual_seed(3)
        h = torch.Generator(device="cpu").manual_seed(4)
        generator = ctx.generator(device)
        generator.manual_seed(1)
        torch.Generator.manual_seed(g, 5)
        seed = g.initial_seed()
        state = torch.get_rng_state()
        rng = np.random.default_rng(0)
        legacy = np.random.RandomState(0)
        legacy.seed(1)
        r = random.Random(0)
        r.seed(1)

        def speak(seed):
            return seed + 1
    """)
    assert rules.check_global_seeding(tmp_path) == []


# ---------------------------------------------------------------------------------------------------
# Rule 4: mizuoto/core/ is standard library only; compute/cpu.py strictly

CPU = "mizuoto/core/compute/cpu.py"
SETTINGS = "mizuoto/core/settings.py"


@pytest.mark.parametrize("rel, code, lines", [
    (CPU, "import torch\n", [1]),
    (CPU, "import numpy as np\n", [1]),
    (CPU, "from mizuoto.core import errors\n", [1]),
    (CPU, "from mizuoto.core.errors import InputError\n", [1]),
    (CPU, "from .. import errors\n", [1]),
    (CPU, "from . import gpu\n", [1]),
    (CPU, "import os\n\n\ndef threads():\n    import torch\n\n    return torch.get_num_threads()\n", [5]),
    (CPU, "import importlib\n\ntorch = importlib.import_module('torch')\n", [3]),
    (SETTINGS, "import numpy\n", [1]),
    (SETTINGS, "from safetensors import safe_open\n", [1]),
    (SETTINGS, "from mizuoto.runtime import context\n", [1]),
    (SETTINGS, "from ..runtime import context\n", [1]),
    (SETTINGS, "from .. import engines\n", [1]),
    (SETTINGS, "import mizuoto.host\n", [1]),
    ("mizuoto/core/options.py", "def load():\n    import torch\n", [2]),
    ("mizuoto/core/compute/__init__.py", "from ...runtime import accel\n", [1]),
])
def test_core_non_stdlib_import_is_flagged(tmp_path, rel, code, lines):
    plant(tmp_path, rel, code)
    assert located(rules.check_core_stdlib_only(tmp_path)) == [(rel, line) for line in lines]


@pytest.mark.parametrize("rel, code", [
    (CPU, """
        from __future__ import annotations

        import ctypes
        import importlib.util
        import os, sys
        from typing import Mapping

        def later():
            import tomllib
     """),
    (SETTINGS, """
        from __future__ import annotations

        import json
        from pathlib import Path

        from mizuoto.core import errors
        from mizuoto.core.files import atomic_write

        from . import options
        from .errors import SettingsError
     """),
    ("mizuoto/core/compute/__init__.py", "from . import cpu\nfrom ..errors import InputError\n"),
    ("mizuoto/runtime/context.py", "import torch\nfrom mizuoto.host import local\n"),  # not core
])
def test_core_stdlib_and_core_imports_are_allowed(tmp_path, rel, code):
    plant(tmp_path, rel, code)
    assert rules.check_core_stdlib_only(tmp_path) == []


# ---------------------------------------------------------------------------------------------------
# Rule 5: the library never imports the node layer or ComfyUI at import time

HOST = "mizuoto/host/comfy.py"


@pytest.mark.parametrize("rel, code, lines", [
    (HOST, "import folder_paths\n", [1]),
    (HOST, "import comfy.model_management\n", [1]),
    (HOST, "from comfy import model_management as mm\n", [1]),
    (HOST, "from comfy_extras import nodes_audio\n", [1]),
    (HOST, "from comfy_api.latest import io\n", [1]),
    (HOST, "import nodes\n", [1]),
    (HOST, "import server\n", [1]),
    (HOST, "from execution import PromptExecutor\n", [1]),
    (HOST, "from mizuoto import nodes\n", [1]),
    (HOST, "from mizuoto.nodes.models import checkpoints\n", [1]),
    (HOST, "from .. import nodes\n", [1]),
    (HOST, "from ... import nodes\n", [1]),
    (HOST, "try:\n    import folder_paths\nexcept ImportError:\n    folder_paths = None\n", [2]),
    (HOST, "import sys\n\nif 'comfy' in sys.modules:\n    import comfy.utils\n", [4]),
    (HOST, "class Paths:\n    import folder_paths\n", [2]),
    (HOST, "import importlib\n\nhost_nodes = importlib.import_module('nodes')\n", [3]),
    ("mizuoto/__init__.py", "from . import nodes\n", [1]),
    ("engines/x/model.py", "import folder_paths\n", [1]),
    ("engines/x/model.py", "from ... import nodes\n", [1]),
])
def test_host_import_at_import_time_is_flagged(tmp_path, rel, code, lines):
    plant(tmp_path, rel, code)
    assert located(rules.check_library_independent_of_host(tmp_path)) == [(rel, line) for line in lines]


def test_host_import_inside_a_function_is_allowed(tmp_path):
    plant(tmp_path, HOST, """
        from typing import TYPE_CHECKING

        if TYPE_CHECKING:
            import comfy

        def models_dir():
            import folder_paths

            return folder_paths.models_dir

        class Hooks:
            def progress(self):
                from comfy.utils import ProgressBar

                return ProgressBar

        interrupt = lambda: __import__("comfy.model_management")
        import folder_paths
    """)
    assert located(rules.check_library_independent_of_host(tmp_path)) == [(HOST, 18)]


@pytest.mark.parametrize("rel", ["nodes/models.py", "__init__.py"])
def test_node_layer_may_import_the_host(tmp_path, rel):
    plant(tmp_path, rel, "import folder_paths\nfrom .nodes import NODE_CLASS_MAPPINGS\n")
    assert rules.check_library_independent_of_host(tmp_path) == []


def test_names_that_only_resemble_host_modules_are_allowed(tmp_path):
    plant(tmp_path, HOST, "import comfyui_helpers\nfrom mizuoto.engines import nodes_like\nimport servers\n")
    assert rules.check_library_independent_of_host(tmp_path) == []


# ---------------------------------------------------------------------------------------------------
# What importing really does, in fresh processes started in the repository root (so that the clone's
# own `nodes`, `engines` and `tests` folders would be importable if anything asked for them).

def run_python(code: str) -> str:
    result = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, result.stderr
    return result.stdout.strip().splitlines()[-1]


HOST_NAMES = ("nodes", "comfy", "folder_paths", "server", "engines", "utils", "tests")

IMPORT_EVERYTHING = """
import importlib, json, pkgutil, sys
import mizuoto

failed, imported = [], ["mizuoto"]
for info in pkgutil.walk_packages(mizuoto.__path__, "mizuoto.", onerror=failed.append):
    if info.name.rpartition(".")[2] == "__main__":
        continue  # a script: importing it runs the command line
    importlib.import_module(info.name)
    imported.append(info.name)
names = %r
leaked = sorted(m for m in sys.modules
                if any(m == n or m.startswith(n + ".") or m.startswith("comfy_") for n in names))
print(json.dumps({"failed": failed, "imported": imported, "leaked": leaked}))
""" % (HOST_NAMES,)


@pytest.mark.slow
def test_importing_every_library_module_leaves_host_names_alone():
    report = json.loads(run_python(IMPORT_EVERYTHING))
    assert report["failed"] == []
    assert report["leaked"] == []
    expected = {rules.module_name(p.relative_to(REPO).parts)[0]
                for folder in ("mizuoto", "engines") for p in (REPO / folder).rglob("*.py")
                if p.stem != "__main__" and "__pycache__" not in p.parts}
    assert "mizuoto.engines.dummy.model" in expected
    assert expected - set(report["imported"]) == set()


NO_TORCH_IMPORTS = [
    "import mizuoto",
    "import mizuoto.runtime.context",
    "import mizuoto.core.settings",
    "import mizuoto.core.compute.cpu",
    "import mizuoto.engines",
    "import mizuoto.engines; mizuoto.engines.all_engines()",  # the registry reads declarations only
    "import mizuoto.runtime.accel",
]


@pytest.mark.slow
@pytest.mark.parametrize("statement", NO_TORCH_IMPORTS)
def test_import_does_not_import_torch(statement):
    code = (f"{statement}\nimport sys\n"
            "print(sorted(m for m in sys.modules if m == 'torch' or m.startswith('torch.')))")
    assert run_python(code) == "[]"


# ---------------------------------------------------------------------------------------------------
# Rule 6: audio files and audio libraries in mizuoto/audio/ only

@pytest.mark.parametrize("rel, code, lines", [
    ("engines/x/engine.py", "import soundfile\n", [1]),
    ("engines/x/engine.py", "import soundfile as sf\nimport librosa\n", [1, 2]),
    ("engines/x/engine.py", "def load(p):\n    import wave\n    return wave.open(p)\n", [2]),
    ("nodes/models.py", "from scipy.io import wavfile\n", [1]),
    ("mizuoto/host/local.py", "import torchaudio.functional as AF\n", [1]),
    ("mizuoto/doctor.py", "import soxr\n", [1]),
])
def test_audio_libraries_outside_audio_are_flagged(tmp_path, rel, code, lines):
    plant(tmp_path, rel, code)
    assert located(rules.check_audio_io_in_audio(tmp_path)) == [(rel, line) for line in lines]


def test_audio_libraries_in_audio_and_our_resamplers_anywhere_are_allowed(tmp_path):
    plant(tmp_path, "mizuoto/audio/files.py", "import soundfile\nimport wave\n")
    plant(tmp_path, "engines/x/engine.py", "from mizuoto.audio.torchaudio_sinc import resample\n"
                                           "from mizuoto.audio import files, librosa_soxr\nimport waveform_tools\n")
    assert rules.check_audio_io_in_audio(tmp_path) == []


# ---------------------------------------------------------------------------------------------------
# Rule 7: engines stand on the runtime, nn, audio, core and the declaration types only

@pytest.mark.parametrize("code, lines", [
    ("from mizuoto.host.handles import ModelHandle\n", [1]),
    ("from mizuoto.host import local\n", [1]),
    ("from mizuoto import engines\n", [1]),
    ("import mizuoto.doctor\n", [1]),
    ("from mizuoto.engines.whisper import model\n", [1]),
    ("from mizuoto.engines import registry\n", [1]),
    ("def late():\n    from mizuoto.cli import main\n    return main\n", [2]),
])
def test_engine_imports_above_the_runtime_are_flagged(tmp_path, code, lines):
    plant(tmp_path, "engines/x/engine.py", code)
    assert located(rules.check_engines_stand_on_the_runtime(tmp_path)) == [("engines/x/engine.py", n) for n in lines]


def test_engine_imports_of_the_layers_below_and_its_own_package_are_allowed(tmp_path):
    plant(tmp_path, "engines/x/engine.py", """
        import torch
        from mizuoto.runtime.handles import ModelHandle
        from mizuoto.runtime import accel
        from mizuoto.nn.qwen import QwenDecoder
        from mizuoto.audio import librosa_soxr
        from mizuoto.core.errors import InputError
        from mizuoto.engines.spec import EngineSpec
        from mizuoto.engines.x import model
        from . import config
        from .checkpoint import load
    """)
    assert rules.check_engines_stand_on_the_runtime(tmp_path) == []
