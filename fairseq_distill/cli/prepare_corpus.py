"""``fsd-prepare-corpus``: a parallel corpus prepared for fairseq, subword segmentation and
binarization (:mod:`fairseq_distill.text.corpus` does the work and documents the layout)."""
import os

from fairseq_distill.cli.common import cli_parser, run_cli
from fairseq_distill.text.corpus import DEFAULT_MAX_LENGTH, DEFAULT_SUBWORD_SAMPLE, prepare
from fairseq_distill.text.files import ERRORS

DESCRIPTION = "Prepare a parallel corpus for fairseq: subword segmentation + binarization."


def build_parser():
    p = cli_parser(DESCRIPTION, full_doc=False)
    p.add_argument("--source-lang", "-s", required=True)
    p.add_argument("--target-lang", "-t", required=True)
    p.add_argument("--train-prefix", required=True, help="PREFIX of PREFIX.{src,tgt}[.gz]")
    p.add_argument("--valid-prefix", required=True)
    p.add_argument("--test-prefix", required=True, nargs="+", help="one or more test sets")
    p.add_argument("--out", required=True, help="output directory")
    p.add_argument("--bpe", choices=["sentencepiece", "subword_nmt"], default="sentencepiece")
    p.add_argument(
        "--vocab-size", type=int, default=8000,
        help="sentencepiece vocabulary size, or the number of subword-nmt merges",
    )
    p.add_argument("--spm-model-type", choices=["unigram", "bpe"], default="unigram")
    p.add_argument("--workers", type=int, default=min(2, os.cpu_count() or 1))
    p.add_argument("--errors", choices=ERRORS, default="strict",
                   help="invalid UTF-8 in the input: strict (default) stops with the file and line; "
                        "replace reads each invalid byte sequence as U+FFFD, with a warning")
    p.add_argument("--max-length", type=int, default=DEFAULT_MAX_LENGTH,
                   help="training pairs with a side of more subword tokens are removed, counted and listed "
                        "(default %(default)s: with </s>, the 1024 positions of fairseq's Transformers); "
                        "an evaluation set with such a line is refused")
    p.add_argument("--subword-sample", type=int, default=DEFAULT_SUBWORD_SAMPLE,
                   help="the subword model learns from at most this many training pairs, evenly spaced through "
                        "the corpus (default %(default)s; every pair when there are fewer): its memory and time "
                        "stay bounded on corpora of millions of pairs")
    p.add_argument("--keep-blank-test-lines", action="store_true",
                   help="keep a test set's blank lines (or lines the subword model empties) in place, aligned, as "
                        "empty sentences, instead of refusing them: an official protocol may keep them (fairseq's "
                        "prepare-iwslt14.sh does); each is scored as the empty reference of its line")
    p.add_argument("--vocabulary-from", metavar="DATA_BIN|MODEL_DIR",
                   help="segment and binarize with DATA_BIN's subword model and dictionaries (a teacher's "
                        "data-bin) instead of learning new ones, so that models trained on DATA_BIN read the new "
                        "data; or with the tokenizer of a Hugging Face teacher (MarianMT, M2M100/NLLB model "
                        "directory): the dictionary then holds the teacher's pieces that the training data uses, "
                        "so that the teacher teaches every term (--teacher-path MODEL_DIR); --bpe and --vocab-size "
                        "then do not apply")
    p.add_argument("--teacher-pieces", type=int, metavar="N",
                   help="with --vocabulary-from MODEL_DIR: keep only the N most frequent of the teacher's pieces in "
                        "the training data (default: every piece it uses), so that a student of a 256k-piece NLLB "
                        "teacher does not carry its embeddings; the others binarize as <unk> (counted), and the "
                        "teacher's probability on them goes to the student's <unk> in every KD term and the cache")
    p.add_argument("--teacher-languages", nargs=2, metavar=("SRC_CODE", "TGT_CODE"),
                   help="with --vocabulary-from MODEL_DIR of an M2M100/NLLB teacher: its codes of the two languages "
                        "(e.g. deu_Latn eng_Latn), where they are not __SRC__/__TGT__ or -s/-t themselves")
    p.add_argument("--subword-model", metavar="FILE",
                   help="with --vocabulary-from: the sentencepiece .model or subword-nmt codes DATA_BIN's text was "
                        "segmented with, where DATA_BIN does not record or hold it (a stock fairseq data-bin)")
    p.add_argument("--force", action="store_true",
                   help="prepare again even if OUT was prepared before (by default OUT is reused if it "
                        "was made from the same inputs and options, and refused if not)")
    return p


def main(argv=None):
    args = build_parser().parse_args(argv)
    # nothing returned: the console script passes main()'s value to sys.exit
    run_cli("prepare_corpus", lambda: prepare(args),
            on_interrupt="the output directory is incomplete (it has no bin/fairseq_distill.json yet); "
                         "run the same command again to go on from the last finished stage")


if __name__ == "__main__":
    main()
