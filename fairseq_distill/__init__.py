"""fairseq_distill: a fairseq ``--user-dir`` plugin for knowledge distillation.

Importing the package registers its tasks, criterions and models with fairseq
(fairseq auto-imports ``tasks/`` and ``models/`` of a user dir, but not ``criterions/``).
"""
from fairseq_distill import quiet

quiet.install()  # before fairseq is imported below: its tasks log on import
from fairseq_distill import compat  # noqa: E402,F401  (first of the rest: checkpoint loading on torch >= 2.6)
from fairseq_distill import criterions, launch_checks, models, tasks, user_errors  # noqa: E402,F401

user_errors.install()
launch_checks.check_training_launch()

__version__ = "0.1.0"
