"""Sequence-level KD data: the teacher translates the training source, and the result is
binarized with the teacher's dictionaries into a new data directory.

    # all in one go
    fsd-seqkd --teacher teacher.pt --data data-bin --out data-bin-seqkd

    # or sharded, e.g. one shard per GPU or machine, then merged
    fsd-seqkd --teacher teacher.pt --data data-bin --work seqkd-work --num-shards 4 --shard-id 0
    ...
    fsd-seqkd --data data-bin --work seqkd-work --num-shards 4 --merge --out data-bin-seqkd

    # translations made elsewhere (an LLM, a pretrained model): one line per training sentence
    fsd-seqkd --teacher-translations train.hyp.en --data data-bin --out data-bin-seqkd

    # a pretrained CTranslate2 model as the teacher (OPUS-MT, NLLB-200, ...: docs/methods/seqkd.md),
    # reading the raw source with its own tokenizer; the output is segmented as the corpus was
    fsd-seqkd --teacher-ctranslate2 opus-mt-de-en --data data-bin --out data-bin-seqkd --compute-type int8

    # the teacher in CTranslate2 (converted once into the work directory), 4-best lists,
    # the hypothesis closest to the reference by chrF kept, extra monolingual source translated
    fsd-seqkd --teacher teacher.pt --data data-bin --out data-bin-seqkd --backend ctranslate2 \\
        --nbest 4 --select chrf --source mono.de

    # no reference needed: 8-best lists, the 2 hypotheses of highest expected chrF against the
    # others (minimum Bayes risk) each kept as a training pair
    fsd-seqkd --teacher teacher.pt --data data-bin --out data-bin-seqkd --beam 8 --nbest 8 \\
        --select mbr --targets 2 --source mono.de

Every training sentence must get exactly one hypothesis (with --targets K up to K, the
non-empty ones; fewer are counted), put back in corpus order. A missing or empty hypothesis
stops the merge (``--on-missing fail``, the default) or is
replaced by the original reference (``--on-missing reference``); either way it is
reported. ``--max-len-ratio R`` drops pairs whose hypothesis/source length ratio is above
R or below 1/R, and reports how many. The valid and test sets are copied unchanged.

Both backends decode the binarized source with the same beam, length penalty and length
limit (max-len-a * (source tokens + 1) + max-len-b output tokens; fairseq-generate applies
it to each batch's longest source, CTranslate2 to each sentence). With beam > 1, CTranslate2
scores hypotheses cut at the limit differently from fairseq, so sentences that reach it are
decoded again with fairseq and counted. An ensemble or a deep_transformer teacher cannot be
decoded with CTranslate2: use --backend fairseq. seqkd_summary.json in OUT has the counts.
"""

from fairseq_distill.cli.common import cli_parser, run_cli
from fairseq_distill.seqkd.selection import SELECTIONS
from fairseq_distill.seqkd.inputs import BACKENDS, SeqKDJob
from fairseq_distill.seqkd.job import make_seqkd_data


