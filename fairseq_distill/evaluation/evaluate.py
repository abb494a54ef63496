"""Evaluation of a checkpoint: fairseq-generate on a test set, detokenised output, sacreBLEU.

Every evaluation reports BLEU, chrF and chrF++ with their sacreBLEU signatures
(:mod:`fairseq_distill.evaluation.scoring`) and records the decoding settings that change the score
(beam, length penalty, ``max-len-a``/``max-len-b``), and keeps the hypotheses for paired
significance tests (``fsd-compare``).

:func:`evaluate` scores one checkpoint (or ensemble) with stock fairseq-generate;
:func:`evaluate_backends` translates the raw test source with the fairseq checkpoint and its
CTranslate2 exports through the same code and compares BLEU, speed and file size.
References are the raw test sentences kept by ``prepare_corpus`` (``DATA_BIN/raw``); for
data prepared otherwise, the detokenised target side of the binarized test set.
"""
import json
import os
import sys

import torch

from fairseq_distill.data_bin import blank_sources, check_checkpoints_match_data, model_languages
from fairseq_distill.deploy.checkpoint import count_parameters
from fairseq_distill.errors import DistillError
from fairseq_distill.evaluation.generate import run_generate
from fairseq_distill.evaluation.scoring import corpus_scores
from fairseq_distill.text.segmentation import META_FILE, load_meta, subword_models
from fairseq_distill.text.files import read_lines
from fairseq_distill.workdir import check_earlier_output, check_outputs, files_written_aside

POST_PROCESS = {"sentencepiece": "sentencepiece", "subword_nmt": "subword_nmt"}
USER_POST_PROCESS = ("--post-process", "--remove-bpe")  # fairseq-generate's flag and its older name


def post_process(data_bin: str, meta, extra_args) -> list:
    """fairseq-generate's --post-process: the user's own if given, else the segmentation that
    fairseq_distill.json records, else the one the directory's subword model shows; refused,
    naming --post-process, when none or both kinds are there (a stock fairseq data-bin)."""
    if any(a.split("=")[0] in USER_POST_PROCESS for a in extra_args):
        return []
    if (meta or {}).get("bpe") in POST_PROCESS:
        return ["--post-process", POST_PROCESS[meta["bpe"]]]
    models = subword_models(data_bin)
    if len(models) == 1:
        (kind, files), = models.items()
        print(f"[evaluate] {data_bin} has no {META_FILE}: its {files[0]} says {kind} (--post-process {kind}; pass "
              f"--post-process to choose otherwise)", file=sys.stderr)
        return ["--post-process", kind]
    held = (f"holds both {' and '.join(files[0] for files in models.values())}" if models else
            "holds neither a subword-nmt bpe.codes nor a sentencepiece .model")
    raise DistillError(f"{data_bin} has no {META_FILE} recording how its text was segmented, and {held}: pass "
                       f"--post-process subword_nmt (BPE with @@), --post-process sentencepiece or --post-process "
                       f"none (no subwords), as the data were prepared")


def read_references(data_bin, subset, meta, result):
    if meta and subset in meta.get("raw", {}):
        path = os.path.join(data_bin, meta["raw"][subset][meta["target_lang"]])
        return read_lines(path, what="references", offers_replace=False), path
    n = len(result.references)
    return [result.references[i] for i in range(n)], "target side of the binarized test set"


def binarized_subsets(data_bin: str) -> list:
    """The subsets fairseq can load from ``data_bin``: those with ``SUBSET.SRC-TGT.LANG.bin``."""
    names = set()
    for name in os.listdir(data_bin):
        parts = name.split(".")
        if len(parts) == 4 and parts[3] == "bin" and "-" in parts[1]:
            names.add(parts[0])
    return sorted(names)


def check_subset(data_bin: str, subset: str):
    found = binarized_subsets(data_bin)
    if subset not in found:
        raise DistillError(f"{data_bin} has no binarized '{subset}' set; it has {', '.join(found) or 'none'}: "
                           f"pass --subset one of those")


