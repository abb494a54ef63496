"""Issue 68.4 in fsd-seqkd: a source with nothing visible (an empty line, or one of only U+200B,
U+FEFF and other invisible characters) gets an empty target in its place, as fsd-translate and
fsd-evaluate translate it; the pairs stay aligned, nothing the teacher invented for it is kept,
and the lines are counted and named. Before, fsd-seqkd refused the whole run."""
import json
import os
import sys
from types import SimpleNamespace

import pytest
import torch

from fairseq_distill.errors import DistillError
from fairseq_distill.seqkd.inputs import load_side
from fairseq_distill.text.segmentation import Segmenter

SEQKD = os.path.join(os.path.dirname(sys.executable), "fsd-seqkd")
MONO = ["Ein Hund läuft.", "\u200b", "Zwei Katzen.", "\ufeff", "Ein Haus.", ""]
BLANK_LINES = [2, 4, 6]  # 1-based


def test_source_lines_with_nothing_visible_keep_their_place_as_empty_sources(tiny_data, tmp_path, capsys):
    from fairseq_distill.seqkd.monolingual import read_source

    path = tmp_path / "mono.de"
    path.write_text("\n".join(MONO) + "\n", encoding="utf-8")
    pieces = read_source(str(path), tiny_data)
    segmenter = Segmenter.from_dir(tiny_data)
    assert len(pieces) == len(MONO)
    for number, (line, p) in enumerate(zip(MONO, pieces), 1):
        assert p == ("" if number in BLANK_LINES else segmenter.encode_lines([line])[0])
    said = capsys.readouterr().out
    assert "3 of 6 lines show nothing" in said and "lines 2, 4, 6" in said and "an empty target" in said
    # nothing at all to translate is still refused, naming the file
    path.write_text("\u200b\n\n \ufeff\n", encoding="utf-8")
    with pytest.raises(DistillError, match=r"none of its 3 lines shows any text .* nothing for the teacher"):
        read_source(str(path), tiny_data)


def test_blank_training_sources_are_said_before_the_teacher_runs(capsys):
    from fairseq_distill.seqkd.inputs import report_blank_sources

    assert report_blank_sources(["a b", "c"], "data-bin", "train") == []
    assert capsys.readouterr().out == ""
    assert report_blank_sources(["a b", "", "c", " ", "\u2581", "\u200b @@"], "data-bin", "train") == [1, 3, 4, 5]
    said = capsys.readouterr().out
    assert "data-bin (train): 4 source sentence(s) show nothing" in said and "ids 1, 3, 4, 5" in said


class FakeIndex:
    """The teacher's n-best lists: a sentence for every source, blank or not (as long as the
    source, or one word where it shows nothing)."""

    def __init__(self, sources):
        self.invented = {i: [" ".join(f"\u2581t{i}" for _ in (s.split() or [s]))] for i, s in enumerate(sources)}

    def lists(self, ids):
        return {i: self.invented[i] for i in ids}


class FakeInputs:
    def __init__(self, train, mono):
        self.train, self.mono = train, mono

    def __len__(self):
        return len(self.train) + len(self.mono)

    def read(self, start, stop):
        return (self.train + self.mono)[start:stop]


