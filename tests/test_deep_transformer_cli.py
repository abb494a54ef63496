"""deep_transformer through fairseq-train / fairseq-generate, and GPKD student extraction."""
import os
import re
import sys

import pytest
import torch
from fairseq import checkpoint_utils

from helpers import PACKAGE_DIR, build, fairseq_train, first_batch, python_module, run
from fairseq_distill.modules.layer_stack import StochasticLayerStack

pytestmark = pytest.mark.slow  # a GPKD teacher trained with fairseq-train; extraction commands

# widths come from the tiny model flags (16 wide, FFN 32, 2 heads); 4 + 2 layers in groups of 2
DEEP = ["--user-dir", PACKAGE_DIR, "--arch", "deep_transformer", "--encoder-layers", "4",
        "--decoder-layers", "2", "--max-relative-length", "4"]
GROUPS = ["--encoder-group-size", "2", "--decoder-group-size", "2"]
CE = ["--criterion", "label_smoothed_cross_entropy"]
EXTRACT = os.path.join(os.path.dirname(sys.executable), "fsd-extract-student")  # the console script


def losses(out):
    return [float(m) for m in re.findall(r"\| train_inner \|.*? loss=([\d.]+)", out)]


def generate(data, path, *extra):
    out = run(python_module("fairseq_cli.generate", data, "--path", path, "--user-dir", PACKAGE_DIR,
                            "--cpu", "--beam", "2", "--max-len-b", "5", "--batch-size", "16", *extra)).stdout
    assert "Translated 40 sentences" in out, out[-2000:]
    return out


@pytest.fixture(scope="module")
def gpkd_teacher(tiny_data, tmp_path_factory):
    """Stage 1: a 4+2-layer teacher trained with group permutation on both sides."""
    save = tmp_path_factory.mktemp("gpkd_teacher")
    out = fairseq_train(tiny_data, str(save), *DEEP, *GROUPS, *CE, "--max-update", "15").stdout
    return str(save / "checkpoint_last.pt"), out


def test_group_permuted_teacher_trains_and_decodes(tiny_data, gpkd_teacher):
    path, out = gpkd_teacher
    seen = losses(out)
    assert len(seen) == 15 and seen[-1] < seen[0] - 0.5, seen
    cfg = torch.load(path, map_location="cpu", weights_only=False)["cfg"]["model"]
    assert (cfg.arch, cfg.encoder_group_size, cfg.decoder_group_size, cfg.max_relative_length) == \
        ("deep_transformer", 2, 2, 4)
    generate(tiny_data, path)


def test_skipping_sublayer_stage_two_continues_stage_one(tiny_data, gpkd_teacher, tmp_path):
    stage1, _ = gpkd_teacher
    # the recipe's flags: same model with skipping on, stage 1's weights, optimizer and update
    # count, a fresh pass over the data
    out = fairseq_train(tiny_data, str(tmp_path), *DEEP, *CE, "--skip-sublayer-rate", "0.4",
                        "--restore-file", stage1, "--reset-dataloader", "--reset-meters",
                        "--max-update", "20").stdout
    assert re.search(r"Loaded checkpoint .*checkpoint_last\.pt \(epoch \d+ @ 15 updates\)", out), out[-3000:]
    assert len(losses(out)) == 5 and all(l == l for l in losses(out))  # 5 more updates, no NaN
    cfg = torch.load(tmp_path / "checkpoint_last.pt", map_location="cpu", weights_only=False)["cfg"]["model"]
    assert cfg.skip_sublayer_rate == 0.4
    generate(tiny_data, str(tmp_path / "checkpoint_last.pt"))


def test_desdar_shape_trains(tiny_data, tmp_path):
    out = fairseq_train(tiny_data, str(tmp_path), *DEEP, "--decoder-layers", "1", *CE,
                        "--encoder-group-size", "4", "--skip-sublayer-rate", "0.2", "--max-update", "4").stdout
    assert len(losses(out)) == 4
    weights = torch.load(tmp_path / "checkpoint_last.pt", map_location="cpu", weights_only=False)["model"]
    layers = {side: {k.split(".")[2] for k in weights if k.startswith(f"{side}.layers.")}
              for side in ("encoder", "decoder")}
    assert layers == {"encoder": {"0", "1", "2", "3"}, "decoder": {"0"}}


def load(path, task):
    models, _ = checkpoint_utils.load_model_ensemble([path], task=task)
    return models[0].eval()


