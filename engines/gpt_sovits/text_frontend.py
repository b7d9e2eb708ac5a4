"""GPT-SoVITS's text preprocessor (TTS_infer_pack/TextPreprocessor.py at 48b1a01) for the v2 family: a text and its
language mode -> fragments of phone ids, per-phone BERT features and normalised text.

    preprocess:           text -> text_split.fragments (pre_seg_text) -> phones_and_bert per fragment, empty ones
                          dropped
    phones_and_bert:      runs of spaces folded -> (language, piece) pairs by the mode (below) -> per piece
                          clean_text (phones, word2ph, normalised text) and its features (chinese-roberta for zh,
                          zeros otherwise) -> joined; fewer than 6 phones: once more with "." in front
    the modes:            all_zh / all_ja / all_ko: LangSegmenter with that default (English pieces stay English);
                          all_yue: as all_zh, Chinese read as Cantonese; en: the whole text English; auto: every
                          detected language; auto_yue: auto with Chinese as Cantonese; zh / ja / ko / yue: detected
                          English pieces English, everything else the given language (pieces merged per side)

The language splitter and each language's clean_text are given by the caller (the loaded model holds their data:
G2PW, the language detector), so this module is only upstream's composition.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable

import torch

from mizuoto.core.errors import InputError

from . import text_split
from .bert_features import text_features
from .declaration import LANGUAGES  # TTS_Config.languages of the v2 family
from .frontend.clean import phone_ids
from .synthesize import Fragment

MIN_PHONES = 6  # get_phones_and_bert retries with "." in front below this
CLEANED = ("zh", "ja", "en", "ko", "yue")  # cleaner.clean_text's modules; any other language is read as " " in en

Segmenter = Callable[[str, str], list[dict]]  # LangSegmenter.getTexts(text, default_lang) -> [{"lang", "text"}]
Cleaner = Callable[[str, str], tuple[list[str], list[int] | None, str]]  # clean_text(text, language)


@dataclass
class TextFrontEnd:
    segment: Segmenter
    clean: Cleaner
    bert: object = None  # chinese-roberta-wwm-ext-large (mizuoto.nn.bert.Bert), for Chinese pieces
    tokenizer: object = None

    def pieces(self, text: str, language: str) -> list[tuple[str, str]]:
        """(language, text) pairs as get_phones_and_bert splits `text` for `language`."""
        if language not in LANGUAGES:
            raise InputError(f"language {language!r} is not one of {', '.join(LANGUAGES)}")
        if language == "en":
            return [("en", text)]
        if language in ("all_zh", "all_yue", "all_ja", "all_ko"):
            default = {"all_zh": "zh", "all_yue": "zh", "all_ja": "ja", "all_ko": "ko"}[language]
            found = self.segment(text, default)
        else:
            found = self.segment(text, "")
        if language in ("all_yue", "auto_yue"):
            return [("yue" if item["lang"] == "zh" else item["lang"], item["text"]) for item in found]
        if language.startswith(("all_", "auto")):
            return [(item["lang"], item["text"]) for item in found]
        # zh / ja / ko / yue: the user's language for every piece that is not English, runs of one side joined
        langs: list[str] = []
        texts: list[str] = []
        for item in found:
            english = item["lang"] == "en"
            if langs and english == (langs[-1] == "en"):
                texts[-1] += item["text"]
                continue
            langs.append("en" if english else language)
            texts.append(item["text"])
        return list(zip(langs, texts, strict=True))

    def phones_and_bert(self, text: str, language: str, final: bool = False
                        ) -> tuple[list[int], torch.Tensor, str]:
        """get_phones_and_bert: phone ids, BERT features (1024, phones) float32 and the normalised text."""
        text = re.sub(r" {2,}", " ", text)
        phones, features, normalised = [], [], []
        for lang, piece in self.pieces(text, language):
            lang = lang.replace("all_", "")
            if lang not in CLEANED:  # cleaner.clean_text reads an unknown language as a space in English
                lang, piece = "en", " "
            piece_phones, word2ph, norm = self.clean(piece, lang)
            ids = phone_ids(piece_phones)
            # upstream joins the pieces' features on its device, promoting a half-precision BERT's to float32 beside
            # the other languages' float32 zeros; the GPT casts them back: the same values, here joined on the CPU
            features.append(text_features(lang, len(ids), self.bert, self.tokenizer, norm, word2ph).float().cpu())
            phones += ids
            normalised.append(norm)
        bert = torch.cat(features, dim=1) if features else torch.zeros((1024, 0))
        if not final and len(phones) < MIN_PHONES:
            return self.phones_and_bert("." + text, language, final=True)
        return phones, bert, "".join(normalised)

    def fragments(self, text: str, language: str, method: str = "cut5") -> list[Fragment]:
        """preprocess: the text's fragments that have phones and normalised text, in order."""
        result = []
        for piece in text_split.fragments(text, language, method):
            phones, bert, normalised = self.phones_and_bert(piece, language)
            if normalised == "":
                continue
            result.append(Fragment(tuple(phones), bert, normalised))
        return result

    def prompt(self, transcript: str, language: str) -> tuple[list[int], torch.Tensor, str]:
        """TTS.run's reference transcript: line breaks stripped from its ends, a stop added when it does not end in
        one (. for English, 。 otherwise), then phones_and_bert."""
        transcript = transcript.strip("\n")
        if not transcript:
            raise InputError("the reference transcript is empty; type what the reference says, or turn on ref_free")
        if transcript[-1] not in text_split.SPLITS:
            transcript += "." if language == "en" else "。"
        return self.phones_and_bert(transcript, language)
