"""Translate raw text with a student, with fairseq or CTranslate2.

    fsd-translate --backend fairseq --checkpoint student.pt --data-bin DATA_BIN < in.de > out.en
    fsd-translate --backend ctranslate2 --model-dir ct2-student --input in.de --output out.en

One sentence per line, UTF-8: one output line for each input line, in order (an empty line
gives an empty line). A line ends at "\\n" ("\\r\\n" too) and nowhere else, as `wc -l`
counts: a bare "\\r", U+2028, U+0085, form feeds and other whitespace inside a line read as
a space; a last line without a newline is a line. Invalid UTF-8 is an error naming the line
unless --errors replace. Inputs longer than the model accepts are truncated to its limit,
with a warning naming the line. Progress goes to standard error.
"""
import argparse
import sys

from fairseq_distill.cli.common import run_cli
from fairseq_distill.errors import DistillError
from fairseq_distill.text.files import ERRORS, read_lines
from fairseq_distill.deploy.translators import (BACKENDS, DecodingOptions, build_translator, join_output_lines,
                                         translate_lines)


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
    p.add_argument("--errors", choices=ERRORS, default="strict",
                   help="invalid UTF-8 in the input: strict (default) stops with the line; replace reads "
                        "each invalid byte sequence as U+FFFD, with a warning")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    return p


def warn(message):
    print(f"[translate] warning: {message}", file=sys.stderr)


def translate(args):
    lines = read_lines(args.input, args.errors, warn, what="input ")
    options = DecodingOptions(args.beam, args.lenpen, args.max_len_a, args.max_len_b)
    translator, segmenter = build_translator(args.backend, options, args.checkpoint, args.data_bin,
                                             args.model_dir)
    run = translate_lines(lines, translator, segmenter, args.batch_size, progress=not args.quiet)
    # bytes, not text: the output is UTF-8 whatever the locale, with "\n" line ends only
    data = join_output_lines(run.outputs).encode("utf-8")
    if args.output == "-":
        sys.stdout.buffer.write(data)
        sys.stdout.flush()
    else:
        try:
            with open(args.output, "wb") as f:
                f.write(data)
        except OSError as e:
            raise DistillError(f"cannot write output '{args.output}': {e.strerror}") from e
    print(f"[translate] {run.sentences} sentences ({len(lines) - run.sentences} empty), "
          f"{run.tokens_per_second:.0f} tokens/s, {len(run.truncated)} truncated", file=sys.stderr)
    return run


def main(argv=None):
    args = build_parser().parse_args(argv)
    run_cli("translate", lambda: translate(args))


if __name__ == "__main__":
    main()
