"""Where each sentence's record lies in a seq-KD job's shard files, so that the merge reads the
n-best lists a chunk of the corpus at a time instead of holding them all
(:mod:`fairseq_distill.seqkd.merge`).

:func:`index_shards` reads every shard file once, front to back: its SHA-256, its header (the
line without an ``id``) and each record's id and byte offset (the id read without parsing the
rest of a record that begins as the decoder writes it). The checks of a shard set are made
there, before anything is selected or written: a missing shard file, a sentence twice in one
shard or in two, a line that is no JSON record. :meth:`ShardIndex.locate` then refuses ids
outside the corpus and keeps, per sentence of the corpus, which shard holds it (``int16``,
-1 for none) and where (``int64``). Memory: those 10 bytes a sentence, about 45 MB at 4.5M
sentences, are what the merge holds that grows with the corpus (while the files are indexed:
each record's id and offset, and the ids seen so far, sorted; 24 bytes a sentence, given back
by ``locate``). Records are read back by offset (:meth:`ShardIndex.lists`), a chunk's records of
each shard in file order, so a shard sorted by id is read front to back.
"""
import hashlib
import json
import os
from array import array
from typing import Dict, Iterable, List, Optional

import numpy as np

from fairseq_distill.errors import DistillError
from fairseq_distill.progress import Progress
from fairseq_distill.seqkd.inputs import shard_path
from fairseq_distill.seqkd.shard_writer import ID_PREFIX

READ_BUFFER = 1 << 20


def quick_id(line: bytes) -> Optional[int]:
    """The id of a record line that begins ``{"id": N,`` (as the decoder writes it), else None."""
    if line.startswith(ID_PREFIX):
        end = line.find(b",", len(ID_PREFIX))
        token = line[len(ID_PREFIX):end]
        if end > 0 and token.isdigit():
            return int(token)
    return None


def parse_line(line: bytes, path: str, where: str):
    """A shard line as JSON (``where``: which line, for the message): a dict, its id an integer
    when it has one."""
    try:
        record = json.loads(line)
    except ValueError:
        record = None
    if not isinstance(record, dict) or ("id" in record and (not isinstance(record["id"], int)
                                                             or isinstance(record["id"], bool))):
        raise DistillError(f"{path}: {where} is not a shard record ({line[:80]!r}); the file was damaged or "
                           f"written by something else: delete it and decode that shard again")
    return record


def first_repeat(ids: np.ndarray) -> Optional[int]:
    """The id whose second occurrence comes first in ``ids``'s order, if one repeats."""
    order = np.argsort(ids, kind="stable")
    ranked = ids[order]
    again = order[1:][ranked[1:] == ranked[:-1]]
    return int(ids[again.min()]) if len(again) else None


