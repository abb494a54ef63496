"""The IWSLT'14 protocol (fairseq's prepare-iwslt14.sh) on a synthetic archive of the official
layout: every stage counted, each sentence followed through by hand."""
import json
import os

import pytest

from fairseq_distill.corpora import iwslt14
from fairseq_distill.corpora.moses import clean_pairs, lowercase, tokenize
from fairseq_distill.errors import DistillError
from iwslt14_archive import sentence, write_archive


def read(path):
    with open(path, encoding="utf-8") as f:
        return f.read().split("\n")[:-1]


def test_moses_steps_by_hand():
    # tokenizer.perl splits an apostrophe off both sides except in English, French and Italian
    assert tokenize(["Das ist's, z.B. \"gut\"."], "de") == ["Das ist &apos; s , z.B. &quot; gut &quot; ."]
    assert tokenize(["It's 3.5 km."], "en") == ["It &apos;s 3.5 km ."]
    assert lowercase(["ÄRGER Über"]) == ["ärger über"]
    src = ["a b", "a  b c", "a", "a b c d", "x " * 176, ""]
    tgt = ["c d", "d e f", "a b c", "e f g h i j k", "y", "z"]
    # kept: 2/2, 3/3 (spaces collapsed); dropped: ratio 3, ratio 1.75, 176 tokens, an empty side
    assert clean_pairs(src, tgt, 1, 175, 1.5) == ([0, 1], ["a b", "a b c"], ["c d", "d e f"])


def test_iwslt14_protocol_on_the_official_layout(tmp_path):
    long_pair = {5: " ".join(["wort"] * 176)}                   # 176 tokens: over the 175 limit
    unbalanced = {7: "Ein sehr sehr sehr sehr sehr sehr langer Satz ."}  # 10 tokens against 1
    archive = write_archive(tmp_path / "de-en.tgz", pairs=60, extra_de={**long_pair, **unbalanced},
                            extra_en={7: "Short"})
    lines = []
    counts = iwslt14.prepare(str(archive), str(tmp_path / "out"), report=lines.append)
    # 60 talk lines a side; the 6 metadata blocks hold 3 dropped lines and 2 kept (title, description)
    assert counts["train.tags"] == {"de": 60 + 6 * 5, "en": 60 + 6 * 5}
    assert counts["train talk text"] == {"de": 72, "en": 72}
    assert counts["cleaned"] == {"de": 70, "en": 70}
    assert counts["valid"] == {"de": 3, "en": 3} and counts["train"] == {"de": 67, "en": 67}  # 23rd, 46th, 69th
    assert counts["test"] == {"de": 14, "en": 14} and counts["test.orig"] == {"de": 14, "en": 14}
    out = tmp_path / "out"
    train_de, valid_de = read(out / "train.de"), read(out / "valid.de")
    # the talk text in order: title, description, then the talk's lines, tokenised and lowercased
    assert train_de[:3] == ["talk 0 : haus", "about hund 0", tokenize([sentence("de", 0)], "de")[0].lower()]
    cleaned = [line for line in read(out / "train.de")]
    assert all(line == line.lower() for line in cleaned)
    assert not any("wort wort" in line for line in cleaned + valid_de)
    assert not any("langer satz" in line for line in cleaned + valid_de)
    # valid: cleaned pairs 23, 46 and 69; train: the rest, in order
    talk_text = [iwslt14.KEPT_TAGS.sub("", line) for line in iwslt14.training_lines(
        write_archive_lines(tmp_path, long_pair, unbalanced))]
    # talk line i follows the title and description of talks 0..i//10: the dropped pairs 5 and 7
    kept = [line for i, line in enumerate(talk_text) if i not in (5 + 2, 7 + 2)]
    expected = [tokenize([line], "de")[0].lower() for line in kept]
    assert valid_de == [expected[22], expected[45], expected[68]]
    assert train_de == [line for i, line in enumerate(expected, 1) if i % 23]
    # test: the five sets in the protocol's order, ’ written as ', tokenised, lowercased; and untokenised
    test_en, orig_en = read(out / "test.en"), read(out / "test.orig.en")
    assert orig_en[0] == sentence("en", 0) + " It's"      # dev2010 first, segment tags gone
    assert test_en[0].endswith("it &apos;s")
    assert orig_en[3] == sentence("en", 100) + " It's"   # then TEDX dev2012
    assert orig_en[5] == sentence("en", 200) + " It's"   # then tst2010, tst2011, tst2012
    assert lines[-1].startswith("[iwslt14] train 67, valid 3 (every 23rd cleaned pair), test 14 (3 + 2 + 4 + 2 + 3")


def write_archive_lines(tmp_path, long_pair, unbalanced):
    from iwslt14_archive import train_tags

    return train_tags("de", 60, {**long_pair, **unbalanced})


