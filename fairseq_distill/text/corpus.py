"""Preparing a parallel corpus for fairseq (``fsd-prepare-corpus``): subword segmentation and
binarization.

Input: raw, aligned, untokenised text files ``PREFIX.SRC`` / ``PREFIX.TGT`` (optionally
gzip-compressed, ``PREFIX.SRC.gz``) for train, valid and one or more test sets.

Output directory layout::

    OUT/raw/{split}.{lang}        the raw text, as given (references for sacreBLEU)
    OUT/tok/{split}.{lang}        the segmented text that was binarized
    OUT/bin/                      fairseq-preprocess output (joined dictionary), made by
                                  :mod:`fairseq_distill.text.binarize` a piece at a time
    OUT/bin/sentencepiece.model   or OUT/bin/bpe.codes
    OUT/bin/fairseq_distill.json  what the evaluation and seq-KD tools need to know

Segmentation is lossless so that detokenised output can be scored against the raw
references: sentencepiece works on raw text; subword-nmt runs on whitespace-split raw
text (no Moses tokenizer), so removing the ``@@ `` markers gives the raw text back.
(Lossless up to whitespace: runs of whitespace are segmented as one space, see
:mod:`fairseq_distill.text.segmentation`.)

Lines end at ``\\n`` only (``\\r\\n`` too), as ``wc -l`` counts them; invalid UTF-8 is an
error naming file and line unless ``--errors replace``. The binarized data is checked to
hold exactly one sentence per input line.

``fairseq_distill.json`` records what OUT was made from (each input's path, size,
modification time and SHA-256; the options that change the output). A rerun into OUT
reuses it when those are the same and refuses, naming what differs, when they are not,
unless ``--force``.

``--vocabulary-from DATA_BIN`` takes the subword model and the dictionaries of an existing
data-bin (a teacher's) instead of learning new ones: the new data then use the teacher's ids,
and pieces its dictionary lacks binarize as ``<unk>``, counted in the log.
"""
import json
import logging
import os
import shutil
import time

from fairseq_distill.errors import DistillError
from fairseq_distill.text.binarize import binarize_evaluation, binarize_train, build_dictionary, remove_pieces
from fairseq_distill.text.segmentation import META_FILE, learn_subword_nmt, train_sentencepiece
from fairseq_distill.text.corpus_steps import (STAGING, Stages, check_split, run_key, segment_split, vocabulary_of,
                                               write_subword_sample)
from fairseq_distill.text.files import file_sha256, first_few
from fairseq_distill.text.teacher_vocabulary import (TARGET_SENTENCEPIECE, TRIMMED_PIECES, keep_teacher_pieces,
                                                     teacher_dictionary_summary)
from fairseq_distill.workdir import check_outputs

# what a rerun compares (besides the inputs), with the option that sets it
RECORDED_OPTIONS = {"source_lang": "--source-lang", "target_lang": "--target-lang", "bpe": "--bpe",
                    "vocab_size": "--vocab-size", "spm_model_type": "--spm-model-type",
                    "errors": "--errors", "splits": "--test-prefix (number of test sets)",
                    "max_length": "--max-length", "subword_sample": "--subword-sample",
                    "teacher_pieces": "--teacher-pieces"}
# subword tokens per side: with </s>, the 1024 positions of fairseq's Transformers
DEFAULT_MAX_LENGTH = 1023
# sentence pairs the subword model learns from at most: enough for a vocabulary of tens of thousands
# of pieces, while the trainer's memory (sentencepiece holds its whole input) stays bounded
DEFAULT_SUBWORD_SAMPLE = 200_000


def find_side(prefix, lang):
    """The file for one side of a split: PREFIX.LANG or PREFIX.LANG.gz."""
    for candidate in (f"{prefix}.{lang}", f"{prefix}.{lang}.gz"):
        if os.path.isfile(candidate):
            return candidate
    raise DistillError(f"no file for language '{lang}' with prefix '{prefix}': "
                       f"expected {prefix}.{lang} or {prefix}.{lang}.gz")


def describe_input(path):
    st = os.stat(path)
    return {"path": os.path.abspath(path), "size": st.st_size, "mtime_ns": st.st_mtime_ns, "sha256": file_sha256(path)}


def same_content(recorded, path):
    """Whether ``path`` holds what ``recorded`` describes; the hash is computed only when
    size and modification time alone do not settle it."""
    st = os.stat(path)
    if st.st_size != recorded.get("size"):
        return False
    if st.st_mtime_ns == recorded.get("mtime_ns"):
        return True
    return file_sha256(path) == recorded.get("sha256")


