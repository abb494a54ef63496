"""fsd-report's pure parts (percentiles, fastest round, rates, the latency sample, the Pareto
front), its rounds' order and summaries, and its refusals of bad input, all in-process; the
command itself runs in tests/test_report_cli.py."""
import os

import pytest
import torch

from fairseq_distill.cli import report as cli
from fairseq_distill.errors import DistillError
from fairseq_distill.report.report_rounds import run_rounds, summarize
from fairseq_distill.report.timings import (fastest_round, generation_seconds, latency_sample, latency_summary,
                                            pareto_front, percentile, rates)
from helpers import REPO

OTHER_DATA_MODEL = os.path.join(REPO, "tests", "fixtures", "v0_1_checkpoints", "teacher.pt")


# -- pure parts, values by hand ------------------------------------------------------------------

def test_percentile_is_linear_between_ranks():
    assert percentile([4, 1, 3, 2], 50) == pytest.approx(2.5)
    assert percentile([1, 2, 3, 4], 95) == pytest.approx(3.85)  # rank 0.95·3 = 2.85: 3 + 0.85·(4 − 3)
    assert percentile([7], 95) == 7
    assert percentile([10, 20, 30, 40, 50], 0) == 10 and percentile([10, 20, 30, 40, 50], 100) == 50
    # 21 values 0..20: p95 sits at rank 19 exactly
    assert percentile(list(range(21)), 95) == pytest.approx(19)


def test_latency_summary_is_in_milliseconds():
    assert latency_summary([0.001, 0.002, 0.003, 0.004]) == {"p50_ms": 2.5, "p95_ms": 3.85}


def test_bad_percentiles_are_refused():
    with pytest.raises(DistillError, match="at least one value"):
        percentile([], 50)
    with pytest.raises(DistillError, match="between 0 and 100, got 101"):
        percentile([1], 101)


def test_fastest_round_is_the_least_time_and_the_first_of_equals():
    rounds = [{"seconds": 2.0, "id": 1}, {"seconds": 1.5, "id": 2}, {"seconds": 1.5, "id": 3}, {"seconds": 3, "id": 4}]
    assert fastest_round(rounds)["id"] == 2
    with pytest.raises(DistillError, match="no timed round"):
        fastest_round([])


def test_rates():
    assert rates(1000, 80, 4.0) == {"words_per_second": 250.0, "sentences_per_second": 20.0}
    assert rates(455, 40, 3.0) == {"words_per_second": 151.7, "sentences_per_second": 13.33}
    with pytest.raises(DistillError, match="positive time"):
        rates(10, 1, 0.0)


def test_latency_sample_spreads_evenly():
    assert latency_sample(10, 4) == [0, 2, 5, 7]
    assert latency_sample(100, 5) == [0, 20, 40, 60, 80]
    assert latency_sample(3, 10) == [0, 1, 2]
    with pytest.raises(DistillError, match="at least 1 sentence, got 0"):
        latency_sample(10, 0)


def test_pareto_front():
    points = [(10, 30), (20, 28), (15, 25), (30, 20), (30, 22)]
    # (15, 25) is beaten by (20, 28); (30, 20) by (30, 22), as fast and better
    assert pareto_front(points) == [0, 1, 4]
    assert pareto_front([(5, 1), (5, 1)]) == [0, 1]  # equal points beat neither
    assert pareto_front([(1, 1), (2, 2)]) == [1]
    assert pareto_front([]) == []


def test_generation_seconds_takes_the_more_precise_figure():
    # 0.1 s is ±50%; 412.37 sentences/s is ±0.001%: 40 / 412.37
    assert generation_seconds(40, 0.1, 412.37) == pytest.approx(0.0970, abs=1e-4)
    # 0.02 sentences/s is ±25%; 2000.0 s is ±0.0025%
    assert generation_seconds(40, 2000.0, 0.02) == 2000.0
    with pytest.raises(DistillError, match="no decoding time for 3 sentences"):
        generation_seconds(3, 0.0, 0.0)


# -- the rounds: order, fastest round, GPU failures --------------------------------------------

class FakeModel:
    def __init__(self, name, convertible=True):
        self.name = name
        self.ctranslate2 = {"float32": "f32", "int8": "i8"} if convertible else {}


class FakeTest:
    sources = ["ein Hund", "zwei Katzen laufen"]
    references = ["a black dog runs across the green field", "two small cats sleep on the old red sofa"]
    source_words = 5


