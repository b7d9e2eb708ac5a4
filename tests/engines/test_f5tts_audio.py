"""F5-TTS's reference preparation, resampler and cross-fade against literals from f5-tts 1.1.22 / torchaudio 2.11.

The expected values were printed in upstream's environment (torch 2.13 CPU, one thread,
ATEN_CPU_CAPABILITY=avx2): `torchaudio.transforms.Resample(rate, 24000)` (its cached `kernel` and its
output), `torchaudio.functional.resample`'s kernel builder, and `f5_tts.infer.utils_infer.infer_process`
/ `infer_batch_process` run with a stub model and vocoder that recorded the reference they were given
and returned chosen chunk waves. Test signals are integer sawtooths, exact on every machine. Filter taps
are elementwise float64 arithmetic cast to float32 and are compared exactly; values that go through a
convolution or a reduction are compared to 1e-6, since their last bits depend on the CPU kernels. The
bit-exact comparison on random input is `scripts/parity/f5tts_frontend_live.py`.
"""

import math

import numpy as np
import pytest
import torch

from mizuoto.audio import torchaudio_sinc
from mizuoto.core.errors import InputError
from mizuoto.engines.f5tts import audio


def saw(n, mult, scale):
    i = torch.arange(n, dtype=torch.int64)
    return (((i * mult) % 1000).to(torch.float32) / 500 - 1) * scale


def _kernel(orig_freq, functional=False, dtype=torch.float32):
    gcd = math.gcd(orig_freq, 24000)
    orig, new = orig_freq // gcd, 24000 // gcd
    if functional:
        return torchaudio_sinc._sinc_kernel(orig, new, dtype, dtype, dtype)
    return torchaudio_sinc._sinc_kernel(orig, new, torch.float64, torch.float32, torch.float32)


def _sums(kernel):
    values = kernel.flatten().tolist()
    return math.fsum(values), math.fsum(v * i for i, v in enumerate(values))


# torchaudio.transforms.Resample(16000, 24000).kernel, all 48 taps.
KERNEL_16K = [
    -0.0, -2.4526138986402657e-06, 0.0007337729330174625, -0.0025844171177595854, 0.005071021616458893,
    -0.007540243677794933, 0.009341620840132236, 0.9900000095367432, 0.009341620840132236, -0.007540243677794933,
    0.005071021616458893, -0.0025844171177595854, 0.0007337729330174625, -2.4526138986402657e-06, -0.0, -0.0,
    -0.0, -0.0, -0.0005490524345077574, 0.007923898287117481, -0.026932397857308388, 0.06412201374769211,
    -0.14034304022789001, 0.40603768825531006, 0.8158284425735474, -0.17843979597091675, 0.07635568082332611,
    -0.032585009932518005, 0.010875781998038292, -0.001614671084098518, -0.0, -0.0, -0.0, -0.0, -0.0,
    -0.001614671084098518, 0.010875781998038292, -0.032585009932518005, 0.07635568827390671, -0.17843981087207794,
    0.8158283829689026, 0.4060377776622772, -0.1403430551290512, 0.0641220211982727, -0.026932401582598686,
    0.00792390014976263, -0.0005490526091307402, -0.0,
]

# rate -> (kernel shape, width, fsum of taps, fsum of tap * flat index, output length for saw(1000, 7919, 1),
#          output[100:106], fsum of the output)
RESAMPLED = {
    16000: ((3, 1, 16), 7, 3.001397702716531, 71.0437613277345, 1500,
            [0.20136475563049316, 0.0919317901134491, -0.016000589355826378, -0.12395348399877548,
             -0.23338650166988373, -0.3385504484176636], -1.2407494130434316),
    44100: ((80, 1, 171), 12, 80.03734386251439, 547381.9889871506, 545,
            [-0.9556822776794434, 0.03309096768498421, 0.8217602372169495, 0.2632313072681427, 0.0685272365808487,
             -0.2512523829936981], -0.5587824761169031),
    48000: ((1, 1, 28), 13, 1.0004569764373628, 13.005940693685716, 500,
            [0.7296060919761658, 0.22466428577899933, -0.04295090585947037, -0.330832839012146, -0.8155744671821594,
             0.4749909043312073], -0.27189678649570936),
    22050: ((160, 1, 161), 7, 160.07468749612136, 2061693.986153136, 1089,
            [0.1165294423699379, -0.03244370222091675, -0.18458449840545654, -0.31115368008613586,
             -0.5295400619506836, -0.5188326835632324], -1.106845451053232),
    8000: ((3, 1, 15), 7, 3.0013976516102048, 67.0410417630219, 3000,
           [-0.38565292954444885, -0.4356555938720703, -0.5117257833480835, -0.6016277074813843, -0.6629356741905212,
            -0.6635899543762207], -1.9911308346322585),
}


