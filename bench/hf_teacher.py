"""Train the Hugging Face teacher of the HF-teacher rows: a MarianMT model trained with
``transformers`` on Multi30k de->en, with its own sentencepiece models (one per side, as OPUS-MT
has them), at about the papers teacher's size (6+6 layers, d = 128, FFN 512, 4 heads).

    python bench/hf_teacher.py --out WORK/hf-teacher            # 20 epochs, a few hours on 2 CPU cores
    python bench/hf_teacher.py --out /tmp/t --smoke             # the same steps at a toy size

OUT then is a model directory that every tool takes as a teacher (``--teacher-path OUT``,
``fsd-prepare-corpus --vocabulary-from OUT``), and ``OUT/teacher.json`` records how it was made:
options, parameters, epochs, wall time, validation loss per epoch, test BLEU and chrF (beam 4,
sacreBLEU on the detokenised output), and the SHA-256 of ``model.safetensors``, so that rows made
from it name the teacher they used. The training loop is plain PyTorch on the papers' recipe
(configs/papers.yaml's teacher): Adam (0.9, 0.98), lr 1e-3 with 500 warm-up updates and inverse
square root decay, labels smoothed by 0.1, batches of at most 4,096 target tokens, the checkpoint
of the best validation loss kept.
"""
import argparse
import gzip
import hashlib
import json
import math
import os
import random
import re
import sys
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
MULTI30K = os.path.join(os.path.dirname(HERE), "data", "multi30k")


def read(name, lang, limit=None):
    with gzip.open(os.path.join(MULTI30K, f"{name}.{lang}.gz"), "rt", encoding="utf-8") as f:
        lines = [line.rstrip("\n") for line in f]
    return lines[:limit] if limit else lines


def train_spm(lines, prefix, size):
    import sentencepiece as spm

    with open(prefix + ".txt", "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    spm.SentencePieceTrainer.train(input=prefix + ".txt", model_prefix=prefix, vocab_size=size, model_type="unigram",
                                   character_coverage=1.0, minloglevel=2, num_threads=2,
                                   hard_vocab_limit=False)  # a side with fewer pieces gets fewer
    os.remove(prefix + ".txt")
    return prefix + ".model"


def pieces_of(model):
    import sentencepiece as spm

    sp = spm.SentencePieceProcessor(model_file=model)
    return [sp.id_to_piece(i) for i in range(sp.get_piece_size()) if not (sp.is_control(i) or sp.is_unknown(i))]


def make_tokenizer(out, train_de, train_en, size):
    """source.spm and target.spm learned from the training text, one vocab.json (</s> 0, <unk> 1, the
    pieces, <pad> last, as OPUS-MT lays it out)."""
    from transformers import MarianTokenizer

    work = out.rstrip("/") + ".spm"
    os.makedirs(work, exist_ok=True)
    src = train_spm(train_de, os.path.join(work, "source"), size)
    tgt = train_spm(train_en, os.path.join(work, "target"), size)
    vocab = ["</s>", "<unk>"]
    seen = set(vocab)
    for piece in pieces_of(src) + pieces_of(tgt):
        if piece not in seen:
            vocab.append(piece)
            seen.add(piece)
    vocab.append("<pad>")
    with open(os.path.join(work, "vocab.json"), "w", encoding="utf-8") as f:
        json.dump({p: i for i, p in enumerate(vocab)}, f)
    tokenizer = MarianTokenizer(src, tgt, os.path.join(work, "vocab.json"), source_lang="de", target_lang="en")
    tokenizer.save_pretrained(out)
    return tokenizer


def batches(pairs, max_tokens, shuffle, seed):
    """Lists of pair indices of at most ``max_tokens`` target tokens (padded), similar lengths together."""
    order = sorted(range(len(pairs)), key=lambda i: (len(pairs[i][1]), len(pairs[i][0])))
    out, current, longest = [], [], 0
    for i in order:
        longest_now = max(longest, len(pairs[i][1]), len(pairs[i][0]))
        if current and longest_now * (len(current) + 1) > max_tokens:
            out.append(current)
            current, longest_now = [], max(len(pairs[i][1]), len(pairs[i][0]))
        current.append(i)
        longest = longest_now
    if current:
        out.append(current)
    if shuffle:
        random.Random(seed).shuffle(out)
    return out


def collate(pairs, ids, pad, start):
    src = [pairs[i][0] for i in ids]
    tgt = [pairs[i][1] for i in ids]
    S, T = max(map(len, src)), max(map(len, tgt))
    input_ids = torch.full((len(ids), S), pad)
    labels = torch.full((len(ids), T), -100)
    decoder = torch.full((len(ids), T), pad)
    for b, (s, t) in enumerate(zip(src, tgt)):
        input_ids[b, :len(s)] = torch.tensor(s)
        labels[b, :len(t)] = torch.tensor(t)
        decoder[b, :len(t)] = torch.tensor([start] + t[:-1])
    return {"input_ids": input_ids, "attention_mask": input_ids.ne(pad).long(), "decoder_input_ids": decoder,
            "decoder_attention_mask": decoder.ne(pad).long(), "labels": labels}


