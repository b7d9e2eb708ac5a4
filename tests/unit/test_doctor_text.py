"""The doctor report for a person (mizuoto.doctor_text: sections, readable, summary), from a fixed report: no
probes, no torch calls."""

from __future__ import annotations

import copy

from mizuoto import doctor_text

REPORT = {
    "mizuoto": "0.1.0", "python": "3.11.7", "platform": "Linux-x86_64", "torch": "2.13.0+cpu",
    "cpu": {"threads": 2, "capability": "AVX512", "applied": {"MALLOC_ARENA_MAX": "4"}},
    "cuda": {"available": False, "devices": []},
    "packages": {"numpy": "2.4.6"},
    "audio_files": {"libsndfile": "1.2.2", "reads": ["AIFF", "FLAC", "MP3", "OGG", "WAV"],
                    "writes": [".wav", ".flac", ".ogg", ".mp3"]},
    "settings_file": None,
    "settings": {"compute.cuda_graphs": {"value": True, "from": "default"},
                 "compute.fast": {"value": ["tf32"], "from": "MIZUOTO_COMPUTE__FAST"},
                 "engines.f5tts.load_options.vocoder": {"value": "", "from": "default"}},
    "engines": {
        "dummy": {"name": "Dummy", "weights_license": "Apache-2.0", "builtin_weights": True,
                  "models": {"folder": "/comfy/models/tts/dummy", "installed": [], "downloadable": []}},
        "qwen3tts": {"name": "Qwen3-TTS", "weights_license": "Apache-2.0", "builtin_weights": False,
                     "models": {"folder": "/comfy/models/tts/qwen3tts",
                                "installed": [{"name": "Qwen3-TTS-12Hz-0.6B-Base",
                                               "path": "/comfy/models/tts/qwen3tts/Qwen3-TTS-12Hz-0.6B-Base"}],
                                "downloadable": [{"choice": "hf:Qwen/Qwen3-TTS-12Hz-0.6B-Base", "downloaded": True},
                                                 {"choice": "hf:Qwen/Qwen3-TTS-12Hz-1.7B-Base",
                                                  "downloaded": False}]}},
        "f5tts": {"name": "F5-TTS", "weights_license": "CC-BY-NC-4.0", "builtin_weights": False,
                  "models": {"folder": "/comfy/models/tts/f5tts", "installed": [], "downloadable": []}},
        "whisper": {"name": "Whisper", "weights_license": "MIT", "builtin_weights": False,
                    "models": {"error": "OSError: permission denied"}},
    },
    "attention_sites": ["dummy.attn"],
    "acceleration": {
        "settings": {}, "fast_applied": [],
        "packages": {"flash-attn": None, "xformers": "0.0.35"},
        "devices": [{"device": "cpu", "name": "cpu",
                     "backends": {"math": {"ok": True, "error": 0.0}, "cpu_flash": {"ok": True}}}],
        "install": {"flash": "pip install flash-attn --no-build-isolation --no-deps",
                    "xformers": "pip install xformers==0.0.35 --no-deps"},
        "kernels": [{"backend": "flash", "package": "flash-attn", "version": None, "devices": ["cuda"],
                     "install": "pip install flash-attn --no-build-isolation --no-deps"},
                    {"backend": "xformers", "package": "xformers", "version": "0.0.35", "devices": ["cuda"],
                     "install": "pip install xformers==0.0.35 --no-deps"}],
    },
}


def items_of(report, title):
    (section,) = [s for s in doctor_text.sections(report) if s["title"] == title]
    return section["items"]


def test_three_sections_in_order():
    assert [s["title"] for s in doctor_text.sections(REPORT)] == [
        "What runs here", "Engines and their models", "Settings in force"]


def test_what_runs_here_names_devices_backends_and_install_commands():
    items = items_of(REPORT, "What runs here")
    texts = [i["text"] for i in items]
    assert "GPU: none (torch sees no CUDA device; engines run on the CPU)" in texts
    assert "Attention on cpu: math, cpu_flash" in texts
    (flash,) = [i for i in items if "flash-attn" in i["text"]]
    assert flash["text"].startswith("Optional kernel flash-attn (CUDA GPUs only): not installed")
    assert flash["code"] == "pip install flash-attn --no-build-isolation --no-deps"
    (xformers,) = [i for i in items if "xformers" in i["text"]]
    assert xformers["level"] == "ok" and "code" not in xformers and "0.0.35: installed" in xformers["text"]
    assert any(t.startswith("Audio files: libsndfile 1.2.2 reads WAV, FLAC, MP3, OGG and 1 more; writes .wav")
               for t in texts)


