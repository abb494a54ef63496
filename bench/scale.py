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
Run it on an otherwise idle machine (or pinned to a free core with taskset): timings under load
mislead.
"""
import argparse
import json
import os
import platform
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from scale_corpus import write_corpus  # noqa: E402
from scale_measure import measure  # noqa: E402

BIN = os.path.dirname(sys.executable)
TOOLS = ("clean", "prepare")
GIB = 1 << 30


def corpus_dir(work, size):
    return os.path.join(work, f"corpus-{size}")


def commands(tool, work, size, workers):
    """(argv, outputs) of one tool at one size."""
    text = os.path.join(work, f"text-{size}")
    if tool == "clean":
        return ([os.path.join(BIN, "fsd-benchmark-corpus"), "wmt14_en_de", "--archive", corpus_dir(work, size),
                 "--out", text, "--workers", str(workers)], [text])
    if tool == "prepare":
        out = os.path.join(work, f"data-{size}")
        return ([os.path.join(BIN, "fsd-prepare-corpus"), "-s", "en", "-t", "de", "--train-prefix",
                 os.path.join(text, "train"), "--valid-prefix", os.path.join(text, "valid"), "--test-prefix",
                 os.path.join(text, "test"), "--bpe", "sentencepiece", "--spm-model-type", "unigram",
                 "--vocab-size", "37000", "--workers", str(workers), "--out", out], [out])
    raise ValueError(tool)


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
            argv, outputs = commands(tool, args.work, size, args.workers)
            for out in outputs:
                if os.path.exists(out):
                    import shutil

                    shutil.rmtree(out)
            log = os.path.join(args.work, f"{tool}-{size}.log")
            print(f"[scale] {tool} at {size:,} pairs: {' '.join(os.path.relpath(a, args.work) if a.startswith(args.work) else os.path.basename(a) if a.startswith(BIN) else a for a in argv)}", flush=True)
            row = measure(argv, log, outputs)
            if row["exit_code"]:
                with open(log, encoding="utf-8", errors="replace") as f:
                    print(f.read()[-3000:])
                raise SystemExit(f"[scale] {tool} at {size:,} failed (exit {row['exit_code']}); log {log}")
            row.update(tool=tool, pairs=size, workers=args.workers, cpus=len(affinity))
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
