"""The benchmark's score of a seq-KD data set's targets against the references they replace
(bench/runner/seqkd_quality.py): each row paired with its own source's reference, subword
segmentation removed, K targets per source, a source that occurs twice in the corpus."""
import json
import os

import pytest
import torch

from bench.runner.seqkd_quality import paired_rows, target_scores


def write_side(data_bin, lang, lines):
    from fairseq.data import Dictionary, indexed_dataset

    path = os.path.join(data_bin, f"dict.{lang}.txt")
    if os.path.exists(path):
        dictionary = Dictionary.load(path)
    else:
        dictionary = Dictionary()
        for word in sorted({w for line in lines for w in line.split()}):
            dictionary.add_symbol(word)
        dictionary.save(path)
    prefix = os.path.join(data_bin, f"train.de-en.{lang}")
    builder = indexed_dataset.make_builder(prefix + ".bin", impl="mmap", vocab_size=len(dictionary))
    for line in lines:
        ids = [dictionary.index(w) for w in line.split()] + [dictionary.eos()]
        builder.add_item(torch.tensor(ids, dtype=torch.int32))
    builder.finalize(prefix + ".idx")


def write_data(data_bin, de, en, dictionaries_from=None):
    os.makedirs(data_bin)
    if dictionaries_from:
        for lang in ("de", "en"):
            with open(os.path.join(dictionaries_from, f"dict.{lang}.txt")) as f, \
                    open(os.path.join(data_bin, f"dict.{lang}.txt"), "w") as g:
                g.write(f.read())
    with open(os.path.join(data_bin, "fairseq_distill.json"), "w") as f:
        json.dump({"bpe": "sentencepiece", "source_lang": "de", "target_lang": "en"}, f)
    write_side(data_bin, "de", de)
    write_side(data_bin, "en", en)


ORIGINAL_DE = ["▁ein ▁hund", "▁eine ▁katze", "▁ein ▁hund", "▁ein ▁mann"]
ORIGINAL_EN = ["▁a ▁dog", "▁a ▁cat", "▁one ▁dog", "▁a ▁man"]


@pytest.fixture
def original(tmp_path):
    # every word either side may use, so that the seq-KD data can share the dictionaries
    de = ORIGINAL_DE
    en = ORIGINAL_EN + ["▁the ▁dog ▁runs", "▁a ▁cat s", "▁the ▁man"]
    data = str(tmp_path / "original")
    write_data(data, de, en[:4])
    # dictionaries over every target word used below
    from fairseq.data import Dictionary

    d = Dictionary.load(os.path.join(data, "dict.en.txt"))
    for w in sorted({w for line in en for w in line.split()}):
        d.add_symbol(w)
    d.save(os.path.join(data, "dict.en.txt"))
    return data


def test_two_targets_per_source_each_scored_against_its_own_sources_reference(original, tmp_path):
    seqkd = str(tmp_path / "seqkd")
    # two targets per source in corpus order; the second "ein hund" (sentence 2) has its own
    # reference "one dog"; the last sentence kept one target only (the other dropped)
    write_data(seqkd, ["▁ein ▁hund", "▁ein ▁hund", "▁eine ▁katze", "▁eine ▁katze", "▁ein ▁hund", "▁ein ▁hund",
                       "▁ein ▁mann"],
               ["▁a ▁dog", "▁the ▁dog ▁runs", "▁a ▁cat s", "▁a ▁cat", "▁one ▁dog", "▁a ▁dog", "▁the ▁man"],
               dictionaries_from=original)
    hypotheses, references = paired_rows(original, seqkd, "de", "en", targets=2)
    assert hypotheses == ["a dog", "the dog runs", "a cats", "a cat", "one dog", "a dog", "the man"]
    assert references == ["a dog", "a dog", "a cat", "a cat", "one dog", "one dog", "a man"]


def test_targets_equal_to_the_references_score_100_and_half_of_them_wrong_less(tmp_path):
    de = ["▁ein ▁hund ▁läuft ▁im ▁park", "▁eine ▁katze ▁schläft ▁auf ▁dem ▁sofa"]
    en = ["▁a ▁dog ▁runs ▁in ▁the ▁park", "▁a ▁cat ▁sleeps ▁on ▁the ▁sofa"]
    original, same, half = (str(tmp_path / name) for name in ("original", "same", "half"))
    write_data(original, de, en)
    write_data(same, de, en, dictionaries_from=original)
    assert target_scores(original, same, "de", "en") == {"targets_bleu": 100.0, "targets_chrf": 100.0,
                                                           "targets_scored": 2}
    write_data(half, de, [en[0], "▁the ▁park"], dictionaries_from=original)
    scores = target_scores(original, half, "de", "en")
    assert 0 < scores["targets_bleu"] < 100 and 0 < scores["targets_chrf"] < 100


def test_a_source_missing_from_the_original_is_refused(original, tmp_path):
    seqkd = str(tmp_path / "seqkd")
    write_data(seqkd, ["▁eine ▁katze", "▁ein ▁hund"], ["▁a ▁cat", "▁a ▁dog"], dictionaries_from=original)
    # "ein hund" after "eine katze": sentence 2, fine; then nothing is left out of order
    assert paired_rows(original, seqkd, "de", "en")[1] == ["a cat", "one dog"]
    other = str(tmp_path / "other")
    write_data(other, ["▁ein ▁mann", "▁ein ▁hund"], ["▁a ▁man", "▁a ▁dog"], dictionaries_from=original)
    with pytest.raises(ValueError, match="row 1's source is not among"):
        paired_rows(original, other, "de", "en")