def evaluate(checkpoint, data_bin, subset="test", beam=4, lenpen=1.0, batch_size=128,
             max_len_a=1.2, max_len_b=10, out_json=None, extra_args=(), tag=None, env=None, description=None):
    """``tag`` names this evaluation's files (``STEM.TAG.SUBSET.*``) when one checkpoint is
    evaluated several ways (e.g. at several depths); ``env``: variables set for fairseq-generate
    (e.g. ``OMP_NUM_THREADS``); ``description``: its progress bar's label."""
    for path in checkpoint.split(":"):
        if not os.path.isfile(path):
            raise DistillError(f"checkpoint not found: '{path}'")
    if not os.path.isdir(data_bin):
        raise DistillError(f"data directory not found: '{data_bin}'")
    check_subset(data_bin, subset)
    first = checkpoint.split(":")[0]
    stem = os.path.splitext(first)[0] + (f".{tag}" if tag else "")
    hyp_path, log_path = f"{stem}.{subset}.hyp.txt", f"{stem}.{subset}.generate.log"
    out_json = out_json or f"{stem}.{subset}.eval.json"
    check_outputs([("--out", out_json), ("hypotheses", hyp_path), ("log", log_path)],
                  [("CHECKPOINT", c) for c in checkpoint.split(":")] + [("DATA_BIN", data_bin)])
    # an earlier record of fsd-evaluate is replaced (with its hypotheses), another file never
    check_earlier_output("--out", out_json, [out_json], "fsd-evaluate", "the record", is_evaluation)
    meta = load_meta(data_bin)
    state = check_checkpoints_match_data(checkpoint, data_bin)[0]
    post = post_process(data_bin, meta, extra_args)
    total = (meta or {}).get("sizes", {}).get(subset)
    args = [
        "--beam", str(beam), "--lenpen", str(lenpen), "--batch-size", str(batch_size),
        "--max-len-a", str(max_len_a), "--max-len-b", str(max_len_b),
        *post, *extra_args,
    ]
    result = run_generate(data_bin, checkpoint, subset, args, total=total,
                          log_path=log_path, description=description or f"decode {subset}",
                          env=env)
    n = max(len(result.references), total or 0)
    missing = [i for i in range(n) if i not in result.detokenized]
    if missing:
        raise DistillError(f"fairseq-generate returned no hypothesis for {len(missing)} of {n} "
                           f"sentences (first ids: {missing[:5]})")
    hyps = [result.detokenized[i] for i in range(n)]
    # a source with nothing visible (only </s>, or invisible characters) is translated as an
    # empty line, as fsd-translate does, not as what the model invents for it
    blank = blank_sources(data_bin, subset, *model_languages(state, data_bin, meta))
    for i in blank:
        hyps[i] = ""
    refs, ref_source = read_references(data_bin, subset, meta, result)
    if len(refs) != len(hyps):
        raise DistillError(f"{len(hyps)} hypotheses but {len(refs)} references ({ref_source})")
    scores = corpus_scores(hyps, refs)
    record = {
        "checkpoint": os.path.abspath(checkpoint),
        "data": os.path.abspath(data_bin),
        "subset": subset,
        "bleu": scores["bleu"],
        "chrf": scores["chrf"],
        "chrf++": scores["chrf++"],
        "bleu_signature": scores["signatures"]["bleu"],
        "chrf_signature": scores["signatures"]["chrf"],
        "chrf++_signature": scores["signatures"]["chrf++"],
        "references": ref_source,
        "sentences": result.sentences,
        "blank_sources": len(blank),
        "generated_tokens": result.tokens,
        "generation_seconds": result.generation_seconds,
        "sentences_per_second": result.sentences_per_second,
        "tokens_per_second": result.tokens_per_second,
        "beam": beam,
        "lenpen": lenpen,
        "max_len_a": max_len_a,
        "max_len_b": max_len_b,
        "batch_size": batch_size,
        "device": "cuda" if torch.cuda.is_available() else "cpu",
        "torch_threads": torch.get_num_threads(),
        "parameters": count_parameters(state["model"]),
        "hypotheses": os.path.abspath(hyp_path),
    }
    # the hypotheses and the record that names them moved into place together, the record last
    with files_written_aside(hyp_path, out_json) as (hyp_tmp, json_tmp):
        with open(hyp_tmp, "w", encoding="utf-8") as f:
            f.write("\n".join(hyps) + "\n")
        with open(json_tmp, "w", encoding="utf-8") as f:
            json.dump(record, f, indent=2)
    record["json"] = out_json
    return record


def is_evaluation(record: dict) -> bool:
    """A record :func:`evaluate` wrote."""
    return all(k in record for k in ("checkpoint", "subset", "bleu", "hypotheses"))


