"""How far two seq-KD data steps of a recipe differ: the targets as text and as subword pieces.

    .venv/bin/python bench/seqkd_data_diff.py configs/external_teacher.yaml seqkd-backend seqkd-external

Both steps translated the same training set; the count of sentences whose detokenised target
differs says how differently the teachers (or decoders) translated, and the count whose pieces
differ with equal text says how often only the segmentation changed (an external teacher's
output is segmented again with the corpus's subword model, where a fairseq teacher's pieces are
kept as it wrote them). Writes ``bench/results/<recipe>_seqkd_diff.{json,md}`` with a few
examples.
"""
import argparse
import json
import os
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from bench.runner.execute import finished_recipe  # noqa: E402
from fairseq_distill.seqkd.inputs import load_side  # noqa: E402
from fairseq_distill.text.segmentation import Segmenter, load_meta  # noqa: E402
from analysis import is_current, made_from  # noqa: E402

EXAMPLES = 5


def targets(data_bin: str):
    meta = load_meta(data_bin)
    return load_side(data_bin, "train", meta["source_lang"], meta["target_lang"], meta["target_lang"])


def compare(a_bin: str, b_bin: str) -> dict:
    """Counts of differing targets between two data directories of the same training set."""
    a, b = targets(a_bin), targets(b_bin)
    if len(a) != len(b):
        raise SystemExit(f"seqkd_data_diff: error: {a_bin} has {len(a):,} pairs, {b_bin} {len(b):,}: not the same "
                         f"training set")
    segmenter = Segmenter.from_dir(a_bin)
    text = lambda pieces: " ".join(segmenter.decode(pieces.split()).split())  # noqa: E731
    text_differs = [i for i in range(len(a)) if a[i] != b[i] and text(a[i]) != text(b[i])]
    pieces_only = sum(1 for i in range(len(a)) if a[i] != b[i]) - len(text_differs)
    return {"sentences": len(a), "text_differs": len(text_differs), "pieces_differ_text_equal": pieces_only,
            "examples": [{"id": i, "a": text(a[i]), "b": text(b[i])} for i in text_differs[:EXAMPLES]]}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.strip().split("\n")[0])
    p.add_argument("config")
    p.add_argument("a", help="a seq-KD data step of the recipe")
    p.add_argument("b", help="another one")
    p.add_argument("--workdir", default=None)
    p.add_argument("--results", default=os.path.join(REPO, "bench", "results"))
    p.add_argument("--force", action="store_true", help="compare even if the results are current")
    args = p.parse_args(argv)

    recipe = finished_recipe(args.config, args.workdir)
    for name in (args.a, args.b):
        if recipe.done.get(name, {}).get("kind") != "seqkd":
            done = [n for n, r in recipe.done.items() if r.get("kind") == "seqkd"]
            raise SystemExit(f"seqkd_data_diff: error: '{name}' is not a finished seq-KD data step of "
                             f"{args.config}; finished: {done}")
    out = os.path.join(args.results, f"{recipe.name}_seqkd_diff")
    inputs = made_from(recipe, [args.a, args.b])
    if is_current(out + ".json", inputs, args.force):
        return
    result = {"inputs": inputs, "a": args.a, "b": args.b,
              **compare(recipe.done[args.a]["data_bin"], recipe.done[args.b]["data_bin"])}
    with open(out + ".json", "w") as f:
        json.dump(result, f, indent=2, ensure_ascii=False)
    lines = [f"# {recipe.name}: {args.a} against {args.b}", "",
             f"Training targets compared: {result['sentences']:,}. Detokenised text differs in "
             f"{result['text_differs']:,} ({100 * result['text_differs'] / result['sentences']:.2f}%); the pieces "
             f"differ with equal text in {result['pieces_differ_text_equal']:,} more.", "",
             f"| id | {args.a} | {args.b} |", "|---|---|---|"]
    lines += [f"| {e['id']} | {e['a']} | {e['b']} |".replace("\n", " ") for e in result["examples"]]
    with open(out + ".md", "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines[:3]))


if __name__ == "__main__":
    main()
