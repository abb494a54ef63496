"""The seq-KD teacher decoded with CTranslate2 instead of fairseq-generate, with fairseq's rules.

Conversion. The teacher checkpoint is converted once, at full precision, with the export
code of :mod:`fairseq_distill.deploy.ctranslate2_export`, into ``WORK/ctranslate2-teacher/KEY``;
every shard and rerun with the same work directory reuses it. KEY hashes the checkpoint's
absolute path, size and modification time and the CTranslate2 version, so a retrained
teacher or another CTranslate2 is converted again. ``--compute-type`` (int8, ...) is applied
when the model is loaded (CTranslate2 quantises on load), so one conversion serves every
compute type. A conversion is written to a temporary directory and renamed into place,
so shards started side by side never read a half-written model.

What cannot be converted stops with a DistillError that says why and names
``--backend fairseq``: an ensemble (CTranslate2 decodes one model; fairseq averages the
members' probabilities), an architecture CTranslate2 cannot express
(:data:`~fairseq_distill.deploy.ctranslate2_export.UNSUPPORTED`, e.g. ``deep_transformer``'s
relative positions) or one its converter refuses.

Decoding follows fairseq's ``SequenceGenerator`` on the same subword tokens fairseq reads
(the binarized source, as strings of pieces, ``<unk>`` included):

* Length. A sentence of n source tokens may have at most
  ``L = min(int(max_len_a·(n+1) + max_len_b), max_target_positions − 1)`` output tokens
  (the +1 is ``</s>``): fairseq's formula for a batch of one sentence. CTranslate2 takes one
  ``max_decoding_length`` per call, so sentences are batched by L (equal source lengths
  give equal L) and each call gets its batch's exact L; no output is cut afterwards.
  (fairseq-generate applies the formula to each batch's longest source, so there a shorter
  sentence may get a looser limit; with ``--batch-size 1`` it is this rule.)
* ``</s>`` is not allowed as the first token (fairseq's ``min_len`` 1).
* Length penalty. fairseq ranks finished hypotheses by ``Σ log p / (T+1)^lenpen`` (T tokens
  plus ``</s>``); CTranslate2 divides by its hypothesis length to the ``length_penalty``,
  which counts ``</s>`` only with ``return_end_token``, so that is set and the formula is
  the same. ``length_penalty`` 0 would also make CTranslate2 stop a sentence as soon as its
  best beam ends, where fairseq waits for beam-size finished hypotheses; for ``--lenpen 0``
  CTranslate2 runs with 1 (the same stopping rule) and the hypotheses are ranked by their
  unnormalised score (score × length) here.
* The length limit, beam > 1. fairseq forces ``</s>`` after L tokens and scores those
  hypotheses with its log-probability; CTranslate2 stops at L and scores them without it,
  so hypotheses cut at the limit rank higher there than in fairseq. Every sentence whose
  beam search reached the limit (one of its returned hypotheses has L tokens, ``</s>``
  included) is decoded again with fairseq's own generator, in batches of sentences of equal
  source length (no padding, one limit: each search is the one fairseq runs for the sentence
  alone), and counted (``redecoded_with_fairseq``). Greedy search (beam 1) needs no such step: its tokens
  do not depend on the scores, and at the limit both stop after the same L tokens.

What remains different is arithmetic: other kernels round differently, which can flip a
near-tie between two beams, and the tail of an n-best list may differ when more than
beam-size hypotheses end in the same step (CTranslate2 keeps the best beam-size of them,
fairseq the first ones it finalises).
"""
import hashlib
import json
import os
import shutil
import sys
import tempfile
import time
from collections import defaultdict, deque
from dataclasses import dataclass, field
from typing import Callable, Dict, Iterable, Iterator, List, Optional, Tuple

import torch

from fairseq_distill.deploy.ctranslate2_export import convert, model_config, unsupported_reason
from fairseq_distill.errors import DistillError
from fairseq_distill.workdir import directory_made_aside
from fairseq_distill.deploy.translators import DecodingOptions, missing_library_error

CACHE_DIR = "ctranslate2-teacher"
INFO_FILE = "converted_from.json"
# every compute type CTranslate2 knows; which of them a device supports is asked at run time
COMPUTE_TYPES = ("default", "auto", "int8", "int8_float32", "int8_float16", "int8_bfloat16", "int16",
                 "float16", "bfloat16", "float32")
