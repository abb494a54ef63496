"""A2D's attention weight over a run: its value at an epoch or update, its course over this run
(stated at start-up), for how many updates it acts, and a warning for a run too short for the
term to have been seen to help, given before hours are spent on it.

Schedules (``--a2d-decay-schedule``, ``--a2d-decay-updates``):

* ``run``: β·decay^(e − 1) with e stepping from 1 to the authors' 100 epochs over this run, by
  updates where ``--max-update`` bounds it, else by whole epochs;
* ``epoch``: the paper's β·decay^(epoch − 1);
* ``--a2d-decay-updates N`` (any schedule): β·decay^(updates/N), continuous.

The term "acts" while its weight is at least :data:`ACTIVE_SHARE` of β.
"""
import math
from dataclasses import dataclass
from typing import List, Optional, Tuple

# the authors' runs: --max-epoch 100 (train_student.sh), so their weight falls to 0.9^99·β
AUTHORS_EPOCHS = 100
ACTIVE_SHARE = 0.1  # the term acts while its weight is at least this share of β
# Runs of fewer updates warn: in the papers' setting the term added nothing to its own word-level
# KD in runs this short, whatever its schedule, and cost BLEU where it acted longer
# (docs/methods/a2d.md#run-length has the measured rows behind this bound).
SHORT_RUN_UPDATES = 1000
COURSE_POINTS = 6  # the most points of the start-up line


@dataclass(frozen=True)
class DecaySchedule:
    weight: float
    decay: float
    schedule: str  # "run" or "epoch"
    decay_updates: int = 0
    max_epoch: int = 0
    max_update: int = 0

    @property
    def by_updates(self) -> bool:
        """True where the weight follows the update counter (else fairseq's epoch)."""
        return bool(self.decay_updates) or (self.schedule == "run" and self.max_update > 0)

    def at(self, epoch: int, num_updates: int) -> float:
        if self.decay_updates:
            return self.weight * self.decay ** (num_updates / self.decay_updates)
        if self.schedule == "epoch":
            return self.weight * self.decay ** (epoch - 1)
        return self.weight * self.decay ** ((AUTHORS_EPOCHS - 1) * self.run_fraction(epoch, num_updates))

    def run_fraction(self, epoch: int, num_updates: int) -> float:
        """How far the run is, 0 at its start and 1 at its end: by updates where --max-update
        bounds it, else by whole epochs (the first epoch 0, the last 1), as the paper steps."""
        if self.max_update:
            return min(1.0, num_updates / self.max_update)
        if self.max_epoch <= 1:
            return 0.0
        return min(1.0, (epoch - 1) / (self.max_epoch - 1))

    def describe(self) -> str:
        if self.decay_updates:
            return f"weight β·{self.decay}^(updates/{self.decay_updates})"
        if self.schedule == "epoch":
            return f"weight β·{self.decay}^(epoch − 1)"
        unit = f"{self.max_update} updates" if self.max_update else f"{self.max_epoch} epochs"
        return (f"weight β·{self.decay}^(e − 1), e running from 1 to {AUTHORS_EPOCHS} (the authors' run "
                f"length) over this run's {unit}")

    def course(self) -> str:
        """The start-up line's account of the weight over this run: at epochs 1, 2, … (the last
        one where the run's length is known, '…' over a gap), or at quarters of --max-update (at
        multiples of N without it): 'β 1 (epoch 1) → 0.031 (epoch 2) → …'."""
        if self.by_updates:
            if self.max_update:
                updates = [round(self.max_update * q / 4) for q in range(5)]
            else:
                updates = [0] + [k * self.decay_updates for k in (1, 5, 10, 20)]
            points = [f"{self.at(1, u):.2g} (update {u})" for u in updates]
        else:
            last = self.max_epoch or max(2, self.epochs_acting(limit=200) + 1)
            epochs = list(range(1, min(last, COURSE_POINTS - 1) + 1))
            points = [f"{self.at(e, 0):.2g} (epoch {e})" for e in epochs]
            if last > epochs[-1]:
                points += (["…"] if last > epochs[-1] + 1 else []) + [f"{self.at(last, 0):.2g} (epoch {last})"]
        return "β " + " → ".join(points)

    def epochs_acting(self, limit: Optional[int] = None) -> int:
        """Epochs of an epoch-stepped schedule whose weight is at least ACTIVE_SHARE of β."""
        last = self.max_epoch or limit or 10_000
        return sum(1 for e in range(1, last + 1) if self.at(e, 0) >= ACTIVE_SHARE * self.weight)

    def updates_acting(self, updates_per_epoch: Optional[float] = None) -> Optional[float]:
        """For how many updates the weight stays at least ACTIVE_SHARE of β (math.inf: for ever);
        an epoch-stepped schedule needs the run's updates per epoch (None while unknown)."""
        if self.weight <= 0:
            return 0.0
        if self.by_updates:
            if self.decay >= 1:
                return float(self.max_update or math.inf)
            if self.decay <= 0:
                return 0.0
            exponent = math.log(ACTIVE_SHARE) / math.log(self.decay)  # decay^x = share
            span = (exponent * self.decay_updates if self.decay_updates
                    else min(1.0, exponent / (AUTHORS_EPOCHS - 1)) * self.max_update)
            return min(span, self.max_update) if self.max_update else span
        if updates_per_epoch is None:
            return None
        if not self.max_epoch and self.decay >= 1:
            return math.inf
        return self.epochs_acting() * updates_per_epoch

    def run_updates(self, updates_per_epoch: Optional[float] = None) -> Optional[float]:
        """This run's length in updates: --max-update, or --max-epoch times the updates of an
        epoch (the smaller where both bound it); None while unknown (no bound, or an epoch-bounded
        run before its first epoch has shown how many updates an epoch has)."""
        lengths = [self.max_update] if self.max_update else []
        if self.max_epoch and updates_per_epoch is not None:
            lengths.append(self.max_epoch * updates_per_epoch)
        return min(lengths) if lengths else None

    def short_run_warning(self, updates_per_epoch: Optional[float] = None) -> Optional[str]:
        """A warning for a run of fewer than SHORT_RUN_UPDATES updates, with the term's span
        and what was measured in runs that short; None otherwise, while the run's length is
        unknown, or with the term off."""
        length = self.run_updates(updates_per_epoch)
        if length is None or length >= SHORT_RUN_UPDATES or self.weight <= 0:
            return None
        span = self.updates_acting(updates_per_epoch)  # None: an epoch-stepped weight before an epoch has run
        acting = "" if span is None else f"the attention term acts, at ≥ {ACTIVE_SHARE:g}·β, for about {span:.0f} of them: "
        return (f"a2d: this run is short (about {length:.0f} updates; {acting}{self.course()}). In runs under "
                f"{SHORT_RUN_UPDATES} updates the term has not been seen to add to its own word-level KD, "
                f"and keeping it longer (--a2d-decay-updates N, a --a2d-decay closer to 1, "
                f"--a2d-decay-schedule epoch) cost BLEU (docs/methods/a2d.md#run-length). For a run this "
                f"short, --a2d-weight 0 (its word-level KD alone); for the term to help, a longer run")
