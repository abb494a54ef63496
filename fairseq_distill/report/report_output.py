"""A deployment report's files, from its record alone: ``OUT.json``, ``OUT.md`` (the tables)
and ``OUT.png`` (BLEU against words/s on the fewest CPU threads timed, one point per model
and backend, the Pareto front drawn through the points that no other beats on both)."""
import json
import os
from typing import List

from fairseq_distill.evaluation.scoring import markdown as paired_markdown
from fairseq_distill.report.timings import pareto_front

LABELS = {"ctranslate2-int8": "CTranslate2 int8", "ctranslate2-float32": "CTranslate2 float32",
          "fairseq": "fairseq", "ctranslate2-float16": "CTranslate2 float16", "fairseq-fp16": "fairseq fp16"}
CPU_COLUMNS = ("ctranslate2-int8", "ctranslate2-float32", "fairseq")
SHORT = {"ctranslate2-int8": "int8", "ctranslate2-float32": "float32", "fairseq": "fairseq"}
MARKERS = {"ctranslate2-int8": "o", "ctranslate2-float32": "s", "fairseq": "^"}


def front_points(record: dict) -> List[dict]:
    """One point per model and CPU backend on the fewest threads timed: words/s and that
    backend's own BLEU (int8's translations are not float32's)."""
    threads = str(record["timing"]["threads"][0])
    points = []
    for m in record["models"]:
        for backend in CPU_COLUMNS:
            speed = m["cpu"][threads].get(backend)
            if speed and "words_per_second" in speed:
                points.append({"model": m["name"], "backend": backend, "words_per_second": speed["words_per_second"],
                               "bleu": m["quality"][backend]["bleu"]})
    return points


def pareto(record: dict) -> List[dict]:
    points = front_points(record)
    return [points[i] for i in pareto_front([(p["words_per_second"], p["bleu"]) for p in points])]


def size(n) -> str:
    if n is None:
        return "–"
    return f"{n / 2**20:.1f} MiB" if n >= 2**20 else f"{n / 2**10:.1f} KiB"


def params(n: int) -> str:
    return f"{n / 1e6:.2f}M" if n >= 1e5 else f"{n:,}"


def quality_table(record: dict) -> List[str]:
    lines = ["| model | parameters | BLEU | chrF | vs teacher: ΔBLEU (p) | checkpoint | CTranslate2 float32 | "
             "CTranslate2 int8 | int8 BLEU (Δ float32) |", "|---|---|---|---|---|---|---|---|---|"]
    for m in record["models"]:
        q, test, sizes = m["quality"]["fairseq"], m["paired_test"]["bleu"], m["size_bytes"]
        mark = "" if test["significant"] else " †"
        int8 = (f"{m['quality']['ctranslate2-int8']['bleu']:.2f} ({m['int8_bleu_delta']:+.2f})"
                if m["int8_bleu_delta"] is not None else "–")
        # the teacher is the test's baseline: its test against itself says nothing
        versus = "–" if m["role"] == "teacher" else f"{test['delta']:+.2f} (p = {test['p_value']:.4f}){mark}"
        lines.append(f"| {row_name(m)} | {params(m['parameters'])} | {q['bleu']:.2f} | {q['chrf']:.2f} | "
                     f"{versus} | {size(sizes['checkpoint'])} | "
                     f"{size(sizes.get('ctranslate2-float32'))} | {size(sizes.get('ctranslate2-int8'))} | {int8} |")
    return lines


def students_only(comparison: dict) -> dict:
    """The paired test's table without the teacher's row against itself (the baseline row shows it)."""
    return {**comparison, "systems": {name: result for name, result in comparison["systems"].items()
                                      if not name.endswith(" (itself)")}}


def row_name(m: dict) -> str:
    return f"{m['name']} (teacher)" if m["role"] == "teacher" else m["name"]


def speed_table(record: dict, threads: str) -> List[str]:
    teacher = record["models"][0]["cpu"][threads]
    head = "| model | " + " | ".join(f"{LABELS[b]} words/s | × teacher | sentences/s" for b in CPU_COLUMNS) + " |"
    lines = [head, "|---|" + "---|" * (3 * len(CPU_COLUMNS))]
    for m in record["models"]:
        cells = []
        for b in CPU_COLUMNS:
            s, t = m["cpu"][threads].get(b), teacher.get(b)
            if not s:
                cells += ["–", "–", "–"]
                continue
            ratio = f"{s['words_per_second'] / t['words_per_second']:.2f}" if t else "–"
            cells += [f"{s['words_per_second']:.0f}", ratio, f"{s['sentences_per_second']:.1f}"]
        lines.append(f"| {row_name(m)} | " + " | ".join(cells) + " |")
    return lines


