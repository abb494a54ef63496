"""fsd-seqkd's merge binarizes the pairs it chose a piece at a time, each piece kept once finished
(fairseq_distill.text.binarize, shared with fsd-prepare-corpus): the files are byte for byte those
of one piece and those of the one fairseq-preprocess call the merge made before, and a merge
interrupted while binarizing binarizes only the pieces left when run again. The merges run
in-process (fsd-seqkd's library call) on shards written by hand."""
import os
import re
import shutil
import subprocess
import sys

import pytest

import fairseq_distill.text.binarize as binarize
from fairseq_distill.seqkd.decode import write_shard
from fairseq_distill.seqkd.inputs import SeqKDJob, load_side, sources_digest
from fairseq_distill.seqkd.job import make_seqkd_data
from helpers import Interrupted, stop_binarizing_at

N = 400
SMALL_PIECE = 90  # the 399 pairs kept: pieces 1-90, 91-180, 181-270, 271-360, 361-399
PIECES = ["1-90", "91-180", "181-270", "271-360", "361-399"]
UNKNOWN = "qqqxqqq"  # in no dictionary: binarized as <unk>
TIMED = ("seqkd_summary.json", "preprocess.log")  # the merge's time; the log names the work directory


@pytest.fixture(scope="module")
def shards(tiny_data, tmp_path_factory):
    """Two shards of 1-best hypotheses: the reference reversed, sentence 3's ten times too long
    for its source (filtered by --max-len-ratio 3), sentence 9's ending in a word no dictionary
    holds. Returns their folder and the pairs a merge keeps, by hand, as they read back binarized
    (that word as ``<unk>``)."""
    src = load_side(tiny_data, "train", "de", "en", "de")
    ref = load_side(tiny_data, "train", "de", "en", "en")
    hyps = [" ".join(reversed(r.split())) for r in ref]
    hyps[3] = " ".join(hyps[3].split() * 10)
    hyps[9] += " " + UNKNOWN
    work = str(tmp_path_factory.mktemp("shards"))
    settings = {"backend": "fairseq", "subset": "train", "beam": 5, "nbest": 1, "source": None,
                "train_source_sha256": sources_digest(src)}
    for shard in (0, 1):
        write_shard(work, shard, 2, settings, {}, ({"id": i, "hyp": hyps[i]} for i in range(shard, N, 2)))
    kept = [i for i in range(N) if i != 3]
    return work, [src[i] for i in kept], [hyps[i].replace(UNKNOWN, "<unk>") for i in kept]


def seqkd_merge(tiny_data, shards, root, **options):
    """fsd-seqkd --merge --select first --max-len-ratio 3 of ``shards`` into ``root/out``, its work
    directory ``root/work`` (the shards copied there the first time); returns the summary."""
    work = root / "work"
    if not work.exists():
        shutil.copytree(shards[0], work)
    return make_seqkd_data(SeqKDJob(data=tiny_data, work=str(work), out=str(root / "out"), merge=True, num_shards=2,
                                    select="first", **{"max_len_ratio": 3.0, **options}))


def files(root):
    return sorted(os.path.relpath(os.path.join(d, n), root) for d, _, names in os.walk(root) for n in names)


def same_files(expected, got):
    names = files(expected)
    assert names == files(got)
    for name in names:
        if name not in TIMED:
            assert (expected / name).read_bytes() == (got / name).read_bytes(), name


@pytest.fixture(scope="module")
def one_piece(tiny_data, shards, tmp_path_factory):
    """The merge with every pair in one piece."""
    root = tmp_path_factory.mktemp("one-piece")
    seqkd_merge(tiny_data, shards, root)
    return root


def test_pieces_give_the_files_of_one_piece(tiny_data, shards, one_piece, tmp_path, monkeypatch, capsys):
    _, sources, targets = shards
    out = one_piece / "out"
    assert load_side(str(out), "train", "de", "en", "en") == targets
    assert load_side(str(out), "train", "de", "en", "de") == sources
    for lang in ("de", "en"):  # the data's dictionaries, as fairseq-preprocess writes them beside the data
        assert (out / f"dict.{lang}.txt").read_bytes() == open(os.path.join(tiny_data, f"dict.{lang}.txt"), "rb").read()

    monkeypatch.setattr(binarize, "PIECE_PAIRS", SMALL_PIECE)
    capsys.readouterr()
    summary = seqkd_merge(tiny_data, shards, tmp_path)
    said = capsys.readouterr().out
    assert summary["kept"] == 399 and summary["filtered_by_length_ratio"] == 1
    assert "binarizing 399 pairs in 5 pieces of at most 90 with fairseq's binarizer" in said
    assert "kept from an earlier run" not in said
    same_files(out, tmp_path / "out")
    # the pieces are gone once joined, and so is their record
    work = tmp_path / "work"
    assert not (work / "seqkd-pieces").exists() and '"binarized"' not in (work / "seqkd_merge.json").read_text()
    # the log holds what fairseq-preprocess logs of each side: pairs, tokens (</s> included), <unk>s
    tokens = sum(len(t.split()) + 1 for t in targets)
    log = (tmp_path / "out" / "preprocess.log").read_text(encoding="utf-8")
    assert f"[en] {work / 'seqkd.en'}: 399 sents, {tokens} tokens, {100 / tokens:.3}% replaced (by <unk>)" in log
    assert re.search(r"\[de\] .*seqkd\.de: 399 sents, \d+ tokens, 0\.0% replaced", log)
    assert "in 5 piece(s) of at most 90 pairs (0 kept from an earlier run)" in log


