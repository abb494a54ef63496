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


# README's methods table: per row (its label's first words) the committed comparisons whose
# difference and p it may quote, pooled over the papers recipe's seeds (row, baseline) or one
# recipe's paired test (recipe, baseline, row), and the method's row of docs/reproducing.md's
# summary, whose "its paper" figures it may quote
METHODS = {
    "word-level KD": ([("word-kd-2", "no-kd-2"), ("word-kd-3", "no-kd-3")], [], "word-level KD"),
    "PKD": ([("pkd-2", "no-kd-2"), ("pkd-2", "word-kd-2")], [], "PKD"),
    "CKD": ([("ckd-2", "no-kd-2"), ("ckd-2", "word-kd-2")], [], "CKD-RC"),
    "ALP-KD": ([("alp-kd-2", "no-kd-2"), ("alp-kd-2", "word-kd-2")], [], "ALP-KD"),
    "Align-to-Distill": ([("a2d-2", "no-kd-2"), ("a2d-3", "no-kd-3"), ("a2d-2", "word-kd-2"),
                          ("a2d-3", "word-kd-3")], [], "A2D"),
    "several terms": ([], [], None),
    "sequence-level KD": ([], [("foundation", "student", "student-seqkd"),
                               ("foundation", "student-wordkd", "student-seqkd")], None),
    "deep teachers": ([], [("gpkd", "student-seqkd", "student-gpkd")], None),
    "one model, many depths": ([], [], None),
}
DECIMAL = re.compile(r"[+−-]?\d+\.\d+")
# a figure: any decimal, or a whole number with its unit (289 s, 14 MB, 2× ...)
FIGURE = re.compile(r"[+−-]?\d+\.\d+|[+−-]?\d+(?=\s?(?:s\b|min\b|MB\b|MiB\b|×|%))")


def figures(text: str, pattern=FIGURE):
    return [float(n.replace("−", "-")) for n in pattern.findall(text)]


def rounded(*values):
    """Each value as the docs may write it: to 1, 2 or 3 decimals, or whole."""
    return {round(float(v), n) for v in values if v is not None for n in (0, 1, 2, 3)}


def pooled(row: str, baseline: str) -> set:
    comparison = next(c for c in committed("papers")["seeds"]["comparisons"]
                      if c["row"] == row and c["baseline"] == baseline)
    return rounded(comparison["pooled"]["bleu"]["delta"], comparison["pooled"]["bleu"]["p_value"])


def paired(recipe: str, baseline: str, row: str) -> set:
    result = next(t for t in committed(recipe)["significance"] if t["baseline"] == baseline)
    bleu = result["systems"][row]["bleu"]
    return rounded(bleu["delta"], bleu["p_value"])


def labelled(rows, labels):
    """{label: the row whose first cell starts with it}; every row has a label and every label a row."""
    found = {}
    for cells in rows:
        label = next((k for k in sorted(labels, key=len, reverse=True) if cells[0].startswith(k)), None)
        assert label, f"README: a table row '{cells[0]}' that the test does not know (add it)"
        found[label] = cells
    assert set(found) == set(labels), f"README: rows missing: {sorted(set(labels) - set(found))}"
    return found


def test_the_methods_table_quotes_the_committed_comparisons_and_the_papers():
    summary = {cells[0]: cells for cells in table_rows(reproducing(), "method")}
    rows = labelled(table_rows(readme_section("Methods"), "method"), METHODS)
    for label, (pooled_pairs, single, method) in METHODS.items():
        allowed = set().union(*(pooled(*pair) for pair in pooled_pairs), *(paired(*t) for t in single))
        if method:
            allowed |= set(figures(summary[method][1], DECIMAL))  # the paper's figures
        quoted = figures(rows[label][2], DECIMAL)
        assert set(quoted) <= allowed, f"README Methods, {label}: quotes {sorted(set(quoted) - allowed)}"


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


