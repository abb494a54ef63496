"""The WMT en-de protocols (fsd-benchmark-corpus wmt14_en_de / wmt16_en_de) on synthetic archives
of the official layout, every count checked by hand; their scoring (compound-split tokenised BLEU,
sacreBLEU, chrF); and, slow, the recipes' prepare.sh on those archives and run.sh --dry-run.
run.sh --smoke is not run for WMT (a 48-layer teacher and a dozen students: too slow here)."""
import io
import json
import os
import subprocess
import sys
import tarfile

import pytest

from fairseq_distill.corpora import wmt, wmt_training
from fairseq_distill.corpora.moses import tokenize
from fairseq_distill.errors import DistillError
from wmt_archive import archive_files, corpus, evaluation_set, sentence, write_archives

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def read(path):
    with open(path, encoding="utf-8") as f:
        return f.read().split("\n")[:-1]


def quiet(_):
    pass


@pytest.fixture(scope="module")
def archives(tmp_path_factory):
    return str(write_archives(tmp_path_factory.mktemp("wmt") / "orig"))


def test_wmt14_protocol_by_hand(archives, tmp_path):
    lines = []
    counts = wmt.prepare_wmt14_en_de(archives, str(tmp_path), report=lines.append)
    # Europarl's ten cases: 1 (an empty side), 4 (length ratio 2 > 1.5) and 6 (a 1,001-character word)
    # go; 5 (100 tokens, at most 250) stays; Common Crawl's 6 and News Commentary v9's 4 all stay
    assert counts["europarl-v7"] == {"en": 10, "de": 10} and counts["europarl-v7 cleaned"] == {"en": 7, "de": 7}
    assert counts["commoncrawl cleaned"] == {"en": 6, "de": 6}
    assert counts["news-commentary-v9"] == {"en": 4, "de": 4}
    assert counts["training"] == {"en": 20, "de": 20} and counts["cleaned"] == {"en": 17, "de": 17}
    assert counts["train"] == {"en": 17, "de": 17}
    assert counts["newstest2013"] == counts["valid"] == {"en": 3, "de": 3}
    assert counts["newstest2014"] == counts["test"] == counts["test.orig"] == {"en": 5, "de": 5}
    train_en, train_de = read(tmp_path / "train.en"), read(tmp_path / "train.de")
    # not tokenised; punctuation normalised (normalize-punctuation.perl), a control character a space
    assert train_en[:4] == [sentence("en", 0), 'He said "yes" .', "a b c d", " ".join(["word"] * 100)]
    assert train_de[1] == 'Er sagte "ja" - wirklich ...'
    assert train_de[4] == "Ein hochmoderner Test ."
    assert train_en[7:] == corpus("en", 100, 6) + corpus("en", 200, 4)  # Common Crawl, then News Commentary v9
    # validation newstest2013, test test-full's newstest2014 (not dev.tgz's copy): ’ written as '
    assert read(tmp_path / "valid.en")[0] == "It's newstest2013 's first"
    en, de = evaluation_set("newstest2014", 5, 3000)
    assert read(tmp_path / "test.en") == [en[0].replace("’", "'")] + en[1:]
    assert read(tmp_path / "test.de") == [de[0], de[1].strip()] + de[2:]
    assert read(tmp_path / "test.orig.en") == en and read(tmp_path / "test.orig.de")[1] == "Haus & Hof 3000"
    assert lines[0].startswith("[wmt14_en_de] europarl-v7 (") and "10 pairs, punctuation normalised, non-printing " \
        "characters removed; 7 kept, 3 left out (1 to 250 tokens a side, length ratio at most 1.5, no word over " \
        "1,000 characters: 1 for that)" in lines[0]
    assert lines[-1] == (f"[wmt14_en_de] train 17 of 20 pairs (7 + 6 + 4 from europarl-v7, commoncrawl, "
                         f"news-commentary-v9), valid 3 (newstest2013), test 5 (newstest2014; the full set has "
                         f"3,003) -> {tmp_path}")


