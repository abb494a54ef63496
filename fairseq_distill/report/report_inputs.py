"""What a deployment report reads, checked before anything is measured: the models, named,
and the test set, with the dictionaries every model must share with it.

Every check runs before the first export or decoding, so that bad input costs seconds, and
each names the bad value and the remedy.
"""
import os
import re
from dataclasses import dataclass
from typing import List, Sequence

from fairseq_distill import compat
from fairseq_distill.errors import DistillError
from fairseq_distill.evaluation.evaluate import check_subset, read_references
from fairseq_distill.text.files import read_lines
from fairseq_distill.text.segmentation import META_FILE, load_meta

NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]*$")
# fairseq-train's own file names, which say nothing of the model: the folder names it instead
TRAINING_FILE = re.compile(r"^checkpoint(_best|_last|\d+|_\d+_\d+)?$")


@dataclass
class ModelSpec:
    name: str
    path: str
    role: str  # "teacher" or "student"


@dataclass
class TestSet:
    data_bin: str
    subset: str
    meta: dict
    sources: List[str]
    references: List[str]

    @property
    def translated(self) -> List[int]:
        """Indices of the non-empty sources, the sentences every backend translates."""
        return [i for i, line in enumerate(self.sources) if line.strip()]

    @property
    def source_words(self) -> int:
        """Words of the source text, split at whitespace: the work every model does alike."""
        return sum(len(line.split()) for line in self.sources)


def default_name(path: str) -> str:
    """A model's name from its path: the file's stem, or the folder's name for fairseq-train's
    ``checkpoint_best.pt`` and the like."""
    stem = os.path.splitext(os.path.basename(path))[0]
    if TRAINING_FILE.match(stem):
        folder = os.path.basename(os.path.dirname(os.path.abspath(path)))
        return folder or stem
    return stem


def parse_model(text: str, role: str) -> ModelSpec:
    """``NAME=PATH`` or ``PATH`` (named by :func:`default_name`)."""
    name, sep, path = text.partition("=")
    if not sep:
        name, path = default_name(text), text
    if not path:
        raise DistillError(f"'{text}' names no checkpoint; give PATH or NAME=PATH")
    if not NAME.match(name):
        raise DistillError(f"model name '{name}' (from '{text}') is not a plain name: use letters, digits "
                           f"and . _ + - (it names files and table rows); give one as NAME=PATH")
    return ModelSpec(name, path, role)


def parse_models(teacher: str, students: Sequence[str]) -> List[ModelSpec]:
    """The teacher first, then the students, each name used once."""
    if not students:
        raise DistillError("give the teacher and at least one student")
    models = [parse_model(teacher, "teacher")] + [parse_model(s, "student") for s in students]
    seen = {}
    for m in models:
        if m.name in seen:
            raise DistillError(f"two models are named '{m.name}' ('{seen[m.name]}' and '{m.path}'); "
                               f"name them apart as NAME=PATH")
        seen[m.name] = m.path
    return models


def read_checkpoint(model: ModelSpec) -> dict:
    """A model's checkpoint state, with the errors a user can act on."""
    what = f"{model.role} '{model.name}'"
    if os.path.isdir(model.path):
        raise DistillError(f"{what}: '{model.path}' is a directory; give the fairseq checkpoint file (.pt) "
                           f"the CTranslate2 exports are made from")
    if not os.path.isfile(model.path):
        raise DistillError(f"{what}: checkpoint not found: '{model.path}'")
    try:
        state = compat.load_checkpoint(model.path)
    except Exception as e:  # a corrupt or non-checkpoint file: say which one
        raise DistillError(f"{what}: cannot read checkpoint '{model.path}': {type(e).__name__}: {e}") from e
    if not isinstance(state, dict) or "model" not in state or state.get("cfg") is None:
        raise DistillError(f"{what}: '{model.path}' is not a fairseq checkpoint (no 'model' weights and 'cfg')")
    return state


def read_test_set(data_bin: str, subset: str) -> TestSet:
    """The binarized ``subset`` of ``data_bin`` (for fairseq-generate) and its raw text (for
    CTranslate2, and the references of both)."""
    if not os.path.isdir(data_bin):
        raise DistillError(f"data directory not found: '{data_bin}'")
    check_subset(data_bin, subset)
    meta = load_meta(data_bin)
    if meta is None:
        raise DistillError(f"{data_bin} has no {META_FILE}: the report needs the data directory as "
                           f"fsd-prepare-corpus writes it (subword model, raw test text)")
    raw = meta.get("raw", {}).get(subset)
    if not raw:
        raise DistillError(f"{data_bin} keeps no raw '{subset}' text; it keeps raw text for "
                           f"{', '.join(sorted(meta.get('raw', {}))) or 'no subset'}: pass --subset one of those")
    sources = read_lines(os.path.join(data_bin, raw[meta["source_lang"]]), what="sources", offers_replace=False)
    references, where = read_references(data_bin, subset, meta, None)
    if len(sources) != len(references):
        raise DistillError(f"{data_bin}: the raw '{subset}' source has {len(sources)} lines but the "
                           f"references ({where}) have {len(references)}")
    if not any(line.strip() for line in sources):
        raise DistillError(f"{data_bin}: the raw '{subset}' source has no non-empty line to translate")
    return TestSet(data_bin, subset, meta, sources, references)


def check_dictionaries(model: ModelSpec, state: dict, test: TestSet) -> str:
    """The model must use the data's dictionaries, or its ids mean other words. Returns how that
    was checked: ``symbols`` (the model's own dictionaries, stored in the checkpoint or found in
    the data directory it was trained on) or ``sizes`` (none found: its embeddings' rows)."""
    from fairseq_distill.data_bin import check_model_dictionaries

    return check_model_dictionaries(
        state, model.path, test.data_bin, test.meta["source_lang"], test.meta["target_lang"],
        who=f"{model.role} '{model.name}' ({model.path})",
        remedy="every model of a report must be trained on the data given as --data (the same "
               "dictionaries: fairseq-preprocess --srcdict/--tgtdict)")


def check_threads(threads: Sequence[int]) -> List[int]:
    """Thread counts to time with, each once, in increasing order."""
    bad = [t for t in threads if t < 1]
    if bad or not threads:
        raise DistillError(f"thread counts must be at least 1, got {list(threads)}")
    return sorted(set(threads))
