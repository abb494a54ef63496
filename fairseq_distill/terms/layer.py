"""Intermediate-layer KD: ``Σ_sides Σ_(j, G_j) Σ_positions D(h_s^j, F_j(h_t^G_j))``.

``D`` is the squared difference of the pair reduced over the hidden dimension d
(``--layer-mse-reduction``): ``sum``, the squared L2 distance ‖s − t‖², or ``mean``, the
mean-square error (1/d)·‖s − t‖²; with ``--layer-normalize l2`` both vectors are first scaled to
unit length. Positions, student layers and sides are summed (the criterion divides by
``sample_size``).

One term for PKD (Sun et al., 2019), CKD (Wu et al., EMNLP 2020) and ALP-KD (Passban et
al., AAAI 2021). Each method's defaults (its class's ``DEFAULTS``: :class:`PKDTerm`, :class:`CKDTerm`,
:class:`ALPKDTerm`) are its paper's form as written;
variants are named options, and an option given explicitly wins over the default:

* ``pkd``: student layer j ← one teacher layer (evenly spaced ``skip`` map), PKD's Eq. 3:
  the squared L2 distance (sum over d) of unit-normalised states (``l2``, ``sum``). PKD
  compares BERT's [CLS] state; here every real position is compared.
* ``ckd``: student layer j ← a group of teacher layers (``--ckd-combination`` presets, rc by
  default, or ``--layer-map``). ``--ckd-form released`` (default), the authors' released code,
  which produced the paper's numbers: the student state projected to the concatenated teacher
  width (``--ckd-project student``), both unit-normalised, the squared difference summed over d;
  the teacher runs without gradient, so its states are a fixed target. ``--ckd-form paper``,
  the text of CKD's Eq. 3: the group's concatenated teacher states fused to the student width
  by a learned linear map, compared by MSE ("MSE() is the mean-square error function": mean
  over d), states not normalised. A target learned jointly with the student can settle with it
  on a constant, and did in every seed and map of ``configs/papers.yaml``; the authors' code
  never ran that form.
* ``alp_kd``: student layer j attends over the teacher layers of its group and is compared
  with the attention-weighted teacher state by MSE (Eq. 7, mean over d), not normalised.
  Default map ``alp``: every teacher layer (Eq. 6) for every student layer except the last,
  which gets no layer loss, as in the paper's experiments; ``--layer-map all`` includes the
  last student layer.

Where the widths differ a learned linear map bridges them, on the side ``--layer-project``
names. ``teacher`` maps the teacher's states to the student width: CKD's paper form (its
fused map), and a target that moves with the map, so that map and student can collapse onto
one vector or direction. ``student`` maps the student's state to the teacher width and keeps
the teacher's states a fixed target: the default of pkd and alp_kd, whose papers keep the
teacher's width in the student and so have no map to follow, of ``--ckd-form released``, and
of ckd's paper form where the widths differ (its paper's students keep the teacher's width, so
the paper form fuses the teacher side only there: :func:`default_projection`).
``--layer-freeze-projection`` keeps every such map at its random initialisation, a diagnostic:
a frozen teacher-side map is a fixed random target, which tells whether the map's learning or
its side alone makes the paper form collapse.

Layer l's state is the output of layer l before any final layer norm; the embedding output
(index 0) joins only with ``--kd-include-embedding``. Source positions count for the
encoder, target positions for the decoder. A student layer that a map leaves without
teacher layers (only the ``alp`` preset does) gets no layer loss, and that is logged.
"""
import logging
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Tuple

import torch.nn as nn
from fairseq.dataclass import ChoiceEnum
from torch import Tensor

from fairseq_distill.errors import DistillError
from fairseq_distill.features import FeatureRequest, Features
from fairseq_distill.layer_maps import format_layer_map, resolve_layer_map
from fairseq_distill.losses import MSE_REDUCTIONS
from fairseq_distill.terms.base import DistillationTerm, TermContext, check_fraction
from fairseq_distill.terms.fusers import AttentionFuser, CombinationFuser
from fairseq_distill.terms.registry import TERMS, register_term

logger = logging.getLogger(__name__)