def test_transform_kernel_16k_is_torchaudios_tap_for_tap():
    kernel, width = _kernel(16000)
    assert kernel.dtype == torch.float32 and width == 7
    assert kernel.flatten().tolist() == KERNEL_16K


@pytest.mark.parametrize("rate", list(RESAMPLED))
def test_transform_kernel_matches_torchaudio(rate):
    shape, width, total, weighted, *_ = RESAMPLED[rate]
    kernel, got_width = _kernel(rate)
    assert (tuple(kernel.shape), got_width) == (shape, width)
    assert _sums(kernel) == (total, weighted)


def test_functional_kernel_is_built_in_the_waveforms_dtype():
    # torchaudio.functional.resample builds its taps in the waveform's dtype: float32 taps differ from
    # the transform's float64-built ones in the last bits, float64 taps match them before rounding.
    for rate, float32_sums, float64_sums in [
        (16000, (3.0013974582079754, 71.04375316426285), (3.001397641785196, 71.04375944347994)),
        (44100, (80.03734282129238, 547381.9836940704), (80.03734385237942, 547381.98790041)),
    ]:
        assert _sums(_kernel(rate, functional=True)[0]) == pytest.approx(float32_sums, abs=1e-6)
        assert _sums(_kernel(rate, functional=True, dtype=torch.float64)[0]) == float64_sums
        assert not torch.equal(_kernel(rate, functional=True)[0], _kernel(rate)[0])


@pytest.mark.parametrize("rate", list(RESAMPLED))
def test_resample_matches_torchaudio_transform(rate):
    *_, length, window, total = RESAMPLED[rate]
    out = audio.resample(saw(1000, 7919, 1.0), rate, 24000)
    assert out.dtype == torch.float32 and out.shape == (length,)
    assert out[100:106].tolist() == pytest.approx(window, abs=1e-6)
    assert math.fsum(out.double().tolist()) == pytest.approx(total, abs=1e-5)


def test_resample_keeps_leading_axes_and_rows_independent():
    wave = torch.stack([saw(1000, 7919, 1.0), saw(1000, 104729, 0.5)])[None]  # (1, 2, 1000)
    out = audio.resample(wave, 44100, 24000)
    assert out.shape == (1, 2, 545)
    torch.testing.assert_close(out[0, 0], audio.resample(wave[0, 0], 44100, 24000), rtol=0, atol=1e-6)


def test_resample_output_length_uses_torchaudios_float32_ceiling():
    # 80 * 240854 / 147 = 131077.0068...: the float32 value rounds to 131077, so torchaudio (and we)
    # return one sample fewer than the exact ceiling.
    assert audio.resample(torch.zeros(240854), 44100, 24000).shape == (131077,)
    assert audio.resample(torch.zeros(1000000), 44100, 24000).shape == (math.ceil(80 * 1000000 / 147),)


def test_resample_same_rate_and_bad_input():
    wave = saw(100, 7919, 1.0)
    assert audio.resample(wave, 24000, 24000) is wave
    with pytest.raises(InputError):
        audio.resample(wave, 0, 24000)
    with pytest.raises(InputError):
        audio.resample(torch.zeros(10, dtype=torch.int16), 16000, 24000)
    assert audio.resample(wave.double(), 16000, 24000).dtype == torch.float64


# --- reference and loudness ---------------------------------------------------------------------------------


def test_prepare_reference_quiet_stereo_matches_upstream():
    stereo = torch.stack([saw(154350, 7919, 0.02), saw(154350, 104729, 0.03)])  # 3.5 s at 44.1 kHz
    cond, rms = audio.prepare_reference(stereo, 44100)
    assert float(rms) == pytest.approx(0.009922100231051445, rel=1e-6)
    assert cond.shape == (1, 84000) and cond.dtype == torch.float32
    assert cond[0, 1000:1004].tolist() == pytest.approx(
        [-0.07503093779087067, 0.0029778832104057074, 0.04463464394211769, 0.059664834290742874], abs=1e-6)
    assert math.fsum(cond.double().flatten().tolist()) == pytest.approx(-21.053461717720346, abs=1e-3)


