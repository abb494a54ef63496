"""Check mixed-precision and multi-GPU training on a CUDA machine: every distillation
criterion and both model families, a few dozen updates each.

    bash scripts/gpu_check.sh [--updates 30] [--work work/gpu_check] [--cases word_kd,ckd,...] [--jobs 4]

Per case and precision (--fp16, --bf16; and --fp16 on two GPUs when there are two) it
checks that every logged loss is finite, that the teacher's weights did not change, that
the criterion's learned parameters are in the checkpoint, and that the exported student
decodes; it prints one line per case and ``N passed, N failed`` (exit 1 if any failed).
Without CUDA it says so and exits 0. ``--device cpu --precisions fp32`` runs the same
checks on the CPU (what the test suite does, to keep the check itself working).
"""
import argparse
import concurrent.futures
import json
import math
import os
import re
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGE = os.path.join(REPO, "fairseq_distill")
BIN = os.path.dirname(sys.executable)

TEACHER = ["--arch", "transformer", "--share-all-embeddings", "--encoder-layers", "3", "--decoder-layers", "2",
           "--encoder-embed-dim", "32", "--decoder-embed-dim", "32", "--encoder-ffn-embed-dim", "64",
           "--decoder-ffn-embed-dim", "64", "--encoder-attention-heads", "4", "--decoder-attention-heads", "4"]
STUDENT = ["--arch", "transformer", "--share-all-embeddings", "--encoder-layers", "2", "--decoder-layers", "1",
           "--encoder-embed-dim", "16", "--decoder-embed-dim", "16", "--encoder-ffn-embed-dim", "32",
           "--decoder-ffn-embed-dim", "32", "--encoder-attention-heads", "2", "--decoder-attention-heads", "2"]
DEEP = ["--arch", "deep_transformer_tiny", "--share-all-embeddings", "--encoder-layers", "4",
        "--encoder-group-size", "2", "--skip-sublayer-rate", "0.4"]
FLEXIBLE = ["--arch", "flexible_transformer", "--share-all-embeddings", "--encoder-layers", "2",
            "--decoder-layers", "2", "--encoder-embed-dim", "16", "--decoder-embed-dim", "16",
            "--encoder-ffn-embed-dim", "32", "--decoder-ffn-embed-dim", "32",
            "--encoder-attention-heads", "2", "--decoder-attention-heads", "2"]
CASES = {  # name -> (criterion and its options, student model, task)
    "word_kd": (["--criterion", "word_kd"], STUDENT, "translation_distill"),
    # word-level KD from the teacher's cached top-k outputs (fsd-cache-teacher): no teacher runs
    "word_kd_cached": (["--criterion", "word_kd"], STUDENT, "translation_distill"),
    "pkd": (["--criterion", "pkd"], STUDENT, "translation_distill"),
    "ckd": (["--criterion", "ckd", "--kd-side", "both"], STUDENT, "translation_distill"),
    "alp_kd": (["--criterion", "alp_kd"], STUDENT, "translation_distill"),
    "a2d": (["--criterion", "a2d"], STUDENT, "translation_distill"),
    "deep_transformer": (["--criterion", "word_kd"], DEEP, "translation_distill"),
    "flexible_transformer": (["--criterion", "word_kd"], FLEXIBLE, "translation_multidepth"),
}
CACHED = {"word_kd_cached"}
PRECISION_FLAGS = {"fp16": ["--fp16"], "bf16": ["--bf16"], "fp32": []}


def run(cmd, log):
    with open(log, "w") as f:
        proc = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, cwd=REPO)
    if proc.returncode != 0:
        with open(log) as f:
            tail = f.read()[-1500:]
        raise RuntimeError(f"{os.path.basename(cmd[0])} failed (log {log}):\n{tail}")


def teacher_cache(work):
    return os.path.join(work, "teacher-cache")


