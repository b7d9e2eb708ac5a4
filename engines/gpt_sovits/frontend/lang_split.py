"""split-lang 2.1.1's LangSplitter.split_by_lang, natively, with the settings GPT-SoVITS uses (its own language
map, merge_across_digit=False; punctuation and newlines merged, nothing kept apart): text -> [(lang, text)].

The stages, each reproduced as split-lang does it, quirks included (they decide upstream's output):
1. pre-split into sections by script: Chinese/Japanese (CJK ideographs, kana, 々), Hangul, digits (str.isdigit:
   full-width and superscript digits too), each punctuation mark alone, each newline alone, the rest; other
   spaces join the section they follow, and an apostrophe right after a non-space joins its section;
2. inside a section: Chinese/Japanese is cut into phrases by BudouX (Japanese model, then simplified Chinese on
   each piece, then kana pieces and single ideographs glued back), the rest into space-ended words; each piece
   gets the detector's top language through a map (unknown -> "x"), a piece with kana is "ja" outright;
3. "smart merge" of a section's pieces: neighbours of one language join; a middle piece takes its neighbours'
   language when they agree and the middle is "x", or could be theirs (in the detector's top 5 above 1%), or is
   short between long ones; "x" pieces take the nearest known language (the longer neighbour's side); the first
   and last pieces join their neighbour when short or possibly the same language;
4. sections merge across punctuation and newlines: a mark joins the piece before it (or, leading, the one
   after), and pieces join only when the piece just before them in the list - not the merged one - had their
   language;
5. in Chinese/Japanese sections, a piece shorter than a tenth of its neighbours joins them; "x" takes the
   language with the most characters counted (a piece swallowed in step 5 is not counted), and when Japanese
   counts at least ten times Chinese (0 >= 0 too) every Chinese piece becomes Japanese.
The detector is `detect(text, k, threshold) -> [language, ...]`, best first (fasttext.LanguageIdentifier).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from .budoux import parser

Detector = Callable[..., list[str]]

# split-lang's punctuation set (a raw string there, so the backslash is one of them).
PUNCTUATION = frozenset("〜~,.;:!?，。！？；：、·([{<（【《〈「『“‘)]}>）】》〉」』”’\"-_——#$%&……￥'*+<=>?@[\\]^_`{|}~")
ZH_JA = re.compile("[\u4e00-\u9fff\u3040-\u30ff々]")
HANGUL = re.compile("[\uac00-\ud7af]")
KANA = re.compile("[\u3040-\u30ff々]")
# GPT-SoVITS's map for the non-CJK sections (split-lang's own adds de, fr and hr), and split-lang's fixed map for
# Chinese/Japanese pieces; a language missing from the map is "x".
OTHERS_MAP = {"zh": "zh", "yue": "zh", "wuu": "zh", "zh-cn": "zh", "zh-tw": "x", "ko": "ko", "ja": "ja", "en": "en"}
ZH_JA_MAP = {"zh": "zh", "yue": "zh", "wuu": "zh", "zh-cn": "zh", "zh-tw": "x", "ja": "ja"}
ZH, KO, DIGIT, PUNCT, NEWLINE, OTHER = "zh_ja", "ko", "digit", "punctuation", "newline", "others"


@dataclass
class Piece:
    lang: str
    text: str


@dataclass
class Section:
    kind: str
    pieces: list[Piece]


def has_kana(text: str) -> bool:
    return bool(KANA.search(text))


class Splitter:
    def __init__(self, detect: Detector):
        self.detect = detect

    def top(self, text: str) -> str:
        return self.detect(text, 1, 0.0)[0].lower()

    def possible(self, text: str) -> list[str]:
        # split-lang's candidate list: newlines removed and the text stripped before the detector's own handling.
        return self.detect(text.replace("\n", "").strip(), 5, 0.01)

    # --- 1. sections --------------------------------------------------------------------------------------------
    @staticmethod
    def pre_split(text: str) -> list[tuple[str, str]]:
        text = text.strip()
        sections, kind, current = [], OTHER, []

        def close():
            if current:
                sections.append((kind, "".join(current)))
                current.clear()

        for i, char in enumerate(text):
            if ZH_JA.match(char):
                new = ZH
            elif HANGUL.match(char):
                new = KO
            elif char.isdigit():
                new = DIGIT
            elif char in PUNCTUATION and not (char == "'" and i > 0 and not text[i - 1].isspace()):
                close()  # every mark is a section of its own
                new = kind = PUNCT
            elif char in "\n\r":
                close()
                new = kind = NEWLINE
            elif char.isspace() or char == "'":
                new = kind
            else:
                new = OTHER
            if new != kind:
                close()
                kind = new
            current.append(char)
        close()
        return sections

    # --- 2. pieces ----------------------------------------------------------------------------------------------
    @staticmethod
    def zh_ja_phrases(text: str) -> list[str]:
        pieces = [p for chunk in parser("ja").parse(text) for p in parser("zh-hans").parse(chunk)]
        glued = [pieces[0]]
        for piece in pieces[1:]:
            left, right = has_kana(glued[-1]), has_kana(piece)
            if left == right and (left or len(piece) == 1):
                glued[-1] += piece
            else:
                glued.append(piece)
        if len(glued) >= 2 and len(glued[0]) == 1:
            glued = [glued[0] + glued[1], *glued[2:]]
        return glued

    @staticmethod
    def words(text: str) -> list[str]:
        """Words with the spaces after them."""
        return re.findall(r"\s+|\S+\s*", text) if text[:1].isspace() else re.findall(r"\S+\s*", text)

    def section_pieces(self, kind: str, text: str) -> list[Piece]:
        if kind in (PUNCT, DIGIT, NEWLINE, KO):
            return [Piece(kind, text)]
        if kind == ZH:
            phrases = self.zh_ja_phrases(text)
            return [Piece("ja" if has_kana(p) else ZH_JA_MAP.get(self.top(p), "x"), p) for p in phrases]
        return [Piece(OTHERS_MAP.get(self.top(w), "x"), w) for w in self.words(text)]

    # --- 3. smart merge -----------------------------------------------------------------------------------------
    def smart_merge(self, pieces: list[Piece]) -> list[Piece]:
        pieces = join_same(self.middles(join_same(pieces)))
        pieces = join_same(self.middles(pieces))
        pieces = join_same(self.sides(fill_unknown(pieces)))
        return join_same(self.middles(pieces))

    def middles(self, pieces: list[Piece]) -> list[Piece]:
        for i in range(len(pieces) - 2):  # in place: a piece changed here is the next window's left
            left, middle, right = pieces[i:i + 3]
            if left.lang == right.lang and left.lang not in ("x", "newline"):
                no_kana = not has_kana(middle.text)
                if ((left.lang in self.possible(middle.text) and no_kana) or middle.lang == "x"
                        or (len(middle.text) <= 4 and len(left.text) + len(right.text) >= 6 and no_kana)):
                    middle.lang = left.lang
        return pieces

    def short_beside_long(self, piece: Piece, near: Piece) -> bool:
        no_kana = not has_kana(piece.text) and not has_kana(near.text)
        long_zh = len(near.text) > len(piece.text) and len(near.text) >= 6 and near.lang == "zh"
        return (long_zh and no_kana) or (near.lang in self.possible(piece.text) and no_kana)

    def sides(self, pieces: list[Piece]) -> list[Piece]:
        for end, near, leftward in ((0, 1, False), (-1, -2, True)):
            join = pieces[end].lang == "x"
            if len(pieces) >= 2:
                beside = self.short_beside_long(pieces[end], pieces[near])
                possible = pieces[near].lang in self.possible(pieces[end].text) and len(pieces[near].text) <= 5
                join = join or beside or possible
            if join:
                pieces[end].lang = nearest(pieces, end % len(pieces), leftward)
        return pieces

    # --- the whole ----------------------------------------------------------------------------------------------
    def split(self, text: str) -> list[Piece]:
        sections = []
        for kind, chunk in self.pre_split(text):
            pieces = self.section_pieces(kind, chunk)
            sections.append(Section(kind, pieces if kind in (PUNCT, NEWLINE) else self.smart_merge(pieces)))
        if not sections:
            raise IndexError("split-lang fails on a text with nothing but spaces")  # upstream: sections[0]
        sections = across(merge_punctuation(sections), PUNCT)
        sections = across(merge_newlines(sections), NEWLINE)
        return [piece for s in sections for piece in (zh_ja_merge(s.pieces) if s.kind == ZH else s.pieces)]


def join_same(pieces: list[Piece]) -> list[Piece]:
    joined = []
    for piece in pieces:
        if joined and joined[-1].lang == piece.lang:
            joined[-1].text += piece.text
        else:
            joined.append(piece)
    return joined


def nearest(pieces: list[Piece], index: int, leftward: bool) -> str:
    """The nearest language in that direction that is neither "x" nor a digit, else the piece's own."""
    others = reversed(pieces[:index]) if leftward else pieces[index + 1:]
    return next((p.lang for p in others if p.lang not in ("x", "digit")), pieces[index].lang)


