"""Peak memory of a Hugging Face teacher with NLLB-200's vocabulary (256,206 pieces), against the
same teacher with a small one: the cache fill (``fsd-cache-teacher``) and a few updates of
word-level KD with the teacher in the loop (``fairseq-train --teacher-path``), both at
``--max-tokens 4096`` on the CPU. The student keeps only the pieces its training data uses, so
what the large vocabulary costs is the teacher's embeddings and output layer and the
full-vocabulary softmax that measures the mass the trimming drops (taken a block of positions
at a time).

The teachers are random M2M100 models (2+2 layers, d = 64) on one sentencepiece model trained
here on the Multi30k text; the large one's vocabulary is that model's pieces, then filler pieces
up to NLLB's size (no text segments into them), then the language codes. Each command runs in
a process of its own; its peak resident memory is ``ru_maxrss`` of that process.

    python bench/hf_vocabulary_memory.py --work work/hf-vocab-memory
writes bench/results/hf_vocabulary_memory.{json,md}.
"""
import argparse
import gzip
import json
import os
import resource
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MULTI30K = os.path.join(REPO, "data", "multi30k")
BIN = os.path.dirname(sys.executable)
NLLB_VOCABULARY = 256_206


def lines(split, lang, n):
    with gzip.open(os.path.join(MULTI30K, f"{split}.{lang}.gz"), "rt", encoding="utf-8") as f:
        return [next(f).rstrip("\n") for _ in range(n)]


def teacher(out, spm_model, pieces, vocabulary_size):
    """A random M2M100 de-en model whose vocabulary is ``pieces`` padded with filler pieces to
    ``vocabulary_size`` (language codes and M2M100's 8 extra words included)."""
    import shutil

    import torch
    from transformers import M2M100Config, M2M100ForConditionalGeneration, M2M100Tokenizer

    os.makedirs(out, exist_ok=True)
    work = out + "-tokenizer"
    os.makedirs(work, exist_ok=True)
    base = ["<s>", "<pad>", "</s>", "<unk>"] + pieces
    codes_and_extra = 100 + 8  # M2M100Tokenizer appends its 100 language codes, then 8 made-up words
    filler = max(0, vocabulary_size - len(base) - codes_and_extra)
    vocab = base + [f"\u2581filler{i}" for i in range(filler)]
    with open(os.path.join(work, "vocab.json"), "w", encoding="utf-8") as f:
        json.dump({p: i for i, p in enumerate(vocab)}, f)
    shutil.copy(spm_model, os.path.join(work, "sentencepiece.bpe.model"))
    tokenizer = M2M100Tokenizer(os.path.join(work, "vocab.json"), os.path.join(work, "sentencepiece.bpe.model"),
                                src_lang="de", tgt_lang="en")
    size = max(tokenizer.lang_token_to_id.values()) + 1 + 8
    torch.manual_seed(0)
    config = M2M100Config(vocab_size=size, d_model=64, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
                          decoder_attention_heads=4, encoder_ffn_dim=256, decoder_ffn_dim=256,
                          max_position_embeddings=256, pad_token_id=1, bos_token_id=0, eos_token_id=2,
                          decoder_start_token_id=2, dropout=0.0, attention_dropout=0.0, activation_dropout=0.0,
                          encoder_layerdrop=0.0, decoder_layerdrop=0.0)
    M2M100ForConditionalGeneration(config).save_pretrained(out)
    tokenizer.save_pretrained(out)
    return size


