"""Sequence-level KD data: the teacher translates the training source, and the result is
binarized with the teacher's dictionaries into a new data directory.

A :class:`SeqKDJob` says what to make; :func:`make_seqkd_data` plans the shards, runs the
teacher on those it asks for (:func:`generate_shard`), and once every shard exists merges
them (:func:`merge`): hypotheses back in corpus order, counts verified, one hypothesis
chosen per sentence, pairs filtered, the result binarized. ``fsd-seqkd`` is its command line.

Backends. ``fairseq`` (the default) runs stock fairseq-generate; ``ctranslate2`` converts
the teacher once and decodes with CTranslate2 by fairseq's rules
(:mod:`fairseq_distill.ctranslate2_teacher`: the length limit, the length penalty, what it
does at the limit, what it cannot decode). Both read the binarized source, so the teacher
sees the same subword tokens either way. Shard files are the same for both; the first line
of each records how it was decoded, and shards decoded differently are not merged together.

Every training sentence must get exactly one hypothesis, put back in corpus order. A
missing or empty hypothesis stops the merge (``--on-missing fail``, the default) or is
replaced by the original reference (``--on-missing reference``); either way it is
reported. ``--max-len-ratio R`` drops pairs whose hypothesis/source length ratio is above
R or below 1/R, and reports how many. The valid and test sets are copied unchanged.

``--nbest N`` keeps the teacher's N best hypotheses per sentence in the shards;
``--select chrf`` (the default) then keeps the one closest to the reference by sentence
chrF, ``--select first`` the 1-best (:mod:`fairseq_distill.hypothesis_selection`).

``--source FILE`` adds monolingual source text: the teacher translates it too and the pairs
follow the training pairs (:mod:`fairseq_distill.monolingual`). Its lines have no reference:
they keep the 1-best under any ``--select``, and one with no (or an empty) hypothesis fails
the merge, or under ``--on-missing reference`` is left out; either way it is counted.
"""
import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import Dict, List, Optional

from fairseq.data import Dictionary, data_utils

from fairseq_distill.errors import DistillError
from fairseq_distill.generation import progress_bar, run_generate
from fairseq_distill.hypothesis_selection import check_selection, select_hypotheses
from fairseq_distill.segmentation import META_FILE, Segmenter, load_meta
from fairseq_distill.textfiles import first_few

BACKENDS = ("fairseq", "ctranslate2")


@dataclass
class SeqKDJob:
    """What to make: the fields are fsd-seqkd's options (see its ``--help``)."""
    data: str
    teacher: Optional[str] = None  # ':'-separated for an ensemble
    out: Optional[str] = None
    work: Optional[str] = None  # shard outputs; default OUT.work
    subset: str = "train"
    source_lang: Optional[str] = None
    target_lang: Optional[str] = None
    backend: str = "fairseq"
    compute_type: Optional[str] = None  # ctranslate2 only (default float32)
    threads: Optional[int] = None  # ctranslate2's CPU threads (default: all cores)
    beam: int = 5
    lenpen: float = 1.0
    max_len_a: float = 1.2
    max_len_b: int = 10
    nbest: int = 1
    select: str = "chrf"
    source: Optional[str] = None  # monolingual source text to translate as well
    batch_size: int = 128
    max_tokens: Optional[int] = None
    num_shards: int = 1
    shard_id: Optional[int] = None  # generate only this shard, merge later
    merge: bool = False  # only merge existing shards
    on_missing: str = "fail"  # or "reference"
    max_len_ratio: Optional[float] = None
    allow_size_only_dictionary_check: bool = False  # teacher dictionaries not found: compare sizes


def data_langs(data_bin, meta, args):
    src = args.source_lang or (meta or {}).get("source_lang")
    tgt = args.target_lang or (meta or {}).get("target_lang")
    if not (src and tgt):
        raise DistillError(f"cannot tell the languages of {data_bin}: pass --source-lang and --target-lang")
    return src, tgt


