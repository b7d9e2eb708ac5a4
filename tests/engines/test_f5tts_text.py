"""F5-TTS's text frontend against literals produced by f5-tts 1.1.22 itself.

The expected values were printed by upstream in its own environment (pypinyin 0.55.0, rjieba 0.2.2):
`f5_tts.model.utils.convert_char_to_pinyin`, `list_str_to_idx` and `get_tokenizer(vocab, "custom")`,
`f5_tts.infer.utils_infer.chunk_text`, and `infer_process` / `infer_batch_process` run with a stub model
that recorded the chunks, the byte budget and the durations it was given. The live comparison on random
input is `scripts/parity/f5tts_frontend_live.py`.
"""

import hashlib

import pytest
import torch

from mizuoto.core.errors import CheckpointError, InputError
from mizuoto.engines.f5tts import text

# --- vocabulary and ids ---------------------------------------------------------------------------------


def test_default_vocab_has_upstreams_2545_entries_and_indices():
    # Byte for byte upstream's file (an editor stripping the space on line 0 would shift every id).
    digest = hashlib.sha256(text.VOCAB_PATH.read_bytes()).hexdigest()
    assert digest == "4e173934be56219eb38759fa8d4c48132d5a34454f0c44abce409bcf6a07ec46"
    vocab = text.load_vocab()
    assert len(vocab) == 2545
    known = {" ": 0, "!": 1, '"': 2, "a": 62, "bei": 100, "bei1": 101, "bei2": 102, "shai3": 1000, "shan1": 1002,
             "ni2": 793, "hao3": 458, "shi4": 1030, "jie4": 533, "men": 727, "zhong1": 1354, "er2": 334,
             "，": 2541, "。": 1895, "？": 2542, "\ufffd": 2543, "𠮶": 2544}
    assert {token: vocab[token] for token in known} == known


def test_vocab_lines_lose_only_their_last_character(tmp_path):
    # Upstream drops each line's last character: the newline, or a real one on an unterminated last line.
    file = tmp_path / "vocab.txt"
    file.write_bytes(" \r\nab\r\nc\n d\na\nlast".encode())
    assert text.load_vocab(file) == {" ": 0, "ab": 1, "c": 2, " d": 3, "a": 4, "las": 5}


def test_missing_vocab_is_a_checkpoint_error(tmp_path):
    with pytest.raises(CheckpointError, match="vocabulary"):
        text.load_vocab(tmp_path / "absent.txt")


def test_tokens_to_ids_maps_unknown_to_0_and_pads_with_minus_1():
    vocab = text.load_vocab()
    batch = [[" ", "ni2", " ", "hao3", " ", "😀", "!"], ["H", "i", ",", " ", " ", "shi4", " ", "jie4"]]
    ids = text.tokens_to_ids(batch, vocab)
    assert ids.dtype == torch.long
    assert ids.tolist() == [[0, 793, 0, 458, 0, 0, 1, -1], [39, 507, 12, 0, 0, 1030, 0, 533]]
    assert text.tokens_to_ids([[]], vocab).shape == (1, 0)
    assert text.tokens_to_ids(["ab"], {"a": 5}).tolist() == [[5, 0]]  # a string is its characters


# --- pinyin ----------------------------------------------------------------------------------------------

