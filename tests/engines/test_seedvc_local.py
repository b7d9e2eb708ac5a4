"""Seed-VC without upstream: where its files are found and downloaded, its one-line refusals, the request's
generator, progress and cancel, and upstream's window and cross-fade arithmetic. The comparison with upstream's
own conversion is tests/engines/test_seedvc_engine.py."""

import re
import shutil
import sys
import types
from pathlib import Path

import numpy as np
import pytest
import torch

pytest.importorskip("transformers")  # the tiny content encoder's folder is written by transformers

import seedvc_tiny  # noqa: E402  (tests/, on the path through conftest)

from mizuoto.core.errors import CheckpointError, InputError  # noqa: E402
from mizuoto.engines.seedvc import convert as seedvc_convert  # noqa: E402
from mizuoto.host import convert, load_model  # noqa: E402
from mizuoto.runtime.context import Cancelled, RequestContext  # noqa: E402


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    return seedvc_tiny.build(tmp_path_factory.mktemp("seedvc") / "model")


def tone(seconds: float, rate: int, hz: float = 220.0) -> torch.Tensor:
    t = torch.arange(int(seconds * rate)) / rate
    return 0.3 * torch.sin(2 * torch.pi * hz * t) * (1 + 0.2 * torch.sin(2 * torch.pi * 3 * t))


def test_a_conversion_is_the_sources_length_at_22050_and_the_seed_decides_it(tiny):
    loaded = load_model("seedvc", str(tiny), device="cpu",
                        overrides={"engines.seedvc.load_options.precision": "float32"})
    source, reference = (tone(1.5, 44100), 44100), (tone(2.0, 16000, 330.0), 16000)
    first = convert(loaded, source, reference, seed=3, params={"diffusion_steps": 2})
    again = convert(loaded, source, reference, seed=3, params={"diffusion_steps": 2})
    other = convert(loaded, source, reference, seed=4, params={"diffusion_steps": 2})
    frames = 1 + (int(1.5 * 22050) + 768 - 1024) // 256  # the source's mel frames
    assert first.sample_rate == 22050 and first.waveform.shape == (1, frames * 256)
    assert torch.equal(first.waveform, again.waveform) and not torch.equal(first.waveform, other.waveform)
    assert first.report["convert"] == {"diffusion_steps": 2, "length_adjust": 1.0, "inference_cfg_rate": 0.7,
                                       "auto_f0_adjust": True, "pitch_shift": 0,  # (the F0 two unused here)
                                       # (v2's)
                                       "intelligibility_cfg_rate": 0.7, "similarity_cfg_rate": 0.7,
                                       "convert_style": False, "anonymization_only": False, "top_p": 0.9,
                                       "temperature": 1.0, "repetition_penalty": 1.0}
    shorter = convert(loaded, source, reference, seed=3, params={"diffusion_steps": 1, "length_adjust": 0.5})
    assert shorter.waveform.shape[-1] == int(frames * 0.5) * 256


def test_progress_counts_the_windows_and_a_cancel_stops_it(tiny):
    loaded = load_model("seedvc", str(tiny), device="cpu",
                        overrides={"engines.seedvc.load_options.precision": "float32"})
    updates = []
    ctx = RequestContext(1, progress=lambda done, total: updates.append((done, total)))
    convert(loaded, (tone(1.0, 22050), 22050), (tone(1.0, 22050), 22050), params={"diffusion_steps": 1}, ctx=ctx)
    assert updates == [(0, 1), (1, 1)]
    ctx = RequestContext(1)
    ctx.cancel()
    with pytest.raises(Cancelled):
        convert(loaded, (tone(1.0, 22050), 22050), (tone(1.0, 22050), 22050), ctx=ctx)


def test_upstreams_window_loop_and_cross_fade():
    # a 2580-frame context less a 258-frame prompt: windows of 2322 frames that share 16 with the next
    assert seedvc_convert.windows(100, 2322) == 1 and seedvc_convert.windows(2322, 2322) == 1
    assert seedvc_convert.windows(2323, 2322) == 2 and seedvc_convert.windows(2322 * 2 - 16, 2322) == 2
    assert seedvc_convert.windows(2322 * 2 - 15, 2322) == 3
    previous = np.linspace(-1, 1, 50, dtype=np.float32)
    chunk = np.linspace(1, 0, 40, dtype=np.float32)
    fade_out, fade_in = np.cos(np.linspace(0, np.pi / 2, 16)) ** 2, np.cos(np.linspace(np.pi / 2, 0, 16)) ** 2
    want = chunk.copy()
    want[:16] = chunk[:16] * fade_in + previous[-16:] * fade_out
    got = seedvc_convert.crossfade(previous, chunk.copy(), 16)
    assert got.dtype == np.float32 and np.array_equal(got, want)
    short = seedvc_convert.crossfade(previous, chunk[:10].copy(), 16)  # upstream's branch for a short last chunk
    assert np.array_equal(short, (chunk[:10] * fade_in[:10] + (previous[-16:] * fade_out)[:10]).astype(np.float32))