def load_side(data_bin, subset, src, tgt, lang):
    dictionary = Dictionary.load(os.path.join(data_bin, f"dict.{lang}.txt"))
    prefix = os.path.join(data_bin, f"{subset}.{src}-{tgt}.{lang}")
    dataset = data_utils.load_indexed_dataset(prefix, dictionary)
    if dataset is None:
        raise DistillError(f"no binarized '{subset}' data for '{lang}' at {prefix}.bin/.idx")
    return [dictionary.string(dataset[i]) for i in range(len(dataset))]


def shard_path(work, shard_id, num_shards):
    return os.path.join(work, f"shard{shard_id}-of-{num_shards}.jsonl")


def check_options(args: SeqKDJob):
    """Refuse bad options before anything runs, naming what is valid."""
    if args.backend not in BACKENDS:
        raise DistillError(f"unknown --backend '{args.backend}'; choose one of {', '.join(BACKENDS)}")
    for flag, value in (("--compute-type", args.compute_type), ("--threads", args.threads)):
        if value is not None and args.backend != "ctranslate2":
            raise DistillError(f"{flag} applies to --backend ctranslate2 only (the backend is {args.backend})")
    if args.threads is not None and args.threads < 1:
        raise DistillError(f"--threads must be at least 1, got {args.threads}")
    if args.beam < 1:
        raise DistillError(f"--beam must be at least 1, got {args.beam}")
    if not 1 <= args.nbest <= args.beam:
        raise DistillError(f"--nbest must be between 1 and the beam size ({args.beam}), got {args.nbest}: "
                           f"beam search finds at most beam-size hypotheses")
    check_selection(args.select)
    if args.on_missing not in ("fail", "reference"):
        raise DistillError(f"unknown --on-missing '{args.on_missing}'; choose fail or reference")
    if args.max_len_ratio is not None and args.max_len_ratio < 1:
        raise DistillError(f"--max-len-ratio must be at least 1 (pairs within R and 1/R are kept), "
                           f"got {args.max_len_ratio}")


def read_teachers(teachers, data_bin, src, tgt, allow_size_only=False):
    """The teachers' loaded states, each checked to share the data's dictionaries (or its ids
    mean other words)."""
    from fairseq_distill import teacher

    src_dict = Dictionary.load(os.path.join(data_bin, f"dict.{src}.txt"))
    tgt_dict = Dictionary.load(os.path.join(data_bin, f"dict.{tgt}.txt"))
    paths = teacher.split_teacher_paths(teachers)
    states = []
    for path in paths:
        state = teacher.read_teacher_checkpoint(path)
        teacher.check_teacher_dictionaries(state, path, src_dict, tgt_dict, allow_size_only)
        states.append(state)
    return paths, states


def decoding_settings(args, paths, mono_info) -> dict:
    """How a shard was decoded: recorded in its first line; every shard of a merge must agree.
    Files are named by name and size, not path: shards may be decoded on other machines."""
    return {
        "backend": args.backend,
        "compute_type": (args.compute_type or "float32") if args.backend == "ctranslate2" else None,
        "teacher": [{"name": os.path.basename(p), "size": os.path.getsize(p)} for p in paths],
        "subset": args.subset, "beam": args.beam, "lenpen": args.lenpen,
        "max_len_a": args.max_len_a, "max_len_b": args.max_len_b, "nbest": args.nbest,
        "source": mono_info,
    }


class Inputs:
    """The sentences to translate: the training source (ids 0..n-1), then the lines of
    ``--source`` (ids n..n+m-1), each as the binarized subword tokens."""

    def __init__(self, args, src, tgt, mono_dir=None):
        from fairseq_distill.monolingual import SUBSET

        self.train = load_side(args.data, args.subset, src, tgt, src)
        self.mono = load_side(mono_dir, SUBSET, src, tgt, src) if mono_dir else []
        self.mono_dir = mono_dir

    def __len__(self):
        return len(self.train) + len(self.mono)

    def __getitem__(self, i):
        return self.train[i] if i < len(self.train) else self.mono[i - len(self.train)]


