"""``--task translation_distill``: fairseq's translation task with frozen teachers attached.

What it gives a distillation criterion: the teachers (:meth:`load_teacher`), the layout
of the student it built (:attr:`student_shape`, for terms that size projections), and
fairseq's training progress, told to the criterion it built (``set_epoch`` at the start of
every epoch, ``set_num_updates`` before every training step) for scheduled weights.

The teachers are loaded when a criterion that needs them is built (``needs_teacher``),
which only training does: ``fairseq-generate`` and validation never load or run them.
With ``--teacher-cache`` (made by ``fsd-cache-teacher``) word-level KD reads the teacher's
stored top-k distributions instead (:meth:`load_teacher_cache`); the cache is checked
against the dictionary when opened and against the training subset when it is loaded.
"""
import logging
from dataclasses import dataclass, field
from typing import Optional

from fairseq.tasks import register_task
from fairseq.tasks.translation import TranslationConfig, TranslationTask

from fairseq_distill.errors import DistillError
from fairseq_distill.features import stack_shape
from fairseq_distill.teacher.frozen import DICTIONARIES_KEY, TeacherEnsemble
from fairseq_distill.teacher.cache import TeacherCache

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
    teacher_cache: str = field(
        default="",
        metadata={"help": "directory made by fsd-cache-teacher: word-level KD reads the teacher's "
                  "top-k distributions from it instead of running the teacher (with word-level KD "
                  "alone the teacher is not loaded)"},
    )
    allow_cache_of_another_teacher: bool = field(
        default=False,
        metadata={"help": "let word-level KD read a --teacher-cache made from another teacher than "
                  "--teacher-path, which the layer or attention terms run (refused otherwise)"},
    )
    allow_size_only_dictionary_check: bool = field(
        default=False,
        metadata={"help": "accept a teacher whose dictionaries cannot be found (not in the checkpoint, "
                  "no training data directory) after comparing vocabulary sizes only"},
    )


@register_task("translation_distill", dataclass=TranslationDistillConfig)
class TranslationDistillTask(TranslationTask):
    cfg: TranslationDistillConfig

    def __init__(self, cfg, src_dict, tgt_dict):
        super().__init__(cfg, src_dict, tgt_dict)
        self.teacher: Optional[TeacherEnsemble] = None
        self.teacher_cache: Optional[TeacherCache] = None
        # (layers, width) per side and (layers, heads) per attention type of the student
        self.student_shape: Optional[dict] = None
        self.criterion = None  # the criterion this task built, told the training progress

    def begin_epoch(self, epoch, model):
        super().begin_epoch(epoch, model)
        if hasattr(self.criterion, "set_epoch"):
            self.criterion.set_epoch(epoch)

    def train_step(self, sample, model, criterion, optimizer, update_num, ignore_grad=False):
        self.announce_update(criterion, update_num)
        return super().train_step(sample, model, criterion, optimizer, update_num, ignore_grad)

    def announce_update(self, criterion, update_num):
        # data-parallel training hands train_step the criterion wrapped for DDP (when it has
        # parameters); tell the one this task built, not whatever the wrapper forwards
        target = self.criterion if self.criterion is not None else criterion
        if hasattr(target, "set_num_updates"):
            target.set_num_updates(update_num)

    def reduce_metrics(self, logging_outputs, criterion):
        super().reduce_metrics(logging_outputs, criterion)
        # every update's statistics, summed over the workers: each worker decides alike
        watch = getattr(self.criterion, "collapse_watch", None)
        if watch is not None:
            watch.observe(logging_outputs)

    def build_model(self, cfg, *args, **kwargs):
        model = super().build_model(cfg, *args, **kwargs)
        try:
            self.student_shape = stack_shape(model)
        except (AttributeError, ValueError):
            self.student_shape = None  # not a layered Transformer: layer KD will say so
        return model

    def build_criterion(self, cfg, *args, **kwargs):
        criterion = super().build_criterion(cfg, *args, **kwargs)
        self.criterion = criterion
        if getattr(criterion, "needs_teacher", False):
            self.load_teacher(criterion_name=getattr(cfg, "_name", type(criterion).__name__))
        elif self.cfg.teacher_path and self.teacher_cache is not None:
            logger.info(f"--teacher-path is not loaded: word-level KD reads {self.teacher_cache.describe()}")
        elif self.cfg.teacher_path:
            logger.warning(
                f"--teacher-path is set but criterion {type(criterion).__name__} does not use a "
                f"teacher; it is not loaded"
            )
        return criterion

    def load_teacher_cache(self) -> Optional[TeacherCache]:
        """The ``--teacher-cache`` (None without one), opened once and checked against the
        target dictionary and, if already loaded, the training subset."""
        if self.teacher_cache is None and self.cfg.teacher_cache:
            self.teacher_cache = TeacherCache(self.cfg.teacher_cache)
            self.teacher_cache.check_dictionary(self.tgt_dict)
            train = self.cfg.train_subset
            if train in self.datasets:
                self.teacher_cache.check_dataset(train, self.datasets[train])
            logger.info(f"word-level KD reads {self.teacher_cache.describe()}")
        return self.teacher_cache

    def load_dataset(self, split, epoch=1, combine=False, **kwargs):
        super().load_dataset(split, epoch=epoch, combine=combine, **kwargs)
        if self.teacher_cache is not None and split == self.cfg.train_subset:
            self.teacher_cache.check_dataset(split, self.datasets[split])

    def load_teacher(self, criterion_name: str = "this criterion") -> TeacherEnsemble:
        if self.teacher is None:
            if not self.cfg.teacher_path:
                raise DistillError(
                    f"criterion {criterion_name} distils from a teacher: pass --teacher-path "
                    f"CHECKPOINT (or several separated by ':')"
                )
            self.teacher = TeacherEnsemble.load(self.cfg.teacher_path, self,
                                                self.cfg.allow_size_only_dictionary_check)
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
