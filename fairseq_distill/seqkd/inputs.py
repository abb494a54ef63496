"""What a seq-KD job reads: its options, checked, and the source sentences it translates
(the training set, then any monolingual source). :mod:`fairseq_distill.seqkd.job` runs the job."""
import os
from dataclasses import dataclass
from typing import Iterable, Iterator, List, Optional

import numpy as np
from fairseq.data import Dictionary, data_utils

from fairseq_distill.errors import DistillError
from fairseq_distill.seqkd.selection import check_selection
from fairseq_distill.text.files import first_few

BACKENDS = ("fairseq", "ctranslate2")


@dataclass
class SeqKDJob:
    """What to make: the fields are fsd-seqkd's options (see its ``--help``)."""
    data: str
    teacher: Optional[str] = None  # ':'-separated for an ensemble
    teacher_translations: Optional[str] = None  # a file of translations instead of a teacher model
    teacher_ctranslate2: Optional[str] = None  # a pretrained CTranslate2 model directory (seqkd/external.py)
    teacher_tokenizer: Optional[str] = None  # its tokenizer (default: found in the directory)
    teacher_target_tokenizer: Optional[str] = None  # a sentencepiece model for its output, if another
    teacher_source_prefix: Optional[str] = None  # e.g. NLLB's eng_Latn
    teacher_target_prefix: Optional[str] = None  # e.g. NLLB's deu_Latn
    raw_train_source: Optional[str] = None  # the raw training source (default: the binarized one, desegmented)
    device: str = "auto"  # the CTranslate2 model's device
    out: Optional[str] = None
    work: Optional[str] = None  # shard outputs; default OUT.work
    subset: str = "train"
    source_lang: Optional[str] = None
    target_lang: Optional[str] = None
    backend: str = "fairseq"
    compute_type: Optional[str] = None  # ctranslate2 only (default float32)
    threads: Optional[int] = None  # ctranslate2's CPU threads (default: all cores)
    inter_threads: Optional[int] = None  # batches decoded side by side (default: one per thread on a CPU)
    beam: int = 5
    lenpen: float = 1.0
    max_len_a: float = 1.2
    max_len_b: int = 10
    nbest: int = 1
    select: str = "chrf"
    targets: Optional[int] = None  # --select mbr: the K best hypotheses each become a pair (default 1)
    source: Optional[str] = None  # monolingual source text to translate as well
    batch_size: int = 128
    max_tokens: Optional[int] = None
    num_shards: int = 1
    shard_id: Optional[int] = None  # generate only this shard, merge later
    merge: bool = False  # only merge existing shards
    on_missing: str = "fail"  # or "reference"
    max_len_ratio: Optional[float] = None
    allow_size_only_dictionary_check: bool = False  # teacher dictionaries not found: compare sizes


def data_langs(data_bin, meta, args):
    src = args.source_lang or (meta or {}).get("source_lang")
    tgt = args.target_lang or (meta or {}).get("target_lang")
    if not (src and tgt):
        raise DistillError(f"cannot tell the languages of {data_bin}: pass --source-lang and --target-lang")
    return src, tgt


class Side:
    """One binarized side of a subset, read when asked: sentence i as its space-separated subword
    pieces, ``</s>`` left out (what ``Dictionary.string`` gives, looked up directly: it walks
    tensors one element at a time, which dominated the merge on a large corpus). The data stay
    memory-mapped; nothing is held, so millions of sentences are read in flat memory, a range at
    a time (:meth:`read`) or one by one."""

    def __init__(self, data_bin, subset, src, tgt, lang):
        from fairseq.data.indexed_dataset import MMapIndexedDataset

        dictionary = Dictionary.load(os.path.join(data_bin, f"dict.{lang}.txt"))
        prefix = os.path.join(data_bin, f"{subset}.{src}-{tgt}.{lang}")
        self.dataset = data_utils.load_indexed_dataset(prefix, dictionary)
        if self.dataset is None:
            raise DistillError(f"no binarized '{subset}' data for '{lang}' at {prefix}.bin/.idx")
        self.symbols, self.eos = dictionary.symbols, dictionary.eos()
        self.mmap = isinstance(self.dataset, MMapIndexedDataset)

    def __len__(self):
        return len(self.dataset)

    def pieces(self, tokens) -> str:
        symbols, eos = self.symbols, self.eos
        return " ".join([symbols[t] for t in tokens if t != eos])

    def __getitem__(self, i: int) -> str:
        return self.pieces(self.dataset[i].tolist())

    def read(self, start: int, stop: int) -> List[str]:
        """Sentences ``start`` to ``stop`` - 1: one read of their tokens (they lie side by side in
        the .bin file), not one per sentence."""
        stop = min(stop, len(self))
        if start >= stop:
            return []
        if not self.mmap:
            return [self[i] for i in range(start, stop)]
        index = self.dataset._index
        sizes = np.asarray(index.sizes[start:stop], dtype=np.int64)
        first = int(index._pointers[start])
        tokens = np.frombuffer(self.dataset._bin_buffer, dtype=index.dtype, count=int(sizes.sum()),
                               offset=first).tolist()
        ends = np.cumsum(sizes).tolist()
        return [self.pieces(tokens[b - n:b]) for b, n in zip(ends, sizes.tolist())]

    def __iter__(self) -> Iterator[str]:
        for start in range(0, len(self), READ_AT_ONCE):
            yield from self.read(start, start + READ_AT_ONCE)


