"""matplotlib for the analysis tools, headless, with a clear error when it is missing."""
from fairseq_distill.errors import DistillError


def pyplot():
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise DistillError("plots need matplotlib: pip install matplotlib (or the package's [test] extra)")
    return plt
