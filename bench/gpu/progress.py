"""The run's progress lines, and measurements guarded so that one failure is recorded in its
row and the run goes on."""
import gc
import time


def free_memory():
    import torch

    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


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