@pytest.mark.parametrize("ratio", [0.0, 1.5])
def test_the_merge_walk_gives_a_blank_source_an_empty_target_in_its_place(tiny_data, tmp_path, ratio):
    from fairseq_distill.seqkd.merge_walk import walk

    train = ["\u2581ein \u2581hund", "", "\u2581zwei \u2581katzen"]  # training sentence 1: </s> alone
    mono = ["\u2581ein \u2581haus", "", "\u2581drei"]  # --source line 2: nothing visible
    args = SimpleNamespace(work=str(tmp_path), data=tiny_data, subset="valid", max_len_a=1.2, max_len_b=10,
                           max_len_ratio=ratio, select="first", targets=None)
    tally = walk(args, "de", "en", FakeIndex(train + mono), FakeInputs(train, mono), {}, {"k": 1}, pairs=True)
    src = (tmp_path / "seqkd.de").read_text(encoding="utf-8").split("\n")[:-1]
    tgt = (tmp_path / "seqkd.en").read_text(encoding="utf-8").split("\n")[:-1]
    assert src == train + mono  # aligned: every sentence in its place
    assert tgt == ["\u2581t0 \u2581t0", "", "\u2581t2 \u2581t2", "\u2581t3 \u2581t3", "", "\u2581t5"]
    assert (tally.kept, tally.train_blank, tally.mono_blank) == (6, 1, 1)
    assert (tally.train_blank_first, tally.mono_blank_first) == ([1], [2])
    assert (tally.train_missing, tally.mono_missing, tally.filtered) == (0, 0, 0)
    assert tally.monolingual_added == 3
    pairs = (tmp_path / "seqkd_pairs.tsv").read_text().splitlines()[1:]
    assert pairs[1] == "1\t1\t-2" and pairs[4] == "4\t4\t-2"  # -2: the empty target of a blank source


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["fairseq", "ctranslate2"])
def test_seqkd_gives_invisible_source_lines_empty_targets_and_the_data_trains(backend, tiny_data, tiny_teacher,
                                                                             tmp_path):
    """A --source file with a U+200B-only line and a U+FEFF-only line: both become pairs in their
    place, an empty source and an empty target, counted and said; fairseq loads the new data and
    computes a finite loss on a batch of them."""
    if backend == "ctranslate2":
        pytest.importorskip("ctranslate2")
    from helpers import build, run

    lines = ["Ein Hund läuft.", "\u200b\u200b", "Zwei Katzen spielen.", "\ufeff", "Ein Haus."]
    mono = tmp_path / "mono.de"
    mono.write_text("\n".join(lines) + "\n", encoding="utf-8")
    out, work = str(tmp_path / "out"), str(tmp_path / "work")
    extra = ["--threads", "1"] if backend == "ctranslate2" else []
    said = run([SEQKD, "--teacher", tiny_teacher, "--data", tiny_data, "--out", out, "--work", work,
                "--backend", backend, *extra, "--subset", "valid", "--beam", "1", "--source", str(mono),
                "--max-len-b", "3"]).stdout
    assert "2 of 5 lines show nothing" in said and "lines 2, 4" in said
    assert "2 source(s) show nothing (--source lines [2, 4]): each pair keeps its place with an empty target" in said
    with open(os.path.join(out, "seqkd_summary.json")) as f:
        summary = json.load(f)
    n = summary["sentences"]
    assert (summary["blank_sources"], summary["monolingual_blank"]) == (2, 2)
    assert summary["monolingual_added"] == 5 and summary["kept"] == n + 5 and summary["missing_or_empty"] == 0
    src = load_side(out, "train", "de", "en", "de")
    tgt = load_side(out, "train", "de", "en", "en")
    assert len(src) == len(tgt) == n + 5
    assert [src[n + k] for k in (1, 3)] == ["", ""] and [tgt[n + k] for k in (1, 3)] == ["", ""]
    assert src[n:] == [("" if k in (1, 3) else p) for k, p in enumerate(Segmenter.from_dir(tiny_data).encode_lines(lines))]
    assert all(tgt[n + k] for k in (0, 2, 4))  # the visible lines keep the teacher's translation
    # fairseq trains on the pairs: </s> alone on both sides
    cfg, task, model = build(out, criterion="label_smoothed_cross_entropy")
    task.load_dataset("train")
    dataset = task.dataset("train")
    assert [dataset[n + k]["target"].tolist() for k in (1, 3)] == [[task.tgt_dict.eos()]] * 2
    sample = dataset.collater([dataset[i] for i in (n + 1, n + 3, n)])
    loss, size, _ = task.build_criterion(cfg.criterion)(model, sample)
    assert torch.isfinite(loss) and size == sample["ntokens"]
