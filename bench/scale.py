"""The data tools at WMT size: wall time, peak memory of the whole process tree and bytes written,
per tool and corpus size, on the synthetic corpus of bench/scale_corpus.py.

    python bench/scale.py --work DIR --sizes 100000 500000 1000000 4500000 --tools clean prepare
    python bench/scale.py --work DIR --report          # bench/results/scale.{json,md,png} from what ran

Each (tool, size) runs once, alone, in a subprocess measured by bench/scale_measure.py; its row is
added to ``DIR/scale.json`` at once (a rerun skips rows already there; ``--again`` redoes them).
Tools:
  clean    fsd-benchmark-corpus wmt14_en_de: the WMT'14 recipe's cleaning, on raw files in the
           layout of its archives unpacked
  prepare  fsd-prepare-corpus on that text, with the WMT'14 recipe's options (joint SentencePiece
           unigram, 37,000 pieces)
  cache, cache-sharded   fsd-cache-teacher, K = 8, a tiny teacher (d = 32): one process, and
           --num-shards 2 (both shards, then the merge, in one call)
  cache-merge  fsd-cache-teacher --merge of 4 synthetic shards (bench/scale_cache.py): the merge
           alone, at any size, without a teacher's compute
  train-startup  fairseq-train of a tiny student reading that merged cache, to its first update
  translate  fsd-translate (CTranslate2, greedy) of the training source with the tiny teacher
  seqkd, seqkd-nbest  fsd-seqkd (CTranslate2) 1-best; 4-best with chrF selection, 2 shards and the merge
  clean-resume, prepare-resume  clean / prepare killed (SIGKILL) half-way through their uninterrupted
           time, then run again: what the rerun keeps, and how long it takes
  seqkd-merge, seqkd-merge-nbest  fsd-seqkd --merge of 2 synthetic decoding shards (bench/scale_seqkd.py),
           1-best lists, and 4-best lists with chrF selection: the merge alone, at any size
Run it on an otherwise idle machine (or pinned to a free core with taskset): timings under load
mislead.
"""
import argparse
import json
import os
import platform
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)

from scale_corpus import write_corpus  # noqa: E402
from scale_measure import measure  # noqa: E402

BIN = os.path.dirname(sys.executable)
TOOLS = ("clean", "prepare", "cache", "cache-sharded", "cache-merge", "train-startup", "translate", "seqkd",
         "seqkd-nbest", "seqkd-merge", "seqkd-merge-nbest", "clean-resume", "prepare-resume")
# a tool killed part-way and run again: the tool, and the share of its uninterrupted time after which it is killed
RESUMED = {"clean-resume": ("clean", 0.5), "prepare-resume": ("prepare", 0.5)}
SEQKD_SHARDS = 2  # synthetic decoding shards the seq-KD merge rows read
# a tiny teacher (d = 32, one update: its output is not the point) so that what is measured is the
# tools' own work and the smallest model's compute
TEACHER = ["--arch", "transformer", "--share-all-embeddings", "--encoder-layers", "1", "--decoder-layers", "1",
           "--encoder-embed-dim", "32", "--decoder-embed-dim", "32", "--encoder-ffn-embed-dim", "64",
           "--decoder-ffn-embed-dim", "64", "--encoder-attention-heads", "2", "--decoder-attention-heads", "2"]
STUDENT = [a.replace("32", "16").replace("64", "32") for a in TEACHER]
GIB = 1 << 30


def corpus_dir(work, size):
    return os.path.join(work, f"corpus-{size}")