def measured(cmd, log):
    """(peak resident MiB, seconds) of ``cmd`` run in a process of its own."""
    probe = ("import resource, subprocess, sys\n"
             "rc = subprocess.run(sys.argv[1:]).returncode\n"
             "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, file=sys.stderr)\n"
             "sys.exit(rc)\n")
    start = time.time()
    with open(log, "w", encoding="utf-8") as f:
        proc = subprocess.run([sys.executable, "-c", probe, *cmd], stdout=f, stderr=subprocess.PIPE, text=True)
    seconds = time.time() - start
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed (exit {proc.returncode}); its log: {log}\n{proc.stderr[-2000:]}")
    return int(proc.stderr.strip().splitlines()[-1]) / 1024, seconds


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--work", default="work/hf-vocab-memory")
    p.add_argument("--pairs", type=int, default=2000, help="training pairs (default 2000)")
    p.add_argument("--results", default=os.path.join(REPO, "bench", "results"))
    args = p.parse_args(argv)
    import sentencepiece as spm

    from fairseq_distill.machine import cpu_model

    os.makedirs(args.work, exist_ok=True)
    corpus = os.path.join(args.work, "corpus")
    os.makedirs(corpus, exist_ok=True)
    for split, name, n in (("train", "train", args.pairs), ("valid", "val", 200), ("test", "test_2016_flickr", 200)):
        for lang in ("de", "en"):
            with open(os.path.join(corpus, f"{split}.{lang}"), "w", encoding="utf-8") as f:
                f.write("\n".join(lines(name, lang, n)) + "\n")
    joint = os.path.join(args.work, "joint")
    with open(joint + ".txt", "w", encoding="utf-8") as f:
        f.write("\n".join(lines("train", "de", args.pairs) + lines("train", "en", args.pairs)) + "\n")
    spm.SentencePieceTrainer.train(input=joint + ".txt", model_prefix=joint, vocab_size=2000, model_type="unigram",
                                   character_coverage=1.0, minloglevel=2, num_threads=1)
    sp = spm.SentencePieceProcessor(model_file=joint + ".model")
    pieces = [sp.id_to_piece(i) for i in range(sp.get_piece_size()) if not sp.is_control(i) and not sp.is_unknown(i)]
    rows = []
    for name, size in (("small", 0), ("nllb", NLLB_VOCABULARY)):
        model = os.path.join(args.work, f"teacher-{name}")
        vocabulary = teacher(model, joint + ".model", pieces, size)
        data = os.path.join(args.work, f"data-{name}")
        subprocess.run([os.path.join(BIN, "fsd-prepare-corpus"), "-s", "de", "-t", "en", "--train-prefix",
                        os.path.join(corpus, "train"), "--valid-prefix", os.path.join(corpus, "valid"),
                        "--test-prefix", os.path.join(corpus, "test"), "--vocabulary-from", model, "--out", data,
                        "--force"], check=True, stdout=subprocess.DEVNULL)
        with open(os.path.join(data, "bin", "dict.en.txt"), encoding="utf-8") as f:
            student_vocabulary = sum(1 for _ in f) + 4
        cache = os.path.join(args.work, f"cache-{name}")
        cache_mib, cache_s = measured([os.path.join(BIN, "fsd-cache-teacher"), "--teacher", model, "--data",
                                       os.path.join(data, "bin"), "--top-k", "8", "--max-tokens", "4096", "--out",
                                       cache, "--cpu"], os.path.join(args.work, f"cache-{name}.log"))
        with open(os.path.join(cache, "meta.json"), encoding="utf-8") as f:
            meta = json.load(f)
        train_mib, train_s = measured(
            [os.path.join(BIN, "fairseq-train"), os.path.join(data, "bin"), "--user-dir",
             os.path.join(REPO, "fairseq_distill"), "--task", "translation_distill", "--teacher-path", model,
             "--criterion", "word_kd", "--arch", "transformer", "--share-all-embeddings", "--encoder-layers", "2",
             "--decoder-layers", "2", "--encoder-embed-dim", "64", "--decoder-embed-dim", "64",
             "--encoder-ffn-embed-dim", "256", "--decoder-ffn-embed-dim", "256", "--encoder-attention-heads", "4",
             "--decoder-attention-heads", "4", "--optimizer", "adam", "--lr", "0.001", "--max-tokens", "4096",
             "--max-update", "5", "--save-dir", os.path.join(args.work, f"student-{name}"), "--no-save", "--cpu",
             "--log-format", "simple"], os.path.join(args.work, f"train-{name}.log"))
        rows.append({"teacher_vocabulary": vocabulary, "student_vocabulary": student_vocabulary,
                     "cache_peak_mib": round(cache_mib, 1), "cache_seconds": round(cache_s, 1),
                     "cache_tokens": meta.get("tokens"),
                     "teacher_mass_outside_vocabulary": meta["extra"].get("teacher_mass_outside_vocabulary"),
                     "train_5_updates_peak_mib": round(train_mib, 1), "train_5_updates_seconds": round(train_s, 1)})
        print(json.dumps(rows[-1]))
    result = {"what": "peak resident memory of a Hugging Face teacher at NLLB-200's vocabulary size, CPU",
              "teacher": "random M2M100, 2+2 layers, d = 64, FFN 256", "pairs": args.pairs, "max_tokens": 4096,
              "cpu": cpu_model(), "rows": rows}
    os.makedirs(args.results, exist_ok=True)
    with open(os.path.join(args.results, "hf_vocabulary_memory.json"), "w", encoding="utf-8") as f:
        json.dump(result, f, indent=2)
    md = ["# A Hugging Face teacher at NLLB-200's vocabulary size: peak memory", "",
          f"{result['teacher']}; {args.pairs:,} Multi30k training pairs; `--max-tokens 4096`; CPU; each command "
          "in a process of its own (peak resident memory). Made by `python bench/hf_vocabulary_memory.py`.", "",
          "| teacher vocabulary | student vocabulary | cache fill: peak MiB | seconds | word-level KD in the loop, "
          "5 updates: peak MiB | seconds |", "|---|---|---|---|---|---|"]
    for r in rows:
        md.append(f"| {r['teacher_vocabulary']:,} | {r['student_vocabulary']:,} | {r['cache_peak_mib']:,.0f} | "
                  f"{r['cache_seconds']:.0f} | {r['train_5_updates_peak_mib']:,.0f} | {r['train_5_updates_seconds']:.0f} |")
    md += ["", "The teachers are random, so the share of their probability outside the student's vocabulary "
           "(in the JSON) says nothing about a trained NLLB; the cache measures it on every 8th batch. "
           "The seconds are those of a run that may have shared the CPU; the memory is the point."]
    with open(os.path.join(args.results, "hf_vocabulary_memory.md"), "w", encoding="utf-8") as f:
        f.write("\n".join(md) + "\n")


if __name__ == "__main__":
    main()