def test_rounds_alternate_models_and_keep_each_ones_fastest_round(tmp_path):
    calls = []
    seconds = {0: 2.0, 1: 1.0, 2: 1.5}  # by round
    latencies = {0: [0.01, 0.03], 1: [0.02, 0.02], 2: [0.005, 0.04]}

    def timer(m, backend, threads, test, decoding, sample, round_index):
        calls.append((round_index, threads, m.name, backend))
        if backend == "ctranslate2-float16":
            raise DistillError("no cuBLAS here")
        out = {"seconds": seconds[round_index], "sentences": 2, "latencies": latencies[round_index]}
        if backend.startswith("ctranslate2"):
            out["outputs"] = FakeTest.references if round_index < 2 else ["a dog", "two cats"]
        else:
            hypotheses = tmp_path / f"{m.name}.{backend}.{threads}.{round_index}.txt"
            hypotheses.write_text("a dog\ntwo cats\n", encoding="utf-8")  # alike in every round
            out.update(hypotheses=str(hypotheses), bleu=1.0, chrf=2.0, signatures={})
            out["chrf++"] = 3.0
        return out

    models = [FakeModel("teacher"), FakeModel("deep", convertible=False)]
    timed = run_rounds(models, FakeTest(), None, [1, 2], 3, [0, 1], True, lambda line: None, timer=timer)
    cpu_turn = [x for t in (1, 2) for x in
                [(t, "teacher", "ctranslate2-int8"), (t, "teacher", "ctranslate2-float32"),
                 (t, "teacher", "fairseq"), (t, "deep", "fairseq")]]
    gpu_turn = [(0, "teacher", "ctranslate2-float16"), (0, "teacher", "fairseq-fp16"), (0, "deep", "fairseq-fp16")]
    # every round passes over every model; a GPU backend that failed once is not tried again
    later_gpu_turn = [g for g in gpu_turn if g[2] != "ctranslate2-float16"]
    assert calls == ([(0, *c) for c in cpu_turn + gpu_turn] +
                     [(r, *c) for r in (1, 2) for c in cpu_turn + later_gpu_turn])

    int8 = summarize(timed[("teacher", "ctranslate2-int8", 1)], words=100)
    assert int8["words_per_second"] == 100.0 and int8["sentences_per_second"] == 2.0  # round 2: 1.0 s
    assert int8["words_per_second_rounds"] == [50.0, 100.0, 66.7]
    # latency: the round of least total time, the first of equals (0.04, 0.04, 0.045 s): round 1
    assert int8["latency_ms"] == {"p50_ms": 20.0, "p95_ms": 29.0}
    assert int8["same_outputs_every_round"] is False  # round 3 translated otherwise
    assert timed[("teacher", "ctranslate2-int8", 1)].scores["bleu"] == 100.0  # round 1's translations
    assert summarize(timed[("teacher", "ctranslate2-float16", 0)], 100) == {"skipped": "no cuBLAS here"}
    assert summarize(timed[("deep", "fairseq", 2)], 100)["same_outputs_every_round"] is True
    assert ("deep", "ctranslate2-int8", 1) not in timed


# -- bad input: refused before anything is measured (no process starts in the fast tier) ------

def report_error(argv):
    """What fsd-report says when it stops on ``argv``."""
    with pytest.raises(SystemExit) as e:
        cli.main(argv)
    return str(e.value.code)


def test_bad_input_is_named(tiny_data, tiny_teacher, tmp_path):
    out = str(tmp_path / "r")
    base = ["--data", tiny_data, "--out", out]
    cases = [
        ([tiny_teacher, str(tmp_path / "nope.pt"), *base],
         f"student 'nope': checkpoint not found: '{tmp_path / 'nope.pt'}'"),
        ([tiny_teacher, f"s={tmp_path}", *base], f"student 's': '{tmp_path}' is a directory"),
        ([tiny_teacher, tiny_teacher, *base], "two models are named 'teacher'"),
        ([tiny_teacher, f"a b={tiny_teacher}", *base], "model name 'a b'"),
        ([tiny_teacher, f"s={tiny_teacher}", "--data", str(tmp_path / "nodata"), "--out", out],
         f"data directory not found: '{tmp_path / 'nodata'}'"),
        ([tiny_teacher, f"s={tiny_teacher}", *base, "--subset", "test2"],
         "has no binarized 'test2' set; it has test, train, valid: pass --subset one of those"),
        ([tiny_teacher, f"s={tiny_teacher}", *base, "--subset", "train"],
         "keeps no raw 'train' text; it keeps raw text for test, valid: pass --subset one of those"),
        ([tiny_teacher, f"s={tiny_teacher}", *base, "--rounds", "0"], "--rounds must be at least 1, got 0"),
        ([tiny_teacher, f"s={tiny_teacher}", *base, "--threads", "1", "0"], "thread counts must be at least 1"),
        ([tiny_teacher, f"s={tiny_teacher}", *base, "--latency-sentences", "0"],
         "--latency-sentences must be at least 1, got 0"),
        ([tiny_teacher, f"s={tiny_teacher}", "--data", tiny_data, "--out", str(tmp_path)],
         f"--out '{tmp_path}' is a folder; give the report's path without extension"),
    ]
    for argv, message in cases:
        said = report_error(argv)
        assert said.startswith("report: error: ") and message in said, (argv, said)
    assert not os.path.exists(out + ".json")


