"""Intermediate-layer KD: losses by hand, feature capture, criterions in training."""
import math

import pytest
import torch

from helpers import assert_weighted_sum, build, distill_loss, first_batch
from fairseq_distill.terms.fusers import AttentionFuser, CombinationFuser
from fairseq_distill.features import FeatureRequest, Features, run_with_features
from fairseq_distill.losses import masked_mse
from fairseq_distill.terms.base import TermContext
from fairseq_distill.terms.layer import CKDTerm, LayerKDTerm
from fairseq_distill.errors import DistillError

# 3 positions x 2 sentences x d=4; sentence 2 is padded at position 3
S = [[[1.0, 0.0, 2.0, -1.0], [0.5, 0.5, 0.5, 0.5]],
     [[0.0, 1.0, 0.0, 1.0], [2.0, -2.0, 1.0, 0.0]],
     [[3.0, 3.0, 3.0, 3.0], [9.0, 9.0, 9.0, 9.0]]]
T1 = [[[0.0, 0.0, 1.0, 1.0], [1.0, 0.0, 0.0, 0.0]],
      [[1.0, 1.0, 1.0, 1.0], [0.0, 0.0, 0.0, 2.0]],
      [[2.0, 0.0, 2.0, 0.0], [-9.0, -9.0, -9.0, -9.0]]]
T2 = [[[1.0, 2.0, 0.0, 0.0], [0.0, 1.0, 0.0, 1.0]],
      [[0.5, 0.0, 0.5, 0.0], [1.0, 1.0, 1.0, 1.0]],
      [[0.0, 1.0, 0.0, 1.0], [7.0, 7.0, 7.0, 7.0]]]
MASK = [[True, True, True], [True, True, False]]  # B x L


def mse_by_hand(s, t, mask, l2=False, reduction="mean"):
    """Σ over real positions of Σ_d (u − v)², divided by d = 4 for the mean."""
    total = 0.0
    for pos in range(3):
        for b in range(2):
            if not mask[b][pos]:
                continue
            u, v = s[pos][b], t[pos][b]
            if l2:
                nu, nv = math.sqrt(sum(x * x for x in u)), math.sqrt(sum(x * x for x in v))
                u, v = [x / nu for x in u], [x / nv for x in v]
            total += sum((x - y) ** 2 for x, y in zip(u, v)) / (4 if reduction == "mean" else 1)
    return total


@pytest.mark.parametrize("reduction", ["mean", "sum"])
@pytest.mark.parametrize("normalize", ["none", "l2"])
def test_masked_mse_by_hand(normalize, reduction):
    got = masked_mse(torch.tensor(S), torch.tensor(T1), torch.tensor(MASK), normalize, reduction)
    assert got.item() == pytest.approx(mse_by_hand(S, T1, MASK, normalize == "l2", reduction), rel=1e-6)


# 3 positions x 1 sentence x d=2, position 3 padded; worked out on paper:
#   position 1: s = (3, 4), t = (1, 0): raw Σ_d = 2² + 4² = 20; unit: (0.6, 0.8) − (1, 0) -> 0.16 + 0.64 = 0.8
#   position 2: s = (0, 2), t = (0, −1): raw Σ_d = 3² = 9;      unit: (0, 1) − (0, −1)  -> 2² = 4
#   position 3: padding, ignored however large
@pytest.mark.parametrize("normalize,reduction,expected", [
    ("none", "sum", 20 + 9), ("none", "mean", (20 + 9) / 2),
    ("l2", "sum", 0.8 + 4), ("l2", "mean", (0.8 + 4) / 2),  # PKD's Eq. 3 is ("l2", "sum")
])
def test_masked_mse_reductions_by_hand(normalize, reduction, expected):
    s = torch.tensor([[[3.0, 4.0]], [[0.0, 2.0]], [[100.0, 100.0]]])
    t = torch.tensor([[[1.0, 0.0]], [[0.0, -1.0]], [[0.0, 1.0]]])
    mask = torch.tensor([[True, True, False]])
    assert masked_mse(s, t, mask, normalize, reduction).item() == pytest.approx(expected, rel=1e-6)


def test_masked_mse_refuses_an_unknown_reduction():
    with pytest.raises(ValueError, match="reduction 'max'; valid: sum, mean"):
        masked_mse(torch.zeros(1, 1, 2), torch.zeros(1, 1, 2), torch.ones(1, 1, dtype=torch.bool), "none", "max")


