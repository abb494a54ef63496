"""``--task translation_distill``: fairseq's translation task with frozen teachers attached.

The teachers are loaded when a criterion that needs them is built (``needs_teacher``),
which only training does: ``fairseq-generate`` and validation never load or run them.
"""
import logging
from dataclasses import dataclass, field
from typing import Optional

from fairseq.tasks import register_task
from fairseq.tasks.translation import TranslationConfig, TranslationTask

from fairseq_distill.errors import DistillError
from fairseq_distill.features import stack_shape
from fairseq_distill.teacher import DICTIONARIES_KEY, TeacherEnsemble

logger = logging.getLogger(__name__)


@dataclass
class TranslationDistillConfig(TranslationConfig):
    teacher_path: str = field(
        default="",
        metadata={
            "help": "teacher checkpoint(s); several separated by ':' form an ensemble "
            "whose probabilities are averaged"
        },
    )


@register_task("translation_distill", dataclass=TranslationDistillConfig)
class TranslationDistillTask(TranslationTask):
    cfg: TranslationDistillConfig

    def __init__(self, cfg, src_dict, tgt_dict):
        super().__init__(cfg, src_dict, tgt_dict)
        self.teacher: Optional[TeacherEnsemble] = None
        # (layers, width) per side and (layers, heads) per attention type of the student,
        # for criterions that size projections
        self.student_shape: Optional[dict] = None
        # fairseq's 1-based epoch (restored on resume), for criterions with epoch schedules
        self.epoch = 1

    def begin_epoch(self, epoch, model):
        super().begin_epoch(epoch, model)
        self.epoch = epoch

    def build_model(self, cfg, *args, **kwargs):
        model = super().build_model(cfg, *args, **kwargs)
        try:
            self.student_shape = stack_shape(model)
        except (AttributeError, ValueError):
            self.student_shape = None  # not a layered Transformer: layer KD will say so
        return model

    def build_criterion(self, cfg, *args, **kwargs):
        criterion = super().build_criterion(cfg, *args, **kwargs)
        if getattr(criterion, "needs_teacher", False):
            self.load_teacher(criterion_name=getattr(cfg, "_name", type(criterion).__name__))
        elif self.cfg.teacher_path:
            logger.warning(
                f"--teacher-path is set but criterion {type(criterion).__name__} does not use a "
                f"teacher; it is not loaded"
            )
        return criterion

    def load_teacher(self, criterion_name: str = "this criterion") -> TeacherEnsemble:
        if self.teacher is None:
            if not self.cfg.teacher_path:
                raise DistillError(
                    f"criterion {criterion_name} distils from a teacher: pass --teacher-path "
                    f"CHECKPOINT (or several separated by ':')"
                )
            self.teacher = TeacherEnsemble.load(self.cfg.teacher_path, self)
        return self.teacher

    # The dictionaries travel in every checkpoint (task_state), so that a student can be
    # checked against its own students later without its data directory.
    def state_dict(self):
        state = dict(super().state_dict() or {})
        state[DICTIONARIES_KEY] = {
            "source": list(self.src_dict.symbols),
            "target": list(self.tgt_dict.symbols),
        }
        return state

    def load_state_dict(self, state_dict):
        state_dict = {k: v for k, v in (state_dict or {}).items() if k != DICTIONARIES_KEY}
        super().load_state_dict(state_dict)
