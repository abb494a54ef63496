"""Noise that is not the user's business, kept out of the plugin's commands and training logs.

Libraries below fairseq warn about their own deprecated calls (hydra's experimental API,
torch's mask types, ``pin_memory`` without a GPU, ``torch.cuda.amp``) and fairseq logs that
tensorboardX is missing whenever its tasks are imported. None of it says anything about the
user's run, and a new user reads it as a problem. Only these exact messages are silenced;
every other warning and every error still shows.
"""
import logging
import os
import warnings

# (category, message pattern): warnings issued inside fairseq's and torch's own code
LIBRARY_WARNINGS = (
    (UserWarning, r"hydra\.experimental\.(initialize|compose)\(\) is no longer experimental"),
    (UserWarning, r"In '.*': Usage of deprecated keyword in package header"),
    (UserWarning, r"\s*The version_base parameter is not specified"),
    (UserWarning, r"\s*'config' is validated against ConfigStore schema with the same name"),
    (UserWarning, r"\s*The strict flag in the compose API is deprecated"),
    (UserWarning, r"Support for mismatched key_padding_mask and attn_mask is deprecated"),
    (UserWarning, r"'pin_memory' argument is set as true but no accelerator is found"),
    (FutureWarning, r"`torch\.cuda\.amp\.autocast\(args\.\.\.\)` is deprecated"),
)
# fairseq.tasks.text_to_speech logs this at INFO on import when tensorboardX is not installed
MISSING_TENSORBOARDX = "Please install tensorboardX"


class DropMessage(logging.Filter):
    def __init__(self, text: str):
        super().__init__()
        self.text = text

    def filter(self, record: logging.LogRecord) -> bool:
        return self.text not in record.getMessage()


# set to 1 to keep them: the benchmark runner does, for the tools whose whole output goes to a
# step's log file (the terminal shows only its progress lines)
SHOW_ENV = "FAIRSEQ_DISTILL_LIBRARY_WARNINGS"


def install():
    if os.environ.get(SHOW_ENV) == "1":
        return
    for category, pattern in LIBRARY_WARNINGS:
        warnings.filterwarnings("ignore", message=pattern, category=category)
    logger = logging.getLogger("fairseq.tasks.text_to_speech")
    if not any(isinstance(f, DropMessage) for f in logger.filters):
        logger.addFilter(DropMessage(MISSING_TENSORBOARDX))