SIDES = {"encoder": ("encoder",), "decoder": ("decoder",), "both": ("encoder", "decoder")}
# --ckd-form: what each form changes in ckd's defaults (CKDTerm.DEFAULTS)
CKD_FORMS = {
    "paper": {},
    "released": {"normalize": "l2", "reduction": "sum", "project": "student"},
}


@dataclass
class LayerKDOptions:
    layer_weight: float = field(default=0.7, metadata={"help": "λ, weight of the layer loss"})
    kd_side: ChoiceEnum(["encoder", "decoder", "both"]) = field(
        default="encoder", metadata={"help": "which stack's layers to match"}
    )
    layer_map: str = field(
        default="",
        metadata={"help": "encoder layer map, e.g. '1,2,3|4,5,6' or '1-3|4-6', or a preset (rc, oc, "
                  "sc, cc, interleave, skip, all, alp); default: the method's own (pkd: skip; ckd: "
                  "--ckd-combination; alp_kd: alp, the ALP-KD paper's pattern, every teacher layer "
                  "into every student layer but the last; 'all' includes the last)"},
    )
    decoder_layer_map: str = field(default="", metadata={"help": "the same for the decoder"})
    layer_normalize: Optional[ChoiceEnum(["none", "l2"])] = field(
        default=None,
        metadata={"help": "l2: unit-normalise each vector before comparing. Default: the method's own "
                  "(l2 for pkd, PKD's Eq. 3, and for ckd, its released form; none for alp_kd and for "
                  "--ckd-form paper)"},
    )
    layer_mse_reduction: Optional[ChoiceEnum(["sum", "mean"])] = field(
        default=None,
        metadata={"help": "how the squared difference of a state pair is reduced over the hidden "
                  "dimension d: sum (squared L2 distance, PKD's Eq. 3) or mean (the mean-square "
                  "error of the CKD and ALP-KD papers); positions and layers are summed either way. "
                  "Default: the method's own (sum for pkd and for ckd, its released form; mean for "
                  "alp_kd and for --ckd-form paper)"},
    )
    kd_include_embedding: bool = field(
        default=False, metadata={"help": "also match the embedding outputs (layer 0)"}
    )
    layer_freeze_projection: bool = field(
        default=False,
        metadata={"help": "keep the learned maps between the widths (and CKD's fused map) at their "
                  "random initialisation: a diagnostic of what makes a teacher-side map collapse"},
    )
    layer_project: Optional[ChoiceEnum(["teacher", "student"])] = field(
        default=None,
        metadata={"help": "which side a learned linear map brings to the other's width when they "
                  "differ: teacher (the teacher's states mapped to the student width; map and "
                  "student can collapse onto one vector) or student (the student's state mapped to "
                  "the teacher width; the teacher's states stay a fixed target). Default: student "
                  "for pkd, alp_kd and ckd's released form (their papers keep the teacher's width and "
                  "have no map); for --ckd-form paper, teacher where the widths are equal (its fused "
                  "map) and student where they differ; --ckd-project is ckd's name for it"},
    )


@dataclass
class CKDOptions:
    ckd_combination: ChoiceEnum(["rc", "oc", "sc", "cc", "interleave"]) = field(
        default="rc", metadata={"help": "preset layer map when --layer-map is not given: rc, oc, sc, "
                                "cc as in the paper's experiments (6 -> 2: cc = {1,3},{4,6}); "
                                "interleave: the CC of its Figure 2 (j, j+S, j+2S, ...)"}
    )
    ckd_form: ChoiceEnum(["released", "paper"]) = field(
        default="released",
        metadata={"help": "released (default): the authors' released code, which produced the paper's "
                  "numbers: the student state projected to the concatenated teacher width, both "
                  "unit-normalised, squared difference summed over d, the teacher's states a fixed "
                  "target; paper: the text of Eq. 3, a learned map of the concatenated teacher "
                  "states to the student width, compared by MSE (mean over d), no normalisation. "
                  "The paper form collapsed (the map and the student settle on a constant) in all "
                  "three seeds and all four maps of configs/papers.yaml, 15-16 BLEU below no KD. "
                  "Sets the defaults of --ckd-project (paper: teacher only where the widths are "
                  "equal), --layer-normalize and --layer-mse-reduction; given explicitly, those win"},
    )
    ckd_project: Optional[ChoiceEnum(["teacher", "student"])] = field(
        default=None,
        metadata={"help": "teacher: fuse the concatenated teacher states to the student width "
                  "(the paper); student: project the student state to k·d_t (the released code). "
                  "Default: that of --ckd-form where the student has the teacher's width, student "
                  "where the widths differ (the paper's students keep the teacher's width; a "
                  "teacher-side map collapsed narrower students)"},
    )


