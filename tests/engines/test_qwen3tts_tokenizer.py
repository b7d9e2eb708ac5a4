"""Qwen3-TTS text tokenizer (tiktoken byte-level BPE) against ids recorded from transformers 4.57.3's
Qwen2TokenizerFast as upstream's processor loads it (scripts/parity/qwen3tts_tokenizer_live.py checks the
same live, plus a real-size 151643-token vocabulary); the fix_mistral_regex choice; errors for bad folders."""

import json
import shutil
from pathlib import Path

import pytest

from mizuoto.core.errors import CheckpointError
from mizuoto.engines.qwen3tts import tokenizer as qtok

DATA = Path(__file__).resolve().parents[1] / "parity/data/qwen3tts"
KINDS = ("custom_voice", "voice_design", "base")

# (text, ids) from `AutoProcessor.from_pretrained(<tiny folder>, fix_mistral_regex=True)(text=...)`, qwen-tts
# 0.1.1 / transformers 4.57.3 / tokenizers 0.22.2 (the three tiny folders share one tokenizer); printed by
# `scripts/parity/qwen3tts_tokenizer_live.py --print-golden`.
GOLDEN = [
    ('',
     []),
    ('Hello the world, he will be there.',
     [72, 101, 275, 111, 269, 277, 111, 114, 108, 100, 44, 271, 277, 105, 275, 32, 98, 101, 269, 114, 101, 46]),
    ("it's IT'S we'll they'RE I'm you'd 'ſ",
     [105, 116, 39, 115, 32, 73, 84, 39, 83, 277, 101, 39, 275, 269, 121, 39, 82, 69, 32, 73, 39, 109, 32, 121,
      111, 117, 39, 100, 32, 39, 197, 191]),
    ('HelloWorld camelCase x/y//z',
     [72, 101, 275, 111, 87, 111, 114, 108, 100, 32, 99, 97, 109, 101, 108, 67, 256, 101, 32, 120, 47, 121, 47,
      47, 122]),
    ('1234567 3.14159 ½ Ⅻ ١٢٣',
     [49, 50, 51, 52, 53, 54, 55, 32, 51, 46, 49, 52, 49, 53, 57, 32, 194, 189, 32, 226, 133, 171, 32, 217, 161,
      217, 162, 217, 163]),
    ('你好，世界！今天天气很好。',
     [228, 189, 160, 229, 165, 189, 239, 188, 140, 228, 184, 150, 231, 149, 140, 239, 188, 129, 228, 187, 138,
      229, 164, 169, 229, 164, 169, 230, 176, 148, 229, 190, 136, 229, 165, 189, 227, 128, 130]),
    ('こんにちは 한국어 Привет العربية',
     [227, 129, 147, 227, 130, 147, 227, 129, 171, 227, 129, 161, 227, 129, 175, 32, 237, 149, 156, 234, 181, 173,
      236, 150, 180, 32, 208, 159, 209, 128, 208, 184, 208, 178, 208, 181, 209, 130, 32, 216, 167, 217, 132, 216,
      185, 216, 177, 216, 168, 217, 138, 216, 169]),
    ('😀👍🏽👨\u200d👩\u200d👧🇯🇵 ✓—…',
     [240, 159, 152, 128, 240, 159, 145, 141, 240, 159, 143, 189, 240, 159, 145, 168, 226, 128, 141, 240, 159,
      145, 169, 226, 128, 141, 240, 159, 145, 167, 240, 159, 135, 175, 240, 159, 135, 181, 32, 226, 156, 147, 226,
      128, 148, 226, 128, 166]),
    ('café café Å ﬁ Ω ß İ ǅ',
     [99, 97, 102, 195, 169, 32, 99, 97, 102, 195, 169, 32, 195, 133, 32, 239, 172, 129, 32, 206, 169, 32, 195,
      159, 32, 196, 176, 32, 199, 133]),
    ('a\xa0b\u3000c\u2028d\u200be\ufeff',
     [97, 194, 160, 98, 227, 128, 128, 99, 226, 128, 168, 100, 226, 128, 139, 101, 239, 187, 191]),
    ('  lead  and   trail  ',
     [32, 32, 108, 101, 97, 100, 32, 274, 110, 100, 32, 32, 267, 114, 97, 105, 108, 32, 32]),
    ('\t\n\n\r\n \n \x0b\x1c\x85',
     [9, 10, 10, 13, 10, 32, 10, 32, 11, 28, 194, 133]),
    ('!!! ?! ... <| |> \\n "q" (x) [1] {a: b} #t @m $5 100% C++ e.g.',
     [33, 33, 33, 32, 63, 33, 32, 46, 46, 46, 32, 60, 124, 32, 124, 62, 32, 92, 110, 32, 34, 113, 34, 32, 40, 120,
      41, 32, 91, 49, 93, 32, 123, 97, 58, 32, 98, 125, 32, 35, 116, 32, 64, 109, 32, 36, 53, 32, 49, 48, 48, 37,
      32, 67, 43, 43, 32, 101, 46, 103, 46]),
    ('<|im_start|><|im_end|><|endoftext|><tts_pad><tts_text_bos><tts_text_eod>',
     [279, 280, 278, 281, 282, 283]),
    ('<|im_start <|im_end|x <think>',
     [60, 124, 105, 109, 95, 115, 116, 97, 114, 116, 32, 60, 124, 105, 109, 95, 101, 110, 100, 124, 120, 32, 60,
      116, 104, 273, 107, 62]),
    ('\x00\x7f�',
     [0, 127, 239, 191, 189]),
    ('assistant user Assistant USER',
     [263, 32, 266, 32, 65, 115, 115, 105, 115, 116, 97, 110, 116, 32, 85, 83, 69, 82]),
    ("    \n\x1c they'RE",
     [32, 32, 32, 32, 10, 28, 269, 121, 39, 82, 69]),
    ('，ﬁ\t\n你好嗫\x00',
     [239, 188, 140, 239, 172, 129, 9, 10, 228, 189, 160, 229, 165, 189, 229, 151, 171, 0]),
    ('camelCaseWord\x0b',
     [99, 97, 109, 101, 108, 67, 256, 101, 87, 111, 114, 100, 11]),
    ('<tts_text_bos>\x1c3.14159\r\n',
     [282, 28, 51, 46, 49, 52, 49, 53, 57, 13, 10]),
    ('<',
     [60]),
    ('\nالعربيةǅ',
     [10, 216, 167, 217, 132, 216, 185, 216, 177, 216, 168, 217, 138, 216, 169, 199, 133]),
    ('#tag[1]\x0b\ufeff    \n\n',
     [35, 116, 97, 103, 91, 49, 93, 11, 239, 187, 191, 32, 32, 32, 32, 10, 10]),
    ('Å',
     [195, 133]),
    ('𧯝100%',
     [240, 167, 175, 157, 49, 48, 48, 37]),
    ('👍🏽\x1c(🨡   ',
     [240, 159, 145, 141, 240, 159, 143, 189, 28, 40, 240, 159, 168, 161, 32, 32, 32]),
    ("'veⅫ0caféHelloWorld",
     [39, 118, 101, 226, 133, 171, 48, 99, 97, 102, 195, 169, 72, 101, 275, 111, 87, 111, 114, 108, 100]),
    ('   \t    ABCdef世界C++今天天气很好。',
     [32, 32, 32, 9, 32, 32, 32, 32, 65, 66, 67, 100, 101, 102, 228, 184, 150, 231, 149, 140, 67, 43, 43, 228,
      187, 138, 229, 164, 169, 229, 164, 169, 230, 176, 148, 229, 190, 136, 229, 165, 189, 227, 128, 130]),
    ("Å...don't\U000e9cd3",
     [195, 133, 46, 46, 46, 100, 111, 110, 39, 116, 243, 169, 179, 147]),
    ("café<|3.14159½'vehello",
     [99, 97, 102, 195, 169, 60, 124, 51, 46, 49, 52, 49, 53, 57, 194, 189, 39, 118, 101, 104, 101, 275, 111]),
    ('<|im_start|>assistant\nHello, world!<|im_end|>\n<|im_start|>assistant\n',
     [279, 263, 10, 72, 101, 275, 111, 44, 277, 111, 114, 108, 100, 33, 280, 10, 279, 263, 10]),
    ('<|im_start|>assistant\nHello, world!<|im_end|>\n',
     [279, 263, 10, 72, 101, 275, 111, 44, 277, 111, 114, 108, 100, 33, 280, 10]),
    ('<|im_start|>user\nHello, world!<|im_end|>\n',
     [279, 266, 10, 72, 101, 275, 111, 44, 277, 111, 114, 108, 100, 33, 280, 10]),
    ('<|im_start|>assistant\n你好 in the hall.<|im_end|>\n<|im_start|>assistant\n',
     [279, 263, 10, 228, 189, 160, 229, 165, 189, 32, 273, 269, 270, 97, 275, 46, 280, 10, 279, 263, 10]),
    ('<|im_start|>assistant\n你好 in the hall.<|im_end|>\n',
     [279, 263, 10, 228, 189, 160, 229, 165, 189, 32, 273, 269, 270, 97, 275, 46, 280, 10]),
    ('<|im_start|>user\n你好 in the hall.<|im_end|>\n',
     [279, 266, 10, 228, 189, 160, 229, 165, 189, 32, 273, 269, 270, 97, 275, 46, 280, 10]),
    ('<|im_start|>assistant\n<|im_end|>\n<|im_start|>assistant\n',
     [279, 263, 10, 280, 10, 279, 263, 10]),
    ('<|im_start|>assistant\n<|im_end|>\n',
     [279, 263, 10, 280, 10]),
    ('<|im_start|>user\n<|im_end|>\n',
     [279, 266, 10, 280, 10]),
]


