"""VoxCPM's text tokenizer: the model folder's tokenizer.json run by HF `tokenizers`, exact to what
voxcpm 2.0.3 does with `LlamaTokenizerFast.from_pretrained(folder)` (transformers 4.57.3) wrapped by
`mask_multichar_chinese_tokens`.

What upstream does with a text, and what we do in the same order:

1. `VoxCPM.generate` cleans the target text: newlines to spaces, every run of Unicode whitespace to one
   space (`clean_text`; nothing is stripped; a prompt text is not cleaned).
2. `tokenize`: tokenizer.json's pipeline without special tokens (no BOS: `tokenize` passes
   add_special_tokens=False). The real tokenizers are Llama-style: normalizer Prepend("▁") +
   Replace(" ", "▁"), BPE with byte fallback, added tokens matched first.
3. Every token that, with "▁" removed, is a vocabulary entry of two or more CJK ideographs (U+4E00..U+9FFF)
   becomes its characters; the "▁" is dropped with it. Everything else stays as it is: a "▁"-word such as
   "▁你好" whose bare form "你好" is not itself in the vocabulary stays whole, and so do words mixing CJK
   with punctuation or other scripts.
4. Tokens -> ids by the vocabulary (added tokens included); a token it lacks (a character split out of a
   CJK word that is not itself in the vocabulary) becomes the unknown token's id.

Loading reproduces what transformers changes in the backend before that (`_reproduce_transformers`): it
re-adds every token of tokenizer_config.json's `added_tokens_decoder` with that file's flags (which
win over tokenizer.json's), adds the special tokens (bos, eos, unk, ...; LlamaTokenizerFast's defaults
"<s>", "</s>", "<unk>" where the config names none) that are not added tokens yet, applies
`split_special_tokens`, and turns truncation and padding off. Without `added_tokens_decoder` (files
written before transformers 4.34) it reads special_tokens_map.json, added_tokens.json and tokenizer.json's
added tokens instead, as transformers does.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from pathlib import Path

from tokenizers import AddedToken, Tokenizer, pre_tokenizers

from mizuoto.core.errors import CheckpointError, InputError

TOKENIZER_JSON, CONFIG, SPECIAL_TOKENS_MAP, ADDED_TOKENS = (
    "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "added_tokens.json")

# transformers' SpecialTokensMixin attributes, in the order it lists them
SPECIAL_KEYS = ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token")
ADDITIONAL = "additional_special_tokens"
LLAMA_DEFAULTS = {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"}  # LlamaTokenizerFast.__init__
_TOKEN_FIELDS = {"content", "single_word", "lstrip", "rstrip", "normalized", "special"}
SPACE_MARK = "▁"  # SentencePiece's word-start marker


def clean_text(text: str) -> str:
    """upstream's clean-up of the target text (`VoxCPM._generate`)."""
    return re.sub(r"\s+", " ", text.replace("\n", " "))


def require_text(text) -> str:
    """upstream refuses a target text that is not a string or only whitespace."""
    if not isinstance(text, str) or not text.strip():
        raise InputError("the text to speak is empty; give it some words")
    return text


def _cjk_word(token: str) -> bool:
    return len(token) >= 2 and all("\u4e00" <= c <= "\u9fff" for c in token)


class TextTokenizer:
    """text -> ids as upstream's wrapped tokenizer; `backend` is the `tokenizers.Tokenizer` after loading."""

    def __init__(self, backend: Tokenizer, unk_id: int | None):
        self.backend = backend
        self.unk_id = unk_id
        self.cjk_words = frozenset(t for t in backend.get_vocab(with_added_tokens=True) if _cjk_word(t))

    def tokens(self, text: str) -> list[str]:
        """upstream's `CharTokenizerWrapper.tokenize`."""
        if not isinstance(text, str):
            raise InputError(f"the text must be a string, got {type(text).__name__}")
        out: list[str] = []
        for token in self.backend.encode(text, add_special_tokens=False).tokens:
            bare = token.replace(SPACE_MARK, "")
            if bare in self.cjk_words:
                out.extend(bare)
            else:
                out.append(token)
        return out

    def ids_of(self, tokens: Iterable[str]) -> list[int]:
        """transformers' `convert_tokens_to_ids`: unknown tokens get the unknown token's id."""
        ids = []
        for token in tokens:
            index = self.backend.token_to_id(token)
            if index is None:
                if self.unk_id is None:
                    raise InputError(f"the tokenizer has no id for {token!r} and no unknown token; "
                                     "remove that character from the text")
                index = self.unk_id
            ids.append(index)
        return ids

    def __call__(self, text: str) -> list[int]:
        return self.ids_of(self.tokens(text))


