"""Task, model, criterion and fairseq ``Trainer`` built in-process from a fairseq-train command
line, as ``fairseq_cli.train`` builds them: for the tests and the step-cost benchmark
(``bench/step_cost.py``), which then drive ``Trainer.train_step`` or the criterion directly."""
from typing import Sequence

import numpy as np
from fairseq import options, tasks, utils
from fairseq.dataclass.utils import convert_namespace_to_omegaconf


def training_config(argv: Sequence[str]):
    """fairseq-train's argv (data directory first, no program name) -> its omegaconf config.
    ``--user-dir`` is imported while parsing, as in fairseq-train."""
    from fairseq_distill.compat import bf16_without_tpu

    parser = options.get_training_parser()
    args = options.parse_args_and_arch(parser, list(argv))
    return bf16_without_tpu(convert_namespace_to_omegaconf(args))


def build_task_and_model(argv: Sequence[str]):
    """(cfg, task, model): seeded from ``--seed`` as fairseq-train seeds before building.
    The criterion is left unbuilt, for callers that check how building it fails."""
    cfg = training_config(argv)
    utils.import_user_module(cfg.common)
    np.random.seed(cfg.common.seed)
    utils.set_torch_seed(cfg.common.seed)
    task = tasks.setup_task(cfg.task)
    model = task.build_model(cfg.model)
    return cfg, task, model


def build_training(argv: Sequence[str]):
    """(cfg, task, model, criterion, trainer), everything fairseq-train builds before its
    first epoch (no checkpoint is loaded: ``trainer.load_checkpoint`` does that)."""
    from fairseq.trainer import Trainer

    cfg, task, model = build_task_and_model(argv)
    criterion = task.build_criterion(cfg.criterion)
    trainer = Trainer(cfg, task, model, criterion)
    return cfg, task, model, criterion, trainer


def first_batch(task, split: str = "train", max_tokens: int = 600, seed: int = 1):
    """The first batch of ``split`` in corpus-iterator order (unshuffled), loading the split."""
    task.load_dataset(split)
    itr = task.get_batch_iterator(task.dataset(split), max_tokens=max_tokens, seed=seed)
    return next(iter(itr.next_epoch_itr(shuffle=False)))
