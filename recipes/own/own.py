"""The helpers of recipes/own/run.sh that are easier in Python than in bash.

    python own.py plugin                   the installed plugin's folder, for --user-dir
    python own.py teacher PATH             the teacher's kind: none, fairseq, huggingface, ctranslate2, translations
    python own.py teacher-data CHECKPOINT  the data-bin a fairseq checkpoint was trained on, if it is found
    python own.py split SRC TGT TRAIN VALID TEST|- OUT    the text the recipe prepares, in OUT/text
    python own.py results OUT SRC TGT      OUT/results.md from the report (or the evaluation)

Each prints one line (or writes its files) and exits 1 with one line on stderr for bad input.
"""
import gzip
import json
import os
import sys

# test pairs held out of the training text when no test set is given: at most this many, and at
# most a twentieth of it
HELD_OUT = 1000


def fail(message):
    sys.exit(f"run.sh: {message}")


# the weights of a Hugging Face model directory (fairseq_distill.teacher.huggingface.WEIGHT_FILES;
# not imported: the kind is told before any package loads)
HF_WEIGHTS = {"model.safetensors", "pytorch_model.bin", "model.safetensors.index.json", "pytorch_model.bin.index.json"}


def teacher_kind(path: str) -> str:
    if path in ("", "none"):
        return "none"
    if not os.path.exists(path):
        fail(f"--teacher {path}: no such file or directory")
    if os.path.isdir(path):
        names = set(os.listdir(path))
        if "model.bin" in names:
            return "ctranslate2"
        if "config.json" in names and names & HF_WEIGHTS:
            return "huggingface"
        fail(f"--teacher {path}: a directory without a CTranslate2 model.bin or Hugging Face weights (config.json "
             f"and {' or '.join(sorted(HF_WEIGHTS))}); give a fairseq checkpoint (.pt), a Hugging Face or "
             f"CTranslate2 model directory, or a file of translations")
    with open(path, "rb") as f:
        head = f.read(4)
    # torch.save writes a zip archive (or, before torch 1.6, a pickle)
    if path.endswith(".pt") or head.startswith(b"PK") or head[:1] == b"\x80":
        return "fairseq"
    return "translations"


def teacher_data(checkpoint: str) -> str:
    """The directory holding the dictionaries the checkpoint was trained with, or ''."""
    from fairseq_distill import compat
    from fairseq_distill.data_bin import training_data_candidates

    state = compat.load_checkpoint(checkpoint)
    for candidate in training_data_candidates(state, checkpoint):
        if os.path.isdir(candidate) and any(n.startswith("dict.") for n in os.listdir(candidate)):
            return candidate
    return ""


def open_text(path: str):
    for candidate in (path, path + ".gz"):
        if os.path.isfile(candidate):
            if candidate.endswith(".gz"):
                return gzip.open(candidate, "rt", encoding="utf-8", newline="\n")
            return open(candidate, encoding="utf-8", newline="\n")
    fail(f"no file {path} (nor {path}.gz)")


def count_lines(prefix: str, lang: str) -> int:
    with open_text(f"{prefix}.{lang}") as f:
        return sum(1 for _ in f)


def link(path: str, target: str):
    """``target`` (its .gz form if that is the file) linked at ``path`` (with the same suffix)."""
    real = target if os.path.isfile(target) else target + ".gz"
    if not os.path.isfile(real):
        fail(f"no file {target} (nor {target}.gz)")
    path += ".gz" if real.endswith(".gz") else ""
    if os.path.lexists(path):
        os.remove(path)
    os.symlink(os.path.abspath(real), path)


