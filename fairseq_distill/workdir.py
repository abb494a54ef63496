"""The directories a tool writes: never into its own input, one run at a time, and room first.

``fsd-seqkd`` and ``fsd-cache-teacher`` write a new directory (``--out``) and keep their
unfinished work beside it. Three rules keep a run from destroying or mixing data:

* :func:`check_outputs` (and :func:`check_output_dir`, its form for a data directory): no output
  is an input, lies inside one or contains one (a seq-KD merge would overwrite the original
  ``train.*.bin`` before failing; CTranslate2's converter empties the folder it writes).
* :class:`DirectoryLock`: one run per work directory. A second run with other settings would
  otherwise interleave its files with the first's and report settings its data do not have.
  The lock file holds the owner's pid and host; a lock whose process is gone (killed, or the
  machine restarted) is taken over, with a line saying so.
* :func:`check_free_space`: what a write needs is there before it starts; a full disk
  mid-write ends a memory-mapped write in SIGBUS, with nothing said.

A tool that writes files (a record and what goes with it: a table, a plot) checks with
:func:`check_earlier_output` that what is there may be replaced (its own earlier output; never
another file) and writes them with :func:`files_written_aside`, moved into place once complete.
"""
import contextlib
import errno
import json
import os
import shutil
import socket
import sys
import tempfile
import time
from typing import Callable, Optional, Sequence

from fairseq_distill.errors import DistillError

LOCK_FILE = ".distill-lock"


def _same(a: str, b: str) -> bool:
    """Whether two paths name one file or folder (a symlink, a hard link or another spelling)."""
    if os.path.realpath(a) == os.path.realpath(b):
        return True
    try:
        return os.path.samefile(a, b)
    except OSError:  # one of them does not exist yet
        return False


def _inside(path: str, folder: str) -> bool:
    return os.path.realpath(path).startswith(os.path.realpath(folder).rstrip(os.sep) + os.sep)


def check_outputs(outputs, inputs):
    """Refuse any output that is one of the inputs, lies inside an input folder, or contains an
    input (a folder a tool writes or replaces would take the input with it). ``outputs`` and
    ``inputs`` are ``(name, path)`` pairs, the name as the user gave it (an option such as
    ``--out``, or an argument's name); a path that is None, empty or ``-`` (a standard stream)
    is left out. Called before anything is written."""
    named_inputs = [(n, p) for n, p in inputs if p and p != "-"]
    for out_name, out in outputs:
        if not out or out == "-":
            continue
        for in_name, inp in named_inputs:
            if _same(out, inp):
                raise DistillError(f"{out_name} {out} is the input {in_name} {inp}: writing it would destroy "
                                   f"that input; give {out_name} a new path")
            if _inside(out, inp):
                raise DistillError(f"{out_name} {out} lies inside the input {in_name} {inp}: writing there "
                                   f"could overwrite that input; give {out_name} a path outside it")
            if _inside(inp, out):
                raise DistillError(f"{out_name} {out} contains the input {in_name} {inp}: the output is "
                                   f"written as a whole and would take that input with it; give "
                                   f"{out_name} a new path that holds none of the inputs")


def check_output_dir(out: str, data: str, option: str = "--out", data_option: str = "--data"):
    """Refuse an output directory that is the input data directory or lies inside it."""
    if not out:
        return
    real_out, real_data = os.path.realpath(out), os.path.realpath(data)
    if real_out == real_data:
        raise DistillError(f"{option} {out} is the data directory ({data_option} {data}): writing there would "
                           f"overwrite the original data; give a new directory, e.g. {option} "
                           f"{data.rstrip('/')}-out")
    if real_out.startswith(real_data + os.sep):
        raise DistillError(f"{option} {out} lies inside the data directory ({data_option} {data}); give a "
                           f"directory outside it, e.g. {option} {data.rstrip('/')}-out")
    check_outputs([(option, out)], [(data_option, data)])


def process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def read_owner(path: str) -> dict:
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return {}


def owner_alive(owner: dict) -> bool:
    """A lock's owner still runs (or runs on another host, which cannot be checked from here)."""
    pid = owner.get("pid")
    return isinstance(pid, int) and (owner.get("host") != socket.gethostname() or process_alive(pid))


class DirectoryLock:
    """``with DirectoryLock(directory, "fsd-seqkd"):`` holds ``directory/.distill-lock`` (created
    with O_EXCL, holding pid, host and start time) while the body runs. ``part`` (a shard's
    number) locks that part alone, ``.distill-lock.PART``: shards made side by side (one per GPU or
    machine) do not exclude each other, while a run of the whole directory excludes them all."""

    def __init__(self, directory: str, tool: str, part=None):
        self.directory, self.tool, self.part = directory, tool, part
        self.path = os.path.join(directory, LOCK_FILE if part is None else f"{LOCK_FILE}.{part}")
        self.held = False

    def conflicts(self):
        """The other lock files this one excludes (the whole directory's, or every part's)."""
        if self.part is not None:
            return [os.path.join(self.directory, LOCK_FILE)]
        return [os.path.join(self.directory, f) for f in sorted(os.listdir(self.directory))
                if f.startswith(LOCK_FILE + ".")]

    def refuse(self, path: str, owner: dict):
        where = f"pid {owner.get('pid')}" + (f" on {owner.get('host')}" if owner.get("host") != socket.gethostname()
                                             else "")
        raise DistillError(
            f"{self.directory} is in use by {owner.get('tool', 'another run')} ({where}, since "
            f"{owner.get('started', '?')}): two runs into one directory would mix their files. Wait for it "
            f"to end, or use another directory; if that run is gone, delete {path}")

    def acquire(self):
        os.makedirs(self.directory, exist_ok=True)
        for path in self.conflicts():
            owner = read_owner(path)
            if owner_alive(owner):
                self.refuse(path, owner)
        for _ in range(2):  # a stale lock is removed once, then taken
            try:
                fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            except FileExistsError:
                owner = read_owner(self.path)
                if owner_alive(owner):
                    self.refuse(self.path, owner)
                pid = owner.get("pid")
                print(f"[{self.tool}] {self.directory}: taking over the lock of a run that is gone "
                      f"({'pid ' + str(pid) if pid else 'no owner recorded'})", file=sys.stderr)
                try:
                    os.remove(self.path)
                except FileNotFoundError:
                    pass
                continue
            with os.fdopen(fd, "w") as f:
                json.dump({"pid": os.getpid(), "host": socket.gethostname(), "tool": self.tool,
                           "started": time.strftime("%Y-%m-%d %H:%M:%S")}, f)
            self.held = True
            return self
        raise DistillError(f"could not lock {self.directory} (another run took {self.path} meanwhile); "
                           f"run again")

    def release(self):
        if self.held:
            try:
                os.remove(self.path)
            except FileNotFoundError:
                pass
            self.held = False

    def __enter__(self):
        return self.acquire()

    def __exit__(self, *exc):
        self.release()
        return False


