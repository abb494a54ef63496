"""Evaluate a checkpoint: fairseq-generate on a test set, detokenised output, sacreBLEU.

    fsd-evaluate CHECKPOINT DATA_BIN [--subset test] [--beam 4]
    fsd-evaluate CHECKPOINT DATA_BIN --ctranslate2 CT2_DIR [CT2_DIR ...]

References are the raw test sentences kept by ``prepare_corpus`` (``DATA_BIN/raw``);
for data prepared otherwise, the detokenised target side of the binarized test set.
Writes ``CHECKPOINT_STEM.SUBSET.hyp.txt`` and ``CHECKPOINT_STEM.SUBSET.eval.json`` next to
the checkpoint and prints one summary line.

With ``--ctranslate2``, the raw test source is translated by the fairseq checkpoint and by
each CTranslate2 export of it through the same code (segmentation, length-sorted batches,
beam, length limits), one after the other in this process, and one table compares BLEU,
speed and model file size (``--out`` saves it as JSON).
"""
import argparse
import json
import os
import sys

import torch
from sacrebleu.metrics import BLEU

from fairseq_distill.checkpoint import count_parameters
from fairseq_distill.cli.generation import run_generate
from fairseq_distill.segmentation import load_meta
from fairseq_distill.errors import DistillError

POST_PROCESS = {"sentencepiece": "sentencepiece", "subword_nmt": "subword_nmt"}


def read_references(data_bin, subset, meta, result):
    if meta and subset in meta.get("raw", {}):
        path = os.path.join(data_bin, meta["raw"][subset][meta["target_lang"]])
        with open(path, encoding="utf-8") as f:
            return [line.rstrip("\n") for line in f], path
    n = len(result.references)
    return [result.references[i] for i in range(n)], "target side of the binarized test set"


def checkpoint_parameters(path):
    state = torch.load(path, map_location="cpu", weights_only=False)
    return count_parameters(state["model"])


def evaluate(checkpoint, data_bin, subset="test", beam=4, lenpen=1.0, batch_size=128,
             max_len_a=1.2, max_len_b=10, out_json=None, extra_args=(), tag=None):
    """``tag`` names this evaluation's files (``STEM.TAG.SUBSET.*``) when one checkpoint is
    evaluated several ways (e.g. at several depths)."""
    for path in checkpoint.split(":"):
        if not os.path.isfile(path):
            raise DistillError(f"checkpoint not found: '{path}'")
    if not os.path.isdir(data_bin):
        raise DistillError(f"data directory not found: '{data_bin}'")
    meta = load_meta(data_bin)
    post = POST_PROCESS.get((meta or {}).get("bpe"), "sentencepiece")
    total = (meta or {}).get("sizes", {}).get(subset)
    first = checkpoint.split(":")[0]
    stem = os.path.splitext(first)[0] + (f".{tag}" if tag else "")
    args = [
        "--beam", str(beam), "--lenpen", str(lenpen), "--batch-size", str(batch_size),
        "--max-len-a", str(max_len_a), "--max-len-b", str(max_len_b),
        "--post-process", post, *extra_args,
    ]
    result = run_generate(data_bin, checkpoint, subset, args, total=total,
                          log_path=f"{stem}.{subset}.generate.log", description=f"decode {subset}")
    n = max(len(result.references), total or 0)
    missing = [i for i in range(n) if i not in result.detokenized]
    if missing:
        raise DistillError(f"fairseq-generate returned no hypothesis for {len(missing)} of {n} "
                           f"sentences (first ids: {missing[:5]})")
    hyps = [result.detokenized[i] for i in range(n)]
    refs, ref_source = read_references(data_bin, subset, meta, result)
    if len(refs) != len(hyps):
        raise DistillError(f"{len(hyps)} hypotheses but {len(refs)} references ({ref_source})")
    bleu = BLEU()
    score = bleu.corpus_score(hyps, [refs])
    hyp_path = f"{stem}.{subset}.hyp.txt"
    with open(hyp_path, "w", encoding="utf-8") as f:
        f.write("\n".join(hyps) + "\n")
    record = {
        "checkpoint": os.path.abspath(checkpoint),
        "data": os.path.abspath(data_bin),
        "subset": subset,
        "bleu": round(score.score, 2),
        "bleu_signature": str(bleu.get_signature()),
        "bleu_detail": str(score),
        "references": ref_source,
        "sentences": result.sentences,
        "generated_tokens": result.tokens,
        "generation_seconds": result.generation_seconds,
        "sentences_per_second": result.sentences_per_second,
        "tokens_per_second": result.tokens_per_second,
        "beam": beam,
        "lenpen": lenpen,
        "batch_size": batch_size,
        "device": "cuda" if torch.cuda.is_available() else "cpu",
        "torch_threads": torch.get_num_threads(),
        "parameters": checkpoint_parameters(first),
        "hypotheses": os.path.abspath(hyp_path),
    }
    out_json = out_json or f"{stem}.{subset}.eval.json"
    with open(out_json, "w", encoding="utf-8") as f:
        json.dump(record, f, indent=2)
    record["json"] = out_json
    return record


