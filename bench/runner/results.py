"""The results of a recipe, written from its records: ``<name>.json`` (the rows) and
``<name>.md`` (the table), plus the table's rendering, which marks rows a reader should
compare with care."""
import hashlib
import json
import os
from typing import Dict, List, Optional

import torch

from fairseq_distill.evaluation.scoring import markdown as significance_markdown
from fairseq_distill.text.files import read_lines

from .config import compared_baselines, dependencies
from .host import SPEED_SETUP
from .paired_tests import paired_tests
from .plan import REPO
from .portable import portable
from .seeds import seed_groups, seeds_markdown, seeds_summary

CHECKPOINT_MEANING = {"best": "checkpoint of lowest validation loss (checkpoint_best.pt)",
                      "last": "last checkpoint (checkpoint_last.pt, the end of its budget)"}
# kept in the work dir's records, not in the results: machine-specific and long
RECORD_ONLY = ("commands", "hypotheses", "references")
# Each row's test-set output and its references are committed beside the results, under
# hypotheses/<recipe>/: a session's work dir does not outlive it, and without them a row
# run in a later session could not be paired-tested against a committed one.
HYPOTHESES_DIR = "hypotheses"


def row_dependencies(row) -> List[str]:
    """The steps a results row was made from: the dependencies of the step it records."""
    data = None if row.get("data") in (None, "original") else row["data"]
    return dependencies({"teacher": row.get("teacher"), "data": data, "init": row.get("init"),
                         "continue": row.get("continues"), "finetune": row.get("finetunes"),
                         "teacher-cache": row.get("teacher_cache")})


def other_runs_used(row, runs: Dict[str, str]) -> List[str]:
    """The dependencies of ``row`` whose run in this table is not the one it was made from.
    Rows from before runs were fingerprinted count as made from an unfingerprinted run."""
    used = row.get("uses") or {}
    return [d for d in row_dependencies(row) if d in runs and used.get(d) != runs[d]]


def updates_cell(row) -> str:
    """The run's updates, and the evaluated checkpoint's where training went on past it
    (records from before ``trained_updates`` was kept have only the latter)."""
    trained = row.get("trained_updates")
    if trained is None or trained == row["updates"]:
        return str(row["updates"])
    return f"{trained} (evaluated: {row['updates']})"


def device_memory(row) -> str:
    peak = row.get("peak_gpu_memory_gib")
    return "-" if peak is None else f"{peak:.1f} GiB"


