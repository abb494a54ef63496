"""Merging the shards of a seq-KD job: hypotheses back in corpus order, counts verified, one
chosen per sentence (under ``--select mbr --targets K``, up to K, each a pair), pairs filtered,
the result binarized (:mod:`fairseq_distill.seqkd.job`)."""
import json
import os
import shutil
import subprocess
import sys
import time
from typing import Dict, List, Optional


from fairseq_distill.errors import DistillError
from fairseq_distill.evaluation.generate import progress_bar
from fairseq_distill.seqkd.decode import read_shard
from fairseq_distill.seqkd.selection import select_hypotheses
from fairseq_distill.text.segmentation import META_FILE, Segmenter, load_meta
from fairseq_distill.seqkd.inputs import Inputs, count_side, load_side, shard_path, sources_digest

EXTERNAL_BACKEND = "ctranslate2 model"  # fairseq_distill.seqkd.external.BACKEND
# an external teacher's text work around decoding, per shard (fairseq_distill.seqkd.external)
TEXT_STAGES = ("tokenize_seconds", "detokenize_seconds", "segment_seconds")
PAIRS_FILE = "seqkd_pairs.tsv"  # with --targets K > 1: which sentence and hypothesis each pair holds


def read_shards(args, parts: Optional[list] = None):
    """Every shard's header (None for a file without one) and the n-best lists by id; ``parts``,
    if given, gets each shard's (SHA-256, sentence ids), in shard order."""
    headers, lists = [], {}
    for shard_id in range(args.num_shards):
        path = shard_path(args.work, shard_id, args.num_shards)
        if not os.path.isfile(path):
            raise DistillError(f"shard {shard_id} of {args.num_shards} is missing: {path} "
                               f"(run with --shard-id {shard_id} first)")
        header, found, digest = read_shard(path)
        twice = next((i for i in found if i in lists), None)
        if twice is not None:
            raise DistillError(f"sentence id {twice} appears in two shards")
        lists.update(found)
        headers.append(header)
        if parts is not None:
            parts.append((digest, sorted(found)))
    return headers, lists


def shard_settings(headers, args) -> dict:
    """The settings every shard was decoded with; shards decoded differently are refused."""
    settings = [(h or {}).get("settings") for h in headers]
    for shard_id, s in enumerate(settings[1:], 1):
        if s != settings[0]:
            differ = sorted(k for k in set(s or {}) | set(settings[0] or {})
                            if (s or {}).get(k) != (settings[0] or {}).get(k)) or ["(no record)"]
            raise DistillError(
                f"shards 0 and {shard_id} of {args.num_shards} were decoded with different settings "
                f"({', '.join(differ)}): {settings[0]} vs {s}; decode them again with the same options")
    return settings[0] or {}


def check_source_matches(settings, args):
    """The --subset and --source given to the merge must be what the shards translated."""
    if settings.get("subset", args.subset) != args.subset:
        raise DistillError(f"the shards translated --subset {settings['subset']}, not {args.subset}: "
                           f"pass --subset {settings['subset']} to merge them")
    recorded = settings.get("source")
    if recorded and not args.source:
        raise DistillError(f"the shards hold translations of the monolingual source {recorded['name']}: "
                           f"pass --source {recorded['name']} (its path here) to merge them")
    if args.source and not recorded:
        raise DistillError(f"--source {args.source} was given, but the shards were decoded without a "
                           f"monolingual source; decode them again with --source, or merge without it")
    if recorded and args.source:
        from fairseq_distill.seqkd.monolingual import describe_source

        if describe_source(args.source)["sha256"] != recorded["sha256"]:
            raise DistillError(f"--source {args.source} is not the file the shards translated "
                               f"({recorded['name']}, since changed or another file); decode them again")


def check_translated_source(settings, args, train_sources: List[str]):
    """The shards translated --data's training source (by content: its sentences in order), not
    another data set's, nor these data as they were before being binarized again."""
    recorded = settings.get("train_source_sha256")
    if not recorded:
        raise DistillError(f"the shards in {args.work} record no digest of the source they translated (decoded by "
                           f"an earlier version, or written otherwise), so they cannot be checked against --data "
                           f"{args.data}: decode them again (fsd-seqkd without --merge)")
    digest = sources_digest(train_sources)
    if recorded != digest:
        raise DistillError(f"the shards in {args.work} translated another training source than --data {args.data} "
                           f"(digest {recorded[:12]}; --data's '{args.subset}' source has {digest[:12]}): another data "
                           f"directory, or these data binarized again since; decode them again for this --data "
                           f"(fsd-seqkd without --merge), or merge them with the --data they were decoded from")