def test_extracted_student_is_the_teacher_restricted_to_kept_layers(tiny_data, gpkd_teacher, tmp_path):
    teacher_path, _ = gpkd_teacher
    student_path = str(tmp_path / "student.pt")
    out = run([EXTRACT, teacher_path, student_path]).stdout
    assert "[extract] encoder: kept 2 of 4 layers: [2, 4]" in out
    assert "[extract] decoder: kept 1 of 2 layers: [2]" in out
    assert "loads and runs (checked)" in out

    state = torch.load(student_path, map_location="cpu", weights_only=True)  # no pickled objects
    assert state["optimizer_history"][-1]["num_updates"] == 0 and "criterion" not in state
    cfg = state["cfg"]["model"]
    assert (cfg["encoder_layers"], cfg["decoder_layers"], cfg["encoder_group_size"], cfg["_name"]) == \
        (2, 1, 0, "deep_transformer")

    _, task, _ = build(tiny_data)
    teacher, student = load(teacher_path, task), load(student_path, task)
    # the teacher's own forward, run through layers 2 and 4 of the encoder and 2 of the decoder
    teacher.encoder.layers = StochasticLayerStack([teacher.encoder.layers[i] for i in (1, 3)])
    teacher.decoder.layers = StochasticLayerStack([teacher.decoder.layers[1]])
    teacher.decoder.num_layers = 1
    sample = first_batch(task, "valid")
    with torch.no_grad():
        want = teacher(**sample["net_input"])[0]
        got = student(**sample["net_input"])[0]
    assert torch.equal(got, want)

    generate(tiny_data, student_path)

    # the student trains on from this initialisation (the recipe's flags); its first batch
    # shows it: a loss well below that of the same student from scratch
    student_flags = [*DEEP, "--encoder-layers", "2", "--decoder-layers", "1", *CE, "--max-update", "3"]
    out = fairseq_train(tiny_data, str(tmp_path / "train"), *student_flags, "--restore-file", student_path,
                        "--reset-optimizer", "--reset-lr-scheduler", "--reset-meters", "--reset-dataloader").stdout
    assert f"Preparing to load checkpoint {student_path}" in out and "No existing checkpoint" not in out
    scratch = fairseq_train(tiny_data, str(tmp_path / "scratch"), *student_flags).stdout
    assert losses(out)[0] < losses(scratch)[0] - 0.3, (losses(out), losses(scratch))


def test_student_from_a_skipping_teacher_drops_its_keep_probability_scaling(tiny_data, gpkd_teacher, tmp_path):
    """Issue 31.6, as documented in docs/methods/deep_models.md: a teacher trained with Skipping
    Sub-Layer scales each encoder sub-layer's output by 1 - p_l at inference; its extracted layers
    are copied unscaled, so the student computes the teacher's forward without that scaling."""
    stage1, _ = gpkd_teacher
    fairseq_train(tiny_data, str(tmp_path / "skip"), *DEEP, *CE, "--skip-sublayer-rate", "0.4",
                  "--restore-file", stage1, "--reset-dataloader", "--reset-meters", "--max-update", "17")
    teacher_path, student_path = str(tmp_path / "skip" / "checkpoint_last.pt"), str(tmp_path / "student.pt")
    run([EXTRACT, teacher_path, student_path, "--keep", "all"])
    assert torch.load(student_path, map_location="cpu", weights_only=True)["cfg"]["model"]["skip_sublayer_rate"] == 0.0

    _, task, _ = build(tiny_data)
    teacher, student = load(teacher_path, task), load(student_path, task)
    assert teacher.encoder.layers.skip_probs and max(map(max, teacher.encoder.layers.skip_probs)) > 0
    sample = first_batch(task, "valid")
    with torch.no_grad():
        scaled = teacher(**sample["net_input"])[0]
        teacher.encoder.layers.skip_probs = None  # the stack sets each layer's keep probability per forward
        for layer in teacher.encoder.layers:
            layer.skip_probs = (0.0, 0.0)
        unscaled = teacher(**sample["net_input"])[0]
        got = student(**sample["net_input"])[0]
    assert torch.equal(got, unscaled)
    assert not torch.allclose(got, scaled, atol=1e-3)


def test_extraction_keep_rules(tiny_data, gpkd_teacher, tmp_path):
    teacher_path, _ = gpkd_teacher
    out = run([EXTRACT, teacher_path, str(tmp_path / "b.pt"), "--keep", "bottom",
               "--decoder-keep", "all"]).stdout
    assert "encoder: kept 2 of 4 layers: [1, 3]" in out and "decoder: kept 2 of 2 layers: [1, 2]" in out
    out = run([EXTRACT, teacher_path, str(tmp_path / "l.pt"), "--encoder-keep", "1,2,4",
               "--decoder-keep", "1"]).stdout
    assert "encoder: kept 3 of 4 layers: [1, 2, 4]" in out and "decoder: kept 1 of 2 layers: [1]" in out
    out = run([EXTRACT, teacher_path, str(tmp_path / "r.pt"), "--keep", "random", "--seed", "3"]).stdout
    kept = [int(x) for x in re.search(r"encoder: kept 2 of 4 layers: \[(\d+), (\d+)\]", out).groups()]
    assert kept[0] in (1, 2) and kept[1] in (3, 4)


@pytest.mark.parametrize("flags,message", [
    (["--encoder-keep", "2,5"], "--encoder-keep: layer(s) [5] out of range; the teacher's encoder has layers 1..4"),
    (["--encoder-keep", "3,1"], "list each layer once, in increasing order"),
    (["--decoder-keep", "middle"], "--decoder-keep 'middle' is neither one of top, bottom, random, all"),
    (["--encoder-group-size", "3"], "encoder group size 3 does not divide its 4 layers"),
])
def test_extraction_errors_name_the_bad_value(gpkd_teacher, tmp_path, flags, message):
    teacher_path, _ = gpkd_teacher
    proc = run([EXTRACT, teacher_path, str(tmp_path / "x.pt"), *flags], check=False)
    assert proc.returncode != 0 and message in proc.stdout, proc.stdout[-2000:]
    assert not os.path.exists(tmp_path / "x.pt")


def test_extraction_of_a_missing_checkpoint(tmp_path):
    proc = run([EXTRACT, str(tmp_path / "nope.pt"), str(tmp_path / "x.pt")], check=False)
    assert proc.returncode != 0 and f"checkpoint not found: '{tmp_path / 'nope.pt'}'" in proc.stdout
