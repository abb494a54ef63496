"""Sequence-level KD data: the teacher translates the training source, and the result is
binarized with the teacher's dictionaries into a new data directory.

A :class:`SeqKDJob` says what to make; :func:`make_seqkd_data` plans the shards, runs the
teacher on those it asks for (:func:`generate_shard`), and once every shard exists merges
them (:func:`merge`): hypotheses back in corpus order, counts verified, one hypothesis
chosen per sentence, pairs filtered, the result binarized. ``fsd-seqkd`` is its command line.

Backends. ``fairseq`` (the default) runs stock fairseq-generate; ``ctranslate2`` converts
the teacher once and decodes with CTranslate2 by fairseq's rules
(:mod:`fairseq_distill.seqkd.ctranslate2_backend`: the length limit, the length penalty, what it
does at the limit, what it cannot decode). Both read the binarized source, so the teacher
sees the same subword tokens either way. Shard files are the same for both; the first line
of each records how it was decoded, and shards decoded differently are not merged together.

Every training sentence must get exactly one hypothesis (``--targets K``: up to K), put back
in corpus order. A missing or empty hypothesis stops the merge (``--on-missing fail``, the
default) or is replaced by the original reference (``--on-missing reference``); either way it
is reported. ``--max-len-ratio R`` drops pairs whose hypothesis/source length ratio is above
R or below 1/R, and reports how many. The valid and test sets are copied unchanged.

``--nbest N`` keeps the teacher's N best hypotheses per sentence in the shards;
``--select chrf`` (the default) then keeps the one closest to the reference by sentence
chrF, ``--select first`` the 1-best (:mod:`fairseq_distill.seqkd.selection`), ``--select mbr``
the one of highest expected chrF against the other hypotheses, no reference needed
(:mod:`fairseq_distill.seqkd.mbr`; each shard's rankings are kept beside it,
:mod:`fairseq_distill.seqkd.mbr_shards`). ``--targets K`` keeps the K best by MBR score, each a
training pair: the source repeated, its targets side by side in corpus order.

``--source FILE`` adds monolingual source text: the teacher translates it too and the pairs
follow the training pairs (:mod:`fairseq_distill.seqkd.monolingual`). Its lines have no reference:
they keep the 1-best under ``--select chrf`` (MBR needs none), and one with no (or an empty) hypothesis fails
the merge, or under ``--on-missing reference`` is left out; either way it is counted.
"""
import json
import os
import time
from typing import Optional, Tuple

from fairseq_distill.errors import DistillError
from fairseq_distill.text.segmentation import load_meta
from fairseq_distill.seqkd.decode import generate_shard, shard_settings
from fairseq_distill.seqkd.inputs import (Inputs, SeqKDJob, Side, check_options, check_source_lengths,
                                          data_langs, decoding_settings, read_teachers, report_blank_sources,
                                          shard_path, sources_digest)
from fairseq_distill.seqkd.merge import merge
from fairseq_distill.seqkd.output import check_out, write_output
from fairseq_distill.workdir import DirectoryLock, check_output_dir, check_outputs


def fairseq_teacher(args: SeqKDJob, src: str, tgt: str, sources):
    """A fairseq teacher on the corpus's dictionaries, decoded by either backend: the inputs,
    the shards' settings, and the function that decodes shard ``args.shard_id``."""
    paths, states = read_teachers(args.teacher, args.data, src, tgt, args.allow_size_only_dictionary_check)
    from fairseq_distill.seqkd.ctranslate2_backend import max_source_positions

    max_positions = min(max_source_positions(s) for s in states)
    check_source_lengths(sources, args.data, args.subset, max_positions, "the teacher's source positions")
    if args.max_tokens:
        check_source_lengths(sources, args.data, args.subset, args.max_tokens, "--max-tokens")
    teacher = None
    if args.backend == "ctranslate2":
        from fairseq_distill.seqkd import ctranslate2_backend as ct2

        ct2.check_convertible(paths, states)
        ct2.check_compute_type(args.compute_type or ct2.DEFAULT_COMPUTE_TYPE)
    mono_info = mono_dir = None
    if args.source:
        from fairseq_distill.seqkd.monolingual import describe_source, prepare_source

        mono_info = describe_source(args.source)
        mono_dir = prepare_source(args.source, args.data, src, tgt, args.work, max_positions, mono_info)
    inputs = Inputs(args, src, tgt, mono_dir, train=sources)
    settings = decoding_settings(args, paths, mono_info)
    if args.backend == "ctranslate2":
        teacher = ct2.CTranslate2Teacher(
            paths[0], states[0], args.data, src, tgt, args.work,
            ct2.Decoding(beam=args.beam, lenpen=args.lenpen, max_len_a=args.max_len_a,
                         max_len_b=args.max_len_b, nbest=args.nbest, batch_size=args.batch_size,
                         max_tokens=args.max_tokens),
            args.compute_type or ct2.DEFAULT_COMPUTE_TYPE, args.threads, args.inter_threads)
    del states  # the teacher weights are not needed in memory while decoding
    return inputs, settings, lambda: generate_shard(args, src, tgt, inputs, settings, teacher)


