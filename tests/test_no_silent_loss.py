"""Issue 49, no silent loss round 4: interrupted and concurrent runs, stale shards, outputs
written into their own input, full disks. Each case failed (or lost data with exit 0) before."""
import json
import os
import shutil
from types import SimpleNamespace

import numpy as np
import pytest

from fairseq_distill.errors import DistillError
from fairseq_distill.teacher.cache import INDICES_FILE, LOG_PROBS_FILE, META_FILE, TeacherCache
from fairseq_distill.teacher.cache_writer import CacheJob, make_teacher_cache
from fairseq_distill.workdir import LOCK_FILE, DirectoryLock, check_output_dir


def files_of(directory):
    return {name: os.path.getmtime(os.path.join(directory, name)) for name in sorted(os.listdir(directory))}


# -- outputs inside their own input ---------------------------------------------------------------

def test_an_output_equal_to_or_inside_the_data_is_refused_before_anything_is_written(tiny_data, tmp_path):
    from fairseq_distill.cli.seqkd import main as seqkd_main
    from fairseq_distill.cli.cache_teacher import main as cache_main

    data = tmp_path / "data"
    shutil.copytree(tiny_data, data)
    before = files_of(data)
    for out in (str(data), str(data) + "/", str(data / "seqkd")):
        with pytest.raises(SystemExit) as raised:
            seqkd_main(["--teacher", "t.pt", "--data", str(data), "--out", out])
        assert "--out" in str(raised.value) and "data directory" in str(raised.value)
        with pytest.raises(SystemExit) as raised:
            cache_main(["--teacher", "t.pt", "--data", str(data), "--out", out])
        assert "--out" in str(raised.value) and "data directory" in str(raised.value)
    assert files_of(data) == before  # nothing written, nothing created
    check_output_dir(str(tmp_path / "data-out"), str(data))  # a sibling is fine


# -- one run per directory ------------------------------------------------------------------------

def dead_pid():
    """A pid no process has (above any kernel's pid_max)."""
    return 2 ** 30


def test_a_directory_in_use_is_refused_naming_the_owner_and_a_stale_lock_is_taken_over(tmp_path, capsys):
    work = tmp_path / "work"
    with DirectoryLock(str(work), "fsd-seqkd"):
        with pytest.raises(DistillError, match=rf"{work} is in use by fsd-seqkd \(pid {os.getpid()},"):
            DirectoryLock(str(work), "fsd-seqkd").acquire()
        # a shard alone is refused too while the whole directory is held
        with pytest.raises(DistillError, match="is in use"):
            DirectoryLock(str(work), "fsd-seqkd", part=1).acquire()
    assert not (work / LOCK_FILE).exists()  # released
    # shards side by side lock their own parts; the whole directory waits for them
    with DirectoryLock(str(work), "fsd-seqkd", part=0), DirectoryLock(str(work), "fsd-seqkd", part=1):
        with pytest.raises(DistillError, match="is in use"):
            DirectoryLock(str(work), "fsd-seqkd").acquire()
    # a lock left by a process that is gone
    (work / LOCK_FILE).write_text(json.dumps({"pid": dead_pid(), "host": os.uname().nodename, "tool": "fsd-seqkd"}))
    with DirectoryLock(str(work), "fsd-cache-teacher"):
        assert json.loads((work / LOCK_FILE).read_text())["pid"] == os.getpid()
    assert "taking over the lock of a run that is gone" in capsys.readouterr().err


def test_two_cache_runs_into_one_directory(tiny_data, tiny_teacher, tmp_path):
    out = tmp_path / "cache"
    out.mkdir()
    (out / LOCK_FILE).write_text(json.dumps({"pid": os.getpid(), "host": os.uname().nodename,
                                             "tool": "fsd-cache-teacher", "started": "now"}))
    with pytest.raises(DistillError, match="is in use by fsd-cache-teacher"):
        make_teacher_cache(CacheJob(data=tiny_data, out=str(out), teacher=tiny_teacher, cpu=True, top_k=4))
    assert sorted(os.listdir(out)) == [LOCK_FILE]  # the other run's directory is untouched


