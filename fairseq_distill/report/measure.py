"""One timed pass of one model over a test set, with one backend and thread count.

The backends are the project's own: CTranslate2 through
:class:`~fairseq_distill.deploy.translators.CTranslate2Translator` and
:func:`~fairseq_distill.deploy.translators.translate_lines` (in this process, the raw text
segmented before the clock starts, batches of ``batch_size`` sentences sorted by length),
fairseq through stock ``fairseq-generate`` (:func:`~fairseq_distill.evaluation.evaluate.evaluate`,
in a subprocess: its own decoding time, model loading excluded). Latency at batch size 1 is
timed per sentence in this process for every backend, fairseq's through
:class:`~fairseq_distill.deploy.translators.FairseqTranslator` (the same model and search as
fairseq-generate), since fairseq-generate reports no per-sentence times.

Each pass returns ``{"seconds", "sentences", "outputs" or "hypotheses", "latencies"}``;
:mod:`.timings` makes rates and percentiles of them.
"""
import logging
import os
from contextlib import contextmanager
from dataclasses import dataclass
from typing import List, Optional, Sequence

import torch

from fairseq_distill.deploy.translators import (CTranslate2Translator, DecodingOptions, FairseqTranslator,
                                                translate_lines)
from fairseq_distill.report.timings import generation_seconds
from fairseq_distill.text.segmentation import Segmenter


@dataclass
class Decoding:
    """How every model decodes, and in what batches."""
    options: DecodingOptions
    batch_size: int = 64


@contextmanager
def torch_threads(threads: int):
    """torch's intra-op threads set to ``threads`` for the body, then restored."""
    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(previous)


def thread_env(threads: int) -> dict:
    """The variables that give a new process's torch ``threads`` threads."""
    return {"OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}


def first_sentence(sources: Sequence[str]) -> str:
    return next(line for line in sources if line.strip())


def latencies(translator, segmenter: Segmenter, sources: Sequence[str], sample: Sequence[int]) -> List[float]:
    """Seconds to translate each sampled sentence alone (batch size 1)."""
    return [translate_lines([sources[i]], translator, segmenter, 1, progress=False).seconds for i in sample]


def time_ctranslate2(model_dir: str, sources: Sequence[str], decoding: Decoding, threads: int,
                     sample: Sequence[int], device: str = "cpu", compute_type: str = "default") -> dict:
    """A CTranslate2 export over the whole source in batches, then the sample one by one."""
    translator = CTranslate2Translator(model_dir, decoding.options, device=device, threads=threads,
                                       compute_type=compute_type)
    segmenter = Segmenter.from_dir(model_dir)
    # the first batch pays for memory pools and kernel selection: not decoding speed
    translator.translate([segmenter.encode(first_sentence(sources))])
    run = translate_lines(list(sources), translator, segmenter, decoding.batch_size, progress=False)
    return {"seconds": run.seconds, "sentences": run.sentences, "outputs": run.outputs,
            "latencies": latencies(translator, segmenter, sources, sample)}


def time_fairseq_generate(checkpoint: str, data_bin: str, subset: str, decoding: Decoding, threads: int,
                          tag: str, description: str, gpu_fp16: bool = False) -> dict:
    """Stock fairseq-generate over the binarized subset, on the CPU with ``threads`` threads, or
    on the GPU in fp16; scored as :func:`~fairseq_distill.evaluation.evaluate.evaluate` scores."""
    from fairseq_distill.evaluation.evaluate import evaluate

    o = decoding.options
    record = evaluate(checkpoint, data_bin, subset, beam=o.beam, lenpen=o.lenpen, batch_size=decoding.batch_size,
                      max_len_a=o.max_len_a, max_len_b=o.max_len_b,
                      out_json=os.path.splitext(checkpoint)[0] + f".{tag}.{subset}.eval.json",
                      extra_args=["--fp16"] if gpu_fp16 else ["--cpu"], tag=tag,
                      env=None if gpu_fp16 else thread_env(threads), description=description)
    seconds = generation_seconds(record["sentences"], record["generation_seconds"], record["sentences_per_second"])
    return {"seconds": seconds, "sentences": record["sentences"], "hypotheses": record["hypotheses"],
            "bleu": record["bleu"], "chrf": record["chrf"], "chrf++": record["chrf++"],
            "signatures": {k: record[f"{k}_signature"] for k in ("bleu", "chrf", "chrf++")}}


@contextmanager
def quiet_fairseq():
    """fairseq's information lines (its dictionaries' sizes, each time a model or task is loaded)
    not shown: the report loads each model once per round."""
    logger = logging.getLogger("fairseq")
    level = logger.level
    logger.setLevel(logging.WARNING)
    try:
        yield
    finally:
        logger.setLevel(level)


def load_fairseq(checkpoint: str, data_bin: str, decoding: Decoding, device: str = "cpu") -> FairseqTranslator:
    """The model in this process."""
    with quiet_fairseq():
        return FairseqTranslator(checkpoint, data_bin, decoding.options, device=device)


def time_fairseq_latency(translator: FairseqTranslator, segmenter: Segmenter, sources: Sequence[str],
                         threads: int, sample: Sequence[int]) -> dict:
    """fairseq's latency per sentence at batch size 1, in this process with ``threads`` threads."""
    with torch_threads(threads):
        translator.translate([segmenter.encode(first_sentence(sources))])
        return {"latencies": latencies(translator, segmenter, sources, sample)}


def parameters(translator: FairseqTranslator) -> int:
    """The model's parameters, each once (tied embeddings are one tensor)."""
    return sum(p.numel() for p in translator.models[0].parameters())


def cuda_device() -> Optional[str]:
    return "cuda" if torch.cuda.is_available() else None
