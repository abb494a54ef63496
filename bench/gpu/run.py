"""One benchmark run: the synthetic corpus, random teachers and their caches, the training
rows, the decoding rows and ``scripts/gpu_check.py``, the outputs rewritten after each stage."""
import os
import shlex
import subprocess
import sys
import time
from dataclasses import asdict

from bench.gpu import REPO
from bench.gpu.decoding import measure_decoding
from bench.gpu.plan import plan
from bench.gpu.progress import Progress
from bench.gpu.report import write_outputs
from bench.gpu.synthetic import write_synthetic_corpus
from bench.gpu.training import measure_training, prepare_teachers

GPU_CHECK = os.path.join(REPO, "scripts", "gpu_check.py")


def device_name(cuda: bool) -> str:
    import torch

    if cuda:
        return torch.cuda.get_device_name(0)
    from bench.runner.host import cpu_model

    return f"CPU: {cpu_model()}, {torch.get_num_threads()} threads"


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

    paths, caches = prepare_teachers(result, decoders, [] if decoding_only else teachers, budget, data, work, cuda,
                                     progress)
    checkpoint()
    measure_training(result, teachers, students, precisions, budget, data, paths, caches, cuda, progress,
                     checkpoint)
    measure_decoding(result, decoders, budget, compute_types, sources, data, work, paths, cuda, progress,
                     checkpoint)
    if not decoding_only:
        result["gpu_check"] = run_gpu_check(args, cuda, progress)
    checkpoint()
    return result

