"""Translate raw text with a student: fairseq or CTranslate2 behind one interface.

A translator maps batches of subword sequences to subword sequences;
:func:`translate_lines` does the rest for both backends alike: segmentation, empty lines,
over-long inputs, length-sorted batching, output in input order, progress and speed.
"""
import argparse
import json
import os
import re
import sys
import time
from dataclasses import dataclass, field
from typing import Callable, Iterable, List, Optional

import torch

from fairseq_distill.errors import DistillError
from fairseq_distill.text.files import is_blank
from fairseq_distill.text.segmentation import Segmenter

BACKENDS = ("fairseq", "ctranslate2")
DEPLOY_FILE = "fairseq_distill_deploy.json"


@dataclass
class DecodingOptions:
    beam: int = 4
    lenpen: float = 1.0
    # output length limit a·(source length incl. </s>) + b, fairseq-generate's rule
    max_len_a: float = 1.2
    max_len_b: int = 10


class FairseqTranslator:
    """A fairseq checkpoint (or ``:``-separated ensemble) with the dictionaries of ``data_bin``."""

    name = "fairseq"

    def __init__(self, checkpoint: str, data_bin: str, options: DecodingOptions, device: Optional[str] = None):
        from fairseq import checkpoint_utils, utils

        import fairseq_distill  # noqa: F401  (registers our architectures, checkpoint loading)

        from fairseq_distill.data_bin import check_checkpoints_match_data

        check_checkpoints_match_data(checkpoint, data_bin)
        models, _cfg, task = checkpoint_utils.load_model_ensemble_and_task(
            checkpoint.split(":"), arg_overrides={"data": data_bin})
        device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
        self.models = [m.to(device).eval() for m in models]
        self.task, self.device = task, device
        self.generator = task.build_generator(self.models, argparse.Namespace(
            beam=options.beam, lenpen=options.lenpen, max_len_a=options.max_len_a,
            max_len_b=options.max_len_b))
        max_source = utils.resolve_max_positions(task.max_positions(), *[m.max_positions() for m in models])[0]
        self.max_source_tokens = max_source - 1  # room for </s>

    def translate(self, batch: List[List[str]]) -> List[List[str]]:
        return [nbest[0] for nbest in self.translate_nbest(batch, 1)]

    def translate_nbest(self, batch: List[List[str]], nbest: int) -> List[List[List[str]]]:
        """The ``nbest`` best hypotheses of each input, best first (at most the beam size)."""
        from fairseq import utils

        src_dict, tgt_dict = self.task.source_dictionary, self.task.target_dictionary
        tokens = [src_dict.encode_line(" ".join(p), add_if_not_exist=False, append_eos=True).long()
                  for p in batch]
        dataset = self.task.build_dataset_for_inference(tokens, [t.numel() for t in tokens])
        sample = dataset.collater([dataset[i] for i in range(len(tokens))])
        if self.device.type == "cuda":
            sample = utils.move_to_cuda(sample)
        with torch.no_grad():
            hypos = self.task.inference_step(self.generator, self.models, sample)
        out: List[Optional[List[List[str]]]] = [None] * len(batch)
        for i, sentence_id in enumerate(sample["id"].tolist()):
            out[sentence_id] = [tgt_dict.string(h["tokens"].int().cpu()).split() for h in hypos[i][:nbest]]
        return out


# CTranslate2's GPU build loads cuBLAS (and cuDNN) when the first batch arrives, by the file name of
# the CUDA version it was built for: on a machine with another CUDA's libraries only (e.g. CUDA 13
# for a build against CUDA 12) every batch fails, and the batch is not the cause
MISSING_LIBRARY = re.compile(r"Library (lib(\w+)\.so\.(\d+)) is not found or cannot be loaded")