def generate_fairseq(args, src, tgt, inputs: Inputs):
    """fairseq-generate on the shard: {id: n-best pieces strings}, seconds, stats."""
    from fairseq_distill.monolingual import SUBSET

    gen_args = [
        "--beam", str(args.beam), "--nbest", str(args.nbest), "--lenpen", str(args.lenpen),
        "--max-len-a", str(args.max_len_a), "--max-len-b", str(args.max_len_b),
        "--source-lang", src, "--target-lang", tgt,
        # fairseq-generate shards its batch iterator by the distributed world size and rank
        # (no process group is created by generate)
        "--distributed-world-size", str(args.num_shards), "--distributed-rank", str(args.shard_id),
    ]
    gen_args += ["--max-tokens", str(args.max_tokens)] if args.max_tokens else ["--batch-size", str(args.batch_size)]
    out = shard_path(args.work, args.shard_id, args.num_shards)
    nbest, seconds = {}, 0.0
    parts = [(args.data, args.subset, 0, len(inputs.train), "")]
    if inputs.mono_dir:
        parts.append((inputs.mono_dir, SUBSET, len(inputs.train), len(inputs.mono), ".monolingual"))
    for data, subset, offset, total, suffix in parts:
        result = run_generate(
            data, args.teacher, subset, gen_args,
            total=(total + args.num_shards - 1) // args.num_shards if args.num_shards > 1 else total,
            log_path=out + suffix + ".log",
            description=f"teacher shard {args.shard_id}/{args.num_shards}{suffix.replace('.', ' ')}",
        )
        nbest.update({offset + sid: hyps for sid, hyps in result.nbest.items()})
        seconds += result.wall_seconds
    return nbest, seconds, {}


def generate_ctranslate2(args, inputs: Inputs, teacher):
    """CTranslate2 on the shard (sentence i is in shard i mod N): as :func:`generate_fairseq`."""
    ids = range(args.shard_id, len(inputs), args.num_shards)
    bar = progress_bar(len(ids), f"teacher shard {args.shard_id}/{args.num_shards} (ctranslate2)")
    try:
        result = teacher.decode({i: inputs[i].split() for i in ids}, progress=bar.update)
    finally:
        bar.close()
    nbest = {sid: [" ".join(h) for h in hyps] for sid, hyps in result.nbest.items()}
    stats = {"at_length_limit": result.at_length_limit, "redecoded_with_fairseq": result.redecoded_with_fairseq}
    return nbest, result.seconds, stats


def finished_shard(args, settings: dict) -> bool:
    """Whether shard ``args.shard_id``'s file is complete (written whole, then renamed) and was
    decoded with ``settings``: a rerun keeps it instead of decoding it again."""
    path = shard_path(args.work, args.shard_id, args.num_shards)
    if not os.path.isfile(path):
        return False
    with open(path, encoding="utf-8") as f:
        try:
            header = json.loads(f.readline())
        except ValueError:
            return False
    return header.get("settings") == json.loads(json.dumps(settings))


def generate_shard(args, src, tgt, inputs: Inputs, settings: dict, teacher=None):
    """Decode shard ``args.shard_id`` and write its file: a header line (``settings``, counts),
    then one record per sentence: ``{"id", "hyp"}``, plus ``"nbest"`` (best first) when N > 1."""
    os.makedirs(args.work, exist_ok=True)
    if args.backend == "ctranslate2":
        nbest, seconds, stats = generate_ctranslate2(args, inputs, teacher)
    else:
        nbest, seconds, stats = generate_fairseq(args, src, tgt, inputs)
    out = shard_path(args.work, args.shard_id, args.num_shards)
    header = {"shard": args.shard_id, "num_shards": args.num_shards, "settings": settings,
              "stats": {"sentences": len(nbest), "decode_seconds": round(seconds, 1), **stats}}
    with open(out + ".tmp", "w", encoding="utf-8") as f:
        f.write(json.dumps(header, ensure_ascii=False) + "\n")
        for sid in sorted(nbest):
            record = {"id": sid, "hyp": nbest[sid][0] if nbest[sid] else ""}
            if args.nbest > 1:
                record["nbest"] = nbest[sid]
            f.write(json.dumps(record, ensure_ascii=False) + "\n")
    os.replace(out + ".tmp", out)  # a shard file exists only once it is complete
    print(f"[seqkd] shard {args.shard_id}/{args.num_shards} ({args.backend}): {len(nbest):,} sentences "
          f"in {seconds:.0f}s -> {out}")