def merge(args, src, tgt, inputs: Optional[Inputs] = None, dest: Optional[str] = None):
    """The merged data binarized into ``dest`` (default ``args.out``); returns the summary, which
    the caller writes (:mod:`fairseq_distill.seqkd.output` builds a new directory and switches it in)."""
    dest = dest or args.out
    started = time.time()
    parts = [] if args.select == "mbr" else None  # each shard's digest and ids, for its MBR rankings
    headers, lists = read_shards(args, parts)
    settings = shard_settings(headers, args)
    check_source_matches(settings, args)
    if args.select == "mbr":
        from fairseq_distill.seqkd.mbr_shards import check_merge

        check_merge(settings, args)
    if inputs is None:
        mono_dir = None
        if args.source:
            from fairseq_distill.seqkd.monolingual import prepare_source

            mono_dir = prepare_source(args.source, args.data, src, tgt, args.work, info=settings["source"])
        inputs = Inputs(args, src, tgt, mono_dir)
    check_translated_source(settings, args, inputs.train)
    references = load_side(args.data, args.subset, src, tgt, tgt)
    n, m = len(inputs.train), len(inputs.mono)

    total = n + m
    unknown = sorted(i for i in lists if not 0 <= i < total)
    if unknown:
        raise DistillError(f"hypotheses for ids outside the corpus (0..{total - 1}): {unknown[:5]}")
    chosen, selection = choose(args, lists, references, n, parts)
    hyps = {i: [lists[i][k] for k in ks] for i, ks in chosen.items()}  # each sentence's targets, best first
    missing = [i for i in range(total) if not any(h.strip() for h in hyps.get(i, ()))]
    if missing and args.on_missing == "fail":
        train_missing = [i for i in missing if i < n]
        mono_missing = [i - n + 1 for i in missing if i >= n]
        what = []
        translations = settings.get("backend") == "translations file"
        if train_missing and translations:
            lines = [i + 1 for i in train_missing[:10]]
            what.append(f"{len(train_missing)} of {n} lines of --teacher-translations {args.teacher_translations} "
                        f"are empty or blank (first lines: {lines})")
        elif train_missing:
            what.append(f"{len(train_missing)} of {n} training sentences have no (or an empty) teacher "
                        f"hypothesis (first sentence ids, 0-based: {train_missing[:10]})")
        if mono_missing:
            what.append(f"{len(mono_missing)} of {m} lines of --source have none (first lines: {mono_missing[:10]})")
        remedy = ("fill those lines" if translations else
                  "decode those sentences again (delete their shard files under --work and rerun)")
        raise DistillError(
            f"{'; '.join(what)}; {remedy}, or pass --on-missing reference to keep the original reference "
            f"for training sentences (and leave such --source lines out)")
    missing_set = set(missing)
    train_missing = [i for i in missing if i < n]
    sources = inputs.train + inputs.mono
    # each sentence's targets as (hypothesis index, text); -1: the reference (--on-missing reference)
    targets = {i: [(-1, references[i])] if i in missing_set else list(zip(chosen[i], hyps[i])) for i in range(n)}
    targets.update({i: list(zip(chosen[i], hyps[i])) for i in range(n, total) if i not in missing_set})
    # the pairs in corpus order; a source with several targets (--targets K) has them side by side
    pairs = [(i, k, target) for i in sorted(targets) for k, target in targets[i]]
    keep = pairs
    filtered = 0
    if args.max_len_ratio:
        r = args.max_len_ratio
        keep = [(i, k, t) for i, k, t in pairs if 1 / r <= len(t.split()) / max(len(sources[i].split()), 1) <= r]
        filtered = len(pairs) - len(keep)

    os.makedirs(dest, exist_ok=True)
    text_prefix = os.path.join(args.work, "seqkd")
    with open(f"{text_prefix}.{src}", "w", encoding="utf-8") as fs, \
            open(f"{text_prefix}.{tgt}", "w", encoding="utf-8") as ft:
        for i, _, target in keep:
            fs.write(sources[i] + "\n")
            ft.write(target + "\n")
    log_path = os.path.join(args.work, "preprocess.log")  # its options and counts, not the terminal's
    with open(log_path, "w", encoding="utf-8") as log:
        code = subprocess.run([
            sys.executable, "-m", "fairseq_cli.preprocess", "--source-lang", src, "--target-lang", tgt,
            "--trainpref", text_prefix, "--destdir", dest,
            "--srcdict", os.path.join(args.data, f"dict.{src}.txt"),
            "--tgtdict", os.path.join(args.data, f"dict.{tgt}.txt"),
            "--workers", "1",
        ], stdout=log, stderr=subprocess.STDOUT).returncode
    if code:
        raise DistillError(f"fairseq-preprocess failed (exit status {code}) binarizing the seq-KD data; "
                           f"its log: {log_path}")
    # binarized train must hold exactly the kept pairs
    written = count_side(dest, "train", src, tgt, tgt)
    if written != len(keep):
        raise DistillError(f"binarized {written} pairs but wrote {len(keep)}")
    copy_other_splits(args.data, dest, n_train=len(keep), source=args.source)
    if selection.get("targets", 1) > 1:
        write_pair_origins(dest, keep)

    stats = [(h or {}).get("stats", {}) for h in headers]
    if settings.get("backend") == EXTERNAL_BACKEND:
        at_limit = sum(s.get("at_length_limit", 0) for s in stats)  # counted on the teacher's own tokens
    else:
        limit = {"a": settings.get("max_len_a", args.max_len_a), "b": settings.get("max_len_b", args.max_len_b)}
        at_limit = sum(len(t.split()) >= int(limit["a"] * (len(sources[i].split()) + 1) + limit["b"])
                       for i, _, t in keep if i not in missing_set)
    summary = {
        "sentences": n, "kept": len(keep), "filtered_by_length_ratio": filtered,
        "missing_or_empty": len(missing),
        "replaced_by_reference": len(train_missing) if args.on_missing == "reference" else 0,
        "monolingual_sentences": m,
        "monolingual_added": sum(1 for i, _, _ in keep if i >= n),
        "monolingual_left_out": len(missing) - len(train_missing) if args.on_missing == "reference" else 0,
        "backend": settings.get("backend", "fairseq"),
        "compute_type": settings.get("compute_type"),
        "beam": settings.get("beam"), "lenpen": settings.get("lenpen"),
        "nbest": max(map(len, lists.values()), default=1),
        "select": args.select, **selection,
        "selected_other_than_1best": sum(1 for i, ks in chosen.items() if ks[0] != 0 and i < n),
        "hypotheses_at_length_limit": at_limit,
        "redecoded_with_fairseq": sum(s.get("redecoded_with_fairseq", 0) for s in stats),
        "hypothesis_tokens": sum(len(t.split()) for _, _, t in keep),
        **{key: round(sum(s[key] for s in stats), 2) for key in TEXT_STAGES if all(key in s for s in stats)},
        "merge_seconds": round(time.time() - started, 1),
    }
    return summary