def test_prepare_reference_loud_mono_is_only_resampled():
    mono = saw(67200, 7919, 0.5)
    cond, rms = audio.prepare_reference(mono, 16000)
    assert float(rms) == pytest.approx(0.28868234157562256, rel=1e-6)
    assert cond.shape == (1, 100800)
    assert cond[0, 1000:1004].tolist() == pytest.approx(
        [0.19014601409435272, 0.5716456770896912, 0.39633747935295105, 0.29373061656951904], abs=1e-6)
    torch.testing.assert_close(cond, audio.resample(mono[None], 16000, 24000), rtol=0, atol=0)


def test_prepare_reference_rejects_silence_and_bad_shapes():
    with pytest.raises(InputError, match="silent"):
        audio.prepare_reference(torch.zeros(2, 1000), 24000)
    with pytest.raises(InputError):
        audio.prepare_reference(torch.zeros(1, 2, 1000), 24000)
    with pytest.raises(InputError, match="empty"):
        audio.prepare_reference(torch.zeros(1, 0), 24000)


def test_restore_loudness_undoes_the_raise_only_for_quiet_references():
    wave = saw(100, 7919, 1.0)
    quiet = torch.tensor(0.02)
    torch.testing.assert_close(audio.restore_loudness(wave, quiet), wave * quiet / 0.1, rtol=0, atol=0)
    assert audio.restore_loudness(wave, torch.tensor(0.3)) is wave


# --- cross-fade ----------------------------------------------------------------------------------------------------


def _wav(n, mult, scale):
    return saw(n, mult, scale).numpy()


# name -> (chunks, cross_fade_duration, dtype, length, fsum, values at [0, 1399, 1400, 1500, 4999, -1])
CROSS_FADES = {
    "three chunks, the last shorter than the overlap": (
        [_wav(5000, 7919, 0.5), _wav(2000, 104729, 0.4), _wav(100, 31, 0.3)], 0.15, np.float64, 5000,
        -1.3806924018793838,
        [-0.5, 0.1809999942779541, 0.10000002384185791, 0.0, -0.25859999656677246, -0.25859999656677246]),
    "no cross-fade": (
        [_wav(5000, 7919, 0.5), _wav(2000, 104729, 0.4)], 0.0, np.float32, 7000, -3.2999998931773007,
        [-0.5, 0.1809999942779541, 0.10000002384185791, 0.0, -0.4189999997615814, -0.18320000171661377]),
    "one chunk": (
        [_wav(5000, 7919, 0.5)], 0.15, np.float32, 5000, -2.499999850988388,
        [-0.5, 0.1809999942779541, 0.10000002384185791, 0.0, -0.4189999997615814, -0.4189999997615814]),
    "short cross-fade": (
        [_wav(5000, 7919, 0.5), _wav(1000, 104729, 0.4)], 0.01, np.float64, 5760, -2.3052550331698183,
        [-0.5, 0.1809999942779541, 0.10000002384185791, 0.0, -0.21519999206066132, -0.18320000171661377]),
}


@pytest.mark.parametrize("case", list(CROSS_FADES))
def test_cross_fade_matches_upstream(case):
    chunks, duration, dtype, length, total, values = CROSS_FADES[case]
    joined = audio.cross_fade(chunks, 24000, duration)
    assert joined.dtype == dtype and joined.shape == (length,)
    assert math.fsum(joined.astype(np.float64).tolist()) == total  # elementwise float64: exact everywhere
    assert joined[[0, 1399, 1400, 1500, 4999, -1]].tolist() == values


def test_cross_fade_accepts_tensors_and_rejects_nothing_to_join():
    chunks = [torch.from_numpy(_wav(5000, 7919, 0.5)), torch.from_numpy(_wav(1000, 104729, 0.4))]
    expected = CROSS_FADES["short cross-fade"]
    assert math.fsum(audio.cross_fade(chunks, 24000, 0.01).tolist()) == expected[4]
    with pytest.raises(InputError):
        audio.cross_fade([], 24000, 0.15)
