"""Making a teacher cache (:mod:`fairseq_distill.teacher.cache`): run the teacher(s) once
over a subset, teacher-forced on its targets as training feeds them, and keep the top-k.

    fsd-cache-teacher --teacher T.pt --data data-bin --top-k 32 --out cache

    # or sharded (one shard per GPU or machine), then merged
    fsd-cache-teacher --teacher T.pt --data data-bin --top-k 32 --out cache --num-shards 4 --shard-id 0
    ...
    fsd-cache-teacher --data data-bin --out cache --num-shards 4 --merge

A shard appends its rows to raw files in ``OUT/shards`` in the order it meets its
sentences and writes a ``.done`` record (its sentence ids and settings) last, so a shard
exists only once it is complete. The merge checks that every sentence came exactly once
from shards made with the same settings and teachers, each from ``--data`` itself (the content
digest of its binarized files, :mod:`fairseq_distill.data_bin`), and moves the rows to corpus
order; a rerun makes again a shard of other data, saying so.

A cache is never half-written where it is read: the merge writes its arrays beside any earlier
ones (``*.partial``), checks the disk has room first, removes the earlier ``meta.json``, moves
the arrays into place and writes ``meta.json`` (with each array's size) last. A reader refuses
a directory without it or whose arrays do not have the sizes it records. A rerun into a
finished cache made from the same teacher, data and settings says so and does nothing. One run
at a time per directory (:class:`~fairseq_distill.workdir.DirectoryLock`; shards side by side
each lock their own part).
"""
import json
import logging
import os
import shutil
import sys
import time
from dataclasses import dataclass
from typing import List, Optional

import numpy as np
import torch
from tqdm import tqdm

from fairseq_distill.data_bin import data_digest
from fairseq_distill.errors import DistillError
from fairseq_distill.losses import ensemble_log_probs
from fairseq_distill.text.files import file_sha256
from fairseq_distill.teacher.cache_shards import finished_shard, read_shards, shard_prefix
from fairseq_distill.teacher.cache import (
    INDICES_FILE, LOG_PROBS_FILE, META_FILE, OFFSETS_FILE, VALUE_DTYPES, CacheMeta, dictionary_digest,
    index_dtype, offsets_from_sizes, sizes_digest,
)
from fairseq_distill.workdir import DirectoryLock, check_free_space, check_output_dir, check_outputs

PARTIAL = ".partial"  # the suffix of arrays being written, until the switch

logger = logging.getLogger(__name__)
# The mass a Hugging Face teacher puts outside the student's vocabulary takes a softmax over the
# teacher's whole vocabulary (256k pieces for NLLB-200), which costs more than the cache rows
# themselves: a statistic, it is measured on every MASS_EVERY-th batch only (batches come in order
# of length, so the sample spans every length).
MASS_EVERY = 8
COPY_ROWS = 1 << 20  # rows written per step of the merge (a block of whole sentences)


@dataclass
class CacheJob:
    """What to make: the fields are fsd-cache-teacher's options (see its ``--help``)."""
    data: str
    out: str
    teacher: Optional[str] = None  # ':'-separated for an ensemble
    subset: str = "train"
    top_k: int = 32
    temperature: float = 1.0
    dtype: str = "float16"
    max_tokens: int = 4096
    source_lang: Optional[str] = None
    target_lang: Optional[str] = None
    num_shards: int = 1
    shard_id: Optional[int] = None  # make only this shard, merge later
    merge: bool = False  # only merge existing shards
    cpu: bool = False
    allow_size_only_dictionary_check: bool = False

    def settings(self) -> dict:
        """What every shard of one cache must share."""
        # max_tokens: fairseq deals whole batches to shards, so the batching decides which
        # sentences a shard holds (a sharded cache is then the one-pass cache, bit for bit);
        # a shard of another batching overlaps the others and leaves gaps
        settings = {"subset": self.subset, "top_k": self.top_k, "temperature": self.temperature,
                    "dtype": self.dtype}
        return {**settings, "max_tokens": self.max_tokens} if self.num_shards > 1 else settings


