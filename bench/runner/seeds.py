"""Rows trained under several seeds (a step's ``seeds: [1, 2, 3]``): each row's scores per seed,
their mean and standard deviation, and its comparison with each compared baseline across seeds.

A paired bootstrap on one test set says nothing about training variance, so a method counts as
better (or worse) than a baseline only when every seed agrees in the sign of its BLEU
difference (seed s of the method against seed s of the baseline) *and* the paired bootstrap
on the concatenated test outputs of all seeds (sacreBLEU's, on the references repeated once per
seed) gives p < 0.05; otherwise the two tie. Beside it, Welch's t-test (SciPy's) on the seeds'
BLEU scores: it is the test of training variance, which resampling one test set's sentences
does not see, but with three seeds a side it has little power, so it is reported, not voted.

The seeds of one row should differ only in the seed. Where they do not (a teacher retrained
between seeds, on another CPU whose float kernels round differently), the summary says so: per
row, which run of each step it uses and which CPU trained each seed, where these differ; per
compared pair of seeds, the steps both use but from different runs (marked ‡).
"""
import math
import statistics
from typing import Dict, List, Optional

from fairseq_distill.evaluation.scoring import SIGNIFICANCE_LEVEL
from fairseq_distill.text.files import read_lines

from .paired_tests import paired_tests

METRICS = ("bleu", "chrf")


def seed_groups(steps) -> Dict[str, Dict[int, str]]:
    """{step: {seed: run name}} for every step that runs under more than one seed."""
    groups: Dict[str, Dict[int, str]] = {}
    for step in steps:
        if "seed_of" in step:
            groups.setdefault(step["seed_of"], {})[step["seed"]] = step["name"]
    for step in steps:
        if step["name"] in groups:
            groups[step["name"]][step.get("seed", 0)] = step["name"]
    return groups


def spread(values: List[float]) -> dict:
    return {"values": values, "mean": round(statistics.fmean(values), 2),
            "sd": round(statistics.stdev(values), 2) if len(values) > 1 else None}


def welch(values: List[float], baseline: List[float]) -> Optional[dict]:
    """Welch's t-test of two rows' per-seed scores (t > 0: ``values`` higher); None with fewer than
    two seeds a side, or no spread at all."""
    if len(values) < 2 or len(baseline) < 2:
        return None
    from scipy import stats  # fairseq's scikit-learn brings SciPy; only seeded recipes need it

    result = stats.ttest_ind(values, baseline, equal_var=False)
    if math.isnan(result.statistic):
        return None
    return {"t": round(float(result.statistic), 2), "p_value": round(float(result.pvalue), 4)}


def seeds_differ(records: Dict[int, dict]) -> dict:
    """What besides the seed differs between the finished seeds of one row: the run of a step
    they use (``runs``: {step: {seed: run fingerprint}}) and the CPU that trained them
    (``cpus``: {seed: CPU}); each only where the seeds differ in it."""
    out = {}
    runs = {}
    for dep in sorted({d for r in records.values() for d in (r.get("uses") or {})}):
        by_seed = {str(s): (r.get("uses") or {}).get(dep) for s, r in records.items()}
        if len(set(by_seed.values())) > 1:
            runs[dep] = by_seed
    if runs:
        out["runs"] = runs
    cpus = {str(s): r.get("cpu") for s, r in records.items()}
    if len(set(cpus.values())) > 1:
        out["cpus"] = cpus
    return out


def unshared_steps(row: dict, baseline: dict) -> List[str]:
    """The steps that both records use, each from a different run (e.g. two runs of a teacher)."""
    used, base_used = row.get("uses") or {}, baseline.get("uses") or {}
    return sorted(d for d in set(used) & set(base_used) if used[d] != base_used[d])


def verdict(deltas: List[float], pooled_p: float) -> str:
    if pooled_p < SIGNIFICANCE_LEVEL and all(d > 0 for d in deltas):
        return "better"
    if pooled_p < SIGNIFICANCE_LEVEL and all(d < 0 for d in deltas):
        return "worse"
    return "tie"