class ShardIndex:
    """The shard files of a job: ``headers`` (None for a file without one), ``digests`` (SHA-256
    of each file) and, once :meth:`locate` ran, each sentence's shard and offset."""

    def __init__(self, paths: List[str]):
        self.paths = paths
        self.headers: List[Optional[dict]] = []
        self.digests: List[str] = []
        self.ids: List[np.ndarray] = []  # each shard's record ids, in file order (until locate)
        self.offsets: List[np.ndarray] = []
        self.seen = np.zeros(0, np.int64)  # every shard's ids so far, sorted (until locate)
        self.shard_of = self.offset_of = None

    def add(self, path: str):
        header, ids, offsets, digest, offset = None, array("q"), array("q"), hashlib.sha256(), 0
        progress = Progress("seqkd", f"indexing {os.path.basename(path)}", unit="records",
                            measure_total=os.path.getsize(path))
        with open(path, "rb", buffering=READ_BUFFER) as f:
            for number, line in enumerate(f, 1):
                progress.update(1, measure=offset)
                digest.update(line)
                sid = quick_id(line)
                if sid is None:
                    record = parse_line(line, path, f"line {number}")
                    if "id" not in record:
                        header = record
                    else:
                        sid = record["id"]
                if sid is not None:
                    ids.append(sid)
                    offsets.append(offset)
                offset += len(line)
        ids = np.frombuffer(ids, dtype=np.int64) if len(ids) else np.zeros(0, np.int64)
        twice = first_repeat(ids)
        if twice is not None:
            raise DistillError(f"sentence id {twice} appears twice in {path}")
        if len(self.seen) and len(ids):
            at = np.minimum(np.searchsorted(self.seen, ids), len(self.seen) - 1)
            found = np.flatnonzero(self.seen[at] == ids)
            if len(found):
                raise DistillError(f"sentence id {int(ids[found[0]])} appears in two shards")
        self.seen = np.sort(np.concatenate([self.seen, ids]))
        self.headers.append(header)
        self.digests.append(digest.hexdigest())
        self.ids.append(ids)
        self.offsets.append(np.frombuffer(offsets, dtype=np.int64) if len(offsets) else np.zeros(0, np.int64))

    def locate(self, total: Optional[int] = None):
        """Every record's sentence must be one of the corpus's ``total`` (default: up to the
        largest id found); keep where each lies."""
        found = np.concatenate(self.ids) if self.ids else np.zeros(0, np.int64)
        if total is None:
            total = int(found.max()) + 1 if len(found) else 0
        unknown = found[(found < 0) | (found >= total)]
        if len(unknown):
            raise DistillError(f"hypotheses for ids outside the corpus (0..{total - 1}): "
                               f"{np.sort(unknown)[:5].tolist()}")
        self.shard_of = np.full(total, -1, dtype=np.int16)
        self.offset_of = np.zeros(total, dtype=np.int64)
        for shard, (ids, offsets) in enumerate(zip(self.ids, self.offsets)):
            self.shard_of[ids] = shard
            self.offset_of[ids] = offsets
        self.ids, self.offsets, self.seen = [], [], None  # the two arrays above are all the merge keeps

    def shard_ids(self, shard: int) -> np.ndarray:
        """The sentences of ``shard``, by id."""
        return np.flatnonzero(self.shard_of == shard)

    def records(self, ids: Iterable[int]) -> Dict[int, dict]:
        """The records of the sentences ``ids`` that have one, read by offset (each shard's in
        file order, so a sorted shard is read front to back)."""
        ids = np.asarray(list(ids) if not isinstance(ids, (range, np.ndarray)) else ids, dtype=np.int64)
        ids = ids[self.shard_of[ids] >= 0]
        out = {}
        for shard in np.unique(self.shard_of[ids]).tolist():
            mine = ids[self.shard_of[ids] == shard]
            mine = mine[np.argsort(self.offset_of[mine], kind="stable")]
            path = self.paths[shard]
            with open(path, "rb", buffering=READ_BUFFER) as f:
                for sid, offset in zip(mine.tolist(), self.offset_of[mine].tolist()):
                    f.seek(offset)
                    out[sid] = parse_line(f.readline(), path, f"the line at byte {offset}")
        return out

    def lists(self, ids: Iterable[int]) -> Dict[int, List[str]]:
        """The n-best lists of the sentences ``ids`` that have one (a record without ``nbest``
        holds its one hypothesis)."""
        lists = {}
        for sid, record in self.records(ids).items():
            if not record.get("nbest") and "hyp" not in record:
                raise DistillError(f"sentence {sid}'s record in the shards has neither \"hyp\" nor \"nbest\": {record}; "
                                   f"decode its shard again")
            lists[sid] = record.get("nbest") or [record["hyp"]]
        return lists


def index_shards(args) -> ShardIndex:
    """The index of shards 0..``args.num_shards`` - 1 in ``args.work`` (:class:`ShardIndex`)."""
    index = ShardIndex([shard_path(args.work, shard, args.num_shards) for shard in range(args.num_shards)])
    for shard, path in enumerate(index.paths):
        if not os.path.isfile(path):
            raise DistillError(f"shard {shard} of {args.num_shards} is missing: {path} "
                               f"(run with --shard-id {shard} first)")
        index.add(path)
    return index
