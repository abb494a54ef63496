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
from array import array
from typing import Callable, Dict, Iterable, List, Optional

import numpy as np

from fairseq_distill.errors import DistillError
from fairseq_distill.evaluation.generate import progress_bar
from fairseq_distill.seqkd.inputs import shard_path
from fairseq_distill.seqkd.shard_index import ShardIndex, quick_id
from fairseq_distill.seqkd.mbr import UTILITY
from fairseq_distill.seqkd.selection import CHUNK, mbr_chunks
from fairseq_distill.text.segmentation import META_FILE, Segmenter, load_meta

FORMAT = 1


def rankings_path(work: str, shard_id: int, num_shards: int) -> str:
    return shard_path(work, shard_id, num_shards)[:-len(".jsonl")] + ".mbr.jsonl"


def expected_header(shard_sha256: str) -> dict:
    return {"rankings": "mbr", "format": FORMAT, **UTILITY, "shard_sha256": shard_sha256}


def scan_rankings(path: str, strict: bool = False):
    """A rankings file's header, its sentences' ids and line offsets (numpy arrays), and the
    length of its whole lines: a run killed while writing may leave a last line cut short, which
    is not counted. ``strict``: every line is parsed (a file being resumed); otherwise a line that
    begins as this module writes it has its id read without parsing the rest."""
    header, ids, offsets, whole = None, array("q"), array("q"), 0
    if os.path.isfile(path):
        with open(path, "rb", buffering=1 << 20) as f:
            for line in f:
                if not line.endswith(b"\n"):
                    break
                sid = None if strict or header is None else quick_id(line)
                if sid is None:
                    try:
                        record = json.loads(line)
                    except ValueError:
                        break
                    if header is None:
                        header = record
                    else:
                        sid = record["id"]
                if sid is not None:
                    ids.append(sid)
                    offsets.append(whole)
                whole += len(line)
    return header, np.array(ids, dtype=np.int64), np.array(offsets, dtype=np.int64), whole


def read_rankings(path: str) -> Dict[int, List[int]]:
    """A (small) rankings file's rankings by id."""
    with open(path, encoding="utf-8") as f:
        next(f)
        return {record["id"]: record["ranking"] for record in map(json.loads, f)}


def segmenter_of(data: str) -> Segmenter:
    if load_meta(data) is None:
        raise DistillError(f"--select mbr scores detokenised text and needs the subword model the data was "
                           f"prepared with, but {data} has no {META_FILE}; pass --select first")
    return Segmenter.from_dir(data)


def ensure_rankings(args, shard_id: int, ids: np.ndarray, read_lists: Callable[[np.ndarray], List[List[str]]],
                    digest: str, segmenter: Segmenter, workers: Optional[int] = None):
    """The rankings file of shard ``shard_id`` (its sentences ``ids``, their n-best lists read a
    chunk at a time by ``read_lists(ids)``, the shard file's SHA-256 ``digest``): kept when made
    with the same utility for the same file, else made (resumed from ``.partial`` when one of the
    same header is there). Returns the ids and line offsets of the rankings in the file."""
    where = f"shard {shard_id}/{args.num_shards}"
    final = rankings_path(args.work, shard_id, args.num_shards)
    header = expected_header(digest)
    found, done, offsets, _ = scan_rankings(final)
    if found == header and np.array_equal(np.unique(done), np.unique(ids)):
        print(f"[seqkd] {where}: MBR rankings kept from an earlier run ({final})")
        return done, offsets
    if found is not None:
        differ = sorted(k for k in set(found) | set(header) if found.get(k) != header.get(k)) or ["the sentences"]
        print(f"[seqkd] {where}: ranking again by MBR: the earlier rankings' {', '.join(differ)} differ(s)")
    partial = final + ".partial"
    found, done, _, whole = scan_rankings(partial, strict=True)
    if found != header:
        done, whole = done[:0], 0
    elif len(done):
        print(f"[seqkd] {where}: MBR ranking resumed after {len(np.unique(done)):,} sentences")
    todo = ids[~np.isin(ids, done)]
    with open(partial, "r+b" if whole else "wb") as f:
        f.truncate(whole)  # a line cut short by an interrupted run
        f.seek(whole)
        if not whole:
            f.write((json.dumps(header) + "\n").encode("utf-8"))
        chunks = ([[segmenter.decode(h.split()) for h in hyps] for hyps in read_lists(todo[k:k + CHUNK])]
                  for k in range(0, len(todo), CHUNK))
        bar = progress_bar(len(todo), f"MBR {where}")
        try:
            for k, ranked in enumerate(mbr_chunks(chunks, workers)):
                lines = [json.dumps({"id": i, "ranking": ranking, "scores": [round(s, 4) for s in scores]})
                         for i, (ranking, scores) in zip(todo[k * CHUNK:(k + 1) * CHUNK].tolist(), ranked)]
                f.write(("\n".join(lines) + "\n").encode("utf-8"))
                f.flush()
                bar.update(len(ranked))
        finally:
            bar.close()
    os.replace(partial, final)
    return scan_rankings(final)[1:3]


