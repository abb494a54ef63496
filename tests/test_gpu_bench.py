"""bench/gpu_bench.py (its code: the package bench/gpu/): without CUDA it says so, exits 0 and
writes nothing; --cpu-smoke runs its measuring code on the CPU at tiny sizes and writes the JSON
and Markdown; its pure parts."""
import json
import subprocess
import os
import sys

import pytest
import torch

from helpers import REPO, run

SCRIPT = os.path.join(REPO, "bench", "gpu_bench.py")
sys.path.insert(0, REPO)
from bench import gpu_bench  # noqa: E402
from bench.gpu import plan, report, synthetic, training  # noqa: E402


@pytest.mark.slow
@pytest.mark.skipif(torch.cuda.is_available(), reason="with CUDA the script runs the whole GPU benchmark")
def test_without_cuda_it_says_so_exits_0_and_writes_nothing(tmp_path):
    out = tmp_path / "results"
    proc = run([sys.executable, SCRIPT, "--out", str(out)])
    assert proc.stdout.strip() == gpu_bench.NO_CUDA
    assert "no CUDA device found; nothing was measured" in proc.stdout
    assert not out.exists()


@pytest.mark.slow
def test_cpu_smoke_measures_every_row_and_writes_json_and_markdown(tmp_path):
    out = tmp_path / "results"
    proc = run([sys.executable, SCRIPT, "--cpu-smoke", "--out", str(out)])
    assert "[gpu_bench] all measurements succeeded" in proc.stdout
    assert "train step student-1+1 fp32 KD online from teacher-big: done" in proc.stdout  # progress lines
    result = json.loads((out / "gpu_bench.json").read_text())
    assert result["mode"] == "cpu-smoke" and result["cuda"] is False and result["device"].startswith("CPU")
    assert result["precisions"] == ["fp32"] and result["wall_seconds"] > 0
    assert all(m["parameters"] > 0 for m in result["models"])

    training = result["training"]
    assert len(training) == 2 * 5  # per student: no KD, online and cached from each of two teachers
    assert {(r["kd"], r["teacher"]) for r in training} == {
        ("none", None), ("online", "teacher-base"), ("online", "teacher-big"), ("cached", "teacher-base"),
        ("cached", "teacher-big")}
    for r in training:
        assert "error" not in r, r
        assert r["median_step_ms"] > 0 and r["peak_memory_mib"] > 0 and r["step_memory_mib"] >= 0
        assert r["target_tokens"] > 0 and r["batch_sentences"] > 0 and r["time_vs_no_kd"] > 0
        assert r["steps"] == len(r["step_ms"]) == result["budget"]["steps"] and r["max_tokens"] == 256
        assert r["student_shape"] and r["precision"] == "fp32" and r["device"] == result["device"]
        assert r["wall_seconds"] > 0
        if r["kd"] == "none":
            assert r["time_vs_no_kd"] == 1.0 and r["teacher_shape"] is None
        else:
            assert r["teacher_shape"]

    caches = result["teacher_caches"]
    assert [c["teacher"] for c in caches] == ["teacher-base", "teacher-big"]
    for c in caches:
        assert "error" not in c, c
        assert c["sentences"] == result["budget"]["train_sentences"] and c["tokens"] > 0 and c["seconds"] >= 0

    decoding = result["decoding"]
    assert [(r["teacher"], r["backend"]) for r in decoding] == [
        (t, b) for t in ("teacher-base", "teacher-big")
        for b in ("fairseq float32", "ctranslate2 float32", "ctranslate2 int8")]
    for r in decoding:
        assert "error" not in r, r
        assert r["tokens_per_second"] > 0 and r["generated_tokens"] > 0 and r["beam"] == 4
        assert r["sentences"] == result["budget"]["decode_sentences"]
        assert r["ratios"]["fairseq float32"] > 0
    assert all(r["ratios"]["fairseq float32"] == 1.0 for r in decoding if r["backend"] == "fairseq float32")

    check = result["gpu_check"]
    assert check["returncode"] == 0 and "no CUDA device" in check["last_lines"][-1]

    md = (out / "gpu_bench.md").read_text()
    assert md == report.render_markdown(result)
    for heading in ("## Models", "## Training step", "## Seq-KD decoding", "## scripts/gpu_check", "## Failures"):
        assert heading in md
    assert md.count("| student-2+1 | cached |") == 2 and "| teacher-big | ctranslate2 int8 |" in md
    assert md.rstrip().endswith("none")  # no failures


