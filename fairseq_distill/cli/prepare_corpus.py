"""Prepare a parallel corpus for fairseq: subword segmentation + binarization.

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
"""
import argparse
import gzip
import json
import os
import shutil
import subprocess
import sys
import time

from fairseq_distill.errors import DistillError
from fairseq_distill.segmentation import META_FILE, Segmenter



def open_text(path):
    if path.endswith(".gz"):
        return gzip.open(path, "rt", encoding="utf-8")
    return open(path, encoding="utf-8")


def find_side(prefix, lang):
    """The file for one side of a split: PREFIX.LANG or PREFIX.LANG.gz."""
    for candidate in (f"{prefix}.{lang}", f"{prefix}.{lang}.gz"):
        if os.path.isfile(candidate):
            return candidate
    raise DistillError(
        f"no file for language '{lang}' with prefix '{prefix}': "
        f"expected {prefix}.{lang} or {prefix}.{lang}.gz"
    )


def read_lines(path):
    with open_text(path) as f:
        return [line.rstrip("\r\n") for line in f]


def load_split(prefix, src, tgt, split):
    """Read one split and check it: aligned line counts, not empty, no blank lines."""
    src_path, tgt_path = find_side(prefix, src), find_side(prefix, tgt)
    src_lines, tgt_lines = read_lines(src_path), read_lines(tgt_path)
    if len(src_lines) != len(tgt_lines):
        raise DistillError(
            f"misaligned {split} files: {src_path} has {len(src_lines)} lines but "
            f"{tgt_path} has {len(tgt_lines)}; both sides must have one sentence per line"
        )
    if not src_lines:
        raise DistillError(f"empty corpus: {src_path} and {tgt_path} have no lines")
    for side_path, lines in ((src_path, src_lines), (tgt_path, tgt_lines)):
        blank = [i + 1 for i, line in enumerate(lines) if not line.strip()]
        if blank:
            raise DistillError(
                f"{side_path} has {len(blank)} blank line(s) (first at line {blank[0]}); "
                f"remove those sentence pairs from both sides first"
            )
    return src_lines, tgt_lines


def write_lines(path, lines):
    with open(path, "w", encoding="utf-8") as f:
        for line in lines:
            f.write(line + "\n")


def train_sentencepiece(train_files, model_prefix, vocab_size, model_type):
    import sentencepiece as spm

    spm.SentencePieceTrainer.train(
        input=",".join(train_files),
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
    return model_prefix + ".model"


def learn_subword_nmt(train_files, codes_path, num_merges):
    from subword_nmt.learn_bpe import learn_bpe

    joint = codes_path + ".input"
    with open(joint, "w", encoding="utf-8") as out:
        for path in train_files:
            with open(path, encoding="utf-8") as f:
                shutil.copyfileobj(f, out)
    with open(joint, encoding="utf-8") as inp, open(codes_path, "w", encoding="utf-8") as out:
        learn_bpe(inp, out, num_merges)
    os.remove(joint)
    return codes_path


def fairseq_preprocess(src, tgt, tok_dir, bin_dir, test_names, workers, srcdict=None):
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
    subprocess.run(cmd, check=True)


def prepare(args):
    started = time.time()
    src, tgt = args.source_lang, args.target_lang
    splits = [("train", args.train_prefix), ("valid", args.valid_prefix)]
    test_names = []
    for i, prefix in enumerate(args.test_prefix):
        name = "test" if i == 0 else f"test{i}"
        splits.append((name, prefix))
        test_names.append(name)

    meta_path = os.path.join(args.out, "bin", META_FILE)
    if os.path.exists(meta_path) and not args.force:
        print(f"[prepare] {args.out} is already prepared ({meta_path} exists); --force redoes it")
        return meta_path

    raw_dir, tok_dir, bin_dir = (os.path.join(args.out, d) for d in ("raw", "tok", "bin"))
    if os.path.isdir(bin_dir):
        shutil.rmtree(bin_dir)
    for d in (raw_dir, tok_dir, bin_dir):
        os.makedirs(d, exist_ok=True)

    data = {}
    for name, prefix in splits:
        data[name] = load_split(prefix, src, tgt, name)
        write_lines(os.path.join(raw_dir, f"{name}.{src}"), data[name][0])
        write_lines(os.path.join(raw_dir, f"{name}.{tgt}"), data[name][1])
        print(f"[prepare] {name}: {len(data[name][0]):,} sentence pairs from {prefix}")

    train_raw = [os.path.join(raw_dir, f"train.{lang}") for lang in (src, tgt)]
    if args.bpe == "sentencepiece":
        model = train_sentencepiece(
            train_raw, os.path.join(bin_dir, "sentencepiece"), args.vocab_size, args.spm_model_type
        )
        encode = Segmenter("sentencepiece", model).encode_lines
        bpe_meta = {"bpe": "sentencepiece", "sentencepiece_model": "sentencepiece.model"}
    else:
        codes = learn_subword_nmt(train_raw, os.path.join(bin_dir, "bpe.codes"), args.vocab_size)
        encode = Segmenter("subword_nmt", codes).encode_lines
        bpe_meta = {"bpe": "subword_nmt", "bpe_codes": "bpe.codes"}
    print(f"[prepare] learned a joint {args.bpe} model (size {args.vocab_size})")

    for name, (src_lines, tgt_lines) in data.items():
        write_lines(os.path.join(tok_dir, f"{name}.{src}"), encode(src_lines))
        write_lines(os.path.join(tok_dir, f"{name}.{tgt}"), encode(tgt_lines))

    fairseq_preprocess(src, tgt, tok_dir, bin_dir, test_names, args.workers)

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
        "sizes": {name: len(lines[0]) for name, lines in data.items()},
    }
    with open(meta_path, "w", encoding="utf-8") as f:
        json.dump(meta, f, indent=2)
    print(f"[prepare] done in {time.time() - started:.0f}s: {bin_dir}")
    return meta_path


def build_parser():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--source-lang", "-s", required=True)
    p.add_argument("--target-lang", "-t", required=True)
    p.add_argument("--train-prefix", required=True, help="PREFIX of PREFIX.{src,tgt}[.gz]")
    p.add_argument("--valid-prefix", required=True)
    p.add_argument("--test-prefix", required=True, nargs="+", help="one or more test sets")
    p.add_argument("--out", required=True, help="output directory")
    p.add_argument("--bpe", choices=["sentencepiece", "subword_nmt"], default="sentencepiece")
    p.add_argument(
        "--vocab-size", type=int, default=8000,
        help="sentencepiece vocabulary size, or the number of subword-nmt merges",
    )
    p.add_argument("--spm-model-type", choices=["unigram", "bpe"], default="unigram")
    p.add_argument("--workers", type=int, default=min(2, os.cpu_count() or 1))
    p.add_argument("--force", action="store_true", help="redo an already prepared directory")
    return p


def main(argv=None):
    args = build_parser().parse_args(argv)
    try:
        prepare(args)
    except DistillError as e:
        sys.exit(f"prepare_corpus: error: {e}")


if __name__ == "__main__":
    main()
