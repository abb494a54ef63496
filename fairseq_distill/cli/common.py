"""What every command-line front end shares: turning a user error into one clear line.

A front end parses its arguments and calls the library inside :func:`run_cli`; a
:class:`~fairseq_distill.errors.DistillError` (bad input, named with what would be valid)
ends the program with ``PROG: error: MESSAGE`` and exit status 1, never a traceback.
"""
import sys
from typing import Callable, TypeVar

from fairseq_distill.errors import DistillError

T = TypeVar("T")


def run_cli(prog: str, body: Callable[[], T]) -> T:
    """Call ``body()``; on a user error print ``PROG: error: ...`` and exit with status 1."""
    try:
        return body()
    except DistillError as e:
        sys.exit(f"{prog}: error: {e}")