def check_job(job: CacheJob):
    if job.top_k < 1:
        raise DistillError(f"--top-k must be at least 1, got {job.top_k}")
    if job.temperature <= 0:
        raise DistillError(f"--temperature must be positive, got {job.temperature}")
    if job.dtype not in VALUE_DTYPES:
        raise DistillError(f"--dtype '{job.dtype}': valid: {', '.join(VALUE_DTYPES)}")
    if job.num_shards < 1 or (job.shard_id is not None and not 0 <= job.shard_id < job.num_shards):
        raise DistillError(f"--shard-id must be in 0..{job.num_shards - 1}, got {job.shard_id}")
    if job.max_tokens < 1:
        raise DistillError(f"--max-tokens must be positive, got {job.max_tokens}")
    if not os.path.isdir(job.data):
        raise DistillError(f"data directory not found: '{job.data}'")
    check_output_dir(job.out, job.data)
    check_outputs([("--out", job.out)], [("--teacher", t) for t in (job.teacher or "").split(":") if t])


def setup_data(job: CacheJob):
    """The translation task over ``job.data`` and the subset's dataset."""
    from fairseq.tasks.translation import TranslationConfig, TranslationTask

    from fairseq_distill.text.segmentation import load_meta

    meta = load_meta(job.data) or {}
    # a config made here, not by fairseq's parser: its fields that refer to other config
    # groups (II(...)) are set explicitly
    cfg = TranslationConfig(data=job.data, source_lang=job.source_lang or meta.get("source_lang"),
                            target_lang=job.target_lang or meta.get("target_lang"), dataset_impl=None,
                            train_subset=job.subset, required_seq_len_multiple=1)
    try:
        task = TranslationTask.setup_task(cfg)
        task.load_dataset(job.subset)
    except DistillError:
        raise
    except Exception as e:  # fairseq raises FileNotFoundError or a bare Exception for missing data
        raise DistillError(f"cannot load subset '{job.subset}' of '{job.data}': {e}") from e
    return task, task.dataset(job.subset)


def job_data_digest(job: CacheJob, task) -> str:
    """The content digest of the subset the job reads (:func:`fairseq_distill.data_bin.data_digest`)."""
    return data_digest(job.data, job.subset, task.cfg.source_lang, task.cfg.target_lang)


def make_shard(job: CacheJob, task, dataset, shard_id: int, digest: str) -> dict:
    """Run the teachers over one shard's batches and append their top-k rows to its files."""
    from fairseq_distill.teacher.frozen import TeacherEnsemble

    teachers = TeacherEnsemble.load(job.teacher, task, job.allow_size_only_dictionary_check)
    vocab = len(task.target_dictionary)
    if job.top_k > vocab:
        raise DistillError(f"--top-k {job.top_k} is larger than the target vocabulary ({vocab} symbols)")
    device = torch.device("cuda" if torch.cuda.is_available() and not job.cpu else "cpu")
    for model in teachers.models:
        model.to(device)
    # disable_iterator_cache: fairseq would hand every later shard of this process the first
    # shard's iterator (it caches one per dataset)
    itr = task.get_batch_iterator(dataset, max_tokens=job.max_tokens, num_shards=job.num_shards,
                                  shard_id=shard_id, required_batch_size_multiple=1,
                                  ignore_invalid_inputs=False,
                                  disable_iterator_cache=True).next_epoch_itr(shuffle=False)
    prefix = shard_prefix(job, shard_id)
    os.makedirs(os.path.dirname(prefix), exist_ok=True)
    value_type, idx_type = np.dtype(job.dtype), index_dtype(vocab)
    pad = task.target_dictionary.pad()
    ids: List[int] = []
    started = time.time()
    total = (len(dataset) + job.num_shards - 1) // job.num_shards if job.num_shards > 1 else len(dataset)
    bar = tqdm(total=total, desc=f"teacher cache shard {shard_id}/{job.num_shards}", unit="sent",
               file=sys.stderr, mininterval=2.0, disable=None if sys.stderr.isatty() else False)
    tokens = 0
    outside = [0.0, 0]  # a Hugging Face teacher's mass on pieces the student lacks, and the positions measured
    # the pieces --teacher-pieces trimmed, whose mass a Hugging Face teacher puts on the student's <unk>
    trimmed = max([int(m.trimmed_ids.numel()) for m in teachers.models if hasattr(m, "trimmed_ids")] or [0])
    with open(prefix + ".log_probs.bin", "wb") as fv, open(prefix + ".indices.bin", "wb") as fi, \
            torch.no_grad():
        for batch, sample in enumerate(itr):
            if not sample:
                continue
            net_input = {k: v.to(device) for k, v in sample["net_input"].items()}
            non_pad = sample["target"].ne(pad)
            logits = []
            for m in teachers.models:
                if hasattr(m, "outside_mass"):  # a Hugging Face teacher: what the student's vocabulary drops
                    hidden = m.decoder_output(net_input)
                    logits.append(m.logits_of(hidden))
                    if batch % MASS_EVERY == 0:
                        outside[0] += m.outside_mass(hidden[non_pad.to(device)])
                        outside[1] += int(non_pad.sum())
                else:
                    logits.append(m(**net_input)[0])
            top_values, top_indices = ensemble_log_probs(logits, job.temperature).topk(job.top_k, dim=-1)
            for b, sid in enumerate(sample["id"].tolist()):
                real = non_pad[b].to(device)
                fv.write(top_values[b][real].cpu().numpy().astype(value_type).tobytes())
                fi.write(top_indices[b][real].cpu().numpy().astype(idx_type).tobytes())
                ids.append(sid)
                tokens += int(real.sum())
            bar.update(len(sample["id"]))
    bar.close()
    seconds = time.time() - started
    record = {"ids": ids, "tokens": tokens, "seconds": round(seconds, 1), "settings": job.settings(),
              "data": os.path.abspath(job.data), "data_sha256": digest,
              "teachers": [os.path.abspath(p) for p in teachers.paths],
              "teacher_digests": [file_sha256(p) for p in teachers.paths], "vocab_size": vocab,
              **({"teacher_mass_outside_vocabulary": outside[0] / outside[1],
                  "teacher_mass_measured_tokens": outside[1]} if outside[1] else {}),
              **({"teacher_trimmed_pieces_in_unk": trimmed} if trimmed else {})}
    with open(prefix + ".done.tmp", "w") as f:
        json.dump(record, f)
    os.replace(prefix + ".done.tmp", prefix + ".done")
    print(f"[cache] shard {shard_id}/{job.num_shards}: {len(ids):,} sentences, {tokens:,} target tokens in "
          f"{seconds:.0f}s ({tokens / max(seconds, 1e-9):,.0f} tokens/s)", file=sys.stderr)
    if outside[1]:
        print(f"[cache] shard {shard_id}/{job.num_shards}: the Hugging Face teacher put {100 * outside[0] / outside[1]:.3f}% "
              f"of its probability (mean per target token, measured on {outside[1]:,} of them: every "
              f"{MASS_EVERY}th batch) on pieces outside the student's vocabulary; the "
              f"cache holds its distribution renormalised over the student's {vocab:,} symbols"
              + (f", with its mass on the {trimmed:,} pieces --teacher-pieces trimmed on <unk>" if trimmed else ""),
              file=sys.stderr)
    return record