# Token lists written as one string, tokens separated by "|" (no token here contains one).
PINYIN = {
    "Hello world. It's 3.5 km; ok?":
        "H|e|l|l|o| |w|o|r|l|d|.| |I|t|'|s| |3|.|5| |k|m|,| |o|k|?",
    'hello,world':
        'h|e|l|l|o|,| |w|o|r|l|d',
    'Some call me nature, others call me mother nature.':
        'S|o|m|e| |c|a|l|l| |m|e| |n|a|t|u|r|e|,| |o|t|h|e|r|s| |c|a|l|l| |m|e| |m|o|t|h|e|r| |n|a|t|u|r|e|.',
    '你好，世界！我们2024年去北京。':
        ' |ni2| |hao3|，| |shi4| |jie4|！| |wo3| |men| |2|0|2|4| |nian2| |qu4| |bei3| |jing1|。',
    '我有一个不是很好的主意':
        ' |wo3| |you3| |yi2| |ge4| |bu2| |shi4| |hen3| |hao3| |de| |zhu3| |yi4',
    '你好——世界……':
        ' |ni2| |hao3|—|—| |shi4| |jie4|…|…',
    '「你好」『世界』《北京》、“上海”':
        '「| |ni2| |hao3|」|『| |shi4| |jie4|』|《| |bei3| |jing1|》|、|"| |shang4| |hai3|"',
    '我喜欢用ChatGPT写code，真的very good!':
        ' |wo3| |xi3| |huan1| |yong4| |C|h|a|t|G|P|T| |xie3| |c|o|d|e|，| |zhen1| |de| |v|e|r|y| |g|o|o|d|!',
    'café naïve ā 😀 你好':
        'c|a|f|é| |n|a|ï| |v|e| |ā| |😀| | |ni2| |hao3',
    '２０２４年ＡＢＣ':
        '２|０|２|４| |nian2|Ａ|Ｂ|Ｃ',
    'カタカナ漢字 가나다 ㄅㄆ㐀':
        'カ|タ|カ|ナ| |han4| |zi4| |가|나|다| | |ㄅ| |ㄆ| |qiu1',
    'A“quoted”‘x’; ok: "yes" (no) [maybe] -- 100%!':
        'A|"|q|u|o|t|e|d|"|\'|x|\'|,| |o|k|:| |"|y|e|s|"| |(| |n|o|)| |[| |m|a|y|b|e|]| |-|-| |1|0|0|%|!',
    '  two  spaces\tand\nnewline ':
        ' | |t|w|o| | |s|p|a|c|e|s|\t| |a|n|d|\n| |n|e|w|l|i|n|e| ',
    '长城很长，银行行长。':
        ' |chang2| |cheng2| |hen3| |zhang3|，| |yin2| |hang2| |hang2| |zhang3|。',
}

NO_POLYPHONE = {
    '我有一个不是很好的主意':
        ' |wo3| |you3| |yi1| |ge4| |bu4| |shi4| |hen3| |hao3| |de| |zhu3| |yi4',
    '你好，世界！我们2024年去北京。':
        ' |ni3| |hao3|，| |shi4| |jie4|！| |wo3| |men| |2|0|2|4| |nian2| |qu4| |bei3| |jing1|。',
    '长城很长，银行行长。':
        ' |zhang3| |cheng2| |hen3| |zhang3|，| |yin2| |xing2| |xing2| |zhang3|。',
}


@pytest.fixture
def chinese_frontend():
    pytest.importorskip("rjieba")
    pytest.importorskip("pypinyin")


@pytest.mark.parametrize("sentence", list(PINYIN))
def test_convert_char_to_pinyin_matches_upstream(chinese_frontend, sentence):
    assert text.convert_char_to_pinyin([sentence]) == [PINYIN[sentence].split("|")]


@pytest.mark.parametrize("sentence", list(NO_POLYPHONE))
def test_convert_char_to_pinyin_without_polyphone_matches_upstream(chinese_frontend, sentence):
    assert text.convert_char_to_pinyin([sentence], polyphone=False) == [NO_POLYPHONE[sentence].split("|")]


def test_convert_char_to_pinyin_converts_a_batch(chinese_frontend):
    sentences = list(PINYIN)[:4]
    assert text.convert_char_to_pinyin(sentences) == [PINYIN[s].split("|") for s in sentences]
    assert text.convert_char_to_pinyin(["", " "]) == [[], [" "]]


