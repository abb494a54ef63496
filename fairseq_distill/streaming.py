"""Work on corpora too large to hold: fixed-size chunks of lines, mapped in order through worker
processes with a bounded number of chunks in flight.

``multiprocessing.Pool.imap`` would read its whole input ahead into the task queue, so its memory
grows with the corpus; :func:`bounded_map` submits a chunk only once an earlier one is collected.
"""
from collections import deque
from itertools import islice
from typing import Iterable, Iterator, List


def chunks(items: Iterable, size: int) -> Iterator[List]:
    """``items`` as lists of ``size`` (the last one shorter)."""
    it = iter(items)
    while True:
        chunk = list(islice(it, size))
        if not chunk:
            return
        yield chunk


def bounded_map(function, jobs: Iterable, pool=None, window: int = 4) -> Iterator:
    """``map(function, jobs)`` in order: on ``pool`` (a ``multiprocessing`` pool) when given, with
    at most ``window`` jobs submitted and not yet collected."""
    if pool is None:
        yield from map(function, jobs)
        return
    pending = deque()
    for job in jobs:
        pending.append(pool.apply_async(function, (job,)))
        while len(pending) >= window:
            yield pending.popleft().get()
    while pending:
        yield pending.popleft().get()
