"""Under --fp16/--bf16 the student's outputs, states and attention maps arrive in half
precision; every loss computes in fp32 and matches the fp32 value, learned projections run
in the training dtype, and the teacher follows the student's dtype. (fairseq itself runs
--fp16/--bf16 only on CUDA: scripts/gpu_check.sh covers real training there.)"""
import pytest
import torch
import torch.nn as nn

from fairseq_distill.losses import align_attention, attention_kl, log_probs_at, masked_mse, word_kd_loss
from fairseq_distill.teacher.frozen import TeacherEnsemble
from fairseq_distill.terms.fusers import AttentionFuser, CombinationFuser

HALF = [torch.float16, torch.bfloat16]
TOL = {torch.float16: 2e-2, torch.bfloat16: 5e-2}  # relative, from rounding the inputs only


def close(value, reference, dtype):
    assert value.dtype == torch.float32
    assert torch.isfinite(value)
    assert value.item() == pytest.approx(reference.item(), rel=TOL[dtype])


@pytest.mark.parametrize("dtype", HALF)
def test_word_kd_in_fp32_from_half_logits(dtype):
    g = torch.Generator().manual_seed(0)
    student, teacher = torch.randn(2, 3, 11, generator=g), torch.randn(2, 3, 11, generator=g)
    mask = torch.tensor([[True, True, False], [True, True, True]])
    reference = word_kd_loss(log_probs_at(student, 2.0), log_probs_at(teacher, 2.0), mask, 2.0)
    value = word_kd_loss(log_probs_at(student.to(dtype), 2.0), log_probs_at(teacher.to(dtype), 2.0), mask, 2.0)
    close(value, reference, dtype)


@pytest.mark.parametrize("dtype", HALF)
def test_layer_losses_in_fp32_from_half_states(dtype):
    g = torch.Generator().manual_seed(1)
    s, t = torch.randn(4, 2, 8, generator=g), torch.randn(4, 2, 8, generator=g)
    mask = torch.tensor([[True] * 4, [True, True, False, False]])
    for normalize in ("none", "l2"):
        for reduction in ("mean", "sum"):
            close(masked_mse(s.to(dtype), t.to(dtype), mask, normalize, reduction),
                  masked_mse(s, t, mask, normalize, reduction), dtype)


@pytest.mark.parametrize("dtype", HALF)
def test_attention_kd_in_fp32_from_half_maps(dtype):
    g = torch.Generator().manual_seed(2)
    teacher = [torch.softmax(torch.randn(2, 2, 3, 4, generator=g), -1) for _ in range(2)]
    student = [torch.softmax(torch.randn(2, 2, 3, 4, generator=g), -1)]
    weight, bias = torch.randn(4, 2, generator=g), torch.randn(4, generator=g)
    keys = torch.ones(2, 1, 1, 4, dtype=torch.bool)
    queries = torch.ones(2, 3, dtype=torch.bool)
    reference = attention_kl(teacher, align_attention(student, weight, bias), keys, queries)
    aligned = align_attention([m.to(dtype) for m in student], weight.to(dtype), bias.to(dtype))
    assert aligned.dtype == torch.float32
    close(attention_kl([m.to(dtype) for m in teacher], aligned, keys, queries), reference, dtype)


@pytest.mark.parametrize("dtype", HALF)
@pytest.mark.parametrize("make", [
    lambda: CombinationFuser([(1, 2)], 8, 6, "teacher", "l2"),
    lambda: CombinationFuser([(1, 2)], 8, 6, "student", "none"),
    lambda: CombinationFuser([(1, 2)], 8, 6, "student", "l2", "sum"),  # --ckd-form released
    lambda: AttentionFuser(8, 6, "scaled_dot", normalize="l2"),
    lambda: AttentionFuser(8, 6, "dot", side="student"),  # --layer-project student
])
def test_fusers_run_in_the_training_dtype(dtype, make):
    """fairseq's fp16/bf16 optimizers cast the criterion's projections to the training dtype;
    the frozen teacher's states may arrive in another dtype and are cast to the projection's."""
    torch.manual_seed(3)
    fuser = make()
    g = torch.Generator().manual_seed(4)
    student = torch.randn(5, 2, 8, generator=g)
    teacher = [torch.randn(5, 2, 6, generator=g) for _ in range(2)]
    mask = torch.ones(2, 5, dtype=torch.bool)
    reference = fuser(0, student, teacher, mask)
    fuser.to(dtype)
    close(fuser(0, student.to(dtype), [t.to(dtype) for t in teacher], mask), reference, dtype)
    close(fuser(0, student.to(dtype), teacher, mask), reference, dtype)  # fp32 teacher states


@pytest.mark.parametrize("dtype", HALF)
def test_teacher_follows_the_students_dtype(dtype):
    teacher = nn.Linear(3, 2)
    ensemble = TeacherEnsemble([teacher], ["t.pt"])
    ensemble._follow(torch.zeros(1, dtype=dtype))
    assert all(p.dtype == dtype for p in ensemble.parameters())


def test_bf16_does_not_ask_for_a_tpu_without_torch_xla(tiny_data):
    """fairseq 0.12 sets --tpu with --bf16 (fairseq issue #4696): on a CUDA machine fairseq-train
    would ask for an XLA device. With the plugin loaded, every fairseq command's config keeps bf16
    and drops the TPU when torch_xla is absent; an explicit TPU setup (torch_xla present) is left alone."""
    from fairseq import options
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf
    from fairseq.distributed import utils as distributed_utils

    from helpers import PACKAGE_DIR

    parser = options.get_training_parser()
    args = options.parse_args_and_arch(parser, [tiny_data, "--user-dir", PACKAGE_DIR, "--arch", "transformer",
                                                "--bf16", "--cpu"])
    cfg = convert_namespace_to_omegaconf(args)
    assert cfg.common.bf16 and cfg.common.tpu  # what fairseq itself makes of --bf16
    seen = []
    distributed_utils.call_main(cfg, lambda c, **kwargs: seen.append(c))  # as fairseq-train starts
    assert seen[0].common.bf16 and not seen[0].common.tpu
