"""The benchmark's result: ratios to the baselines, the list of failed measurements, and the
JSON and Markdown written (after every stage, so that a run cut short keeps what it measured)."""
import json
import os
from typing import List

from bench.gpu import REPO


def _cell(value, fmt="{:.0f}", missing="-"):
    return missing if value is None else fmt.format(value)


def failures(result: dict) -> List[str]:
    """One line per failed measurement (rows with an ``error``, a failing gpu_check)."""
    out = []
    named_by = {"teachers": ("name",), "teacher_caches": ("teacher",),
                "training": ("student", "teacher", "kd", "precision"), "decoding": ("teacher", "backend")}
    for key, fields in named_by.items():
        for row in result.get(key, []):
            if row.get("error"):
                what = " ".join(str(row[k]) for k in fields if row.get(k))
                out.append(f"{key}: {what}: {row['error']}")
    check = result.get("gpu_check")
    if check and (check.get("error") or check.get("returncode") not in (0, None)):
        out.append(f"gpu_check: exit status {check.get('returncode')}"
                   + (f": {check['error']}" if check.get("error") else ""))
    return out


def render_markdown(result: dict) -> str:
    b = result["budget"]
    title = "Decoding speed on the CPU" if result.get("stem") == "decode_speed_cpu" else "GPU benchmark"
    lines = [f"# {title} (`bench/gpu_bench.py`{' --' + result['mode'] if result['mode'] != 'full' else ''})",
             "",
             f"{result['device']}; torch {result['versions'].get('torch')}, fairseq "
             f"{result['versions'].get('fairseq')}, CTranslate2 {result['versions'].get('ctranslate2')}. "
             f"Random weights, synthetic data: {b['train_sentences']} random sentence pairs over "
             f"{b['vocab']} symbols (mean length {b['mean_length']}). Whole run {result['wall_seconds']:.0f} s.",
             "", "## Models", "", "| model | architecture | shape | parameters |", "|---|---|---|---|"]
    for m in result["models"]:
        lines.append(f"| {m['name']} | {m['arch']} | {m['shape']} | "
                     f"{_cell(m.get('parameters'), '{:,}')} |")
    if result.get("stem", "gpu_bench") == "gpu_bench":  # --cpu-decoding measures no training
        peak = "`torch.cuda.max_memory_allocated`" if result["cuda"] else "the peak resident set"
        bf16 = (" bf16 rows: fairseq's `--bf16`, without the `--tpu` fairseq 0.12 attaches to it (dropped by the "
                "plugin where torch_xla is absent, `fairseq_distill/compat.py`)."
                if any(r.get("precision") == "bf16" for r in result["training"]) else "")
        lines += ["", "## Training step", "",
                  f"fairseq `Trainer.train_step` on one batch of at most {b['max_tokens']} tokens (the middle batch of "
                  f"the length-sorted corpus), median of {b['steps']} steps after {b['warmup']} warm-up; peak memory: "
                  f"{peak} during the steps (model, optimizer state and teacher included), step memory: that peak "
                  f"less the memory in use before the steps. Online KD runs the teacher every step; cached KD reads "
                  f"its top-{b['top_k']} outputs from a teacher cache.{bf16}", "",
                  "| student | KD | teacher | precision | median step | × no KD | peak memory | × no KD | "
                  "step memory | batch (sentences / target tokens) | wall |",
                  "|---|---|---|---|---|---|---|---|---|---|---|"]
        for r in result["training"]:
            if r.get("error"):
                lines.append(f"| {r['student']} | {r['kd']} | {r.get('teacher') or '-'} | {r['precision']} | "
                             f"failed: {r['error'][:120]} | | | | | | |")
                continue
            lines.append(f"| {r['student']} | {r['kd']} | {r.get('teacher') or '-'} | {r['precision']} | "
                         f"{r['median_step_ms']:.1f} ms | {_cell(r.get('time_vs_no_kd'), '{:.2f}')} | "
                         f"{r['peak_memory_mib']:,.0f} MiB | {_cell(r.get('memory_vs_no_kd'), '{:.2f}')} | "
                         f"{r['step_memory_mib']:,.0f} MiB | {r['batch_sentences']} / {r['target_tokens']} | "
                         f"{r['wall_seconds']:.1f} s |")
        lines += ["", "Teacher caches (made once per teacher, before the cached rows; not in their step time):", "",
                  "| teacher | top-k | sentences | target tokens | build time | teacher time | size |",
                  "|---|---|---|---|---|---|---|"]
        for c in result["teacher_caches"]:
            if c.get("error"):
                lines.append(f"| {c['teacher']} | failed: {c['error'][:120]} | | | | | |")
                continue
            lines.append(f"| {c['teacher']} | {c['top_k']} | {c['sentences']} | {c['tokens']:,} | {c['seconds']:.1f} s | "
                         f"{c['teacher_seconds']:.1f} s | {c['size_mib']:.1f} MiB |")
    refs = [r["backend"] for r in result["decoding"] if r["backend"].startswith("fairseq")]
    refs = list(dict.fromkeys(refs))
    lines += ["", "## Seq-KD decoding", "",
              f"Each {'model' if result.get('stem') == 'decode_speed_cpu' else 'teacher'} translates the same "
              f"{b['decode_sentences']} synthetic training sources in the same "
              f"length-sorted batches of {b['decode_batch']} sentences, beam {b['beam']}, max length 1.2 · source + "
              f"10; fairseq's generator as fairseq-generate runs it, CTranslate2 from a float32 export loaded with "
              f"the compute type shown; fastest of {b['repeats']} round(s), the backends taking turns.", "",
              f"| {'model' if result.get('stem') == 'decode_speed_cpu' else 'teacher'} | backend | tokens/s | "
              + " | ".join(f"× {ref}" for ref in refs)
              + " | generated tokens | seconds |",
              "|---|---|---|" + "---|" * len(refs) + "---|---|"]
    for r in result["decoding"]:
        if r.get("error") or not r.get("tokens_per_second"):
            lines.append(f"| {r['teacher']} | {r['backend']} | failed: {r.get('error', 'not measured')[:120]} |"
                         + " |" * len(refs) + " | |")
            continue
        ratios = " | ".join(_cell(r.get("ratios", {}).get(ref), "{:.2f}") for ref in refs)
        lines.append(f"| {r['teacher']} | {r['backend']} | {r['tokens_per_second']:,.0f} | {ratios} | "
                     f"{r['generated_tokens']:,} | {r['seconds']:.2f} |")
    check = result.get("gpu_check")
    if check:
        lines += ["", "## scripts/gpu_check", "",
                  f"`{' '.join(check['command'])}`: exit status {check.get('returncode')}"
                  f"{' (' + check['error'] + ')' if check.get('error') else ''}, {check.get('seconds', 0):.0f} s; "
                  "its last lines:", "", "```", *check.get("last_lines", []), "```"]
    failed = failures(result)
    lines += ["", "## Failures", ""] + ([f"- {f}" for f in failed] if failed else ["none"])
    return "\n".join(lines) + "\n"


