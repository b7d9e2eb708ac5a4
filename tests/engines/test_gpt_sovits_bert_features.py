"""GPT-SoVITS's per-phone Chinese text features (engines/gpt_sovits/bert_features.py), with transformers 4.57.3 (the
test oracle) in the roles upstream gives it: BertTokenizerFast on the BERT folder (built here from a small
vocab.txt, and saved as tokenizer.json as a released folder has it) and BertForMaskedLM with sdpa attention.
The assembly around them is get_bert_feature's at 48b1a01 (hidden_states[-3], [CLS] and [SEP] cut, each row
repeated word2ph times, transposed); the model itself is compared with transformers in tests/nn/test_bert.py."""

import pytest
import torch

from mizuoto.core.errors import InputError
from mizuoto.engines.gpt_sovits import bert_features
from mizuoto.nn import bert

transformers = pytest.importorskip("transformers")

CHARS = "我是中文本测试的句子你好，。！？"
CONFIG = {"vocab_size": 5 + len(CHARS), "hidden_size": 32, "num_hidden_layers": 4, "num_attention_heads": 4,
          "intermediate_size": 48, "max_position_embeddings": 64, "model_type": "bert"}


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    path = tmp_path_factory.mktemp("roberta")
    (path / "vocab.txt").write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *CHARS]) + "\n",
                                    encoding="utf-8")
    return path


def upstream_model():
    model = transformers.BertForMaskedLM(transformers.BertConfig(**CONFIG, attn_implementation="sdpa")).eval()
    g = torch.Generator().manual_seed(4)
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.copy_(torch.rand(p.shape, generator=g) + 0.5 if "LayerNorm.weight" in name
                    else torch.randn(p.shape, generator=g) * 0.2)
    return model


def upstream_feature(tokenizer, model, text, word2ph):
    """get_bert_feature's steps with transformers' tokenizer and model."""
    with torch.no_grad():
        inputs = tokenizer(text, return_tensors="pt")
        res = model(**inputs, output_hidden_states=True)
        res = torch.cat(res["hidden_states"][-3:-2], -1)[0].cpu()[1:-1]
    return torch.cat([res[i].repeat(word2ph[i], 1) for i in range(len(word2ph))], dim=0).T


def test_the_tokenizer_is_berttokenizerfasts_from_vocab_and_from_tokenizer_json(folder, tmp_path):
    theirs = transformers.BertTokenizerFast(str(folder / "vocab.txt"))
    text = "我是中文，你好！测试句子。"
    ours = bert_features.load_tokenizer(folder)
    assert ours.encode(text).ids == theirs(text)["input_ids"]
    theirs.save_pretrained(str(tmp_path))  # tokenizer.json, as a released folder has it
    assert (tmp_path / "tokenizer.json").is_file()
    assert bert_features.load_tokenizer(tmp_path).encode(text).ids == theirs(text)["input_ids"]


def test_phone_features_are_upstreams(folder):
    model = upstream_model()
    tokenizer = transformers.BertTokenizerFast(str(folder / "vocab.txt"))
    ours = bert.from_state(CONFIG, model.state_dict())
    text, word2ph = "我是中文，测试。", [2, 2, 2, 2, 1, 2, 2, 1]
    want = upstream_feature(tokenizer, model, text, word2ph)
    got = bert_features.text_features("all_zh", sum(word2ph), ours, bert_features.load_tokenizer(folder), text,
                                      word2ph)
    assert got.shape == (32, 14) and torch.equal(got, want)


def test_other_languages_get_zeros_and_mismatches_are_one_line_errors(folder):
    zeros = bert_features.text_features("en", 7)
    assert zeros.shape == (1024, 7) and zeros.dtype == torch.float32 and not zeros.any()
    with pytest.raises(InputError, match="word2ph has 2 entries for 3 characters"):
        bert_features.chinese_features(None, None, "我是中", [1, 2])
    with pytest.raises(InputError, match="3 BERT tokens between"):
        bert_features.phone_features(torch.zeros(5, 4), [1, 1])