def test_wmt16_protocol_by_hand(archives, tmp_path):
    counts = wmt.prepare_wmt16_en_de(archives, str(tmp_path), report=quiet)
    # Europarl: 1 (empty), 5 (100 tokens > 80) and 6 (the long word) go; 4 (ratio 2, at most 9) stays
    assert counts["europarl-v7 cleaned"] == {"en": 7, "de": 7}
    assert counts["news-commentary-v11"] == {"en": 5, "de": 5}
    assert counts["training"] == {"en": 21, "de": 21} and counts["train"] == {"en": 18, "de": 18}
    assert counts["newstest2016"] == counts["valid"] == {"en": 4, "de": 4}
    assert counts["test"] == counts["test.orig"] == {"en": 5, "de": 5}
    train_en, train_de = read(tmp_path / "train.en"), read(tmp_path / "train.de")
    # Moses-tokenised, escaped, not normalised; tokenizer.perl deletes ASCII control characters;
    # hyphenated words stay whole (no -a); not lowercased
    assert train_en[:5] == [tokenize([sentence("en", 0)], "en")[0], "He said &quot; yes &quot; .", "ab c d",
                            "one two", "A state-of-the-art test ."]
    assert train_de[1] == "Er sagte „ ja “ – wirklich …"
    assert train_de[3] == "eins zwei drei vier"
    assert train_en[7:] == tokenize(corpus("en", 100, 6) + corpus("en", 300, 5), "en")
    en, de = evaluation_set("newstest2014", 5, 3000)
    assert read(tmp_path / "test.en") == tokenize(en, "en")   # ’ kept (the Google bundle's protocol)
    assert read(tmp_path / "test.de")[:2] == ["Ein state-of-the-art Satz aus newstest2014", "Haus &amp; Hof 3000"]
    assert read(tmp_path / "test.orig.de") == [de[0], de[1].strip()] + de[2:]
    assert read(tmp_path / "valid.de")[0] == "Ein state-of-the-art Satz aus newstest2016"


def test_the_archives_are_found_under_any_name_or_unpacked(archives, tmp_path):
    """The Google bundle's script saves Common Crawl as common-crawl.tgz, and so on: the files are
    found by their paths inside; an unpacked directory reads the same; the per-line steps give the
    same lines in pieces (here 3 lines a piece, in a stand-in for the worker pool)."""
    renamed = write_archives(tmp_path / "renamed", names={"training-parallel-commoncrawl.tgz": "common-crawl.tgz",
                                                           "training-parallel-nc-v11.tgz": "nc-v11.tgz",
                                                           "test-full.tgz": "newstest2014-full.tar.gz"})
    unpacked = write_archives(tmp_path / "unpacked", unpacked=True)
    outputs = {}
    for name, path in (("official", archives), ("renamed", renamed), ("unpacked", unpacked)):
        outputs[name] = wmt.prepare_wmt16_en_de(str(path), str(tmp_path / f"out-{name}"), report=quiet)
    assert outputs["official"] == outputs["renamed"] == outputs["unpacked"]
    for split in ("train.en", "train.de", "valid.de", "test.en", "test.orig.de"):
        assert read(tmp_path / "out-official" / split) == read(tmp_path / "out-renamed" / split) == \
            read(tmp_path / "out-unpacked" / split)

    # the steps and the filter in pieces of 3 pairs give what one piece gives
    en, de = corpus("en", 0, 10), corpus("de", 0, 10)
    whole = wmt_training.clean_chunk((wmt.WMT14_EN_DE, ("en", "de"), en, de))
    pieces = [wmt_training.clean_chunk((wmt.WMT14_EN_DE, ("en", "de"), en[i:i + 3], de[i:i + 3]))
              for i in range(0, 10, 3)]
    assert whole[0] == [line for piece in pieces for line in piece[0]] == wmt.normalise_punctuation(en, "en")
    assert whole[1] == [line for piece in pieces for line in piece[1]]


