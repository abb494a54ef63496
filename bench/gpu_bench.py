"""One GPU benchmark at the papers' model sizes, random weights and synthetic data (issue 34).

    python bench/gpu_bench.py [--out bench/results] [--quick]
    python bench/gpu_bench.py --cpu-smoke --out DIR     # the same code on the CPU at tiny sizes

On a CUDA machine it measures, and writes as ``OUT/gpu_bench.json`` and ``OUT/gpu_bench.md``:

* training-step time (median of ``--steps`` steps after ``--warmup``, fairseq's
  ``Trainer.train_step`` on one batch of ``--max-tokens`` from the middle of the length-sorted
  corpus) and peak memory (``torch.cuda.max_memory_allocated`` during the steps) of the
  students (2+2 and 3+3, d = 512) without KD, with online word-level KD (the teacher runs
  every step) and with cached word-level KD (a teacher cache made once, its build time listed
  apart), against two teachers (transformer_iwslt_de_en, 6+6, d = 512, and
  transformer_vaswani_wmt_en_de_big, 6+6, d = 1024), under fairseq's ``--fp16`` and ``--bf16``;
* seq-KD decoding speed of both teachers over the same batches of the synthetic training
  source, beam 4: fairseq's generator (as fairseq-generate runs it, float32 and float16)
  against CTranslate2 (float16 and int8_float16), tokens/s and the ratio to fairseq;
* ``scripts/gpu_check.py`` (the check ``scripts/gpu_check.sh`` runs, started with this
  interpreter; the .sh only adds ``scripts/setup_env.sh``): its exit status and last lines.

The corpus is random token sequences of realistic lengths over a fairseq Dictionary of
``--vocab`` symbols, binarized with fairseq's indexed-dataset builder in a temporary
directory; the models are fairseq's random initialisation, nothing is trained. Random
teachers rarely emit </s>, so their outputs mostly run to the length limit: the decoding rows
measure speed per generated token, not realistic output lengths.

Every measurement is guarded: a failure is recorded in its row and the run goes on; the
failures are listed at the end and the exit status is 1 if there was any. Without CUDA it
says so and exits 0, writing nothing, unless ``--cpu-smoke`` is given: then the same code
runs on the CPU in fp32 at tiny sizes (what the tests do).
"""
import argparse
import gc
import itertools
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from typing import List

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
for _path in (REPO, os.path.join(REPO, "bench")):  # bench/step_cost.py imports `analysis` from bench/
    if _path not in sys.path:
        sys.path.insert(0, _path)

PACKAGE = os.path.join(REPO, "fairseq_distill")
GPU_CHECK = os.path.join(REPO, "scripts", "gpu_check.py")
NO_CUDA = ("gpu_bench: no CUDA device found; nothing was measured "
           "(--cpu-smoke runs the measuring code on the CPU at tiny sizes)")
SOURCE, TARGET = "de", "en"
PRECISION_FLAGS = {"fp16": ["--fp16"], "bf16": ["--bf16"], "fp32": []}
KD_MODES = ("none", "online", "cached")


@dataclass
class ModelSpec:
    """A Transformer shape; ``flags`` gives it explicitly, whatever the architecture's defaults."""
    name: str
    arch: str
    encoder_layers: int
    decoder_layers: int
    dim: int
    ffn: int
    heads: int

    def shape(self) -> str:
        return f"{self.encoder_layers}+{self.decoder_layers}, d={self.dim}, ffn={self.ffn}, {self.heads} heads"

    def flags(self) -> List[str]:
        return ["--arch", self.arch, "--share-all-embeddings",
                "--encoder-layers", str(self.encoder_layers), "--decoder-layers", str(self.decoder_layers),
                "--encoder-embed-dim", str(self.dim), "--decoder-embed-dim", str(self.dim),
                "--encoder-ffn-embed-dim", str(self.ffn), "--decoder-ffn-embed-dim", str(self.ffn),
                "--encoder-attention-heads", str(self.heads), "--decoder-attention-heads", str(self.heads)]


@dataclass
class Budget:
    vocab: int
    train_sentences: int
    mean_length: float
    max_length: int
    max_tokens: int
    warmup: int
    steps: int
    top_k: int
    decode_sentences: int
    decode_batch: int
    beam: int
    repeats: int


