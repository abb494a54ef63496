"""Issue 68, the output rules for every fsd-* tool: no output is, contains or lies inside an
input; an existing file is replaced only where it is the tool's own earlier output (of other
inputs only with --force), never another file; outputs are written aside and moved in whole.
Before, fsd-benchmark-score, fsd-evaluate-depths, fsd-alp-heatmap, fsd-a2d-heatmap,
``fsd-evaluate --ctranslate2 --out`` and ``fsd-compare --json`` wrote with a plain open()."""
import hashlib
import json
import os
import pathlib
import shutil

import pytest

from fairseq_distill.errors import DistillError


def digest(path):
    return hashlib.sha256(pathlib.Path(path).read_bytes()).hexdigest()


def cli_error(main, argv):
    """What a front end printed as its one-line error (it exits; a traceback fails the test)."""
    with pytest.raises(SystemExit) as raised:
        main(argv)
    assert raised.value.code not in (0, None)
    return str(raised.value)


# -- fsd-benchmark-score ----------------------------------------------------------------------

@pytest.fixture
def scored(tmp_path):
    """An iwslt14_de_en text directory, an fsd-evaluate record and its hypotheses."""
    text = tmp_path / "text"
    text.mkdir()
    refs = "the house is small .\nit is a test .\n"
    (text / "test.en").write_text(refs)
    (text / "test.orig.en").write_text("The house is small.\nIt is a test.\n")
    hyps = tmp_path / "teacher.test.hyp.txt"
    hyps.write_text(refs)
    record = tmp_path / "teacher.json"
    record.write_text(json.dumps({"checkpoint": "/x/teacher.pt", "subset": "test", "bleu": 100.0,
                                  "hypotheses": str(hyps)}))
    return text, record, hyps


def score_argv(text, record, out, *extra):
    return ["score", "iwslt14_de_en", "--text", str(text), "--eval", str(record), "--out", str(out), *extra]


def test_score_onto_its_own_evaluation_record_is_refused_and_the_record_kept(scored):
    from fairseq_distill.cli.benchmark_score import main

    text, record, hyps = scored
    before = digest(record), digest(hyps)
    said = cli_error(main, score_argv(text, record, record))
    assert said.startswith("benchmark-score: error: --out") and "is the input --eval" in said
    said = cli_error(main, score_argv(text, record, hyps))
    assert "is the input the hypotheses of --eval" in said
    said = cli_error(main, score_argv(text, record, text / "scores.json"))
    assert "lies inside the input --text" in said
    assert (digest(record), digest(hyps)) == before and sorted(os.listdir(text)) == ["test.en", "test.orig.en"]


def test_score_replaces_its_own_scores_only(scored, tmp_path):
    from fairseq_distill.cli.benchmark_score import main

    text, record, _ = scored
    out = tmp_path / "teacher.scores.json"
    main(score_argv(text, record, out))
    first = json.loads(out.read_text())
    assert first["sacrebleu"] == 100.0 and first["evaluation"] == str(record)
    main(score_argv(text, record, out))  # a rerun replaces its own scores
    assert json.loads(out.read_text()) == first
    # the scores of another evaluation: only with --force
    other = tmp_path / "student.json"
    shutil.copy(record, other)
    said = cli_error(main, score_argv(text, other, out))
    assert f"is the scores of another evaluation ({record})" in said and "pass --force" in said
    assert json.loads(out.read_text()) == first
    main(score_argv(text, other, out, "--force"))
    assert json.loads(out.read_text())["evaluation"] == str(other)
    # a file that is not a scores record: never, even with --force
    notes = tmp_path / "notes.json"
    notes.write_text('{"my": "notes"}')
    said = cli_error(main, score_argv(text, record, notes, "--force"))
    assert "is not the scores of fsd-benchmark-score" in said and "even with --force" in said
    assert notes.read_text() == '{"my": "notes"}'
    assert [n for n in os.listdir(tmp_path) if ".partial" in n] == []


def test_score_of_a_file_that_is_no_evaluation_record_is_one_line(scored, tmp_path):
    from fairseq_distill.cli.benchmark_score import main

    text, _, _ = scored
    bad = tmp_path / "bad.json"
    bad.write_text('{"bleu": 3}')
    said = cli_error(main, score_argv(text, bad, tmp_path / "s.json"))
    assert "--eval" in said and "names no hypotheses" in said and "fsd-evaluate" in said
    bad.write_text("not json")
    assert "is not a JSON record of fsd-evaluate" in cli_error(main, score_argv(text, bad, tmp_path / "s.json"))


