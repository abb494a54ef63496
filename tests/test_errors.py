"""Bad input gets a clear error naming the bad value and what would be valid."""
import argparse
import os
import shutil

import pytest
import torch

from helpers import PACKAGE_DIR, TINY_MODEL, build, fairseq_train, prepare_corpus_argv, run, write_raw_corpus
from fairseq_distill.errors import DistillError
from fairseq_distill.teacher.frozen import load_teacher


@pytest.fixture(scope="module")
def task(tiny_data):
    return build(tiny_data, "--task", "translation_distill")[1]


def copy_data_with_symbol_changed(tiny_data, dest, lang, index):
    """A data directory whose `lang` dictionary has one symbol renamed."""
    os.makedirs(dest)
    for name in os.listdir(tiny_data):
        if name.startswith("dict."):
            shutil.copy(os.path.join(tiny_data, name), dest)
    path = os.path.join(dest, f"dict.{lang}.txt")
    lines = open(path, encoding="utf-8").read().splitlines()
    # dict files list symbols after the 4 specials; line index - 4 holds symbol `index`
    symbol, count = lines[index - 4].split(" ")
    lines[index - 4] = f"{symbol}XX {count}"
    open(path, "w", encoding="utf-8").write("\n".join(lines) + "\n")
    return symbol


def test_missing_teacher_checkpoint(task, tmp_path):
    path = str(tmp_path / "nope.pt")
    with pytest.raises(DistillError, match=f"teacher checkpoint not found: '{path}'"):
        load_teacher(path, task)


@pytest.mark.parametrize("files,kind", [
    (["model.bin", "config.json", "shared_vocabulary.json"], "it looks like a CTranslate2 model"),
    ([], "directory, not a fairseq checkpoint file. A Hugging Face model directory"),
])
def test_a_pretrained_model_directory_is_refused_as_a_teacher_with_the_way_it_can_teach(task, tmp_path, files, kind):
    for name in files:
        (tmp_path / name).write_text("{}")
    with pytest.raises(DistillError, match=kind) as raised:
        load_teacher(str(tmp_path), task)
    assert "fsd-seqkd --teacher-ctranslate2 DIR" in str(raised.value)
    assert "fsd-seqkd --teacher-translations FILE" in str(raised.value)


def test_unreadable_teacher_checkpoint(task, tmp_path):
    path = tmp_path / "garbage.pt"
    path.write_bytes(b"this is not a checkpoint")
    with pytest.raises(DistillError, match="cannot read teacher checkpoint .*garbage.pt"):
        load_teacher(str(path), task)


@pytest.mark.parametrize("lang,side", [("de", "source"), ("en", "target")])
def test_teacher_dictionary_differs(tiny_data, tiny_teacher, tmp_path, lang, side):
    data = str(tmp_path / "data")
    symbol = copy_data_with_symbol_changed(tiny_data, data, lang, index=10)
    # separate embeddings: the two dictionaries now differ, so they cannot be shared
    unshared = [f for f in TINY_MODEL if f != "--share-all-embeddings"]
    _, other_task, _ = build(data, "--task", "translation_distill", "--source-lang", "de",
                             "--target-lang", "en", model=unshared)
    with pytest.raises(DistillError) as e:
        load_teacher(tiny_teacher, other_task)
    msg = str(e.value)
    assert f"its {side} dictionary differs from the student's at index 10" in msg
    assert f"teacher has '{symbol}', student has '{symbol}XX'" in msg


def test_teacher_that_is_not_encoder_decoder(task, tiny_teacher, tmp_path):
    from fairseq.models.transformer_lm import base_lm_architecture

    state = torch.load(tiny_teacher, map_location="cpu", weights_only=False)
    lm = argparse.Namespace(arch="transformer_lm", _name="transformer_lm", decoder_layers=1,
                            decoder_embed_dim=16, decoder_ffn_embed_dim=32, decoder_attention_heads=2,
                            max_target_positions=64, tokens_per_sample=64)
    base_lm_architecture(lm)
    state["cfg"]["model"] = lm
    path = str(tmp_path / "lm.pt")
    torch.save(state, path)
    with pytest.raises(DistillError, match="is a TransformerLanguageModel, not an encoder-decoder translation model"):
        load_teacher(path, task)


