"""The timed rounds of a deployment report: every model, backend and thread count once per
round, the models taking turns, so that the machine's drift falls on all of them alike;
then each one's fastest round.

On the CPU each model runs as CTranslate2 int8 and float32 (when it converts) and as
fairseq (fairseq-generate for speed, the same model in this process for latency); on a
CUDA machine also CTranslate2 float16 and fairseq-generate in fp16, speed only.
"""
import time
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Sequence

from fairseq_distill.errors import DistillError
from fairseq_distill.evaluation.scoring import corpus_scores
from fairseq_distill.report import measure
from fairseq_distill.report.timings import fastest_round, latency_summary, rates
from fairseq_distill.text.segmentation import Segmenter

CPU_BACKENDS = ("ctranslate2-int8", "ctranslate2-float32", "fairseq")
GPU_BACKENDS = ("ctranslate2-float16", "fairseq-fp16")


@dataclass
class Timed:
    """Every round of one model, backend and thread count (``threads`` 0: the GPU)."""
    rounds: List[dict] = field(default_factory=list)  # {"seconds", "sentences", "latencies"}
    outputs: Optional[List[str]] = None  # the first round's translations (CTranslate2)
    hypotheses: Optional[str] = None     # the first round's hypotheses file (fairseq-generate)
    scores: Optional[dict] = None        # the first round's corpus scores
    same_outputs: bool = True            # every later round translated alike
    skipped: Optional[str] = None        # why this backend was not timed


def cpu_backends(prepared) -> List[str]:
    """The CPU backends a prepared model is timed with: CTranslate2 only where it converts."""
    return [b for b in CPU_BACKENDS if b == "fairseq" or prepared.ctranslate2]


def gpu_backends(prepared) -> List[str]:
    return [b for b in GPU_BACKENDS if b == "fairseq-fp16" or prepared.ctranslate2]


def eta(started: float, done: int, total: int) -> str:
    if done == 0 or done >= total:
        return ""
    left = (time.time() - started) / done * (total - done)
    return f"; about {left / 60:.0f} min to go" if left >= 90 else f"; about {left:.0f} s to go"


def run_rounds(models: Sequence, test, decoding: measure.Decoding, threads: Sequence[int], rounds: int,
               sample: Sequence[int], gpu: bool, log: Callable[[str], None], timer=None) -> Dict[tuple, Timed]:
    """``{(model name, backend, threads): Timed}``; threads 0 for the GPU backends. ``timer``
    times one pass, as :func:`time_one` (the default) does."""
    time_one_pass = timer or time_one
    timed: Dict[tuple, Timed] = {}
    started = time.time()
    for r in range(rounds):
        for t in threads:
            for m in models:
                for backend in cpu_backends(m):
                    key = (m.name, backend, t)
                    entry = timed.setdefault(key, Timed())
                    result = time_one_pass(m, backend, t, test, decoding, sample, r)
                    record_round(entry, result, test)
                    log(f"round {r + 1}/{rounds}, {t} thread{'s' if t > 1 else ''}: {m.name} {backend}: "
                        f"{summary_line(result, test)}")
        if gpu:
            for m in models:
                for backend in gpu_backends(m):
                    entry = timed.setdefault((m.name, backend, 0), Timed())
                    if entry.skipped:
                        continue
                    try:
                        result = time_one_pass(m, backend, 0, test, decoding, [], r)
                    except DistillError as e:  # e.g. CTranslate2's GPU build without its CUDA libraries
                        entry.skipped = str(e)
                        log(f"round {r + 1}/{rounds}, GPU: {m.name} {backend} skipped: {e}")
                        continue
                    record_round(entry, result, test)
                    log(f"round {r + 1}/{rounds}, GPU: {m.name} {backend}: {summary_line(result, test)}")
        log(f"round {r + 1}/{rounds} done{eta(started, r + 1, rounds)}")
    return timed


def time_one(m, backend: str, threads: int, test, decoding, sample, round_index: int) -> dict:
    """One pass of model ``m`` (a prepared model) with ``backend`` on ``threads`` threads (0: the GPU)."""
    if backend.startswith("ctranslate2-"):
        quantization = backend.split("-", 1)[1]
        if backend == "ctranslate2-float16":  # the float32 export, computed in float16 on the GPU
            return measure.time_ctranslate2(m.ctranslate2["float32"], test.sources, decoding, 1, [],
                                            device="cuda", compute_type="float16")
        return measure.time_ctranslate2(m.ctranslate2[quantization], test.sources, decoding, threads, sample)
    gpu = backend == "fairseq-fp16"
    tag = f"r{round_index + 1}." + ("gpu" if gpu else f"t{threads}")
    where = "GPU fp16" if gpu else f"{threads} thread{'s' if threads > 1 else ''}"
    result = measure.time_fairseq_generate(m.decoding, test.data_bin, test.subset, decoding, threads, tag,
                                           f"{m.name} fairseq-generate, {where}", gpu_fp16=gpu)
    if not gpu:
        translator = measure.load_fairseq(m.decoding, test.data_bin, decoding)
        result.update(measure.time_fairseq_latency(translator, Segmenter.from_dir(test.data_bin), test.sources,
                                                   threads, sample))
    return result


def summary_line(result: dict, test) -> str:
    speed = rates(test.source_words, result["sentences"], result["seconds"])
    line = f"{speed['words_per_second']:.0f} words/s, {speed['sentences_per_second']:.1f} sentences/s"
    if result.get("latencies"):
        lat = latency_summary(result["latencies"])
        line += f"; latency p50 {lat['p50_ms']:.1f} ms, p95 {lat['p95_ms']:.1f} ms"
    return line


def record_round(entry: Timed, result: dict, test):
    entry.rounds.append({"seconds": result["seconds"], "sentences": result["sentences"],
                         "latencies": result.get("latencies") or []})
    if "outputs" in result:
        if entry.outputs is None:
            entry.outputs = result["outputs"]
            entry.scores = corpus_scores(result["outputs"], test.references)
        elif result["outputs"] != entry.outputs:
            entry.same_outputs = False
    elif "hypotheses" in result:
        if entry.hypotheses is None:
            entry.hypotheses = result["hypotheses"]
            entry.scores = {**{k: result[k] for k in ("bleu", "chrf", "chrf++")}, "signatures": result["signatures"]}
        elif read_text(result["hypotheses"]) != read_text(entry.hypotheses):
            entry.same_outputs = False


def read_text(path: str) -> str:
    with open(path, encoding="utf-8") as f:
        return f.read()


def summarize(entry: Timed, words: int) -> dict:
    """The fastest round's rates, every round's words/s, and the latency of the round whose
    sampled sentences took the least time in all."""
    if entry.skipped:
        return {"skipped": entry.skipped}
    best = fastest_round(entry.rounds)
    out = {**rates(words, best["sentences"], best["seconds"]), "seconds": round(best["seconds"], 6),
           "sentences": best["sentences"],
           "words_per_second_rounds": [rates(words, r["sentences"], r["seconds"])["words_per_second"]
                                       for r in entry.rounds],
           "same_outputs_every_round": entry.same_outputs}
    with_latency = [{"seconds": sum(r["latencies"]), "latencies": r["latencies"]}
                    for r in entry.rounds if r["latencies"]]
    if with_latency:
        fastest = fastest_round(with_latency)
        out["latency_ms"] = latency_summary(fastest["latencies"])
        out["latency_ms_rounds"] = [latency_summary(r["latencies"]) for r in with_latency]
    return out
