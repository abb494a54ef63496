"""Seq-KD targets without a reference: --select mbr (minimum Bayes risk over the teacher's n-best,
sentence chrF as the utility) and --targets K. The utility against sacreBLEU pair by pair, the
choice by hand, the rankings kept beside each shard and resumed, the refusals (in-process); the
merge of K targets per source, every backend, --teacher-ctranslate2, --source, shards and --merge
(slow: fsd-seqkd as a command)."""
import json
import math
import os
import sys
from types import SimpleNamespace

import pytest
from sacrebleu.metrics import CHRF

from helpers import run
from fairseq_distill.errors import DistillError
from fairseq_distill.seqkd import mbr
from fairseq_distill.seqkd.decode import read_shard, write_shard
from fairseq_distill.seqkd.inputs import SeqKDJob, check_options, load_side, sources_digest
from fairseq_distill.seqkd.mbr_shards import check_merge, rank_shard, rankings_path
from fairseq_distill.seqkd.selection import rank_by_mbr, select_hypotheses
from fairseq_distill.text.segmentation import Segmenter

SEQKD = os.path.join(os.path.dirname(sys.executable), "fsd-seqkd")
EXPORT = os.path.join(os.path.dirname(sys.executable), "fsd-export-ctranslate2")
CT2_THREADS = ["--threads", "1"]


def sacrebleu_order(texts):
    """The MBR order by sacreBLEU itself: each hypothesis's mean sentence chrF against the others
    (exact sums), best first, ties in the given order."""
    if len(texts) < 2:
        return [0]
    chrf = CHRF()
    scores = [math.fsum(chrf.sentence_score(h, [r]).score for j, r in enumerate(texts) if j != i) / (len(texts) - 1)
              for i, h in enumerate(texts)]
    return sorted(range(len(texts)), key=lambda i: -scores[i])


# -- the utility and the choice -------------------------------------------------------------------

def test_chrf_and_the_mbr_choice_by_hand():
    """Candidate "abc" against reference "ab": order 1 P = 2/3, R = 1; order 2 P = 1/2, R = 1; order 3
    has no reference n-gram (not counted). Mean P = 7/12, R = 1, chrF2 = 5PR / (4P + R) = 87.5.
    "ab" against "abc": mean P = 1, R = 7/12, chrF2 = 700/11. "xyz" shares nothing: 0 both ways.
    MBR scores (the mean over the two others): "ab" 350/11, "abc" 43.75, "xyz" 0: "abc" wins, though
    ranked second by the teacher (chrF weighs recall twice)."""
    u = mbr.utility_matrices([["ab", "abc", "xyz"]])[0]
    assert u[1, 0] == pytest.approx(87.5) and u[0, 1] == pytest.approx(700 / 11)
    assert [u[0, 2], u[2, 0], u[1, 2], u[2, 1]] == [0, 0, 0, 0]
    assert list(u.diagonal()) == [100, 100, 100]
    assert mbr.mbr_scores(u) == pytest.approx([350 / 11, 43.75, 0])
    assert mbr.rank([["ab", "abc", "xyz"]]) == [([1, 0, 2], pytest.approx([350 / 11, 43.75, 0]))]
    assert select_hypotheses([["ab", "abc", "xyz"]], [None], "mbr") == [1]


def test_the_consensus_wins_and_the_outlier_comes_last():
    nbest = ["Two dogs are swimming in a lake.", "A man rides a red bicycle down the street.",
             "A man rides a red bike down the street.", "A man is riding a red bicycle down a street."]
    (ranking, scores), = rank_by_mbr([nbest], workers=1)
    assert ranking[-1] == 0 and ranking[0] != 0  # the teacher's 1-best agrees with nothing else
    assert ranking == sacrebleu_order(nbest)
    # no reference is needed or read: the chrf selection would keep the 1-best without one
    assert select_hypotheses([nbest], [None], "mbr") == [ranking[0]]
    assert select_hypotheses([nbest], [None], "chrf") == [0]


def test_ties_keep_the_teachers_order():
    # "a b" and "ab" are the same to chrF (whitespace removed): equal scores, the earlier first
    assert mbr.rank([["c", "a b", "ab"]])[0][0] == [1, 2, 0]
    assert mbr.rank([["x y", "x y", "z"]])[0][0] == [0, 1, 2]
    assert mbr.rank([["only one"], []]) == [([0], [0.0]), ([], [])]


