"""Mandarin tone sandhi as GPT-SoVITS applies it (text/tone_sandhi.py at 48b1a01, PaddleSpeech's ToneSandhi):
first jieba's words are re-merged so that the rules see whole units (不 + next word, A一A, reduplications,
runs of third tones, 儿), then each word's finals (TONE3, neutral tone 5) are rewritten: 不, 一, the neutral tone
of particles / suffixes / listed words, and third-tone sandhi.

The rules read a final's tone as its last character and rewrite it there, exactly as upstream does."""

from __future__ import annotations

from pypinyin import Style, lazy_pinyin

from .zh_data import jieba, word_set

# Marks after which 一 keeps its first tone (一，), as upstream lists them.
_PUNCTUATION = "：，；。？！“”‘’':,;.?!"


def _retone(final: str, tone: str) -> str:
    return final[:-1] + tone


def _finals(word: str) -> list[str]:
    return lazy_pinyin(word, neutral_tone_with_five=True, style=Style.FINALS_TONE3)


def _all_third(finals: list[str]) -> bool:
    return all(final[-1] == "3" for final in finals)


def _is_reduplication(word: str) -> bool:
    return len(word) == 2 and word[0] == word[1]


def _split_word(word: str) -> list[str]:
    """The word as two parts around its shortest search-mode sub-word (upstream's _split_word)."""
    shortest = sorted(jieba().cut_for_search(word), key=len)[0]  # sorted is stable: the first shortest one
    if word.find(shortest) == 0:
        return [shortest, word[len(shortest):]]
    return [word[:-len(shortest)], shortest]


# --- merging jieba's words before the rules ---------------------------------------------------------------------

def _merge_bu(seg: list) -> list:
    """不 joins the word after it; a final lone 不 stays as an adverb."""
    merged, last = [], ""
    for word, pos in seg:
        if last == "不":
            word = last + word
        if word != "不":
            merged.append((word, pos))
        last = word
    if last == "不":
        merged.append((last, "d"))
    return merged


def _merge_yi(seg: list) -> list:
    """A verb, 一 and the same verb become one word (听一听); then a lone 一 joins the word after it."""
    merged: list[list[str]] = []
    i = 0
    while i < len(seg):
        word, pos = seg[i]
        if i >= 1 and word == "一" and i + 1 < len(seg):
            # The left neighbour is what was kept last (it may be merged already), upstream's `last`.
            last = merged[-1] if merged else seg[i - 1]
            following = seg[i + 1]
            if last[0] == following[0] and last[1] == "v" and following[1] == "v":
                merged[-1] = [last[0] + "一" + following[0], last[1]]
                i += 2
                continue
        merged.append([word, pos])
        i += 1
    joined: list[list[str]] = []
    for word, pos in merged:
        if joined and joined[-1][0] == "一":
            joined[-1][0] += word
        else:
            joined.append([word, pos])
    return joined


def _merge_reduplication(seg: list) -> list:
    merged: list[list[str]] = []
    for word, pos in seg:
        if merged and word == merged[-1][0]:
            merged[-1][0] += word
        else:
            merged.append([word, pos])
    return merged


def _merge_third_tones(seg: list, joins) -> list:
    """Two neighbours whose tones `joins` accepts merge (at most 3 characters, not after a reduplication, and a
    word merged into its left neighbour does not take the next one). Tones are read from the words as jieba
    gave them, before any merge, as upstream does."""
    finals = [_finals(word) for word, _ in seg]
    merged: list[list[str]] = []
    merged_last = [False] * len(seg)
    for i, (word, pos) in enumerate(seg):
        if i >= 1 and joins(finals[i - 1], finals[i]) and not merged_last[i - 1]:
            previous = seg[i - 1][0]
            if not _is_reduplication(previous) and len(previous) + len(word) <= 3:
                merged[-1][0] += word
                merged_last[i] = True
                continue
        merged.append([word, pos])
    return merged


def _merge_er(seg: list) -> list:
    merged: list[list[str]] = []
    for i, (word, pos) in enumerate(seg):
        if i >= 1 and word == "儿" and seg[i - 1][0] != "#":
            merged[-1][0] += word
        else:
            merged.append([word, pos])
    return merged


def _guarded(merge, seg: list) -> list:
    # Upstream wraps these merges in a bare try/except that keeps the segmentation unchanged on any error
    # (an empty word's finals, for one); the same here.
    try:
        return merge(seg)
    except Exception:
        return seg


def pre_merge_for_modify(seg: list) -> list:
    """jieba's (word, pos) pairs -> the [word, pos] units the sandhi rules run on."""
    seg = _merge_bu(seg)
    seg = _guarded(_merge_yi, seg)
    seg = _merge_reduplication(seg)
    seg = _guarded(lambda s: _merge_third_tones(s, lambda a, b: _all_third(a) and _all_third(b)), seg)
    seg = _guarded(lambda s: _merge_third_tones(s, lambda a, b: a[-1][-1] == "3" and b[0][-1] == "3"), seg)
    return _merge_er(seg)


# --- the rules on one word's finals -----------------------------------------------------------------------------

