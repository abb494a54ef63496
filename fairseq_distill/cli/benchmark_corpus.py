"""``fsd-benchmark-corpus``: a paper benchmark's corpus from its official archive, by its standard
protocol (:mod:`fairseq_distill.corpora`), as text files that ``fsd-prepare-corpus`` then
segments and binarizes.

    fsd-benchmark-corpus iwslt14_de_en --archive de-en.tgz --out DIR
"""
import argparse
import json
import os

from fairseq_distill.cli.common import run_cli

CORPORA = ("iwslt14_de_en",)


def prepare(args):
    from fairseq_distill.corpora import iwslt14

    counts = iwslt14.prepare(args.archive, args.out)
    with open(os.path.join(args.out, "counts.json"), "w", encoding="utf-8") as f:
        json.dump({"corpus": args.corpus, "archive": os.path.abspath(args.archive), "lines": counts}, f, indent=2)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0].replace("``", ""))
    p.add_argument("corpus", choices=CORPORA, help="which benchmark's protocol")
    p.add_argument("--archive", required=True, help="the official archive (e.g. IWSLT'14's de-en.tgz) or the "
                                                     "directory it unpacks to")
    p.add_argument("--out", required=True, help="where the text files and counts.json go")
    args = p.parse_args(argv)
    run_cli("benchmark-corpus", lambda: prepare(args))


if __name__ == "__main__":
    main()