@pytest.fixture(scope="module", params=KINDS)
def tiny(request):
    return qtok.load_tokenizer(DATA / request.param)


@pytest.mark.parametrize(("text", "ids"), GOLDEN)
def test_encode_matches_transformers(tiny, text, ids):
    assert tiny.encode(text) == ids


def test_decode_round_trip(tiny):
    for text, ids in GOLDEN:
        # HF's decode gives the NFC text back (the normaliser runs before BPE)
        assert tiny.decode(ids) == qtok.unicodedata.normalize("NFC", text)
    assert tiny.decode([228, 189]) == "\ufffd"  # an unfinished UTF-8 sequence, as from_utf8_lossy


def test_reference_units_and_specials(tiny):
    """The ids references.json recorded through the wrapper's processor, and the config's special ids."""
    refs = json.loads((DATA / "references.json").read_text(encoding="utf-8"))
    for unit in refs["units"]["text_tokenizer"]:
        assert tiny.encode(unit["text"]) == unit["ids"]
        template = f"<|im_start|>assistant\n{unit['text']}<|im_end|>\n<|im_start|>assistant\n"
        assert tiny.encode(template) == unit["assistant_ids"]
    config = json.loads((DATA / "custom_voice/config.json").read_text(encoding="utf-8"))
    assert (tiny.im_start, tiny.im_end, tiny.tts_pad, tiny.tts_bos, tiny.tts_eos) == (
        config["im_start_token_id"], config["im_end_token_id"], config["tts_pad_token_id"],
        config["tts_bos_token_id"], config["tts_eos_token_id"])
    assert tiny.encode("assistant") == [config["assistant_token_id"]]
    assert tiny.pattern == qtok.QWEN2_PATTERN  # 278 base tokens: far below the fix_mistral_regex threshold


