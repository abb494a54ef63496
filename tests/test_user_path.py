"""Issue 69, what a user acts on: the plugin from outside the checkout, its options listed, every
tool's defaults in --help, fsd-translate's threads and device, a stock fairseq data-bin's model
deployed."""
import contextlib
import io
import os
import re
import shutil
import sys

import pytest
import torch

from fairseq_distill.errors import DistillError

from helpers import REPO


def help_of(module: str) -> str:
    """What ``fsd-... --help`` prints (in-process: the front end's main)."""
    import importlib

    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit) as raised:
        importlib.import_module(f"fairseq_distill.cli.{module}").main(["--help"])
    assert raised.value.code == 0
    return out.getvalue()


def console_scripts():
    text = open(os.path.join(REPO, "setup.py"), encoding="utf-8").read()
    return re.findall(r'"(fsd-[\w-]+)=fairseq_distill\.cli\.(\w+):main"', text)


def test_every_tools_help_shows_its_defaults_and_a_whole_first_sentence():
    scripts = console_scripts()
    assert ("fsd-options", "options") in scripts and len(scripts) >= 18
    for script, module in scripts:
        text = help_of(module)
        # the description: the docstring's whole first paragraph, never cut at a line end
        description = text.split("\n\n")[1]
        assert description.rstrip().endswith((".", ")", ":")), (script, description)
    assert re.search(r"--beam BEAM\s+default: 4", help_of("translate"))
    assert re.search(r"--beam BEAM\s+.*default: 5", help_of("seqkd"), re.S)
    assert "(default: 64)" in help_of("translate") and "(default: int8)" not in help_of("export_ctranslate2")
    assert "no --user-dir)." in help_of("export_subnetwork").split("\n\n")[1]


def test_fsd_options_lists_a_criterions_options_with_their_defaults(capsys):
    from fairseq_distill.cli.options import main

    main(["ckd"])
    said = capsys.readouterr().out
    assert said.startswith("--criterion ckd (criterion, ")
    for option, default in (("--kd-temperature", "(default: 1.0)"), ("--layer-weight", "(default: 0.7)"),
                            ("--ckd-form {released,paper}", "released (default)")):
        start = said.index(f"  {option}")
        assert default in said[start:start + 300], option
    main(["translation_distill"])
    assert "--teacher-path" in capsys.readouterr().out
    main(["deep_transformer"])
    assert "--encoder-layers" in capsys.readouterr().out
    with pytest.raises(SystemExit) as raised:
        main(["ckdd"])
    assert "'ckdd' is no criterion, task or architecture" in str(raised.value) and "ckd" in str(raised.value)
    main(["--user-dir"])
    folder = capsys.readouterr().out.strip()
    assert os.path.isfile(os.path.join(folder, "__init__.py")) and os.path.basename(folder) == "fairseq_distill"


def test_translate_takes_threads_and_a_device_and_refuses_bad_ones(tiny_data, tiny_teacher):
    from fairseq_distill.deploy.translators import DecodingOptions, build_translator

    before = torch.get_num_threads()
    try:
        translator, _ = build_translator("fairseq", DecodingOptions(), tiny_teacher, tiny_data, device="cpu",
                                         threads=1)
        assert torch.get_num_threads() == 1 and translator.device.type == "cpu"
    finally:
        torch.set_num_threads(before)
    with pytest.raises(DistillError, match="--threads must be at least 1, got 0"):
        build_translator("fairseq", DecodingOptions(), tiny_teacher, tiny_data, threads=0)
    if not torch.cuda.is_available():
        with pytest.raises(DistillError, match="--device cuda: no CUDA device is visible here; use --device cpu"):
            build_translator("fairseq", DecodingOptions(), tiny_teacher, tiny_data, device="cuda")


def test_a_model_of_a_stock_fairseq_data_bin_deploys_without_preparing_again(tiny_data, tiny_teacher, tmp_path):
    """A data-bin without fairseq_distill.json (as fairseq-preprocess leaves it, beside its
    sentencepiece model): the export takes the languages from the checkpoint and the subword
    model from the directory, and the exported model translates raw text as the fairseq one does."""
    from fairseq_distill.deploy.ctranslate2_export import export_ctranslate2
    from fairseq_distill.deploy.translators import (CTranslate2Translator, DecodingOptions, FairseqTranslator,
                                                    translate_lines)
    from fairseq_distill.text.segmentation import Segmenter, load_meta

    stock = tmp_path / "stock"
    shutil.copytree(tiny_data, stock)
    meta = load_meta(str(stock))
    os.remove(stock / "fairseq_distill.json")
    assert (stock / meta["sentencepiece_model"]).is_file()
    info = export_ctranslate2(tiny_teacher, str(stock), str(tmp_path / "ct2"), "float32")
    assert (info["source_lang"], info["target_lang"]) == ("de", "en")
    deployed = load_meta(str(tmp_path / "ct2"))
    assert deployed["bpe"] == "sentencepiece" and (tmp_path / "ct2" / deployed["sentencepiece_model"]).is_file()
    lines = ["Ein Hund läuft.", "Zwei Männer spielen Fußball."]
    options = DecodingOptions(beam=1)
    ours = translate_lines(lines, CTranslate2Translator(str(tmp_path / "ct2"), options, "cpu"),
                           Segmenter.from_dir(str(tmp_path / "ct2")), progress=False).outputs
    theirs = translate_lines(lines, FairseqTranslator(tiny_teacher, tiny_data, options, "cpu"),
                             Segmenter.from_dir(tiny_data), progress=False).outputs
    assert ours == theirs
    # with no subword model there, it says which option gives it
    os.remove(stock / meta["sentencepiece_model"])
    with pytest.raises(DistillError, match=r"has no fairseq_distill.json \(a stock fairseq data-bin\) and holds no "
                                           r"subword model \(none\): pass --subword-model FILE"):
        export_ctranslate2(tiny_teacher, str(stock), str(tmp_path / "ct2b"), "float32")
    info = export_ctranslate2(tiny_teacher, str(stock), str(tmp_path / "ct2b"), "float32",
                              subword_model=os.path.join(tiny_data, meta["sentencepiece_model"]))
    assert load_meta(str(tmp_path / "ct2b"))["sentencepiece_model"] == meta["sentencepiece_model"]


