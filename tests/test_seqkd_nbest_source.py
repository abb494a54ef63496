"""Seq-KD: choosing among the teacher's n-best hypotheses, the monolingual --source, the
shard files' decoding record and the options' errors (in-process; the end-to-end runs are in
test_seqkd_ctranslate2.py)."""
import json
import os
from types import SimpleNamespace

import pytest

from fairseq_distill.errors import DistillError
from fairseq_distill.seqkd.selection import select_hypotheses
from fairseq_distill.seqkd.monolingual import read_source
from fairseq_distill.text.segmentation import Segmenter
from fairseq_distill.seqkd.inputs import SeqKDJob, check_options
from fairseq_distill.seqkd.merge import check_source_matches, shard_settings
from fairseq_distill.seqkd.shard_index import index_shards

REF = "Two young men are outside near many bushes."


def test_chrf_keeps_the_hypothesis_closest_to_the_reference():
    nbest = [
        ["A dog runs in the snow.", "Two young men are outside near many bushes.", "Two men."],
        # chrF weighs recall twice as much as precision: every character n-gram of the
        # reference plus a few more beats a short hypothesis that has only some of them
        ["Two men are outside.", "Two young men are outside near many green bushes today."],
        ["Two young men are outside near many bushes."],  # a list of one: nothing to choose
    ]
    assert select_hypotheses(nbest, [REF] * 3, "chrf") == [1, 1, 0]
    assert select_hypotheses(nbest, [REF] * 3, "first") == [0, 0, 0]


def test_a_tie_keeps_the_higher_ranked_hypothesis():
    # the same text twice, and two texts with the same character n-grams (chrF ignores spaces)
    assert select_hypotheses([["A cat.", REF, REF]], [REF], "chrf") == [1]
    assert select_hypotheses([["Twoyoung men are outside near many bushes.", REF]], [REF], "chrf") == [0]


def test_a_sentence_without_reference_keeps_its_1best():
    assert select_hypotheses([["A dog.", REF], ["A dog.", REF]], [None, REF], "chrf") == [0, 1]


def test_unknown_selection_is_named():
    with pytest.raises(DistillError, match="unknown --select 'bleu'; choose one of chrf, first"):
        select_hypotheses([["a"]], ["a"], "bleu")


@pytest.mark.parametrize("changes, message", [
    ({"nbest": 6}, r"--nbest must be between 1 and the beam size \(5\), got 6"),
    ({"nbest": 0}, r"--nbest must be between 1 and the beam size \(5\), got 0"),
    ({"backend": "marian"}, "unknown --backend 'marian'; choose one of fairseq, ctranslate2"),
    ({"compute_type": "int8"}, "--compute-type applies to CTranslate2 decoding only"),
    ({"threads": 2}, "--threads applies to CTranslate2 decoding only"),
    ({"threads": 0, "backend": "ctranslate2"}, "--threads must be at least 1, got 0"),
    ({"inter_threads": 2}, "--inter-threads applies to CTranslate2 decoding only"),
    ({"inter_threads": 0, "backend": "ctranslate2"}, "--inter-threads must be at least 1, got 0"),
    ({"select": "bleu"}, "unknown --select 'bleu'"),
    ({"beam": 0}, "--beam must be at least 1, got 0"),
    ({"max_len_ratio": 0.5}, "--max-len-ratio must be at least 1"),
])
def test_bad_options_are_named(changes, message):
    with pytest.raises(DistillError, match=message):
        check_options(SeqKDJob(data="unused", **changes))


# -- the monolingual source ---------------------------------------------------------------------

def test_source_lines_are_segmented_as_the_corpus(tiny_data, tmp_path):
    lines = ["Ein Hund läuft.", "Zwei  Männer\tim Freien\r", "Eine Frau\u2028singt."]
    path = tmp_path / "mono.de"
    path.write_bytes(("\n".join(lines) + "\n").encode("utf-8"))
    pieces = read_source(str(path), tiny_data)
    # \r\n ends a line; the tab, the double space and U+2028 are whitespace inside one
    assert pieces == Segmenter.from_dir(tiny_data).encode_lines(["Ein Hund läuft.", "Zwei  Männer\tim Freien",
                                                                 "Eine Frau\u2028singt."])
    assert len(pieces) == 3 and all(" " in p for p in pieces)


def test_empty_source_lines_keep_their_place_as_empty_sources(tiny_data, tmp_path):
    """An empty line gets an empty target in its place (issue 68.4; it was refused before):
    the line numbers of the file and the pairs agree."""
    path = tmp_path / "mono.de"
    path.write_text("Ein Hund.\n\nZwei Katzen.\n   \nEin Haus.\n", encoding="utf-8")
    pieces = read_source(str(path), tiny_data)
    assert len(pieces) == 5 and pieces[1] == pieces[3] == "" and all(pieces[k] for k in (0, 2, 4))
    path.write_text("", encoding="utf-8")
    with pytest.raises(DistillError, match="has no lines"):
        read_source(str(path), tiny_data)


