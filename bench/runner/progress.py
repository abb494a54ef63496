"""What a person running a recipe sees: one line per step (what runs, how far it is, how
long it took, what it scored), while each tool's full output goes to the step's log file.

On a terminal a training run's progress line is updated in place; otherwise (a pipe, a log
file) one line is printed per epoch. A failed command shows the end of its log.
"""
import re
import sys
import time
from typing import Optional

from fairseq_distill.progress import duration

EPOCH_PROGRESS = re.compile(r"\| train_inner \| epoch (\d+):\s+(\d+) / (\d+)")
EPOCH_SUMMARY = re.compile(r"\| (train|valid) \| epoch (\d+) \|(.*)")
STAT = re.compile(r"(\w+) ([-\d.]+)$")
# a tqdm bar (fsd-evaluate and fsd-seqkd draw one while fairseq-generate decodes)
COUNTER = re.compile(r"^\s*([^:|]+?):\s+\d+%\|.*?\|\s*(\d+)/(\d+)")


def tail(path: str, lines: int = 30) -> str:
    with open(path, encoding="utf-8", errors="replace") as f:
        return "".join(f.readlines()[-lines:])


class Terminal:
    """Prints whole lines; on a terminal, one line at a time can be updated in place."""

    def __init__(self, stream=None):
        self.stream = stream or sys.stdout
        self.tty = self.stream.isatty()
        self.pending = False  # an in-place line is showing

    def say(self, text: str) -> None:
        if self.pending:
            self.stream.write("\r\033[K")
            self.pending = False
        self.stream.write(text + "\n")
        self.stream.flush()

    def update(self, text: str) -> None:
        """Progress within a step: in place on a terminal, dropped otherwise."""
        if self.tty:
            self.stream.write("\r\033[K" + text)
            self.stream.flush()
            self.pending = True


class TrainingProgress:
    """Follows fairseq-train's output: epoch k/N, updates within it, and each epoch's losses."""

    def __init__(self, terminal: Terminal, label: str, max_epoch: Optional[int]):
        self.terminal = terminal
        self.label = label
        self.max_epoch = max_epoch
        self.started = time.time()
        self.valid_loss = None

    def epoch(self, k) -> str:
        return f"epoch {int(k)}/{self.max_epoch}" if self.max_epoch else f"epoch {int(k)}"

    def __call__(self, line: str) -> None:
        inner = EPOCH_PROGRESS.search(line)
        if inner:
            k, done, total = inner.groups()
            self.terminal.update(f"{self.label}: {self.epoch(k)}, {done}/{total} batches "
                                 f"({duration(time.time() - self.started)})")
            return
        summary = EPOCH_SUMMARY.search(line)
        if not summary:
            return
        subset, k, rest = summary.groups()
        stats = dict(m.groups() for m in (STAT.search(field.strip()) for field in rest.split("|")) if m)
        if subset == "valid":
            self.valid_loss = stats.get("loss")
            return
        losses = ", ".join(f"{name} {value}" for name, value in stats.items() if name.endswith("loss"))
        valid = f"; valid loss {self.valid_loss}" if self.valid_loss else ""
        self.terminal.say(f"{self.label}: {self.epoch(k)}: {losses}{valid} "
                          f"({duration(time.time() - self.started)})")
        self.valid_loss = None


class CountProgress:
    """Follows a tool's progress bar: ``decode test 120/1000`` (on a terminal only)."""

    def __init__(self, terminal: Terminal, label: str):
        self.terminal = terminal
        self.label = label
        self.started = time.time()

    def __call__(self, line: str) -> None:
        bar = COUNTER.search(line)
        if bar:
            what, done, total = bar.groups()
            self.terminal.update(f"{self.label}: {what} {done}/{total} ({duration(time.time() - self.started)})")
