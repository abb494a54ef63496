"""BLEU and decoding speed at every encoder x decoder depth for the flexible-depth recipe.

    .venv/bin/python bench/depth_grid.py configs/flexible_depth.yaml [--beam 4]

Evaluates the trained runs of the recipe: multi-task models through depth overrides, the
LayerDrop models pruned with LayerDrop's rule (``left``), and each individually trained
model at its own depth. At every depth pair that has an individually trained model, the
depth-flexible models are paired-tested (sacreBLEU's bootstrap on the saved hypotheses)
against it and against the recipe's ``compare`` baseline when that is a depth-flexible
model. Writes ``bench/results/<recipe>_grid.{json,md}`` plus one heat map PNG per model.
"""
import argparse
import json
import os
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from fairseq_distill.cli.evaluate_depths import evaluate_depths  # noqa: E402
from fairseq_distill.evaluation.scoring import markdown, paired_significance  # noqa: E402
from fairseq_distill.text.files import read_lines  # noqa: E402
from bench.runner.config import evaluation_settings  # noqa: E402
from bench.runner.execute import finished_recipe  # noqa: E402
from bench.runner.portable import portable  # noqa: E402
from analysis import is_current, made_from  # noqa: E402


def model_grid(recipe, name, checkpoint, out, prune, beam, batch_size, force):
    """One model's grid, kept in ``out.{json,md,png}``: a model whose grid is already current is
    not decoded again, so an interrupted evaluation decodes only the models it had not finished."""
    inputs = made_from(recipe, [name], beam=beam, batch_size=batch_size)
    if is_current(out + ".json", inputs, force):
        with open(out + ".json") as f, open(out + ".md") as g:
            return json.load(f)["rows"], g.read()
    rows, table = evaluate_depths(checkpoint, recipe.data_bin, out, prune=prune, beam=beam,
                                  batch_size=batch_size, title=f"{recipe.name}: {name}")
    with open(out + ".json") as f:
        stored = json.load(f)
    with open(out + ".json", "w") as f:
        json.dump({**stored, "inputs": inputs}, f, indent=2)
    return rows, table


def depth_significance(grids, singles, baselines):
    """Paired tests at the depth pairs of the individually trained models.

    ``grids``: depth-flexible model -> its evaluated rows (``encoder_depth``, ``decoder_depth``,
    ``hypotheses``); ``singles``: individually trained model -> (encoder depth, decoder depth,
    hypotheses file, references file); ``baselines``: depth-flexible models the others are also
    tested against. Returns one :func:`paired_significance` result per (depth, baseline), with
    ``depth`` ("m+n") added; cells without a hypothesis file (grids evaluated before they were
    kept) are left out."""
    cells = {name: {(r["encoder_depth"], r["decoder_depth"]): r["hypotheses"] for r in rows
                    if r.get("hypotheses") and os.path.isfile(r["hypotheses"])}
             for name, rows in grids.items()}
    results = []
    for single, (m, n, hypotheses, references) in singles.items():
        at_depth = {name: read_lines(c[(m, n)], what="hypotheses") for name, c in cells.items() if (m, n) in c}
        if not at_depth or not (hypotheses and os.path.isfile(hypotheses)):
            continue
        refs = read_lines(references, what="references")
        tests = [((single, read_lines(hypotheses, what="hypotheses")), list(at_depth.items()))]
        tests += [((b, at_depth[b]), [(k, v) for k, v in at_depth.items() if k != b])
                  for b in baselines if b in at_depth and len(at_depth) > 1]
        for base, systems in tests:
            results.append({"depth": f"{m}+{n}", **paired_significance(base, systems, refs)})
    return results