@dataclass
class ALPKDOptions:
    alp_score: ChoiceEnum(["dot", "scaled_dot", "cosine"]) = field(
        default="dot", metadata={"help": "attention score between student and teacher states"}
    )
    alp_granularity: ChoiceEnum(["token", "sentence"]) = field(
        default="token", metadata={"help": "attend per position, or with mean-pooled sentence vectors"}
    )


Pair = Tuple[int, Tuple[int, ...]]  # (student layer, teacher layers); 0 is the embedding


def default_projection(method: str, paper_side: str, sides, student_shape, teacher_shape) -> str:
    """The projection side when none is given: the method's own, except that a teacher-side map
    (CKD's fused map, Eq. 3) is the default only where the student keeps the teacher's width, as
    in the paper. For a narrower (or wider) student the student's state is mapped instead: with
    a teacher-side map, map and student collapsed onto one vector (issue 37, the layer_kd
    benchmark's teacher-side rows)."""
    if paper_side != "teacher":
        return paper_side
    differ = [(s, student_shape[s][1], teacher_shape[s][1]) for s in sides
              if student_shape[s][1] != teacher_shape[s][1]]
    if not differ:
        return paper_side
    side, s_dim, t_dim = differ[0]
    logger.info(f"{method}: the student (d={s_dim}) is {'narrower' if s_dim < t_dim else 'wider'} than the "
                f"teacher (d={t_dim}) on the {side} side, so its state is mapped to the teacher's width "
                f"(--ckd-project student); the paper's map of the teacher's states to the student's width "
                f"(--ckd-project teacher) can collapse when the widths differ")
    return "student"