# -- the teacher cache: never half-written where it is read ---------------------------------------

@pytest.fixture
def cache_dir(tiny_data, tiny_teacher, tmp_path):
    out = tmp_path / "cache"
    make_teacher_cache(CacheJob(data=tiny_data, out=str(out), teacher=tiny_teacher, cpu=True, top_k=4,
                                max_tokens=800))
    return out


def test_a_rerun_into_a_finished_cache_keeps_it(tiny_data, tiny_teacher, cache_dir, capsys):
    before = files_of(cache_dir)
    make_teacher_cache(CacheJob(data=tiny_data, out=str(cache_dir), teacher=tiny_teacher, cpu=True, top_k=4,
                                max_tokens=800))
    assert "already a finished cache of this teacher, data and settings" in capsys.readouterr().err
    assert files_of(cache_dir) == before


def test_a_merge_interrupted_while_replacing_a_finished_cache_leaves_no_readable_cache(
        tiny_data, tiny_teacher, cache_dir, monkeypatch):
    """issue 49.1: rebuilding a finished cache (other settings) and dying during the merge kept
    the old meta.json over arrays being rewritten (5,637 of 12,420 rows zero, trained on). Now
    the old arrays stay whole until the switch, and the switch removes meta.json first."""
    import fairseq_distill.teacher.cache_writer as writer

    old = TeacherCache(str(cache_dir))
    old_rows = np.array(old.log_probs[:])
    real_replace = os.replace
    calls = []

    def dies_on_the_second_array(src, dst):
        calls.append(dst)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real_replace(src, dst)

    monkeypatch.setattr(writer.os, "replace", dies_on_the_second_array)
    with pytest.raises(KeyboardInterrupt):
        make_teacher_cache(CacheJob(data=tiny_data, out=str(cache_dir), teacher=tiny_teacher, cpu=True, top_k=4,
                                    max_tokens=800, temperature=2.0))
    monkeypatch.setattr(writer.os, "replace", real_replace)
    with pytest.raises(DistillError, match="is not a finished teacher cache"):
        TeacherCache(str(cache_dir))
    # the same command again finishes it; the arrays are the new ones, whole
    make_teacher_cache(CacheJob(data=tiny_data, out=str(cache_dir), teacher=tiny_teacher, cpu=True, top_k=4,
                                max_tokens=800, temperature=2.0))
    new = TeacherCache(str(cache_dir))
    assert new.meta.temperature == 2.0 and new.log_probs.shape == old_rows.shape
    assert not (np.asarray(new.log_probs[:]) == 0).all(axis=1).any()  # no all-zero row
    assert not [f for f in os.listdir(cache_dir) if f.endswith(".partial")]


def test_arrays_of_another_size_than_meta_records_are_refused(cache_dir):
    path = cache_dir / INDICES_FILE
    with open(path, "ab") as f:  # a longer file (an array rewritten under the old meta)
        f.write(b"\0" * 64)
    with pytest.raises(DistillError, match=rf"{path} has [\d,]+ bytes where its meta.json records"):
        TeacherCache(str(cache_dir))


def test_an_empty_array_file_is_named_not_a_traceback(cache_dir):
    """issue 49: indices.npy left at 0 bytes ended in an EOFError traceback in fairseq-train."""
    meta = json.loads((cache_dir / META_FILE).read_text())
    meta["array_bytes"] = {}  # a cache from before the sizes were recorded
    (cache_dir / META_FILE).write_text(json.dumps(meta))
    (cache_dir / INDICES_FILE).write_bytes(b"")
    with pytest.raises(DistillError, match=rf"is incomplete or damaged: {cache_dir / INDICES_FILE}"):
        TeacherCache(str(cache_dir))


