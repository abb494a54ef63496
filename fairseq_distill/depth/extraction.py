"""GPKD student extraction: a shallow student made of some of a deep teacher's own layers.

A teacher trained with group permutation (``--encoder-group-size h``) has groups of h
layers that learned to stand in for one another; the student keeps one layer per group
(the top one by default: the layer the next group reads in the unpermuted order decoding
uses, and the same student on every run; the paper draws one at random, ``keep="random"``),
renumbered consecutively, with everything else (embeddings,
final layer norms, output projection) copied as it is. The result is a decoding-format
checkpoint (see :mod:`fairseq_distill.deploy.checkpoint`) with the student's layer counts, no
optimizer state and no training progress, from which student training starts with
``--restore-file STUDENT.pt --reset-optimizer --reset-lr-scheduler --reset-meters
--reset-dataloader``.
"""
import random
import re
from typing import Dict, List, Optional

import torch

from fairseq_distill.deploy.checkpoint import count_parameters, export_decoding_checkpoint, load_checkpoint
from fairseq_distill.depth.strategies import subnetworks
from fairseq_distill.errors import DistillError

KEEP_RULES = ("top", "bottom", "random", "all")
_LAYER_KEY = re.compile(r"^(encoder|decoder)\.layers\.(\d+)\.(.+)$")


def layers_to_keep(side: str, num_layers: int, group_size: int, keep: str,
                   rng: Optional[random.Random] = None) -> List[int]:
    """0-based indices of the kept layers, in order.

    ``keep``: ``top``/``bottom``/``random`` (one layer per group of ``group_size``; a side
    without groups counts as groups of one, so all its layers stay), ``all``, or an explicit
    comma-separated list of 1-based layer numbers.
    """
    h = max(int(group_size or 0), 1)
    if num_layers % h != 0:
        raise DistillError(f"{side} group size {h} does not divide its {num_layers} layers")
    groups = [list(range(start, start + h)) for start in range(0, num_layers, h)]
    if keep == "top":
        return [g[-1] for g in groups]
    if keep == "bottom":
        return [g[0] for g in groups]
    if keep == "random":
        rng = rng or random.Random(1)
        return [rng.choice(g) for g in groups]
    if keep == "all":
        return list(range(num_layers))
    try:
        numbers = [int(x) for x in keep.split(",") if x.strip()]
    except ValueError:
        numbers = []
    if not numbers:
        raise DistillError(f"--{side}-keep '{keep}' is neither one of {', '.join(KEEP_RULES)} nor a "
                           f"comma-separated list of layer numbers 1..{num_layers}")
    bad = [n for n in numbers if not 1 <= n <= num_layers]
    if bad:
        raise DistillError(f"--{side}-keep: layer(s) {bad} out of range; the teacher's {side} has "
                           f"layers 1..{num_layers}")
    if numbers != sorted(set(numbers)):
        raise DistillError(f"--{side}-keep '{keep}': list each layer once, in increasing order")
    return [n - 1 for n in numbers]


def select_layers(weights: Dict[str, torch.Tensor], kept: Dict[str, List[int]]) -> Dict[str, torch.Tensor]:
    """The state dict restricted to the kept layers, renumbered 0, 1, … per side."""
    new_index = {side: {old: new for new, old in enumerate(layers)} for side, layers in kept.items()}
    out = {}
    for key, tensor in weights.items():
        m = _LAYER_KEY.match(key)
        if m is None:
            out[key] = tensor
            continue
        side, index, rest = m.group(1), int(m.group(2)), m.group(3)
        if index in new_index[side]:
            out[f"{side}.layers.{new_index[side][index]}.{rest}"] = tensor
    return out


def count_layers(weights: Dict[str, torch.Tensor], side: str) -> int:
    indices = {int(m.group(2)) for m in map(_LAYER_KEY.match, weights) if m and m.group(1) == side}
    return max(indices) + 1 if indices else 0