class LayerKDTerm(DistillationTerm):
    """The layer loss of one method (``method``: a registered layer-KD term, whose class holds
    that method's defaults); ``from_config`` on a method's class builds it from the options."""

    # Per method, its paper's form as written: the layer map used when none is given, the state
    # normalisation, the reduction of the squared difference over d and the projection side.
    DEFAULTS: dict = {}
    # η of the word-level KD term beside any layer-KD term: CKD's NMT setting (Wu et al. 2020)
    PAIRED_KD_WEIGHT = 0.1

    def __init__(self, method: str, weight: float, context: TermContext, side: str = "encoder",
                 layer_map: str = "", decoder_layer_map: str = "", normalize: str = "",
                 include_embedding: bool = False, ckd_combination: str = "rc",
                 ckd_project: str = "", alp_score: str = "dot", alp_granularity: str = "token",
                 reduction: str = "", ckd_form: str = "released", layer_project: str = "",
                 freeze_projection: bool = False):
        """Empty ``normalize``, ``reduction``, ``layer_project``: the method's own (for ckd, that
        of ``ckd_form``); ``ckd_project`` is ckd's name for ``layer_project``."""
        methods = [n for n, spec in TERMS.items() if spec.family == FAMILY]
        if method not in methods:
            raise DistillError(f"unknown layer-KD method '{method}'; valid: {', '.join(methods)}")
        if ckd_form not in CKD_FORMS:
            raise DistillError(f"unknown --ckd-form '{ckd_form}'; valid: {', '.join(CKD_FORMS)}")
        check_fraction("--layer-weight", weight)
        super().__init__(weight)
        self.method = self.name = method
        self.ckd_form = ckd_form
        self.sides = SIDES[side]
        defaults = dict(TERMS[method].cls.DEFAULTS, **(CKD_FORMS[ckd_form] if method == "ckd" else {}))
        self.normalize = normalize or defaults["normalize"]
        self.reduction = reduction or defaults["reduction"]
        if self.reduction not in MSE_REDUCTIONS:
            raise DistillError(f"unknown --layer-mse-reduction '{self.reduction}'; valid: {', '.join(MSE_REDUCTIONS)}")
        # --ckd-project is ckd's own name for --layer-project; other methods ignore it
        ckd_project = ckd_project if method == "ckd" else ""
        if layer_project and ckd_project and layer_project != ckd_project:
            raise DistillError(f"--layer-project {layer_project} and --ckd-project {ckd_project} disagree; "
                               f"give one of them")
        self.source_pad, self.target_pad = context.source_pad, context.target_pad
        context.single_teacher(method)
        student_shape, teacher_shape = context.student_layout(method), context.teacher_layout(method)
        project = layer_project or ckd_project
        if not project:
            project = default_projection(method, defaults["project"], self.sides, student_shape, teacher_shape)
        if project not in ("teacher", "student"):
            raise DistillError(f"unknown --layer-project '{project}'; valid: teacher, student")
        self.project = project
        logger.info(f"{method} layer loss: {'unit-normalised' if self.normalize == 'l2' else 'raw'} states, "
                    f"squared difference {'summed' if self.reduction == 'sum' else 'averaged'} over the "
                    f"hidden dimension, {project}-side projection where the widths differ")
        default_map = ckd_combination if method == "ckd" else defaults["map"]

        self.pairs: Dict[str, List[Pair]] = {}
        fusers = {}
        for s in self.sides:
            (s_layers, s_dim), (t_layers, t_dim) = student_shape[s], teacher_shape[s]
            spec = (layer_map if s == "encoder" else decoder_layer_map) or default_map
            groups = resolve_layer_map(spec, t_layers, s_layers)
            logger.info(f"{method} {s} layer map ({t_layers} teacher -> {s_layers} student layers, "
                        f"'{spec}'): {format_layer_map(groups)}")
            unconnected = [j + 1 for j, g in enumerate(groups) if not g]
            if unconnected:
                logger.info(f"{method} {s}: no layer loss for student layer(s) "
                            f"{', '.join(map(str, unconnected))} of {s_layers}: the '{spec}' map connects "
                            f"no teacher layer to them")
            pairs = [(j + 1, g) for j, g in enumerate(groups) if g]
            if include_embedding:
                pairs.insert(0, (0, (0,)))
            self.pairs[s] = pairs
            groups = [g for _, g in pairs]
            if method == "alp_kd":
                fusers[s] = AttentionFuser(s_dim, t_dim, alp_score, alp_granularity, self.normalize,
                                           self.reduction, project, frozen=freeze_projection)
            else:
                if method == "pkd":
                    wide = [g for g in groups if len(g) > 1]
                    if wide:
                        raise DistillError(
                            f"pkd matches each student layer to one teacher layer; the map has group "
                            f"{{{','.join(map(str, wide[0]))}}}: use ckd for groups")
                fusers[s] = CombinationFuser(groups, s_dim, t_dim, project, self.normalize, self.reduction,
                                             frozen=freeze_projection)
        self.fusers = nn.ModuleDict(fusers)
        self.freeze_projection = freeze_projection
        if freeze_projection:
            frozen = [p for p in self.fusers.parameters()]
            for p in frozen:
                p.requires_grad_(False)
            logger.info(f"{method}: {len(frozen)} projection tensor(s) frozen at their initialisation "
                        f"(--layer-freeze-projection)" if frozen else
                        f"{method}: --layer-freeze-projection: no learned projection to freeze (equal "
                        f"widths, one teacher layer per student layer)")

    @classmethod
    def from_config(cls, cfg, context: TermContext, names: Sequence[str] = ()) -> "LayerKDTerm":
        return LayerKDTerm(
            cls.name, cfg.layer_weight, context, side=str(cfg.kd_side), layer_map=cfg.layer_map,
            decoder_layer_map=cfg.decoder_layer_map,
            # absent from the stored options of checkpoints written before they existed
            normalize=str(getattr(cfg, "layer_normalize", None) or ""),
            include_embedding=cfg.kd_include_embedding,
            ckd_combination=str(getattr(cfg, "ckd_combination", "rc")),
            ckd_project=str(getattr(cfg, "ckd_project", None) or ""),
            alp_score=str(getattr(cfg, "alp_score", "dot")),
            alp_granularity=str(getattr(cfg, "alp_granularity", "token")),
            reduction=str(getattr(cfg, "layer_mse_reduction", None) or ""),
            # checkpoints written before --ckd-form trained the paper form, its default then
            ckd_form=str(getattr(cfg, "ckd_form", None) or "paper"),
            layer_project=str(getattr(cfg, "layer_project", None) or ""),
            freeze_projection=bool(getattr(cfg, "layer_freeze_projection", False)))

    def loss_form(self) -> dict:
        # --ckd-form first: it sets the others' defaults, so a resume names it first
        form = {"--ckd-form": self.ckd_form} if self.method == "ckd" else {}
        form.update({"--layer-project": self.project, "--layer-normalize": self.normalize,
                     "--layer-mse-reduction": self.reduction})
        return form

    @property
    def request(self) -> FeatureRequest:
        return FeatureRequest(encoder_states="encoder" in self.sides, decoder_states="decoder" in self.sides)

    def side_mask(self, side: str, student: Features, sample) -> Tensor:
        """B x L, True at real (non-padding) positions of that side."""
        if side == "encoder":
            pad = student.encoder_padding_mask
            if pad is None:
                pad = sample["net_input"]["src_tokens"].eq(self.source_pad)
            return ~pad
        return sample["target"].ne(self.target_pad)

    def side_loss(self, side: str, student: Features, teacher: Features, sample) -> Tensor:
        s_states = student.encoder_states if side == "encoder" else student.decoder_states
        t_states = teacher.encoder_states if side == "encoder" else teacher.decoder_states
        mask = self.side_mask(side, student, sample)
        fuser = self.fusers[side]
        return sum(
            fuser(i, s_states[j], [t_states[k] for k in group], mask)
            for i, (j, group) in enumerate(self.pairs[side])
        )

    def forward(self, student: Features, teachers: List[Features], sample) -> Tensor:
        return sum(self.side_loss(side, student, teachers[0], sample) for side in self.sides)