def _result(**changes):
    """A hand-made result of one student, one teacher, one precision."""
    budget = {"vocab": 100, "train_sentences": 10, "mean_length": 8, "max_length": 20, "max_tokens": 256,
              "warmup": 1, "steps": 2, "top_k": 4, "decode_sentences": 4, "decode_batch": 2, "beam": 4, "repeats": 1}
    train = {"student": "s", "student_shape": "2+2, d=512", "precision": "fp16", "target_tokens": 100,
             "batch_sentences": 5, "wall_seconds": 1.5}
    result = {
        "mode": "full", "cuda": True, "device": "NVIDIA H100", "budget": budget,
        "versions": {"torch": "2", "fairseq": "0.12", "ctranslate2": "4"},
        "models": [{"name": "s", "arch": "transformer_iwslt_de_en", "shape": "2+2, d=512", "parameters": 1234567},
                   {"name": "t", "arch": "transformer_iwslt_de_en", "shape": "6+6, d=512", "parameters": None}],
        "teachers": [{"name": "t", "parameters": 5}],
        "teacher_caches": [{"teacher": "t", "top_k": 4, "sentences": 10, "tokens": 80, "seconds": 2.0,
                            "teacher_seconds": 1.0, "size_mib": 0.5}],
        "training": [
            {**train, "kd": "none", "teacher": None, "median_step_ms": 10.0, "peak_memory_mib": 100.0,
             "step_memory_mib": 40.0},
            {**train, "kd": "online", "teacher": "t", "median_step_ms": 25.0, "peak_memory_mib": 150.0,
             "step_memory_mib": 60.0},
            {**train, "kd": "cached", "teacher": "t", "error": "RuntimeError: CUDA out of memory"},
        ],
        "decoding": [
            {"teacher": "t", "backend": "fairseq float32", "tokens_per_second": 1000.0, "generated_tokens": 50,
             "seconds": 0.05},
            {"teacher": "t", "backend": "fairseq float16", "tokens_per_second": 2000.0, "generated_tokens": 50,
             "seconds": 0.025},
            {"teacher": "t", "backend": "ctranslate2 float16", "tokens_per_second": 8000.0, "generated_tokens": 50,
             "seconds": 0.006},
        ],
        "gpu_check": {"command": ["python", "scripts/gpu_check.py"], "returncode": 1, "seconds": 60.0,
                      "last_lines": ["FAIL  a2d bf16", "15 passed, 1 failed"]},
        "wall_seconds": 300.0,
    }
    result.update(changes)
    return result