def test_ckd_fusion_by_hand():
    """F(h) = W [h_t1; h_t2] + b with W = [I_4 | 2·I_4], b = 0.5: F = t1 + 2·t2 + 0.5."""
    fuser = CombinationFuser([(1, 2)], student_dim=4, teacher_dim=4)
    with torch.no_grad():
        fuser.maps[0].weight.copy_(torch.cat([torch.eye(4), 2 * torch.eye(4)], dim=1))
        fuser.maps[0].bias.fill_(0.5)
    fused = [[[a + 2 * b + 0.5 for a, b in zip(T1[p][s], T2[p][s])] for s in range(2)] for p in range(3)]
    got = fuser(0, torch.tensor(S), [torch.tensor(T1), torch.tensor(T2)], torch.tensor(MASK))
    assert got.item() == pytest.approx(mse_by_hand(S, fused, MASK), rel=1e-6)


def test_ckd_student_side_projection_by_hand():
    """--ckd-project student: P h_s (4 -> 8) compared with the concatenated teacher states."""
    fuser = CombinationFuser([(1, 2)], student_dim=4, teacher_dim=4, project="student")
    with torch.no_grad():
        fuser.maps[0].weight.copy_(torch.cat([torch.eye(4), torch.eye(4)], dim=0))  # P h = [h; h]
        fuser.maps[0].bias.zero_()
    total = 0.0
    for p in range(3):
        for b in range(2):
            if MASK[b][p]:
                u = S[p][b] + S[p][b]
                v = T1[p][b] + T2[p][b]
                total += sum((x - y) ** 2 for x, y in zip(u, v)) / 8
    got = fuser(0, torch.tensor(S), [torch.tensor(T1), torch.tensor(T2)], torch.tensor(MASK))
    assert got.item() == pytest.approx(total, rel=1e-6)


def test_ckd_released_form_by_hand():
    """--ckd-form released: P h_s (4 -> 8) and [t1; t2] both unit-normalised, Σ_d of the
    squared difference, summed over real positions."""
    fuser = CombinationFuser([(1, 2)], student_dim=4, teacher_dim=4, project="student", normalize="l2",
                             reduction="sum")
    with torch.no_grad():
        fuser.maps[0].weight.copy_(torch.cat([torch.eye(4), 2 * torch.eye(4)], dim=0))  # P h = [h; 2h]
        fuser.maps[0].bias.zero_()
    total = 0.0
    for p in range(3):
        for b in range(2):
            if MASK[b][p]:
                u = S[p][b] + [2 * x for x in S[p][b]]
                v = T1[p][b] + T2[p][b]
                nu, nv = math.sqrt(sum(x * x for x in u)), math.sqrt(sum(x * x for x in v))
                total += sum((x / nu - y / nv) ** 2 for x, y in zip(u, v))
    got = fuser(0, torch.tensor(S), [torch.tensor(T1), torch.tensor(T2)], torch.tensor(MASK))
    assert got.item() == pytest.approx(total, rel=1e-6)


def test_one_layer_group_of_equal_width_has_no_projection():
    fuser = CombinationFuser([(3,), (6,)], student_dim=4, teacher_dim=4)
    assert sum(p.numel() for p in fuser.parameters()) == 0
    assert len(list(CombinationFuser([(3,)], student_dim=4, teacher_dim=8).parameters())) == 2


@pytest.mark.parametrize("score,reduction", [
    ("dot", "mean"), ("scaled_dot", "mean"), ("cosine", "mean"), ("dot", "sum"),
])
def test_alp_by_hand(score, reduction):
    def sc(u, v):
        dot = sum(x * y for x, y in zip(u, v))
        if score == "scaled_dot":
            return dot / 2.0  # sqrt(4)
        if score == "cosine":
            return dot / math.sqrt(sum(x * x for x in u)) / math.sqrt(sum(x * x for x in v))
        return dot

    fused = [[None, None] for _ in range(3)]
    for p in range(3):
        for b in range(2):
            s1, s2 = sc(S[p][b], T1[p][b]), sc(S[p][b], T2[p][b])
            m = max(s1, s2)
            a1, a2 = math.exp(s1 - m), math.exp(s2 - m)
            a1, a2 = a1 / (a1 + a2), a2 / (a1 + a2)
            fused[p][b] = [a1 * x + a2 * y for x, y in zip(T1[p][b], T2[p][b])]
    fuser = AttentionFuser(4, 4, score=score, reduction=reduction)
    got = fuser(0, torch.tensor(S), [torch.tensor(T1), torch.tensor(T2)], torch.tensor(MASK))
    assert got.item() == pytest.approx(mse_by_hand(S, fused, MASK, reduction=reduction), rel=1e-5)
    alpha = fuser.last_alpha[0]
    assert alpha.shape == (2, 3, 2) and torch.allclose(alpha.sum(0), torch.ones(3, 2))


