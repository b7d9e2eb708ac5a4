"""Audio files in and out, through soundfile (libsndfile): what upstream engines read is what we read.

Reading returns exactly what `librosa.load` reads through soundfile, `soundfile.SoundFile(path).read(
dtype="float32")` (integer PCM scaled by 1 / 2^(bits - 1), as libsndfile, librosa, torchaudio and ComfyUI
scale it), as a (channels, samples) tensor; `soundfile.read` gives the same samples except for MP3, where
its seek to frame 0 before reading moves some samples by one float32 step. WAV (PCM 8/16/24/32, float,
extensible), FLAC, Ogg Vorbis, Opus, MP3 and the other containers the bundled libsndfile knows are read;
every file libsndfile refuses, or one that is empty, cut short or holds NaN or infinite samples, is a
one-line `InputError` naming the file and what is wrong.

Writing picks the container from the file name's suffix (.wav, .flac, .ogg, .mp3) and the sample type
from `sample_format` where the container has one; `check_output` refuses a bad path or an unknown suffix
before any work is done, and `write` is atomic (a temporary file beside the target, then a rename).
"""

from __future__ import annotations

import os
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path

from mizuoto.core.errors import InputError
from mizuoto.core.files import atomic_write

SAMPLE_FORMATS = ("pcm16", "pcm24", "float32")
DEFAULT_SAMPLE_FORMAT = "pcm16"


@dataclass(frozen=True)
class Container:
    name: str  # soundfile's format name
    subtypes: dict  # sample format -> soundfile subtype; one entry under None: the container has no choice
    label: str


CONTAINERS = {
    ".wav": Container("WAV", {"pcm16": "PCM_16", "pcm24": "PCM_24", "float32": "FLOAT"}, "WAV"),
    ".flac": Container("FLAC", {"pcm16": "PCM_16", "pcm24": "PCM_24"}, "FLAC"),
    ".ogg": Container("OGG", {None: "VORBIS"}, "Ogg Vorbis"),
    ".mp3": Container("MP3", {None: "MPEG_LAYER_III"}, "MP3"),
}


def _soundfile():
    try:
        import soundfile
    except (ImportError, OSError) as exc:  # OSError: the wheel's libsndfile did not load
        raise InputError(f"reading and writing audio files needs the soundfile package ({exc}); "
                         f"install it with: pip install soundfile") from None
    return soundfile


def library_report() -> dict:
    """libsndfile's version and what it reads and writes here, for the doctor (never raises)."""
    try:
        sf = _soundfile()
    except InputError as exc:
        return {"error": str(exc)}
    return {"libsndfile": sf.__libsndfile_version__, "reads": sorted(sf.available_formats()),
            "writes": writable_suffixes()}


def writable_suffixes() -> list[str]:
    """The output suffixes this machine's libsndfile can write (MP3 needs libsndfile 1.1 or later)."""
    formats = _soundfile().available_formats()
    return [suffix for suffix, c in CONTAINERS.items() if c.name in formats]


def _container(path: Path, sample_format: str | None) -> tuple[Container, str]:
    suffix = path.suffix.lower()
    known = writable_suffixes()
    if suffix not in known:
        what = f"suffix {suffix}" if suffix else "no suffix"
        raise InputError(f"output {path} has {what}; name it with one of {', '.join(known)}")
    container = CONTAINERS[suffix]
    if None in container.subtypes:
        if sample_format is not None:
            raise InputError(f"{container.label} has no sample format to choose; leave out the sample format "
                             f"({sample_format}) or write .wav or .flac")
        return container, container.subtypes[None]
    chosen = sample_format or DEFAULT_SAMPLE_FORMAT
    if chosen not in SAMPLE_FORMATS:
        raise InputError(f"unknown sample format '{chosen}'; use one of {', '.join(SAMPLE_FORMATS)}")
    if chosen not in container.subtypes:
        raise InputError(f"{container.label} cannot hold {chosen} samples; use "
                         f"{' or '.join(container.subtypes)}, or write .wav")
    return container, container.subtypes[chosen]


