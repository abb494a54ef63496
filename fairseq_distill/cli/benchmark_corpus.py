"""``fsd-benchmark-corpus``: a paper benchmark's corpus from its official archive, by its standard
protocol (:mod:`fairseq_distill.corpora`), as text files that ``fsd-prepare-corpus`` then
segments and binarizes.

    fsd-benchmark-corpus iwslt14_de_en --archive de-en.tgz --out DIR
    fsd-benchmark-corpus wmt14_en_de --archive DIR_OF_ARCHIVES --out DIR [--workers N]
"""
import json
import os

from fairseq_distill.cli.common import cli_parser, run_cli

CORPORA = ("iwslt14_de_en", "wmt14_en_de", "wmt16_en_de")


def prepare(args):
    from fairseq_distill.workdir import check_outputs

    check_outputs([("--out", args.out)], [("--archive", args.archive)])
    if args.corpus in ("wmt14_en_de", "wmt16_en_de"):
        from fairseq_distill.corpora import wmt

        counts = wmt.PREPARE[args.corpus](args.archive, args.out, workers=args.workers)
    else:
        from fairseq_distill.corpora import iwslt14

        counts = iwslt14.prepare(args.archive, args.out)
    with open(os.path.join(args.out, "counts.json"), "w", encoding="utf-8") as f:
        json.dump({"corpus": args.corpus, "archive": os.path.abspath(args.archive), "lines": counts}, f, indent=2)


def main(argv=None):
    p = cli_parser(__doc__, full_doc=False)
    p.add_argument("corpus", choices=CORPORA, help="which benchmark's protocol")
    p.add_argument("--archive", required=True, help="the official archive (e.g. IWSLT'14's de-en.tgz) or the "
                                                     "directory it unpacks to; for WMT, the directory holding "
                                                     "the official archives")
    p.add_argument("--out", required=True, help="where the text files and counts.json go")
    p.add_argument("--workers", type=int, default=1,
                   help="processes for the WMT corpora's per-line Moses steps (default 1)")
    args = p.parse_args(argv)
    run_cli("benchmark-corpus", lambda: prepare(args))


if __name__ == "__main__":
    main()