def missing_library_error(cause: Exception, ways_out: str) -> Optional[DistillError]:
    """The user error for a CUDA library CTranslate2 could not load (``cause``), naming the fixes,
    of which ``ways_out`` is the caller's own (e.g. another backend); None for any other error."""
    found = MISSING_LIBRARY.search(str(cause))
    if not found:
        return None
    library, name, major = found.groups()
    import ctranslate2

    if name.startswith("cublas"):
        needs = f"CUDA {major}'s cuBLAS, which this machine lacks (it may have another CUDA version's)"
        install = (f"pip install nvidia-cublas-cu{major}, then put that package's folder nvidia/cublas/lib "
                   f"(in site-packages) on LD_LIBRARY_PATH")
    else:
        needs = "it, which this machine lacks"
        install = f"install the library that provides {library} and put its folder on LD_LIBRARY_PATH"
    return DistillError(
        f"CTranslate2 {ctranslate2.__version__} could not load {library}: its GPU build needs {needs}. "
        f"Install it ({install}), decode on the CPU (CUDA_VISIBLE_DEVICES= hides the GPU from CTranslate2), "
        f"or {ways_out}")


class CTranslate2Translator:
    """A model directory written by :mod:`fairseq_distill.deploy.ctranslate2_export`."""

    name = "ctranslate2"

    def __init__(self, model_dir: str, options: DecodingOptions, device: Optional[str] = None,
                 threads: Optional[int] = None, compute_type: str = "default"):
        """``threads``: CTranslate2's intra-op threads (default: torch's thread count);
        ``compute_type``: as stored (default) or e.g. float16 on a GPU."""
        try:
            import ctranslate2
        except ImportError as e:
            raise DistillError("the ctranslate2 backend needs the package: pip install ctranslate2") from e
        info = read_deployment(model_dir)
        self.options = options
        device = device or ("cuda" if torch.cuda.is_available() else "cpu")
        self.translator = ctranslate2.Translator(model_dir, device=device, compute_type=compute_type,
                                                 intra_threads=threads or torch.get_num_threads())
        self.max_source_tokens = info["max_source_positions"] - 1
        self.quantization = info["quantization"]

    def translate(self, batch: List[List[str]]) -> List[List[str]]:
        o = self.options
        limits = [int(o.max_len_a * (len(p) + 1) + o.max_len_b) for p in batch]
        # CTranslate2 takes one limit per call: decode to the batch's largest, then cut each
        # output to its own sentence's limit, so that an output does not depend on its batch
        # (exactly so for greedy search)
        try:
            results = self.translator.translate_batch(batch, beam_size=o.beam, length_penalty=o.lenpen,
                                                      max_decoding_length=max(limits))
        except RuntimeError as e:
            raise (missing_library_error(e, "translate with --backend fairseq") or e) from e
        return [r.hypotheses[0][:limit] for r, limit in zip(results, limits)]


def read_deployment(model_dir: str) -> dict:
    path = os.path.join(model_dir, DEPLOY_FILE)
    if not os.path.isfile(path):
        raise DistillError(f"{model_dir} is not a CTranslate2 model exported by export_ctranslate2 "
                           f"(no {DEPLOY_FILE}); export it with fsd-export-ctranslate2")
    with open(path, encoding="utf-8") as f:
        return json.load(f)


@dataclass
class TranslationRun:
    outputs: List[str]
    sentences: int = 0          # non-empty inputs translated
    generated_tokens: int = 0   # output subword tokens, one </s> per sentence included (as fairseq counts)
    seconds: float = 0.0        # translation only (no loading)
    truncated: List[int] = field(default_factory=list)  # 1-based numbers of truncated lines
    lines: int = 0              # input lines, empty ones included (translate_stream)

    @property
    def tokens_per_second(self) -> float:
        return self.generated_tokens / self.seconds if self.seconds > 0 else 0.0


def translate_lines(lines: List[str], translator, segmenter: Segmenter, batch_size: int = 64,
                    progress: bool = True) -> TranslationRun:
    """Translate raw lines; empty lines stay empty, order is kept, inputs longer than the
    model accepts are cut to its limit with a warning on standard error."""
    if batch_size < 1:
        raise DistillError(f"batch size must be at least 1, got {batch_size}")
    run = TranslationRun(outputs=[""] * len(lines))
    pieces = {}
    for i, line in enumerate(lines):
        if is_blank(line):  # nothing visible (e.g. only U+200B or U+FEFF): nothing to translate
            continue
        p = segmenter.encode(line)
        if not p:  # the subword model kept nothing of it
            continue
        if len(p) > translator.max_source_tokens:
            print(f"[translate] warning: line {i + 1} has {len(p)} subword tokens; the model takes at "
                  f"most {translator.max_source_tokens}, so it is truncated to that", file=sys.stderr)
            p = p[: translator.max_source_tokens]
            run.truncated.append(i + 1)
        pieces[i] = p
    order = sorted(pieces, key=lambda i: len(pieces[i]))
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=len(order), desc=f"translate ({translator.name})", unit="sent", file=sys.stderr)
    started = time.perf_counter()
    for start in range(0, len(order), batch_size):
        ids = order[start:start + batch_size]
        outputs = translator.translate([pieces[i] for i in ids])
        for i, out in zip(ids, outputs):
            run.outputs[i] = segmenter.decode(out)
            run.generated_tokens += len(out) + 1
        if bar is not None:
            bar.update(len(ids))
    run.seconds = time.perf_counter() - started
    run.sentences = len(order)
    if bar is not None:
        bar.close()
    return run


