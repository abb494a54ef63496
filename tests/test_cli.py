"""End to end through the command-line tools, as a user runs them."""
import json
import os
import re

import pytest
import torch

from helpers import PACKAGE_DIR, distill_train, prepare_corpus_argv, python_module, run, stock_env, \
    write_raw_corpus

pytestmark = pytest.mark.slow  # the command-line tools, run as a user runs them


def train_student(tiny_data, tiny_teacher, save_dir, *extra):
    return distill_train(tiny_data, tiny_teacher, save_dir, "word_kd", "--kd-weight", "0.5",
                         "--max-update", "4", *extra)


def test_word_kd_training_then_stock_generate(tiny_data, tiny_teacher, tmp_path):
    save = str(tmp_path / "student")
    out = train_student(tiny_data, tiny_teacher, save)
    # every term is logged separately during training, plain losses in validation
    train_lines = [l for l in out.splitlines() if "| train |" in l]
    assert train_lines and all(k in train_lines[-1] for k in ("word_kd_loss", "ce_loss", "nll_loss"))
    valid_lines = [l for l in out.splitlines() if "| valid |" in l]
    assert valid_lines and "word_kd_loss" not in valid_lines[-1]
    assert re.search(r"num_updates 4\b", train_lines[-1])

    # the training checkpoint loads in fairseq-generate with the plugin (torch >= 2.6)
    gen = run(python_module("fairseq_cli.generate", tiny_data, "--path", f"{save}/checkpoint_best.pt",
                            "--user-dir", PACKAGE_DIR, "--cpu", "--beam", "2", "--max-len-b", "5",
                            "--batch-size", "16"), env=stock_env())
    assert re.search(r"Translated 40 sentences", gen.stdout)

    # the exported student loads in stock fairseq-generate: no plugin, default torch.load
    exported = str(tmp_path / "student.pt")
    exp = run(python_module("fairseq_distill.cli.export_student", f"{save}/checkpoint_best.pt", exported))
    assert "parameters" in exp.stdout
    torch.load(exported, weights_only=True)  # plain containers only
    gen = run(python_module("fairseq_cli.generate", tiny_data, "--path", exported, "--cpu", "--beam", "2",
                            "--max-len-b", "5", "--batch-size", "16"), env=stock_env())
    hyps = [l for l in gen.stdout.splitlines() if l.startswith("H-")]
    assert len(hyps) == 40
    assert "fairseq_distill" not in gen.stdout.split("Namespace(")[0]


def test_evaluate_writes_bleu_record(tiny_data, tiny_teacher, tmp_path):
    ckpt = str(tmp_path / "teacher.pt")
    run(python_module("fairseq_distill.cli.export_student", tiny_teacher, ckpt))
    out = run(python_module("fairseq_distill.cli.evaluate", ckpt, tiny_data, "--beam", "2",
                            "--max-len-b", "5")).stdout
    m = re.search(r"BLEU (\d+\.\d+), chrF (\d+\.\d+), chrF\+\+ (\d+\.\d+) \(beam 2, lenpen 1.0, max length "
                  r"1.2·source \+ 5\)", out)
    assert m, out[-2000:]
    assert "signatures: BLEU nrefs:1|case:mixed|eff:no|tok:13a" in out
    record = json.load(open(str(tmp_path / "teacher.test.eval.json")))
    assert record["sentences"] == 40
    assert abs(record["bleu"] - float(m.group(1))) < 0.01
    assert (record["chrf"], record["chrf++"]) == (float(m.group(2)), float(m.group(3)))
    assert (record["beam"], record["lenpen"], record["max_len_a"], record["max_len_b"]) == (2, 1.0, 1.2, 5)
    assert "nw:2" in record["chrf++_signature"]
    assert record["tokens_per_second"] > 0 and record["parameters"] > 0
    hyps = open(record["hypotheses"], encoding="utf-8").read().splitlines()
    assert len(hyps) == 40
    assert not any("▁" in h for h in hyps)  # detokenised
    # BLEU is recomputable from the written hypotheses and the raw references
    from sacrebleu.metrics import BLEU
    refs = open(os.path.join(tiny_data, "raw", "test.en"), encoding="utf-8").read().splitlines()
    assert abs(BLEU().corpus_score(hyps, [refs]).score - record["bleu"]) < 0.01
    from sacrebleu.metrics import CHRF
    assert abs(CHRF(word_order=2).corpus_score(hyps, [refs]).score - record["chrf++"]) < 0.01


