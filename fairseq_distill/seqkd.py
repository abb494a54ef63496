"""Sequence-level KD data: the teacher translates the training source, and the result is
binarized with the teacher's dictionaries into a new data directory.

A :class:`SeqKDJob` says what to make; :func:`make_seqkd_data` plans the shards, runs the
teacher on those it asks for (:func:`generate_shard`, stock fairseq-generate), and once
every shard exists merges them (:func:`merge`): hypotheses back in corpus order, counts
verified, pairs filtered, the result binarized. ``fsd-seqkd`` is its command line.

Every training sentence must get exactly one hypothesis, put back in corpus order. A
missing or empty hypothesis stops the merge (``--on-missing fail``, the default) or is
replaced by the original reference (``--on-missing reference``); either way it is
reported. ``--max-len-ratio R`` drops pairs whose hypothesis/source length ratio is above
R or below 1/R, and reports how many. The valid and test sets are copied unchanged.
"""
import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import Optional

from fairseq.data import Dictionary, data_utils

from fairseq_distill.errors import DistillError
from fairseq_distill.generation import run_generate
from fairseq_distill.segmentation import META_FILE, load_meta


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
    beam: int = 5
    lenpen: float = 1.0
    max_len_a: float = 1.2
    max_len_b: int = 10
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


def check_teacher_dictionaries(teachers, data_bin, src, tgt, allow_size_only=False):
    """The teacher must share the data's dictionaries, or its ids mean other words."""
    from fairseq_distill import teacher

    src_dict = Dictionary.load(os.path.join(data_bin, f"dict.{src}.txt"))
    tgt_dict = Dictionary.load(os.path.join(data_bin, f"dict.{tgt}.txt"))
    for path in teacher.split_teacher_paths(teachers):
        state = teacher.read_teacher_checkpoint(path)
        teacher.check_teacher_dictionaries(state, path, src_dict, tgt_dict, allow_size_only)


def generate_shard(args, src, tgt, total):
    os.makedirs(args.work, exist_ok=True)
    check_teacher_dictionaries(args.teacher, args.data, src, tgt, args.allow_size_only_dictionary_check)
    gen_args = [
        "--beam", str(args.beam), "--nbest", "1", "--lenpen", str(args.lenpen),
        "--max-len-a", str(args.max_len_a), "--max-len-b", str(args.max_len_b),
        "--source-lang", src, "--target-lang", tgt,
        # fairseq-generate shards its batch iterator by the distributed world size and rank
        # (no process group is created by generate)
        "--distributed-world-size", str(args.num_shards), "--distributed-rank", str(args.shard_id),
    ]
    gen_args += ["--max-tokens", str(args.max_tokens)] if args.max_tokens else ["--batch-size", str(args.batch_size)]
    out = shard_path(args.work, args.shard_id, args.num_shards)
    result = run_generate(
        args.data, args.teacher, args.subset, gen_args,
        total=(total + args.num_shards - 1) // args.num_shards if args.num_shards > 1 else total,
        log_path=out + ".log", description=f"teacher shard {args.shard_id}/{args.num_shards}",
    )
    with open(out + ".tmp", "w", encoding="utf-8") as f:
        for sid in sorted(result.hypotheses):
            f.write(json.dumps({"id": sid, "hyp": result.hypotheses[sid]}, ensure_ascii=False) + "\n")
    os.replace(out + ".tmp", out)  # a shard file exists only once it is complete
    print(f"[seqkd] shard {args.shard_id}/{args.num_shards}: {len(result.hypotheses):,} hypotheses "
          f"in {result.wall_seconds:.0f}s -> {out}")
    return result