def evaluate_backends(checkpoint, data_bin, ct2_dirs, subset="test", options=None, batch_size=64, repeats=1):
    """BLEU, tokens/s and model size of the fairseq checkpoint and its CTranslate2 exports.

    With ``repeats`` > 1 the backends take turns for that many rounds, so that a slow spell
    of the machine does not fall on one backend only; each backend's fastest round counts
    (all rounds' tokens/s are kept in ``tokens_per_second_rounds``). Decoding is
    deterministic, so BLEU does not depend on the round."""
    from fairseq_distill.translators import (CTranslate2Translator, DecodingOptions, FairseqTranslator,
                                             read_deployment, translate_lines)
    from fairseq_distill.segmentation import Segmenter

    if repeats < 1:
        raise DistillError(f"repeats must be at least 1, got {repeats}")
    options = options or DecodingOptions()
    meta = load_meta(data_bin)
    if not meta or subset not in meta.get("raw", {}):
        raise DistillError(f"{data_bin} keeps no raw '{subset}' text (prepare it with prepare_corpus)")
    with open(os.path.join(data_bin, meta["raw"][subset][meta["source_lang"]]), encoding="utf-8") as f:
        sources = f.read().splitlines()
    refs, _ = read_references(data_bin, subset, meta, None)
    segmenter = Segmenter.from_dir(data_bin)
    backends = [("fairseq (float32)", FairseqTranslator(checkpoint, data_bin, options),
                 os.path.getsize(checkpoint.split(":")[0]))]
    for d in ct2_dirs:
        info = read_deployment(d)
        backends.append((f"ctranslate2 ({info['quantization']})", CTranslate2Translator(d, options),
                         os.path.getsize(os.path.join(d, "model.bin"))))
    for _, translator, _ in backends:
        translator.translate([segmenter.encode(sources[0])])  # warm-up: first-call costs are not speed
    runs = {name: [] for name, _, _ in backends}
    for _ in range(repeats):
        for name, translator, _ in backends:
            runs[name].append(translate_lines(sources, translator, segmenter, batch_size))
    rows = []
    for name, _, size in backends:
        run = max(runs[name], key=lambda r: r.tokens_per_second)
        bleu = BLEU()
        score = bleu.corpus_score(run.outputs, [refs])
        rows.append({"backend": name, "bleu": round(score.score, 2), "bleu_signature": str(bleu.get_signature()),
                     "tokens_per_second": round(run.tokens_per_second, 1),
                     "tokens_per_second_rounds": [round(r.tokens_per_second, 1) for r in runs[name]],
                     "sentences_per_second": round(run.sentences / run.seconds, 2) if run.seconds else 0.0,
                     "seconds": round(run.seconds, 2), "model_file_mib": round(size / 2**20, 2),
                     "outputs": run.outputs})
    return rows


def backends_table(rows) -> str:
    lines = ["| backend | BLEU | tokens/s | sentences/s | model file |", "|---|---|---|---|---|"]
    lines += [f"| {r['backend']} | {r['bleu']:.2f} | {r['tokens_per_second']:.0f} | "
              f"{r['sentences_per_second']:.1f} | {r['model_file_mib']:.1f} MiB |" for r in rows]
    return "\n".join(lines)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.strip().split("\n")[0])
    p.add_argument("checkpoint", help="checkpoint (several separated by ':' decode as an ensemble)")
    p.add_argument("data_bin", help="binarized data directory")
    p.add_argument("--subset", default="test")
    p.add_argument("--beam", type=int, default=4)
    p.add_argument("--lenpen", type=float, default=1.0)
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--max-len-a", type=float, default=1.2)
    p.add_argument("--max-len-b", type=int, default=10)
    p.add_argument("--out", help="JSON record path (default: next to the checkpoint)")
    p.add_argument("--ctranslate2", nargs="+", metavar="CT2_DIR",
                   help="also evaluate these CTranslate2 exports of the checkpoint and compare")
    p.add_argument("--repeats", type=int, default=1,
                   help="with --ctranslate2: rounds in which the backends take turns; the fastest counts")
    args, extra = p.parse_known_args(argv)
    if args.ctranslate2:
        from fairseq_distill.translators import DecodingOptions

        try:
            rows = evaluate_backends(args.checkpoint, args.data_bin, args.ctranslate2, args.subset,
                                     DecodingOptions(args.beam, args.lenpen, args.max_len_a, args.max_len_b),
                                     args.batch_size, args.repeats)
        except DistillError as e:
            sys.exit(f"evaluate: error: {e}")
        print(backends_table(rows))
        if args.out:
            with open(args.out, "w", encoding="utf-8") as f:
                json.dump({"checkpoint": args.checkpoint, "subset": args.subset, "beam": args.beam,
                           "batch_size": args.batch_size,
                           "rows": [{k: v for k, v in r.items() if k != "outputs"} for r in rows]}, f, indent=2)
        return
    try:
        r = evaluate(args.checkpoint, args.data_bin, args.subset, args.beam, args.lenpen,
                     args.batch_size, args.max_len_a, args.max_len_b, args.out, extra)
    except DistillError as e:
        sys.exit(f"evaluate: error: {e}")
    print(f"[evaluate] {args.checkpoint} on {args.subset}: BLEU {r['bleu']:.2f} "
          f"({r['bleu_signature']}); {r['sentences_per_second']:.1f} sentences/s, "
          f"{r['tokens_per_second']:.0f} tokens/s; {r['parameters']:,} parameters; {r['json']}")


if __name__ == "__main__":
    main()