def test_a_merge_that_does_not_fit_the_disk_is_refused_naming_it(tiny_data, tiny_teacher, tmp_path, monkeypatch):
    import fairseq_distill.workdir as workdir

    out = tmp_path / "cache"
    monkeypatch.setattr(workdir.shutil, "disk_usage", lambda path: SimpleNamespace(total=10, used=9, free=1000))
    with pytest.raises(DistillError, match=rf"merging the teacher cache .* needs [\d.,]+ MB in {out}, and its disk "
                                           r"has 0.0 MB free"):
        make_teacher_cache(CacheJob(data=tiny_data, out=str(out), teacher=tiny_teacher, cpu=True, top_k=4,
                                    max_tokens=800))
    assert not os.path.exists(out / META_FILE) and not [f for f in os.listdir(out) if f.endswith(".npy")]


def test_a_full_disk_during_a_write_is_one_line(capsys):
    import errno

    from fairseq_distill.cli.common import run_cli

    def body():
        raise OSError(errno.ENOSPC, "No space left on device", "/data/out/train.en-de.en.bin")

    with pytest.raises(SystemExit) as raised:
        run_cli("seqkd", body)
    assert str(raised.value).startswith("seqkd: error: no space left on the disk of /data/out while writing "
                                        "/data/out/train.en-de.en.bin")
    with pytest.raises(FileNotFoundError):  # other OS errors keep their report
        run_cli("seqkd", lambda: open("/nonexistent/x"))


# -- seq-KD shards: identified by the teacher's and the data's content ---------------------------

def test_a_shard_of_another_teacher_or_data_is_decoded_again_and_says_why(tmp_path, capsys):
    from fairseq_distill.seqkd.decode import write_shard
    from fairseq_distill.seqkd.inputs import decoding_settings, sources_digest
    from fairseq_distill.seqkd.job import decode_shards

    teacher = tmp_path / "teacher.pt"
    teacher.write_bytes(b"weights A")
    args = SimpleNamespace(work=str(tmp_path / "work"), num_shards=1, shard_id=None, backend="fairseq",
                           compute_type=None, subset="train", beam=4, lenpen=1.0, max_len_a=1.2, max_len_b=10,
                           nbest=1)
    settings = decoding_settings(args, [str(teacher)], None)
    settings["train_source_sha256"] = sources_digest(["a b", "c d"])
    os.makedirs(args.work)
    write_shard(args.work, 0, 1, settings, {}, [])
    decoded = []
    assert decode_shards(args, dict(settings), lambda: decoded.append(1))[1] == 1  # one shard kept
    assert decoded == [] and "kept from an earlier run" in capsys.readouterr().out
    # the teacher retrained at the same path, to the same size
    teacher.write_bytes(b"weights B")
    args.shard_id = None
    retrained = decoding_settings(args, [str(teacher)], None)
    retrained["train_source_sha256"] = settings["train_source_sha256"]
    assert decode_shards(args, retrained, lambda: decoded.append(1))[1] == 0
    said = capsys.readouterr().out
    assert decoded == [1] and "decoding again: it was decoded with other settings" in said and "--teacher " in said
    # the same sentences binarized in another order
    args.shard_id = None
    reordered = dict(settings, train_source_sha256=sources_digest(["c d", "a b"]))
    assert reordered["train_source_sha256"] != settings["train_source_sha256"]
    decode_shards(args, reordered, lambda: decoded.append(1))
    assert decoded == [1, 1] and "train source sha256" in capsys.readouterr().out


def test_the_summary_gives_no_decoding_rate_over_shards_kept_from_an_earlier_run():
    """Shards decoded once and merged again with another --select took no time in this run: the
    summary says they were kept, and a rate over them (sentences / ~0 s) is not given."""
    from fairseq_distill.seqkd.job import decoding_summary

    assert decoding_summary((0.02, 2), num_shards=2, sentences=29000) == {"shards_kept": 2}
    assert decoding_summary((100.0, 0), num_shards=2, sentences=29000) == {
        "decode_seconds": 100.0, "sentences_per_second": 290.0}
    # one of two kept: this run's time, no rate (the time covers half the sentences)
    assert decoding_summary((50.04, 1), num_shards=2, sentences=29000) == {"decode_seconds": 50.0, "shards_kept": 1}
    assert decoding_summary(None, num_shards=1, sentences=0) == {}


