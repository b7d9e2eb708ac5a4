"""CosyVoice 2/3's text tokenizer: the model's `CosyVoice-BlankEN/` folder (Qwen2's byte-level BPE, read by
mizuoto/text/qwen2_bpe.py) plus the special tokens upstream adds to it, exact to ace7c47's
`cosyvoice/tokenizer/tokenizer.py` (CosyVoice2Tokenizer / CosyVoice3Tokenizer over transformers 4.51.3's
AutoTokenizer, then `add_special_tokens`).

The added tokens are numbered as tokenizers' AddedVocabulary numbers them (qwen2_bpe.with_special_tokens): on the
released folder (151643 BPE tokens, <|endoftext|> <|im_start|> <|im_end|> at 151643..151645) <|endofprompt|>
becomes 151646, the id CosyVoice 3's LM asserts in every prompt. They are special and matched in the raw text, so
"[laughter]" or "[iǎng]" written in a text become one id each; `decode` leaves them out, as upstream's
`skip_special_tokens=True` does.
"""

from __future__ import annotations

from pathlib import Path

from mizuoto.core.errors import CheckpointError, InputError
from mizuoto.text.qwen2_bpe import (
    CONFIG,
    QWEN2_PATTERN,
    QwenTokenizer,
    check_tokenizer_json,
    read_added_tokens,
    read_json,
    read_ranks,
    with_special_tokens,
)

WHAT = "CosyVoice text tokenizer"
VERSIONS = ("cv2", "cv3")
ENDOFPROMPT = "<|endofprompt|>"

# upstream's `special_tokens` dicts, in their order: eos_token and pad_token, then additional_special_tokens
# (data, copied as lists: the order decides the ids)
_CV2_ADDED = [
    "<|im_start|>", "<|im_end|>", "<|endofprompt|>",
    "[breath]", "<strong>", "</strong>", "[noise]",
    "[laughter]", "[cough]", "[clucking]", "[accent]",
    "[quick_breath]",
    "<laughter>", "</laughter>",
    "[hissing]", "[sigh]", "[vocalized-noise]",
    "[lipsmack]", "[mn]",
]
# CosyVoice 3 adds <|endofsystem|>, then CMU phones (ARPAbet with stress) and pinyin initials and finals with tones
_CV3_PHONES = """
[AA] [AA0] [AA1] [AA2] [AE] [AE0] [AE1] [AE2] [AH] [AH0] [AH1] [AH2] [AO] [AO0] [AO1] [AO2] [AW] [AW0] [AW1] [AW2]
[AY] [AY0] [AY1] [AY2] [B] [CH] [D] [DH] [EH] [EH0] [EH1] [EH2] [ER] [ER0] [ER1] [ER2] [EY] [EY0] [EY1] [EY2] [F]
[G] [HH] [IH] [IH0] [IH1] [IH2] [IY] [IY0] [IY1] [IY2] [JH] [K] [L] [M] [N] [NG] [OW] [OW0] [OW1] [OW2] [OY] [OY0]
[OY1] [OY2] [P] [R] [S] [SH] [T] [TH] [UH] [UH0] [UH1] [UH2] [UW] [UW0] [UW1] [UW2] [V] [W] [Y] [Z] [ZH]
[a] [ai] [an] [ang] [ao] [b] [c] [ch] [d] [e] [ei] [en] [eng] [f] [g] [h] [i] [ian] [in] [ing] [iu] [ià] [iàn]
[iàng] [iào] [iá] [ián] [iáng] [iáo] [iè] [ié] [iòng] [ióng] [iù] [iú] [iā] [iān] [iāng] [iāo] [iē] [iě] [iōng]
[iū] [iǎ] [iǎn] [iǎng] [iǎo] [iǒng] [iǔ] [j] [k] [l] [m] [n] [o] [ong] [ou] [p] [q] [r] [s] [sh] [t] [u] [uang]
[ue] [un] [uo] [uà] [uài] [uàn] [uàng] [uá] [uái] [uán] [uáng] [uè] [ué] [uì] [uí] [uò] [uó] [uā] [uāi] [uān]
[uāng] [uē] [uě] [uī] [uō] [uǎ] [uǎi] [uǎn] [uǎng] [uǐ] [uǒ] [vè] [w] [x] [y] [z] [zh] [à] [ài] [àn] [àng] [ào]
[á] [ái] [án] [áng] [áo] [è] [èi] [èn] [èng] [èr] [é] [éi] [én] [éng] [ér] [ì] [ìn] [ìng] [í] [ín] [íng] [ò]
[òng] [òu] [ó] [óng] [óu] [ù] [ùn] [ú] [ún] [ā] [āi] [ān] [āng] [āo] [ē] [ēi] [ēn] [ēng] [ě] [ěi] [ěn] [ěng] [ěr]
[ī] [īn] [īng] [ō] [ōng] [ōu] [ū] [ūn] [ǎ] [ǎi] [ǎn] [ǎng] [ǎo] [ǐ] [ǐn] [ǐng] [ǒ] [ǒng] [ǒu] [ǔ] [ǔn] [ǘ] [ǚ] [ǜ]
""".split()
SPECIAL_TOKENS = {
    "cv2": ["<|endoftext|>", "<|endoftext|>", *_CV2_ADDED],
    "cv3": ["<|endoftext|>", "<|endoftext|>", *_CV2_ADDED, "<|endofsystem|>", *_CV3_PHONES],
}
_TOKENIZER_CLASSES = (None, "Qwen2Tokenizer", "Qwen2TokenizerFast")
# transformers' clean_up_tokenization, applied by decode when the folder's config asks for it
_CLEAN_UP = ((" .", "."), (" ?", "?"), (" !", "!"), (" ,", ","), (" ' ", "'"), (" n't", "n't"), (" 'm", "'m"),
             (" 's", "'s"), (" 've", "'ve"), (" 're", "'re"))