READ_AT_ONCE = 10_000  # sentences a Side reads at a time when iterated


def load_side(data_bin, subset, src, tgt, lang) -> List[str]:
    """Every sentence of one binarized side (:class:`Side`), as a list: for small sets."""
    return list(Side(data_bin, subset, src, tgt, lang))


def count_side(data_bin, subset, src, tgt, lang) -> int:
    """The number of sentences of a binarized side, without decoding them."""
    prefix = os.path.join(data_bin, f"{subset}.{src}-{tgt}.{lang}")
    dataset = data_utils.load_indexed_dataset(prefix, None)
    if dataset is None:
        raise DistillError(f"no binarized '{subset}' data for '{lang}' at {prefix}.bin/.idx")
    return len(dataset)


def shard_path(work, shard_id, num_shards):
    return os.path.join(work, f"shard{shard_id}-of-{num_shards}.jsonl")


def check_options(args: SeqKDJob):
    """Refuse bad options before anything runs, naming what is valid (those of an external
    teacher: :func:`fairseq_distill.seqkd.external.check_external_options`, which the job calls
    next; this module does not import that one, which imports it)."""
    if args.backend not in BACKENDS:
        raise DistillError(f"unknown --backend '{args.backend}'; choose one of {', '.join(BACKENDS)}")
    for flag, value in (("--compute-type", args.compute_type), ("--threads", args.threads),
                        ("--inter-threads", args.inter_threads)):
        if value is not None and args.backend != "ctranslate2" and not args.teacher_ctranslate2:
            raise DistillError(f"{flag} applies to CTranslate2 decoding only: --backend ctranslate2 or "
                               f"--teacher-ctranslate2 (the backend is {args.backend})")
    if args.threads is not None and args.threads < 1:
        raise DistillError(f"--threads must be at least 1, got {args.threads}")
    if args.inter_threads is not None and args.inter_threads < 1:
        raise DistillError(f"--inter-threads must be at least 1, got {args.inter_threads}")
    if args.beam < 1:
        raise DistillError(f"--beam must be at least 1, got {args.beam}")
    if not 1 <= args.nbest <= args.beam:
        raise DistillError(f"--nbest must be between 1 and the beam size ({args.beam}), got {args.nbest}: "
                           f"beam search finds at most beam-size hypotheses")
    check_selection(args.select, args.targets)
    if args.select == "mbr" and args.teacher_translations:
        raise DistillError("--select mbr compares the teacher's hypotheses with each other, but --teacher-translations "
                           "gives one translation per sentence: nothing to choose from; drop --select mbr")
    if args.select == "mbr" and not args.merge:  # a merge checks the n-best the shards hold
        if args.nbest < 2:
            raise DistillError(f"--select mbr compares the teacher's hypotheses with each other: it needs --nbest 2 "
                               f"or more (and --beam at least as large), got --nbest {args.nbest}")
        if (args.targets or 1) > args.nbest:
            raise DistillError(f"--targets {args.targets} is more than --nbest {args.nbest}: MBR keeps K of the "
                               f"teacher's N hypotheses; pass --nbest {args.targets} or more (and --beam at least "
                               f"as large), or fewer --targets")
    if args.on_missing not in ("fail", "reference"):
        raise DistillError(f"unknown --on-missing '{args.on_missing}'; choose fail or reference")
    if args.max_len_ratio is not None and args.max_len_ratio < 1:
        raise DistillError(f"--max-len-ratio must be at least 1 (pairs within R and 1/R are kept), "
                           f"got {args.max_len_ratio}")


def read_teachers(teachers, data_bin, src, tgt, allow_size_only=False):
    """The teachers' loaded states, each checked to share the data's dictionaries (or its ids
    mean other words)."""
    from fairseq_distill.teacher import frozen as teacher

    src_dict = Dictionary.load(os.path.join(data_bin, f"dict.{src}.txt"))
    tgt_dict = Dictionary.load(os.path.join(data_bin, f"dict.{tgt}.txt"))
    paths = teacher.split_teacher_paths(teachers)
    states = []
    for path in paths:
        state = teacher.read_teacher_checkpoint(path)
        teacher.check_teacher_dictionaries(state, path, src_dict, tgt_dict, allow_size_only)
        states.append(state)
    return paths, states


