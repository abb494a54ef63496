"""Issue 68, no silent loss round 6: a tool whose output is its own input, a model decoded with
another data-bin's dictionaries, shards of another batching, lines with nothing visible. Each
case lost data, or exited 0 with nonsense, before."""
import hashlib
import json
import os
import pathlib
import shutil

import numpy as np
import pytest
import torch

from fairseq_distill.errors import DistillError
from fairseq_distill.workdir import check_outputs

from helpers import REPO

OTHER_DATA_MODEL = os.path.join(REPO, "tests", "fixtures", "v0_1_checkpoints", "teacher.pt")


def digest(path):
    return hashlib.sha256(pathlib.Path(path).read_bytes()).hexdigest()


def tree(directory):
    """Every file under ``directory`` with its SHA-256."""
    return {os.path.relpath(os.path.join(folder, name), directory): digest(os.path.join(folder, name))
            for folder, _, names in os.walk(directory) for name in names}


def cli_error(main, argv):
    """What a front end printed as its one-line error (it exits; a traceback fails the test)."""
    with pytest.raises(SystemExit) as raised:
        main(argv)
    return str(raised.value)


@pytest.fixture
def run_dir(tiny_teacher, tmp_path):
    """A training run's folder as fairseq-train leaves it: checkpoint_best.pt and checkpoint_last.pt."""
    run = tmp_path / "run"
    run.mkdir()
    for name in ("checkpoint_best.pt", "checkpoint_last.pt"):
        shutil.copy(tiny_teacher, run / name)
    return run


@pytest.fixture
def other_symbols(tiny_data, tmp_path):
    """A copy of the data-bin whose dictionaries have the same size but two symbols swapped
    (lines 20 and 21 of each dict file: symbols 24 and 25)."""
    data = tmp_path / "other-symbols"
    shutil.copytree(tiny_data, data)
    for name in ("dict.de.txt", "dict.en.txt"):
        lines = (data / name).read_text(encoding="utf-8").splitlines(keepends=True)
        lines[20], lines[21] = lines[21], lines[20]
        (data / name).write_text("".join(lines), encoding="utf-8")
    return data


def swapped_symbols(tiny_data):
    lines = pathlib.Path(tiny_data, "dict.de.txt").read_text(encoding="utf-8").splitlines()
    return lines[20].split()[0], lines[21].split()[0]


# -- 1. an output that is, contains or lies inside an input ---------------------------------------