def fill_unknown(pieces: list[Piece]) -> list[Piece]:
    last = len(pieces) - 1
    for i, piece in enumerate(pieces):
        if piece.lang == "x":
            leftward = i == last or (i > 0 and len(pieces[i - 1].text) >= len(pieces[i + 1].text))
            piece.lang = nearest(pieces, i, leftward)
    return pieces


def merge_punctuation(sections: list[Section]) -> list[Section]:
    merged = [sections[0]]
    for section in sections[1:]:
        last = merged[-1]
        if last.kind == PUNCT:  # a leading mark joins what follows, and takes its language
            last.kind = section.kind
            last.pieces[-1].text += section.pieces[0].text
            last.pieces[-1].lang = section.pieces[0].lang
            last.pieces.extend(section.pieces[1:])
        elif section.kind == PUNCT:
            last.pieces[-1].text += section.pieces[0].text
            last.pieces.extend(section.pieces[1:])
        else:
            merged.append(section)
    return merged


def merge_newlines(sections: list[Section]) -> list[Section]:
    merged = [sections[0]]
    for section in sections[1:]:
        if merged[-1].kind == NEWLINE:
            merged[-1].kind = section.kind
            merged[-1].pieces.extend(section.pieces)
        elif section.kind == NEWLINE:
            merged[-1].pieces.extend(section.pieces)
        else:
            merged.append(section)
    return merged


