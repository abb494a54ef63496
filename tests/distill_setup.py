"""Build task, student, criterion and fairseq Trainer in-process, as fairseq-train does."""
import torch
from fairseq import options, tasks
from fairseq.dataclass.utils import convert_namespace_to_omegaconf
from fairseq.trainer import Trainer

import fairseq_distill  # noqa: F401  (registers the plugin)
from conftest import PACKAGE_DIR, TINY_MODEL, TRAIN_FLAGS


def build(data, *extra, criterion="word_kd", model=TINY_MODEL):
    parser = options.get_training_parser()
    args = options.parse_args_and_arch(
        parser,
        [data, "--user-dir", PACKAGE_DIR, "--criterion", criterion, *TRAIN_FLAGS, *model,
         "--dropout", "0", *extra],
    )
    cfg = convert_namespace_to_omegaconf(args)
    torch.manual_seed(1)
    task = tasks.setup_task(cfg.task)
    model = task.build_model(cfg.model)
    return cfg, task, model


def build_trainer(data, *extra, criterion="word_kd"):
    cfg, task, model = build(data, *extra, criterion=criterion)
    crit = task.build_criterion(cfg.criterion)
    trainer = Trainer(cfg, task, model, crit)
    return cfg, task, model, crit, trainer


def first_batch(task, split="train", max_tokens=600):
    task.load_dataset(split)
    itr = task.get_batch_iterator(task.dataset(split), max_tokens=max_tokens, seed=1)
    return next(iter(itr.next_epoch_itr(shuffle=False)))