def _validated(path: str | os.PathLike, sample_format: str | None) -> tuple[Path, Container, str]:
    """The output path, its container and subtype, when the path names a file in an existing folder that
    is not a read-only file, with a suffix (and sample format) a container here takes."""
    path = Path(path).expanduser()
    if path.is_dir():
        raise InputError(f"output path {path} is a folder; give a file name such as {path / 'out.wav'}")
    folder = path.parent if str(path.parent) else Path(".")
    if not folder.is_dir():
        raise InputError(f"output folder {folder} does not exist; create it or choose another path")
    container, subtype = _container(path, sample_format)
    if path.exists() and not os.access(path, os.W_OK):
        raise InputError(f"cannot write {path}: permission denied; choose another output path")
    return path, container, subtype


def check_output(path: str | os.PathLike, sample_format: str | None = None) -> Path:
    """Fail early, before any work, when `path` cannot be written: a folder, a missing or read-only folder,
    a read-only file, or a suffix (or sample format) no container here takes."""
    path, _, _ = _validated(path, sample_format)
    try:  # the one sure test (os.access says yes to root everywhere, even in /proc): create a file there
        fd, probe = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except OSError as exc:
        raise InputError(f"cannot write {path}: the folder takes no new file ({exc.strerror or exc}); choose another "
                         f"output path") from None
    os.close(fd)
    os.unlink(probe)
    return path


def write(path: str | os.PathLike, waveform, sample_rate: int, sample_format: str | None = None) -> Path:
    """Write `waveform` ((channels, samples) float in [-1, 1]; beyond is clipped) at `sample_rate` Hz in the
    container `path`'s suffix names; the file appears complete or not at all."""
    import torch

    path, container, subtype = _validated(path, sample_format)  # a folder that takes no file fails below
    if waveform.dim() != 2 or waveform.shape[-1] == 0:
        raise InputError(f"cannot write {path}: the audio is empty or not (channels, samples)")
    _check_rate(path, container, int(sample_rate))
    # libsndfile converts float to integer PCM without clipping (values past 1 wrap around); clip here
    data = waveform.detach().to("cpu", torch.float32).clamp(-1.0, 1.0).T.contiguous().numpy()
    sf = _soundfile()

    def write_to(tmp: str) -> None:
        try:
            sf.write(tmp, data, int(sample_rate), format=container.name, subtype=subtype)
        except (sf.LibsndfileError, RuntimeError, ValueError) as exc:
            raise InputError(f"cannot write {path} as {container.label} at {sample_rate} Hz: "
                             f"{_reason(exc)}") from None

    try:
        return atomic_write(path, write_to)
    except OSError as exc:  # no file allowed there, the disk filled, the folder went away: nothing left behind
        raise InputError(f"cannot write {path}: {exc.strerror or exc}") from None


# libsndfile's Vorbis encoder crashes the process on rates it cannot take; MP3 (LAME) takes these only
VORBIS_MAX_RATE = 192000
MP3_RATES = (8000, 11025, 12000, 16000, 22050, 24000, 32000, 44100, 48000)


def _check_rate(path: Path, container: Container, rate: int) -> None:
    if rate <= 0:
        raise InputError(f"cannot write {path}: the sample rate must be positive, got {rate}")
    if container.name == "OGG" and rate > VORBIS_MAX_RATE:
        raise InputError(f"cannot write {path}: Ogg Vorbis takes at most {VORBIS_MAX_RATE} Hz, the audio is {rate} "
                         f"Hz; write .wav or .flac")
    if container.name == "MP3" and rate not in MP3_RATES:
        raise InputError(f"cannot write {path}: MP3 takes {', '.join(map(str, MP3_RATES))} Hz, the audio is "
                         f"{rate} Hz; write .wav or .flac")