def add_ratios(result: dict):
    """Each training row's time and peak memory relative to the same student and precision
    without KD; each decoding row's tokens/s relative to each fairseq row of its teacher."""
    for r in result["training"]:
        base = next((x for x in result["training"] if x["kd"] == "none" and x["student"] == r["student"]
                     and x["precision"] == r["precision"] and not x.get("error")), None)
        ok = base is not None and not r.get("error")
        r["time_vs_no_kd"] = round(r["median_step_ms"] / base["median_step_ms"], 3) if ok else None
        r["memory_vs_no_kd"] = (round(r["peak_memory_mib"] / base["peak_memory_mib"], 3)
                                if ok and base["peak_memory_mib"] > 0 else None)
    for r in result["decoding"]:
        if r.get("error") or not r.get("tokens_per_second"):
            continue
        r["ratios"] = {x["backend"]: round(r["tokens_per_second"] / x["tokens_per_second"], 3)
                       for x in result["decoding"] if x["teacher"] == r["teacher"]
                       and x["backend"].startswith("fairseq") and not x.get("error") and x.get("tokens_per_second")}


def write_outputs(result: dict, out_dir: str):
    add_ratios(result)
    os.makedirs(out_dir, exist_ok=True)
    stem = result.get("stem", "gpu_bench")
    from bench.runner.portable import portable

    with open(os.path.join(out_dir, f"{stem}.json"), "w") as f:
        json.dump(portable(result, [REPO]), f, indent=2)
    try:
        text = render_markdown(result)
    except Exception as e:  # the JSON above holds the numbers; say why the table is missing
        text = f"# {stem}\n\nrendering failed ({type(e).__name__}: {e}); see {stem}.json\n"
    with open(os.path.join(out_dir, f"{stem}.md"), "w") as f:
        f.write(text)