def markdown_table(rows, runs: Dict[str, str] = None) -> str:
    """``runs``: step name -> run fingerprint of every finished step (default: the rows'), to
    mark rows made from another run of a step than the one listed (e.g. a retrained teacher)."""
    if runs is None:
        runs = {r["name"]: r.get("run") for r in rows}
    head = ("| run | shape (enc+dec, d, ffn) | params | KD | data | epochs | updates | train time | "
            "BLEU | tokens/s |\n|---|---|---|---|---|---|---|---|---|---|")
    gpu = any(r.get("gpu") for r in rows)  # rows trained on a GPU name it and their peak memory
    if gpu:
        head = head.replace(" tokens/s |\n", " tokens/s | device, peak memory |\n") + "---|"
    lines, stale = [head], []
    # wall times of rows trained under an older speed set-up are marked, when the table mixes them
    mixed = len({bool(r.get("speed_setup")) for r in rows}) > 1
    for r in rows:
        s = r["shape"]
        kd = r["criterion"] if r.get("teacher") or r.get("teacher_cache") else "none"
        if r.get("teacher_cache"):
            kd += f" from {r['teacher_cache']}"
        if r.get("criterion_args"):
            kd += " (" + ", ".join(f"{k}={v}" for k, v in r["criterion_args"].items()) + ")"
        if r.get("init"):
            kd += f"; init: layers of {r['init']['from']} (keep {r['init'].get('keep', 'top')})"
        if r.get("continues"):
            kd += f"; continues {r['continues']}"
        if r.get("finetunes"):
            kd += f"; from {r['finetunes']}'s weights"
        mark = " †" if mixed and not r.get("speed_setup") else ""
        other = other_runs_used(r, runs)
        if other:
            stale.append((r["name"], other))
        lines.append(
            f"| {r['name']}{' ‡' if other else ''} | {s['encoder-layers']}+{s['decoder-layers']}, {s['encoder-embed-dim']}, "
            f"{s['encoder-ffn-embed-dim']} | {r['parameters'] / 1e6:.2f}M | {kd} | {r['data']} | "
            f"{r['epochs']} | {updates_cell(r)} | {r['train_seconds'] / 60:.1f} min{mark} | "
            f"{r['bleu']:.2f} | {'-' if r.get('tokens_per_second') is None else format(r['tokens_per_second'], '.0f')} |"
            + (f" {r.get('gpu') or 'CPU'}, {device_memory(r)} |" if gpu else "")
        )
    if any(updates_cell(r) != str(r["updates"]) for r in rows):
        lines.append("\nEpochs and updates are the run's; in brackets, the evaluated checkpoint's update "
                     "where it is not the run's last (checkpoint_best.pt: validation loss rose after it).")
    if mixed:
        lines.append(f"\n† trained before the runner's speed set-up ({SPEED_SETUP}): its steps ran up to "
                     f"~1.5x slower, so compare its train time only with other † rows; training-step costs "
                     f"measured side by side are in bench/results/*_step_cost.md.")
    if any(r.get("continues") or r.get("finetunes") for r in rows):
        lines.append("\nA row that starts from another step's run (continues / from its weights) states its "
                     "own train time, without that run's; a continued run's update count goes on from "
                     "that run's.")
    if stale:
        retrained = {d for _, deps in stale for d in deps}
        notes = []
        for r in rows:
            if r["name"] in retrained and r.get("committed_bleu") is not None:
                notes.append(f"{r['name']} was retrained with the same recipe and seed and scored "
                             f"{r['bleu']:.2f}; the run the ‡ rows used scored {r['committed_bleu']:.2f}")
        lines.append("\n‡ made from another run of " + ", ".join(sorted(retrained)) + " than the row in "
                     "this table (" + "; ".join(f"{n}: {', '.join(d)}" for n, d in stale) + "). "
                     + ("; ".join(notes) + ". " if notes else "")
                     + "Compare ‡ rows with the others with care: they do not share that step.")
    return "\n".join(lines)


def results_rows(steps, done: Dict[str, dict]) -> List[dict]:
    """The training rows of the finished steps, in recipe order, as the results store them."""
    return [{k: v for k, v in done[s["name"]].items() if k not in RECORD_ONLY} for s in steps
            if s["name"] in done and done[s["name"]]["kind"] == "train"]


def significance(compare: Optional[dict], steps, done: Dict[str, dict], keep_dir: Optional[str] = None) -> List[dict]:
    """The recipe's ``compare: {baseline: STEP or [STEP, ...]}``: for each baseline, every other
    finished training step against it, with sacreBLEU's paired test on the saved test-set
    hypotheses (``test: bootstrap|randomization``); one result per baseline that has
    finished. Steps evaluated before hypotheses were recorded are listed. ``keep_dir``: where
    each pair's result is kept for the next write (``paired_tests``)."""
    trained = [s["name"] for s in steps if done.get(s["name"], {}).get("kind") == "train"]
    saved = [n for n in trained if done[n].get("hypotheses") and os.path.isfile(done[n]["hypotheses"])]
    hypotheses = {}  # read once, whatever the number of baselines

    def read(name):
        if name not in hypotheses:
            hypotheses[name] = read_lines(done[name]["hypotheses"], what="hypotheses")
        return hypotheses[name]

    results = []
    for base in compared_baselines(compare, steps):
        if base not in saved or len(saved) < 2 or not os.path.isfile(str(done[base].get("references"))):
            continue
        result = paired_tests((base, read(base)), [(n, read(n)) for n in saved if n != base],
                              read_lines(done[base]["references"], what="references"),
                              compare.get("test", "bootstrap"), keep_dir)
        result["not_tested"] = [n for n in trained if n not in saved]
        results.append(result)
    return results


