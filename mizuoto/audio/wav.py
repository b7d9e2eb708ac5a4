"""WAV files with the standard library: 16-bit PCM or 32-bit float, written atomically."""

from __future__ import annotations

import os
import struct
from pathlib import Path

from mizuoto.core.errors import InputError
from mizuoto.core.files import atomic_write

FORMATS = ("pcm16", "float32")


def check_writable(path: str | os.PathLike) -> Path:
    """Fail early, before any work, when `path` cannot be written."""
    path = Path(path).expanduser()
    if path.is_dir():
        raise InputError(f"output path {path} is a folder; give a file name such as {path / 'out.wav'}")
    folder = path.parent if str(path.parent) else Path(".")
    if not folder.is_dir():
        raise InputError(f"output folder {folder} does not exist; create it or choose another path")
    if not os.access(folder, os.W_OK) or (path.exists() and not os.access(path, os.W_OK)):
        raise InputError(f"cannot write {path}: permission denied; choose another output path")
    return path


def encode(waveform, sample_rate: int, sample_format: str = "pcm16") -> bytes:
    """waveform: (channels, samples) float tensor in [-1, 1] -> the bytes of a WAV file."""
    import torch

    if sample_format not in FORMATS:
        raise InputError(f"unknown sample format '{sample_format}'; use {' or '.join(FORMATS)}")
    channels, frames = waveform.shape
    interleaved = waveform.detach().to("cpu", torch.float32).T.contiguous()
    if sample_format == "pcm16":
        data = (interleaved.clamp(-1.0, 1.0) * 32767.0).round().to(torch.int16)
        tag, width, layout = 1, 2, "<i2"
    else:
        data, tag, width, layout = interleaved, 3, 4, "<f4"
    payload = data.numpy().astype(layout, copy=False).tobytes()
    fmt = struct.pack("<HHIIHH", tag, channels, sample_rate, sample_rate * channels * width,
                      channels * width, 8 * width)
    chunks = b"fmt " + struct.pack("<I", len(fmt)) + fmt
    if tag == 3:  # non-PCM formats carry a fact chunk with the frame count
        chunks += b"fact" + struct.pack("<II", 4, frames)
    chunks += b"data" + struct.pack("<I", len(payload)) + payload
    return b"RIFF" + struct.pack("<I", 4 + len(chunks)) + b"WAVE" + chunks


def write(path: str | os.PathLike, waveform, sample_rate: int, sample_format: str = "pcm16") -> Path:
    """Write a WAV file; the file appears complete or not at all."""
    path = check_writable(path)
    data = encode(waveform, sample_rate, sample_format)
    return atomic_write(path, lambda tmp: Path(tmp).write_bytes(data))


def read(path: str | os.PathLike):
    """Read a WAV file -> (waveform (channels, samples) float32 in [-1, 1), sample rate).

    Integer PCM is scaled by 1 / 2^(bits - 1), as libsndfile (soundfile, librosa), torchaudio and
    ComfyUI's audio loader scale it, so a file reaches an engine as its upstream reads it.

    PCM of 8, 16, 24 or 32 bits and IEEE float of 32 or 64 bits, plain or WAVE_FORMAT_EXTENSIBLE.
    """
    import numpy
    import torch

    raw = Path(path).read_bytes()
    if raw[:4] != b"RIFF" or raw[8:12] != b"WAVE":
        raise InputError(f"{path} is not a WAV file; convert it to WAV first")
    pos, fmt, data = 12, None, None
    while pos + 8 <= len(raw):
        cid, size = raw[pos:pos + 4], struct.unpack("<I", raw[pos + 4:pos + 8])[0]
        body = raw[pos + 8:pos + 8 + size]
        if cid == b"fmt ":
            fmt = struct.unpack("<HHIIHH", body[:16])
            if fmt[0] == 0xFFFE and len(body) >= 26:  # WAVE_FORMAT_EXTENSIBLE: the real tag leads the GUID
                fmt = (struct.unpack("<H", body[24:26])[0],) + fmt[1:]
        elif cid == b"data":
            data = body
        pos += 8 + size + (size & 1)
    if fmt is None or data is None:
        raise InputError(f"{path} has no fmt or data chunk; it is not a complete WAV file")
    tag, channels, rate, _, _, bits = fmt
    if tag == 1 and bits == 8:
        samples = (numpy.frombuffer(data, dtype="u1").astype("float32") - 128.0) / 128.0
    elif tag == 1 and bits == 16:
        samples = numpy.frombuffer(data, dtype="<i2").astype("float32") / 32768.0
    elif tag == 1 and bits == 24:
        triples = numpy.frombuffer(data[: len(data) // 3 * 3], dtype="u1").reshape(-1, 3).astype("int32")
        values = triples[:, 0] | (triples[:, 1] << 8) | (triples[:, 2] << 16)
        samples = (numpy.where(values >= 1 << 23, values - (1 << 24), values) / 8388608.0).astype("float32")
    elif tag == 1 and bits == 32:
        samples = (numpy.frombuffer(data, dtype="<i4") / 2147483648.0).astype("float32")
    elif tag == 3 and bits in (32, 64):
        samples = numpy.frombuffer(data, dtype="<f4" if bits == 32 else "<f8").astype("float32")
    else:
        raise InputError(f"{path}: {bits}-bit WAV format {tag} is not supported; convert it to 16-bit PCM")
    frames = len(samples) // channels
    return torch.from_numpy(samples[: frames * channels].copy()).view(frames, channels).T.contiguous(), rate
