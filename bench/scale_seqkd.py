"""seq-KD shard files at any size without running a teacher, for the scale benchmark and the memory
guard (tests/test_scale_memory.py).

``fsd-seqkd``'s cost is the teacher's decoding (the model's compute, measured with a real tiny
teacher up to a size the benchmark can afford) plus its own machinery: writing each shard by
sentence id, and the merge (indexing the shards, walking the corpus in order, choosing, writing
and binarizing the pairs). To measure the merge at WMT size, this writes shards in exactly the
format decoding writes (:class:`fairseq_distill.seqkd.shard_writer.ShardWriter`, fed in the order
fairseq-generate hands sentences over: batches of sentences of similar length, every
``num_shards``-th batch to a shard), with n-best lists made from the references in place of a
teacher's:

    python bench/scale_seqkd.py DATA_BIN WORK --num-shards 3 --nbest 4
    fsd-seqkd --data DATA_BIN --work WORK --num-shards 3 --merge --out OUT --select chrf

The shards name a stand-in teacher (``synthetic``): such data are for measuring, never for
training a model.
"""
import argparse
import json
import os
import sys

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from fairseq_distill.seqkd.inputs import Side, sources_digest  # noqa: E402
from fairseq_distill.seqkd.shard_writer import ShardWriter  # noqa: E402

BATCH = 128  # sentences a batch


def nbest_of(reference: str, nbest: int):
    """``nbest`` hypotheses near the reference (its pieces): itself, without its last piece, with
    its first two swapped, with its last one repeated, then rotations of it."""
    pieces = reference.split()
    variants = [pieces, pieces[:-1] or pieces, pieces[1:2] + pieces[:1] + pieces[2:], pieces + pieces[-1:]]
    variants += [pieces[k:] + pieces[:k] for k in range(1, max(0, nbest - len(variants)) + 1)]
    return [" ".join(v) for v in variants[:nbest]]


def write_shards(data: str, work: str, num_shards: int, nbest: int, subset: str = "train") -> int:
    with open(os.path.join(data, "fairseq_distill.json"), encoding="utf-8") as f:
        meta = json.load(f)
    src, tgt = meta["source_lang"], meta["target_lang"]
    sources, references = Side(data, subset, src, tgt, src), Side(data, subset, src, tgt, tgt)
    # fairseq-generate's batches: sentences by source length, every num_shards-th batch to a shard
    order = np.argsort(np.asarray(sources.dataset.sizes), kind="stable")
    batches = [order[k:k + BATCH] for k in range(0, len(order), BATCH)]
    settings = {"backend": "fairseq", "compute_type": None, "teacher": [{"name": "synthetic", "sha256": "synthetic"}],
                "subset": subset, "beam": nbest, "lenpen": 1.0, "max_len_a": 1.2, "max_len_b": 10, "nbest": nbest,
                "source": None, "train_source_sha256": sources_digest(sources)}
    for shard in range(num_shards):
        writer = ShardWriter(work, shard, num_shards, nbest)
        for batch in batches[shard::num_shards]:
            for sid in batch.tolist():
                writer.add(sid, nbest_of(references[sid], nbest))
        writer.finish(settings, {"sentences": writer.count, "decode_seconds": 0.0})
    return len(sources)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("data")
    parser.add_argument("work")
    parser.add_argument("--num-shards", type=int, default=3)
    parser.add_argument("--nbest", type=int, default=4)
    args = parser.parse_args(argv)
    n = write_shards(args.data, args.work, args.num_shards, args.nbest)
    print(f"[scale-seqkd] {args.work}: {args.num_shards} synthetic shards, {n:,} sentences of {args.nbest}-best lists")


if __name__ == "__main__":
    main()