def longest_training_side(bin_dir, src, tgt) -> int:
    """The most subword tokens (without </s>) on either side of a prepared training pair."""
    from fairseq.data import data_utils

    longest = 0
    for lang in (src, tgt):
        dataset = data_utils.load_indexed_dataset(os.path.join(bin_dir, f"train.{src}-{tgt}.{lang}"), None)
        if dataset is not None and len(dataset):
            longest = max(longest, int(dataset.sizes.max()) - 1)
    return longest


def training_pairs(bin_dir) -> int:
    """The training pairs a prepared directory was made from, over-long ones included."""
    with open(os.path.join(bin_dir, META_FILE), encoding="utf-8") as f:
        meta = json.load(f)
    return meta["sizes"]["train"] + len(meta.get("removed_over_long", {}).get("train", []))


def differences(made_from, inputs, options, bin_dir=None):
    """What differs between the recorded ``made_from`` and the inputs and options of this run."""
    found = []
    for key, flag in RECORDED_OPTIONS.items():
        old, new = made_from["options"].get(key), options.get(key)
        if old is None and new is None:
            continue  # not an option of this kind of preparation (a vocabulary taken from elsewhere)
        if key == "max_length" and old is None and bin_dir is not None and \
                longest_training_side(bin_dir, options["source_lang"], options["target_lang"]) <= new:
            # prepared before --max-length existed, keeping every pair: the same data as now
            # when none of them is longer
            continue
        if key == "subword_sample" and old is None and bin_dir is not None and training_pairs(bin_dir) <= new:
            # prepared before --subword-sample existed, learning from every pair: the same model
            # as now when there are no more pairs than the sample takes
            continue
        if old != new:
            found.append(f"{flag}: prepared with {old}, now {new}")
    for split, sides in inputs.items():
        for lang, path in sides.items():
            recorded = made_from["inputs"].get(split, {}).get(lang)
            if recorded is None:
                continue  # a split or language that differs is reported with the options
            if not same_content(recorded, path):
                was = "" if os.path.abspath(path) == recorded["path"] else f" (prepared from {recorded['path']})"
                found.append(f"{path} ({split}, {lang}) has changed since it was prepared{was}")
    return found


def check_own_folders(out, meta_path):
    """The folders a preparation writes under ``out`` (raw, tok, bin) are new or its own: an
    earlier preparation (``bin/fairseq_distill.json``) or an unfinished one (``.prepare``); never
    folders of another tool (a stock fairseq data-bin), which --force would replace too."""
    if os.path.exists(meta_path) or os.path.isdir(os.path.join(out, STAGING)):
        return
    for name in ("raw", "tok", "bin"):
        folder = os.path.join(out, name)
        if os.path.exists(folder):
            raise DistillError(f"--out {out}: {folder} was not made by fsd-prepare-corpus (there is no "
                               f"{meta_path}, nor an unfinished preparation): it would be replaced, so it is not, "
                               f"even with --force; give another --out (or move that folder)")


def check_reuse(out, meta_path, inputs, options):
    """Reuse a prepared directory only if it was made from the same inputs and options."""
    with open(meta_path, encoding="utf-8") as f:
        made_from = json.load(f).get("made_from")
    if made_from is None:
        raise DistillError(
            f"{out} was prepared by an earlier version that did not record its inputs and options, "
            f"so whether they match cannot be told; rerun with --force (or remove {out}) to prepare it again")
    found = differences(made_from, inputs, options, os.path.dirname(meta_path))
    if found:
        raise DistillError(
            f"{out} was prepared from other inputs or options: {'; '.join(found)}. "
            f"Rerun with --force (or remove {out}) to prepare it again from these, or choose another --out")
    print(f"[prepare] reusing {out}: it was made from the same inputs and options ({meta_path}); "
          f"--force redoes it")


def check_binarized(bin_dir, tok_dir, src, tgt, sizes):
    """Binarization must have written one sentence per input pair, on both sides."""
    from fairseq.data import data_utils

    quiet = logging.getLogger(data_utils.__name__)  # one INFO line per file read otherwise
    level = quiet.level
    quiet.setLevel(logging.WARNING)
    try:
        check_sizes(data_utils, bin_dir, tok_dir, src, tgt, sizes)
    finally:
        quiet.setLevel(level)


def check_sizes(data_utils, bin_dir, tok_dir, src, tgt, sizes):
    for name, n in sizes.items():
        for lang in (src, tgt):
            dataset = data_utils.load_indexed_dataset(os.path.join(bin_dir, f"{name}.{src}-{tgt}.{lang}"), None)
            got = len(dataset) if dataset is not None else 0
            if got != n:
                raise DistillError(
                    f"binarization wrote {got} sentences for {name}.{lang} but the input has {n} "
                    f"lines; {os.path.join(tok_dir, f'{name}.{lang}')} must have one line per sentence")


