"""RMVPE (mizuoto/nn/rmvpe.py, mizuoto/audio/rmvpe_mel.py) against seed-vc 0.4.3's `modules/rmvpe.py`.

Against tests/parity/data/nn/rmvpe (scripts/parity/seedvc_rmvpe_references.py; torch 2.13, one thread, avx2,
oneDNN off, upstream's RMVPE built by its own __init__ from a temporary rmvpe.pt), compared bitwise in a pinned
subprocess:
- the mel filter bank (librosa's HTK bank) and the Hann window, by sha256;
- three E2E configurations with every tensor drawn by `procedural_state` (the writer's, from
  scripts/parity/seedvc_weights.py, rebuilt here; no weights are stored): a small one, an odd one (identity
  shortcuts, 2 GRU layers, kernel (1, 2)) and
  rmvpe.pt's real E2E(4, 1, (2, 2)) (90 M parameters), loaded through `load_rmvpe` from upstream's key names;
- per recording (600 samples, silence, 0.6 s + 77 samples given as float64 numpy, a 2 s vibrato tone, ...):
  the log-mel, the salience from upstream's mel (`mel2hidden` alone), the cents from our own salience end to end
  (`local_average_cents`) and the F0 of `infer_from_audio` (float64, as upstream returns it) at the default
  threshold 0.03 and, where stored, at a threshold that splits the frames or zeroes a silence; a batch of two
  through `infer_from_audio_batch` (where upstream's GRU takes its trainable-weights route);
- `decode` and `local_average_cents` on a designed salience (peaks at both ends of the bins, ties, a maximum
  equal to the threshold) at four thresholds.
Everything is bitwise except the F0's last step, numpy's float64 `10 * 2 ** (cents / 1200)` of bitwise-equal
cents: its last bits depend on the numpy build and the CPU features it dispatches to, and upstream's venv has
numpy 1.26.4, ours 2.4.6. Measured over 2 M values in the F0 range on this AVX-512 machine the two differ on
22 % of them by 1 or 2 ulps (about 4e-13 Hz at 1 kHz; numpy 1.26.4 with its AVX-512 code disabled differs from
itself by as much), so the F0 is compared within 2 ulps with identical unvoiced frames; under one numpy build
ours is upstream's call itself.
In process: checkpoint layouts (upstream's keys), strict loading with one-line errors, float16 checkpoints and
an absent num_batches_tracked, config and input errors, output lengths and dtypes, the decode's arithmetic on
hand-made salience, no host reads in the network's forward.
"""

import functools
import json
import math
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from mizuoto.audio import rmvpe_mel
from mizuoto.core.errors import CheckpointError, InputError
from mizuoto.nn import rmvpe

if __name__ == "__main__":  # run as the pinned script: tests/ (helpers.py) is not on the path yet
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from helpers import HostReads, parity_module, reference_dir, run_pinned  # noqa: E402

procedural_state = parity_module("seedvc_weights").rmvpe_state  # the writer's seeded weights

REFERENCES = Path(__file__).resolve().parents[1] / "parity" / "data" / "nn" / "rmvpe"




def config_of(arguments: dict) -> rmvpe.RMVPEConfig:
    return rmvpe.RMVPEConfig(**dict(arguments, kernel_size=tuple(arguments["kernel_size"])))


def diff(ours, theirs):
    """0.0 when bitwise equal (same dtype and shape); the max abs difference otherwise; None when shape or dtype
    differ. Tensors or numpy arrays."""
    ours = ours.detach().cpu().numpy() if isinstance(ours, torch.Tensor) else np.asarray(ours)
    theirs = theirs.numpy() if isinstance(theirs, torch.Tensor) else np.asarray(theirs)
    if ours.shape != theirs.shape or ours.dtype != theirs.dtype:
        return None
    if np.array_equal(ours, theirs):
        return 0.0
    return float(np.abs(ours.astype(np.float64) - theirs.astype(np.float64)).max())


def ulps(ours, theirs):
    """For float64 F0 tracks: 0.0 when bitwise equal; else the largest difference in units of upstream's last
    place (np.spacing); None when shape or dtype differ or a zero (unvoiced frame) moved."""
    ours = ours.detach().cpu().numpy() if isinstance(ours, torch.Tensor) else np.asarray(ours)
    theirs = theirs.numpy() if isinstance(theirs, torch.Tensor) else np.asarray(theirs)
    if ours.shape != theirs.shape or ours.dtype != theirs.dtype or not np.array_equal(ours == 0, theirs == 0):
        return None
    if np.array_equal(ours, theirs):
        return 0.0
    return float((np.abs(ours - theirs) / np.spacing(np.abs(theirs))).max())


