"""Intermediate-layer KD: losses by hand, feature capture, criterions in training."""
import math

import pytest
import torch

from helpers import assert_weighted_sum, build, distill_loss, first_batch
from fairseq_distill.terms.fusers import AttentionFuser, CombinationFuser
from fairseq_distill.features import FeatureRequest, run_with_features
from fairseq_distill.losses import masked_mse

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


def mse_by_hand(s, t, mask, l2=False):
    total = 0.0
    for pos in range(3):
        for b in range(2):
            if not mask[b][pos]:
                continue
            u, v = s[pos][b], t[pos][b]
            if l2:
                nu, nv = math.sqrt(sum(x * x for x in u)), math.sqrt(sum(x * x for x in v))
                u, v = [x / nu for x in u], [x / nv for x in v]
            total += sum((x - y) ** 2 for x, y in zip(u, v)) / 4
    return total


@pytest.mark.parametrize("normalize", ["none", "l2"])
def test_masked_mse_by_hand(normalize):
    got = masked_mse(torch.tensor(S), torch.tensor(T1), torch.tensor(MASK), normalize)
    assert got.item() == pytest.approx(mse_by_hand(S, T1, MASK, normalize == "l2"), rel=1e-6)


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


def test_one_layer_group_of_equal_width_has_no_projection():
    fuser = CombinationFuser([(3,), (6,)], student_dim=4, teacher_dim=4)
    assert sum(p.numel() for p in fuser.parameters()) == 0
    assert len(list(CombinationFuser([(3,)], student_dim=4, teacher_dim=8).parameters())) == 2


@pytest.mark.parametrize("score", ["dot", "scaled_dot", "cosine"])
def test_alp_by_hand(score):
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
    fuser = AttentionFuser(4, 4, score=score)
    got = fuser(0, torch.tensor(S), [torch.tensor(T1), torch.tensor(T2)], torch.tensor(MASK))
    assert got.item() == pytest.approx(mse_by_hand(S, fused, MASK), rel=1e-5)
    alpha = fuser.last_alpha[0]
    assert alpha.shape == (2, 3, 2) and torch.allclose(alpha.sum(0), torch.ones(3, 2))


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
])
def test_total_loss_weights(tiny_data, deep_teacher, criterion, extra):
    _, _, crit, loss, logs = distill_loss(tiny_data, deep_teacher, criterion, *extra)
    # defaults: η = 0.1, λ = 0.7, β = 1 − η − λ = 0.2
    assert_weighted_sum(loss, logs, {"ce_loss": 0.2, "kd_loss": 0.1, "layer_loss": 0.7})
    assert logs["layer_loss"].item() > 0
    loss.backward()
    grads = [p.grad for p in crit.parameters()]
    assert grads and all(g is not None and g.abs().sum() > 0 for g in grads)


def test_student_layers_receive_layer_loss_gradient(tiny_data, deep_teacher):
    _, model, _, loss, logs = distill_loss(tiny_data, deep_teacher, "ckd", "--kd-weight", "0", "--layer-weight", "1",
                                           "--ce-weight", "0")
    assert loss.item() == pytest.approx(logs["layer_loss"].item(), rel=1e-6)
    loss.backward()
    assert model.encoder.layers[0].fc1.weight.grad.abs().sum() > 0
    # encoder-side KD only: the decoder layers get no gradient from the layer loss
    assert model.decoder.layers[0].fc1.weight.grad is None or model.decoder.layers[0].fc1.weight.grad.abs().sum() == 0


def test_collapsible_setups_are_warned_about(caplog):
    """A learned teacher-side projection with plain MSE can collapse (measured: 5.49 BLEU)."""
    cases = [  # (fuser, expect a warning)
        (lambda: CombinationFuser([(1,), (2,)], 4, 6, "teacher", "none"), True),
        (lambda: CombinationFuser([(1,), (2,)], 4, 6, "teacher", "l2"), False),
        (lambda: CombinationFuser([(1,), (2,)], 4, 6, "student", "none"), False),  # fixed teacher target
        (lambda: CombinationFuser([(1,), (2,)], 4, 4, "teacher", "none"), False),  # no projection
        (lambda: AttentionFuser(4, 6, normalize="none"), True),
        (lambda: AttentionFuser(4, 6, normalize="l2"), False),
    ]
    for make, warned in cases:
        caplog.clear()
        with caplog.at_level("WARNING"):
            make()
        assert any("shrink towards a constant" in r.message for r in caplog.records) == warned
    from fairseq_distill.criterions.options import LayerKDConfig, PKDConfig

    assert PKDConfig().layer_normalize == "l2" and LayerKDConfig().layer_normalize == "none"
