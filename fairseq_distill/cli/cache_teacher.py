"""Cache a teacher's top-k output distributions over a subset, for word-level KD without
running the teacher in training (``--teacher-cache`` of ``--task translation_distill``).

    fsd-cache-teacher --teacher teacher.pt --data data-bin --top-k 32 --out teacher-cache

    # or sharded, e.g. one shard per GPU or machine, then merged
    fsd-cache-teacher --teacher teacher.pt --data data-bin --top-k 32 --out teacher-cache --num-shards 4 --shard-id 0
    ...
    fsd-cache-teacher --data data-bin --out teacher-cache --num-shards 4 --merge

The teacher(s) run once, in eval mode, teacher-forced on the subset's targets; several
teachers (':'-separated) are averaged before the top-k is taken. For sequence-level KD data,
cache the teacher on that data directory (its targets are the teacher's translations).
"""

from fairseq_distill.cli.common import cli_parser, run_cli
from fairseq_distill.teacher.cache import VALUE_DTYPES
from fairseq_distill.teacher.cache_writer import CacheJob, make_teacher_cache


def build_parser():
    p = cli_parser(__doc__, full_doc=False)
    p.add_argument("--teacher", help="teacher checkpoint(s), ':'-separated for an ensemble")
    p.add_argument("--data", required=True, help="binarized data directory")
    p.add_argument("--out", required=True, help="cache directory")
    p.add_argument("--subset", default="train", help="the subset training reads (default: train)")
    p.add_argument("--top-k", type=int, default=32, help="tokens kept per target position (default: 32)")
    p.add_argument("--temperature", type=float, default=1.0,
                   help="τ of the cached distribution; training must use the same --kd-temperature")
    p.add_argument("--dtype", choices=VALUE_DTYPES, default="float16",
                   help="storage type of the log-probabilities (default: float16)")
    p.add_argument("--max-tokens", type=int, default=4096, help="tokens per teacher batch")
    p.add_argument("--source-lang"), p.add_argument("--target-lang")
    p.add_argument("--num-shards", type=int, default=1)
    p.add_argument("--shard-id", type=int, default=None,
                   help="make only this shard (no merge); without it all shards are made and merged")
    p.add_argument("--merge", action="store_true", help="only merge existing shards")
    p.add_argument("--cpu", action="store_true", help="run on the CPU even if a GPU is available")
    p.add_argument("--allow-size-only-dictionary-check", action="store_true",
                   help="accept a teacher whose dictionaries cannot be found after comparing vocabulary sizes only")
    return p


def main(argv=None):
    job = CacheJob(**vars(build_parser().parse_args(argv)))
    run_cli("cache-teacher", lambda: make_teacher_cache(job),
            on_interrupt="the shards finished so far are kept in OUT/shards; run the same command again "
                         "to make only the others and merge")


if __name__ == "__main__":
    main()
