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


CAPTION = ("BLEU against decoding speed (tokens/s) of every teacher and student run of the committed "
           "recipe results, and of the CTranslate2 exports (triangles) of the deployed student. Each "
           "speed is the one its table measured (recipe rows: fairseq-generate at the recipe's "
           "evaluation settings; CTranslate2 rows: one translation loop for all backends), on a "
           "shared CPU in different sessions, so read small speed differences with care. Rows "
           "without a measured speed are listed in the table but not plotted{unplotted}.")


def plot(rows, path, caption):
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(9, 6))
    groups = {}
    for r in rows:
        if measured(r):
            groups.setdefault(r["recipes"][0] if r["backend"] == "fairseq" else "CTranslate2 / deployment", []).append(r)
    colours = plt.get_cmap("tab10")
    for i, (name, members) in enumerate(sorted(groups.items())):
        for role, marker in (("teacher", "s"), ("student", "o")):
            chosen = [r for r in members if r["role"] == role]
            if not chosen:
                continue
            deployed = name.startswith("CTranslate2")
            ax.scatter([r["tokens_per_second"] for r in chosen], [r["bleu"] for r in chosen],
                       marker="^" if deployed else marker, color=colours(i % 10), s=36,
                       label=f"{name} ({role}s)" if not deployed else f"{name}: {chosen[0]['run']}")
            for r in chosen:
                label = r["run"] if not deployed else r["backend"]
                ax.annotate(label, (r["tokens_per_second"], r["bleu"]), fontsize=5, alpha=0.8,
                            xytext=(3, 2), textcoords="offset points")
    ax.margins(x=0.1)  # room for the labels of the outermost points
    ax.set_xlabel("decoding speed (tokens/s)")
    ax.set_ylabel("BLEU (test set)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="lower left")
    fig.text(0.01, 0.005, caption, fontsize=6, wrap=True, va="bottom")
    fig.tight_layout(rect=(0, 0.08, 1, 1))
    fig.savefig(path, dpi=130)
    plt.close(fig)


def report(results_dir, out_dir):
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