def load_tokenizer(folder) -> TextTokenizer:
    """The tokenizer of a VoxCPM model folder (tokenizer.json, with tokenizer_config.json if present)."""
    folder = Path(folder)
    path = folder / TOKENIZER_JSON
    if not path.is_file():
        raise CheckpointError(f"{folder} has no {TOKENIZER_JSON}; VoxCPM's text tokenizer is that file of the "
                              "model folder: download it with the model")
    try:
        backend = Tokenizer.from_file(str(path))
    except Exception as error:  # tokenizers raises its own Exception type for bad files
        raise CheckpointError(f"cannot read {path} ({' '.join(str(error).split())[:200]}); "
                              "download the model folder again") from None
    config_path = folder / CONFIG
    config = _read_json(config_path) if config_path.is_file() else {}
    unk = _reproduce_transformers(backend, folder, config, path)
    return TextTokenizer(backend, None if unk is None else backend.token_to_id(str(unk)))


# ---------------------------------------------------------------------------------------------------
# What LlamaTokenizerFast.from_pretrained changes in the backend (transformers 4.57.3)


def _read_json(path: Path):
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as error:
        raise CheckpointError(f"cannot read {path} ({error}); download the model folder again") from None
    if not isinstance(data, dict):
        raise CheckpointError(f"{path} is not a JSON object; download the model folder again")
    return data


def _added_token(entry, where: str) -> AddedToken:
    if not isinstance(entry, dict) or not isinstance(entry.get("content"), str) or set(entry) - _TOKEN_FIELDS:
        raise CheckpointError(f"{where} has a malformed added token {entry!r}")
    return AddedToken(**entry)


def _typed_tokens(value, where: str):
    """transformers' `convert_added_tokens(..., save=False)`: {"__type": "AddedToken", ...} -> AddedToken,
    through lists and dicts."""
    if isinstance(value, dict) and value.get("__type") == "AddedToken":
        return _added_token({k: v for k, v in value.items() if k != "__type"}, where)
    if isinstance(value, list):
        return [_typed_tokens(v, where) for v in value]
    if isinstance(value, dict):
        return {k: _typed_tokens(v, where) for k, v in value.items()}
    return value


def _refuse_slow_paths(config: dict, where: Path) -> None:
    """Settings with which upstream ignores tokenizer.json and rebuilds the tokenizer from tokenizer.model
    with sentencepiece (or opens another file): not reproduced."""
    if config.get("add_prefix_space") is not None or config.get("from_slow"):
        key = "add_prefix_space" if config.get("add_prefix_space") is not None else "from_slow"
        raise CheckpointError(f"{where} sets {key}, with which upstream rebuilds the tokenizer from tokenizer.model "
                              "instead of tokenizer.json; Mizuoto reads tokenizer.json only: remove the key")
    for key in ("tokenizer_file", "fast_tokenizer_files"):
        if key in config:
            raise CheckpointError(f"{where} names {key}, with which upstream may read another file than the "
                                  f"folder's {TOKENIZER_JSON}; remove the key")


def _legacy_added_tokens(folder: Path, kwargs: dict, tokenizer_json: Path) -> tuple[dict, dict]:
    """Files without added_tokens_decoder: special_tokens_map.json, added_tokens.json, then tokenizer.json's
    added tokens (transformers' "legacy" branch)."""
    decoder: dict[int, AddedToken] = {}
    by_content: dict[str, AddedToken] = {}
    special_map = folder / SPECIAL_TOKENS_MAP
    if special_map.is_file():
        for key, value in _read_json(special_map).items():
            if isinstance(value, dict):
                value = _added_token({**value, "special": True}, str(special_map))
            elif key == ADDITIONAL and isinstance(value, list):
                merged = kwargs.pop(ADDITIONAL, []) or []
                for token in value:
                    if isinstance(token, dict):
                        token = _added_token({**token, "special": True}, str(special_map))
                    if token not in merged:
                        merged.append(token)
                value = merged
            kwargs[key] = value
    added_path = folder / ADDED_TOKENS
    if added_path.is_file():
        special = []
        for key in (*SPECIAL_KEYS, ADDITIONAL):
            if kwargs.get(key) is not None:
                special += [str(t) for t in kwargs[key]] if key == ADDITIONAL else [str(kwargs[key])]
        for content, index in _read_json(added_path).items():
            if isinstance(index, bool) or not isinstance(index, int):
                raise CheckpointError(f"{added_path} maps {content!r} to {index!r}, not to a token id")
            is_special = content in special
            decoder[index] = AddedToken(content, rstrip=False, lstrip=False, normalized=not is_special,
                                        special=is_special)
            by_content[content] = decoder[index]
    for entry in _read_json(tokenizer_json).get("added_tokens") or []:
        entry = dict(entry)
        index = entry.pop("id", None)
        if isinstance(index, bool) or not isinstance(index, int):
            raise CheckpointError(f"{tokenizer_json} has an added token without an id: {entry!r}")
        decoder[index] = _added_token(entry, str(tokenizer_json))
        by_content[str(decoder[index])] = decoder[index]
    return decoder, by_content