def loss_of(model, batch, smoothing):
    logits = model(**{k: v for k, v in batch.items() if k != "labels"}).logits
    labels = batch["labels"]
    loss = torch.nn.functional.cross_entropy(logits.view(-1, logits.size(-1)).float(), labels.view(-1),
                                             ignore_index=-100, label_smoothing=smoothing, reduction="sum")
    return loss, int(labels.ne(-100).sum())


def evaluate_bleu(model, tokenizer, sources, references, beam, batch_size=64):
    import sacrebleu

    model.eval()
    hyps = []
    with torch.no_grad():
        for start in range(0, len(sources), batch_size):
            enc = tokenizer(sources[start:start + batch_size], return_tensors="pt", padding=True)
            out = model.generate(**enc, num_beams=beam, max_new_tokens=256)
            hyps += tokenizer.batch_decode(out, skip_special_tokens=True)
    return (sacrebleu.corpus_bleu(hyps, [references]).score, sacrebleu.corpus_chrf(hyps, [references]).score, hyps)


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True, help="the model directory to write")
    p.add_argument("--epochs", type=int, default=20)
    p.add_argument("--layers", type=int, default=6)
    p.add_argument("--dim", type=int, default=128)
    p.add_argument("--ffn", type=int, default=512)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--dropout", type=float, default=0.2)
    p.add_argument("--vocab-size", type=int, default=8000, help="pieces of each side's sentencepiece model")
    p.add_argument("--max-tokens", type=int, default=4096)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--warmup", type=int, default=500)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--smoke", action="store_true", help="a toy size: 300 pairs, 1+1 layers, 2 epochs")
    p.add_argument("--finalize", metavar="LOG",
                   help="a training stopped before its last epoch: record OUT's best checkpoint (test score, "
                        "SHA-256, teacher.json) from the epochs its log LOG shows, training nothing")
    args = p.parse_args(argv)
    if args.finalize:
        return finalize(args)
    from transformers import MarianConfig, MarianMTModel

    torch.manual_seed(args.seed)
    torch.set_num_threads(args.threads)
    limit = 300 if args.smoke else None
    if args.smoke:
        args.epochs, args.layers, args.dim, args.ffn, args.heads, args.vocab_size = 2, 1, 16, 32, 2, 150
    if os.path.exists(os.path.join(args.out, "teacher.json")):
        sys.exit(f"hf_teacher: {args.out} already holds a trained teacher (teacher.json); give a new --out")
    os.makedirs(args.out, exist_ok=True)
    started = time.time()
    train_de, train_en = read("train", "de", limit), read("train", "en", limit)
    valid_de, valid_en = read("val", "de", limit and 50), read("val", "en", limit and 50)
    test_de, test_en = read("test_2016_flickr", "de", limit and 50), read("test_2016_flickr", "en", limit and 50)
    tokenizer = make_tokenizer(args.out, train_de, train_en, args.vocab_size)
    vocab = tokenizer.get_vocab()
    pad = vocab["<pad>"]

    def encode(de, en):
        src = tokenizer(de)["input_ids"]
        tgt = tokenizer(text_target=en)["input_ids"]
        return list(zip(src, tgt))

    train, valid = encode(train_de, train_en), encode(valid_de, valid_en)
    config = MarianConfig(vocab_size=len(vocab), d_model=args.dim, encoder_layers=args.layers,
                          decoder_layers=args.layers, encoder_attention_heads=args.heads,
                          decoder_attention_heads=args.heads, encoder_ffn_dim=args.ffn, decoder_ffn_dim=args.ffn,
                          dropout=args.dropout, attention_dropout=0.0, activation_dropout=0.0,
                          max_position_embeddings=512, pad_token_id=pad, eos_token_id=vocab["</s>"],
                          decoder_start_token_id=pad, forced_eos_token_id=vocab["</s>"], scale_embedding=True,
                          share_encoder_decoder_embeddings=True)
    model = MarianMTModel(config)
    params = sum(t.numel() for t in model.parameters())
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr, betas=(0.9, 0.98), weight_decay=1e-4)

    def lr_at(step):  # fairseq's inverse_sqrt with --warmup-init-lr 1e-7
        if step < args.warmup:
            return 1e-7 + (args.lr - 1e-7) * step / args.warmup
        return args.lr * math.sqrt(args.warmup / step)

    record = {"what": "MarianMT teacher trained with transformers on Multi30k de->en (bench/hf_teacher.py)",
              "options": {**vars(args), "out": os.path.basename(os.path.normpath(args.out))}, "parameters": params, "train_pairs": len(train), "epochs": []}
    best, step = float("inf"), 0
    for epoch in range(1, args.epochs + 1):
        model.train()
        epoch_started, total, tokens = time.time(), 0.0, 0
        for ids in batches(train, args.max_tokens, True, args.seed + epoch):
            step += 1
            for group in optimizer.param_groups:
                group["lr"] = lr_at(step)
            loss, n = loss_of(model, collate(train, ids, pad, pad), 0.1)
            optimizer.zero_grad()
            (loss / n).backward()
            optimizer.step()
            total, tokens = total + loss.item(), tokens + n
        model.eval()
        with torch.no_grad():
            v_loss = v_tokens = 0
            for ids in batches(valid, args.max_tokens, False, 0):
                loss, n = loss_of(model, collate(valid, ids, pad, pad), 0.0)
                v_loss, v_tokens = v_loss + float(loss), v_tokens + n
        valid_loss = v_loss / v_tokens / math.log(2)
        record["epochs"].append({"epoch": epoch, "updates": step, "train_loss": round(total / tokens / math.log(2), 4),
                                 "valid_nll_bits": round(valid_loss, 4),
                                 "seconds": round(time.time() - epoch_started, 1)})
        print(f"[hf-teacher] epoch {epoch}/{args.epochs}: {step} updates, valid nll {valid_loss:.3f} bits, "
              f"{time.time() - epoch_started:.0f}s", flush=True)
        if valid_loss < best:
            best = valid_loss
            model.save_pretrained(args.out)
            record["best_epoch"] = epoch
    record["train_seconds"] = round(time.time() - started, 1)
    write_record(args.out, record, test_de, test_en, started)


