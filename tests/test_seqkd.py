"""Sequence-level KD data: corpus order, verified counts, missing hypotheses caught."""
import json
import os
import random

import pytest

from helpers import python_module, run
from fairseq_distill.seqkd.inputs import load_side, sources_digest

pytestmark = pytest.mark.slow  # fsd-seqkd runs as a command (merging, binarizing, teacher decoding)

N_TRAIN = 400


def write_shards(work, hyps, sources, num_shards=2, drop=()):
    """Shard files as fsd-seqkd writes them (a header recording the source they translated), ids
    deliberately out of order."""
    os.makedirs(work, exist_ok=True)
    settings = {"backend": "fairseq", "subset": "train", "beam": 5, "nbest": 1, "source": None,
                "train_source_sha256": sources_digest(sources)}
    for shard in range(num_shards):
        ids = [i for i in range(len(hyps)) if i % num_shards == shard and i not in drop]
        random.Random(shard).shuffle(ids)
        with open(os.path.join(work, f"shard{shard}-of-{num_shards}.jsonl"), "w", encoding="utf-8") as f:
            f.write(json.dumps({"shard": shard, "num_shards": num_shards, "settings": settings}) + "\n")
            for i in ids:
                f.write(json.dumps({"id": i, "hyp": hyps[i]}, ensure_ascii=False) + "\n")


def merge(tiny_data, work, out, *extra, check=True):
    return run(python_module("fairseq_distill.cli.seqkd", "--data", tiny_data, "--work", work,
                             "--out", out, "--merge", "--num-shards", "2", *extra), check=check)


@pytest.fixture(scope="module")
def corpus(tiny_data):
    src = load_side(tiny_data, "train", "de", "en", "de")
    ref = load_side(tiny_data, "train", "de", "en", "en")
    # a recognisable "teacher output" per sentence: the reference reversed
    hyps = [" ".join(reversed(r.split())) for r in ref]
    return src, ref, hyps


def test_merge_restores_corpus_order(tiny_data, corpus, tmp_path):
    src, _, hyps = corpus
    work, out = str(tmp_path / "work"), str(tmp_path / "out")
    write_shards(work, hyps, src)
    printed = merge(tiny_data, work, out).stdout
    # the binarizer's counts go to its log, not the terminal
    counts = f"[en] {os.path.join(work, 'seqkd.en')}: 400 sents, "
    assert counts in open(os.path.join(work, "preprocess.log"), encoding="utf-8").read() and counts not in printed
    assert load_side(out, "train", "de", "en", "en") == hyps
    assert load_side(out, "train", "de", "en", "de") == src
    summary = json.load(open(os.path.join(out, "seqkd_summary.json")))
    assert summary["sentences"] == summary["kept"] == N_TRAIN
    assert summary["missing_or_empty"] == 0
    # valid and test sets are kept as they were
    for name in ("valid.de-en.en.bin", "test.de-en.de.idx", "fairseq_distill.json"):
        assert os.path.isfile(os.path.join(out, name))
    assert load_side(out, "valid", "de", "en", "en") == load_side(tiny_data, "valid", "de", "en", "en")


def test_dropped_hypothesis_is_caught(tiny_data, corpus, tmp_path):
    src, ref, hyps = corpus
    work, out = str(tmp_path / "work"), str(tmp_path / "out")
    write_shards(work, hyps, src, drop={7})
    proc = merge(tiny_data, work, out, check=False)
    assert proc.returncode != 0
    assert "1 of 400 training sentences have no (or an empty) teacher hypothesis (first sentence ids, 0-based: [7])" in proc.stdout
    assert not os.path.exists(os.path.join(out, "train.de-en.en.bin"))

    # the user may choose to keep the reference instead, and is told
    proc = merge(tiny_data, work, out, "--on-missing", "reference")
    targets = load_side(out, "train", "de", "en", "en")
    assert targets[7] == ref[7] and targets[6] == hyps[6] and targets[8] == hyps[8]
    assert "replaced_by_reference 1" in proc.stdout


def test_missing_shard_is_named(tiny_data, corpus, tmp_path):
    work = str(tmp_path / "work")
    write_shards(work, corpus[2], corpus[0])
    os.remove(os.path.join(work, "shard1-of-2.jsonl"))
    proc = merge(tiny_data, work, str(tmp_path / "out"), check=False)
    assert proc.returncode != 0 and "shard 1 of 2 is missing" in proc.stdout