# -- the collapse watch across a resume ----------------------------------------------------------

def window_logs(value, updates):
    return [[{"nll_loss": 1.0, "ntokens": 1, "sample_size": 1, "ckd_loss": value}] for _ in range(updates)]


def test_a_resumed_watch_remembers_the_level_a_term_collapsed_from():
    """issue 49.7: the watch's history was not saved, so a run resumed after --stop-on-collapse
    took the collapsed level as the new highest and trained to the end with exit 0."""
    from fairseq_distill.collapse import CollapseWatch

    first = CollapseWatch(window=2)
    for logs in window_logs(10.0, 2) + window_logs(0.1, 2):
        first.observe(logs)
    assert "ckd" in first.flagged
    resumed = CollapseWatch(window=2, stop=True)
    resumed.load_state_dict(first.state_dict())
    with pytest.raises(DistillError, match="the ckd term is collapsing"):
        for logs in window_logs(0.1, 2):
            resumed.observe(logs)
    # without the history the same windows pass unnoticed (what happened before)
    forgetful = CollapseWatch(window=2, stop=True)
    for logs in window_logs(0.1, 4):
        forgetful.observe(logs)


def test_the_watch_state_is_saved_with_the_criterion_and_restored(tiny_data, deep_teacher, tmp_path):
    from helpers import first_batch, train_argv, transformer_flags
    from fairseq_distill.trainer_setup import build_training

    def trainer():
        argv = train_argv(tiny_data, "--task", "translation_distill", "--teacher-path", deep_teacher,
                          "--collapse-window", "1", "--save-dir", str(tmp_path), criterion="ckd",
                          model=transformer_flags(1, 1, 24, 48))
        return build_training(argv)[-1]

    first = trainer()
    first.train_step([first_batch(first.task)])
    first.get_criterion().collapse_watch.observe([{"nll_loss": 2.0, "ntokens": 1, "sample_size": 1, "ckd_loss": 5.0}])
    saved = first.get_criterion().collapse_watch.state_dict()
    assert saved["history"]["ckd"]
    first.consolidate_optimizer()
    first.save_checkpoint(str(tmp_path / "checkpoint_last.pt"), {})
    second = trainer()
    second.load_checkpoint(str(tmp_path / "checkpoint_last.pt"))
    assert second.get_criterion().collapse_watch.state_dict() == saved


@pytest.mark.parametrize("options,message", [
    (["--collapse-window", "0"], "--collapse-window 0 turns the watch off"),
    (["--max-update", "150"], "--max-update 150 leaves fewer than two: give a window of at most 75 updates"),
])
def test_stop_on_collapse_with_nothing_to_watch_says_so(tiny_data, deep_teacher, options, message):
    from helpers import build

    cfg, task, _ = build(tiny_data, "--task", "translation_distill", "--teacher-path", deep_teacher,
                         "--stop-on-collapse", *options, criterion="ckd")
    with pytest.raises(DistillError, match=message):
        task.build_criterion(cfg.criterion)
    cfg, task, _ = build(tiny_data, "--task", "translation_distill", "--teacher-path", deep_teacher,
                         "--stop-on-collapse", criterion="word_kd")
    with pytest.raises(DistillError, match="watches layer and attention KD terms .* this criterion has word_kd"):
        task.build_criterion(cfg.criterion)