def test_check_outputs_refuses_the_input_itself_a_link_to_it_and_folders_around_it(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    (data / "dict.en.txt").write_text("a 1\n")
    os.symlink(data, tmp_path / "alias")
    os.link(data / "dict.en.txt", tmp_path / "hard.txt")
    cases = [
        (str(data), "is the input --data"),
        (str(tmp_path / "alias"), "is the input --data"),  # a symlink to it
        (str(data / "sub"), "lies inside the input --data"),
        (str(tmp_path), "contains the input --data"),
    ]
    for out, said in cases:
        with pytest.raises(DistillError, match=said):
            check_outputs([("--out", out)], [("--data", str(data))])
    with pytest.raises(DistillError, match="is the input --vocab"):  # a hard link to an input file
        check_outputs([("--out", str(tmp_path / "hard.txt"))], [("--vocab", str(data / "dict.en.txt"))])
    check_outputs([("--out", str(tmp_path / "data-out"))], [("--data", str(data))])  # a sibling is fine
    check_outputs([("--output", "-")], [("--input", "-")])  # standard streams are not files


def test_ctranslate2_export_into_the_checkpoints_folder_is_refused_even_with_force(tiny_data, run_dir):
    from fairseq_distill.cli.export_ctranslate2 import main

    before = tree(run_dir)
    said = cli_error(main, [str(run_dir / "checkpoint_best.pt"), tiny_data, str(run_dir), "--force"])
    assert said.startswith("export_ctranslate2: error: OUT_DIR") and "contains the input CHECKPOINT" in said
    assert tree(run_dir) == before  # both checkpoints still there, unchanged


def test_ctranslate2_export_into_the_data_bin_is_refused_even_with_force(tiny_data, tiny_teacher, tmp_path):
    from fairseq_distill.cli.export_ctranslate2 import main

    data = tmp_path / "data"
    shutil.copytree(tiny_data, data)
    before = tree(data)
    said = cli_error(main, [tiny_teacher, str(data), str(data), "--force"])
    assert "OUT_DIR" in said and "is the input DATA_BIN" in said
    assert tree(data) == before


def test_force_replaces_an_earlier_export_whole_and_nothing_else(tiny_data, tiny_teacher, tmp_path, monkeypatch):
    import fairseq_distill.deploy.ctranslate2_export as export

    out = tmp_path / "ct2"
    export.export_ctranslate2(tiny_teacher, tiny_data, str(out), "float32")
    first = tree(out)
    # an earlier export is replaced only with --force
    with pytest.raises(DistillError, match="holds an earlier CTranslate2 export; pass --force"):
        export.export_ctranslate2(tiny_teacher, tiny_data, str(out), "int8")
    # a conversion that fails half way leaves the earlier export as it was
    def fails(*args, **kwargs):
        raise DistillError("the converter failed")

    monkeypatch.setattr(export, "convert", fails)
    with pytest.raises(DistillError, match="the converter failed"):
        export.export_ctranslate2(tiny_teacher, tiny_data, str(out), "int8", force=True)
    assert tree(out) == first
    assert sorted(os.listdir(tmp_path)) == ["ct2"]  # nothing left beside it
    monkeypatch.undo()
    info = export.export_ctranslate2(tiny_teacher, tiny_data, str(out), "int8", force=True)
    assert info["quantization"] == "int8" and tree(out) != first
    assert json.loads((out / "fairseq_distill_deploy.json").read_text())["quantization"] == "int8"
    # a folder of other files is never emptied, --force or not
    other = tmp_path / "mine"
    other.mkdir()
    (other / "notes.txt").write_text("keep me")
    with pytest.raises(DistillError, match=r"holds files that are not an earlier CTranslate2 export \(notes.txt"):
        export.export_ctranslate2(tiny_teacher, tiny_data, str(other), "int8", force=True)
    assert (other / "notes.txt").read_text() == "keep me"


def test_export_student_onto_its_own_checkpoint_or_another_training_checkpoint_is_refused(run_dir, tmp_path):
    from fairseq_distill.cli.export_student import main

    best, last = run_dir / "checkpoint_best.pt", run_dir / "checkpoint_last.pt"
    before = tree(run_dir)
    said = cli_error(main, [str(best), str(best)])
    assert said.startswith("export_student: error: OUTPUT") and "is the input CHECKPOINT" in said
    said = cli_error(main, [str(best), str(last)])
    assert "exists and is not a decoding checkpoint written by this export" in said
    assert tree(run_dir) == before
    # an earlier export is replaced (the same tool's output), and what is written loads safely
    out = tmp_path / "student.pt"
    main([str(best), str(out)])
    main([str(best), str(out)])
    assert torch.load(out, weights_only=True)["optimizer_history"][-1]["optimizer_name"] == "none"
    assert not (tmp_path / "student.pt.partial").exists()


def test_a_report_over_another_report_or_a_file_of_the_user_is_refused(tiny_teacher, tmp_path):
    from fairseq_distill.report.report import check_earlier_report
    from fairseq_distill.report.report_inputs import ModelSpec
    from fairseq_distill.text.files import file_sha256

    other = tmp_path / "other.pt"
    other.write_bytes(b"another student")
    models = [ModelSpec("teacher", tiny_teacher, "teacher"), ModelSpec("s", str(other), "student")]
    out = str(tmp_path / "report")
    check_earlier_report(out, models, force=False)  # nothing there yet
    earlier = {"report": "fsd-report", "models": [{"name": "teacher", "sha256": file_sha256(tiny_teacher)},
                                                  {"name": "big", "sha256": "0" * 64}]}
    pathlib.Path(out + ".json").write_text(json.dumps(earlier))
    with pytest.raises(DistillError, match=r"is a report of other models \(it measured teacher, big; this run "
                                           r"measures teacher, s\): pass --force"):
        check_earlier_report(out, models, force=False)
    check_earlier_report(out, models, force=True)
    # the same models: a rerun replaces its own report
    earlier["models"][1] = {"name": "s", "sha256": file_sha256(other)}
    pathlib.Path(out + ".json").write_text(json.dumps(earlier))
    check_earlier_report(out, models, force=False)
    # the same names, other checkpoints
    earlier["models"][1]["sha256"] = "1" * 64
    pathlib.Path(out + ".json").write_text(json.dumps(earlier))
    with pytest.raises(DistillError, match=r"the same names, other checkpoints \(s\)"):
        check_earlier_report(out, models, force=False)
    # a JSON that is not a report, and a Markdown file without one, are never replaced
    pathlib.Path(out + ".json").write_text(json.dumps({"my": "data"}))
    with pytest.raises(DistillError, match="is not a report of fsd-report; .* even with --force"):
        check_earlier_report(out, models, force=True)
    readme = str(tmp_path / "README")
    pathlib.Path(readme + ".md").write_text("# my notes\n")
    with pytest.raises(DistillError, match=r"README.md exists but .*README.json does not"):
        check_earlier_report(readme, models, force=True)


def test_a_report_whose_work_dir_holds_a_model_is_refused(tiny_data, tiny_teacher, run_dir):
    from fairseq_distill.cli.report import main

    said = cli_error(main, [tiny_teacher, str(run_dir / "checkpoint_best.pt"), "--data", tiny_data,
                            "--out", str(run_dir.parent / "r"), "--work", str(run_dir)])
    assert "--work" in said and "contains the input student" in said


def test_translate_onto_its_own_input_is_refused_and_the_input_kept(tmp_path):
    from fairseq_distill.cli.translate import main

    text = tmp_path / "in.de"
    text.write_text("Ein Hund.\n")
    said = cli_error(main, ["--backend", "ctranslate2", "--model-dir", str(tmp_path / "m"),
                            "--input", str(text), "--output", str(text)])
    assert said.startswith("translate: error: --output") and "is the input --input" in said
    assert text.read_text() == "Ein Hund.\n"


def test_evaluate_writing_into_an_input_is_refused(tiny_data, tiny_teacher, tmp_path):
    from fairseq_distill.evaluation.evaluate import evaluate

    data = tmp_path / "data"
    shutil.copytree(tiny_data, data)
    before = tree(data)
    with pytest.raises(DistillError, match=r"--out .*dict.en.txt is the input DATA_BIN|lies inside the input DATA_BIN"):
        evaluate(tiny_teacher, str(data), out_json=str(data / "dict.en.txt"))
    assert tree(data) == before


def test_seqkd_and_cache_outputs_holding_the_teacher_or_the_source_are_refused(tiny_data, tiny_teacher, tmp_path):
    from fairseq_distill.cli.cache_teacher import main as cache_main
    from fairseq_distill.cli.seqkd import main as seqkd_main

    run = tmp_path / "run"
    run.mkdir()
    teacher = run / "teacher.pt"
    shutil.copy(tiny_teacher, teacher)
    mono = tmp_path / "mono.de"
    mono.write_text("Ein Hund.\n")
    said = cli_error(seqkd_main, ["--teacher", str(teacher), "--data", tiny_data, "--out", str(tmp_path / "o"),
                                  "--work", str(run)])
    assert "--work" in said and "contains the input --teacher" in said
    said = cli_error(seqkd_main, ["--teacher", str(teacher), "--data", tiny_data, "--out", str(mono),
                                  "--source", str(mono)])
    assert "is the input --source" in said
    said = cli_error(cache_main, ["--teacher", str(teacher), "--data", tiny_data, "--out", str(run), "--top-k", "4"])
    assert "contains the input --teacher" in said
    assert sorted(os.listdir(run)) == ["teacher.pt"] and mono.read_text() == "Ein Hund.\n"


# -- 2. a model beside a data-bin it was not trained on -------------------------------------------

def test_translate_with_other_symbols_of_the_same_size_names_the_file_and_symbol(tiny_data, tiny_teacher,
                                                                                 other_symbols):
    from fairseq_distill.deploy.translators import DecodingOptions, FairseqTranslator

    first, second = swapped_symbols(tiny_data)
    with pytest.raises(DistillError) as raised:
        FairseqTranslator(tiny_teacher, str(other_symbols), DecodingOptions())
    said = str(raised.value)
    assert f"its source dictionary differs from {other_symbols / 'dict.de.txt'} at index 24" in said
    assert f"the model has '{first}' where the file has '{second}'" in said
    FairseqTranslator(tiny_teacher, tiny_data, DecodingOptions())  # its own data: fine


def test_evaluate_and_export_with_other_symbols_are_refused_before_decoding(tiny_teacher, other_symbols, tmp_path):
    from fairseq_distill.cli.evaluate import main as evaluate_main
    from fairseq_distill.cli.export_ctranslate2 import main as export_main

    said = cli_error(evaluate_main, [tiny_teacher, str(other_symbols)])
    assert said.startswith("evaluate: error: ") and "dict.de.txt at index 24" in said
    said = cli_error(export_main, [tiny_teacher, str(other_symbols), str(tmp_path / "ct2")])
    assert said.startswith("export_ctranslate2: error: ") and "dict.de.txt at index 24" in said
    assert not (tmp_path / "ct2").exists()
    assert not [f for f in os.listdir(os.path.dirname(tiny_teacher)) if f.endswith(".eval.json")]


def test_a_dictionary_of_another_size_is_one_line_naming_it_not_a_size_mismatch_traceback(tiny_data, tmp_path):
    from fairseq_distill.cli.translate import main

    text = tmp_path / "in.de"
    text.write_text("Ein Hund.\n")
    # a model trained on other data (120 pieces), its dictionaries stored in the checkpoint
    said = cli_error(main, ["--checkpoint", OTHER_DATA_MODEL, "--data-bin", tiny_data, "--input", str(text)])
    assert said.startswith("translate: error: ") and "dict.de.txt" in said
    assert "differs from" in said or "symbols" in said
    # the same model with its dictionaries nowhere to be found: its embedding rows against the file
    state = torch.load(OTHER_DATA_MODEL, weights_only=False)
    state["task_state"] = {}
    state["cfg"]["task"]["data"] = str(tmp_path / "gone")
    torch.save(state, tmp_path / "lost.pt")
    said = cli_error(main, ["--checkpoint", str(tmp_path / "lost.pt"), "--data-bin", tiny_data,
                            "--input", str(text)])
    assert "its source embedding has 128 rows and " in said and "dict.de.txt" in said


def test_evaluate_reads_a_checkpoint_with_the_safe_loader(tiny_data, tmp_path):
    """A checkpoint is read for its weights only: a pickle that would run code is refused, and
    its code does not run."""
    from fairseq_distill.evaluation.evaluate import evaluate

    marker = tmp_path / "ran"

    class RunsCode:
        def __reduce__(self):
            return (pathlib.Path.touch, (marker,))

    torch.save({"model": {}, "payload": RunsCode()}, tmp_path / "evil.pt")
    with pytest.raises(DistillError, match=r"cannot read checkpoint '.*evil.pt'"):
        evaluate(str(tmp_path / "evil.pt"), tiny_data, out_json=str(tmp_path / "e.json"))
    assert not marker.exists()


# -- 3. shards of another batching ----------------------------------------------------------------

def test_a_cache_shard_made_with_another_max_tokens_is_made_again_or_refused_naming_both(
        tiny_data, tiny_teacher, tmp_path, capsys):
    """The natural retry after running out of memory: shard 0 made with --max-tokens 256, the
    whole run again with 1024. fairseq deals whole batches to shards, so shard 0 of the other
    batching would overlap shard 1: it is made again, saying why, and the merged cache is the
    one-pass cache bit for bit; a merge of shards of two batchings is refused, naming both."""
    from fairseq_distill.teacher.cache import TeacherCache
    from fairseq_distill.teacher.cache_writer import CacheJob, make_teacher_cache

    out = tmp_path / "cache"
    job = dict(data=tiny_data, out=str(out), teacher=tiny_teacher, cpu=True, top_k=4, num_shards=2)
    make_teacher_cache(CacheJob(**job, max_tokens=256, shard_id=0))
    make_teacher_cache(CacheJob(**job, max_tokens=1024, shard_id=1))
    with pytest.raises(DistillError, match=r"shards 0 and 1 were made with other settings: --max-tokens 256 "
                                           r"against 1024; make the odd one again"):
        make_teacher_cache(CacheJob(**{**job, "teacher": None}, max_tokens=1024, merge=True))
    capsys.readouterr()
    make_teacher_cache(CacheJob(**job, max_tokens=1024))
    said = capsys.readouterr().err
    assert "shard 0/2: made again: it was made with other settings: --max-tokens 256 against 1024" in said
    assert "shard 1/2: kept from an earlier run" in said
    whole = tmp_path / "whole"
    make_teacher_cache(CacheJob(data=tiny_data, out=str(whole), teacher=tiny_teacher, cpu=True, top_k=4,
                                max_tokens=1024))
    sharded, single = TeacherCache(str(out)), TeacherCache(str(whole))
    assert np.array_equal(np.asarray(sharded.indices[:]), np.asarray(single.indices[:]))
    assert np.array_equal(np.asarray(sharded.log_probs[:]), np.asarray(single.log_probs[:]))


def test_shards_decoded_with_another_batching_are_named_with_both_values():
    from fairseq_distill.seqkd.inputs import shard_batching
    from fairseq_distill.seqkd.merge import shard_settings
    from types import SimpleNamespace

    def args(backend="fairseq", num_shards=2, batch_size=16, max_tokens=None):
        return SimpleNamespace(backend=backend, num_shards=num_shards, batch_size=batch_size, max_tokens=max_tokens)

    assert shard_batching(args()) == {"batch_size": 16, "max_tokens": None}
    assert shard_batching(args(max_tokens=2000)) == {"batch_size": None, "max_tokens": 2000}
    assert shard_batching(args(num_shards=1)) == {}  # one shard holds everything, whatever the batching
    assert shard_batching(args(backend="ctranslate2")) == {}  # sentence i in shard i mod N
    headers = [{"settings": {"beam": 5, **shard_batching(args())}},
               {"settings": {"beam": 5, **shard_batching(args(batch_size=64))}}]
    with pytest.raises(DistillError, match=r"shards 0 and 1 of 2 were decoded with different settings "
                                           r"\(--batch-size 16 against 64\); decode shard 1 again"):
        shard_settings(headers, args())


@pytest.mark.slow
def test_seqkd_decodes_again_a_shard_of_another_batch_size_and_merges_whole(tiny_data, tiny_teacher, tmp_path,
                                                                            capsys):
    from fairseq_distill.seqkd.inputs import SeqKDJob
    from fairseq_distill.seqkd.job import make_seqkd_data

    out = tmp_path / "seqkd"
    common = dict(data=tiny_data, teacher=tiny_teacher, out=str(out), num_shards=2, beam=1)
    make_seqkd_data(SeqKDJob(**common, batch_size=16, shard_id=0))
    summary = make_seqkd_data(SeqKDJob(**common, batch_size=64))
    said = capsys.readouterr().out
    assert "shard 0/2: decoding again: it was decoded with other settings" in said
    assert "--batch-size 16 against 64" in said
    # every sentence once: no overlap of shards, no gap
    assert (summary["sentences"], summary["kept"], summary["missing_or_empty"]) == (400, 400, 0)


# -- 4. lines with nothing visible ----------------------------------------------------------------

class Echo:
    name = "echo"
    max_source_tokens = 100

    def __init__(self):
        self.seen = []

    def translate(self, batch):
        self.seen.extend(batch)
        return [["x"] for _ in batch]  # a model invents something for anything it is given


class Chars:
    def encode(self, line):
        return [c for c in line if not c.isspace()]

    def decode(self, pieces):
        return " ".join(pieces)


def test_lines_with_nothing_visible_get_an_empty_translation():
    from fairseq_distill.deploy.translators import translate_lines

    lines = ["a", "\u200b", "\ufeff", "\u200b \u2060\u00ad", "", "b"]
    translator = Echo()
    run = translate_lines(lines, translator, Chars(), progress=False)
    assert run.outputs == ["x", "", "", "", "", "x"]
    assert translator.seen == [["a"], ["b"]] and run.sentences == 2


def test_blank_binarized_sources_are_found_and_seqkd_names_them(tiny_data, tmp_path, capsys):
    from fairseq.data import Dictionary
    from fairseq.data.indexed_dataset import MMapIndexedDatasetBuilder

    from fairseq_distill.data_bin import blank_sources
    from fairseq_distill.seqkd.inputs import report_blank_sources

    data = tmp_path / "data"
    shutil.copytree(tiny_data, data)
    dictionary = Dictionary.load(str(data / "dict.de.txt"))
    assert "\u2581" in dictionary.indices  # sentencepiece's word boundary alone is a piece
    for lang in ("de", "en"):
        builder = MMapIndexedDatasetBuilder(str(data / f"test.de-en.{lang}.bin"), dtype=np.uint16)
        for line in ("\u2581 Hund", "", "\u2581", "Hund"):
            builder.add_item(dictionary.encode_line(line, add_if_not_exist=False, append_eos=True).long())
        builder.finalize(str(data / f"test.de-en.{lang}.idx"))
    assert blank_sources(str(data), "test", "de", "en") == [1, 2]
    # fsd-seqkd gives them empty targets (tests/test_seqkd_blank_sources.py), saying which
    assert report_blank_sources(["a", "", "\u2581", "\u200b @@", "b"], "data", "train") == [1, 2, 3]
    assert "3 source sentence(s) show nothing (only </s>, or only invisible characters; ids 1, 2, 3" in \
        capsys.readouterr().out


@pytest.mark.slow
def test_evaluate_gives_an_empty_hypothesis_for_a_blank_test_source(tiny_data, fluent_teacher, tmp_path):
    from fairseq.data import Dictionary
    from fairseq.data.indexed_dataset import MMapIndexedDataset, MMapIndexedDatasetBuilder

    from fairseq_distill.evaluation.evaluate import evaluate

    data = tmp_path / "data"
    shutil.copytree(tiny_data, data)
    dictionary = Dictionary.load(str(data / "dict.de.txt"))
    # the test source's sentence 2 becomes </s> alone, as stock tools binarize an invisible line
    prefix = str(data / "test.de-en.de")
    source = MMapIndexedDataset(prefix)
    rows = [source[i] for i in range(len(source))]
    builder = MMapIndexedDatasetBuilder(prefix + ".new.bin", dtype=np.uint16)
    for i, row in enumerate(rows):
        builder.add_item(torch.tensor([dictionary.eos()]) if i == 2 else torch.as_tensor(row).long())
    builder.finalize(prefix + ".new.idx")
    del source
    os.replace(prefix + ".new.bin", prefix + ".bin")
    os.replace(prefix + ".new.idx", prefix + ".idx")
    shutil.copy(fluent_teacher, tmp_path / "teacher.pt")
    record = evaluate(str(tmp_path / "teacher.pt"), str(data), beam=1)
    hyps = (tmp_path / "teacher.test.hyp.txt").read_text(encoding="utf-8").split("\n")
    assert record["blank_sources"] == 1 and hyps[2] == "" and len(hyps) == 41
    # what fairseq-generate wrote for it (its log): a sentence the model invented
    log = (tmp_path / "teacher.test.generate.log").read_text(encoding="utf-8")
    invented = next(line for line in log.splitlines() if line.startswith("D-2\t")).split("\t")[2]
    assert invented.strip(), "the model wrote nothing for the blank source: the test shows nothing"


def test_preparing_the_text_of_an_earlier_prepare_into_it_again_is_refused(tmp_path):
    """``--train-prefix OUT/raw/train --out OUT --force``: the run would rewrite OUT/raw while
    reading it."""
    from fairseq_distill.cli.prepare_corpus import main

    raw = tmp_path / "out" / "raw"
    raw.mkdir(parents=True)
    for split in ("train", "valid", "test"):
        for lang, text in (("de", "Ein Hund.\n"), ("en", "A dog.\n")):
            (raw / f"{split}.{lang}").write_text(text)
    before = tree(raw)
    said = cli_error(main, ["-s", "de", "-t", "en", "--train-prefix", str(raw / "train"),
                            "--valid-prefix", str(raw / "valid"), "--test-prefix", str(raw / "test"),
                            "--out", str(tmp_path / "out"), "--force"])
    assert f"its folder {raw} contains the input --train-prefix {raw / 'train.de'}" in said
    assert tree(raw) == before and sorted(os.listdir(tmp_path / "out")) == ["raw"]
