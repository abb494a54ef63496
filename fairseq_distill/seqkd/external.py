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
from typing import Callable, Dict, List, Optional

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


def raw_training_source(args, sources: List[str]) -> List[str]:
    """The raw text of the training source the teacher translates (see the module docstring)."""
    if load_meta(args.data) is None:
        raise DistillError(f"--teacher-ctranslate2 translates raw text and its output is segmented with the "
                           f"corpus's subword model, but {args.data} has no fairseq_distill.json: prepare the data "
                           f"with fsd-prepare-corpus")
    segmenter = Segmenter.from_dir(args.data)
    if args.raw_train_source:
        from fairseq.data import Dictionary

        from fairseq_distill.seqkd.inputs import data_langs
        from fairseq_distill.text.files import read_lines

        lines = read_lines(args.raw_train_source, what="--raw-train-source ")
        if len(lines) != len(sources):
            raise DistillError(f"--raw-train-source {args.raw_train_source} has {len(lines):,} lines; the "
                               f"'{args.subset}' set of {args.data} has {len(sources):,} sentences: one line per "
                               f"sentence, in corpus order")
        src, _ = data_langs(args.data, load_meta(args.data), args)
        dictionary = Dictionary.load(os.path.join(args.data, f"dict.{src}.txt"))
        for number, (line, pieces) in enumerate(zip(segmenter.encode_lines(lines), sources), 1):
            seen = " ".join(p if dictionary.index(p) != dictionary.unk() else dictionary.unk_word for p in line.split())
            if seen != pieces:
                raise DistillError(f"--raw-train-source {args.raw_train_source}: line {number} is not training "
                                   f"sentence {number - 1} of {args.data} (segmented: {seen[:80]!r}; binarized: "
                                   f"{pieces[:80]!r}); give the raw source the data was prepared from")
        return [" ".join(line.split()) for line in lines]
    unknown = [i for i, pieces in enumerate(sources) if "<unk>" in pieces.split()]
    if unknown:
        raise DistillError(f"{len(unknown):,} sentences of the '{args.subset}' set of {args.data} hold <unk> (first id "
                           f"{unknown[0]}), so "
                           f"their raw text cannot be read back from the binarized data: pass --raw-train-source "
                           f"FILE, the raw source the data was prepared from")
    return [segmenter.decode(pieces.split()) for pieces in sources]


def external_shard(args, teacher: ExternalTeacher, texts: List[str], settings: dict):
    """Translate shard ``args.shard_id`` (sentence i is in shard i mod N) and write its file."""
    from fairseq_distill.evaluation.generate import progress_bar
    from fairseq_distill.seqkd.decode import shard_records, write_shard

    ids = range(args.shard_id, len(texts), args.num_shards)
    bar = progress_bar(len(ids), f"teacher shard {args.shard_id}/{args.num_shards} (ctranslate2 model)")
    try:
        result = teacher.translate({i: texts[i] for i in ids}, progress=bar.update)
    finally:
        bar.close()
    started = time.perf_counter()
    segmenter = Segmenter.from_dir(args.data)
    flat = [(sid, k, text) for sid, hyps in sorted(result.nbest.items()) for k, text in enumerate(hyps)]
    pieces = segmenter.encode_lines([text for _, _, text in flat])
    nbest: Dict[int, List[str]] = {sid: [] for sid in result.nbest}
    for (sid, _, _), p in zip(flat, pieces):
        nbest[sid].append(p)
    segment_seconds = time.perf_counter() - started
    stats = {"sentences": len(nbest), "decode_seconds": round(result.decode_seconds, 1),
             "at_length_limit": result.at_length_limit, "tokenize_seconds": round(result.tokenize_seconds, 2),
             "detokenize_seconds": round(result.detokenize_seconds, 2), "segment_seconds": round(segment_seconds, 2)}
    out = write_shard(args.work, args.shard_id, args.num_shards, settings, stats, shard_records(nbest, args.nbest))
    print(f"[seqkd] shard {args.shard_id}/{args.num_shards} (ctranslate2 model): {len(nbest):,} sentences in "
          f"{result.decode_seconds:.0f}s (tokenizing {result.tokenize_seconds:.1f}s, detokenizing "
          f"{result.detokenize_seconds:.1f}s, segmenting {segment_seconds:.1f}s) -> {out}")
    if result.at_length_limit:
        print(f"[seqkd] shard {args.shard_id}: {result.at_length_limit:,} translations reached the length limit "
              f"(--max-len-a {args.max_len_a}, --max-len-b {args.max_len_b}) and were kept as cut there",
              file=sys.stderr)