BACKENDS = "fsd-evaluate --ctranslate2"


def is_backend_comparison(record: dict) -> bool:
    """A record :func:`write_backends` wrote (before it said so: rows that name their backend)."""
    rows = record.get("rows")
    return record.get("tool") == BACKENDS or (isinstance(rows, list) and bool(rows)
                                              and all(isinstance(r, dict) and "backend" in r for r in rows))


def check_backends_out(out, checkpoint, data_bin, ct2_dirs):
    """``fsd-evaluate --ctranslate2 --out``: not one of the inputs, and new or an earlier comparison."""
    check_outputs([("--out", out)], [("CHECKPOINT", c) for c in checkpoint.split(":")] + [("DATA_BIN", data_bin)]
                  + [("--ctranslate2", d) for d in ct2_dirs])
    check_earlier_output("--out", out, [out], "fsd-evaluate", "the backend comparison", is_backend_comparison)


def write_backends(out, rows, checkpoint, subset, beam, batch_size):
    """The backends' table as JSON (their outputs left out), written aside and moved in."""
    record = {"tool": BACKENDS, "checkpoint": checkpoint, "subset": subset, "beam": beam, "batch_size": batch_size,
              "rows": [{k: v for k, v in r.items() if k != "outputs"} for r in rows]}
    with files_written_aside(out) as (tmp,):
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(record, f, indent=2)


def evaluate_backends(checkpoint, data_bin, ct2_dirs, subset="test", options=None, batch_size=64, repeats=1):
    """BLEU, tokens/s and model size of the fairseq checkpoint and its CTranslate2 exports.

    With ``repeats`` > 1 the backends take turns for that many rounds, so that a slow spell
    of the machine does not fall on one backend only; each backend's fastest round counts
    (all rounds' tokens/s are kept in ``tokens_per_second_rounds``). Decoding is
    deterministic, so BLEU does not depend on the round."""
    from fairseq_distill.deploy.translators import (CTranslate2Translator, DecodingOptions, FairseqTranslator,
                                             read_deployment, translate_lines)
    from fairseq_distill.text.segmentation import Segmenter

    if repeats < 1:
        raise DistillError(f"repeats must be at least 1, got {repeats}")
    options = options or DecodingOptions()
    meta = load_meta(data_bin)
    if not meta or subset not in meta.get("raw", {}):
        raise DistillError(f"{data_bin} keeps no raw '{subset}' text (prepare it with prepare_corpus)")
    sources = read_lines(os.path.join(data_bin, meta["raw"][subset][meta["source_lang"]]), what="sources", offers_replace=False)
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
        scores = corpus_scores(run.outputs, refs)
        rows.append({"backend": name, "bleu": scores["bleu"], "chrf": scores["chrf"], "chrf++": scores["chrf++"],
                     "signatures": scores["signatures"], "beam": options.beam, "lenpen": options.lenpen,
                     "max_len_a": options.max_len_a, "max_len_b": options.max_len_b,
                     "tokens_per_second": round(run.tokens_per_second, 1),
                     "tokens_per_second_rounds": [round(r.tokens_per_second, 1) for r in runs[name]],
                     "sentences_per_second": round(run.sentences / run.seconds, 2) if run.seconds else 0.0,
                     "seconds": round(run.seconds, 2), "model_file_mib": round(size / 2**20, 2),
                     "outputs": run.outputs})
    return rows


def backends_table(rows) -> str:
    lines = ["| backend | BLEU | chrF | chrF++ | tokens/s | sentences/s | model file |",
             "|---|---|---|---|---|---|---|"]
    lines += [f"| {r['backend']} | {r['bleu']:.2f} | {r['chrf']:.2f} | {r['chrf++']:.2f} | "
              f"{r['tokens_per_second']:.0f} | {r['sentences_per_second']:.1f} | {r['model_file_mib']:.1f} MiB |"
              for r in rows]
    if rows:
        r = rows[0]
        lines.append("")
        lines.append(f"Decoding: beam {r['beam']}, length penalty {r['lenpen']}, max length "
                     f"{r['max_len_a']}·source + {r['max_len_b']}. Signatures: BLEU {r['signatures']['bleu']}; "
                     f"chrF {r['signatures']['chrf']}; chrF++ {r['signatures']['chrf++']}")
    return "\n".join(lines)