def test_length_ratio_filter_is_reported(tiny_data, corpus, tmp_path):
    src, ref, hyps = corpus
    hyps = list(hyps)
    hyps[3] = " ".join(hyps[3].split() * 10)  # far too long for its source
    work, out = str(tmp_path / "work"), str(tmp_path / "out")
    write_shards(work, hyps, src)
    proc = merge(tiny_data, work, out, "--max-len-ratio", "3")
    summary = json.load(open(os.path.join(out, "seqkd_summary.json")))
    assert summary["filtered_by_length_ratio"] >= 1
    assert summary["kept"] == N_TRAIN - summary["filtered_by_length_ratio"]
    targets = load_side(out, "train", "de", "en", "en")
    assert len(targets) == summary["kept"] and hyps[3] not in targets
    assert "filtered_by_length_ratio" in proc.stdout


def test_teacher_generation_in_two_shards(tiny_data, tiny_teacher, tmp_path):
    out = str(tmp_path / "out")
    proc = run(python_module("fairseq_distill.cli.seqkd", "--teacher", tiny_teacher, "--data", tiny_data,
                             "--out", out, "--num-shards", "2", "--beam", "1", "--max-len-b", "8",
                             "--on-missing", "reference"))
    summary = json.load(open(os.path.join(out, "seqkd_summary.json")))
    assert summary["sentences"] == N_TRAIN and summary["kept"] == N_TRAIN
    shard_ids = []
    for shard in range(2):
        with open(os.path.join(out + ".work", f"shard{shard}-of-2.jsonl")) as f:
            header, *records = [json.loads(line) for line in f]
        # the first line records how the shard was decoded
        assert header["shard"] == shard and header["settings"]["backend"] == "fairseq"
        assert header["settings"]["beam"] == 1 and header["stats"]["sentences"] == len(records)
        shard_ids += [record["id"] for record in records]
    assert sorted(shard_ids) == list(range(N_TRAIN))  # every sentence decoded exactly once
    assert "sentences_per_second" in proc.stdout
    assert summary["decode_seconds"] > 0 and summary["backend"] == "fairseq"


@pytest.mark.slow
def test_a_shard_that_fairseq_gives_no_batch_is_an_empty_shard(tiny_data, tiny_teacher, tmp_path):
    """Every training sentence in one batch: fairseq-generate hands the second shard nothing, and
    its summary line divides by a generation time of 0 (ZeroDivisionError). That shard is empty,
    not a failure, and the merge takes every sentence from the other."""
    out = str(tmp_path / "out")
    run(python_module("fairseq_distill.cli.seqkd", "--teacher", tiny_teacher, "--data", tiny_data,
                      "--out", out, "--num-shards", "2", "--beam", "1", "--max-len-b", "8",
                      "--batch-size", "1000", "--on-missing", "reference"))
    counts = []
    for shard in range(2):
        with open(os.path.join(out + ".work", f"shard{shard}-of-2.jsonl")) as f:
            header, *records = [json.loads(line) for line in f]
        assert header["stats"]["sentences"] == len(records)
        counts.append(len(records))
    assert counts == [N_TRAIN, 0]
    summary = json.load(open(os.path.join(out, "seqkd_summary.json")))
    assert summary["kept"] == N_TRAIN


# -- a translations file as the teacher (issue 35) -------------------------------------------

def seqkd_from_file(tiny_data, path, out, *extra, check=True):
    return run(python_module("fairseq_distill.cli.seqkd", "--data", tiny_data, "--teacher-translations", str(path),
                             "--out", str(out), *extra), check=check)


def test_a_translations_file_is_segmented_and_binarized_like_the_corpus(tiny_data, corpus, tmp_path):
    """The raw references given as the 'teacher's translations' come out as the corpus's own
    binarized targets: the file's text is segmented with the corpus's subword model, in order."""
    src, ref, _ = corpus
    raw = open(os.path.join(os.path.dirname(tiny_data), "raw", "train.en"), encoding="utf-8").read().split("\n")[:-1]
    translations = tmp_path / "train.hyp.en"
    translations.write_text("\n".join(raw) + "\n", encoding="utf-8")
    out = tmp_path / "out"
    printed = seqkd_from_file(tiny_data, translations, out).stdout
    assert f"[seqkd] --teacher-translations: {N_TRAIN} translations from {translations}" in printed
    assert load_side(str(out), "train", "de", "en", "en") == ref
    assert load_side(str(out), "train", "de", "en", "de") == src
    summary = json.load(open(out / "seqkd_summary.json"))
    assert summary["backend"] == "translations file" and summary["kept"] == N_TRAIN