def test_alp_student_side_projection_by_hand():
    """--layer-project student: the student's state mapped to the teacher width (2 -> 4, a
    known map), attention and MSE in the teacher width; the teacher's states are untouched."""
    student = [[[s[0] - s[2], s[1] + s[3]] for s in row] for row in S]  # L x B x 2
    fuser = AttentionFuser(2, 4, score="dot", side="student")
    with torch.no_grad():  # P [x, y] = [x, y, 2x, -y] + [0.5, 0, 0, 0]
        fuser.project.weight.copy_(torch.tensor([[1.0, 0], [0, 1], [2, 0], [0, -1]]))
        fuser.project.bias.copy_(torch.tensor([0.5, 0, 0, 0]))
    projected = [[[x + 0.5, y, 2 * x, -y] for x, y in row] for row in student]
    fused = [[None, None] for _ in range(3)]
    for p in range(3):
        for b in range(2):
            u = projected[p][b]
            d1, d2 = (sum(x * y for x, y in zip(u, t[p][b])) for t in (T1, T2))
            m = max(d1, d2)
            a1, a2 = math.exp(d1 - m), math.exp(d2 - m)
            a1, a2 = a1 / (a1 + a2), a2 / (a1 + a2)
            fused[p][b] = [a1 * x + a2 * y for x, y in zip(T1[p][b], T2[p][b])]
    got = fuser(0, torch.tensor(student), [torch.tensor(T1), torch.tensor(T2)], torch.tensor(MASK))
    assert got.item() == pytest.approx(mse_by_hand(projected, fused, MASK), rel=1e-5)


def test_layer_project_and_ckd_project_must_agree():
    with pytest.raises(DistillError, match="--layer-project student and --ckd-project teacher disagree"):
        LayerKDTerm("ckd", 0.7, layer_context(student_dim=4, teacher_dim=8), layer_project="student",
                    ckd_project="teacher")
    with pytest.raises(DistillError, match="unknown --layer-project 'sideways'; valid: teacher, student"):
        LayerKDTerm("pkd", 0.7, layer_context(student_dim=4, teacher_dim=8), layer_project="sideways")


def test_alp_sentence_granularity_by_hand():
    def pool(x, b):
        rows = [x[p][b] for p in range(3) if MASK[b][p]]
        return [sum(col) / len(rows) for col in zip(*rows)]

    total = 0.0
    for b in range(2):
        s, t1, t2 = pool(S, b), pool(T1, b), pool(T2, b)
        d1, d2 = sum(x * y for x, y in zip(s, t1)), sum(x * y for x, y in zip(s, t2))
        m = max(d1, d2)
        a1, a2 = math.exp(d1 - m), math.exp(d2 - m)
        a1, a2 = a1 / (a1 + a2), a2 / (a1 + a2)
        c = [a1 * x + a2 * y for x, y in zip(t1, t2)]
        total += sum((x - y) ** 2 for x, y in zip(s, c)) / 4
    fuser = AttentionFuser(4, 4, score="dot", granularity="sentence")
    got = fuser(0, torch.tensor(S), [torch.tensor(T1), torch.tensor(T2)], torch.tensor(MASK))
    assert got.item() == pytest.approx(total, rel=1e-5)


# -- each method's defaults (its paper's form) and the named variants ---------------------------

def layer_context(teacher_layers=6, student_layers=2, student_dim=4, teacher_dim=4):
    def shape(layers, dim):
        return {"encoder": (layers, dim), "decoder": (layers, dim)}
    return TermContext(teachers=[None], student_shape=shape(student_layers, student_dim),
                       teacher_shape=shape(teacher_layers, teacher_dim), source_pad=1, target_pad=1)