def test_word_kd_needs_the_distillation_task(tiny_data):
    cfg, task, _ = build(tiny_data, "--task", "translation")
    with pytest.raises(DistillError, match="needs --task translation_distill .*got task TranslationTask"):
        task.build_criterion(cfg.criterion)


def test_word_kd_needs_a_teacher_path(tiny_data):
    cfg, task, _ = build(tiny_data, "--task", "translation_distill")
    with pytest.raises(DistillError, match="pass --teacher-path"):
        task.build_criterion(cfg.criterion)


def test_kd_weight_out_of_range(tiny_data, tiny_teacher):
    cfg, task, _ = build(tiny_data, "--task", "translation_distill", "--teacher-path", tiny_teacher,
                         "--kd-weight", "1.5")
    with pytest.raises(DistillError, match="--kd-weight must be between 0 and 1, got 1.5"):
        task.build_criterion(cfg.criterion)


@pytest.mark.slow
def test_fairseq_train_reports_missing_teacher(tiny_data, tmp_path):
    with pytest.raises(AssertionError) as e:
        fairseq_train(tiny_data, str(tmp_path / "s"), "--user-dir", PACKAGE_DIR, "--task",
                      "translation_distill", "--teacher-path", "/no/such/teacher.pt",
                      "--criterion", "word_kd", "--max-update", "1")
    assert "teacher checkpoint not found: '/no/such/teacher.pt'" in str(e.value)


# -- corpus preparation --------------------------------------------------------------------

def prepare(tmp_path, raw):
    return run(prepare_corpus_argv(raw, tmp_path / "out", "--vocab-size", "100"), check=False)


@pytest.fixture
def raw(tmp_path):
    return write_raw_corpus(tmp_path / "raw", 100, 10, 10)


@pytest.mark.slow
def test_misaligned_corpus(tmp_path, raw):
    with open(raw / "train.en", "a") as f:
        f.write("one line too many\n")
    proc = prepare(tmp_path, raw)
    assert proc.returncode != 0
    assert "misaligned train files" in proc.stdout and "has 100 lines but" in proc.stdout and "has 101" in proc.stdout


@pytest.mark.slow
def test_empty_corpus(tmp_path, raw):
    for lang in ("de", "en"):
        open(raw / f"valid.{lang}", "w").close()
    proc = prepare(tmp_path, raw)
    assert proc.returncode != 0 and "empty corpus" in proc.stdout and "valid.de" in proc.stdout


@pytest.mark.slow
def test_blank_line_in_corpus(tmp_path, raw):
    lines = open(raw / "test.de").read().splitlines()
    lines[4] = "  "
    open(raw / "test.de", "w").write("\n".join(lines) + "\n")
    proc = prepare(tmp_path, raw)
    assert proc.returncode != 0 and "1 blank line(s) or line(s) empty after normalisation (first at line 5" in proc.stdout


def test_lines_empty_after_normalisation_are_refused_like_blank_ones(tmp_path):
    """A side holding only a zero-width space (or other invisible characters) is a blank line
    once normalised: refused before anything is written (issue 32.3)."""
    from fairseq_distill.text.corpus_steps import check_split
    from fairseq_distill.errors import DistillError

    (tmp_path / "t.de").write_text("ein hund\n\u200b\nzwei\n", encoding="utf-8")
    (tmp_path / "t.en").write_text("a dog\ncats\ntwo\n", encoding="utf-8")
    with pytest.raises(DistillError, match=r"t.de has 1 blank line\(s\) or line\(s\) empty after normalisation "
                                           r"\(first at line 2: '\\u200b'"):
        check_split(str(tmp_path / "t.de"), str(tmp_path / "t.en"), "train", (str(tmp_path / "a"), str(tmp_path / "b")))


@pytest.mark.slow
def test_missing_corpus_file(tmp_path, raw):
    os.remove(raw / "valid.en")
    proc = prepare(tmp_path, raw)
    assert proc.returncode != 0 and "no file for language 'en' with prefix" in proc.stdout


def test_ctrl_c_in_a_command_prints_one_line_saying_what_was_kept(capsys):
    """issue 32.7: no KeyboardInterrupt traceback; exit status 130 as shells report Ctrl-C."""
    from fairseq_distill.cli.common import run_cli

    def interrupted():
        raise KeyboardInterrupt

    with pytest.raises(SystemExit) as raised:
        run_cli("seqkd", interrupted, on_interrupt="the shards finished so far are kept")
    assert raised.value.code == 130
    err = capsys.readouterr().err
    assert err.strip() == "seqkd: interrupted; the shards finished so far are kept" and "Traceback" not in err