def test_an_unpacked_directory_reads_like_the_archive(tmp_path):
    write_archive(tmp_path / "de-en.tgz")
    write_archive(tmp_path / "unpacked", as_directory=True)
    a = iwslt14.prepare(str(tmp_path / "de-en.tgz"), str(tmp_path / "a"), report=lambda _: None)
    b = iwslt14.prepare(str(tmp_path / "unpacked"), str(tmp_path / "b"), report=lambda _: None)
    assert a == b
    for name in ("train.de", "valid.en", "test.de", "test.orig.en"):
        assert read(tmp_path / "a" / name) == read(tmp_path / "b" / name)


def test_damaged_or_wrong_archives_are_named(tmp_path):
    with pytest.raises(DistillError, match="neither a directory nor a tar archive"):
        iwslt14.prepare(str(tmp_path / "missing.tgz"), str(tmp_path / "out"))
    os.makedirs(tmp_path / "empty")
    with pytest.raises(DistillError, match="has no file train.tags.de-en.de: is it IWSLT'14's de-en.tgz"):
        iwslt14.prepare(str(tmp_path / "empty"), str(tmp_path / "out"))
    write_archive(tmp_path / "short", pairs=30, as_directory=True)
    path = tmp_path / "short" / "de-en" / "train.tags.de-en.en"
    path.write_text("\n".join(read(path)[:-1]) + "\n", encoding="utf-8")  # one talk line fewer
    with pytest.raises(DistillError, match="training talk text: the sides differ in length \\(de 36, en 35\\)"):
        iwslt14.prepare(str(tmp_path / "short"), str(tmp_path / "out"))


def test_recipe_scores_in_both_forms_by_hand(tmp_path):
    """A2D's form scores the tokenised lowercased text as it is; sacreBLEU scores the detokenised
    output against the untokenised references, ignoring case (the protocol lowercases)."""
    from fairseq_distill.corpora.scoring import recipe_scores

    text = tmp_path / "text"
    text.mkdir()
    (text / "test.en").write_text("it &apos;s a test .\nthe house is big .\n", encoding="utf-8")
    (text / "test.orig.en").write_text("It's a test.\nThe house is big.\n", encoding="utf-8")
    hyp = tmp_path / "hyp.txt"
    hyp.write_text("it &apos;s a test .\nthe house is big .\n", encoding="utf-8")
    scores = recipe_scores("iwslt14_de_en", str(text), str(hyp))
    assert scores["paper_bleu"] == 100.0 and scores["sacrebleu"] == 100.0 and scores["chrf"] == 100.0
    assert "case:lc" in scores["sacrebleu_signature"] and "tok:13a" in scores["paper_bleu_signature"]
    hyp.write_text("it &apos;s a test .\nthe house is small .\n", encoding="utf-8")
    worse = recipe_scores("iwslt14_de_en", str(text), str(hyp))
    assert worse["paper_bleu"] < 100 and worse["sacrebleu"] < 100
    hyp.write_text("one line\n", encoding="utf-8")
    with pytest.raises(DistillError, match="has 1 lines; the test set has 2"):
        recipe_scores("iwslt14_de_en", str(text), str(hyp))


def test_results_table_marks_what_was_not_measured(tmp_path):
    from fairseq_distill.corpora.results import write_table

    rows = tmp_path / "rows.tsv"
    rows.write_text("# comment\nno-kd-3\t3\toriginal\tlabel_smoothed_cross_entropy\t-\t4\t36.24\n"
                    "a2d-3\t3\toriginal\ta2d\t--a2d-weight 1.0\t4\t37.17\n", encoding="utf-8")
    evals = tmp_path / "eval"
    evals.mkdir()
    (evals / "a2d-3.scores.json").write_text(json.dumps({
        "paper_bleu": 30.5, "sacrebleu": 29.25, "chrf": 55.0, "paper_bleu_form": "form",
        "paper_bleu_signature": "sig1", "sacrebleu_signature": "sig2", "chrf_signature": "sig3"}))
    table = write_table("iwslt14_de_en", str(rows), "36.79", str(evals), str(tmp_path / "results.md"))
    assert [r["name"] for r in table["rows"]] == ["teacher", "no-kd-3", "a2d-3"]
    text = (tmp_path / "results.md").read_text(encoding="utf-8")
    assert "| teacher | 6+6 | 4 | original | label_smoothed_cross_entropy |  | 36.79 | not yet measured |" in text
    assert "| a2d-3 | 3+3 | 4 | original | a2d | `--a2d-weight 1.0` | 37.17 | 30.50 | 29.25 | 55.00 |" in text
    (tmp_path / "bad.tsv").write_text("a\tb\n", encoding="utf-8")
    with pytest.raises(DistillError, match="bad.tsv:1: 2 tab-separated cells, expected 7"):
        write_table("iwslt14_de_en", str(tmp_path / "bad.tsv"), None, str(evals), str(tmp_path / "r.md"))


