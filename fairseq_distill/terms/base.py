"""What every distillation term shares: its context, its weight and its interface."""
from dataclasses import dataclass
from typing import List, Optional

import torch.nn as nn
from torch import Tensor

from fairseq_distill.errors import DistillError
from fairseq_distill.features import FeatureRequest, Features


@dataclass
class TermContext:
    """What a term may need to know when it is built: the frozen teachers, the layout of
    the student and of the (first) teacher (see :func:`~fairseq_distill.features.stack_shape`),
    and the padding indices and target prefix of the data."""

    teachers: object  # a TeacherEnsemble; None when word-level KD reads a teacher cache alone
    student_shape: Optional[dict]
    teacher_shape: Optional[dict]
    source_pad: int
    target_pad: int
    ignore_prefix_size: int = 0
    sentence_avg: bool = False
    teacher_cache: Optional[object] = None  # a TeacherCache (--teacher-cache), for word-level KD

    def single_teacher(self, term: str):
        if len(self.teachers) != 1:
            raise DistillError(f"{term} distils the inner features of one teacher; --teacher-path "
                               f"names {len(self.teachers)}")

    def student_layout(self, term: str) -> dict:
        if self.student_shape is None:
            raise DistillError(f"{term} needs a layered Transformer student (an encoder and a "
                               f"decoder with .layers)")
        return self.student_shape

    def teacher_layout(self, term: str) -> dict:
        if self.teacher_shape is None:
            raise DistillError(f"{term} needs a layered Transformer teacher (an encoder and a "
                               f"decoder with .layers)")
        return self.teacher_shape


class DistillationTerm(nn.Module):
    """One weighted KD term. Subclasses set :attr:`name` (logged as ``<name>_loss``) and
    implement :meth:`forward`.

    ``shares_ce_budget``: the term's weight is taken from the cross-entropy's share
    (CE weight = 1 − Σ such weights unless ``--ce-weight`` is given), as word-level KD and
    layer KD do in their papers; otherwise it comes on top (A2D's attention term).
    """

    name = "term"
    shares_ce_budget = True
    scheduled = False  # True: the weight changes during training, and is logged
    reads_teacher = True  # False: needs no teacher forward pass (word-level KD from a cache)

    def __init__(self, weight: float):
        super().__init__()
        self.weight = float(weight)
        self.epoch = 1        # fairseq's 1-based epoch, set by the criterion
        self.num_updates = 0

    @property
    def request(self) -> FeatureRequest:
        """Features beyond the logits that this term reads from student and teachers."""
        return FeatureRequest()

    def current_weight(self) -> float:
        return self.weight

    def begin_epoch(self, epoch: int):
        """fairseq starts ``epoch`` (``num_updates`` holds the updates run so far)."""
        self.epoch = epoch

    def loss_form(self) -> dict:
        """The options that give the term's learned parameters their meaning ({option: value},
        e.g. which side a layer map projects). Saved with them (as the module's extra state) so
        that a resume under other options is refused instead of reinterpreting them."""
        return {}

    def get_extra_state(self):
        return {"loss_form": self.loss_form()}

    def set_extra_state(self, state):
        self.loaded_form = dict(state.get("loss_form", {})) if isinstance(state, dict) else {}

    def forward(self, student: Features, teachers: List[Features], sample) -> Tensor:
        """The term's value for a batch at the scale of a sum over its positions (the criterion
        divides everything by ``sample_size``): summed over the positions it covers, or, for a
        term defined per token (A2D's paper form), its mean times ``sample_size``."""
        raise NotImplementedError


def batch_sample_size(sample, sentence_avg: bool) -> int:
    """fairseq's gradient denominator for a batch: sentences with --sentence-avg, else target tokens."""
    return sample["target"].size(0) if sentence_avg else sample["ntokens"]


def check_fraction(name: str, value: float):
    if not 0.0 <= value <= 1.0:
        raise DistillError(f"{name} must be between 0 and 1, got {value}")
