"""What every command-line front end shares: turning a user error into one clear line.

A front end parses its arguments and calls the library inside :func:`run_cli`; a
:class:`~fairseq_distill.errors.DistillError` (bad input, named with what would be valid)
ends the program with ``PROG: error: MESSAGE`` and exit status 1, never a traceback.
"""
import sys
from typing import Callable, TypeVar

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