def external_teacher(args: SeqKDJob, src: str, tgt: str, sources):
    """A pretrained CTranslate2 model (:mod:`fairseq_distill.seqkd.external`): as :func:`fairseq_teacher`."""
    from fairseq_distill.seqkd.external import ExternalTeacher, external_shard, raw_training_source
    from fairseq_distill.seqkd.monolingual import describe_source, prepare_source

    from fairseq_distill.seqkd.ctranslate2_backend import converted_for_ctranslate2
    from fairseq_distill.text.teacher_vocabulary import is_model_dir

    if is_model_dir(args.teacher_ctranslate2):  # the same directory that teaches every term
        args.teacher_ctranslate2 = converted_for_ctranslate2(args.teacher_ctranslate2, args.work)
    raw = raw_training_source(args, sources)
    teacher = ExternalTeacher(args)
    mono_info = mono_dir = None
    if args.source:
        mono_info = describe_source(args.source)
        mono_dir = prepare_source(args.source, args.data, src, tgt, args.work, None, mono_info)
    inputs = Inputs(args, src, tgt, mono_dir, train=sources)
    if args.source:  # its lines reach the teacher as they are, read a window at a time too
        raw.mono, raw.mono_lines = args.source, len(inputs.mono)
    settings = {**teacher.settings(), "raw_train_source": describe_source(args.raw_train_source)
                if args.raw_train_source else "desegmented", "source": mono_info}
    return inputs, settings, lambda: external_shard(args, teacher, raw, settings)


def decode_shards(args: SeqKDJob, settings: dict, generate) -> Optional[Tuple[float, int]]:
    """Decode the shards asked for, keeping those already decoded with ``settings``: (the seconds
    taken, how many shards were kept), or None when only one shard of many was asked for
    (merged later)."""
    shard_ids = [args.shard_id] if args.shard_id is not None else range(args.num_shards)
    started, kept = time.time(), 0
    for shard_id in shard_ids:
        args.shard_id = shard_id
        found = shard_settings(args)
        if found == json.loads(json.dumps(settings)):
            print(f"[seqkd] shard {shard_id}/{args.num_shards}: kept from an earlier run with the same "
                  f"teacher, data and settings ({shard_path(args.work, shard_id, args.num_shards)})")
            kept += 1
            continue
        if found is not None:
            from fairseq_distill.seqkd.merge import settings_differences

            print(f"[seqkd] shard {shard_id}/{args.num_shards}: decoding again: it was decoded with other "
                  f"settings (the earlier run's against this run's: "
                  f"{settings_differences(found, json.loads(json.dumps(settings)))})")
        generate()
    if len(shard_ids) != args.num_shards:
        return None
    return time.time() - started, kept


def decoding_summary(decoded: Optional[Tuple[float, int]], num_shards: int, sentences: int) -> dict:
    """The summary's account of this run's decoding: its time, and the rate only where this run
    decoded every shard (shards kept from an earlier run took no time here: a rate over them
    would be meaningless)."""
    if decoded is None:
        return {}
    seconds, kept = decoded
    if kept == num_shards:
        return {"shards_kept": kept}
    summary = {"decode_seconds": round(seconds, 1)}
    if kept:
        summary["shards_kept"] = kept
    else:
        summary["sentences_per_second"] = round(sentences / max(seconds, 1e-9), 1)
    return summary