@pytest.mark.parametrize("method,options,expected", [
    # pkd and alp_kd: their papers' loss; no map in the papers (equal widths), so the student's
    # state is mapped, and the teacher's stays a fixed target
    ("pkd", {}, ("l2", "sum", "student")),                       # PKD Eq. 3
    ("pkd", {"layer_project": "teacher"}, ("l2", "sum", "teacher")),
    # ckd: the authors' released code by default (it produced the paper's numbers)
    ("ckd", {}, ("l2", "sum", "student")),
    ("ckd", {"ckd_form": "released"}, ("l2", "sum", "student")),
    ("ckd", {"ckd_project": "teacher"}, ("l2", "sum", "teacher")),
    ("ckd", {"ckd_form": "released", "normalize": "none", "reduction": "mean"}, ("none", "mean", "student")),
    ("ckd", {"ckd_form": "released", "layer_project": "teacher"}, ("l2", "sum", "teacher")),
    # CKD's Eq. 3 as written (--ckd-form paper) fuses the teacher's states; a narrower student maps
    # its own state instead (the teacher-side map collapsed such students), see the equal-width test
    ("ckd", {"ckd_form": "paper"}, ("none", "mean", "student")),
    ("ckd", {"ckd_form": "paper", "ckd_project": "teacher"}, ("none", "mean", "teacher")),
    ("ckd", {"ckd_form": "paper", "ckd_project": "student"}, ("none", "mean", "student")),
    ("pkd", {"reduction": "mean", "ckd_project": "teacher"}, ("l2", "mean", "student")),  # ckd's name only
    ("ckd", {"ckd_form": "paper", "layer_project": "student"}, ("none", "mean", "student")),
    ("alp_kd", {}, ("none", "mean", "student")),                  # ALP-KD Eq. 7
    ("alp_kd", {"normalize": "l2", "reduction": "sum"}, ("l2", "sum", "student")),
    ("alp_kd", {"layer_project": "teacher"}, ("none", "mean", "teacher")),
])
def test_each_method_defaults_to_its_paper_form(method, options, expected):
    term = LayerKDTerm(method, 0.7, layer_context(student_dim=4, teacher_dim=8), **options)
    fuser = term.fusers["encoder"]
    project = fuser.project if isinstance(fuser, CombinationFuser) else fuser.side
    assert (term.normalize, term.reduction, project) == expected
    assert (fuser.normalize, fuser.reduction) == expected[:2]


def test_ckd_paper_form_fuses_the_teacher_side_only_where_the_widths_are_equal(caplog):
    """The CKD paper's students keep their teacher's width and fuse the concatenated teacher
    states to it (Eq. 3): that stays the default there. A narrower student gets the student-side
    map by default (the teacher-side one collapsed: issue 37), and says so once at start-up."""
    same = LayerKDTerm("ckd", 0.7, layer_context(6, 2, student_dim=8, teacher_dim=8), ckd_form="paper")
    assert same.project == "teacher" and same.fusers["encoder"].project == "teacher"
    assert [tuple(m.weight.shape) for m in same.fusers["encoder"].maps] == [(8, 24), (8, 24)]
    assert not any("learned projection" in r.message for r in caplog.records)  # the paper's own map
    caplog.clear()
    with caplog.at_level("INFO"):
        narrow = LayerKDTerm("ckd", 0.7, layer_context(6, 2, student_dim=4, teacher_dim=8), ckd_form="paper")
    assert narrow.project == "student"
    assert [tuple(m.weight.shape) for m in narrow.fusers["encoder"].maps] == [(24, 4), (24, 4)]
    assert "the student (d=4) is narrower than the teacher (d=8)" in caplog.text
    assert "--ckd-project teacher" in caplog.text  # the paper's fused map, one flag away
    assert not any("learned projection" in r.message for r in caplog.records if r.levelname == "WARNING")
    # the released form maps the student side at any width; explicit options win
    assert LayerKDTerm("ckd", 0.7, layer_context(6, 2, 8, 8), ckd_form="released").project == "student"
    assert LayerKDTerm("ckd", 0.7, layer_context(6, 2, 4, 8), ckd_project="teacher").project == "teacher"
    assert LayerKDTerm("ckd", 0.7, layer_context(6, 2, 4, 8), layer_project="teacher").project == "teacher"


def test_ckd_defaults_to_its_authors_released_code_at_every_width():
    """The CKD paper's numbers came from its authors' code, which maps the student's state to
    the concatenated teacher states and unit-normalises both (issue 48); the text's teacher-side
    map is --ckd-form paper. At the teacher's width the default maps the student's 8 dimensions
    to the group's 3 x 8, with no teacher-side map to learn."""
    from fairseq_distill.criterions.options import CKDConfig

    cfg = CKDConfig()
    for widths in ((8, 8), (4, 8)):
        term = CKDTerm.from_config(cfg, layer_context(6, 2, *widths))
        fuser = term.fusers["encoder"]
        assert (term.normalize, term.reduction, term.project) == ("l2", "sum", "student")
        assert [tuple(m.weight.shape) for m in fuser.maps] == [(3 * widths[1], widths[0])] * 2