def rank_shard(args, shard_id: int, lists: Dict[int, List[str]], ids: List[int], digest: str,
               segmenter: Segmenter, workers: Optional[int] = None) -> Dict[int, List[int]]:
    """:func:`ensure_rankings` for n-best lists held in ``lists`` (a small shard): {id: ranking}."""
    ensure_rankings(args, shard_id, np.asarray(ids, dtype=np.int64),
                    lambda chunk: [lists[i] for i in chunk.tolist()], digest, segmenter, workers)
    return read_rankings(rankings_path(args.work, shard_id, args.num_shards))


def lists_in_order(index: ShardIndex, ids: np.ndarray) -> List[List[str]]:
    found = index.lists(ids)
    return [found[i] for i in ids.tolist()]


class Rankings:
    """Every sentence's MBR ranking, read from its shard's rankings file when asked: the file of
    each sentence and the offset of its line (10 bytes a sentence)."""

    def __init__(self, paths: List[str], total: int):
        self.paths = paths
        self.shard_of = np.full(total, -1, dtype=np.int16)
        self.offset_of = np.zeros(total, dtype=np.int64)

    def get(self, ids: Iterable[int]) -> Dict[int, List[int]]:
        ids = np.fromiter(ids, dtype=np.int64)
        ids = ids[self.shard_of[ids] >= 0]
        out = {}
        for shard in np.unique(self.shard_of[ids]).tolist():
            mine = ids[self.shard_of[ids] == shard]
            mine = mine[np.argsort(self.offset_of[mine], kind="stable")]
            with open(self.paths[shard], "rb", buffering=1 << 20) as f:
                for sid, offset in zip(mine.tolist(), self.offset_of[mine].tolist()):
                    f.seek(offset)
                    out[sid] = json.loads(f.readline())["ranking"]
        return out


def rank_shards(args, index: ShardIndex):
    """Every shard's rankings, made where missing (:func:`ensure_rankings`): a :class:`Rankings`,
    and the seconds spent ranking."""
    started = time.time()
    segmenter = segmenter_of(args.data)
    rankings = Rankings([rankings_path(args.work, shard, args.num_shards) for shard in range(args.num_shards)],
                        len(index.shard_of))
    for shard in range(args.num_shards):
        ids, offsets = ensure_rankings(args, shard, index.shard_ids(shard), lambda chunk: lists_in_order(index, chunk),
                                       index.digests[shard], segmenter)
        rankings.shard_of[ids] = shard
        rankings.offset_of[ids] = offsets
    return rankings, time.time() - started


def rank_decoded_shard(args):
    """After decoding shard ``args.shard_id`` alone: rank it, so the merge finds it ranked."""
    index = ShardIndex([shard_path(args.work, args.shard_id, args.num_shards)])
    index.add(index.paths[0])
    nbest = (index.headers[0] or {}).get("settings", {}).get("nbest", 1)
    if nbest < 2:
        return
    index.locate()
    ensure_rankings(args, args.shard_id, index.shard_ids(0), lambda chunk: lists_in_order(index, chunk),
                    index.digests[0], segmenter_of(args.data))


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
