"""Reading one-sentence-per-line text the way ``wc -l`` counts it.

A line ends at ``\\n`` (a ``\\r\\n`` ending counts as one line end) and nowhere else: a bare
``\\r``, U+2028, U+0085, form feeds and the like inside a line are content.
``str.splitlines()`` and Python's universal-newline mode both break lines at some of those
too, which silently misaligns a parallel corpus or a translation with its input.
A last line without a trailing newline still counts as a line.

Text is UTF-8. Invalid bytes are an error naming the file and line, unless the caller asks
for ``errors="replace"``, which puts U+FFFD in their place.
"""
import gzip
import hashlib
import os
import sys
import unicodedata
import zlib
from typing import Iterator, List

from fairseq_distill.errors import DistillError

ERRORS = ("strict", "replace")
STDIN = "-"


def describe(path: str) -> str:
    return "standard input" if path == STDIN else path


def gzip_error(path: str, e: Exception) -> DistillError:
    """The error for a ``.gz`` file that is not gzip, is cut short, or is corrupt."""
    if isinstance(e, EOFError):
        return DistillError(f"{path} is a truncated gzip file: it ends before its compressed "
                            f"stream does (an interrupted download or copy?); `gzip -t {path}` "
                            f"confirms it; fetch or compress it again")
    if isinstance(e, zlib.error):
        return DistillError(f"{path} is a corrupt gzip file ({e}); `gzip -t {path}` confirms it; "
                            f"fetch or compress it again")
    return DistillError(f"{path} is not a valid gzip file ({e}); give it uncompressed "
                        f"without the .gz ending, or compress it again with gzip")


def read_bytes(path: str, what: str = "") -> bytes:
    """The file's bytes (decompressed for ``.gz``); ``-`` is standard input. ``what`` names
    the file's role in the message when it cannot be read (e.g. "input ")."""
    if path == STDIN:
        return sys.stdin.buffer.read()
    try:
        if path.endswith(".gz"):
            with gzip.open(path, "rb") as f:
                return f.read()
        with open(path, "rb") as f:
            return f.read()
    except OSError as e:
        if isinstance(e, gzip.BadGzipFile):
            raise gzip_error(path, e) from e
        role = f"{what.strip()} " if what.strip() else ""
        raise DistillError(f"cannot read {role}'{path}': {e.strerror or e}") from e
    except (EOFError, zlib.error) as e:
        raise gzip_error(path, e) from e


def split_lines(data: bytes, path: str = STDIN, errors: str = "strict", warn=None,
                offers_replace: bool = True) -> List[str]:
    """Decode UTF-8 ``data`` and split it into lines at ``\\n`` only (see the module docstring).

    With ``errors="replace"``, ``warn`` (if given) is called once with a message naming the
    first line that had invalid bytes. ``offers_replace``: whether the calling command has
    ``--errors replace`` to suggest (otherwise the message says how to clean the file)."""
    if errors not in ERRORS:
        raise DistillError(f"unknown --errors '{errors}'; choose one of {', '.join(ERRORS)}")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        # b"\n" never occurs inside a multi-byte UTF-8 sequence, so counting it up to the
        # bad byte gives the line the bad byte is on
        line = data.count(b"\n", 0, e.start) + 1
        column = e.start - (data.rfind(b"\n", 0, e.start) + 1) + 1
        bad = data[e.start:e.end].hex(" ")
        if errors == "strict":
            other = ("pass --errors replace to read invalid bytes as U+FFFD" if offers_replace else
                     "drop the invalid bytes (iconv -c -f UTF-8 -t UTF-8 FILE > FIXED)")
            raise DistillError(
                f"{describe(path)}: line {line} is not valid UTF-8 (byte {column} of the line: "
                f"{bad}); convert the file to UTF-8 (e.g. iconv -f LATIN1 -t UTF-8), or {other}") from e
        text = data.decode("utf-8", "replace")
        if warn is not None:
            warn(f"{describe(path)}: invalid UTF-8 replaced by U+FFFD (first at line {line})")
    if not text:
        return []
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()  # the newline that ends the last line does not start another
    return [line[:-1] if line.endswith("\r") else line for line in lines]


