"""mizuoto.audio.files: reading is soundfile's reading, bit for bit; every broken file is a one-line InputError
naming it; writing picks the container from the suffix, clips, is atomic, and refuses a bad output up front.

`BROKEN` and `broken_file` are also used by tests/host/test_cli.py (it loads this file by its path)."""

import io
import os
import random
import struct
import subprocess
import sys
import wave
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
import torch

from mizuoto.audio import files
from mizuoto.core.errors import InputError


def signal(channels=2, n=8000, rate=16000) -> np.ndarray:
    """(frames, channels) float32: a tone per channel plus a little seeded noise, within [-0.6, 0.6]."""
    t = np.arange(n) / rate
    noise = np.random.default_rng(channels).uniform(-0.05, 0.05, (n, channels))
    tones = np.stack([0.5 * np.sin(2 * np.pi * 220 * (c + 1) * t) for c in range(channels)], axis=1)
    return (tones + noise).astype(np.float32)


def tensor_signal(channels=2, n=8000) -> torch.Tensor:
    return torch.from_numpy(signal(channels, n).T.copy())


def soundfile_bytes(format, subtype, rate=16000, channels=1, n=8000) -> bytes:
    buffer = io.BytesIO()
    sf.write(buffer, signal(channels, n, rate), rate, format=format, subtype=subtype)
    return buffer.getvalue()


def as_soundfile_reads(path):
    data, rate = sf.read(path, dtype="float32", always_2d=True)
    return torch.from_numpy(np.ascontiguousarray(data.T)), rate


def as_soundfile_reads_without_seeking(path):
    """SoundFile(path).read(): what librosa.load reads. soundfile.read seeks to frame 0 first, and libsndfile's
    MP3 decoder, restarted by that seek, gives samples that differ from a fresh decode's in the last bit."""
    with sf.SoundFile(path) as f:
        data = f.read(dtype="float32", always_2d=True)
    return torch.from_numpy(np.ascontiguousarray(data.T))


def wave_file(path, raw: bytes, width: int, channels=1, rate=16000) -> Path:
    """A WAV written by the standard library (integer PCM only)."""
    with wave.open(str(path), "wb") as w:
        w.setnchannels(channels)
        w.setsampwidth(width)
        w.setframerate(rate)
        w.writeframes(raw)
    return Path(path)


# ---- reading -----------------------------------------------------------------------------------------------

READABLE = [  # id, soundfile format, subtype, sample rate, suffix
    ("wav-u8", "WAV", "PCM_U8", 16000, ".wav"),
    ("wav-16", "WAV", "PCM_16", 16000, ".wav"),
    ("wav-24", "WAV", "PCM_24", 22050, ".wav"),
    ("wav-32", "WAV", "PCM_32", 16000, ".wav"),
    ("wav-float", "WAV", "FLOAT", 24000, ".wav"),
    ("wav-double", "WAV", "DOUBLE", 16000, ".wav"),
    ("wavex-16", "WAVEX", "PCM_16", 16000, ".wav"),
    ("wavex-float", "WAVEX", "FLOAT", 44100, ".wav"),
    ("flac-16", "FLAC", "PCM_16", 16000, ".flac"),
    ("flac-24", "FLAC", "PCM_24", 48000, ".flac"),
    ("ogg-vorbis", "OGG", "VORBIS", 16000, ".ogg"),
    ("ogg-opus", "OGG", "OPUS", 48000, ".opus"),
    ("mp3", "MP3", "MPEG_LAYER_III", 24000, ".mp3"),
]


