"""Bring-your-own translations as the seq-KD teacher (``fsd-seqkd --teacher-translations FILE``):
a file with one translation per training sentence, in corpus order, made by any system (an
LLM, a pretrained model, a commercial service). Its lines are raw text: they are segmented
with the corpus's own subword model and then merged exactly like a decoded shard
(:mod:`fairseq_distill.seqkd.merge`): counts checked, an empty line handled as
``--on-missing`` says, ``--max-len-ratio`` applied, binarized with the student's dictionaries.
The file is read a window of lines at a time (counted first), so its size does not bound memory.
"""
import os

from fairseq_distill.errors import DistillError
from fairseq_distill.seqkd.decode import write_shard
from fairseq_distill.seqkd.inputs import sources_digest
from fairseq_distill.seqkd.monolingual import describe_source
from fairseq_distill.streaming import chunks
from fairseq_distill.text.files import iter_lines
from fairseq_distill.text.segmentation import META_FILE, Segmenter, load_meta

OPTION = "--teacher-translations"
SEGMENT_AT_ONCE = 10_000  # lines read and segmented at a time


def check_translation_options(args):
    """What a translations file cannot be combined with, named."""
    given = [flag for flag, on in (("--teacher", args.teacher), ("--teacher-ctranslate2", args.teacher_ctranslate2),
                                   ("--source", args.source),
                                   ("--merge", args.merge), ("--shard-id", args.shard_id is not None),
                                   ("--num-shards > 1", args.num_shards > 1), ("--nbest > 1", args.nbest > 1),
                                   ("--backend ctranslate2", args.backend == "ctranslate2"))
             if on]
    if given:
        raise DistillError(f"{OPTION} gives the teacher's translations themselves: it takes no "
                           f"{', '.join(given)} (nothing is decoded; one line per training sentence)")


def translations_shard(args, sources) -> dict:
    """Write the file's translations, segmented, as the job's one shard; returns its settings."""
    if load_meta(args.data) is None:
        raise DistillError(f"{OPTION} is segmented with the corpus's subword model, but {args.data} has no "
                           f"{META_FILE}: prepare the data with fsd-prepare-corpus")
    info = describe_source(args.teacher_translations)
    count = sum(1 for _ in iter_lines(args.teacher_translations, what=OPTION))  # read twice: none held
    if count != len(sources):
        raise DistillError(f"{OPTION} {args.teacher_translations} has {count:,} lines; the '{args.subset}' "
                           f"set of {args.data} has {len(sources):,} sentences: one translation per sentence, "
                           f"in corpus order")
    segmenter = Segmenter.from_dir(args.data)
    settings = {"backend": "translations file", "teacher_translations": info, "subset": args.subset,
                "nbest": 1, "source": None, "train_source_sha256": sources_digest(sources)}

    def records():
        lines = iter_lines(args.teacher_translations, what=OPTION)
        for start, chunk in enumerate(chunks(lines, SEGMENT_AT_ONCE)):
            for i, hyp in enumerate(segmenter.encode_lines(chunk), start * SEGMENT_AT_ONCE):
                yield {"id": i, "hyp": hyp}

    os.makedirs(args.work, exist_ok=True)
    write_shard(args.work, 0, 1, settings, {"sentences": count}, records())
    print(f"[seqkd] {OPTION}: {count:,} translations from {args.teacher_translations}, segmented "
          f"with the corpus's subword model")
    return settings
