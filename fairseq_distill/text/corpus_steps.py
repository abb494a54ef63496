"""The stages of ``fsd-prepare-corpus`` on corpora of any size (:mod:`fairseq_distill.text.corpus`
runs them in order and resumes them):

1. :func:`check_split`: a split read line by line, checked (aligned, not empty, no blank lines) and
   written as the text to segment (``\\n`` line ends);
2. :func:`write_subword_sample`: the subword model's training text, an evenly spaced sample of the
   training pairs (every pair when there are at most ``--subword-sample``);
3. :func:`segment_split`: segmentation in chunks through ``--workers`` processes, training pairs
   over ``--max-length`` removed, the raw and segmented text written side by side.

Nothing holds a split in memory: a chunk of lines at a time, a few chunks in flight.
"""
import hashlib
import json
import os
import shutil
import sys
from typing import Dict, List, Optional, Tuple

from fairseq_distill.errors import DistillError
from fairseq_distill.progress import Progress
from fairseq_distill.streaming import bounded_map, chunks
from fairseq_distill.text.files import first_few, is_blank, iter_lines
from fairseq_distill.text.segmentation import META_FILE, Segmenter, normalize_whitespace

CHUNK = 10000   # pairs per piece of segmentation work


def warn(message):
    print(f"[prepare] warning: {message}", file=sys.stderr)


def check_split(src_path: str, tgt_path: str, split: str, out_paths: Tuple[str, str], errors: str = "strict",
                keep_blank: bool = False) -> int:
    """Read one split's two sides in step, check them and write them to ``out_paths`` (one line
    each, ended by ``\\n``); returns the number of pairs. Blank lines (only whitespace or invisible
    characters) are refused, naming the first; with ``keep_blank`` they are kept as empty lines."""
    paths = (src_path, tgt_path)
    counts = [0, 0]
    first_blank: List[Optional[Tuple[int, str]]] = [None, None]
    blank_count = [0, 0]
    sides = (iter_lines(src_path, errors, warn), iter_lines(tgt_path, errors, warn))
    progress = Progress("prepare", f"{split}: reading", unit="pairs")
    with open(out_paths[0], "w", encoding="utf-8", newline="\n") as src_out, \
            open(out_paths[1], "w", encoding="utf-8", newline="\n") as tgt_out:
        while True:
            pair = [next(sides[0], None), next(sides[1], None)]
            if pair[0] is None or pair[1] is None:
                for side in (0, 1):   # the longer side counted to its end, for the message
                    counts[side] += (pair[side] is not None) + sum(1 for _ in sides[side])
                break
            for side in (0, 1):
                counts[side] += 1
                if is_blank(pair[side]):
                    blank_count[side] += 1
                    if first_blank[side] is None:
                        first_blank[side] = (counts[side], pair[side])
                    if keep_blank:
                        pair[side] = ""
            src_out.write(pair[0] + "\n")
            tgt_out.write(pair[1] + "\n")
            progress.update()
    if counts[0] != counts[1]:
        raise DistillError(
            f"misaligned {split} files: {src_path} has {counts[0]} lines but "
            f"{tgt_path} has {counts[1]}; both sides must have one sentence per line")
    if not counts[0]:
        raise DistillError(f"empty corpus: {src_path} and {tgt_path} have no lines")
    for side in (0, 1):
        if first_blank[side] is not None and not keep_blank:
            number, line = first_blank[side]
            raise DistillError(
                f"{paths[side]} has {blank_count[side]} blank line(s) or line(s) empty after normalisation "
                f"(first at line {number}: {line!r}; only whitespace, control or "
                f"zero-width characters); remove those sentence pairs from both sides first"
                + ("; or, where an official protocol keeps them in a test set, pass --keep-blank-test-lines"
                   if split.startswith("test") else ""))
    return counts[0]


def is_sampled(i: int, n: int, most: int) -> bool:
    """Whether pair ``i`` (0-based) of ``n`` is one of ``most`` evenly spaced ones: the pairs where
    ``floor(i · most / n)`` steps up."""
    return (i * most) // n != ((i + 1) * most) // n


def write_subword_sample(paths: Tuple[str, str], n: int, most: Optional[int], out_path: str) -> int:
    """The subword model's training text: the source lines, then the target lines, of every pair or
    of ``most`` evenly spaced pairs, whitespace normalised as they will be segmented; returns the
    number of pairs taken."""
    taken = 0
    with open(out_path, "w", encoding="utf-8", newline="\n") as out:
        for path in paths:
            taken = 0
            with open(path, encoding="utf-8", newline="\n") as f:
                for i, line in enumerate(f):
                    if most is None or n <= most or is_sampled(i, n, most):
                        out.write(normalize_whitespace(line[:-1]) + "\n")
                        taken += 1
    return taken