def results_markdown(rows, runs: Dict[str, str], tested, seeds: Optional[dict] = None) -> str:
    """A recipe's rows table followed by one paired-test table per compared baseline (and, for
    rows run under several seeds, their spread and tests across seeds): what ``<recipe>.md``
    holds below its caption, and all ``bench/report.py`` needs from the JSON."""
    table = markdown_table(rows, runs)
    for result in tested:
        table += "\n\n" + "\n".join(significance_markdown(result))
    if seeds and seeds.get("rows"):
        table += "\n\n" + "\n".join(seeds_markdown(seeds))
    if tested and tested[0]["not_tested"]:
        table += (f"\n\nNot tested (evaluated before hypotheses were kept): "
                  f"{', '.join(tested[0]['not_tested'])}.")
    return table


def write_results(results_dir, name, config_path, evaluated_checkpoint, steps, done: Dict[str, dict],
                  compare: Optional[dict] = None, recipe_seed: int = 1, keep_dir: Optional[str] = None) -> str:
    """Write ``<name>.json`` and ``<name>.md`` into ``results_dir`` (if given); returns the table.
    ``keep_dir``: where the paired tests are kept between writes (``paired_tests``)."""
    tested = significance(compare, steps, done, keep_dir)
    seeded = seeds_summary(steps, done, compared_baselines(compare, steps), recipe_seed, keep_dir) \
        if seed_groups(steps) else None
    meta = {"recipe": name, "config": os.path.relpath(config_path, REPO),
            "machine": {"cpu_threads": torch.get_num_threads(),
                        "device": "cuda" if torch.cuda.is_available() else "cpu",
                        "torch": torch.__version__},
            "rows": results_rows(steps, done),
            **({"significance": tested} if tested else {}),
            **({"seeds": seeded} if seeded else {}),
            "pretrained": [{k: v for k, v in r.items() if k not in RECORD_ONLY}
                           for r in done.values() if r["kind"] == "pretrained"],
            "seqkd": [{k: v for k, v in r.items() if k not in RECORD_ONLY}
                      for r in done.values() if r["kind"] == "seqkd"],
            "caches": [{k: v for k, v in r.items() if k not in RECORD_ONLY}
                       for r in done.values() if r["kind"] == "cache"]}
    table = results_markdown(meta["rows"], recorded_runs(meta), tested, seeded)
    if not results_dir:
        return table
    os.makedirs(results_dir, exist_ok=True)
    keep_test_outputs(results_dir, name, meta["rows"], done)
    # paths relative to the work dir (or the repository), never this machine's
    meta = portable(meta, ([os.path.dirname(os.path.abspath(keep_dir))] if keep_dir else []) + [REPO])
    # each file replaced whole: a call cut off while writing keeps the earlier rows
    replace_file(os.path.join(results_dir, f"{name}.json"), lambda f: json.dump(meta, f, indent=2))
    replace_file(os.path.join(results_dir, f"{name}.md"),
                 lambda f: f.write(recipe_caption(meta, evaluated_checkpoint) + recipe_markdown(meta)))
    return table


def replace_file(path: str, write) -> None:
    """``write(f)`` into a temporary file beside ``path``, then rename it over ``path``."""
    tmp = path + ".tmp"
    try:
        with open(tmp, "w") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def keep_test_outputs(results_dir, recipe, rows, done: Dict[str, dict]) -> None:
    """Copy each row's hypotheses and references into ``results_dir/hypotheses/<recipe>/``
    (``<step>.txt``; references by content, ``references-<sha1>.txt``) and name them in the row
    (``hypotheses_file``, ``references_file``, relative to ``results_dir``), where its record
    has them; files of rows no longer in the table are removed."""
    folder = os.path.join(HYPOTHESES_DIR, recipe)
    os.makedirs(os.path.join(results_dir, folder), exist_ok=True)
    kept = set()
    for row in rows:
        record = done[row["name"]]
        for source_key, field in (("hypotheses", "hypotheses_file"), ("references", "references_file")):
            source = record.get(source_key)
            if not (source and os.path.isfile(source)):  # older rows; references not read from a file
                continue
            data = read_binary(source)
            file_name = (f"{row['name']}.txt" if source_key == "hypotheses"
                         else f"references-{hashlib.sha1(data).hexdigest()[:10]}.txt")
            target = os.path.join(results_dir, folder, file_name)
            if not os.path.isfile(target) or read_binary(target) != data:  # a committed row's own copy stays
                with open(target, "wb") as f:
                    f.write(data)
            row[field] = os.path.join(folder, file_name)
            kept.add(file_name)
    for file_name in set(os.listdir(os.path.join(results_dir, folder))) - kept:
        os.remove(os.path.join(results_dir, folder, file_name))