def step_costs(recipe: str, key: str, *names) -> set:
    rows = {r["name"]: r for r in committed(f"{recipe}_step_cost")["rows"]}
    return rounded(*(rows[n][key] for n in (names or rows)))


def gpu_ratios(kd: str, key: str) -> set:
    return rounded(*(r[key] for r in committed("gpu_bench")["training"] if r["kd"] == kd and not r.get("error")))


def decode_seconds(recipe: str) -> set:
    """Each seq-KD data step's decode time, and each one's speed-up over the fairseq-decoded one."""
    steps = committed(recipe)["seqkd"]
    fairseq = [s["decode_seconds"] for s in steps if s.get("backend", "fairseq") == "fairseq" and s.get("nbest", 1) == 1]
    return rounded(*(s["decode_seconds"] for s in steps), *(f / s["decode_seconds"] for f in fairseq for s in steps))


def cost_sources():
    """README's cost table: per row (its label's first words), the committed figures it may quote."""
    cache = next(c for c in committed("foundation")["caches"] if c["top_k"] == 8)
    return {
        "seq-KD data": decode_seconds("foundation") | decode_seconds("seqkd_backends")
        | decode_seconds("external_teacher") | paired("foundation", "student", "student-seqkd")
        | paired("foundation", "student-wordkd", "student-seqkd")
        | rounded(*(r["bleu"] for r in committed("external_teacher")["rows"])),
        "word-level KD, the teacher in the loop": step_costs("foundation", "time_relative_to_no_kd", "student-wordkd")
        | gpu_ratios("online", "time_vs_no_kd") | gpu_ratios("online", "memory_vs_no_kd")
        | paired("foundation", "student", "student-wordkd") | pooled("word-kd-2", "no-kd-2"),
        "word-level KD from a top-8 cache": step_costs("foundation", "time_relative_to_no_kd", "student-wordkd-cached-k8")
        | gpu_ratios("cached", "memory_vs_no_kd") | rounded(cache["teacher_seconds"], cache["bytes"] / 1e6)
        | paired("foundation", "student", "student-wordkd-cached-k8")
        | paired("foundation", "student-wordkd", "student-wordkd-cached-k8"),
        "a layer term": step_costs("layer_kd", "time_relative_to_word_kd") | pooled("pkd-2", "word-kd-2")
        | pooled("ckd-2", "word-kd-2") | paired("layer_kd", "student-wordkd", "pkd-student-side")
        | paired("layer_kd", "student-wordkd", "ckd-rc-released"),
        "attention KD": step_costs("a2d", "time_relative_to_word_kd") | pooled("a2d-2", "word-kd-2")
        | pooled("a2d-3", "word-kd-3"),
        "GPKD": rounded(*(r["bleu"] for r in committed("gpkd")["rows"])) | paired("gpkd", "student-seqkd", "student-gpkd"),
    }


def test_the_guide_quotes_the_committed_costs_and_gains():
    sources = cost_sources()
    rows = labelled(table_rows(readme_section("Which method when"), "add"), sources)
    for label, cells in rows.items():
        quoted = figures(cells[1] + " " + cells[2])
        assert quoted, f"README guide, {label}: no figure"
        assert set(quoted) <= sources[label], f"README guide, {label}: quotes {sorted(set(quoted) - sources[label])}"


def test_the_readmes_prose_quotes_only_committed_figures():
    """Outside the tables and code blocks checked above, the README's sections on results quote
    only the foundation's training times and the documented commands' results (readme_defaults)."""
    allowed = rounded(*(r["train_seconds"] / 60 for r in committed("foundation")["rows"]))
    # the documented commands at their defaults, on a narrower student: BLEU and gains over no KD
    defaults = ("student", "student-wordkd", "ckd", "a2d", "pkd-default", "alp-kd-default")
    allowed |= rounded(*(rows_by_name("readme_defaults")[name]["bleu"] for name in defaults))
    allowed |= set().union(*(paired("readme_defaults", "student", name) for name in defaults[1:]))
    for title in (BENCHMARK_SECTION, "Methods", "Which method when"):
        section = re.sub(r"```.*?```", "", readme_section(title), flags=re.S)
        prose = "\n".join(line for line in section.splitlines() if not line.startswith("|"))
        quoted = figures(prose, DECIMAL)
        assert set(quoted) <= allowed, f"README {title}: figures {sorted(set(quoted) - allowed)} are not checked"