def test_an_interrupted_binarization_keeps_its_finished_pieces(tiny_data, shards, one_piece, tmp_path, monkeypatch,
                                                               capsys):
    """Interrupted after its second piece, the same merge again walks nothing, says what it keeps,
    binarizes only the other pieces and writes the files of a merge never interrupted."""
    monkeypatch.setattr(binarize, "PIECE_PAIRS", SMALL_PIECE)
    stop_at = ["181-270"]
    started = stop_binarizing_at(monkeypatch, binarize, stop_at)
    with pytest.raises(Interrupted):
        seqkd_merge(tiny_data, shards, tmp_path)
    assert started == ["1-90", "1-90", "91-180", "91-180"]  # source, then target side
    assert not (tmp_path / "out").exists()
    pieces = sorted(os.listdir(tmp_path / "work" / "seqkd-pieces"))
    assert pieces == sorted(f"train.{p}.de-en.{lang}.{ext}" for p in PIECES[:2] for lang in ("de", "en")
                            for ext in ("bin", "idx"))

    started.clear()
    stop_at.clear()
    capsys.readouterr()
    seqkd_merge(tiny_data, shards, tmp_path)
    said = capsys.readouterr().out
    assert "merge resumed after 400 of 400 sentences" in said
    assert "[seqkd] binarizing: 2 of 5 pieces kept from an earlier run (180 pairs), 3 to binarize" in said
    assert started == [piece for piece in PIECES[2:] for _ in ("de", "en")]
    same_files(one_piece / "out", tmp_path / "out")
    log = (tmp_path / "out" / "preprocess.log").read_text(encoding="utf-8")
    assert "in 5 piece(s) of at most 90 pairs (2 kept from an earlier run)" in log


def test_pieces_of_another_merge_are_not_kept(tiny_data, shards, tmp_path, monkeypatch, capsys):
    """Interrupted while binarizing, then run with another --max-len-ratio: the walk starts afresh,
    and the pieces binarized from the earlier texts (1-90 and 91-180, named as the new ones are)
    are not kept."""
    monkeypatch.setattr(binarize, "PIECE_PAIRS", SMALL_PIECE)
    real_piece = binarize.binarize_piece
    stop_binarizing_at(monkeypatch, binarize, ["181-270"])
    with pytest.raises(Interrupted):
        seqkd_merge(tiny_data, shards, tmp_path)
    monkeypatch.setattr(binarize, "binarize_piece", real_piece)
    capsys.readouterr()
    summary = seqkd_merge(tiny_data, shards, tmp_path, max_len_ratio=None)
    said = capsys.readouterr().out
    assert "merge resumed" not in said and "kept from an earlier run" not in said
    # sentence 3 kept now: the pairs after it one place further on
    _, sources, targets = shards
    got = load_side(str(tmp_path / "out"), "train", "de", "en", "en")
    assert summary["kept"] == len(got) == N and got[:3] + got[4:] == targets
    words = got[3].split()
    assert words == words[:len(words) // 10] * 10  # the hypothesis filtered before


@pytest.mark.slow  # fairseq-preprocess runs as a command
def test_pieces_give_the_files_of_one_fairseq_preprocess_call(tiny_data, shards, tmp_path, monkeypatch):
    """The merge's files against the stock tool's, run as the merge ran it before: one call on the
    walk's texts with the data's dictionaries."""
    monkeypatch.setattr(binarize, "PIECE_PAIRS", SMALL_PIECE)
    seqkd_merge(tiny_data, shards, tmp_path)
    stock = tmp_path / "stock"
    subprocess.run([sys.executable, "-m", "fairseq_cli.preprocess", "--source-lang", "de", "--target-lang", "en",
                    "--trainpref", str(tmp_path / "work" / "seqkd"), "--destdir", str(stock),
                    "--srcdict", os.path.join(tiny_data, "dict.de.txt"),
                    "--tgtdict", os.path.join(tiny_data, "dict.en.txt"), "--workers", "1"],
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    names = sorted(p.name for p in stock.iterdir() if p.name != "preprocess.log")
    assert names == sorted(f"{kind}.{lang}.{ext}" for lang in ("de", "en")
                           for kind, ext in (("dict", "txt"), ("train.de-en", "bin"), ("train.de-en", "idx")))
    for name in names:
        assert (stock / name).read_bytes() == (tmp_path / "out" / name).read_bytes(), name
