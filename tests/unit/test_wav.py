import os
import struct
import wave

import pytest
import torch

from mizuoto.audio import wav
from mizuoto.core.errors import InputError


def signal(channels=2, n=1000):
    t = torch.arange(n) / 16000
    return torch.stack([torch.sin(2 * torch.pi * 440 * (c + 1) * t) * 0.5 for c in range(channels)])


def test_pcm16_is_readable_by_the_standard_library(tmp_path):
    path = wav.write(tmp_path / "a.wav", signal(), 16000)
    with wave.open(str(path)) as w:
        assert (w.getnchannels(), w.getframerate(), w.getsampwidth(), w.getnframes()) == (2, 16000, 2, 1000)
        frames = w.readframes(2)
    first = struct.unpack("<4h", frames)
    expected = (signal()[:, :2].T.flatten() * 32767).round().to(torch.int16).tolist()
    assert list(first) == expected


def test_float32_round_trip_is_exact(tmp_path):
    x = signal(1, 777)
    back, rate = wav.read(wav.write(tmp_path / "f.wav", x, 22050, "float32"))
    assert rate == 22050 and torch.equal(back, x)


def test_pcm16_round_trip_within_one_step(tmp_path):
    x = signal()
    back, _ = wav.read(wav.write(tmp_path / "p.wav", x, 16000))
    assert (back - x).abs().max() <= 1 / 32767


def test_clipping(tmp_path):
    back, _ = wav.read(wav.write(tmp_path / "c.wav", torch.tensor([[2.0, -2.0]]), 8000))
    assert back.tolist() == [[32767 / 32768, -32767 / 32768]]  # written at +-32767, read over 32768


def test_mode_is_a_normal_new_file(tmp_path):
    path = wav.write(tmp_path / "m.wav", signal(), 16000)
    mask = os.umask(0)
    os.umask(mask)
    assert path.stat().st_mode & 0o777 == 0o666 & ~mask


def test_unwritable_paths(tmp_path):
    with pytest.raises(InputError, match="does not exist"):
        wav.check_writable(tmp_path / "no" / "a.wav")
    with pytest.raises(InputError, match="is a folder"):
        wav.check_writable(tmp_path)


@pytest.mark.parametrize("width,dtype,scale", [(1, "u1", None), (2, "<i2", 32767), (4, "<i4", 2147483647)])
def test_reads_other_pcm_widths(tmp_path, width, dtype, scale):
    import numpy

    x = (signal(1, 400)[0] * 0.5).numpy()
    if dtype == "u1":
        data = numpy.round(x * 127 + 128).astype("u1").tobytes()
    else:
        data = numpy.round(x * scale).astype(dtype).tobytes()
    path = tmp_path / "w.wav"
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(width)
        w.setframerate(8000)
        w.writeframes(data)
    back, rate = wav.read(path)
    assert rate == 8000 and back.shape == (1, 400)
    assert (back[0] - torch.from_numpy(x)).abs().max() < 2 / 127


def test_reads_24_bit(tmp_path):
    x = signal(1, 300)[0] * 0.5
    ints = (x * 8388607).round().to(torch.int32)
    data = b"".join(int(v).to_bytes(4, "little", signed=True)[:3] for v in ints)
    path = tmp_path / "w24.wav"
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(3)
        w.setframerate(16000)
        w.writeframes(data)
    back, _ = wav.read(path)
    assert (back[0] - x).abs().max() < 1e-6


def test_not_a_wav(tmp_path):
    path = tmp_path / "x.wav"
    path.write_bytes(b"ID3 this is an mp3")
    with pytest.raises(InputError, match="not a WAV file; convert it"):
        wav.read(path)


def test_integer_pcm_is_scaled_as_libsndfile_reads_it(tmp_path):
    """int / 2^(bits-1): what soundfile, librosa, torchaudio and ComfyUI give, so engines see upstream's
    samples (an engine's parity depends on it)."""
    ints = torch.tensor([-32768, -1, 0, 1, 12345, 32767], dtype=torch.int16)
    path = tmp_path / "s16.wav"
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(16000)
        w.writeframes(ints.numpy().tobytes())
    back, _ = wav.read(path)
    assert torch.equal(back[0], ints.float() / 32768)