def test_its_files_are_found_beside_it_as_downloads_lay_them_out(tiny, tmp_path):
    base = tmp_path / "seedvc"
    model = base / "Plachta--Seed-VC"
    model.mkdir(parents=True)
    for name in ("DiT_seed_v2_uvit_whisper_small_wavenet_bigvgan_pruned.pth",
                 "config_dit_mel_seed_uvit_whisper_small_wavenet.yml"):
        shutil.copy(tiny / name, model / name)
    shutil.copytree(tiny / "whisper-small", base / "openai--whisper-small")
    shutil.copytree(tiny / "bigvgan_v2_22khz_80band_256x", base / "nvidia--bigvgan_v2_22khz_80band_256x")
    with pytest.raises(CheckpointError) as error:
        load_model("seedvc", str(model), device="cpu")
    assert str(error.value) == (f"Seed-VC needs CAM++ (funasr/campplus): put campplus_cn_common.bin in "
                                f"{base / 'funasr--campplus'} or in {model}")
    (base / "funasr--campplus").mkdir()
    shutil.copy(tiny / "campplus_cn_common.bin", base / "funasr--campplus")
    loaded = load_model("seedvc", str(model / "DiT_seed_v2_uvit_whisper_small_wavenet_bigvgan_pruned.pth"),
                        device="cpu")
    assert loaded.state.source.endswith("Plachta--Seed-VC/DiT_seed_v2_uvit_whisper_small_wavenet_bigvgan_pruned.pth")
    shutil.rmtree(base / "openai--whisper-small")
    with pytest.raises(CheckpointError, match="Seed-VC needs its Whisper content encoder \\(openai/whisper-small\\): "
                                              f"put its files in {base / 'openai--whisper-small'}"):
        load_model("seedvc", str(model), device="cpu")