def merge(args, src, tgt):
    started = time.time()
    sources = load_side(args.data, args.subset, src, tgt, src)
    references = load_side(args.data, args.subset, src, tgt, tgt)
    hyps = {}
    for shard_id in range(args.num_shards):
        path = shard_path(args.work, shard_id, args.num_shards)
        if not os.path.isfile(path):
            raise DistillError(f"shard {shard_id} of {args.num_shards} is missing: {path} "
                               f"(run with --shard-id {shard_id} first)")
        with open(path, encoding="utf-8") as f:
            for line in f:
                record = json.loads(line)
                if record["id"] in hyps:
                    raise DistillError(f"sentence id {record['id']} appears in two shards")
                hyps[record["id"]] = record["hyp"]

    n = len(sources)
    unknown = sorted(i for i in hyps if not 0 <= i < n)
    if unknown:
        raise DistillError(f"hypotheses for ids outside the corpus (0..{n - 1}): {unknown[:5]}")
    missing = [i for i in range(n) if not hyps.get(i, "").strip()]
    if missing and args.on_missing == "fail":
        raise DistillError(
            f"{len(missing)} of {n} training sentences have no (or an empty) teacher hypothesis "
            f"(first ids: {missing[:10]}); rerun the missing shards, or pass --on-missing reference "
            f"to keep the original reference for them"
        )
    missing_set = set(missing)
    targets = [references[i] if i in missing_set else hyps[i] for i in range(n)]

    keep = list(range(n))
    filtered = 0
    if args.max_len_ratio:
        r = args.max_len_ratio
        keep = [i for i in keep
                if 1 / r <= len(targets[i].split()) / max(len(sources[i].split()), 1) <= r]
        filtered = n - len(keep)

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
    copy_other_splits(args.data, args.out, args.subset, n_train=len(keep))

    hyp_tokens = sum(len(targets[i].split()) for i in keep)
    summary = {
        "sentences": n, "kept": len(keep), "filtered_by_length_ratio": filtered,
        "missing_or_empty": len(missing),
        "replaced_by_reference": len(missing) if args.on_missing == "reference" else 0,
        "hypothesis_tokens": hyp_tokens, "merge_seconds": round(time.time() - started, 1),
    }
    with open(os.path.join(args.out, "seqkd_summary.json"), "w") as f:
        json.dump(summary, f, indent=2)
    return summary


def copy_other_splits(data, out, train_subset, n_train):
    """Valid/test sets, the subword model and the raw references stay as they were."""
    for name in os.listdir(data):
        path = os.path.join(data, name)
        if name.startswith(train_subset + ".") or name.startswith("dict.") or name == "preprocess.log":
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
            with open(target, "w") as f:
                json.dump(meta, f, indent=2)
        else:
            shutil.copy(path, target)


def make_seqkd_data(args: SeqKDJob) -> Optional[dict]:
    """Generate the shards ``args`` asks for and, when all exist, merge them into ``args.out``;
    returns the merge's summary (None after one shard of many)."""
    if not os.path.isdir(args.data):
        raise DistillError(f"data directory not found: '{args.data}'")
    meta = load_meta(args.data)
    src, tgt = data_langs(args.data, meta, args)
    total = len(load_side(args.data, args.subset, src, tgt, src))
    if total == 0:
        raise DistillError(f"empty corpus: '{args.subset}' in {args.data} has no sentences")
    if args.num_shards < 1 or (args.shard_id is not None and not 0 <= args.shard_id < args.num_shards):
        raise DistillError(f"--shard-id must be in 0..{args.num_shards - 1}, got {args.shard_id}")
    if args.work is None:
        if args.out is None:
            raise DistillError("pass --work (shard outputs) or --out (new data directory)")
        args.work = args.out.rstrip("/") + ".work"

    if not args.merge:
        if not args.teacher:
            raise DistillError("--teacher is required to generate")
        shard_ids = [args.shard_id] if args.shard_id is not None else range(args.num_shards)
        started = time.time()
        for shard_id in shard_ids:
            args.shard_id = shard_id
            generate_shard(args, src, tgt, total)
        decode_seconds = time.time() - started
        if len(shard_ids) != args.num_shards:
            return None  # one shard of many: merge later
    else:
        decode_seconds = None
    if not args.out:
        raise DistillError("--out is required to merge")
    summary = merge(args, src, tgt)
    if decode_seconds is not None:
        summary["decode_seconds"] = round(decode_seconds, 1)
        summary["sentences_per_second"] = round(total / decode_seconds, 1)
    print("[seqkd] " + ", ".join(f"{k} {v:,}" if isinstance(v, int) else f"{k} {v}"
                                 for k, v in summary.items()))
    print(f"[seqkd] new data directory: {args.out}")
    return summary