def test_frozen_projection_keeps_its_initial_weights_and_gets_no_gradient():
    """--layer-freeze-projection: the paper form's fused map stays a fixed random map (a
    diagnostic); the loss still flows to the student's state."""
    term = LayerKDTerm("ckd", 0.7, layer_context(6, 2, 8, 8), ckd_form="paper", freeze_projection=True)
    fuser = term.fusers["encoder"]
    before = [m.weight.detach().clone() for m in fuser.maps]
    assert not any(p.requires_grad for p in term.parameters())
    student = torch.randn(3, 2, 8, requires_grad=True)
    teachers = [torch.randn(3, 2, 8) for _ in range(3)]
    loss = fuser(0, student, teachers, torch.ones(2, 3, dtype=torch.bool))
    loss.backward()
    assert student.grad is not None and student.grad.abs().sum() > 0
    assert all(m.weight.grad is None for m in fuser.maps)
    assert all(torch.equal(m.weight, b) for m, b in zip(fuser.maps, before))
    assert all(p.requires_grad for p in LayerKDTerm("ckd", 0.7, layer_context(6, 2, 8, 8), ckd_form="paper").parameters())


def test_ckd_paper_form_at_equal_widths_warns_once_that_its_map_can_collapse(caplog):
    """--ckd-form paper's learned fused map collapsed a student of the teacher's width in
    configs/papers.yaml: the run says so once at start-up, with the released form as the way
    out; the released form, pkd, and the paper form with its map frozen (a fixed target, which
    did not collapse) say nothing."""
    with caplog.at_level("WARNING"):
        LayerKDTerm("ckd", 0.7, layer_context(6, 2, student_dim=8, teacher_dim=8), ckd_form="paper")
    warnings = [r.message for r in caplog.records if r.levelname == "WARNING"]
    assert len(warnings) == 1, warnings
    assert "--ckd-form released" in warnings[0] and "collapse" in warnings[0]
    assert "configs/papers.yaml" in warnings[0]
    caplog.clear()
    with caplog.at_level("WARNING"):
        LayerKDTerm("ckd", 0.7, layer_context(6, 2, 8, 8), ckd_form="released")
        LayerKDTerm("pkd", 0.7, layer_context(6, 2, 8, 8))
        LayerKDTerm("ckd", 0.7, layer_context(6, 2, 8, 8))  # the default: the released form
        LayerKDTerm("ckd", 0.7, layer_context(6, 2, 4, 8), ckd_form="paper")  # student side: an info line
        LayerKDTerm("ckd", 0.7, layer_context(6, 2, 8, 8), ckd_form="paper", freeze_projection=True)
        LayerKDTerm("alp_kd", 0.7, layer_context(6, 2, 4, 8), layer_project="teacher",
                    freeze_projection=True)
    assert not [r for r in caplog.records if r.levelname == "WARNING"]


def two_layer_features(layer1, layer2):
    """One sentence of one position, d = 2; states: embedding, layer 1, layer 2."""
    states = [torch.zeros(1, 1, 2)] + [torch.tensor([[v]]) for v in (layer1, layer2)]
    return Features(net_output=(None,), encoder_padding_mask=torch.zeros(1, 1, dtype=torch.bool),
                    encoder_states=states)


def test_pkd_term_by_hand():
    """skip map for 2 -> 2 pairs layer j with layer j; Eq. 3: Σ_j ‖unit(s_j) − unit(t_j)‖²:
    (3,4) vs (1,0): (0.6−1)² + 0.8² = 0.8; (0,2) vs (0,−1): 2² = 4."""
    student, teacher = two_layer_features([3.0, 4.0], [0.0, 2.0]), two_layer_features([1.0, 0.0], [0.0, -1.0])
    term = LayerKDTerm("pkd", 0.7, layer_context(2, 2, 2, 2))
    assert term.forward(student, [teacher], None).item() == pytest.approx(0.8 + 4, rel=1e-6)
    term = LayerKDTerm("pkd", 0.7, layer_context(2, 2, 2, 2), reduction="mean")
    assert term.forward(student, [teacher], None).item() == pytest.approx((0.8 + 4) / 2, rel=1e-6)


def test_pkd_term_by_hand_with_its_default_student_side_map():
    """Student d = 2, teacher d = 4: by default each student state goes through its own map to
    the teacher's width, then Eq. 3 as above. Maps set to P_1 h = (h, 0, 0), P_2 h = (0, 0, h):
    P_1 (3,4) = (3,4,0,0) vs (1,0,0,0): 0.8; P_2 (0,2) = (0,0,0,2) vs (0,0,0,−1): 4."""
    def features(dim, layer1, layer2):
        states = [torch.zeros(1, 1, dim)] + [torch.tensor([[v]]) for v in (layer1, layer2)]
        return Features(net_output=(None,), encoder_padding_mask=torch.zeros(1, 1, dtype=torch.bool),
                        encoder_states=states)

    student = features(2, [3.0, 4.0], [0.0, 2.0])
    teacher = features(4, [1.0, 0.0, 0.0, 0.0], [0.0, 0.0, 0.0, -1.0])
    for reduction, expected in (("", 0.8 + 4), ("mean", (0.8 + 4) / 4)):
        term = LayerKDTerm("pkd", 0.7, layer_context(2, 2, student_dim=2, teacher_dim=4), reduction=reduction)
        maps = term.fusers["encoder"].maps
        assert [tuple(m.weight.shape) for m in maps] == [(4, 2), (4, 2)]  # student width in, teacher's out
        with torch.no_grad():
            for m, rows in zip(maps, ((0, 1), (2, 3))):
                m.weight.zero_()
                m.bias.zero_()
                m.weight[rows[0], 0] = m.weight[rows[1], 1] = 1.0
        assert term.forward(student, [teacher], None).item() == pytest.approx(expected, rel=1e-6)


