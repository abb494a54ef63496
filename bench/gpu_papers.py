"""The papers' model width on a GPU, in one prepared call (issue 50).

    python bench/gpu_papers.py [--out DIR] [--workdir DIR] [--budget SECONDS] [--reuse RESULTS_JSON]
    python bench/gpu_papers.py --smoke --out DIR     # the same, tiny, on the CPU (the test suite's)

Runs ``configs/gpu_papers.yaml`` with ``bench/run.py``'s runner, one step at a time in the
recipe's order: Multi30k de->en, the teacher at ``transformer_iwslt_de_en`` size in bf16, then
2+2 and 3+3 students of its width (no KD, word-level KD, seq-KD data decoded on the GPU, pkd,
ckd, alp_kd and a2d at their defaults, A2D at the paper's beta = 1), each evaluated on
test_2016_flickr with BLEU and chrF, paired tests against no KD and word-level KD, train time,
tokens/s, the device and its peak memory (``bench/runner/records.py``).

Resumable by rows, across machines: the results are written after every step (JSON, Markdown,
hypotheses; no checkpoint), and a later call given them (``--reuse``, by default the results
already in ``--out``) trains only the rows still missing, the teacher again first if one of them
needs it (a retrained teacher's rows are marked ‡). ``--budget`` stops before a step that would
start after that many seconds, so a run with a time limit ends with its rows written, not cut off.

The data are prepared on the CPU beforehand when ``--workdir`` holds them (``--prepare-only``);
the GPU machine then needs no tokeniser training. ``--smoke``: tiny models (1+1 and 2+2 layers,
d = 16), 300 training sentences, 3 updates per step, beam 1, three of the steps (teacher, no KD,
a2d), fp32.

A call is checked before anything runs: an ``--only`` step the recipe lacks, a ``--reuse`` file
that is missing and a damaged results JSON (``--reuse`` or the one in ``--out``) are refused,
naming them; the full run on a machine without a GPU stops unless ``--allow-cpu``. The results
files are replaced whole (written beside, then renamed).
"""
import argparse
import glob
import logging
import os
import sys
import tempfile
import time

logging.basicConfig(level=logging.WARNING)

BENCH = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(BENCH)
sys.path.insert(0, REPO)

CONFIG = os.path.join(REPO, "configs", "gpu_papers.yaml")
# the smoke's steps: a teacher, a baseline and a KD row (seq-KD data, decoded by fsd-seqkd, is
# tested with the runner in tests/test_recipe.py)
SMOKE_STEPS = ("teacher", "no-kd-2", "a2d-2")


def smoke_config(work: str, data_dir: str) -> str:
    """configs/gpu_papers.yaml with tiny models, a slice of Multi30k (written to ``data_dir``,
    whose path enters the steps' keys: the same for every call) and a few updates a step."""
    import gzip

    import yaml

    with open(CONFIG) as f:
        cfg = yaml.safe_load(f)
    raw = os.path.abspath(data_dir)
    os.makedirs(raw, exist_ok=True)
    for split, source, n in (("train", "train", 300), ("valid", "val", 20), ("test", "test_2016_flickr", 20)):
        for lang in ("de", "en"):
            with gzip.open(os.path.join(REPO, "data", "multi30k", f"{source}.{lang}.gz"), "rt", encoding="utf-8") as f:
                lines = [next(f) for _ in range(n)]
            with open(os.path.join(raw, f"{split}.{lang}"), "w", encoding="utf-8") as f:
                f.writelines(lines)
    cfg["data"] = {"source": "de", "target": "en", "train": os.path.join(raw, "train"),
                   "valid": os.path.join(raw, "valid"), "test": [os.path.join(raw, "test")], "vocab_size": 200}
    cfg["train"].update({"bf16": False, "max-update": 3, "warmup-updates": 2, "max-tokens": 1500,
                         "num-workers": 0})
    for name, model in cfg["models"].items():
        layers = 2 if name == "teacher" else 1
        model.update({"encoder-layers": layers, "decoder-layers": layers, "encoder-embed-dim": 16,
                      "decoder-embed-dim": 16, "encoder-ffn-embed-dim": 32, "decoder-ffn-embed-dim": 32,
                      "encoder-attention-heads": 2, "decoder-attention-heads": 2, "dropout": 0.0})
        model.pop("max-epoch", None)
    cfg["eval"] = {"beam": 1, "batch-size": 64}
    for step in cfg["steps"]:
        if "seqkd" in step:
            step["seqkd"].update({"beam": 1})
    cfg["steps"] = [s for s in cfg["steps"] if s["name"] in SMOKE_STEPS]
    cfg["compare"] = {"baseline": ["no-kd-2"]}
    path = os.path.join(work, "gpu_papers.yaml")
    with open(path, "w") as f:
        yaml.safe_dump(cfg, f)
    return path