def prepare(work, device, cases=()):
    """A 400-sentence slice of the vendored Multi30k, a small teacher trained on it and, for
    the cached cases, the teacher's top-16 outputs over it."""
    import gzip

    data, teacher = os.path.join(work, "data", "bin"), os.path.join(work, "teacher", "checkpoint_last.pt")
    if not os.path.isfile(os.path.join(data, "dict.de.txt")):
        raw = os.path.join(work, "raw")
        os.makedirs(raw, exist_ok=True)
        for split, source, n in (("train", "train", 400), ("valid", "val", 40), ("test", "test_2016_flickr", 40)):
            for lang in ("de", "en"):
                with gzip.open(os.path.join(REPO, "data", "multi30k", f"{source}.{lang}.gz"), "rt",
                               encoding="utf-8") as f, open(os.path.join(raw, f"{split}.{lang}"), "w",
                                                            encoding="utf-8") as out:
                    out.writelines(next(f) for _ in range(n))
        run([os.path.join(BIN, "fsd-prepare-corpus"), "-s", "de", "-t", "en", "--vocab-size", "300",
             "--train-prefix", os.path.join(raw, "train"), "--valid-prefix", os.path.join(raw, "valid"),
             "--test-prefix", os.path.join(raw, "test"), "--out", os.path.join(work, "data"), "--workers", "1"],
            os.path.join(work, "prepare.log"))
    if not os.path.isfile(teacher):
        run([sys.executable, "-m", "fairseq_cli.train", data, "--user-dir", PACKAGE, "--task", "translation_distill",
             "--criterion", "label_smoothed_cross_entropy", "--label-smoothing", "0.1", *TEACHER,
             "--optimizer", "adam", "--lr", "0.003", "--max-tokens", "2000", "--max-update", "60", "--seed", "1",
             "--save-dir", os.path.dirname(teacher), "--no-epoch-checkpoints", "--num-workers", "0",
             *(["--cpu"] if device == "cpu" else [])], os.path.join(work, "teacher.log"))
    if CACHED & set(cases) and not os.path.isfile(os.path.join(teacher_cache(work), "meta.json")):
        run([os.path.join(BIN, "fsd-cache-teacher"), "--teacher", teacher, "--data", data, "--top-k", "16",
             "--out", teacher_cache(work), *(["--cpu"] if device == "cpu" else [])], os.path.join(work, "cache.log"))
    return data, teacher


def train_argv(case, precision, data, teacher, save_dir, updates, device):
    criterion, model, task = CASES[case]
    source = (["--teacher-cache", teacher_cache(os.path.dirname(save_dir))] if case in CACHED
              else ["--teacher-path", teacher])
    return [data, "--user-dir", PACKAGE, "--task", task, *source, *criterion, *model,
            "--label-smoothing", "0.1", "--optimizer", "adam", "--lr", "0.002", "--max-tokens", "1500",
            "--max-update", str(updates), "--seed", "1", "--save-dir", save_dir, "--num-workers", "0",
            "--no-epoch-checkpoints", "--log-format", "json", "--log-interval", "1",
            *PRECISION_FLAGS[precision], *(["--cpu"] if device == "cpu" else [])]


def finite_losses(logs):
    values = [float(v) for log in logs for k, v in log.items()
              if k == "loss" or k.endswith("_loss") or k.endswith("_weighted")]
    return bool(values) and all(math.isfinite(v) for v in values), len(values)