def test_a_download_fetches_the_model_and_its_assets_with_only_the_files_it_reads(tiny, tmp_path, monkeypatch):
    """hf:Plachta/Seed-VC is the offline model; #realtime and #singing are the repo's other two models, each
    fetching only its own files into the same folder (and its assets beside it) and giving the loader its
    checkpoint; a complete download is not fetched again."""
    from mizuoto import engines
    from mizuoto.host import catalog, download

    data = Path(__file__).resolve().parents[1] / "parity" / "data"
    realtime, singing = data / "seedvc_realtime" / "model", data / "seedvc_svc" / "model"
    v2 = data / "seedvc_v2" / "model"
    hubert = tmp_path / "hubert"  # the released HuBERT repo holds pytorch_model.bin too
    shutil.copytree(v2 / "hubert-large-ll60k", hubert)
    xlsr = tmp_path / "xlsr"  # the released XLS-R repo holds pytorch_model.bin
    shutil.copytree(realtime / "wav2vec2-xls-r-300m", xlsr)
    from safetensors.torch import load_file

    torch.save(load_file(str(xlsr / "model.safetensors")), xlsr / "pytorch_model.bin")
    torch.save(load_file(str(hubert / "model.safetensors")), hubert / "pytorch_model.bin")
    (hubert / "model.safetensors").unlink()
    sources = {"Plachta/Seed-VC": (tiny, realtime, singing, v2),
               "Plachta/ASTRAL-quantization": (v2 / "ASTRAL-quantization",), "facebook/hubert-large-ll60k": (hubert,),
               "openai/whisper-small": (tiny / "whisper-small",),
               "nvidia/bigvgan_v2_22khz_80band_256x": (tiny / "bigvgan_v2_22khz_80band_256x",),
               "nvidia/bigvgan_v2_44khz_128band_512x": (singing / "bigvgan_v2_44khz_128band_512x",),
               "funasr/campplus": (tiny,), "facebook/wav2vec2-xls-r-300m": (xlsr,),
               "FunAudioLLM/CosyVoice-300M": (realtime / "CosyVoice-300M",),
               "lj1995/VoiceConversionWebUI": (singing / "VoiceConversionWebUI",)}
    calls = []

    def snapshot_download(repo_id, local_dir, allow_patterns=None):
        calls.append((repo_id, tuple(allow_patterns or ())))
        for name in allow_patterns:
            source = next(folder / name for folder in sources[repo_id] if (folder / name).is_file())
            (Path(local_dir) / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(source, Path(local_dir) / name)

    hub = types.ModuleType("huggingface_hub")
    hub.snapshot_download = snapshot_download
    monkeypatch.setitem(sys.modules, "huggingface_hub", hub)
    spec = engines.get("seedvc")
    base = str(tmp_path / "tts")
    offered = catalog.downloadable(spec, base)
    assert [e["choice"] for e in offered] == ["hf:Plachta/Seed-VC", "hf:Plachta/Seed-VC#realtime",
                                              "hf:Plachta/Seed-VC#singing", "hf:Plachta/Seed-VC#v2"]
    assert not any(e["downloaded"] for e in offered)
    path = catalog.resolve(spec, "hf:Plachta/Seed-VC", base)
    folder = tmp_path / "tts" / "seedvc" / "Plachta--Seed-VC"
    assert path == str(folder)
    assert calls == [("Plachta/Seed-VC", ("DiT_seed_v2_uvit_whisper_small_wavenet_bigvgan_pruned.pth",
                                          "config_dit_mel_seed_uvit_whisper_small_wavenet.yml")),
                     ("openai/whisper-small", ("config.json", "model.safetensors")),
                     ("nvidia/bigvgan_v2_22khz_80band_256x", ("config.json", "bigvgan_generator.pt")),
                     ("funasr/campplus", ("campplus_cn_common.bin",))]
    assert load_model("seedvc", path, device="cpu").state.mel.sample_rate == 22050

    del calls[:]
    path = catalog.resolve(spec, "hf:Plachta/Seed-VC#realtime", base)
    assert path == str(folder / "DiT_uvit_tat_xlsr_ema.pth")
    # the shared folders are complete already: only the model's own files and its new assets are fetched
    assert [repo for repo, _ in calls] == ["Plachta/Seed-VC", "facebook/wav2vec2-xls-r-300m",
                                           "FunAudioLLM/CosyVoice-300M"]
    # (its hift.pt config: the tiny one's hifigan.yml is not downloaded, so drop it in)
    shutil.copy(realtime / "CosyVoice-300M" / "hifigan.yml",
                tmp_path / "tts" / "seedvc" / "FunAudioLLM--CosyVoice-300M")
    assert load_model("seedvc", path, device="cpu").state.rmvpe is None

    del calls[:]
    path = catalog.resolve(spec, "hf:Plachta/Seed-VC#singing", base)
    assert path == str(folder / "DiT_seed_v2_uvit_whisper_base_f0_44k_bigvgan_pruned_ft_ema.pth")
    assert [repo for repo, _ in calls] == ["Plachta/Seed-VC", "nvidia/bigvgan_v2_44khz_128band_512x",
                                           "lj1995/VoiceConversionWebUI"]
    # the offline model's tiny campplus differs from the singing one's: the singing set's own is beside it
    shutil.copy(singing / "campplus_cn_common.bin", folder / "campplus_cn_common.bin")
    # (and its Whisper is the tiny offline one, which the singing set shares in size)
    loaded = load_model("seedvc", path, device="cpu")
    assert loaded.state.mel.sample_rate == 44100 and loaded.state.rmvpe is not None

    del calls[:]
    path = catalog.resolve(spec, "hf:Plachta/Seed-VC#v2", base)
    assert path == str(folder / "v2" / "cfm_small.pth")
    assert [repo for repo, _ in calls] == ["Plachta/Seed-VC", "Plachta/ASTRAL-quantization",
                                           "facebook/hubert-large-ll60k"]
    shutil.copy(v2 / "campplus_cn_common.bin", folder / "campplus_cn_common.bin")  # the v2 set's own tiny CAM++
    shutil.copy(v2 / "v2" / "vc_wrapper.yaml", folder / "v2")  # (the tiny sizes: the repo has no yaml)
    assert type(load_model("seedvc", path, device="cpu").state).__name__ == "SeedVCV2Loaded"
    assert all(e["downloaded"] for e in catalog.downloadable(spec, base))

    del calls[:]
    for choice in ("hf:Plachta/Seed-VC", "hf:Plachta/Seed-VC#realtime", "hf:Plachta/Seed-VC#singing",
                   "hf:Plachta/Seed-VC#v2"):
        catalog.resolve(spec, choice, base)
    assert calls == []  # complete downloads are not fetched again
    assert (folder / download.COMPLETE).is_file() and (folder / f"{download.COMPLETE}-singing").is_file()
    with pytest.raises(InputError, match=re.escape("offers no model 'hf:Plachta/Seed-VC#v3'; pick one of "
                                                   "hf:Plachta/Seed-VC#realtime, hf:Plachta/Seed-VC#singing, "
                                                   "hf:Plachta/Seed-VC#v2")):
        catalog.resolve(spec, "hf:Plachta/Seed-VC#v3", base)


def test_what_it_does_not_convert_yet_is_one_line(tiny, tmp_path):
    import yaml

    for section, key, value, message in (
            ("speech_tokenizer", "type", "cnhubert", "uses the cnhubert content encoder; only Whisper (v1 offline) "
                                                     "and XLS-R (v1 real-time)"),
            ("vocoder", "type", "vocos", "uses the vocos vocoder; only BigVGAN (v1 offline) and HiFT (v1 real-time)"),
            # a model that takes F0 needs RMVPE beside it
            ("length_regulator", "f0_condition", True, "Seed-VC needs RMVPE, its F0 estimator")):
        folder = tmp_path / section
        shutil.copytree(tiny, folder)
        preset_file = folder / "config_dit_mel_seed_uvit_whisper_small_wavenet.yml"
        preset = yaml.safe_load(preset_file.read_text())
        preset["model_params"][section][key] = value
        preset_file.write_text(yaml.safe_dump(preset))
        with pytest.raises(CheckpointError, match=re.escape(message)):
            load_model("seedvc", str(folder), device="cpu")
    with pytest.raises(InputError, match="Seed-VC loads in float32"):
        load_model("seedvc", str(tiny), device="cpu", dtype="bfloat16")
    two = tmp_path / "two"
    shutil.copytree(tiny, two)
    (two / "DiT_seed_v2_uvit_whisper_small_wavenet_bigvgan_pruned.pth").rename(two / "a.pth")
    shutil.copy(two / "a.pth", two / "b.pth")
    with pytest.raises(CheckpointError, match="it has 2 .pth files: point at one"):
        load_model("seedvc", str(two), device="cpu")


@pytest.mark.parametrize("name,value", [("intelligibility_cfg_rate", 0.0), ("similarity_cfg_rate", 0.3),
                                        ("convert_style", True), ("anonymization_only", True), ("top_p", 0.5),
                                        ("temperature", 0.8), ("repetition_penalty", 1.5)])
def test_v2_parameters_on_a_v1_model_are_refused_in_one_line(tiny, name, value):
    loaded = load_model("seedvc", str(tiny), device="cpu")
    wave = (torch.sin(torch.arange(22050) / 10.0)[None] * 0.3, 22050)
    with pytest.raises(InputError, match=f"^{name} does not apply to Seed-VC v1 models") as error:
        convert(loaded, wave, wave, seed=1, params={"diffusion_steps": 1, name: value})
    assert "\n" not in str(error.value)


def test_the_trace_names_every_stage(tiny):
    from mizuoto.engines.seedvc import engine

    loaded = load_model("seedvc", str(tiny), device="cpu",
                        overrides={"engines.seedvc.load_options.precision": "float32"})
    values = {"diffusion_steps": 1, "length_adjust": 1.0, "inference_cfg_rate": 0.0}
    wave, rate, trace = engine.convert_with_trace(loaded.state, (tone(1.0, 22050), 22050), (tone(1.0, 16000), 16000),
                                                  RequestContext(0), values)
    assert set(trace) == {"source_22k", "reference_22k", "source_16k", "reference_16k", "S_alt", "S_ori", "mel",
                          "mel2", "feat2", "style2", "cond", "prompt_condition", "vc_target/0", "vc_wave/0"}
    assert trace["S_alt"].shape == (1, 22050 * 16000 // 22050 // 320 + 1, 48) and trace["style2"].shape == (1, 192)
    assert torch.equal(trace["vc_wave/0"], wave)


def test_compute_compile_compiles_the_vocoder_and_keeps_its_samples(tiny, monkeypatch):
    from helpers import record_compiles

    calls = record_compiles(monkeypatch)
    args = dict(device="cpu", overrides={"engines.seedvc.load_options.precision": "float32"})
    eager = load_model("seedvc", str(tiny), **args)
    compiled = load_model("seedvc", str(tiny), **{**args, "overrides": {**args["overrides"], "compute.compile": True}})
    assert compiled.state.s2mel is eager.state.s2mel  # the same weights: nothing reloaded
    source, reference = (tone(1.0, 22050), 22050), (tone(1.0, 22050, 300.0), 22050)
    want = convert(eager, source, reference, seed=2, params={"diffusion_steps": 1}).waveform
    assert not calls
    got = convert(compiled, source, reference, seed=2, params={"diffusion_steps": 1}).waveform
    assert calls == ["BigVGAN"] and torch.equal(got, want)


def test_the_cfm_solve_replays_as_one_graph_per_window_with_the_eager_samples(tiny, monkeypatch):
    from helpers import EmulatedGraphs

    loaded = load_model("seedvc", str(tiny), device="cpu",
                        overrides={"engines.seedvc.load_options.precision": "float32"})
    source, reference = (tone(1.0, 22050), 22050), (tone(1.0, 22050, 300.0), 22050)
    want = [convert(loaded, source, reference, seed=s, params={"diffusion_steps": 2}).waveform for s in (1, 2)]
    graphs = EmulatedGraphs()
    monkeypatch.setattr(loaded.state.handle, "graphs_for", lambda option: graphs)
    got = [convert(loaded, source, reference, seed=s, params={"diffusion_steps": 2}).waveform for s in (1, 2)]
    assert all(torch.equal(a, b) for a, b in zip(got, want, strict=True))
    assert graphs.captures == 1  # one window shape: captured once, replayed for the second request


# --- the real-time model (XLS-R content, HiFT): its lookup and its generator draws ----------------------------------
# (the comparison with upstream's own conversions is tests/engines/test_seedvc_realtime.py)

PARITY = Path(__file__).resolve().parents[1] / "parity" / "data"
OFFLINE_FILES = ("DiT_seed_v2_uvit_whisper_small_wavenet_bigvgan_pruned.pth",
                 "config_dit_mel_seed_uvit_whisper_small_wavenet.yml")


def test_a_folder_with_both_models_loads_the_offline_one_and_the_real_time_checkpoint_takes_its_own_preset(tmp_path):
    from mizuoto.engines.seedvc.content import XLSRContent
    from mizuoto.nn import hift

    folder = tmp_path / "Plachta--Seed-VC"
    shutil.copytree(PARITY / "seedvc_realtime" / "model", folder)
    for name in OFFLINE_FILES:
        shutil.copy(PARITY / "seedvc" / "model" / name, folder / name)
    for name in ("whisper-small", "bigvgan_v2_22khz_80band_256x"):
        shutil.copytree(PARITY / "seedvc" / "model" / name, folder / name)
    offline = load_model("seedvc", str(folder), device="cpu").state
    assert offline.source.endswith(OFFLINE_FILES[0]) and not isinstance(offline.content, XLSRContent)
    assert offline.mel.f_max is None  # the offline wrapper's fmax, whatever the preset says
    realtime = load_model("seedvc", str(folder / "DiT_uvit_tat_xlsr_ema.pth"), device="cpu").state
    assert isinstance(realtime.content, XLSRContent) and isinstance(realtime.vocoder, hift.HiFTGenerator)
    assert realtime.mel.f_max == 8000.0


def test_xls_r_content_draws_upstreams_layerdrop_coins_from_the_cpu_generator():
    """transformers' encoder draws torch.rand([]) per layer, in eval too: one per kept layer per 30 s window."""
    from mizuoto.engines.seedvc.content import content_features

    state = load_model("seedvc", str(PARITY / "seedvc_realtime" / "model"), device="cpu").state
    layers = len(state.content.encoder.encoder.layers)
    generator, fresh = torch.Generator().manual_seed(9), torch.Generator().manual_seed(9)
    with torch.inference_mode():
        features = content_features(state.content, tone(1.0, 16000)[None], generator)
    assert features.dtype == torch.float32 and features.shape == (1, 49, state.content.encoder.config.hidden_size)
    for _ in range(layers):
        torch.rand((), generator=fresh)
    assert torch.equal(torch.rand(4, generator=generator), torch.rand(4, generator=fresh))
