"""Evaluate a checkpoint: fairseq-generate on a test set, detokenised output, sacreBLEU.

    fsd-evaluate CHECKPOINT DATA_BIN [--subset test] [--beam 4]
    fsd-evaluate CHECKPOINT DATA_BIN --ctranslate2 CT2_DIR [CT2_DIR ...]

References are the raw test sentences kept by ``prepare_corpus`` (``DATA_BIN/raw``);
for data prepared otherwise, the detokenised target side of the binarized test set. The
subword segmentation is removed as ``fairseq_distill.json`` records it; a data-bin without that
file (a stock fairseq one) is taken by the subword model it holds (``bpe.codes``: subword-nmt, a
``.model``: sentencepiece), and refused, naming ``--post-process``, when it holds neither or both.
Writes ``CHECKPOINT_STEM.SUBSET.hyp.txt`` and ``CHECKPOINT_STEM.SUBSET.eval.json`` next to
the checkpoint and prints one summary line.

With ``--ctranslate2``, the raw test source is translated by the fairseq checkpoint and by
each CTranslate2 export of it through the same code (segmentation, length-sorted batches,
beam, length limits), one after the other in this process, and one table compares BLEU,
speed and model file size (``--out`` saves it as JSON).

Outputs are never inputs (the checkpoint, the data, the exports), and an existing ``--out`` is
replaced only where it is this tool's earlier record of the same kind; files are written aside
and moved into place once complete.
"""
from fairseq_distill.cli.common import cli_parser, run_cli
from fairseq_distill.evaluation.evaluate import (backends_table, check_backends_out, evaluate, evaluate_backends,
                                                 write_backends)


def compare_backends(args):
    from fairseq_distill.deploy.translators import DecodingOptions

    if args.out:
        check_backends_out(args.out, args.checkpoint, args.data_bin, args.ctranslate2)
    rows = evaluate_backends(args.checkpoint, args.data_bin, args.ctranslate2, args.subset,
                             DecodingOptions(args.beam, args.lenpen, args.max_len_a, args.max_len_b),
                             args.batch_size, args.repeats)
    print(backends_table(rows))
    if args.out:
        write_backends(args.out, rows, args.checkpoint, args.subset, args.beam, args.batch_size)


def evaluate_one(args, extra):
    r = evaluate(args.checkpoint, args.data_bin, args.subset, args.beam, args.lenpen,
                 args.batch_size, args.max_len_a, args.max_len_b, args.out, extra)
    print(f"[evaluate] {args.checkpoint} on {args.subset}: BLEU {r['bleu']:.2f}, chrF {r['chrf']:.2f}, "
          f"chrF++ {r['chrf++']:.2f} (beam {r['beam']}, lenpen {r['lenpen']}, max length "
          f"{r['max_len_a']}·source + {r['max_len_b']}); {r['sentences_per_second']:.1f} sentences/s, "
          f"{r['tokens_per_second']:.0f} tokens/s; {r['parameters']:,} parameters; {r['json']}")
    print(f"[evaluate] signatures: BLEU {r['bleu_signature']}; chrF {r['chrf_signature']}; "
          f"chrF++ {r['chrf++_signature']}; hypotheses {r['hypotheses']}")


def main(argv=None):
    p = cli_parser(__doc__, full_doc=False)
    p.add_argument("checkpoint", help="checkpoint (several separated by ':' decode as an ensemble)")
    p.add_argument("data_bin", help="binarized data directory")
    p.add_argument("--subset", default="test")
    p.add_argument("--beam", type=int, default=4)
    p.add_argument("--lenpen", type=float, default=1.0)
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--max-len-a", type=float, default=1.2)
    p.add_argument("--max-len-b", type=int, default=10)
    p.add_argument("--out", help="JSON record path (default: next to the checkpoint)")
    p.add_argument("--ctranslate2", nargs="+", metavar="CT2_DIR",
                   help="also evaluate these CTranslate2 exports of the checkpoint and compare")
    p.add_argument("--repeats", type=int, default=1,
                   help="with --ctranslate2: rounds in which the backends take turns; the fastest counts")
    args, extra = p.parse_known_args(argv)
    if args.ctranslate2:
        run_cli("evaluate", lambda: compare_backends(args))
    else:
        run_cli("evaluate", lambda: evaluate_one(args, extra))


if __name__ == "__main__":
    main()