def test_table_refuses_a_markdown_file_of_the_user_and_replaces_its_own(scored, tmp_path):
    from fairseq_distill.cli.benchmark_score import main

    text, record, _ = scored
    evals = tmp_path / "eval"
    evals.mkdir()
    main(score_argv(text, record, evals / "teacher.scores.json"))
    rows = tmp_path / "rows.tsv"
    rows.write_text("")
    argv = ["table", "iwslt14_de_en", "--rows", str(rows), "--eval", str(evals)]
    notes = tmp_path / "NOTES.md"
    notes.write_text("# my notes\n")
    said = cli_error(main, argv + ["--out", str(notes)])
    assert "NOTES.md exists but" in said and "NOTES.json does not" in said
    assert notes.read_text() == "# my notes\n"
    assert "lies inside the input --eval" in cli_error(main, argv + ["--out", str(evals / "results.md")])
    out = tmp_path / "results.md"
    main(argv + ["--out", str(out)])
    main(argv + ["--out", str(out)])  # its own table: replaced
    assert json.loads((tmp_path / "results.json").read_text())["corpus"] == "iwslt14_de_en"


# -- fsd-evaluate-depths ----------------------------------------------------------------------

@pytest.fixture
def fake_evaluate(monkeypatch):
    """fsd-evaluate's scores without decoding (the tests are about the files written)."""
    import fairseq_distill.evaluation.depth_grid as depths

    calls = []

    def evaluate(checkpoint, data_bin, subset, **kw):
        calls.append(kw["tag"])
        return {"bleu": 10.0, "chrf": 20.0, "tokens_per_second": 100.0, "sentences_per_second": 10.0,
                "bleu_signature": "b", "chrf_signature": "c", "hypotheses": "h", "references": "r"}

    monkeypatch.setattr(depths, "evaluate", evaluate)
    return calls


def depths_argv(checkpoint, data, out, *extra):
    return [str(checkpoint), str(data), "--out", str(out), "--prune", "left", "--encoder-depths", "1",
            "--decoder-depths", "1", *extra]


def test_evaluate_depths_into_its_inputs_or_over_another_file_is_refused_before_decoding(
        tiny_data, tiny_teacher, tmp_path, fake_evaluate):
    from fairseq_distill.cli.evaluate_depths import main

    data = tmp_path / "data"
    shutil.copytree(tiny_data, data)
    names = sorted(os.listdir(data))
    said = cli_error(main, depths_argv(tiny_teacher, data, data / "grid"))
    assert said.startswith("evaluate_depths: error: --out") and "lies inside the input DATA_BIN" in said
    checkpoint = tmp_path / "teacher.pt"
    shutil.copy(tiny_teacher, checkpoint)
    kept = digest(checkpoint)
    # OUT.md and OUT.png of a report: the .json is missing, so they are not a grid
    (tmp_path / "report.md").write_text("# a report\n")
    said = cli_error(main, depths_argv(checkpoint, data, tmp_path / "report", "--force"))
    assert "report.md exists but" in said and "report.json does not" in said and "even with --force" in said
    (tmp_path / "report.json").write_text('{"report": "fsd-report"}')
    said = cli_error(main, depths_argv(checkpoint, data, tmp_path / "report", "--force"))
    assert "report.json exists and is not the depth grid of fsd-evaluate-depths" in said
    assert fake_evaluate == [] and sorted(os.listdir(data)) == names and digest(checkpoint) == kept
    assert (tmp_path / "report.md").read_text() == "# a report\n"


