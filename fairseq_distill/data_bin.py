"""A binarized data directory (what ``fairseq-preprocess`` writes): its files, checked and named
when missing, and its content digest.

Tools that keep work between runs (teacher-cache shards, seq-KD merges) identify the data by
content, not by path: a data directory binarized again in place, or another one at the same
path, is other data. :func:`data_digest` is the SHA-256 of the dictionaries and of a subset's
binarized files (both sides, ``.bin`` and ``.idx``), named in the hash, so the same bytes
anywhere give the same digest.

:func:`check_model_dictionaries`: a model decoded with a data directory must have been trained
with its dictionaries (compared by content), or it translates nonsense with exit status 0.
"""
import hashlib
import os
import sys
from typing import List, Optional, Tuple

from fairseq_distill.errors import DistillError

# key under which the distillation task stores its dictionaries in ``task_state``
DICTIONARIES_KEY = "fairseq_distill_dictionaries"

CHUNK = 1 << 22  # bytes read at a time while hashing


def pair_prefix(data: str, subset: str, src: str, tgt: str) -> str:
    """``DATA/SUBSET.SRC-TGT`` as fairseq finds it: that pair's order, else the reverse."""
    for a, b in ((src, tgt), (tgt, src)):
        prefix = os.path.join(data, f"{subset}.{a}-{b}")
        if os.path.exists(f"{prefix}.{src}.idx") or os.path.exists(f"{prefix}.{src}.bin"):
            return prefix
    return os.path.join(data, f"{subset}.{src}-{tgt}")


def subset_files(data: str, subset: str, src: str, tgt: str) -> List[str]:
    """The files of one binarized subset, both sides: ``.bin`` and ``.idx``."""
    prefix = pair_prefix(data, subset, src, tgt)
    return [f"{prefix}.{lang}.{ext}" for lang in (src, tgt) for ext in ("bin", "idx")]


def dictionary_files(data: str, src: str, tgt: str) -> List[str]:
    return [os.path.join(data, f"dict.{lang}.txt") for lang in dict.fromkeys((src, tgt))]


def check_dictionaries(data: str, src: str, tgt: str):
    """Both dictionaries are there, or the missing one is named."""
    for path in dictionary_files(data, src, tgt):
        if not os.path.isfile(path):
            raise DistillError(f"{data} has no {os.path.basename(path)}: not a complete binarized data directory "
                               f"for {src}-{tgt} (fairseq-preprocess writes dict.{src}.txt and dict.{tgt}.txt); "
                               f"binarize the data again, or pass the directory that has it")


def check_subset(data: str, subset: str, src: str, tgt: str):
    """Every file of ``subset`` is there, or the first missing one is named with what is there."""
    missing = [p for p in subset_files(data, subset, src, tgt) if not os.path.isfile(p)]
    if missing:
        found = sorted(f for f in os.listdir(data) if f.startswith(f"{subset}.")) if os.path.isdir(data) else []
        raise DistillError(f"{data} has no {os.path.basename(missing[0])}: the binarized '{subset}' set "
                           f"({src}-{tgt}) needs .bin and .idx files for both sides"
                           f"{'; found ' + ', '.join(found) if found else ''}; binarize the data again "
                           f"(fairseq-preprocess, fsd-prepare-corpus)")


def file_digest(path: str, h) -> None:
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(CHUNK), b""):
            h.update(block)


def _stamp(paths: List[str]) -> Tuple:
    return tuple((os.path.realpath(p), os.path.getsize(p), os.stat(p).st_mtime_ns) for p in paths)


_digests = {}  # one hash per file set and state within a process: a tool asks for it per shard


def data_digest(data: str, subset: str, src: str, tgt: str) -> str:
    """SHA-256 of ``data``'s dictionaries and binarized ``subset`` (by content and file name)."""
    check_dictionaries(data, src, tgt)
    check_subset(data, subset, src, tgt)
    paths = dictionary_files(data, src, tgt) + subset_files(data, subset, src, tgt)
    key = _stamp(paths)
    if key not in _digests:
        h = hashlib.sha256()
        for path in paths:
            h.update(os.path.basename(path).encode("utf-8") + b"\0" + str(os.path.getsize(path)).encode() + b"\0")
            file_digest(path, h)
        _digests[key] = h.hexdigest()
    return _digests[key]


def short(digest: Optional[str]) -> str:
    return (digest or "none")[:12]


