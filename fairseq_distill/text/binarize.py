"""Binarization of training pairs that keeps its finished work, shared by the two tools that write
training data: ``fsd-prepare-corpus`` (the segmented training text, with the joined dictionary it
builds) and ``fsd-seqkd --merge`` (the pairs its walk wrote, with the data's dictionaries).

:func:`binarize_train` binarizes the pairs in pieces of :data:`PIECE_PAIRS` (fewer when the
corpus has fewer pieces than ``workers``, so that each worker has one), each a byte range of each
side's text binarized by fairseq's own routine for one worker's share of a file, with the
dictionaries given. Each finished piece is recorded in the caller's record (``done``, a dict, and
``finish(name, value)``: :class:`~fairseq_distill.text.corpus_steps.Stages` for the preparation,
the walk's state file for the merge), so that a rerun after an interruption binarizes only the
pieces not finished. ``workers`` parallelises across pieces, not inside one: that many worker
processes, each binarizing one side of a piece at a time. The finished pieces are concatenated with
fairseq's ``MMapIndexedDatasetBuilder.merge_file_``, as fairseq-preprocess joins its workers'
shares: the files are byte for byte those of one fairseq-preprocess call with those dictionaries.

For ``fsd-prepare-corpus`` also:

1. :func:`build_dictionary`: ``fairseq-preprocess --dict-only --joined-dictionary`` over the
   segmented training text, the dictionary a single fairseq-preprocess call would build, made
   before the training pairs are binarized with it;
2. :func:`binarize_evaluation`: valid and test sets by one fairseq-preprocess call with that
   dictionary (which also writes ``dict.LANG.txt`` into ``bin/``).
"""
import math
import os
import shutil
import subprocess
import sys
import threading
from typing import Dict, List, Tuple

from fairseq_distill.errors import DistillError
from fairseq_distill.progress import Progress
from fairseq_distill.streaming import bounded_map

# training pairs a piece holds: a piece is the work an interruption can lose, and a corpus of
# millions of pairs is binarized in several
PIECE_PAIRS = 500_000


def fairseq_preprocess(src, tgt, destdir, workers, log_path, trainpref=None, validpref=None, testprefs=(),
                       dictionary_dir=None, dict_only=False):
    """Run stock fairseq-preprocess with its whole output (its options, dictionary sizes) appended
    to ``log_path``, named with its last lines if it fails. Without ``dictionary_dir`` it builds a
    joined dictionary from ``trainpref``; with it, it uses that directory's ``dict.LANG.txt``."""
    cmd = [sys.executable, "-m", "fairseq_cli.preprocess", "--source-lang", src, "--target-lang", tgt,
           "--destdir", destdir, "--workers", str(workers)]
    if trainpref:
        cmd += ["--trainpref", trainpref]
    if validpref:
        cmd += ["--validpref", validpref]
    if testprefs:
        cmd += ["--testpref", ",".join(testprefs)]
    if dictionary_dir:
        cmd += ["--srcdict", os.path.join(dictionary_dir, f"dict.{src}.txt"),
                "--tgtdict", os.path.join(dictionary_dir, f"dict.{tgt}.txt")]
    else:
        cmd += ["--joined-dictionary"]
    if dict_only:
        cmd += ["--dict-only"]
    with open(log_path, "a", encoding="utf-8") as log:
        code = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT).returncode
    if code:
        with open(log_path, encoding="utf-8", errors="replace") as log:
            last = "".join(log.readlines()[-15:])
        raise DistillError(f"fairseq-preprocess failed (exit status {code}); the last lines of its log "
                           f"{log_path}:\n{last.rstrip()}")


def build_dictionary(src, tgt, tok_dir, dictionary_dir, workers, log_path) -> int:
    """The joined dictionary of the segmented training text into ``dictionary_dir``; returns its
    number of types (without the 4 specials)."""
    os.makedirs(dictionary_dir, exist_ok=True)
    open(log_path, "w").close()   # the log of this preparation's fairseq-preprocess calls starts here
    for lang in (src, tgt):   # left by an interrupted call: fairseq-preprocess refuses to overwrite one
        path = os.path.join(dictionary_dir, f"dict.{lang}.txt")
        if os.path.exists(path):
            os.remove(path)
    fairseq_preprocess(src, tgt, dictionary_dir, workers, log_path, trainpref=os.path.join(tok_dir, "train"),
                       dict_only=True)
    with open(os.path.join(dictionary_dir, f"dict.{src}.txt"), encoding="utf-8") as f:
        return sum(1 for _ in f)