# what normalisation and segmentation remove: whitespace and separators, control and format
# characters (zero-width space and joiners, the byte-order mark, the soft hyphen)
INVISIBLE_CATEGORIES = ("Zs", "Zl", "Zp", "Cc", "Cf")


def is_blank(line: str) -> bool:
    """Whether nothing of ``line`` is left once normalised: every character is whitespace or
    invisible (:data:`INVISIBLE_CATEGORIES`). Such a line is treated like an empty one."""
    return all(ch.isspace() or unicodedata.category(ch) in INVISIBLE_CATEGORIES for ch in line)


def first_few(numbers, most: int = 10) -> str:
    """``numbers`` for a message: the first ``most``, then "..." if there are more."""
    numbers = list(numbers)
    return ", ".join(map(str, numbers[:most])) + (", ..." if len(numbers) > most else "")


def blank_line_numbers(lines: List[str]) -> List[int]:
    """The 1-based numbers of the lines :func:`is_blank` finds empty."""
    return [i + 1 for i, line in enumerate(lines) if is_blank(line)]


def read_lines(path: str, errors: str = "strict", warn=None, what: str = "", offers_replace: bool = True) -> List[str]:
    """The lines of a UTF-8 text file (``.gz`` decompressed, ``-`` standard input);
    ``offers_replace`` as in :func:`split_lines`."""
    return split_lines(read_bytes(path, what), path, errors, warn, offers_replace)


def iter_lines(path: str, errors: str = "strict", warn=None, what: str = "",
               offers_replace: bool = True) -> Iterator[str]:
    """The lines of :func:`read_lines`, one at a time, for files too large to hold: the same line
    ends, the same errors (naming the line and byte) and the same one warning for ``replace``."""
    if errors not in ERRORS:
        raise DistillError(f"unknown --errors '{errors}'; choose one of {', '.join(ERRORS)}")
    warned = False
    try:
        handle = sys.stdin.buffer if path == STDIN else (gzip.open(path, "rb") if path.endswith(".gz")
                                                          else open(path, "rb"))
    except OSError as e:
        role = f"{what.strip()} " if what.strip() else ""
        raise DistillError(f"cannot read {role}'{path}': {e.strerror or e}") from e
    try:
        for number, raw in enumerate(handle, 1):
            data = raw[:-1] if raw.endswith(b"\n") else raw
            if data.endswith(b"\r"):
                data = data[:-1]
            try:
                yield data.decode("utf-8")
            except UnicodeDecodeError as e:
                if errors == "strict":
                    other = ("pass --errors replace to read invalid bytes as U+FFFD" if offers_replace else
                             "drop the invalid bytes (iconv -c -f UTF-8 -t UTF-8 FILE > FIXED)")
                    bad = data[e.start:e.end].hex(" ")
                    raise DistillError(
                        f"{describe(path)}: line {number} is not valid UTF-8 (byte {e.start + 1} of the line: "
                        f"{bad}); convert the file to UTF-8 (e.g. iconv -f LATIN1 -t UTF-8), or {other}") from e
                if warn is not None and not warned:
                    warn(f"{describe(path)}: invalid UTF-8 replaced by U+FFFD (first at line {number})")
                    warned = True
                yield data.decode("utf-8", "replace")
    except OSError as e:
        if isinstance(e, gzip.BadGzipFile):
            raise gzip_error(path, e) from e
        raise
    except (EOFError, zlib.error) as e:
        raise gzip_error(path, e) from e
    finally:
        if path != STDIN:
            handle.close()


def file_sha256(path: str) -> str:
    """The SHA-256 of a file's bytes (hex), read in blocks: what identifies an input wherever it
    lies. For a directory (a Hugging Face model), the digest of its files' relative names and
    digests, in name order."""
    if os.path.isdir(path):
        h = hashlib.sha256()
        for root, dirs, files in os.walk(path):
            dirs.sort()
            for name in sorted(files):
                full = os.path.join(root, name)
                h.update(f"{os.path.relpath(full, path)}\0{file_sha256(full)}\n".encode("utf-8"))
        return h.hexdigest()
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()