def test_resume_continues_training(tiny_data, tiny_teacher, tmp_path):
    save = str(tmp_path / "student")
    train_student(tiny_data, tiny_teacher, save)
    out = train_student(tiny_data, tiny_teacher, save, "--max-update", "6")
    assert "Loaded checkpoint" in out
    state = torch.load(f"{save}/checkpoint_last.pt", map_location="cpu", weights_only=False)
    assert state["optimizer_history"][-1]["num_updates"] == 6


def test_subword_nmt_preparation_is_lossless(tmp_path):
    raw = write_raw_corpus(tmp_path / "raw", 200, 10, 10)
    out = tmp_path / "prep"
    printed = run(prepare_corpus_argv(raw, out, "--bpe", "subword_nmt", "--vocab-size", "300")).stdout
    # one line per stage; fairseq-preprocess's own output (its options, counts) goes to a log
    stages = ["train: 200 sentence pairs", "valid: 10", "test: 10", "learned a joint subword_nmt model",
              "segmented every split", "binarized with fairseq-preprocess", "done in"]
    assert [line.startswith("[prepare] " + stage) for line, stage in zip(printed.splitlines(), stages)] == \
        [True] * len(stages) and len(printed.splitlines()) == len(stages), printed
    assert f"(log: {out / 'preprocess.log'})" in printed
    assert "Namespace(" in open(out / "preprocess.log", encoding="utf-8").read()
    tok = open(out / "tok" / "test.en", encoding="utf-8").read().splitlines()
    ref = open(raw / "test.en", encoding="utf-8").read().splitlines()
    assert any("@@ " in line for line in tok)
    # removing the BPE markers (what --post-process subword_nmt does) gives the raw text back
    assert [(line + " ").replace("@@ ", "").rstrip() for line in tok] == [" ".join(r.split()) for r in ref]
    meta = json.load(open(out / "bin" / "fairseq_distill.json"))
    assert meta["bpe"] == "subword_nmt" and os.path.isfile(out / "bin" / "bpe.codes")
    assert meta["sizes"] == {"train": 200, "valid": 10, "test": 10}


def test_plugin_commands_and_training_logs_carry_no_library_noise(tiny_data, tiny_teacher, tmp_path):
    """issue 32.10: no tensorboardX hint, no hydra or torch deprecation warnings in the plugin's
    commands and in a training log with the plugin; real warnings still show."""
    noise = ("tensorboardX", "hydra.experimental", "version_base", "key_padding_mask", "pin_memory",
             "strict flag in the compose API", "ConfigStore schema", "torch.cuda.amp.autocast")
    out = train_student(tiny_data, tiny_teacher, str(tmp_path / "student"))
    cache = run(python_module("fairseq_distill.cli.cache_teacher", "--teacher", tiny_teacher, "--data", tiny_data,
                              "--top-k", "4", "--out", str(tmp_path / "cache"), "--cpu")).stdout
    help_text = run(python_module("fairseq_distill.cli.compare", "--help")).stdout
    for text in (cache, help_text):
        assert not [n for n in noise if n in text], [n for n in noise if n in text]
    # fairseq-train imports fairseq's tasks (and logs the tensorboardX hint) before it loads the
    # plugin; everything after that is clean
    assert not [n for n in noise[1:] if n in out], [n for n in noise[1:] if n in out]
    assert "num_updates 4" in out  # the log itself is intact
    proc = run([os.path.join(os.path.dirname(__import__("sys").executable), "python"), "-c",
                "import warnings, fairseq_distill; warnings.warn('a real warning')"], check=False)
    assert "a real warning" in proc.stdout


def test_a_failing_fairseq_preprocess_is_named_with_its_log(tmp_path):
    from fairseq_distill.errors import DistillError
    from fairseq_distill.text.binarize import fairseq_preprocess

    log = tmp_path / "preprocess.log"
    with pytest.raises(DistillError) as raised:
        fairseq_preprocess("de", "en", str(tmp_path / "bin"), 1, str(log),
                           trainpref=str(tmp_path / "no-such-dir" / "train"), dict_only=True)
    message = str(raised.value)
    assert message.startswith("fairseq-preprocess failed (exit status 1); the last lines of its log " + str(log))
    assert "No such file or directory" in message and "no-such-dir" in message


def test_a_failing_fairseq_generate_is_one_clear_error(tiny_data, tmp_path):
    from fairseq_distill.errors import DistillError
    from fairseq_distill.evaluation.generate import run_generate

    with pytest.raises(DistillError, match=r"fairseq-generate failed \(exit 1\); its last lines:\n") as raised:
        run_generate(tiny_data, str(tmp_path / "missing.pt"), "test", [], log_path=str(tmp_path / "gen.log"))
    assert f"full log: {tmp_path / 'gen.log'}" in str(raised.value)
