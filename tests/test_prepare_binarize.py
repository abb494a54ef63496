"""fsd-prepare-corpus binarizes the training text in pieces, each kept once finished: the result is
byte for byte what one stock fairseq-preprocess call writes, and an interrupted binarization goes
on from its last finished piece."""
import os
import random
import subprocess
import sys

import pytest

from helpers import Interrupted, stop_binarizing_at

pytestmark = pytest.mark.slow  # fairseq-preprocess runs as a command

WORDS = "ein hund der die mann frau sitzt auf einer bank im park und sieht zu wie kinder spielen".split()
PAIRS = 50
SMALL_PIECE = 7   # 50 pairs: pieces 1-7, 8-14, ..., 43-49, 50-50
PIECES = ["1-7", "8-14", "15-21", "22-28", "29-35", "36-42", "43-49", "50-50"]


def write_corpus(root):
    """train/valid/test prefixes under root (de->en, 'en' is an upper-cased 'de')."""
    root.mkdir()
    rng = random.Random(7)
    for split, n in (("train", PAIRS), ("valid", 5), ("test", 5)):
        de = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 8))) for _ in range(n)]
        for lang, lines in (("de", de), ("en", [s.upper() for s in de])):
            (root / f"{split}.{lang}").write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return root


def arguments(raw, out, workers=1):
    from fairseq_distill.cli.prepare_corpus import build_parser

    return build_parser().parse_args(["-s", "de", "-t", "en", "--train-prefix", str(raw / "train"),
                                      "--valid-prefix", str(raw / "valid"), "--test-prefix", str(raw / "test"),
                                      "--out", str(out), "--vocab-size", "60", "--workers", str(workers)])


@pytest.fixture(scope="module")
def whole(tmp_path_factory):
    """A corpus and its preparation with the training text in one piece."""
    import fairseq_distill.text.corpus as corpus

    root = tmp_path_factory.mktemp("binarize")
    raw = write_corpus(root / "raw")
    corpus.prepare(arguments(raw, root / "whole"))
    return raw, root / "whole"


def same_files(expected, got, skip=("fairseq_distill.json", "preprocess.log")):
    """Every file under ``expected`` (but those naming their own directory) is in ``got`` with the
    same bytes; sentencepiece.model records its own path: its pieces are compared."""
    import sentencepiece as spm

    def files(root):
        return sorted(os.path.relpath(os.path.join(d, n), root) for d, _, names in os.walk(root)
                      for n in names if n not in skip)

    names = files(expected)
    assert names == files(got)
    for name in names:
        if name == "sentencepiece.model":
            pieces = [spm.SentencePieceProcessor(model_file=str(root / name)) for root in (expected, got)]
            assert [[m.id_to_piece(i) for i in range(m.get_piece_size())] for m in pieces][0] == \
                [pieces[1].id_to_piece(i) for i in range(pieces[1].get_piece_size())]
        else:
            assert (expected / name).read_bytes() == (got / name).read_bytes(), name
    return names


def test_pieces_give_the_files_of_one_fairseq_preprocess_call(whole, tmp_path, monkeypatch, capsys):
    import fairseq_distill.text.binarize as binarize
    import fairseq_distill.text.corpus as corpus

    raw, one_piece = whole
    # the stock tool in one call, with a joined dictionary, over the same segmented text
    tok = one_piece / "tok"
    stock = tmp_path / "stock"
    subprocess.run([sys.executable, "-m", "fairseq_cli.preprocess", "-s", "de", "-t", "en", "--joined-dictionary",
                    "--trainpref", str(tok / "train"), "--validpref", str(tok / "valid"),
                    "--testpref", str(tok / "test"), "--destdir", str(stock), "--workers", "1"],
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    names = sorted(p.name for p in stock.iterdir() if p.name != "preprocess.log")
    assert names == sorted(f"{kind}.{lang}.{ext}" for lang in ("de", "en")
                           for kind, ext in [("dict", "txt")] + [(f"{split}.de-en", ext) for split in
                                                                 ("train", "valid", "test") for ext in ("bin", "idx")])
    for name in names:
        assert (stock / name).read_bytes() == (one_piece / "bin" / name).read_bytes(), name

    monkeypatch.setattr(binarize, "PIECE_PAIRS", SMALL_PIECE)
    capsys.readouterr()
    corpus.prepare(arguments(raw, tmp_path / "pieces"))
    assert "binarized with fairseq-preprocess (the training pairs in 8 pieces)" in capsys.readouterr().out
    same_files(one_piece / "bin", tmp_path / "pieces" / "bin")
    # --workers 2: pieces binarized two at a time in worker processes
    corpus.prepare(arguments(raw, tmp_path / "two-workers", workers=2))
    assert "the training pairs in 8 pieces" in capsys.readouterr().out
    same_files(one_piece / "bin", tmp_path / "two-workers" / "bin")
    assert not (tmp_path / "pieces" / ".prepare").exists()


def test_an_interrupted_binarization_keeps_its_finished_pieces(whole, tmp_path, monkeypatch, capsys):
    """Interrupted after its second piece, a rerun says what it keeps, builds neither the
    subword model nor the dictionary again, binarizes only the other pieces, and writes the files
    of a run never interrupted."""
    import fairseq_distill.text.binarize as binarize
    import fairseq_distill.text.corpus as corpus

    raw, one_piece = whole
    monkeypatch.setattr(binarize, "PIECE_PAIRS", SMALL_PIECE)
    stop_at = ["15-21"]
    started = stop_binarizing_at(monkeypatch, binarize, stop_at)
    out = tmp_path / "out"
    with pytest.raises(Interrupted):
        corpus.prepare(arguments(raw, out))
    assert started == ["1-7", "1-7", "8-14", "8-14"]   # source, then target side
    assert not (out / "bin" / "fairseq_distill.json").exists()

    def must_not_run(*_):
        raise AssertionError("built again")

    monkeypatch.setattr(corpus, "train_sentencepiece", must_not_run)
    monkeypatch.setattr(corpus, "build_dictionary", must_not_run)
    started.clear()
    stop_at.clear()
    capsys.readouterr()
    corpus.prepare(arguments(raw, out))
    said = capsys.readouterr().out
    assert ("done before: checked train, checked valid, checked test, subword model, segmented train, "
            "segmented valid, segmented test, dictionary, binarized train pairs 1-7, binarized train pairs 8-14 (") in said
    assert "binarizing train: 2 of 8 pieces kept from an earlier run (14 pairs), 6 to binarize" in said
    assert started == [piece for piece in PIECES[2:] for _ in ("de", "en")]
    assert not (out / ".prepare").exists()
    same_files(one_piece / "bin", out / "bin")


def test_a_rerun_with_vocabulary_from_reuses_what_it_prepared(tiny_data, tmp_path, capsys):
    """fsd-prepare-corpus --vocabulary-from DATA_BIN into the same --out again: reused. Before, it
    ended in a TypeError traceback (the recorded --subword-sample, None for a vocabulary taken
    from elsewhere, compared with a number)."""
    from helpers import write_raw_corpus
    from fairseq_distill.cli import prepare_corpus

    raw = write_raw_corpus(tmp_path / "raw", 60, 10, 10)
    argv = ["-s", "de", "-t", "en", "--train-prefix", str(raw / "train"), "--valid-prefix", str(raw / "valid"),
            "--test-prefix", str(raw / "test"), "--vocabulary-from", tiny_data, "--workers", "1",
            "--out", str(tmp_path / "out")]
    prepare_corpus.main(argv)
    capsys.readouterr()
    prepare_corpus.main(argv)
    assert "[prepare] reusing" in capsys.readouterr().out