def test_a_model_of_other_dictionaries_is_refused(tiny_data, tiny_teacher, tmp_path):
    # a real checkpoint trained on other data (a vocabulary of 120 pieces), its dictionaries stored
    said = report_error([tiny_teacher, f"other={OTHER_DATA_MODEL}", "--data", tiny_data, "--out", str(tmp_path / "r")])
    assert "student 'other'" in said and f"its source dictionary differs from {os.path.join(tiny_data, 'dict.de.txt')} at index" in said
    assert "must be trained on the data given as --data" in said
    # the same model with its dictionaries nowhere to be found: its embeddings' rows are compared
    state = torch.load(OTHER_DATA_MODEL, weights_only=False)
    state["task_state"] = {}
    state["cfg"]["task"]["data"] = str(tmp_path / "gone")
    torch.save(state, tmp_path / "lost.pt")
    said = report_error([f"lost={tmp_path / 'lost.pt'}", tiny_teacher, "--data", tiny_data,
                         "--out", str(tmp_path / "r")])
    assert "teacher 'lost'" in said and "its source embedding has 128 rows and " in said


def test_the_teacher_is_not_tested_against_itself_in_the_markdown():
    """The teacher is the paired test's baseline: its quality row has no test, and the paired
    table has no row of it against itself (its JSON keeps that record, delta 0)."""
    from fairseq_distill.report.report_output import quality_table, students_only

    def model(name, role, delta, p, significant):
        return {"name": name, "role": role, "parameters": 2_000_000, "int8_bleu_delta": None,
                "quality": {"fairseq": {"bleu": 30.0 + delta, "chrf": 50.0}},
                "paired_test": {"bleu": {"delta": delta, "p_value": p, "significant": significant}},
                "size_bytes": {"checkpoint": 1 << 20}}

    rows = quality_table({"models": [model("big", "teacher", 0.0, 0.001, False),
                                     model("small", "student", -2.5, 0.001, True)]})[2:]
    assert [row.split("|")[5].strip() for row in rows] == ["–", "-2.50 (p = 0.0010)"]
    comparison = {"test": "bootstrap", "systems": {"big (itself)": {}, "small": {}}}
    assert list(students_only(comparison)["systems"]) == ["small"]
    assert list(comparison["systems"]) == ["big (itself)", "small"]  # the record is left whole


def test_a_backend_slower_with_more_threads_is_noted():
    """2 threads slower than 1 (as CTranslate2 was on a 2-vCPU machine) gets a note; faster does not."""
    from fairseq_distill.report.report_output import notes

    def speed(words_per_second):
        return {"words_per_second": words_per_second, "same_outputs_every_round": True}

    model = {"name": "big", "dictionary_check": "symbols", "ctranslate2_unsupported": None,
             "cpu": {"1": {"ctranslate2-int8": speed(2671.0), "fairseq": speed(916.0)},
                     "2": {"ctranslate2-int8": speed(1852.0), "fairseq": speed(1351.0)}}}
    assert notes({"models": [model]}) == [
        "big CTranslate2 int8: slower on 2 threads than on 1 (1852 against 2671 words/s) on this machine."]


def test_every_model_of_the_plot_gets_its_own_colour():
    # tab10 has ten colours: an eleventh model (the papers report has a teacher and ten students)
    # used to share the teacher's
    from fairseq_distill.report.report_output import model_colors

    for count in (1, 4, 10, 11, 20, 23):
        colours = model_colors(count)
        assert len(colours) == count
        assert len({tuple(round(c, 6) for c in colour) for colour in colours}) == count, count
    assert model_colors(0) == []
