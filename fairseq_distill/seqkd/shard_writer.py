"""Writing a seq-KD shard file as the teacher's sentences arrive, in bounded memory.

fairseq-generate hands sentences over in the order of its length-sorted batches; a shard file
lists them by id (:mod:`fairseq_distill.seqkd.decode`: a header line, then one JSON record per
sentence). :class:`ShardWriter` holds records until :data:`RUN_BYTES` of them, sorts them by id
and appends them to ``SHARD.runs`` as one sorted run; :meth:`ShardWriter.finish` then writes the
header and the runs merged by id (each run read front to back) into ``SHARD.tmp``, and renames
it into place: a shard file exists only once it is complete. Memory: one run's records and a read
buffer per run, whatever the shard's size; disk: the shard twice while it is finished.
"""
import heapq
import json
import os
from typing import Iterator, List

from fairseq_distill.errors import DistillError
from fairseq_distill.progress import Progress
from fairseq_distill.seqkd.inputs import shard_path

RUN_BYTES = 64 << 20  # records (JSON bytes) held before they are sorted and written out as a run
READ_BUFFER = 1 << 16  # bytes read ahead from each run while merging
ID_PREFIX = b'{"id": '  # how json.dumps begins a record whose first key is "id"


def record_line(sid: int, hyps: List[str], kept: int) -> bytes:
    """A sentence's record, as a shard file holds it: ``{"id", "hyp"}`` (the 1-best; "" for none),
    plus ``"nbest"`` (best first) when ``kept`` > 1 hypotheses are kept."""
    record = {"id": sid, "hyp": hyps[0] if hyps else ""}
    if kept > 1:
        record["nbest"] = list(hyps)
    return (json.dumps(record, ensure_ascii=False) + "\n").encode("utf-8")


def line_id(line: bytes) -> int:
    """The id of a record line written by :func:`record_line` (read without parsing the rest)."""
    return int(line[len(ID_PREFIX):line.index(b",", len(ID_PREFIX))])


class ShardWriter:
    """Shard ``shard_id`` of ``num_shards`` in ``work``: :meth:`add` each sentence (any order),
    then :meth:`finish` (or :meth:`discard`)."""

    def __init__(self, work: str, shard_id: int, num_shards: int, kept: int):
        os.makedirs(work, exist_ok=True)
        self.shard_id, self.num_shards, self.kept = shard_id, num_shards, kept
        self.path = shard_path(work, shard_id, num_shards)
        self.runs_path = self.path + ".runs"
        self.runs_file = open(self.runs_path, "wb")
        self.pending: List[tuple] = []  # (id, record line) not yet in a run
        self.pending_bytes = 0
        self.runs: List[tuple] = []  # (first byte, end) of each sorted run in runs_path
        self.count = 0

    def add(self, sid: int, hyps: List[str]):
        line = record_line(sid, hyps, self.kept)
        self.pending.append((sid, line))
        self.pending_bytes += len(line)
        self.count += 1
        if self.pending_bytes >= RUN_BYTES:
            self.spill()

    def spill(self):
        if not self.pending:
            return
        self.pending.sort(key=lambda record: record[0])
        start = self.runs_file.tell()
        self.runs_file.writelines(line for _, line in self.pending)
        self.runs.append((start, self.runs_file.tell()))
        self.pending, self.pending_bytes = [], 0

    def read_run(self, start: int, end: int) -> Iterator[bytes]:
        with open(self.runs_path, "rb", buffering=READ_BUFFER) as f:
            f.seek(start)
            while start < end:
                line = f.readline()
                start += len(line)
                yield line

    def finish(self, settings: dict, stats: dict) -> str:
        """Write the shard file (a header line: ``settings``, ``stats``; the records by id) and
        return its path."""
        self.spill()
        self.runs_file.close()
        header = {"shard": self.shard_id, "num_shards": self.num_shards, "settings": settings, "stats": stats}
        try:
            with open(self.path + ".tmp", "wb") as out:
                out.write((json.dumps(header, ensure_ascii=False) + "\n").encode("utf-8"))
                previous = None
                progress = Progress("seqkd", f"sorting {os.path.basename(self.path)} by sentence", self.count,
                                    unit="records")
                for line in heapq.merge(*(self.read_run(s, e) for s, e in self.runs), key=line_id):
                    progress.update()
                    sid = line_id(line)
                    if sid == previous:
                        raise DistillError(f"the teacher's output held sentence {sid} twice in shard {self.shard_id} "
                                           f"of {self.num_shards}; decode the shard again (rerun the command)")
                    previous = sid
                    out.write(line)
            os.replace(self.path + ".tmp", self.path)
        finally:
            self.discard()
        return self.path

    def discard(self):
        """Remove the runs (after :meth:`finish`, or when decoding failed)."""
        self.runs_file.close()
        for leftover in (self.runs_path, self.path + ".tmp"):
            if os.path.exists(leftover):
                os.remove(leftover)
