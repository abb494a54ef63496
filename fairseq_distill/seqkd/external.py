"""A pretrained CTranslate2 model as the seq-KD teacher (``fsd-seqkd --teacher-ctranslate2 DIR``):
OPUS-MT, NLLB-200, M2M-100 or any model CTranslate2 converts, on its own vocabulary.

Such a teacher reads raw text, not the corpus's subword tokens. Each training sentence goes:
raw source → the teacher's tokenizer (:mod:`fairseq_distill.seqkd.teacher_tokenizers`) →
CTranslate2's beam search (``--teacher-target-prefix`` forced first, e.g. NLLB's ``deu_Latn``)
→ the teacher's detokenizer → the corpus's own subword model → a shard record, which is merged
exactly like a fairseq teacher's (:mod:`fairseq_distill.seqkd.merge`): corpus order, counts,
``--on-missing``, ``--nbest``/``--select``, ``--max-len-ratio``, the student's dictionaries.

The raw training source is ``--raw-train-source FILE`` when given, checked line by line
against the binarized source (segmenting each line with the corpus's subword model must give
the binarized sentence, so that the pairs stay aligned); otherwise the binarized source
desegmented, which is the raw text up to whitespace because ``fsd-prepare-corpus`` segments
losslessly, and is refused when a sentence holds ``<unk>``. ``--source FILE`` lines reach the
teacher as they are.

The output length limit is fairseq's rule on the teacher's own tokens, a·(source tokens) + b
(``--max-len-a``, ``--max-len-b``), with sentences batched by limit; a hypothesis cut at the
limit is kept and counted (``hypotheses_at_length_limit``). ``--lenpen`` is CTranslate2's
length penalty (scores divided by length^lenpen).
"""
import os
import sys
import time
from dataclasses import dataclass, field
from typing import Callable, Dict, Iterator, List, Optional, Tuple

from fairseq_distill.errors import DistillError
from fairseq_distill.seqkd.merge import EXTERNAL_BACKEND as BACKEND  # the shards' record of how they were decoded
from fairseq_distill.seqkd.teacher_tokenizers import file_record, find_tokenizer, load_tokenizer, model_config
from fairseq_distill.text.segmentation import Segmenter, load_meta

OPTIONS = {"--teacher-tokenizer": "teacher_tokenizer", "--teacher-target-tokenizer": "teacher_target_tokenizer",
           "--teacher-source-prefix": "teacher_source_prefix", "--teacher-target-prefix": "teacher_target_prefix",
           "--raw-train-source": "raw_train_source", "--device": "device"}
DEVICES = ("auto", "cpu", "cuda")
VOCABULARY_FILES = ("target_vocabulary.json", "target_vocabulary.txt", "shared_vocabulary.json",
                    "shared_vocabulary.txt", "vocabulary.json", "vocabulary.txt")


def check_external_options(args):
    """The options that need ``--teacher-ctranslate2``, and those it cannot take, named."""
    if not args.teacher_ctranslate2:
        given = [flag for flag, name in OPTIONS.items() if getattr(args, name) not in (None, "auto")]
        if given:
            raise DistillError(f"{', '.join(given)} apply to --teacher-ctranslate2 DIR (a pretrained CTranslate2 "
                               f"teacher) only")
        return
    others = [flag for flag, on in (("--teacher", args.teacher), ("--teacher-translations", args.teacher_translations),
                                    ("--backend ctranslate2", args.backend == "ctranslate2"),
                                    ("--allow-size-only-dictionary-check", args.allow_size_only_dictionary_check))
              if on]
    if others:
        raise DistillError(f"--teacher-ctranslate2 is the teacher and decodes with CTranslate2 itself: it takes no "
                           f"{', '.join(others)}")
    if args.device not in DEVICES:
        raise DistillError(f"unknown --device '{args.device}'; choose one of {', '.join(DEVICES)}")
    model_dir = args.teacher_ctranslate2
    from fairseq_distill.text.teacher_vocabulary import is_model_dir

    if is_model_dir(model_dir):  # converted under --work once the work directory is locked
        return
    if not os.path.isfile(os.path.join(model_dir, "model.bin")):
        raise DistillError(f"--teacher-ctranslate2 {model_dir} is not a CTranslate2 model directory (no model.bin); "
                           f"convert the model first, e.g. ct2-transformers-converter --model NAME --output_dir "
                           f"{model_dir} --copy_files (its tokenizer's files)")