def plan(mode: str):
    """(teachers, students, precisions, budget, CTranslate2 compute types) of a mode."""
    if mode == "cpu-decoding":  # decoding speed only, at the papers' shapes, on the CPU
        teachers = [ModelSpec("teacher-iwslt", "transformer_iwslt_de_en", 6, 6, 512, 1024, 4)]
        students = [ModelSpec("student-2+2", "transformer_iwslt_de_en", 2, 2, 512, 1024, 4),
                    ModelSpec("student-3+3", "transformer_iwslt_de_en", 3, 3, 512, 1024, 4)]
        budget = Budget(vocab=10000, train_sentences=600, mean_length=25, max_length=100, max_tokens=4096,
                        warmup=0, steps=0, top_k=8, decode_sentences=256, decode_batch=32, beam=4, repeats=2)
        return teachers, students, [], budget, ["float32", "int8"]
    if mode == "cpu-decoding-smoke":  # the same at tiny sizes, for the tests
        teachers = [ModelSpec("teacher", "transformer", 2, 2, 32, 64, 2)]
        students = [ModelSpec("student-1+1", "transformer", 1, 1, 32, 64, 2)]
        budget = Budget(vocab=64, train_sentences=48, mean_length=8, max_length=20, max_tokens=256, warmup=0,
                        steps=0, top_k=4, decode_sentences=12, decode_batch=6, beam=4, repeats=1)
        return teachers, students, [], budget, ["float32", "int8"]
    if mode == "cpu-smoke":
        teachers = [ModelSpec("teacher-base", "transformer", 1, 1, 32, 64, 2),
                    ModelSpec("teacher-big", "transformer", 1, 1, 48, 96, 4)]
        students = [ModelSpec("student-1+1", "transformer", 1, 1, 32, 64, 2),
                    ModelSpec("student-2+1", "transformer", 2, 1, 32, 64, 2)]
        budget = Budget(vocab=64, train_sentences=48, mean_length=8, max_length=20, max_tokens=256, warmup=1,
                        steps=2, top_k=4, decode_sentences=12, decode_batch=6, beam=4, repeats=1)
        return teachers, students, ["fp32"], budget, ["float32", "int8"]
    teachers = [ModelSpec("teacher-iwslt", "transformer_iwslt_de_en", 6, 6, 512, 1024, 4),
                ModelSpec("teacher-big", "transformer_vaswani_wmt_en_de_big", 6, 6, 1024, 4096, 16)]
    students = [ModelSpec("student-2+2", "transformer_iwslt_de_en", 2, 2, 512, 1024, 4),
                ModelSpec("student-3+3", "transformer_iwslt_de_en", 3, 3, 512, 1024, 4)]
    if mode == "quick":
        budget = Budget(vocab=10000, train_sentences=1000, mean_length=25, max_length=100, max_tokens=4096,
                        warmup=2, steps=5, top_k=8, decode_sentences=128, decode_batch=64, beam=4, repeats=1)
    else:
        budget = Budget(vocab=10000, train_sentences=2000, mean_length=25, max_length=100, max_tokens=4096,
                        warmup=3, steps=10, top_k=8, decode_sentences=512, decode_batch=64, beam=4, repeats=2)
    return teachers, students, ["fp16", "bf16"], budget, ["float16", "int8_float16"]


# -- synthetic data ----------------------------------------------------------------------------

def synthetic_lengths(rng, n: int, mean: float, maximum: int, sigma: float = 0.5):
    """Sentence lengths (tokens, </s> excluded): log-normal around ``mean``, as subword corpora
    (``sigma`` 0: every sentence ``mean`` tokens long)."""
    import numpy as np

    raw = rng.lognormal(np.log(mean) - sigma ** 2 / 2, sigma, size=n)
    return np.clip(np.rint(raw), 3, maximum).astype(int)


def write_synthetic_corpus(out_dir: str, vocab: int, sentences: int, mean_length: float, max_length: int,
                           seed: int = 1, sigma: float = 0.5) -> List[List[str]]:
    """A binarized de->en corpus (subset ``train``) of random tokens over one shared fairseq
    Dictionary of ``vocab`` symbols (specials included), written with fairseq's mmap
    indexed-dataset builder, and the metadata CTranslate2's export reads. Returns the source
    sentences as symbol lists (the decoding input)."""
    import numpy as np
    import torch
    from fairseq.data import Dictionary, indexed_dataset

    from fairseq_distill.text.segmentation import META_FILE

    os.makedirs(out_dir, exist_ok=True)
    rng = np.random.default_rng(seed)
    dictionary = Dictionary()
    for i in range(vocab - dictionary.nspecial):
        dictionary.add_symbol(f"w{i}", n=vocab - i)
    for lang in (SOURCE, TARGET):
        dictionary.save(os.path.join(out_dir, f"dict.{lang}.txt"))
    src_lengths = synthetic_lengths(rng, sentences, mean_length, max_length, sigma)
    ratio = rng.uniform(0.8, 1.25, size=sentences)
    tgt_lengths = np.clip(np.rint(src_lengths * ratio), 2, max_length).astype(int)
    sources = []
    for lang, lengths in ((SOURCE, src_lengths), (TARGET, tgt_lengths)):
        prefix = os.path.join(out_dir, f"train.{SOURCE}-{TARGET}.{lang}")
        builder = indexed_dataset.make_builder(prefix + ".bin", impl="mmap", vocab_size=len(dictionary))
        for length in lengths:
            ids = rng.integers(dictionary.nspecial, len(dictionary), size=int(length))
            builder.add_item(torch.IntTensor([*ids.tolist(), dictionary.eos()]))
            if lang == SOURCE:
                sources.append([dictionary[i] for i in ids.tolist()])
        builder.finalize(prefix + ".idx")
    with open(os.path.join(out_dir, META_FILE), "w", encoding="utf-8") as f:
        json.dump({"source_lang": SOURCE, "target_lang": TARGET, "bpe": None, "synthetic": True}, f)
    return sources