def as_audio(pcm: torch.Tensor, passed_as: str):
    """The writer's input: int16 PCM / 32768 as a float32 tensor, or as float64 numpy."""
    if passed_as == "float64":
        return pcm.numpy().astype(np.float64) / 32768
    return pcm.long().float() / 32768


def run_recording(model: rmvpe.RMVPE, name: str, case: dict, refs: dict, out: dict) -> None:
    audio = as_audio(refs[case["pcm"]], case["passed_as"])
    tensor = torch.from_numpy(audio) if isinstance(audio, np.ndarray) else audio
    mel = model.mel(tensor.float().unsqueeze(0))
    out[f"{name}/mel"] = diff(mel, refs[case["mel"]])
    out[f"{name}/hidden"] = diff(model.mel2hidden(refs[case["mel"]]), refs[case["hidden"]])
    ours = model.mel2hidden(mel)[0].numpy()  # end to end from our own mel
    for kind, thred in (("", case["thred"]), ("_split", case.get("thred_split")),
                        ("_zeroed", case.get("thred_zeroing"))):
        if f"f0{kind}" in case:
            out[f"{name}/cents{kind}"] = diff(rmvpe.local_average_cents(ours, thred), refs[case[f"cents{kind}"]])
            out[f"{name}/f0{kind}_ulps"] = ulps(model.infer_from_audio(audio, thred=thred), refs[case[f"f0{kind}"]])


def reference_diffs(folder: Path) -> dict:
    """Everything in the references, ours against upstream's: name -> diff()."""
    import hashlib

    from safetensors.torch import load_file

    refs = load_file(str(folder / "references.safetensors"))
    cases = json.loads((folder / "references.json").read_text())["cases"]
    out = {}
    bank = cases["bank"]
    ours = rmvpe_mel.mel_bank().numpy()
    out["bank/mel_basis"] = 0.0 if (hashlib.sha256(ours.tobytes()).hexdigest() == bank["mel_basis_sha256"]
                                    and list(ours.shape) == bank["mel_basis_shape"]) else None
    window = torch.hann_window(rmvpe_mel.WIN_LENGTH).numpy()
    out["bank/hann_window"] = 0.0 if hashlib.sha256(window.tobytes()).hexdigest() == \
        bank["hann_window_sha256"] else None
    for name, entry in cases.items():
        if not name.startswith("config/"):
            continue
        config_name = name[len("config/"):]
        config = config_of(entry["arguments"])
        layout = {k: tuple(v) for k, v in entry["layout"].items()}
        out[f"{name}/layout"] = 0.0 if rmvpe.checkpoint_layout(config) == layout else None
        model = rmvpe.load_rmvpe(procedural_state(layout, entry["seed"]), config)
        for case_name, case in cases.items():
            if case_name.startswith(f"case/{config_name}/"):
                run_recording(model, case_name, case, refs, out)
        if f"batch/{config_name}" in cases:
            batch = cases[f"batch/{config_name}"]
            audio = as_audio(refs[batch["pcm"]], "float32")
            prefix = f"batch/{config_name}"
            out[f"{prefix}/mel"] = diff(model.mel(audio), refs[batch["mel"]])
            out[f"{prefix}/hidden"] = diff(model.mel2hidden(refs[batch["mel"]]), refs[batch["hidden"]])
            ours = model.mel2hidden(model.mel(audio)).numpy()
            out[f"{prefix}/cents"] = diff(np.stack([rmvpe.local_average_cents(row, batch["thred"]) for row in ours]),
                                          refs[batch["cents"]])
            out[f"{prefix}/f0_ulps"] = ulps(model.infer_from_audio_batch(audio, thred=batch["thred"]),
                                            refs[batch["f0"]])
        del model
    decode = cases["decode"]
    salience = refs[decode["salience"]].numpy()
    out["decode/cents_default"] = diff(rmvpe.local_average_cents(salience), refs[decode["cents_default"]])
    for thred in decode["thresholds"]:
        out[f"decode/cents/{thred}"] = diff(rmvpe.local_average_cents(salience, thred),
                                            refs[decode["cents"][str(thred)]])
        out[f"decode/f0_ulps/{thred}"] = ulps(rmvpe.decode(salience, thred=thred), refs[decode["f0"][str(thred)]])
    return out