def test_ratios_failures_and_markdown_from_a_hand_made_result():
    result = _result()
    report.add_ratios(result)
    none, online, cached = result["training"]
    assert none["time_vs_no_kd"] == 1.0 and online["time_vs_no_kd"] == 2.5 and online["memory_vs_no_kd"] == 1.5
    assert cached["time_vs_no_kd"] is None  # a failed row has no ratio
    ct2 = result["decoding"][2]
    assert ct2["ratios"] == {"fairseq float32": 8.0, "fairseq float16": 4.0}

    assert report.failures(result) == [
        "training: s t cached fp16: RuntimeError: CUDA out of memory", "gpu_check: exit status 1"]

    md = report.render_markdown(result)
    assert md.startswith("# GPU benchmark (`bench/gpu_bench.py`)\n\nNVIDIA H100; ")
    assert "| s | transformer_iwslt_de_en | 2+2, d=512 | 1,234,567 |" in md
    assert "| t | transformer_iwslt_de_en | 6+6, d=512 | - |" in md  # unknown parameter count
    assert "| s | online | t | fp16 | 25.0 ms | 2.50 | 150 MiB | 1.50 | 60 MiB | 5 / 100 | 1.5 s |" in md
    assert "| s | cached | t | fp16 | failed: RuntimeError: CUDA out of memory |" in md
    assert "peak memory: `torch.cuda.max_memory_allocated` during the steps" in md
    assert ("| teacher | backend | tokens/s | × fairseq float32 | × fairseq float16 | generated tokens | seconds |"
            in md)
    assert "| t | ctranslate2 float16 | 8,000 | 8.00 | 4.00 | 50 | 0.01 |" in md
    assert "| t | 4 | 10 | 80 | 2.0 s | 1.0 s | 0.5 MiB |" in md
    assert "`python scripts/gpu_check.py`: exit status 1, 60 s" in md and "15 passed, 1 failed" in md
    assert md.endswith("## Failures\n\n- training: s t cached fp16: RuntimeError: CUDA out of memory\n"
                       "- gpu_check: exit status 1\n")


def test_a_timed_out_gpu_check_and_a_failed_decoder_are_failures():
    result = _result(gpu_check={"command": ["python", "scripts/gpu_check.py"], "returncode": None,
                                "error": "timed out after 420 s", "seconds": 420.0, "last_lines": []})
    result["training"] = result["training"][:2]
    result["decoding"][2] = {"teacher": "t", "backend": "ctranslate2 int8_float16", "error": "ValueError: no"}
    report.add_ratios(result)
    assert report.failures(result) == ["decoding: t ctranslate2 int8_float16: ValueError: no",
                                          "gpu_check: exit status None: timed out after 420 s"]
    md = report.render_markdown(result)
    assert "| t | ctranslate2 int8_float16 | failed: ValueError: no |" in md
    assert "exit status None (timed out after 420 s)" in md


def test_gpu_plan_is_the_papers_sizes():
    teachers, students, precisions, budget, compute_types = plan.plan("full")
    assert [(t.arch, t.shape()) for t in teachers] == [
        ("transformer_iwslt_de_en", "6+6, d=512, ffn=1024, 4 heads"),
        ("transformer_vaswani_wmt_en_de_big", "6+6, d=1024, ffn=4096, 16 heads")]
    assert [s.shape() for s in students] == ["2+2, d=512, ffn=1024, 4 heads", "3+3, d=512, ffn=1024, 4 heads"]
    assert precisions == ["fp16", "bf16"] and compute_types == ["float16", "int8_float16"] and budget.beam == 4
    quick = plan.plan("quick")[3]
    assert quick.steps < budget.steps and quick.decode_sentences < budget.decode_sentences
    flags = teachers[1].flags()
    assert flags[flags.index("--encoder-embed-dim") + 1] == "1024" and "--share-all-embeddings" in flags


def test_synthetic_corpus_is_binarized_with_one_dictionary(tmp_path):
    from fairseq.data import Dictionary, data_utils

    sources = synthetic.write_synthetic_corpus(str(tmp_path), vocab=50, sentences=30, mean_length=8, max_length=20)
    src_dict = Dictionary.load(str(tmp_path / "dict.de.txt"))
    assert len(src_dict) == 50 and src_dict == Dictionary.load(str(tmp_path / "dict.en.txt"))
    for lang in ("de", "en"):
        data = data_utils.load_indexed_dataset(str(tmp_path / f"train.de-en.{lang}"), src_dict)
        assert len(data) == 30
        for i in range(len(data)):
            item = data[i]
            assert 3 <= len(item) - 1 <= 20 and item[-1] == src_dict.eos()
            assert (item[:-1] >= src_dict.nspecial).all()
            if lang == "de":
                assert src_dict.string(item[:-1]).split() == sources[i]
    assert json.loads((tmp_path / "fairseq_distill.json").read_text())["source_lang"] == "de"