@pytest.mark.parametrize("layer_map,reduction,expected", [
    # s_1 = (1,0), t_1 = (1,0), t_2 = (0,1): dot scores 1, 0, so α = (e, 1)/(e+1) and
    # C = α; s_1 − C = (1 − α_1, −α_2) = (a, −a) with a = 1/(e+1): mean_d = a², Σ_d = 2a²
    ("", "", 1 / (math.e + 1) ** 2),       # default 'alp': the last student layer gets no loss
    ("", "sum", 2 / (math.e + 1) ** 2),
    ("all", "", None),                     # 'all' adds student layer 2 = (10, −10)
])
def test_alp_kd_term_by_hand(layer_map, reduction, expected):
    student, teacher = two_layer_features([1.0, 0.0], [10.0, -10.0]), two_layer_features([1.0, 0.0], [0.0, 1.0])
    term = LayerKDTerm("alp_kd", 0.7, layer_context(2, 2, 2, 2), layer_map=layer_map, reduction=reduction)
    got = term.forward(student, [teacher], None).item()
    if expected is None:
        # layer 2: scores (10, −10) -> α ≈ (1, e^−20): C ≈ t_1 = (1, 0); mean_d of (9², 10²)
        a = 1 / (math.e + 1)
        alpha2 = 1 / (1 + math.exp(20))
        c = (1 - alpha2, alpha2)
        expected = a * a + ((10 - c[0]) ** 2 + (-10 - c[1]) ** 2) / 2
    assert got == pytest.approx(expected, rel=1e-6)


def test_alp_kd_defaults_to_the_papers_connection_pattern(caplog):
    every = (1, 2, 3, 4, 5, 6)
    with caplog.at_level("INFO"):
        term = LayerKDTerm("alp_kd", 0.7, layer_context(6, 3), side="both")
    assert term.pairs == {"encoder": [(1, every), (2, every)], "decoder": [(1, every), (2, every)]}
    for side in ("encoder", "decoder"):
        assert (f"alp_kd {side}: no layer loss for student layer(s) 3 of 3: the 'alp' map connects no "
                f"teacher layer to them") in caplog.text
        assert f"alp_kd {side} layer map (6 teacher -> 3 student layers, 'alp'): " in caplog.text
    assert "student 3 <- none (no layer loss)" in caplog.text
    # the former default, by name: every student layer, the last included
    caplog.clear()
    with caplog.at_level("INFO"):
        term = LayerKDTerm("alp_kd", 0.7, layer_context(6, 3), layer_map="all")
    assert term.pairs["encoder"] == [(1, every), (2, every), (3, every)]
    assert "no layer loss" not in caplog.text
    # the embedding joins as pair 0 either way
    term = LayerKDTerm("alp_kd", 0.7, layer_context(6, 3), include_embedding=True)
    assert term.pairs["encoder"] == [(0, (0,)), (1, every), (2, every)]


def test_alp_pattern_keeps_a_one_layer_students_only_layer(caplog):
    with caplog.at_level("WARNING"):
        term = LayerKDTerm("alp_kd", 0.7, layer_context(3, 1))
    assert term.pairs["encoder"] == [(1, (1, 2, 3))]
    assert "a 1-layer student has no other: its only layer learns from every teacher layer" in caplog.text


def test_option_defaults_leave_the_choice_to_the_method():
    from types import SimpleNamespace

    from fairseq_distill.criterions.options import ALPKDConfig, CKDConfig, DistillConfig, PKDConfig

    for config in (PKDConfig(), CKDConfig(), ALPKDConfig(), DistillConfig()):
        assert config.layer_mse_reduction is None
    ckd = CKDConfig()
    assert (ckd.ckd_form, ckd.ckd_project, ckd.layer_normalize, ckd.ckd_combination) == ("released", None, None, "rc")
    # the stored options of a checkpoint written before --layer-mse-reduction and --ckd-form
    old = SimpleNamespace(layer_weight=0.7, kd_side="encoder", layer_map="", decoder_layer_map="",
                          layer_normalize="none", kd_include_embedding=False, ckd_combination="rc",
                          ckd_project="teacher")
    term = CKDTerm.from_config(old, layer_context())
    assert (term.normalize, term.reduction, term.fusers["encoder"].project) == ("none", "mean", "teacher")