def split(src: str, tgt: str, train: str, valid: str, test: str, out: str):
    """OUT/text/{train,valid,test}.{src,tgt}: links to the given files, or (without a test set)
    the training text less its last pairs, which become the test set, said so. Streamed: a line
    at a time."""
    text = os.path.join(out, "text")
    os.makedirs(text, exist_ok=True)
    counts = {lang: count_lines(train, lang) for lang in (src, tgt)}
    if counts[src] != counts[tgt]:
        fail(f"--train {train}: {train}.{src} has {counts[src]:,} lines and {train}.{tgt} {counts[tgt]:,}; the "
             f"two sides must be aligned, one sentence pair a line")
    for lang in (src, tgt):
        link(os.path.join(text, f"valid.{lang}"), f"{valid}.{lang}")
    if test != "-":
        for name, prefix in (("train", train), ("test", test)):
            for lang in (src, tgt):
                link(os.path.join(text, f"{name}.{lang}"), f"{prefix}.{lang}")
        return
    n = min(HELD_OUT, counts[src] // 20)
    if n < 1:
        fail(f"--train {train} has {counts[src]} pairs: too few to hold out a test set; pass --test PREFIX")
    keep = counts[src] - n
    for lang in (src, tgt):
        paths = [os.path.join(text, f"{name}.{lang}") for name in ("train", "test")]
        with open_text(f"{train}.{lang}") as f, open(paths[0] + ".partial", "w", encoding="utf-8") as a, \
                open(paths[1] + ".partial", "w", encoding="utf-8") as b:
            for i, line in enumerate(f):
                (a if i < keep else b).write(line if line.endswith("\n") else line + "\n")
        for path in paths:
            os.replace(path + ".partial", path)
    print(f"[own] no --test: the last {n:,} of {counts[src]:,} training pairs are held out as the test set")


def results(out: str, src: str, tgt: str):
    """OUT/results.md: what the user got, first."""
    student = os.path.join(out, "student-int8")
    size = os.path.getsize(os.path.join(student, "model.bin")) / 2 ** 20
    lines_out = ["# Your student", ""]
    report = os.path.join(out, "report.json")
    if os.path.isfile(report):
        with open(report, encoding="utf-8") as f:
            data = json.load(f)
        models = {m["name"]: m for m in data["models"]}
        s, t = models["student"], models[data["teacher"]]
        speed = lambda m: m["cpu"]["1"]["ctranslate2-int8"]["words_per_second"]  # noqa: E731
        lines_out += [
            f"The deployable student: `{student}` (CTranslate2 int8, {size:.1f} MiB).",
            "",
            "| model | parameters | BLEU | chrF | CTranslate2 int8 | words/s, 1 thread |",
            "|---|---|---|---|---|---|",
        ]
        for m in (t, s):
            lines_out.append(f"| {m['name']} | {m['parameters'] / 1e6:.2f}M | {m['quality']['fairseq']['bleu']:.2f} | "
                             f"{m['quality']['fairseq']['chrf']:.2f} | "
                             f"{m['size_bytes']['ctranslate2-int8'] / 2 ** 20:.1f} MiB | {speed(m):,.0f} |")
        lines_out += ["", f"The student is {speed(s) / speed(t):.2f}× as fast as the teacher on one thread "
                          f"({data['machine']['cpu']}); the report card: `{os.path.join(out, 'report.md')}`."]
    else:
        with open(os.path.join(out, "eval", "student.json"), encoding="utf-8") as f:
            e = json.load(f)
        lines_out += [f"The deployable student: `{student}` (CTranslate2 int8, {size:.1f} MiB): BLEU "
                      f"{e['bleu']:.2f}, chrF {e['chrf']:.2f} on the test set ({e['bleu_signature']}). The "
                      f"teacher is not a fairseq model, so there is no report card beside it."]
    lines_out += ["", "Translate a file with it:", "", "```bash",
                  f"fsd-translate --backend ctranslate2 --model-dir {student} --threads 1 --input FILE.{src} "
                  f"--output FILE.{tgt}", "```", ""]
    with open(os.path.join(out, "results.md"), "w", encoding="utf-8") as f:
        f.write("\n".join(lines_out))
    print("\n".join(lines_out[:12]))


if __name__ == "__main__":
    command, *rest = sys.argv[1:]
    if command == "plugin":
        # found, not imported: importing the package loads fairseq, seconds a dry run need not spend
        import importlib.util

        spec = importlib.util.find_spec("fairseq_distill")
        if spec is None:
            fail("the fairseq_distill package is not installed in this Python: pip install -e '.[all]' first")
        print(list(spec.submodule_search_locations)[0])
    elif command == "teacher":
        print(teacher_kind(*rest))
    elif command == "teacher-data":
        print(teacher_data(*rest))
    elif command == "split":
        split(*rest)
    elif command == "results":
        results(*rest)
    else:
        fail(f"own.py: unknown command {command}")