def test_source_lines_empty_after_normalisation_are_taken_like_blank_ones(tiny_data, tmp_path):
    """Only a zero-width space, a BOM or control characters: nothing for the teacher to translate
    once normalised (issue 32.3), an empty source like a blank line (issue 68.4)."""
    path = tmp_path / "mono.de"
    path.write_text("Ein Hund.\n\u200b\nZwei Katzen.\n\ufeff\u200d \x07\n", encoding="utf-8")
    pieces = read_source(str(path), tiny_data)
    assert len(pieces) == 4 and pieces[1] == pieces[3] == "" and pieces[0] and pieces[2]


def test_invalid_utf8_in_the_source_gets_advice_fsd_seqkd_can_follow(tiny_data, tmp_path):
    """fsd-seqkd has no --errors option: the message must not offer it (issue 32.6)."""
    path = tmp_path / "mono.de"
    path.write_bytes(b"Ein Hund.\nEine Fra\xfc.\n")
    with pytest.raises(DistillError) as raised:
        read_source(str(path), tiny_data)
    message = str(raised.value)
    assert "line 2 is not valid UTF-8" in message and "--errors" not in message
    assert "iconv -f LATIN1 -t UTF-8" in message and "iconv -c -f UTF-8 -t UTF-8" in message


def test_an_empty_training_source_is_named_before_the_teacher_runs(tiny_data, tmp_path, capsys):
    """Data binarized by other tools may hold an EOS-only source: the fairseq backend would
    invent a hypothesis for it, CTranslate2 would return none (issue 32.3); it gets an empty
    target (issue 68.4), said before the teacher runs."""
    from fairseq_distill.seqkd.inputs import report_blank_sources

    assert report_blank_sources(["a b", "c"], "data-bin", "train") == []
    assert report_blank_sources(["a b", "", "c", " "], "data-bin", "train") == [1, 3]
    assert "data-bin (train): 2 source sentence(s) show nothing" in capsys.readouterr().out


def test_source_lines_longer_than_the_teacher_accepts_are_named(tiny_data, tmp_path):
    path = tmp_path / "mono.de"
    path.write_text("Ein Hund.\n" + "Hund " * 40 + "\n", encoding="utf-8")
    with pytest.raises(DistillError, match=r"line 2 has \d+ subword tokens, more than the teacher accepts \(19;"):
        read_source(str(path), tiny_data, max_positions=20)


# -- shard files --------------------------------------------------------------------------------

def write_shard(work, shard, num_shards, settings, records):
    with open(os.path.join(work, f"shard{shard}-of-{num_shards}.jsonl"), "w", encoding="utf-8") as f:
        if settings is not None:
            f.write(json.dumps({"shard": shard, "num_shards": num_shards, "settings": settings}) + "\n")
        for record in records:
            f.write(json.dumps(record) + "\n")


def test_shards_decoded_differently_are_not_merged(tmp_path):
    a = {"backend": "fairseq", "beam": 5, "nbest": 2, "source": None}
    b = dict(a, backend="ctranslate2", beam=4)
    write_shard(tmp_path, 0, 2, a, [{"id": 0, "hyp": "x", "nbest": ["x", "y"]}])
    write_shard(tmp_path, 1, 2, b, [{"id": 1, "hyp": "z"}])
    args = SimpleNamespace(work=str(tmp_path), num_shards=2)
    index = index_shards(args)
    index.locate(2)
    assert index.lists(range(2)) == {0: ["x", "y"], 1: ["z"]}
    with pytest.raises(DistillError, match=r"shards 0 and 1 of 2 were decoded with different settings "
                                           r"\(--backend fairseq against ctranslate2; --beam 5 against 4\)"):
        shard_settings(index.headers, args)
    write_shard(tmp_path, 1, 2, a, [{"id": 1, "hyp": "z"}])
    assert shard_settings(index_shards(args).headers, args) == a


def test_merge_needs_the_subset_and_source_the_shards_translated(tmp_path):
    mono = tmp_path / "mono.de"
    mono.write_text("Ein Hund.\n", encoding="utf-8")
    from fairseq_distill.seqkd.monolingual import describe_source

    recorded = {"source": describe_source(str(mono))}
    with pytest.raises(DistillError, match=r"pass --source mono.de \(its path here\) to merge them"):
        check_source_matches(recorded, SimpleNamespace(source=None, subset="train"))
    with pytest.raises(DistillError, match="the shards were decoded without a monolingual source"):
        check_source_matches({"source": None}, SimpleNamespace(source=str(mono), subset="train"))
    check_source_matches(recorded, SimpleNamespace(source=str(mono), subset="train"))
    mono.write_text("Zwei Hunde.\n", encoding="utf-8")
    with pytest.raises(DistillError, match="is not the file the shards translated"):
        check_source_matches(recorded, SimpleNamespace(source=str(mono), subset="train"))
    with pytest.raises(DistillError, match="the shards translated --subset valid, not train: pass --subset valid"):
        check_source_matches({"subset": "valid", "source": None}, SimpleNamespace(source=None, subset="train"))


