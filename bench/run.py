"""Benchmark runner: train and evaluate every step of a recipe, cached by config hash.

    .venv/bin/python bench/run.py configs/foundation.yaml [--workdir DIR]

Finished steps are reused and an interrupted step resumes from its last checkpoint, so
rerunning the same command continues where it stopped. Results go to
``bench/results/<recipe>.json`` and ``.md`` (committed); checkpoints stay in the workdir
(default ``work/<recipe>``, not committed).
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from fairseq_distill.recipe import main  # noqa: E402

if __name__ == "__main__":
    argv = sys.argv[1:]
    if "--results" not in argv:
        argv += ["--results", os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")]
    main(argv)
