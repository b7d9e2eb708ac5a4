#!/usr/bin/env python
"""Extracts the data tables of GPT-SoVITS's Chinese front end from an RVC-Boss/GPT-SoVITS checkout into
engines/gpt_sovits/assets/, so that the shipped tables are reproducible from the commit they came from.
Only data is taken (word lists, symbol tables, dictionaries); the code that uses them is ours.

    python scripts/parity/gpt_sovits_zh_data.py --checkout PATH

Reads the files as text (their literals through the syntax tree; symbols2.py, which is plain assignments, is run
alone), so it needs none of the packages upstream imports and runs in any Python 3.11.
- zh_word_lists.json: tone_sandhi.py's must_neural_tone_words / must_not_neural_tone_words, chinese2.py's
  must_erhua / not_erhua, g2pw/onnx_api.py's non_polyphonic / non_monophonic, symbols.py's punctuation and
  symbols2.py's ordered v2 symbol table (the phone ids);
- zh_char_convert.json: zh_normalization/char_convert.py's paired simplified / traditional character strings;
- opencpop-strict.txt (pinyin -> initial and final), polyphonic.rep and polyphonic-fix.rep.gz (the whole-word
  pronunciation corrections G2PW's output gets): copied unchanged (the second gzipped).
"""

from __future__ import annotations

import argparse
import ast
import gzip
import hashlib
import json
import shutil
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from pinned import add_checkout_argument, checkout_record  # noqa: E402

DATA = Path(__file__).resolve().parents[2] / "engines" / "gpt_sovits" / "assets"


def literal(source: Path, name: str):
    """The literal assigned to `name` (a module variable or `self.name` in a method) in `source`."""
    for node in ast.walk(ast.parse(source.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target = node.targets[0]
            found = getattr(target, "id", None) or (getattr(target, "attr", None)
                                                     if isinstance(target, ast.Attribute) else None)
            if found == name:
                return ast.literal_eval(node.value)
    raise SystemExit(f"{name} is no longer a literal in {source}: upstream changed, read it again")


def v2_symbols(text: Path) -> list[str]:
    namespace: dict = {}
    exec(compile((text / "symbols2.py").read_text(encoding="utf-8"), "symbols2.py", "exec"), namespace)
    return list(namespace["symbols"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_checkout_argument(parser)
    args = parser.parse_args()
    checkout = args.checkout.resolve()
    text = checkout / "GPT_SoVITS" / "text"
    record = {"repository": "RVC-Boss/GPT-SoVITS", **checkout_record(checkout)}
    punctuation = literal(text / "symbols.py", "punctuation") + ["-"]  # symbols.py appends "-" after the literal
    assert "punctuation.append(\"-\")" in (text / "symbols.py").read_text(encoding="utf-8")
    lists = {
        "upstream": record,
        "must_neural_tone_words": sorted(literal(text / "tone_sandhi.py", "must_neural_tone_words")),
        "must_not_neural_tone_words": sorted(literal(text / "tone_sandhi.py", "must_not_neural_tone_words")),
        "must_erhua": sorted(literal(text / "chinese2.py", "must_erhua")),
        "not_erhua": sorted(literal(text / "chinese2.py", "not_erhua")),
        "g2pw_non_polyphonic": sorted(literal(text / "g2pw" / "onnx_api.py", "non_polyphonic")),
        "g2pw_non_monophonic": sorted(literal(text / "g2pw" / "onnx_api.py", "non_monophonic")),
        "punctuation": punctuation,
        "symbols_v2": v2_symbols(text),
    }
    DATA.mkdir(parents=True, exist_ok=True)
    convert = text / "zh_normalization" / "char_convert.py"
    pairs = {"upstream": record, "simplified": literal(convert, "simplified_charcters"),
             "traditional": literal(convert, "traditional_characters")}
    assert len(pairs["simplified"]) == len(pairs["traditional"])
    (DATA / "zh_char_convert.json").write_text(json.dumps(pairs, ensure_ascii=False) + "\n", encoding="utf-8")
    (DATA / "zh_word_lists.json").write_text(json.dumps(lists, ensure_ascii=False, indent=0) + "\n", encoding="utf-8")
    shutil.copyfile(text / "opencpop-strict.txt", DATA / "opencpop-strict.txt")
    shutil.copyfile(text / "g2pw" / "polyphonic.rep", DATA / "polyphonic.rep")
    raw = (text / "g2pw" / "polyphonic-fix.rep").read_bytes()
    (DATA / "polyphonic-fix.rep.gz").write_bytes(gzip.compress(raw, compresslevel=9, mtime=0))
    for name in ("zh_char_convert.json", "zh_word_lists.json", "opencpop-strict.txt", "polyphonic.rep"):
        print(name, hashlib.sha256((DATA / name).read_bytes()).hexdigest())
    print("polyphonic-fix.rep (inside the .gz)", hashlib.sha256(raw).hexdigest())


if __name__ == "__main__":
    main()