_SEGMENTER: Dict[str, Segmenter] = {}


def _segmenter(kind: str, model: str) -> Segmenter:
    if (kind, model) not in _SEGMENTER:
        _SEGMENTER[(kind, model)] = Segmenter(kind, model)
    return _SEGMENTER[(kind, model)]


def segment_chunk(job):
    """A worker's piece: ``(first line number, src lines, tgt lines)`` segmented; returns the
    pieces and, per side, the 0-based positions (in the chunk) of lines the model empties."""
    kind, model, start, src, tgt = job
    # one model, or one per side (a Marian teacher's source.spm and target.spm)
    source_model, target_model = model if isinstance(model, tuple) else (model, model)
    pieces = (_segmenter(kind, source_model).encode_lines(src), _segmenter(kind, target_model).encode_lines(tgt))
    empty = tuple([i for i, p in enumerate(side) if not p.strip()] for side in pieces)
    return start, src, tgt, pieces, empty


def segment_split(name: str, texts: Tuple[str, str], inputs: Tuple[str, str], kind: str, model: str,
                  outputs: Dict[str, Tuple[str, str]], max_length: int, keep_blank: bool, n: int,
                  pool=None, workers: int = 1) -> dict:
    """Segment one split from its checked text (``texts``, 1 line a pair) into ``outputs["raw"]``
    and ``outputs["tok"]``; a training pair with a side over ``max_length`` tokens is removed (its
    1-based line listed), an evaluation set with one is refused, as is a line the subword model
    empties (kept as an empty line with ``keep_blank``). Returns ``{"pairs", "removed", "blank",
    "source_tokens", "target_tokens"}`` (tokens without ``</s>``)."""
    removed: List[Tuple[int, int]] = []
    blank: List[int] = []
    kept = tokens = target_tokens = 0
    progress = Progress("prepare", f"{name}: segmenting", total=n, unit="pairs")
    handles = [open(path, "w", encoding="utf-8", newline="\n") for path in outputs["raw"] + outputs["tok"]]
    try:
        with open(texts[0], encoding="utf-8", newline="\n") as src_in, \
                open(texts[1], encoding="utf-8", newline="\n") as tgt_in:
            pairs = zip((line[:-1] for line in src_in), (line[:-1] for line in tgt_in))
            jobs = ((kind, model, start, [s for s, _ in chunk], [t for _, t in chunk])
                    for start, chunk in zip(range(0, n, CHUNK), chunks(pairs, CHUNK)))
            for start, src, tgt, pieces, empty in bounded_map(segment_chunk, jobs, pool, 2 * max(workers, 1)):
                pieces = [list(side) for side in pieces]
                for side, positions in enumerate(empty):
                    if not positions:
                        continue
                    if keep_blank:
                        for i in positions:
                            pieces[side][i] = ""
                        blank.extend(start + i + 1 for i in positions)
                        continue
                    first = positions[0]
                    line = (src, tgt)[side][first]
                    raise DistillError(
                        f"{inputs[side]} has {len(positions)} line(s) empty after normalisation by the "
                        f"{kind} model (first at line {start + first + 1}: {line!r}); remove those "
                        f"sentence pairs from both sides first")
                raw_out = ([], [])
                tok_out = ([], [])
                for i, (s, t, ps, pt) in enumerate(zip(src, tgt, pieces[0], pieces[1])):
                    longer = max(len(ps.split()), len(pt.split()))
                    if longer > max_length:
                        if name != "train":
                            raise DistillError(
                                f"{inputs[0]} / {inputs[1]}: line {start + i + 1} has {longer} subword tokens, "
                                f"more than --max-length {max_length}; an evaluation set is never shortened: "
                                f"split those sentences or raise --max-length")
                        removed.append((start + i + 1, longer))
                        continue
                    raw_out[0].append(s)
                    raw_out[1].append(t)
                    tok_out[0].append(ps)
                    tok_out[1].append(pt)
                    tokens += len(ps.split())
                    target_tokens += len(pt.split())
                for handle, lines in zip(handles, raw_out + tok_out):
                    handle.write("".join(line + "\n" for line in lines))
                kept += len(raw_out[0])
                progress.update(len(src))
    finally:
        for handle in handles:
            handle.close()
    if removed:
        print(f"[prepare] {name}: removed {len(removed):,} sentence pair(s) with a side longer than "
              f"--max-length {max_length} subword tokens (lines {first_few(line for line, _ in removed)}; the "
              f"longest has {max(n for _, n in removed):,}); they are listed in the data's metadata")
    return {"pairs": kept, "removed": [line for line, _ in removed], "blank": sorted(set(blank)),
            "source_tokens": tokens, "target_tokens": target_tokens}