def device_line() -> str:
    import torch

    from bench.runner.host import cpu_model

    if torch.cuda.is_available():
        return f"{torch.cuda.get_device_name(0)} (torch {torch.__version__}, CUDA {torch.version.cuda})"
    return f"CPU: {cpu_model()}, {torch.get_num_threads()} threads (torch {torch.__version__})"


def check_call(config: str, out: str, reuse, only) -> None:
    """Refuse, before anything runs, what would waste a GPU run: steps the recipe lacks,
    missing or damaged results files."""
    from bench.runner.records import read_results
    from bench.runner.schema import load_checked
    from fairseq_distill.errors import DistillError

    steps = [s["name"] for s in load_checked(config)["steps"]]
    unknown = [s for s in only or () if s not in steps]
    if unknown:
        raise DistillError(f"--only: unknown step '{unknown[0]}'; valid: {', '.join(steps)}")
    for path in list(reuse) + sorted(glob.glob(os.path.join(out, "gpu_papers.json"))):
        read_results(path)


def check_device(allow_cpu: bool) -> None:
    import torch

    from fairseq_distill.errors import DistillError

    if not torch.cuda.is_available() and not allow_cpu:
        raise DistillError("no GPU here (torch sees no CUDA device): the full run trains the papers' model width "
                           "and would take days on the CPU; pass --smoke for the tiny CPU run, or --allow-cpu to "
                           "run it on the CPU anyway")


def run(config: str, workdir: str, out: str, reuse, budget: float, only=None) -> dict:
    """Each step of the recipe in order, until the budget would be passed; returns what was done
    and what is left."""
    from bench.runner.schema import load_checked
    from bench.runner.execute import Runner

    started = time.time()
    steps = [s["name"] for s in load_checked(config)["steps"]]
    if only:
        steps = [s for s in steps if s in only]
    done, left, durations = [], [], []
    print(f"[gpu_papers] {device_line()}; {len(steps)} steps; results in {out}", flush=True)
    for name in steps:
        elapsed = time.time() - started
        # a step is not started when the longest step so far would not fit in what is left
        if budget and elapsed + (max(durations) if durations else 0) > budget:
            left.append(name)
            continue
        step_started = time.time()
        # each step as its own selection: the results are written after it, with every earlier row
        found = sorted(glob.glob(os.path.join(out, "gpu_papers.json")))
        Runner(config, workdir, out, [name], list(reuse) + found).run()
        durations.append(time.time() - step_started)
        done.append(name)
        print(f"[gpu_papers] {name}: {durations[-1]:.0f} s (elapsed {time.time() - started:.0f} s)", flush=True)
    if left:
        print(f"[gpu_papers] stopped within the budget of {budget:.0f} s; left for the next call: "
              f"{', '.join(left)}", flush=True)
    return {"done": done, "left": left, "seconds": round(time.time() - started, 1)}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.strip().split("\n")[0])
    p.add_argument("--out", default=os.path.join(BENCH, "results"), help="results directory (default bench/results)")
    p.add_argument("--workdir", default=os.path.join(REPO, "work", "gpu_papers"),
                   help="data, checkpoints and logs (default work/gpu_papers)")
    p.add_argument("--reuse", nargs="*", default=[], help="results JSON files whose rows count as done")
    p.add_argument("--budget", type=float, default=0, help="start no step after this many seconds (0: no limit)")
    p.add_argument("--only", nargs="*", help="these steps only (and what they need)")
    p.add_argument("--prepare-only", action="store_true", help="prepare the data in --workdir and stop")
    p.add_argument("--smoke", action="store_true", help="tiny models and data, a few updates: the CPU test")
    p.add_argument("--allow-cpu", action="store_true", help="run the full recipe without a GPU (refused otherwise)")
    args = p.parse_args(argv)

    from fairseq_distill.cli.common import run_cli

    def body():
        if args.smoke:
            # each call on a fresh work dir, as on a fresh machine: it goes on from the results alone
            with tempfile.TemporaryDirectory(prefix="gpu-papers-smoke-") as work:
                config = smoke_config(work, os.path.join(args.workdir, "smoke-data"))
                check_call(config, args.out, args.reuse, args.only)
                return run(config, os.path.join(work, "work"), args.out, args.reuse, args.budget, args.only)
        if args.prepare_only:
            from bench.runner.execute import Runner

            Runner(CONFIG, args.workdir, None, ["teacher"], []).prepare_data()
            print(f"[gpu_papers] data prepared in {args.workdir}")
            return None
        check_call(CONFIG, args.out, args.reuse, args.only)
        check_device(args.allow_cpu)
        return run(CONFIG, args.workdir, args.out, args.reuse, args.budget, args.only)

    run_cli("gpu_papers", body)


if __name__ == "__main__":
    main()