def latency_table(record: dict, threads: str) -> List[str]:
    head = "| model | " + " | ".join(f"{LABELS[b]} p50 | p95" for b in CPU_COLUMNS) + " |"
    lines = [head, "|---|" + "---|" * (2 * len(CPU_COLUMNS))]
    for m in record["models"]:
        cells = []
        for b in CPU_COLUMNS:
            lat = (m["cpu"][threads].get(b) or {}).get("latency_ms")
            cells += [f"{lat['p50_ms']:.1f}", f"{lat['p95_ms']:.1f}"] if lat else ["–", "–"]
        lines.append(f"| {row_name(m)} | " + " | ".join(cells) + " |")
    return lines


def gpu_section(record: dict) -> List[str]:
    gpu = record["gpu"]
    if not gpu["measured"]:
        return [f"Not measured: {gpu['note']}. On a machine with CUDA the report adds CTranslate2 float16 "
                f"and fairseq-generate in fp16."]
    lines = [f"{gpu['device']}; speed over the whole test set, as on the CPU.", "",
             "| model | " + " | ".join(f"{LABELS[b]} words/s | sentences/s | BLEU" for b in ("ctranslate2-float16",
                                                                                         "fairseq-fp16")) + " |",
             "|---|" + "---|" * 6]
    for m in record["models"]:
        cells = []
        for b in ("ctranslate2-float16", "fairseq-fp16"):
            s = (m["gpu"] or {}).get(b)
            if not s or "skipped" in s:
                cells += ["–", "–", "–"]
            else:
                cells += [f"{s['words_per_second']:.0f}", f"{s['sentences_per_second']:.1f}", f"{s['bleu']:.2f}"]
        lines.append(f"| {row_name(m)} | " + " | ".join(cells) + " |")
    skipped = [f"{m['name']} {LABELS[b]}: {s['skipped']}" for m in record["models"]
               for b, s in (m["gpu"] or {}).items() if "skipped" in s]
    return lines + ([""] + [f"Skipped: {line}" for line in skipped] if skipped else [])


def notes(record: dict) -> List[str]:
    out = []
    for m in record["models"]:
        if m["dictionary_check"] == "sizes":
            out.append(f"{m['name']}: its dictionaries were not found (not in the checkpoint, nor in the data "
                       f"directory it was trained on); only their sizes were checked against the data's.")
        if m["ctranslate2_unsupported"]:
            out.append(f"{m['name']}: no CTranslate2 rows: {m['ctranslate2_unsupported']}")
        for threads, backends in m["cpu"].items():
            for b, s in backends.items():
                if not s.get("same_outputs_every_round", True):
                    out.append(f"{m['name']} {LABELS[b]} on {threads} thread(s): the translations differed "
                               f"between rounds; its BLEU is the first round's.")
        out += slower_with_more_threads(m)
    return out


def slower_with_more_threads(m: dict) -> List[str]:
    """A backend that translated fewer words/s with more threads than with fewer: on some machines
    (a small virtual one, say) extra threads cost more than they give, and a reader taking the
    larger count for the faster setting would deploy the slower one."""
    counts = sorted(m["cpu"], key=int)
    out = []
    for fewer, more in zip(counts, counts[1:]):
        for b, s in m["cpu"][more].items():
            f = m["cpu"][fewer].get(b)
            if f and s["words_per_second"] < f["words_per_second"]:
                out.append(f"{m['name']} {LABELS[b]}: slower on {more} threads than on {fewer} "
                           f"({s['words_per_second']:.0f} against {f['words_per_second']:.0f} words/s) on this machine.")
    return out