STAGING = ".prepare"   # OUT/.prepare: the checked text and the record of finished stages, until done


def run_key(made_from) -> str:
    """What a stage's output depends on: the options and each input's content."""
    content = {"options": made_from["options"],
               "inputs": {split: {lang: [d["size"], d["sha256"]] for lang, d in sides.items()}
                          for split, sides in made_from["inputs"].items()}}
    return hashlib.sha256(json.dumps(content, sort_keys=True).encode()).hexdigest()


class Stages:
    """The finished stages of an unfinished preparation (``OUT/.prepare/stages.json``), kept only
    for the same inputs and options, so that a rerun after an interruption goes on from there."""

    def __init__(self, out: str, key: str, fresh: bool):
        self.dir = os.path.join(out, STAGING)
        self.path = os.path.join(self.dir, "stages.json")
        self.key = key
        self.done = {}
        if not fresh and os.path.exists(self.path):
            with open(self.path, encoding="utf-8") as f:
                record = json.load(f)
            if record.get("key") == key:
                self.done = record["done"]
                print(f"[prepare] resuming the unfinished preparation in {out}: done before: "
                      f"{', '.join(self.done)} ({self.path})")
            elif record.get("key"):
                print(f"[prepare] the unfinished preparation in {out} was of other inputs or options: starting afresh")
        if not self.done and os.path.isdir(self.dir):
            shutil.rmtree(self.dir)
        os.makedirs(self.dir, exist_ok=True)

    def finish(self, stage: str, value=True):
        self.done[stage] = value
        with open(self.path + ".partial", "w", encoding="utf-8") as f:
            json.dump({"key": self.key, "done": self.done}, f, indent=1)
        os.replace(self.path + ".partial", self.path)


def vocabulary_of(data_bin, subword_model, src, tgt, codes=None):
    """``--vocabulary-from DATA_BIN``: its segmentation kind and files (the subword model, each
    side's dictionary), checked; for a Hugging Face teacher's directory also ``"teacher"``
    (:func:`fairseq_distill.text.teacher_vocabulary.prepared_vocabulary`); None without it."""
    from fairseq_distill.text import teacher_vocabulary
    from fairseq_distill.text.segmentation import find_subword_model

    if data_bin and teacher_vocabulary.is_model_dir(data_bin):
        if subword_model:
            raise DistillError(f"--subword-model goes with --vocabulary-from DATA_BIN; {data_bin} is a Hugging Face "
                               f"model, segmented by its own tokenizer")
        teacher = teacher_vocabulary.prepared_vocabulary(data_bin, src, tgt, codes)
        source_model, target_model = teacher["models"]
        return {"bpe": "sentencepiece", "teacher": teacher,
                "files": {"source_model": source_model, "target_model": target_model,
                          "config": os.path.join(data_bin, "config.json")}}
    if codes:
        raise DistillError("--teacher-languages goes with --vocabulary-from MODEL_DIR, the directory of an M2M100 "
                           "or NLLB teacher")
    if subword_model and not data_bin:
        raise DistillError("--subword-model goes with --vocabulary-from DATA_BIN (the data-bin whose dictionaries "
                           "the new data take); without it a subword model is learned from the training text")
    if not data_bin:
        return None
    if not os.path.isdir(data_bin):
        raise DistillError(f"--vocabulary-from {data_bin}: no such directory")
    files = {f"dict.{lang}.txt": os.path.join(data_bin, f"dict.{lang}.txt") for lang in (src, tgt)}
    missing = [name for name, path in files.items() if not os.path.isfile(path)]
    if missing:
        found = sorted(n for n in os.listdir(data_bin) if n.startswith("dict."))
        raise DistillError(f"--vocabulary-from {data_bin} has no {missing[0]} (it has {', '.join(found) or 'no dictionary'}): "
                           f"give the data-bin of these languages, -s {src} -t {tgt}")
    bpe, subword_model = find_subword_model(data_bin, subword_model,
                                            f"--vocabulary-from {data_bin} records no subword model and holds", "")
    return {"bpe": bpe, "files": {"subword_model": subword_model, **files}}