def test_results_table_prints_each_shape_as_given(tmp_path):
    """A row's layers are N per side, or E+D as written (GPKD's 48+6 teacher, DESDAR's 48+1)."""
    from fairseq_distill.corpora.results import write_table

    rows = tmp_path / "rows.tsv"
    rows.write_text("desdar\t48+1\toriginal\tlabel_smoothed_cross_entropy\t-\t8\t30.01\n", encoding="utf-8")
    (tmp_path / "eval").mkdir()  # the scores the table reads; it writes outside them
    write_table("wmt16_en_de", str(rows), "30.03", str(tmp_path / "eval"), str(tmp_path / "results.md"), "48+6", "8")
    text = (tmp_path / "results.md").read_text(encoding="utf-8")
    assert "| teacher | 48+6 | 8 | original |" in text and "| desdar | 48+1 | 8 | original |" in text


def test_test_segments_are_paired_by_id_and_damaged_xml_or_archives_refused(tmp_path):
    """issue 49.5: segments without an id were dropped on each side and the rest paired by
    count (misaligned, exit 0); both XML sides truncated went unnoticed; a truncated .tgz ended
    in an EOFError traceback."""
    name = iwslt14.TEST_SETS[0]

    def archive_with(edit_de=None, edit_en=None):
        root = tmp_path / f"a{len(os.listdir(tmp_path))}"
        write_archive(root, as_directory=True)
        for lang, edit in (("de", edit_de), ("en", edit_en)):
            if edit:
                path = root / "de-en" / f"{name}.de-en.{lang}.xml"
                path.write_text("\n".join(edit(read(path))) + "\n", encoding="utf-8")
        return root

    def seg_without_id(lines):  # the second segment loses its id
        first = next(i for i, line in enumerate(lines) if "<seg id" in line)
        return lines[:first + 1] + [lines[first + 1].replace('<seg id="2">', "<seg>")] + lines[first + 2:]

    line = next(i for i, l in enumerate(read_xml_head()) if "<seg id" in l) + 2  # the second segment's line
    with pytest.raises(DistillError, match=rf"{name}.de-en.de.xml line {line}: a segment that is not one whole"):
        iwslt14.prepare(str(archive_with(seg_without_id, seg_without_id)), str(tmp_path / "out"))

    def drop_second(lines):
        return [l for l in lines if '<seg id="2">' not in l]

    with pytest.raises(DistillError, match=rf"{name}.de-en.de.xml: segment 2 of document 1 has no counterpart in the other side.s file"):
        iwslt14.prepare(str(archive_with(None, drop_second)), str(tmp_path / "out"))

    def truncate(lines):
        return lines[:-3]

    with pytest.raises(DistillError, match=rf"{name}.de-en.de.xml ends at line \d+ without </mteval>.*truncated"):
        iwslt14.prepare(str(archive_with(truncate, truncate)), str(tmp_path / "out"))

    tgz = write_archive(tmp_path / "de-en.tgz")
    data = open(tgz, "rb").read()
    with open(tgz, "wb") as f:
        f.write(data[: len(data) * 2 // 3])
    with pytest.raises(DistillError, match=r"--archive .*de-en.tgz is damaged \(truncated or corrupt"):
        iwslt14.prepare(str(tgz), str(tmp_path / "out"))


def read_xml_head():
    from iwslt14_archive import xml_file

    return xml_file(iwslt14.TEST_SETS[0], "de", ["x", "y"])


def test_the_moses_steps_equal_the_perl_scripts_on_an_adversarial_sample():
    """issue 49: parity with fairseq's prepare-iwslt14.sh, which runs the current Moses perl
    scripts: the sentence-final dot (split off any last word since late 2018, sacremoses keeps
    `I.`, `5.`, `U.S.`), clean-corpus-n's 1,000-character words, control characters and
    word-final capital sigma. The expected files are the scripts' own output
    (tests/fixtures/moses_parity/README.md)."""
    fixtures = os.path.join(os.path.dirname(__file__), "fixtures", "moses_parity")

    def lines(name):
        with open(os.path.join(fixtures, name), encoding="utf-8") as f:
            return f.read().split("\n")[:-1]

    for lang in ("de", "en"):
        assert lowercase(tokenize(lines(f"test.{lang}"), lang)) == lines(f"expected.test.{lang}")
    tokenized = {lang: tokenize(lines(f"train.{lang}"), lang) for lang in ("de", "en")}
    _, de, en = clean_pairs(tokenized["de"], tokenized["en"], **iwslt14.CLEAN)
    assert lowercase(de) == lines("expected.train.de") and lowercase(en) == lines("expected.train.en")
    assert "so am i ." in lines("expected.test.en") and len(en) == 20  # 23 pairs, 3 dropped