def read_binary(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def decoding_settings(rows) -> str:
    """The settings of the test-set decoding that change the score, as the rows record them
    (rows evaluated before the length settings were recorded are named)."""
    recorded = [r for r in rows if r.get("lenpen") is not None]
    unrecorded = [r["name"] for r in rows if r.get("lenpen") is None]
    settings = {(r.get("beam"), r.get("lenpen"), r.get("max_len_a"), r.get("max_len_b")) for r in recorded}
    if len(settings) > 1:
        text = "decoding settings differ between rows (beam, lenpen, max_len_a/b in the JSON)"
    elif settings:
        beam, lenpen, a, b = settings.pop()
        text = f"beam {beam}, length penalty {lenpen}, length limit {a}·source + {b} tokens"
    else:
        beams = sorted({str(r.get("beam")) for r in rows})
        return f"beam {'/'.join(beams) or '-'} (length penalty and length limit not recorded: evaluated before they were)"
    if unrecorded:
        text += f" (not recorded for {', '.join(unrecorded)}: evaluated before they were)"
    return text


def recipe_caption(meta, evaluated_checkpoint: str) -> str:
    """The head of ``<recipe>.md``: what was evaluated, how it was decoded, on what."""
    threads = meta['machine']['cpu_threads']
    return (f"# {meta['recipe']}\n\nConfig: `{meta['config']}`; test set: test (sacreBLEU on "
            f"detokenised output); {decoding_settings(meta['rows'])}; "
            f"{meta['machine']['device']}, {threads} thread{'' if threads == 1 else 's'}; each run's "
            f"{CHECKPOINT_MEANING[evaluated_checkpoint]} is evaluated.\n\n")


def recorded_runs(meta) -> Dict[str, str]:
    """Step name -> run fingerprint of every finished step a results file records."""
    return {r["name"]: r.get("run") for r in meta["rows"] + meta.get("pretrained", []) + meta.get("seqkd", [])
            + meta.get("caches", [])}


def recipe_markdown(meta) -> str:
    """What ``<recipe>.md`` holds below its caption, rendered from its results JSON alone: the
    rows, one paired-test table per compared baseline, then the seq-KD data and teacher caches."""
    text = results_markdown(meta["rows"], recorded_runs(meta), meta.get("significance", []), meta.get("seeds")) + "\n"
    if meta.get("pretrained"):
        text += "\n" + pretrained_table(meta["pretrained"]) + "\n"
    if meta.get("seqkd"):
        text += "\n" + seqkd_table(meta["seqkd"]) + "\n"
    if meta.get("caches"):
        text += "\n" + cache_table(meta["caches"]) + "\n"
    return text


def pretrained_table(models) -> str:
    """The pretrained teachers: where each is, its content's SHA-256, and its own test score as
    the record of its making states it (decoded by its own library, not by fsd-evaluate)."""
    lines = ["Pretrained teachers (made outside the recipe; each named by the SHA-256 of its directory's files):", "",
             "| teacher | directory | params | epochs (best) | train time | its test BLEU, chrF | SHA-256 |",
             "|---|---|---|---|---|---|---|"]
    for m in models:
        score = (f"{m['test_bleu']:.2f}, {m['test_chrf']:.2f} ({m.get('test', 'test')})"
                 if m.get("test_bleu") is not None else "-")
        epochs = f"{m['epochs']} ({m.get('best_epoch', '-')})" if m.get("epochs") else "-"
        train = f"{m['train_seconds'] / 60:.1f} min" if m.get("train_seconds") else "-"
        params = f"{m['parameters'] / 1e6:.2f}M" if m.get("parameters") else "-"
        lines.append(f"| {m['name']} | {m['checkpoint']} | {params} | {epochs} | {train} | {score} | {m['sha256']} |")
    return "\n".join(lines)


def seqkd_table(datasets) -> str:
    """The seq-KD data steps: how the teacher decoded and how fast (rows made before a field was
    recorded show '-'; "shards kept": decoded once, by another step with the same decoding
    settings). "× fairseq" is the decode time of the fairseq-decoded row with the same
    teacher, beam and n-best settings divided by this row's."""
    def get(r, key, fmt="{}"):
        return "-" if r.get(key) is None else fmt.format(r[key])

    def settings(r):
        return (str((r.get("uses") or {}).get("teacher")), r.get("beam"), r.get("nbest", 1),
                r.get("select") if r.get("nbest", 1) > 1 else None)

    def decode_time(r):
        if r.get("shards_kept") and r.get("decode_seconds") is None:
            return "shards kept"  # decoded by an earlier step or run with the same settings
        return get(r, "decode_seconds", "{:.0f} s") + (f" ({r['shards_kept']} shards kept)" if r.get("shards_kept") else "")

    def targets_score(r):
        if r.get("targets_bleu") is None and r.get("targets_chrf") is None:
            return "-"
        return f"{get(r, 'targets_bleu', '{:.2f}')}, {get(r, 'targets_chrf', '{:.2f}')}"

    fairseq_seconds = {}
    for r in datasets:
        if r.get("backend", "fairseq") == "fairseq" and r.get("decode_seconds"):
            fairseq_seconds.setdefault(settings(r), r["decode_seconds"])
    lines = ["Sequence-level KD data (fsd-seqkd):", "",
             "| data | decoder | beam | n-best, selection | sentences | decode time | × fairseq | sentences/s | "
             "tokens/s | merge time | not the 1-best | at the length limit | re-decoded with fairseq | "
             "targets' BLEU, chrF against the references |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in datasets:
        decoder = r.get("backend", "fairseq") + (f" {r['compute_type']}" if r.get("compute_type") else "")
        tokens_per_second = (r["hypothesis_tokens"] / r["decode_seconds"]
                             if r.get("decode_seconds") and r.get("hypothesis_tokens") else None)
        baseline = fairseq_seconds.get(settings(r))
        ratio = f"{baseline / r['decode_seconds']:.2f}" if baseline and r.get("decode_seconds") else "-"
        nbest = r.get("nbest", 1)
        lines.append(f"| {r['name']} | {decoder} | {get(r, 'beam')} | "
                     f"{'1' if nbest == 1 else str(nbest) + ', ' + str(r.get('select'))}"
                     f"{', ' + str(r['targets']) + ' targets' if r.get('targets', 1) > 1 else ''} | {r['sentences']:,} | "
                     f"{decode_time(r)} | {ratio} | {get(r, 'sentences_per_second', '{:.1f}')} | "
                     f"{'-' if tokens_per_second is None else format(tokens_per_second, '.0f')} | "
                     f"{get(r, 'merge_seconds', '{:.0f} s')} | "
                     f"{get(r, 'selected_other_than_1best', '{:,}')} | {get(r, 'hypotheses_at_length_limit', '{:,}')} | "
                     f"{get(r, 'redecoded_with_fairseq', '{:,}')} | "
                     f"{targets_score(r)} |")
    return "\n".join(lines)


def cache_table(caches) -> str:
    lines = ["Teacher caches (fsd-cache-teacher):", "",
             "| cache | teacher | data | K | stored as | target tokens | size | MB per 1,000 tokens | "
             "teacher time | tokens/s |", "|---|---|---|---|---|---|---|---|---|---|"]
    for c in caches:
        lines.append(f"| {c['name']} | {c['teacher']} | {c['data']} | {c['top_k']} | {c['value_dtype']}/"
                     f"{c['index_dtype']} | {c['tokens']:,} | {c['bytes'] / 1e6:.1f} MB | {c['mb_per_1000_tokens']:.3f} | "
                     f"{c['teacher_seconds'] / 60:.1f} min | {c['tokens_per_second']:.0f} |")
    return "\n".join(lines)