def read_shards(args):
    """Every shard's header (None for a file without one) and the n-best lists by id."""
    headers, lists = [], {}
    for shard_id in range(args.num_shards):
        path = shard_path(args.work, shard_id, args.num_shards)
        if not os.path.isfile(path):
            raise DistillError(f"shard {shard_id} of {args.num_shards} is missing: {path} "
                               f"(run with --shard-id {shard_id} first)")
        header = None
        with open(path, encoding="utf-8") as f:
            for line in f:
                record = json.loads(line)
                if "id" not in record:
                    header = record
                    continue
                if record["id"] in lists:
                    raise DistillError(f"sentence id {record['id']} appears in two shards")
                lists[record["id"]] = record.get("nbest") or [record["hyp"]]
        headers.append(header)
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
        from fairseq_distill.monolingual import describe_source

        if describe_source(args.source)["sha256"] != recorded["sha256"]:
            raise DistillError(f"--source {args.source} is not the file the shards translated "
                               f"({recorded['name']}, since changed or another file); decode them again")


def merge(args, src, tgt, inputs: Optional[Inputs] = None):
    started = time.time()
    headers, lists = read_shards(args)
    settings = shard_settings(headers, args)
    check_source_matches(settings, args)
    if inputs is None:
        mono_dir = None
        if args.source:
            from fairseq_distill.monolingual import prepare_source

            mono_dir = prepare_source(args.source, args.data, src, tgt, args.work, info=settings["source"])
        inputs = Inputs(args, src, tgt, mono_dir)
    references = load_side(args.data, args.subset, src, tgt, tgt)
    n, m = len(inputs.train), len(inputs.mono)

    total = n + m
    unknown = sorted(i for i in lists if not 0 <= i < total)
    if unknown:
        raise DistillError(f"hypotheses for ids outside the corpus (0..{total - 1}): {unknown[:5]}")
    chosen = choose(args, lists, references, n)
    hyps = {i: lists[i][k] for i, k in chosen.items()}
    missing = [i for i in range(total) if not hyps.get(i, "").strip()]
    if missing and args.on_missing == "fail":
        train_missing = [i for i in missing if i < n]
        mono_missing = [i - n + 1 for i in missing if i >= n]
        what = []
        if train_missing:
            what.append(f"{len(train_missing)} of {n} training sentences have no (or an empty) teacher "
                        f"hypothesis (first ids: {train_missing[:10]})")
        if mono_missing:
            what.append(f"{len(mono_missing)} of {m} lines of --source have none (first lines: {mono_missing[:10]})")
        raise DistillError(
            f"{'; '.join(what)}; rerun the missing shards, or pass --on-missing reference to keep the "
            f"original reference for training sentences (and leave such --source lines out)")
    missing_set = set(missing)
    train_missing = [i for i in missing if i < n]
    sources = inputs.train + inputs.mono
    targets = {i: references[i] if i in missing_set else hyps[i] for i in range(n)}
    targets.update({i: hyps[i] for i in range(n, total) if i not in missing_set})

    keep = sorted(targets)
    filtered = 0
    if args.max_len_ratio:
        r = args.max_len_ratio
        keep = [i for i in keep
                if 1 / r <= len(targets[i].split()) / max(len(sources[i].split()), 1) <= r]
        filtered = len(targets) - len(keep)

    os.makedirs(args.out, exist_ok=True)
    text_prefix = os.path.join(args.work, "seqkd")
    with open(f"{text_prefix}.{src}", "w", encoding="utf-8") as fs, \
            open(f"{text_prefix}.{tgt}", "w", encoding="utf-8") as ft:
        for i in keep:
            fs.write(sources[i] + "\n")
            ft.write(targets[i] + "\n")
    subprocess.run([
        sys.executable, "-m", "fairseq_cli.preprocess", "--source-lang", src, "--target-lang", tgt,
        "--trainpref", text_prefix, "--destdir", args.out,
        "--srcdict", os.path.join(args.data, f"dict.{src}.txt"),
        "--tgtdict", os.path.join(args.data, f"dict.{tgt}.txt"),
        "--workers", "1",
    ], check=True, stdout=subprocess.DEVNULL)
    # binarized train must hold exactly the kept pairs
    written = len(load_side(args.out, "train", src, tgt, tgt))
    if written != len(keep):
        raise DistillError(f"binarized {written} pairs but wrote {len(keep)}")
    copy_other_splits(args.data, args.out, n_train=len(keep), source=args.source)

    limit = {"a": settings.get("max_len_a", args.max_len_a), "b": settings.get("max_len_b", args.max_len_b)}
    at_limit = sum(len(targets[i].split()) >= int(limit["a"] * (len(sources[i].split()) + 1) + limit["b"])
                   for i in keep if i not in missing_set)
    stats = [(h or {}).get("stats", {}) for h in headers]
    summary = {
        "sentences": n, "kept": len(keep), "filtered_by_length_ratio": filtered,
        "missing_or_empty": len(missing),
        "replaced_by_reference": len(train_missing) if args.on_missing == "reference" else 0,
        "monolingual_sentences": m,
        "monolingual_added": sum(1 for i in keep if i >= n),
        "monolingual_left_out": len(missing) - len(train_missing) if args.on_missing == "reference" else 0,
        "backend": settings.get("backend", "fairseq"),
        "compute_type": settings.get("compute_type"),
        "beam": settings.get("beam"), "lenpen": settings.get("lenpen"),
        "nbest": max(map(len, lists.values()), default=1),
        "select": args.select,
        "selected_other_than_1best": sum(1 for i, k in chosen.items() if k != 0 and i < n),
        "hypotheses_at_length_limit": at_limit,
        "redecoded_with_fairseq": sum(s.get("redecoded_with_fairseq", 0) for s in stats),
        "hypothesis_tokens": sum(len(targets[i].split()) for i in keep),
        "merge_seconds": round(time.time() - started, 1),
    }
    with open(os.path.join(args.out, "seqkd_summary.json"), "w") as f:
        json.dump(summary, f, indent=2)
    return summary