def test_merge_order_other_than_id_order(tmp_path):
    """A vocabulary numbering its merged tokens out of merge order goes through the rank -> id table and
    still gives each token its own id."""
    folder = tmp_path / "shuffled"
    shutil.copytree(DATA / "base", folder, ignore=shutil.ignore_patterns("*.safetensors", "speech_tokenizer"))
    (folder / "tokenizer.json").unlink()
    vocab = json.loads((folder / "vocab.json").read_text(encoding="utf-8"))
    merged = [t for t, i in vocab.items() if i >= 256]
    new_ids = dict(zip(merged, reversed(sorted(vocab[t] for t in merged)), strict=True))
    old_to_new = {i: i for i in range(256)} | {vocab[t]: new_ids[t] for t in merged}
    vocab.update(new_ids)
    (folder / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False), encoding="utf-8")
    shuffled = qtok.load_tokenizer(folder)
    assert shuffled._rank_to_id is not None
    for text, ids in GOLDEN:
        assert shuffled.encode(text) == [old_to_new.get(i, i) for i in ids]


def _config(tmp_path, **fields):
    (tmp_path / "config.json").write_text(json.dumps(fields), encoding="utf-8")
    return tmp_path


@pytest.mark.parametrize(("fields", "vocab", "patched"), [
    # the choice transformers 4.57.3 makes for AutoProcessor.from_pretrained(folder, fix_mistral_regex=True)
    (None, 151643, False),  # no config.json next to the tokenizer
    ({"model_type": "qwen3_tts", "transformers_version": "4.57.3"}, 151643, True),
    ({"model_type": "qwen3_tts", "transformers_version": "4.57.3"}, 100000, False),  # needs > 100000
    ({"model_type": "qwen3_tts", "transformers_version": "4.57.2"}, 151643, False),
    ({"model_type": "qwen3_tts", "transformers_version": "4.51.0"}, 151643, False),
    ({"model_type": "mistral", "transformers_version": "4.51.0"}, 151643, True),
    ({"transformers_version": "4.51.0"}, 151643, True),  # no model_type
    ({"model_type": "qwen3_tts"}, 151643, True),  # no transformers_version
    ({"model_type": "qwen3_tts", "transformers_version": "4.57.2.post1"}, 151643, True),
    ({"model_type": "qwen3_tts", "transformers_version": "4.58.0.dev0"}, 151643, True),
    ({"model_type": "qwen3_tts", "transformers_version": "5.0.0rc1"}, 151643, True),
    ({"model_type": "qwen3_tts", "transformers_version": "5.0.0"}, 151643, False),
])
def test_fix_mistral_regex_choice(tmp_path, fields, vocab, patched):
    folder = tmp_path if fields is None else _config(tmp_path, **fields)
    assert qtok.uses_mistral_regex(folder, vocab) is patched


