"""The deployment report (fsd-report) of a recipe's teacher and students, found by step name in
the work dir where the benchmark runner trained them:

    python bench/report_card.py --workdir DIR --out bench/results/report_papers \\
        configs/papers.yaml:teacher configs/papers.yaml:no-kd-2 configs/papers.yaml:a2d-2 \\
        configs/seqkd_select.yaml:seq-kd-1best-2 [fsd-report options, e.g. --rounds 3]

Each model is RECIPE:STEP (the first is the teacher); a step's decoding checkpoint is the one
bench/run.py exports for it (its run directory's model.pt). Every model must be trained on the
same data (the first recipe's). Options after the models go to fsd-report unchanged.
"""
import argparse
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

from bench.runner.plan import Plan  # noqa: E402
from bench.runner.schema import load_checked  # noqa: E402
from fairseq_distill.errors import DistillError  # noqa: E402


def checkpoint_of(spec: str, workdir: str, plans: dict):
    """(step name, decoding checkpoint, corpus data dir) of RECIPE:STEP in the work dir (a
    student of seq-KD data counts as trained on the corpus it was made from: fsd-seqkd keeps
    its dictionaries and test set)."""
    recipe, sep, step = spec.rpartition(":")
    if not sep or not recipe or not step:
        raise DistillError(f"model {spec!r}: expected RECIPE:STEP, e.g. configs/papers.yaml:no-kd-2")
    if recipe not in plans:
        if not os.path.isfile(recipe):
            raise DistillError(f"model {spec!r}: no recipe file {recipe}")
        plans[recipe] = Plan(load_checked(recipe), recipe, workdir)
    plan = plans[recipe]
    if step not in plan.by_name:
        raise DistillError(f"model {spec!r}: {recipe} has no step {step!r}; its steps: {', '.join(plan.by_name)}")
    record = plan.planned_record(plan.by_name[step])
    if record["kind"] != "train":
        raise DistillError(f"model {spec!r}: step {step!r} trains no model (it makes {record['kind']} data)")
    if not os.path.isfile(record["checkpoint"]):
        raise DistillError(f"model {spec!r}: not trained in {workdir} yet (no {record['checkpoint']}); train it "
                           f"with: python bench/run.py {recipe} --workdir {workdir} --only {step}")
    return step, record["checkpoint"], plan.data_bin


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.strip().split("\n")[0])
    p.add_argument("--workdir", required=True, help="the runner's work dir holding every step")
    p.add_argument("--out", required=True, help="the report's path without extension (fsd-report --out)")
    p.add_argument("models", nargs="+", help="RECIPE:STEP, the teacher first")
    args, report_options = p.parse_known_args(argv)
    plans, found, problems = {}, [], []
    for spec in args.models:  # every problem at once, not one per attempt
        try:
            found.append(checkpoint_of(spec, args.workdir, plans))
        except DistillError as e:
            problems.append(str(e))
    if not problems:
        data = found[0][2]
        problems = [f"model {spec!r} was trained on {used}, not on the teacher's data {data}: the report "
                    f"compares models on one test set of one data dir"
                    for (_, _, used), spec in zip(found, args.models) if os.path.realpath(used) != os.path.realpath(data)]
    if problems:
        sys.exit("report_card: " + "\nreport_card: ".join(problems))
    from fairseq_distill.cli.report import main as report_main
    report_main([f"{name}={path}" for name, path, _ in found] + ["--data", data, "--out", args.out,
                                                                 *report_options])


if __name__ == "__main__":
    main()