@pytest.mark.parametrize("channels", [1, 2])
@pytest.mark.parametrize("format,subtype,rate,suffix", [r[1:] for r in READABLE], ids=[r[0] for r in READABLE])
def test_reads_exactly_what_soundfile_reads(tmp_path, format, subtype, rate, suffix, channels):
    path = tmp_path / f"in{suffix}"
    x = signal(channels, rate // 2, rate)
    sf.write(path, x, rate, format=format, subtype=subtype)
    info = sf.info(path)
    assert (info.format, info.subtype, info.channels) == (format, subtype, channels)  # the fixture is what it says

    waveform, got_rate = files.read(path)
    expected, _ = as_soundfile_reads(path)
    assert got_rate == rate and waveform.dtype == torch.float32 and waveform.is_contiguous()
    assert waveform.shape == (channels, info.frames) and info.frames > 0
    if subtype == "MPEG_LAYER_III":  # librosa.load's read (soundfile.read seeks first)
        assert torch.equal(waveform, as_soundfile_reads_without_seeking(path))
        assert torch.allclose(waveform, expected, rtol=0, atol=1e-6)
    else:
        assert torch.equal(waveform, expected)
    if subtype not in ("VORBIS", "OPUS", "MPEG_LAYER_III"):  # lossless: the signal itself comes back
        step = 2 / 2 ** 8 if subtype == "PCM_U8" else 2 / 2 ** 16
        assert (waveform - torch.from_numpy(x.T)).abs().max() <= step


def test_read_accepts_str_and_pathlike(tmp_path):
    path = tmp_path / "a.flac"
    sf.write(path, signal(1), 16000)
    a, _ = files.read(path)
    b, _ = files.read(str(path))
    assert torch.equal(a, b)


def test_integer_pcm_is_scaled_as_libsndfile_reads_it(tmp_path):
    """int / 2^(bits-1): what soundfile, librosa, torchaudio and ComfyUI give, so engines see upstream's
    samples (an engine's parity depends on it)."""
    ints = torch.tensor([-32768, -1, 0, 1, 12345, 32767], dtype=torch.int16)
    back, rate = files.read(wave_file(tmp_path / "s16.wav", ints.numpy().astype("<i2").tobytes(), 2))
    assert rate == 16000 and torch.equal(back[0], ints.float() / 32768)


def test_unsigned_8_bit_is_centred_on_128(tmp_path):
    ints = np.array([0, 1, 127, 128, 129, 255], dtype=np.uint8)
    back, _ = files.read(wave_file(tmp_path / "u8.wav", ints.tobytes(), 1))
    assert back[0].tolist() == [(v - 128) / 128 for v in ints.tolist()]


def test_24_and_32_bit_scaling(tmp_path):
    ints24 = [-2 ** 23, -1, 0, 1, 1234567, 2 ** 23 - 1]
    raw24 = b"".join(v.to_bytes(4, "little", signed=True)[:3] for v in ints24)
    back, _ = files.read(wave_file(tmp_path / "s24.wav", raw24, 3))
    assert torch.equal(back[0], (torch.tensor(ints24, dtype=torch.float64) / 2 ** 23).float())

    ints32 = [-2 ** 31, -1, 0, 1, 123456789, 2 ** 31 - 1]
    back, _ = files.read(wave_file(tmp_path / "s32.wav", np.array(ints32, "<i4").tobytes(), 4))
    assert torch.equal(back[0], (torch.tensor(ints32, dtype=torch.float64) / 2 ** 31).float())


def test_stereo_pcm_is_deinterleaved(tmp_path):
    left, right = [1, 2, 3, -4], [-100, 200, -300, 400]
    raw = np.array([v for pair in zip(left, right, strict=True) for v in pair], "<i2").tobytes()
    back, _ = files.read(wave_file(tmp_path / "st.wav", raw, 2, channels=2))
    assert torch.equal(back, torch.tensor([left, right], dtype=torch.float32) / 32768)


def test_float_samples_beyond_one_are_read_as_they_are(tmp_path):
    values = np.array([0.0, 1.5, -3.25, 1e-3], "<f4")
    path = tmp_path / "loud.wav"
    path.write_bytes(riff(fmt(tag=3, bits=32), chunk(b"data", values.tobytes())))
    back, _ = files.read(path)
    assert back[0].tolist() == values.tolist()


def test_streamed_wav_with_all_ones_sizes_is_read(tmp_path):
    """Writers that cannot seek back (a pipe) leave the sizes 0xFFFFFFFF; the samples are all still there."""
    pcm = np.arange(-50, 50, dtype="<i2")
    path = tmp_path / "streamed.wav"
    path.write_bytes(riff(fmt(), chunk(b"data", pcm.tobytes(), size=0xFFFFFFFF), size=0xFFFFFFFF))
    back, _ = files.read(path)
    assert torch.equal(back[0], torch.from_numpy(pcm.astype(np.float32)) / 32768)


def test_chunk_after_the_data_and_odd_8_bit_data_are_fine(tmp_path):
    path = tmp_path / "list.wav"
    pcm = np.arange(100, dtype="<i2").tobytes()
    path.write_bytes(riff(fmt(), chunk(b"data", pcm), chunk(b"LIST", b"INFOISFT\x04\x00\x00\x00abc\x00")))
    assert files.read(path)[0].shape == (1, 100)
    path = tmp_path / "u8odd.wav"  # 101 one-byte frames and the pad byte: complete
    path.write_bytes(riff(fmt(bits=8), chunk(b"data", bytes(range(101)))))
    assert files.read(path)[0].shape == (1, 101)


@pytest.mark.parametrize("subtype", ["PCM_24", "DOUBLE"])
def test_reads_w64(tmp_path, subtype):
    path = tmp_path / "a.w64"
    sf.write(path, signal(2, 4001), 16000, format="W64", subtype=subtype)
    assert torch.equal(files.read(path)[0], as_soundfile_reads(path)[0])


@pytest.mark.parametrize("format,subtype", [("AIFF", "PCM_24"), ("CAF", "FLOAT"), ("RF64", "PCM_16")])
def test_reads_other_containers(tmp_path, format, subtype):
    path = tmp_path / "a.bin"
    sf.write(path, signal(2, 4001), 16000, format=format, subtype=subtype)
    assert torch.equal(files.read(path)[0], as_soundfile_reads(path)[0])


# ---- the broken-file corpus ----------------------------------------------------------------------------------

def chunk(name: bytes, payload: bytes, size=None) -> bytes:
    pad = b"\0" if len(payload) % 2 else b""
    return name + struct.pack("<I", len(payload) if size is None else size) + payload + pad


def fmt(tag=1, channels=1, rate=16000, bits=16) -> bytes:
    block = channels * bits // 8
    return chunk(b"fmt ", struct.pack("<HHIIHH", tag, channels, rate, rate * block, block, bits))


def riff(*chunks: bytes, size=None) -> bytes:
    body = b"WAVE" + b"".join(chunks)
    return b"RIFF" + struct.pack("<I", len(body) if size is None else size) + body


def _half(data: bytes) -> bytes:
    return data[: len(data) // 2]


PCM = np.arange(-100, 100, dtype="<i2").tobytes()

# name -> (file name, bytes, a fragment the message must hold). MP3 ones end in .mp3: libmpg123 itself prints a
# warning on stderr for them, so the CLI tests leave them out.
BROKEN = {
    "short-fmt-chunk": ("short.wav", lambda: riff(chunk(b"fmt ", struct.pack("<HH", 1, 1)), chunk(b"data", PCM)),
                        "damaged"),
    "zero-channels": ("zero_channels.wav", lambda: riff(fmt(channels=0), chunk(b"data", PCM)), "damaged"),
    "odd-16-bit-data": ("odd.wav", lambda: riff(fmt(), chunk(b"data", PCM + b"\x01")), "truncated"),
    "24-bit-stereo-partial-frame": ("partial.wav", lambda: riff(fmt(channels=2, bits=24),
                                                                chunk(b"data", bytes(6 * 10 + 3))), "truncated"),
    "zero-sample-rate": ("rate0.wav", lambda: riff(fmt(rate=0), chunk(b"data", PCM)), "sample rate"),
    "random-bytes": ("random.wav", lambda: random.Random(1234).randbytes(4096), "not an audio format"),
    "zero-bytes": ("empty.wav", lambda: b"", "empty (0 bytes)"),
    "wav-cut-in-half": ("half.wav", lambda: _half(soundfile_bytes("WAV", "PCM_16")), "truncated"),
    "header-claims-more": ("claims.wav", lambda: riff(fmt(), chunk(b"data", PCM, size=100_000)), "truncated"),
    "empty-data-chunk": ("nodata_bytes.wav", lambda: riff(fmt(), chunk(b"data", b"")), "holds no samples"),
    "no-data-chunk": ("nodata.wav", lambda: riff(fmt()), "damaged"),
    "text-file": ("notes.wav", lambda: b"these are my notes, not a recording\n" * 20, "not an audio format"),
    "mp3-named-wav": ("tag.wav", lambda: b"ID3 this is not really an mp3", "not an audio format"),
    "nan-samples": ("nan.wav", lambda: riff(fmt(tag=3, bits=32),
                                            chunk(b"data", np.array([0.0, np.nan, 0.5], "<f4").tobytes())),
                    "NaN or infinite"),
    "inf-samples": ("inf.wav", lambda: riff(fmt(tag=3, bits=64),
                                            chunk(b"data", np.array([0.0, np.inf, -np.inf], "<f8").tobytes())),
                    "NaN or infinite"),
    "unknown-format-tag": ("tag99.wav", lambda: riff(fmt(tag=99), chunk(b"data", PCM)), "damaged"),
    "flac-cut-in-half": ("half.flac", lambda: _half(soundfile_bytes("FLAC", "PCM_16")), "damaged"),
    "vorbis-cut-in-half": ("half.ogg", lambda: _half(soundfile_bytes("OGG", "VORBIS")), "damaged"),
    "opus-cut-in-half": ("half.opus", lambda: _half(soundfile_bytes("OGG", "OPUS", rate=48000)), "damaged"),
    "mp3-cut-in-half": ("half.mp3", lambda: _half(soundfile_bytes("MP3", "MPEG_LAYER_III")), "truncated"),
}


def broken_file(folder: Path, name: str) -> Path:
    file_name, build, _ = BROKEN[name]
    path = Path(folder) / file_name
    path.write_bytes(build())
    return path


@pytest.mark.parametrize("name", list(BROKEN))
def test_broken_files_are_one_line_input_errors(tmp_path, name):
    path = broken_file(tmp_path, name)
    with pytest.raises(InputError) as caught:
        files.read(path, "reference audio")
    message = str(caught.value)
    assert "\n" not in message and str(path) in message and message.count(str(path)) == 1
    assert "reference audio" in message and BROKEN[name][2] in message
    with pytest.raises(InputError, match="audio file"):  # the default name of the file
        files.read(path)


def test_the_corpus_is_broken_only_where_meant(tmp_path):
    """The builders make valid files but for the one flaw: the same chunks with the flaw taken out read fine."""
    path = tmp_path / "ok.wav"
    path.write_bytes(riff(fmt(), chunk(b"data", PCM)))
    assert torch.equal(files.read(path)[0][0], torch.arange(-100, 100) / 32768)
    path.write_bytes(riff(fmt(tag=3, bits=32), chunk(b"data", np.array([0.0, 0.25, 0.5], "<f4").tobytes())))
    assert files.read(path)[0].tolist() == [[0.0, 0.25, 0.5]]
    for format, subtype, rate in (("FLAC", "PCM_16", 16000), ("OGG", "VORBIS", 16000), ("OGG", "OPUS", 48000)):
        path = tmp_path / f"whole.{subtype}"
        path.write_bytes(soundfile_bytes(format, subtype, rate))
        assert files.read(path)[1] == rate


def test_missing_file_and_folder(tmp_path):
    with pytest.raises(InputError, match="reference audio .* does not exist"):
        files.read(tmp_path / "nope.wav", "reference audio")
    with pytest.raises(InputError, match="is a folder"):
        files.read(tmp_path)


# ---- writing -------------------------------------------------------------------------------------------------

WRITABLE = [  # file name, sample format, soundfile format, subtype
    ("o.wav", None, "WAV", "PCM_16"),
    ("o.wav", "pcm16", "WAV", "PCM_16"),
    ("o.wav", "pcm24", "WAV", "PCM_24"),
    ("o.wav", "float32", "WAV", "FLOAT"),
    ("o.flac", None, "FLAC", "PCM_16"),
    ("o.flac", "pcm24", "FLAC", "PCM_24"),
    ("o.ogg", None, "OGG", "VORBIS"),
    ("o.mp3", None, "MP3", "MPEG_LAYER_III"),
    ("O.WAV", "pcm24", "WAV", "PCM_24"),
    ("o.Flac", None, "FLAC", "PCM_16"),
    ("o.MP3", None, "MP3", "MPEG_LAYER_III"),
]


@pytest.mark.parametrize("name,sample_format,format,subtype", WRITABLE)
def test_suffix_picks_the_container(tmp_path, name, sample_format, format, subtype):
    x = tensor_signal(2, 4000)
    path = files.write(tmp_path / name, x, 24000, sample_format)
    assert path == tmp_path / name and [p.name for p in tmp_path.iterdir()] == [name]
    info = sf.info(path)
    assert (info.format, info.subtype, info.samplerate, info.channels) == (format, subtype, 24000, 2)
    back, rate = files.read(path)
    assert rate == 24000 and back.shape[0] == 2
    if subtype in ("PCM_16", "PCM_24", "FLOAT"):
        assert back.shape == x.shape and (back - x).abs().max() <= 1 / 32767


def test_writes_what_soundfile_writes(tmp_path):
    x = tensor_signal(2, 3000)
    for suffix, format in ((".wav", "WAV"), (".flac", "FLAC")):
        ours = files.write(tmp_path / f"ours{suffix}", x, 16000)
        theirs = tmp_path / f"theirs{suffix}"
        sf.write(theirs, x.T.numpy(), 16000, format=format, subtype="PCM_16")
        assert ours.read_bytes() == theirs.read_bytes()


def test_pcm16_is_readable_by_the_standard_library(tmp_path):
    x = tensor_signal(2, 1000)
    path = files.write(tmp_path / "a.wav", x, 16000)
    with wave.open(str(path)) as w:
        assert (w.getnchannels(), w.getframerate(), w.getsampwidth(), w.getnframes()) == (2, 16000, 2, 1000)
        ints = torch.from_numpy(np.frombuffer(w.readframes(1000), "<i2").astype(np.float32))
    assert ((ints / 32768).reshape(1000, 2).T - x).abs().max() <= 1 / 32767


def test_float32_round_trip_is_exact(tmp_path):
    x = tensor_signal(1, 777)
    back, rate = files.read(files.write(tmp_path / "f.wav", x, 22050, "float32"))
    assert rate == 22050 and torch.equal(back, x)


@pytest.mark.parametrize("sample_format,step", [("pcm16", 1 / 32767), ("pcm24", 1 / 2 ** 23)])
@pytest.mark.parametrize("suffix", [".wav", ".flac"])
def test_pcm_round_trip_within_one_step(tmp_path, suffix, sample_format, step):
    x = tensor_signal(2, 2000)
    back, _ = files.read(files.write(tmp_path / f"p{suffix}", x, 16000, sample_format))
    assert back.shape == x.shape and 0 < (back - x).abs().max() <= step


def test_lossy_round_trip_keeps_the_sound(tmp_path):
    x = tensor_signal(1, 16000)
    for suffix in (".ogg", ".mp3"):
        back, _ = files.read(files.write(tmp_path / f"l{suffix}", x, 16000))
        n = min(back.shape[-1], x.shape[-1])
        assert back.shape[0] == 1 and abs(back.shape[-1] - x.shape[-1]) < 2000
        # the same loudness, give or take what the codec drops
        assert abs(back[0, :n].pow(2).mean().sqrt() - x[0, :n].pow(2).mean().sqrt()) < 0.05


@pytest.mark.parametrize("sample_format,expected", [
    # libsndfile scales by 2^(bits-1) both ways: +1 clips to the largest integer, -1 is the smallest exactly
    ("pcm16", [32767 / 32768, -1.0, 32767 / 32768, -1.0, 0.5]),
    ("pcm24", [(2 ** 23 - 1) / 2 ** 23, -1.0, (2 ** 23 - 1) / 2 ** 23, -1.0, 0.5]),
    ("float32", [1.0, -1.0, 1.0, -1.0, 0.5]),
])
def test_clipping(tmp_path, sample_format, expected):
    loud = torch.tensor([[2.0, -2.0, 1.0, -1.0, 0.5]])
    back, _ = files.read(files.write(tmp_path / "c.wav", loud, 8000, sample_format))
    assert back.tolist() == [expected]


def test_clipping_with_the_default_format(tmp_path):
    back, _ = files.read(files.write(tmp_path / "c.flac", torch.tensor([[2.0, -2.0, 1e9]]), 8000))
    assert back.tolist() == [[32767 / 32768, -1.0, 32767 / 32768]]  # no wrap-around past full scale


def test_mode_is_a_normal_new_file(tmp_path):
    old = os.umask(0o027)
    try:
        path = files.write(tmp_path / "m.wav", tensor_signal(), 16000)
    finally:
        os.umask(old)
    assert path.stat().st_mode & 0o777 == 0o640
    path = files.write(tmp_path / "n.flac", tensor_signal(), 16000)
    assert path.stat().st_mode & 0o777 == 0o666 & ~old


def test_overwrite_keeps_the_mode_and_replaces_the_content(tmp_path):
    path = tmp_path / "o.wav"
    path.write_bytes(b"previous")
    path.chmod(0o600)
    files.write(path, tensor_signal(), 16000)
    assert path.stat().st_mode & 0o777 == 0o600 and sf.info(path).format == "WAV"


def _failing_soundfile_write(error):
    def write(file, *args, **kwargs):
        Path(file).write_bytes(b"RIFF half a file")  # what a writer dying midway leaves
        raise error
    return write


@pytest.mark.parametrize("error,message", [
    (RuntimeError("Error opening 'x': Unspecified internal error."), "Unspecified internal error"),
    (OSError(28, "No space left on device"), "No space left on device"),
])
def test_a_failed_write_leaves_the_old_file(tmp_path, monkeypatch, error, message):
    path = tmp_path / "o.wav"
    path.write_bytes(b"previous")
    monkeypatch.setattr(sf, "write", _failing_soundfile_write(error))
    with pytest.raises(InputError, match=message) as caught:
        files.write(path, tensor_signal(), 16000)
    assert "\n" not in str(caught.value) and str(path) in str(caught.value)
    assert path.read_bytes() == b"previous" and [p.name for p in tmp_path.iterdir()] == ["o.wav"]
    assert not list(tmp_path.glob(".*.tmp"))


def test_an_interrupted_write_leaves_nothing(tmp_path, monkeypatch):
    monkeypatch.setattr(sf, "write", _failing_soundfile_write(KeyboardInterrupt()))
    with pytest.raises(KeyboardInterrupt):
        files.write(tmp_path / "o.wav", tensor_signal(), 16000)
    assert list(tmp_path.iterdir()) == []


REFUSED = [  # output name (None: tmp_path itself), sample format, a fragment of the message
    ("o.mp4", None, "suffix .mp4"),
    ("o.txt", None, "suffix .txt"),
    ("o", None, "no suffix"),
    ("o.wav.part", None, "suffix .part"),
    ("o.flac", "float32", "cannot hold float32"),
    ("o.ogg", "pcm16", "no sample format to choose"),
    ("o.ogg", "float32", "no sample format to choose"),
    ("o.mp3", "pcm24", "no sample format to choose"),
    ("o.wav", "pcm8", "unknown sample format 'pcm8'"),
    (None, None, "is a folder"),
    ("missing/o.wav", None, "does not exist"),
]


@pytest.mark.parametrize("name,sample_format,message", REFUSED)
def test_bad_outputs_are_refused_before_any_work(tmp_path, name, sample_format, message):
    target = tmp_path / name if name else tmp_path
    with pytest.raises(InputError, match=message) as caught:
        files.check_output(target, sample_format)
    assert "\n" not in str(caught.value)
    with pytest.raises(InputError, match=message):
        files.write(target, tensor_signal(), 16000, sample_format)
    assert list(tmp_path.iterdir()) == []


def test_unknown_suffix_names_the_ones_that_work(tmp_path):
    with pytest.raises(InputError, match=r"name it with one of \.wav, \.flac, \.ogg, \.mp3"):
        files.check_output(tmp_path / "o.mp4")
    assert files.writable_suffixes() == [".wav", ".flac", ".ogg", ".mp3"]


def test_check_output_accepts_good_paths_and_touches_nothing(tmp_path, monkeypatch):
    assert files.check_output(tmp_path / "new.WAV", "float32") == tmp_path / "new.WAV"
    existing = tmp_path / "old.flac"
    existing.write_bytes(b"previous")
    assert files.check_output(str(existing), "pcm24") == existing and existing.read_bytes() == b"previous"
    monkeypatch.chdir(tmp_path)
    assert files.check_output("bare.mp3") == Path("bare.mp3")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["old.flac"]


@pytest.mark.skipif(os.geteuid() == 0, reason="root may write a read-only folder")
def test_read_only_folder_and_file(tmp_path):
    folder = tmp_path / "ro"
    folder.mkdir()
    (folder / "o.wav").write_bytes(b"previous")
    (tmp_path / "ro_file.wav").write_bytes(b"previous")
    (tmp_path / "ro_file.wav").chmod(0o444)
    folder.chmod(0o555)
    try:
        with pytest.raises(InputError, match="permission denied"):
            files.check_output(folder / "new.wav")
        with pytest.raises(InputError, match="permission denied"):
            files.check_output(tmp_path / "ro_file.wav")
    finally:
        folder.chmod(0o755)


def test_a_folder_that_takes_no_files_is_refused_up_front():
    with pytest.raises(InputError, match="/proc"):
        files.check_output("/proc/x.wav")


@pytest.mark.parametrize("waveform", [torch.zeros(1, 0), torch.zeros(2, 0), torch.zeros(100), torch.zeros(1, 2, 3)],
                         ids=["mono-empty", "stereo-empty", "1d", "3d"])
def test_empty_or_misshapen_audio_is_refused(tmp_path, waveform):
    with pytest.raises(InputError, match="empty or not \\(channels, samples\\)"):
        files.write(tmp_path / "o.wav", waveform, 16000)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("suffix", [".wav", ".flac", ".mp3"])
def test_zero_sample_rate_is_refused(tmp_path, suffix):
    with pytest.raises(InputError, match="sample rate must be positive"):
        files.write(tmp_path / f"o{suffix}", tensor_signal(), 0)
    assert list(tmp_path.iterdir()) == []


def test_zero_sample_rate_ogg_is_an_input_error_not_a_crash(tmp_path):
    code = ("import torch; from mizuoto.audio import files; from mizuoto.core.errors import InputError\n"
            "try:\n    files.write('o.ogg', torch.zeros(1, 100), 0)\nexcept InputError:\n    print('refused')")
    run = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert run.returncode == 0 and run.stdout.strip() == "refused"
    assert list(tmp_path.iterdir()) == []


def test_write_accepts_a_tensor_that_is_not_contiguous_float32(tmp_path):
    x = tensor_signal(2, 1000)
    back, _ = files.read(files.write(tmp_path / "t.wav", x.T.double().T, 16000, "float32"))
    assert torch.equal(back, x)
    back, _ = files.read(files.write(tmp_path / "h.wav", x.half().requires_grad_(), 16000, "float32"))
    assert torch.equal(back, x.half().float())
