"""Stand-ins for the tools a recipe's bash scripts run (fairseq-train and the fsd-* commands), to
test the scripts' own logic in seconds: what they run, skip, record and refuse. Each stub logs
its command line (one JSON list a line) to ``$STUB_LOG`` and writes the files the next stage
reads; ``fsd-benchmark-score table`` is the real one. ``$STUB_FAIL=NAME``: fairseq-train into a
save dir of that name leaves a checkpoint and fails, as a training killed half-way."""
import json
import os
import stat
import sys

TOOLS = ("fairseq-train", "fsd-cache-teacher", "fsd-seqkd", "fsd-evaluate", "fsd-benchmark-score",
         "fsd-benchmark-corpus", "fsd-prepare-corpus", "fsd-extract-student")
SCORES = {"paper_bleu": 1.0, "sacrebleu": 2.0, "chrf": 3.0, "paper_bleu_form": "stub", "paper_bleu_signature": "s",
          "sacrebleu_signature": "s", "chrf_signature": "s"}


def option(argv, name, default=None):
    return argv[argv.index(name) + 1] if name in argv else default


def write(path, text):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)


def main(tool, argv):
    with open(os.environ["STUB_LOG"], "a", encoding="utf-8") as f:
        f.write(json.dumps([tool] + argv) + "\n")
    if tool == "fairseq-train":
        save = option(argv, "--save-dir")
        write(os.path.join(save, "checkpoint_last.pt"), "stub")
        write(os.path.join(save, "checkpoint_best.pt"), "stub")
        if os.path.basename(save) == os.environ.get("STUB_FAIL"):
            sys.exit("stub: killed")
    elif tool in ("fsd-cache-teacher", "fsd-seqkd"):
        write(os.path.join(option(argv, "--out"), "stub.json"), json.dumps(argv))
    elif tool == "fsd-evaluate":
        write(option(argv, "--out"), json.dumps({"hypotheses": "h.txt", "checkpoint": argv[0]}))
    elif tool == "fsd-benchmark-score" and argv[0] == "score":
        write(option(argv, "--out"), json.dumps(SCORES))
    elif tool == "fsd-benchmark-score":
        from fairseq_distill.cli.benchmark_score import main as real

        real(argv)
    elif tool == "fsd-benchmark-corpus":
        out = option(argv, "--out")
        for split in ("train", "valid", "test"):
            for lang in ("de", "en"):
                write(os.path.join(out, f"{split}.{lang}"), "x\n")
        write(os.path.join(out, "counts.json"), json.dumps({"corpus": argv[0], "lines": {}}))
    elif tool == "fsd-prepare-corpus":
        out = os.path.join(option(argv, "--out"), "bin")
        vocab = option(argv, "--vocab-size", "0")
        write(os.path.join(out, "fairseq_distill.json"), json.dumps({"bpe": option(argv, "--bpe")}))
        for name in ("dict.de.txt", "dict.en.txt", "train.de-en.de.bin", "train.de-en.de.idx"):
            write(os.path.join(out, name), f"{name} {vocab}\n")
    elif tool == "fsd-extract-student":
        write(argv[1], "stub")


def install(bin_dir: str) -> str:
    """The stubs as commands in ``bin_dir``; returns it."""
    os.makedirs(bin_dir, exist_ok=True)
    for tool in TOOLS:
        path = os.path.join(bin_dir, tool)
        write(path, f"#!{sys.executable}\nimport sys\nsys.path.insert(0, {os.path.dirname(os.path.abspath(__file__))!r})\n"
                    f"from recipe_stubs import main\nmain({tool!r}, sys.argv[1:])\n")
        os.chmod(path, os.stat(path).st_mode | stat.S_IXUSR)
    return bin_dir