# ---------------------------------------------------------------------------------------------------------
# Against upstream's references (pinned subprocess)


F0_ULPS = 2  # numpy's float64 power: numpy 1.26.4 (upstream's venv) and 2.4.6 differ by up to 2 ulps


@functools.cache
def pinned_diffs() -> dict:
    return run_pinned(__file__, reference_dir("nn/rmvpe"), timeout=300)


@functools.cache
def stored_cases() -> dict:
    return json.loads((REFERENCES / "references.json").read_text())["cases"]


def test_references_are_reproduced_bit_for_bit():
    got = pinned_diffs()
    cases = stored_cases()
    recordings = [n for n in cases if n.startswith("case/")]
    assert len(recordings) == 8 and {n.split("/")[1] for n in recordings} == {"small", "odd", "real"}
    for name in recordings:
        for part in ("mel", "hidden", "cents", "f0_ulps"):
            assert f"{name}/{part}" in got, (name, part)
        for kind in ("split", "zeroed"):
            assert (f"f0_{kind}" in cases[name]) == (f"{name}/f0_{kind}_ulps" in got), (name, kind)
            assert (f"f0_{kind}" in cases[name]) == (f"{name}/cents_{kind}" in got), (name, kind)
    assert any("f0_zeroed" in cases[n] for n in recordings) and any(0 < cases[n]["voiced_at_default"] < 1
                                                                    for n in recordings)
    for config in ("small", "odd"):
        assert {f"batch/{config}/{part}" for part in ("mel", "hidden", "cents", "f0_ulps")} <= set(got)
    assert {f"config/{c}/layout" for c in ("small", "odd", "real")} <= set(got)
    assert {"bank/mel_basis", "bank/hann_window", "decode/cents_default"} <= set(got)
    for thred in cases["decode"]["thresholds"]:
        assert {f"decode/f0_ulps/{thred}", f"decode/cents/{thred}"} <= set(got)
    # everything bitwise, but the F0's last power (numpy's, see the module docstring): within F0_ULPS there,
    # with the same unvoiced frames
    bad = {name: value for name, value in got.items()
           if value != 0.0 and not ("_ulps" in name and value is not None and value <= F0_ULPS)}
    assert not bad, bad


# ---------------------------------------------------------------------------------------------------------
# In process

SMALL = rmvpe.RMVPEConfig(n_blocks=1, n_gru=1, kernel_size=(2, 2), en_de_layers=2, inter_layers=1,
                          en_out_channels=4)


@functools.cache
def small_state() -> dict:
    return procedural_state(rmvpe.checkpoint_layout(SMALL), 5)


def small_model() -> rmvpe.RMVPE:
    return rmvpe.load_rmvpe(small_state(), SMALL)


def test_the_default_config_is_rmvpe_pts():
    cases = stored_cases()
    assert config_of(cases["config/real"]["arguments"]) == rmvpe.RMVPEConfig()
    assert config_of(cases["config/small"]["arguments"]) == SMALL


def test_checkpoint_layouts_are_upstreams_state_dict_keys():
    for name in ("small", "odd", "real"):
        entry = stored_cases()[f"config/{name}"]
        layout = rmvpe.checkpoint_layout(config_of(entry["arguments"]))
        assert layout == {k: tuple(v) for k, v in entry["layout"].items()}, name
    real = rmvpe.checkpoint_layout()
    assert len(real) == 741 and sum(math.prod(s) for s in real.values()) == 90_472_917
    for key in ("unet.encoder.bn.running_var", "unet.encoder.layers.4.conv.3.conv.4.weight",
                "unet.encoder.layers.0.conv.0.shortcut.weight", "unet.intermediate.layers.3.conv.3.conv.0.weight",
                "unet.decoder.layers.4.conv1.0.weight", "unet.decoder.layers.0.conv2.0.shortcut.bias",
                "cnn.weight", "fc.0.gru.weight_hh_l0_reverse", "fc.1.bias"):
        assert key in real, key
    assert "unet.encoder.layers.0.conv.1.shortcut.weight" not in real  # equal widths: the identity


def test_loading_copies_every_tensor_in_float32_and_freezes():
    state = small_state()
    model = small_model()
    loaded = model.model.state_dict()
    assert loaded.keys() == state.keys()
    assert all(torch.equal(loaded[k], v) for k, v in state.items())
    assert all(loaded[k].data_ptr() != v.data_ptr() for k, v in state.items())  # fresh allocations
    assert not model.training and not any(p.requires_grad for p in model.parameters())


