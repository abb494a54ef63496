"""A recipe's results table: each row of its ``rows.tsv`` (the paper's students, with the BLEU
the paper reports) beside what the run measured (``fsd-benchmark-score score`` records), written
as ``results.md`` and ``results.json``. A row not yet evaluated says so; no number is filled in.
Given the recipe's runs directory, a row whose training has not finished (no ``RUNS/NAME/.done``)
is not measured, whatever scores an earlier evaluation left, and is listed by name, as is a row
scored before its training last finished."""
import json
import os
from typing import Dict, List, Optional

from fairseq_distill.errors import DistillError

COLUMNS = ("name", "layers", "data", "criterion", "options", "heads", "paper_bleu")


def read_rows(path: str) -> List[Dict[str, str]]:
    """``rows.tsv``: tab-separated, ``#`` comments; one row per student."""
    rows = []
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            line = line.rstrip("\n")
            if not line.strip() or line.startswith("#"):
                continue
            cells = line.split("\t")
            if len(cells) != len(COLUMNS):
                raise DistillError(f"{path}:{number}: {len(cells)} tab-separated cells, expected {len(COLUMNS)} "
                                   f"({', '.join(COLUMNS)})")
            rows.append(dict(zip(COLUMNS, cells)))
    names = [r["name"] for r in rows]
    if len(set(names)) != len(names):
        raise DistillError(f"{path}: a row name appears twice: {sorted(n for n in names if names.count(n) > 1)}")
    return rows


def measured(eval_dir: str, name: str) -> Optional[dict]:
    path = os.path.join(eval_dir, f"{name}.scores.json")
    if not os.path.isfile(path):
        return None
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def finished(runs_dir: Optional[str], eval_dir: str, name: str) -> Optional[str]:
    """None if the row's training finished before its scores were made (or no runs directory is
    given), else why its scores do not count."""
    if runs_dir is None:
        return None
    done = os.path.join(runs_dir, name, ".done")
    if not os.path.isfile(done):
        return "unfinished"
    scores = os.path.join(eval_dir, f"{name}.scores.json")
    if os.path.isfile(scores) and os.path.getmtime(scores) < os.path.getmtime(done):
        return "scored before its training finished"
    return None


def results_table(corpus: str, rows: List[Dict[str, str]], teacher_paper_bleu: Optional[str],
                  eval_dir: str, teacher_layers: str = "6", teacher_heads: str = "4",
                  runs_dir: Optional[str] = None) -> dict:
    entries = [{"name": "teacher", "layers": teacher_layers, "criterion": "label_smoothed_cross_entropy",
                "options": "-", "data": "original", "heads": teacher_heads,
                "paper_bleu": teacher_paper_bleu or "-"}] + rows
    unfinished, stale = [], []
    for entry in entries:
        why = finished(runs_dir, eval_dir, entry["name"])
        entry["measured"] = measured(eval_dir, entry["name"]) if why is None else None
        (unfinished if why == "unfinished" else stale if why else []).append(entry["name"])
    table = {"corpus": corpus, "rows": entries}
    if runs_dir is not None:
        table.update(unfinished=unfinished, scored_before_training_finished=stale)
    return table


def markdown(table: dict) -> str:
    rows = table["rows"]
    first = next((r["measured"] for r in rows if r["measured"]), None)
    lines = [f"# {table['corpus']}: the paper's rows and this run", ""]
    if first:
        lines += [f"Paper BLEU form: {first['paper_bleu_form']} (`{first['paper_bleu_signature']}`); "
                  f"sacreBLEU: `{first['sacrebleu_signature']}`; chrF: `{first['chrf_signature']}`.", ""]
    lines += ["| row | layers | heads | data | criterion | options | paper's BLEU | ours, paper's form | "
              "ours, sacreBLEU | ours, chrF |",
              "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        m = r["measured"]
        ours = [f"{m['paper_bleu']:.2f}", f"{m['sacrebleu']:.2f}", f"{m['chrf']:.2f}"] if m else ["not yet measured"] * 3
        options = "" if r["options"] == "-" else f"`{r['options']}`"
        layers = r["layers"] if "+" in r["layers"] else f"{r['layers']}+{r['layers']}"  # N: N per side
        lines.append(f"| {r['name']} | {layers} | {r['heads']} | {r['data']} | {r['criterion']} | "
                     f"{options} | {r['paper_bleu']} | " + " | ".join(ours) + " |")
    if table.get("unfinished"):
        lines += ["", f"Not finished (not trained to the end): {', '.join(table['unfinished'])}."]
    if table.get("scored_before_training_finished"):
        lines += ["", f"Not measured (scored before their training last finished; evaluate again): "
                      f"{', '.join(table['scored_before_training_finished'])}."]
    return "\n".join(lines) + "\n"


def write_table(corpus: str, rows_path: str, teacher_paper_bleu: Optional[str], eval_dir: str, out: str,
                teacher_layers: str = "6", teacher_heads: str = "4", runs_dir: Optional[str] = None) -> dict:
    from fairseq_distill.workdir import check_earlier_output, check_outputs, files_written_aside

    record = os.path.splitext(out)[0] + ".json"
    if os.path.abspath(record) == os.path.abspath(out):
        raise DistillError(f"--out {out}: the table's JSON goes beside it as {record}, the same file; give the "
                           f"Markdown file's path, e.g. --out {os.path.splitext(out)[0]}.md")
    check_outputs([("--out", out), ("--out: its JSON", record)],
                  [("--rows", rows_path), ("--eval", eval_dir), ("--runs", runs_dir)])
    # a table is made again from what --eval holds: an earlier table (of any rows) is replaced
    check_earlier_output("--out", out, [record, out], "fsd-benchmark-score table", "the results table",
                         lambda earlier: isinstance(earlier.get("corpus"), str) and isinstance(earlier.get("rows"), list))
    table = results_table(corpus, read_rows(rows_path), teacher_paper_bleu, eval_dir, teacher_layers, teacher_heads,
                          runs_dir)
    with files_written_aside(out, record) as (md_tmp, json_tmp):
        with open(md_tmp, "w", encoding="utf-8") as f:
            f.write(markdown(table))
        with open(json_tmp, "w", encoding="utf-8") as f:
            json.dump(table, f, indent=2)
    done = sum(1 for r in table["rows"] if r["measured"])
    left = "".join(f"; {what}: {', '.join(table[key])}" for key, what in (
        ("unfinished", "not finished"), ("scored_before_training_finished", "scored before their training finished"))
        if table.get(key))
    print(f"[table] {done} of {len(table['rows'])} rows measured{left} -> {out}")
    return table