def test_missing_text_packages_name_the_install_command(monkeypatch):
    import builtins

    real_import = builtins.__import__

    def without_rjieba(name, *args, **kwargs):
        if name in ("rjieba", "pypinyin"):
            raise ImportError(name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", without_rjieba)
    with pytest.raises(InputError, match="pip install pypinyin rjieba"):
        text.convert_char_to_pinyin(["hello"])


# --- chunking ----------------------------------------------------------------------------------------------

EN = ("Some call me nature, others call me mother nature. I don't really care what you call me! "
      "I've been a silent spectator, watching species evolve, empires rise and fall; but always remember: "
      "I am mighty and enduring.Respect me and I'll nurture you? Ignore me and you shall face the consequences.")
ZH = "对，这就是我，万人敬仰的太乙真人。虽然有点婴儿肥，但也掩不住我逼人的帅气！你说呢？我觉得，还行；还可以：吧"
MIX = "Hello 你好。 This is a test, 这是测试！Numbers 1.5, 2.5 and 3. Done"

_EN_SENTENCES = ['Some call me nature,', 'others call me mother nature.', "I don't really care what you call me!",
                 "I've been a silent spectator,", 'watching species evolve,', 'empires rise and fall;',
                 'but always remember:', "I am mighty and enduring.Respect me and I'll nurture you?",
                 'Ignore me and you shall face the consequences.']
_ZH_SENTENCES = ['对，', '这就是我，', '万人敬仰的太乙真人。', '虽然有点婴儿肥，', '但也掩不住我逼人的帅气！',
                 '你说呢？', '我觉得，', '还行；', '还可以：', '吧']
_MIX_SENTENCES = ['Hello 你好。', 'This is a test,', '这是测试！', 'Numbers 1.5,', '2.5 and 3.', 'Done']

CHUNKS = {
    (EN, 0): _EN_SENTENCES,
    (EN, 10): _EN_SENTENCES,
    (EN, 50): ['Some call me nature, others call me mother nature.', "I don't really care what you call me!",
               "I've been a silent spectator,", 'watching species evolve, empires rise and fall;',
               'but always remember:',
               "I am mighty and enduring.Respect me and I'll nurture you?",
               'Ignore me and you shall face the consequences.'],
    (EN, 100): ["Some call me nature, others call me mother nature. I don't really care what you call me!",
                "I've been a silent spectator, watching species evolve, empires rise and fall; but always remember:",
                "I am mighty and enduring.Respect me and I'll nurture you?",
                'Ignore me and you shall face the consequences.'],
    (EN, 135): ["Some call me nature, others call me mother nature. I don't really care what you call me! I've been a "
                "silent spectator,",
                "watching species evolve, empires rise and fall; but always remember: I am mighty and enduring.Respect "
                "me and I'll nurture you?",
                'Ignore me and you shall face the consequences.'],
    (EN, 300): [EN],
    (ZH, 0): _ZH_SENTENCES,
    (ZH, 10): _ZH_SENTENCES,
    (ZH, 50): ['对，这就是我，', '万人敬仰的太乙真人。', '虽然有点婴儿肥，', '但也掩不住我逼人的帅气！你说呢？',
               '我觉得，还行；还可以：吧'],
    (ZH, 100): ['对，这就是我，万人敬仰的太乙真人。虽然有点婴儿肥，',
                '但也掩不住我逼人的帅气！你说呢？我觉得，还行；还可以：吧'],
    (ZH, 135): ['对，这就是我，万人敬仰的太乙真人。虽然有点婴儿肥，但也掩不住我逼人的帅气！你说呢？我觉得，',
                '还行；还可以：吧'],
    (ZH, 300): [ZH],
    (MIX, 0): _MIX_SENTENCES,
    (MIX, 10): _MIX_SENTENCES,
    (MIX, 50): ['Hello 你好。 This is a test, 这是测试！', 'Numbers 1.5, 2.5 and 3. Done'],
    (MIX, 100): [MIX],
}


@pytest.mark.parametrize("source,max_chars", list(CHUNKS))
def test_chunk_text_matches_upstream(source, max_chars):
    assert text.chunk_text(source, max_chars) == CHUNKS[source, max_chars]


def test_chunk_text_edges_match_upstream():
    assert text.chunk_text(EN) == CHUNKS[EN, 135]  # default budget 135 bytes
    assert text.chunk_text("") == []
    assert text.chunk_text("   ") == [""]  # whitespace-only text is one empty chunk upstream too
    assert text.chunk_text("a.\n\nb。c") == ["a. b。c"]


# --- reference transcript, budget, durations ----------------------------------------------------------------


@pytest.mark.parametrize("given,punctuated,spaced", [
    ("Some call me nature", "Some call me nature. ", "Some call me nature.  "),
    ("Some call me nature.", "Some call me nature. ", "Some call me nature.  "),
    ("Some call me nature. ", "Some call me nature. ", "Some call me nature.  "),
    ("Really?", "Really?. ", "Really?.  "),
    ("你好。", "你好。", "你好。"),
    ("你好", "你好. ", "你好.  "),
    ("你好！", "你好！. ", "你好！.  "),
    ("ok  ", "ok  . ", "ok  .  "),
])
def test_reference_text_as_upstream_leaves_it(given, punctuated, spaced):
    assert text.punctuate_reference_text(given) == punctuated
    assert text.space_reference_text(punctuated) == spaced


@pytest.mark.parametrize("blank", ["", "   ", "\n"])
def test_blank_reference_text_is_an_input_error(blank):
    with pytest.raises(InputError, match="transcript"):
        text.punctuate_reference_text(blank)


def test_chunk_speed_and_durations():
    assert text.chunk_speed("好。", 1.0) == 0.3  # 6 bytes < 10
    assert text.chunk_speed("0123456789", 1.3) == 1.3
    assert text.max_chars_for("Some call me nature, others call me mother nature. ", 154350, 44100) == 269
    assert text.max_chars_for("x. ", 23 * 16000, 16000) == 0  # a reference over 22 s leaves no budget
    assert text.reference_frames(84000) == 328
    assert text.fixed_duration_frames(1.0) == 93


def test_plan_chunks_matches_upstream_english():
    ref = "Some call me nature, others call me mother nature. "
    plan = text.plan_chunks(ref, EN, ref_samples=154350, sample_rate=44100, ref_samples_24k=84000)
    assert [c.gen_text for c in plan] == [
        "Some call me nature, others call me mother nature. I don't really care what you call me! I've been a silent "
        "spectator, watching species evolve, empires rise and fall; but always remember: I am mighty and enduring."
        "Respect me and I'll nurture you?", "Ignore me and you shall face the consequences."]
    assert [c.frames for c in plan] == [1873, 618]
    assert plan[1].text == ref + " " + "Ignore me and you shall face the consequences."  # ".  " then the chunk


def test_plan_chunks_matches_upstream_with_fixed_duration_and_speed():
    ref = "Some call me nature, others call me mother nature. "
    plan = text.plan_chunks(ref, EN, ref_samples=154350, sample_rate=44100, ref_samples_24k=84000, speed=0.8,
                            fix_duration=30.0)
    assert [c.gen_text[-25:] for c in plan] == ["all; but always remember:", "ll face the consequences."]
    assert [c.frames for c in plan] == [1933, 1220]


def test_plan_chunks_matches_upstream_chinese(chinese_frontend):
    ref = "对，这就是我，万人敬仰的太乙真人。"
    plan = text.plan_chunks(ref, ZH, ref_samples=67200, sample_rate=16000, ref_samples_24k=100800)
    assert [(c.gen_text, c.frames) for c in plan] == [(ZH, 1618)]
    assert plan[0].text == ref + ZH  # a transcript ending in "。" gets nothing added
    short = text.plan_chunks(ref, "好。", ref_samples=67200, sample_rate=16000, ref_samples_24k=100800)
    assert [c.frames for c in short] == [547]  # short chunks are timed at speed 0.3
    tokens = text.convert_char_to_pinyin([short[0].text])[0]
    assert "".join(tokens) == " dui4， zhe4 jiu4 shi4 wo3， wan4 ren2 jing4 yang3 de tai4 yi3 zhen1 ren2。 hao3。"


def test_plan_chunks_rejects_bad_input():
    with pytest.raises(InputError):
        text.plan_chunks("", "hello", ref_samples=100, sample_rate=24000, ref_samples_24k=100)
    with pytest.raises(InputError):
        text.plan_chunks("ref", "hello", ref_samples=100, sample_rate=24000, ref_samples_24k=100, speed=0)
    assert text.plan_chunks("ref", "", ref_samples=24000, sample_rate=24000, ref_samples_24k=24000) == []
