"""Translate raw text with a student, with fairseq or CTranslate2.

    fsd-translate --backend fairseq --checkpoint student.pt --data-bin DATA_BIN < in.de > out.en
    fsd-translate --backend ctranslate2 --model-dir ct2-student --input in.de --output out.en

One sentence per line, UTF-8: one output line for each input line, in order (an empty line,
or one with nothing visible such as only U+200B or U+FEFF, gives an empty line). A line ends at "\\n" ("\\r\\n" too) and nowhere else, as `wc -l`
counts: a bare "\\r", U+2028, U+0085, form feeds and other whitespace inside a line read as
a space; a last line without a newline is a line. Invalid UTF-8 is an error naming the line
unless --errors replace. Inputs longer than the model accepts are truncated to its limit,
with a warning naming the line. Progress goes to standard error. The input is read and the
output written a window of lines at a time, so memory stays flat on inputs of millions of
lines; --output is written beside its name (OUTPUT.partial) and moved into place when complete.
"""
import os
import sys
from typing import Optional

from fairseq_distill.cli.common import cli_parser, run_cli
from fairseq_distill.errors import DistillError
from fairseq_distill.text.files import ERRORS, iter_lines
from fairseq_distill.deploy.translators import BACKENDS, DEVICES, DecodingOptions, build_translator, translate_stream
from fairseq_distill.workdir import check_outputs


def build_parser():
    p = cli_parser(__doc__)
    p.add_argument("--backend", choices=BACKENDS,
                   help="default: ctranslate2 with --model-dir, else fairseq")
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
    p.add_argument("--device", choices=DEVICES, default="auto", help="auto: CUDA where there is a GPU, else the CPU")
    p.add_argument("--threads", type=int,
                   help="CPU threads to translate with (default: every core this process may use); on a "
                        "CPU, one thread per process often gives the most sentences per core")
    p.add_argument("--errors", choices=ERRORS, default="strict",
                   help="invalid UTF-8 in the input: strict (default) stops with the line; replace reads "
                        "each invalid byte sequence as U+FFFD, with a warning")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    return p


def warn(message):
    print(f"[translate] warning: {message}", file=sys.stderr)


def count_lines(path: str) -> Optional[int]:
    """Lines of a plain input file, counted fast (for the ETA); None for standard input or .gz."""
    if path == "-" or path.endswith(".gz") or not os.path.isfile(path):
        return None
    with open(path, "rb") as f:
        data = b""
        count = 0
        for data in iter(lambda: f.read(1 << 22), b""):
            count += data.count(b"\n")
        return count + (1 if data and not data.endswith(b"\n") else 0)


def translate(args):
    if args.backend is None:
        args.backend = "ctranslate2" if args.model_dir and not args.checkpoint else "fairseq"
    check_outputs([("--output", args.output)],
                  [("--input", args.input), ("--data-bin", args.data_bin), ("--model-dir", args.model_dir)]
                  + [("--checkpoint", c) for c in (args.checkpoint or "").split(":") if c])
    lines = iter_lines(args.input, args.errors, warn, what="input ")
    options = DecodingOptions(args.beam, args.lenpen, args.max_len_a, args.max_len_b)
    translator, segmenter = build_translator(args.backend, options, args.checkpoint, args.data_bin,
                                             args.model_dir, args.device, args.threads)
    total = count_lines(args.input)
    # bytes, not text: the output is UTF-8 whatever the locale, with "\n" line ends only
    if args.output == "-":
        def write(text):
            sys.stdout.buffer.write(text.encode("utf-8"))
            sys.stdout.flush()

        run = translate_stream(lines, translator, segmenter, write, args.batch_size, total, not args.quiet)
    else:
        # written beside the output and moved into place when complete: an interrupted run
        # leaves no output that looks finished
        partial = args.output + ".partial"
        try:
            with open(partial, "wb") as f:
                run = translate_stream(lines, translator, segmenter, lambda text: f.write(text.encode("utf-8")),
                                       args.batch_size, total, not args.quiet)
            os.replace(partial, args.output)
        except OSError as e:
            raise DistillError(f"cannot write output '{args.output}': {e.strerror}") from e
    print(f"[translate] {run.sentences} sentences ({run.lines - run.sentences} empty), "
          f"{run.tokens_per_second:.0f} tokens/s, {len(run.truncated)} truncated", file=sys.stderr)
    return run


def main(argv=None):
    args = build_parser().parse_args(argv)
    run_cli("translate", lambda: translate(args))


if __name__ == "__main__":
    main()
