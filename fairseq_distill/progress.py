"""Progress lines for long work: how far, how fast, and about how long is left.

A data tool at WMT size runs for many minutes; a line every ``every`` seconds says where it is,
so a user can tell a slow step from a stuck one and plan around it. Nothing is printed for work
that ends before the first interval: short runs (and the tests) stay quiet.
"""
import time
from typing import Callable, Optional


def duration(seconds: float) -> str:
    """``seconds`` for a person: ``45s``, ``12m05s``, ``3h07m``."""
    seconds = max(0, int(round(seconds)))
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"


class Progress:
    """Counts ``unit`` done out of ``total`` (``None``: unknown) and reports every ``every`` seconds:
    ``[tag] what: 1,200,000 of 4,500,000 pairs (27%), 3,400 pairs/s, 16m10s left``.

    ``measure`` lets the rate and the ETA follow another quantity than the count (e.g. bytes read of
    a file whose line count is not known yet): ``update(n, measure=bytes_so_far)`` with
    ``measure_total`` given."""

    def __init__(self, tag: str, what: str, total: Optional[int] = None, unit: str = "lines",
                 report: Callable[[str], None] = print, every: float = 30.0,
                 measure_total: Optional[float] = None, clock: Callable[[], float] = time.monotonic):
        self.tag, self.what, self.total, self.unit = tag, what, total, unit
        self.report, self.every, self.clock = report, every, clock
        self.measure_total = measure_total
        self.done = 0
        self.measure = 0.0
        self.started = self.last = clock()

    def update(self, n: int = 1, measure: Optional[float] = None):
        self.done += n
        if measure is not None:
            self.measure = measure
        now = self.clock()
        if now - self.last >= self.every:
            self.last = now
            self.report(self.line(now))

    def fraction(self) -> Optional[float]:
        if self.measure_total:
            return min(self.measure / self.measure_total, 1.0)
        if self.total:
            return min(self.done / self.total, 1.0)
        return None

    def line(self, now: Optional[float] = None) -> str:
        now = self.clock() if now is None else now
        elapsed = max(now - self.started, 1e-9)
        rate = self.done / elapsed
        of = f" of {self.total:,}" if self.total is not None else ""
        text = f"[{self.tag}] {self.what}: {self.done:,}{of} {self.unit}"
        fraction = self.fraction()
        if fraction is not None:
            text += f" ({100 * fraction:.0f}%)"
        text += f", {rate:,.0f} {self.unit}/s"
        if fraction:
            text += f", about {duration(elapsed * (1 - fraction) / fraction)} left"
        return text
