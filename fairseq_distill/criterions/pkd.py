"""``--criterion pkd``: Patient KD (Sun et al., 2019) for translation models.

Each student layer j is matched to one teacher layer: by default the evenly spaced
"skip" map (for 6 → 2: teacher layers 3 and 6), or any one-layer-per-group ``--layer-map``.
Different widths get a learned linear projection of the teacher state. The states are
unit-normalised before the MSE (``--layer-normalize l2``, the default here), as in the
paper: with ``none`` and a learned projection both sides can shrink towards a constant
(measured on Multi30k, 6+6 d=128 teacher → 2+2 d=64 student: 5.49 BLEU, against 25.10
without KD).
"""
from dataclasses import dataclass, field

from fairseq.dataclass import ChoiceEnum

from fairseq.criterions import register_criterion

from fairseq_distill.criterions.ckd import CombinationFuser
from fairseq_distill.criterions.layer_kd import LayerKDConfig, LayerKDCriterion
from fairseq_distill.errors import DistillError


@dataclass
class PKDConfig(LayerKDConfig):
    layer_normalize: ChoiceEnum(["none", "l2"]) = field(
        default="l2", metadata={"help": "l2: unit-normalise each vector before the MSE (the PKD paper)"}
    )


@register_criterion("pkd", dataclass=PKDConfig)
class PKDCriterion(LayerKDCriterion):
    default_map = "skip"

    def build_fuser(self, cfg, groups, student_dim, teacher_dim):
        wide = [g for g in groups if len(g) > 1]
        if wide:
            raise DistillError(f"pkd matches each student layer to one teacher layer; the map has "
                               f"group {{{','.join(map(str, wide[0]))}}}: use --criterion ckd for groups")
        return CombinationFuser(groups, student_dim, teacher_dim, "teacher", self.layer_normalize)