def run_case(case, precision, data, teacher, work, updates, device) -> dict:
    """One case in this process: fairseq's own Trainer, as fairseq-train builds it."""
    import torch

    from fairseq_distill.trainer_setup import build_training

    save_dir = os.path.join(work, f"{case}-{precision}")
    cfg, task, model, criterion, trainer = build_training(
        train_argv(case, precision, data, teacher, save_dir, updates, device))
    teachers = task.teacher.models if task.teacher is not None else []
    teacher_before = [{k: v.detach().clone() for k, v in m.state_dict().items()} for m in teachers]
    logs, forward = [], criterion.forward

    def recording_forward(*args, **kwargs):
        loss, sample_size, log = forward(*args, **kwargs)
        if kwargs.get("reduce", True) and criterion.training:
            logs.append({k: (v.item() if torch.is_tensor(v) else v) for k, v in log.items()})
        return loss, sample_size, log

    criterion.forward = recording_forward
    epoch_itr = trainer.get_train_iterator(epoch=1, load_dataset=True)
    task.begin_epoch(1, trainer.get_model())
    while trainer.get_num_updates() < updates:
        for sample in epoch_itr.next_epoch_itr(shuffle=True):
            trainer.train_step([sample])
            if trainer.get_num_updates() >= updates:
                break
        if trainer.get_num_updates() < updates:
            epoch_itr = trainer.get_train_iterator(epoch=epoch_itr.epoch + 1, load_dataset=False)
    criterion.forward = forward

    checks = {}
    finite, n = finite_losses(logs)
    checks["losses finite"] = finite
    if case in CACHED:
        checks["teacher not loaded"] = task.teacher is None
    else:
        checks["teacher unchanged"] = all(
            torch.equal(p.detach().cpu().float(), before[k].to(p.dtype).cpu().float())
            for m, before in zip(teachers, teacher_before) for k, p in m.state_dict().items())
    path = os.path.join(save_dir, "checkpoint_last.pt")
    os.makedirs(save_dir, exist_ok=True)
    trainer.consolidate_optimizer()  # as fairseq's checkpoint_utils.save_checkpoint does first
    trainer.save_checkpoint(path, {"train_iterator": epoch_itr.state_dict(), "val_loss": None})
    saved = torch.load(path, map_location="cpu", weights_only=False).get("criterion") or {}
    # the criterion's tensors (its extra state, the loss forms and the collapse watch, is no tensor)
    wanted = {k for k, v in criterion.state_dict().items() if torch.is_tensor(v)}
    checks["criterion parameters saved"] = wanted <= set(saved) and all(
        torch.isfinite(saved[k].float()).all() for k in wanted if saved[k].is_floating_point())
    checks["export decodes"] = export_decodes(path, data, save_dir, device)
    return {"checks": checks, "logged_values": n, "criterion_tensors": len(wanted)}


def export_decodes(checkpoint, data, save_dir, device) -> bool:
    student = os.path.join(save_dir, "student.pt")
    run([os.path.join(BIN, "fsd-export-student"), checkpoint, student], os.path.join(save_dir, "export.log"))
    log = os.path.join(save_dir, "generate.log")
    run([sys.executable, "-m", "fairseq_cli.generate", data, "--user-dir", PACKAGE, "--path", student,
         "--gen-subset", "valid", "--beam", "2", "--max-len-b", "20", "--batch-size", "16",
         *(["--cpu"] if device == "cpu" else [])], log)
    with open(log) as f:
        return re.search(r"Translated [1-9]\d* sentences", f.read()) is not None


