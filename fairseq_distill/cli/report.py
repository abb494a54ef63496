"""A teacher and its students at deployment, in one report: quality, size, speed and latency.

    fsd-report TEACHER.pt STUDENT.pt [STUDENT.pt ...] --data DATA_BIN --out reports/NAME \\
        [--subset test] [--rounds 3] [--threads 1 N] [--beam 4] [--batch-size 64]

A model is PATH or NAME=PATH (the name defaults to the file's stem, or to its folder's name for
fairseq-train's checkpoint_best.pt). For each, the teacher first: parameters; BLEU and chrF with
sacreBLEU's paired test against the teacher; size on disk of the decoding checkpoint and of its
CTranslate2 float32 and int8 exports; int8's BLEU beside float32's; words/s and sentences/s on
the CPU with 1 thread and with every usable core (CTranslate2 int8 and float32, fairseq-generate);
latency per sentence at batch size 1 (p50, p95); on a CUDA machine, CTranslate2 float16 and
fairseq-generate fp16 too. Timings are the fastest of --rounds rounds in which the models take
turns. Writes OUT.json, OUT.md and OUT.png (BLEU against words/s on one thread); the exports,
hypotheses and logs go to --work (default OUT.work).
"""

from fairseq_distill.cli.common import cli_parser, run_cli
from fairseq_distill.report.report import ReportOptions, make_report
from fairseq_distill.evaluation.scoring import TESTS


def build_parser():
    p = cli_parser(__doc__)
    p.add_argument("teacher", help="the teacher checkpoint: PATH or NAME=PATH")
    p.add_argument("students", nargs="+", help="student checkpoints: PATH or NAME=PATH")
    p.add_argument("--data", required=True, help="the data directory every model was trained on "
                                                 "(fsd-prepare-corpus's DIR/bin)")
    p.add_argument("--out", required=True, help="the report's path without extension: OUT.json, OUT.md, OUT.png")
    p.add_argument("--work", help="exports, hypotheses and logs (default: OUT.work)")
    p.add_argument("--subset", default="test", help="the binarized subset whose raw text the data keeps (default test)")
    p.add_argument("--rounds", type=int, default=3, help="timed rounds; each model's fastest counts (default 3)")
    p.add_argument("--threads", type=int, nargs="+",
                   help="CPU thread counts to time (default: 1 and every core this process may use)")
    p.add_argument("--latency-sentences", type=int, default=100,
                   help="sentences timed one by one for latency, spread evenly over the test set (default 100)")
    p.add_argument("--beam", type=int, default=4)
    p.add_argument("--lenpen", type=float, default=1.0)
    p.add_argument("--max-len-a", type=float, default=1.2)
    p.add_argument("--max-len-b", type=int, default=10)
    p.add_argument("--batch-size", type=int, default=64, help="sentences per batch (default 64)")
    p.add_argument("--test", choices=TESTS, default="bootstrap", help="the paired significance test")
    p.add_argument("--samples", type=int, default=0,
                   help="resamples / trials (default: sacreBLEU's, 1000 bootstrap, 10000 randomisation)")
    p.add_argument("--force", action="store_true",
                   help="replace an earlier report at OUT of other models (a report of the same models is "
                        "replaced without it; a file that is not a report, never)")
    p.add_argument("--no-gpu", action="store_true", help="time the CPU only, even where CUDA is available")
    return p


def main(argv=None):
    args = build_parser().parse_args(argv)
    options = ReportOptions(subset=args.subset, rounds=args.rounds, threads=args.threads, beam=args.beam,
                            lenpen=args.lenpen, max_len_a=args.max_len_a, max_len_b=args.max_len_b,
                            batch_size=args.batch_size, latency_sentences=args.latency_sentences,
                            test=args.test, samples=args.samples, gpu=not args.no_gpu)
    run_cli("report", lambda: make_report(args.teacher, args.students, args.data, args.out, args.work, options,
                                                  args.force),
            on_interrupt="the exports and hypotheses made so far stay in the work directory; no report is written")


if __name__ == "__main__":
    main()
