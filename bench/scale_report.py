"""bench/results/scale.{json,md,png} from the scale benchmark's measurements (bench/scale.py).

Per tool: each size's wall time, peak memory of the process tree and bytes written; the time's
growth from 1M to 4.5M pairs against linear (1.0 is linear; the goal is at most 1.2); where a tool
was not run at 4.5M pairs, its time there extrapolated from its largest measured size at that
size's rate per pair, marked as such. The plot: time and memory against pairs, log-log, one line
per tool.
"""
import json
import os
from typing import Dict, List

GIB = 1 << 30
TARGET = 4_500_000
GOAL_GROWTH = 1.2
GOAL_RSS = 2 * GIB
LABELS = {
    "clean": "WMT'14 cleaning (fsd-benchmark-corpus)",
    "prepare": "fsd-prepare-corpus (SentencePiece 37k, binarization)",
    "cache": "fsd-cache-teacher, one process (tiny teacher, K = 8)",
    "cache-sharded": "fsd-cache-teacher --num-shards 2, shards + merge",
    "cache-merge": "fsd-cache-teacher --merge of 4 shards (synthetic rows)",
    "train-startup": "fairseq-train with the merged cache: to its first update",
    "translate": "fsd-translate (CTranslate2, tiny teacher, greedy)",
    "seqkd": "fsd-seqkd 1-best (CTranslate2, tiny teacher)",
    "seqkd-nbest": "fsd-seqkd 4-best, chrF selection, 2 shards + merge",
    "seqkd-merge": "fsd-seqkd --merge, 2 synthetic 1-best shards",
    "seqkd-merge-nbest": "fsd-seqkd --merge --select chrf, 2 synthetic 4-best shards",
}


def summarise(rows: List[dict]) -> Dict[str, dict]:
    tools: Dict[str, dict] = {}
    for tool in LABELS:
        mine = sorted((r for r in rows if r["tool"] == tool), key=lambda r: r["pairs"])
        if not mine:
            continue
        by_size = {r["pairs"]: r for r in mine}
        summary = {"sizes": [r["pairs"] for r in mine], "peak_rss_bytes": max(r["peak_rss_bytes"] for r in mine)}
        if 1_000_000 in by_size and TARGET in by_size:
            summary["growth_1m_to_4_5m"] = round(by_size[TARGET]["seconds"] / by_size[1_000_000]["seconds"] / 4.5, 2)
        if TARGET in by_size:
            summary["seconds_at_4_5m"] = by_size[TARGET]["seconds"]
            summary["measured_at_4_5m"] = True
        else:
            largest = mine[-1]
            summary["seconds_at_4_5m"] = round(largest["seconds"] / largest["pairs"] * TARGET, 0)
            summary["measured_at_4_5m"] = False
            summary["extrapolated_from"] = largest["pairs"]
        summary["rss_goal_met"] = summary["peak_rss_bytes"] < GOAL_RSS
        if "growth_1m_to_4_5m" in summary:
            summary["time_goal_met"] = summary["growth_1m_to_4_5m"] <= GOAL_GROWTH
        per_token = [r["cache_bytes_per_target_token"] for r in mine if "cache_bytes_per_target_token" in r]
        if per_token:
            summary["cache_bytes_per_target_token"] = per_token[-1]
        tools[tool] = summary
    return tools


def duration(seconds: float) -> str:
    seconds = int(round(seconds))
    if seconds < 60:
        return f"{seconds} s"
    if seconds < 3600:
        return f"{seconds // 60} min {seconds % 60:02d} s"
    return f"{seconds // 3600} h {seconds % 3600 // 60:02d} min"