SUBWORD_FILE = {"sentencepiece": "sentencepiece.model", "subword_nmt": "bpe.codes"}
TEACHER_RECORD = "teacher_vocabulary"  # fairseq_distill.text.teacher_vocabulary.META_KEY


def prepare(args):
    started = time.time()
    src, tgt = args.source_lang, args.target_lang
    splits = [("train", args.train_prefix), ("valid", args.valid_prefix)]
    test_names = []
    for i, prefix in enumerate(args.test_prefix):
        name = "test" if i == 0 else f"test{i}"
        splits.append((name, prefix))
        test_names.append(name)
    errors = getattr(args, "errors", "strict")
    max_length = getattr(args, "max_length", DEFAULT_MAX_LENGTH)
    sample = getattr(args, "subword_sample", DEFAULT_SUBWORD_SAMPLE)
    if max_length < 1:
        raise DistillError(f"--max-length must be a positive number of subword tokens, got {args.max_length}")
    if args.vocab_size < 1:
        raise DistillError(f"--vocab-size must be a positive number, got {args.vocab_size}")
    if sample < 1:
        raise DistillError(f"--subword-sample must be a positive number of sentence pairs, got {sample}")
    options = {"source_lang": src, "target_lang": tgt, "bpe": args.bpe, "vocab_size": args.vocab_size,
               "spm_model_type": args.spm_model_type if args.bpe == "sentencepiece" else None,
               "errors": errors, "splits": [name for name, _ in splits], "max_length": max_length,
               "subword_sample": sample,
               **({"keep_blank_test_lines": True} if getattr(args, "keep_blank_test_lines", False) else {})}
    vocabulary = vocabulary_of(getattr(args, "vocabulary_from", None), getattr(args, "subword_model", None), src, tgt,
                               getattr(args, "teacher_languages", None))
    teacher = (vocabulary or {}).get("teacher")
    teacher_pieces = getattr(args, "teacher_pieces", None)
    if teacher_pieces is not None:
        if not teacher:
            raise DistillError(f"--teacher-pieces {teacher_pieces} goes with --vocabulary-from MODEL_DIR, the "
                               f"directory of a Hugging Face teacher whose pieces the student keeps")
        if teacher_pieces < 1:
            raise DistillError(f"--teacher-pieces must be a positive number of pieces, got {teacher_pieces}")
        options["teacher_pieces"] = teacher_pieces
    if vocabulary:
        args.bpe = vocabulary["bpe"]
        options.update(bpe=args.bpe, vocab_size=None, spm_model_type=None, subword_sample=None,
                       vocabulary_from={k: describe_input(v) for k, v in vocabulary["files"].items()})
    keep_blank = set(test_names) if getattr(args, "keep_blank_test_lines", False) else set()
    inputs = {name: {lang: find_side(prefix, lang) for lang in (src, tgt)} for name, prefix in splits}

    # what a run writes or replaces under --out: none of it may hold an input (re-preparing
    # OUT/raw's own text into OUT would overwrite it while reading it)
    check_outputs([(f"--out {args.out}: its folder", os.path.join(args.out, d))
                   for d in ("raw", "tok", "bin", ".prepare")],
                  [(f"--{name}-prefix", inputs[name][lang]) for name, _ in splits for lang in (src, tgt)])
    meta_path = os.path.join(args.out, "bin", META_FILE)
    check_own_folders(args.out, meta_path)
    if os.path.exists(meta_path) and not args.force:
        check_reuse(args.out, meta_path, inputs, options)
        return meta_path

    made_from = {"options": options,
                 "inputs": {name: {lang: describe_input(inputs[name][lang]) for lang in (src, tgt)}
                            for name, _ in splits}}
    os.makedirs(args.out, exist_ok=True)
    stages = Stages(args.out, run_key(made_from), fresh=args.force)
    text = {name: tuple(os.path.join(stages.dir, f"{name}.{lang}") for lang in (src, tgt)) for name, _ in splits}
    # read and check everything before anything already there is replaced
    for name, prefix in splits:
        key = f"checked {name}"
        if key not in stages.done:
            stages.finish(key, check_split(inputs[name][src], inputs[name][tgt], name, text[name], errors,
                                           name in keep_blank))
        print(f"[prepare] {name}: {stages.done[key]:,} sentence pairs from {prefix}")
    pairs = {name: stages.done[f"checked {name}"] for name, _ in splits}

    raw_dir, tok_dir, bin_dir = (os.path.join(args.out, d) for d in ("raw", "tok", "bin"))
    if "subword model" not in stages.done and vocabulary:
        if os.path.isdir(bin_dir):
            shutil.rmtree(bin_dir)
        os.makedirs(bin_dir)
        files = vocabulary["files"]
        # a teacher's source model is the data-bin's (what translating a source needs); Marian's
        # target side has a model of its own
        shutil.copy(files["source_model"] if teacher else files["subword_model"],
                    os.path.join(bin_dir, SUBWORD_FILE[args.bpe]))
        if teacher and files["target_model"] != files["source_model"]:
            shutil.copy(files["target_model"], os.path.join(bin_dir, TARGET_SENTENCEPIECE))
        stages.finish("subword model", 0)
    if "subword model" not in stages.done:
        if os.path.isdir(bin_dir):
            shutil.rmtree(bin_dir)
        os.makedirs(bin_dir)
        # the subword model learns from the text as it will be segmented (whitespace normalised)
        train_text = os.path.join(stages.dir, "train.subword-input.txt")
        taken = write_subword_sample(text["train"], pairs["train"], sample, train_text)
        if args.bpe == "sentencepiece":
            train_sentencepiece(train_text, os.path.join(bin_dir, "sentencepiece"), args.vocab_size,
                                args.spm_model_type)
        else:
            learn_subword_nmt(train_text, os.path.join(bin_dir, "bpe.codes"), args.vocab_size)
        os.remove(train_text)
        stages.finish("subword model", taken)
    taken = stages.done["subword model"]
    if teacher:
        print(f"[prepare] the tokenizer of the {teacher['record']['family']} teacher {args.vocabulary_from}"
              + (f" (language codes {teacher['record']['source_code']} and {teacher['record']['target_code']}, "
                 f"which the teacher gets and the student's data does not hold)" if teacher["record"]["source_code"]
                 else ""))
    elif vocabulary:
        print(f"[prepare] the {args.bpe} model and dictionaries of {args.vocabulary_from} "
              f"({vocabulary['files']['subword_model']})")
    else:
        of = "" if taken == pairs["train"] else f", learned from {taken:,} evenly spaced training pairs (--subword-sample)"
        print(f"[prepare] learned a joint {args.bpe} model (size {args.vocab_size}{of})")
    if args.bpe == "sentencepiece":
        kind, model = "sentencepiece", os.path.join(bin_dir, "sentencepiece.model")
        if os.path.isfile(os.path.join(bin_dir, TARGET_SENTENCEPIECE)):
            model = (model, os.path.join(bin_dir, TARGET_SENTENCEPIECE))
        bpe_meta = {"bpe": "sentencepiece", "sentencepiece_model": "sentencepiece.model"}
    else:
        kind, model = "subword_nmt", os.path.join(bin_dir, "bpe.codes")
        bpe_meta = {"bpe": "subword_nmt", "bpe_codes": "bpe.codes"}

    for d in (raw_dir, tok_dir):
        os.makedirs(d, exist_ok=True)
    pool = None
    if args.workers > 1 and any(f"segmented {name}" not in stages.done for name, _ in splits):
        import multiprocessing

        pool = multiprocessing.get_context("fork").Pool(args.workers)
    try:
        for name, _ in splits:
            if f"segmented {name}" in stages.done:
                continue
            outputs = {d: tuple(os.path.join(root, f"{name}.{lang}") for lang in (src, tgt))
                       for d, root in (("raw", raw_dir), ("tok", tok_dir))}
            stages.finish(f"segmented {name}", segment_split(
                name, text[name], (inputs[name][src], inputs[name][tgt]), kind, model, outputs, max_length,
                name in keep_blank, pairs[name], pool, args.workers))
    finally:
        if pool is not None:
            pool.close()
            pool.join()
    segmented = {name: stages.done[f"segmented {name}"] for name, _ in splits}
    per_sentence = segmented["train"]["source_tokens"] / max(segmented["train"]["pairs"], 1)
    print(f"[prepare] segmented every split into {tok_dir} (train: {per_sentence:.1f} {src} subword "
          f"tokens per sentence)")
    blank_kept = {name: result["blank"] for name, result in segmented.items() if result["blank"]}
    for name, lines in blank_kept.items():
        print(f"[prepare] {name}: kept {len(lines):,} blank line(s) in place, as empty sentences (lines "
              f"{first_few(lines)}; --keep-blank-test-lines): each is scored as its line's empty reference")

    log_path = os.path.join(args.out, "preprocess.log")
    dictionary_dir = os.path.join(stages.dir, "dictionary")
    if "dictionary" not in stages.done and vocabulary and not teacher:
        os.makedirs(dictionary_dir, exist_ok=True)
        open(log_path, "w").close()
        for lang in (src, tgt):
            shutil.copy(vocabulary["files"][f"dict.{lang}.txt"], os.path.join(dictionary_dir, f"dict.{lang}.txt"))
        stages.finish("dictionary", 0)
    if "dictionary" not in stages.done:
        types = build_dictionary(src, tgt, tok_dir, dictionary_dir, args.workers, log_path)
        if teacher:  # pieces the teacher's vocabulary lacks, or --teacher-pieces trims, binarize as <unk>, counted
            types = keep_teacher_pieces(dictionary_dir, (src, tgt), teacher, teacher_pieces)
        stages.finish("dictionary", types)
    if teacher:
        done = stages.done["dictionary"]  # a count alone where an earlier version made this stage
        teacher["record"].update(done if isinstance(done, dict) else {"kept_pieces": done})
    train = segmented["train"]
    pieces_dir = os.path.join(stages.dir, "train-pieces")
    if "merged train" not in stages.done:
        stages.finish("merged train", binarize_train(
            src, tgt, {lang: os.path.join(tok_dir, f"train.{lang}") for lang in (src, tgt)},
            {lang: os.path.join(dictionary_dir, f"dict.{lang}.txt") for lang in (src, tgt)}, bin_dir, pieces_dir,
            train["pairs"], train["source_tokens"] + train["target_tokens"] + 2 * train["pairs"], args.workers,
            stages, log_path=log_path))
    remove_pieces(pieces_dir)
    if "binarized valid and test" not in stages.done:
        binarize_evaluation(src, tgt, tok_dir, bin_dir, test_names, dictionary_dir, args.workers, log_path)
        stages.finish("binarized valid and test")
    if teacher and teacher_pieces is not None:
        shutil.copy(os.path.join(dictionary_dir, TRIMMED_PIECES), os.path.join(bin_dir, TRIMMED_PIECES))
    sizes = {name: result["pairs"] for name, result in segmented.items()}
    check_binarized(bin_dir, tok_dir, src, tgt, sizes)
    with open(os.path.join(bin_dir, f"dict.{src}.txt"), encoding="utf-8") as f:
        types = sum(1 for _ in f)
    pieces = stages.done["merged train"]
    if teacher:
        which = teacher_dictionary_summary(teacher["record"])
    elif vocabulary:
        which = (f"the dictionaries of {args.vocabulary_from} ({types:,} {src} types plus 4 specials; pieces they lack "
                 f"became <unk>, counted in the log)")
    else:
        which = f"a joined dictionary of {types:,} types plus 4 specials"
    print(f"[prepare] binarized with fairseq-preprocess (the training pairs in {pieces} piece"
          f"{'s' if pieces > 1 else ''}): {which} (log: {log_path})")

    # Raw references travel with the binarized data so that evaluation needs only bin/.
    bin_raw = os.path.join(bin_dir, "raw")
    os.makedirs(bin_raw, exist_ok=True)
    for name in ["valid"] + test_names:
        for lang in (src, tgt):
            shutil.copy(os.path.join(raw_dir, f"{name}.{lang}"), bin_raw)
    meta = {
        "source_lang": src,
        "target_lang": tgt,
        **bpe_meta,
        "raw": {name: {lang: f"raw/{name}.{lang}" for lang in (src, tgt)} for name in ["valid"] + test_names},
        "sizes": sizes,
        # 1-based input line numbers of the pairs left out
        "removed_over_long": {name: result["removed"] for name, result in segmented.items() if result["removed"]},
        "blank_test_lines": blank_kept,  # 1-based lines kept as empty sentences (--keep-blank-test-lines)
        "subword_sample": {"pairs": taken, "of": pairs["train"]},
        **({"vocabulary_from": os.path.abspath(args.vocabulary_from)} if vocabulary else {}),
        **({TEACHER_RECORD: {**teacher["record"],
                             **({"target_sentencepiece_model": TARGET_SENTENCEPIECE}
                                if isinstance(model, tuple) else {})}} if teacher else {}),
        "made_from": made_from,
    }
    with open(meta_path + ".partial", "w", encoding="utf-8") as f:
        json.dump(meta, f, indent=2)
    os.replace(meta_path + ".partial", meta_path)
    shutil.rmtree(stages.dir)
    print(f"[prepare] done in {time.time() - started:.0f}s: {bin_dir}")
    return meta_path