def seeds_summary(steps, done: Dict[str, dict], baselines: List[str], recipe_seed: int = 1,
                  keep_dir: Optional[str] = None) -> dict:
    """Per seeded row its scores per seed with mean and sd; per (baseline, row) the per-seed
    paired tests, the pooled test and the verdict. Rows or seeds not finished are left out.
    ``keep_dir``: where the paired tests are kept between calls (``paired_tests``)."""
    groups = {name: {(recipe_seed if seed == 0 else seed): run for seed, run in runs.items()}
              for name, runs in seed_groups(steps).items()}
    rows = {}
    for name, runs in groups.items():
        finished = {seed: run for seed, run in sorted(runs.items()) if run in done}
        if finished:
            rows[name] = {"seeds": list(finished), "runs": list(finished.values()),
                          **{m: spread([done[r][m] for r in finished.values()]) for m in METRICS}}
            differ = seeds_differ({seed: done[run] for seed, run in finished.items()})
            if differ:
                rows[name]["seeds_differ"] = differ
    comparisons = []
    for base in baselines:
        if base not in groups:
            continue
        for name, runs in groups.items():
            if name == base:
                continue
            seeds = [s for s in sorted(runs) if runs[s] in done and groups[base].get(s) in done
                     and all(done[r].get("hypotheses") for r in (runs[s], groups[base][s]))]
            if not seeds:
                continue
            refs = read_lines(done[groups[base][seeds[0]]]["references"], what="references")
            per_seed, pooled_sys, pooled_base = [], [], []
            for seed in seeds:
                hyp = read_lines(done[runs[seed]]["hypotheses"], what="hypotheses")
                base_hyp = read_lines(done[groups[base][seed]]["hypotheses"], what="hypotheses")
                result = paired_tests((base, base_hyp), [(name, hyp)], refs, keep_dir=keep_dir)["systems"][name]
                per_seed.append({"seed": seed, **{m: {k: result[m][k] for k in ("delta", "p_value")}
                                                  for m in METRICS}})
                unshared = unshared_steps(done[runs[seed]], done[groups[base][seed]])
                if unshared:
                    per_seed[-1]["unshared"] = unshared
                pooled_sys += hyp
                pooled_base += base_hyp
            pooled = paired_tests((base, pooled_base), [(name, pooled_sys)], refs * len(seeds),
                                  keep_dir=keep_dir)["systems"][name]
            # one seed's significant difference is not "better": the verdict waits for every seed
            # that both rows are planned with
            planned = sorted(set(runs) & set(groups[base]))
            comparisons.append({
                "baseline": base, "row": name, "seeds": seeds, "per_seed": per_seed,
                "pooled": {m: {k: pooled[m][k] for k in ("delta", "p_value")} for m in METRICS},
                "welch_bleu": welch([done[runs[s]]["bleu"] for s in seeds],
                                    [done[groups[base][s]]["bleu"] for s in seeds]),
                "verdict": verdict([s["bleu"]["delta"] for s in per_seed], pooled["bleu"]["p_value"])
                if seeds == planned else f"pending ({len(seeds)} of {len(planned)} seeds)",
            })
    return {"rows": rows, "comparisons": comparisons}


def seeds_markdown(summary: dict) -> List[str]:
    lines = ["| row | seeds | BLEU per seed | BLEU mean ± sd | chrF per seed | chrF mean ± sd |",
             "|---|---|---|---|---|---|"]
    for name, row in summary["rows"].items():
        cells = []
        for m in METRICS:
            s = row[m]
            cells += [", ".join(f"{v:.2f}" for v in s["values"]),
                      f"{s['mean']:.2f}" + (f" ± {s['sd']:.2f}" if s["sd"] is not None else "")]
        lines.append(f"| {name} | {', '.join(map(str, row['seeds']))} | " + " | ".join(cells) + " |")
    if summary["comparisons"]:
        lines += ["", "| row | against | ΔBLEU per seed (p) | pooled ΔBLEU (p) | pooled ΔchrF (p) | "
                      "Welch's t, BLEU over seeds (p) | verdict |",
                  "|---|---|---|---|---|---|---|"]
        for c in summary["comparisons"]:
            per_seed = "; ".join(f"{s['bleu']['delta']:+.2f} ({s['bleu']['p_value']:.3f})"
                                 + (" ‡" if s.get("unshared") else "") for s in c["per_seed"])
            pooled = [f"{c['pooled'][m]['delta']:+.2f} ({c['pooled'][m]['p_value']:.3f})" for m in METRICS]
            w = c.get("welch_bleu")
            welch_cell = f"{w['t']:+.2f} ({w['p_value']:.3f})" if w else "–"
            lines.append(f"| {c['row']} | {c['baseline']} | {per_seed} | {pooled[0]} | {pooled[1]} | "
                         f"{welch_cell} | {c['verdict']} |")
        lines += ["", "Per seed: sacreBLEU's paired bootstrap of seed s against the baseline's seed s; pooled: "
                  "the same on all seeds' test outputs concatenated. A row is better (worse) only when every "
                  f"seed's ΔBLEU has that sign and the pooled test gives p < {SIGNIFICANCE_LEVEL}; else a tie; "
                  "pending until every seed of both rows has run. Welch's t-test (SciPy) on the seeds' BLEU "
                  "scores measures training variance, which the bootstrap over sentences does not; with "
                  "three seeds it has little power and does not enter the verdict."]
    lines += differ_notes(summary)
    return lines


def differ_notes(summary: dict) -> List[str]:
    """Say where the seeds of a row differ in more than the seed, and mark compared seeds that do
    not share a step's run."""
    def by_value(per_seed: Dict[str, str]) -> str:
        groups: Dict[str, List[str]] = {}
        for seed, value in per_seed.items():
            groups.setdefault(value or "unknown", []).append(seed)
        return "; ".join(f"{'seed' if len(seeds) == 1 else 'seeds'} {', '.join(seeds)}: {value}"
                         for value, seeds in groups.items())

    notes = []
    for name, row in summary["rows"].items():
        differ = row.get("seeds_differ") or {}
        parts = [f"{dep} run ({by_value(per_seed)})" for dep, per_seed in differ.get("runs", {}).items()]
        if differ.get("cpus"):
            parts.append(f"CPU ({by_value(differ['cpus'])})")
        if parts:
            notes.append(f"{name}: " + "; ".join(parts))
    lines = []
    if notes:
        lines += ["", "Seeds that differ in more than the seed (a step retrained between seeds, or another "
                      "CPU, whose float kernels round differently): " + ". ".join(notes) + "."]
    unshared = sorted({(c["row"], c["baseline"], s["seed"], ", ".join(s["unshared"]))
                       for c in summary["comparisons"] for s in c["per_seed"] if s.get("unshared")})
    if unshared:
        lines += ["", "‡ the two seeds compared were made from different runs of a step both use, so they do not "
                      "share it: " + "; ".join(f"{row} against {base}, seed {seed} ({steps})"
                                                for row, base, seed, steps in unshared) + "."]
    return lines
