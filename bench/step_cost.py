"""Training-step cost (time and peak memory) of each distillation criterion of a recipe,
relative to word-level KD and, when the recipe has one, to training without KD.

    .venv/bin/python bench/step_cost.py configs/layer_kd.yaml [--workdir DIR] [--steps 8]

Every criterion step of the recipe on the original data (those with a teacher or a teacher
cache), and every step without KD that trains the same model as one of them, is built exactly as fairseq-train
builds it (the recipe's flags), each in a fresh process so that peak memory is its own;
fairseq's ``Trainer.train_step`` then runs on the *same* batch: a few warm-up steps, then
``--steps`` timed ones; the median time is reported. Peak memory: on CUDA the peak of
allocated memory during the steps; on the CPU the peak resident set during them (Linux
VmHWM, reset before the first step) minus the resident set before them, i.e. what training
steps add to the built model and batch (activations, gradients, optimizer state, attention
maps). ``--only STEP ...`` times the steps named instead, on their own data (a
recipe whose students train on seq-KD data: the seq-KD-only step is then the no-KD reference).
Needs the recipe's teacher
to be trained already (bench/run.py). Writes ``bench/results/<recipe>_step_cost.{json,md}``.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

import torch  # noqa: E402

from fairseq_distill.trainer_setup import build_training, first_batch  # noqa: E402
from bench.runner.execute import finished_recipe  # noqa: E402
from bench.runner.host import HEAP_MALLOC  # noqa: E402
from bench.runner.memory import peak_memory, reset_peak_memory  # noqa: E402
from bench.runner.plan import flags  # noqa: E402
from analysis import is_current, made_from  # noqa: E402


def time_step(data, train_flags, warmup, steps, max_tokens):
    _, task, _, _, trainer = build_training([data, *train_flags])
    sample = first_batch(task, "train", max_tokens)
    times = []
    # from before the first step: a warm-up step leaves freed memory in the allocator's pools,
    # which later steps reuse without raising the resident set
    before = reset_peak_memory()
    for i in range(warmup + steps):
        started = time.perf_counter()
        trainer.train_step([sample])
        if i >= warmup:
            times.append(time.perf_counter() - started)
    return statistics.median(times), sample["ntokens"], peak_memory() - before


def measure_one(args):
    """Child process: time one step of the recipe and print the result as JSON."""
    recipe = finished_recipe(args.config, args.workdir)
    step = next(s for s in recipe.cfg["steps"] if s["name"] == args.one)
    opts = recipe.train_options(step, os.path.join(recipe.workdir, "step_cost_unused"))
    for key in ("save-dir", "log-format", "no-epoch-checkpoints"):
        opts.pop(key, None)
    median, ntokens, peak = time_step(recipe.plan.data_of(step), flags(opts), args.warmup, args.steps,
                                      args.max_tokens)
    print("STEP_COST " + json.dumps({"name": step["name"], "criterion": opts["criterion"],
                                     "median_step_seconds": round(median, 4), "target_tokens": ntokens,
                                     "peak_step_memory_mib": round(peak / 2**20, 1)}))


def measured_steps(steps):
    """Criterion steps on the original data (a teacher or a teacher cache), and steps without KD
    that train the model of one of them (the no-KD reference)."""
    def plain(s):
        return "model" in s and not any(s.get(k) for k in ("data", "init", "continue", "finetune"))

    kd = [s for s in steps if plain(s) and (s.get("teacher") or s.get("teacher-cache"))]
    kd_models = {s["model"] for s in kd}
    return [s for s in steps if plain(s) and (s in kd or s["model"] in kd_models)]


def named_steps(steps, names):
    """``--only``: these training steps, whatever data they train on (each is timed on its own
    data's first batch, so compare rows of the same data)."""
    by_name = {s["name"]: s for s in steps}
    unknown = [n for n in names if n not in by_name or "model" not in by_name[n]]
    if unknown:
        sys.exit(f"step_cost: --only {' '.join(unknown)}: not a training step of the recipe "
                 f"(its training steps: {', '.join(s['name'] for s in steps if 'model' in s)})")
    return [by_name[n] for n in names]


def describe(step, criterion: str) -> str:
    if step.get("teacher-cache"):
        said = f"{criterion} from {step['teacher-cache']}"
    else:
        said = criterion if step.get("teacher") else "none (no KD)"
    return said + (f", on {step['data']}" if step.get("data") else "")


def main():
    p = argparse.ArgumentParser(description=__doc__.strip().split("\n")[0])
    p.add_argument("config")
    p.add_argument("--workdir", default=None)
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--max-tokens", type=int, default=4096)
    p.add_argument("--results", default=os.path.join(REPO, "bench", "results"))
    p.add_argument("--force", action="store_true", help="measure even if the results are current")
    p.add_argument("--only", nargs="+", metavar="STEP",
                   help="time these training steps, on whatever data they train (by default: the criterion steps "
                        "on the recipe's own data and the steps without KD of their models)")
    p.add_argument("--one", help=argparse.SUPPRESS)  # internal: measure this step in this process
    args = p.parse_args()
    if args.one:
        return measure_one(args)
    recipe = finished_recipe(args.config, args.workdir)
    measured = named_steps(recipe.cfg["steps"], args.only) if args.only else measured_steps(recipe.cfg["steps"])
    for step in measured:
        source = step.get("teacher") or step.get("teacher-cache")
        if source and source not in recipe.done:
            sys.exit(f"step_cost: the step '{source}' has not been run; run bench/run.py first")
    # the measured steps' configurations and the teacher runs (or caches) they read
    sources = sorted({s.get("teacher") or s.get("teacher-cache") for s in measured} - {None})
    inputs = made_from(recipe, [s["name"] for s in measured] + sources, steps=args.steps, warmup=args.warmup,
                       max_tokens=args.max_tokens)
    if is_current(os.path.join(args.results, f"{recipe.name}_step_cost.json"), inputs, args.force):
        return

    rows = []
    for step in measured:
        cmd = [sys.executable, os.path.abspath(__file__), args.config, "--one", step["name"],
               "--steps", str(args.steps), "--warmup", str(args.warmup), "--max-tokens", str(args.max_tokens)]
        if args.workdir:
            cmd += ["--workdir", args.workdir]
        # the allocator set-up of the recipe's training runs (glibc reads it at start-up)
        proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              env={**HEAP_MALLOC, **os.environ})
        found = [line for line in proc.stdout.splitlines() if line.startswith("STEP_COST ")]
        if proc.returncode != 0 or not found:
            sys.exit(f"step_cost: measuring {step['name']} failed:\n{proc.stdout[-3000:]}")
        row = json.loads(found[-1][len("STEP_COST "):])
        rows.append(row)
        print(f"[step_cost] {row['name']}: {row['median_step_seconds'] * 1000:.0f} ms/step, "
              f"+{row['peak_step_memory_mib']:.0f} MiB peak ({row['target_tokens']} target tokens)", flush=True)

    by_name = {s["name"]: s for s in measured}
    base = next((r for r in rows if r["criterion"] == "word_kd" and not by_name[r["name"]].get("teacher-cache")),
                None)
    no_kd = next((r for r in rows if not by_name[r["name"]].get("teacher")
                  and not by_name[r["name"]].get("teacher-cache")), None)
    for r in rows:
        r["teacher_cache"] = by_name[r["name"]].get("teacher-cache")
        for tag, ref in (("word_kd", base), ("no_kd", no_kd)):
            r[f"time_relative_to_{tag}"] = (round(r["median_step_seconds"] / ref["median_step_seconds"], 3)
                                            if ref else None)
            r[f"memory_relative_to_{tag}"] = (round(r["peak_step_memory_mib"] / ref["peak_step_memory_mib"], 3)
                                              if ref and ref["peak_step_memory_mib"] > 0 else None)

    def rel(x):
        return "-" if x is None else f"{x:.2f}"

    lines = ["| run | criterion | median step | time vs word_kd | time vs no KD | peak step memory | "
             "memory vs word_kd | memory vs no KD |", "|---|---|---|---|---|---|---|---|"]
    lines += [f"| {r['name']} | {describe(by_name[r['name']], r['criterion'])} | "
              f"{r['median_step_seconds'] * 1000:.0f} ms | {rel(r['time_relative_to_word_kd'])} | "
              f"{rel(r['time_relative_to_no_kd'])} | +{r['peak_step_memory_mib']:.0f} MiB | "
              f"{rel(r['memory_relative_to_word_kd'])} | {rel(r['memory_relative_to_no_kd'])} |" for r in rows]
    table = "\n".join(lines)
    print(table)
    os.makedirs(args.results, exist_ok=True)
    meta = {"recipe": recipe.name, "steps": args.steps, "warmup": args.warmup, "max_tokens": args.max_tokens,
            "threads": torch.get_num_threads(), "device": "cuda" if torch.cuda.is_available() else "cpu",
            "rows": rows, "inputs": inputs}
    with open(os.path.join(args.results, f"{recipe.name}_step_cost.json"), "w") as f:
        json.dump(meta, f, indent=2)
    with open(os.path.join(args.results, f"{recipe.name}_step_cost.md"), "w") as f:
        f.write(f"# {recipe.name}: training-step cost\n\nfairseq Trainer.train_step on one fixed batch "
                f"(max-tokens {args.max_tokens}), median of {args.steps} steps after {args.warmup} warm-up, "
                f"each criterion in its own process; peak step memory = peak during the steps minus "
                f"usage before them; "
                f"{meta['device']}, {meta['threads']} threads.\n\n{table}\n")


if __name__ == "__main__":
    main()