# -- measuring ---------------------------------------------------------------------------------

def device_name(cuda: bool) -> str:
    import torch

    if cuda:
        return torch.cuda.get_device_name(0)
    from bench.runner.host import cpu_model

    return f"CPU: {cpu_model()}, {torch.get_num_threads()} threads"


def free_memory():
    import torch

    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def parameters(model) -> int:
    return sum(p.numel() for p in model.parameters())


def common_flags(data: str, budget: Budget, cuda: bool) -> List[str]:
    return [data, "--user-dir", PACKAGE, "--source-lang", SOURCE, "--target-lang", TARGET,
            "--optimizer", "adam", "--adam-betas", "(0.9, 0.98)", "--lr", "0.0005", "--lr-scheduler",
            "inverse_sqrt", "--warmup-updates", "4000", "--label-smoothing", "0.1",
            "--max-tokens", str(budget.max_tokens), "--seed", "1", "--num-workers", "0",
            *([] if cuda else ["--cpu"])]


def save_random_teacher(spec: ModelSpec, data: str, budget: Budget, cuda: bool, path: str) -> int:
    """A fairseq checkpoint of the teacher at its random initialisation (stock ``translation``
    task, as a teacher trained without the plugin); returns its parameter count."""
    from fairseq_distill.trainer_setup import build_training

    _, _, model, _, trainer = build_training([*common_flags(data, budget, cuda), "--task", "translation",
                                              "--criterion", "label_smoothed_cross_entropy", *spec.flags()])
    os.makedirs(os.path.dirname(path), exist_ok=True)
    trainer.consolidate_optimizer()  # as fairseq's checkpoint_utils.save_checkpoint does first
    trainer.save_checkpoint(path, {"val_loss": None})
    n = parameters(model)
    del model, trainer
    free_memory()
    return n