def test_evaluate_depths_replaces_its_own_grid_and_another_model_s_only_with_force(
        tiny_data, tiny_teacher, tmp_path, fake_evaluate, capsys):
    from fairseq_distill.cli.evaluate_depths import main

    first, second = tmp_path / "a.pt", tmp_path / "b.pt"
    shutil.copy(tiny_teacher, first)
    shutil.copy(tiny_teacher, second)
    out = tmp_path / "results" / "grid"
    main(depths_argv(first, tiny_data, out))
    record = json.loads(pathlib.Path(f"{out}.json").read_text())
    assert record["tool"] == "fsd-evaluate-depths" and record["checkpoint"] == str(first)
    assert record["data"] == os.path.abspath(tiny_data) and len(record["rows"]) == 1
    assert pathlib.Path(f"{out}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    main(depths_argv(first, tiny_data, out))  # a rerun replaces its own grid
    said = cli_error(main, depths_argv(second, tiny_data, out))
    assert f"is the depth grid of another checkpoint ({first})" in said and "pass --force" in said
    assert json.loads(pathlib.Path(f"{out}.json").read_text())["checkpoint"] == str(first)
    assert len(fake_evaluate) == 2  # refused before decoding
    main(depths_argv(second, tiny_data, out, "--force"))
    assert json.loads(pathlib.Path(f"{out}.json").read_text())["checkpoint"] == str(second)
    assert sorted(os.listdir(out.parent)) == ["grid.json", "grid.md", "grid.png"]


def test_evaluate_depths_that_fails_writing_leaves_the_earlier_grid_whole(tiny_data, tiny_teacher, tmp_path,
                                                                          fake_evaluate, monkeypatch):
    import fairseq_distill.evaluation.depth_grid as depths
    from fairseq_distill.cli.evaluate_depths import main

    out = tmp_path / "grid"
    main(depths_argv(tiny_teacher, tiny_data, out))
    before = {ext: digest(f"{out}{ext}") for ext in (".json", ".md", ".png")}

    def broken_plot(*args, **kwargs):
        raise OSError(28, "No space left on device", str(tmp_path / "x.png"))

    monkeypatch.setattr(depths, "draw_grid", broken_plot)
    assert "no space left" in cli_error(main, depths_argv(tiny_teacher, tiny_data, out, "--beam", "5"))
    assert {ext: digest(f"{out}{ext}") for ext in (".json", ".md", ".png")} == before
    assert sorted(os.listdir(tmp_path)) == ["grid.json", "grid.md", "grid.png"]


# -- fsd-alp-heatmap and fsd-a2d-heatmap ------------------------------------------------------

A2D = {"encoder_self": {"weight": [[0.5]], "bias": [0.0], "student": [1, 1], "teacher": [1, 1]}}
ALP = {"encoder": [{"student_layer": 1, "weights": [0.0, 1.0]}]}


@pytest.fixture
def fake_heatmaps(monkeypatch, tiny_data):
    import fairseq_distill.cli.a2d_heatmap as a2d
    import fairseq_distill.cli.alp_heatmap as alp
    from omegaconf import OmegaConf

    calls = []
    monkeypatch.setattr(a2d, "alignment_matrices", lambda checkpoint: calls.append(checkpoint) or A2D)
    stored = OmegaConf.create({"task": {"data": tiny_data, "teacher_path": None}})
    monkeypatch.setattr(alp, "load_training_checkpoint", lambda path, criterion: {"cfg": stored})
    monkeypatch.setattr(alp, "average_alp_weights", lambda *a, **kw: calls.append(a[0]) or ALP)
    return calls


@pytest.mark.parametrize("tool", ["a2d", "alp"])
def test_a_heat_map_onto_its_checkpoint_or_another_file_is_refused(tool, tiny_data, run_dir, tmp_path,
                                                                  fake_heatmaps):
    from fairseq_distill.cli import a2d_heatmap, alp_heatmap

    main = {"a2d": a2d_heatmap.main, "alp": alp_heatmap.main}[tool]
    checkpoint = run_dir / "checkpoint_last.pt"
    kept = digest(checkpoint)
    said = cli_error(main, [str(checkpoint), "--out", str(checkpoint)])
    assert "--out" in said and "is the input CHECKPOINT" in said
    said = cli_error(main, [str(checkpoint), "--out", str(tmp_path / "map.json")])
    assert "--out" in said and "map.json is where the matrices go" in said
    # a PNG of the user (no JSON beside it), and the other tool's heat map: never replaced
    (tmp_path / "photo.png").write_bytes(b"\x89PNG my photo")
    said = cli_error(main, [str(checkpoint), "--out", str(tmp_path / "photo.png")])
    assert "photo.png exists but" in said and "photo.json does not" in said
    other = {"a2d": ALP, "alp": A2D}[tool]
    (tmp_path / "other.json").write_text(json.dumps(other))
    (tmp_path / "other.png").write_bytes(b"\x89PNG other")
    said = cli_error(main, [str(checkpoint), "--out", str(tmp_path / "other.png")])
    assert "other.json exists and is not the heat map of" in said
    if tool == "alp":  # the data the checkpoint names is an input too
        said = cli_error(main, [str(checkpoint), "--out", os.path.join(tiny_data, "alp.png")])
        assert "lies inside the input the checkpoint's data" in said
    assert fake_heatmaps == [] and digest(checkpoint) == kept
    assert (tmp_path / "photo.png").read_bytes() == b"\x89PNG my photo"
    assert json.loads((tmp_path / "other.json").read_text()) == other


@pytest.mark.parametrize("tool", ["a2d", "alp"])
def test_a_heat_map_replaces_its_own_earlier_one_whole(tool, run_dir, tmp_path, fake_heatmaps, capsys):
    from fairseq_distill.cli import a2d_heatmap, alp_heatmap

    main = {"a2d": a2d_heatmap.main, "alp": alp_heatmap.main}[tool]
    checkpoint = str(run_dir / "checkpoint_last.pt")
    out = tmp_path / "maps" / f"{tool}.png"
    main([checkpoint, "--out", str(out)])
    main([checkpoint, "--out", str(out)])
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert json.loads((tmp_path / "maps" / f"{tool}.json").read_text()) == {"a2d": A2D, "alp": ALP}[tool]
    assert sorted(os.listdir(out.parent)) == [f"{tool}.json", f"{tool}.png"]
    assert f"replaced the earlier heat map {out}" in capsys.readouterr().out


@pytest.fixture
def run_dir(tiny_teacher, tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    shutil.copy(tiny_teacher, run / "checkpoint_last.pt")
    return run


# -- fsd-evaluate and fsd-compare -------------------------------------------------------------

def test_evaluate_backends_table_onto_the_checkpoint_is_refused(tiny_data, run_dir, monkeypatch):
    import fairseq_distill.cli.evaluate as cli

    monkeypatch.setattr(cli, "evaluate_backends", lambda *a, **kw: [])
    monkeypatch.setattr(cli, "backends_table", lambda rows: "")
    checkpoint = run_dir / "checkpoint_last.pt"
    kept = digest(checkpoint)
    said = cli_error(cli.main, [str(checkpoint), tiny_data, "--ctranslate2", str(run_dir / "ct2"),
                                "--out", str(checkpoint)])
    assert said.startswith("evaluate: error: --out") and "is the input CHECKPOINT" in said
    assert digest(checkpoint) == kept
    notes = run_dir / "notes.json"
    notes.write_text("{}")
    said = cli_error(cli.main, [str(checkpoint), tiny_data, "--ctranslate2", str(run_dir / "ct2"),
                                "--out", str(notes)])
    assert "is not the backend comparison of fsd-evaluate" in said and notes.read_text() == "{}"


def test_evaluate_over_a_file_that_is_no_evaluation_is_refused_before_decoding(tiny_data, tiny_teacher, tmp_path,
                                                                              monkeypatch):
    import fairseq_distill.evaluation.evaluate as evaluation

    def no_decoding(*a, **kw):
        raise AssertionError("decoded")

    monkeypatch.setattr(evaluation, "run_generate", no_decoding)
    report = tmp_path / "report.json"
    report.write_text('{"report": "fsd-report", "models": []}')
    with pytest.raises(DistillError, match=r"report.json exists and is not the record of fsd-evaluate"):
        evaluation.evaluate(tiny_teacher, tiny_data, out_json=str(report))
    assert json.loads(report.read_text()) == {"report": "fsd-report", "models": []}


def test_compare_json_over_a_file_that_is_no_comparison_is_refused(tmp_path):
    from fairseq_distill.cli.compare import main

    refs = tmp_path / "refs.txt"
    refs.write_text("a b c\nd e f\n")
    out = tmp_path / "compare.json"
    argv = ["--references", str(refs), "--baseline", f"b={refs}", "--system", f"s={refs}", "--samples", "10",
            "--json", str(out)]
    main(argv)
    assert json.loads(out.read_text())["baseline"] == "b"
    main(argv)  # its own comparison: replaced
    notes = tmp_path / "notes.json"
    notes.write_text('{"my": "notes"}')
    said = cli_error(main, argv[:-1] + [str(notes)])
    assert "is not the comparison of fsd-compare" in said and notes.read_text() == '{"my": "notes"}'


# -- fsd-seqkd and fsd-prepare-corpus: a directory replaced whole ---------------------------------

def test_seqkd_out_over_a_directory_it_did_not_write_is_refused_before_decoding(tiny_data, tiny_teacher, tmp_path):
    """The merge moves the new data into --out's place and deletes what was there: a directory of
    the user's (another data-bin, a results folder) was deleted, exit 0."""
    from fairseq_distill.cli.seqkd import main

    mine = tmp_path / "experiments"
    mine.mkdir()
    (mine / "notes.txt").write_text("a month of notes\n")
    said = cli_error(main, ["--teacher", tiny_teacher, "--data", tiny_data, "--out", str(mine)])
    assert said.startswith("seqkd: error: --out") and "is not a data directory of fsd-seqkd" in said
    assert "give a new --out" in said
    assert sorted(os.listdir(mine)) == ["notes.txt"] and not os.path.exists(f"{mine}.work")
    (tmp_path / "file").write_text("x")
    assert "is a file" in cli_error(main, ["--teacher", tiny_teacher, "--data", tiny_data, "--out",
                                           str(tmp_path / "file")])


def test_seqkd_out_may_be_empty_or_its_own_earlier_data(tmp_path):
    from fairseq_distill.seqkd.output import check_out

    check_out(str(tmp_path / "new"))
    (tmp_path / "empty").mkdir()
    check_out(str(tmp_path / "empty"))
    (tmp_path / "empty" / ".done.begun").write_text("stage\n")  # recipes/common.sh's marker of a begun stage
    check_out(str(tmp_path / "empty"))
    own = tmp_path / "own"
    own.mkdir()
    (own / "train.de-en.de.bin").write_bytes(b"")
    (own / "seqkd_made_from.json").write_text("{}")
    check_out(str(own))


def test_prepare_corpus_over_a_data_bin_it_did_not_make_is_refused(tmp_path):
    """``--out DIR`` whose DIR/bin is a stock fairseq-preprocess output (no fairseq_distill.json):
    the run would replace it."""
    from fairseq_distill.cli.prepare_corpus import main

    raw = tmp_path / "raw"
    raw.mkdir()
    for split in ("train", "valid", "test"):
        for lang, text in (("de", "Ein Hund.\n"), ("en", "A dog.\n")):
            (raw / f"{split}.{lang}").write_text(text)
    out = tmp_path / "out"
    (out / "bin").mkdir(parents=True)
    (out / "bin" / "dict.de.txt").write_text("hund 1\n")
    argv = ["-s", "de", "-t", "en", "--train-prefix", str(raw / "train"), "--valid-prefix", str(raw / "valid"),
            "--test-prefix", str(raw / "test"), "--out", str(out)]
    for extra in ([], ["--force"]):
        said = cli_error(main, argv + extra)
        assert f"{out / 'bin'} was not made by fsd-prepare-corpus" in said and "even with --force" in said
    assert sorted(os.listdir(out)) == ["bin"] and (out / "bin" / "dict.de.txt").read_text() == "hund 1\n"


# -- fsd-benchmark-corpus ---------------------------------------------------------------------

def test_a_benchmark_corpus_is_not_written_over_text_it_did_not_write(tmp_path):
    """--out holding a user's own train.de (no counts.json): before, the protocol replaced it."""
    from fairseq_distill.cli import benchmark_corpus

    out = tmp_path / "text"
    out.mkdir()
    (out / "train.de").write_text("my own corpus\n")
    archive = tmp_path / "de-en.tgz"
    archive.write_bytes(b"not read: the folder is refused first")
    said = cli_error(benchmark_corpus.main, ["iwslt14_de_en", "--archive", str(archive), "--out", str(out)])
    assert "holds train.de but no counts.json" in said and "give another --out" in said
    assert (out / "train.de").read_text() == "my own corpus\n"
    assert sorted(p.name for p in out.iterdir()) == ["train.de"]
    # a counts.json that is not this tool's record does not make the folder its own
    (out / "counts.json").write_text("[1, 2]")
    said = cli_error(benchmark_corpus.main, ["iwslt14_de_en", "--archive", str(archive), "--out", str(out)])
    assert "is not a record of fsd-benchmark-corpus" in said
    assert (out / "train.de").read_text() == "my own corpus\n"
