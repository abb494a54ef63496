"""fairseq vs CTranslate2 (float32, int8) for a recipe's best student: BLEU, speed, file size.

    .venv/bin/python bench/ctranslate2_speed.py configs/foundation.yaml [--run NAME] [--beam 4]

The student (by default the best-BLEU run that has a teacher or seq-KD data, i.e. a
distilled one) is exported to CTranslate2 twice; then the fairseq checkpoint and both
exports translate the raw test source through the same code (segmentation, batches of
``--batch-size`` sentences, beam, length limits) in this one run, taking turns for
``--repeats`` rounds; each backend's fastest round counts (this machine's speed drifts by
tens of percent between runs, so one round per backend is not a comparison). Writes ``bench/results/<recipe>_ctranslate2.{json,md}``.
"""
import argparse
import json
import os
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

import torch  # noqa: E402

from fairseq_distill.evaluation.evaluate import backends_table, evaluate_backends  # noqa: E402
from fairseq_distill.deploy.ctranslate2_export import export_ctranslate2  # noqa: E402
from bench.runner.execute import finished_recipe  # noqa: E402
from fairseq_distill.deploy.translators import DecodingOptions  # noqa: E402
from analysis import is_current, made_from  # noqa: E402


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.strip().split("\n")[0])
    p.add_argument("config")
    p.add_argument("--run", help="the run to deploy (default: the best distilled student)")
    p.add_argument("--beam", type=int, default=4)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--repeats", type=int, default=3, help="rounds in which the backends take turns")
    p.add_argument("--workdir", default=None)
    p.add_argument("--results", default=os.path.join(REPO, "bench", "results"))
    p.add_argument("--force", action="store_true", help="measure even if the results are current")
    args = p.parse_args(argv)

    recipe = finished_recipe(args.config, args.workdir)
    rows = [r for r in recipe.done.values() if r.get("kind") == "train"]
    if args.run:
        chosen = recipe.done.get(args.run)
        if chosen is None:
            sys.exit(f"ctranslate2_speed: error: run '{args.run}' is not trained; trained: {[r['name'] for r in rows]}")
    else:
        students = [r for r in rows if r.get("teacher") or r.get("data") != "original"]
        if not students:
            sys.exit("ctranslate2_speed: error: no distilled student is trained yet; run bench/run.py first")
        chosen = max(students, key=lambda r: r["bleu"])
    inputs = made_from(recipe, [chosen["name"]], beam=args.beam, batch_size=args.batch_size, repeats=args.repeats)
    if is_current(os.path.join(args.results, f"{recipe.name}_ctranslate2.json"), inputs, args.force):
        return
    checkpoint = chosen["checkpoint"]
    out_root = os.path.join(os.path.dirname(checkpoint), "ctranslate2")
    dirs = []
    for q in ("float32", "int8"):
        info = export_ctranslate2(checkpoint, recipe.data_bin, os.path.join(out_root, q), q, force=True)
        dirs.append(info["out_dir"])
    options = DecodingOptions(beam=args.beam)
    results = evaluate_backends(checkpoint, recipe.data_bin, dirs, "test", options, args.batch_size,
                                args.repeats)
    table = backends_table(results)
    print(table)
    meta = {"recipe": recipe.name, "run": chosen["name"], "shape": chosen["shape"],
            "parameters": chosen["parameters"], "beam": args.beam, "batch_size": args.batch_size,
            "repeats": args.repeats,
            "device": "cuda" if torch.cuda.is_available() else "cpu", "torch_threads": torch.get_num_threads(),
            "rows": [{k: v for k, v in r.items() if k != "outputs"} for r in results], "inputs": inputs}
    os.makedirs(args.results, exist_ok=True)
    stem = os.path.join(args.results, f"{recipe.name}_ctranslate2")
    with open(stem + ".json", "w") as f:
        json.dump(meta, f, indent=2)
    s = chosen["shape"]
    with open(stem + ".md", "w") as f:
        f.write(f"# {recipe.name}: fairseq vs CTranslate2\n\nRun `{chosen['name']}` ({s['encoder-layers']}+"
                f"{s['decoder-layers']}, d={s['encoder-embed-dim']}, {chosen['parameters'] / 1e6:.2f}M parameters); "
                f"test set, beam {args.beam}, batches of {args.batch_size} sentences, {meta['device']} with "
                f"{meta['torch_threads']} threads; the backends take turns for {args.repeats} rounds and "
                f"each one's fastest round counts.\n\n{table}\n")


if __name__ == "__main__":
    main()
