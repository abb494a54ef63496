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

from fairseq_distill.errors import OTHER_DISTILL_OPTIONS, DistillError


# fairseq loads a criterion's state only if the criterion has parameters (Trainer.load_checkpoint),
# so a run resumed with options under which the criterion has none (e.g. a layer map of single
# teacher layers at the student's width) never reaches the criterion's own check; torch then
# refuses the optimizer state. The model loaded strictly before that, so the difference is in the
# criterion's parameters: say so, with the remedy.
OPTIMIZER_GROUP_MISMATCH = "doesn't match the size of optimizer's group"


# fairseq's own check when a run resumes with another criterion class (say word_kd's checkpoint
# resumed with --criterion ckd, or --reset-distill-parameters alone): an AssertionError
CRITERION_MISMATCH = "Criterion does not match; please reset the optimizer (--reset-optimizer)."


def translated(exc):
    """A DistillError for a foreign error whose cause is a user's option, else None."""
    if isinstance(exc, ValueError) and OPTIMIZER_GROUP_MISMATCH in str(exc):
        return DistillError(f"the checkpoint's optimizer state holds another number of parameters than "
                            f"this run builds: {OTHER_DISTILL_OPTIONS}")
    if isinstance(exc, AssertionError) and str(exc).startswith(CRITERION_MISMATCH):
        names = str(exc)[len(CRITERION_MISMATCH):].strip().split("\n")[0]
        return DistillError(f"the checkpoint was trained with another criterion ({names.replace(' vs ', ', this run: ')}), "
                            f"and its optimizer state belongs to that one: resume with --reset-optimizer (the model "
                            f"weights are kept; the optimizer, its update count and any new criterion parameters "
                            f"start afresh), or start a new --save-dir")
    return None


def find_user_error(exc):
    """The DistillError in ``exc``'s chain of causes and contexts (or one that a known foreign
    error there stands for), if any."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, DistillError):
            return exc
        error = translated(exc)
        if error is not None:
            return error
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
