"""fairseq-train launches that fairseq 0.12 would get wrong are refused before they start
(fairseq_distill/launch_checks.py); the runs themselves are in test_distributed.py."""
from types import SimpleNamespace

import pytest

from fairseq_distill.launch_checks import is_training, launch_problem

TORCHRUN = {"MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "29500", "WORLD_SIZE": "4", "RANK": "3"}


def options(world_size=1, init_method=None, rank=0, ddp_backend="pytorch_ddp"):
    """fairseq's cfg.distributed_training, as far as the checks read it (defaults: fairseq's)."""
    return SimpleNamespace(distributed_world_size=world_size, distributed_init_method=init_method,
                           distributed_rank=rank, ddp_backend=ddp_backend, pipeline_model_parallel=False)


def test_torchrun_with_fairseqs_default_world_size_would_train_each_process_alone():
    problem = launch_problem(options(), gpus=1, cpu=False, environ=TORCHRUN)
    assert "rank 3 of 4" in problem and "pass --distributed-world-size 4" in problem


def test_torchrun_on_a_machine_without_gpus_names_the_flags_that_work():
    problem = launch_problem(options(world_size=4, ddp_backend="legacy_ddp"), gpus=0, cpu=True, environ=TORCHRUN)
    assert ("--distributed-init-method env:// --distributed-world-size 4 --distributed-rank 3 "
            "(the machine's --node-rank) --distributed-no-spawn") in problem


def test_env_init_with_another_rank_than_torchruns_is_refused():
    problem = launch_problem(options(world_size=4, init_method="env://", rank=0, ddp_backend="legacy_ddp"),
                             gpus=0, cpu=True, environ=TORCHRUN)
    assert "--distributed-rank is 0" in problem and "Pass --distributed-rank 3" in problem


@pytest.mark.parametrize("gpus,cpu", [(0, False), (2, True)])
def test_torch_ddp_on_cpus_is_refused_with_or_without_torchrun(gpus, cpu):
    tcp = options(world_size=2, init_method="tcp://127.0.0.1:1234", rank=1)
    assert "--ddp-backend legacy_ddp" in launch_problem(tcp, gpus=gpus, cpu=cpu, environ={})
    assert launch_problem(options(world_size=2, init_method="tcp://h:1", ddp_backend="legacy_ddp"),
                          gpus=gpus, cpu=cpu, environ={}) is None


@pytest.mark.parametrize("distributed,gpus,cpu,environ", [
    (options(), 0, True, {}),  # one process, no torchrun
    (options(world_size=4), 8, False, TORCHRUN),  # GPUs: fairseq reads torchrun's environment
    (options(world_size=4, init_method="env://", rank=3, ddp_backend="legacy_ddp"), 0, True, TORCHRUN),
    (options(), 1, False, {**TORCHRUN, "WORLD_SIZE": "1", "RANK": "0"}),  # torchrun with one process
    (options(world_size=2, init_method="tcp://h:1"), 2, False, {}),  # GPUs, fairseq's own launch
])
def test_launches_that_work_pass(distributed, gpus, cpu, environ):
    assert launch_problem(distributed, gpus=gpus, cpu=cpu, environ=environ) is None


def test_only_fairseq_train_is_checked():
    import fairseq_cli.generate
    import fairseq_cli.train

    assert is_training(fairseq_cli.train.main) and not is_training(fairseq_cli.generate.main)