def test_a_rerun_keeps_the_shards_decoded_with_the_same_settings(tmp_path):
    """issue 32.7: fsd-seqkd resumes: a complete shard file of the same settings is kept."""
    from fairseq_distill.seqkd.decode import shard_settings

    settings = {"backend": "fairseq", "beam": 4, "nbest": 1, "source": None,
                "teacher": [{"name": "t.pt", "sha256": "ab"}], "train_source_sha256": "cd"}
    args = SimpleNamespace(work=str(tmp_path), num_shards=2, shard_id=1)
    assert shard_settings(args) is None
    write_shard(tmp_path, 1, 2, settings, [{"id": 1, "hyp": "x"}])
    assert shard_settings(args) == settings
    assert shard_settings(SimpleNamespace(work=str(tmp_path), num_shards=2, shard_id=0)) is None


def test_a_source_longer_than_the_teacher_accepts_is_named():
    """issue 32.4: fsd-seqkd names the sentence and its length before decoding, for either backend."""
    from fairseq_distill.seqkd.inputs import check_source_lengths

    check_source_lengths(["a b", "c"], "data-bin", "train", 3, "--max-tokens")
    with pytest.raises(DistillError, match=r"data-bin \(train\): sentence 1 has 4 source tokens with </s>, more "
                                           r"than the teacher's source positions \(3\); 2 such sentence\(s\), the "
                                           r"longest 2 with 5"):
        check_source_lengths(["a b", "c d e", "f g h i"], "data-bin", "train", 3, "the teacher's source positions")


def test_chrf_with_the_reference_analysed_once_is_sacrebleus_sentence_score():
    from sacrebleu.metrics import CHRF

    from fairseq_distill.seqkd.selection import chrf_scores

    ref = "Zwei junge Männer stehen draußen, nahe vieler Büsche."
    hyps = ["Zwei junge Männer stehen draußen nahe vieler Büsche .", "", "Zwei Männer.", ref, "ÄÖÜ ß — «x»", " "]
    assert chrf_scores(hyps, ref) == [CHRF().sentence_score(h, [ref]).score for h in hyps]


def test_selection_split_over_workers_chooses_as_one_process():
    import random

    from fairseq_distill.seqkd.selection import CHUNK

    rng = random.Random(7)
    words = "a man in a blue shirt stands on the street next to two dogs".split()

    def sentence():
        return " ".join(rng.choice(words) for _ in range(rng.randint(3, 9)))

    n = CHUNK * 2 + 17  # three chunks, the last one short
    nbest = [[sentence() for _ in range(3)] for _ in range(n)]
    refs = [sentence() if i % 5 else None for i in range(n)]  # every fifth has no reference
    done = []
    one = select_hypotheses(nbest, refs, "chrf", workers=1)
    two = select_hypotheses(nbest, refs, "chrf", progress=done.append, workers=2)
    assert one == two and len(one) == n and sum(done) == n
    assert all(one[i] == 0 for i in range(0, n, 5)) and any(one)


def test_chrf_selection_of_many_lists_scores_as_sacrebleu_and_keeps_the_earlier_on_a_tie():
    """The batched reference chrF gives each hypothesis sacreBLEU's sentence_score, list by list,
    whatever the lists' sizes, and the choice is the first hypothesis of highest score."""
    from sacrebleu.metrics import CHRF

    from fairseq_distill.seqkd.selection import best_by_chrf, reference_chrf

    nbest = [["a cat sat", "the cat sat", "the cat sat"], ["ein Hund", "Ein Hund läuft.", "", "ein Hund läuft"],
             ["x"], ["same", "same"]]
    refs = ["the cat sat .", "Ein Hund läuft.", "x", "other"]
    expected = [[CHRF().sentence_score(h, [r]).score for h in hyps] for hyps, r in zip(nbest, refs)]
    assert reference_chrf(nbest, refs) == expected
    # list 0: the two equal best keep the earlier (index 1); list 1: the exact reference; list 2
    # has one hypothesis; list 3 ties (equal texts): the first
    assert best_by_chrf((nbest, refs)) == [1, 1, 0, 0]
    assert best_by_chrf((nbest, [None] * 4)) == [0, 0, 0, 0]
