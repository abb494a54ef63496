"""``--task translation_multidepth``: train a flexible-depth model on every depth at once.

One update runs every (encoder depth, decoder depth) task of a ``flexible_transformer`` on
the same batch, each task with only its sub-networks, accumulates the gradients of all
tasks (their losses are summed, as in Wang et al. 2021), and then fairseq takes one
optimizer step. The decoder depths of one encoder depth share that depth's encoder pass.
``--sample-encoder-depths K`` / ``--sample-decoder-depths K`` train K random depths per side
per update instead, drawn from fairseq's seed and the update number (the same on every
data-parallel worker). It extends ``translation_distill``, so any criterion works per task,
word-level KD from a teacher included.

Logged: ``loss``/``nll_loss`` are means over the tasks of the update; ``task_loss_eMdN``
is the loss of encoder depth M with decoder depth N. Validation runs every task.
"""
import itertools
import math
from dataclasses import dataclass, field
from typing import List, Tuple

import torch
from fairseq import metrics
from fairseq.tasks import register_task
from omegaconf import II

from fairseq_distill.errors import DistillError
from fairseq_distill.features import unwrap_model
from fairseq_distill.seeding import seeded_generator
from fairseq_distill.tasks.translation_distill import TranslationDistillConfig, TranslationDistillTask

COUNTS = ("ntokens", "nsentences", "sample_size")
TASK_KEY = "task_loss_e{}_d{}"


@dataclass
class MultiDepthConfig(TranslationDistillConfig):
    sample_encoder_depths: int = field(
        default=0, metadata={"help": "train this many random encoder depths per update (0: all)"})
    sample_decoder_depths: int = field(
        default=0, metadata={"help": "train this many random decoder depths per update (0: all)"})
    seed: int = II("common.seed")


@register_task("translation_multidepth", dataclass=MultiDepthConfig)
class MultiDepthTranslationTask(TranslationDistillTask):
    cfg: MultiDepthConfig

    @staticmethod
    def flexible(model):
        inner = unwrap_model(model)
        if not (hasattr(inner, "set_depth") and hasattr(inner, "depths")):
            raise DistillError(f"--task translation_multidepth trains a flexible-depth model "
                               f"(--arch flexible_transformer), not {type(inner).__name__}")
        return inner

    def depth_tasks(self, model, update_num=None) -> List[Tuple[int, int]]:
        """The (encoder depth, decoder depth) pairs to train on this update."""
        enc, dec = self.flexible(model).depths
        if update_num is not None and (self.cfg.sample_encoder_depths or self.cfg.sample_decoder_depths):
            g = seeded_generator(self.cfg.seed, update_num)

            def sample(depths, k):
                if not k or k >= len(depths):
                    return depths
                return sorted(depths[i] for i in torch.randperm(len(depths), generator=g)[:k].tolist())

            enc, dec = sample(enc, self.cfg.sample_encoder_depths), sample(dec, self.cfg.sample_decoder_depths)
        return list(itertools.product(enc, dec))

    def build_model(self, cfg, *args, **kwargs):
        model = super().build_model(cfg, *args, **kwargs)
        self.flexible(model)  # a clear error for any other architecture
        return model

    def _run_tasks(self, sample, model, criterion, tasks, backward=None):
        inner = self.flexible(model)
        restore = inner.depth
        logs, total = [], 0.0
        try:
            for m, group in itertools.groupby(tasks, key=lambda t: t[0]):
                loss_m = 0.0
                with inner.encoder.reusing_output():
                    for _, n in group:
                        inner.set_depth(m, n)
                        loss, sample_size, log = criterion(model, sample)
                        loss_m = loss_m + loss
                        logs.append(((m, n), log))
                if backward is not None:
                    backward(loss_m)
                total = total + loss_m.detach()
        finally:
            inner.set_depth(*restore)
        return total, sample_size, merge_logs(logs)

    def train_step(self, sample, model, criterion, optimizer, update_num, ignore_grad=False):
        model.train()
        model.set_num_updates(update_num)
        self.announce_update(criterion, update_num)

        def backward(loss):
            if ignore_grad:
                loss = loss * 0
            with torch.autograd.profiler.record_function("backward"):
                optimizer.backward(loss)

        with torch.autograd.profiler.record_function("forward"):
            return self._run_tasks(sample, model, criterion, self.depth_tasks(model, update_num), backward)

    def valid_step(self, sample, model, criterion):
        model.eval()
        with torch.no_grad():
            return self._run_tasks(sample, model, criterion, self.depth_tasks(model))

    def reduce_metrics(self, logging_outputs, criterion):
        super().reduce_metrics(logging_outputs, criterion)
        sample_size = sum(log.get("sample_size", 0) for log in logging_outputs)
        keys = sorted({k for log in logging_outputs for k in log if k.startswith("task_loss_")})
        for key in keys:
            value = sum(log.get(key, 0) for log in logging_outputs)
            metrics.log_scalar(key, value / max(sample_size, 1) / math.log(2), sample_size, round=3)


def merge_logs(logs) -> dict:
    """One logging output for the update: counts once, loss terms averaged over the tasks,
    and each task's loss under its own key."""
    first = logs[0][1]
    merged = {k: v for k, v in first.items() if k in COUNTS}
    for key, value in first.items():
        if key in COUNTS or not isinstance(value, (int, float, torch.Tensor)):
            continue
        merged[key] = sum(float(log[key]) for _, log in logs) / len(logs)
    for (m, n), log in logs:
        merged[TASK_KEY.format(m, n)] = float(log["loss"])
    return merged
