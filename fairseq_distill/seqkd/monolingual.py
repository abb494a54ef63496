"""Extra monolingual source text for seq-KD (``fsd-seqkd --source FILE``).

The teacher translates FILE as well, and each (line, translation) pair joins the training
pairs. The lines go through what the corpus went through in ``prepare_corpus``: read as
UTF-8 with lines ending at ``\\n`` only (:mod:`fairseq_distill.text.files`), segmented with
the data directory's own subword model, binarized with its source dictionary. Both
backends then read the same binarized tokens, as they do for the training source.

A line with nothing visible (empty, or only whitespace and invisible characters such as U+200B
or U+FEFF) keeps its place as an empty source (``</s>`` alone) and gets an empty target, as
fsd-translate translates it: skipping it would make the line numbers of FILE and the pairs
disagree, and what the teacher says for it would be invented. The lines are named. A line that
the subword model empties, and one longer than the teacher accepts, are errors naming their
line numbers.

The file is read, checked and segmented a window of lines at a time, so its size does not bound
memory. The binarized lines live in ``WORK/monolingual`` with a record of the file they came from
(name, size, SHA-256, line count); a rerun with the same file reuses
them, another file replaces them. They are written to a temporary directory and renamed
into place, so shards started side by side never read half-written data.
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
from typing import Callable, List, Optional

from fairseq_distill.errors import DistillError
from fairseq_distill.text.segmentation import Segmenter, load_meta
from fairseq_distill.streaming import chunks
from fairseq_distill.text.files import blank_line_numbers, file_sha256, first_few, iter_lines

MONO_DIR = "monolingual"
INFO_FILE = "source.json"
SUBSET = "train"  # the binarized lines' split name inside MONO_DIR


def describe_source(path: str) -> dict:
    """What identifies the file wherever it lies (shards may be decoded on other machines):
    recorded with the shards, compared when merging."""
    if not os.path.isfile(path):
        raise DistillError(f"--source file not found: '{path}'")
    return {"name": os.path.basename(path), "size": os.path.getsize(path), "sha256": file_sha256(path)}


def made_from(directory: str) -> Optional[str]:
    """The SHA-256 of the file ``directory`` was binarized from, if it holds a complete one."""
    recorded = os.path.join(directory, INFO_FILE)
    if not os.path.isfile(recorded):
        return None
    with open(recorded, encoding="utf-8") as f:
        return json.load(f).get("sha256")


WINDOW = 10_000  # lines read and segmented at a time


def segment_source(path: str, data_bin: str, write: Callable[[List[str]], None],
                   max_positions: Optional[int] = None) -> int:
    """The lines of ``path`` as space-joined subword pieces, handed to ``write`` a window at a
    time, checked (every line read first; then the first problem of the first kind refused: a
    line emptied by the subword model, one longer than the teacher accepts); returns the number of
    lines. A line with nothing visible (empty, or only whitespace and invisible characters such as
    U+200B or U+FEFF) is kept in its place as an empty source: its target is empty (the merge,
    :mod:`fairseq_distill.seqkd.merge_walk`), as fsd-translate translates it; the lines are said."""
    lines = iter_lines(path, what="--source ", offers_replace=False)
    segmenter = Segmenter.from_dir(data_bin) if load_meta(data_bin) is not None else None
    if segmenter is None:
        raise DistillError(f"--source needs the subword model the data was prepared with, but {data_bin} "
                           f"has no fairseq_distill.json (prepare the data with fsd-prepare-corpus)")
    count, blanks, emptied_count, too_long_count = 0, 0, 0, 0
    blank, emptied, too_long = [], None, None  # the first 11 blank lines' numbers; the first of the others
    for window in chunks(lines, WINDOW):
        found = set(blank_line_numbers(window))
        blanks += len(found)
        blank += sorted(count + k for k in found)[:11 - len(blank)]
        pieces = segmenter.encode_lines(window)
        for k, p in enumerate(pieces):
            if k + 1 in found:
                pieces[k] = ""  # nothing visible: an empty source, binarized as </s> alone
            elif not p.strip():
                emptied_count += 1
                emptied = emptied or (count + k + 1, window[k])
            elif max_positions and len(p.split()) + 1 > max_positions:
                too_long_count += 1
                too_long = too_long or (count + k + 1, len(p.split()))
        if not emptied_count and not too_long_count:
            write(pieces)
        count += len(window)
    if not count:
        raise DistillError(f"--source {path} has no lines")
    if blanks == count:
        raise DistillError(f"--source {path}: none of its {count:,} lines shows any text (each is empty, or only "
                           f"whitespace and invisible characters): nothing for the teacher to translate; give a file "
                           f"of sentences, one per line")
    if emptied:
        raise DistillError(f"--source {path}: line {emptied[0]} ({emptied[1]!r}) is empty after "
                           f"normalisation by the corpus's subword model ({emptied_count} such line(s)); every "
                           f"line must hold one sentence for the teacher to translate: remove them")
    if too_long:
        raise DistillError(
            f"--source {path}: line {too_long[0]} has {too_long[1]} subword tokens, more than the teacher "
            f"accepts ({max_positions - 1}; {too_long_count} such line(s)): split or remove them")
    if blanks:
        print(f"[seqkd] --source {path}: {blanks:,} of {count:,} lines show nothing (empty, or only whitespace and "
              f"invisible characters; lines {first_few(blank)}): each stays in its place with an empty target, as "
              f"fsd-translate translates it; remove those lines first for no such pairs")
    return count


def read_source(path: str, data_bin: str, max_positions: Optional[int] = None) -> List[str]:
    """The lines of ``path`` as space-joined subword pieces, checked (:func:`segment_source`): for
    a small file."""
    pieces = []
    segment_source(path, data_bin, pieces.extend, max_positions)
    return pieces


def prepare_source(path: str, data_bin: str, src: str, tgt: str, work: str,
                   max_positions: Optional[int] = None, info: Optional[dict] = None) -> str:
    """The directory holding ``path`` binarized (split ``SUBSET``) with the data's
    dictionaries; made unless it is already there for the same file."""
    info = info or describe_source(path)
    final = os.path.join(work, MONO_DIR)
    if made_from(final) == info["sha256"]:
        return final
    os.makedirs(work, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=".monolingual-", dir=work)
    try:
        text = os.path.join(tmp, "segmented")
        with open(f"{text}.{src}", "w", encoding="utf-8", newline="\n") as f:
            lines = segment_source(path, data_bin, lambda pieces: f.writelines(p + "\n" for p in pieces),
                                   max_positions)
        subprocess.run([
            sys.executable, "-m", "fairseq_cli.preprocess", "--source-lang", src, "--target-lang", tgt,
            "--only-source", "--trainpref", text, "--destdir", tmp,
            "--srcdict", os.path.join(data_bin, f"dict.{src}.txt"), "--workers", "1",
        ], check=True, stdout=subprocess.DEVNULL)
        # fairseq's translation task loads both dictionaries of a data directory
        shutil.copy(os.path.join(data_bin, f"dict.{tgt}.txt"), tmp)
        from fairseq.data import data_utils

        dataset = data_utils.load_indexed_dataset(os.path.join(tmp, f"{SUBSET}.{src}-{tgt}.{src}"), None)
        if dataset is None or len(dataset) != lines:
            raise DistillError(f"binarizing --source {path} gave {0 if dataset is None else len(dataset)} "
                               f"sentences for {lines} lines")
        with open(os.path.join(tmp, INFO_FILE), "w", encoding="utf-8") as f:
            json.dump({**info, "lines": lines}, f, indent=2)
        if made_from(final) == info["sha256"]:
            return final  # another shard finished first
        if os.path.isdir(final):
            shutil.rmtree(final)  # made from another file
        os.rename(tmp, final)
    finally:
        if os.path.isdir(tmp):
            shutil.rmtree(tmp)
    print(f"[seqkd] --source {path}: {lines:,} lines segmented and binarized in {final}")
    return final
