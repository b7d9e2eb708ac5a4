"""F5-TTS's reference clipping and trimming against f5-tts 1.1.22 / pydub 0.25.1 outputs pasted as literals.

The signals are integer-only (a splitmix64 hash of the sample index under a triangular envelope), so they
are the same on every machine. The expected outputs were made once by writing each signal to a WAV with
soundfile, running upstream's `preprocess_ref_audio_text` on it and reading its temporary WAV back as
ints: the shape, rate and a sha256 prefix of the interleaved little-endian samples are pasted here. The
helper literals come from `audioop` and pydub's AudioSegment in the same environment. The check on
hundreds of random files is `scripts/parity/f5tts_silence_live.py`.
"""

import hashlib

import numpy as np
import pytest
import torch

from mizuoto.core.errors import InputError
from mizuoto.engines.f5tts import silence

_MASK = np.uint64(0xFFFFFFFFFFFFFFFF)


def _hash(index: np.ndarray) -> np.ndarray:
    """splitmix64 of each index, as int64 in [-32768, 32767] (the top 16 bits)."""
    z = index.astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15) & _MASK
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9) & _MASK
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB) & _MASK
    z = z ^ (z >> np.uint64(31))
    return (z >> np.uint64(48)).astype(np.int64) - 32768


def make(rate, channels, sections, dtype=np.int16, seed=1):
    """(channels, frames) ints: each (ms, amplitude) section is hashed noise scaled to `amplitude`, under a
    200 ms triangle envelope between 1/5 and 7/5 for sections louder than 1000 (syllables that never fall
    silent), flat for quieter ones (pauses); amplitude 0 is digital silence."""
    frames = [rate * ms // 1000 for ms, _ in sections]
    total = sum(frames)
    period = rate // 5
    out = np.zeros((channels, total), dtype=np.int64)
    for c in range(channels):
        noise = _hash(np.arange(total) + (seed * 7919 + c) * 10_000_019)
        at = 0
        for n, (_, amp) in zip(frames, sections, strict=True):
            i = np.arange(n)
            tri = np.abs(i % period - period // 2)  # 0 .. period / 2
            env = period // 8 + tri * 3 // 2 if amp > 1000 else np.full(n, period // 2 + period // 8)
            out[c, at:at + n] = noise[at:at + n] * amp * env // (32768 * (period // 2 + period // 8))
            at += n
    if dtype == np.int32:
        low = _hash(np.arange(total) + 99) & 0xFFFF
        return ((out << 16) + np.where(out != 0, low, 0)).astype(np.int32)
    return out.astype(np.int16)


def digest(samples: np.ndarray) -> str:
    """sha256 prefix of the samples as the WAV stores them: interleaved, little-endian."""
    wav_order = np.ascontiguousarray(samples.T).astype(samples.dtype.newbyteorder("<"))
    return hashlib.sha256(wav_order.tobytes()).hexdigest()[:16]


SPEECH, PAUSE = 9000, 20
CASES = {
    # name: (rate, channels, sections, dtype) -> expected (channels, frames, rate, digest)
    "short_clean": (16000, 1, [(30, 0), (2500, 12000), (45, 0)], np.int16),
    "edges_quiet": (48000, 1, [(1200, PAUSE), (2000, SPEECH), (700, PAUSE)], np.int16),
    "step1": (24000, 1, [(4000, SPEECH), (1500, 15), (5000, SPEECH), (1500, 0), (4000, SPEECH)], np.int16),
    "step2": (22050, 1, [(2000, SPEECH), (300, PAUSE)] * 7, np.int16),
    "hard_cut": (44100, 1, [(14000, SPEECH)], np.int16),
    "stereo": (44100, 2, [(300, 0), (5000, SPEECH), (1500, PAUSE), (5000, SPEECH), (1200, 0), (3000, SPEECH)],
               np.int16),
    "three_channels": (16000, 3, [(500, PAUSE), (1500, SPEECH), (400, 0)], np.int16),
    "rate_8k": (8000, 1, [(200, 0), (6000, SPEECH), (1500, PAUSE), (7000, SPEECH)], np.int16),
    "int32": (16000, 1, [(300, 0), (2000, SPEECH), (300, PAUSE)], np.int32),
    "tiny": (16000, 1, [(7, 12000)], np.int16),
    "all_silent": (24000, 1, [(3000, 0)], np.int16),
    "faint": (16000, 1, [(2000, 400)], np.int16),
}
EXPECTED = {  # (channels, frames, rate, digest) of upstream's WAV; what happened to the input in the comment
    "all_silent": (1, 551, 11025, "bdfaedf3df2aa370"),  # step 1 finds only silence: the mono 11025 Hz pad
    "edges_quiet": (1, 98395, 48000, "4dd0cbea8533bc73"),  # 1.2 s and 0.7 s of -69 dBFS noise trimmed
    "faint": (1, 799, 16000, "e2524d150f570a5a"),  # kept by step 1 (> -50 dBFS), all trimmed (< -42): pad
    "hard_cut": (1, 531401, 44100, "97cfb6d1254470c4"),  # step 3: 12000 ms + 2201-frame pad
    "int32": (1, 32799, 16000, "2807c57292be1617"),
    "rate_8k": (1, 66701, 11025, "ad4d45e4d62fcc63"),  # step 1, pieces resampled to 11025 Hz by ratecv
    "short_clean": (1, 40879, 16000, "058cf8586bcd463a"),
    "step1": (1, 253198, 24000, "a505ea87b84b2cfd"),
    "step2": (1, 248061, 22050, "3f201961d4fc2cc8"),
    "stereo": (2, 222701, 44100, "0545b299444f669f"),  # step 1
    "three_channels": (3, 24799, 16000, "f70a2c55dd228534"),
    "tiny": (1, 911, 16000, "76387499917aae85"),  # 7 ms: 112 frames kept + 799-frame pad
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_golden(name):
    rate, channels, sections, dtype = CASES[name]
    out, out_rate = silence.preprocess_reference(make(rate, channels, sections, dtype), rate)
    assert (out.shape[0], out.shape[1], out_rate, digest(out)) == EXPECTED[name]
    assert out.dtype == (np.int16 if name == "all_silent" else dtype)


def test_trim_reference_matches_the_ints():
    # A 16-bit file loads as ints / 32768: trim_reference gives upstream's WAV read back as float32.
    rate, channels, sections, dtype = CASES["stereo"]
    ints = make(rate, channels, sections, dtype)
    out, out_rate = silence.preprocess_reference(ints, rate)
    trimmed = silence.trim_reference(torch.from_numpy(ints.astype(np.float32) / 32768), rate)
    assert trimmed.dtype == torch.float32 and out_rate == silence.output_rate(rate) == rate
    assert torch.equal(trimmed, torch.from_numpy(out.astype(np.float32) / 32768))
    mono = silence.trim_reference(torch.from_numpy(make(8000, 1, CASES["rate_8k"][2])[0] / 32768), 8000)
    assert mono.shape == (1, 66701) and silence.output_rate(8000) == 11025


@pytest.mark.parametrize("name", ["all_silent", "faint"])
def test_trim_reference_refuses_silence(name):
    rate, channels, sections, dtype = CASES[name]
    with pytest.raises(InputError, match="silent"):
        silence.trim_reference(torch.from_numpy(make(rate, channels, sections, dtype) / 32768), rate)


@pytest.mark.parametrize("wave", [torch.zeros(1, 0), torch.full((1, 100), float("nan")), torch.zeros(2, 2, 2)])
def test_trim_reference_bad_input(wave):
    with pytest.raises(InputError):
        silence.trim_reference(wave, 16000)


def test_to_pcm16():
    x = torch.tensor([[0.5, 1.0, -1.5, 1 / 65536, 3 / 65536, -3 / 65536, 0.25 + 1e-6, -32768 / 32768]])
    assert silence.to_pcm16(x).tolist() == [[16384, 32767, -32768, 0, 2, -2, 8192, -32768]]


def test_rms_and_dbfs_match_audioop_and_pydub():
    a = np.array([1, -2, 3, 32767, -32768, 12345], dtype=np.int16)
    b = np.array([2**31 - 1, -2**31, 123456789, -987654321, 5], dtype=np.int32)
    assert silence.rms(a) == 19578 and silence.rms(b) == 1429270769 and silence.rms(a[:0]) == 0
    assert silence.max_amplitude(np.int16) == 32768.0 and silence.max_amplitude(np.int32) == 2147483648.0
    assert silence.dbfs(19578, np.int16) == pytest.approx(-4.473632215763987, abs=1e-12)
    assert silence.dbfs(1429270769, np.int32) == pytest.approx(-3.536307076743471, abs=1e-12)
    assert silence.dbfs(0, np.int16) == -float("inf")
    assert silence.db_to_float(-50) * 32768 == pytest.approx(103.62151436839746, abs=1e-12)


def test_lengths_and_slices():
    # pydub rounds lengths half to even and can slice past the data, padding with zero frames.
    assert [silence.length_ms(n, 16000) for n in (8, 24, 40, 41)] == [0, 2, 2, 3]
    seg = silence._Segment(np.arange(1, 25, dtype=np.int16)[:, None], 16000)  # 1.5 ms -> len 2
    assert len(seg) == 2 and seg.slice(0, 5).data[:, 0].tolist() == list(range(1, 25)) + [0] * 8
    assert seg.slice(2, 2).data.shape == (0, 1)
    assert silence.detect_leading_silence(silence._Segment(np.zeros((24, 1), np.int16), 16000)) == 2


def test_ratecv_matches_audioop():
    mono = np.array([1000, -2000, 3000, 32767, -32768, 7], dtype=np.int16)[:, None]
    assert silence._ratecv(mono, 8000, 11025)[:, 0].tolist() == [1000, -1177, 256, 8264, 29864, -8397, -21175]
    stereo = np.array([[1000, -1000], [-2000, 2000], [3000, 5], [32767, -32768]], dtype=np.int16)
    assert silence._ratecv(stereo, 7000, 11025).ravel().tolist() == [
        1000, -1000, -905, 904, -651, 1461, 2523, 195, 19064, -17683]


@pytest.mark.parametrize("rate, frames", [(11025, 551), (16000, 799), (22050, 1101), (24000, 1198),
                                          (44100, 2201), (48000, 2395)])
def test_pad_is_ratecv_of_551_frames(rate, frames):
    pad = silence._Segment.silent(silence.PAD_MS).converted(2, rate, np.int32).data
    assert pad.shape == (frames, 2) and pad.dtype == np.int32 and not pad.any()
