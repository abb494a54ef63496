"""The seq-KD data directory (``fsd-seqkd --out``): built whole beside ``--out`` and switched in,
so that an interrupted merge never leaves new files beside earlier ones; a merge of the shards,
data and options that made the finished ``--out`` rewrites nothing.

    OUT.partial/     the merge's own directory, locked (.distill-lock) while it runs
      new/           the new data directory, written whole, seqkd_made_from.json last
      old/           the earlier OUT, during the switch only

The switch renames OUT to OUT.partial/old and OUT.partial/new to OUT, then removes old. Killed
between the two renames, OUT is missing (a reader fails, none reads a mix); the next run puts
the new data in place if they are whole, else the earlier data back. ``seqkd_made_from.json``
records what the data were made from: the shards' digest (their settings and hypotheses, not
their timings), ``--data``'s content digest and the merge's options.
"""
import hashlib
import json
import os
import shutil
import sys
from typing import Callable, Optional

from fairseq_distill.data_bin import directory_digest
from fairseq_distill.errors import DistillError
from fairseq_distill.seqkd.inputs import shard_path
from fairseq_distill.workdir import DirectoryLock

SUMMARY_FILE = "seqkd_summary.json"
MADE_FROM_FILE = "seqkd_made_from.json"


def check_out(out: Optional[str]):
    """``--out`` may be new, an empty folder (or one of a recipe's stage markers only) or an earlier
    data directory of fsd-seqkd (which a merge replaces whole); never another folder or a file: the
    switch would delete it."""
    if not out:
        return
    if os.path.exists(out) and not os.path.isdir(out):
        raise DistillError(f"--out {out} is a file; give a new folder for the seq-KD data directory")
    # a recipe's stage markers (recipes/common.sh: OUT/.done.begun while the stage runs) go with it
    if not os.path.isdir(out) or all(name == ".done" or name.startswith(".done.") for name in os.listdir(out)):
        return
    if not any(os.path.isfile(os.path.join(out, name)) for name in (MADE_FROM_FILE, SUMMARY_FILE)):
        raise DistillError(f"--out {out} exists and is not a data directory of fsd-seqkd (it holds no {MADE_FROM_FILE}): "
                           f"the merge replaces --out whole, so it would be lost; give a new --out (or move that "
                           f"folder)")


def staging_root(out: str) -> str:
    return os.path.normpath(out) + ".partial"


def made_from(args) -> Optional[dict]:
    """What the merged data depend on: the shard files (by content), ``--data`` (by content) and
    the options the merge applies; None while a shard is missing (the merge names it)."""
    paths = [shard_path(args.work, shard_id, args.num_shards) for shard_id in range(args.num_shards)]
    if not all(os.path.isfile(path) for path in paths):
        return None
    h = hashlib.sha256()
    for path in paths:
        with open(path, "rb") as f:
            first = f.readline()
            try:  # a header's settings count, its timings do not
                header = json.loads(first)
                if "id" not in header:
                    first = json.dumps(header.get("settings"), sort_keys=True).encode("utf-8")
            except ValueError:
                pass
            h.update(first)
            for block in iter(lambda: f.read(1 << 22), b""):
                h.update(block)
    return {"shards_sha256": h.hexdigest(), "data_sha256": directory_digest(args.data),
            "options": {"subset": args.subset, "select": args.select, "targets": args.targets,
                        "on_missing": args.on_missing, "max_len_ratio": args.max_len_ratio,
                        "num_shards": args.num_shards}}


def read_json(directory: str, name: str) -> Optional[dict]:
    try:
        with open(os.path.join(directory, name), encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def recover(out: str, root: str):
    """Finish or undo a switch cut short, then clear what an interrupted merge left."""
    new, old = os.path.join(root, "new"), os.path.join(root, "old")
    if not os.path.exists(out) and os.path.isdir(old):
        whole = read_json(new, MADE_FROM_FILE) is not None
        os.rename(new if whole else old, out)
        print(f"[seqkd] {out}: a switch cut short is finished ({'the new' if whole else 'the earlier'} data put "
              f"in place)", file=sys.stderr)
    for leftover in (old, new):
        shutil.rmtree(leftover, ignore_errors=True)


def write_json(directory: str, name: str, record: dict):
    tmp = os.path.join(directory, name + ".tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(record, f, indent=2)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, os.path.join(directory, name))


def switch(out: str, root: str):
    new, old = os.path.join(root, "new"), os.path.join(root, "old")
    if os.path.exists(out):
        os.rename(out, old)
    os.rename(new, out)
    shutil.rmtree(old, ignore_errors=True)


def write_output(args, build: Callable[[str], dict], extra: dict) -> dict:
    """Merge into ``args.out`` by ``build(directory)`` (which writes the data there and returns
    the summary, completed with ``extra``), unless ``args.out`` already holds the merge of these
    inputs; returns the summary."""
    out = os.path.normpath(args.out)
    root = staging_root(out)
    try:
        with DirectoryLock(root, "fsd-seqkd"):
            return merge_locked(args, out, root, build, extra)
    finally:
        remove_if_empty(root)


def merge_locked(args, out: str, root: str, build: Callable[[str], dict], extra: dict) -> dict:
    recover(out, root)
    inputs = made_from(args)
    summary = read_json(out, SUMMARY_FILE)
    if summary is not None and inputs is not None and read_json(out, MADE_FROM_FILE) == inputs:
        print(f"[seqkd] {out} is already the merge of these shards, data and options; nothing rewritten")
        return summary
    new = os.path.join(root, "new")
    os.makedirs(new)
    try:
        summary = {**build(new), **extra}
    except Exception:  # a refused merge leaves nothing beside --out (an interrupted one: the next run clears it)
        shutil.rmtree(new, ignore_errors=True)
        raise
    write_json(new, SUMMARY_FILE, summary)
    write_json(new, MADE_FROM_FILE, inputs)  # last: the new directory is whole
    switch(out, root)
    return summary


def remove_if_empty(root: str):
    try:
        os.rmdir(root)  # empty unless a run was cut short or another run has locked it since
    except OSError:
        pass
