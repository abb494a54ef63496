"""A binarized data directory (what ``fairseq-preprocess`` writes): its files, checked and named
when missing, and its content digest.

Tools that keep work between runs (teacher-cache shards, seq-KD merges) identify the data by
content, not by path: a data directory binarized again in place, or another one at the same
path, is other data. :func:`data_digest` is the SHA-256 of the dictionaries and of a subset's
binarized files (both sides, ``.bin`` and ``.idx``), named in the hash, so the same bytes
anywhere give the same digest.
"""
import hashlib
import os
from typing import List, Optional, Tuple

from fairseq_distill.errors import DistillError

CHUNK = 1 << 22  # bytes read at a time while hashing


def pair_prefix(data: str, subset: str, src: str, tgt: str) -> str:
    """``DATA/SUBSET.SRC-TGT`` as fairseq finds it: that pair's order, else the reverse."""
    for a, b in ((src, tgt), (tgt, src)):
        prefix = os.path.join(data, f"{subset}.{a}-{b}")
        if os.path.exists(f"{prefix}.{src}.idx") or os.path.exists(f"{prefix}.{src}.bin"):
            return prefix
    return os.path.join(data, f"{subset}.{src}-{tgt}")


def subset_files(data: str, subset: str, src: str, tgt: str) -> List[str]:
    """The files of one binarized subset, both sides: ``.bin`` and ``.idx``."""
    prefix = pair_prefix(data, subset, src, tgt)
    return [f"{prefix}.{lang}.{ext}" for lang in (src, tgt) for ext in ("bin", "idx")]


def dictionary_files(data: str, src: str, tgt: str) -> List[str]:
    return [os.path.join(data, f"dict.{lang}.txt") for lang in dict.fromkeys((src, tgt))]


def check_dictionaries(data: str, src: str, tgt: str):
    """Both dictionaries are there, or the missing one is named."""
    for path in dictionary_files(data, src, tgt):
        if not os.path.isfile(path):
            raise DistillError(f"{data} has no {os.path.basename(path)}: not a complete binarized data directory "
                               f"for {src}-{tgt} (fairseq-preprocess writes dict.{src}.txt and dict.{tgt}.txt); "
                               f"binarize the data again, or pass the directory that has it")


def check_subset(data: str, subset: str, src: str, tgt: str):
    """Every file of ``subset`` is there, or the first missing one is named with what is there."""
    missing = [p for p in subset_files(data, subset, src, tgt) if not os.path.isfile(p)]
    if missing:
        found = sorted(f for f in os.listdir(data) if f.startswith(f"{subset}.")) if os.path.isdir(data) else []
        raise DistillError(f"{data} has no {os.path.basename(missing[0])}: the binarized '{subset}' set "
                           f"({src}-{tgt}) needs .bin and .idx files for both sides"
                           f"{'; found ' + ', '.join(found) if found else ''}; binarize the data again "
                           f"(fairseq-preprocess, fsd-prepare-corpus)")


def file_digest(path: str, h) -> None:
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(CHUNK), b""):
            h.update(block)


def _stamp(paths: List[str]) -> Tuple:
    return tuple((os.path.realpath(p), os.path.getsize(p), os.stat(p).st_mtime_ns) for p in paths)


_digests = {}  # one hash per file set and state within a process: a tool asks for it per shard


def data_digest(data: str, subset: str, src: str, tgt: str) -> str:
    """SHA-256 of ``data``'s dictionaries and binarized ``subset`` (by content and file name)."""
    check_dictionaries(data, src, tgt)
    check_subset(data, subset, src, tgt)
    paths = dictionary_files(data, src, tgt) + subset_files(data, subset, src, tgt)
    key = _stamp(paths)
    if key not in _digests:
        h = hashlib.sha256()
        for path in paths:
            h.update(os.path.basename(path).encode("utf-8") + b"\0" + str(os.path.getsize(path)).encode() + b"\0")
            file_digest(path, h)
        _digests[key] = h.hexdigest()
    return _digests[key]


def short(digest: Optional[str]) -> str:
    return (digest or "none")[:12]


def directory_digest(directory: str, skip=(".distill-lock", "preprocess.log")) -> str:
    """SHA-256 of every regular file under ``directory`` (relative paths and contents, in sorted
    order), names starting with one of ``skip`` left out."""
    h = hashlib.sha256()
    for folder, _, files in sorted(os.walk(directory)):  # every folder, in path order
        for name in sorted(files):
            path = os.path.join(folder, name)
            if name.startswith(skip) or not os.path.isfile(path):
                continue
            h.update(os.path.relpath(path, directory).encode("utf-8") + b"\0" + str(os.path.getsize(path)).encode()
                     + b"\0")
            file_digest(path, h)
    return h.hexdigest()
