"""The WMT protocols' training text at full size: the per-line Moses steps and the pair filter,
streamed a chunk of pairs at a time through worker processes, each training part resumable.

A WMT'14 part holds millions of lines (Common Crawl alone 2.4M pairs), so nothing here holds a
part in memory: both sides are read line by line (a part inside a tar archive is first copied out
to a scratch file, since one tar stream cannot be read at two places at once), ``CHUNK`` pairs
at a time go to a worker, and at most ``2 × workers`` chunks are in flight. Peak memory is a few
chunks, whatever the corpus size.

Each part's kept pairs go to ``OUT/.parts/PART.LANG`` and, once the part is complete, its counts
to ``OUT/.parts/PART.json`` with what it was made from (the protocol, each side's size and
where it was found). A rerun after an interruption keeps every complete part made from the same
input and redoes the rest; the parts are then joined into ``OUT/train.LANG`` in protocol order.
"""
import json
import os
import shutil
import tarfile
from typing import Callable, Dict, Iterator, List, NamedTuple, Optional, Sequence, Tuple

from fairseq_distill.corpora.moses import clean_pairs, tokenize
from fairseq_distill.errors import DistillError
from fairseq_distill.progress import Progress
from fairseq_distill.streaming import bounded_map

CHUNK = 20000            # pairs per piece of work for the worker processes
MAX_WORD_LENGTH = 1000   # clean-corpus-n.perl's default: a pair with a longer word is dropped
PARTS_DIR = ".parts"



class Side(NamedTuple):
    """One side of a training part: where it was found (for messages and the part's record), its
    size in bytes, and the file holding it, or the archive and the member that does."""

    where: str
    size: int
    path: str
    member: Optional[str] = None


_NORMALISERS: Dict[str, object] = {}
_NON_PRINTING = None


def normalise_punctuation(lines: Sequence[str], lang: str) -> List[str]:
    """``normalize-punctuation.perl -l LANG``, sacremoses' port with perl parity."""
    if lang not in _NORMALISERS:
        try:
            from sacremoses import MosesPunctNormalizer
        except ImportError as e:
            raise DistillError("the WMT recipes normalise punctuation with sacremoses: pip install sacremoses") from e
        try:
            _NORMALISERS[lang] = MosesPunctNormalizer(lang=lang, perl_parity=True)
        except TypeError as e:
            raise DistillError("this sacremoses has no perl_parity option: pip install -U sacremoses") from e
    normaliser = _NORMALISERS[lang]
    return [normaliser.normalize(line) for line in lines]


def remove_non_printing(lines: Sequence[str]) -> List[str]:
    """``remove-non-printing-char.perl``: every ``\\p{C}`` character (control, format, private
    use, surrogate, unassigned) written as a space."""
    global _NON_PRINTING
    if _NON_PRINTING is None:
        import regex  # a dependency of sacremoses; Python's re has no \\p{…}

        _NON_PRINTING = regex.compile(r"\p{C}")
    return [_NON_PRINTING.sub(" ", line) for line in lines]


def line_steps(protocol, lines: Sequence[str], lang: str) -> List[str]:
    """The protocol's per-line steps on some lines of one side; one line out per line in."""
    if protocol.normalise_punctuation:
        lines = normalise_punctuation(lines, lang)
    if protocol.remove_non_printing:
        lines = remove_non_printing(lines)
    if protocol.tokenise:
        lines = tokenize(lines, lang)
    return list(lines)


def clean_chunk(job) -> Tuple[List[str], List[str], Dict[str, int]]:
    """A worker's piece: the steps on both sides of some pairs, then the pair filter."""
    protocol, (src_lang, tgt_lang), src, tgt = job
    done = {src_lang: line_steps(protocol, src, src_lang), tgt_lang: line_steps(protocol, tgt, tgt_lang)}
    for lang, lines in ((src_lang, src), (tgt_lang, tgt)):
        if len(done[lang]) != len(lines):  # one line out per line in, or the sides drift apart
            raise DistillError(f"{lang}: {len(lines):,} lines in, {len(done[lang]):,} out of the protocol's steps")
    min_tokens, max_tokens, ratio = protocol.clean
    dropped: Dict[str, int] = {}
    _, kept_src, kept_tgt = clean_pairs(done[src_lang], done[tgt_lang], min_tokens, max_tokens, ratio,
                                        MAX_WORD_LENGTH, dropped)
    return kept_src, kept_tgt, dropped


def text_lines(path: str, where: str, report: Callable[[str], None]) -> Iterator[Tuple[str, int]]:
    """A file's lines as ``wc -l`` counts them (split at ``\\n`` only), with the bytes each took;
    invalid UTF-8 is read as U+FFFD, said once with its first line, as Moses' perl scripts read
    past it."""
    warned = False
    with open(path, "rb") as f:
        for number, raw in enumerate(f, 1):
            data = raw[:-1] if raw.endswith(b"\n") else raw
            try:
                line = data.decode("utf-8")
            except UnicodeDecodeError as e:
                if not warned:
                    report(f"[wmt] warning: {where} is not valid UTF-8 (first at line {number:,}: {e.reason}); "
                           f"invalid bytes read as U+FFFD")
                    warned = True
                line = data.decode("utf-8", errors="replace")
            yield line, len(raw)