def test_an_interrupted_run_keeps_the_parts_it_finished(archives, tmp_path, monkeypatch):
    """Killed in Common Crawl, the rerun keeps Europarl (not read again) and gives what an
    uninterrupted run gives; a part whose input changed is cleaned again."""
    whole = wmt.prepare_wmt14_en_de(archives, str(tmp_path / "whole"), report=quiet)
    real = wmt_training._clean_part
    cleaned = []

    def dies_in_commoncrawl(protocol, part, *args):
        if part.name == "commoncrawl":
            raise KeyboardInterrupt
        cleaned.append(part.name)
        return real(protocol, part, *args)

    monkeypatch.setattr(wmt_training, "_clean_part", dies_in_commoncrawl)
    with pytest.raises(KeyboardInterrupt):
        wmt.prepare_wmt14_en_de(archives, str(tmp_path / "out"), report=quiet)
    assert cleaned == ["europarl-v7"]
    assert sorted(os.listdir(tmp_path / "out" / wmt.PARTS_DIR)) == ["europarl-v7.de", "europarl-v7.en",
                                                                   "europarl-v7.json"]
    monkeypatch.setattr(wmt_training, "_clean_part", lambda protocol, part, *args: (
        cleaned.append(part.name), real(protocol, part, *args))[1])
    lines = []
    assert wmt.prepare_wmt14_en_de(archives, str(tmp_path / "out"), report=lines.append) == whole
    assert cleaned == ["europarl-v7", "commoncrawl", "news-commentary-v9"]
    assert any(line.startswith("[wmt14_en_de] europarl-v7: kept from an earlier run of the same input") for line in lines)
    for name in ("train.en", "train.de", "test.en", "valid.de"):
        assert read(tmp_path / "out" / name) == read(tmp_path / "whole" / name)
    assert not os.path.exists(tmp_path / "out" / wmt.PARTS_DIR)   # gone once the text is complete

    # a finished part made from another input (another size) is cleaned again
    files = archive_files()
    files["training-parallel-europarl-v7.tgz"]["training/europarl-v7.de-en.en"][0] += " more"
    write_archives(tmp_path / "changed", files)
    monkeypatch.setattr(wmt_training, "_clean_part", dies_in_commoncrawl)
    cleaned.clear()
    with pytest.raises(KeyboardInterrupt):
        wmt.prepare_wmt14_en_de(str(tmp_path / "changed"), str(tmp_path / "again"), report=quiet)
    with pytest.raises(KeyboardInterrupt):
        wmt.prepare_wmt14_en_de(archives, str(tmp_path / "again"), report=quiet)
    assert cleaned == ["europarl-v7", "europarl-v7"]


def test_missing_damaged_or_wrong_archives_are_named(tmp_path):
    files = archive_files()
    del files["test-full.tgz"]
    write_archives(tmp_path / "no-test", files)
    with pytest.raises(DistillError, match=r"has no test-full/newstest2014-deen-src.en.sgm, "
                                           r"test-full/newstest2014-deen-ref.de.sgm \(newstest2014, in the "
                                           r"official test-full.tgz\): pass the directory"):
        wmt.prepare_wmt14_en_de(str(tmp_path / "no-test"), str(tmp_path / "out"), report=quiet)

    files = archive_files()
    files["training-parallel-nc-v9.tgz"]["training/news-commentary-v9.de-en.de"].pop()
    write_archives(tmp_path / "short", files)
    with pytest.raises(DistillError, match=r"news-commentary-v9 \(.*\): the sides differ in length \(en 4, de 3\)"):
        wmt.prepare_wmt14_en_de(str(tmp_path / "short"), str(tmp_path / "out"), report=quiet)

    files = archive_files()
    files["dev.tgz"]["dev/newstest2016-ende-ref.de.sgm"][5] = '<seg id="2">no closing tag'
    write_archives(tmp_path / "bad-sgm", files)
    with pytest.raises(DistillError, match=r"dev.tgz:dev/newstest2016-ende-ref.de.sgm:6: a <seg> line that is not "
                                           r"one <seg id=\"…\">text</seg>: '<seg id=\"2\">no closing tag'"):
        wmt.prepare_wmt16_en_de(str(tmp_path / "bad-sgm"), str(tmp_path / "out"), report=quiet)

    write_archives(tmp_path / "cut")
    path = tmp_path / "cut" / "test-full.tgz"
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])   # an unfinished download
    with pytest.raises(DistillError, match="test-full.tgz: not a readable tar archive .*Remove it and fetch it again"):
        wmt.prepare_wmt16_en_de(str(tmp_path / "cut"), str(tmp_path / "out"), report=quiet)

    with pytest.raises(DistillError, match="neither a directory .* nor a tar archive"):
        wmt.prepare_wmt16_en_de(str(tmp_path / "nothing"), str(tmp_path / "out"), report=quiet)


