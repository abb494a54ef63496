"""``--criterion pkd``: Patient KD (Sun et al., 2019) for translation models.

Each student layer j is matched to one teacher layer: by default the evenly spaced
"skip" map (for 6 → 2: teacher layers 3 and 6), or any one-layer-per-group ``--layer-map``.
Different widths get a learned linear projection of the teacher state. With
``--layer-normalize l2`` the states are unit-normalised first, as in the paper.
"""
from dataclasses import dataclass

from fairseq.criterions import register_criterion

from fairseq_distill.criterions.ckd import CombinationFuser
from fairseq_distill.criterions.layer_kd import LayerKDConfig, LayerKDCriterion
from fairseq_distill.errors import DistillError


@dataclass
class PKDConfig(LayerKDConfig):
    pass


@register_criterion("pkd", dataclass=PKDConfig)
class PKDCriterion(LayerKDCriterion):
    default_map = "skip"

    def build_fuser(self, cfg, groups, student_dim, teacher_dim):
        wide = [g for g in groups if len(g) > 1]
        if wide:
            raise DistillError(f"pkd matches each student layer to one teacher layer; the map has "
                               f"group {{{','.join(map(str, wide[0]))}}}: use --criterion ckd for groups")
        return CombinationFuser(groups, student_dim, teacher_dim, "teacher", self.layer_normalize)
