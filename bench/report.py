"""The benchmark summary, rendered from the committed results only (nothing is run or
measured): every teacher and student row of every recipe, with the CTranslate2 exports,
as one Markdown table and one plot of BLEU against decoding speed, followed by each
recipe's own table (the one its ``<recipe>.md`` and the README show).

    .venv/bin/python bench/report.py [--results bench/results] [--out bench/results]

Reads ``<recipe>.json`` (the runner's results) and ``<recipe>_ctranslate2.json`` (the
deployment comparison) in ``--results``; writes ``summary.md`` and ``summary.png`` to
``--out``. A step shared by several recipes (the same run: same cache key and results) is
one row, naming every recipe that lists it. Speeds are those each table measured: a
recipe's rows with fairseq-generate at its evaluation settings, the CTranslate2 rows with
one translation loop for all backends; rows without a measured speed are listed but not
plotted.
"""
import argparse
import glob
import json
import os
import sys
import textwrap

BENCH = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(BENCH))

from fairseq_distill.cli.common import run_cli  # noqa: E402
from fairseq_distill.errors import DistillError  # noqa: E402
from fairseq_distill.evaluation.plotting import pyplot  # noqa: E402
from bench.runner.results import recipe_markdown  # noqa: E402


def recipe_results(results_dir):
    """The results files of recipes (not those of analyses), by recipe name."""
    found = {}
    for path in sorted(glob.glob(os.path.join(results_dir, "*.json"))):
        with open(path) as f:
            meta = json.load(f)
        if "config" in meta and isinstance(meta.get("rows"), list):
            found[meta["recipe"]] = meta
    return found


def recipe_rows(results_dir):
    """One entry per distinct training run across the recipes' results files."""
    merged = {}
    for meta in recipe_results(results_dir).values():
        for r in meta["rows"]:
            same_run = (r["name"], r.get("key"), r["bleu"], r.get("tokens_per_second"))
            if same_run in merged:
                merged[same_run]["recipes"].append(meta["recipe"])
                continue
            s = r["shape"]
            merged[same_run] = {
                "recipes": [meta["recipe"]], "run": r["name"],
                "role": "teacher" if "teacher" in str(r.get("model", "")) else "student",
                "backend": "fairseq",
                "shape": f"{s['encoder-layers']}+{s['decoder-layers']}, {s['encoder-embed-dim']}, "
                         f"{s['encoder-ffn-embed-dim']}",
                "parameters": r["parameters"], "bleu": r["bleu"], "tokens_per_second": r.get("tokens_per_second"),
                "beam": r.get("beam"),
            }
    return list(merged.values())


def deployment_rows(results_dir):
    """The backends of every ``*_ctranslate2.json``: one trained run, exported and timed."""
    rows = []
    for path in sorted(glob.glob(os.path.join(results_dir, "*_ctranslate2.json"))):
        with open(path) as f:
            meta = json.load(f)
        s = meta["shape"]
        for r in meta["rows"]:
            rows.append({
                "recipes": [os.path.basename(path)[:-len(".json")]], "run": meta["run"], "role": "student",
                "backend": r["backend"],
                "shape": f"{s['encoder-layers']}+{s['decoder-layers']}, {s['encoder-embed-dim']}, "
                         f"{s['encoder-ffn-embed-dim']}",
                "parameters": meta["parameters"], "bleu": r["bleu"], "tokens_per_second": r.get("tokens_per_second"),
                "beam": meta.get("beam"),
            })
    return rows


def measured(row) -> bool:
    return bool(row.get("tokens_per_second"))


