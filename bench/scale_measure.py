"""Measuring one command for the scale benchmark: wall time, the peak resident memory of its whole
process tree, and the bytes it wrote.

The memory is sampled from /proc every ``interval`` seconds: the sum of VmRSS over the command's
process and all its descendants (worker pools included). Pages shared between a parent and its
forked workers are counted once per process, so the figure is an upper bound, never an
underestimate. Pages of files read through memory maps count too (the kernel can drop them under
pressure); the peak of anonymous memory alone (``RssAnon``: what the process holds itself) is
recorded beside it. Linux only.
"""
import os
import signal
import subprocess
import threading
import time
from typing import Dict, List, Optional


def _children() -> Dict[int, List[int]]:
    tree: Dict[int, List[int]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        # the command may hold spaces and parentheses: the fields follow the last ')'
        ppid = int(stat[stat.rindex(b")") + 2:].split()[1])
        tree.setdefault(ppid, []).append(int(name))
    return tree


def _rss_kib(pid: int):
    """(VmRSS, RssAnon) of a process in KiB: all its resident pages, and those not backed by a file."""
    rss = anon = 0
    try:
        with open(f"/proc/{pid}/status", "rb") as f:
            for line in f:
                if line.startswith(b"VmRSS:"):
                    rss = int(line.split()[1])
                elif line.startswith(b"RssAnon:"):
                    anon = int(line.split()[1])
    except OSError:
        pass
    return rss, anon


def tree_rss_bytes(root: int, anonymous: bool = False) -> int:
    """The summed resident memory of ``root`` and its descendants now; ``anonymous``: only the
    pages not backed by a file (what the tools hold themselves, without the files they map)."""
    tree = _children()
    total, todo = 0, [root]
    while todo:
        pid = todo.pop()
        total += _rss_kib(pid)[1 if anonymous else 0]
        todo.extend(tree.get(pid, ()))
    return total * 1024


def directory_bytes(path: str) -> int:
    if os.path.isfile(path):
        return os.path.getsize(path)
    total = 0
    for root, _, names in os.walk(path):
        for name in names:
            full = os.path.join(root, name)
            if not os.path.islink(full):
                total += os.path.getsize(full)
    return total


def measure(cmd: List[str], log_path: str, outputs: List[str] = (), env: Optional[dict] = None,
            interval: float = 0.25, timeout: Optional[float] = None) -> dict:
    """Run ``cmd`` (its output to ``log_path``) and return ``{"seconds", "peak_rss_bytes",
    "peak_anonymous_bytes", "bytes_written", "exit_code"}``; ``bytes_written`` is what ``outputs`` (files or directories)
    hold afterwards, less what they held before. ``timeout``: seconds after which the command and
    every process it started are killed at once (SIGKILL, as a machine that stops would)."""
    before = sum(directory_bytes(p) for p in outputs if os.path.exists(p))
    peak = [0, 0]
    with open(log_path, "w", encoding="utf-8") as log:
        started = time.perf_counter()
        # its own process group, so that a timeout stops the workers and subprocesses it started too
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        done = threading.Event()

        def sample():
            while not done.is_set():
                peak[0] = max(peak[0], tree_rss_bytes(proc.pid))
                peak[1] = max(peak[1], tree_rss_bytes(proc.pid, anonymous=True))
                done.wait(interval)

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        try:
            code = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            code = proc.wait()
        seconds = time.perf_counter() - started
        done.set()
        sampler.join()
    after = sum(directory_bytes(p) for p in outputs if os.path.exists(p))
    return {"seconds": round(seconds, 2), "peak_rss_bytes": peak[0], "peak_anonymous_bytes": peak[1],
            "bytes_written": after - before, "exit_code": code}