def choose(args, lists: Dict[int, List[str]], references: List[str], n: int) -> Dict[int, int]:
    """Which hypothesis of each n-best list becomes the target (indices into the lists)."""
    multi = [i for i in sorted(lists) if len(lists[i]) > 1]
    chosen = {i: 0 for i in lists}
    if args.select == "first" or not multi:
        return chosen
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
    chosen.update(zip(multi, picks))
    return chosen


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


def check_sources_not_empty(sources, data: str, subset: str):
    """Every source sentence (its subword pieces) has a token besides </s>: the fairseq backend
    would invent a hypothesis for an empty one and CTranslate2 return none."""
    empty = [i for i, pieces in enumerate(sources) if not pieces.strip()]
    if empty:
        listed = first_few(empty)
        raise DistillError(
            f"{data} ({subset}): sentence {empty[0]} has an empty source ({len(empty)} such sentence(s), ids "
            f"{listed}): nothing for the teacher to translate. Remove those pairs from the raw corpus and "
            f"prepare it again (fsd-prepare-corpus refuses blank lines and lines empty after normalisation)")


def check_source_lengths(sources, data: str, subset: str, limit: int, what: str):
    """Every source sentence, with its </s>, fits ``limit`` tokens (``what`` names the limit)."""
    lengths = [len(pieces.split()) + 1 for pieces in sources]
    over = [i for i, n in enumerate(lengths) if n > limit]
    if over:
        longest = max(over, key=lambda i: lengths[i])
        raise DistillError(
            f"{data} ({subset}): sentence {over[0]} has {lengths[over[0]]} source tokens with </s>, more than "
            f"{what} ({limit}); {len(over)} such sentence(s), the longest {longest} with {lengths[longest]}. "
            f"Remove them when preparing the data (fsd-prepare-corpus --max-length) or raise the limit")