def across(sections: list[Section], mark: str) -> list[Section]:
    """Sections of one kind side by side become one; then, in each, a `mark` piece joins the one before, and a
    piece joins the one before when the piece just before it in the list (merged away or not) had its language."""
    merged = [sections[0]]
    for section in sections[1:]:
        if merged[-1].kind == section.kind:
            merged[-1].pieces.extend(section.pieces)
        else:
            merged.append(section)
    for section in merged:
        out, previous = [], None
        for piece in section.pieces:
            if out and piece.lang == mark:
                out[-1].text += piece.text
            elif out and piece.lang == previous:
                out[-1].text += piece.text
                if out[-1].lang == mark:
                    out[-1].lang = piece.lang
            else:
                out.append(piece)
            previous = piece.lang
        section.pieces = out
    return merged


def zh_ja_merge(pieces: list[Piece]) -> list[Piece]:
    """split-lang's _special_merge_for_zh_ja (step 5 of the module's description)."""
    if len(pieces) == 1:
        return pieces
    counted = {"zh": 0, "ja": 0, "x": 0, "digit": 0, "punctuation": 0, "newline": 0}
    out, i, last = [], 0, len(pieces) - 1
    while i < len(pieces):
        piece = pieces[i]
        counted[piece.lang] += len(piece.text)  # split-lang fails (KeyError) on any other language here
        small = len(piece.text) * 10
        if i == 0:
            right = pieces[1]
            if right.lang in ("zh", "ja") and piece.lang in ("zh", "ja", "x") and small < len(right.text):
                out.append(Piece(right.lang, piece.text + right.text))
                i += 1
            else:
                out.append(piece)
        elif i == last:
            if out[-1].lang in ("zh", "ja") and piece.lang in ("zh", "ja", "x") and small < len(out[-1].text):
                out[-1].text += piece.text
            else:
                out.append(piece)
        else:
            right = pieces[i + 1]
            if (out[-1].lang == right.lang and right.lang in ("zh", "ja") and piece.lang != "en"
                    and small < len(out[-1].text) + len(right.text)):
                out[-1].text += piece.text + right.text
                i += 1
            else:
                out.append(piece)
        i += 1
    if counted["x"] > 0:
        most = max(counted, key=counted.get)  # the first of equals, in the order above
        for piece in out:
            piece.lang = most if piece.lang == "x" else piece.lang
    if counted["ja"] >= counted["zh"] * 10:
        for piece in out:
            piece.lang = "ja" if piece.lang == "zh" else piece.lang
    return join_same(out)