def binarize_evaluation(src, tgt, tok_dir, bin_dir, test_names, dictionary_dir, workers, log_path):
    fairseq_preprocess(src, tgt, bin_dir, workers, log_path, validpref=os.path.join(tok_dir, "valid"),
                       testprefs=[os.path.join(tok_dir, name) for name in test_names],
                       dictionary_dir=dictionary_dir)


def piece_ranges(pairs: int, workers: int, most: int) -> List[Tuple[int, int]]:
    """The training pairs' pieces as 0-based ``[first, end)`` ranges of at most ``most`` pairs,
    smaller when that would leave some of ``workers`` without a piece."""
    size = max(1, min(most, math.ceil(pairs / max(workers, 1))))
    return [(first, min(first + size, pairs)) for first in range(0, pairs, size)]


def line_offsets(path: str, lines: List[int]) -> List[int]:
    """The byte offsets in ``path`` where each of the sorted 0-based ``lines`` starts (the file's
    size for the line after the last)."""
    wanted, offsets, position = iter(lines), [], 0
    target = next(wanted, None)
    with open(path, "rb") as f:
        for number, line in enumerate(f):
            while target == number:
                offsets.append(position)
                target = next(wanted, None)
            position += len(line)
    while target is not None:
        offsets.append(position)
        target = next(wanted, None)
    return offsets


def piece_prefix(pieces_dir, src, tgt, first, end, lang):
    return os.path.join(pieces_dir, f"train.{first + 1}-{end}.{src}-{tgt}.{lang}")


def stage_name(first, end):
    return f"binarized train pairs {first + 1}-{end}"


def binarize_piece(job) -> List[int]:
    """One piece of one side: ``(text file, byte range, dictionary, output prefix)`` binarized;
    returns its tokens (``</s>`` included) and how many of them are ``<unk>`` in place of a word."""
    from fairseq.binarizer import FileBinarizer, VocabularyDatasetBinarizer
    from fairseq.data import Dictionary

    text, start, end, dictionary_path, prefix = job
    vocab = Dictionary.load(dictionary_path)
    # what fairseq-preprocess runs on each worker's share of a file (its dataset_impl default, mmap)
    summary = FileBinarizer._binarize_chunk_and_finalize(VocabularyDatasetBinarizer(vocab, append_eos=True), text,
                                                          start, end, prefix, "mmap", vocab_size=len(vocab))
    return [summary.num_tok, summary.num_replaced]


def token_bytes(dictionary_path) -> int:
    """Bytes a token takes in the binarized files: fairseq's smallest type for the dictionary's size."""
    import numpy as np
    from fairseq.data import Dictionary, indexed_dataset

    return np.dtype(indexed_dataset.best_fitting_int_dtype(len(Dictionary.load(dictionary_path)))).itemsize


def written_bytes(directory) -> int:
    total = 0
    for name in os.listdir(directory):
        if name.endswith(".bin"):
            try:
                total += os.path.getsize(os.path.join(directory, name))
            except OSError:   # removed meanwhile
                pass
    return total


def piece_files(pieces_dir, src, tgt, first, end) -> List[str]:
    return [piece_prefix(pieces_dir, src, tgt, first, end, lang) + ext for lang in (src, tgt) for ext in (".bin", ".idx")]


def is_finished(record, pieces_dir, src, tgt, first, end) -> bool:
    """A piece recorded as binarized, in the form recorded now (both sides' counts), with its files."""
    done = record.done.get(stage_name(first, end))
    return (isinstance(done, dict) and set(done) == {src, tgt}
            and all(os.path.isfile(path) for path in piece_files(pieces_dir, src, tgt, first, end)))


def binarize_train(src, tgt, texts: Dict[str, str], dictionaries: Dict[str, str], bin_dir, pieces_dir, pairs,
                   tokens, workers, record, tag="prepare", what="binarizing train", log_path=None) -> int:
    """The ``pairs`` pairs of ``texts`` (``{lang: text file}``, a pair a line) binarized with
    ``dictionaries`` (``{lang: dict.LANG.txt}``) into ``bin_dir/train.SRC-TGT.LANG``: a piece at a
    time into ``pieces_dir``, each finished piece recorded in ``record``, then joined (the pieces
    stay until the caller, once it has recorded the join, calls :func:`remove_pieces`).
    ``tokens`` (both sides, ``</s>`` included) paces the progress line; ``log_path``, when given,
    gets the counts fairseq-preprocess logs. Returns the number of pieces."""
    ranges = piece_ranges(pairs, workers, PIECE_PAIRS) or [(0, 0)]   # no pairs: the files of an empty text
    kept = [r for r in ranges if is_finished(record, pieces_dir, src, tgt, *r)]
    todo = [r for r in ranges if r not in kept]
    os.makedirs(pieces_dir, exist_ok=True)
    keep = {os.path.basename(path) for r in kept for path in piece_files(pieces_dir, src, tgt, *r)}
    for name in os.listdir(pieces_dir):   # an unfinished piece is redone from its start
        if name not in keep:
            os.remove(os.path.join(pieces_dir, name))
    if kept:
        print(f"[{tag}] {what}: {len(kept)} of {len(ranges)} pieces kept from an earlier run "
              f"({sum(end - first for first, end in kept):,} pairs), "
              f"{len(todo)} to binarize", flush=True)
    if todo:
        remaining = tokens - sum(piece_tokens(record.done[stage_name(*r)]) for r in kept)
        of = f" ({len(todo)} of {len(ranges)} pieces; {len(kept)} kept)" if kept else ""
        run_pieces(src, tgt, texts, dictionaries, pieces_dir, ranges, todo, workers, record, remaining,
                   Progress(tag, f"{what}{of}", unit="tokens", report=lambda line: print(line, flush=True)))
    merge_pieces(src, tgt, bin_dir, pieces_dir, ranges, dictionaries)
    if log_path:
        log_counts(log_path, src, tgt, texts, dictionaries, pairs, ranges, len(kept), record)
    return len(ranges)


