"""Run a recipe (demo or benchmark): train and evaluate every step, cached by config hash.

    .venv/bin/python bench/run.py configs/foundation.yaml [--workdir DIR] [--results DIR]
    .venv/bin/python bench/run.py configs/gpkd.yaml --print-commands [--only student-gpkd]

Finished steps are reused and an interrupted step resumes from its last checkpoint, so
rerunning the same command continues where it stopped. Checkpoints, each step's record and
its full log (``step.log``) stay in the work dir (default ``work/<recipe>``, not committed);
the results (``<recipe>.json`` and ``.md``, written from the records) go to ``--results``,
by default ``bench/results/``, where the summary of every recipe (``summary.md``, written by
``bench/report.py``) is rendered again after the run, so that it never lags the results.

Results are outputs: by default nothing is read back from them. ``--reuse-committed``
(or ``--reuse FILE ...``) opts in to counting rows of the committed results whose step name
and cache key match as done, so that a session without the work dir only trains what is
missing (and a teacher again if a missing row needs its checkpoint; the runner warns if it
does not reproduce).
"""
import argparse
import glob
import logging
import os
import sys

# the terminal shows the runner's own lines; importing fairseq logs at INFO level (and sets
# the root logger to DEBUG), so only warnings of the libraries loaded here get through
logging.basicConfig(level=logging.WARNING)
logging.getLogger().handlers[0].setLevel(logging.WARNING)

BENCH = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(BENCH))

from fairseq_distill.cli.common import run_cli  # noqa: E402
from bench.runner.execute import Runner, StepFailed, stop_children_on_sigterm  # noqa: E402
from bench.runner.plan import REPO  # noqa: E402
from bench.runner.progress import tail  # noqa: E402
from bench.report import report  # noqa: E402

RESULTS = os.path.join(BENCH, "results")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.strip().split("\n")[0])
    p.add_argument("config", help="YAML recipe, e.g. configs/demo.yaml")
    p.add_argument("--workdir", default=None, help="where data, checkpoints, records and logs go "
                                                   "(default work/<recipe>)")
    p.add_argument("--results", default=RESULTS, help="write <name>.json and <name>.md here "
                                                      "(default bench/results)")
    p.add_argument("--only", nargs="*", help="run only these steps (and what they depend on)")
    p.add_argument("--print-commands", action="store_true",
                   help="print each step's commands (fairseq-train, fsd-seqkd, ...) as a shell script "
                        "and exit, running nothing; the runner executes exactly these")
    p.add_argument("--reuse", nargs="*", default=[], metavar="RESULTS_JSON",
                   help="results JSON files whose rows count as done where step name and key match")
    p.add_argument("--reuse-committed", action="store_true",
                   help="the same for every committed bench/results/*.json")
    args = p.parse_args(argv)
    name = os.path.splitext(os.path.basename(args.config))[0]
    workdir = args.workdir or os.path.join(REPO, "work", name)
    reuse = args.reuse + (sorted(glob.glob(os.path.join(RESULTS, "*.json"))) if args.reuse_committed else [])

    def body():
        runner = Runner(args.config, workdir, args.results, args.only, reuse)
        if args.print_commands:
            runner.print_commands()
            return
        runner.run()
        if os.path.realpath(args.results) == os.path.realpath(RESULTS):
            report(RESULTS, RESULTS, echo=False)

    stop_children_on_sigterm()
    try:
        run_cli("recipe", body)
    except StepFailed as e:
        sys.stdout.flush()
        sys.exit(f"\n{e}; the last lines of its log:\n{tail(e.log_path).rstrip()}\nfull log: {e.log_path}")


if __name__ == "__main__":
    main()