def commands(tool, work, size, workers, suffix=""):
    """(argv, outputs) of one tool at one size (``suffix``: of the directory it writes, for a
    second copy of its output)."""
    text = os.path.join(work, f"text-{size}")
    if tool == "clean":
        return ([os.path.join(BIN, "fsd-benchmark-corpus"), "wmt14_en_de", "--archive", corpus_dir(work, size),
                 "--out", text + suffix, "--workers", str(workers)], [text + suffix])
    if tool == "prepare":
        out = os.path.join(work, f"data-{size}{suffix}")
        return ([os.path.join(BIN, "fsd-prepare-corpus"), "-s", "en", "-t", "de", "--train-prefix",
                 os.path.join(text, "train"), "--valid-prefix", os.path.join(text, "valid"), "--test-prefix",
                 os.path.join(text, "test"), "--bpe", "sentencepiece", "--spm-model-type", "unigram",
                 "--vocab-size", "37000", "--workers", str(workers), "--out", out], [out])
    data = os.path.join(work, f"data-{size}", "bin")
    teacher = os.path.join(work, f"teacher-{size}", "checkpoint_last.pt")
    tool_bin = os.path.join(BIN, "fsd-cache-teacher")
    if tool == "cache":
        out = os.path.join(work, f"cache-{size}")
        return [tool_bin, "--teacher", teacher, "--data", data, "--top-k", "8", "--out", out, "--cpu"], [out]
    if tool == "cache-sharded":
        out = os.path.join(work, f"cache2-{size}")
        return [tool_bin, "--teacher", teacher, "--data", data, "--top-k", "8", "--out", out, "--cpu",
                "--num-shards", "2"], [out]
    if tool == "cache-merge":
        out = os.path.join(work, f"cachesyn-{size}")
        return [tool_bin, "--data", data, "--out", out, "--num-shards", "4", "--merge"], [out]
    if tool == "train-startup":
        out = os.path.join(work, f"student-{size}")
        return ([os.path.join(BIN, "fairseq-train"), data, "--user-dir", os.path.join(ROOT, "fairseq_distill"),
                 "--task", "translation_distill", "--teacher-path", teacher, "--teacher-cache",
                 os.path.join(work, f"cachesyn-{size}"), "--criterion", "word_kd", *STUDENT, "--cpu",
                 "--optimizer", "adam", "--lr", "0.001", "--max-tokens", "4000", "--max-update", "1",
                 "--num-workers", "0", "--disable-validation", "--no-save", "--log-format", "simple",
                 "--log-interval", "1", "--save-dir", out], [])
    if tool == "translate":
        out = os.path.join(work, f"translate-{size}.txt")
        return ([os.path.join(BIN, "fsd-translate"), "--backend", "ctranslate2", "--model-dir",
                 os.path.join(work, f"teacher-{size}", "ct2"), "--input", os.path.join(text, "train.en"),
                 "--output", out, "--beam", "1", "--quiet"], [out])
    seqkd = [os.path.join(BIN, "fsd-seqkd"), "--teacher", teacher, "--data", data, "--backend", "ctranslate2"]
    if tool == "seqkd":
        out = os.path.join(work, f"seqkd-{size}")
        return seqkd + ["--out", out], [out, out + ".work"]
    if tool == "seqkd-nbest":
        out = os.path.join(work, f"seqkdn-{size}")
        return seqkd + ["--nbest", "4", "--select", "chrf", "--num-shards", "2", "--out", out], [out, out + ".work"]
    if tool in ("seqkd-merge", "seqkd-merge-nbest"):
        out = os.path.join(work, f"{tool}-{size}")
        select = ["--select", "chrf"] if tool == "seqkd-merge-nbest" else []
        return ([os.path.join(BIN, "fsd-seqkd"), "--data", data, "--work", out + ".work", "--num-shards",
                 str(SEQKD_SHARDS), "--merge", "--out", out, *select], [out, os.path.join(out + ".work", "seqkd_merge.json")])
    raise ValueError(tool)