def test_bf16_trains_in_process_without_the_tpu_fairseq_implies(tmp_path):
    """fairseq 0.12's parser makes --bf16 imply --tpu (an XLA device); with the plugin the
    benchmark's Trainer has no TPU, so a bf16 row trains (here on the CPU: the GPU rows cannot be
    run here)."""
    from fairseq_distill.trainer_setup import training_config

    teachers, students, _, budget, _ = plan.plan("cpu-smoke")
    data, teacher = str(tmp_path / "data"), str(tmp_path / "teacher" / "checkpoint.pt")
    synthetic.write_synthetic_corpus(data, budget.vocab, budget.train_sentences, budget.mean_length,
                                     budget.max_length)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        assert training.save_random_teacher(teachers[0], data, budget, False, teacher) > 0
        argv = [*training.common_flags(data, budget, False), "--task", "translation_distill", *students[0].flags(),
                "--criterion", "word_kd", "--teacher-path", teacher, "--bf16"]
        assert not training_config(argv).common.tpu  # dropped: fairseq_distill/compat.py
        row = training.time_training(argv, 1, 1, budget.max_tokens)
    finally:
        torch.set_num_threads(threads)
    assert row["median_step_ms"] > 0 and row["target_tokens"] > 0


@pytest.mark.slow
def test_cpu_decoding_mode_measures_every_model_on_both_backends(tmp_path):
    """--cpu-decoding (the decoding benchmark at the papers' width; here its tiny form):
    the teacher and the students, each with fairseq and CTranslate2 on the same batches, no
    training rows and no GPU check; decode_speed_cpu.json/.md, not gpu_bench.*."""
    proc = subprocess.run([sys.executable, SCRIPT, "--cpu-decoding", "--cpu-smoke", "--out", str(tmp_path)],
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=REPO)
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert sorted(os.listdir(tmp_path)) == ["decode_speed_cpu.json", "decode_speed_cpu.md"]
    result = json.load(open(tmp_path / "decode_speed_cpu.json"))
    assert result["mode"] == "cpu-decoding-smoke" and not result["training"] and result["gpu_check"] is None
    rows = {(r["teacher"], r["backend"]): r for r in result["decoding"]}
    assert set(rows) == {(m, b) for m in ("teacher", "student-1+1")
                         for b in ("fairseq float32", "ctranslate2 float32", "ctranslate2 int8")}
    assert all(r["tokens_per_second"] > 0 and r["ratios"]["fairseq float32"] > 0 for r in rows.values())
    text = open(tmp_path / "decode_speed_cpu.md", encoding="utf-8").read()
    assert text.startswith("# Decoding speed on the CPU") and "## Training step" not in text


@pytest.mark.slow
def test_ctranslate2_thread_profile_writes_every_configuration(tmp_path):
    script = os.path.join(REPO, "bench", "ctranslate2_threads.py")
    proc = subprocess.run([sys.executable, script, "--smoke", "--sentences", "8", "--rounds", "1", "--out", str(tmp_path)],
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=REPO)
    assert proc.returncode == 0, proc.stdout[-3000:]
    result = json.load(open(tmp_path / "ctranslate2_threads.json"))
    cores = os.cpu_count()
    splits = {(1, cores), (cores, 1)} | ({(2, cores // 2)} if cores >= 4 else set())
    assert {(r["inter_threads"], r["intra_threads"]) for r in result["rows"]} == splits
    assert len(result["rows"]) == 2 * len(splits) * 3 and all(r["tokens_per_second"] > 0 for r in result["rows"])
    assert (tmp_path / "ctranslate2_threads.md").read_text().count("\n| ") == len(result["rows"]) + 1
