"""A teacher's top-k output distributions, stored once per corpus and read by dataset index.

Word-level KD needs, for every target token, the teacher's distribution over the vocabulary.
Running the teacher in every training step of every student repeats the same computation;
a cache made by ``fsd-cache-teacher`` (:mod:`fairseq_distill.teacher.cache_writer`) keeps
the K most probable tokens of each position instead, and training reads them by fairseq's
``sample["id"]``. A cache is a directory:

* ``meta.json``: what it was made from and how (:class:`CacheMeta`);
* ``offsets.npy``: int64, N + 1 entries; sentence i's target positions are rows
  ``offsets[i] .. offsets[i + 1] − 1`` (one row per target token, end-of-sentence included);
* ``log_probs.npy``: rows x K log-probabilities (float16 or float32), best first;
* ``indices.npy``: rows x K vocabulary indices, in the smallest unsigned integer type that
  holds the vocabulary.

The arrays are memory-mapped, so a training process (or each data-parallel rank) reads only
the rows of its batches. The log-probabilities are the teachers' averaged distribution at
temperature τ (recorded: training must use the same ``--kd-temperature``).
"""
import hashlib
import json
import logging
import os
from dataclasses import asdict, dataclass, field
from typing import List, Tuple

import numpy as np
import torch

from fairseq_distill.errors import DistillError

logger = logging.getLogger(__name__)

META_FILE = "meta.json"
OFFSETS_FILE = "offsets.npy"
LOG_PROBS_FILE = "log_probs.npy"
INDICES_FILE = "indices.npy"
FORMAT_VERSION = 1
VALUE_DTYPES = ("float16", "float32")


def index_dtype(vocab_size: int) -> np.dtype:
    """The smallest unsigned integer type that holds indices 0 .. vocab_size − 1."""
    for dtype in (np.uint8, np.uint16, np.uint32):
        if vocab_size - 1 <= np.iinfo(dtype).max:
            return np.dtype(dtype)
    return np.dtype(np.int64)


def sizes_digest(sizes) -> str:
    """A fingerprint of a dataset's per-sentence lengths (order included)."""
    return hashlib.sha1(np.asarray(sizes, dtype=np.int64).tobytes()).hexdigest()[:16]


def dictionary_digest(dictionary) -> str:
    """A fingerprint of a fairseq dictionary's symbols in index order."""
    return hashlib.sha1("\n".join(dictionary.symbols).encode("utf-8")).hexdigest()[:16]


@dataclass
class CacheMeta:
    """What a cache was made from, checked against the data it is used with."""

    teachers: List[str]          # absolute checkpoint paths, ensemble order
    teacher_digests: List[str]   # SHA-256 of each checkpoint file
    data: str                    # absolute path of the binarized data directory (where it was made)
    subset: str
    source_lang: str
    target_lang: str
    sentences: int
    tokens: int                  # target tokens = rows
    target_sizes_digest: str
    source_sizes_digest: str
    target_dictionary_digest: str
    vocab_size: int
    top_k: int
    temperature: float
    value_dtype: str
    index_dtype: str
    format_version: int = FORMAT_VERSION
    build_seconds: float = 0.0
    extra: dict = field(default_factory=dict)
    # each array file's size in bytes, written with meta.json last: a reader checks them (absent
    # from caches made before the check)
    array_bytes: dict = field(default_factory=dict)
    # the content digest of the data's dictionaries and binarized subset (fairseq_distill.data_bin;
    # empty in caches made before it was recorded)
    data_sha256: str = ""

    def save(self, directory: str):
        tmp = os.path.join(directory, META_FILE + ".tmp")
        with open(tmp, "w") as f:
            json.dump(asdict(self), f, indent=2)
        os.replace(tmp, os.path.join(directory, META_FILE))

    @classmethod
    def load(cls, directory: str) -> "CacheMeta":
        path = os.path.join(directory, META_FILE)
        if not os.path.isfile(path):
            raise DistillError(f"'{directory}' is not a finished teacher cache: no {META_FILE} (make one with "
                               f"fsd-cache-teacher; a sharded build needs its --merge step)")
        with open(path) as f:
            data = json.load(f)
        if data.get("format_version") != FORMAT_VERSION:
            raise DistillError(f"teacher cache '{directory}' has format version {data.get('format_version')}; "
                               f"this version reads {FORMAT_VERSION}: rebuild it with fsd-cache-teacher")
        return cls(**data)


