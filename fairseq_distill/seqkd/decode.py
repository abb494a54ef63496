"""Decoding one shard of a seq-KD job with either backend, and recognising a shard already
decoded with the same settings (:mod:`fairseq_distill.seqkd.job`)."""
import json
import os
from typing import Optional


from fairseq_distill.errors import DistillError
from fairseq_distill.evaluation.generate import progress_bar, run_generate
from fairseq_distill.seqkd.inputs import Inputs, shard_path
from fairseq_distill.seqkd.shard_writer import ShardWriter


def generate_fairseq(args, src, tgt, inputs: Inputs, writer: ShardWriter):
    """fairseq-generate on the shard, each sentence's n-best pieces strings handed to ``writer`` as
    they come: the seconds taken, stats."""
    from fairseq_distill.seqkd.monolingual import SUBSET

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
    seconds = 0.0
    parts = [(args.data, args.subset, 0, len(inputs.train), "")]
    if inputs.mono_dir:
        parts.append((inputs.mono_dir, SUBSET, len(inputs.train), len(inputs.mono), ".monolingual"))
    for data, subset, offset, total, suffix in parts:
        result = run_generate(
            data, args.teacher, subset, gen_args,
            total=(total + args.num_shards - 1) // args.num_shards if args.num_shards > 1 else total,
            log_path=out + suffix + ".log",
            description=f"teacher shard {args.shard_id}/{args.num_shards}{suffix.replace('.', ' ')}",
            on_sentence=lambda sid, hyps, offset=offset: writer.add(offset + sid, hyps),
        )
        seconds += result.wall_seconds
    return seconds, {}


CT2_WINDOW = 100_000  # sentences of a shard handed to CTranslate2 at a time (their sources held meanwhile)


def generate_ctranslate2(args, inputs: Inputs, teacher, writer: ShardWriter):
    """CTranslate2 on the shard (sentence i is in shard i mod N), a window of sentences at a time:
    as :func:`generate_fairseq`."""
    ids = range(args.shard_id, len(inputs), args.num_shards)
    bar = progress_bar(len(ids), f"teacher shard {args.shard_id}/{args.num_shards} (ctranslate2)")
    seconds, stats = 0.0, {"at_length_limit": 0, "redecoded_with_fairseq": 0}
    try:
        for start in range(0, len(ids), CT2_WINDOW):
            result = teacher.decode(
                {i: inputs[i].split() for i in ids[start:start + CT2_WINDOW]}, progress=bar.update,
                again_bar=lambda n: progress_bar(n, f"teacher shard {args.shard_id}/{args.num_shards}: at the "
                                                    f"length limit, decoded again with fairseq"))
            for sid in sorted(result.nbest):
                writer.add(sid, [" ".join(h) for h in result.nbest[sid]])
            seconds += result.seconds
            stats["at_length_limit"] += result.at_length_limit
            stats["redecoded_with_fairseq"] += result.redecoded_with_fairseq
    finally:
        bar.close()
    return seconds, stats


def shard_settings(args) -> Optional[dict]:
    """The settings shard ``args.shard_id``'s file was decoded with, if it is complete (written
    whole, then renamed); a rerun keeps a shard whose settings are its own."""
    path = shard_path(args.work, args.shard_id, args.num_shards)
    if not os.path.isfile(path):
        return None
    with open(path, encoding="utf-8") as f:
        try:
            header = json.loads(f.readline())
        except ValueError:
            return None
    return header.get("settings") if isinstance(header, dict) else None


def read_shard(path: str):
    """A shard file's header (None if it has none), its n-best lists by sentence id (a record
    without ``nbest`` holds its one hypothesis) and the file's SHA-256."""
    import hashlib

    header, lists, digest = None, {}, hashlib.sha256()
    with open(path, "rb") as f:
        for line in f:
            digest.update(line)
            record = json.loads(line)
            if "id" not in record:
                header = record
                continue
            if record["id"] in lists:
                raise DistillError(f"sentence id {record['id']} appears twice in {path}")
            lists[record["id"]] = record.get("nbest") or [record["hyp"]]
    return header, lists, digest.hexdigest()


def shard_records(nbest, kept: int):
    """One record per sentence, by id: ``{"id", "hyp"}`` (the 1-best; "" for none), plus
    ``"nbest"`` (best first) when ``kept`` > 1 hypotheses are kept."""
    for sid in sorted(nbest):
        record = {"id": sid, "hyp": nbest[sid][0] if nbest[sid] else ""}
        if kept > 1:
            record["nbest"] = nbest[sid]
        yield record


def write_shard(work: str, shard_id: int, num_shards: int, settings: dict, stats: dict, records) -> str:
    """A shard file: a header line (``settings``, ``stats``), then one JSON record per sentence;
    written whole, then renamed, so a shard file exists only once it is complete."""
    os.makedirs(work, exist_ok=True)
    out = shard_path(work, shard_id, num_shards)
    header = {"shard": shard_id, "num_shards": num_shards, "settings": settings, "stats": stats}
    with open(out + ".tmp", "w", encoding="utf-8") as f:
        f.write(json.dumps(header, ensure_ascii=False) + "\n")
        for record in records:
            f.write(json.dumps(record, ensure_ascii=False) + "\n")
    os.replace(out + ".tmp", out)
    return out


def generate_shard(args, src, tgt, inputs: Inputs, settings: dict, teacher=None):
    """Decode shard ``args.shard_id`` and write its file: a header line (``settings``, counts),
    then one record per sentence: ``{"id", "hyp"}``, plus ``"nbest"`` (best first) when N > 1."""
    os.makedirs(args.work, exist_ok=True)
    writer = ShardWriter(args.work, args.shard_id, args.num_shards, args.nbest)
    try:
        if args.backend == "ctranslate2":
            seconds, stats = generate_ctranslate2(args, inputs, teacher, writer)
        else:
            seconds, stats = generate_fairseq(args, src, tgt, inputs, writer)
    except BaseException:
        writer.discard()
        raise
    out = writer.finish(settings, {"sentences": writer.count, "decode_seconds": round(seconds, 1), **stats})
    print(f"[seqkd] shard {args.shard_id}/{args.num_shards} ({args.backend}): {writer.count:,} sentences "
          f"in {seconds:.0f}s -> {out}")