def middle_batch(task, max_tokens: int, split: str = "train"):
    """The middle batch of ``split`` in corpus-iterator order: fairseq batches sentences of
    similar length, sorted, so the first batch (bench/step_cost.py's) holds the shortest ones;
    the middle one holds sentences of about the median length."""
    task.load_dataset(split)
    itr = task.get_batch_iterator(task.dataset(split), max_tokens=max_tokens, seed=1).next_epoch_itr(shuffle=False)
    return next(itertools.islice(itr, len(itr) // 2, None))


def build_trainer(argv: List[str]):
    """(task, model, trainer) as fairseq-train builds them (``trainer_setup.build_training``; with
    ``--bf16``, the TPU fairseq 0.12 attaches to it is dropped there, ``fairseq_distill/compat.py``)."""
    from fairseq_distill.trainer_setup import build_training

    _, task, model, _, trainer = build_training(argv)
    return task, model, trainer


def time_training(argv: List[str], warmup: int, steps: int, max_tokens: int) -> dict:
    """fairseq's Trainer (:func:`build_trainer`); ``warmup`` then ``steps`` timed
    ``train_step`` calls on one batch. Memory as bench/step_cost.py measures it: on CUDA the
    peak allocated during the steps, on the CPU the peak resident set."""
    import torch

    from bench.step_cost import peak_memory, reset_peak_memory

    task, model, trainer = build_trainer(argv)
    sample = middle_batch(task, max_tokens)
    times = []
    before = reset_peak_memory()
    for i in range(warmup + steps):
        started = time.perf_counter()
        trainer.train_step([sample])
        if torch.cuda.is_available():
            torch.cuda.synchronize()  # the step's kernels (the optimizer's last) have run
        if i >= warmup:
            times.append(time.perf_counter() - started)
    peak = peak_memory()
    result = {"median_step_ms": round(statistics.median(times) * 1000, 2),
              "step_ms": [round(t * 1000, 2) for t in times],
              "target_tokens": int(sample["ntokens"]), "batch_sentences": int(sample["nsentences"]),
              "peak_memory_mib": round(peak / 2**20, 1), "step_memory_mib": round((peak - before) / 2**20, 1),
              "student_parameters": parameters(model)}
    del task, model, trainer, sample
    return result


def make_cache(teacher_path: str, data: str, out: str, budget: Budget, cuda: bool) -> dict:
    from fairseq_distill.teacher.cache_writer import CacheJob, cache_size_bytes, make_teacher_cache

    started = time.perf_counter()
    meta = make_teacher_cache(CacheJob(data=data, out=out, teacher=teacher_path, top_k=budget.top_k,
                                       max_tokens=budget.max_tokens, source_lang=SOURCE, target_lang=TARGET,
                                       cpu=not cuda))
    return {"seconds": round(time.perf_counter() - started, 2), "teacher_seconds": meta.build_seconds,
            "sentences": meta.sentences, "tokens": meta.tokens, "top_k": meta.top_k,
            "size_mib": round(cache_size_bytes(out) / 2**20, 2)}


class _Tokens:
    """The segmenter ``translate_lines`` wants, for text that is already model tokens."""

    @staticmethod
    def encode(line: str) -> List[str]:
        return line.split()

    @staticmethod
    def decode(pieces: List[str]) -> str:
        return " ".join(pieces)


def ctranslate2_translator(model_dir: str, options, compute_type: str, device: str):
    """CTranslate2Translator loading the exported model with ``compute_type`` (float16,
    int8_float16, ...): the export (float32) is converted when loaded."""
    import ctranslate2
    import torch

    from fairseq_distill.deploy.translators import CTranslate2Translator, read_deployment

    translator = CTranslate2Translator.__new__(CTranslate2Translator)
    info = read_deployment(model_dir)
    translator.options = options
    translator.translator = ctranslate2.Translator(model_dir, device=device, compute_type=compute_type,
                                                   intra_threads=torch.get_num_threads())
    translator.max_source_tokens = info["max_source_positions"] - 1
    translator.quantization = compute_type
    return translator


def fairseq_translator(checkpoint: str, data: str, options, precision: str):
    from fairseq_distill.deploy.translators import FairseqTranslator

    translator = FairseqTranslator(checkpoint, data, options)
    if precision == "float16":
        for model in translator.models:
            model.half()  # in place: the generator holds these modules
    return translator


# -- rendering ---------------------------------------------------------------------------------

def _cell(value, fmt="{:.0f}", missing="-"):
    return missing if value is None else fmt.format(value)


def failures(result: dict) -> List[str]:
    """One line per failed measurement (rows with an ``error``, a failing gpu_check)."""
    out = []
    named_by = {"teachers": ("name",), "teacher_caches": ("teacher",),
                "training": ("student", "teacher", "kd", "precision"), "decoding": ("teacher", "backend")}
    for key, fields in named_by.items():
        for row in result.get(key, []):
            if row.get("error"):
                what = " ".join(str(row[k]) for k in fields if row.get(k))
                out.append(f"{key}: {what}: {row['error']}")
    check = result.get("gpu_check")
    if check and (check.get("error") or check.get("returncode") not in (0, None)):
        out.append(f"gpu_check: exit status {check.get('returncode')}"
                   + (f": {check['error']}" if check.get("error") else ""))
    return out


def render_markdown(result: dict) -> str:
    b = result["budget"]
    title = "Decoding speed on the CPU" if result.get("stem") == "decode_speed_cpu" else "GPU benchmark"
    lines = [f"# {title} (`bench/gpu_bench.py`{' --' + result['mode'] if result['mode'] != 'full' else ''})",
             "",
             f"{result['device']}; torch {result['versions'].get('torch')}, fairseq "
             f"{result['versions'].get('fairseq')}, CTranslate2 {result['versions'].get('ctranslate2')}. "
             f"Random weights, synthetic data: {b['train_sentences']} random sentence pairs over "
             f"{b['vocab']} symbols (mean length {b['mean_length']}). Whole run {result['wall_seconds']:.0f} s.",
             "", "## Models", "", "| model | architecture | shape | parameters |", "|---|---|---|---|"]
    for m in result["models"]:
        lines.append(f"| {m['name']} | {m['arch']} | {m['shape']} | "
                     f"{_cell(m.get('parameters'), '{:,}')} |")
    if result.get("stem", "gpu_bench") == "gpu_bench":  # --cpu-decoding measures no training
        peak = "`torch.cuda.max_memory_allocated`" if result["cuda"] else "the peak resident set"
        bf16 = (" bf16 rows: fairseq's `--bf16`, without the `--tpu` fairseq 0.12 attaches to it (dropped by the "
                "plugin where torch_xla is absent, `fairseq_distill/compat.py`)."
                if any(r.get("precision") == "bf16" for r in result["training"]) else "")
        lines += ["", "## Training step", "",
                  f"fairseq `Trainer.train_step` on one batch of at most {b['max_tokens']} tokens (the middle batch of "
                  f"the length-sorted corpus), median of {b['steps']} steps after {b['warmup']} warm-up; peak memory: "
                  f"{peak} during the steps (model, optimizer state and teacher included), step memory: that peak "
                  f"less the memory in use before the steps. Online KD runs the teacher every step; cached KD reads "
                  f"its top-{b['top_k']} outputs from a teacher cache.{bf16}", "",
                  "| student | KD | teacher | precision | median step | × no KD | peak memory | × no KD | "
                  "step memory | batch (sentences / target tokens) | wall |",
                  "|---|---|---|---|---|---|---|---|---|---|---|"]
        for r in result["training"]:
            if r.get("error"):
                lines.append(f"| {r['student']} | {r['kd']} | {r.get('teacher') or '-'} | {r['precision']} | "
                             f"failed: {r['error'][:120]} | | | | | | |")
                continue
            lines.append(f"| {r['student']} | {r['kd']} | {r.get('teacher') or '-'} | {r['precision']} | "
                         f"{r['median_step_ms']:.1f} ms | {_cell(r.get('time_vs_no_kd'), '{:.2f}')} | "
                         f"{r['peak_memory_mib']:,.0f} MiB | {_cell(r.get('memory_vs_no_kd'), '{:.2f}')} | "
                         f"{r['step_memory_mib']:,.0f} MiB | {r['batch_sentences']} / {r['target_tokens']} | "
                         f"{r['wall_seconds']:.1f} s |")
        lines += ["", "Teacher caches (made once per teacher, before the cached rows; not in their step time):", "",
                  "| teacher | top-k | sentences | target tokens | build time | teacher time | size |",
                  "|---|---|---|---|---|---|---|"]
        for c in result["teacher_caches"]:
            if c.get("error"):
                lines.append(f"| {c['teacher']} | failed: {c['error'][:120]} | | | | | |")
                continue
            lines.append(f"| {c['teacher']} | {c['top_k']} | {c['sentences']} | {c['tokens']:,} | {c['seconds']:.1f} s | "
                         f"{c['teacher_seconds']:.1f} s | {c['size_mib']:.1f} MiB |")
    refs = [r["backend"] for r in result["decoding"] if r["backend"].startswith("fairseq")]
    refs = list(dict.fromkeys(refs))
    lines += ["", "## Seq-KD decoding", "",
              f"Each {'model' if result.get('stem') == 'decode_speed_cpu' else 'teacher'} translates the same "
              f"{b['decode_sentences']} synthetic training sources in the same "
              f"length-sorted batches of {b['decode_batch']} sentences, beam {b['beam']}, max length 1.2 · source + "
              f"10; fairseq's generator as fairseq-generate runs it, CTranslate2 from a float32 export loaded with "
              f"the compute type shown; fastest of {b['repeats']} round(s), the backends taking turns.", "",
              f"| {'model' if result.get('stem') == 'decode_speed_cpu' else 'teacher'} | backend | tokens/s | "
              + " | ".join(f"× {ref}" for ref in refs)
              + " | generated tokens | seconds |",
              "|---|---|---|" + "---|" * len(refs) + "---|---|"]
    for r in result["decoding"]:
        if r.get("error") or not r.get("tokens_per_second"):
            lines.append(f"| {r['teacher']} | {r['backend']} | failed: {r.get('error', 'not measured')[:120]} |"
                         + " |" * len(refs) + " | |")
            continue
        ratios = " | ".join(_cell(r.get("ratios", {}).get(ref), "{:.2f}") for ref in refs)
        lines.append(f"| {r['teacher']} | {r['backend']} | {r['tokens_per_second']:,.0f} | {ratios} | "
                     f"{r['generated_tokens']:,} | {r['seconds']:.2f} |")
    check = result.get("gpu_check")
    if check:
        lines += ["", "## scripts/gpu_check", "",
                  f"`{' '.join(check['command'])}`: exit status {check.get('returncode')}"
                  f"{' (' + check['error'] + ')' if check.get('error') else ''}, {check.get('seconds', 0):.0f} s; "
                  "its last lines:", "", "```", *check.get("last_lines", []), "```"]
    failed = failures(result)
    lines += ["", "## Failures", ""] + ([f"- {f}" for f in failed] if failed else ["none"])
    return "\n".join(lines) + "\n"


def add_ratios(result: dict):
    """Each training row's time and peak memory relative to the same student and precision
    without KD; each decoding row's tokens/s relative to each fairseq row of its teacher."""
    for r in result["training"]:
        base = next((x for x in result["training"] if x["kd"] == "none" and x["student"] == r["student"]
                     and x["precision"] == r["precision"] and not x.get("error")), None)
        ok = base is not None and not r.get("error")
        r["time_vs_no_kd"] = round(r["median_step_ms"] / base["median_step_ms"], 3) if ok else None
        r["memory_vs_no_kd"] = (round(r["peak_memory_mib"] / base["peak_memory_mib"], 3)
                                if ok and base["peak_memory_mib"] > 0 else None)
    for r in result["decoding"]:
        if r.get("error") or not r.get("tokens_per_second"):
            continue
        r["ratios"] = {x["backend"]: round(r["tokens_per_second"] / x["tokens_per_second"], 3)
                       for x in result["decoding"] if x["teacher"] == r["teacher"]
                       and x["backend"].startswith("fairseq") and not x.get("error") and x.get("tokens_per_second")}


def write_outputs(result: dict, out_dir: str):
    add_ratios(result)
    os.makedirs(out_dir, exist_ok=True)
    stem = result.get("stem", "gpu_bench")
    from bench.runner.portable import portable

    with open(os.path.join(out_dir, f"{stem}.json"), "w") as f:
        json.dump(portable(result, [REPO]), f, indent=2)
    try:
        text = render_markdown(result)
    except Exception as e:  # the JSON above holds the numbers; say why the table is missing
        text = f"# {stem}\n\nrendering failed ({type(e).__name__}: {e}); see {stem}.json\n"
    with open(os.path.join(out_dir, f"{stem}.md"), "w") as f:
        f.write(text)


# -- the run -----------------------------------------------------------------------------------

class Progress:
    def __init__(self):
        self.started = time.perf_counter()

    def elapsed(self) -> float:
        return time.perf_counter() - self.started

    def __call__(self, message: str):
        print(f"[gpu_bench {self.elapsed():5.0f}s] {message}", flush=True)


def guarded(row: dict, progress: Progress, what: str, fn, *args):
    """Run ``fn``; its dict joins ``row``, or its error does; wall time either way."""
    started = time.perf_counter()
    try:
        row.update(fn(*args))
    except Exception as e:  # a GPU run is precious: record the failure and go on
        row["error"] = f"{type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}"[:500]
    row["wall_seconds"] = round(time.perf_counter() - started, 2)
    free_memory()
    outcome = f"FAILED {row['error']}" if row.get("error") else "done"
    progress(f"{what}: {outcome} ({row['wall_seconds']:.1f}s)")
    return row


def run_gpu_check(args, cuda: bool, progress: Progress) -> dict:
    cmd = [sys.executable, GPU_CHECK, *shlex.split(args.gpu_check_args)]
    shown = ["python", os.path.relpath(GPU_CHECK, REPO), *shlex.split(args.gpu_check_args)]
    progress(f"running {' '.join(shown)} (at most {args.gpu_check_timeout} s)")
    record = {"command": shown}
    started = time.perf_counter()
    try:
        proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=REPO,
                              timeout=args.gpu_check_timeout)
        record["returncode"], output = proc.returncode, proc.stdout
    except subprocess.TimeoutExpired as e:
        out = e.stdout or b""
        record["returncode"], output = None, out.decode(errors="replace") if isinstance(out, bytes) else out
        record["error"] = f"timed out after {args.gpu_check_timeout} s"
    except Exception as e:
        record["returncode"], output, record["error"] = None, "", f"{type(e).__name__}: {e}"
    record["last_lines"] = output.strip().splitlines()[-20:]
    record["seconds"] = round(time.perf_counter() - started, 1)
    progress(f"gpu_check: exit status {record['returncode']}; last line: "
             f"{record['last_lines'][-1] if record['last_lines'] else '(no output)'}")
    return record


def bench(args, mode: str, cuda: bool, work: str) -> dict:
    import logging

    import torch

    import fairseq_distill.trainer_setup  # noqa: F401  (imports fairseq, which sets the root logger to DEBUG)

    # fairseq's and hydra's INFO/DEBUG lines for every model built would bury the progress lines
    logging.getLogger().setLevel(logging.WARNING)

    teachers, students, precisions, budget, compute_types = plan(mode)
    # --cpu-decoding: decoding speed of every model, no training, no GPU check
    decoding_only = mode.startswith("cpu-decoding")
    decoders = teachers + students if decoding_only else teachers
    if args.steps:
        budget.steps = args.steps
    progress = Progress()
    versions = {"torch": torch.__version__, "python": sys.version.split()[0]}
    for name in ("fairseq", "ctranslate2"):
        try:
            versions[name] = __import__(name).__version__
        except Exception as e:
            versions[name] = f"unavailable ({type(e).__name__})"
    result = {"mode": mode, "cuda": cuda, "device": device_name(cuda), "versions": versions,
              "precisions": precisions, "budget": asdict(budget),
              "models": [{**asdict(s), "shape": s.shape(), "role": "teacher" if s in teachers else "student"}
                         for s in teachers + students],
              "teachers": [], "teacher_caches": [], "training": [], "decoding": [], "gpu_check": None,
              "wall_seconds": 0.0, "stem": "decode_speed_cpu" if decoding_only else "gpu_bench"}

    def checkpoint():
        result["wall_seconds"] = round(progress.elapsed(), 1)
        write_outputs(result, args.out)

    progress(f"{result['device']}; mode {mode}; work dir {work}")
    data = os.path.join(work, "data")
    sources = write_synthetic_corpus(data, budget.vocab, budget.train_sentences, budget.mean_length,
                                     budget.max_length)
    progress(f"synthetic corpus: {len(sources)} pairs, vocab {budget.vocab}")

    # teachers (with --cpu-decoding every model) at random initialisation, and a cache of each teacher
    paths = {}
    for spec in decoders:
        path = os.path.join(work, spec.name, "checkpoint.pt")
        row = guarded({"name": spec.name}, progress, f"random {spec.name} ({spec.shape()})",
                      lambda: {"parameters": save_random_teacher(spec, data, budget, cuda, path)})
        result["teachers"].append(row)
        next(m for m in result["models"] if m["name"] == spec.name)["parameters"] = row.get("parameters")
        if not row.get("error"):
            paths[spec.name] = path
    caches = {}
    for spec in ([] if decoding_only else teachers):
        out = os.path.join(work, spec.name, f"cache-top{budget.top_k}")
        row = {"teacher": spec.name}
        if spec.name not in paths:
            row["error"] = f"no {spec.name} checkpoint (see its row)"
        else:
            guarded(row, progress, f"teacher cache of {spec.name}", make_cache, paths[spec.name], data, out,
                    budget, cuda)
        result["teacher_caches"].append(row)
        if not row.get("error"):
            caches[spec.name] = out
    checkpoint()

    # training steps
    shapes = {t.name: t.shape() for t in teachers}
    base = common_flags(data, budget, cuda) + ["--task", "translation_distill"]
    for precision in precisions:  # none with --cpu-decoding
        for spec in students:
            runs = [("none", None)] + [(kd, t.name) for kd in ("online", "cached") for t in teachers]
            for kd, teacher in runs:
                row = {"student": spec.name, "student_shape": spec.shape(), "kd": kd, "teacher": teacher,
                       "teacher_shape": shapes[teacher] if teacher else None, "precision": precision,
                       "device": result["device"], "steps": budget.steps, "warmup": budget.warmup,
                       "max_tokens": budget.max_tokens}
                if kd == "none":
                    extra = ["--criterion", "label_smoothed_cross_entropy"]
                elif kd == "online":
                    extra = ["--criterion", "word_kd", "--teacher-path", paths.get(teacher, "")]
                else:
                    extra = ["--criterion", "word_kd", "--teacher-cache", caches.get(teacher, "")]
                if kd != "none" and not (paths if kd == "online" else caches).get(teacher):
                    row["error"] = f"no {'checkpoint' if kd == 'online' else 'cache'} of {teacher} (see its row)"
                    result["training"].append(row)
                    continue
                argv = [*base, *spec.flags(), *extra, *PRECISION_FLAGS[precision]]
                guarded(row, progress, f"train step {spec.name} {precision} KD {kd}"
                        + (f" from {teacher}" if teacher else ""),
                        time_training, argv, budget.warmup, budget.steps, budget.max_tokens)
                result["training"].append(row)
                if not row.get("error"):
                    next(m for m in result["models"] if m["name"] == spec.name)["parameters"] = \
                        row["student_parameters"]
                    progress(f"  {row['median_step_ms']:.1f} ms/step, peak {row['peak_memory_mib']:,.0f} MiB, "
                             f"{row['batch_sentences']} sentences / {row['target_tokens']} target tokens")
            checkpoint()

    # seq-KD decoding: the teachers over the same batches, each backend in turn
    from fairseq_distill.deploy.ctranslate2_export import export_ctranslate2
    from fairseq_distill.deploy.translators import DecodingOptions, translate_lines

    options = DecodingOptions(beam=budget.beam)
    lines = [" ".join(s) for s in sources[:budget.decode_sentences]]
    device = "cuda" if cuda else "cpu"
    fairseq_precisions = ["float32", "float16"] if cuda else ["float32"]
    for spec in decoders:
        backends = []  # (row, translator)
        for precision in fairseq_precisions:
            row = {"teacher": spec.name, "teacher_shape": spec.shape(), "backend": f"fairseq {precision}",
                   "precision": precision, "device": result["device"]}
            if spec.name not in paths:
                row["error"] = f"no {spec.name} checkpoint (see its row)"
            else:
                holder = {}
                guarded(row, progress, f"load {spec.name} in fairseq {precision}",
                        lambda: holder.update(t=fairseq_translator(paths[spec.name], data, options, precision)) or {})
                if "t" in holder:
                    backends.append((row, holder["t"]))
            result["decoding"].append(row)
        export = os.path.join(work, spec.name, "ctranslate2")
        export_row = {"teacher": spec.name}
        if spec.name in paths:
            guarded(export_row, progress, f"CTranslate2 export of {spec.name}",
                    lambda: {"export_mib": round(export_ctranslate2(paths[spec.name], data, export, "float32",
                                                                    force=True)["model_bytes"] / 2**20, 1)})
        for compute_type in compute_types:
            row = {"teacher": spec.name, "teacher_shape": spec.shape(), "backend": f"ctranslate2 {compute_type}",
                   "precision": compute_type, "device": result["device"]}
            if spec.name not in paths or export_row.get("error"):
                row["error"] = export_row.get("error") or f"no {spec.name} checkpoint (see its row)"
            else:
                holder = {}
                guarded(row, progress, f"load {spec.name} in CTranslate2 {compute_type}",
                        lambda: holder.update(t=ctranslate2_translator(export, options, compute_type, device)) or {})
                if "t" in holder:
                    backends.append((row, holder["t"]))
            result["decoding"].append(row)
        rounds = {id(row): [] for row, _ in backends}
        for row, translator in backends:
            try:
                translator.translate([lines[0].split()])  # warm-up: first-call costs are not speed
            except Exception as e:
                row["error"] = f"{type(e).__name__}: {e}"[:500]
        for round_ in range(budget.repeats):
            for row, translator in backends:
                if row.get("error"):
                    continue
                try:
                    run = translate_lines(lines, translator, _Tokens(), budget.decode_batch, progress=False)
                    rounds[id(row)].append(run)
                    progress(f"decode {spec.name} {row['backend']} round {round_ + 1}: "
                             f"{run.tokens_per_second:,.0f} tokens/s")
                except Exception as e:
                    row["error"] = f"{type(e).__name__}: {e}"[:500]
                    progress(f"decode {spec.name} {row['backend']}: FAILED {row['error']}")
        for row, _ in backends:
            if row.get("error") or not rounds[id(row)]:
                continue
            best = max(rounds[id(row)], key=lambda r: r.tokens_per_second)
            row.update({"tokens_per_second": round(best.tokens_per_second, 1), "sentences": best.sentences,
                        "generated_tokens": best.generated_tokens, "seconds": round(best.seconds, 3),
                        "tokens_per_second_rounds": [round(r.tokens_per_second, 1) for r in rounds[id(row)]],
                        "beam": budget.beam, "batch_size": budget.decode_batch})
        if export_row.get("error"):
            result["decoding"].append({"teacher": spec.name, "backend": "ctranslate2 export",
                                       "error": export_row["error"]})
        del backends
        free_memory()
        checkpoint()

    if not decoding_only:
        result["gpu_check"] = run_gpu_check(args, cuda, progress)
    checkpoint()
    return result


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.strip().split("\n")[0])
    p.add_argument("--out", default=os.path.join(REPO, "bench", "results"),
                   help="where gpu_bench.json and gpu_bench.md go (default bench/results)")
    p.add_argument("--quick", action="store_true", help="fewer steps, sentences and gpu_check cases")
    p.add_argument("--cpu-smoke", action="store_true",
                   help="without CUDA: run the measuring code on the CPU at tiny sizes, fp32 (for the tests)")
    p.add_argument("--cpu-decoding", action="store_true",
                   help="on the CPU, decoding speed only: a 6+6 teacher and 2+2 / 3+3 students at the papers' "
                        "width (d=512), random weights, fairseq against CTranslate2 float32 and int8 on the same "
                        "batches; writes decode_speed_cpu.json/.md (with --cpu-smoke: tiny models, for the tests)")
    p.add_argument("--steps", type=int, help="timed training steps per row (default: the mode's)")
    p.add_argument("--work", help="keep the synthetic data, checkpoints, caches and exports here "
                                  "(default: a temporary directory, removed)")
    p.add_argument("--gpu-check-args", default=None,
                   help="options for scripts/gpu_check.py (default '--updates 10'; with --quick "
                        "'--updates 5 --cases word_kd,word_kd_cached')")
    p.add_argument("--gpu-check-timeout", type=int, default=420, help="seconds before gpu_check is stopped")
    args = p.parse_args(argv)
    if args.cpu_smoke or args.cpu_decoding:  # the CPU even where there is a GPU (before torch looks for one)
        os.environ["CUDA_VISIBLE_DEVICES"] = ""
    if args.gpu_check_args is None:
        args.gpu_check_args = "--updates 5 --cases word_kd,word_kd_cached" if args.quick else "--updates 10"

    import torch

    cuda = torch.cuda.is_available()
    if not cuda and not (args.cpu_smoke or args.cpu_decoding):
        print(NO_CUDA)
        return 0
    if args.cpu_decoding:
        mode = "cpu-decoding-smoke" if args.cpu_smoke else "cpu-decoding"
    else:
        mode = "quick" if args.quick and cuda else ("full" if cuda else "cpu-smoke")
    if mode in ("cpu-smoke", "cpu-decoding-smoke"):
        # tiny models gain nothing from threads, and on a busy machine their spinning slows
        # each step down many times over
        torch.set_num_threads(1)
    if args.work:
        os.makedirs(args.work, exist_ok=True)
        result = bench(args, mode, cuda, os.path.abspath(args.work))
    else:
        with tempfile.TemporaryDirectory(prefix="gpu_bench-") as work:
            result = bench(args, mode, cuda, work)
    failed = failures(result)
    stem = result.get("stem", "gpu_bench")
    print(f"[gpu_bench] wrote {os.path.join(args.out, stem + '.json')} and {stem}.md "
          f"({result['wall_seconds']:.0f} s)")
    if failed:
        print(f"[gpu_bench] {len(failed)} measurement(s) FAILED:")
        for line in failed:
            print(f"  - {line}")
        return 1
    print("[gpu_bench] all measurements succeeded")
    return 0


if __name__ == "__main__":
    sys.exit(main())
