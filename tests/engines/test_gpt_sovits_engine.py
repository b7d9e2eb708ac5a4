"""The GPT-SoVITS engine's plumbing (engines/gpt_sovits/engine.py, text_frontend.py, declaration.py): how a voice's
pair of weights files and the assets folder are found, what the loader node and the command line offer for the pair,
how TextPreprocessor.get_phones_and_bert's language modes split a text (with a stand-in splitter: the real one has
its own golden test), the retry under 6 phones, the reference transcript's stop, and the one-line errors. The
end-to-end comparison with upstream's TTS pipeline is tests/engines/test_gpt_sovits_e2e.py."""

from pathlib import Path

import pytest
import torch

from mizuoto.core.errors import CheckpointError, InputError
from mizuoto.engines import get
from mizuoto.engines.gpt_sovits import engine
from mizuoto.engines.gpt_sovits.text_frontend import TextFrontEnd
from mizuoto.host import catalog

SPEC = get("gpt_sovits")


def touch(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"")
    return path


def test_the_gpt_weights_are_the_option_or_the_one_beside_the_sovits_file(tmp_path):
    sovits = touch(tmp_path / "voice" / "voice_e8_s200.pth")
    with pytest.raises(CheckpointError, match="no GPT weights file .*gpt_weights"):
        engine.gpt_file(sovits, "")
    gpt = touch(tmp_path / "voice" / "voice-e15.ckpt")
    assert engine.gpt_file(sovits, "") == gpt
    touch(tmp_path / "voice" / "other-e10.ckpt")
    with pytest.raises(CheckpointError, match="2 GPT weights files beside voice_e8_s200.pth"):
        engine.gpt_file(sovits, "")
    assert engine.gpt_file(sovits, str(gpt)) == gpt
    with pytest.raises(CheckpointError, match="does not exist"):
        engine.gpt_file(sovits, str(tmp_path / "missing.ckpt"))


def test_the_released_v2pro_files_share_the_gpt_above_them(tmp_path):
    pro = touch(tmp_path / "lj1995--GPT-SoVITS" / "v2Pro" / "s2Gv2ProPlus.pth")
    shared = touch(tmp_path / "lj1995--GPT-SoVITS" / "s1v3.ckpt")
    assert engine.gpt_file(pro, "") == shared
    own = touch(tmp_path / "lj1995--GPT-SoVITS" / "v2Pro" / "mine.ckpt")
    assert engine.gpt_file(pro, "") == own  # one beside it wins


def test_a_download_of_the_released_repo_names_its_v2_pair(tmp_path):
    pair = touch(tmp_path / "lj1995--GPT-SoVITS" / "gsv-v2final-pretrained" / "s2G2333k.pth")
    assert engine.sovits_file(tmp_path / "lj1995--GPT-SoVITS") == pair
    assert engine.sovits_file(pair) == pair
    with pytest.raises(CheckpointError, match="holds no GPT-SoVITS SoVITS weights"):
        engine.sovits_file(tmp_path)


def test_the_assets_folder_is_found_beside_the_model_or_named(tmp_path):
    sovits = touch(tmp_path / "gpt_sovits" / "SoVITS_weights_v2" / "voice.pth")
    with pytest.raises(CheckpointError, match="needs its pretrained parts"):
        engine.find_assets(sovits, "")
    (tmp_path / "gpt_sovits" / "pretrained_models" / engine.HUBERT).mkdir(parents=True)
    assert engine.find_assets(sovits, "") == tmp_path / "gpt_sovits" / "pretrained_models"
    with pytest.raises(CheckpointError, match="has no chinese-hubert-base"):
        engine.find_assets(sovits, str(tmp_path))
    assert engine.find_assets(sovits, str(tmp_path / "gpt_sovits" / "pretrained_models")).name == "pretrained_models"


def test_the_loader_lists_both_halves_of_a_voice_one_folder_down(tmp_path):
    base = tmp_path / "tts"
    touch(base / "gpt_sovits" / "SoVITS_weights_v2" / "alice_e8_s200.pth")
    touch(base / "gpt_sovits" / "GPT_weights_v2" / "alice-e15.ckpt")
    touch(base / "gpt_sovits" / ".cache" / "hidden.pth")
    names = [entry["name"] for entry in catalog.installed(SPEC, base)]
    assert names == ["gpt_sovits/SoVITS_weights_v2/alice_e8_s200.pth"]
    assert catalog.companion_choices(SPEC, base) == [catalog.COMPANION_BESIDE,
                                                     "gpt_sovits/GPT_weights_v2/alice-e15.ckpt"]
    assert catalog.resolve_companion(SPEC, catalog.COMPANION_BESIDE, base) == ""
    assert catalog.resolve_companion(SPEC, "gpt_sovits/GPT_weights_v2/alice-e15.ckpt", base).endswith("alice-e15.ckpt")
    with pytest.raises(InputError, match="gpt_weights 'nobody.ckpt' was not found"):
        catalog.resolve_companion(SPEC, "nobody.ckpt", base)


