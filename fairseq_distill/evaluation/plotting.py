"""matplotlib for the analysis tools, headless, with a clear error when it is missing."""
import logging

from fairseq_distill.errors import DistillError


def pyplot():
    try:
        # importing fairseq sets the root logger to DEBUG (fairseq/models/wav2vec/
        # wav2vec2_classification.py), which would flood the output with font-search lines
        logging.getLogger("matplotlib").setLevel(logging.WARNING)
        logging.getLogger("PIL").setLevel(logging.WARNING)
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise DistillError("plots need matplotlib: pip install matplotlib (or the package's [test] extra)")
    return plt
