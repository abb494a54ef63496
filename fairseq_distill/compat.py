"""The few shims between fairseq and the torch/fairseq versions we support.

Everything version-dependent lives here, so the rest of the plugin reads as plain fairseq.

1. torch >= 2.6 loads checkpoints with ``weights_only=True``. fairseq's
   ``load_checkpoint_to_cpu`` does not pass ``weights_only``, and checkpoints of legacy
   (argparse-registered) architectures such as ``transformer`` keep their model options
   as an ``argparse.Namespace`` in ``cfg["model"]``, which the restricted unpickler
   refuses. ``argparse.Namespace`` is only an attribute bag, so we allow it through
   torch's public allow-list; importing the plugin (``--user-dir``) is
   enough for every fairseq tool. Checkpoints exported by
   :mod:`fairseq_distill.deploy.checkpoint` contain no Namespace at all and need nothing.
   Likewise numpy arrays and scalars: ``fairseq-train --eval-bleu`` keeps its BLEU statistics
   as numpy arrays in the checkpoint's meters; we allow what rebuilds a numpy array or scalar
   (no code beyond numpy's own constructors).
2. ``fairseq.models.build_model`` gained ``from_checkpoint`` after 0.12.x; we call it
   through :func:`build_model` with whatever the installed build accepts.
3. fairseq 0.12.2 runs the encoder layers of a model loaded from a checkpoint, in eval mode,
   through torch's fused ``_transformer_encoder_layer_fwd`` ("BetterTransformer"): the
   states come back batch-first (even as nested tensors) and the attention modules, with
   any hooks on them, are skipped, so a frozen teacher would yield no features. The layer
   itself turns that path off for good once it has been in training mode
   (``ever_training``); :func:`use_unfused_encoder_layers` sets that flag. Later fairseq
   builds have no such path and no such attribute.
4. fairseq's ``TransformerConfig.from_namespace`` keeps the options it does not know (such
   as our models' own) when given an ``argparse.Namespace``, but drops them from a
   ``DictConfig``, the form a checkpoint's stored options take when loaded;
   :func:`legacy_model_args` hands our models a Namespace either way.
5. fairseq 0.12 turns ``--bf16`` into ``--tpu`` as well (its ``parse_args_and_arch``; fairseq
   issue #4696), so ``fairseq-train --bf16`` on a CUDA GPU asks for an XLA device and fails.
   Where ``torch_xla`` is not installed no TPU can be meant: :func:`bf16_without_tpu` keeps
   bf16 and drops the TPU, applied to every fairseq command's config as it starts
   (``fairseq.distributed.utils.call_main``, which all of them go through after parsing; the
   plugin is imported during parsing, too late to change the parser) and by
   :mod:`fairseq_distill.trainer_setup`.
"""
import argparse
import importlib.util
import inspect

import torch
from omegaconf import OmegaConf, open_dict


def numpy_globals():
    """What pickles of numpy arrays and scalars name, in numpy 1.x (``numpy.core``) or 2.x."""
    import numpy as np

    multiarray = getattr(getattr(np, "_core", None), "multiarray", None) or np.core.multiarray
    dtypes = getattr(np, "dtypes", None)  # numpy >= 1.25: one class per dtype
    classes = [type(np.dtype(t)) for t in (np.bool_, np.int8, np.int16, np.int32, np.int64, np.uint8,
                                             np.float16, np.float32, np.float64)] if dtypes else []
    return [multiarray._reconstruct, multiarray.scalar, np.ndarray, np.dtype, *classes]


def allow_namespace_in_checkpoints():
    add_safe_globals = getattr(torch.serialization, "add_safe_globals", None)
    if add_safe_globals is not None:  # torch < 2.4 loads everything anyway
        add_safe_globals([argparse.Namespace, *numpy_globals()])


allow_namespace_in_checkpoints()


def load_checkpoint(path):
    """Load a fairseq checkpoint to CPU with fairseq's own upgrade logic."""
    from fairseq import checkpoint_utils

    return checkpoint_utils.load_checkpoint_to_cpu(path)


def build_model(model_cfg, task):
    """``fairseq.models.build_model`` for a model restored from a checkpoint."""
    from fairseq import models

    if "from_checkpoint" in inspect.signature(models.build_model).parameters:
        return models.build_model(model_cfg, task, from_checkpoint=True)
    return models.build_model(model_cfg, task)


def use_unfused_encoder_layers(model: torch.nn.Module):
    """Keep fairseq 0.12.2's fused eval-mode encoder path off (see 3. above); a no-op elsewhere."""
    for module in model.modules():
        if getattr(module, "ever_training", True) is False:
            module.ever_training = True


def legacy_model_args(args):
    """The model options as an ``argparse.Namespace`` (see 4. above)."""
    if OmegaConf.is_config(args):
        return argparse.Namespace(**OmegaConf.to_container(args, resolve=True))
    return args


def bf16_without_tpu(cfg):
    """``cfg`` with ``common.tpu`` off when fairseq set it only because of ``--bf16`` (see 5. above)."""
    common = cfg.common
    if getattr(common, "bf16", False) and getattr(common, "tpu", False) and importlib.util.find_spec("torch_xla") is None:
        with open_dict(cfg):
            common.tpu = False
    return cfg


def keep_bf16_off_tpu():
    from fairseq.distributed import utils as distributed_utils

    original = distributed_utils.call_main
    if getattr(original, "bf16_without_tpu", False):
        return

    def call_main(cfg, main, **kwargs):
        return original(bf16_without_tpu(cfg), main, **kwargs)

    call_main.bf16_without_tpu = True
    distributed_utils.call_main = call_main


keep_bf16_off_tpu()