def build_parser():
    p = cli_parser(__doc__, epilog=__doc__.split("\n\n", 1)[1])
    p.add_argument("--teacher", help="a fairseq teacher checkpoint on the corpus's dictionaries; ':'-separated "
                   "for an ensemble (ensembles: fairseq backend only)")
    p.add_argument("--teacher-translations", metavar="FILE",
                   help="instead of a teacher model: a file of its translations (e.g. an LLM's), raw text, one "
                   "line per training sentence in corpus order; segmented with the corpus's subword model "
                   "and merged like decoded shards (empty lines: --on-missing)")
    external = p.add_argument_group("a pretrained CTranslate2 teacher (its own vocabulary and tokenizer)")
    external.add_argument("--teacher-ctranslate2", metavar="DIR",
                          help="instead of a fairseq teacher: a CTranslate2 model directory (e.g. OPUS-MT or NLLB-200 "
                          "converted with ct2-transformers-converter); it translates the raw training source, and "
                          "its output is segmented with the corpus's subword model")
    external.add_argument("--teacher-tokenizer", metavar="PATH",
                          help="its tokenizer: a sentencepiece model file (OPUS-MT's source.spm) or a Hugging Face "
                          "tokenizer directory (needs transformers); default: found in DIR")
    external.add_argument("--teacher-target-tokenizer", metavar="FILE",
                          help="a sentencepiece model for its output when it differs from the source's (default: "
                          "target.spm beside source.spm)")
    external.add_argument("--teacher-source-prefix", metavar="LANG",
                          help="the source language: a Hugging Face tokenizer's src_lang (NLLB-200's eng_Latn, "
                          "M2M-100's en), or with a bare sentencepiece model a token put first")
    external.add_argument("--teacher-target-prefix", metavar="TOKEN",
                          help="the token forced first in every translation, e.g. deu_Latn (NLLB-200) or __de__ "
                          "(M2M-100); removed from the output")
    external.add_argument("--raw-train-source", metavar="FILE",
                          help="the raw training source, one line per training sentence, checked against the "
                          "binarized one (default: the binarized source desegmented)")
    external.add_argument("--device", default="auto", help="auto (cuda when CTranslate2 sees a GPU), cpu or cuda")
    p.add_argument("--data", required=True, help="binarized data directory of the original corpus")
    p.add_argument("--out", help="new binarized data directory (needed unless only generating a shard)")
    p.add_argument("--work", help="directory for shard outputs, the converted teacher and the binarized "
                   "--source (default: OUT.work)")
    p.add_argument("--subset", default="train")
    p.add_argument("--source-lang"), p.add_argument("--target-lang")
    p.add_argument("--backend", choices=BACKENDS, default="fairseq",
                   help="fairseq: stock fairseq-generate (any teacher, ensembles too); ctranslate2: the "
                   "teacher converted once to CTranslate2 (cached in the work directory), faster on CPUs "
                   "(default: fairseq)")
    p.add_argument("--compute-type", default=None,
                   help="CTranslate2's compute type, e.g. float32 (default; with --teacher-ctranslate2: the model's own), int8, int8_float32, float16 on a "
                   "GPU; the ones this machine supports are checked (CTranslate2 decoding only)")
    p.add_argument("--threads", type=int, default=None,
                   help="CTranslate2's CPU threads in all (default: all cores); on a machine busy with other "
                   "work use fewer, as idle OpenMP threads spin (CTranslate2 decoding only)")
    p.add_argument("--inter-threads", type=int, default=None, metavar="K",
                   help="CTranslate2 decodes K batches side by side, each on --threads / K threads (default: "
                   "one batch per thread on a CPU, one at a time on a GPU; CTranslate2 decoding only)")
    p.add_argument("--beam", type=int, default=5)
    p.add_argument("--lenpen", type=float, default=1.0,
                   help="fairseq's length penalty: finished hypotheses rank by log-probability / "
                   "length^lenpen, </s> counted (the same for both backends)")
    p.add_argument("--max-len-a", type=float, default=1.2)
    p.add_argument("--max-len-b", type=int, default=10)
    p.add_argument("--nbest", type=int, default=1,
                   help="keep the teacher's N best hypotheses per sentence (at most --beam); --select "
                   "chooses one")
    p.add_argument("--select", choices=SELECTIONS, default="chrf",
                   help="with --nbest > 1: chrf keeps the hypothesis with the best sentence chrF against the "
                   "reference (detokenised text; ties keep the higher-ranked one; --source lines have no "
                   "reference and keep the 1-best), first the 1-best, mbr the one with the highest mean "
                   "sentence chrF against the other hypotheses, no reference needed (minimum Bayes risk; "
                   "each shard's rankings are kept in the work directory) (default: chrf)")
    p.add_argument("--targets", type=int, default=None, metavar="K",
                   help="with --select mbr: keep the K best hypotheses by MBR score (at most --nbest), each as "
                   "a training pair, the source repeated; a source's pairs are side by side in corpus order "
                   "and OUT/seqkd_pairs.tsv says which sentence and hypothesis each pair holds (default: 1)")
    p.add_argument("--source", metavar="FILE",
                   help="raw monolingual source text, one sentence per line: translated by the teacher too "
                   "and added to the training pairs (segmented and binarized as the corpus was); a "
                   "line with nothing visible (empty, or only invisible characters such as U+200B) keeps "
                   "its place with an empty target, the lines named")
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--max-tokens", type=int, default=None)
    p.add_argument("--num-shards", type=int, default=1)
    p.add_argument("--shard-id", type=int, default=None,
                   help="generate only this shard (no merge); without it all shards are generated and merged")
    p.add_argument("--merge", action="store_true", help="only merge existing shards into --out (pass the same "
                   "--source as when generating)")
    p.add_argument("--on-missing", choices=["fail", "reference"], default="fail",
                   help="a sentence without (or with an empty) hypothesis: fail, or keep its reference "
                   "(--source lines: leave them out)")
    p.add_argument("--allow-size-only-dictionary-check", action="store_true",
                   help="accept a teacher whose dictionaries cannot be found (not in the checkpoint, no "
                   "training data directory) after comparing vocabulary sizes only")
    p.add_argument("--max-len-ratio", type=float, default=None)
    return p


def main(argv=None):
    job = SeqKDJob(**vars(build_parser().parse_args(argv)))
    run_cli("seqkd", lambda: make_seqkd_data(job),
            on_interrupt="the shards finished so far, the MBR rankings made so far and how far the merge went "
                         "are kept in the work directory (--work, default OUT.work); run the same command again "
                         "to decode, rank and merge only the rest")


if __name__ == "__main__":
    main()
