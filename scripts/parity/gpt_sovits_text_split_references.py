#!/usr/bin/env python
"""Golden fragments of GPT-SoVITS's text cutting, written by upstream's own code from an RVC-Boss/GPT-SoVITS
checkout: `TTS_infer_pack/text_segmentation_method.py` loaded from its file, and TextPreprocessor's
`replace_consecutive_punctuation`, `pre_seg_text` and `filter_text` with `get_first` and
`merge_short_text_in_array`, taken from `TTS_infer_pack/TextPreprocessor.py` by its syntax tree and run as they
are (the module itself imports the whole text front end, transformers and the i18n tool at the top; these
functions need none of it). Strings only: the same on every machine.

    python scripts/parity/gpt_sovits_text_split_references.py OUTDIR --checkout PATH

Writes OUTDIR/golden/text_split.json: per text, language and method, upstream's fragments (preprocess's cutting)
and the method's own output; and OUTDIR/references.json: the upstream commit and the case names.
"""

from __future__ import annotations

import ast
import importlib.util
import re
import sys
import types
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from pinned import checkout_golden_arguments, write_golden_set  # noqa: E402

TEXTS = {
    "zh": "先帝创业未半而中道崩殂，今天下三分，益州疲弊，此诚危急存亡之秋也。然侍卫之臣不懈于内，忠志之士忘身于外者，"
          "盖追先帝之殊遇，欲报之于陛下也。诚宜开张圣听，以光先帝遗德！",
    "en": "Hello there. The price is 3.50 dollars, isn't it? Yes... well -- maybe! Numbers like 1.5 and 2.75 stay "
          "whole. Another sentence follows here, and then one more; finally the end.",
    "mixed": "我们今天用 GPT-SoVITS 合成语音。It works, 对吧？好的！！！这是第三句……然后——第四句",
    "short_first": "嗯，好吧。我们开始吧，今天天气不错",
    "ja": "こんにちは。今日はいい天気ですね！散歩に行きましょうか？",
    "punctuation_runs": "真的吗？？？！！是的。。。没错,,,,好",
    "lines": "第一行文字在这里。\n\n第二行\n\n\n第三行也在这里！\n…\n",
    "long": "这是一个很长的句子" * 70 + "，然后" + "继续很长的句子" * 10 + "。",
}
LANGUAGES = {"zh": "zh", "en": "en", "mixed": "zh", "short_first": "zh", "ja": "ja", "punctuation_runs": "zh",
             "lines": "zh", "long": "zh"}
METHODS = ("cut0", "cut1", "cut2", "cut3", "cut4", "cut5")


def upstream(checkout: Path):
    """(the segmentation module, a stand-in TextPreprocessor holding upstream's own methods)."""
    folder = checkout / "GPT_SoVITS" / "TTS_infer_pack"
    spec = importlib.util.spec_from_file_location("text_segmentation_method", folder / "text_segmentation_method.py")
    segmentation = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(segmentation)
    tree = ast.parse((folder / "TextPreprocessor.py").read_text(encoding="utf-8"))
    wanted_functions = {"get_first", "merge_short_text_in_array"}
    wanted_methods = {"pre_seg_text", "filter_text", "replace_consecutive_punctuation"}
    nodes = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name in wanted_functions]
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == "TextPreprocessor":
            nodes += [n for n in node.body if isinstance(n, ast.FunctionDef) and n.name in wanted_methods]
    assert {n.name for n in nodes} == wanted_functions | wanted_methods, "upstream's functions moved"
    punctuation = next(n for n in tree.body if isinstance(n, ast.Assign)
                       and getattr(n.targets[0], "id", None) == "punctuation")
    namespace = {"re": re, "splits": segmentation.splits, "split_big_text": segmentation.split_big_text,
                 "get_seg_method": segmentation.get_method, "i18n": lambda s: s, "print": lambda *a, **k: None,
                 "List": list, "Dict": dict, "Tuple": tuple}
    exec(compile(ast.Module(body=[punctuation, *nodes], type_ignores=[]), "TextPreprocessor.py", "exec"), namespace)
    preprocessor = types.SimpleNamespace()
    for name in wanted_methods:
        setattr(preprocessor, name, types.MethodType(namespace[name], preprocessor))
    return segmentation, preprocessor


def fragments(preprocessor, text: str, language: str, method: str):
    """preprocess's cutting: replace_consecutive_punctuation, then pre_seg_text."""
    try:
        return preprocessor.pre_seg_text(preprocessor.replace_consecutive_punctuation(text), language, method)
    except ValueError as error:
        return {"error": str(error)}


def main() -> None:
    out, checkout, record = checkout_golden_arguments(__doc__.split("\n\n")[0], "RVC-Boss/GPT-SoVITS")
    segmentation, preprocessor = upstream(checkout)
    cases = {}
    for name, text in {**TEXTS, "blank": " \n \n"}.items():
        language = LANGUAGES.get(name, "zh")
        for method in METHODS:
            cases[f"{name}/{method}"] = {"text": text, "language": language, "method": method,
                                         "method_output": segmentation.get_method(method)(text.strip("\n") or " "),
                                         "fragments": fragments(preprocessor, text, language, method)}
    cases["long/split_big_text"] = {"text": TEXTS["long"], "pieces": segmentation.split_big_text(TEXTS["long"])}
    write_golden_set(out, "text_split", record, {"cases": cases})


if __name__ == "__main__":
    main()
