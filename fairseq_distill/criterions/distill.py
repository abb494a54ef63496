"""``--criterion distill``: label-smoothed cross-entropy plus a weighted sum of KD terms.

    loss = w_CE·CE_ls + Σ_terms w_term·term

Terms (:mod:`fairseq_distill.terms`): word-level KD (``word_kd``), one layer-KD term
(``pkd``, ``ckd`` or ``alp_kd``) and attention KD (``a2d``), chosen with ``--distill-terms``;
``--criterion word_kd|pkd|ckd|alp_kd|a2d`` are this criterion with their paper's terms and
defaults (:mod:`fairseq_distill.criterions.presets`). Unless ``--ce-weight`` is given,
w_CE = 1 − the weights of word-level and layer KD; attention KD comes on top.

The forward pass, the single teacher call, the weighting and the logging live here once.
Logged per term: ``<term>_loss`` (its raw value) and ``<term>_weighted`` (weight × value;
with ``ce_weighted`` they add up to ``loss``), and ``<term>_weight`` for a scheduled weight.
Validation runs neither the teacher nor any term: its ``loss``/``nll_loss`` are those of
plain label-smoothed cross-entropy, so checkpoints compare with non-KD training.

The task builds the criterion, then tells it fairseq's epoch and update number
(:meth:`set_epoch`, :meth:`set_num_updates`), which scheduled weights follow.
"""
import logging
import math
from typing import Dict, Optional, Tuple

import torch.nn as nn
from fairseq import metrics
from fairseq.criterions import register_criterion
from fairseq.criterions.label_smoothed_cross_entropy import (
    LabelSmoothedCrossEntropyCriterion,
    label_smoothed_nll_loss,
)
from torch import Tensor

from fairseq_distill.collapse import CollapseWatch
from fairseq_distill.criterions.options import DistillConfig
from fairseq_distill.errors import OTHER_DISTILL_OPTIONS, DistillError
from fairseq_distill.features import FeatureRequest, Features, run_with_features, unwrap_model
from fairseq_distill.terms import TermContext
from fairseq_distill.terms.base import batch_sample_size
from fairseq_distill.terms.registry import build_terms, parse_term_names, upgrade_criterion_keys

logger = logging.getLogger(__name__)

PLAIN_KEYS = ("loss", "nll_loss")