def read(path: str | os.PathLike, what: str = "audio file"):
    """Read an audio file -> (waveform (channels, samples) float32, sample rate), as soundfile reads it.

    `what` names the file in the errors ("reference audio")."""
    import numpy
    import torch

    path = Path(path).expanduser()
    if not path.exists():
        raise InputError(f"{what} {path} does not exist")
    if path.is_dir():
        raise InputError(f"{what} {path} is a folder; give the file itself")
    if path.stat().st_size == 0:
        raise InputError(f"{what} {path} is empty (0 bytes); give a recording")
    sf = _soundfile()
    try:
        with sf.SoundFile(str(path)) as f:
            rate, declared, container = int(f.samplerate), int(f.frames), f.format
            data = f.read(dtype="float32", always_2d=True)  # no seek first: librosa.load reads this way
            log = f.extra_info
    except (sf.LibsndfileError, RuntimeError) as exc:
        if "not recognised" in str(exc):
            raise InputError(f"cannot read {what} {path}: {_unknown_format()}") from None
        raise InputError(f"cannot read {what} {path}: {_reason(exc)}; the file is damaged or incomplete, export it "
                         f"again") from None
    except OSError as exc:
        raise InputError(f"cannot read {what} {path}: {exc.strerror or exc}") from None
    if rate <= 0:
        raise InputError(f"cannot read {what} {path}: its sample rate is {rate}; the file is damaged")
    cut = _cut_short(log) if container in RIFF_CONTAINERS else None
    if cut or len(data) < declared:
        detail = cut or f"the header declares {declared} frames, the file holds {len(data)}"
        raise InputError(f"cannot read {what} {path}: it is truncated: {detail}; use the complete file")
    if len(data) == 0:
        raise InputError(f"{what} {path} holds no samples; give a recording")
    if not numpy.isfinite(data).all():
        raise InputError(f"{what} {path} holds NaN or infinite samples; the file is damaged")
    return torch.from_numpy(numpy.ascontiguousarray(data.T)), rate


RIFF_CONTAINERS = ("WAV", "WAVEX", "RF64")  # whose data chunk size counts sample bytes only (not W64's)
# libsndfile logs what it had to repair while parsing a header: the data chunk's declared size, and what
# the file holds when that is less ("data : 3200 (should be 1578)"); the block align is one frame's bytes
_DATA_SIZE = re.compile(r"^data\s*:\s*(\d+)(?:\s*\(should be (\d+)\))?", re.MULTILINE)
_BLOCK_ALIGN = re.compile(r"^\s*Block Align\s*:\s*(\d+)", re.MULTILINE)
_STREAMED_SIZES = (0, 0xFFFFFFFF)  # writers that cannot seek back leave the data size 0 or all ones


def _cut_short(log: str) -> str | None:
    """Why a WAV-family file's sample data is incomplete, from libsndfile's parse log (None: complete)."""
    size, align = _DATA_SIZE.search(log), _BLOCK_ALIGN.search(log)
    if size is None:
        return None
    declared = int(size.group(1))
    present = int(size.group(2)) if size.group(2) else declared
    if present < declared and declared not in _STREAMED_SIZES:
        return f"the header declares {declared} bytes of samples, the file holds {present}"
    frame = int(align.group(1)) if align else 0
    if frame > 1 and present % frame:
        return f"the samples end inside a frame, {present} bytes of {frame}-byte frames"
    return None


def _reason(exc: Exception) -> str:
    """libsndfile's message without the "Error opening 'path': " prefix (the path is said once)."""
    text = " ".join(str(exc).split())
    text = re.sub(r"^Error (opening|reading) .*?: ", "", text).rstrip(".")
    if "SF_INFO struct incomplete" in text:  # what libsndfile says of a zero sample rate
        return "its header gives no sample rate"
    return text or type(exc).__name__


def _unknown_format() -> str:
    known = set(_soundfile().available_formats())
    names = [name for name in ("WAV", "FLAC", "OGG", "MP3", "AIFF", "CAF", "W64", "RF64") if name in known]
    return (f"not an audio format this machine's libsndfile reads ({', '.join(names)}; OGG holds Vorbis or "
            f"Opus); convert it to WAV or FLAC")