@pytest.mark.slow
def test_the_readme_quickstart_runs_as_written_from_outside_the_checkout(tmp_path):
    """README's quickstart, step 3, copied as a user copies it, in a directory outside the
    checkout (its fairseq-train finds the plugin by --user-dir "$(fsd-options --user-dir)"); only
    the sizes shrink (a 200-pair slice of its corpus, 2 updates a model)."""
    import subprocess

    from helpers import write_slice

    text = open(os.path.join(REPO, "README.md"), encoding="utf-8").read()
    block = re.search(r"```bash\n(.*?)```", text[text.index("## Quickstart"):], re.S).group(1)
    raw = tmp_path / "corpus"
    raw.mkdir()
    for split, source, n in (("train", "train", 200), ("val", "val", 20), ("test_2016_flickr", "test_2016_flickr", 20)):
        write_slice(str(raw), split, source, n)
    small = (block.replace('$(dirname "$PLUGIN")/data/multi30k', str(raw))
             .replace("--vocab-size 8000", "--vocab-size 300")
             .replace("--max-epoch 20", "--max-update 2").replace("--max-epoch 10", "--max-update 2")
             # fsd-report runs end to end in tests/test_recipe_own.py's smoke run: not twice
             .replace("fsd-report ", "true fsd-report "))
    assert small.count("--max-update 2") == 2 and "true fsd-report" in small and str(raw) in small
    work = tmp_path / "work"
    work.mkdir()
    env = {**os.environ, "PATH": os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"]}
    done = subprocess.run(["bash", "-euo", "pipefail", "-c", small], cwd=work, capture_output=True, text=True,
                          env=env)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert (work / "student-int8" / "model.bin").is_file()
    assert len(done.stdout.splitlines()[-1:]) == 1  # the translation of the one input line


@pytest.mark.slow
def test_new_text_prepared_on_a_teachers_vocabulary_is_read_by_that_teacher(tiny_data, tiny_teacher, tmp_path):
    """fsd-prepare-corpus --vocabulary-from DATA_BIN: other text, the teacher's subword model and
    dictionaries (byte for byte), so the teacher (and a student distilled on it) reads the new data;
    a stock data-bin without its subword model names --subword-model."""
    import hashlib
    import subprocess

    from helpers import prepare_corpus_argv, run, write_slice

    from fairseq_distill.data_bin import check_checkpoints_match_data
    from fairseq_distill.text.segmentation import load_meta

    raw = tmp_path / "raw"
    raw.mkdir()
    for split, source, n in (("train", "val", 300), ("valid", "test_2016_flickr", 20), ("test", "test_2016_flickr", 30)):
        write_slice(str(raw), split, source, n)
    out = tmp_path / "new"
    said = run(prepare_corpus_argv(raw, out, "--vocabulary-from", tiny_data, "--workers", "1")).stdout
    assert f"the sentencepiece model and dictionaries of {tiny_data}" in said
    for name in ("dict.de.txt", "dict.en.txt", load_meta(tiny_data)["sentencepiece_model"]):
        assert hashlib.sha256((out / "bin" / name).read_bytes()).digest() == \
            hashlib.sha256(open(os.path.join(tiny_data, name), "rb").read()).digest(), name
    check_checkpoints_match_data(tiny_teacher, str(out / "bin"))  # the teacher's dictionaries: accepted
    assert load_meta(str(out / "bin"))["vocabulary_from"] == os.path.abspath(tiny_data)
    # a stock data-bin: dictionaries, no subword model recorded or held
    stock = tmp_path / "stock"
    stock.mkdir()
    for name in ("dict.de.txt", "dict.en.txt"):
        shutil.copy(os.path.join(tiny_data, name), stock / name)
    done = subprocess.run(prepare_corpus_argv(raw, tmp_path / "other", "--vocabulary-from", str(stock)),
                          capture_output=True, text=True)
    assert done.returncode == 1 and "records no subword model and holds no (none): pass --subword-model FILE" \
        in done.stderr, done.stderr[-1000:]


def test_the_readmes_one_install_line_gives_every_extra_the_docs_go_on_to_use():
    """README's install line installs ``.[all]``, and ``all`` holds every other extra's packages
    (CTranslate2 for export and the report, matplotlib for its plot, transformers, sacremoses)."""
    import ast

    text = open(os.path.join(REPO, "setup.py"), encoding="utf-8").read()
    extras = ast.literal_eval(re.search(r"extras_require=(\{.*?\n    \})", text, re.S).group(1))
    others = set().union(*(set(v) for k, v in extras.items() if k not in ("all", "test")))
    assert others <= set(extras["all"]), others - set(extras["all"])
    readme = open(os.path.join(REPO, "README.md"), encoding="utf-8").read()
    quickstart = readme[readme.index("## Quickstart"):readme.index("## One benchmark")]
    assert 'pip install --no-build-isolation -e "./fairseq_distill[all]"' in quickstart