def extract_student(teacher: str, output: str, encoder_keep: str = "top", decoder_keep: str = "top",
                    encoder_group_size: Optional[int] = None, decoder_group_size: Optional[int] = None,
                    seed: int = 1) -> dict:
    """Write the student checkpoint; returns a summary (kept layers 1-based, sizes)."""
    state = load_checkpoint(teacher)
    model_cfg = state["cfg"]["model"]
    weights = state["model"]
    rng = random.Random(seed)
    kept, sizes = {}, {}
    for side, keep, group_size in (("encoder", encoder_keep, encoder_group_size),
                                   ("decoder", decoder_keep, decoder_group_size)):
        n = count_layers(weights, side)
        if n == 0:
            raise DistillError(f"{teacher} has no '{side}.layers.*' parameters: not a fairseq "
                               f"Transformer encoder-decoder checkpoint")
        if group_size is None:
            group_size = getattr(model_cfg, f"{side}_group_size", None) or 0
        kept[side] = layers_to_keep(side, n, group_size, keep, rng)
        sizes[side] = (n, len(kept[side]))

    student_weights = select_layers(weights, kept)
    arch = getattr(model_cfg, "arch", None) or getattr(model_cfg, "_name", None)
    updates = {
        "encoder_layers": len(kept["encoder"]), "decoder_layers": len(kept["decoder"]),
        "encoder_layers_to_keep": None, "decoder_layers_to_keep": None,
    }
    if str(arch).startswith("deep_transformer"):
        # the named shape would not describe the student; its options say it all
        updates.update(arch="deep_transformer", _name="deep_transformer",
                       encoder_group_size=0, decoder_group_size=0, skip_sublayer_rate=0.0)
    info = export_decoding_checkpoint(teacher, output, model_weights=student_weights,
                                      model_cfg_updates=updates, state=state, reset_progress=True)
    verify_checkpoint(output)
    info.update(
        teacher_parameters=count_parameters(weights),
        kept={side: [i + 1 for i in layers] for side, layers in kept.items()},
        layers=sizes,
    )
    return info


def verify_checkpoint(path: str):
    """Load ``path`` the way fairseq-generate does (strict state dict) and run one forward."""
    from fairseq import checkpoint_utils
    from fairseq.data import Dictionary
    from fairseq.tasks.translation import TranslationConfig, TranslationTask

    weights = load_checkpoint(path)["model"]

    def dictionary(size):  # only the size matters for building and loading the model
        d = Dictionary()
        while len(d) < size:
            d.add_symbol(f"<symbol{len(d)}>")
        return d

    src = dictionary(weights["encoder.embed_tokens.weight"].size(0))
    tgt = dictionary(weights["decoder.embed_tokens.weight"].size(0))
    if len(src) == len(tgt):
        tgt = src  # shared embeddings need one dictionary
    task = TranslationTask(TranslationConfig(), src, tgt)
    try:
        models, _ = checkpoint_utils.load_model_ensemble([path], task=task, strict=True)
    except Exception as e:  # noqa: BLE001 — reported with the path, then re-raised
        raise DistillError(f"the written student {path} does not load: {e}") from e
    model = models[0].eval()
    tokens = torch.full((1, 3), src.nspecial, dtype=torch.long)
    with torch.no_grad():
        logits = model(tokens, torch.tensor([3]), torch.full((1, 2), tgt.eos(), dtype=torch.long))[0]
    if not torch.isfinite(logits).all():
        raise DistillError(f"the written student {path} loads but produces non-finite output")


def extract_subnetwork(checkpoint: str, output: str, encoder_depth: Optional[int] = None,
                       decoder_depth: Optional[int] = None) -> dict:
    """One (encoder depth, decoder depth) sub-network of a ``flexible_transformer`` as an
    ordinary pre-norm ``transformer`` checkpoint that stock fairseq loads."""
    import argparse as _argparse

    state = load_checkpoint(checkpoint)
    cfg = state["cfg"]["model"]
    arch = getattr(cfg, "arch", None) or getattr(cfg, "_name", None)
    if not str(arch).startswith("flexible_transformer"):
        raise DistillError(f"{checkpoint} is a '{arch}' model, not a flexible_transformer")
    options = _argparse.Namespace(**{k: getattr(cfg, k, None) for k in (
        "encoder_layers", "decoder_layers", "encoder_depths", "decoder_depths", "depth_strategy")})
    kept = {}
    for side, depth in (("encoder", encoder_depth), ("decoder", decoder_depth)):
        plans = subnetworks(options, side)
        depth = depth or max(plans)
        if depth not in plans:
            raise DistillError(f"{side} depth {depth} is not one of this model's {side} depths {sorted(plans)}")
        kept[side] = plans[depth]
    updates = {
        "arch": "transformer", "_name": "transformer",
        "encoder_layers": len(kept["encoder"]), "decoder_layers": len(kept["decoder"]),
        "encoder_normalize_before": True, "decoder_normalize_before": True,
        "encoder_depths": None, "decoder_depths": None, "depth_strategy": None,
        "encoder_depth": None, "decoder_depth": None,
    }
    info = export_decoding_checkpoint(checkpoint, output, model_weights=select_layers(state["model"], kept),
                                      model_cfg_updates=updates, state=state)
    verify_checkpoint(output)
    info["kept"] = {side: [i + 1 for i in layers] for side, layers in kept.items()}
    return info