def paired_chunks(sides, report, counts: Dict[str, int]) -> Iterator[Tuple[List[str], List[str], int]]:
    """``(src lines, tgt lines, bytes read so far)`` ``CHUNK`` pairs at a time; ``counts`` (keyed by
    the two languages, in order) holds each side's lines so far. When one side ends before the
    other, the longer one is counted to its end, so that the caller can name both lengths."""
    langs = list(counts)
    lines = [text_lines(path, where, report) for where, path in sides]
    read = 0
    src, tgt = [], []
    while True:
        s, t = next(lines[0], None), next(lines[1], None)
        if s is None or t is None:
            for lang, got, rest in zip(langs, (s, t), lines):
                counts[lang] += (got is not None) + sum(1 for _ in rest)
            if src:
                yield src, tgt, read
            return
        for lang in langs:
            counts[lang] += 1
        src.append(s[0])
        tgt.append(t[0])
        read += s[1] + t[1]
        if len(src) == CHUNK:
            yield src, tgt, read
            src, tgt = [], []


def readable(sides: Sequence[Side], scratch: str) -> List[Tuple[str, str]]:
    """``(where, path)`` of each side: a file as it lies, a member of an archive copied out into
    ``scratch`` (streaming; one pass over the archive for both sides)."""
    paths = {}
    wanted: Dict[str, Dict[str, str]] = {}
    for i, side in enumerate(sides):
        if side.member is None:
            paths[i] = side.path
        else:
            paths[i] = os.path.join(scratch, f"side{i}.orig")
            wanted.setdefault(side.path, {})[side.member] = paths[i]
    for archive, members in wanted.items():
        left = dict(members)
        with tarfile.open(archive, "r|*") as tar:
            for member in tar:
                if member.name in left:
                    with tar.extractfile(member) as source, open(left.pop(member.name), "wb") as out:
                        shutil.copyfileobj(source, out, 1 << 20)
                if not left:
                    break
        if left:
            raise DistillError(f"{archive} no longer holds {', '.join(left)}: was it replaced while it was read?")
    return [(side.where, paths[i]) for i, side in enumerate(sides)]


def part_record(protocol, part, sides: Sequence[Side]) -> dict:
    return {"protocol": protocol.name, "part": part.name,
            "inputs": [{"where": side.where, "size": side.size} for side in sides]}


def clean_part(protocol, part, sides, langs, parts_dir: str, pool, workers: int,
               report: Callable[[str], None]) -> Dict[str, Dict[str, int]]:
    """One training part through the steps and the filter into ``parts_dir/PART.LANG``, or kept
    from an earlier run made from the same input; returns its counts (as ``prepare`` reports)."""
    record = part_record(protocol, part, sides)
    record_path = os.path.join(parts_dir, f"{part.name}.json")
    outputs = {lang: os.path.join(parts_dir, f"{part.name}.{lang}") for lang in langs}
    if os.path.exists(record_path):
        with open(record_path, encoding="utf-8") as f:
            earlier = json.load(f)
        if earlier.get("made_from") == record and all(os.path.exists(p) for p in outputs.values()):
            report(f"[{protocol.name}] {part.name}: kept from an earlier run of the same input ({record_path})")
            return earlier["counts"]
        os.remove(record_path)
    scratch = os.path.join(parts_dir, f"{part.name}.scratch")
    os.makedirs(scratch, exist_ok=True)
    try:
        return _clean_part(protocol, part, readable(sides, scratch), langs, record, record_path, outputs, pool,
                           workers, report)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _clean_part(protocol, part, sides, langs, record, record_path, outputs, pool, workers, report):
    counts = {lang: 0 for lang in langs}
    kept = {lang: 0 for lang in langs}
    dropped: Dict[str, int] = {}
    total_bytes = sum(os.path.getsize(path) for _, path in sides)
    progress = Progress(protocol.name, part.name, unit="pairs", report=report, measure_total=total_bytes)
    chunks = paired_chunks(sides, report, counts)
    read_so_far = [0]

    def jobs():
        for src, tgt, read in chunks:
            read_so_far[0] = read
            yield protocol, tuple(langs), src, tgt

    handles = {lang: open(outputs[lang] + ".partial", "w", encoding="utf-8", newline="\n") for lang in langs}
    try:
        for kept_src, kept_tgt, chunk_dropped in bounded_map(clean_chunk, jobs(), pool, 2 * max(workers, 1)):
            for lang, lines in zip(langs, (kept_src, kept_tgt)):
                bad = next((line for line in lines if "\n" in line or "\r" in line), None)
                if bad is not None:
                    raise DistillError(f"{part.name}.{lang}: a line holds a line break after the protocol's steps: "
                                       f"{bad[:100]!r}")
                handles[lang].write("".join(line + "\n" for line in lines))
                kept[lang] += len(lines)
            for reason, n in chunk_dropped.items():
                dropped[reason] = dropped.get(reason, 0) + n
            progress.update(len(kept_src) + sum(chunk_dropped.values()), measure=read_so_far[0])
    finally:
        for handle in handles.values():
            handle.close()
    result = {part.name: dict(counts), f"{part.name} cleaned": dict(kept), "dropped": dropped}
    if len(set(counts.values())) != 1:
        for path in outputs.values():
            os.remove(path + ".partial")
        return result   # the caller names the difference
    for lang in langs:
        os.replace(outputs[lang] + ".partial", outputs[lang])
    with open(record_path + ".partial", "w", encoding="utf-8") as f:
        json.dump({"made_from": record, "counts": result}, f, indent=2)
    os.replace(record_path + ".partial", record_path)
    return result


def join_parts(parts_dir: str, names: Sequence[str], langs, train_paths: Dict[str, str]):
    """The complete parts, in protocol order, as the training text."""
    for lang in langs:
        with open(train_paths[lang] + ".partial", "wb") as out:
            for name in names:
                with open(os.path.join(parts_dir, f"{name}.{lang}"), "rb") as part:
                    shutil.copyfileobj(part, out, 1 << 20)
        os.replace(train_paths[lang] + ".partial", train_paths[lang])
