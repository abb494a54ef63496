"""``fairseq-train`` started by torchrun where fairseq 0.12 would go wrong: refused before
anything starts, naming the flags that work (docs/training.md, "More than one machine").

fairseq recognises a torchrun launch by its environment (``MASTER_ADDR``, ``MASTER_PORT``,
``WORLD_SIZE``, ``RANK``), but only when its own ``--distributed-world-size`` is above 1, and
that option defaults to the number of GPUs of the machine. So:

1. On a machine with fewer than two GPUs (one GPU per machine, or none) and without
   ``--distributed-world-size``, every process torchrun starts trains a model of its own on
   all the data, silently.
2. With it, fairseq takes a process's device as its rank modulo the number of GPUs, which
   divides by zero on a machine without GPUs.
3. ``--distributed-init-method env://`` with a ``--distributed-rank`` other than the one
   torchrun gave the process waits for a rank that never comes.
4. On CPUs, the default ``--ddp-backend pytorch_ddp`` hands DistributedDataParallel a GPU
   index, which torch refuses for a model on the CPU (with or without torchrun).

Checked in ``fairseq.distributed.utils.call_main``, which every fairseq command goes through
after parsing (the plugin is imported during parsing), for training only.
"""
import os
from typing import Mapping, Optional

from fairseq_distill.errors import DistillError

TORCHRUN_VARIABLES = ("MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK")
CPU_DDP_BACKENDS = ("c10d", "pytorch_ddp")  # fairseq's names for torch's DistributedDataParallel


def launch_problem(distributed, gpus: int, cpu: bool, environ: Mapping[str, str]) -> Optional[str]:
    """What would go wrong in a training run with these ``--distributed-*`` options
    (``distributed``: fairseq's ``cfg.distributed_training``) on a machine with ``gpus`` GPUs,
    ``cpu`` for ``--cpu``; None when nothing would."""
    if getattr(distributed, "pipeline_model_parallel", False):
        return None
    world_size = distributed.distributed_world_size
    init_method = distributed.distributed_init_method
    if all(k in environ for k in TORCHRUN_VARIABLES) and int(environ["WORLD_SIZE"]) > 1:
        rank, size = int(environ["RANK"]), int(environ["WORLD_SIZE"])
        started = f"torchrun started this process as rank {rank} of {size}"
        if init_method is None and world_size == 1:
            return (f"{started}, but fairseq trains with --distributed-world-size 1 (its default on a "
                    f"machine with fewer than two GPUs), so every process would train a model of its own "
                    f"on all the data: pass --distributed-world-size {size}")
        if init_method is None and gpus == 0:
            return (f"{started} on a machine without GPUs, where fairseq 0.12 cannot tell a process's "
                    f"device (it divides the rank by the number of GPUs). On CPUs start one process per "
                    f"machine (--nproc-per-node 1) and pass --distributed-init-method env:// "
                    f"--distributed-world-size {size} --distributed-rank {rank} (the machine's --node-rank) "
                    f"--distributed-no-spawn, or start the processes without torchrun with "
                    f"--distributed-init-method tcp://HOST:PORT (docs/training.md)")
        if init_method == "env://" and distributed.distributed_rank != rank:
            return (f"{started}, but --distributed-rank is {distributed.distributed_rank}: the other "
                    f"processes would wait for rank {rank} forever. Pass --distributed-rank {rank} "
                    f"(with --nproc-per-node 1, the machine's --node-rank)")
    if world_size > 1 and (cpu or gpus == 0) and distributed.ddp_backend in CPU_DDP_BACKENDS:
        return (f"--ddp-backend {distributed.ddp_backend} (fairseq's default) hands DistributedDataParallel "
                f"a GPU index, which torch refuses for a model on the CPU: train on CPUs with "
                f"--ddp-backend legacy_ddp")
    return None


def is_training(main) -> bool:
    """``main`` is fairseq-train's (``fairseq_cli/train.py``, imported or run as ``-m``)."""
    filename = getattr(getattr(main, "__code__", None), "co_filename", "")
    return filename.endswith(os.path.join("fairseq_cli", "train.py"))


def check_training_launch():
    """Wrap fairseq's ``call_main`` so that a training run's launch is checked first."""
    import torch
    from fairseq.distributed import utils as distributed_utils

    original = distributed_utils.call_main
    if getattr(original, "checks_launch", False):
        return

    def call_main(cfg, main, **kwargs):
        if is_training(main) and not cfg.common.tpu:
            problem = launch_problem(cfg.distributed_training, torch.cuda.device_count(),
                                     bool(cfg.common.cpu), os.environ)
            if problem:
                raise DistillError(problem)
        return original(cfg, main, **kwargs)

    call_main.checks_launch = True
    distributed_utils.call_main = call_main