def job_inputs(args: SeqKDJob):
    """Every file and folder a seq-KD job reads, named by its option."""
    teachers = [("--teacher", t) for t in (args.teacher or "").split(":") if t]
    return [("--data", args.data), *teachers, ("--teacher-translations", args.teacher_translations),
            ("--teacher-ctranslate2", args.teacher_ctranslate2), ("--teacher-tokenizer", args.teacher_tokenizer),
            ("--teacher-target-tokenizer", args.teacher_target_tokenizer),
            ("--raw-train-source", args.raw_train_source), ("--source", args.source)]


def make_seqkd_data(args: SeqKDJob) -> Optional[dict]:
    """Generate the shards ``args`` asks for and, when all exist, merge them into ``args.out``;
    returns the merge's summary (None after one shard of many)."""
    from fairseq_distill.seqkd.external import check_external_options
    from fairseq_distill.text.teacher_vocabulary import is_model_dir

    if args.teacher and is_model_dir(args.teacher):
        # a Hugging Face model directory, as fairseq-train takes it: it decodes through CTranslate2
        print(f"[seqkd] --teacher {args.teacher} is a Hugging Face model: decoding it with CTranslate2 "
              f"(as --teacher-ctranslate2 would)")
        args.teacher_ctranslate2, args.teacher = args.teacher, None
    check_options(args)

    check_external_options(args)
    if not os.path.isdir(args.data):
        raise DistillError(f"data directory not found: '{args.data}'")
    check_output_dir(args.out, args.data)
    check_output_dir(args.work, args.data, "--work")
    if args.work is None and args.out:
        args.work = args.out.rstrip("/") + ".work"
    check_outputs([("--out", args.out), ("--work", args.work)], job_inputs(args))
    check_out(args.out)
    if args.work is None:
        raise DistillError("pass --work (shard outputs) or --out (new data directory)")
    # a shard made alone locks its part of the work directory; any other run, all of it
    with DirectoryLock(args.work, "fsd-seqkd", part=args.shard_id if not args.merge else None):
        return make_locked(args)


def make_locked(args: SeqKDJob) -> Optional[dict]:
    """:func:`make_seqkd_data` once the work directory is locked."""
    meta = load_meta(args.data)
    src, tgt = data_langs(args.data, meta, args)
    sources = Side(args.data, args.subset, src, tgt, src)  # read when needed, a range at a time
    if len(sources) == 0:
        raise DistillError(f"empty corpus: '{args.subset}' in {args.data} has no sentences")
    if not args.merge:
        report_blank_sources(sources, args.data, args.subset)
    if args.num_shards < 1 or (args.shard_id is not None and not 0 <= args.shard_id < args.num_shards):
        raise DistillError(f"--shard-id must be in 0..{args.num_shards - 1}, got {args.shard_id}")
    inputs = None
    if args.teacher_translations:
        from fairseq_distill.seqkd.translations import check_translation_options, translations_shard

        check_translation_options(args)
        if not args.out:
            raise DistillError("--out is required: the new data directory")
        translations_shard(args, sources)
        decoded = None  # nothing was decoded: the one shard is merged
    elif args.merge:
        decoded = None
    else:
        if args.teacher_ctranslate2:
            inputs, settings, generate = external_teacher(args, src, tgt, sources)
        elif args.teacher:
            inputs, settings, generate = fairseq_teacher(args, src, tgt, sources)
        else:
            raise DistillError("pass --teacher CHECKPOINT to decode (or --teacher-ctranslate2 DIR: a pretrained "
                               "CTranslate2 model; or --teacher-translations FILE: translations made elsewhere)")
        # in place: the decoding function writes this same dict into each shard's header
        settings["train_source_sha256"] = sources_digest(sources)
        decoded = decode_shards(args, settings, generate)
        if decoded is None:
            if args.select == "mbr":  # ranked where it was decoded: the merge finds it ready
                from fairseq_distill.seqkd.mbr_shards import rank_decoded_shard

                rank_decoded_shard(args)
            return None  # one shard of many: merge later
    if not args.out:
        raise DistillError("--out is required to merge")
    extra = decoding_summary(decoded, args.num_shards, len(inputs) if decoded else 0)
    summary = write_output(args, lambda directory: merge(args, src, tgt, inputs, directory), extra)
    print("[seqkd] " + ", ".join(f"{k} {v:,}" if isinstance(v, int) and not isinstance(v, bool)
                                 else f"{k} {v}" for k, v in summary.items()))
    print(f"[seqkd] new data directory: {args.out}")
    return summary