def test_the_subword_sample_is_evenly_spaced_and_fixed_by_the_count():
    from fairseq_distill.text.corpus_steps import is_sampled

    # 3 of 10 pairs: where floor(i * 3 / 10) steps up, i.e. after pairs 3, 6 and 9 (0-based 3, 6, 9)
    assert [i for i in range(10) if is_sampled(i, 10, 3)] == [3, 6, 9]
    assert [i for i in range(4) if is_sampled(i, 4, 4)] == [0, 1, 2, 3]
    assert sum(is_sampled(i, 450_000, 100_000) for i in range(450_000)) == 100_000


@pytest.mark.slow
def test_over_long_training_pairs_are_removed_counted_and_listed(tmp_path, raw):
    """issue 32.4: one policy, in fsd-prepare-corpus: a training pair with a side longer than
    --max-length is removed, counted and listed (the tools after it never meet it); an
    evaluation set with such a line is refused, naming it."""
    import json

    lines = open(raw / "train.de", encoding="utf-8").read().splitlines()
    lines[6] = " ".join(["Hund"] * 200)
    open(raw / "train.de", "w", encoding="utf-8").write("\n".join(lines) + "\n")
    proc = run(prepare_corpus_argv(raw, tmp_path / "out", "--vocab-size", "100", "--max-length", "150"))
    assert "[prepare] train: removed 1 sentence pair(s) with a side longer than --max-length 150 subword tokens " \
           "(lines 7;" in proc.stdout
    meta = json.load(open(tmp_path / "out" / "bin" / "fairseq_distill.json"))
    assert meta["removed_over_long"] == {"train": [7]} and meta["sizes"]["train"] == 99
    raw_train = open(tmp_path / "out" / "raw" / "train.de", encoding="utf-8").read().splitlines()
    assert len(raw_train) == 99 and lines[6] not in raw_train
    # an evaluation set is never shortened
    test = open(raw / "test.en", encoding="utf-8").read().splitlines()
    test[2] = " ".join(["dog"] * 200)
    open(raw / "test.en", "w", encoding="utf-8").write("\n".join(test) + "\n")
    proc = run(prepare_corpus_argv(raw, tmp_path / "out2", "--vocab-size", "100", "--max-length", "150"), check=False)
    assert proc.returncode == 1 and "Traceback" not in proc.stdout
    assert "line 3 has" in proc.stdout and "more than --max-length 150" in proc.stdout


@pytest.mark.slow
def test_data_prepared_before_max_length_existed_is_reused_when_no_pair_is_longer(tmp_path, raw):
    """A directory prepared without --max-length kept every pair; it is the same data as now
    when none is longer than the limit, so a rerun reuses it instead of asking for --force."""
    import json

    out = tmp_path / "out"
    run(prepare_corpus_argv(raw, out, "--vocab-size", "100"))
    meta_path = out / "bin" / "fairseq_distill.json"
    meta = json.load(open(meta_path))
    del meta["made_from"]["options"]["max_length"]
    json.dump(meta, open(meta_path, "w"))
    assert "[prepare] reusing" in run(prepare_corpus_argv(raw, out, "--vocab-size", "100")).stdout
    proc = run(prepare_corpus_argv(raw, out, "--vocab-size", "100", "--max-length", "5"), check=False)
    assert proc.returncode == 1 and "--max-length: prepared with None, now 5" in proc.stdout


def test_the_user_dir_handed_to_fairseq_tools_is_the_plugin_root():
    """fairseq-generate runs with ``--user-dir PACKAGE_DIR``: it must be the package itself (its
    tasks, models and checkpoint shims), not the sub-package the code lives in."""
    import fairseq_distill
    from fairseq_distill.evaluation.generate import PACKAGE_DIR

    assert PACKAGE_DIR == os.path.dirname(os.path.abspath(fairseq_distill.__file__))
    assert os.path.isdir(os.path.join(PACKAGE_DIR, "tasks")) and os.path.isdir(os.path.join(PACKAGE_DIR, "models"))
