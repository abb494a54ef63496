"""A teacher and its students at deployment, in one report: quality, size, speed and latency.

:func:`make_report` is the library part of ``fsd-report``. For each model, the teacher first:

1. inputs checked before anything runs (:mod:`.report_inputs`): checkpoints, the test set's
   binarized and raw text, the data's dictionaries shared by every model;
2. the model as deployed: its decoding checkpoint (:mod:`fairseq_distill.deploy.checkpoint`) and
   CTranslate2 float32 and int8 exports (:mod:`fairseq_distill.deploy.ctranslate2_export`),
   their sizes on disk, its parameters;
3. its quality: fairseq-generate's translation of the test set, BLEU, chrF and chrF++
   (sacreBLEU), and sacreBLEU's paired test against the teacher (the teacher against itself
   too, the test's own baseline);
4. the timed rounds (:mod:`.report_rounds`), each model's fastest round kept: words/s and
   sentences/s on the CPU with each thread count, latency per sentence at batch size 1;
   CTranslate2 int8's BLEU beside float32's; on a CUDA machine, GPU speed too;
5. the report (:mod:`.report_output`): JSON, Markdown and a Pareto plot.

Exports, hypotheses and logs go to a work directory; the JSON names them relative to the
report's own directory.
"""
import json
import os
import time
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence

from fairseq_distill.deploy.checkpoint import export_decoding_checkpoint
from fairseq_distill.deploy.ctranslate2_export import export_ctranslate2, unsupported_reason
from fairseq_distill.deploy.translators import DecodingOptions, join_output_lines
from fairseq_distill.errors import DistillError
from fairseq_distill.evaluation.scoring import TESTS, paired_significance
from fairseq_distill.machine import describe, usable_cores
from fairseq_distill.report import measure
from fairseq_distill.report.report_inputs import (ModelSpec, check_dictionaries, check_threads,
                                                  parse_models, read_checkpoint, read_test_set)
from fairseq_distill.report.report_output import size, write_report
from fairseq_distill.report.report_rounds import cpu_backends, gpu_backends, run_rounds, summarize
from fairseq_distill.report.timings import latency_sample
from fairseq_distill.text.files import file_sha256, read_lines
from fairseq_distill.workdir import check_outputs


@dataclass
class ReportOptions:
    subset: str = "test"
    rounds: int = 3
    threads: Optional[List[int]] = None  # default: 1 and every usable core
    beam: int = 4
    lenpen: float = 1.0
    max_len_a: float = 1.2
    max_len_b: int = 10
    batch_size: int = 64
    latency_sentences: int = 100
    test: str = "bootstrap"
    samples: int = 0
    gpu: bool = True  # time the GPU backends where CUDA is available


@dataclass
class PreparedModel:
    spec: ModelSpec
    folder: str
    decoding: str  # the decoding checkpoint
    arch: str
    parameters: int
    dictionary_check: str
    sha256: str
    sizes: Dict[str, int] = field(default_factory=dict)  # bytes on disk
    ctranslate2: Dict[str, str] = field(default_factory=dict)  # quantization -> export directory
    ctranslate2_unsupported: Optional[str] = None

    @property
    def name(self) -> str:
        return self.spec.name


def log(message: str):
    print(f"[report] {message}", flush=True)


def check_options(options: ReportOptions):
    for name, least in (("rounds", 1), ("batch_size", 1), ("latency_sentences", 1), ("beam", 1)):
        value = getattr(options, name)
        if value < least:
            raise DistillError(f"--{name.replace('_', '-')} must be at least {least}, got {value}")
    if options.test not in TESTS:
        raise DistillError(f"unknown significance test '{options.test}'; valid: {', '.join(TESTS)}")
    if options.samples < 0:
        raise DistillError(f"--samples must be >= 0, got {options.samples}")


def check_out(out: str):
    if not os.path.basename(out) or os.path.isdir(out):
        raise DistillError(f"--out '{out}' is a folder; give the report's path without extension, e.g. "
                           f"{os.path.join(out, 'report_NAME')} for report_NAME.json, .md and .png there")


def prepare_model(spec: ModelSpec, dictionary_check: str, test, work: str, decoding) -> PreparedModel:
    """The decoding checkpoint and CTranslate2 exports of one model, in ``work/NAME``."""
    folder = os.path.join(work, spec.name)
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, "decoding.pt")
    summary = export_decoding_checkpoint(spec.path, path)
    try:
        translator = measure.load_fairseq(path, test.data_bin, decoding)
    except DistillError:
        raise
    except Exception as e:  # fairseq's own failure to build or load the model: name the model
        raise DistillError(f"{spec.role} '{spec.name}' ({spec.path}): fairseq cannot load it with the data "
                           f"{test.data_bin}: {type(e).__name__}: {e}") from e
    model = PreparedModel(spec, folder, path, summary["arch"], measure.parameters(translator), dictionary_check,
                          file_sha256(spec.path), {"checkpoint": os.path.getsize(path)})
    del translator
    model.ctranslate2_unsupported = unsupported_reason(model.arch)
    if model.ctranslate2_unsupported is None:
        try:
            for q in ("float32", "int8"):
                with measure.quiet_fairseq():  # CTranslate2's converter sets up fairseq's task
                    info = export_ctranslate2(path, test.data_bin, os.path.join(folder, f"ctranslate2-{q}"), q,
                                              force=True)
                model.ctranslate2[q] = info["out_dir"]
                model.sizes[f"ctranslate2-{q}"] = info["model_bytes"]
        except DistillError as e:  # the converter's own refusal: the report goes on without CTranslate2
            model.ctranslate2, model.ctranslate2_unsupported = {}, str(e)
            model.sizes = {"checkpoint": model.sizes["checkpoint"]}
    sizes = ", ".join(f"{k} {size(v)}" for k, v in model.sizes.items())
    log(f"{spec.role} '{spec.name}': {model.arch}, {model.parameters:,} parameters; {sizes}"
        + (f"; no CTranslate2: {model.ctranslate2_unsupported}" if model.ctranslate2_unsupported else ""))
    return model