class CosyVoiceTokenizer:
    """`encode(text)` is upstream's `tokenizer([text])["input_ids"][0]`, `decode(ids)` its
    `batch_decode([ids], skip_special_tokens=True)[0]`."""

    def __init__(self, bpe: QwenTokenizer, version: str, clean_up_spaces: bool = False):
        self.bpe = bpe
        self.version = version
        self.clean_up_spaces = clean_up_spaces

    @classmethod
    def from_folder(cls, folder: str | Path, version: str) -> CosyVoiceTokenizer:
        if version not in VERSIONS:
            raise InputError(f"CosyVoice tokenizer version {version!r} is not one of {', '.join(VERSIONS)}")
        folder = Path(folder)
        if not folder.is_dir():
            raise CheckpointError(f"the {WHAT} folder {folder} is missing (CosyVoice-BlankEN in the model folder)")
        config_path = folder / CONFIG
        if not config_path.is_file():
            raise CheckpointError(f"the {WHAT} file {config_path} is missing")
        config = read_json(config_path)
        if config.get("tokenizer_class") not in _TOKENIZER_CLASSES:
            raise CheckpointError(f"{config_path} names tokenizer_class {config['tokenizer_class']!r}, "
                                  "not a Qwen2 tokenizer")
        added = read_added_tokens(config_path)
        ranks, rank_to_id, id_bytes = read_ranks(folder, WHAT)
        # transformers 4.51.3 has no regex patch: a Qwen2 tokenizer always splits with Qwen2's own regex
        check_tokenizer_json(folder, (QWEN2_PATTERN,))
        base = QwenTokenizer(ranks, rank_to_id, id_bytes, [], QWEN2_PATTERN, name=f"cosyvoice-{version}")
        added = with_special_tokens(added, SPECIAL_TOKENS[version], len(id_bytes), base.vocab_id)
        bpe = QwenTokenizer(ranks, rank_to_id, id_bytes, added, QWEN2_PATTERN, name=f"cosyvoice-{version}")
        return cls(bpe, version, bool(config.get("clean_up_tokenization_spaces", False)))

    def __len__(self) -> int:
        """len(upstream's tokenizer): the ids in use, base vocabulary and added tokens together."""
        return len(self.bpe._id_bytes.keys() | self.bpe.added_tokens.values())

    def encode(self, text: str) -> list[int]:
        return self.bpe.encode(text)

    def decode(self, ids: list[int]) -> str:
        text = self.bpe.decode(ids, skip_special_tokens=True)
        if self.clean_up_spaces:
            for old, new in _CLEAN_UP:
                text = text.replace(old, new)
        return text

    def token_id(self, content: str) -> int:
        if content not in self.bpe.added_tokens:
            raise CheckpointError(f"the {WHAT} has no token {content!r}")
        return self.bpe.added_tokens[content]

    @property
    def endofprompt(self) -> int:
        """<|endofprompt|>'s id (151646 on the released folder)."""
        return self.token_id(ENDOFPROMPT)

    def check_prompt(self, ids: list[int], what: str = "prompt text") -> None:
        """CosyVoice 3's LM refuses a prompt (or instruct) text without <|endofprompt|>; say so in one line."""
        if self.version == "cv3" and self.endofprompt not in ids:
            raise InputError(f"CosyVoice 3's {what} must contain {ENDOFPROMPT} (e.g. 'You are a helpful "
                             f"assistant.{ENDOFPROMPT}' before the prompt's transcript)")
