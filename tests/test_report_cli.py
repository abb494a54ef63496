"""fsd-report on tiny models, the installed command as a user runs it: its JSON, Markdown and
plot, and what must hold of them whatever the machine's speed."""
import json
import os
import re
import sys

import pytest
import torch

from helpers import run

pytestmark = pytest.mark.slow  # fairseq-generate, CTranslate2 exports, timed rounds

pytest.importorskip("ctranslate2")

REPORT = os.path.join(os.path.dirname(sys.executable), "fsd-report")
CPU_BACKENDS = ("ctranslate2-int8", "ctranslate2-float32", "fairseq")


def transformer_parameters(vocabulary, dim, ffn, encoder_layers=1, decoder_layers=1):
    """A post-norm fairseq Transformer with all embeddings shared and sinusoidal positions,
    counted by hand: each attention is 4 d×d matrices with biases, each layer norm 2d, the
    feed-forward d×ffn and ffn×d with biases; an encoder layer has one attention and two layer
    norms, a decoder layer two and three."""
    attention, norm, feed_forward = 4 * (dim * dim + dim), 2 * dim, 2 * dim * ffn + ffn + dim
    encoder = attention + 2 * norm + feed_forward
    decoder = 2 * attention + 3 * norm + feed_forward
    return vocabulary * dim + encoder_layers * encoder + decoder_layers * decoder


def all_strings(value):
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from all_strings(v)
    elif isinstance(value, list):
        for v in value:
            yield from all_strings(v)


def table(markdown, heading):
    """The rows of the first table under ``heading``, each a list of cells."""
    section = markdown.split(f"## {heading}\n", 1)[1]
    lines = [line for line in section.split("\n## ", 1)[0].splitlines() if line.startswith("| ")]
    return [[c.strip() for c in line.strip("|").split("|")] for line in lines[1:]]


@pytest.fixture(scope="module")
def report(tiny_data, fluent_teacher, tiny_teacher, tmp_path_factory):
    out = tmp_path_factory.mktemp("report") / "results" / "report_tiny"
    proc = run([REPORT, f"teacher={fluent_teacher}", f"student={tiny_teacher}", "--data", tiny_data,
                "--out", str(out), "--rounds", "2", "--threads", "1", "2", "--latency-sentences", "4",
                "--beam", "2"])
    with open(f"{out}.json", encoding="utf-8") as f:
        record = json.load(f)
    with open(f"{out}.md", encoding="utf-8") as f:
        markdown = f.read()
    return out, record, markdown, proc.stdout


def test_progress_lines_name_every_step(report):
    _, _, _, stdout = report
    for line in ("[report] 2 models on", "[report] teacher 'teacher': transformer, 31,104 parameters",
                 "[report] quality of 'student' (fairseq-generate)", "[report] round 2/2, 2 threads: student fairseq:",
                 "[report] round 1/2 done; about", "[report] wrote "):
        assert line in stdout, (line, stdout[-3000:])


def test_models_sizes_and_parameters(report, tiny_data):
    _, record, _, _ = report
    assert [(m["name"], m["role"]) for m in record["models"]] == [("teacher", "teacher"), ("student", "student")]
    with open(os.path.join(tiny_data, "dict.en.txt"), encoding="utf-8") as f:
        vocabulary = 4 + len(f.read().splitlines())  # <s>, <pad>, </s>, <unk> and the file's symbols
    teacher, student = record["models"]
    assert teacher["parameters"] == transformer_parameters(vocabulary, 32, 64)  # fluent_teacher: d 32, FFN 64
    assert student["parameters"] == transformer_parameters(vocabulary, 16, 32)  # tiny_teacher: d 16, FFN 32
    for m in record["models"]:
        sizes = m["size_bytes"]
        assert m["arch"] == "transformer" and m["ctranslate2_unsupported"] is None
        assert m["dictionary_check"] == "symbols"
        assert sizes["ctranslate2-int8"] < sizes["ctranslate2-float32"]
        # float32 weights: four bytes a parameter at least
        assert sizes["checkpoint"] >= 4 * m["parameters"] and sizes["ctranslate2-float32"] >= 4 * m["parameters"]
        assert len(m["sha256"]) == 64


def test_quality_and_the_paired_test(report):
    out, record, _, _ = report
    teacher, student = record["models"]
    # the teacher against itself: no difference, so not significant
    for metric in ("bleu", "chrf", "chrf++"):
        assert teacher["paired_test"][metric]["delta"] == 0 and not teacher["paired_test"][metric]["significant"]
        assert teacher["paired_test"][metric]["score"] == teacher["quality"]["fairseq"][metric]
        assert student["paired_test"][metric]["baseline"] == teacher["quality"]["fairseq"][metric]
    assert student["paired_test"]["bleu"]["score"] == student["quality"]["fairseq"]["bleu"]
    assert 0 <= student["paired_test"]["bleu"]["p_value"] <= 1
    assert record["paired_test"]["baseline"] == "teacher" and record["paired_test"]["test"] == "bootstrap"
    for m in record["models"]:
        assert m["int8_bleu_delta"] == pytest.approx(m["quality"]["ctranslate2-int8"]["bleu"]
                                                     - m["quality"]["ctranslate2-float32"]["bleu"], abs=0.011)
        for backend, q in m["quality"].items():
            path = os.path.join(os.path.dirname(str(out)), q["hypotheses"])
            with open(path, encoding="utf-8") as f:
                assert len(f.read().split("\n")) - 1 == record["data"]["sentences"] == 40, (m["name"], backend)


