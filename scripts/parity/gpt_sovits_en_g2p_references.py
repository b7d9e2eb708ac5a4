#!/usr/bin/env python
"""Golden phones of GPT-SoVITS's English front end, written by upstream's own code from an RVC-Boss/GPT-SoVITS
checkout: text/english.py's text_normalize (en_normalization/expend.py with inflect) and g2p (en_G2p over g2p_en
2.1.0: nltk's TweetTokenizer and pos_tag, the CMU and name dictionaries, homographs, wordsegment, g2p_en's GRU
predictor), then cleaner.clean_text and text/__init__.cleaned_text_to_sequence (v2).

    python scripts/parity/gpt_sovits_en_g2p_references.py OUTDIR --checkout PATH   (in the upstream venv)

nltk's data is a download nothing here can reach, so a temporary NLTK_DATA is made: a tiny averaged perceptron
tagger in nltk 3.9.2's own format (averaged_perceptron_tagger_eng/*.json: seeded random weights over the features
the texts below give, Penn tags, a small tag dictionary; the first seed from 0 under which every homograph in the
texts is read both ways), which the set stores (OUTDIR/nltk_data/) and the test reads; an empty
averaged_perceptron_tagger.zip and a one-word cmudict corpus, only so that g2p_en's import-time checks find them
(en_G2p replaces g2p_en's cmudict with its own). g2p_en's real checkpoint20.npz is used, as our side uses it.

Upstream's text/ is run from a copy: english.py writes engdict_cache.pickle beside itself. That cache is absent at
48b1a01 (the snapshot lacks it), so upstream builds it from cmudict.rep and cmudict-fast.rep (read_dict_new), as a
fresh clone does; the set records the resulting dictionary's size and hash. Strings and integers only, except the
predictor's smallest top-2 logit gap, recorded to show that its choices are not near ties.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import shutil
import sys
import tempfile
import zipfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from pinned import checkout_golden_arguments, write_golden_set  # noqa: E402

NORMALIZE = {
    "cardinals": "I have 3 apples, 25 oranges, 100 pears and 0 plums.",
    "years": "In 1999 and 2005, not 2000, 2010, 1900, 1066 or 2999, but 3000 and 1000.",
    "grouped": "There are 5,234 people, 1,000,000 ants, 123456789 stars and 1,2 things.",
    "ordinals": "1st, 2nd, 3rd, 4th, 11th, 12th, 21st, 101st, 0th and 1000th place.",
    "numbered_list": "1. Open the door 2. Walk in 13. Sit",
    "decimals": "Pi is about 3.14159, and 0.5 is half, .5 is not.",
    "money": "It costs $12.50, $1, $0.01, $0.1, 32.3$, £7.14, 1£, £2.01 and $1.2.3 total.",
    "units": "Run 10km, 1km, 1.0m, 5ft, 2L, 1tbsp, 3tsp, 20h, 1min, 30s, 100km/h, 23°C, 4°F and 2 m.",
    "times": "Meet at 13:00, 4:30, 23:59, 0:05 or 12:00.",
    "fractions": "Add 1/2, 3/2, 1/3, 3/4, 5/6, 2/5, 6/1 and 1/101 cups.",
    "arithmetic": "So 3 + 4 = 7, 10 - 2 = 8, 6 × 7 and 8 ÷ 2, and x = y.",
    "negative": "It is -5 today and -12 tomorrow, -3°C at night.",
    "percent": "Growth was 25% and 3.5% last year.",
    "abbreviations": "Pets, e.g. cats, i.e. dogs, E.G. birds, Mr. Smith at 10 a.m.",
    "punctuation_runs": "Wait... what?!! No way!!! Really??? Yes - - sure, , ok .",
    "chinese_punctuation": "中文标点：你好，世界。真的！好吗？ok；fine：yes",
    "quotes": "He said “hello” and don’t; she said \"hi\" and 'bye'.",
    "accents": "Café naïve résumé façade Ångström.",
    "capitals": "NASA and the FBI use JSON, iPhone, McDonald and ChatGPT.",
    "long_number": "A big number 12345678901234567890 and 007.",
    "spaces": "Lots   of    spaces\tand\nlines here.",
}
G2P = {
    "plain": "hello world, this is a simple test.",
    "homograph_read": "I read books every day. Yesterday I read a book. We read. They read it. Read this.",
    "homograph_other": "The complex problem needs a complex solution. I object to the object. Close the door, it "
                       "is close. Use it, what is the use? We present a present. Record the record.",
    "hot_words": "chatgpt and json and conda",
    "names": "Aadil and Zunun met Aaditya, then aadil again and ZUO.",
    "letters": "A b c, a d, I A. x y z.",
    "possessives": "json's laptop's bus's garage's conda's chatgpt's llama's github's cat's church's",
    "compounds": "whiteboardmarker keyboardwarrior sunflowerseed notebookcase hypergraphical snorkeltastic",
    "predicted": "flibbertigibbet mizuoto zorblax kubernetes brexiteer grimblewick frobnicate",
    "short_oov": "xqz bq zz ai os ios hud ae ar",
    "dropped_abbreviations": "aios huds oses",
    "non_letters": "hello - world ' test , . ! ? -- ''''",
    "domains": "well.done and x-ray.com and fine.it",
    "apostrophes": "rock'n'roll don't o'clock dogs' 'tis",
    "am_pm": "ten a.m. and five p.m.",
    "empty": "",
}
CLEAN = {
    "short_hi": "Hi.",
    "short_ok": "OK",
    "short_a": "A",
    "empty": "",
    "one_word": "hello",
    "four_phones": "hat?",
    "sentence": "I read 3 books in 2024, and it cost $12.50!",
    "mixed": "GPT-SoVITS reads English; 中文 is dropped.",
    "marks_only": "?!",
    "yen_not_special": "hello￥world^again",
}
HOMOGRAPHS_READ_BOTH_WAYS = ("read", "complex", "object", "close", "use", "present", "record")
BOTH_WAYS = 5  # of these, read among them
PENN = ("CC", "CD", "DT", "IN", "JJ", "MD", "NN", "NNP", "NNS", "PRP", "RB", "TO", "VB", "VBD", "VBG", "VBN", "VBP",
        "VBZ", "WP", ",", ".", ":")
TAGDICT = {"the": "DT", "The": "DT", "and": "CC", "to": "TO", "a": "DT", "is": "VBZ", ",": ",", ".": ".", "?": ".",
           "!": ".", "of": "IN", "it": "PRP", "I": "PRP", "We": "PRP", "They": "PRP", "we": "PRP"}
# Cues a real tagger has learnt, added to the random weights so that context decides: a verb after a pronoun, to or
# a modal, a noun or an adjective after a determiner, a past tense two words after "yesterday".
CUES = {"i-1 tag PRP": {"VBP": 3.0}, "i-1 tag TO": {"VB": 3.0}, "i-1 tag MD": {"VB": 3.0},
        "i-1 tag DT": {"NN": 2.0, "JJ": 1.5}, "i-2 word yesterday": {"VBD": 5.0}, "i+1 word problem": {"JJ": 2.0},
        "i-1 tag -START-": {"VB": 1.0, "NNP": 1.0}}


def tiny_tagger(folder: Path, sentences: list[list[str]], seed: int) -> None:
    """nltk's three JSON files: weights (feature -> tag -> weight) over the features these sentences can give."""
    rng = random.Random(seed)
    start, end = ["-START-", "-START2-"], ["-END-", "-END2-"]

    def seen(word):
        return "!HYPHEN" if "-" in word and word[0] != "-" else word.lower()

    words = sorted({seen(w) for s in sentences for w in s} | set(start) | set(end))
    tags = list(PENN) + start[:1] + start[1:]
    names = ["bias"]
    names += [f"i suffix {w[-3:]}" for w in sorted({w for s in sentences for w in s})]
    names += [f"i pref1 {w[0]}" for w in sorted({w for s in sentences for w in s})]
    names += [f"i-1 tag {t}" for t in tags] + [f"i-2 tag {t}" for t in tags]
    names += [f"i tag+i-2 tag {a} {b}" for a in tags for b in tags if rng.random() < 0.2]
    for prefix in ("i word", "i-1 word", "i-2 word", "i+1 word", "i+2 word"):
        names += [f"{prefix} {w}" for w in words]
    names += [f"{p} {w[-3:]}" for p in ("i-1 suffix", "i+1 suffix") for w in words]
    names += [f"i-1 tag+i word {t} {w}" for t in tags for w in words if rng.random() < 0.1]
    weights = {}
    for name in dict.fromkeys(names):
        chosen = rng.sample(PENN, rng.randint(1, 3))
        weights[name] = {tag: round(rng.gauss(0.0, 1.0), 3) for tag in chosen}
    for name, cue in CUES.items():
        weights[name] = {**weights.get(name, {}), **cue}
    folder.mkdir(parents=True, exist_ok=True)
    for kind, value in (("weights", weights), ("tagdict", TAGDICT), ("classes", list(PENN))):
        (folder / f"averaged_perceptron_tagger_eng.{kind}.json").write_text(json.dumps(value))


