"""The MBR rankings of a seq-KD job's shards (``fsd-seqkd --select mbr``), each kept beside its
shard so that an interrupted run resumes where it stopped.

``WORK/shardI-of-N.mbr.jsonl`` ranks every n-best list of ``WORK/shardI-of-N.jsonl``: a header
line saying what the rankings were made with (the utility, :data:`fairseq_distill.seqkd.mbr.UTILITY`,
and the shard file's SHA-256), then ``{"id", "ranking", "scores"}`` per sentence: the indices of
its hypotheses by MBR score, best first, and the scores in the list's own order (4 decimals;
the ranking is made from the exact ones). The whole list is ranked, so every ``--targets K``
reads the same file. While a shard is ranked its lines go to ``.partial``, a chunk of sentences
at a time; a run cut short continues after the last whole line, and the file is renamed into
place when complete. A file made with another utility, or for another shard file (one decoded
again, with other settings or another teacher), is made again.

A run that decodes one shard of many (``--shard-id``) with ``--select mbr`` ranks that shard
too, on the machine that decoded it; the merge then finds the ranking ready.
"""
import json
import os
import time
from typing import Dict, List, Optional, Tuple

from fairseq_distill.errors import DistillError
from fairseq_distill.evaluation.generate import progress_bar
from fairseq_distill.seqkd.decode import read_shard
from fairseq_distill.seqkd.inputs import shard_path
from fairseq_distill.seqkd.mbr import UTILITY
from fairseq_distill.seqkd.selection import CHUNK, mbr_chunks
from fairseq_distill.text.segmentation import META_FILE, Segmenter, load_meta

FORMAT = 1


def rankings_path(work: str, shard_id: int, num_shards: int) -> str:
    return shard_path(work, shard_id, num_shards)[:-len(".jsonl")] + ".mbr.jsonl"


def expected_header(shard_sha256: str) -> dict:
    return {"rankings": "mbr", "format": FORMAT, **UTILITY, "shard_sha256": shard_sha256}


def read_rankings(path: str) -> Tuple[Optional[dict], Dict[int, List[int]], int]:
    """A rankings file's header, its rankings by id, and the length of its whole lines (a run
    killed while writing may leave a last line cut short; it is not counted)."""
    header, rankings, whole = None, {}, 0
    if not os.path.isfile(path):
        return None, rankings, 0
    with open(path, "rb") as f:
        for line in f:
            if not line.endswith(b"\n"):
                break
            try:
                record = json.loads(line)
            except ValueError:
                break
            if header is None:
                header = record
            else:
                rankings[record["id"]] = record["ranking"]
            whole += len(line)
    return header, rankings, whole


def segmenter_of(data: str) -> Segmenter:
    if load_meta(data) is None:
        raise DistillError(f"--select mbr scores detokenised text and needs the subword model the data was "
                           f"prepared with, but {data} has no {META_FILE}; pass --select first")
    return Segmenter.from_dir(data)


def rank_shard(args, shard_id: int, lists: Dict[int, List[str]], ids: List[int], digest: str,
               segmenter: Segmenter, workers: Optional[int] = None) -> Dict[int, List[int]]:
    """The rankings of shard ``shard_id`` (its sentences ``ids``, their n-best lists in ``lists``,
    the shard file's SHA-256 ``digest``): read back when made with the same utility for the same
    file, else made (resumed from ``.partial`` when one of the same header is there)."""
    where = f"shard {shard_id}/{args.num_shards}"
    final = rankings_path(args.work, shard_id, args.num_shards)
    header = expected_header(digest)
    found, rankings, _ = read_rankings(final)
    if found == header and set(rankings) == set(ids):
        print(f"[seqkd] {where}: MBR rankings kept from an earlier run ({final})")
        return rankings
    if found is not None:
        differ = sorted(k for k in set(found) | set(header) if found.get(k) != header.get(k)) or ["the sentences"]
        print(f"[seqkd] {where}: ranking again by MBR: the earlier rankings' {', '.join(differ)} differ(s)")
    partial = final + ".partial"
    found, rankings, whole = read_rankings(partial)
    if found != header:
        rankings, whole = {}, 0
    elif rankings:
        print(f"[seqkd] {where}: MBR ranking resumed after {len(rankings):,} sentences")
    todo = [i for i in ids if i not in rankings]
    with open(partial, "r+b" if whole else "wb") as f:
        f.truncate(whole)  # a line cut short by an interrupted run
        f.seek(whole)
        if not whole:
            f.write((json.dumps(header) + "\n").encode("utf-8"))
        chunks = ([[segmenter.decode(h.split()) for h in lists[i]] for i in todo[k:k + CHUNK]]
                  for k in range(0, len(todo), CHUNK))
        bar = progress_bar(len(todo), f"MBR {where}")
        try:
            for k, ranked in enumerate(mbr_chunks(chunks, workers)):
                lines = []
                for i, (ranking, scores) in zip(todo[k * CHUNK:(k + 1) * CHUNK], ranked):
                    rankings[i] = ranking
                    lines.append(json.dumps({"id": i, "ranking": ranking, "scores": [round(s, 4) for s in scores]}))
                f.write(("\n".join(lines) + "\n").encode("utf-8"))
                f.flush()
                bar.update(len(ranked))
        finally:
            bar.close()
    os.replace(partial, final)
    return rankings


def rank_shards(args, lists: Dict[int, List[str]], parts: List[Tuple[str, List[int]]]):
    """Every shard's rankings (``parts``: each shard's SHA-256 and sentence ids, as
    :func:`fairseq_distill.seqkd.merge.read_shards` gives them): {id: ranking}, and the seconds
    spent ranking."""
    started = time.time()
    segmenter = segmenter_of(args.data)
    rankings = {}
    for shard_id, (digest, ids) in enumerate(parts):
        rankings.update(rank_shard(args, shard_id, lists, ids, digest, segmenter))
    return rankings, time.time() - started


def rank_decoded_shard(args):
    """After decoding shard ``args.shard_id`` alone: rank it, so the merge finds it ranked."""
    header, lists, digest = read_shard(shard_path(args.work, args.shard_id, args.num_shards))
    nbest = (header or {}).get("settings", {}).get("nbest", 1)
    if nbest < 2:
        return
    rank_shard(args, args.shard_id, lists, sorted(lists), digest, segmenter_of(args.data))


def check_merge(settings: dict, args):
    """--select mbr needs shards of several hypotheses per sentence, at least --targets of them."""
    recorded = settings.get("nbest", 1)
    if recorded < 2:
        raise DistillError(f"--select mbr compares the teacher's hypotheses with each other, but the shards hold one "
                           f"per sentence (decoded with --nbest {recorded}); decode them again with --nbest 2 or "
                           f"more, or merge with --select first")
    if (args.targets or 1) > recorded:
        raise DistillError(f"--targets {args.targets} is more than the shards' {recorded} hypotheses per sentence "
                           f"(decoded with --nbest {recorded}); pass --targets {recorded} or fewer, or decode again "
                           f"with a larger --nbest")
