"""Collapse detection: a layer or attention KD term that a learned map can satisfy without the
student learning anything.

When a learned projection sits on the teacher's side of a layer loss (or a student narrower
than its teacher must match a target it shapes itself), the projection and the student can
settle on one constant vector: the term's loss falls towards zero while the student stops
improving at translation. The criterion's weights then reward the collapse (layer KD takes
most of the loss), and the run ends far below training without KD.

:class:`CollapseWatch` reads the training statistics fairseq aggregates every update (summed
over data-parallel workers, so every worker decides alike) in windows of ``window`` updates,
and flags a term whose per-token loss in a window has fallen to at most ``fraction`` of the
highest window value it had: it has vanished. A healthy layer loss compares the student with
states it cannot copy exactly and levels off far above that; in the collapsed demo-sized run
of ``bench/results/readme_defaults.md`` it went on falling towards zero while the training
NLL kept improving (slowly), so the NLL is reported but not part of the rule
(``tests/test_collapse.py`` replays those runs' logs). Attention KD compares with the teacher's own attention maps and a
student-side map with the teacher's own states: neither target can move, so their losses do
not vanish this way, but they are watched alike.

A flagged term is logged once as a warning naming the term and the fix; with
``--stop-on-collapse`` the run ends with that message (a
:class:`~fairseq_distill.errors.DistillError`, one line, no traceback), and so does a resumed
run at its first window: the watch's history travels in the checkpoint with the criterion's
parameters (:meth:`CollapseWatch.state_dict`), so the level a term collapsed from is not
forgotten. A run without learned criterion parameters has no criterion state in its
checkpoints; its terms compare with fixed teacher states, the case that does not collapse.
"""
import logging
import math
from typing import Dict, List, Optional

from fairseq_distill.errors import DistillError

logger = logging.getLogger(__name__)

# What to change, per logged term name (``<name>_loss``) that a learned map can satisfy by
# collapsing: the layer-KD and attention terms, and their names in logs written before the
# term registry (``layer``, ``attn``), which a replayed log may hold.
LAYER_REMEDY = ("map the student's state instead of the teacher's (--layer-project student; for ckd also "
                "--ckd-project student or --ckd-form released), or lower --layer-weight")
ATTENTION_REMEDY = "lower --a2d-weight (or decay it faster with --a2d-decay-updates)"
REMEDIES = {"pkd": LAYER_REMEDY, "ckd": LAYER_REMEDY, "alp_kd": LAYER_REMEDY, "a2d": ATTENTION_REMEDY,
            "layer": LAYER_REMEDY, "attn": ATTENTION_REMEDY}
WATCHED_TERMS = tuple(REMEDIES)
LABELS = {"layer": "layer KD", "attn": "attention KD"}


class CollapseWatch:
    def __init__(self, window: int = 100, fraction: float = 0.05, stop: bool = False):
        if window < 0:
            raise DistillError(f"--collapse-window must be >= 0 (0 turns the check off), got {window}")
        self.window, self.fraction, self.stop = window, fraction, stop
        self.calls = self.updates = 0
        self.sums: Dict[str, float] = {}
        self.history: Dict[str, List[float]] = {}  # per-token window means: "nll" and each term
        self.flagged: Dict[str, str] = {}

    @property
    def enabled(self) -> bool:
        return self.window > 0

    def observe(self, logging_outputs, num_updates: Optional[int] = None) -> Optional[str]:
        """One update's aggregated logging outputs (fairseq's, after the workers' sum); ``num_updates``:
        the update count to report (default: the calls so far). Returns the warning when a term is
        flagged in this update (once per term)."""
        if not self.enabled:
            return None
        terms = [t for t in WATCHED_TERMS if any(f"{t}_loss" in log for log in logging_outputs)]
        if not terms:
            return None  # a validation step, or no term that can collapse
        for log in logging_outputs:
            for key in ["nll_loss", "ntokens", "sample_size"] + [f"{t}_loss" for t in terms]:
                self.sums[key] = self.sums.get(key, 0.0) + float(log.get(key, 0) or 0)
        self.calls += 1
        self.updates = num_updates if num_updates is not None else self.calls
        if self.calls % self.window:
            return None
        sums, self.sums = self.sums, {}
        self.record("nll", sums["nll_loss"] / max(sums["ntokens"], 1) / math.log(2))
        for term in terms:
            self.record(term, sums[f"{term}_loss"] / max(sums["sample_size"], 1) / math.log(2))
        message = None
        for term in terms:
            if not self.collapsed(term):
                continue
            if self.stop:  # also a term flagged before a resume
                raise DistillError(self.flagged.get(term) or self.describe(term) + " (--stop-on-collapse)")
            if term not in self.flagged:
                self.flagged[term] = message = self.describe(term)
                logger.warning(message)
        return message

    def state_dict(self) -> dict:
        """What a resumed run needs to go on judging: the windows so far and the flagged terms."""
        return {"calls": self.calls, "updates": self.updates, "sums": dict(self.sums),
                "history": {k: list(v) for k, v in self.history.items()}, "flagged": dict(self.flagged)}

    def load_state_dict(self, state: dict):
        if not state:
            return
        self.calls, self.updates = int(state.get("calls", 0)), int(state.get("updates", 0))
        self.sums = dict(state.get("sums", {}))
        self.history = {k: list(v) for k, v in state.get("history", {}).items()}
        self.flagged = dict(state.get("flagged", {}))

    def record(self, name: str, value: float):
        self.history.setdefault(name, []).append(value)

    def collapsed(self, term: str) -> bool:
        values = self.history[term]
        return len(values) > 1 and values[-1] <= self.fraction * max(values)

    def describe(self, term: str) -> str:
        values, nll = self.history[term], self.history["nll"]
        return (f"the {LABELS.get(term, term)} term is collapsing after {self.updates} updates: its loss fell to "
                f"{values[-1]:.4g} per token, {values[-1] / max(values):.1%} of its highest ({max(values):.4g}; "
                f"training NLL {nll[0]:.3f} -> {nll[-1]:.3f}): a learned map lets the term vanish without "
                f"the student learning the teacher's states. Change it: {REMEDIES[term]}")


def replay_log(text: str, window: int = 4, **options) -> Dict[str, str]:
    """Run the check over a finished fairseq-train log (``--log-format simple``): each
    ``train_inner`` line's ``nll_loss`` and term losses (already per token, base 2) count as one
    update, so ``window`` counts log lines. Returns the flagged terms and their messages (what
    the same run would have logged with a window of ``window`` log intervals)."""
    watch = CollapseWatch(window=window, **options)
    for line in text.splitlines():
        if "| train_inner |" not in line:
            continue
        fields = dict(part.split("=", 1) for part in line.split("| train_inner |")[1].replace(",", " ").split()
                      if "=" in part)
        if "nll_loss" not in fields:
            continue
        log = {"nll_loss": float(fields["nll_loss"]) * math.log(2), "ntokens": 1, "sample_size": 1}
        for term in WATCHED_TERMS:
            if f"{term}_loss" in fields:
                log[f"{term}_loss"] = float(fields[f"{term}_loss"]) * math.log(2)
        watch.observe([log], int(fields["num_updates"]) if "num_updates" in fields else None)
    return dict(watch.flagged)
