"""Results without machine paths: what a results file says of a file is relative to the work dir
(or the repository), never where one machine kept it.

Results are committed and read on other machines; an absolute path there names a directory of the
machine that ran the benchmark (``/work/benchwork/papers/runs/…``), which means nothing elsewhere
and tells a reader about that machine. :func:`portable` rewrites every absolute path in a results
object: under a given root (the work dir, the repository) it becomes relative to that root;
a path under a work dir of another machine keeps its part below that work dir (``runs/…``,
``data/…``, ``caches/…``); anything else absolute keeps only its file name, marked ``<elsewhere>/``.
"""
import os
import re
from typing import Iterable

# the folders a runner work dir holds: a path through one of them is kept from that folder on
WORK_DIR_PARTS = ("runs", "data", "caches", "seqkd", "paired-tests", "analyses")
ABSOLUTE = re.compile(r"^/[^\s]*$")


def portable_path(path: str, roots: Iterable[str] = ()) -> str:
    if not isinstance(path, str) or not ABSOLUTE.match(path):
        return path
    for root in roots:
        root = os.path.abspath(root)
        if path == root or path.startswith(root + os.sep):
            return os.path.relpath(path, root)
    parts = path.split("/")
    for i, part in enumerate(parts):
        if part in WORK_DIR_PARTS and i > 1:
            return "/".join(parts[i:])
    return "<elsewhere>/" + os.path.basename(path.rstrip("/"))


def portable(obj, roots: Iterable[str] = ()):
    """``obj`` (JSON-like) with every absolute path string made portable."""
    roots = list(roots)
    if isinstance(obj, dict):
        return {k: portable(v, roots) for k, v in obj.items()}
    if isinstance(obj, list):
        return [portable(v, roots) for v in obj]
    return portable_path(obj, roots)
