"""Heat maps of the learned layer/head alignments of a recipe's finished runs:
ALP-KD's attention over teacher layers (fairseq_distill.cli.alp_heatmap, averaged over the
validation set) and A2D's alignment modules (fairseq_distill.cli.a2d_heatmap).

    .venv/bin/python bench/heatmaps.py configs/layer_kd.yaml [--workdir DIR]

Writes ``bench/results/<recipe>_<step>_heatmap.{png,json}`` for every finished step whose
criterion is ``alp_kd`` or ``a2d``; steps not trained yet are listed and skipped.
"""
import argparse
import os
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from fairseq_distill.cli import a2d_heatmap, alp_heatmap  # noqa: E402
from bench.runner.execute import finished_recipe  # noqa: E402

PLOTTERS = {"alp_kd": alp_heatmap.main, "a2d": a2d_heatmap.main}


def main():
    p = argparse.ArgumentParser(description=__doc__.strip().split("\n")[0])
    p.add_argument("config")
    p.add_argument("--workdir", default=None)
    p.add_argument("--results", default=os.path.join(REPO, "bench", "results"))
    args = p.parse_args()
    recipe = finished_recipe(args.config, args.workdir)
    os.makedirs(args.results, exist_ok=True)
    for step in recipe.cfg["steps"]:
        plotter = PLOTTERS.get(step.get("criterion"))
        if plotter is None:
            continue
        checkpoint = os.path.join(recipe.step_dir(step), "checkpoints", "checkpoint_last.pt")
        if step["name"] not in recipe.done or not os.path.isfile(checkpoint):
            print(f"[heatmaps] {step['name']}: not trained in {recipe.workdir}, skipped")
            continue
        out = os.path.join(args.results, f"{recipe.name}_{step['name']}_heatmap.png")
        plotter([checkpoint, "--out", out])


if __name__ == "__main__":
    main()
