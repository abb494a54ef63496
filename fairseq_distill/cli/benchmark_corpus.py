"""``fsd-benchmark-corpus``: a paper benchmark's corpus from its official archive, by its standard
protocol (:mod:`fairseq_distill.corpora`), as text files that ``fsd-prepare-corpus`` then
segments and binarizes.

    fsd-benchmark-corpus iwslt14_de_en --archive de-en.tgz --out DIR
    fsd-benchmark-corpus wmt14_en_de --archive DIR_OF_ARCHIVES --out DIR [--workers N]
"""
import json
import os

from fairseq_distill.cli.common import cli_parser, run_cli
from fairseq_distill.errors import DistillError

CORPORA = ("iwslt14_de_en", "wmt14_en_de", "wmt16_en_de")


# the files a protocol writes into --out (both protocols: de and en); counts.json, written last,
# is the record of a finished run, MARKER (written first) says the folder is this tool's while it runs
PROTOCOL_FILES = tuple(f"{split}.{lang}" for split in ("train", "valid", "test", "test.orig") for lang in ("de", "en"))
RECORD = "counts.json"
MARKER = ".fsd-benchmark-corpus.json"


def check_out_folder(out, corpus):
    """--out may hold this tool's earlier (or unfinished) output of the same corpus, which is
    replaced; a file of the protocol's names that this tool did not write is never replaced."""
    from fairseq_distill.workdir import read_json_record

    if os.path.exists(out) and not os.path.isdir(out):
        raise DistillError(f"--out {out} is a file; give --out a folder (new, or one this tool wrote)")
    for name in (RECORD, MARKER):
        path = os.path.join(out, name)
        if not os.path.exists(path):
            continue
        record = read_json_record(path)
        if not isinstance(record, dict) or "corpus" not in record:
            raise DistillError(f"--out {out}: {path} is not a record of fsd-benchmark-corpus, so the folder is "
                               f"not its output and its files would be lost; give another --out")
        if record["corpus"] != corpus:
            raise DistillError(f"--out {out} holds the {record['corpus']} corpus; writing {corpus} there would "
                               f"mix the two; give another --out (or remove {out})")
        return
    found = [name for name in PROTOCOL_FILES if os.path.exists(os.path.join(out, name))]
    if found:
        raise DistillError(f"--out {out} holds {found[0]} but no {RECORD}, so fsd-benchmark-corpus did not write "
                           f"it and would replace it: give another --out (or move {', '.join(found[:3])})")


def write_json(path, record):
    from fairseq_distill.workdir import files_written_aside

    with files_written_aside(path) as (tmp,):
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(record, f, indent=2)


def prepare(args):
    from fairseq_distill.workdir import check_outputs

    check_outputs([("--out", args.out)], [("--archive", args.archive)])
    check_out_folder(args.out, args.corpus)
    os.makedirs(args.out, exist_ok=True)
    write_json(os.path.join(args.out, MARKER), {"corpus": args.corpus})
    if args.corpus in ("wmt14_en_de", "wmt16_en_de"):
        from fairseq_distill.corpora import wmt

        counts = wmt.PREPARE[args.corpus](args.archive, args.out, workers=args.workers)
    else:
        from fairseq_distill.corpora import iwslt14

        counts = iwslt14.prepare(args.archive, args.out)
    write_json(os.path.join(args.out, RECORD),
               {"corpus": args.corpus, "archive": os.path.abspath(args.archive), "lines": counts})


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