def directory_digest(directory: str, skip=(".distill-lock", "preprocess.log")) -> str:
    """SHA-256 of every regular file under ``directory`` (relative paths and contents, in sorted
    order), names starting with one of ``skip`` left out."""
    h = hashlib.sha256()
    for folder, _, files in sorted(os.walk(directory)):  # every folder, in path order
        for name in sorted(files):
            path = os.path.join(folder, name)
            if name.startswith(skip) or not os.path.isfile(path):
                continue
            h.update(os.path.relpath(path, directory).encode("utf-8") + b"\0" + str(os.path.getsize(path)).encode()
                     + b"\0")
            file_digest(path, h)
    return h.hexdigest()


def training_data_candidates(state, path) -> List[str]:
    """Where the data directory a checkpoint was trained on may be now.

    fairseq stores ``--data`` and ``--save-dir`` as they were typed, relative to the working
    directory of that training run. When the checkpoint still sits in its save dir, that
    directory is the checkpoint's folder less the save dir's own path; otherwise we try the
    current directory and the checkpoint's folder and its parents.
    """
    cfg = state.get("cfg")
    task_cfg = cfg.get("task") if cfg is not None else None
    data = str((task_cfg.get("data") if task_cfg is not None else "") or "").split(":")[0]
    if not data:
        return []
    if os.path.isabs(data):
        return [data]
    folder = os.path.dirname(os.path.abspath(path))
    roots = []
    save_dir = str(((cfg.get("checkpoint") or {}).get("save_dir")) or "")
    if save_dir and not os.path.isabs(save_dir):
        parts = os.path.normpath(save_dir).split(os.sep)
        if folder.split(os.sep)[-len(parts):] == parts:
            roots.append(os.sep.join(folder.split(os.sep)[:-len(parts)]) or os.sep)
    roots.append(os.getcwd())
    while True:
        roots.append(folder)
        parent = os.path.dirname(folder)
        if parent == folder:
            break
        folder = parent
    seen, candidates = set(), []
    for root in roots:
        candidate = os.path.normpath(os.path.join(root, data))
        if candidate not in seen:
            seen.add(candidate)
            candidates.append(candidate)
    return candidates


def dictionaries_of_checkpoint(state, path) -> Tuple[Optional[Tuple[List[str], List[str]]], List[str]]:
    """The (source, target) symbol lists a checkpoint was trained with, if they can be found,
    and the directories that were searched.

    Checkpoints written by this plugin carry them in ``task_state``; for others we look for
    ``dict.{lang}.txt`` in the data directory the checkpoint was trained on.
    """
    from fairseq.data import Dictionary

    stored = (state.get("task_state") or {}).get(DICTIONARIES_KEY)
    if stored:
        return (list(stored["source"]), list(stored["target"])), []
    cfg = state.get("cfg")
    task_cfg = cfg.get("task") if cfg is not None else None
    searched = training_data_candidates(state, path)
    for data in searched:
        if not os.path.isdir(data):
            continue
        src, tgt = task_cfg.get("source_lang"), task_cfg.get("target_lang")
        if not (src and tgt):  # fairseq infers them from the file names when not given
            from fairseq.data import data_utils

            src, tgt = data_utils.infer_language_pair(data)
        files = [os.path.join(data, f"dict.{lang}.txt") for lang in (src, tgt)] if src and tgt else []
        if files and all(os.path.isfile(f) for f in files):
            return tuple(Dictionary.load(f).symbols for f in files), searched
    return None, searched


def model_languages(state: dict, data: str, meta: Optional[dict] = None) -> Tuple[str, str]:
    """(source, target) language of a model decoded with ``data``: as ``fairseq_distill.json``
    records them, else as the checkpoint's task names them, else as the file names show."""
    if meta and meta.get("source_lang") and meta.get("target_lang"):
        return meta["source_lang"], meta["target_lang"]
    cfg = state.get("cfg")
    task = cfg.get("task") if cfg is not None else None
    src, tgt = (task.get("source_lang"), task.get("target_lang")) if task is not None else (None, None)
    if not (src and tgt):
        from fairseq.data import data_utils

        src, tgt = data_utils.infer_language_pair(data)
    if not (src and tgt):
        raise DistillError(f"{data}: cannot tell its languages (no fairseq_distill.json, the checkpoint names "
                           f"none, and no dict.LANG.txt pair is there): give the data directory the model "
                           f"was trained on")
    return src, tgt