LISTS = [
    ["Zwei junge Männer stehen draußen, nahe vieler Büsche.", "Zwei junge Männer stehen draußen nahe vieler Büsche .",
     "Zwei Männer.", "", " ", "ÄÖÜ ß — «x»", "中文 字 中文", "abcdefg abcdefg"],
    ["a", "ab", "abc", "abcdef", "abcdefg"],  # shorter than the highest order, and just above it
    ["A dog runs in the snow.", "A dog runs in the snow.", "A dog is running through the snow."],
    ["", ""],
    ["x"],
    ["Eine Frau singt.", "Ein Mann singt.", "Eine Frau singt ein Lied.", "Frauen singen.",
     "Eine Frau singt laut.", "Die Frau singt.", "Eine Frau sang.", "Eine  Frau\tsingt."],
]


@pytest.mark.parametrize("space,pad_limit", [(mbr.SPACE, mbr.PAD_LIMIT), (50, 1)])
def test_the_utility_matrix_is_sacrebleus_sentence_chrf_for_every_pair(monkeypatch, space, pad_limit):
    """Every pair, exactly; also with batches split to one sentence and the pairwise minimum taken
    row by row (the paths for very long sentences)."""
    monkeypatch.setattr(mbr, "SPACE", space)
    monkeypatch.setattr(mbr, "PAD_LIMIT", pad_limit)
    chrf = CHRF()
    for hyps, u in zip(LISTS, mbr.utility_matrices(LISTS)):
        assert u.shape == (len(hyps), len(hyps))
        assert [[u[i, j] for j in range(len(hyps))] for i in range(len(hyps))] == \
               [[chrf.sentence_score(h, [r]).score for r in hyps] for h in hyps], hyps
    assert [r for r, _ in mbr.rank(LISTS)] == [sacrebleu_order(h) for h in LISTS]


def test_ranking_split_over_workers_ranks_as_one_process():
    from fairseq_distill.seqkd.selection import CHUNK

    words = "a man in a blue shirt stands on the street next to two dogs".split()
    lists = [[" ".join(words[(i * 7 + k) % 9:(i * 7 + k) % 9 + 3 + k]) for k in range(4)] for i in range(CHUNK * 2 + 17)]
    done = []
    assert rank_by_mbr(lists, workers=1) == rank_by_mbr(lists, progress=done.append, workers=2)
    assert sum(done) == len(lists)


# -- refusals -------------------------------------------------------------------------------------

@pytest.mark.parametrize("changes, message", [
    ({"select": "chrf", "targets": 2}, r"--targets applies to --select mbr only .*--select chrf keeps one hypothesis "
                                       r"per sentence: drop --targets, or pass --select mbr"),
    ({"select": "first", "targets": 1}, "--targets applies to --select mbr only"),
    ({"select": "mbr", "beam": 4, "nbest": 4, "targets": 0}, "--targets must be at least 1, got 0"),
    ({"select": "mbr"}, r"--select mbr compares the teacher's hypotheses with each other: it needs --nbest 2 or more "
                        r"\(and --beam at least as large\), got --nbest 1"),
    ({"select": "mbr", "beam": 4, "nbest": 2, "targets": 3}, r"--targets 3 is more than --nbest 2: MBR keeps K of the "
                                                             r"teacher's N hypotheses; pass --nbest 3 or more"),
    ({"select": "mbr", "teacher_translations": "t.txt"}, "--teacher-translations gives one translation per sentence"),
    ({"select": "bleu"}, r"unknown --select 'bleu'; choose one of chrf, first, mbr"),
])
def test_bad_selection_options_are_named(changes, message):
    with pytest.raises(DistillError, match=message):
        check_options(SeqKDJob(data="unused", **changes))


def test_good_selection_options_pass():
    check_options(SeqKDJob(data="unused", select="mbr", beam=8, nbest=8, targets=8))
    check_options(SeqKDJob(data="unused", select="mbr", merge=True, targets=3))  # the shards' n-best is checked


def test_a_merge_checks_targets_against_the_shards_nbest():
    check_merge({"nbest": 4}, SimpleNamespace(targets=4))
    with pytest.raises(DistillError, match=r"--targets 5 is more than the shards' 4 hypotheses per sentence \(decoded "
                                           r"with --nbest 4\); pass --targets 4 or fewer"):
        check_merge({"nbest": 4}, SimpleNamespace(targets=5))
    with pytest.raises(DistillError, match=r"the shards hold one per sentence \(decoded with --nbest 1\)"):
        check_merge({"nbest": 1}, SimpleNamespace(targets=None))


