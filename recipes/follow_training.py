"""fairseq-train's output passed through, with a line after each epoch saying how long the run has
taken and about how long its budget still needs: what the recipes' training stages show.

    fairseq-train ... 2>&1 | python recipes/follow_training.py --max-epoch 20 --max-update 0 --tag "[teacher]"

The estimate is the mean time of the epochs (or updates) this run has made so far, so a run resumed
from its checkpoint_last.pt counts only its own. Only the standard library: the plugin's import
would cost seconds before the first line.
"""
import argparse
import re
import sys
import time

# fairseq's epoch summary (--log-format simple): "| train | epoch 003 | loss 6.1 | ... | num_updates 390 | ..."
EPOCH_SUMMARY = re.compile(r"\| train \| epoch (\d+) \|")
UPDATES = re.compile(r"\| num_updates (\d+)")


def duration(seconds: float) -> str:
    seconds = max(0, int(round(seconds)))
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"


class Budget:
    """How far a run is through ``max_epoch`` epochs or ``max_update`` updates (0: no such limit)."""

    def __init__(self, max_epoch: int, max_update: int, clock=time.monotonic):
        self.max_epoch, self.max_update, self.clock = max_epoch, max_update, clock
        self.started = clock()
        self.first_epoch = self.first_updates = None  # where this run (perhaps a resume) began
        self.updates = None

    def line(self, text: str):
        """The estimate to print after ``text``, if it is an epoch's summary."""
        end = EPOCH_SUMMARY.search(text)
        if not end:
            return None
        epoch = int(end.group(1))
        seen = UPDATES.search(text)
        self.updates = int(seen.group(1)) if seen else None
        if self.first_epoch is None:  # what the run had made before it (a resume), at its first epoch's rate
            self.first_epoch = epoch - 1
            self.first_updates = 0 if self.updates is None else self.updates * (epoch - 1) // epoch
        elapsed = self.clock() - self.started
        left = []
        if self.max_epoch and epoch > self.first_epoch:
            left.append(elapsed / (epoch - self.first_epoch) * max(0, self.max_epoch - epoch))
        if self.max_update and self.updates and self.first_updates is not None and self.updates > self.first_updates:
            left.append(elapsed / (self.updates - self.first_updates) * max(0, self.max_update - self.updates))
        where = f"epoch {epoch}" + (f"/{self.max_epoch}" if self.max_epoch else "")
        if self.max_update and self.updates is not None:
            where += f", {self.updates:,}/{self.max_update:,} updates"
        estimate = f"; about {duration(min(left))} left" if left else ""
        return f"{where} done, {duration(elapsed)} in this run{estimate}"


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--max-epoch", type=int, default=0)
    p.add_argument("--max-update", type=int, default=0)
    p.add_argument("--tag", default="[train]")
    args = p.parse_args(argv)
    budget = Budget(args.max_epoch, args.max_update)
    for text in sys.stdin:
        sys.stdout.write(text)
        said = budget.line(text)
        if said:
            sys.stdout.write(f"{args.tag} {said}\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
