"""What every command-line front end shares: turning a user error into one clear line.

A front end builds its parser with :func:`cli_parser` (every option's default in ``--help``) and
calls the library inside :func:`run_cli`; a
:class:`~fairseq_distill.errors.DistillError` (bad input, named with what would be valid)
ends the program with ``PROG: error: MESSAGE`` and exit status 1, never a traceback.
"""
import argparse
import sys
from typing import Callable, Optional, TypeVar

from fairseq_distill.errors import DistillError

T = TypeVar("T")


# exit status of a program ended by Ctrl-C (128 + SIGINT), as shells report it
INTERRUPTED = 130


def run_cli(prog: str, body: Callable[[], T], on_interrupt: str = "") -> T:
    """Call ``body()``; on a user error print ``PROG: error: ...`` and exit with status 1. On
    Ctrl-C print one line, ``on_interrupt`` (what was kept and how to go on), and exit 130."""
    from fairseq_distill.workdir import no_space_error

    try:
        return body()
    except DistillError as e:
        sys.exit(f"{prog}: error: {e}")
    except OSError as e:
        full = no_space_error(e)
        if full is None:
            raise
        sys.exit(f"{prog}: error: {full}")
    except KeyboardInterrupt:
        print(f"\n{prog}: interrupted; {on_interrupt or 'nothing of this run is kept'}", file=sys.stderr)
        sys.exit(INTERRUPTED)


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """``--help`` as every fsd-* tool shows it: the docstring's layout kept, and each option's
    default beside it (unless the option has none, is a plain on/off flag, or its help already
    says it)."""

    def _get_help_string(self, action):
        text = action.help or ""
        if text == "%(default)s":
            return "default: %(default)s"
        if ("%(default)" in text or "default" in text.lower() or not action.option_strings
                or action.default in (None, False, "", argparse.SUPPRESS)):
            return text
        return f"{text} (default: %(default)s)".strip()

    def _format_action(self, action):
        if action.help is None and action.option_strings and action.default not in (None, False, "",
                                                                                     argparse.SUPPRESS):
            action.help = "%(default)s"  # argparse shows no help line, so no default, for an option without help
        return super()._format_action(action)


def first_paragraph(doc: str) -> str:
    """A docstring's first paragraph as one line (a description that stops mid-sentence is what
    splitting at the first newline gave)."""
    return " ".join(doc.strip().split("\n\n")[0].split()).replace("``", "")


def cli_parser(doc: str, epilog: Optional[str] = None, description: Optional[str] = None,
               full_doc: bool = True) -> argparse.ArgumentParser:
    """The parser of a front end whose module docstring is ``doc``: its first paragraph as the
    description, the whole docstring (or ``epilog``) after the options when ``full_doc``."""
    return argparse.ArgumentParser(description=description or first_paragraph(doc), formatter_class=HelpFormatter,
                                   epilog=(epilog or doc) if full_doc else None)