def test_unknown_form_and_reduction_are_errors():
    from fairseq_distill.errors import DistillError

    with pytest.raises(DistillError, match="unknown --ckd-form 'code'; valid: paper, released"):
        LayerKDTerm("ckd", 0.7, layer_context(), ckd_form="code")
    with pytest.raises(DistillError, match="unknown --layer-mse-reduction 'max'; valid: sum, mean"):
        LayerKDTerm("ckd", 0.7, layer_context(), reduction="max")


# -- feature capture ---------------------------------------------------------------------------

def test_captured_teacher_states_equal_layer_by_layer_forward(tiny_data, deep_teacher):
    _, task, _ = build(tiny_data, "--task", "translation_distill", "--teacher-path", deep_teacher,
                       "--criterion", "ckd")
    teacher = task.load_teacher().models[0]
    teacher.eval()
    sample = first_batch(task)
    net_input = sample["net_input"]
    with torch.no_grad():
        captured = run_with_features(teacher, net_input, FeatureRequest(encoder_states=True, decoder_states=True))
        enc = teacher.encoder
        x, _ = enc.forward_embedding(net_input["src_tokens"])
        pad = net_input["src_tokens"].eq(enc.padding_idx)
        x = (x * (~pad).unsqueeze(-1).type_as(x)).transpose(0, 1)  # fairseq zeroes padding first
        expected = [x]
        for layer in enc.layers:
            x = layer(x, encoder_padding_mask=pad)
            expected.append(x)
    assert len(captured.encoder_states) == 4 and len(captured.decoder_states) == 3
    for got, want in zip(captured.encoder_states, expected):
        assert torch.allclose(got, want, atol=1e-6)
    assert not any(s.requires_grad for s in captured.encoder_states)


# -- criterions in training --------------------------------------------------------------------

@pytest.mark.parametrize("criterion,extra", [
    ("pkd", []), ("ckd", ["--ckd-combination", "oc"]), ("ckd", ["--ckd-project", "student"]),
    ("alp_kd", ["--alp-score", "scaled_dot"]), ("ckd", ["--kd-side", "both"]),
    ("ckd", ["--ckd-form", "released", "--layer-mse-reduction", "mean"]),
])
def test_total_loss_weights(tiny_data, deep_teacher, criterion, extra):
    _, _, crit, loss, logs = distill_loss(tiny_data, deep_teacher, criterion, *extra)
    # defaults: η = 0.1, λ = 0.7, β = 1 − η − λ = 0.2
    assert_weighted_sum(loss, logs, {"ce_loss": 0.2, "word_kd_loss": 0.1, f"{criterion}_loss": 0.7})
    assert logs[f"{criterion}_loss"].item() > 0
    loss.backward()
    grads = [p.grad for p in crit.parameters()]
    assert grads and all(g is not None and g.abs().sum() > 0 for g in grads)


def test_student_layers_receive_layer_loss_gradient(tiny_data, deep_teacher):
    _, model, _, loss, logs = distill_loss(tiny_data, deep_teacher, "ckd", "--kd-weight", "0", "--layer-weight", "1",
                                           "--ce-weight", "0")
    assert loss.item() == pytest.approx(logs["ckd_loss"].item(), rel=1e-6)
    loss.backward()
    assert model.encoder.layers[0].fc1.weight.grad.abs().sum() > 0
    # encoder-side KD only: the decoder layers get no gradient from the layer loss
    assert model.decoder.layers[0].fc1.weight.grad is None or model.decoder.layers[0].fc1.weight.grad.abs().sum() == 0


def test_collapsible_setups_are_warned_about(caplog):
    """A learned teacher-side projection can collapse, unit-normalised or not (the benchmark's
    pkd and unnormalised rows did): every such projection is warned about."""
    cases = [  # (fuser, expect a warning)
        (lambda: CombinationFuser([(1,), (2,)], 4, 6, "teacher", "none"), True),
        (lambda: CombinationFuser([(1,), (2,)], 4, 6, "teacher", "l2", "sum"), True),  # PKD's form
        (lambda: CombinationFuser([(1,), (2,)], 4, 6, "student", "none"), False),  # fixed teacher target
        (lambda: CombinationFuser([(1,), (2,)], 4, 4, "teacher", "none"), False),  # no projection
        (lambda: AttentionFuser(4, 6, normalize="none"), True),
        (lambda: AttentionFuser(4, 6, normalize="l2"), True),
        (lambda: AttentionFuser(4, 4, normalize="none"), False),
    ]
    for make, warned in cases:
        caplog.clear()
        with caplog.at_level("WARNING"):
            make()
        assert any("learned projection" in r.message and "student-side projection" in r.message
                   for r in caplog.records) == warned
    # each method's own normalisation when --layer-normalize is not given
    assert {m: LayerKDTerm(m, 0.7, layer_context()).normalize for m in ("pkd", "ckd", "alp_kd")} == \
        {"pkd": "l2", "ckd": "l2", "alp_kd": "none"}  # ckd: its released form
    assert LayerKDTerm("ckd", 0.7, layer_context(), ckd_form="paper").normalize == "none"


