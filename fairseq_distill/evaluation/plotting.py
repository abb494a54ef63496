"""matplotlib for the analysis tools, headless, with a clear error when it is missing."""
import logging
from typing import Tuple

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


def image_formats():
    """The file extensions matplotlib writes, without the dot (png, pdf, svg, ...)."""
    pyplot()
    from matplotlib.backend_bases import FigureCanvasBase

    return sorted(FigureCanvasBase.get_supported_filetypes())


def check_heatmap_outputs(out: str, inputs, tool: str, is_own) -> Tuple[str, bool]:
    """A heat-map tool's ``--out`` (the image) and the JSON of its matrices beside it
    (``STEM.json``): neither is, contains or lies inside one of ``inputs`` (``(name, path)``
    pairs), the image has a format matplotlib writes, and what is there is this tool's earlier heat
    map (``is_own`` recognises its JSON), never another file. Returns the JSON's path and whether
    an earlier heat map is replaced."""
    import os

    from fairseq_distill.workdir import check_earlier_output, check_outputs

    record = os.path.splitext(out)[0] + ".json"
    check_outputs([("--out", out), ("--out: its JSON", record)], inputs)
    stem = os.path.splitext(out)[0]
    if os.path.abspath(record) == os.path.abspath(out):
        raise DistillError(f"--out {out}: {record} is where the matrices go (beside the image, as STEM.json); "
                           f"give the image's path, e.g. --out {stem}.png")
    ext = os.path.splitext(out)[1].lstrip(".").lower()
    formats = image_formats()
    if ext and ext not in formats:
        raise DistillError(f"--out {out}: .{ext} is not an image format matplotlib writes; end it in one of "
                           f"{', '.join('.' + f for f in formats)}, e.g. --out {stem}.png")
    check_earlier_output("--out", out, [record, out], tool, "the heat map", is_own)
    return record, os.path.exists(record)


def write_heatmap(out: str, record: str, matrices: dict, plot):
    """``plot(matrices, path)`` draws the image; it and the matrices' JSON are written aside and
    moved into place together, the JSON last."""
    import json

    from fairseq_distill.workdir import files_written_aside

    with files_written_aside(out, record) as (image, data):
        plot(matrices, image)
        with open(data, "w", encoding="utf-8") as f:
            json.dump(matrices, f, indent=2)