def npy_for_writing(path: str, dtype, shape):
    """A new ``.npy`` file of ``shape`` (its data not yet written) and the offset of its data."""
    array = np.lib.format.open_memmap(path, mode="w+", dtype=dtype, shape=shape)
    offset = array.offset
    del array
    return offset


def write_in_corpus_order(job: CacheJob, records, shard_of, first_row, shard_rows, sizes, offsets, k, value_type,
                          idx_type, partial):
    """The merged arrays, written front to back a block of about ``COPY_ROWS`` rows at a time, each
    block gathered from the shards' files. Memory stays at a few blocks whatever the cache's size:
    no array of every row's destination, and each block's view of a shard is unmapped after use."""
    rows = int(offsets[-1])
    files = {LOG_PROBS_FILE: value_type, INDICES_FILE: idx_type}
    starts = {name: npy_for_writing(partial[name], dtype, (rows, k)) for name, dtype in files.items()}
    n = len(sizes)
    bar = tqdm(total=rows, desc="merging the teacher cache", unit="row", file=sys.stderr, mininterval=2.0,
               disable=None if sys.stderr.isatty() else False)
    handles = {name: open(partial[name], "r+b") for name in files}
    try:
        for name, handle in handles.items():
            handle.seek(starts[name])
        first = 0
        while first < n:
            last = max(int(np.searchsorted(offsets, offsets[first] + COPY_ROWS, side="right")) - 1, first + 1)
            last = min(last, n)
            block_rows = int(offsets[last] - offsets[first])
            blocks = {name: np.empty((block_rows, k), dtype=dtype) for name, dtype in files.items()}
            for s, record in enumerate(records):
                ids = first + np.flatnonzero(shard_of[first:last] == s)
                if not ids.size:
                    continue
                lengths = sizes[ids]
                # each of these sentences' rows: where it goes in the block, where it is in the shard
                within = np.arange(int(lengths.sum())) - np.repeat(np.cumsum(lengths) - lengths, lengths)
                dest = np.repeat(offsets[ids] - offsets[first], lengths) + within
                src = np.repeat(first_row[ids], lengths) + within
                prefix = shard_prefix(job, record["shard_id"])
                for name, suffix in ((LOG_PROBS_FILE, ".log_probs.bin"), (INDICES_FILE, ".indices.bin")):
                    shard = np.memmap(prefix + suffix, dtype=files[name], mode="r", shape=(shard_rows[s], k))
                    blocks[name][dest] = shard[src]
                    del shard
            for name, handle in handles.items():
                handle.write(blocks[name].tobytes())
            bar.update(block_rows)
            first = last
    finally:
        for handle in handles.values():
            handle.close()
        bar.close()