def software() -> dict:
    import ctranslate2
    import fairseq
    import sacrebleu
    import torch

    return {"torch": torch.__version__, "fairseq": fairseq.__version__, "ctranslate2": ctranslate2.__version__,
            "sacrebleu": sacrebleu.__version__}


def check_earlier_report(out: str, models: Sequence[ModelSpec], force: bool):
    """``OUT.json``, ``.md`` and ``.png`` may be new, or (with ``force``, or of the same models)
    an earlier report of fsd-report; never another file."""
    json_path = out + ".json"
    if not os.path.exists(json_path):
        found = [out + ext for ext in (".md", ".png") if os.path.exists(out + ext)]
        if found:
            raise DistillError(f"--out {out}: {found[0]} exists but {json_path} does not, so it is not a report "
                               f"of fsd-report and would be lost: give another --out (or move that file)")
        return
    try:
        with open(json_path, encoding="utf-8") as f:
            earlier = json.load(f)
    except (OSError, ValueError):
        earlier = None
    if not isinstance(earlier, dict) or earlier.get("report") != "fsd-report":
        raise DistillError(f"--out {out}: {json_path} exists and is not a report of fsd-report; it would be lost, "
                           f"so it is not replaced, even with --force: give another --out")
    then = [(m.get("name"), m.get("sha256")) for m in earlier.get("models", [])]
    now = [(m.name, file_sha256(m.path)) for m in models]
    if then != now and not force:
        def names(pairs):
            return ", ".join(name for name, _ in pairs)

        changed = [name for (name, digest), (_, new) in zip(then, now) if digest != new]
        why = (f"the same names, other checkpoints ({', '.join(changed)})" if [n for n, _ in then] == [n for n, _ in now]
               else f"it measured {names(then)}; this run measures {names(now)}")
        raise DistillError(f"--out {out}: {json_path} is a report of other models ({why}): pass --force to "
                           f"replace it, or give another --out")


def make_report(teacher: str, students: Sequence[str], data_bin: str, out: str, work: Optional[str] = None,
                options: Optional[ReportOptions] = None, force: bool = False) -> dict:
    """Measure the teacher (``PATH`` or ``NAME=PATH``) and ``students``; write ``OUT.json``,
    ``OUT.md`` and ``OUT.png``; exports and hypotheses in ``work`` (default ``OUT.work``).
    Returns the JSON's record."""
    options = options or ReportOptions()
    check_options(options)
    check_out(out)
    try:
        import ctranslate2  # noqa: F401
    except ImportError as e:
        raise DistillError("the report exports every model to CTranslate2: pip install ctranslate2 "
                           "(or the package's [deploy] extra)") from e
    models = parse_models(teacher, students)
    test = read_test_set(data_bin, options.subset)
    checks = {m.name: check_dictionaries(m, read_checkpoint(m), test) for m in models}
    work = work or out + ".work"
    check_outputs([("--out", out + ext) for ext in (".json", ".md", ".png")] + [("--work", work)],
                  [(f"{m.role} '{m.name}'", m.path) for m in models] + [("--data", data_bin)])
    threads = check_threads(options.threads or [1, usable_cores()])
    check_earlier_report(out, models, force)
    out_dir = os.path.dirname(os.path.abspath(out))
    os.makedirs(out_dir, exist_ok=True)
    started = time.time()
    decoding = measure.Decoding(DecodingOptions(options.beam, options.lenpen, options.max_len_a, options.max_len_b),
                                options.batch_size)
    gpu = measure.cuda_device() is not None and options.gpu
    sample = [test.translated[i] for i in latency_sample(len(test.translated), options.latency_sentences)]
    log(f"{len(models)} models on {test.data_bin} '{test.subset}' ({len(test.translated)} sentences, "
        f"{test.source_words} source words); {options.rounds} rounds, threads {', '.join(map(str, threads))}"
        f"{', and the GPU' if gpu else ''}; latency over {len(sample)} sentences")

    prepared = [prepare_model(m, checks[m.name], test, work, decoding) for m in models]
    quality = {}
    for m in prepared:
        quality[m.name] = measure.time_fairseq_generate(m.decoding, test.data_bin, test.subset, decoding,
                                                        max(threads), "quality", f"{m.name}: quality")
        q = quality[m.name]
        log(f"quality of '{m.name}' (fairseq-generate): BLEU {q['bleu']:.2f}, chrF {q['chrf']:.2f}")
    timed = run_rounds(prepared, test, decoding, threads, options.rounds, sample, gpu, log)
    comparison = paired_test(prepared, quality, test, options)

    record = {
        "report": "fsd-report",
        "machine": describe(),
        "software": software(),
        "data": {"data_bin": relative(test.data_bin, out_dir), "subset": test.subset,
                 "sentences": len(test.sources), "translated": len(test.translated),
                 "source_words": test.source_words},
        "decoding": {"beam": options.beam, "lenpen": options.lenpen, "max_len_a": options.max_len_a,
                     "max_len_b": options.max_len_b, "batch_size": options.batch_size},
        "timing": {"rounds": options.rounds, "threads": threads, "latency_sentences": len(sample)},
        "gpu": {"measured": gpu, "device": describe()["gpu"] if gpu else None,
                "note": None if gpu else ("no CUDA device on this machine" if measure.cuda_device() is None
                                          else "not asked for (--no-gpu)")},
        "teacher": prepared[0].name,
        "models": [model_record(m, quality[m.name], timed, threads, gpu, test, comparison, out_dir)
                   for m in prepared],
        "paired_test": {k: comparison[k] for k in ("test", "samples", "seed", "baseline", "signatures")},
        "files": {"markdown": os.path.basename(out) + ".md", "plot": os.path.basename(out) + ".png",
                  "work": relative(work, out_dir)},
        "seconds": round(time.time() - started, 1),
    }
    write_report(record, out, comparison)
    log(f"wrote {out}.json, {out}.md and {out}.png in {record['seconds'] / 60:.1f} min")
    return record


