"""One rank of a CPU data-parallel fairseq-train run that also dumps its student weights.

Only rank 0 writes checkpoints in fairseq, so to compare replicas each rank saves its
model's (and criterion's) state when validation starts (after the last update) to $FSD_REPLICA_DUMP/rank{R}.pt,
and its online teacher's, if any, to teacher{R}.pt (a run without torch.distributed is rank 0).
Usage: python tests/ddp_worker.py <fairseq-train arguments> --task translation_distill_replica_dump
(or translation_multidepth_replica_dump for flexible-depth training).
"""
import json
import os
import sys

import torch
from fairseq.tasks import register_task

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from fairseq_distill.features import unwrap_model  # noqa: E402
from fairseq_distill.tasks.translation_distill import (  # noqa: E402
    TranslationDistillConfig,
    TranslationDistillTask,
)
from fairseq_distill.tasks.translation_multidepth import MultiDepthConfig, MultiDepthTranslationTask  # noqa: E402


class ReplicaDump:
    def build_criterion(self, cfg, *args, **kwargs):
        self.dumped_criterion = super().build_criterion(cfg, *args, **kwargs)
        return self.dumped_criterion

    def train_step(self, sample, model, *args, **kwargs):
        out = super().train_step(sample, model, *args, **kwargs)
        # layer orders and skipped sub-layers drawn by a stochastic layer stack, if any
        inner = unwrap_model(model)
        for side in ("encoder", "decoder"):
            layers = getattr(inner, side).layers
            if hasattr(layers, "order"):
                self.draws.append([side, list(layers.order), [list(s) for s in layers.skipped]])
        return out

    @property
    def draws(self):
        if not hasattr(self, "_draws"):
            self._draws = []
        return self._draws

    def begin_valid_epoch(self, epoch, model):
        super().begin_valid_epoch(epoch, model)
        rank = torch.distributed.get_rank() if torch.distributed.is_initialized() else 0
        weights = {k: v.detach().clone() for k, v in model.state_dict().items()}
        # distillation-only parameters (layer projections, alignment modules) must agree too
        for k, v in self.dumped_criterion.state_dict().items():
            if torch.is_tensor(v):  # the loss forms and the collapse watch travel as extra state
                weights[f"criterion.{k}"] = v.detach().clone()
        torch.save(weights, os.path.join(os.environ["FSD_REPLICA_DUMP"], f"rank{rank}.pt"))
        teacher = getattr(self, "teacher", None)
        if teacher is not None:
            torch.save({k: v.detach().clone() for k, v in teacher.models[0].state_dict().items()},
                       os.path.join(os.environ["FSD_REPLICA_DUMP"], f"teacher{rank}.pt"))
        with open(os.path.join(os.environ["FSD_REPLICA_DUMP"], f"draws{rank}.json"), "w") as f:
            json.dump(self.draws, f)


@register_task("translation_distill_replica_dump", dataclass=TranslationDistillConfig)
class ReplicaDumpTask(ReplicaDump, TranslationDistillTask):
    pass


@register_task("translation_multidepth_replica_dump", dataclass=MultiDepthConfig)
class MultiDepthReplicaDumpTask(ReplicaDump, MultiDepthTranslationTask):
    pass


if __name__ == "__main__":
    from fairseq_cli.train import cli_main

    cli_main()