def test_evaluating_a_subset_the_data_lacks_names_those_it_has(tiny_data, tmp_path):
    """issue 49: fsd-evaluate --subset valid2 ended in fairseq-generate's traceback."""
    from fairseq_distill.evaluation.evaluate import evaluate

    checkpoint = tmp_path / "model.pt"
    checkpoint.write_bytes(b"")
    with pytest.raises(DistillError, match=rf"{tiny_data} has no binarized 'valid2' set; it has test, train, valid: "
                                           r"pass --subset one of those"):
        evaluate(str(checkpoint), tiny_data, "valid2")


def test_fairseqs_criterion_mismatch_assertion_becomes_one_line_with_the_remedy():
    """issue 49: resuming another criterion's checkpoint ended in fairseq's AssertionError."""
    from fairseq_distill.user_errors import find_user_error

    try:
        try:
            raise AssertionError("Criterion does not match; please reset the optimizer (--reset-optimizer). "
                                 "WordKDCriterion vs CKDCriterion")
        except AssertionError:
            raise Exception("Cannot load model parameters from checkpoint x.pt")
    except Exception as e:
        error = find_user_error(e)
    assert "trained with another criterion (WordKDCriterion, this run: CKDCriterion)" in str(error)
    assert "resume with --reset-optimizer" in str(error)


# -- seq-KD merges: the shards compared with --data ------------------------------------------------

def test_a_seqkd_merge_of_another_data_sets_shards_is_refused(tiny_data, tmp_path):
    """Each shard records the digest of the source it translated, but the merge never computed
    --data's: shards of data B merged with --data A gave 296 of 300 pairs another sentence's
    translation."""
    from helpers import reverse_train
    from fairseq_distill.seqkd.decode import write_shard
    from fairseq_distill.seqkd.inputs import SeqKDJob, load_side, sources_digest
    from fairseq_distill.seqkd.job import make_seqkd_data

    other = tmp_path / "other"
    shutil.copytree(tiny_data, other)
    reverse_train(str(other))
    sources = load_side(str(other), "train", "de", "en", "de")
    settings = {"backend": "fairseq", "subset": "train", "beam": 1, "nbest": 1, "source": None,
                "train_source_sha256": sources_digest(sources)}
    work, out = tmp_path / "work", tmp_path / "out"

    def shards(settings):
        for shard in (0, 1):
            write_shard(str(work), shard, 2, settings, {},
                        ({"id": i, "hyp": sources[i]} for i in range(shard, len(sources), 2)))

    shards(settings)
    job = SeqKDJob(data=tiny_data, work=str(work), out=str(out), merge=True, num_shards=2)
    with pytest.raises(DistillError, match=rf"the shards in {work} translated another training source than "
                                           rf"--data {tiny_data} .*decode them again"):
        make_seqkd_data(job)
    shards({k: v for k, v in settings.items() if k != "train_source_sha256"})
    with pytest.raises(DistillError, match=rf"the shards in {work} record no digest of the source they translated"):
        make_seqkd_data(job)
    assert not os.path.exists(out) or not os.listdir(out)  # nothing written


def test_a_seqkd_switch_cut_short_is_finished_or_undone_by_the_next_merge(tmp_path, capsys):
    """Killed between its two renames, a switch leaves no --out: the next merge puts the new data
    in place when they are whole (their made_from record written last), else the earlier back."""
    from fairseq_distill.seqkd.output import MADE_FROM_FILE, recover, staging_root

    out = tmp_path / "out"
    root = staging_root(str(out))
    for whole, expected in ((True, "new"), (False, "earlier")):
        for part, text in (("old", "earlier"), ("new", "new")):
            os.makedirs(os.path.join(root, part))
            with open(os.path.join(root, part, "train.de-en.en.bin"), "w") as f:
                f.write(text)
        if whole:
            with open(os.path.join(root, "new", MADE_FROM_FILE), "w") as f:
                f.write("{}")
        recover(str(out), root)
        assert (out / "train.de-en.en.bin").read_text() == expected
        assert os.listdir(root) == []  # nothing left beside it
        assert f"a switch cut short is finished (the {expected} data put in place)" in capsys.readouterr().err
        shutil.rmtree(out)