def relative(path: str, start: str) -> str:
    return os.path.relpath(os.path.abspath(path), start)


def paired_test(prepared: Sequence[PreparedModel], quality: dict, test, options: ReportOptions) -> dict:
    """Every model's fairseq-generate translation against the teacher's (the teacher's own too)."""
    hyps = {m.name: read_lines(quality[m.name]["hypotheses"], what=f"hypotheses of {m.name}", offers_replace=False)
            for m in prepared}
    teacher = prepared[0].name
    systems = [(self_name(teacher), hyps[teacher])] + [(m.name, hyps[m.name]) for m in prepared[1:]]
    log(f"paired {options.test} test of {len(systems)} systems against '{teacher}'")
    return paired_significance((teacher, hyps[teacher]), systems, test.references, options.test, options.samples)


def self_name(teacher: str) -> str:
    return f"{teacher} (itself)"


def model_record(m: PreparedModel, quality: dict, timed: dict, threads: Sequence[int], gpu: bool, test,
                 comparison: dict, out_dir: str) -> dict:
    cpu = {str(t): {b: summarize(timed[(m.name, b, t)], test.source_words) for b in cpu_backends(m)}
           for t in threads}
    scores = {"fairseq": {**{k: quality[k] for k in ("bleu", "chrf", "chrf++")},
                          "hypotheses": relative(quality["hypotheses"], out_dir)}}
    first = threads[0]
    for q in m.ctranslate2:
        entry = timed[(m.name, f"ctranslate2-{q}", first)]
        scores[f"ctranslate2-{q}"] = {**{k: entry.scores[k] for k in ("bleu", "chrf", "chrf++")},
                                      "hypotheses": relative(write_outputs(m, f"ctranslate2-{q}", entry.outputs, test),
                                                             out_dir)}
    gpu_rows = None
    if gpu:
        gpu_rows = {}
        for b in gpu_backends(m):
            entry = timed[(m.name, b, 0)]
            gpu_rows[b] = summarize(entry, test.source_words)
            if entry.scores:
                gpu_rows[b].update({k: entry.scores[k] for k in ("bleu", "chrf", "chrf++")})
    name = self_name(m.name) if m.spec.role == "teacher" else m.name
    return {
        "name": m.name, "role": m.spec.role, "checkpoint": relative(m.spec.path, out_dir), "sha256": m.sha256,
        "arch": m.arch, "parameters": m.parameters, "dictionary_check": m.dictionary_check,
        "size_bytes": m.sizes, "ctranslate2_unsupported": m.ctranslate2_unsupported,
        "quality": scores,
        "int8_bleu_delta": (round(scores["ctranslate2-int8"]["bleu"] - scores["ctranslate2-float32"]["bleu"], 2)
                            if m.ctranslate2 else None),
        "paired_test": comparison["systems"][name],
        "cpu": cpu,
        "gpu": gpu_rows,
    }


def write_outputs(m: PreparedModel, backend: str, outputs: List[str], test) -> str:
    path = os.path.join(m.folder, f"{backend}.{test.subset}.hyp.txt")
    with open(path, "w", encoding="utf-8") as f:
        f.write(join_output_lines(outputs))
    return path
