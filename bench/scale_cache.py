"""Teacher-cache shards at any size without running a teacher, for the scale benchmark.

``fsd-cache-teacher``'s cost is the teacher's forward pass (the model's compute, measured with a
real tiny teacher up to a size the benchmark can afford) plus its own machinery: appending rows to
shard files, and merging the shards into corpus order. To measure the merge at WMT size (and
``fairseq-train``'s start-up with the merged cache), this writes shards in exactly the format
:func:`fairseq_distill.teacher.cache_writer.make_shard` writes (raw top-k rows in the order the
shard met its sentences, then the ``.done`` record), with random rows in place of a teacher's:

    python bench/scale_cache.py DATA_BIN OUT --num-shards 4 --top-k 8

Each shard holds every ``num_shards``-th batch of the subset's sentences ordered by length, as
fairseq's batch iterator hands them out, so the merge gathers rows from all over each shard as it
does after a real run. The records name a stand-in teacher (``synthetic``): such a cache is for
measuring, never for training a model.
"""
import argparse
import json
import os
import sys

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from fairseq_distill.data_bin import data_digest  # noqa: E402
from fairseq_distill.teacher.cache import index_dtype  # noqa: E402

BATCH = 128          # sentences a batch, as a --max-tokens of a few thousand gives
ROWS_A_WRITE = 1 << 20


def target_sizes(data: str, subset: str, src: str, tgt: str):
    from fairseq.data import data_utils

    sizes = []
    for lang in (src, tgt):
        dataset = data_utils.load_indexed_dataset(os.path.join(data, f"{subset}.{src}-{tgt}.{lang}"), None)
        # a copy: the sizes are a view of the dataset's memory map, gone with the dataset
        sizes.append(np.array(dataset.sizes, dtype=np.int64))
    return sizes


def write_shards(data: str, out: str, num_shards: int, top_k: int, dtype: str = "float16", subset: str = "train",
                 seed: int = 1) -> int:
    with open(os.path.join(data, "fairseq_distill.json"), encoding="utf-8") as f:
        meta = json.load(f)
    src, tgt = meta["source_lang"], meta["target_lang"]
    src_sizes, tgt_sizes = target_sizes(data, subset, src, tgt)
    with open(os.path.join(data, f"dict.{tgt}.txt"), encoding="utf-8") as f:
        vocab = sum(1 for _ in f) + 4
    order = np.lexsort((src_sizes, tgt_sizes))          # fairseq's ordered_indices: by target, then source
    batches = np.array_split(order, max(1, len(order) // BATCH))
    digest = data_digest(data, subset, src, tgt)
    rng = np.random.default_rng(seed)
    value_type, idx_type = np.dtype(dtype), index_dtype(vocab)
    os.makedirs(os.path.join(out, "shards"), exist_ok=True)
    settings = {"subset": subset, "top_k": top_k, "temperature": 1.0, "dtype": dtype}
    for shard in range(num_shards):
        prefix = os.path.join(out, "shards", f"shard{shard}-of-{num_shards}")
        ids = np.concatenate(batches[shard::num_shards]) if batches[shard::num_shards] else np.zeros(0, np.int64)
        rows = int(tgt_sizes[ids].sum())
        with open(prefix + ".log_probs.bin", "wb") as fv, open(prefix + ".indices.bin", "wb") as fi:
            for start in range(0, rows, ROWS_A_WRITE):
                n = min(ROWS_A_WRITE, rows - start)
                fv.write((-rng.random((n, top_k), dtype=np.float32) * 10).astype(value_type).tobytes())
                fi.write(rng.integers(0, vocab, (n, top_k)).astype(idx_type).tobytes())
        record = {"ids": ids.tolist(), "tokens": rows, "seconds": 0.0, "settings": settings,
                  "data": os.path.abspath(data), "data_sha256": digest, "teachers": ["synthetic"],
                  "teacher_digests": ["synthetic"], "vocab_size": vocab}
        with open(prefix + ".done", "w", encoding="utf-8") as f:
            json.dump(record, f)
    return int(tgt_sizes.sum())


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("data")
    parser.add_argument("out")
    parser.add_argument("--num-shards", type=int, default=4)
    parser.add_argument("--top-k", type=int, default=8)
    parser.add_argument("--dtype", default="float16")
    args = parser.parse_args(argv)
    rows = write_shards(args.data, args.out, args.num_shards, args.top_k, args.dtype)
    print(f"[scale-cache] {args.out}: {args.num_shards} synthetic shards, {rows:,} rows of K = {args.top_k}")


if __name__ == "__main__":
    main()