def test_mistral_regex_splits_case_changes():
    """What the swapped regex changes: with "oW" and "sa" mergeable, only the regex that keeps "HelloWorld"
    in one piece merges "oW", and only the one without the contraction rule sees "sa" in "'sam"."""
    id_bytes = {b: bytes([b]) for b in range(256)} | {256: b"oW", 257: b"sa"}
    ranks = {raw: i for i, raw in id_bytes.items()}
    qwen2 = qtok.QwenTokenizer(ranks, None, id_bytes, [], qtok.QWEN2_PATTERN)
    fixed = qtok.QwenTokenizer(ranks, None, id_bytes, [], qtok.MISTRAL_FIX_PATTERN)
    assert 256 in qwen2.encode("HelloWorld") and 256 not in fixed.encode("HelloWorld")
    assert 257 not in qwen2.encode("it'sam") and 257 in fixed.encode("it'sam")


def _copy(tmp_path):
    folder = tmp_path / "tok"
    shutil.copytree(DATA / "base", folder, ignore=shutil.ignore_patterns("*.safetensors", "speech_tokenizer"))
    return folder


@pytest.mark.parametrize(("change", "message"), [
    (lambda f: (f / "vocab.json").unlink(), "vocab.json is missing"),
    (lambda f: (f / "merges.txt").unlink(), "merges.txt is missing"),
    (lambda f: (f / "tokenizer_config.json").unlink(), "tokenizer_config.json is missing"),
    (lambda f: (f / "vocab.json").write_text("{not json", encoding="utf-8"), "cannot read"),
    (lambda f: (f / "vocab.json").write_text('{"a": 0}', encoding="utf-8"), "lacks 255 of the 256 byte tokens"),
    (lambda f: (f / "merges.txt").write_text("#version: 0.2\na b c\n", encoding="utf-8"), "is not two tokens"),
    (lambda f: (f / "merges.txt").write_text("#version: 0.2\nx y\n", encoding="utf-8"), "does not have"),
    (lambda f: (f / "tokenizer_config.json").write_text("{}", encoding="utf-8"), "no added_tokens_decoder"),
    (lambda f: (f / "tokenizer.json").write_text('{"normalizer": null}', encoding="utf-8"),
     "does not describe a Qwen2"),
])
def test_bad_folders(tmp_path, change, message):
    folder = _copy(tmp_path)
    change(folder)
    with pytest.raises(CheckpointError, match=message) as error:
        qtok.load_tokenizer(folder)
    assert "\n" not in str(error.value)


def test_missing_special_token(tmp_path):
    folder = _copy(tmp_path)
    path = folder / "tokenizer_config.json"
    config = json.loads(path.read_text(encoding="utf-8"))
    config["added_tokens_decoder"] = {k: v for k, v in config["added_tokens_decoder"].items()
                                      if v["content"] != "<tts_pad>"}
    path.write_text(json.dumps(config), encoding="utf-8")
    with pytest.raises(CheckpointError, match="<tts_pad>"):
        _ = qtok.load_tokenizer(folder).tts_pad