def markdown(record: dict, comparison: dict) -> str:
    machine, sw, data, dec, timing = (record[k] for k in ("machine", "software", "data", "decoding", "timing"))
    teacher = record["teacher"]
    threads = [str(t) for t in timing["threads"]]
    lines = [f"# Deployment report: {teacher} and its students", "",
             f"Machine: {machine['cpu']}, {machine['cores']} cores ({machine['usable_cores']} usable by this run); "
             f"GPU: {machine['gpu'] or 'none'}. torch {sw['torch']}, fairseq {sw['fairseq']}, CTranslate2 "
             f"{sw['ctranslate2']}, sacreBLEU {sw['sacrebleu']}.", "",
             f"Test set: `{data['data_bin']}` `{data['subset']}`, {data['translated']} sentences, "
             f"{data['source_words']} source words. Decoding: beam {dec['beam']}, length penalty {dec['lenpen']}, "
             f"output length at most {dec['max_len_a']}·source + {dec['max_len_b']}, batches of {dec['batch_size']} "
             f"sentences.", "",
             f"Timings: the fastest of {timing['rounds']} rounds, the models taking turns in each. Words/s counts "
             f"the source's words (split at whitespace), the same work for every model. CTranslate2 translates in "
             f"the report's process (segmentation outside the clock); fairseq's speed is fairseq-generate's own "
             f"decoding time (loading excluded). Latency: one sentence per call, over {timing['latency_sentences']} "
             f"sentences spread evenly over the test set (fairseq's with the same model and search in the "
             f"report's process), p50 and p95 of the fastest round.", "",
             "## Quality and size", "",
             f"BLEU and chrF of fairseq-generate's translations; Δ and p: sacreBLEU's paired {comparison['test']} "
             f"test against {teacher} († not significant at p < 0.05). Sizes on disk: the decoding checkpoint "
             f"and CTranslate2's model.bin.", "", *quality_table(record), ""]
    for t in threads:
        every = " (every usable core)" if int(t) == machine["usable_cores"] and int(t) > 1 else ""
        lines += [f"## CPU speed, {t} thread{'s' if int(t) > 1 else ''}{every}", "", *speed_table(record, t), ""]
    for t in threads:
        lines += [f"## Latency at batch size 1, {t} thread{'s' if int(t) > 1 else ''} (ms)", "",
                  *latency_table(record, t), ""]
    lines += ["## GPU", "", *gpu_section(record), "",
              f"## Paired test against {teacher}", "", *paired_markdown(students_only(comparison)), "",
              f"## BLEU against speed on {threads[0]} CPU thread{'s' if int(threads[0]) > 1 else ''}", "",
              f"![BLEU against words/s]({record['files']['plot']})", "",
              "Pareto front (no other point is as fast and as good): " + ", ".join(
                  f"{p['model']} {LABELS[p['backend']]} ({p['words_per_second']:.0f} words/s, BLEU {p['bleu']:.2f})"
                  for p in record["pareto_front"]) + "."]
    extra = notes(record)
    if extra:
        lines += ["", "## Notes", "", *[f"- {n}" for n in extra]]
    return "\n".join(lines) + "\n"


def model_colors(count: int) -> list:
    """One RGBA colour per model, all different: tab10's, then tab20's, then evenly spaced hues
    (a qualitative map repeats its colours past its size)."""
    from matplotlib import colormaps

    if count <= 20:
        cmap = colormaps["tab10" if count <= 10 else "tab20"]
        return [cmap(i) for i in range(count)]
    cmap = colormaps["hsv"]
    return [cmap(i / count) for i in range(count)]


def plot(record: dict, path: str):
    from fairseq_distill.evaluation.plotting import pyplot

    plt = pyplot()
    points = front_points(record)
    names = [m["name"] for m in record["models"]]
    colors = model_colors(len(names))
    fig, ax = plt.subplots(figsize=(9, 4.5))
    for p in points:
        ax.scatter(p["words_per_second"], p["bleu"], marker=MARKERS[p["backend"]],
                   color=colors[names.index(p["model"])], s=50, zorder=3)
    front = record["pareto_front"]
    ax.plot([p["words_per_second"] for p in front], [p["bleu"] for p in front], "--", color="grey", zorder=2)
    ax.scatter([p["words_per_second"] for p in front], [p["bleu"] for p in front], s=180, facecolors="none",
               edgecolors="grey", zorder=2, label="Pareto front")
    for p in front:
        ax.annotate(f"{p['model']} ({SHORT[p['backend']]})", (p["words_per_second"], p["bleu"]),
                    textcoords="offset points", xytext=(6, 6), fontsize=8)
    for i, name in enumerate(names):
        ax.scatter([], [], marker="o", color=colors[i], label=name + (" (teacher)" if i == 0 else ""))
    for backend, marker in MARKERS.items():
        ax.scatter([], [], marker=marker, color="black", facecolors="none", label=LABELS[backend])
    speeds = [p["words_per_second"] for p in points]
    if speeds and max(speeds) / max(min(speeds), 1e-9) > 5:
        ax.set_xscale("log")
    ax.margins(x=0.1)  # room for the front's labels beside its last point
    threads = record["timing"]["threads"][0]
    ax.set_xlabel(f"words/s on {threads} CPU thread{'s' if threads > 1 else ''} ({record['machine']['cpu']})")
    ax.set_ylabel(f"BLEU ({record['data']['subset']})")
    ax.set_title("BLEU against CPU decoding speed")
    ax.grid(True, alpha=0.3)
    # beside the axes, where it hides no point
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.02, 1), borderaxespad=0)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def write_report(record: dict, out: str, comparison: dict):
    """``OUT.json``, ``OUT.md`` and ``OUT.png``; adds the Pareto front to ``record``."""
    record["pareto_front"] = pareto(record)
    # each file is written beside its name first, and the three are moved into place together
    # at the end: a report that fails half way replaces no file of an earlier one
    with open(out + ".partial.json", "w", encoding="utf-8") as f:
        json.dump(record, f, indent=2)
        f.write("\n")
    with open(out + ".partial.md", "w", encoding="utf-8") as f:
        f.write(markdown(record, comparison))
    plot(record, out + ".partial.png")
    for ext in (".md", ".png", ".json"):  # the JSON, which names the report's models, last
        os.replace(out + ".partial" + ext, out + ext)
