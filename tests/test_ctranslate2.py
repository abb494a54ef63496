"""CTranslate2 export, the translate command (both backends) and the backend comparison."""
import os
import re
import sys

import pytest

from helpers import PACKAGE_DIR, fairseq_train, python_module, run
from fairseq_distill.text.segmentation import Segmenter
from fairseq_distill.deploy.translators import CTranslate2Translator, DecodingOptions, translate_lines

pytestmark = pytest.mark.slow  # a model trained with fairseq-train until it writes real sentences

pytest.importorskip("ctranslate2")

# the installed console scripts, the documented way in
EXPORT = os.path.join(os.path.dirname(sys.executable), "fsd-export-ctranslate2")
TRANSLATE = os.path.join(os.path.dirname(sys.executable), "fsd-translate")
LIMITS = ["--max-len-a", "1.2", "--max-len-b", "10"]


@pytest.fixture(scope="module")
def exported(tiny_data, tmp_path_factory):
    """A small model trained until it writes real sentences, as a clean student checkpoint and
    two CTranslate2 exports."""
    root = tmp_path_factory.mktemp("ct2")
    wide = [f"--{side}-{what}" for side in ("encoder", "decoder") for what in ("embed-dim", "ffn-embed-dim")]
    fairseq_train(tiny_data, str(root / "train"), "--criterion", "label_smoothed_cross_entropy",
                  "--max-update", "150", "--lr", "0.005", "--log-interval", "50",
                  *[x for flag, dim in zip(wide, ("32", "64", "32", "64")) for x in (flag, dim)])
    student = str(root / "student.pt")
    run(python_module("fairseq_distill.cli.export_student", str(root / "train" / "checkpoint_best.pt"), student))
    dirs = {}
    for q in ("float32", "int8"):
        dirs[q] = str(root / q)
        out = run([EXPORT, student, tiny_data, dirs[q], "--quantization", q]).stdout
        assert re.search(rf"\[export\] .*: transformer as CTranslate2 {q}, model.bin [\d.]+ MiB, de->en", out), out
        for name in ("model.bin", "sentencepiece.model", "fairseq_distill.json", "fairseq_distill_deploy.json"):
            assert os.path.isfile(os.path.join(dirs[q], name)), name
    return student, dirs


def test_float32_greedy_equals_fairseq_generate_token_for_token(tiny_data, exported):
    student, dirs = exported
    gen = run(python_module("fairseq_cli.generate", tiny_data, "--path", student, "--cpu", "--beam", "1",
                            "--batch-size", "1", "--required-batch-size-multiple", "1", *LIMITS)).stdout
    fairseq_out = {int(m.group(1)): m.group(2).split() for m in re.finditer(r"^H-(\d+)\t\S+\t(.*)$", gen, re.M)}
    sources = {int(m.group(1)): m.group(2).split() for m in re.finditer(r"^S-(\d+)\t(.*)$", gen, re.M)}
    assert len(fairseq_out) == 40
    assert sum(map(len, fairseq_out.values())) / 40 >= 5  # real output, not just </s>
    translator = CTranslate2Translator(dirs["float32"], DecodingOptions(beam=1, max_len_a=1.2, max_len_b=10))
    ids = sorted(fairseq_out)[:12]
    for i in ids:  # one sentence per call: the same length limit as fairseq's
        assert translator.translate([sources[i]])[0] == fairseq_out[i], i


def test_int8_bleu_is_close_to_float32(tiny_data, exported):
    student, dirs = exported
    out = run(python_module("fairseq_distill.cli.evaluate", student, tiny_data, "--ctranslate2",
                            dirs["float32"], dirs["int8"], "--beam", "2")).stdout
    bleu = dict(re.findall(r"^\| (fairseq \(float32\)|ctranslate2 \(\w+\)) \| ([\d.]+) \|", out, re.M))
    assert set(bleu) == {"fairseq (float32)", "ctranslate2 (float32)", "ctranslate2 (int8)"}, out
    # the same model through both backends gives the same translations; int8 stays within 1 BLEU
    assert abs(float(bleu["fairseq (float32)"]) - float(bleu["ctranslate2 (float32)"])) < 0.5
    assert abs(float(bleu["ctranslate2 (int8)"]) - float(bleu["ctranslate2 (float32)"])) <= 1.0


def raw_test_lines(tiny_data, n=8):
    with open(os.path.join(tiny_data, "raw", "test.de"), encoding="utf-8") as f:
        return f.read().splitlines()[:n]


