"""VoxCPM's text tokenizer against what upstream's path made of 52 texts on six tokenizer folders
(tests/parity/data/voxcpm/tokenizer, written by scripts/parity/voxcpm_tokenizer_references.py with voxcpm
2.0.3's `mask_multichar_chinese_tokens(LlamaTokenizerFast.from_pretrained(folder))`, transformers 4.57.3,
tokenizers 0.22; its --check mode compares thousands more texts live). Plus core.py's text clean-up, and
the errors for folders upstream's loader would read differently or not at all."""

import json
import shutil
from pathlib import Path

import pytest

from mizuoto.core.errors import CheckpointError, InputError
from mizuoto.engines.voxcpm import tokenizer as vtok

DATA = Path(__file__).resolve().parents[1] / "parity/data/voxcpm/tokenizer"
REFS = json.loads((DATA / "references.json").read_text(encoding="utf-8"))
FOLDERS = sorted(REFS["folders"])


@pytest.fixture(scope="module")
def loaded():
    return {name: vtok.load_tokenizer(DATA / name) for name in FOLDERS}


def test_the_recorded_folders_are_all_there():
    assert FOLDERS == ["bpe", "bpe_bare", "bpe_legacy", "bpe_split", "bytelevel", "chars"]


@pytest.mark.parametrize("name", FOLDERS)
def test_tokens_and_ids_are_upstreams(loaded, name):
    tok, ref = loaded[name], REFS["folders"][name]
    wrong = [(case["text"], tok.tokens(case["text"]), tok(case["text"])) for case in ref["cases"]
             if (tok.tokens(case["text"]), tok(case["text"])) != (case["tokens"], case["ids"])]
    assert not wrong, wrong[:3]
    assert len(ref["cases"]) == 52


@pytest.mark.parametrize("name", FOLDERS)
def test_vocabulary_after_loading_is_upstreams(loaded, name):
    tok, ref = loaded[name], REFS["folders"][name]
    assert tok.unk_id == ref["unk_id"]
    assert len(tok.cjk_words) == ref["cjk_words"]
    assert tok.backend.get_vocab_size(with_added_tokens=True) == ref["vocab_with_added"]
    added = {str(k): v.content for k, v in sorted(tok.backend.get_added_tokens_decoder().items())}
    assert added == ref["added"]


def test_the_recorded_cases_cover_the_paths(loaded):
    bpe = {c["text"]: c for c in REFS["folders"]["bpe"]["cases"]}
    # words split only where their bare form (without "▁") is a vocabulary entry: "世界" is, "你好" is not
    assert bpe["你好，世界！今天天气很好。"]["tokens"][:4] == ["▁你好", "，", "世", "界"]
    legacy = {c["text"]: c for c in REFS["folders"]["bpe_legacy"]["cases"]}
    assert legacy["语音合成"]["tokens"] == ["语", "音", "合", "成"]  # "▁语音合成" split, its "▁" dropped
    assert bpe["鑫淼焱"]["ids"] == [REFS["folders"]["bpe"]["unk_id"]] * 3  # an added CJK word, characters unknown
    assert any(t.startswith("<0x") for t in bpe["emoji 😀 in text 你好😀世界"]["tokens"])  # byte fallback
    assert bpe["<|im_end|>"]["tokens"] == ["<|im_end|>"]
    split = {c["text"]: c for c in REFS["folders"]["bpe_split"]["cases"]}
    assert split["<|im_end|>"]["tokens"] != ["<|im_end|>"]  # split_special_tokens
    assert loaded["chars"].backend.token_to_id("<s>") == 125  # added at a new id, as transformers adds it


def test_clean_text_is_upstreams():
    for text, cleaned in REFS["cleaned"].items():
        assert vtok.clean_text(text) == cleaned
    assert vtok.clean_text(" a\n\nb\u3000c\t ") == " a b c "  # runs collapse, nothing is stripped


@pytest.mark.parametrize("text", ["", "   ", "\n\t", None, 5])
def test_require_text_refuses_empty_or_non_text(text):
    with pytest.raises(InputError):
        vtok.require_text(text)


def test_tokens_refuses_non_text(loaded):
    with pytest.raises(InputError):
        loaded["bpe"].tokens(b"bytes")


def copy_folder(tmp_path, name="bpe") -> Path:
    folder = tmp_path / name
    shutil.copytree(DATA / name, folder)
    return folder


def edit_config(folder: Path, **changes):
    path = folder / "tokenizer_config.json"
    config = json.loads(path.read_text(encoding="utf-8")) if path.exists() else {}
    config.update(changes)
    path.write_text(json.dumps(config), encoding="utf-8")


def test_missing_tokenizer_json_is_one_clear_line(tmp_path):
    with pytest.raises(CheckpointError, match="has no tokenizer.json") as error:
        vtok.load_tokenizer(tmp_path)
    assert "\n" not in str(error.value)


@pytest.mark.parametrize("change", [dict(add_prefix_space=True), dict(add_prefix_space=False), dict(from_slow=True),
                                    dict(tokenizer_file=None), dict(tokenizer_file="tokenizer.json"),
                                    dict(bos_token=None), dict(added_tokens_decoder=[]),
                                    dict(added_tokens_decoder={"x": {"content": "a"}}),
                                    dict(added_tokens_decoder={"5": {"content": "a", "colour": 1}}),
                                    dict(eos_token={"content": "</s>"}), dict(extra_special_tokens=["<x>"])])
def test_configs_upstream_reads_otherwise_are_refused(tmp_path, change):
    folder = copy_folder(tmp_path)
    edit_config(folder, **change)
    with pytest.raises(CheckpointError):
        vtok.load_tokenizer(folder)


@pytest.mark.parametrize("file, text", [("tokenizer.json", "{not json"), ("tokenizer_config.json", "[1, 2]"),
                                        ("tokenizer_config.json", "{bad")])
def test_unreadable_files(tmp_path, file, text):
    folder = copy_folder(tmp_path)
    (folder / file).write_text(text, encoding="utf-8")
    with pytest.raises(CheckpointError):
        vtok.load_tokenizer(folder)


def test_no_unknown_token_fails_only_when_one_is_needed(tmp_path):
    folder = copy_folder(tmp_path, "chars")
    edit_config(folder, unk_token=None)
    tok = vtok.load_tokenizer(folder)
    assert tok.unk_id is None and tok("你好") == [64, 80]
    with pytest.raises(InputError, match="no unknown token"):
        tok.ids_of(["no such token"])


def test_a_legacy_typed_special_token_is_read(tmp_path):
    folder = copy_folder(tmp_path)
    edit_config(folder, eos_token={"__type": "AddedToken", "content": "<|im_end|>", "lstrip": False,
                                   "normalized": False, "rstrip": False, "single_word": False, "special": True})
    assert vtok.load_tokenizer(folder)("a<|im_end|>") == vtok.load_tokenizer(DATA / "bpe")("a<|im_end|>")
