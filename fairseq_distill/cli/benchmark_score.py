"""``fsd-benchmark-score``: a recipe's scores and results table.

    fsd-benchmark-score score iwslt14_de_en --text OUT/text --eval OUT/eval/NAME.json --out OUT/eval/NAME.scores.json
    fsd-benchmark-score table iwslt14_de_en --rows recipes/iwslt14_de_en/rows.tsv --eval OUT/eval --out OUT/results.md

``score`` reads the hypotheses ``fsd-evaluate`` wrote (its JSON names them) and scores them in
the paper's BLEU form and with sacreBLEU and chrF (:mod:`fairseq_distill.corpora.scoring`);
``table`` writes ``results.md`` and ``results.json`` (:mod:`fairseq_distill.corpora.results`).
Neither writes into its inputs or over a file it did not write; each writes aside and moves the
files in whole.
"""
import os

from fairseq_distill.cli.common import cli_parser, run_cli

CORPORA = ("iwslt14_de_en", "wmt14_en_de", "wmt16_en_de")


def score(args):
    from fairseq_distill.corpora.scoring import score_evaluation

    scores = score_evaluation(args.corpus, args.text, args.eval, args.out, args.force)
    print(f"[score] {os.path.basename(args.eval)}: {scores['paper_bleu']:.2f} BLEU in the paper's form, "
          f"{scores['sacrebleu']:.2f} sacreBLEU, {scores['chrf']:.2f} chrF -> {args.out}")


def table(args):
    from fairseq_distill.corpora.results import write_table

    write_table(args.corpus, args.rows, args.teacher_paper_bleu, args.eval, args.out, args.teacher_layers,
                args.teacher_heads, args.runs)


def main(argv=None):
    p = cli_parser(__doc__, full_doc=False)
    sub = p.add_subparsers(dest="command", required=True)
    s = sub.add_parser("score", help="one system's test-set scores in both BLEU forms")
    s.add_argument("corpus", choices=CORPORA)
    s.add_argument("--text", required=True, help="the corpus's fsd-benchmark-corpus output (test.*, test.orig.*)")
    s.add_argument("--eval", required=True, help="fsd-evaluate's JSON record of the system")
    s.add_argument("--out", required=True, help="where the scores JSON goes (new, or this command's earlier scores "
                                                "of the same --eval)")
    s.add_argument("--force", action="store_true",
                   help="replace earlier scores of another --eval at --out (a file that is not scores, never)")
    t = sub.add_parser("table", help="the recipe's results table")
    t.add_argument("corpus", choices=CORPORA)
    t.add_argument("--rows", required=True, help="the recipe's rows.tsv")
    t.add_argument("--teacher-paper-bleu", default=None, help="the teacher's BLEU as the paper reports it")
    t.add_argument("--teacher-layers", default="6", help="the teacher's layers: N per side, or E+D (default 6)")
    t.add_argument("--teacher-heads", default="4", help="the teacher's attention heads (default 4)")
    t.add_argument("--eval", required=True, help="the directory of the scores JSON files")
    t.add_argument("--out", required=True, help="results.md (results.json goes beside it); an earlier table there "
                                                "is replaced, another file never")
    t.add_argument("--runs", default=None,
                   help="the recipe's runs directory: rows without RUNS/NAME/.done (training not finished) are "
                        "not measured and are listed by name")
    args = p.parse_args(argv)
    run_cli("benchmark-score", lambda: score(args) if args.command == "score" else table(args))


if __name__ == "__main__":
    main()