@pytest.mark.parametrize("backend", ["fairseq", "ctranslate2"])
def test_translate_keeps_order_and_empty_lines(tiny_data, exported, tmp_path, backend):
    student, dirs = exported
    lines = raw_test_lines(tiny_data)
    with_gaps = lines[:3] + [""] + lines[3:6] + ["   ", ""] + lines[6:]
    (tmp_path / "in.de").write_text("\n".join(with_gaps) + "\n", encoding="utf-8")
    source = ["--checkpoint", student, "--data-bin", tiny_data] if backend == "fairseq" else \
        ["--model-dir", dirs["float32"]]
    proc = run([TRANSLATE, "--backend", backend, *source, "--input", str(tmp_path / "in.de"),
                "--output", str(tmp_path / "out.en"), "--beam", "1", "--batch-size", "3", *LIMITS])
    out = (tmp_path / "out.en").read_text(encoding="utf-8").split("\n")[:-1]
    assert len(out) == len(with_gaps)
    assert [i for i, line in enumerate(out) if not line] == [3, 7, 8]
    assert "[translate] 8 sentences (3 empty)" in proc.stdout
    # the non-empty outputs are the translations of the non-empty inputs, in order
    translator = CTranslate2Translator(dirs["float32"], DecodingOptions(beam=1, max_len_a=1.2, max_len_b=10)) \
        if backend == "ctranslate2" else None
    if translator is not None:
        want = translate_lines(lines, translator, Segmenter.from_dir(dirs["float32"]), progress=False).outputs
        assert [line for line in out if line.strip()] == want


def test_order_is_kept_across_length_sorted_batches(tiny_data, exported):
    _, dirs = exported
    lines = raw_test_lines(tiny_data, 12)
    translator = CTranslate2Translator(dirs["float32"], DecodingOptions(beam=1, max_len_a=1.2, max_len_b=10))
    segmenter = Segmenter.from_dir(dirs["float32"])
    batched = translate_lines(lines, translator, segmenter, batch_size=4, progress=False).outputs
    one_by_one = [translate_lines([line], translator, segmenter, progress=False).outputs[0] for line in lines]
    assert batched == one_by_one
    reversed_run = translate_lines(lines[::-1], translator, segmenter, batch_size=5, progress=False).outputs
    assert reversed_run == batched[::-1]


def test_overlong_input_is_truncated_with_a_warning(tiny_data, exported, capsys):
    _, dirs = exported
    translator = CTranslate2Translator(dirs["float32"], DecodingOptions(beam=1, max_len_b=5))
    segmenter = Segmenter.from_dir(dirs["float32"])
    long_line = " ".join(["Hund"] * 1500)
    result = translate_lines(["Ein Hund .", long_line], translator, segmenter, progress=False)
    err = capsys.readouterr().err
    n = len(segmenter.encode(long_line))
    assert f"line 2 has {n} subword tokens; the model takes at most 1023, so it is truncated" in err
    assert result.truncated == [2] and all(result.outputs)


def test_errors_name_the_bad_input(tiny_data, exported, tmp_path):
    student, dirs = exported
    cases = [
        (["--backend", "ctranslate2", "--model-dir", str(tmp_path)],
         f"{tmp_path} is not a CTranslate2 model exported by export_ctranslate2"),
        (["--backend", "fairseq", "--checkpoint", str(tmp_path / "nope.pt"), "--data-bin", tiny_data],
         f"checkpoint not found: '{tmp_path / 'nope.pt'}'"),
        (["--backend", "fairseq", "--checkpoint", student],
         "the fairseq backend needs --checkpoint and --data-bin"),
        (["--backend", "ctranslate2", "--model-dir", dirs["int8"], "--input", str(tmp_path / "missing.de")],
         f"cannot read input '{tmp_path / 'missing.de'}'"),
    ]
    for args, message in cases:
        proc = run([TRANSLATE, *args], check=False)
        assert proc.returncode != 0 and message in proc.stdout, (args, proc.stdout[-1500:])


def test_unsupported_architecture_is_refused_by_name(tiny_data, tmp_path):
    fairseq_train(tiny_data, str(tmp_path / "deep"), "--user-dir", PACKAGE_DIR, "--arch", "deep_transformer",
                  "--max-update", "1", "--criterion", "label_smoothed_cross_entropy")
    proc = run([EXPORT, str(tmp_path / "deep" / "checkpoint_last.pt"), tiny_data, str(tmp_path / "ct2")],
               check=False)
    assert proc.returncode != 0
    assert "cannot be exported to CTranslate2: relative position representations" in proc.stdout
    assert not os.path.exists(tmp_path / "ct2" / "model.bin")