def test_encoder_layer_loss_sums_source_positions_and_shares_the_target_token_denominator(tiny_data,
                                                                                           deep_teacher):
    """issue 31.2.4: the criterion divides everything by sample_size, the number of *target*
    tokens, while an encoder-side layer loss is summed over *source* positions: λ's weight
    relative to the cross-entropy grows with the source/target length ratio. Pinned by hand
    on a real batch: student layer 1 <- teacher layer 2 at equal widths (no map), raw states,
    mean over d, summed over the real source positions."""
    from helpers import transformer_flags

    cfg, task, model = build(tiny_data, "--task", "translation_distill", "--teacher-path", deep_teacher,
                             "--layer-map", "2", "--ckd-form", "paper", criterion="ckd",
                             model=transformer_flags(1, 1, 24, 48))
    crit = task.build_criterion(cfg.criterion)
    model.train()
    sample = first_batch(task)
    torch.manual_seed(0)
    loss, sample_size, logs = crit(model, sample)
    request = FeatureRequest(encoder_states=True)
    torch.manual_seed(0)
    student = run_with_features(model, sample["net_input"], request).encoder_states[1]  # T_src x B x d
    teacher = task.load_teacher().models[0]
    with torch.no_grad():
        target = run_with_features(teacher, sample["net_input"], request).encoder_states[2]
    real = sample["net_input"]["src_tokens"].ne(task.source_dictionary.pad()).t()  # T_src x B
    by_hand = sum(((student[t, b] - target[t, b]) ** 2).mean().item()
                  for t in range(real.size(0)) for b in range(real.size(1)) if real[t, b])
    assert logs["ckd_loss"].item() == pytest.approx(by_hand, rel=1e-4)
    n_source = int(real.sum())
    n_target = int(sample["target"].ne(task.target_dictionary.pad()).sum())
    assert sample_size == n_target != n_source
    # fairseq divides this sum by sample_size (n_target): λ·Σ_source counts per target token
    expected = (0.2 * logs["ce_loss"] + 0.1 * logs["word_kd_loss"] + 0.7 * by_hand)
    assert loss.item() == pytest.approx(expected.item(), rel=1e-4)


def test_ckd_without_flags_computes_what_the_released_form_rows_measured(tiny_data, deep_teacher):
    """configs/papers.yaml measured ckd's released form as `--ckd-combination rc --ckd-form
    released` before it became the default: `--criterion ckd` alone builds the same term (map,
    normalisation, reduction, projection side and parameter shapes) and, from the same initial
    parameters, the same loss on a batch."""
    from helpers import transformer_flags

    def criterion(*flags):
        cfg, task, model = build(tiny_data, "--task", "translation_distill", "--teacher-path", deep_teacher, *flags,
                                 criterion="ckd", model=transformer_flags(1, 1, 24, 48))
        torch.manual_seed(0)
        return task, model, task.build_criterion(cfg.criterion)

    task, model, default = criterion()
    _, _, pinned = criterion("--ckd-combination", "rc", "--ckd-form", "released")
    a, b = default.terms["ckd"], pinned.terms["ckd"]
    assert (a.normalize, a.reduction, a.project, a.pairs, a.loss_form()) == \
        (b.normalize, b.reduction, b.project, b.pairs, b.loss_form())
    assert {k: v.shape for k, v in default.state_dict().items() if torch.is_tensor(v)} == \
        {k: v.shape for k, v in pinned.state_dict().items() if torch.is_tensor(v)}
    assert all(torch.equal(x, y) for x, y in zip(default.parameters(), pinned.parameters()))
    model.train()  # the terms run in training only (dropout is 0 in these tests)
    sample = first_batch(task)
    with torch.no_grad():
        loss_a, _, logs_a = default(model, sample)
        loss_b, _, logs_b = pinned(model, sample)
    assert logs_a["ckd_loss"].item() > 0 and logs_a["ckd_loss"].item() == logs_b["ckd_loss"].item()
    assert loss_a.item() == loss_b.item()