def test_timings_are_the_fastest_round_of_each(report):
    _, record, _, _ = report
    words = record["data"]["source_words"]
    assert record["timing"] == {"rounds": 2, "threads": [1, 2], "latency_sentences": 4}
    for m in record["models"]:
        assert set(m["cpu"]) == {"1", "2"}
        for threads, backends in m["cpu"].items():
            assert set(backends) == set(CPU_BACKENDS)
            for backend, s in backends.items():
                assert len(s["words_per_second_rounds"]) == 2
                assert s["words_per_second"] == max(s["words_per_second_rounds"])
                # rates as rounded in the JSON (0.1 words/s, 0.01 sentences/s, a microsecond)
                assert s["words_per_second"] == pytest.approx(words / s["seconds"], abs=0.06, rel=1e-4)
                assert s["sentences"] == 40
                assert s["sentences_per_second"] == pytest.approx(40 / s["seconds"], abs=0.006, rel=1e-4)
                lat = s["latency_ms"]
                assert 0 < lat["p50_ms"] <= lat["p95_ms"] and len(s["latency_ms_rounds"]) == 2
    if torch.cuda.is_available():  # speed over the whole test set, or why not
        assert record["gpu"]["measured"] and record["gpu"]["device"] == torch.cuda.get_device_name(0)
        for m in record["models"]:
            assert set(m["gpu"]) == {"ctranslate2-float16", "fairseq-fp16"}
            assert all("skipped" in s or s["words_per_second"] > 0 for s in m["gpu"].values())
    else:
        assert record["gpu"] == {"measured": False, "device": None, "note": "no CUDA device on this machine"}
        assert all(m["gpu"] is None for m in record["models"])


def test_the_machine_is_named(report):
    _, record, markdown, _ = report
    with open("/proc/cpuinfo") as f:
        model = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    machine = record["machine"]
    assert machine["cpu"].startswith(" ".join(model.split())) and machine["cores"] == os.cpu_count()
    assert f"Machine: {machine['cpu']}, {machine['cores']} cores" in markdown


def test_json_paths_are_relative(report):
    out, record, _, _ = report
    assert not [s for s in all_strings(record) if s.startswith("/")]
    root = os.path.dirname(str(out))
    assert os.path.isdir(os.path.join(root, record["data"]["data_bin"]))
    for m in record["models"]:
        assert os.path.isfile(os.path.join(root, m["checkpoint"]))
    assert record["files"] == {"markdown": "report_tiny.md", "plot": "report_tiny.png", "work": "report_tiny.work"}


def test_markdown_tables_carry_the_json(report):
    _, record, markdown, _ = report
    rows = table(markdown, "Quality and size")
    assert [r[0] for r in rows] == ["teacher (teacher)", "student"]
    for row, m in zip(rows, record["models"]):
        assert row[1] == f"{m['parameters']:,}" and row[2] == f"{m['quality']['fairseq']['bleu']:.2f}"
    one = table(markdown, "CPU speed, 1 thread")
    for row, m in zip(one, record["models"]):
        assert row[1] == f"{m['cpu']['1']['ctranslate2-int8']['words_per_second']:.0f}"
        assert row[7] == f"{m['cpu']['1']['fairseq']['words_per_second']:.0f}"
    assert one[0][2] == "1.00"
    latency = table(markdown, "Latency at batch size 1, 2 threads (ms)")
    assert latency[1][1] == f"{record['models'][1]['cpu']['2']['ctranslate2-int8']['latency_ms']['p50_ms']:.1f}"
    assert re.search(r"## GPU\n\nNot measured: ", markdown) or record["gpu"]["measured"]


def test_the_pareto_plot(report):
    out, record, markdown, _ = report
    from matplotlib.image import imread

    image = imread(f"{out}.png")
    assert image.shape[0] > 200 and image.shape[1] > 300
    assert f"![BLEU against words/s](report_tiny.png)" in markdown
    points = [(m["name"], b, m["cpu"]["1"][b]["words_per_second"], m["quality"][b]["bleu"])
              for m in record["models"] for b in CPU_BACKENDS]
    front = {(p["model"], p["backend"]) for p in record["pareto_front"]}
    fastest = max(points, key=lambda p: (p[2], p[3]))
    best = max(points, key=lambda p: (p[3], p[2]))
    assert (fastest[0], fastest[1]) in front and (best[0], best[1]) in front
    # no point of the front is beaten on both by another point
    for name, backend, speed, bleu in points:
        if (name, backend) in front:
            assert not any(s >= speed and b >= bleu and (s, b) != (speed, bleu) for _, _, s, b in points)