def test_the_loader_node_and_the_command_line_offer_the_gpt_weights():
    from mizuoto.cli import build_parser
    from mizuoto.nodes.engine_nodes import make_loader

    inputs = make_loader(SPEC).INPUT_TYPES()["required"]
    assert list(inputs)[:4] == ["model", "gpt_weights", "device", "dtype"]
    assert inputs["gpt_weights"][0][0] == catalog.COMPANION_BESIDE
    args = build_parser().parse_args(["say", "hi", "--engine", "gpt_sovits", "--gpt-weights", "a.ckpt", "-o", "x.wav"])
    assert args.companion_gpt_sovits == "a.ckpt"


def splitter(pieces):
    """A stand-in for LangSegmenter.getTexts that returns fixed pieces and records the default it got."""
    seen = []

    def segment(text, default):
        seen.append(default)
        return [{"lang": lang, "text": text} for lang, text in pieces]

    return segment, seen


def fake_clean(text, language):
    phones = ["a", "b"] * len(text.strip()) if text.strip() else []
    return phones, [2] * len(text) if language == "zh" else None, f"{language}:{text}"


@pytest.fixture(autouse=True)
def tiny_phone_table(monkeypatch):
    from mizuoto.engines.gpt_sovits import text_frontend

    monkeypatch.setattr(text_frontend, "phone_ids", lambda phones: [{"a": 1, "b": 2}[p] for p in phones])
    monkeypatch.setattr(text_frontend, "text_features",
                        lambda lang, n, *rest: torch.full((1024, n), 1.0 if lang == "zh" else 0.0))


def test_the_language_modes_split_as_get_phones_and_bert_does():
    pieces = [("zh", "你好"), ("en", "Think"), ("ja", "です"), ("zh", "再见")]
    segment, seen = splitter(pieces)
    front = TextFrontEnd(segment, fake_clean)
    assert front.pieces("x", "all_zh") == pieces and seen[-1] == "zh"
    assert front.pieces("x", "all_yue") == [("yue", "你好"), ("en", "Think"), ("ja", "です"), ("yue", "再见")]
    assert front.pieces("x", "auto") == pieces and seen[-1] == ""
    assert front.pieces("x", "auto_yue")[0] == ("yue", "你好")
    assert front.pieces("x", "all_ko") == pieces and seen[-1] == "ko"
    # zh / ja / ko / yue: English stays English, everything else is the user's language, runs joined
    assert front.pieces("x", "ja") == [("ja", "你好"), ("en", "Think"), ("ja", "です再见")]
    assert front.pieces("Hello there", "en") == [("en", "Hello there")]
    with pytest.raises(InputError, match="language 'fr' is not one of"):
        front.pieces("x", "fr")


def test_phones_and_bert_join_the_pieces_and_retry_short_texts_with_a_full_stop():
    segment, _ = splitter([("zh", "你好"), ("en", "Hi there")])
    front = TextFrontEnd(segment, fake_clean)
    phones, bert, norm = front.phones_and_bert("ignored", "all_zh")
    assert phones == [1, 2] * 2 + [1, 2] * 8 and norm == "zh:你好en:Hi there"
    assert bert.shape == (1024, 20) and bool((bert[:, :4] == 1).all()) and bool((bert[:, 4:] == 0).all())
    short, seen = splitter([("zh", "好")])
    texts = []

    def recording(text, default):
        texts.append(text)
        return short(text, default)

    phones, _, _ = TextFrontEnd(recording, fake_clean).phones_and_bert("好", "all_zh")
    assert texts == ["好", ".好"] and len(phones) == 2  # one retry only, whatever it gives


def test_an_unknown_piece_language_is_read_as_a_space_in_english():
    segment, _ = splitter([("x", "???"), ("zh", "你好呀你好呀")])
    front = TextFrontEnd(segment, fake_clean)
    _, _, norm = front.phones_and_bert("?", "auto")
    assert norm.startswith("en: zh:")


def test_the_reference_transcript_gets_a_stop_and_must_not_be_empty():
    texts = []

    def segment(text, default):
        texts.append(text)
        return [{"lang": "zh", "text": text}]

    front = TextFrontEnd(segment, fake_clean)
    front.prompt("你好啊朋友们\n", "all_zh")
    front.prompt("hello my friends", "en")
    front.prompt("你好啊朋友们！", "all_zh")
    assert texts == ["你好啊朋友们。", "你好啊朋友们！"]  # en is not split: its text went straight to clean
    with pytest.raises(InputError, match="reference transcript is empty"):
        front.prompt("\n", "all_zh")