DEFAULT_COMPUTE_TYPE = "float32"  # the teacher as trained; int8 is faster, at some cost in fidelity
FALLBACK_HINT = "use --backend fairseq (fairseq-generate decodes it)"


def import_ctranslate2():
    try:
        import ctranslate2
    except ImportError as e:
        raise DistillError("--backend ctranslate2 needs the package: pip install ctranslate2 "
                           "(or the package's [deploy] extra)") from e
    return ctranslate2


def device() -> str:
    return "cuda" if import_ctranslate2().get_cuda_device_count() > 0 else "cpu"


def check_compute_type(compute_type: str, on: Optional[str] = None):
    ctranslate2 = import_ctranslate2()
    if compute_type not in COMPUTE_TYPES:
        raise DistillError(f"unknown --compute-type '{compute_type}'; CTranslate2 knows "
                           f"{', '.join(COMPUTE_TYPES)}")
    on = on or device()
    supported = sorted(ctranslate2.get_supported_compute_types(on))
    if compute_type not in ("default", "auto") and compute_type not in supported:
        raise DistillError(f"--compute-type {compute_type} is not supported on this machine's {on}; "
                           f"supported here: {', '.join(supported)}")


def check_convertible(paths: List[str], states: List[dict]):
    """Refuse, before anything is converted, what CTranslate2 cannot decode."""
    if len(paths) > 1:
        raise DistillError(
            f"--backend ctranslate2 decodes one model, but --teacher names an ensemble of {len(paths)} "
            f"checkpoints (CTranslate2 cannot average their predictions as fairseq does); {FALLBACK_HINT}")
    _cfg, arch = model_config(states[0])
    reason = unsupported_reason(arch)
    if reason:
        raise DistillError(f"teacher {paths[0]} cannot be decoded with CTranslate2: {reason}; {FALLBACK_HINT}")