def outside_mass_of(records) -> dict:
    """A Hugging Face teacher's mean probability (per target token) on the pieces the student's
    vocabulary does not keep, over every shard (weighted by its tokens); {} for a fairseq teacher."""
    measured = [r for r in records if "teacher_mass_outside_vocabulary" in r]
    tokens = sum(r.get("teacher_mass_measured_tokens", r["tokens"]) for r in measured)
    if not measured or not tokens:
        return {}
    mass = sum(r["teacher_mass_outside_vocabulary"] * r.get("teacher_mass_measured_tokens", r["tokens"])
               for r in measured) / tokens
    return {"teacher_mass_outside_vocabulary": mass, "teacher_mass_measured_tokens": tokens}


def merge_shards(job: CacheJob, dataset, task, digest: str) -> CacheMeta:
    """Move every shard's rows to corpus order in new arrays beside the old, then switch: the
    old ``meta.json`` goes first, the arrays move into place, the new ``meta.json`` comes last."""
    records = read_shards(job, len(dataset), digest)
    settings, vocab = records[0]["settings"], records[0]["vocab_size"]
    sizes = np.asarray(dataset.tgt_sizes, dtype=np.int64)
    offsets = offsets_from_sizes(sizes)
    rows, k = int(offsets[-1]), settings["top_k"]
    value_type, idx_type = np.dtype(settings["dtype"]), index_dtype(vocab)
    check_free_space(job.out, rows * k * (value_type.itemsize + idx_type.itemsize) + offsets.nbytes + (1 << 16),
                     f"merging the teacher cache ({rows:,} rows of K = {k})")
    partial = {name: os.path.join(job.out, name + PARTIAL) for name in (LOG_PROBS_FILE, INDICES_FILE, OFFSETS_FILE)}
    # where each sentence's rows lie: its shard, and its first row there
    shard_of = np.full(len(sizes), -1, dtype=np.int32)
    first_row = np.zeros(len(sizes), dtype=np.int64)
    for s, record in enumerate(records):
        ids = np.asarray(record["ids"], dtype=np.int64)
        lengths = sizes[ids]
        shard_of[ids] = s
        first_row[ids] = np.cumsum(lengths) - lengths
    shard_rows = [int(sizes[np.asarray(r["ids"], dtype=np.int64)].sum()) for r in records]
    write_in_corpus_order(job, records, shard_of, first_row, shard_rows, sizes, offsets, k, value_type, idx_type,
                          partial)
    with open(partial[OFFSETS_FILE], "wb") as f:
        np.save(f, offsets)
    for path in partial.values():  # on disk before the switch
        with open(path, "rb+") as f:
            os.fsync(f.fileno())
    meta = CacheMeta(
        teachers=records[0]["teachers"], teacher_digests=records[0]["teacher_digests"],
        data=os.path.abspath(job.data), data_sha256=digest, subset=settings["subset"],
        source_lang=task.cfg.source_lang, target_lang=task.cfg.target_lang,
        sentences=len(dataset), tokens=rows, target_sizes_digest=sizes_digest(dataset.tgt_sizes),
        source_sizes_digest=sizes_digest(dataset.src_sizes),
        target_dictionary_digest=dictionary_digest(task.target_dictionary), vocab_size=vocab, top_k=k,
        temperature=settings["temperature"], value_dtype=settings["dtype"], index_dtype=idx_type.name,
        build_seconds=round(sum(r["seconds"] for r in records), 1),
        array_bytes={name: os.path.getsize(path) for name, path in partial.items()},
        extra={**outside_mass_of(records),
               **({"teacher_trimmed_pieces_in_unk": records[0]["teacher_trimmed_pieces_in_unk"]}
                  if records[0].get("teacher_trimmed_pieces_in_unk") else {})},
    )
    # the switch: without meta.json a reader refuses the directory, whatever state its arrays are in
    if os.path.exists(os.path.join(job.out, META_FILE)):
        os.remove(os.path.join(job.out, META_FILE))
    for name, path in partial.items():
        os.replace(path, os.path.join(job.out, name))
    meta.save(job.out)
    shutil.rmtree(os.path.join(job.out, "shards"), ignore_errors=True)
    return meta


