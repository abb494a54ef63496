"""``--task translation_distill``: fairseq's translation task with frozen teachers attached.

What it gives a distillation criterion, in one hand-off when the criterion is built
(:meth:`distill_context`): the teachers, the teacher cache, and the layouts of the student it
built and of the teacher (for terms that size projections). Later it tells the criterion
fairseq's training progress (``set_epoch`` at the start of every epoch, ``set_num_updates``
before every training step) for scheduled weights.

The task owns the teachers: it loads them once (:meth:`load_teacher`), when a criterion that
needs them is built, which only training does: ``fairseq-generate`` and validation never load
or run them. With ``--teacher-cache`` (made by ``fsd-cache-teacher``) word-level KD reads the
teacher's stored top-k distributions instead (:meth:`load_teacher_cache`), and with word-level
KD alone no teacher is loaded; the cache is checked against the dictionary when opened,
against the teachers when both are used, and against the training subset when it is loaded.

The data directory is checked as it is read: a missing dictionary when the task is set up, a
subset's missing ``.bin`` or ``.idx`` when the subset is loaded, each named (fairseq fails on
them with a traceback, or trains on a subset without its targets).
"""
import logging
import os
from dataclasses import dataclass, field
from typing import Optional, Sequence

from fairseq import utils
from fairseq.data import data_utils
from fairseq.tasks import register_task
from fairseq.tasks.translation import TranslationConfig, TranslationTask

from fairseq_distill.data_bin import DICTIONARIES_KEY, check_dictionaries, check_subset
from fairseq_distill.errors import DistillError
from fairseq_distill.features import stack_shape
from fairseq_distill.teacher.frozen import TeacherEnsemble
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


@dataclass
class DistillContext:
    """What the task hands a distillation criterion when it is built."""

    teachers: Optional[TeacherEnsemble]  # None when word-level KD reads a teacher cache alone
    teacher_cache: Optional[TeacherCache]
    student_shape: Optional[dict]  # features.stack_shape of the student; None: not a layered Transformer
    teacher_shape: Optional[dict]  # the same of the (first) teacher, when a term reads its inner features


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

    @classmethod
    def setup_task(cls, cfg, **kwargs):
        path = utils.split_paths(cfg.data)[0] if cfg.data else None
        if path and os.path.isdir(path):
            src, tgt = cfg.source_lang, cfg.target_lang
            if src is None or tgt is None:
                src, tgt = data_utils.infer_language_pair(path)
            if src and tgt:
                check_dictionaries(path, src, tgt)
        return super().setup_task(cfg, **kwargs)

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
        # the criterion is built after the model and from the task alone: keep what it needs
        self.student_shape = stack_shape(model)
        return model

    def distill_context(self, criterion_name: str, term_names: Sequence[str]) -> DistillContext:
        """Teachers, cache and layouts for a criterion summing ``term_names``: the teachers are
        loaded unless word-level KD alone reads a teacher cache; a cache used beside teachers
        must come from them (``--allow-cache-of-another-teacher`` to override)."""
        cache = self.load_teacher_cache()
        word_kd_only = tuple(term_names) == ("word_kd",)
        teachers = None
        if cache is None or not word_kd_only:
            teachers = self.load_teacher(criterion_name)
        if cache is not None and teachers is not None:
            cache.check_teachers(teachers.paths, [n for n in term_names if n != "word_kd"],
                                 self.cfg.allow_cache_of_another_teacher)
        teacher_shape = stack_shape(teachers.models[0]) if teachers is not None and not word_kd_only else None
        return DistillContext(teachers, cache, self.student_shape, teacher_shape)

    def build_criterion(self, cfg, *args, **kwargs):
        criterion = super().build_criterion(cfg, *args, **kwargs)
        self.criterion = criterion
        if not self.cfg.teacher_path or self.teacher is not None:
            return criterion  # a distillation criterion took the teachers from distill_context
        if self.teacher_cache is not None:
            logger.info(f"--teacher-path is not loaded: word-level KD reads {self.teacher_cache.describe()}")
        else:
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
        paths = utils.split_paths(self.cfg.data)
        if paths and self.cfg.dataset_impl != "raw":
            check_subset(paths[(epoch - 1) % len(paths)], split, self.cfg.source_lang, self.cfg.target_lang)
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
