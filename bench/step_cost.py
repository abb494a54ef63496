"""Training-step cost of each distillation criterion of a recipe, relative to word-level KD.

    .venv/bin/python bench/step_cost.py configs/layer_kd.yaml [--workdir DIR] [--steps 8]

Every criterion step of the recipe (those with a teacher) is built in-process exactly as
fairseq-train builds it (the recipe's flags), then fairseq's ``Trainer.train_step`` runs on
the *same* batch: a few warm-up steps, then ``--steps`` timed ones; the median is reported.
Needs the recipe's teacher to be trained already (bench/run.py). Writes
``bench/results/<recipe>_step_cost.{json,md}``.
"""
import argparse
import json
import os
import statistics
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

import torch  # noqa: E402
from fairseq import options, tasks  # noqa: E402
from fairseq.dataclass.utils import convert_namespace_to_omegaconf  # noqa: E402
from fairseq.trainer import Trainer  # noqa: E402

import fairseq_distill  # noqa: E402,F401
from fairseq_distill.recipe import Recipe, flags  # noqa: E402


def time_step(data, train_flags, warmup, steps, max_tokens):
    parser = options.get_training_parser()
    args = options.parse_args_and_arch(parser, [data, *train_flags])
    cfg = convert_namespace_to_omegaconf(args)
    torch.manual_seed(1)
    task = tasks.setup_task(cfg.task)
    model = task.build_model(cfg.model)
    criterion = task.build_criterion(cfg.criterion)
    trainer = Trainer(cfg, task, model, criterion)
    task.load_dataset("train")
    itr = task.get_batch_iterator(task.dataset("train"), max_tokens=max_tokens, seed=1)
    sample = next(iter(itr.next_epoch_itr(shuffle=False)))
    times = []
    for i in range(warmup + steps):
        started = time.perf_counter()
        trainer.train_step([sample])
        if i >= warmup:
            times.append(time.perf_counter() - started)
    return statistics.median(times), sample["ntokens"]


def main():
    p = argparse.ArgumentParser(description=__doc__.strip().split("\n")[0])
    p.add_argument("config")
    p.add_argument("--workdir", default=None)
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--max-tokens", type=int, default=4096)
    p.add_argument("--results", default=os.path.join(REPO, "bench", "results"))
    args = p.parse_args()
    name = os.path.splitext(os.path.basename(args.config))[0]
    recipe = Recipe(args.config, args.workdir or os.path.join(REPO, "work", name), None)
    recipe.load_finished()

    rows = []
    for step in recipe.cfg["steps"]:
        if not step.get("teacher") or step.get("data"):
            continue  # criterion rows on the original data only
        if step["teacher"] not in recipe.done:
            sys.exit(f"step_cost: the teacher step '{step['teacher']}' has not been run; run bench/run.py first")
        opts = recipe.train_options(step, os.path.join(recipe.workdir, "step_cost_unused"))
        for key in ("save-dir", "log-format", "no-epoch-checkpoints"):
            opts.pop(key, None)
        median, ntokens = time_step(recipe.data_bin, flags(opts), args.warmup, args.steps, args.max_tokens)
        rows.append({"name": step["name"], "criterion": opts["criterion"], "median_step_seconds": round(median, 4),
                     "target_tokens": ntokens})
        print(f"[step_cost] {step['name']}: {median * 1000:.0f} ms/step ({ntokens} target tokens)", flush=True)

    base = next((r["median_step_seconds"] for r in rows if r["criterion"] == "word_kd"), None)
    for r in rows:
        r["relative_to_word_kd"] = round(r["median_step_seconds"] / base, 3) if base else None
    lines = ["| run | criterion | median step | relative to word_kd |", "|---|---|---|---|"]
    lines += [f"| {r['name']} | {r['criterion']} | {r['median_step_seconds'] * 1000:.0f} ms | "
              f"{r['relative_to_word_kd'] if r['relative_to_word_kd'] is not None else '-'} |" for r in rows]
    table = "\n".join(lines)
    print(table)
    os.makedirs(args.results, exist_ok=True)
    meta = {"recipe": recipe.name, "steps": args.steps, "warmup": args.warmup, "max_tokens": args.max_tokens,
            "threads": torch.get_num_threads(), "device": "cuda" if torch.cuda.is_available() else "cpu",
            "rows": rows}
    with open(os.path.join(args.results, f"{recipe.name}_step_cost.json"), "w") as f:
        json.dump(meta, f, indent=2)
    with open(os.path.join(args.results, f"{recipe.name}_step_cost.md"), "w") as f:
        f.write(f"# {recipe.name}: training-step cost\n\nfairseq Trainer.train_step on one fixed batch "
                f"(max-tokens {args.max_tokens}), median of {args.steps} steps after {args.warmup} warm-up; "
                f"{meta['device']}, {meta['threads']} threads.\n\n{table}\n")


if __name__ == "__main__":
    main()
