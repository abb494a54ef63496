"""One GPU benchmark at the papers' model sizes, random weights and synthetic data.

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
runs on the CPU in fp32 at tiny sizes (what the tests do). The code is the package
``bench/gpu/``; this is its command line.
"""
import argparse
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench.gpu import REPO  # noqa: E402
from bench.gpu.report import failures  # noqa: E402
from bench.gpu.run import bench  # noqa: E402

NO_CUDA = ("gpu_bench: no CUDA device found; nothing was measured "
           "(--cpu-smoke runs the measuring code on the CPU at tiny sizes)")


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
