"""The result tables of README.md and docs/reproducing.md against the committed results
(bench/results/*.json): every BLEU, parameter count, speed, difference and p-value they quote is
the one a committed row holds, so that a rerun that changes a row cannot leave the docs'
conclusions behind."""
import json
import os
import re

import pytest

from helpers import REPO

RESULTS = os.path.join(REPO, "bench", "results")
NUMBER = re.compile(r"[+−-]?\d+(?:\.\d+)?")
REPRODUCING = os.path.join(REPO, "docs", "reproducing.md")
# docs/reproducing.md: per table (its first header), its baselines and each row label's first
# words -> the papers recipe's step
PAPERS_TABLES = {
    "row (2+2, d = 128)": (("no-kd-2", "word-kd-2"), {
        "no KD": "no-kd-2",
        "word-level KD": "word-kd-2",
        "PKD": "pkd-2",
        "CKD-RC (paper form)": "ckd-rc-2",
        "CKD-RC, the released code's form": "ckd-rc-released-2",
        "CKD-RC, the default": "ckd-2",
        "CKD-OC": "ckd-oc-2",
        "CKD-SC": "ckd-sc-2",
        "CKD-CC": "ckd-cc-2",
        "ALP-KD": "alp-kd-2",
        "A2D, the paper's β = 1": "a2d-beta1-2",
        "A2D, the released code's form and weights": "a2d-released-2",
        "A2D, rowwise at β = 0.01": "a2d-rowwise-2",
        "A2D, the default": "a2d-2",
    }),
    "row (3+3, d = 128)": (("no-kd-3", "word-kd-3"), {
        "no KD": "no-kd-3",
        "word-level KD": "word-kd-3",
        "A2D, the paper's β = 1": "a2d-beta1-3",
        "A2D, the released code's form and weights": "a2d-released-3",
        "A2D, the default": "a2d-3",
    }),
}


def readme_section(title: str) -> str:
    text = open(os.path.join(REPO, "README.md"), encoding="utf-8").read()
    match = re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## |\Z)", text, re.S | re.M)
    assert match, f"README.md has no section '## {title}'"
    return match.group(1)


def reproducing() -> str:
    with open(REPRODUCING, encoding="utf-8") as f:
        return f.read()


def table_rows(section: str, first_header: str):
    """The body rows (lists of cells) of the section's table whose first header is given."""
    lines = section.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"| {first_header} |"))
    rows = []
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in line.strip().strip("|").split("|")])
    assert rows, f"the table '{first_header}' has no rows"
    return rows


def numbers(cell: str):
    return [float(n.replace("−", "-")) for n in NUMBER.findall(cell)]


def committed(recipe: str) -> dict:
    with open(os.path.join(RESULTS, f"{recipe}.json"), encoding="utf-8") as f:
        return json.load(f)


def rows_by_name(recipe: str) -> dict:
    return {row["name"]: row for row in committed(recipe)["rows"]}


def test_the_results_table_quotes_the_committed_rows():
    rows = table_rows(readme_section("Results"), "run")
    for run, recipe, _kd, shape, params, bleu, speed in rows:
        row = rows_by_name(recipe).get(run)
        assert row, f"README Results: no row '{run}' in bench/results/{recipe}.json"
        assert float(bleu) == row["bleu"], f"README Results, {run}: BLEU {bleu}, committed {row['bleu']}"
        assert params == f"{row['parameters'] / 1e6:.2f}M", (run, params, row["parameters"])
        assert int(speed) == round(row["tokens_per_second"]), (run, speed, row["tokens_per_second"])
        s = row["shape"]
        layers, dim, ffn = (c.strip() for c in shape.split(","))
        assert layers == f"{s['encoder-layers']}+{s['decoder-layers']}", (run, shape)
        assert (int(dim), int(ffn)) == (s["encoder-embed-dim"], s["encoder-ffn-embed-dim"]), (run, shape)


def papers_table(header: str):
    """{step: its row's cells (label, BLEU, against no KD, against word-level KD, ...)} of the
    docs/reproducing.md table whose first header is given."""
    labels = PAPERS_TABLES[header][1]
    table = {}
    for cells in table_rows(reproducing(), header):
        step = next((s for label, s in sorted(labels.items(), key=lambda kv: -len(kv[0]))
                     if cells[0].startswith(label)), None)
        assert step, f"docs/reproducing.md, '{header}': unknown row '{cells[0]}' (add it to PAPERS_TABLES)"
        table[step] = cells
    return table


@pytest.mark.parametrize("header", PAPERS_TABLES)
def test_the_papers_tables_quote_the_committed_rows(header):
    data = committed("papers")
    rows = {row["name"]: row for row in data["rows"]}
    tests = {t["baseline"]: t["systems"] for t in data["significance"]}
    seeds = data["seeds"]
    baselines = PAPERS_TABLES[header][0]
    table = papers_table(header)
    assert set(baselines) <= set(table)
    for step, cells in table.items():
        assert step in rows, f"docs/reproducing.md quotes {step}, which is not committed"
        spread = seeds["rows"].get(step, {}).get("bleu")
        # one seed: the run's BLEU; several: the BLEU of each seed, their mean and sd
        allowed = {rows[step]["bleu"]} if not spread else {*spread["values"], spread["mean"], spread["sd"]}
        quoted = numbers(cells[1])
        assert quoted and set(quoted) <= allowed, f"{step}: quoted BLEU {cells[1]}, committed {sorted(allowed)}"
        for cell, baseline in zip(cells[2:4], baselines):
            if not cell or step == baseline:
                continue
            comparison = next((c for c in seeds["comparisons"]
                               if c["row"] == step and c["baseline"] == baseline), None)
            single = tests[baseline][step]["bleu"]
            results = [single] + ([r["bleu"] for r in (comparison["pooled"], *comparison["per_seed"])]
                                  if comparison else [])
            # a p-value may be quoted to 2 or 3 decimals
            allowed = {x for r in results
                       for x in (r["delta"], r["p_value"], round(r["p_value"], 3), round(r["p_value"], 2))}
            welch = (comparison or {}).get("welch_bleu")
            if welch:  # Welch's t over seeds and its p
                allowed |= {welch["t"], welch["p_value"], round(welch["p_value"], 3), round(welch["p_value"], 2)}
            quoted = numbers(cell)
            assert quoted and set(quoted) <= allowed, (
                f"{step} against {baseline}: quoted '{cell}', committed {sorted(allowed)}")


def test_a_row_called_better_in_the_papers_section_has_that_verdict():
    """docs/reproducing.md may call a same-width row better (or worse) than a baseline only
    where the committed comparison over seeds says so."""
    seeds = committed("papers")["seeds"]
    verdicts = {(c["row"], c["baseline"]): c["verdict"] for c in seeds["comparisons"]}
    quoted = [(step, cells, baselines) for header, (baselines, _) in PAPERS_TABLES.items()
              for step, cells in papers_table(header).items()]
    for step, cells, baselines in quoted:
        for cell, baseline in zip(cells[2:4], baselines):
            for word in ("better", "worse"):
                if re.search(rf"\b{word}\b", cell):
                    assert verdicts.get((step, baseline)) == word, (step, baseline, cell)