def test_invalid_utf8_is_read_past_and_said(tmp_path):
    files = archive_files()
    write_archives(tmp_path / "orig", files)
    path = tmp_path / "orig" / "training-parallel-nc-v9.tgz"
    with tarfile.open(path, "w:gz") as tar:
        for name, lines in files["training-parallel-nc-v9.tgz"].items():
            data = ("\n".join(lines) + "\n").encode("utf-8")
            if name.endswith(".de"):
                data = data.replace(b"Nr201", b"Nr\xff201")
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    lines = []
    counts = wmt.prepare_wmt14_en_de(str(tmp_path / "orig"), str(tmp_path / "out"), report=lines.append)
    assert counts["train"] == {"en": 17, "de": 17}
    assert any("training/news-commentary-v9.de-en.de is not valid UTF-8 (first at line 2: invalid start byte); "
               "invalid bytes read as U+FFFD" in line for line in lines)
    assert "Nr\ufffd201, gut!" in read(tmp_path / "out" / "train.de")[-3]


def test_compound_split_as_the_perl_one_liner():
    from fairseq_distill.corpora.scoring import compound_split

    # s{(\S)-(\S)}{$1 ##AT##-##AT## $2}g: matches do not overlap, so a hyphen right after a
    # one-character part that the previous match took stays (a-b-c); these are perl's own outputs
    assert compound_split(["rich-text format", "a-b-c", "state-of-the-art", "- x", "x -y", "x- y"]) == [
        "rich ##AT##-##AT## text format", "a ##AT##-##AT## b-c",
        "state ##AT##-##AT## of ##AT##-##AT## the ##AT##-##AT## art", "- x", "x -y", "x- y"]


def write_text(directory, files):
    directory.mkdir(exist_ok=True)
    for name, lines in files.items():
        (directory / name).write_text("".join(line + "\n" for line in lines), encoding="utf-8")