def offsets_from_sizes(sizes) -> np.ndarray:
    offsets = np.zeros(len(sizes) + 1, dtype=np.int64)
    np.cumsum(np.asarray(sizes, dtype=np.int64), out=offsets[1:])
    return offsets


def load_array(directory: str, name: str, mmap_mode=None) -> np.ndarray:
    path = os.path.join(directory, name)
    try:
        return np.load(path, mmap_mode=mmap_mode)
    except (OSError, ValueError, EOFError) as e:  # EOFError: an empty (0-byte) file
        raise DistillError(f"teacher cache '{directory}' is incomplete or damaged: {path}: {e}; make it "
                           f"again with fsd-cache-teacher") from e


class TeacherCache:
    """A finished cache, opened read-only; :meth:`lookup` gives a batch's rows."""

    def __init__(self, directory: str):
        self.directory = directory
        self.meta = CacheMeta.load(directory)
        for name, size in self.meta.array_bytes.items():
            path = os.path.join(directory, name)
            found = os.path.getsize(path) if os.path.isfile(path) else None
            if found != size:
                raise DistillError(f"teacher cache '{directory}' is incomplete or damaged: {path} has "
                                   f"{'no file' if found is None else f'{found:,} bytes'} where its {META_FILE} "
                                   f"records {size:,}; make it again with fsd-cache-teacher")
        self.offsets = load_array(directory, OFFSETS_FILE)
        self.log_probs = load_array(directory, LOG_PROBS_FILE, mmap_mode="r")
        self.indices = load_array(directory, INDICES_FILE, mmap_mode="r")
        expected = (self.meta.tokens, self.meta.top_k)
        if (len(self.offsets) != self.meta.sentences + 1 or self.log_probs.shape != expected
                or self.indices.shape != expected):
            raise DistillError(f"teacher cache '{directory}' is damaged: its arrays do not have the shapes "
                               f"its {META_FILE} describes ({self.meta.sentences} sentences, {expected} rows x K)")
        self.target_sizes = np.diff(self.offsets)

    def describe(self) -> str:
        m = self.meta
        return (f"teacher cache {self.directory} ({m.subset} of {m.data}, {m.sentences:,} sentences, "
                f"K = {m.top_k}, τ = {m.temperature})")

    # -- checks against the data and options of a training run ------------------------------

    def check_dictionary(self, target_dictionary):
        if len(target_dictionary) != self.meta.vocab_size or \
                dictionary_digest(target_dictionary) != self.meta.target_dictionary_digest:
            raise DistillError(
                f"{self.describe()} was made with another target dictionary ({self.meta.vocab_size} "
                f"symbols, fingerprint {self.meta.target_dictionary_digest}) than this run's "
                f"({len(target_dictionary)} symbols, fingerprint {dictionary_digest(target_dictionary)}): "
                f"its token indices would mean other words; rebuild it on this data")

    def check_dataset(self, split: str, dataset):
        """``dataset``: the split training reads (a fairseq LanguagePairDataset)."""
        differences = []
        if split != self.meta.subset:
            differences.append(f"subset '{self.meta.subset}' in the cache, '{split}' here")
        if len(dataset) != self.meta.sentences:
            differences.append(f"{self.meta.sentences:,} sentences in the cache, {len(dataset):,} here")
        elif sizes_digest(dataset.tgt_sizes) != self.meta.target_sizes_digest:
            differences.append("the same number of sentences but other target lengths")
        elif sizes_digest(dataset.src_sizes) != self.meta.source_sizes_digest:
            differences.append("the same target lengths but other source lengths")
        if differences:
            raise DistillError(f"{self.describe()} does not match the training data: "
                               f"{'; '.join(differences)}. Rebuild it with fsd-cache-teacher on this "
                               f"data and subset")

    def check_teachers(self, paths, terms, allow_other: bool = False):
        """Word-level KD reads this cache while ``terms`` run the teachers at ``paths``
        (``--teacher-path``): they must be the teachers the cache was made from (by SHA-256, so
        a copy elsewhere passes), else the terms would learn from two different teachers."""
        from fairseq_distill.text.files import file_sha256

        digests = [file_sha256(p) for p in paths]
        if digests == list(self.meta.teacher_digests):
            return
        cached = ":".join(self.meta.teachers)
        given = ":".join(os.path.abspath(p) for p in paths)
        if not allow_other:
            raise DistillError(
                f"{self.describe()} was made from the teacher {cached}, but --teacher-path is {given} (other "
                f"file contents): word_kd would learn from the first and {', '.join(terms)} from the second. "
                f"Pass the cache's own teacher as --teacher-path, rebuild the cache with fsd-cache-teacher "
                f"--teacher {given}, or pass --allow-cache-of-another-teacher to mix them on purpose")
        logger.warning(f"--allow-cache-of-another-teacher: word_kd reads the cache of {cached}; "
                       f"{', '.join(terms)} runs {given}")

    def check_temperature(self, temperature: float):
        if abs(temperature - self.meta.temperature) > 1e-9:
            raise DistillError(f"{self.describe()} holds the teacher's distribution at τ = "
                               f"{self.meta.temperature}, but --kd-temperature is {temperature}: use "
                               f"--kd-temperature {self.meta.temperature} or rebuild the cache with "
                               f"--temperature {temperature}")

    # -- reading -------------------------------------------------------------------------------

    def lookup(self, ids: torch.Tensor, non_pad: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        """The cached rows of a batch, laid out like its targets.

        ``ids``: B dataset indices (``sample["id"]``); ``non_pad``: B x T, True at the real
        target tokens. Returns (log-probabilities B x T x K float32, indices B x T x K int64)
        on ``non_pad``'s device; padding positions hold log-probability −inf and index 0.
        A sentence whose number of target tokens differs from the cache's is an error: the
        cache belongs to other data.
        """
        ids_np = ids.detach().cpu().numpy().astype(np.int64)
        mask = non_pad.detach().cpu().numpy()
        if ids_np.size and (ids_np.min() < 0 or ids_np.max() >= self.meta.sentences):
            bad = int(ids_np.max() if ids_np.max() >= self.meta.sentences else ids_np.min())
            raise DistillError(f"sentence id {bad} is outside {self.describe()} (ids 0..{self.meta.sentences - 1})")
        lengths = mask.sum(axis=1)
        cached = self.target_sizes[ids_np]
        wrong = np.nonzero(lengths != cached)[0]
        if wrong.size:
            b = int(wrong[0])
            raise DistillError(f"sentence id {int(ids_np[b])} has {int(lengths[b])} target tokens in this batch "
                               f"but {int(cached[b])} in {self.describe()}: the cache was made from other data")
        # the k-th real token of a row (left or right padded) is the sentence's k-th cached row
        rows = self.offsets[ids_np][:, None] + np.cumsum(mask, axis=1) - 1
        rows = np.where(mask, rows, 0)
        flat = rows.reshape(-1)
        order = np.argsort(flat, kind="stable")  # sorted reads are kinder to a memory map
        values = np.empty((flat.size, self.meta.top_k), dtype=np.float32)
        indices = np.empty((flat.size, self.meta.top_k), dtype=np.int64)
        values[order] = self.log_probs[flat[order]]
        indices[order] = self.indices[flat[order]]
        shape = mask.shape + (self.meta.top_k,)
        values, indices = values.reshape(shape), indices.reshape(shape)
        values[~mask] = -np.inf
        indices[~mask] = 0
        device = non_pad.device
        return torch.from_numpy(values).to(device), torch.from_numpy(indices).to(device)
