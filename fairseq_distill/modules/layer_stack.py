"""The layer list of a deep encoder or decoder, run the way GPKD and Skipping Sub-Layer need.

Like fairseq's own ``LayerDropModuleList``, the stochastic behaviour lives in the list the
encoder iterates over, so fairseq's forward passes stay untouched:

* group permutation (Li et al., 2021): the stack is split into consecutive groups of
  ``group_size`` layers and, on every training forward, each group runs its layers in a
  uniformly random order (groups independent); evaluation uses the natural order;
* Skipping Sub-Layer: the stack tells each layer, by its *position* in this forward,
  the probability of omitting its attention and FFN sub-layers and whether they are
  omitted this time (see :class:`~fairseq_distill.models.deep_transformer.DeepEncoderLayer`).

Draws come from :class:`TrainingDraws`, not from torch's global generator: data-parallel
workers consume the global generator differently (dropout on different batches), but
they share fairseq's seed and update number, from which every draw here is derived.
"""
from typing import List, Optional, Sequence, Tuple

import torch
import torch.nn as nn

from fairseq_distill.errors import DistillError
from fairseq_distill.seeding import seeded_generator


class TrainingDraws:
    """Random draws reproducible from (seed, update number, draw index within the update).

    Updated through fairseq's ``set_num_updates``, which the trainer calls before every
    forward of an update; the draw index counts forwards within the update, so gradient
    accumulation still sees fresh draws for every micro-batch.
    """

    def __init__(self, seed: int, stream: int):
        self.seed, self.stream = int(seed), int(stream)
        self.num_updates, self.index = 0, 0

    def set_num_updates(self, num_updates: int):
        if num_updates != self.num_updates:
            self.num_updates, self.index = num_updates, 0

    def generator(self) -> torch.Generator:
        g = seeded_generator(self.seed, self.num_updates, self.index, self.stream)
        self.index += 1
        return g


def skip_probabilities(num_layers: int, rate: float, which: str = "both",
                       schedule: str = "linear") -> List[Tuple[float, float]]:
    """(p_attention, p_ffn) per layer position: sub-layer l = 1…2L is omitted with
    p_l = l/(2L)·φ (``linear``, the paper's) or φ (``uniform``, LayerDrop-like); ``which``
    limits skipping to attention or FFN sub-layers."""
    probs = []
    for layer in range(num_layers):
        pair = []
        for kind, l in (("attention", 2 * layer + 1), ("ffn", 2 * layer + 2)):
            p = rate * l / (2 * num_layers) if schedule == "linear" else rate
            pair.append(p if which in ("both", kind) else 0.0)
        probs.append(tuple(pair))
    return probs


class StochasticLayerStack(nn.ModuleList):
    def __init__(self, layers: Sequence[nn.Module], group_size: int = 0,
                 skip_probs: Optional[List[Tuple[float, float]]] = None,
                 draws: Optional[TrainingDraws] = None, side: str = "encoder"):
        super().__init__(layers)
        n = len(self)
        if group_size > 1 and n % group_size != 0:
            raise DistillError(f"--{side}-group-size {group_size} does not divide the {n} {side} "
                               f"layers; use a divisor of {n}")
        self.group_size = group_size if group_size > 1 else 0
        self.skip_probs = skip_probs if skip_probs and any(max(p) > 0 for p in skip_probs) else None
        self.draws = draws
        self.order = list(range(n))
        self.skipped = [(False, False)] * n

    def set_num_updates(self, num_updates):
        # fairseq's model.set_num_updates reaches every submodule that has this method
        if self.draws is not None:
            self.draws.set_num_updates(num_updates)

    @property
    def stochastic(self) -> bool:
        return bool(self.group_size or self.skip_probs)

    def draw(self):
        """Choose this training forward's layer order and omitted sub-layers."""
        if not (self.training and self.stochastic):
            self.order = list(range(len(self)))
            self.skipped = [(False, False)] * len(self)
            return
        g = self.draws.generator()
        order = list(range(len(self)))
        if self.group_size:
            order = []
            for start in range(0, len(self), self.group_size):
                order += [start + int(i) for i in torch.randperm(self.group_size, generator=g)]
        self.order = order
        if self.skip_probs:
            u = torch.rand(len(self), 2, generator=g)
            self.skipped = [(bool(u[i, 0] < pa), bool(u[i, 1] < pf)) for i, (pa, pf) in enumerate(self.skip_probs)]

    def __iter__(self):
        order = self.order if self.training else range(len(self))
        for position, index in enumerate(order):
            layer = self[index]
            if self.skip_probs is not None:
                layer.set_sublayer_skipping(self.skip_probs[position],
                                            self.skipped[position] if self.training else (False, False))
            yield layer


class SubnetworkLayerStack(nn.ModuleList):
    """The layer list of a flexible-depth stack: iterating runs only the layers of the selected
    depth's sub-network (a fixed, sorted list of indices per depth, see
    :mod:`fairseq_distill.depth.strategies`); all layers stay registered, so every depth
    shares the same parameters and checkpoint."""

    def __init__(self, layers: Sequence[nn.Module], subnetworks=None, side: str = "stack"):
        super().__init__(layers)
        self.subnetworks = dict(subnetworks or {len(self): list(range(len(self)))})
        self.side = side
        self.depth = max(self.subnetworks)

    def select(self, depth: int):
        if depth not in self.subnetworks:
            raise DistillError(f"{self.side} depth {depth} is not one this model was built for; "
                               f"its {self.side} depths are {sorted(self.subnetworks)}")
        self.depth = depth

    @property
    def active(self) -> List[int]:
        return self.subnetworks[self.depth]

    def __iter__(self):
        return (self[i] for i in self.active)