def test_wmt_scores_by_hand(tmp_path):
    from sacrebleu.metrics import BLEU

    from fairseq_distill.corpora.scoring import recipe_scores

    # wmt16: the protocol's text is tokenised; the paper's form compound-splits it as it is
    text = tmp_path / "text16"
    write_text(text, {"test.de": ["Ein state-of-the-art Satz .", "Haus &amp; Hof ."],
                      "test.orig.de": ["Ein state-of-the-art Satz.", "Haus & Hof."]})
    write_text(tmp_path, {"hyp16.txt": ["Ein state-of-the-art Satz .", "Haus &amp; Hof ."]})
    scores = recipe_scores("wmt16_en_de", str(text), str(tmp_path / "hyp16.txt"))
    assert scores["paper_bleu"] == scores["sacrebleu"] == scores["chrf"] == 100.0
    assert "case:mixed" in scores["paper_bleu_signature"] and "tok:none" in scores["paper_bleu_signature"] and \
        "smooth:none" in scores["paper_bleu_signature"]
    assert "case:mixed" in scores["sacrebleu_signature"] and "tok:13a" in scores["sacrebleu_signature"]
    write_text(tmp_path, {"hyp16.txt": ["Ein state-of-the-art Test .", "haus &amp; Hof ."]})
    scores = recipe_scores("wmt16_en_de", str(text), str(tmp_path / "hyp16.txt"))
    # by hand: the compounds split, tokenised BLEU with no smoothing (multi-bleu.perl's form)
    by_hand = BLEU(tokenize="none", smooth_method="none").corpus_score(
        ["Ein state ##AT##-##AT## of ##AT##-##AT## the ##AT##-##AT## art Test .", "haus &amp; Hof ."],
        [["Ein state ##AT##-##AT## of ##AT##-##AT## the ##AT##-##AT## art Satz .", "Haus &amp; Hof ."]]).score
    assert scores["paper_bleu"] == round(by_hand, 2) and 0 < scores["paper_bleu"] < 100
    assert scores["sacrebleu"] < 100  # case-sensitive: "haus" is not "Haus"

    # wmt14: the protocol's text is not tokenised; the paper's form Moses-tokenises both sides first
    text = tmp_path / "text14"
    write_text(text, {"test.de": ["Ein state-of-the-art Satz.", "Haus & Hof."],
                      "test.orig.de": ["Ein state-of-the-art Satz.", "Haus & Hof."]})
    write_text(tmp_path, {"hyp14.txt": ["Ein state-of-the-art Satz.", "Haus & Hof."]})
    scores = recipe_scores("wmt14_en_de", str(text), str(tmp_path / "hyp14.txt"))
    assert scores["paper_bleu"] == scores["sacrebleu"] == 100.0
    write_text(tmp_path, {"hyp14.txt": ["Ein state-of-the-art Test.", "Haus & Hof."]})
    scores = recipe_scores("wmt14_en_de", str(text), str(tmp_path / "hyp14.txt"))
    by_hand = BLEU(tokenize="none", smooth_method="none").corpus_score(
        ["Ein state ##AT##-##AT## of ##AT##-##AT## the ##AT##-##AT## art Test .", "Haus &amp; Hof ."],
        [["Ein state ##AT##-##AT## of ##AT##-##AT## the ##AT##-##AT## art Satz .", "Haus &amp; Hof ."]]).score
    assert scores["paper_bleu"] == round(by_hand, 2)
    assert scores["sacrebleu"] == round(BLEU().corpus_score(["Ein state-of-the-art Test.", "Haus & Hof."],
                                                            [["Ein state-of-the-art Satz.", "Haus & Hof."]]).score, 2)


def test_iwslt_scoring_keeps_its_form(tmp_path):
    """The WMT options default off: IWSLT'14's paper form is still sacreBLEU's default tokenizer on
    the tokenised text as it is."""
    from sacrebleu.metrics import BLEU

    from fairseq_distill.corpora.scoring import recipe_scores

    write_text(tmp_path / "text", {"test.en": ["it &apos;s a well-known test .", "the house is big ."],
                                   "test.orig.en": ["It's a well-known test.", "The house is big."]})
    write_text(tmp_path, {"hyp.txt": ["it &apos;s a well-known test .", "the house is small ."]})
    scores = recipe_scores("iwslt14_de_en", str(tmp_path / "text"), str(tmp_path / "hyp.txt"))
    assert scores["paper_bleu"] == round(BLEU().corpus_score(
        ["it &apos;s a well-known test .", "the house is small ."],
        [["it &apos;s a well-known test .", "the house is big ."]]).score, 2)
    assert "tok:13a" in scores["paper_bleu_signature"] and "case:lc" in scores["sacrebleu_signature"]