def row_facts(tool, work, size) -> dict:
    """What a row says besides time and memory: the training pairs kept, a cache's rows and bytes."""
    facts = {}
    counts = os.path.join(work, f"text-{size}", "counts.json")
    if os.path.exists(counts):
        with open(counts, encoding="utf-8") as f:
            facts["training_pairs"] = json.load(f)["lines"]["train"]["en"]
    cache = {"cache": "cache", "cache-sharded": "cache2", "cache-merge": "cachesyn"}.get(tool)
    if cache:
        with open(os.path.join(work, f"{cache}-{size}", "meta.json"), encoding="utf-8") as f:
            meta = json.load(f)
        array_bytes = sum(meta["array_bytes"].values())
        rows_bytes = meta["array_bytes"]["log_probs.npy"] + meta["array_bytes"]["indices.npy"]
        facts.update(cache_rows=meta["tokens"], cache_bytes=array_bytes,
                     cache_bytes_per_target_token=round(rows_bytes / meta["tokens"], 2))
    return facts


def setup(tool, work, size):
    """What a tool needs that is not measured: the tiny teacher (and its CTranslate2 export), the
    synthetic shards of the merge."""
    data = os.path.join(work, f"data-{size}", "bin")
    teacher_dir = os.path.join(work, f"teacher-{size}")
    if tool not in ("clean", "prepare", "cache-merge") and not os.path.exists(os.path.join(teacher_dir,
                                                                                         "checkpoint_last.pt")):
        subprocess.run([os.path.join(BIN, "fairseq-train"), data, *TEACHER, "--cpu", "--optimizer", "adam",
                        "--lr", "0.003", "--max-tokens", "4000", "--max-update", "1", "--criterion",
                        "cross_entropy", "--no-epoch-checkpoints", "--disable-validation", "--num-workers", "0",
                        "--save-dir", teacher_dir], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    if tool == "translate" and not os.path.exists(os.path.join(teacher_dir, "ct2")):
        subprocess.run([os.path.join(BIN, "fsd-export-ctranslate2"), os.path.join(teacher_dir, "checkpoint_last.pt"),
                        data, os.path.join(teacher_dir, "ct2")], check=True, stdout=subprocess.DEVNULL,
                       stderr=subprocess.STDOUT)
    if tool in ("cache-merge", "train-startup") and not os.path.exists(os.path.join(work, f"cachesyn-{size}",
                                                                                    "meta.json")):
        from scale_cache import write_shards

        out = os.path.join(work, f"cachesyn-{size}")
        if not os.path.isdir(os.path.join(out, "shards")):
            write_shards(data, out, num_shards=4, top_k=8)
    if tool in ("seqkd-merge", "seqkd-merge-nbest"):
        from scale_seqkd import write_shards as write_seqkd_shards

        shards = os.path.join(work, f"{tool}-{size}.work")
        if not os.path.isdir(shards):
            write_seqkd_shards(data, shards, num_shards=SEQKD_SHARDS, nbest=4 if tool == "seqkd-merge-nbest" else 1)


def measure_resumed(tool, work, size, workers, results) -> dict:
    """A tool killed part-way through (SIGKILL to its process group) and run again with the same
    command: the second run's time against the uninterrupted run's, and what it said it kept. It
    writes a copy of its output (``-resume``), so the other tools' inputs stay whole."""
    base, share = RESUMED[tool]
    full = [r for r in results["rows"] if r["tool"] == base and r["pairs"] == size]
    if not full:
        raise SystemExit(f"[scale] {tool} at {size:,}: measure {base} first (its time sets when to interrupt)")
    argv, outputs = commands(base, work, size, workers, suffix="-resume")
    for out in outputs:
        if os.path.isdir(out):
            shutil.rmtree(out)
    kill_after = full[0]["seconds"] * share
    first = measure(argv, os.path.join(work, f"{tool}-{size}.interrupted.log"), outputs, timeout=kill_after)
    log = os.path.join(work, f"{tool}-{size}.log")
    row = measure(argv, log, outputs)
    with open(log, encoding="utf-8", errors="replace") as f:
        said = [line.strip() for line in f.read().replace("\r", "\n").splitlines()
                if "kept from an earlier run" in line or "resuming the unfinished" in line]
    row.update(interrupted_after_seconds=first["seconds"], interrupted_exit_code=first["exit_code"],
               uninterrupted_seconds=full[0]["seconds"], resumed_said=said[:3], resumed_lines=len(said))
    for out in outputs:
        shutil.rmtree(out, ignore_errors=True)
    return row


def cpu_model():
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def load(path):
    if os.path.exists(path):
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    return {"machine": {"cpu": cpu_model(), "cores": os.cpu_count(), "python": platform.python_version()},
            "rows": []}


def save(path, results):
    with open(path + ".partial", "w", encoding="utf-8") as f:
        json.dump(results, f, indent=2)
    os.replace(path + ".partial", path)


def run(args):
    path = os.path.join(args.work, "scale.json")
    results = load(path)
    affinity = sorted(os.sched_getaffinity(0))
    for size in args.sizes:
        if not os.path.exists(os.path.join(corpus_dir(args.work, size), "news-commentary-v9.de-en.de")):
            print(f"[scale] writing the synthetic corpus of {size:,} pairs")
            write_corpus(size, corpus_dir(args.work, size), seed=1)
        for tool in args.tools:
            done = [r for r in results["rows"] if r["tool"] == tool and r["pairs"] == size]
            if done and not args.again:
                print(f"[scale] {tool} at {size:,}: measured before")
                continue
            if tool in RESUMED:
                print(f"[scale] {tool} at {size:,} pairs: {RESUMED[tool][0]} killed part-way, then run again", flush=True)
                row = measure_resumed(tool, args.work, size, args.workers, results)
                row.update(tool=tool, pairs=size, workers=args.workers, cpus=len(affinity))
                results = load(path)
                results["rows"] = [r for r in results["rows"] if not (r["tool"] == tool and r["pairs"] == size)] + [row]
                save(path, results)
                print(f"[scale] {tool} at {size:,}: killed after {row['interrupted_after_seconds']:.0f}s, the rerun "
                      f"took {row['seconds']:.0f}s (uninterrupted: {row['uninterrupted_seconds']:.0f}s)", flush=True)
                continue
            argv, outputs = commands(tool, args.work, size, args.workers)
            for out in outputs:
                if os.path.isdir(out) and tool != "cache-merge":
                    shutil.rmtree(out)
                elif os.path.isfile(out):
                    os.remove(out)
            setup(tool, args.work, size)
            log = os.path.join(args.work, f"{tool}-{size}.log")
            print(f"[scale] {tool} at {size:,} pairs: {' '.join(os.path.relpath(a, args.work) if a.startswith(args.work) else os.path.basename(a) if a.startswith(BIN) else a for a in argv)}", flush=True)
            row = measure(argv, log, outputs)
            if row["exit_code"]:
                with open(log, encoding="utf-8", errors="replace") as f:
                    print(f.read()[-3000:])
                raise SystemExit(f"[scale] {tool} at {size:,} failed (exit {row['exit_code']}); log {log}")
            row.update(tool=tool, pairs=size, workers=args.workers, cpus=len(affinity), **row_facts(tool, args.work,
                                                                                                 size))
            # read again before writing: another run of this script may have added rows meanwhile
            results = load(path)
            results["rows"] = [r for r in results["rows"] if not (r["tool"] == tool and r["pairs"] == size)] + [row]
            save(path, results)
            print(f"[scale] {tool} at {size:,}: {row['seconds']:.0f}s, peak RSS {row['peak_rss_bytes'] / GIB:.2f} GiB, "
                  f"{row['bytes_written'] / GIB:.2f} GiB written", flush=True)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--work", required=True)
    parser.add_argument("--sizes", type=int, nargs="+", default=[100_000, 500_000, 1_000_000, 4_500_000])
    parser.add_argument("--tools", nargs="+", choices=TOOLS, default=list(TOOLS))
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--again", action="store_true")
    parser.add_argument("--report", action="store_true")
    args = parser.parse_args(argv)
    os.makedirs(args.work, exist_ok=True)
    if args.report:
        from scale_report import write_report

        write_report(os.path.join(args.work, "scale.json"), os.path.join(HERE, "results"))
        return
    run(args)


if __name__ == "__main__":
    main()