# input lines translated together by translate_stream: sorted by length within a window for
# batching; the window bounds the memory of a translation of millions of lines
WINDOW = 20000


def translate_stream(lines: Iterable[str], translator, segmenter: Segmenter, write: Callable[[str], None],
                     batch_size: int = 64, total: Optional[int] = None, progress: bool = True,
                     window: int = WINDOW) -> TranslationRun:
    """:func:`translate_lines` over a stream of any length, ``window`` lines at a time, each output
    line handed to ``write`` (with its ``\\n``) in input order as soon as its window is done. The
    returned run counts everything but keeps no outputs; its truncated lines are numbered in
    the whole stream. Progress (with ``total`` lines, when known, for an ETA) on standard error."""
    from fairseq_distill.progress import Progress
    from fairseq_distill.streaming import chunks

    run = TranslationRun(outputs=[])
    meter = Progress("translate", translator.name, total=total, unit="lines",
                     report=lambda line: print(line, file=sys.stderr, flush=True)) if progress else None
    done = 0
    for window_lines in chunks(lines, window):
        part = translate_lines(window_lines, translator, segmenter, batch_size, progress=False)
        write(join_output_lines(part.outputs))
        run.sentences += part.sentences
        run.generated_tokens += part.generated_tokens
        run.seconds += part.seconds
        run.truncated.extend(done + line for line in part.truncated)
        done += len(window_lines)
        if meter is not None:
            meter.update(len(window_lines))
    run.lines = done
    return run


def join_output_lines(outputs: List[str]) -> str:
    """The output text: each output followed by "\\n". A line break inside an output would
    shift every later line; a model trained on prepared data has no piece that makes one,
    but a space in its place keeps the one-line-per-input promise regardless."""
    return "".join(out.replace("\r", " ").replace("\n", " ") + "\n" for out in outputs)


DEVICES = ("auto", "cpu", "cuda")


def build_translator(backend: str, options: DecodingOptions, checkpoint: Optional[str] = None,
                     data_bin: Optional[str] = None, model_dir: Optional[str] = None,
                     device: str = "auto", threads: Optional[int] = None):
    """The translator and the segmenter that goes with it. ``device``: auto (CUDA where there is
    one), cpu or cuda; ``threads``: CPU threads (default: torch's count, every usable core)."""
    if device not in DEVICES:
        raise DistillError(f"unknown device '{device}'; choose one of {', '.join(DEVICES)}")
    if device == "cuda" and not torch.cuda.is_available():
        raise DistillError("--device cuda: no CUDA device is visible here; use --device cpu")
    if threads is not None and threads < 1:
        raise DistillError(f"--threads must be at least 1, got {threads}")
    chosen = None if device == "auto" else device
    if backend == "fairseq":
        if not (checkpoint and data_bin):
            raise DistillError("the fairseq backend needs --checkpoint and --data-bin")
        if threads:
            torch.set_num_threads(threads)
        return FairseqTranslator(checkpoint, data_bin, options, chosen), Segmenter.from_dir(data_bin)
    if backend == "ctranslate2":
        if not model_dir:
            raise DistillError("the ctranslate2 backend needs --model-dir (from export_ctranslate2)")
        return CTranslate2Translator(model_dir, options, chosen, threads), Segmenter.from_dir(model_dir)
    raise DistillError(f"unknown backend '{backend}'; choose one of {', '.join(BACKENDS)}")