def choose(args, lists: Dict[int, List[str]], references: List[str], n: int, parts=None):
    """Which hypotheses of each n-best list become its targets (indices into the lists, best
    first: one, or under --select mbr --targets K the first K non-empty ones by MBR score), and
    what the summary says of the selection."""
    if args.select == "mbr":
        from fairseq_distill.seqkd.mbr_shards import rank_shards

        k = args.targets or 1
        rankings, seconds = rank_shards(args, lists, parts)
        chosen = {i: [j for j in rankings[i] if lists[i][j].strip()][:k] or rankings[i][:1] for i in lists}
        return chosen, {"targets": k, "mbr_seconds": round(seconds, 1),
                        "sources_with_fewer_targets": sum(1 for ks in chosen.values() if len(ks) < k)}
    multi = [i for i in sorted(lists) if len(lists[i]) > 1]
    chosen = {i: [0] for i in lists}
    if args.select == "first" or not multi:
        return chosen, {"targets": 1}
    meta = load_meta(args.data)
    if meta is None:
        raise DistillError(f"--select chrf scores detokenised text and needs the subword model the data was "
                           f"prepared with, but {args.data} has no {META_FILE}; pass --select first")
    segmenter = Segmenter.from_dir(args.data)
    # monolingual lines (ids from n on) have no reference: they keep the 1-best
    texts = [[segmenter.decode(h.split()) for h in lists[i]] for i in multi]
    refs = [segmenter.decode(references[i].split()) if i < n else None for i in multi]
    bar = progress_bar(len(multi), "select by chrF")
    try:
        picks = select_hypotheses(texts, refs, "chrf", progress=bar.update)
    finally:
        bar.close()
    chosen.update((i, [k]) for i, k in zip(multi, picks))
    return chosen, {"targets": 1}


def write_pair_origins(dest: str, keep):
    """``PAIRS_FILE``: for each training pair of ``dest``, in order, the sentence it translates
    (its id in the original data, then the --source lines) and which of the teacher's hypotheses
    it holds (0 = the 1-best; -1 = the reference, under --on-missing reference): with several
    targets per source the pairs' ids no longer follow the original corpus's."""
    with open(os.path.join(dest, PAIRS_FILE), "w", encoding="utf-8") as f:
        f.write("pair\tsentence\thypothesis\n")
        f.writelines(f"{pair}\t{i}\t{k}\n" for pair, (i, k, _) in enumerate(keep))


def copy_other_splits(data, out, n_train, source=None):
    """Valid/test sets, the subword model and the raw references stay as they were; OUT's
    train split is the new data (whichever split the teacher translated)."""
    for name in os.listdir(data):
        path = os.path.join(data, name)
        if name.startswith("train.") or name.startswith("dict.") or name == "preprocess.log":
            continue
        target = os.path.join(out, name)
        if os.path.isdir(path):
            if not os.path.exists(target):
                shutil.copytree(path, target)
        elif name == META_FILE:
            with open(path) as f:
                meta = json.load(f)
            meta.setdefault("sizes", {})["train"] = n_train
            meta["seqkd_from"] = os.path.abspath(data)
            if source:
                meta["seqkd_monolingual_source"] = os.path.abspath(source)
            with open(target, "w") as f:
                json.dump(meta, f, indent=2)
        else:
            shutil.copy(path, target)