def piece_tokens(done) -> int:
    return sum(side[0] for side in done.values())


def remove_pieces(pieces_dir):
    """Joined: the pieces are no longer needed, and as large as the result."""
    shutil.rmtree(pieces_dir, ignore_errors=True)


def log_counts(log_path, src, tgt, texts, dictionaries, pairs, ranges, kept, record):
    """What fairseq-preprocess logs of each side it binarizes: the dictionary's size, the pairs,
    tokens and the share of words replaced by ``<unk>``."""
    from fairseq.data import Dictionary

    with open(log_path, "a", encoding="utf-8") as log:
        log.write(f"training pairs binarized by fairseq's binarizer in {len(ranges)} piece(s) of at most "
                  f"{ranges[0][1] - ranges[0][0]:,} pairs ({kept} kept from an earlier run), joined as "
                  f"fairseq-preprocess joins its workers' shares\n")
        for lang in (src, tgt):
            counts = [record.done[stage_name(*r)][lang] for r in ranges]
            n, replaced = sum(c[0] for c in counts), sum(c[1] for c in counts)
            log.write(f"[{lang}] Dictionary: {len(Dictionary.load(dictionaries[lang]))} types\n"
                      f"[{lang}] {texts[lang]}: {pairs} sents, {n} tokens, "
                      f"{100 * replaced / max(n, 1):.3}% replaced (by <unk>)\n")


def run_pieces(src, tgt, texts, dictionaries, pieces_dir, ranges, todo, workers, record, remaining, progress):
    # a piece's byte range on each side, from where its first pair's line starts
    starts = [first for first, _ in ranges]
    offsets = {lang: dict(zip(starts + [ranges[-1][1]], line_offsets(texts[lang], starts + [ranges[-1][1]])))
               for lang in (src, tgt)}
    jobs = [(texts[lang], offsets[lang][first], offsets[lang][end], dictionaries[lang],
             piece_prefix(pieces_dir, src, tgt, first, end, lang)) for first, end in todo for lang in (src, tgt)]
    width = token_bytes(dictionaries[src])
    before = written_bytes(pieces_dir)
    progress.measure_total = remaining
    stop = threading.Event()

    def watch():   # the pieces' files grow as they are written: their size says how far
        while not stop.wait(1.0):
            written = (written_bytes(pieces_dir) - before) // width
            progress.update(written - progress.done, measure=written)

    pool = None
    if workers > 1 and len(jobs) > 1:
        import multiprocessing

        pool = multiprocessing.get_context("fork").Pool(workers)
    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        results = bounded_map(binarize_piece, jobs, pool, 2 * workers)
        for first, end in todo:   # both sides of a piece finished: recorded, in corpus order
            record.finish(stage_name(first, end), {src: list(next(results)), tgt: list(next(results))})
    finally:
        stop.set()
        watcher.join()
        if pool is not None:   # every result collected, or an error on its way up: nothing left to wait for
            pool.terminate()
            pool.join()


def merge_pieces(src, tgt, bin_dir, pieces_dir, ranges, dictionaries):
    from fairseq.data import Dictionary, indexed_dataset

    for lang in (src, tgt):
        prefix = os.path.join(bin_dir, f"train.{src}-{tgt}.{lang}")
        merged = indexed_dataset.make_builder(indexed_dataset.data_file_path(prefix), impl="mmap",
                                              vocab_size=len(Dictionary.load(dictionaries[lang])))
        for first, end in ranges:
            merged.merge_file_(piece_prefix(pieces_dir, src, tgt, first, end, lang))
        merged.finalize(indexed_dataset.index_file_path(prefix))