def finished_cache(job: CacheJob, dataset, digest: str) -> Optional[CacheMeta]:
    """The cache already in ``job.out``, if it is whole and was made from this job's teachers,
    data and settings: a rerun keeps it."""
    from fairseq_distill.teacher.cache import TeacherCache

    if not os.path.isfile(os.path.join(job.out, META_FILE)) or not job.teacher:
        return None
    try:
        cache = TeacherCache(job.out)
    except DistillError:
        return None
    meta = cache.meta
    same = (meta.teacher_digests == [file_sha256(p) for p in job.teacher.split(":")]
            and meta.subset == job.subset and meta.top_k == job.top_k and meta.temperature == job.temperature
            and meta.value_dtype == job.dtype and meta.sentences == len(dataset) and meta.data_sha256 == digest
            and meta.target_sizes_digest == sizes_digest(dataset.tgt_sizes)
            and meta.source_sizes_digest == sizes_digest(dataset.src_sizes))
    return meta if same else None


def cache_size_bytes(directory: str) -> int:
    return sum(os.path.getsize(os.path.join(directory, f))
               for f in (OFFSETS_FILE, LOG_PROBS_FILE, INDICES_FILE, "meta.json"))


def check_lengths_fit(job: CacheJob, dataset):
    """A batch holds at least one sentence pair: each side (with </s>) must fit --max-tokens."""
    lengths = np.maximum(dataset.src_sizes, dataset.tgt_sizes)
    over = np.flatnonzero(lengths > job.max_tokens)
    if over.size:
        longest = int(over[np.argmax(lengths[over])])
        raise DistillError(
            f"{job.data} ({job.subset}): sentence {int(over[0])} has {int(lengths[over[0]])} tokens on a side, more "
            f"than --max-tokens {job.max_tokens} (a batch holds at least one pair); {over.size} such sentence(s), "
            f"the longest {longest} with {int(lengths[longest])}. Pass --max-tokens {int(lengths.max())} or remove "
            f"them when preparing the data (fsd-prepare-corpus --max-length)")


def make_teacher_cache(job: CacheJob) -> Optional[CacheMeta]:
    """Make the shards ``job`` asks for and, when all exist, merge them; returns the finished
    cache's meta (None after one shard of many)."""
    check_job(job)
    task, dataset = setup_data(job)
    if len(dataset) == 0:
        raise DistillError(f"empty subset: '{job.subset}' of {job.data} has no sentences")
    check_lengths_fit(job, dataset)
    os.makedirs(job.out, exist_ok=True)
    # a shard made alone locks its part of the directory; any other run, all of it
    with DirectoryLock(job.out, "fsd-cache-teacher", part=job.shard_id if not job.merge else None):
        return make_locked(job, task, dataset)


def make_locked(job: CacheJob, task, dataset) -> Optional[CacheMeta]:
    """:func:`make_teacher_cache` once the directory is locked."""
    digest = job_data_digest(job, task)
    if not job.merge and job.shard_id is None:
        done = finished_cache(job, dataset, digest)
        if done is not None:
            print(f"[cache] {job.out} is already a finished cache of this teacher, data and settings "
                  f"({done.sentences:,} sentences); nothing to do", file=sys.stderr)
            return done
    if not job.merge:
        if not job.teacher:
            raise DistillError("--teacher is required to make a cache (or pass --merge to merge shards)")
        shard_ids = [job.shard_id] if job.shard_id is not None else range(job.num_shards)
        for shard_id in shard_ids:
            if finished_shard(job, shard_id, digest):
                print(f"[cache] shard {shard_id}/{job.num_shards}: kept from an earlier run with the same "
                      f"settings, teacher and data ({shard_prefix(job, shard_id)}.done)", file=sys.stderr)
                continue
            make_shard(job, task, dataset, shard_id, digest)
        if len(shard_ids) != job.num_shards:
            return None  # one shard of many: merge later
    meta = merge_shards(job, dataset, task, digest)
    size = cache_size_bytes(job.out)
    print(f"[cache] {job.out}: {meta.sentences:,} sentences, {meta.tokens:,} target tokens, K = {meta.top_k}, "
          f"τ = {meta.temperature}, {meta.value_dtype}/{meta.index_dtype}; {size / 1e6:.1f} MB "
          f"({size / max(meta.tokens, 1) * 1000 / 1e6:.2f} MB per 1,000 target tokens); teacher time "
          f"{meta.build_seconds:.0f}s", file=sys.stderr)
    return meta

