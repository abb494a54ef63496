"""Peak memory of a stretch of work in this process: on CUDA the peak allocated, on the CPU the
peak resident set (Linux VmHWM, which :func:`reset_peak_memory` resets). What the step-cost
analysis and the GPU benchmark measure around their training steps."""
import torch


def _status_kib(field):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"no {field} in /proc/self/status")


def reset_peak_memory() -> int:
    """Reset the peak counter; returns the current usage in bytes."""
    if torch.cuda.is_available():
        torch.cuda.reset_peak_memory_stats()
        return torch.cuda.memory_allocated()
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # resets VmHWM to the current resident set (Linux)
    return _status_kib("VmRSS") * 1024


def peak_memory() -> int:
    if torch.cuda.is_available():
        return torch.cuda.max_memory_allocated()
    return _status_kib("VmHWM") * 1024
