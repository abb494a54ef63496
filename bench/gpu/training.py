"""Training-step rows: random teachers saved as fairseq checkpoints, a teacher cache of each,
and fairseq's ``Trainer.train_step`` timed on one batch without KD, with online and with
cached word-level KD."""
import itertools
import os
import statistics
import time
from typing import List

from bench.gpu import REPO
from bench.gpu.plan import PRECISION_FLAGS, SOURCE, TARGET, Budget, ModelSpec
from bench.gpu.progress import free_memory, guarded

PACKAGE = os.path.join(REPO, "fairseq_distill")


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
    ``train_step`` calls on one batch. Memory as bench/step_cost.py measures it
    (:mod:`bench.runner.memory`): on CUDA the peak allocated during the steps, on the CPU the
    peak resident set."""
    import torch

    from bench.runner.memory import peak_memory, reset_peak_memory

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


def prepare_teachers(result: dict, models, teachers, budget: Budget, data: str, work: str, cuda: bool, progress):
    """Each of ``models`` saved at random initialisation (a row in ``result["teachers"]``) and a
    teacher cache of each of ``teachers`` (a row in ``result["teacher_caches"]``); returns
    ({name: checkpoint}, {name: cache}) of those that succeeded."""
    paths = {}
    for spec in models:
        path = os.path.join(work, spec.name, "checkpoint.pt")
        row = guarded({"name": spec.name}, progress, f"random {spec.name} ({spec.shape()})",
                      lambda: {"parameters": save_random_teacher(spec, data, budget, cuda, path)})
        result["teachers"].append(row)
        next(m for m in result["models"] if m["name"] == spec.name)["parameters"] = row.get("parameters")
        if not row.get("error"):
            paths[spec.name] = path
    caches = {}
    for spec in teachers:
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
    return paths, caches


def measure_training(result: dict, teachers, students, precisions, budget: Budget, data: str, paths: dict,
                     caches: dict, cuda: bool, progress, checkpoint):
    """Every (precision, student, KD form, teacher) row into ``result["training"]``: without KD,
    then online and cached KD from each teacher; ``checkpoint()`` after each student."""
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
