"""Translate raw text with a student, with fairseq or CTranslate2.

    fsd-translate --backend fairseq --checkpoint student.pt --data-bin DATA_BIN < in.de > out.en
    fsd-translate --backend ctranslate2 --model-dir ct2-student --input in.de --output out.en

One sentence per line; output lines match input lines (an empty line gives an empty line).
Inputs longer than the model accepts are truncated to its limit, with a warning naming the
line. Progress goes to standard error.
"""
import argparse
import sys

from fairseq_distill.errors import DistillError
from fairseq_distill.translators import BACKENDS, DecodingOptions, build_translator, translate_lines


def build_parser():
    p = argparse.ArgumentParser(description=__doc__.strip().split("\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    p.add_argument("--backend", choices=BACKENDS, default="fairseq")
    p.add_argument("--checkpoint", help="fairseq: the student checkpoint (several joined by ':' form an ensemble)")
    p.add_argument("--data-bin", help="fairseq: the data directory it was trained on (dictionaries, subword model)")
    p.add_argument("--model-dir", help="ctranslate2: a directory written by export_ctranslate2")
    p.add_argument("--input", default="-", help="input file (default: standard input)")
    p.add_argument("--output", default="-", help="output file (default: standard output)")
    p.add_argument("--beam", type=int, default=4)
    p.add_argument("--lenpen", type=float, default=1.0)
    p.add_argument("--max-len-a", type=float, default=1.2)
    p.add_argument("--max-len-b", type=int, default=10)
    p.add_argument("--batch-size", type=int, default=64, help="sentences per batch")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    return p


def read_input(path):
    if path == "-":
        return sys.stdin.read().splitlines()
    try:
        with open(path, encoding="utf-8") as f:
            return f.read().splitlines()
    except OSError as e:
        raise DistillError(f"cannot read input '{path}': {e.strerror}") from e


def main(argv=None):
    args = build_parser().parse_args(argv)
    try:
        lines = read_input(args.input)
        options = DecodingOptions(args.beam, args.lenpen, args.max_len_a, args.max_len_b)
        translator, segmenter = build_translator(args.backend, options, args.checkpoint, args.data_bin,
                                                 args.model_dir)
        run = translate_lines(lines, translator, segmenter, args.batch_size, progress=not args.quiet)
    except DistillError as e:
        sys.exit(f"translate: error: {e}")
    text = "".join(line + "\n" for line in run.outputs)
    if args.output == "-":
        sys.stdout.write(text)
    else:
        with open(args.output, "w", encoding="utf-8") as f:
            f.write(text)
    print(f"[translate] {run.sentences} sentences ({len(lines) - run.sentences} empty), "
          f"{run.tokens_per_second:.0f} tokens/s, {len(run.truncated)} truncated", file=sys.stderr)


if __name__ == "__main__":
    main()