@register_criterion("distill", dataclass=DistillConfig)
class DistillationCriterion(LabelSmoothedCrossEntropyCriterion):
    """CE plus weighted distillation terms; a preset fixes :attr:`TERMS`."""

    TERMS: Optional[Tuple[str, ...]] = None  # None: from --distill-terms
    needs_teacher = True

    def __init__(self, task, cfg):
        super().__init__(task, cfg.sentence_avg, cfg.label_smoothing, cfg.ignore_prefix_size,
                         cfg.report_accuracy)
        name = getattr(cfg, "_name", None) or "distill"
        if not hasattr(task, "distill_context"):
            raise DistillError(f"criterion {name} needs --task translation_distill (with --teacher-path); "
                               f"got task {type(task).__name__}")
        names = self.TERMS or parse_term_names(cfg.distill_terms)
        handed = task.distill_context(name, names)
        # word-level KD from a cache alone runs no teacher: it is not even loaded
        self.needs_teacher = handed.teachers is not None
        context = TermContext(
            teachers=handed.teachers, student_shape=handed.student_shape, teacher_shape=handed.teacher_shape,
            source_pad=task.source_dictionary.pad(), target_pad=self.padding_idx,
            ignore_prefix_size=self.ignore_prefix_size, sentence_avg=self.sentence_avg,
            teacher_cache=handed.teacher_cache,
        )
        self.teachers = handed.teachers  # the task's: not a module here, never optimised, cast or saved
        self.terms = nn.ModuleDict(build_terms(names, cfg, context))
        self.explicit_ce_weight = cfg.ce_weight
        # absent from the stored options of checkpoints written before the check existed
        self.collapse_watch = CollapseWatch(window=getattr(cfg, "collapse_window", 100),
                                            stop=getattr(cfg, "stop_on_collapse", False))
        if self.collapse_watch.stop:
            check_something_to_watch(self.collapse_watch.window, list(self.terms),
                                     int(getattr(cfg, "max_update", 0) or 0))
        self.reset_parameters_on_load = cfg.reset_distill_parameters
        self.reset_optimizer = bool(getattr(cfg, "reset_optimizer", False))
        shared = sum(t.weight for t in self.terms.values() if t.shares_ce_budget)
        if self.explicit_ce_weight is None and shared > 1:
            parts = " + ".join(f"{t.name} {t.weight}" for t in self.terms.values() if t.shares_ce_budget)
            raise DistillError(f"the KD weights ({parts}) exceed 1, leaving the cross-entropy a "
                               f"negative weight; lower them or give --ce-weight explicitly")

    # -- the collapse watch's state travels with the criterion's parameters -----------------

    def get_extra_state(self):
        return {"collapse_watch": self.collapse_watch.state_dict()}

    def set_extra_state(self, state):
        if isinstance(state, dict):
            self.collapse_watch.load_state_dict(state.get("collapse_watch", {}))

    # -- training progress, told by the task ------------------------------------------------

    def set_epoch(self, epoch: int):
        for term in self.terms.values():
            term.begin_epoch(epoch)

    def set_num_updates(self, num_updates: int):
        for term in self.terms.values():
            term.num_updates = num_updates

    # -- the loss ---------------------------------------------------------------------------

    def active_terms(self) -> Dict[str, nn.Module]:
        return {name: t for name, t in self.terms.items() if t.current_weight() > 0}

    def feature_request(self, terms) -> FeatureRequest:
        request = FeatureRequest()
        for term in terms.values():
            request = request | term.request
        return request

    def ce_weight(self, terms) -> float:
        if not terms:
            return 1.0
        if self.explicit_ce_weight is not None:
            return self.explicit_ce_weight
        return 1.0 - sum(t.current_weight() for t in terms.values() if t.shares_ce_budget)

    def label_smoothed_ce(self, model, student: Features, sample, reduce=True) -> Tuple[Tensor, Tensor]:
        """fairseq's ``compute_loss``, from the student's log-probabilities computed once per forward."""
        lprobs = student.log_probs
        target = model.get_targets(sample, student.net_output)
        if self.ignore_prefix_size > 0:
            lprobs, target = lprobs[:, self.ignore_prefix_size :], target[:, self.ignore_prefix_size :]
        return label_smoothed_nll_loss(
            lprobs.reshape(-1, lprobs.size(-1)), target.reshape(-1), self.eps,
            ignore_index=self.padding_idx, reduce=reduce,
        )

    def term_values(self, terms, student: Features, teachers, sample) -> Dict[str, Tensor]:
        return {name: term(student, teachers, sample) for name, term in terms.items()}

    def forward(self, model, sample, reduce=True):
        terms = self.active_terms() if model.training else {}
        request = self.feature_request(terms)
        student = run_with_features(model, sample["net_input"], request)
        # computed once: the CE term and (at τ = 1) the word-level KD term share them
        student.log_probs = model.get_normalized_probs(student.net_output, log_probs=True)
        ce_loss, nll_loss = self.label_smoothed_ce(model, student, sample, reduce=reduce)

        values = {}
        if terms:
            teachers = []
            if any(t.reads_teacher for t in terms.values()):
                like = next(unwrap_model(model).parameters())
                teachers = self.teachers.features(sample["net_input"], request, like)
            values = self.term_values(terms, student, teachers, sample)
        ce_weight = self.ce_weight(terms)
        weighted = {name: terms[name].current_weight() * value for name, value in values.items()}
        loss = ce_weight * ce_loss
        for value in weighted.values():
            loss = loss + value

        sample_size = batch_sample_size(sample, self.sentence_avg)
        logging_output = {
            "loss": loss.data,
            "nll_loss": nll_loss.data,
            "ntokens": sample["ntokens"],
            "nsentences": sample["target"].size(0),
            "sample_size": sample_size,
        }
        if values:
            logging_output["ce_loss"] = ce_loss.data
            logging_output["ce_weighted"] = (ce_weight * ce_loss).data
        for name, value in values.items():
            logging_output[f"{name}_loss"] = value.data
            logging_output[f"{name}_weighted"] = weighted[name].data
            if terms[name].scheduled:  # the current weight, averaged exactly in reduce_metrics
                logging_output[f"{name}_weight"] = terms[name].current_weight() * sample_size
        if self.report_accuracy:
            n_correct, total = self.compute_accuracy(model, student.net_output, sample)
            logging_output["n_correct"] = n_correct.data.item()
            logging_output["total"] = total.data.item()
        return loss, sample_size, logging_output

    @classmethod
    def reduce_metrics(cls, logging_outputs) -> None:
        super().reduce_metrics(logging_outputs)
        sample_size = sum(log.get("sample_size", 0) for log in logging_outputs)
        keys = {k for log in logging_outputs for k in log}
        for name in sorted(keys):
            total = sum(log.get(name, 0) for log in logging_outputs)
            if (name.endswith("_loss") and name not in PLAIN_KEYS) or name.endswith("_weighted"):
                # base 2, like fairseq's loss and nll_loss
                metrics.log_scalar(name, total / max(sample_size, 1) / math.log(2), sample_size, round=3)
            elif name.endswith("_weight"):
                metrics.log_scalar(name, total / max(sample_size, 1), sample_size, round=4)

    @staticmethod
    def logging_outputs_can_be_summed() -> bool:
        return True

    # -- checkpoints ------------------------------------------------------------------------

    def load_state_dict(self, state_dict, strict=True, *args, **kwargs):
        """Load learned term parameters saved by this criterion (or by version 0.1), with an
        error that says what to do when they were trained with other options."""
        if state_dict is None:  # the checkpoint's criterion had no learned parameters
            learned = ", ".join(sorted({k.split(".")[1] for k, _ in self.named_parameters()}))
            if not self.reset_optimizer:
                raise DistillError(
                    f"the checkpoint has no parameters for this run's {learned} term (it was trained "
                    f"without it), and its optimizer state cannot hold them: resume with --reset-optimizer "
                    f"(the model weights are kept; the {learned} parameters, the optimizer and the update "
                    f"count start afresh), or start a new --save-dir")
            logger.info(f"the checkpoint has no parameters for the {learned} term: they start afresh")
            return nn.modules.module._IncompatibleKeys([], [])
        if self.reset_parameters_on_load:
            return nn.modules.module._IncompatibleKeys([], [])
        state_dict = upgrade_criterion_keys(state_dict, list(self.terms))
        state_dict = self.check_loss_forms(state_dict)
        # written before the watch's state was kept: it starts afresh
        state_dict.setdefault("_extra_state", {"collapse_watch": {}})
        project = next((t.project for t in self.terms.values() if hasattr(t, "project")), None)
        check_criterion_state(self.state_dict(), state_dict, project)
        return super().load_state_dict(state_dict, strict, *args, **kwargs)

    def check_loss_forms(self, state_dict: dict) -> dict:
        """Refuse a resume whose options would read the saved parameters differently (each
        term's :meth:`~fairseq_distill.terms.base.DistillationTerm.loss_form`); a checkpoint
        written before the forms were recorded gets this run's, with a warning."""
        state_dict = dict(state_dict)
        for name, term in self.terms.items():
            key, ours = f"terms.{name}._extra_state", term.loss_form()
            saved = state_dict.get(key)
            if saved is None:
                if ours and any(k.startswith(f"terms.{name}.") for k in state_dict):
                    options = " ".join(f"{k} {v}" for k, v in ours.items())
                    logger.warning(f"the checkpoint does not record the options its {name} parameters were "
                                   f"trained with (it predates the record); they are read as this run's: "
                                   f"{options}. If it was trained otherwise, resume with its options")
                state_dict[key] = {"loss_form": ours}
                continue
            theirs = saved.get("loss_form", {}) if isinstance(saved, dict) else {}
            differ = [(k, theirs[k], v) for k, v in ours.items() if k in theirs and theirs[k] != v]
            if differ:
                # the first option that differs is named; the rest may follow from it
                (option, old, new), rest = differ[0], differ[1:]
                then = f"{option} {old}" + (f" ({', '.join(f'{k} {o}' for k, o, _ in rest)})" if rest else "")
                now = f"{option} {new}" + (f" ({', '.join(f'{k} {n}' for k, _, n in rest)})" if rest else "")
                again = " ".join(f"{k} {o}" for k, o, _ in differ) if option != "--ckd-form" else f"{option} {old}"
                raise DistillError(
                    f"the checkpoint's {name} parameters were trained with {then}, this run uses {now}, "
                    f"which would read them differently: resume with {again}, or start them afresh with "
                    f"--reset-distill-parameters --reset-optimizer")
        return state_dict


