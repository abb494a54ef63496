"""User errors inside fairseq's own programs end in one clear line, not a traceback.

``fairseq-train`` and ``fairseq-generate`` are fairseq's mains, so a
:class:`~fairseq_distill.errors.DistillError` raised while they build our task, criterion or
model (a bad option, a teacher that does not fit, a checkpoint trained with other options)
would otherwise print a traceback, sometimes wrapped by fairseq in a generic exception
("Cannot load model parameters from checkpoint ..."). Importing the plugin installs this
hook: an uncaught exception that is, or was raised while handling, a DistillError prints
``PROG: error: MESSAGE`` and the program exits with status 1. Every other exception keeps
Python's usual report.
"""
import os
import sys

from fairseq_distill.errors import DistillError


def find_user_error(exc):
    """The DistillError in ``exc``'s chain of causes and contexts, if any."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, DistillError):
            return exc
        seen.add(id(exc))
        exc = exc.__cause__ or exc.__context__
    return None


def program_name() -> str:
    name = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else "fairseq"
    return name[:-3] if name.endswith(".py") else name


def install():
    previous = sys.excepthook
    if getattr(previous, "reports_distill_errors", False):
        return

    def hook(exc_type, exc, tb):
        error = find_user_error(exc)
        if error is None:
            return previous(exc_type, exc, tb)
        print(f"{program_name()}: error: {error}", file=sys.stderr)

    hook.reports_distill_errors = True
    sys.excepthook = hook