def check_model_dictionaries(state: dict, checkpoint: str, data: str, src: str, tgt: str,
                             who: Optional[str] = None, remedy: Optional[str] = None) -> str:
    """The model in ``state`` must have been trained with ``data``'s dictionaries, or its ids mean
    other words (a translation of nonsense, exit 0). Compares them by content: the model's own
    dictionaries (stored in the checkpoint, or found in the data directory it was trained on)
    symbol by symbol with ``DATA/dict.LANG.txt``, naming the file, the index and both symbols.
    Where the model's dictionaries are nowhere to be found, compares its embeddings' rows with
    the files' sizes and warns that only the sizes were checked. Returns how it checked:
    ``symbols`` or ``sizes``."""
    from fairseq.data import Dictionary


    check_dictionaries(data, src, tgt)
    who = who or checkpoint
    remedy = remedy or ("give the data directory the model was trained on (the same dict.*.txt files), or a "
                        "model trained on this one")
    files = [os.path.join(data, f"dict.{lang}.txt") for lang in (src, tgt)]
    dictionaries = [Dictionary.load(f) for f in files]
    found, _ = dictionaries_of_checkpoint(state, checkpoint)
    if found is not None:
        for side, path, data_dict, symbols in zip(("source", "target"), files, dictionaries, found):
            for index, (ours, theirs) in enumerate(zip(data_dict.symbols, symbols)):
                if ours != theirs:
                    raise DistillError(f"{who}: its {side} dictionary differs from {path} at index {index}: the "
                                       f"model has '{theirs}' where the file has '{ours}'; {remedy}")
            if len(symbols) != len(data_dict.symbols):
                raise DistillError(f"{who}: its {side} dictionary has {len(symbols)} symbols and {path} "
                                   f"{len(data_dict.symbols)} (the same up to the shorter); {remedy}")
        return "symbols"
    weights = state["model"]
    for side, key, path, data_dict in (("source", "encoder.embed_tokens.weight", files[0], dictionaries[0]),
                                       ("target", "decoder.embed_tokens.weight", files[1], dictionaries[1])):
        if key in weights and weights[key].size(0) != len(data_dict):
            raise DistillError(f"{who}: its {side} embedding has {weights[key].size(0)} rows and {path} "
                               f"{len(data_dict)} symbols, so it was trained with other dictionaries; {remedy}")
    print(f"warning: {who}: its own dictionaries are not in the checkpoint nor in the data directory it was "
          f"trained on, so only their sizes could be checked against {data}", file=sys.stderr)
    return "sizes"


def check_checkpoints_match_data(checkpoint: str, data_bin: str):
    """Each checkpoint of ``checkpoint`` (``:``-separated) exists and was trained with the
    dictionaries of ``data_bin`` (:func:`check_model_dictionaries`); returns their loaded states."""
    from fairseq_distill import compat
    from fairseq_distill.text.segmentation import load_meta

    if not os.path.isdir(data_bin):
        raise DistillError(f"data directory not found: '{data_bin}'")
    states = []
    for path in checkpoint.split(":"):
        if not os.path.isfile(path):
            raise DistillError(f"checkpoint not found: '{path}'")
        try:
            state = compat.load_checkpoint(path)  # torch's restricted unpickler: nothing in it runs
        except Exception as e:  # not a checkpoint, or one holding code to run
            raise DistillError(f"cannot read checkpoint '{path}': {type(e).__name__}: "
                               f"{str(e).splitlines()[0] if str(e) else ''}") from e
        src, tgt = model_languages(state, data_bin, load_meta(data_bin))
        check_model_dictionaries(state, path, data_bin, src, tgt)
        states.append(state)
    return states


def blank_sources(data: str, subset: str, src: str, tgt: str) -> List[int]:
    """The ids of ``subset``'s sentences whose binarized source shows nothing: only ``</s>``, or
    pieces that are whitespace or invisible characters (U+200B, U+FEFF, ...) once the subword
    marks are removed. A model would invent a translation for each; they are translated as an
    empty line."""
    from fairseq.data import Dictionary, data_utils

    from fairseq_distill.text.segmentation import blank_pieces

    dictionary = Dictionary.load(os.path.join(data, f"dict.{src}.txt"))
    dataset = data_utils.load_indexed_dataset(f"{pair_prefix(data, subset, src, tgt)}.{src}", dictionary)
    if dataset is None:
        return []
    blank, symbols, eos = [], dictionary.symbols, dictionary.eos()
    for i in range(len(dataset)):
        if blank_pieces(" ".join(symbols[t] for t in dataset[i].tolist() if t != eos)):
            blank.append(i)
    return blank
