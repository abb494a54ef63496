"""The machine a measurement was made on: CPU model, cores, GPU.

Speeds, and the bits of floating-point results, depend on the machine, so every record of
either names it.
"""
import os
import platform
from typing import Optional


def cpu_model() -> str:
    """The CPU's model name (with "(avx512)" where it has AVX-512, which CPU kernels use)."""
    try:
        with open("/proc/cpuinfo") as f:
            info = f.read()
    except OSError:
        return platform.processor() or platform.machine()
    fields = dict(line.split(":", 1) for line in info.splitlines() if ":" in line)
    name = " ".join(fields.get("model name\t", platform.machine()).split())
    return name + (" (avx512)" if " avx512f" in fields.get("flags\t\t", "") else "")


def usable_cores() -> int:
    """The cores this process may run on (``taskset`` and container limits narrow them)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def gpu_name() -> Optional[str]:
    """The first CUDA device's name; None without one."""
    import torch

    return torch.cuda.get_device_name(0) if torch.cuda.is_available() else None


def describe() -> dict:
    """``{"cpu", "cores", "usable_cores", "gpu"}`` of this machine."""
    return {"cpu": cpu_model(), "cores": os.cpu_count() or 1, "usable_cores": usable_cores(),
            "gpu": gpu_name()}