def test_float16_checkpoints_and_absent_batch_counters_load():
    """rmvpe.pt holds float16 tensors; torch's load_state_dict fills in a plain dict's missing counters."""
    state = small_state()
    half = {k: (v.half() if v.is_floating_point() else v) for k, v in state.items()
            if not k.endswith("num_batches_tracked")}
    model = rmvpe.load_rmvpe(half, SMALL)
    for key, value in model.model.state_dict().items():
        if key.endswith("num_batches_tracked"):
            assert value.item() == 0
        else:
            assert value.dtype == torch.float32 and torch.equal(value, half[key].float()), key


def test_the_file_loader_reads_a_pt(tmp_path):
    path = tmp_path / "rmvpe.pt"
    torch.save(small_state(), path)
    model = rmvpe.load_rmvpe_file(path, SMALL)
    assert torch.equal(model.model.cnn.weight, small_state()["cnn.weight"])
    (tmp_path / "bad.pt").write_bytes(b"not a checkpoint")
    with pytest.raises(CheckpointError) as error:
        rmvpe.load_rmvpe_file(tmp_path / "bad.pt", SMALL)
    assert "\n" not in str(error.value) and "bad.pt" in str(error.value)


@pytest.mark.parametrize("change", ["missing", "unexpected", "shape", "not_tensor", "integer", "not_mapping",
                                    "other_config"])
def test_bad_checkpoints_are_one_line_errors(change):
    state = dict(small_state())
    config = SMALL
    if change == "missing":
        del state["unet.decoder.layers.1.conv2.0.conv.4.running_var"]
    elif change == "unexpected":
        state["fc.2.weight"] = torch.zeros(1)
    elif change == "shape":
        state["fc.1.bias"] = torch.zeros(361)
    elif change == "not_tensor":
        state["cnn.bias"] = [0.0, 0.0, 0.0]
    elif change == "integer":
        state["cnn.bias"] = torch.zeros(3, dtype=torch.long)
    elif change == "not_mapping":
        state = [1, 2]
    else:
        config = rmvpe.RMVPEConfig()
    with pytest.raises(CheckpointError) as error:
        rmvpe.load_rmvpe(state, config, source="rmvpe.pt")
    assert "\n" not in str(error.value) and "rmvpe.pt" in str(error.value)


@pytest.mark.parametrize(("arguments", "words"), [
    ({"n_gru": 0}, "n_gru"), ({"n_blocks": 1.5}, "n_blocks"), ({"kernel_size": (3, 3)}, "kernel_size"),
    ({"en_de_layers": 6}, "en_de_layers"), ({"en_de_layers": 8, "kernel_size": (1, 2)}, "en_de_layers"),
    ({"en_out_channels": True}, "en_out_channels"),
])
def test_bad_configs_are_one_line_errors(arguments, words):
    with pytest.raises(CheckpointError) as error:
        rmvpe.RMVPEConfig(**arguments)
    assert words in str(error.value) and "\n" not in str(error.value)


@pytest.mark.parametrize("bad", ["two_dims", "too_short", "nan", "string", "complex", "mel_shape", "batch_1d"])
def test_bad_inputs_are_one_line_errors(bad):
    model = small_model()
    with pytest.raises(InputError) as error:
        if bad == "two_dims":
            model.infer_from_audio(torch.zeros(2, 4000))
        elif bad == "too_short":
            model.infer_from_audio(np.zeros(512, dtype=np.float32))
        elif bad == "nan":
            model.infer_from_audio(torch.full((2000,), float("nan")))
        elif bad == "string":
            model.infer_from_audio("audio.wav")
        elif bad == "complex":
            model.infer_from_audio(torch.zeros(2000, dtype=torch.complex64))
        elif bad == "mel_shape":
            model.mel2hidden(torch.zeros(1, 80, 10))
        else:
            model.infer_from_audio_batch(torch.zeros(4000))
    assert "\n" not in str(error.value)