# -- the rankings beside each shard: kept, redone, resumed ----------------------------------------

TEXTS = [["Ein Hund läuft.", "Ein Hund rennt.", "Zwei Katzen schlafen."],
         ["Eine Frau singt.", "Ein Mann singt.", "Eine Frau singt ein Lied."],
         ["Kinder spielen.", "Kinder spielen im Park.", "Ein Kind spielt."],
         ["Ein Haus.", "Ein rotes Haus.", "Das Haus."]]


def shard_of(work, segmenter, texts=TEXTS):
    """A shard file as fsd-seqkd writes it, its n-best lists segmented as the corpus."""
    records = [{"id": i, "hyp": segmenter.encode_lines(t)[0], "nbest": segmenter.encode_lines(t)}
               for i, t in enumerate(texts)]
    return write_shard(work, 0, 1, {"backend": "fairseq", "nbest": 3}, {}, records)


def rank_it(args, segmenter):
    _, lists, digest = read_shard(os.path.join(args.work, "shard0-of-1.jsonl"))
    return rank_shard(args, 0, lists, sorted(lists), digest, segmenter, workers=1)


def test_rankings_are_kept_beside_the_shard_and_redone_for_other_settings(tiny_data, tmp_path, capsys):
    segmenter = Segmenter.from_dir(tiny_data)
    args = SimpleNamespace(work=str(tmp_path), num_shards=1, data=tiny_data)
    shard_of(args.work, segmenter)
    want = {i: sacrebleu_order(t) for i, t in enumerate(TEXTS)}
    assert rank_it(args, segmenter) == want
    path = rankings_path(args.work, 0, 1)
    assert path.endswith("shard0-of-1.mbr.jsonl") and not os.path.exists(path + ".partial")
    lines = open(path, encoding="utf-8").read().splitlines()
    assert json.loads(lines[0])["self_pairs"] == "excluded" and len(lines) == 1 + len(TEXTS)
    made = os.stat(path).st_mtime_ns
    capsys.readouterr()

    # the same shard and utility: kept, not rewritten
    assert rank_it(args, segmenter) == want
    assert "MBR rankings kept from an earlier run" in capsys.readouterr().out
    assert os.stat(path).st_mtime_ns == made

    # rankings made with another utility: made again
    header = json.loads(lines[0])
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join([json.dumps(dict(header, beta=3))] + lines[1:]) + "\n")
    assert rank_it(args, segmenter) == want
    assert "ranking again by MBR: the earlier rankings' beta differ(s)" in capsys.readouterr().out

    # the shard decoded again (other hypotheses): made again
    other = [list(reversed(t)) for t in TEXTS]
    shard_of(args.work, segmenter, other)
    assert rank_it(args, segmenter) == {i: sacrebleu_order(t) for i, t in enumerate(other)}
    assert "the earlier rankings' shard_sha256 differ(s)" in capsys.readouterr().out


def test_an_interrupted_ranking_resumes_after_its_last_whole_line(tiny_data, tmp_path, capsys):
    segmenter = Segmenter.from_dir(tiny_data)
    args = SimpleNamespace(work=str(tmp_path), num_shards=1, data=tiny_data)
    shard_of(args.work, segmenter)
    header, _, digest = read_shard(os.path.join(args.work, "shard0-of-1.jsonl"))
    partial = rankings_path(args.work, 0, 1) + ".partial"
    planted = [{"id": 0, "ranking": [2, 1, 0], "scores": [0, 0, 0]}, {"id": 1, "ranking": [2, 0, 1], "scores": [0, 0, 0]}]
    with open(partial, "w", encoding="utf-8") as f:
        f.write("\n".join(json.dumps(x) for x in [mbr_header(digest)] + planted) + '\n{"id": 2, "rank')  # cut short
    rankings = rank_it(args, segmenter)
    assert "MBR ranking resumed after 2 sentences" in capsys.readouterr().out
    # the planted rankings were read back, not made again; the others were made
    assert rankings == {0: [2, 1, 0], 1: [2, 0, 1], 2: sacrebleu_order(TEXTS[2]), 3: sacrebleu_order(TEXTS[3])}
    lines = open(rankings_path(args.work, 0, 1), encoding="utf-8").read().splitlines()
    assert [json.loads(x)["id"] for x in lines[1:]] == [0, 1, 2, 3] and not os.path.exists(partial)

    # a partial file of another shard file is not continued
    os.remove(rankings_path(args.work, 0, 1))
    with open(partial, "w", encoding="utf-8") as f:
        f.write("\n".join(json.dumps(x) for x in [mbr_header("another")] + planted) + "\n")
    assert rank_it(args, segmenter) == {i: sacrebleu_order(t) for i, t in enumerate(TEXTS)}