def decoding_settings(args, paths, mono_info) -> dict:
    """How a shard was decoded: recorded in its first line; every shard of a merge must agree.
    A teacher is identified by its name and content (SHA-256), not its path: shards may be
    decoded on other machines, and a teacher retrained at the same path is another teacher."""
    from fairseq_distill.text.files import file_sha256

    return {
        "backend": args.backend,
        "compute_type": (args.compute_type or "float32") if args.backend == "ctranslate2" else None,
        "teacher": [{"name": os.path.basename(p), "sha256": file_sha256(p)} for p in paths],
        "subset": args.subset, "beam": args.beam, "lenpen": args.lenpen,
        "max_len_a": args.max_len_a, "max_len_b": args.max_len_b, "nbest": args.nbest,
        "source": mono_info,
        **shard_batching(args),
    }


def shard_batching(args) -> dict:
    """What decides which sentences a shard holds, where that is the batching: fairseq-generate
    deals whole batches to shards, so shards decoded with another --batch-size or --max-tokens
    overlap and leave gaps. CTranslate2 takes sentence i into shard i mod N whatever the batching,
    and one shard holds everything."""
    if args.backend != "fairseq" or args.num_shards == 1:
        return {}
    return {"batch_size": None if args.max_tokens else args.batch_size, "max_tokens": args.max_tokens}


def sources_digest(sources: Iterable[str]) -> str:
    """The training source as decoded (its subword pieces, in corpus order), by content: a shard
    of other data, or of the same data binarized in another order, is not reused."""
    import hashlib

    h = hashlib.sha256()
    for line in sources:
        h.update(line.encode("utf-8") + b"\n")
    return h.hexdigest()


class Inputs:
    """The sentences to translate: the training source (ids 0..n-1), then the lines of
    ``--source`` (ids n..n+m-1), each as the binarized subword tokens, read when asked
    (:class:`Side`)."""

    def __init__(self, args, src, tgt, mono_dir=None, train: Optional[Side] = None):
        from fairseq_distill.seqkd.monolingual import SUBSET

        self.train = train if train is not None else Side(args.data, args.subset, src, tgt, src)
        self.mono = Side(mono_dir, SUBSET, src, tgt, src) if mono_dir else []
        self.mono_dir = mono_dir

    def __len__(self):
        return len(self.train) + len(self.mono)

    def __getitem__(self, i):
        return self.train[i] if i < len(self.train) else self.mono[i - len(self.train)]

    def read(self, start: int, stop: int) -> List[str]:
        """Sentences ``start`` to ``stop`` - 1 of the training source, then of ``--source``."""
        n = len(self.train)
        found = self.train.read(start, min(stop, n)) if start < n else []
        if stop > n and self.mono:
            found += self.mono.read(max(start, n) - n, stop - n)
        return found


def report_blank_sources(sources: Iterable[str], data: str, subset: str) -> List[int]:
    """The ids of the source sentences (their subword pieces) that show nothing: only </s>, or only
    invisible characters such as U+200B (data binarized by other tools; fsd-prepare-corpus refuses
    such lines). Each keeps its place and gets an empty target in the merge, whatever the teacher
    says for it (the fairseq backend invents a hypothesis, CTranslate2 returns none); said here,
    before the teacher runs."""
    from fairseq_distill.text.segmentation import blank_pieces

    empty = [i for i, pieces in enumerate(sources) if blank_pieces(pieces)]
    if empty:
        print(f"[seqkd] {data} ({subset}): {len(empty):,} source sentence(s) show nothing (only </s>, or only "
              f"invisible characters; ids {first_few(empty)}, 0-based): each keeps its place with an empty target, "
              f"as fsd-translate translates such a line; remove those pairs from the corpus first for none")
    return empty


def check_source_lengths(sources: Iterable[str], data: str, subset: str, limit: int, what: str):
    """Every source sentence, with its </s>, fits ``limit`` tokens (``what`` names the limit)."""
    over, first, longest = 0, None, None  # read as they come: nothing held per sentence
    for i, pieces in enumerate(sources):
        n = len(pieces.split()) + 1
        if n > limit:
            over += 1
            first = first or (i, n)
            if longest is None or n > longest[1]:
                longest = (i, n)
    if over:
        raise DistillError(
            f"{data} ({subset}): sentence {first[0]} has {first[1]} source tokens with </s>, more than "
            f"{what} ({limit}); {over} such sentence(s), the longest {longest[0]} with {longest[1]}. "
            f"Remove them when preparing the data (fsd-prepare-corpus --max-length) or raise the limit")