FAMILY = "layer-KD"  # one layer-KD term at a time: --distill-terms takes at most one of these


@register_term("pkd", options=(LayerKDOptions,), family=FAMILY, legacy_name="layer")
class PKDTerm(LayerKDTerm):
    """Student layer j <- one teacher layer (evenly spaced ``skip`` map), PKD's Eq. 3: the
    squared L2 distance (sum over d) of unit-normalised states. (PKD's paper keeps the teacher's
    width and has no map; where the widths differ the student's state is mapped.)"""
    DEFAULTS = {"map": "skip", "normalize": "l2", "reduction": "sum", "project": "student"}


@register_term("ckd", options=(LayerKDOptions, CKDOptions), family=FAMILY, legacy_name="layer")
class CKDTerm(LayerKDTerm):
    """Student layer j <- a group of teacher layers. ``DEFAULTS`` is the text of CKD's Eq. 3 (the
    teacher group fused to the student width by a learned map, MSE); ``--ckd-form released``, the
    default, overrides it with the authors' code (:data:`CKD_FORMS`). The map default comes from
    ``--ckd-combination`` and the projection side from :func:`default_projection`."""
    DEFAULTS = {"map": "rc", "normalize": "none", "reduction": "mean", "project": "teacher"}


@register_term("alp_kd", options=(LayerKDOptions, ALPKDOptions), family=FAMILY, legacy_name="layer")
class ALPKDTerm(LayerKDTerm):
    """Student layer j attends over the teacher layers (ALP-KD's Eq. 6-7, MSE); every student
    layer but the last. (Its paper keeps the teacher's width; where the widths differ the
    student's state is mapped.)"""
    DEFAULTS = {"map": "alp", "normalize": "none", "reduction": "mean", "project": "student"}