def markdown(results: dict) -> str:
    machine = results["machine"]
    lines = [
        "# The data tools at WMT size",
        "",
        f"Synthetic WMT-like corpora (bench/scale_corpus.py, seed 1) of 0.1M to 4.5M pairs; each tool run alone, "
        f"one worker process, pinned to one core of the machine ({machine['cpu']}, {machine['cores']} cores; the "
        f"other core ran other work). Peak memory: the sum of resident memory over the tool's whole process "
        f"tree, sampled every 0.25 s (an upper bound: pages shared by forked workers count once per process). "
        f"Produced by `python bench/scale.py --work DIR` then `--report`.",
        "",
        "| tool | pairs | time | peak memory | written |",
        "| --- | ---: | ---: | ---: | ---: |",
    ]
    for tool, label in LABELS.items():
        for r in sorted((r for r in results["rows"] if r["tool"] == tool), key=lambda r: r["pairs"]):
            # the merge replaces its shards by the cache: what it leaves is the cache
            written = r.get("cache_bytes", r["bytes_written"]) if tool == "cache-merge" else r["bytes_written"]
            lines.append(f"| {label} | {r['pairs']:,} | {duration(r['seconds'])} | "
                         f"{r['peak_rss_bytes'] / GIB:.2f} GiB | {max(written, 0) / GIB:.2f} GiB |")
    lines += ["", "## At 4.5M pairs, against the goals", "",
              f"Goals: time within {GOAL_GROWTH}× of linear from 1M to 4.5M pairs; peak memory under 2 GiB.", "",
              "| tool | time at 4.5M (one core) | growth 1M → 4.5M (1.0 = linear) | peak memory (any size) |",
              "| --- | ---: | ---: | ---: |"]
    for tool, s in results["summary"].items():
        at = duration(s["seconds_at_4_5m"]) + ("" if s["measured_at_4_5m"] else
                                                f" (extrapolated from {s['extrapolated_from']:,})")
        growth = f"{s['growth_1m_to_4_5m']:.2f}" if "growth_1m_to_4_5m" in s else "not measured"
        lines.append(f"| {LABELS[tool]} | {at} | {growth} | {s['peak_rss_bytes'] / GIB:.2f} GiB |")
    per_token = {t: s["cache_bytes_per_target_token"] for t, s in results["summary"].items()
                 if "cache_bytes_per_target_token" in s}
    if per_token:
        value = next(iter(per_token.values()))
        lines += ["", f"The teacher cache takes {value:g} bytes per target token at K = 8 (float16 log-probabilities, "
                      f"uint16 indices: K × 4 bytes), plus 8 bytes per sentence for its offsets."]
    resumed = sorted((r for r in results["rows"] if r["tool"].endswith("-resume")), key=lambda r: (r["tool"], r["pairs"]))
    if resumed:
        lines += ["", "## Interrupted and run again", "",
                  "Each tool killed (SIGKILL to its whole process group, as a machine that stops) half-way through "
                  "its uninterrupted time, then run again with the same command.", "",
                  "| tool | pairs | killed after | the rerun | uninterrupted | what the rerun said it kept |",
                  "| --- | ---: | ---: | ---: | ---: | --- |"]
        for r in resumed:
            kept = "; ".join(r.get("resumed_said") or []) or "nothing"
            lines.append(f"| {r['tool'][:-len('-resume')]} | {r['pairs']:,} | {duration(r['interrupted_after_seconds'])} | "
                         f"{duration(r['seconds'])} | {duration(r['uninterrupted_seconds'])} | {kept} |")
    if results.get("notes"):
        lines += ["", "## Notes", ""] + [f"- {note}" for note in results["notes"]]
    return "\n".join(lines) + "\n"


def plot(results: dict, path: str):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax_time, ax_rss) = plt.subplots(1, 2, figsize=(12, 4.8))
    for tool, label in LABELS.items():
        mine = sorted((r for r in results["rows"] if r["tool"] == tool), key=lambda r: r["pairs"])
        if not mine:
            continue
        pairs = [r["pairs"] for r in mine]
        ax_time.plot(pairs, [r["seconds"] for r in mine], marker="o", label=label)
        ax_rss.plot(pairs, [r["peak_rss_bytes"] / GIB for r in mine], marker="o", label=label)
    for ax, what in ((ax_time, "wall time (s)"), (ax_rss, "peak memory of the process tree (GiB)")):
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("training pairs")
        ax.set_ylabel(what)
        ax.grid(True, which="both", alpha=0.3)
    ax_rss.axhline(2, color="grey", linestyle="--", linewidth=1)
    ax_time.legend(fontsize=7, loc="lower right")
    fig.suptitle("The data tools at WMT size (one core)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_report(measurements: str, results_dir: str):
    with open(measurements, encoding="utf-8") as f:
        # paths the tools printed (kept in rows), relative to the work dir: no machine's paths
        work = os.path.dirname(os.path.abspath(measurements)) + os.sep
        results = json.loads(f.read().replace(json.dumps(work)[1:-1], ""))
    results["summary"] = summarise(results["rows"])
    os.makedirs(results_dir, exist_ok=True)
    with open(os.path.join(results_dir, "scale.json"), "w", encoding="utf-8") as f:
        json.dump(results, f, indent=2)
    with open(os.path.join(results_dir, "scale.md"), "w", encoding="utf-8") as f:
        f.write(markdown(results))
    plot(results, os.path.join(results_dir, "scale.png"))