# -- the distillation task checks its data-bin --------------------------------------------------

@pytest.mark.parametrize("missing", ["train.de-en.de.idx", "train.de-en.en.bin", "dict.en.txt"])
def test_a_data_bin_missing_a_file_is_named_by_the_task(tiny_data, tmp_path, missing):
    """fairseq-train --task translation_distill on a data-bin without train.*.idx ended in a
    TypeError about prev_output_tokens, without dict.*.txt in a FileNotFoundError traceback."""
    from helpers import build

    data = tmp_path / "data"
    shutil.copytree(tiny_data, data)
    os.remove(data / missing)
    with pytest.raises(DistillError, match=rf"{data} has no {missing.replace('.', '[.]')}"):
        _, task, _ = build(str(data), "--task", "translation_distill")
        task.load_dataset("train")


@pytest.mark.slow
def test_fairseq_train_names_the_missing_file_of_its_data_bin_in_one_line(tiny_data, tmp_path):
    from helpers import PACKAGE_DIR, fairseq_train

    data = tmp_path / "data"
    shutil.copytree(tiny_data, data)
    os.remove(data / "train.de-en.de.idx")
    with pytest.raises(AssertionError) as failed:
        fairseq_train(str(data), str(tmp_path / "s"), "--user-dir", PACKAGE_DIR, "--task", "translation_distill",
                      "--criterion", "label_smoothed_cross_entropy", "--max-update", "1")
    assert f"{data} has no train.de-en.de.idx" in str(failed.value)
    assert "Traceback" not in str(failed.value)


# -- fsd-evaluate without the data-bin's metadata ---------------------------------------------------

def test_evaluate_without_metadata_takes_the_segmentation_from_the_directory_or_refuses(tiny_data, tiny_teacher,
                                                                                      tmp_path, monkeypatch):
    """A subword-nmt data-bin without fairseq_distill.json (a stock fairseq data-bin looks the same)
    was post-processed as sentencepiece: words glued together, BLEU wrong, nothing said."""
    import fairseq_distill.evaluation.evaluate as evaluation

    data = tmp_path / "data"
    shutil.copytree(tiny_data, data)
    os.remove(data / "fairseq_distill.json")
    checkpoint = tmp_path / "model.pt"
    shutil.copy(tiny_teacher, checkpoint)  # read for its dictionaries before decoding
    given = []

    class Decoded(Exception):
        pass

    def generate(data_bin, checkpoints, subset, args, **kwargs):
        given.append(args[len(args) - 1 - args[::-1].index("--post-process") + 1])  # the last one counts
        raise Decoded

    monkeypatch.setattr(evaluation, "run_generate", generate)
    for files, expected in ((("sentencepiece.model",), "sentencepiece"), (("bpe.codes",), "subword_nmt")):
        for name in ("sentencepiece.model", "bpe.codes"):
            if os.path.exists(data / name):
                os.remove(data / name)
        for name in files:
            (data / name).write_text("#version: 0.2\n")
        with pytest.raises(Decoded):
            evaluation.evaluate(str(checkpoint), str(data))
        assert given[-1] == expected, files
    (data / "sentencepiece.model").write_text("")  # both kinds: which one is the data's?
    with pytest.raises(DistillError, match=rf"{data} has no fairseq_distill.json .* holds both bpe.codes and "
                                           r"sentencepiece.model.* pass --post-process subword_nmt"):
        evaluation.evaluate(str(checkpoint), str(data))
    for name in ("sentencepiece.model", "bpe.codes"):
        os.remove(data / name)
    with pytest.raises(DistillError, match=rf"{data} has no fairseq_distill.json .* neither .* pass --post-process"):
        evaluation.evaluate(str(checkpoint), str(data))
    with pytest.raises(Decoded):  # the user's own choice is taken
        evaluation.evaluate(str(checkpoint), str(data), extra_args=["--post-process", "none"])
    assert given[-1] == "none"
