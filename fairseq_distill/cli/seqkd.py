"""Sequence-level KD data: the teacher translates the training source, and the result is
binarized with the teacher's dictionaries into a new data directory.

    # all in one go
    fsd-seqkd --teacher teacher.pt --data data-bin --out data-bin-seqkd

    # or sharded, e.g. one shard per GPU or machine, then merged
    fsd-seqkd --teacher teacher.pt --data data-bin --work seqkd-work --num-shards 4 --shard-id 0
    ...
    fsd-seqkd --data data-bin --work seqkd-work --num-shards 4 --merge --out data-bin-seqkd

Every training sentence must get exactly one hypothesis, put back in corpus order. A
missing or empty hypothesis stops the merge (``--on-missing fail``, the default) or is
replaced by the original reference (``--on-missing reference``); either way it is
reported. ``--max-len-ratio R`` drops pairs whose hypothesis/source length ratio is above
R or below 1/R, and reports how many. The valid and test sets are copied unchanged.
"""
import argparse

from fairseq_distill.cli.common import run_cli
from fairseq_distill.seqkd import SeqKDJob, make_seqkd_data


def build_parser():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--teacher", help="teacher checkpoint(s), ':'-separated for an ensemble")
    p.add_argument("--data", required=True, help="binarized data directory of the original corpus")
    p.add_argument("--out", help="new binarized data directory (needed unless only generating a shard)")
    p.add_argument("--work", help="directory for shard outputs (default: OUT.work)")
    p.add_argument("--subset", default="train")
    p.add_argument("--source-lang"), p.add_argument("--target-lang")
    p.add_argument("--beam", type=int, default=5)
    p.add_argument("--lenpen", type=float, default=1.0)
    p.add_argument("--max-len-a", type=float, default=1.2)
    p.add_argument("--max-len-b", type=int, default=10)
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--max-tokens", type=int, default=None)
    p.add_argument("--num-shards", type=int, default=1)
    p.add_argument("--shard-id", type=int, default=None,
                   help="generate only this shard (no merge); without it all shards are generated and merged")
    p.add_argument("--merge", action="store_true", help="only merge existing shards into --out")
    p.add_argument("--on-missing", choices=["fail", "reference"], default="fail")
    p.add_argument("--allow-size-only-dictionary-check", action="store_true",
                   help="accept a teacher whose dictionaries cannot be found (not in the checkpoint, no "
                   "training data directory) after comparing vocabulary sizes only")
    p.add_argument("--max-len-ratio", type=float, default=None)
    return p


def main(argv=None):
    job = SeqKDJob(**vars(build_parser().parse_args(argv)))
    run_cli("seqkd", lambda: make_seqkd_data(job))


if __name__ == "__main__":
    main()