def make_seqkd_data(args: SeqKDJob) -> Optional[dict]:
    """Generate the shards ``args`` asks for and, when all exist, merge them into ``args.out``;
    returns the merge's summary (None after one shard of many)."""
    check_options(args)
    if not os.path.isdir(args.data):
        raise DistillError(f"data directory not found: '{args.data}'")
    meta = load_meta(args.data)
    src, tgt = data_langs(args.data, meta, args)
    sources = load_side(args.data, args.subset, src, tgt, src)
    if len(sources) == 0:
        raise DistillError(f"empty corpus: '{args.subset}' in {args.data} has no sentences")
    if not args.merge:
        check_sources_not_empty(sources, args.data, args.subset)
    if args.num_shards < 1 or (args.shard_id is not None and not 0 <= args.shard_id < args.num_shards):
        raise DistillError(f"--shard-id must be in 0..{args.num_shards - 1}, got {args.shard_id}")
    if args.work is None:
        if args.out is None:
            raise DistillError("pass --work (shard outputs) or --out (new data directory)")
        args.work = args.out.rstrip("/") + ".work"

    inputs = None
    if not args.merge:
        if not args.teacher:
            raise DistillError("--teacher is required to generate")
        paths, states = read_teachers(args.teacher, args.data, src, tgt, args.allow_size_only_dictionary_check)
        from fairseq_distill.ctranslate2_teacher import max_source_positions

        check_source_lengths(sources, args.data, args.subset, min(max_source_positions(s) for s in states),
                             "the teacher's source positions")
        if args.max_tokens:
            check_source_lengths(sources, args.data, args.subset, args.max_tokens, "--max-tokens")
        teacher = None
        if args.backend == "ctranslate2":
            from fairseq_distill import ctranslate2_teacher as ct2

            ct2.check_convertible(paths, states)
            ct2.check_compute_type(args.compute_type or ct2.DEFAULT_COMPUTE_TYPE)
        mono_info = mono_dir = None
        if args.source:
            from fairseq_distill.ctranslate2_teacher import max_source_positions
            from fairseq_distill.monolingual import describe_source, prepare_source

            mono_info = describe_source(args.source)
            mono_dir = prepare_source(args.source, args.data, src, tgt, args.work,
                                      min(max_source_positions(s) for s in states), mono_info)
        inputs = Inputs(args, src, tgt, mono_dir)
        settings = decoding_settings(args, paths, mono_info)
        if args.backend == "ctranslate2":
            teacher = ct2.CTranslate2Teacher(
                paths[0], states[0], args.data, src, tgt, args.work,
                ct2.Decoding(beam=args.beam, lenpen=args.lenpen, max_len_a=args.max_len_a,
                             max_len_b=args.max_len_b, nbest=args.nbest, batch_size=args.batch_size,
                             max_tokens=args.max_tokens),
                args.compute_type or ct2.DEFAULT_COMPUTE_TYPE, args.threads)
        del states  # the teacher weights are not needed in memory while decoding
        shard_ids = [args.shard_id] if args.shard_id is not None else range(args.num_shards)
        started = time.time()
        for shard_id in shard_ids:
            args.shard_id = shard_id
            if finished_shard(args, settings):
                print(f"[seqkd] shard {shard_id}/{args.num_shards}: kept from an earlier run with the same "
                      f"settings ({shard_path(args.work, shard_id, args.num_shards)})")
                continue
            generate_shard(args, src, tgt, inputs, settings, teacher)
        decode_seconds = time.time() - started
        if len(shard_ids) != args.num_shards:
            return None  # one shard of many: merge later
    else:
        decode_seconds = None
    if not args.out:
        raise DistillError("--out is required to merge")
    summary = merge(args, src, tgt, inputs)
    if decode_seconds is not None:
        summary["decode_seconds"] = round(decode_seconds, 1)
        summary["sentences_per_second"] = round(len(inputs) / decode_seconds, 1)
        with open(os.path.join(args.out, "seqkd_summary.json"), "w") as f:
            json.dump(summary, f, indent=2)
    print("[seqkd] " + ", ".join(f"{k} {v:,}" if isinstance(v, int) and not isinstance(v, bool)
                                 else f"{k} {v}" for k, v in summary.items()))
    print(f"[seqkd] new data directory: {args.out}")
    return summary
