"""The one exception type for bad user input (paths, maps, dictionaries, corpora)."""


class DistillError(ValueError):
    """Raised with a message that names the bad value and what would be valid."""


# what to do when a checkpoint's criterion parameters do not fit this run's options
OTHER_DISTILL_OPTIONS = (
    "the checkpoint's distillation parameters were trained with other options (--criterion, "
    "--distill-terms, --layer-map, --kd-side, --a2d-attention-types or another teacher shape). "
    "Resume with the options it was trained with, start a new --save-dir, or pass "
    "--reset-distill-parameters --reset-optimizer to start from its model weights with these "
    "parameters, the optimizer and the update count afresh")