def write_record(out, record, test_de, test_en, started):
    """Score OUT's saved (best) model on the test set and write ``teacher.json``."""
    from transformers import MarianMTModel, MarianTokenizer

    model, tokenizer = MarianMTModel.from_pretrained(out), MarianTokenizer.from_pretrained(out)
    bleu, chrf, hyps = evaluate_bleu(model, tokenizer, test_de, test_en, beam=4)
    os.makedirs(out.rstrip("/") + ".spm", exist_ok=True)
    with open(os.path.join(out.rstrip("/") + ".spm", "test.hyp.en"), "w", encoding="utf-8") as f:
        f.write("\n".join(hyps) + "\n")
    weights = os.path.join(out, "model.safetensors")
    record.update(test_bleu=round(bleu, 2), test_chrf=round(chrf, 2), test="test_2016_flickr, beam 4",
                  model_safetensors_sha256=sha256(weights), model_safetensors_bytes=os.path.getsize(weights),
                  wall_seconds=round(time.time() - started, 1))
    with open(os.path.join(out, "teacher.json"), "w", encoding="utf-8") as f:
        json.dump(record, f, indent=2)
    print(f"[hf-teacher] {record['parameters']:,} parameters, best epoch {record['best_epoch']}, test BLEU "
          f"{bleu:.2f}, chrF {chrf:.2f}; {out} (model.safetensors {os.path.getsize(weights) / 2**20:.1f} MiB)")


EPOCH_LINE = re.compile(r"\[hf-teacher\] epoch (\d+)/(\d+): (\d+) updates, valid nll ([\d.]+) bits, (\d+)s")


def finalize(args):
    """The record of a training stopped after some epoch (its process ended): the model OUT holds
    is the one saved at the epoch of lowest validation loss, as a finished run's is."""
    from transformers import MarianMTModel

    if os.path.exists(os.path.join(args.out, "teacher.json")):
        sys.exit(f"hf_teacher: {args.out} already holds a trained teacher (teacher.json)")
    with open(args.finalize, encoding="utf-8") as f:
        epochs = [m.groups() for m in map(EPOCH_LINE.search, f) if m]
    if not epochs:
        sys.exit(f"hf_teacher: {args.finalize} shows no finished epoch ('[hf-teacher] epoch k/N: ...' lines)")
    started = time.time()
    rows = [{"epoch": int(k), "updates": int(u), "valid_nll_bits": float(v), "seconds": float(sec)}
            for k, _, u, v, sec in epochs]
    planned = int(epochs[0][1])
    model = MarianMTModel.from_pretrained(args.out)
    options = {**vars(args), "epochs": planned, "out": os.path.basename(os.path.normpath(args.out))}
    options.pop("finalize")
    record = {"what": "MarianMT teacher trained with transformers on Multi30k de->en (bench/hf_teacher.py)",
              "options": options, "parameters": sum(t.numel() for t in model.parameters()),
              "train_pairs": len(read("train", "de", 300 if args.smoke else None)), "epochs": rows,
              "best_epoch": min(rows, key=lambda r: r["valid_nll_bits"])["epoch"],
              "stopped_after_epoch": rows[-1]["epoch"],
              "train_seconds": round(sum(r["seconds"] for r in rows), 1)}
    limit = 50 if args.smoke else None
    write_record(args.out, record, read("test_2016_flickr", "de", limit), read("test_2016_flickr", "en", limit), started)


if __name__ == "__main__":
    main()
