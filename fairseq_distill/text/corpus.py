"""Preparing a parallel corpus for fairseq (``fsd-prepare-corpus``): subword segmentation and
binarization.

Input: raw, aligned, untokenised text files ``PREFIX.SRC`` / ``PREFIX.TGT`` (optionally
gzip-compressed, ``PREFIX.SRC.gz``) for train, valid and one or more test sets.

Output directory layout::

    OUT/raw/{split}.{lang}        the raw text, as given (references for sacreBLEU)
    OUT/tok/{split}.{lang}        the segmented text that was binarized
    OUT/bin/                      fairseq-preprocess output (joined dictionary)
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
"""
import contextlib
import io
import json
import logging
import os
import re
import shutil
import subprocess
import sys
import time

from fairseq_distill.errors import DistillError
from fairseq_distill.text.segmentation import META_FILE, Segmenter, normalize_whitespace
from fairseq_distill.text.files import blank_line_numbers, file_sha256, first_few, read_lines

# what a rerun compares (besides the inputs), with the option that sets it
RECORDED_OPTIONS = {"source_lang": "--source-lang", "target_lang": "--target-lang", "bpe": "--bpe",
                    "vocab_size": "--vocab-size", "spm_model_type": "--spm-model-type",
                    "errors": "--errors", "splits": "--test-prefix (number of test sets)",
                    "max_length": "--max-length"}
# subword tokens per side: with </s>, the 1024 positions of fairseq's Transformers
DEFAULT_MAX_LENGTH = 1023


def find_side(prefix, lang):
    """The file for one side of a split: PREFIX.LANG or PREFIX.LANG.gz."""
    for candidate in (f"{prefix}.{lang}", f"{prefix}.{lang}.gz"):
        if os.path.isfile(candidate):
            return candidate
    raise DistillError(
        f"no file for language '{lang}' with prefix '{prefix}': "
        f"expected {prefix}.{lang} or {prefix}.{lang}.gz"
    )


def warn(message):
    print(f"[prepare] warning: {message}", file=sys.stderr)


def over_long_pairs(src_pieces, tgt_pieces, max_length):
    """(indices kept, [(1-based line, length of its longer side)] of the pairs with a side of more
    than ``max_length`` subword tokens)."""
    keep, long_lines = [], []
    for i, (s, t) in enumerate(zip(src_pieces, tgt_pieces)):
        n = max(len(s.split()), len(t.split()))
        if n > max_length:
            long_lines.append((i + 1, n))
        else:
            keep.append(i)
    return keep, long_lines


def load_split(src_path, tgt_path, split, errors="strict", keep_blank=False):
    """Read one split and check it: aligned line counts, not empty, no blank lines (with
    ``keep_blank``, blank lines stay in place as empty lines).
    Lines end at \\n only, as ``wc -l`` counts them (see :mod:`fairseq_distill.text.files`)."""
    src_lines, tgt_lines = read_lines(src_path, errors, warn), read_lines(tgt_path, errors, warn)
    if len(src_lines) != len(tgt_lines):
        raise DistillError(
            f"misaligned {split} files: {src_path} has {len(src_lines)} lines but "
            f"{tgt_path} has {len(tgt_lines)}; both sides must have one sentence per line"
        )
    if not src_lines:
        raise DistillError(f"empty corpus: {src_path} and {tgt_path} have no lines")
    if keep_blank:
        return tuple([("" if i + 1 in blank else line) for i, line in enumerate(lines)]
                     for lines, blank in ((lines, set(blank_line_numbers(lines))) for lines in (src_lines, tgt_lines)))
    for side_path, lines in ((src_path, src_lines), (tgt_path, tgt_lines)):
        blank = blank_line_numbers(lines)
        if blank:
            raise DistillError(
                f"{side_path} has {len(blank)} blank line(s) or line(s) empty after normalisation "
                f"(first at line {blank[0]}: {lines[blank[0] - 1]!r}; only whitespace, control or "
                f"zero-width characters); remove those sentence pairs from both sides first"
                + ("; or, where an official protocol keeps them in a test set, pass --keep-blank-test-lines"
                   if split.startswith("test") else "")
            )
    return src_lines, tgt_lines


def write_lines(path, lines):
    # newline="\n": written exactly as given, whatever the platform
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        for line in lines:
            f.write(line + "\n")


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


def differences(made_from, inputs, options, bin_dir=None):
    """What differs between the recorded ``made_from`` and the inputs and options of this run."""
    found = []
    for key, flag in RECORDED_OPTIONS.items():
        old, new = made_from["options"].get(key), options.get(key)
        if key == "max_length" and old is None and bin_dir is not None and \
                longest_training_side(bin_dir, options["source_lang"], options["target_lang"]) <= new:
            # prepared before --max-length existed, keeping every pair: the same data as now
            # when none of them is longer
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