def test_the_readme_is_short():
    with open(os.path.join(REPO, "README.md"), encoding="utf-8") as f:
        assert sum(1 for _ in f) <= 180


def test_the_quickstart_fits_the_first_screen():
    """README's first screen (40 lines) holds what a user gets and the whole numbered quickstart:
    install, the demo, one's own data and teacher to a deployed student, the tests."""
    lines = open(os.path.join(REPO, "README.md"), encoding="utf-8").read().splitlines()
    start = lines.index("## Quickstart")
    end = next(i for i in range(start + 1, len(lines)) if lines[i].startswith("## "))
    steps = [(i, re.match(r"(\d+)\. ", lines[i])) for i in range(start, end)]
    steps = [(i, int(m.group(1))) for i, m in steps if m]
    assert [n for _, n in steps] == [1, 2, 3, 4], steps
    assert [w in lines[i] for (i, _), w in zip(steps, ("Install", "demo", "deployed student", "tests"))] == [True] * 4
    last = steps[-1][0]
    while last + 1 < end and lines[last + 1].startswith("   ") and lines[last + 1].strip():
        last += 1
    assert last + 1 <= 40, f"the quickstart ends on line {last + 1} of README.md, past the first screen (40)"
    assert start + 1 <= 10 and lines[start - 2].strip(), "what a user gets comes first, before the quickstart"


# README's one benchmark: the teacher and every student of the papers' deployment report
# (bench/results/report_papers.json, made by bench/report_card.py), in one stated setting
BENCHMARK_SECTION = "One benchmark, one setting"
MODEL_NAME = re.compile(r"`([^`]+)`")


def report(recipe: str) -> dict:
    return committed(f"report_{recipe}")


def test_the_benchmark_table_is_the_committed_report_one_row_per_model():
    section = readme_section(BENCHMARK_SECTION)
    data = report("papers")
    rows = table_rows(section, "model")
    names = [MODEL_NAME.search(cells[0]).group(1) for cells in rows]
    assert names == [m["name"] for m in data["models"]], "one row per model of the report, in its order"
    models = {m["name"]: m for m in data["models"]}
    teacher = models[data["teacher"]]
    teacher_speed = teacher["cpu"]["1"]["ctranslate2-int8"]["words_per_second"]
    for cells in rows:
        name, layers, _kd, params, bleu, chrf, size, speed, ratio = cells
        m = models[MODEL_NAME.search(name).group(1)]
        assert params == f"{m['parameters'] / 1e6:.2f}M", (name, params)
        assert float(bleu) == m["quality"]["fairseq"]["bleu"] and float(chrf) == round(m["quality"]["fairseq"]["chrf"], 2)
        assert size == f"{m['size_bytes']['ctranslate2-int8'] / 2 ** 20:.1f} MiB", (name, size)
        words = m["cpu"]["1"]["ctranslate2-int8"]["words_per_second"]
        assert int(speed.replace(",", "")) == round(words) and ratio == f"{words / teacher_speed:.2f}×", name
    # the setting, stated once: data, metric, beam, backend, threads, machine, rounds
    setting = section.split("\n|")[0]
    assert f"{data['data']['sentences']:,} sentences" in setting and f"beam {data['decoding']['beam']}" in setting
    assert data["machine"]["cpu"] in setting and f"{data['timing']['rounds']} rounds" in setting
    assert "one thread" in setting and "(bench/results/report_papers.md)" in section


