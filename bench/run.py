"""Benchmark runner: train and evaluate every step of a recipe, cached by config hash.

    .venv/bin/python bench/run.py configs/foundation.yaml [--workdir DIR]

Finished steps are reused and an interrupted step resumes from its last checkpoint, so
rerunning the same command continues where it stopped. Results go to
``bench/results/<recipe>.json`` and ``.md`` (committed); checkpoints stay in the workdir
(default ``work/<recipe>``, not committed). Rows of the committed results whose config key
still matches count as done, so a later session only trains what is missing (and the
teacher again if a missing row needs it; the runner warns if it does not reproduce).
"""
import glob
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from fairseq_distill.recipe import main  # noqa: E402

if __name__ == "__main__":
    argv = sys.argv[1:]
    results = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")
    if "--results" not in argv:
        argv += ["--results", results]
    if "--reuse" not in argv:  # rows of every committed table (matched by step name and key)
        argv += ["--reuse", *sorted(glob.glob(os.path.join(results, "*.json")))]
    main(argv)