def test_a_translations_file_with_a_missing_line_or_the_wrong_count(tiny_data, corpus, tmp_path):
    _, ref, _ = corpus
    lines = ["a translation"] * N_TRAIN
    lines[3] = "   "  # blank: no translation for sentence 3
    translations = tmp_path / "hyp.en"
    translations.write_text("\n".join(lines) + "\n", encoding="utf-8")
    proc = seqkd_from_file(tiny_data, translations, tmp_path / "out", check=False)
    assert proc.returncode != 0
    # issue 49: the file's own line number (line 4 holds sentence 3), and the remedy that applies
    assert f"1 of 400 lines of --teacher-translations {translations} are empty or blank (first lines: [4])" \
        in proc.stdout
    assert "fill those lines, or pass --on-missing reference" in proc.stdout and "shard" not in proc.stdout
    seqkd_from_file(tiny_data, translations, tmp_path / "out2", "--on-missing", "reference")
    assert load_side(str(tmp_path / "out2"), "train", "de", "en", "en")[3] == ref[3]
    translations.write_text("\n".join(lines[:-1]) + "\n", encoding="utf-8")
    proc = seqkd_from_file(tiny_data, translations, tmp_path / "out3", check=False)
    assert proc.returncode != 0 and f"has 399 lines; the 'train' set of {tiny_data} has 400 sentences" in proc.stdout
    proc = seqkd_from_file(tiny_data, translations, tmp_path / "out4", "--nbest", "2", "--beam", "2", check=False)
    assert "--teacher-translations gives the teacher's translations themselves: it takes no --nbest > 1" in proc.stdout


def files_of(directory):
    return {name: open(os.path.join(directory, name), "rb").read() for name in sorted(os.listdir(directory))
            if os.path.isfile(os.path.join(directory, name))}


def test_an_interrupted_rerun_into_a_finished_out_keeps_the_earlier_data(tiny_data, corpus, tmp_path, monkeypatch,
                                                                          capsys):
    """A rerun once binarized straight into a finished --out: killed while writing the .idx, it
    left a new .bin beside the earlier .idx, summary and metadata (300 of 300 pairs differed), and
    fairseq-train trained on it. Now the merge is built beside --out and switched in whole."""
    import fairseq_distill.text.binarize as binarize
    from fairseq_distill.seqkd.inputs import SeqKDJob
    from fairseq_distill.seqkd.job import make_seqkd_data

    src, _, hyps = corpus
    work, out = str(tmp_path / "work"), str(tmp_path / "out")
    write_shards(work, hyps, src)
    make_seqkd_data(SeqKDJob(data=tiny_data, work=work, out=out, merge=True, num_shards=2))
    earlier = files_of(out)
    assert load_side(out, "train", "de", "en", "en") == hyps

    others = [" ".join(h.split()[:2]) or "x" for h in hyps]  # other hypotheses, other lengths
    write_shards(work, others, src)
    real_join = binarize.merge_pieces

    def killed_while_writing_the_idx(src, tgt, bin_dir, *rest):  # as the binarized pieces are joined
        real_join(src, tgt, bin_dir, *rest)
        idx = os.path.join(bin_dir, "train.de-en.en.idx")
        with open(idx, "r+b") as f:
            f.truncate(os.path.getsize(idx) // 2)
        raise KeyboardInterrupt

    monkeypatch.setattr(binarize, "merge_pieces", killed_while_writing_the_idx)
    with pytest.raises(KeyboardInterrupt):
        make_seqkd_data(SeqKDJob(data=tiny_data, work=work, out=out, merge=True, num_shards=2))
    monkeypatch.setattr(binarize, "merge_pieces", real_join)
    assert files_of(out) == earlier  # the earlier data, whole
    assert load_side(out, "train", "de", "en", "en") == hyps

    # the same command again makes the new data (from the piece binarized before); once more, it
    # recognises them and rewrites nothing
    capsys.readouterr()
    make_seqkd_data(SeqKDJob(data=tiny_data, work=work, out=out, merge=True, num_shards=2))
    assert "binarizing: 1 of 1 pieces kept from an earlier run (400 pairs), 0 to binarize" in capsys.readouterr().out
    assert load_side(out, "train", "de", "en", "en") == others
    finished = {name: os.stat(os.path.join(out, name)).st_mtime_ns for name in os.listdir(out)}
    capsys.readouterr()
    make_seqkd_data(SeqKDJob(data=tiny_data, work=work, out=out, merge=True, num_shards=2))
    assert "already the merge of these shards, data and options; nothing rewritten" in capsys.readouterr().out
    assert {name: os.stat(os.path.join(out, name)).st_mtime_ns for name in os.listdir(out)} == finished
    assert not os.path.exists(out + ".partial")
