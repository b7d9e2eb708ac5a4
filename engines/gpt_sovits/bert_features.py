"""GPT-SoVITS's Chinese text features (TextPreprocessor.get_bert_feature / get_bert_inf at 48b1a01): the
normalised text through chinese-roberta-wwm-ext-large (AutoTokenizer + AutoModelForMaskedLM), its third-last
hidden state without [CLS] and [SEP], one row per character repeated for that character's phones (word2ph),
transposed to (1024, phones). Other languages get zeros (1024, phones).

The tokenizer is the folder's own: its tokenizer.json when there is one (what AutoTokenizer's fast tokenizer
reads), else its vocab.txt as BertTokenizerFast builds it (WordPiece, Chinese characters split, lower-cased
unless tokenizer_config.json says otherwise).
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from mizuoto.core.errors import CheckpointError, InputError
from mizuoto.nn.bert import Bert

FEATURE_DIM = 1024


def load_tokenizer(folder: str | Path):
    """The BERT folder's tokenizer (a `tokenizers.Tokenizer`)."""
    from tokenizers import Tokenizer

    folder = Path(folder)
    if (folder / "tokenizer.json").is_file():
        return Tokenizer.from_file(str(folder / "tokenizer.json"))
    if not (folder / "vocab.txt").is_file():
        raise CheckpointError(f"{folder} has neither tokenizer.json nor vocab.txt; download the BERT folder again")
    from tokenizers.implementations import BertWordPieceTokenizer
    from tokenizers.models import WordPiece

    settings = {}
    if (folder / "tokenizer_config.json").is_file():
        settings = json.loads((folder / "tokenizer_config.json").read_text(encoding="utf-8"))
    vocab = WordPiece.read_file(str(folder / "vocab.txt"))
    return BertWordPieceTokenizer(vocab, lowercase=bool(settings.get("do_lower_case", True)),
                                  strip_accents=settings.get("strip_accents"),
                                  handle_chinese_chars=bool(settings.get("tokenize_chinese_chars", True)))._tokenizer


def phone_features(hidden: torch.Tensor, word2ph: list[int]) -> torch.Tensor:
    """A sentence's hidden states (tokens, 1024) with [CLS] and [SEP] still on -> (1024, sum(word2ph))."""
    rows = hidden[1:-1]
    if rows.shape[0] != len(word2ph):
        raise InputError(f"the text has {rows.shape[0]} BERT tokens between [CLS] and [SEP] but {len(word2ph)} "
                         f"characters with phones; GPT-SoVITS needs one token per character")
    return torch.cat([rows[i].repeat(count, 1) for i, count in enumerate(word2ph)], dim=0).T


def chinese_features(bert: Bert, tokenizer, text: str, word2ph: list[int]) -> torch.Tensor:
    """get_bert_feature: (1024, phones) for normalised Chinese `text` and its word2ph."""
    if len(word2ph) != len(text):
        raise InputError(f"word2ph has {len(word2ph)} entries for {len(text)} characters")
    encoding = tokenizer.encode(text)
    device = bert.embeddings.word_embeddings.weight.device
    ids = torch.tensor([encoding.ids], device=device)
    types = torch.tensor([encoding.type_ids], device=device)
    mask = torch.tensor([encoding.attention_mask], device=device)
    with torch.inference_mode():
        hidden = bert(ids, mask, types, output_hidden_states=True).hidden_states[-3][0]
    return phone_features(hidden, word2ph)


def text_features(language: str, phones: int, bert: Bert | None = None, tokenizer=None, text: str = "",
                  word2ph: list[int] | None = None) -> torch.Tensor:
    """get_bert_inf: Chinese text's features, zeros for every other language."""
    if language.replace("all_", "") == "zh":
        if bert is None or tokenizer is None or word2ph is None:
            raise InputError("Chinese text needs the BERT model, its tokenizer and word2ph")
        return chinese_features(bert, tokenizer, text, word2ph)
    return torch.zeros((FEATURE_DIM, phones), dtype=torch.float32)