def test_a_failed_probe_and_a_gpu_are_reported():
    report = copy.deepcopy(REPORT)
    report["cuda"] = {"available": True, "devices": ["NVIDIA H200"]}
    report["acceleration"]["devices"] = [
        {"device": "cpu", "name": "cpu", "backends": {"math": {"ok": True}}},
        {"device": "cuda:0", "name": "NVIDIA H200",
         "backends": {"sdpa_flash": {"ok": True}, "sage": {"ok": False, "reason": "sageattention is not installed"}}}]
    texts = [i["text"] for i in items_of(report, "What runs here")]
    assert "GPU: cuda:0 NVIDIA H200" in texts
    assert "Attention on cuda:0 (NVIDIA H200): sdpa_flash" in texts
    assert "not here: sage ✗ (sageattention is not installed)" in texts
    report["acceleration"]["devices"] = {"error": "the probe process exited with status -11"}
    (failed,) = [i for i in items_of(report, "What runs here") if "probed" in i["text"]]
    assert failed["level"] == "warn" and "status -11" in failed["text"]


def test_engines_list_their_folder_installed_models_and_downloads():
    items = items_of(REPORT, "Engines and their models")
    texts = [i["text"] for i in items]
    assert "Qwen3-TTS (qwen3tts) · weights licence Apache-2.0" in texts
    folders = [i["code"] for i in items if i["text"] == "put models in:"]
    assert folders == ["/comfy/models/tts/dummy", "/comfy/models/tts/qwen3tts", "/comfy/models/tts/f5tts"]
    (installed,) = [i for i in items if i["text"].startswith("installed: Qwen3")]
    assert installed["code"] == "/comfy/models/tts/qwen3tts/Qwen3-TTS-12Hz-0.6B-Base" and installed["level"] == "ok"
    assert "downloaded: hf:Qwen/Qwen3-TTS-12Hz-0.6B-Base" in texts
    assert "the loader downloads on first use: hf:Qwen/Qwen3-TTS-12Hz-1.7B-Base" in texts
    assert "built-in weights: nothing to install" in texts
    assert texts.count("installed: none yet") == 1  # F5-TTS; the dummy has built-in weights
    assert "models: OSError: permission denied" in texts


def test_settings_in_force_say_where_each_comes_from():
    texts = [i["text"] for i in items_of(REPORT, "Settings in force")]
    assert texts[0].startswith("Settings file: none")
    assert "compute.cuda_graphs = on (default)" in texts
    assert "compute.fast = tf32 (from MIZUOTO_COMPUTE__FAST)" in texts
    assert "engines.f5tts.load_options.vocoder = (not set) (default)" in texts


def test_readable_text_has_a_title_sections_and_commands_on_their_own_line():
    text = doctor_text.readable(REPORT)
    lines = text.splitlines()
    assert lines[0] == "Mizuoto Doctor (Mizuoto 0.1.0)"
    for title in ("What runs here", "Engines and their models", "Settings in force"):
        i = lines.index(title)
        assert lines[i + 1] == "-" * len(title)
    i = lines.index("  Optional kernel flash-attn (CUDA GPUs only): not installed; to add it (keeps your torch):")
    assert lines[i + 1] == "      pip install flash-attn --no-build-isolation --no-deps"
    assert "    ! models: OSError: permission denied" in lines
    assert "{" not in text  # no JSON


def test_summary_for_the_node():
    assert doctor_text.summary(REPORT).splitlines() == [
        "torch 2.13.0+cpu · CPU only (no CUDA GPU)",
        "attention on cpu: math, cpu_flash",
        "not installed (optional): flash-attn",
        "models installed: dummy built-in, qwen3tts 1, f5tts 0, whisper 0",
        "Full report: Mizuoto → Mizuoto Doctor in the menu",
    ]


def test_an_older_report_without_kernels_or_models_still_reads():
    report = copy.deepcopy(REPORT)
    del report["acceleration"]["kernels"]
    for engine in report["engines"].values():
        del engine["models"]
    text = doctor_text.readable(report)
    assert "pip install flash-attn --no-build-isolation --no-deps" in text and "models: not reported" in text
    assert doctor_text.summary({}).splitlines()[-1] == "Full report: Mizuoto → Mizuoto Doctor in the menu"