def summary_table(rows) -> str:
    lines = ["| recipe(s) | run | role | backend | shape (enc+dec, d, ffn) | params | beam | BLEU | tokens/s |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        speed = f"{r['tokens_per_second']:.0f}" if measured(r) else "not measured (not plotted)"
        lines.append(f"| {', '.join(r['recipes'])} | {r['run']} | {r['role']} | {r['backend']} | {r['shape']} | "
                     f"{r['parameters'] / 1e6:.2f}M | {r['beam'] if r['beam'] is not None else '-'} | "
                     f"{r['bleu']:.2f} | {speed} |")
    return "\n".join(lines)


CAPTION = ("BLEU against decoding speed (tokens/s), one panel per recipe, and one for the CTranslate2 "
           "exports of the deployed student (triangles). Squares: teachers; circles: students; the labelled "
           "points are the panel's Pareto front (no other point is both faster and better). Each speed is "
           "the one its table measured (recipe rows: fairseq-generate at the recipe's evaluation settings; "
           "CTranslate2 rows: one translation loop for all backends) on a shared CPU, each row when it was "
           "evaluated: compare speeds within a panel only, and small differences there with care; across "
           "panels they are not comparable. Rows without a measured speed are listed in the table but not "
           "plotted{unplotted}.")


def pareto_front(rows):
    """The rows no other row beats on both speed and BLEU."""
    return [r for r in rows if not any(o is not r and o["tokens_per_second"] >= r["tokens_per_second"]
                                       and o["bleu"] >= r["bleu"] and (o["tokens_per_second"], o["bleu"])
                                       != (r["tokens_per_second"], r["bleu"]) for o in rows)]


def panels(rows):
    """{panel title: its measured rows}: one per recipe (a row several recipes share goes to the
    first), then the deployment comparison."""
    groups = {}
    for r in rows:
        if measured(r):
            name = r["recipes"][0] if r["backend"] == "fairseq" else f"CTranslate2 exports ({r['run']})"
            groups.setdefault(name, []).append(r)
    return dict(sorted(groups.items(), key=lambda item: (item[0].startswith("CTranslate2"), item[0])))


def plot(rows, path, caption):
    plt = pyplot()
    groups = panels(rows)
    columns = min(3, max(len(groups), 1))
    lines = -(-len(groups) // columns)
    fig, axes = plt.subplots(lines, columns, figsize=(4.2 * columns, 3.4 * lines + 0.9), squeeze=False)
    for ax in axes.flat[len(groups):]:
        ax.axis("off")
    for ax, (name, members) in zip(axes.flat, groups.items()):
        deployed = name.startswith("CTranslate2")
        for role, marker, colour in (("teacher", "s", "tab:red"), ("student", "o", "tab:blue")):
            chosen = [r for r in members if r["role"] == role]
            ax.scatter([r["tokens_per_second"] for r in chosen], [r["bleu"] for r in chosen],
                       marker="^" if deployed else marker, color=colour, s=22)
        for r in pareto_front(members):
            ax.annotate(r["backend"] if deployed else r["run"], (r["tokens_per_second"], r["bleu"]),
                        fontsize=6, xytext=(3, 2), textcoords="offset points")
        ax.set_title(name, fontsize=8)
        ax.margins(x=0.25, y=0.1)  # room for the labels of the outermost points
        ax.tick_params(labelsize=6)
        ax.set_xlabel("tokens/s", fontsize=7)
        ax.set_ylabel("BLEU (test set)", fontsize=7)
        ax.grid(alpha=0.3)
    fig.text(0.01, 0.005, textwrap.fill(caption, 60 * columns), fontsize=6, va="bottom")
    fig.tight_layout(rect=(0, 0.9 / (3.4 * lines + 0.9), 1, 1))
    fig.savefig(path, dpi=130)
    plt.close(fig)


def report(results_dir, out_dir, echo=True):
    rows = recipe_rows(results_dir) + deployment_rows(results_dir)
    if not rows:
        raise DistillError(f"no recipe results (<recipe>.json) in {results_dir}")
    unplotted = [r for r in rows if not measured(r)]
    caption = CAPTION.format(unplotted=f" ({len(unplotted)} here)" if unplotted else " (none here)")
    os.makedirs(out_dir, exist_ok=True)
    plot(rows, os.path.join(out_dir, "summary.png"), caption)
    table = summary_table(rows)
    sections = [f"## {name}\n\n`{meta['config']}`, beam {meta['rows'][0]['beam'] if meta['rows'] else '-'}; "
                f"as in `{name}.md`.\n\n{recipe_markdown(meta)}"
                for name, meta in recipe_results(results_dir).items()]
    with open(os.path.join(out_dir, "summary.md"), "w") as f:
        f.write(f"# Summary: every teacher and student\n\nRendered by `bench/report.py` from the results "
                f"files in this directory; a run several recipes share is one row.\n\n"
                f"![BLEU against decoding speed](summary.png)\n\n{caption}\n\n{table}\n\n"
                f"# Each recipe's table\n\n" + "\n".join(sections))
    if echo:
        print(table)
    print(f"[report] wrote {os.path.join(out_dir, 'summary.md')} and summary.png "
          f"({len(rows) - len(unplotted)} of {len(rows)} rows plotted)")
    return rows


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.strip().split("\n")[0])
    p.add_argument("--results", default=os.path.join(BENCH, "results"), help="where the results JSON files are")
    p.add_argument("--out", default=None, help="where summary.md and summary.png go (default: --results)")
    args = p.parse_args(argv)
    run_cli("report", lambda: report(args.results, args.out or args.results))


if __name__ == "__main__":
    main()
