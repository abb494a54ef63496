"""Decoding speed of a recipe's models relative to one reference shape (e.g. the teacher's).

    .venv/bin/python bench/decode_speed.py configs/gpkd.yaml --reference teacher-gp \
        [--runs student-gpkd desdar-12-1 desdar-12-3] [--beams 4 1] [--repeats 2]

Every model decodes the recipe's test set with the same batch size, for each beam size, in
this one run; the models take turns (``--repeats`` rounds) so that a slow spell of the
machine does not fall on one model only, and each model's fastest round counts. fairseq's
own generation time (model loading excluded) gives tokens/s. Needs the runs to be trained
(bench/run.py). Writes ``bench/results/<recipe>_decode_speed.{json,md}``.
"""
import argparse
import json
import os
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

import torch  # noqa: E402

from fairseq_distill.evaluation.evaluate import evaluate  # noqa: E402
from bench.runner.config import evaluation_settings  # noqa: E402
from bench.runner.execute import finished_recipe  # noqa: E402
from analysis import is_current, made_from  # noqa: E402


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.strip().split("\n")[0])
    p.add_argument("config")
    p.add_argument("--reference", required=True, help="the run whose speed is 1.0 (e.g. the teacher)")
    p.add_argument("--runs", nargs="*", help="runs to compare (default: every trained run)")
    p.add_argument("--beams", nargs="+", type=int, default=[4, 1])
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--workdir", default=None)
    p.add_argument("--results", default=os.path.join(REPO, "bench", "results"))
    p.add_argument("--force", action="store_true", help="measure even if the results are current")
    args = p.parse_args(argv)

    recipe = finished_recipe(args.config, args.workdir)
    trained = recipe.trained_runs()
    runs = [args.reference] + [r for r in (args.runs or trained) if r != args.reference]
    missing = [r for r in runs if r not in trained]
    if missing:
        sys.exit(f"decode_speed: error: runs {missing} are not trained in {recipe.workdir}; "
                 f"trained: {trained}")
    batch_size = evaluation_settings(recipe.cfg)["batch-size"]
    inputs = made_from(recipe, runs, reference=args.reference, beams=args.beams, repeats=args.repeats,
                       batch_size=batch_size)
    stem = os.path.join(args.results, f"{recipe.name}_decode_speed")
    if is_current(stem + ".json", inputs, args.force):
        return

    best = {}  # (run, beam) -> fastest record
    for round_ in range(args.repeats):
        for beam in args.beams:
            for run in runs:
                record = recipe.done[run]
                r = evaluate(record["checkpoint"], recipe.data_bin, "test", beam=beam, batch_size=batch_size,
                             out_json=os.path.join(os.path.dirname(record["checkpoint"]),
                                                   f"speed.beam{beam}.json"))
                print(f"[speed] round {round_ + 1}, beam {beam}, {run}: {r['tokens_per_second']:.0f} tokens/s, "
                      f"BLEU {r['bleu']:.2f}", flush=True)
                if (run, beam) not in best or r["tokens_per_second"] > best[(run, beam)]["tokens_per_second"]:
                    best[(run, beam)] = r

    rows = []
    for run in runs:
        shape = recipe.done[run]["shape"]
        row = {"run": run, "shape": f"{shape['encoder-layers']}+{shape['decoder-layers']}, "
                                    f"{shape['encoder-embed-dim']}, {shape['encoder-ffn-embed-dim']}",
               "parameters": recipe.done[run]["parameters"]}
        for beam in args.beams:
            r, ref = best[(run, beam)], best[(args.reference, beam)]
            row[f"beam{beam}"] = {"tokens_per_second": round(r["tokens_per_second"], 1),
                                  "ratio": round(r["tokens_per_second"] / ref["tokens_per_second"], 2),
                                  "bleu": r["bleu"]}
        rows.append(row)

    head = "| run | shape (enc+dec, d, ffn) | params | " + " | ".join(
        f"beam {b}: tokens/s | ×{args.reference} | BLEU" for b in args.beams) + " |"
    lines = [head, "|" + "---|" * (3 + 3 * len(args.beams))]
    for row in rows:
        cells = [row["run"], row["shape"], f"{row['parameters'] / 1e6:.2f}M"]
        for b in args.beams:
            c = row[f"beam{b}"]
            cells += [f"{c['tokens_per_second']:.0f}", f"{c['ratio']:.2f}", f"{c['bleu']:.2f}"]
        lines.append("| " + " | ".join(cells) + " |")
    table = "\n".join(lines)
    print("\n" + table)
    os.makedirs(args.results, exist_ok=True)
    meta = {"recipe": recipe.name, "reference": args.reference, "batch_size": batch_size,
            "repeats": args.repeats, "device": "cuda" if torch.cuda.is_available() else "cpu",
            "torch_threads": torch.get_num_threads(), "rows": rows, "inputs": inputs}
    with open(stem + ".json", "w") as f:
        json.dump(meta, f, indent=2)
    with open(stem + ".md", "w") as f:
        f.write(f"# {recipe.name}: decoding speed\n\nTest set, batch size {batch_size}, fastest of "
                f"{args.repeats} rounds, {meta['device']} with {meta['torch_threads']} threads; ratio "
                f"= tokens/s over {args.reference}'s.\n\n{table}\n")


if __name__ == "__main__":
    main()