def thread_split(threads: Optional[int], inter_threads: Optional[int], on: str) -> Tuple[int, int]:
    """(inter_threads, intra_threads) for CTranslate2: ``inter_threads`` batches decoded side by
    side, each on ``intra_threads`` threads, ``threads`` CPU threads in all (default: all cores).

    By default every batch gets one thread and as many batches as threads run side by side on a
    CPU: seq-KD is throughput work, and one thread per translation leaves no OpenMP thread
    waiting for another (bench/README.md, "CTranslate2's threads and batches"). On a GPU the
    batches share the device, so one at a time."""
    threads = threads or torch.get_num_threads()
    if threads < 1:
        raise DistillError(f"--threads must be at least 1, got {threads}")
    if inter_threads is None:
        inter_threads = threads if on == "cpu" else 1
    if inter_threads < 1:
        raise DistillError(f"--inter-threads must be at least 1, got {inter_threads}")
    if on == "cpu" and inter_threads > threads:
        raise DistillError(f"--inter-threads {inter_threads} is more than --threads {threads}: each batch decoded "
                           f"side by side needs a thread of its own (use at most {threads})")
    return inter_threads, max(1, threads // inter_threads)


def translate_in_order(translator, calls: Iterable[Tuple[object, dict]], workers: int
                       ) -> Iterator[Tuple[object, list]]:
    """``(key, outputs)`` for each ``(key, translate_batch keyword arguments)`` of ``calls``, in
    their order. Up to two batches per worker are handed to CTranslate2 at once (asynchronously),
    so that its ``inter_threads`` workers decode side by side without the whole input queued in
    memory. A batch CTranslate2 fails on raises :class:`BatchFailed` with its key when its turn
    comes."""
    def collect(key, futures):
        try:
            return key, [f.result() for f in futures]
        except (RuntimeError, ValueError) as e:
            raise BatchFailed(key, e) from e

    pending = deque()
    for key, kwargs in calls:
        try:
            pending.append((key, translator.translate_batch(asynchronous=True, **kwargs)))
        except (RuntimeError, ValueError) as e:
            raise BatchFailed(key, e) from e
        if len(pending) >= 2 * workers:
            yield collect(*pending.popleft())
    while pending:
        yield collect(*pending.popleft())


class BatchFailed(Exception):
    """CTranslate2 failed on the batch ``key`` (``cause``: its error)."""

    def __init__(self, key, cause: Exception):
        super().__init__(str(cause))
        self.key, self.cause = key, cause


def batch_failure(failed: BatchFailed, lengths: Dict[int, int], unit: str, ways_out: str) -> DistillError:
    """The user error for a failed batch (its key: ``(limit, sentence ids)``; ``lengths``: each
    sentence's source length in ``unit`` tokens): a CUDA library CTranslate2 could not load is named
    with its fixes, any other failure with the batch and its longest sentence."""
    missing = missing_library_error(failed.cause, ways_out)
    if missing is not None:
        return missing
    batch = failed.key[1]
    longest = max(batch, key=lambda i: lengths[i])
    return DistillError(f"the CTranslate2 teacher failed on sentences {batch[0]}..{batch[-1]} (the longest, "
                        f"{longest}, has {lengths[longest]} {unit} tokens): {failed.cause}; {ways_out}")


def cache_key(checkpoint: str) -> str:
    st = os.stat(checkpoint)
    version = import_ctranslate2().__version__
    text = f"{os.path.abspath(checkpoint)}\0{st.st_size}\0{st.st_mtime_ns}\0{version}"
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def converted_teacher(checkpoint: str, state: dict, data_bin: str, src: str, tgt: str, work: str) -> str:
    """The teacher's CTranslate2 model directory under ``work``, converted if not there yet."""
    ctranslate2 = import_ctranslate2()
    root = os.path.join(work, CACHE_DIR)
    final = os.path.join(root, cache_key(checkpoint))
    if os.path.isfile(os.path.join(final, INFO_FILE)):
        print(f"[seqkd] reusing the teacher's CTranslate2 conversion {final}")
        return final
    os.makedirs(root, exist_ok=True)
    started = time.time()
    tmp = tempfile.mkdtemp(prefix=".converting-", dir=root)
    try:
        model_cfg, arch = model_config(state)
        try:
            convert(checkpoint, state, model_cfg, data_bin, src, tgt, tmp, quantization="float32")
        except DistillError as e:
            raise DistillError(f"{e}; {FALLBACK_HINT}") from e
        st = os.stat(checkpoint)
        with open(os.path.join(tmp, INFO_FILE), "w", encoding="utf-8") as f:
            json.dump({"checkpoint": os.path.abspath(checkpoint), "size": st.st_size,
                       "mtime_ns": st.st_mtime_ns, "arch": arch, "ctranslate2": ctranslate2.__version__,
                       "max_target_positions": max_target_positions(state)}, f, indent=2)
        try:
            os.rename(tmp, final)
        except OSError:
            if not os.path.isfile(os.path.join(final, INFO_FILE)):  # not a shard that finished first
                raise
    finally:
        if os.path.isdir(tmp):
            shutil.rmtree(tmp)
    print(f"[seqkd] converted the teacher to CTranslate2 in {time.time() - started:.0f}s: {final}")
    return final


def max_source_positions(state: dict) -> int:
    return int(model_config(state)[0].get("max_source_positions") or 1024)


def max_target_positions(state: dict) -> int:
    return int(model_config(state)[0].get("max_target_positions") or 1024)


@dataclass
class Decoding(DecodingOptions):
    """fsd-seqkd's decoding options (see its ``--help``): the translators' beam, length penalty
    and length limit, and what seq-KD adds."""
    beam: int = 5
    nbest: int = 1
    batch_size: int = 128
    max_tokens: Optional[int] = None  # source tokens per batch, </s> included; overrides batch_size


def length_limit(source_tokens: int, options: Decoding, max_positions: int) -> int:
    """fairseq's output length limit for one sentence of ``source_tokens`` tokens (without </s>)."""
    return min(int(options.max_len_a * (source_tokens + 1) + options.max_len_b), max_positions - 1)


def plan_batches(lengths: Dict[int, int], options: Decoding, max_positions: int):
    """[(limit, [sentence ids])]: batches whose sentences share one length limit, shortest first."""
    groups = defaultdict(list)
    for sid, n in lengths.items():
        groups[length_limit(n, options, max_positions)].append(sid)
    batches = []
    for limit in sorted(groups):
        ids = sorted(groups[limit])
        if options.max_tokens:
            size = max(1, options.max_tokens // (max(lengths[i] for i in ids) + 1))
        else:
            size = options.batch_size
        batches += [(limit, ids[k:k + size]) for k in range(0, len(ids), size)]
    return batches


def rank(hypotheses: List[List[str]], scores: List[float], lenpen: float) -> List[List[str]]:
    """Hypotheses (``</s>`` still on those that have it) best first, by fairseq's score."""
    if lenpen != 0:
        return hypotheses  # CTranslate2 ranked them by the same formula
    # run with length penalty 1 (see the module docstring): score × length is the plain sum
    order = sorted(range(len(hypotheses)), key=lambda k: -scores[k] * len(hypotheses[k]))
    return [hypotheses[k] for k in order]


def strip_end(tokens: List[str]) -> List[str]:
    return tokens[:-1] if tokens and tokens[-1] == "</s>" else tokens


def redecode_in_batches(translator, sources: Dict[int, List[str]], ids: List[int], nbest: int,
                        batch_size: int, progress: Optional[Callable[[int], None]] = None
                        ) -> Dict[int, List[List[str]]]:
    """fairseq's n-best lists of the sentences ``ids``, decoded in batches of equal source
    length: such a batch has no padding and one length limit, so each sentence's beam search is
    the one fairseq runs for it alone (``fairseq-generate --batch-size 1``), without decoding
    one sentence at a time."""
    by_length = defaultdict(list)
    for sid in sorted(ids):
        by_length[len(sources[sid])].append(sid)
    out = {}
    for length in sorted(by_length):
        group = by_length[length]
        for k in range(0, len(group), max(batch_size, 1)):
            batch = group[k:k + batch_size]
            for sid, hyps in zip(batch, translator.translate_nbest([sources[sid] for sid in batch], nbest)):
                out[sid] = hyps
            if progress:
                progress(len(batch))
    return out


@dataclass
class DecodeResult:
    nbest: Dict[int, List[List[str]]] = field(default_factory=dict)  # pieces, best first
    at_length_limit: int = 0  # sentences whose search reached the limit
    redecoded_with_fairseq: int = 0
    seconds: float = 0.0


class CTranslate2Teacher:
    """One teacher checkpoint, converted and loaded, decoding batches of subword pieces."""

    def __init__(self, checkpoint: str, state: dict, data_bin: str, src: str, tgt: str, work: str,
                 options: Decoding, compute_type: str = DEFAULT_COMPUTE_TYPE, threads: Optional[int] = None,
                 inter_threads: Optional[int] = None):
        ctranslate2 = import_ctranslate2()
        on = device()
        check_compute_type(compute_type, on)
        self.inter_threads, intra_threads = thread_split(threads, inter_threads, on)
        self.model_dir = converted_teacher(checkpoint, state, data_bin, src, tgt, work)
        self.translator = ctranslate2.Translator(self.model_dir, device=on, compute_type=compute_type,
                                                 inter_threads=self.inter_threads, intra_threads=intra_threads)
        self.checkpoint, self.data_bin, self.options = checkpoint, data_bin, options
        self.max_source_positions = max_source_positions(state)
        self.max_target_positions = max_target_positions(state)
        self._fairseq = None

    def fairseq(self):
        """fairseq's own generator for the same teacher, loaded when first needed."""
        if self._fairseq is None:
            from fairseq_distill.deploy.translators import DecodingOptions, FairseqTranslator

            o = self.options
            self._fairseq = FairseqTranslator(self.checkpoint, self.data_bin, DecodingOptions(
                beam=o.beam, lenpen=o.lenpen, max_len_a=o.max_len_a, max_len_b=o.max_len_b))
        return self._fairseq

    def decode(self, sources: Dict[int, List[str]], progress: Optional[Callable[[int], None]] = None,
               again_bar: Optional[Callable[[int], object]] = None) -> DecodeResult:
        """The n-best lists (``options.nbest`` hypotheses, best first) of ``sources`` by id.
        ``progress(n)``: n more sentences through CTranslate2 (those at the length limit included);
        ``again_bar(total)``: a progress bar (``update``, ``close``) for the sentences decoded again
        with fairseq, which with a weak teacher may be most of them."""
        o = self.options
        too_long = [sid for sid, pieces in sources.items() if len(pieces) + 1 > self.max_source_positions]
        if too_long:
            raise DistillError(
                f"{len(too_long)} source sentences are longer than the teacher accepts "
                f"({self.max_source_positions} tokens with </s>; first ids: {sorted(too_long)[:5]})")
        result = DecodeResult()
        started = time.perf_counter()
        again = []
        def calls():
            for limit, ids in plan_batches({sid: len(p) for sid, p in sources.items()}, o, self.max_target_positions):
                yield (limit, ids), dict(
                    source=[sources[sid] for sid in ids], beam_size=o.beam, num_hypotheses=o.beam,
                    length_penalty=o.lenpen if o.lenpen != 0 else 1.0, max_decoding_length=limit,
                    min_decoding_length=1, return_end_token=True, return_scores=True, max_input_length=0)

        try:
            for (limit, ids), outputs in translate_in_order(self.translator, calls(), self.inter_threads):
                for sid, out in zip(ids, outputs):
                    hyps = [list(h) for h in out.hypotheses]
                    if any(len(h) >= limit for h in hyps):
                        result.at_length_limit += 1
                        if o.beam > 1:
                            again.append(sid)
                            continue
                    result.nbest[sid] = [strip_end(h) for h in rank(hyps, out.scores, o.lenpen)[:o.nbest]]
                if progress:
                    progress(len(ids))
        except BatchFailed as e:
            raise batch_failure(e, {sid: len(pieces) for sid, pieces in sources.items()}, "subword",
                                FALLBACK_HINT) from e
        if again:
            bar = again_bar(len(again)) if again_bar else None
            try:
                redecoded = redecode_in_batches(self.fairseq(), sources, again, o.nbest, o.batch_size,
                                                bar.update if bar else None)
            finally:
                if bar:
                    bar.close()
            result.nbest.update(redecoded)
            result.redecoded_with_fairseq += len(redecoded)
        result.seconds = time.perf_counter() - started
        if again:
            print(f"[seqkd] {len(again):,} sentences reached the length limit and were decoded again "
                  f"with fairseq, whose beam search ranks them differently there", file=sys.stderr)
        return result


# -- a Hugging Face model directory as the teacher (fsd-seqkd --teacher MODEL_DIR) -----------------

CONVERTED_DIR = "teacher-ctranslate2-hf"
CONVERTED_RECORD = "fairseq_distill_converted.json"
TOKENIZER_FILES = ("tokenizer_config.json", "tokenizer.json", "special_tokens_map.json", "vocab.json", "source.spm",
                   "target.spm", "sentencepiece.bpe.model", "spm.model", "sentencepiece.model",
                   "added_tokens.json", "generation_config.json")


def converted_for_ctranslate2(path: str, work: str) -> str:
    """The model directory ``path`` converted to CTranslate2 under ``work`` (float32, its
    tokenizer's files beside it), once: a later run reuses it while the model's files are the same."""
    from fairseq_distill.text.files import file_sha256
    from fairseq_distill.text.teacher_vocabulary import INSTALL, require_transformers
    from fairseq_distill.text.teacher_vocabulary import model_config as hf_model_config

    hf_model_config(path)  # a family that can teach, or refused by name
    digest = file_sha256(path)
    final = os.path.join(work, CONVERTED_DIR)
    record_path = os.path.join(final, CONVERTED_RECORD)
    if os.path.isfile(record_path):
        with open(record_path, encoding="utf-8") as f:
            if json.load(f).get("model_sha256") == digest:
                print(f"[seqkd] reusing the CTranslate2 conversion of {path}: {final}")
                return final
    if os.path.isdir(final):
        shutil.rmtree(final)  # converted from other files (the work directory is locked: no one else's)
    try:
        from ctranslate2.converters import TransformersConverter
    except ImportError as e:
        raise DistillError(f"sequence-level KD from {path} decodes with CTranslate2, which is not installed: "
                           f"{INSTALL}") from e
    require_transformers()
    started = time.time()
    with directory_made_aside(final) as tmp:
        files = [os.path.join(path, n) for n in TOKENIZER_FILES if os.path.isfile(os.path.join(path, n))]
        try:
            TransformersConverter(path, copy_files=files).convert(tmp, force=True)
        except Exception as e:
            raise DistillError(f"cannot convert {path} to CTranslate2: {type(e).__name__}: {e}") from e
        with open(os.path.join(tmp, CONVERTED_RECORD), "w", encoding="utf-8") as f:
            json.dump({"model": os.path.abspath(path), "model_sha256": digest}, f, indent=2)
    print(f"[seqkd] converted {path} to CTranslate2 in {time.time() - started:.0f}s: {final}")
    return final