def _bu_sandhi(word: str, finals: list[str]) -> list[str]:
    if len(word) == 3 and word[1] == "不":  # 看不懂: neutral
        finals[1] = _retone(finals[1], "5")
        return finals
    for i, char in enumerate(word):
        if char == "不" and i + 1 < len(word) and finals[i + 1][-1] == "4":  # 不怕: bu2
            finals[i] = _retone(finals[i], "2")
    return finals


def _yi_sandhi(word: str, finals: list[str]) -> list[str]:
    if "一" in word and all(char.isnumeric() for char in word if char != "一"):
        return finals  # a digit string (一零零): 一 keeps yi1
    if len(word) == 3 and word[1] == "一" and word[0] == word[-1]:  # 看一看: neutral
        finals[1] = _retone(finals[1], "5")
    elif word.startswith("第一"):  # an ordinal: yi1
        finals[1] = _retone(finals[1], "1")
    else:
        for i, char in enumerate(word):
            if char == "一" and i + 1 < len(word):
                if finals[i + 1][-1] == "4":  # 一段: yi2
                    finals[i] = _retone(finals[i], "2")
                elif word[i + 1] not in _PUNCTUATION:  # 一天: yi4; before a mark it stays yi1
                    finals[i] = _retone(finals[i], "4")
    return finals


def _neutral_sandhi(word: str, pos: str, finals: list[str]) -> list[str]:
    must, must_not = word_set("must_neural_tone_words"), word_set("must_not_neural_tone_words")
    for j in range(1, len(word)):  # reduplicated nouns, verbs, adjectives: 奶奶, 试试
        if word[j] == word[j - 1] and pos[0] in "nva" and word not in must_not:
            finals[j] = _retone(finals[j], "5")
    ge = word.find("个")
    if word and word[-1] in "吧呢哈啊呐噻嘛吖嗨呐哦哒额滴哩哟喽啰耶喔诶":
        finals[-1] = _retone(finals[-1], "5")
    elif word and word[-1] in "的地得":
        finals[-1] = _retone(finals[-1], "5")
    elif len(word) == 1 and word in "了着过" and pos in {"ul", "uz", "ug"}:  # 走了, 看着, 去过
        finals[-1] = _retone(finals[-1], "5")
    elif len(word) > 1 and word[-1] in "们子" and pos in {"r", "n"} and word not in must_not:
        finals[-1] = _retone(finals[-1], "5")
    elif len(word) > 1 and word[-1] in "上下里" and pos in {"s", "l", "f"}:  # 桌上, 地下, 家里
        finals[-1] = _retone(finals[-1], "5")
    elif len(word) > 1 and word[-1] in "来去" and word[-2] in "上下进出回过起开":  # 上来, 下去
        finals[-1] = _retone(finals[-1], "5")
    elif (ge >= 1 and (word[ge - 1].isnumeric() or word[ge - 1] in "几有两半多各整每做是")) or word == "个":
        finals[ge] = _retone(finals[ge], "5")  # 个 as a measure word
    elif word in must or word[-2:] in must:
        finals[-1] = _retone(finals[-1], "5")
    # Then each of the word's two parts on its own (the part may be a listed neutral-tone word).
    parts = _split_word(word)
    part_finals = [finals[:len(parts[0])], finals[len(parts[0]):]]
    for part, its_finals in zip(parts, part_finals, strict=True):
        if part in must or part[-2:] in must:  # an empty part (the word is its own sub-word) is never listed
            its_finals[-1] = _retone(its_finals[-1], "5")
    return part_finals[0] + part_finals[1]


def _third_sandhi(word: str, finals: list[str]) -> list[str]:
    if len(word) == 2 and _all_third(finals):
        finals[0] = _retone(finals[0], "2")
    elif len(word) == 3:
        parts = _split_word(word)
        if _all_third(finals):
            if len(parts[0]) == 2:  # 蒙古/包
                finals[0] = _retone(finals[0], "2")
                finals[1] = _retone(finals[1], "2")
            elif len(parts[0]) == 1:  # 纸/老虎
                finals[1] = _retone(finals[1], "2")
        else:
            halves = [finals[:len(parts[0])], finals[len(parts[0]):]]
            for i, half in enumerate(halves):
                if _all_third(half) and len(half) == 2:  # 所有/人
                    half[0] = _retone(half[0], "2")
                elif i == 1 and not _all_third(half) and half[0][-1] == "3" and halves[0][-1][-1] == "3":
                    halves[0][-1] = _retone(halves[0][-1], "2")  # 好/喜欢
            finals = halves[0] + halves[1]
    elif len(word) == 4:  # an idiom as two words of two
        halves = [finals[:2], finals[2:]]
        finals = []
        for half in halves:
            if _all_third(half):
                half[0] = _retone(half[0], "2")
            finals += half
    return finals


def modified_tone(word: str, pos: str, finals: list[str]) -> list[str]:
    """One unit's finals after 不, 一, neutral-tone and third-tone sandhi, in upstream's order."""
    finals = _bu_sandhi(word, finals)
    finals = _yi_sandhi(word, finals)
    finals = _neutral_sandhi(word, pos, finals)
    return _third_sandhi(word, finals)