def check_free_space(directory: str, needed: int, what: str):
    """Refuse to start writing ``needed`` bytes under ``directory`` where the disk has less."""
    os.makedirs(directory, exist_ok=True)
    free = shutil.disk_usage(directory).free
    if needed > free:
        raise DistillError(f"{what} needs {needed / 1e6:,.1f} MB in {directory}, and its disk has "
                           f"{free / 1e6:,.1f} MB free: free space there or choose another directory")


def no_space_error(exc: BaseException):
    """A DistillError for an OSError of a full disk (ENOSPC, EDQUOT), naming where; else None."""
    if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
        where = os.path.dirname(exc.filename) if isinstance(exc.filename, str) else "the output directory"
        return DistillError(f"no space left on the disk of {where or '.'} while writing"
                            f"{' ' + exc.filename if isinstance(exc.filename, str) else ''}: free space there "
                            f"(or choose another directory) and run the same command again; nothing "
                            f"unfinished is used")
    return None


@contextlib.contextmanager
def directory_made_aside(final: str):
    """Yields a new directory to write ``final``'s contents in, made beside it (hidden), moved into
    place whole when the block ends, removed if it fails: a reader never sees half of it."""
    parent = os.path.dirname(os.path.abspath(final))
    os.makedirs(parent, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=".making-", dir=parent)
    try:
        yield tmp
        os.rename(tmp, final)
    finally:
        if os.path.isdir(tmp):
            shutil.rmtree(tmp)


def read_json_record(path: str):
    """The JSON object in ``path``, or None where it holds no JSON object (another file)."""
    try:
        with open(path, encoding="utf-8") as f:
            record = json.load(f)
    except (OSError, UnicodeDecodeError, ValueError):
        return None
    return record if isinstance(record, dict) else None


def check_earlier_output(option: str, value: str, files: Sequence[str], tool: str, what: str,
                         is_own: Callable[[dict], bool], differs: Optional[Callable[[dict], Optional[str]]] = None,
                         force: bool = False):
    """May the tool write ``files`` (the output given as ``option value``; the first of them its
    record, the JSON that says what the output is)? Yes where none of them exists. Where the record
    exists and ``is_own`` recognises it as this tool's ``what``: replaced when ``differs`` (given the
    record) returns None, the same inputs (a rerun), else only with ``force``, the refusal saying
    what differs. Anything else is never replaced, even with ``force``: a record this tool did not
    write, or another of ``files`` without the record. Called before anything is written."""
    record_path, others = files[0], files[1:]
    for path in files:
        if os.path.isdir(path):
            raise DistillError(f"{option} {value}: {path} is a folder; give {option} a file's path")
    if not os.path.exists(record_path):
        found = [p for p in others if os.path.exists(p)]
        if found:
            raise DistillError(f"{option} {value}: {found[0]} exists but {record_path} does not, so it is not "
                               f"{what} of {tool} and would be lost: it is not replaced, even with --force; give "
                               f"another {option} (or move that file)")
        return
    record = read_json_record(record_path)
    if record is None or not is_own(record):
        raise DistillError(f"{option} {value}: {record_path} exists and is not {what} of {tool}: it would be lost, "
                           f"so it is not replaced, even with --force; give another {option} (or move that file)")
    why = differs(record) if differs else None
    if why and not force:
        raise DistillError(f"{option} {value}: {record_path} is {what} of {why}: pass --force to replace it, "
                           f"or give another {option}")


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


@contextlib.contextmanager
def files_written_aside(*finals: str):
    """Yields one path per file of ``finals``, beside it (hidden, with its extension: a writer that
    picks the format by the name, as matplotlib does, keeps it), for the block to write. When the
    block ends they are moved into place in the order given (put the output's record last); if it
    fails they are removed: a run that fails leaves the earlier files as they were."""
    temps = []
    try:
        for final in finals:
            folder, name = os.path.split(os.path.abspath(final))
            os.makedirs(folder, exist_ok=True)
            root, ext = os.path.splitext(name)
            fd, tmp = tempfile.mkstemp(prefix=f".{root}.partial-", suffix=ext, dir=folder)
            os.close(fd)
            os.chmod(tmp, 0o666 & ~_umask())  # as an ordinary new file, not mkstemp's 0600
            temps.append(tmp)
        yield temps
        for tmp, final in zip(temps, finals):
            os.replace(tmp, final)
    finally:
        for tmp in temps:
            if os.path.exists(tmp):
                os.remove(tmp)