def run_two_gpu_case(case, data, teacher, work, updates) -> dict:
    """fairseq-train itself with two GPUs (data parallel): losses, checkpoint and export."""
    import torch

    save_dir = os.path.join(work, f"{case}-fp16-2gpu")
    log = os.path.join(work, f"{case}-fp16-2gpu.log")
    run([sys.executable, "-m", "fairseq_cli.train",
         *train_argv(case, "fp16", data, teacher, save_dir, updates, "cuda"), "--distributed-world-size", "2"], log)
    logs = []
    with open(log) as f:
        for line in f:
            if '"train_inner"' in line or "| train_inner |" in line or line.lstrip().startswith("{"):
                try:
                    logs.append(json.loads(line[line.index("{"):]))
                except (ValueError, json.JSONDecodeError):
                    continue
    finite, n = finite_losses(logs)
    path = os.path.join(save_dir, "checkpoint_last.pt")
    state = torch.load(path, map_location="cpu", weights_only=False)
    checks = {"losses finite": finite,
              "criterion parameters saved": CASES[case][0][1] == "word_kd" or bool(state.get("criterion")),
              "export decodes": export_decodes(path, data, save_dir, "cuda")}
    return {"checks": checks, "logged_values": n, "note": "teacher check: single-GPU cases"}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.strip().split("\n\n")[0])
    p.add_argument("--work", default=os.path.join(REPO, "work", "gpu_check"))
    p.add_argument("--updates", type=int, default=30)
    p.add_argument("--cases", default=",".join(CASES), help=f"comma list of {', '.join(CASES)}")
    p.add_argument("--precisions", default="fp16,bf16", help="comma list of fp16, bf16, fp32")
    p.add_argument("--device", choices=["cuda", "cpu"], default="cuda",
                   help="cpu: run the checks on the CPU in fp32 (to test this script)")
    p.add_argument("--jobs", type=int, default=1,
                   help="single-GPU cases run side by side (default 1; a GPU with many CPU cores takes several)")
    p.add_argument("--run-case", help=argparse.SUPPRESS)  # internal: CASE:PRECISION in a fresh process
    args = p.parse_args(argv)
    import torch

    if args.device == "cuda" and not torch.cuda.is_available():
        print("gpu_check: no CUDA device on this machine; nothing was checked "
              "(fp16/bf16 training can only be checked on a GPU)")
        return 0
    cases = [c.strip() for c in args.cases.split(",") if c.strip()]
    precisions = [x.strip() for x in args.precisions.split(",") if x.strip()]
    bad = [c for c in cases if c not in CASES] + [x for x in precisions if x not in PRECISION_FLAGS]
    if bad:
        sys.exit(f"gpu_check: error: unknown case or precision {bad[0]!r}; cases: {', '.join(CASES)}; "
                 f"precisions: {', '.join(PRECISION_FLAGS)}")
    if args.jobs < 1:
        sys.exit(f"gpu_check: error: --jobs {args.jobs}: give 1 or more cases to run at once")
    if args.device == "cpu" and set(precisions) - {"fp32"}:
        sys.exit("gpu_check: error: fairseq runs --fp16/--bf16 only on CUDA; use --precisions fp32 with --device cpu")
    os.makedirs(args.work, exist_ok=True)
    data, teacher = prepare(args.work, args.device, cases)

    if args.run_case:  # the child process of one case: print its result as JSON
        case, precision = args.run_case.split(":")
        print("GPU_CHECK " + json.dumps(run_case(case, precision, data, teacher, args.work, args.updates,
                                                 args.device)))
        return 0

    runs = [(c, x, 1) for c in cases for x in precisions]
    two_gpu = [(c, "fp16", 2) for c in cases] if args.device == "cuda" and torch.cuda.device_count() >= 2 else []

    def check(case, precision, gpus):
        """One case: (passed, its report line)."""
        label = f"{case} {precision}" + (" 2 GPUs" if gpus == 2 else "")
        started = time.time()
        try:
            if gpus == 2:
                result = run_two_gpu_case(case, data, teacher, args.work, args.updates)
            else:
                log = os.path.join(args.work, f"{case}-{precision}.log")
                run([sys.executable, os.path.abspath(__file__), "--run-case", f"{case}:{precision}",
                     "--work", args.work, "--updates", str(args.updates), "--device", args.device,
                     "--precisions", precision, "--cases", case], log)
                with open(log) as f:
                    result = json.loads(next(line for line in f if line.startswith("GPU_CHECK "))[10:])
            failing = [name for name, ok in result["checks"].items() if not ok]
            detail = ", ".join(f"{name}: {'yes' if ok else 'NO'}" for name, ok in result["checks"].items())
        except Exception as e:  # one broken case must not stop the others
            failing, detail = ["run"], str(e).strip().splitlines()[0]
        ok = not failing
        return ok, f"{'PASS' if ok else 'FAIL'}  {label:<32} {time.time() - started:5.0f}s  {detail}"

    # the single-GPU cases are tiny: side by side they share one GPU (and its machine's cores)
    # well; the two-GPU runs take every GPU, so they come after, one at a time
    with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
        pending = [pool.submit(check, *r) for r in runs]
        outcomes = []
        for future in pending:  # reported in the order of the cases, each as soon as it and those before are done
            outcomes.append(future.result())
            print(outcomes[-1][1], flush=True)
    for r in two_gpu:
        outcomes.append(check(*r))
        print(outcomes[-1][1], flush=True)
    passed = sum(ok for ok, _ in outcomes)
    failed = len(outcomes) - passed
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