def train_sentencepiece(train_text, model_prefix, vocab_size, model_type):
    import sentencepiece as spm

    try:
        spm.SentencePieceTrainer.train(
            input=train_text,
            model_prefix=model_prefix,
            vocab_size=vocab_size,
            model_type=model_type,
            character_coverage=1.0,
            # fairseq's dictionary adds its own specials; keep sentencepiece's ids out of the way
            bos_id=-1,
            eos_id=-1,
            unk_id=0,
            pad_id=-1,
            minloglevel=2,
        )
    except RuntimeError as e:
        raise vocab_size_error(str(e), vocab_size) from e
    return model_prefix + ".model"


def vocab_size_error(message, vocab_size):
    """sentencepiece's complaint about the vocabulary size, as a DistillError naming the limit."""
    too_high = re.search(r"Please set it to a value <= (\d+)", message)
    if too_high:
        return DistillError(
            f"--vocab-size {vocab_size} is more than sentencepiece can make from this training data; "
            f"use at most {too_high.group(1)} (or more training data)")
    too_low = re.search(r"smaller than required_chars\. \d+ vs (\d+)", message)
    if too_low:
        # character_coverage=1.0 keeps every character as a piece, plus the one special piece <unk>
        smallest = int(too_low.group(1)) + 1
        return DistillError(
            f"--vocab-size {vocab_size} is too small: the training data has {too_low.group(1)} distinct "
            f"characters, each needs a piece of its own, plus <unk>; use at least {smallest}")
    return DistillError(f"sentencepiece could not train with --vocab-size {vocab_size}: {message}")


def learn_subword_nmt(train_text, codes_path, num_merges):
    from subword_nmt.learn_bpe import learn_bpe

    # newline="\n": learn from the lines as they were read, not re-split at a bare \r
    # its progress bar (one tick per merge, on stderr) would scroll through a log: one line per
    # stage is printed instead
    with open(train_text, encoding="utf-8", newline="\n") as inp, \
            open(codes_path, "w", encoding="utf-8") as out, contextlib.redirect_stderr(io.StringIO()):
        learn_bpe(inp, out, num_merges)
    return codes_path


def fairseq_preprocess(src, tgt, tok_dir, bin_dir, test_names, workers, log_path, srcdict=None):
    """Run fairseq-preprocess with its whole output (its options, dictionary sizes, progress) in
    ``log_path``, named with its last lines if it fails."""
    cmd = [
        sys.executable, "-m", "fairseq_cli.preprocess",
        "--source-lang", src, "--target-lang", tgt,
        "--trainpref", os.path.join(tok_dir, "train"),
        "--validpref", os.path.join(tok_dir, "valid"),
        "--testpref", ",".join(os.path.join(tok_dir, name) for name in test_names),
        "--destdir", bin_dir, "--workers", str(workers),
    ]
    if srcdict:
        cmd += ["--srcdict", srcdict, "--tgtdict", srcdict]
    else:
        cmd += ["--joined-dictionary"]
    with open(log_path, "w", encoding="utf-8") as log:
        code = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT).returncode
    if code:
        with open(log_path, encoding="utf-8", errors="replace") as log:
            last = "".join(log.readlines()[-15:])
        raise DistillError(f"fairseq-preprocess failed (exit status {code}); the last lines of its log "
                           f"{log_path}:\n{last.rstrip()}")