def mbr_header(digest):
    from fairseq_distill.seqkd.mbr_shards import expected_header

    return expected_header(digest)


# -- slow: fsd-seqkd as a command -----------------------------------------------------------------

def nbest_shards(work, lists, sources, num_shards=2):
    """Shard files of n-best lists (pieces), as fsd-seqkd writes them."""
    settings = {"backend": "fairseq", "subset": "train", "beam": 3, "nbest": 3, "source": None,
                "train_source_sha256": sources_digest(sources)}
    for shard in range(num_shards):
        records = [{"id": i, "hyp": lists[i][0], "nbest": lists[i]} for i in range(len(lists)) if i % num_shards == shard]
        write_shard(work, shard, num_shards, settings, {}, records)


def seqkd(*args, check=True):
    return run([SEQKD, *args], check=check)


def pairs_file(out):
    with open(os.path.join(out, "seqkd_pairs.tsv"), encoding="utf-8") as f:
        return [tuple(map(int, line.split("\t"))) for line in f.read().splitlines()[1:]]


@pytest.mark.slow
def test_targets_k_become_k_pairs_per_source_in_corpus_order(tiny_data, tmp_path):
    src = load_side(tiny_data, "train", "de", "en", "de")
    ref = load_side(tiny_data, "train", "de", "en", "en")
    # per sentence: the reference, it with its last piece left out, and it reversed
    lists = [[" ".join(reversed(r.split())), r, " ".join(r.split()[:-1]) or r] for r in ref]
    work, out = str(tmp_path / "work"), str(tmp_path / "out")
    nbest_shards(work, lists, src)
    segmenter = Segmenter.from_dir(tiny_data)
    order = [sacrebleu_order([segmenter.decode(h.split()) for h in hyps]) for hyps in lists]
    assert any(o[0] != 0 for o in order) and any(o[:2] != [0, 1] for o in order)

    seqkd("--data", tiny_data, "--work", work, "--num-shards", "2", "--merge", "--out", out, "--select", "mbr",
          "--targets", "2")
    targets = load_side(out, "train", "de", "en", "en")
    assert targets == [lists[i][k] for i in range(len(lists)) for k in order[i][:2]]
    assert load_side(out, "train", "de", "en", "de") == [s for s in src for _ in range(2)]
    assert pairs_file(out) == [(2 * i + r, i, order[i][r]) for i in range(len(lists)) for r in range(2)]
    summary = json.load(open(os.path.join(out, "seqkd_summary.json")))
    assert (summary["sentences"], summary["kept"], summary["targets"], summary["select"]) == (400, 800, 2, "mbr")
    assert summary["sources_with_fewer_targets"] == 0
    assert summary["selected_other_than_1best"] == sum(o[0] != 0 for o in order)
    assert json.load(open(os.path.join(out, "fairseq_distill.json")))["sizes"]["train"] == 800

    # another K reads the same rankings (nothing ranked again); K = 1 writes no pairs file
    again = seqkd("--data", tiny_data, "--work", work, "--num-shards", "2", "--merge", "--out", out, "--select", "mbr")
    assert again.stdout.count("MBR rankings kept from an earlier run") == 2
    assert load_side(out, "train", "de", "en", "en") == [lists[i][order[i][0]] for i in range(len(lists))]
    assert not os.path.exists(os.path.join(out, "seqkd_pairs.tsv"))

    refused = seqkd("--data", tiny_data, "--work", work, "--num-shards", "2", "--merge", "--out", out, "--select",
                    "mbr", "--targets", "4", check=False)
    assert refused.returncode == 1 and "Traceback" not in refused.stdout
    assert "--targets 4 is more than the shards' 3 hypotheses per sentence" in refused.stdout


