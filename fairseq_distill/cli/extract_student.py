"""Extract a shallow student from a deep teacher checkpoint (GPKD).

    fsd-extract-student TEACHER.pt STUDENT.pt [--keep top|bottom|random|all|LIST]

One layer per group is kept on each side: groups are the teacher's ``--encoder-group-size``
/ ``--decoder-group-size`` (override with the flags below; a side without groups keeps all
its layers unless given an explicit list). Train the student from the result with
``--restore-file STUDENT.pt --reset-optimizer --reset-lr-scheduler --reset-meters --reset-dataloader``.
"""

from fairseq_distill.cli.common import cli_parser, run_cli
from fairseq_distill.depth.extraction import KEEP_RULES, extract_student


def main(argv=None):
    p = cli_parser(__doc__)
    p.add_argument("teacher", help="teacher checkpoint (training or exported)")
    p.add_argument("output", help="where to write the student checkpoint")
    keep_help = f"one of {', '.join(KEEP_RULES)}, or 1-based layer numbers such as 2,4,6"
    p.add_argument("--keep", default="top", help=f"which layer of each group to keep, both sides: {keep_help} (default top)")
    p.add_argument("--encoder-keep", help="the same, encoder only (overrides --keep)")
    p.add_argument("--decoder-keep", help="the same, decoder only (overrides --keep)")
    p.add_argument("--encoder-group-size", type=int, help="encoder group size (default: the teacher's)")
    p.add_argument("--decoder-group-size", type=int, help="decoder group size (default: the teacher's)")
    p.add_argument("--seed", type=int, default=1, help="seed of --keep random (default 1)")
    args = p.parse_args(argv)
    info = run_cli("extract_student", lambda: extract_student(
        args.teacher, args.output,
        encoder_keep=args.encoder_keep or args.keep, decoder_keep=args.decoder_keep or args.keep,
        encoder_group_size=args.encoder_group_size, decoder_group_size=args.decoder_group_size,
        seed=args.seed,
    ))
    for side in ("encoder", "decoder"):
        total, kept = info["layers"][side]
        print(f"[extract] {side}: kept {kept} of {total} layers: {info['kept'][side]}")
    print(f"[extract] {info['path']}: {info['arch']}, {info['parameters']:,} parameters "
          f"(teacher {info['teacher_parameters']:,}); loads and runs (checked)")


if __name__ == "__main__":
    main()