def check_binarized(bin_dir, tok_dir, src, tgt, sizes):
    """fairseq-preprocess must have written one sentence per input pair, on both sides."""
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
                    f"fairseq-preprocess wrote {got} sentences for {name}.{lang} but the input has {n} "
                    f"lines; {os.path.join(tok_dir, f'{name}.{lang}')} must have one line per sentence")


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
    if getattr(args, "max_length", DEFAULT_MAX_LENGTH) < 1:
        raise DistillError(f"--max-length must be a positive number of subword tokens, got {args.max_length}")
    if args.vocab_size < 1:
        raise DistillError(f"--vocab-size must be a positive number, got {args.vocab_size}")
    options = {"source_lang": src, "target_lang": tgt, "bpe": args.bpe, "vocab_size": args.vocab_size,
               "spm_model_type": args.spm_model_type if args.bpe == "sentencepiece" else None,
               "errors": errors, "splits": [name for name, _ in splits],
               "max_length": getattr(args, "max_length", DEFAULT_MAX_LENGTH),
               **({"keep_blank_test_lines": True} if getattr(args, "keep_blank_test_lines", False) else {})}
    keep_blank = set(test_names) if getattr(args, "keep_blank_test_lines", False) else set()
    inputs = {name: {lang: find_side(prefix, lang) for lang in (src, tgt)} for name, prefix in splits}

    meta_path = os.path.join(args.out, "bin", META_FILE)
    if os.path.exists(meta_path) and not args.force:
        check_reuse(args.out, meta_path, inputs, options)
        return meta_path

    # read and check everything before anything already there is replaced
    made_from = {"options": options, "inputs": {}}
    data = {}
    for name, prefix in splits:
        data[name] = load_split(inputs[name][src], inputs[name][tgt], name, errors, name in keep_blank)
        made_from["inputs"][name] = {lang: describe_input(inputs[name][lang]) for lang in (src, tgt)}
        print(f"[prepare] {name}: {len(data[name][0]):,} sentence pairs from {prefix}")

    raw_dir, tok_dir, bin_dir = (os.path.join(args.out, d) for d in ("raw", "tok", "bin"))
    if os.path.isdir(bin_dir):
        shutil.rmtree(bin_dir)
    for d in (raw_dir, tok_dir, bin_dir):
        os.makedirs(d, exist_ok=True)
    # the subword model learns from the text as it will be segmented (whitespace normalised)
    train_text = os.path.join(bin_dir, "train.subword-input.txt")
    write_lines(train_text, [normalize_whitespace(line) for side in data["train"] for line in side])
    if args.bpe == "sentencepiece":
        model = train_sentencepiece(
            train_text, os.path.join(bin_dir, "sentencepiece"), args.vocab_size, args.spm_model_type
        )
        encode = Segmenter("sentencepiece", model).encode_lines
        bpe_meta = {"bpe": "sentencepiece", "sentencepiece_model": "sentencepiece.model"}
    else:
        codes = learn_subword_nmt(train_text, os.path.join(bin_dir, "bpe.codes"), args.vocab_size)
        encode = Segmenter("subword_nmt", codes).encode_lines
        bpe_meta = {"bpe": "subword_nmt", "bpe_codes": "bpe.codes"}
    os.remove(train_text)
    print(f"[prepare] learned a joint {args.bpe} model (size {args.vocab_size})")

    max_length = getattr(args, "max_length", DEFAULT_MAX_LENGTH)
    removed, blank_kept = {}, {}
    for name, (src_lines, tgt_lines) in list(data.items()):
        pieces = {}
        for lang, lines in ((src, src_lines), (tgt, tgt_lines)):
            pieces[lang] = encode(lines)
            # a line the subword model's own normalisation empties would binarize as </s> alone
            empty = [i + 1 for i, p in enumerate(pieces[lang]) if not p.strip()]
            if empty and name in keep_blank:
                pieces[lang] = [p if p.strip() else "" for p in pieces[lang]]
                blank_kept[name] = sorted(set(blank_kept.get(name, [])) | set(empty))
                continue
            if empty:
                raise DistillError(
                    f"{inputs[name][lang]} has {len(empty)} line(s) empty after normalisation by the "
                    f"{args.bpe} model (first at line {empty[0]}: {lines[empty[0] - 1]!r}); remove those "
                    f"sentence pairs from both sides first")
        keep, long_lines = over_long_pairs(pieces[src], pieces[tgt], max_length)
        if long_lines:
            if name != "train":
                line, n = long_lines[0]
                raise DistillError(
                    f"{inputs[name][src]} / {inputs[name][tgt]}: line {line} has {n} subword tokens, more than "
                    f"--max-length {max_length} ({len(long_lines)} such line(s) in this {name} set); an "
                    f"evaluation set is never shortened: split those sentences or raise --max-length")
            listed = first_few(line for line, _ in long_lines)
            print(f"[prepare] {name}: removed {len(long_lines):,} sentence pair(s) with a side longer than "
                  f"--max-length {max_length} subword tokens (lines {listed}; the longest has "
                  f"{max(n for _, n in long_lines):,}); they are listed in {META_FILE}")
            removed[name] = [line for line, _ in long_lines]
            src_lines, tgt_lines = [src_lines[i] for i in keep], [tgt_lines[i] for i in keep]
            data[name] = (src_lines, tgt_lines)
            pieces = {lang: [pieces[lang][i] for i in keep] for lang in (src, tgt)}
        for lang, lines in ((src, src_lines), (tgt, tgt_lines)):
            write_lines(os.path.join(raw_dir, f"{name}.{lang}"), lines)
            write_lines(os.path.join(tok_dir, f"{name}.{lang}"), pieces[lang])
        if name == "train":
            per_sentence = sum(len(p.split()) for p in pieces[src]) / max(len(pieces[src]), 1)
    print(f"[prepare] segmented every split into {tok_dir} (train: {per_sentence:.1f} {src} subword "
          f"tokens per sentence)")
    for name, lines in blank_kept.items():
        print(f"[prepare] {name}: kept {len(lines):,} blank line(s) in place, as empty sentences (lines "
              f"{first_few(lines)}; --keep-blank-test-lines): each is scored as its line's empty reference")

    log_path = os.path.join(args.out, "preprocess.log")
    fairseq_preprocess(src, tgt, tok_dir, bin_dir, test_names, args.workers, log_path)
    sizes = {name: len(lines[0]) for name, lines in data.items()}
    check_binarized(bin_dir, tok_dir, src, tgt, sizes)
    with open(os.path.join(bin_dir, f"dict.{src}.txt"), encoding="utf-8") as f:
        types = sum(1 for _ in f)
    print(f"[prepare] binarized with fairseq-preprocess: a joined dictionary of {types:,} types plus "
          f"4 specials (log: {log_path})")

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
        "removed_over_long": removed,  # 1-based input line numbers of the pairs left out
        "blank_test_lines": blank_kept,  # 1-based lines kept as empty sentences (--keep-blank-test-lines)
        "made_from": made_from,
    }
    with open(meta_path, "w", encoding="utf-8") as f:
        json.dump(meta, f, indent=2)
    print(f"[prepare] done in {time.time() - started:.0f}s: {bin_dir}")
    return meta_path