def significance_markdown(results):
    lines = ["## Paired tests at the depths of the individually trained models", ""]
    for r in results:
        lines += [f"### {r['depth']}: against {r['baseline']}", "", *markdown(r), ""]
    return "\n".join(lines)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.strip().split("\n")[0])
    p.add_argument("config")
    p.add_argument("--beam", type=int, default=4)
    p.add_argument("--workdir", default=None)
    p.add_argument("--results", default=os.path.join(REPO, "bench", "results"))
    p.add_argument("--force", action="store_true", help="evaluate even if the results are current")
    args = p.parse_args(argv)
    recipe = finished_recipe(args.config, args.workdir)
    batch = evaluation_settings(recipe.cfg)["batch-size"]
    inputs = made_from(recipe, recipe.trained_runs(), beam=args.beam, batch_size=batch)
    stem = os.path.join(args.results, f"{recipe.name}_grid")
    if is_current(stem + ".json", inputs, args.force):
        return
    summary = {"recipe": recipe.name, "beam": args.beam, "models": {}, "inputs": inputs}
    sections = []
    grids, singles = {}, {}
    for step in recipe.cfg["steps"]:
        record = recipe.done.get(step["name"])
        if not record or record.get("kind") != "train":
            continue
        arch = record["shape"]["arch"]
        multi = (step.get("train") or {}).get("task") == "translation_multidepth"
        options = {**recipe.cfg.get("models", {}).get(step.get("model"), {}), **(step.get("train") or {})}
        layerdrop = any(float(options.get(f"{side}-layerdrop") or 0) > 0 for side in ("encoder", "decoder"))
        if multi or layerdrop:
            out = os.path.join(args.results, f"{recipe.name}_{step['name']}")
            rows, table = model_grid(recipe, step["name"], record["checkpoint"], out,
                                     prune=None if arch == "flexible_transformer" else "left",
                                     beam=args.beam, batch_size=batch, force=args.force)
            summary["models"][step["name"]] = {"rows": rows, "train_seconds": record["train_seconds"],
                                               "epochs": record["epochs"], "updates": record["updates"]}
            grids[step["name"]] = rows
            sections.append(table.replace(f"# {recipe.name}: {step['name']}", f"## {step['name']}"))
        else:  # an individually trained model: its own depth only (recipe evaluation, same beam)
            s = record["shape"]
            summary["models"][step["name"]] = {"rows": [{"encoder_depth": s["encoder-layers"],
                                                         "decoder_depth": s["decoder-layers"],
                                                         "bleu": record["bleu"], "chrf": record.get("chrf"),
                                                         "tokens_per_second": record["tokens_per_second"]}],
                                               "train_seconds": record["train_seconds"], "epochs": record["epochs"]}
            singles[step["name"]] = (s["encoder-layers"], s["decoder-layers"], record.get("hypotheses"),
                                     record.get("references"))
            sections.append(f"## {step['name']}\n\n{s['encoder-layers']}+{s['decoder-layers']}: BLEU "
                            f"{record['bleu']:.2f}, {record['tokens_per_second']:.0f} tokens/s "
                            f"(trained {record['epochs']} epochs, {record['train_seconds'] / 60:.1f} min)\n")
    if not summary["models"]:
        sys.exit("depth_grid: error: nothing trained yet; run bench/run.py on the recipe first")
    baseline = (recipe.cfg.get("compare") or {}).get("baseline") or []
    if args.beam == evaluation_settings(recipe.cfg)["beam"]:
        summary["significance"] = depth_significance(grids, singles, [baseline] if isinstance(baseline, str)
                                                     else baseline)
    else:  # the individually trained models were decoded with the recipe's beam
        summary["significance"] = []
        print(f"depth_grid: no paired tests: --beam {args.beam} is not the recipe's evaluation beam "
              f"({evaluation_settings(recipe.cfg)['beam']}), with which the individually trained models were decoded")
    if summary["significance"]:
        sections.append(significance_markdown(summary["significance"]))
    with open(stem + ".json", "w") as f:
        json.dump(portable(summary, [recipe.workdir, REPO]), f, indent=2)
    with open(stem + ".md", "w") as f:
        f.write(f"# {recipe.name}: BLEU and speed by depth (test set, beam {args.beam})\n\n" + "\n".join(sections))
    print("\n".join(sections))


if __name__ == "__main__":
    main()