def target_vocabulary(model_dir: str) -> Optional[set]:
    """The converted model's target tokens, if its vocabulary file is one CTranslate2 writes."""
    import json

    for name in VOCABULARY_FILES:
        path = os.path.join(model_dir, name)
        if os.path.isfile(path):
            with open(path, encoding="utf-8") as f:
                return set(json.load(f)) if name.endswith(".json") else {line.rstrip("\n") for line in f}
    return None


@dataclass
class ExternalResult:
    nbest: Dict[int, List[str]] = field(default_factory=dict)  # raw text, best first
    at_length_limit: int = 0
    decode_seconds: float = 0.0
    tokenize_seconds: float = 0.0
    detokenize_seconds: float = 0.0


class ExternalTeacher:
    """The model of ``--teacher-ctranslate2``, loaded with its tokenizer, translating raw text."""

    def __init__(self, args):
        from fairseq_distill.seqkd.ctranslate2_backend import check_compute_type, import_ctranslate2, thread_split

        ctranslate2 = import_ctranslate2()
        self.model_dir = args.teacher_ctranslate2
        # a data-bin in a Hugging Face teacher's pieces records the language codes it reads
        record = ((load_meta(args.data) or {}).get("teacher_vocabulary") or {})
        if record.get("source_code") and not args.teacher_source_prefix:
            args.teacher_source_prefix = record["source_code"]
        if record.get("target_code") and not args.teacher_target_prefix:
            args.teacher_target_prefix = record["target_code"]
        self.tokenizer = load_tokenizer(args.teacher_tokenizer or find_tokenizer(self.model_dir), self.model_dir,
                                        args.teacher_source_prefix, args.teacher_target_tokenizer)
        self.prefix = [args.teacher_target_prefix] if args.teacher_target_prefix else []
        if not self.prefix and getattr(self.tokenizer, "multilingual", False):
            target = (load_meta(args.data) or {}).get("target_lang") or args.target_lang or ""
            known = [self.tokenizer.language_token(c) for c in self.tokenizer.language_codes() if c.startswith(target)]
            raise DistillError(f"--teacher-ctranslate2 {self.model_dir} is multilingual: pass --teacher-target-prefix "
                               f"with the token of the language it should write" +
                               (f" (for '{target}': {', '.join(known[:5])})" if target and known else ""))
        vocabulary = target_vocabulary(self.model_dir)
        if self.prefix and vocabulary is not None and self.prefix[0] not in vocabulary:
            near = sorted(t for t in vocabulary if t[:2] == self.prefix[0][:2] and len(t) == len(self.prefix[0]))[:8]
            raise DistillError(f"--teacher-target-prefix {self.prefix[0]} is not a token of the model's target "
                               f"vocabulary (CTranslate2 would read it as <unk>)"
                               + (f"; tokens like it: {', '.join(near)}" if near else ""))
        self.device = ("cuda" if ctranslate2.get_cuda_device_count() > 0 else "cpu") \
            if args.device == "auto" else args.device
        # "default": the model's weights as converted (ct2-transformers-converter --quantization)
        self.compute_type = args.compute_type or "default"
        check_compute_type(self.compute_type, self.device)
        self.adds_eos = bool(model_config(self.model_dir).get("add_source_eos"))
        self.inter_threads, intra_threads = thread_split(args.threads, args.inter_threads, self.device)
        try:
            self.translator = ctranslate2.Translator(self.model_dir, device=self.device, compute_type=self.compute_type,
                                                     inter_threads=self.inter_threads, intra_threads=intra_threads)
        except (RuntimeError, ValueError) as e:
            raise DistillError(f"CTranslate2 cannot load --teacher-ctranslate2 {self.model_dir} on {self.device}: "
                               f"{e}") from e
        self.args = args

    def settings(self) -> dict:
        """What identifies this teacher and how it decodes: recorded in each shard's first line."""
        model = {"name": os.path.basename(os.path.normpath(self.model_dir)),
                 "model.bin": file_record(os.path.join(self.model_dir, "model.bin"))["size"]}
        a = self.args
        return {"backend": BACKEND, "teacher_model": model, "tokenizer": self.tokenizer.record,
                "source_prefix": a.teacher_source_prefix, "target_prefix": a.teacher_target_prefix,
                "compute_type": self.compute_type, "subset": a.subset, "beam": a.beam, "lenpen": a.lenpen,
                "max_len_a": a.max_len_a, "max_len_b": a.max_len_b, "nbest": a.nbest}

    def limit(self, source_tokens: int) -> int:
        """fairseq's rule on the teacher's tokens (with the end of sentence the model sees)."""
        n = source_tokens + (1 if self.adds_eos else 0)
        return max(1, int(self.args.max_len_a * n + self.args.max_len_b))

    def translate(self, texts: Dict[int, str], progress: Optional[Callable[[int], None]] = None) -> ExternalResult:
        """The n-best translations (raw text, best first) of ``texts`` by id."""
        from fairseq_distill.seqkd.ctranslate2_backend import BatchFailed, batch_failure, translate_in_order

        a, result = self.args, ExternalResult()
        started = time.perf_counter()
        tokens = {sid: self.tokenizer.encode(text) for sid, text in texts.items()}
        result.tokenize_seconds = time.perf_counter() - started
        groups: Dict[int, List[int]] = {}
        for sid in sorted(tokens):
            groups.setdefault(self.limit(len(tokens[sid])), []).append(sid)
        outputs: Dict[int, List[List[str]]] = {}
        started = time.perf_counter()
        def calls():
            for limit in sorted(groups):
                ids = groups[limit]
                size = max(1, a.max_tokens // max(len(tokens[i]) for i in ids)) if a.max_tokens else a.batch_size
                for k in range(0, len(ids), size):
                    batch = ids[k:k + size]
                    yield (limit, batch), dict(
                        source=[tokens[i] for i in batch], beam_size=a.beam, num_hypotheses=a.nbest,
                        length_penalty=a.lenpen, max_decoding_length=limit + len(self.prefix), max_input_length=0,
                        target_prefix=[self.prefix] * len(batch) if self.prefix else None)

        try:
            for (limit, batch), found in translate_in_order(self.translator, calls(), self.inter_threads):
                for sid, out in zip(batch, found):
                    hyps = [h[len(self.prefix):] if h[:len(self.prefix)] == self.prefix else h for h in out.hypotheses]
                    result.at_length_limit += bool(hyps) and len(hyps[0]) >= limit
                    outputs[sid] = hyps
                if progress:
                    progress(len(batch))
        except BatchFailed as e:
            raise batch_failure(e, {sid: len(t) for sid, t in tokens.items()}, "teacher",
                                "decode with --device cpu") from e
        result.decode_seconds = time.perf_counter() - started
        started = time.perf_counter()
        result.nbest = {sid: [self.tokenizer.decode(h) for h in hyps] for sid, hyps in outputs.items()}
        result.detokenize_seconds = time.perf_counter() - started
        return result


class RawSource:
    """The raw text the teacher translates (see the module docstring): the training source, then
    the lines of ``--source`` (``mono``, their count ``mono_lines``), read a window at a time
    (:meth:`windows`) so that no list of every line is held. Made by :func:`raw_training_source`,
    which checks the training source first."""

    def __init__(self, args, sources, segmenter: Segmenter, mono: Optional[str] = None, mono_lines: int = 0):
        self.args, self.sources, self.segmenter = args, sources, segmenter
        self.mono, self.mono_lines = mono, mono_lines

    def __len__(self):
        return len(self.sources) + self.mono_lines

    def training_texts(self) -> Iterator[str]:
        if self.args.raw_train_source:
            from fairseq_distill.text.files import iter_lines

            return (" ".join(line.split()) for line in iter_lines(self.args.raw_train_source,
                                                                  what="--raw-train-source "))
        return (self.segmenter.decode(pieces.split()) for pieces in self.sources)

    def windows(self, size: int) -> Iterator[Tuple[int, List[str]]]:
        """(first id, texts) of consecutive windows of at most ``size`` sentences, in corpus order."""
        from fairseq_distill.streaming import chunks
        from fairseq_distill.text.files import iter_lines
        from fairseq_distill.text.segmentation import normalize_whitespace

        start = 0
        parts = [self.training_texts()]
        if self.mono:
            parts.append(normalize_whitespace(line) for line in iter_lines(self.mono, what="--source "))
        for part in parts:
            for window in chunks(part, size):
                yield start, window
                start += len(window)


def raw_training_source(args, sources) -> RawSource:
    """The raw text of the training source the teacher translates (see the module docstring),
    checked against the binarized one a window of lines at a time."""
    if load_meta(args.data) is None:
        raise DistillError(f"--teacher-ctranslate2 translates raw text and its output is segmented with the "
                           f"corpus's subword model, but {args.data} has no fairseq_distill.json: prepare the data "
                           f"with fsd-prepare-corpus")
    segmenter = Segmenter.from_dir(args.data)
    if args.raw_train_source:
        from fairseq.data import Dictionary

        from fairseq_distill.seqkd.inputs import data_langs
        from fairseq_distill.streaming import chunks
        from fairseq_distill.text.files import iter_lines

        count = sum(1 for _ in iter_lines(args.raw_train_source, what="--raw-train-source "))
        if count != len(sources):
            raise DistillError(f"--raw-train-source {args.raw_train_source} has {count:,} lines; the "
                               f"'{args.subset}' set of {args.data} has {len(sources):,} sentences: one line per "
                               f"sentence, in corpus order")
        src, _ = data_langs(args.data, load_meta(args.data), args)
        dictionary = Dictionary.load(os.path.join(args.data, f"dict.{src}.txt"))
        lines = iter_lines(args.raw_train_source, what="--raw-train-source ")
        number = 0
        for window in chunks(lines, WINDOW):
            for line, pieces in zip(segmenter.encode_lines(window), sources.read(number, number + len(window))):
                number += 1
                seen = " ".join(p if dictionary.index(p) != dictionary.unk() else dictionary.unk_word
                                for p in line.split())
                if seen != pieces:
                    raise DistillError(f"--raw-train-source {args.raw_train_source}: line {number} is not training "
                                       f"sentence {number - 1} of {args.data} (segmented: {seen[:80]!r}; binarized: "
                                       f"{pieces[:80]!r}); give the raw source the data was prepared from")
        return RawSource(args, sources, segmenter)
    unknown, first = 0, None
    for i, pieces in enumerate(sources):
        if "<unk>" in pieces.split():
            unknown += 1
            first = i if first is None else first
    if unknown:
        raise DistillError(f"{unknown:,} sentences of the '{args.subset}' set of {args.data} hold <unk> (first id "
                           f"{first}), so "
                           f"their raw text cannot be read back from the binarized data: pass --raw-train-source "
                           f"FILE, the raw source the data was prepared from")
    return RawSource(args, sources, segmenter)


WINDOW = 100_000  # sentences read, translated and segmented at a time


def external_shard(args, teacher: ExternalTeacher, raw: RawSource, settings: dict):
    """Translate shard ``args.shard_id`` (sentence i is in shard i mod N), a window of the corpus at
    a time, and write its file."""
    from fairseq_distill.evaluation.generate import progress_bar
    from fairseq_distill.seqkd.shard_writer import ShardWriter

    bar = progress_bar(len(range(args.shard_id, len(raw), args.num_shards)),
                       f"teacher shard {args.shard_id}/{args.num_shards} (ctranslate2 model)")
    writer = ShardWriter(args.work, args.shard_id, args.num_shards, args.nbest)
    totals = ExternalResult()
    segment_seconds, segmenter = 0.0, Segmenter.from_dir(args.data, side="target")
    try:
        for start, texts in raw.windows(WINDOW):
            mine = {i: texts[i - start] for i in range(start, start + len(texts)) if i % args.num_shards == args.shard_id}
            result = teacher.translate(mine, progress=bar.update)
            totals.at_length_limit += result.at_length_limit
            totals.decode_seconds += result.decode_seconds
            totals.tokenize_seconds += result.tokenize_seconds
            totals.detokenize_seconds += result.detokenize_seconds
            started = time.perf_counter()
            flat = [(sid, text) for sid, hyps in sorted(result.nbest.items()) for text in hyps]
            pieces: Dict[int, List[str]] = {sid: [] for sid in result.nbest}
            for (sid, _), p in zip(flat, segmenter.encode_lines([t for _, t in flat])):
                pieces[sid].append(p)
            for sid in sorted(pieces):
                writer.add(sid, pieces[sid])
            segment_seconds += time.perf_counter() - started
    except BaseException:
        writer.discard()
        raise
    finally:
        bar.close()
    result = totals
    stats = {"sentences": writer.count, "decode_seconds": round(result.decode_seconds, 1),
             "at_length_limit": result.at_length_limit, "tokenize_seconds": round(result.tokenize_seconds, 2),
             "detokenize_seconds": round(result.detokenize_seconds, 2), "segment_seconds": round(segment_seconds, 2)}
    out = writer.finish(settings, stats)
    print(f"[seqkd] shard {args.shard_id}/{args.num_shards} (ctranslate2 model): {writer.count:,} sentences in "
          f"{result.decode_seconds:.0f}s (tokenizing {result.tokenize_seconds:.1f}s, detokenizing "
          f"{result.detokenize_seconds:.1f}s, segmenting {segment_seconds:.1f}s) -> {out}")
    if result.at_length_limit:
        print(f"[seqkd] shard {args.shard_id}: {result.at_length_limit:,} translations reached the length limit "
              f"(--max-len-a {args.max_len_a}, --max-len-b {args.max_len_b}) and were kept as cut there",
              file=sys.stderr)
