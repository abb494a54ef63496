"""recipes/own/run.sh, offline: --dry-run of every method and teacher kind, the refusals, and
--smoke end to end (raw text to a CTranslate2 student, its report and results.md) with no teacher
given and with a file of translations; a rerun keeps every finished stage."""
import json
import os
import shutil
import subprocess
import sys

import pytest
import torch

from helpers import REPO, write_slice

pytestmark = pytest.mark.slow  # a bash recipe running fairseq-train and the fsd-* commands

RUN = os.path.join(REPO, "recipes", "own", "run.sh")


def recipe(*args, check=True):
    env = dict(os.environ, PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"])
    proc = subprocess.run(["bash", RUN, *map(str, args)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True, env=env, cwd=REPO)
    if check:
        assert proc.returncode == 0, proc.stdout[-4000:]
    return proc


def commands(output):
    return [line for line in output.splitlines() if line.startswith("+ ")]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    raw = tmp_path_factory.mktemp("own_corpus")
    for split, source, n in (("train", "train", 400), ("valid", "val", 20), ("test", "test_2016_flickr", 20)):
        write_slice(str(raw), split, source, n)
    return raw


def base(corpus, out):
    return ["-s", "de", "-t", "en", "--train", corpus / "train", "--valid", corpus / "valid", "--out", out]


def test_every_method_and_teacher_kind_at_a_dry_run(corpus, tiny_data, tiny_teacher, tmp_path):
    out = tmp_path / "work"
    said = recipe(*base(corpus, out), "--dry-run").stdout
    assert said.startswith("[own] teacher: none; method: seqkd+word_kd; student: tiny")
    steps = commands(said)
    assert [s.split()[1] for s in steps] == ["python", "fsd-prepare-corpus", "fairseq-train", "fsd-seqkd",
                                             "fsd-cache-teacher", "fairseq-train", "fsd-export-ctranslate2",
                                             "fsd-report", "python"]
    assert "--select mbr" in steps[3] and "--teacher-cache" in steps[5] and "--criterion word_kd" in steps[5]
    for method, criterion in (("none", "label_smoothed_cross_entropy"), ("seqkd", "label_smoothed_cross_entropy"),
                              ("word_kd", "word_kd"), ("pkd", "pkd"), ("ckd", "ckd"), ("alp_kd", "alp_kd"),
                              ("a2d", "a2d")):
        steps = commands(recipe(*base(corpus, out), "--dry-run", "--method", method).stdout)
        student = [s for s in steps if "--save-dir" in s and "runs/student" in s]
        assert len(student) == 1 and f"--criterion {criterion} " in student[0], (method, student)
        assert any("fsd-seqkd" in s for s in steps) == (method == "seqkd"), method
        if method in ("pkd", "ckd", "alp_kd", "a2d"):
            assert "--teacher-path" in student[0] and str(out / "data" / "bin") in student[0]
    # a fairseq teacher: its data-bin found from the checkpoint, the text prepared on its vocabulary
    said = recipe(*base(corpus, out), "--dry-run", "--teacher", tiny_teacher).stdout
    assert said.startswith(f"[own] teacher: fairseq ({tiny_teacher}); method: seqkd+word_kd")
    steps = commands(said)
    assert f"--vocabulary-from {tiny_data}" in steps[1] and not any("--save-dir" in s and "runs/teacher" in s
                                                                  for s in steps)
    # a CTranslate2 model: seq-KD data only
    ct2 = tmp_path / "ct2"
    ct2.mkdir()
    (ct2 / "model.bin").write_bytes(b"")
    steps = commands(recipe(*base(corpus, out), "--dry-run", "--teacher", ct2).stdout)
    assert any(f"--teacher-ctranslate2 {ct2}" in s for s in steps) and not any("fsd-cache-teacher" in s for s in steps)
    # a Hugging Face model directory: the text in its pieces, then every method as from a fairseq teacher
    hf = tmp_path / "opus-mt"
    hf.mkdir()
    (hf / "config.json").write_text("{}")
    (hf / "model.safetensors").write_bytes(b"")
    said = recipe(*base(corpus, out), "--dry-run", "--teacher", hf, "--method", "ckd").stdout
    assert said.startswith(f"[own] teacher: huggingface ({hf}); method: ckd")
    steps = commands(said)
    assert f"--vocabulary-from {hf}" in steps[1]
    assert any("--criterion ckd" in s and f"--teacher-path {hf}" in s for s in steps)
    steps = commands(recipe(*base(corpus, out), "--dry-run", "--teacher", hf).stdout)
    # seq-KD from it reads the raw source as prepared: a piece the teacher lacks became <unk>, which
    # cannot be read back from the binarized data
    assert any(f"fsd-seqkd --teacher {hf}" in s and f"--raw-train-source {out}/data/raw/train.de" in s for s in steps)
    assert any("fsd-cache-teacher" in s for s in steps)
    # an NLLB-sized vocabulary trimmed, and the teacher's language codes, go to data preparation
    steps = commands(recipe(*base(corpus, out), "--dry-run", "--teacher", hf, "--teacher-pieces", "32000",
                            "--teacher-languages", "deu_Latn", "eng_Latn").stdout)
    assert f"--vocabulary-from {hf} --teacher-pieces 32000 --teacher-languages deu_Latn eng_Latn" in steps[1]
    assert not os.path.exists(out)  # a dry run writes nothing


def test_bad_input_is_refused_naming_it(corpus, tmp_path):
    out = tmp_path / "work"
    translations = tmp_path / "translations.en"
    translations.write_text("A dog.\n")
    hf = tmp_path / "hf"
    hf.mkdir()
    (hf / "config.json").write_text("{}")
    lopsided = tmp_path / "lopsided"
    lopsided.mkdir()
    shutil.copy(corpus / "train.de", lopsided / "train.de")
    (lopsided / "train.en").write_text("".join(open(corpus / "train.en").readlines()[:-3]))
    cases = [
        ((*base(corpus, out), "--method", "ckd", "--teacher", translations, "--test", corpus / "test"),
         "--method ckd needs a fairseq or Hugging Face teacher (it reads the teacher's distributions or states "
         "during training); a translations teacher serves: auto, none, seqkd"),
        ((*base(corpus, out), "--teacher", translations), "is a file of translations, one for each training pair: "
                                                            "pass --test PREFIX"),
        ((*base(corpus, out), "--teacher", hf), "a directory without a CTranslate2 model.bin or Hugging Face weights"),
        ((*base(corpus, out), "--teacher", tmp_path / "nope.pt"), "no such file or directory"),
        ((*base(corpus, out), "--method", "kd"), "unknown --method 'kd'; valid: auto, none, seqkd, word_kd, pkd"),
        ((*base(corpus, out), "--student", "huge"), "unknown --student 'huge'; valid: tiny, base"),
        ((*base(corpus, out), "--teacher-pieces", "8000"), "--teacher-pieces goes with a Hugging Face teacher "
                                                             "(--teacher MODEL_DIR)"),
        (("-s", "de", "-t", "en", "--valid", corpus / "valid"), "--train is required"),
        (("-s", "de", "-t", "en", "--train", lopsided / "train", "--valid", corpus / "valid", "--out", out),
         "train.de has 400 lines and "),
    ]
    for args, message in cases:
        proc = recipe(*args, check=False)
        assert proc.returncode != 0 and message in proc.stdout, (args, proc.stdout[-1500:])


def test_smoke_runs_end_to_end_and_a_rerun_keeps_every_stage(corpus, tmp_path):
    """The teacher's stages shared out as two machines would (shard 0, shard 1, the merge; seq-KD
    before its cache), then the rest in one go, which takes the merged stages as done."""
    out = tmp_path / "work"
    said = recipe(*base(corpus, out), "--smoke", "--stage", "prepare").stdout
    assert "[own] no --test: the last 20 of 400 training pairs are held out as the test set" in said
    recipe(*base(corpus, out), "--smoke", "--stage", "teacher")
    for stage in ("seqkd", "cache"):
        for shard in (0, 1):
            said = recipe(*base(corpus, out), "--smoke", "--stage", stage, "--num-shards", 2, "--shard-id", shard).stdout
            assert f"[{stage}] shard {shard} of 2 done" in said and not (out / stage / ".done").exists()
        recipe(*base(corpus, out), "--smoke", "--stage", stage, "--num-shards", 2)
        assert (out / stage / ".done").is_file()
    said = recipe(*base(corpus, out), "--smoke").stdout
    assert "[seqkd] done" in said and "[cache] done" in said
    results = (out / "results.md").read_text()
    assert results.startswith("# Your student") and f"`{out / 'student-int8'}`" in results
    assert f"fsd-translate --backend ctranslate2 --model-dir {out / 'student-int8'} --threads 1" in results
    assert (out / "student-int8" / "model.bin").is_file() and (out / "report.json").is_file()
    # the student learned from the cache over the seq-KD data
    state = torch.load(out / "runs" / "student" / "checkpoint_best.pt", weights_only=False)
    assert state["cfg"]["criterion"]["_name"] == "word_kd"
    assert str(state["cfg"]["task"]["teacher_cache"]).endswith("cache")
    again = recipe(*base(corpus, out), "--smoke").stdout
    for stage in ("prepare", "teacher", "seqkd", "cache", "student", "export", "report"):
        assert f"[{stage}] done" in again, stage
    # another corpus in the same work dir is refused, naming it
    other = tmp_path / "other"
    shutil.copytree(corpus, other)
    proc = recipe("-s", "de", "-t", "en", "--train", other / "train", "--valid", other / "valid", "--out", out,
                  "--smoke", check=False)
    assert proc.returncode == 1 and f"is a work dir of the corpus {corpus / 'train'}" in proc.stdout


def test_smoke_from_a_file_of_translations(corpus, tmp_path):
    out = tmp_path / "work"
    translations = tmp_path / "translations.en"
    shutil.copy(corpus / "train.en", translations)  # the references stand in for a teacher's output
    said = recipe(*base(corpus, out), "--test", corpus / "test", "--teacher", translations, "--smoke").stdout
    assert said.startswith(f"[own] teacher: translations ({translations}); method: seqkd")
    results = (out / "results.md").read_text()
    assert "no report card beside it" in results and (out / "student-int8" / "model.bin").is_file()



def test_smoke_from_a_hugging_face_teacher_interrupted_and_rerun(corpus, tmp_path):
    """A MarianMT teacher end to end (its pieces, CTranslate2 seq-KD, its cache, the student): the
    run is interrupted (Ctrl-C) once the teacher's seq-KD stage has begun, and the same command
    again keeps what was finished and completes."""
    import signal

    from hf_models import marian_teacher

    teacher = marian_teacher(str(tmp_path / "opus-mt-de-en"))
    out = tmp_path / "work"
    args = [*base(corpus, out), "--test", corpus / "test", "--teacher", teacher, "--smoke"]
    env = dict(os.environ, PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"])
    proc = subprocess.Popen(["bash", RUN, *map(str, args)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, env=env, cwd=REPO, start_new_session=True)
    seen = []
    for line in proc.stdout:
        seen.append(line)
        if line.startswith("+ fsd-seqkd"):
            os.killpg(proc.pid, signal.SIGINT)
            break
    rest = proc.stdout.read()
    assert proc.wait(timeout=120) != 0, "".join(seen) + rest
    assert not (out / "seqkd" / ".done").exists() and not (out / "results.md").exists()
    said = recipe(*args).stdout
    assert said.startswith(f"[own] teacher: huggingface ({teacher}); method: seqkd+word_kd")
    assert "[prepare] done" in said  # kept from the interrupted run
    results = (out / "results.md").read_text()
    assert "no report card beside it" in results and (out / "student-int8" / "model.bin").is_file()
    state = torch.load(out / "runs" / "student" / "checkpoint_best.pt", weights_only=False)
    assert state["cfg"]["criterion"]["_name"] == "word_kd"
    # the teacher translates de -> en: the other direction is refused at prepare, naming it
    reverse = ["-s", "en", "-t", "de", "--train", corpus / "train", "--valid", corpus / "valid", "--test",
               corpus / "test", "--teacher", teacher, "--out", tmp_path / "reverse", "--smoke"]
    proc = recipe(*reverse, check=False)
    assert proc.returncode != 0 and "translates de -> en" in proc.stdout, proc.stdout[-2000:]


def test_smoke_from_a_fairseq_teacher_and_from_its_ctranslate2_export(corpus, tiny_data, tiny_teacher, tmp_path):
    """A fairseq checkpoint: the text prepared on its vocabulary, every stage, the report card of
    teacher and student. Its CTranslate2 export: seq-KD data only, the student evaluated alone."""
    out = tmp_path / "fairseq"
    args = [*base(corpus, out), "--test", corpus / "test", "--teacher", tiny_teacher, "--teacher-data", tiny_data,
            "--smoke"]
    said = recipe(*args).stdout
    assert said.startswith(f"[own] teacher: fairseq ({tiny_teacher}); method: seqkd+word_kd")
    prepared = (out / "data" / "bin" / "dict.en.txt").read_text(encoding="utf-8")
    assert prepared == open(os.path.join(tiny_data, "dict.en.txt"), encoding="utf-8").read()  # its vocabulary
    report = json.loads((out / "report.json").read_text())
    assert report["teacher"] == "teacher" and {m["name"] for m in report["models"]} == {"teacher", "student"}
    assert (out / "results.md").read_text().startswith("# Your student")
    ct2 = tmp_path / "teacher-ct2"
    subprocess.run([os.path.join(os.path.dirname(sys.executable), "fsd-export-ctranslate2"), tiny_teacher, tiny_data,
                    str(ct2)], check=True, stdout=subprocess.DEVNULL)
    out = tmp_path / "ct2"
    said = recipe(*base(corpus, out), "--test", corpus / "test", "--teacher", ct2, "--smoke").stdout
    assert said.startswith(f"[own] teacher: ctranslate2 ({ct2}); method: seqkd")
    assert json.loads((out / "seqkd" / "seqkd_summary.json").read_text())["sentences"] == 400
    results = (out / "results.md").read_text()
    assert "no report card beside it" in results and (out / "student-int8" / "model.bin").is_file()


def test_the_teachers_stages_shared_out_over_machines_at_a_dry_run(corpus, tmp_path):
    """--num-shards N --shard-id I runs only shard I of the seq-KD or cache stage; the same command
    without --shard-id merges; other stages, a shard id out of range and a file of translations
    are refused, naming what to give."""
    out = tmp_path / "work"
    for stage, tool in (("seqkd", "fsd-seqkd"), ("cache", "fsd-cache-teacher")):
        steps = commands(recipe(*base(corpus, out), "--dry-run", "--stage", stage, "--num-shards", "3",
                                "--shard-id", "2").stdout)
        assert len(steps) == 1 and steps[0].startswith(f"+ {tool} ") and steps[0].rstrip().endswith("--num-shards 3 --shard-id 2")
        steps = commands(recipe(*base(corpus, out), "--dry-run", "--stage", stage, "--num-shards", "3").stdout)
        assert len(steps) == 1 and steps[0].startswith(f"+ {tool} ") and steps[0].rstrip().endswith("--num-shards 3 --merge")
    translations = tmp_path / "translations.en"
    translations.write_text("A dog.\n")
    for args, message in [
        (("--stage", "student", "--num-shards", "2"), "--num-shards shares out the teacher's stages: give --stage "
                                                      "seqkd or --stage cache"),
        (("--stage", "seqkd", "--num-shards", "2", "--shard-id", "2"), "--shard-id must be one of 0 to N-1 with "
                                                                       "--num-shards N (N > 1), got --shard-id 2"),
        (("--stage", "seqkd", "--shard-id", "0"), "got --shard-id 0 with --num-shards 1"),
        (("--stage", "seqkd", "--num-shards", "two"), "--num-shards must be a number of shards (1 or more), got 'two'"),
        (("--stage", "seqkd", "--num-shards", "2", "--teacher", translations, "--test", corpus / "test"),
         "a file of translations runs no teacher, so there is nothing to share out"),
    ]:
        proc = recipe(*base(corpus, out), "--dry-run", *args, check=False)
        assert proc.returncode == 2 and message in proc.stdout, (args, proc.stdout[-1500:])


def test_make_demo_is_this_recipe_on_multi30k_with_no_teacher_given(tmp_path):
    """scripts/demo.sh (make demo) at a dry run: the shipped Multi30k, no teacher given, so the
    recipe trains its small teacher (3+3, 5 epochs at lr 0.002, the later flags fairseq keeps),
    then every stage to the report card, everything under DEMO_WORKDIR."""
    env = dict(os.environ, PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"],
               DEMO_SETUP="0", DEMO_WORKDIR=str(tmp_path / "demo"))
    proc = subprocess.run(["bash", os.path.join(REPO, "scripts", "demo.sh"), "--dry-run"], stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, env=env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-4000:]
    assert proc.stdout.startswith("[own] teacher: none; method: seqkd+word_kd; student: tiny")
    steps = commands(proc.stdout)
    assert [s.split()[1] for s in steps] == ["python", "fsd-prepare-corpus", "fairseq-train", "fsd-seqkd",
                                             "fsd-cache-teacher", "fairseq-train", "fsd-export-ctranslate2",
                                             "fsd-report", "python"]
    assert steps[0].split()[3:9] == ["split", "de", "en", "data/multi30k/train", "data/multi30k/val",
                                     "data/multi30k/test_2016_flickr"]
    teacher = steps[2].rstrip()
    assert "--encoder-layers 3 --decoder-layers 3" in teacher and teacher.endswith(
        f"--max-epoch 5 --lr 0.002 --warmup-updates 300 --cpu --save-dir {tmp_path / 'demo' / 'runs' / 'teacher'}")
    assert "--backend ctranslate2 --beam 8 --nbest 8 --select mbr" in steps[3]
    assert "--max-epoch 5 " in steps[5] and "--criterion word_kd" in steps[5]
    assert all(str(tmp_path / "demo") in s for s in steps[1:])
    # the size is for a teacher the recipe trains
    proc = subprocess.run(["bash", RUN, "-s", "de", "-t", "en", "--train", "x", "--valid", "y", "--teacher", "t.pt",
                           "--teacher-size", "small"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          env=env)
    assert proc.returncode == 2 and "--teacher-size sizes the teacher the recipe trains" in proc.stdout