"""Compare systems with a baseline on one test set: BLEU, chrF and chrF++ with sacreBLEU's
paired bootstrap resampling (or approximate randomisation), from saved hypotheses.

    fsd-compare --references test.en --baseline no-kd=student.hyp.txt \\
        --system word-kd=wordkd.hyp.txt --system seq-kd=seqkd.hyp.txt [--json compare.json]

Files hold one sentence per line (lines end at \\n only), in the same order as the references.
"""
import argparse
import json

from fairseq_distill.cli.common import cli_parser, run_cli
from fairseq_distill.errors import DistillError
from fairseq_distill.workdir import check_earlier_output, check_outputs, files_written_aside
from fairseq_distill.evaluation.scoring import TESTS, is_comparison, markdown, paired_significance
from fairseq_distill.text.files import read_lines


def named_file(text: str):
    name, sep, path = text.partition("=")
    if not sep or not name or not path:
        raise argparse.ArgumentTypeError(f"'{text}' is not NAME=FILE")
    return name, path


def build_parser():
    p = cli_parser(__doc__)
    p.add_argument("--references", required=True, help="reference translations, one per line")
    p.add_argument("--baseline", required=True, type=named_file, help="NAME=FILE of the baseline")
    p.add_argument("--system", required=True, action="append", type=named_file,
                   help="NAME=FILE of a system to compare (repeat for several)")
    p.add_argument("--test", choices=TESTS, default="bootstrap")
    p.add_argument("--samples", type=int, default=0,
                   help="resamples / trials (default: sacreBLEU's, 1000 bootstrap, 10000 randomisation)")
    p.add_argument("--json", help="also write the comparison here (new, or an earlier comparison of fsd-compare)")
    return p


def main(argv=None):
    args = build_parser().parse_args(argv)

    def body():
        if args.samples < 0:
            raise DistillError(f"--samples must be >= 0, got {args.samples}")
        check_outputs([("--json", args.json)], [("--references", args.references), ("--baseline", args.baseline[1])]
                      + [("--system", path) for _, path in args.system])
        if args.json:  # an earlier comparison is replaced, another file never
            check_earlier_output("--json", args.json, [args.json], "fsd-compare", "the comparison", is_comparison)
        refs = read_lines(args.references, what="references", offers_replace=False)
        baseline = (args.baseline[0], read_lines(args.baseline[1], what=f"baseline {args.baseline[0]}", offers_replace=False))
        systems = [(name, read_lines(path, what=f"system {name}", offers_replace=False)) for name, path in args.system]
        comparison = paired_significance(baseline, systems, refs, args.test, args.samples)
        if args.json:
            with files_written_aside(args.json) as (tmp,):
                with open(tmp, "w", encoding="utf-8") as f:
                    json.dump(comparison, f, indent=2)
        print("\n".join(markdown(comparison)))

    run_cli("compare", body)


if __name__ == "__main__":
    main()
