"""The word-level KD term against values computed by hand."""
import math

import pytest
import torch

from fairseq_distill.losses import ensemble_log_probs, log_probs_at, word_kd_loss


def softmax(row, tau=1.0):
    exps = [math.exp(v / tau) for v in row]
    total = sum(exps)
    return [e / total for e in exps]


def kd_by_hand(student, teacher, mask, tau):
    """τ² Σ_{unmasked (b,t)} Σ_v p_t(v) log(p_t(v)/p_s(v)), written out with Python floats."""
    total = 0.0
    for b in range(len(student)):
        for t in range(len(student[b])):
            if not mask[b][t]:
                continue
            p = softmax(teacher[b][t], tau)
            q = softmax(student[b][t], tau)
            total += sum(pv * math.log(pv / qv) for pv, qv in zip(p, q))
    return tau * tau * total


# two sentences, 5-word vocabulary; sentence 2 has one padding position at the end
STUDENT = [
    [[1.0, 0.5, -0.5, 0.0, 2.0], [0.1, 0.2, 0.3, 0.4, 0.5], [-1.0, 0.0, 1.0, 0.0, -1.0]],
    [[0.0, 0.0, 3.0, 0.0, 0.0], [2.0, -2.0, 0.5, 0.5, 0.0], [9.0, -9.0, 9.0, -9.0, 9.0]],
]
TEACHER = [
    [[2.0, 0.0, 0.0, -1.0, 1.0], [0.5, 0.4, 0.3, 0.2, 0.1], [0.0, 0.0, 2.0, 0.0, 0.0]],
    [[0.0, 1.0, 2.0, 1.0, 0.0], [1.0, -1.0, 1.0, 0.0, 0.0], [-9.0, 9.0, -9.0, 9.0, -9.0]],
]
MASK = [[True, True, True], [True, True, False]]


def test_two_word_example_by_hand():
    # teacher p = (1/2, 1/2); student logits (0, ln 3) give q = (1/4, 3/4)
    # KL = 1/2 ln((1/2)/(1/4)) + 1/2 ln((1/2)/(3/4)) = 1/2 ln(4/3)
    student = torch.tensor([[[0.0, math.log(3.0)]]])
    teacher = torch.log(torch.tensor([[[0.5, 0.5]]]))
    loss = word_kd_loss(log_probs_at(student), teacher, torch.tensor([[True]]), temperature=1.0)
    assert loss.item() == pytest.approx(0.5 * math.log(4.0 / 3.0), rel=1e-6)


@pytest.mark.parametrize("tau", [1.0, 2.0, 0.5])
def test_matches_hand_computation_with_padding(tau):
    student, teacher = torch.tensor(STUDENT), torch.tensor(TEACHER)
    loss = word_kd_loss(log_probs_at(student, tau), ensemble_log_probs([teacher], tau), torch.tensor(MASK), tau)
    assert loss.item() == pytest.approx(kd_by_hand(STUDENT, TEACHER, MASK, tau), rel=1e-5)


def test_padding_positions_contribute_nothing():
    student, teacher = torch.tensor(STUDENT), torch.tensor(TEACHER)
    mask = torch.tensor(MASK)
    before = word_kd_loss(log_probs_at(student), ensemble_log_probs([teacher]), mask)
    student[1, 2] = torch.tensor([100.0, -100.0, 5.0, 0.0, 1.0])  # the padded position
    after = word_kd_loss(log_probs_at(student), ensemble_log_probs([teacher]), mask)
    assert after.item() == pytest.approx(before.item(), rel=1e-7)


def test_temperature_scales_by_tau_squared():
    # the KL between the softened distributions, computed by hand without any factor
    tau = 3.0
    soft_kl = kd_by_hand(STUDENT, TEACHER, MASK, tau) / tau**2
    student, teacher = torch.tensor(STUDENT), torch.tensor(TEACHER)
    got = word_kd_loss(log_probs_at(student, tau), ensemble_log_probs([teacher], tau), torch.tensor(MASK), tau).item()
    assert got == pytest.approx(9.0 * soft_kl, rel=1e-5)


def test_identical_distributions_give_zero():
    student = torch.tensor(STUDENT)
    loss = word_kd_loss(log_probs_at(student), ensemble_log_probs([student.clone()]), torch.tensor(MASK))
    assert abs(loss.item()) < 1e-6


def test_ensemble_averages_probabilities():
    a, b = torch.tensor(STUDENT), torch.tensor(TEACHER)
    tau = 2.0
    got = ensemble_log_probs([a, b], tau).exp()
    for bi in range(2):
        for t in range(3):
            expected = [(x + y) / 2 for x, y in zip(softmax(STUDENT[bi][t], tau), softmax(TEACHER[bi][t], tau))]
            assert got[bi, t].tolist() == pytest.approx(expected, rel=1e-5)


def test_gradient_reaches_student_only():
    student = torch.tensor(STUDENT, requires_grad=True)
    teacher = torch.tensor(TEACHER)
    word_kd_loss(log_probs_at(student), ensemble_log_probs([teacher]), torch.tensor(MASK)).backward()
    assert student.grad is not None
    assert student.grad[1, 2].abs().sum().item() == 0.0  # padding gets no gradient
    assert student.grad[0, 0].abs().sum().item() > 0.0