@pytest.mark.slow
def test_refusals_from_the_command_line(tiny_data, tmp_path):
    for extra, message in ((["--select", "chrf", "--targets", "2"], "--targets applies to --select mbr only"),
                           (["--select", "mbr", "--beam", "2", "--nbest", "2", "--targets", "3"],
                            "--targets 3 is more than --nbest 2"),
                           (["--select", "mbr"], "it needs --nbest 2 or more")):
        proc = seqkd("--teacher", "unused.pt", "--data", tiny_data, "--out", str(tmp_path / "out"), *extra, check=False)
        assert proc.returncode == 1 and message in proc.stdout and "Traceback" not in proc.stdout, proc.stdout[-2000:]
        assert not os.path.exists(tmp_path / "out")


def check_mbr_data(out, work, num_shards, n_sentences, k, segmenter):
    """OUT holds, for every sentence in order, its K best hypotheses by sacreBLEU's MBR order."""
    lists = {}
    for shard in range(num_shards):
        _, found, _ = read_shard(os.path.join(work, f"shard{shard}-of-{num_shards}.jsonl"))
        lists.update(found)
    assert sorted(lists) == list(range(n_sentences))
    want = []
    for i in range(n_sentences):
        texts = [segmenter.decode(h.split()) for h in lists[i]]
        want += [lists[i][j] for j in [j for j in sacrebleu_order(texts) if lists[i][j].strip()][:k]]
    assert load_side(out, "train", "de", "en", "en") == want
    return lists


@pytest.mark.slow
def test_mbr_with_either_backend_shards_and_a_monolingual_source(tiny_data, tiny_teacher, tmp_path):
    """Two shards decoded one at a time (each ranked where it was decoded), then merged; the
    monolingual lines are ranked too (MBR needs no reference)."""
    with open(os.path.join(tiny_data, "raw", "test.de"), encoding="utf-8") as f:
        mono = [next(f).rstrip("\n") for _ in range(4)]
    (tmp_path / "mono.de").write_text("\n".join(mono) + "\n", encoding="utf-8")
    segmenter = Segmenter.from_dir(tiny_data)
    # fairseq-generate shards by batches (and fails on a shard without one): batches of 2 sentences
    for backend, extra in (("fairseq", ["--batch-size", "2"]), ("ctranslate2", CT2_THREADS)):
        out, work = str(tmp_path / backend), str(tmp_path / f"{backend}.work")
        common = ["--teacher", tiny_teacher, "--data", tiny_data, "--work", work, "--backend", backend, *extra,
                  "--subset", "valid", "--beam", "3", "--nbest", "3", "--select", "mbr", "--targets", "2",
                  "--source", str(tmp_path / "mono.de"), "--max-len-b", "3", "--num-shards", "2"]
        for shard in ("0", "1"):
            seqkd(*common, "--shard-id", shard)
            assert os.path.isfile(rankings_path(work, int(shard), 2))
        merged = seqkd("--data", tiny_data, "--work", work, "--subset", "valid", "--source", str(tmp_path / "mono.de"),
                       "--num-shards", "2", "--merge", "--out", out, "--select", "mbr", "--targets", "2").stdout
        assert merged.count("MBR rankings kept from an earlier run") == 2
        check_mbr_data(out, work, 2, 44, 2, segmenter)
        assert load_side(out, "train", "de", "en", "de") == [s for s in load_side(tiny_data, "valid", "de", "en", "de")
                                                             + segmenter.encode_lines(mono) for _ in range(2)]
        summary = json.load(open(os.path.join(out, "seqkd_summary.json")))
        assert (summary["kept"], summary["monolingual_added"], summary["backend"]) == (88, 8, backend)


@pytest.mark.slow
def test_mbr_with_a_pretrained_ctranslate2_teacher(tiny_data, fluent_teacher, tmp_path):
    export = str(tmp_path / "export")
    run([EXPORT, fluent_teacher, tiny_data, export, "--quantization", "float32"])
    raw_valid = os.path.join(os.path.dirname(tiny_data), "raw", "valid.de")
    out, work = str(tmp_path / "out"), str(tmp_path / "work")
    seqkd("--teacher-ctranslate2", export, *CT2_THREADS, "--data", tiny_data, "--out", out, "--work", work,
          "--subset", "valid", "--raw-train-source", raw_valid, "--beam", "3", "--nbest", "3", "--select", "mbr")
    check_mbr_data(out, work, 1, 40, 1, Segmenter.from_dir(tiny_data))
    assert os.path.isfile(rankings_path(work, 0, 1))
    summary = json.load(open(os.path.join(out, "seqkd_summary.json")))
    assert (summary["backend"], summary["select"], summary["targets"], summary["kept"]) == \
           ("ctranslate2 model", "mbr", 1, 40)