def _reproduce_transformers(backend: Tokenizer, folder: Path, config: dict, tokenizer_json: Path):
    """Apply to `backend` what from_pretrained and the tokenizer's __init__ apply; return the unk token."""
    where = folder / CONFIG
    _refuse_slow_paths(config, where)
    kwargs = {k: v for k, v in config.items() if k != "tokenizer_class"}
    if "added_tokens_decoder" in kwargs:
        raw = kwargs["added_tokens_decoder"]
        if not isinstance(raw, dict):
            raise CheckpointError(f"{where}: added_tokens_decoder is not an object")
        decoder, by_content = {}, {}
        for index, entry in raw.items():
            try:
                index = int(index)
            except ValueError:
                raise CheckpointError(f"{where}: added_tokens_decoder has the key {index!r}, not a token id") from None
            decoder[index] = _added_token(entry, str(where))
            by_content[str(decoder[index])] = decoder[index]
    else:
        decoder, by_content = _legacy_added_tokens(folder, kwargs, tokenizer_json)
    kwargs = _typed_tokens(kwargs, str(where))
    special = dict(LLAMA_DEFAULTS)
    for key in (*SPECIAL_KEYS, ADDITIONAL):
        if key in kwargs:
            value = kwargs[key]
            if by_content and value is not None and key != ADDITIONAL:
                value = by_content.get(str(value), value)
            special[key] = value
    extra = kwargs.get("extra_special_tokens") or {}
    if not isinstance(extra, dict):
        raise CheckpointError(f"{where}: extra_special_tokens is not an object")
    for key, value in (*special.items(), *extra.items()):
        valid = (all(isinstance(t, (str, AddedToken)) for t in value) if key == ADDITIONAL and
                 isinstance(value, (list, tuple)) else isinstance(value, (str, AddedToken)))
        if value is not None and not valid:
            raise CheckpointError(f"{where}: {key} must be a token string, got {value!r}")
    for key, flag, default in (("bos_token", "add_bos_token", True), ("eos_token", "add_eos_token", False)):
        if special.get(key) is None and kwargs.get(flag, default):
            raise CheckpointError(f"{where} sets {flag} but no {key}; upstream refuses this tokenizer too")

    # SpecialTokensMixin.all_special_tokens_extended: set attributes in order, then the extra ones
    ordered = [special.get(key) for key in (*SPECIAL_KEYS, ADDITIONAL)] + list(extra.values())
    extended, seen = [], set()
    for value in ordered:
        if not value:
            continue
        fresh = [t for t in value if str(t) not in seen] if isinstance(value, (list, tuple)) else (
            [value] if str(value) not in seen else [])
        seen.update(map(str, fresh))
        extended.extend(fresh)
    all_special = [str(t) for t in extended]

    # PreTrainedTokenizerFast.__init__: every added_tokens_decoder entry is re-added (its "already
    # there" test compares token reprs with the backend's ids, so it never matches), then the special
    # tokens that are neither added tokens nor among those. `in` compares str and AddedToken exactly as
    # transformers' lists do (an AddedToken never equals a str).
    backend.encode_special_tokens = bool(kwargs.get("split_special_tokens", False))
    to_add = [token for _, token in sorted(decoder.items(), key=lambda item: item[0])]
    encoder = [t.content for _, t in sorted(backend.get_added_tokens_decoder().items())] + [str(t) for t in to_add]
    to_add += [t for t in extended if t not in encoder and t not in to_add]
    tokens = []
    for token in to_add:
        if isinstance(token, str):
            token = AddedToken(token, special=token in all_special)
        else:
            token.special = token.special or str(token) in all_special
        tokens.append(token)
    if tokens:
        backend.add_tokens(tokens)

    # LlamaTokenizerFast passes add_prefix_space=None: transformers rebuilds a pre-tokenizer whose
    # add_prefix_space differs from None with None, which the tokenizers classes refuse (TypeError,
    # swallowed): the same attempt here keeps whatever it does.
    try:
        state = json.loads(backend.pre_tokenizer.__getstate__())
        if state.get("add_prefix_space", None) is not None:
            kind = getattr(pre_tokenizers, state.pop("type"))
            state["add_prefix_space"] = None
            backend.pre_tokenizer = kind(**state)
    except Exception:
        pass
    backend.no_truncation()
    backend.no_padding()
    return special.get("unk_token")