@pytest.mark.parametrize("samples", [513, 600, 4800 + 159, 5120])
def test_output_lengths_and_dtypes(samples):
    model = small_model()
    audio = torch.sin(torch.arange(samples) * 0.1) * 0.3
    mel = model.mel(audio.unsqueeze(0))
    assert mel.shape == (1, 128, rmvpe_mel.frames_for(samples)) and mel.dtype == torch.float32
    hidden = model.mel2hidden(mel)
    assert hidden.shape == (1, 1 + samples // 160, 360) and ((hidden > 0) & (hidden < 1)).all()
    f0 = model.infer_from_audio(audio)
    assert isinstance(f0, np.ndarray) and f0.dtype == np.float64 and f0.shape == (1 + samples // 160,)
    batch = model.infer_from_audio_batch(torch.stack([audio, -audio]))
    assert batch.dtype == torch.float64 and batch.shape == (2, 1 + samples // 160)
    # not bitwise: a batch of two takes another GRU route than one waveform, upstream's as ours
    assert np.allclose(batch[0].numpy(), f0, rtol=1e-4)


def test_integer_audio_keeps_its_values_as_upstreams_float_does():
    model = small_model()
    pcm = (torch.sin(torch.arange(3000) * 0.05) * 1000).to(torch.int16)
    assert np.array_equal(model.infer_from_audio(pcm.numpy()), model.infer_from_audio(pcm.float()))


def test_the_padding_to_32_frames_reaches_the_last_frames_but_is_cropped():
    model = small_model()
    mel = torch.randn(1, 128, 40, generator=torch.Generator().manual_seed(0)) - 6
    hidden = model.mel2hidden(mel)
    with torch.inference_mode():
        direct = model.model(torch.nn.functional.pad(mel, (0, 24)))
    assert hidden.shape == (1, 40, 360) and torch.equal(hidden, direct[:, :40])


def test_the_bank_is_librosas_htk_bank_by_its_definition():
    bank = rmvpe_mel.librosa_htk_bank(16000, 1024, 128, 30, 8000)
    assert bank.shape == (128, 513) and bank.dtype == np.float32
    edges = 700 * (10 ** (np.linspace(2595 * np.log10(1 + 30 / 700), 2595 * np.log10(1 + 8000 / 700), 130)
                          / 2595) - 1)
    freqs = np.arange(513) * 16000 / 1024
    for band in (0, 1, 64, 127):
        rising = (freqs - edges[band]) / (edges[band + 1] - edges[band])
        falling = (edges[band + 2] - freqs) / (edges[band + 2] - edges[band + 1])
        want = np.maximum(0, np.minimum(rising, falling)) * 2 / (edges[band + 2] - edges[band])
        assert np.allclose(bank[band], want, rtol=1e-5, atol=1e-9), band
    assert np.array_equal(rmvpe_mel.mel_bank().numpy(), bank)


def test_decode_is_the_local_weighted_average_of_cents():
    salience = np.zeros((5, 360), dtype=np.float32)
    salience[0, 100] = 0.5  # a lone peak: that bin's pitch
    salience[1, [99, 100, 101]] = [0.25, 0.5, 0.25]  # symmetric: the centre's pitch
    salience[2, [0, 1]] = [0.8, 0.8]  # a tie at the lowest bin: the first; the window runs into the padding
    salience[3, 359] = 0.03  # exactly the threshold: unvoiced
    salience[4, 200] = 0.5
    salience[4, 208] = 0.25  # inside the 9-bin window (200 +- 4)? no: 8 away, ignored
    cents = rmvpe.local_average_cents(salience, thred=0.03)
    bin_cents = rmvpe.CENTS_OFFSET + 20.0 * np.arange(360)
    assert cents[0] == bin_cents[100] and abs(cents[1] - bin_cents[100]) < 1e-9
    assert abs(cents[2] - (bin_cents[0] + bin_cents[1]) / 2) < 1e-9
    assert cents[3] == 0 and cents[4] == bin_cents[200]
    f0 = rmvpe.decode(salience, thred=0.03)
    assert f0.dtype == np.float64 and f0[3] == 0
    assert np.allclose(f0[[0, 4]], 10 * 2 ** (bin_cents[[100, 200]] / 1200))
    assert 31 < 10 * 2 ** (bin_cents[0] / 1200) < 32 and 1990 < 10 * 2 ** (bin_cents[359] / 1200) < 2010


def test_no_host_reads_in_the_network():
    model = small_model()
    mel = torch.randn(1, 128, 32) - 6
    with torch.inference_mode(), HostReads() as mode:
        model.model(mel)
    assert mode.reads == []


if __name__ == "__main__":  # the pinned subprocess of the reference test
    torch.set_num_threads(1)
    print(json.dumps(reference_diffs(Path(sys.argv[1]))))