def check_something_to_watch(window: int, terms, max_update: int = 0):
    """--stop-on-collapse needs a watch that can judge: a window, a term that can collapse, and
    a run long enough for two windows (a term is judged against its highest window)."""
    from fairseq_distill.collapse import WATCHED_TERMS

    if window == 0:
        raise DistillError("--stop-on-collapse has nothing to watch: --collapse-window 0 turns the watch off; give "
                           "a window of N updates (default 100)")
    watched = [t for t in terms if t in WATCHED_TERMS]
    if not watched:
        raise DistillError(f"--stop-on-collapse has nothing to watch: it watches layer and attention KD terms "
                           f"(pkd, ckd, alp_kd, a2d), and this criterion has {', '.join(terms) or 'none'}")
    if max_update and max_update < 2 * window:
        raise DistillError(f"--stop-on-collapse judges windows of --collapse-window {window} updates against the "
                           f"highest before, and --max-update {max_update} leaves fewer than two: give a window of "
                           f"at most {max_update // 2} updates")


def other_side_projection(key: str, ours, saved, project: Optional[str]) -> str:
    """What to say when a layer map's saved weight is the transpose of ours: it maps the other
    side (pkd and alp_kd mapped the teacher's states by default before they mapped the
    student's)."""
    if not project or ".fusers." not in key or ours.dim() != 2 or ours.shape[0] == ours.shape[1] \
            or tuple(saved.shape) != tuple(reversed(ours.shape)):
        return ""
    other = "teacher" if project == "student" else "student"
    return (f"; the checkpoint's layer projection maps the {other}'s states (--layer-project {other}), "
            f"this run maps the {project}'s (--layer-project {project}): resume with "
            f"--layer-project {other}. In general")


def check_criterion_state(ours: dict, saved: dict, layer_project: Optional[str] = None):
    advice = OTHER_DISTILL_OPTIONS
    missing, unexpected = sorted(set(ours) - set(saved)), sorted(set(saved) - set(ours))
    if missing or unexpected:
        raise DistillError(f"criterion parameters do not match: missing from the checkpoint "
                           f"{missing or 'none'}, in the checkpoint but not built now {unexpected or 'none'}; "
                           f"{advice}")
    for key, value in ours.items():
        if key.endswith("_extra_state"):  # the loss forms, checked before
            continue
        if tuple(value.shape) != tuple(saved[key].shape):
            side = other_side_projection(key, value, saved[key], layer_project)
            raise DistillError(f"criterion parameter '{key}' has shape {tuple(saved[key].shape)} in the "
                               f"checkpoint but {tuple(value.shape)} now{side}: {advice}")