def test_the_commands_know_the_wmt_corpora(archives, tmp_path):
    from fairseq_distill.cli import benchmark_corpus, benchmark_score

    benchmark_corpus.main(["wmt16_en_de", "--archive", archives, "--out", str(tmp_path / "text")])
    record = json.loads((tmp_path / "text" / "counts.json").read_text())
    assert record["corpus"] == "wmt16_en_de" and record["lines"]["test"] == {"en": 5, "de": 5}
    # its own earlier output is replaced by a rerun; another corpus is not written into it
    before = (tmp_path / "text" / "train.de").read_text(encoding="utf-8")
    benchmark_corpus.main(["wmt16_en_de", "--archive", archives, "--out", str(tmp_path / "text")])
    assert (tmp_path / "text" / "train.de").read_text(encoding="utf-8") == before
    with pytest.raises(SystemExit) as refused:
        benchmark_corpus.main(["wmt14_en_de", "--archive", archives, "--out", str(tmp_path / "text")])
    assert "holds the wmt16_en_de corpus" in str(refused.value)
    assert (tmp_path / "text" / "train.de").read_text(encoding="utf-8") == before
    hyps = tmp_path / "hyps.txt"
    hyps.write_text((tmp_path / "text" / "test.de").read_text(encoding="utf-8"), encoding="utf-8")
    (tmp_path / "teacher.json").write_text(json.dumps({"hypotheses": str(hyps)}))
    benchmark_score.main(["score", "wmt16_en_de", "--text", str(tmp_path / "text"), "--eval",
                          str(tmp_path / "teacher.json"), "--out", str(tmp_path / "teacher.scores.json")])
    scores = json.loads((tmp_path / "teacher.scores.json").read_text())
    assert scores["paper_bleu"] == scores["sacrebleu"] == 100.0 and scores["paper_bleu_form"].startswith("GPKD's")


# ---------------------------------------------------------------------------------------------
# the recipes' scripts (slow: they start bash and the fsd-* commands)