def homograph_table() -> dict[str, str]:
    """g2p_en's homographs.en (word -> the POS its first reading needs) with en_G2p's two changes."""
    import importlib.util

    package = Path(importlib.util.find_spec("g2p_en").submodule_search_locations[0])
    table = {}
    for line in (package / "homographs.en").read_text(encoding="utf-8").splitlines():
        if not line.startswith("#"):
            word, _, _, pos = line.strip().split("|")
            table[word.lower()] = pos
    return {**table, "read": "VBP", "complex": "JJ"}


def nltk_data(root: Path, tagger_from: Path) -> None:
    shutil.copytree(tagger_from, root / "taggers" / "averaged_perceptron_tagger_eng")
    with zipfile.ZipFile(root / "taggers" / "averaged_perceptron_tagger.zip", "w") as z:
        z.writestr("averaged_perceptron_tagger/", "")
    (root / "corpora").mkdir()
    with zipfile.ZipFile(root / "corpora" / "cmudict.zip", "w") as z:
        z.writestr("cmudict/", "")
        z.writestr("cmudict/cmudict", "a 1 AH0\n")


def digest(table: dict) -> str:
    return hashlib.sha256(json.dumps(table, sort_keys=True).encode()).hexdigest()


def main() -> None:
    out, checkout, record = checkout_golden_arguments(__doc__.split("\n\n")[0], "RVC-Boss/GPT-SoVITS")
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        shutil.copytree(checkout / "GPT_SoVITS" / "text", tmp / "text")
        had_cache = (tmp / "text" / "engdict_cache.pickle").exists()
        sys.path.insert(0, str(tmp))
        from nltk.tokenize import TweetTokenizer  # noqa: PLC0415  (nltk reads NLTK_DATA when it looks, not now)
        from text.en_normalization.expend import normalize  # noqa: PLC0415

        texts = list(G2P.values()) + list(NORMALIZE.values()) + list(CLEAN.values())
        # The tokens the tagger will see: those of the texts as english.text_normalize leaves them.
        sentences = [TweetTokenizer().tokenize(t) for t in texts] + [TweetTokenizer().tokenize(normalize(t))
                                                                       for t in texts]
        os.environ["NLTK_DATA"] = str(tmp / "nltk_data")
        import nltk  # noqa: PLC0415

        nltk.data.path.insert(0, str(tmp / "nltk_data"))
        shutil.rmtree(out / "nltk_data", ignore_errors=True)
        tagger_folder = out / "nltk_data" / "taggers" / "averaged_perceptron_tagger_eng"
        from nltk.tag.perceptron import PerceptronTagger  # noqa: PLC0415

        homographs = homograph_table()
        for seed in range(100):
            shutil.rmtree(tagger_folder, ignore_errors=True)
            tiny_tagger(tagger_folder, sentences, seed)
            tagger = PerceptronTagger(load=False)
            tagger.load_from_json(loc=str(tagger_folder))
            readings = {}
            for s in sentences[:len(G2P)]:
                for word, tag in tagger.tag(s):
                    if word.lower() in homographs:
                        pos = homographs[word.lower()]
                        first = tag.startswith(pos) or (len(tag) < len(pos) and pos.startswith(tag))
                        readings.setdefault(word.lower(), set()).add(first)
            both = [h for h in HOMOGRAPHS_READ_BOTH_WAYS if len(readings.get(h, ())) == 2]
            if "read" in both and len(both) >= BOTH_WAYS:
                break
        else:
            raise SystemExit(f"no seed below 100 reads {BOTH_WAYS} homographs both ways")
        nltk_data(tmp / "nltk_data", tagger_folder)
        from text import cleaned_text_to_sequence, cleaner, english  # noqa: PLC0415

        predicted, segmented = {}, {}
        g2p = english._g2p
        original_predict, original_segment = g2p.predict, english.wordsegment.segment

        def predict(word):
            predicted[word] = original_predict(word)
            return predicted[word]

        def segment(word):
            segmented[word] = original_segment(word)
            return segmented[word]

        g2p.predict, english.wordsegment.segment = predict, segment
        cases = {}
        for name, text in NORMALIZE.items():
            cases[f"normalize_{name}"] = {"text": text, "normalized": english.text_normalize(text)}
        for name, text in G2P.items():
            tags = nltk.pos_tag(english.word_tokenize(text))
            cases[f"g2p_{name}"] = {"text": text, "tags": [list(t) for t in tags], "phones": english.g2p(text)}
        for name, text in CLEAN.items():
            phones, word2ph, norm = cleaner.clean_text(text, "en", "v2")
            cases[f"clean_{name}"] = {"text": text, "clean_text": [phones, word2ph, norm],
                                      "ids": cleaned_text_to_sequence(phones, "v2")}
        for case in cases.values():  # every normalised text also through g2p
            if "normalized" in case:
                case["phones"] = english.g2p(case["normalized"])
        g2p.predict, english.wordsegment.segment = original_predict, original_segment
        margin = min(smallest_gap(g2p, word) for word in predicted)
        tables = {"engdict_cache_in_checkout": had_cache, "cmu_entries": len(g2p.cmu), "cmu_sha256": digest(g2p.cmu),
                  "names_entries": len(g2p.namedict), "names_sha256": digest(g2p.namedict)}
    write_golden_set(out, "en_g2p", record, {"tables": tables, "predicted": predicted, "segmented": segmented,
                                             "predictor_margin": margin, "tagger_seed": seed, "cases": cases},
                     nltk_data="nltk_data/")


def smallest_gap(g2p, word: str) -> float:
    """The smallest gap between the best and second-best logit over the predictor's steps for `word`, recomputed
    through g2p_en's own cell."""
    import numpy as np

    enc = g2p.gru(g2p.encode(word), len(word) + 1, g2p.enc_w_ih, g2p.enc_w_hh, g2p.enc_b_ih, g2p.enc_b_hh,
                  h0=np.zeros((1, g2p.enc_w_hh.shape[-1]), np.float32))
    h, dec, gaps = enc[:, -1, :], np.take(g2p.dec_emb, [2], axis=0), []
    for _ in range(20):
        h = g2p.grucell(dec, h, g2p.dec_w_ih, g2p.dec_w_hh, g2p.dec_b_ih, g2p.dec_b_hh)
        logits = (np.matmul(h, g2p.fc_w.T) + g2p.fc_b)[0]
        top = np.sort(logits)
        gaps.append(float(top[-1] - top[-2]))
        if logits.argmax() == 3:
            break
        dec = np.take(g2p.dec_emb, [logits.argmax()], axis=0)
    return min(gaps)


if __name__ == "__main__":
    main()
