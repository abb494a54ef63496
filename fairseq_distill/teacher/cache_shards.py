"""The shards of a teacher cache (:mod:`fairseq_distill.teacher.cache_writer`): where each lies,
whether one already made can be kept, and the checks of a merge.

A shard is kept by a rerun only if it was made from the same data (by content), teachers (by
SHA-256) and settings; the batching (``--max-tokens``) is among them when there are several
shards, since fairseq deals whole batches to shards. A merge refuses shards that do not agree,
naming each option that differs and its two values, and shards that do not cover the subset
exactly once.
"""
import json
import os
import sys
from typing import List

import numpy as np

from fairseq_distill.data_bin import short
from fairseq_distill.errors import DistillError
from fairseq_distill.text.files import file_sha256


def shard_prefix(job, shard_id: int) -> str:
    return os.path.join(job.out, "shards", f"shard{shard_id}-of-{job.num_shards}")


def other_data(job, shard_id: int, record: dict, digest: str) -> str:
    """Why shard ``shard_id`` was made from other data than ``job.data`` ('' if it was not)."""
    if record.get("data_sha256") == digest:
        return ""
    made = (f"its record holds no digest of its data (made by an earlier version, from {record.get('data')})"
            if not record.get("data_sha256") else
            f"{record.get('data')} with binarized files of digest {short(record.get('data_sha256'))}; --data has "
            f"{short(digest)}")
    return (f"shard {shard_id} of {job.num_shards} ({shard_prefix(job, shard_id)}.done) was made from other data "
            f"than --data {job.data}: {made} (another data directory, or these data binarized again since)")


def finished_shard(job, shard_id: int, digest: str) -> bool:
    """Whether the shard's ``.done`` record (written last) exists, from these settings, data (by
    the content of the binarized files) and teachers (by SHA-256): a rerun keeps such a shard;
    one of other data is made again, saying so."""
    done = shard_prefix(job, shard_id) + ".done"
    if not os.path.isfile(done):
        return False
    with open(done) as f:
        record = json.load(f)
    settings = json.loads(json.dumps(job.settings()))
    if record.get("settings") != settings:
        print(f"[cache] shard {shard_id}/{job.num_shards}: made again: it was made with other settings: "
              f"{settings_differences(record.get('settings') or {}, settings)}", file=sys.stderr)
        return False
    if record.get("teacher_digests") != [file_sha256(p) for p in job.teacher.split(":")]:
        print(f"[cache] shard {shard_id}/{job.num_shards}: made again: it was made with another teacher "
              f"(other SHA-256)", file=sys.stderr)
        return False
    stale = other_data(job, shard_id, record, digest)
    if stale:
        print(f"[cache] shard {shard_id}/{job.num_shards}: made again: it was made from other data: {stale}",
              file=sys.stderr)
        return False
    return True


def settings_differences(a: dict, b: dict) -> str:
    """Where two shards' settings differ, each key with both values, in words."""
    said = []
    for key in sorted(set(a) | set(b)):
        if a.get(key) != b.get(key):
            said.append(f"--{key.replace('_', '-')} {a.get(key)} against {b.get(key)}")
    return "; ".join(said)


def read_shards(job, n_sentences: int, digest: str) -> List[dict]:
    records = []
    for shard_id in range(job.num_shards):
        done = shard_prefix(job, shard_id) + ".done"
        if not os.path.isfile(done):
            raise DistillError(f"shard {shard_id} of {job.num_shards} is missing or unfinished: {done} "
                               f"(run with --shard-id {shard_id} first)")
        with open(done) as f:
            record = json.load(f)
        record["shard_id"] = shard_id
        stale = other_data(job, shard_id, record, digest)
        if stale:  # compared with --data, not only with the other shards
            raise DistillError(f"{stale}; make it again: --shard-id {shard_id} with --teacher and this --data "
                               f"(or merge with the --data it was made from)")
        records.append(record)
    first = records[0]
    for record in records[1:]:
        # teachers by content: a shard made on another machine holds its copy at another path
        for what in ("settings", "teacher_digests", "vocab_size"):
            if record[what] != first[what]:
                said = (settings_differences(first[what], record[what]) if what == "settings"
                        else f"{what} {first[what]} against {record[what]}")
                raise DistillError(f"shards 0 and {record['shard_id']} were made with other settings: {said}; "
                                   f"make the odd one again with this run's options (--shard-id "
                                   f"{record['shard_id']})")
    seen = np.zeros(n_sentences, dtype=np.int64)
    for record in records:
        ids = np.asarray(record["ids"], dtype=np.int64)
        if ids.size and (ids.min() < 0 or ids.max() >= n_sentences):
            raise DistillError(f"shard {record['shard_id']} has sentence ids outside the subset (0..{n_sentences - 1})")
        np.add.at(seen, ids, 1)
    if (seen != 1).any():
        missing, twice = np.nonzero(seen == 0)[0], np.nonzero(seen > 1)[0]
        raise DistillError(f"the shards do not cover the subset exactly once: {missing.size} sentences missing "
                           f"(first ids {missing[:5].tolist()}), {twice.size} repeated (first {twice[:5].tolist()})")
    return records