def bash(recipe, script, *args, expect=0):
    env = dict(os.environ, PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"])
    proc = subprocess.run(["bash", os.path.join(REPO, "recipes", recipe, script), *args], stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, env=env, cwd=REPO)
    assert proc.returncode == expect, proc.stdout[-4000:]
    return proc.stdout


def commands(output):
    return [line for line in output.splitlines() if line.startswith("+ ")]


def rows(recipe):
    with open(os.path.join(REPO, "recipes", recipe, "rows.tsv"), encoding="utf-8") as f:
        return [line.rstrip("\n").split("\t") for line in f if line.strip() and not line.startswith("#")]


@pytest.mark.slow
@pytest.mark.parametrize("recipe,vocab,train", [("wmt14_en_de", "60", 17), ("wmt16_en_de", "50", 18)])
def test_prepare_on_the_official_layout(archives, tmp_path, recipe, vocab, train):
    out = tmp_path / "work"
    # the synthetic archives carry the official names but not the official checksums
    refused = bash(recipe, "prepare.sh", "--archive", archives, "--out", str(out), expect=1)
    assert "training-parallel-europarl-v7.tgz has sha256 " in refused and "not the recorded 0224c7c7" in refused
    printed = bash(recipe, "prepare.sh", "--archive", archives, "--out", str(out), "--no-checksum",
                   "--vocab-size", vocab, "--workers", "2")
    nc = "training-parallel-nc-v9.tgz" if recipe == "wmt14_en_de" else "training-parallel-nc-v11.tgz"
    assert f"[prepare] {nc}: SHA-256 " in printed and "(no checksum is recorded for it)" in printed
    assert len(read(out / "archives.sha256")) == 5
    counts = json.load(open(out / "text" / "counts.json"))["lines"]
    assert counts["train"] == {"en": train, "de": train}
    meta = json.load(open(out / "data" / "bin" / "fairseq_distill.json"))
    assert meta["bpe"] == ("sentencepiece" if recipe == "wmt14_en_de" else "subword_nmt")
    assert meta["sizes"] == {"train": train, "valid": counts["valid"]["en"], "test": 5}
    assert "[prepare] done in" in printed
    again = bash(recipe, "prepare.sh", "--archive", archives, "--out", str(out), "--no-checksum",
                 "--vocab-size", vocab)
    assert "/text exists (remove it to redo the protocol)" in again and "reusing" in again


@pytest.mark.slow
def test_wmt14_dry_run_prints_the_papers_settings(tmp_path):
    printed = bash("wmt14_en_de", "run.sh", "--dry-run", "--out", str(tmp_path / "w"), "--gpus", "8")
    assert not (tmp_path / "w").exists()  # --dry-run ran nothing
    trainings = [c for c in commands(printed) if c.startswith("+ fairseq-train")]
    names = [r[0] for r in rows("wmt14_en_de")]
    assert len(trainings) == 1 + len(names)
    teacher = trainings[0]
    for flags in ("--arch transformer_wmt_en_de --task translation", "--share-all-embeddings",
                  "--lr 0.0007 --lr-scheduler inverse_sqrt --warmup-updates 4000", "--max-update 100000",
                  "--max-tokens 3584 --update-freq 1", "--distributed-world-size 8 --fp16"):
        assert flags in teacher, flags
    assert "--encoder-layers" not in teacher
    students = dict(zip(names, trainings[1:]))
    assert all("--encoder-layers 2 --decoder-layers 2 --encoder-attention-heads 8" in c for c in students.values())
    assert "--task translation --criterion label_smoothed_cross_entropy" in students["no-kd-2"]
    assert "--criterion pkd" in students["pkd-2"]
    assert "--criterion ckd" in students["ckd-rc-2"] and "--ckd-combination rc" in students["ckd-rc-2"]
    assert "--ckd-combination oc" in students["ckd-oc-2"]
    assert "--ckd-form" not in students["ckd-rc-2"]  # the default: the authors' released form
    assert "--ckd-combination rc --ckd-form paper" in students["ckd-rc-2-paper"]
    assert "--criterion a2d" in students["a2d-2"] and "--a2d-" not in students["a2d-2"]
    assert "--a2d-released --a2d-weight 0.1 --distributed" in students["a2d-2-released"]
    assert "--kd-weight 0 " in students["a2d-2-no-word-kd"]
    assert all(f"--teacher-path {tmp_path}/w/runs/teacher/checkpoint_last.pt" in students[n] for n in names[1:])
    evaluations = [c for c in commands(printed) if c.startswith("+ fsd-evaluate")]
    assert len(evaluations) == 1 + len(names) and all("--beam 4 --lenpen 0.6" in c for c in evaluations)
    assert any(c.startswith("+ fsd-benchmark-score table wmt14_en_de") for c in commands(printed))
    one_gpu = bash("wmt14_en_de", "run.sh", "--dry-run", "--out", str(tmp_path / "w"), "--stage", "teacher",
                   "--gpus", "1", "--no-fp16")
    assert "--max-tokens 3584 --update-freq 7" in one_gpu and "--fp16" not in one_gpu   # 25,088 tokens an update


@pytest.mark.slow
def test_wmt16_dry_run_prints_the_gpkd_pipeline(tmp_path):
    out = tmp_path / "w"
    printed = commands(bash("wmt16_en_de", "run.sh", "--dry-run", "--out", str(out), "--gpus", "8"))
    trainings = [c for c in printed if c.startswith("+ fairseq-train")]
    table = {r[0]: r for r in rows("wmt16_en_de")}
    assert len(trainings) == 1 + len(table)
    teacher = trainings[0]
    for flags in ("--arch deep_transformer_48_6 --max-relative-length 8 --encoder-group-size 8 "
                  "--decoder-group-size 6", "--adam-betas \\(0.9\\,\\ 0.997\\)", "--lr 0.002",
                  "--warmup-updates 16000", "--max-update 50000", "--max-tokens 4096 --update-freq 2",
                  f"--save-dir {out}/runs/teacher"):
        assert flags in teacher, flags
    by_dir = {c.rsplit("--save-dir ", 1)[1].split()[0].rsplit("/", 1)[1]: c for c in trainings}
    skip = by_dir["teacher-skip"]
    assert "--skip-sublayer-rate 0.4" in skip and f"--restore-file {out}/runs/teacher/checkpoint_last.pt " \
        "--reset-dataloader --reset-meters" in skip and "--reset-optimizer" not in skip
    # stages in order: teacher, skip, seq-KD data of both teachers, extraction, students
    seqkd = [c for c in printed if c.startswith("+ fsd-seqkd")]
    assert [c.split("--teacher ")[1].split()[0] for c in seqkd] == [
        f"{out}/runs/teacher/checkpoint_last.pt", f"{out}/runs/teacher-skip/checkpoint_last.pt"]
    assert all("--beam 4 --lenpen 0.6" in c for c in seqkd)
    extractions = {c.split()[3].rsplit("/", 2)[1]: c for c in printed if c.startswith("+ fsd-extract-student")}
    assert sorted(extractions) == sorted(n for n, r in table.items() if r[4].startswith("extract:"))
    assert extractions["gpkd-6-6"].endswith(f"{out}/runs/teacher/checkpoint_last.pt {out}/runs/gpkd-6-6/init.pt "
                                            f"--encoder-keep random --decoder-keep all ")
    assert "--encoder-keep all --decoder-keep random" in extractions["desdar-48-1-gpkd"]
    assert "teacher-skip/checkpoint_last.pt" in extractions["gpkd-24-3-skip"] and \
        "--encoder-group-size 2 --decoder-group-size 2" in extractions["gpkd-24-3-skip"]
    order = [printed.index(c) for c in (teacher, skip, seqkd[0], extractions["gpkd-6-6"], by_dir["gpkd-6-6"])]
    assert order == sorted(order)
    for name, row in table.items():
        command = by_dir[name]
        enc, dec = row[1].split("+")
        assert f"--encoder-layers {enc} --decoder-layers {dec} " in command, name
        assert "--criterion label_smoothed_cross_entropy" in command
        data = f"{out}/seqkd-{row[2][6:]}" if row[2].startswith("seqkd:") else f"{out}/data/bin"
        assert command.startswith(f"+ fairseq-train {data} "), name
        if row[4].startswith("extract:"):
            assert f"--restore-file {out}/runs/{name}/init.pt --reset-optimizer --reset-lr-scheduler " \
                "--reset-meters --reset-dataloader" in command, name
        elif name != "teacher-skip":
            assert "--restore-file" not in command, name
    assert "--encoder-layers 48 --decoder-layers 1" in by_dir["desdar-48-1"]
    evaluations = [c for c in printed if c.startswith("+ fsd-evaluate")]
    assert len(evaluations) == 1 + len(table) and all("--beam 4 --lenpen 0.6" in c for c in evaluations)
    assert printed[-1].startswith("+ fsd-benchmark-score table wmt16_en_de") and "--teacher-paper-bleu 30.03" in printed[-1]


@pytest.mark.slow
def test_wmt_recipe_options_are_checked(tmp_path):
    for recipe in ("wmt14_en_de", "wmt16_en_de"):
        assert "unknown --stage 'teachers'" in bash(recipe, "run.sh", "--stage", "teachers", expect=2)
        assert "--gpus must be a number of GPUs" in bash(recipe, "run.sh", "--gpus", "two", expect=2)
        assert "--archive /nonexistent does not exist" in bash(recipe, "prepare.sh", "--archive", "/nonexistent", expect=1)
        assert "no prepared data in" in bash(recipe, "run.sh", "--out", str(tmp_path / "none"), expect=1)
    assert "valid: teacher skip seqkd extract students evaluate table" in \
        bash("wmt16_en_de", "run.sh", "--stage", "x", expect=2)