def test_the_readme_gives_the_teacher_one_score():
    """The teacher's score is the benchmark's; no other BLEU of a teacher is quoted in the README."""
    text = open(os.path.join(REPO, "README.md"), encoding="utf-8").read()
    score = f"{report('papers')['models'][0]['quality']['fairseq']['bleu']:.2f}"
    others = set()
    for recipe in ("papers", "foundation", "gpkd", "seqkd_select", "seqkd_control", "report_foundation"):
        path = os.path.join(RESULTS, f"{recipe}.json")
        if not os.path.isfile(path):
            continue
        data = committed(recipe)
        for row in data.get("rows", []) + data.get("models", []):
            if row.get("name", "").startswith("teacher"):
                bleu = row.get("bleu") or row.get("quality", {}).get("fairseq", {}).get("bleu")
                if bleu is not None and f"{bleu:.2f}" != score:
                    others.add(f"{bleu:.2f}")
    assert others and not [s for s in others if s in text], f"README quotes other teacher scores: {others}"
    assert text.count(score) == 1


def scale_durations() -> set:
    """Each scale.md run's time as the docs write it (``8 min 04 s``, ``1 h 02 min``, ``37 s``)."""
    said = set()
    for row in committed("scale")["rows"]:
        seconds = round(row["seconds"])
        hours, rest = divmod(seconds, 3600)
        minutes, secs = divmod(rest, 60)
        said |= {f"{hours} h {minutes:02d} min", f"{minutes} min {secs:02d} s", f"{secs} s"}
    return said


def report_seconds() -> set:
    """The deployment reports' times: each model's test-set translation per backend and thread count."""
    return rounded(*(backend["seconds"] for recipe in ("papers", "foundation", "demo")
                     for m in report(recipe)["models"] for threads in m.get("cpu", {}).values()
                     for backend in threads.values() if backend.get("seconds") is not None))


def test_the_quickstart_and_the_guides_quote_only_committed_figures():
    """Every time and figure of the README's quickstart and docs/guides.md is a committed
    result's: training minutes (papers, foundation), decode seconds (seq-KD backends, a
    CTranslate2 model), a cache's teacher time, the deployment reports' translation times, the
    data tools' times at scale."""
    minutes = rounded(*(r["train_seconds"] / 60 for recipe in ("papers", "foundation")
                        for r in committed(recipe)["rows"] if r.get("train_seconds")))
    seconds = decode_seconds("seqkd_backends") | decode_seconds("external_teacher") | decode_seconds("foundation")
    seconds |= rounded(*(c["teacher_seconds"] for c in committed("foundation")["caches"]))
    # the Hugging Face teacher's seq-KD decoding and cache fill (docs/guides.md's table)
    seconds |= decode_seconds("hf_teacher")
    minutes |= rounded(*(c["teacher_seconds"] / 60 for c in committed("hf_teacher")["caches"]))
    seconds |= report_seconds()
    # scale.md's runs under a minute, written "30 s"
    seconds |= {float(round(r["seconds"])) for r in committed("scale")["rows"] if r["seconds"] < 59.5}
    allowed = minutes | seconds
    # the README's own statements about itself: the demo's and the suite's stated durations
    stated = {65.0}  # the suite: CI's last full run (3,876 s, set-up included)
    with open(os.path.join(REPO, "bench", "results", "own_demo", "run.json"), encoding="utf-8") as f:
        stated.add(float(round(json.load(f)["wall_seconds"] / 60)))  # make demo's run
    durations = scale_durations()
    guides = open(os.path.join(REPO, "docs", "guides.md"), encoding="utf-8").read()
    for name, text in (("README Quickstart", readme_section("Quickstart")), ("docs/guides.md", guides)):
        prose = re.sub(r"```.*?```", "", text, flags=re.S)
        for clock in re.findall(r"\d+ h \d{2} min|\d+ min \d{2} s", prose):
            assert clock in durations, f"{name}: '{clock}' is no committed scale.md time"
            prose = prose.replace(clock, "")
        quoted = figures(prose, re.compile(r"\d+(?:\.\d+)?(?=\s?(?:s\b|min\b))"))
        assert set(quoted) <= allowed | stated, f"{name}: figures {sorted(set(quoted) - allowed - stated)} are not committed"
