"""Live parity of Mizuoto's F5-TTS text frontend and reference/chunk audio against f5-tts 1.1.22 (dev only).

Run it with the Python of an environment that has upstream installed (f5-tts, pypinyin 0.55.0, rjieba
0.2.2, torchaudio's pure-Python parts); our modules are imported from the clone given by --ours:

    .venv-f5tts-upstream/bin/python scripts/parity/f5tts_frontend_live.py [--ours /path/to/clone] [--cases N] [--seed S]

It pins one intra-op thread and ATEN_CPU_CAPABILITY=avx2 (re-executing itself to set the variable
before torch loads). Everything must be identical; compared on random texts (English, Chinese, mixed,
digits, punctuation, other scripts, whitespace) and random audio:

- `convert_char_to_pinyin` (polyphone on and off, including the inputs upstream fails on), the vocabulary
  and `list_str_to_idx` for batches, `chunk_text` for many budgets;
- `preprocess_ref_audio_text`'s transcript rule (its audio step is skipped by pre-filling its cache);
- `resample` against `torchaudio.transforms.Resample` and `torchaudio.functional.resample` for many rate
  pairs, lengths (long ones included, where torchaudio's float32 length rounding bites), dtypes, shapes;
- the whole `infer_process` -> `infer_batch_process` path with a stub model and vocoder (recording what
  they are given and returning deterministic values): the reference the model conditions on, each
  chunk's token list and duration, and the final cross-faded wave, for quiet and loud, mono and stereo
  references at several rates, speeds, fixed durations and cross-fade lengths.
Exit status 1 when anything differs.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import io
import math
import os
import random
import sys
import tempfile
from importlib import resources
from pathlib import Path

from pinned import add_ours_argument, pin_process  # beside this script


def _parse():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_ours_argument(parser)
    parser.add_argument("--cases", type=int, default=400, help="random texts per text check")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1)
    return parser.parse_args()


pin_process()
ARGS = _parse()
sys.path.insert(0, str(ARGS.ours.resolve()))

import warnings  # noqa: E402

warnings.filterwarnings("ignore", message="Couldn't find ffmpeg")

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torchaudio  # noqa: E402
from f5_tts.infer import utils_infer as upstream_infer  # noqa: E402
from f5_tts.model import utils as upstream_utils  # noqa: E402

from mizuoto.core.errors import InputError  # noqa: E402
from mizuoto.engines.f5tts import audio as ours_audio  # noqa: E402
from mizuoto.engines.f5tts import text as ours_text  # noqa: E402

torch.set_num_threads(ARGS.threads)
RNG = random.Random(ARGS.seed)
FAILURES: list[str] = []
COUNTS: dict[str, int] = {}


def check(name: str, same: bool, detail: str = "") -> None:
    COUNTS[name] = COUNTS.get(name, 0) + 1
    if not same:
        FAILURES.append(f"{name}: {detail}"[:600])


def outcome(fn, *args, **kwargs):
    """('ok', value) or ('error', None): upstream crashes where ours raises InputError."""
    try:
        return "ok", fn(*args, **kwargs)
    except (IndexError, InputError):
        return "error", None


# --- random texts -----------------------------------------------------------------------------------

ENGLISH = ("the quick brown fox jumps over lazy dog I don't can't it's Dr. Smith e.g. OK hello world "
           "ChatGPT F5-TTS U.S.A. co-operate naïve café résumé Zoë").split()
CHINESE = ("你好世界我们今天去北京上海天气很好一个不是的了吗呢吧啊哈喂这那里面中文语音合成模型测试长城"
           "银行行走重要重新朝阳长大还是会计乐器音乐快乐地得着了解一一二三四五六七八九十百千万亿")
PUNCTUATION = list(",.;:!?'\"-()[]…—，。；：！？、「」『』《》“”‘’～·%$#@&*/")
OTHER = list("Àéñüßāēīōūǎǐǒǔあいうカタ가나다ＡＢＣ１２３😀🎉㐀㑒ㄅㄆ㊀") + ["\u3000", "\u00a0"]
SPACES = [" ", " ", " ", "  ", "\n", "\t", " \n "]


def random_text(max_pieces: int = 14) -> str:
    pieces = []
    for _ in range(RNG.randint(1, max_pieces)):
        kind = RNG.random()
        if kind < 0.3:
            pieces.append(RNG.choice(ENGLISH))
        elif kind < 0.55:
            pieces.append("".join(RNG.choice(CHINESE) for _ in range(RNG.randint(1, 6))))
        elif kind < 0.65:
            pieces.append(str(RNG.randint(0, 10 ** RNG.randint(1, 6))) + RNG.choice(["", ".5", ",000", "%"]))
        elif kind < 0.82:
            pieces.append(RNG.choice(PUNCTUATION))
        elif kind < 0.9:
            pieces.append(RNG.choice(OTHER))
        elif kind < 0.93:
            pieces.append(chr(RNG.randint(0x3100, 0x9FFF)))  # anything upstream calls Chinese
        else:
            pieces.append("")
        pieces.append(RNG.choice(SPACES) if RNG.random() < 0.6 else "")
    return "".join(pieces)


def sentences_text() -> str:
    """Longer text with sentence punctuation, for chunking."""
    return "".join(random_text(6) + RNG.choice([". ", "! ", "? ", ", ", "; ", ": ", "。", "，", "！", "？", "；", "：",
                                                 ".", " ", ".\n", "...  "])
                   for _ in range(RNG.randint(0, 12)))


# --- text checks -------------------------------------------------------------------------------------


def check_vocab():
    path = Path(str(resources.files("f5_tts").joinpath("infer/examples/vocab.txt")))
    theirs, size = upstream_utils.get_tokenizer(str(path), "custom")
    ours = ours_text.load_vocab()
    check("vocab shipped == upstream default", ours == theirs and len(ours) == size, f"{len(ours)} vs {size}")
    check("vocab file bytes", path.read_bytes() == ours_text.VOCAB_PATH.read_bytes())
    with tempfile.TemporaryDirectory() as folder:
        for name, content in {"no_final_newline": "a\nbb\n c", "crlf": " \r\nx\r\ny\r\n", "duplicates": "a\nb\na\n",
                              "cr_only": "a\rb\rc\n", "empty_lines": "\n\nq\n"}.items():
            file = Path(folder) / f"{name}.txt"
            file.write_bytes(content.encode("utf-8"))
            theirs, size = upstream_utils.get_tokenizer(str(file), "custom")
            ours = ours_text.load_vocab(file)
            check("vocab edge files", ours == theirs and len(ours) == size, f"{name}: {ours} vs {theirs}")
    return theirs


def check_pinyin_and_ids(vocab):
    texts = [random_text() for _ in range(ARGS.cases)]
    texts += ["", " ", "hello,world", "２０２４年", "㑒㑓", "你好——世界……", "A“quoted”‘x’; ok", "一、二、三"]
    for text in texts:
        for polyphone in (True, False):
            theirs = outcome(upstream_utils.convert_char_to_pinyin, [text], polyphone=polyphone)
            ours = outcome(ours_text.convert_char_to_pinyin, [text], polyphone=polyphone)
            check("convert_char_to_pinyin", theirs == ours, f"{text!r} polyphone={polyphone}: {theirs} vs {ours}")
    for _ in range(ARGS.cases // 4):
        batch = [random_text() for _ in range(RNG.randint(1, 4))]
        kind, tokens = outcome(upstream_utils.convert_char_to_pinyin, batch)
        if kind != "ok" or not all(tokens):  # upstream makes an empty row float; covered by the unit tests
            continue
        theirs = upstream_utils.list_str_to_idx(tokens, vocab)
        ours = ours_text.tokens_to_ids(tokens, vocab)
        check("list_str_to_idx", theirs.dtype == ours.dtype and torch.equal(theirs, ours), f"{batch!r}")


def check_chunks():
    for _ in range(ARGS.cases):
        text = sentences_text()
        for max_chars in (-5, 0, 1, 10, 30, 50, 135, 300, RNG.randint(2, 400)):
            theirs = upstream_infer.chunk_text(text, max_chars)
            ours = ours_text.chunk_text(text, max_chars)
            check("chunk_text", theirs == ours, f"{text!r} {max_chars}: {theirs} vs {ours}")
    check("chunk_text default budget", upstream_infer.chunk_text(text) == ours_text.chunk_text(text))


_FAKE_AUDIO = Path(tempfile.gettempdir()) / "mizuoto_f5_not_audio.bin"


def upstream_punctuate(ref_text: str) -> str:
    """preprocess_ref_audio_text's transcript rule; a pre-filled cache entry for the (fake) audio file's
    hash makes it skip its pydub step."""
    if not _FAKE_AUDIO.exists():
        _FAKE_AUDIO.write_bytes(b"not audio")
    upstream_infer._ref_audio_cache[hashlib.md5(b"not audio").hexdigest()] = "cached.wav"
    with contextlib.redirect_stdout(io.StringIO()):
        return upstream_infer.preprocess_ref_audio_text(str(_FAKE_AUDIO), ref_text, show_info=lambda *_: None)[1]


def check_reference_text():
    texts = [random_text(5) + RNG.choice(["", ".", ". ", "。", " ", "..", ".  ", "!", "？"]) for _ in range(ARGS.cases)]
    for text in texts:
        if text.strip():
            theirs = upstream_punctuate(text)
            ours = ours_text.punctuate_reference_text(text)
            check("preprocess_ref_audio_text transcript", theirs == ours, f"{text!r}: {theirs!r} vs {ours!r}")


# --- resampling ----------------------------------------------------------------------------------------

RATE_PAIRS = [(16000, 24000), (44100, 24000), (48000, 24000), (22050, 24000), (8000, 24000), (32000, 24000),
              (11025, 24000), (96000, 24000), (12345, 24000), (24000, 16000), (24000, 44100), (44100, 16000)]


def check_resample():
    for orig, new in RATE_PAIRS:
        for length in (1, 7, 1000, RNG.randint(2000, 90000)):
            for shape in ((length,), (1, length), (2, length), (2, 3, length)):
                wave = torch.randn(shape, generator=torch.Generator().manual_seed(length + orig))
                theirs = torchaudio.transforms.Resample(orig, new)(wave)
                ours = ours_audio.resample(wave, orig, new)
                check("resample == transforms.Resample", _same(theirs, ours), f"{orig}->{new} {shape}")
                for dtype in (torch.float32, torch.float64):
                    theirs = torchaudio.functional.resample(wave.to(dtype), orig, new)
                    ours = ours_audio.resample(wave.to(dtype), orig, new, transform_kernel=False)
                    check("resample == functional.resample", _same(theirs, ours), f"{orig}->{new} {shape} {dtype}")
    # Long inputs whose exact output length 80 n / 147 has a fractional part that torchaudio's float32
    # ceiling drops (one sample short of ceil(80 n / 147)), and one where it does not.
    for length in (240854, 500015, 1000019, 1000000):
        wave = torch.randn(length, generator=torch.Generator().manual_seed(length))
        theirs = torchaudio.transforms.Resample(44100, 24000)(wave)
        ours = ours_audio.resample(wave, 44100, 24000)
        check("resample long (float32 length)", _same(theirs, ours), f"{length}: {theirs.shape} vs {ours.shape}")
        one_short = ours.shape[-1] < math.ceil(80 * length / 147)
        check("resample long: rounding case exercised", one_short == (length != 1000000), f"{length}")


def _same(a, b) -> bool:
    if isinstance(a, torch.Tensor):
        return a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b)
    return a.dtype == b.dtype and a.shape == b.shape and np.array_equal(a, b)


# --- the inference path with a stub model and vocoder ------------------------------------------------------


class StubModel:
    """Records each `sample` call and returns a mel that depends on everything it was given."""

    def __init__(self):
        self.calls = []

    def sample(self, cond, text, duration, **_):
        self.calls.append((cond.clone(), [list(t) for t in text], duration))
        return stub_mel(cond, text, duration), None


def stub_mel(cond, text, duration):
    seed = int(hashlib.sha256(repr((text, duration, cond.shape)).encode()).hexdigest()[:8], 16)
    noise = torch.randn(1, duration, 100, generator=torch.Generator().manual_seed(seed))
    return noise + cond.mean()


class StubVocoder:
    @staticmethod
    def decode(mel):  # (1, 100, frames) -> (1, frames * 256)
        return torch.tanh(mel.mean(1)).repeat_interleave(256, dim=-1) * 0.5


def our_inference(wave, sr, ref_text, gen_text, *, speed, fix_duration, cross_fade_duration, target_rms):
    """What the engine will do around the model, assembled from our modules."""
    cond, rms = ours_audio.prepare_reference(wave, sr, target_rms)
    plan = ours_text.plan_chunks(ref_text, gen_text, ref_samples=wave.shape[-1], sample_rate=sr,
                                 ref_samples_24k=cond.shape[-1], speed=speed, fix_duration=fix_duration,
                                 cross_fade_duration=cross_fade_duration)
    if not plan:
        return cond, [], None
    calls, waves = [], []
    ref_frames = ours_text.reference_frames(cond.shape[-1])
    for chunk in plan:
        tokens = ours_text.convert_char_to_pinyin([chunk.text])
        calls.append((cond, tokens, chunk.frames))
        mel = stub_mel(cond, tokens, chunk.frames)[:, ref_frames:, :].permute(0, 2, 1)
        generated = ours_audio.restore_loudness(StubVocoder.decode(mel), rms, target_rms)
        waves.append(generated.squeeze().cpu().numpy())
    return cond, calls, ours_audio.cross_fade(waves, ours_audio.SAMPLE_RATE, cross_fade_duration)


def check_inference(cases: int):
    for case in range(cases):
        sr = RNG.choice([16000, 22050, 24000, 44100, 48000, 8000])
        seconds = RNG.choice([0.6, 1.5, 3.0, 5.0, 9.0, 12.0, 23.0])
        channels = RNG.choice([1, 2])
        loudness = RNG.choice([0.01, 0.05, 0.3, 0.9])
        wave = loudness * torch.randn(channels, int(seconds * sr), generator=torch.Generator().manual_seed(case))
        ref_text = random_text(8) or "x"
        if not ref_text.strip():
            ref_text += "ref"
        gen_text = sentences_text() + random_text(4)
        speed = RNG.choice([1.0, 1.0, 0.7, 1.3])
        fix_duration = RNG.choice([None, None, None, seconds + 4.0])
        cross_fade_duration = RNG.choice([0.15, 0.15, 0.0, 0.01, 1.0])
        target_rms = 0.1

        kind, ours = outcome(our_inference, wave, sr, ref_text + (". " if case % 3 == 0 else ""), gen_text,
                             speed=speed, fix_duration=fix_duration, cross_fade_duration=cross_fade_duration,
                             target_rms=target_rms)
        model = StubModel()
        upstream_infer.torchaudio.load = lambda _path, _w=wave, _sr=sr: (_w.clone(), _sr)
        try:
            with contextlib.redirect_stdout(io.StringIO()):
                final, _, _ = upstream_infer.infer_process(
                    "ref.wav", upstream_punctuate(ref_text + (". " if case % 3 == 0 else "")),
                    gen_text, model, StubVocoder(), show_info=lambda *_: None, progress=None,
                    target_rms=target_rms, cross_fade_duration=cross_fade_duration, speed=speed,
                    fix_duration=fix_duration, device="cpu")
            theirs_kind = "ok"
        except IndexError:
            theirs_kind = "error"
        check("inference path outcome", kind == theirs_kind, f"case {case}: {kind} vs {theirs_kind}")
        if kind != "ok" or theirs_kind != "ok":
            continue
        cond, calls, wave_out = ours
        check("chunk count", len(calls) == len(model.calls), f"case {case}: {len(calls)} vs {len(model.calls)}")
        # infer_batch_process runs chunks on a thread pool: match its calls by their text.
        theirs_by_text = {repr(c[1]): c for c in model.calls}
        for ours_cond, tokens, frames in calls:
            theirs = theirs_by_text.get(repr(tokens))
            check("chunk tokens", theirs is not None, f"case {case}: {tokens}")
            if theirs is None:
                continue
            check("reference cond", _same(theirs[0], ours_cond), f"case {case} sr {sr} ch {channels}")
            check("chunk duration", theirs[2] == frames, f"case {case}: {theirs[2]} vs {frames}")
        if final is None or wave_out is None:
            check("final wave presence", final is None and wave_out is None, f"case {case}")
        else:
            check("final wave", _same(final, wave_out), f"case {case}: {getattr(final, 'dtype', None)} "
                  f"{getattr(final, 'shape', None)} vs {wave_out.dtype} {wave_out.shape}")


def main() -> int:
    vocab = check_vocab()
    check_pinyin_and_ids(vocab)
    check_chunks()
    check_reference_text()
    check_resample()
    check_inference(max(40, ARGS.cases // 4))
    for name, count in COUNTS.items():
        print(f"{name:40s} {count:6d} compared")
    print(f"threads {torch.get_num_threads()}, ATEN_CPU_CAPABILITY={os.environ.get('ATEN_CPU_CAPABILITY')}, "
          f"torch {torch.__version__}, torchaudio {torchaudio.__version__}")
    if FAILURES:
        print(f"\n{len(FAILURES)} differences:")
        for line in FAILURES[:40]:
            print("  " + line)
        return 1
    print("all identical")
    return 0


if __name__ == "__main__":
    sys.exit(main())
