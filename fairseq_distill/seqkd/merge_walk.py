"""The seq-KD merge's walk through the corpus: a chunk of sentences at a time, in corpus order,
each chunk's n-best lists read from the shards by the index (:mod:`fairseq_distill.seqkd.shard_index`),
its sources and references from the binarized data (:class:`fairseq_distill.seqkd.inputs.Side`),
its targets chosen (chrF, the 1-best, or MBR rankings) and its pairs written to the text files
that are binarized. Nothing is held from one chunk to the next but the counts, so memory
is one chunk's, whatever the corpus's size.

The walk resumes. After each chunk, ``WORK/seqkd_merge.json`` records how far it went, the
bytes written to each text file and the counts, with what the walk was made from (the shards'
SHA-256, ``--data``'s content, the options): a merge interrupted after hours continues from the
last whole chunk when run again with the same shards, data and options (the text files cut back to
the recorded bytes), and one that had finished walking goes straight on to binarizing. The
binarization (:mod:`fairseq_distill.text.binarize`, a piece of the pairs at a time) records each
finished piece in the same file (:class:`BinarizedPieces`), so that a merge interrupted while
binarizing goes on from its last finished piece.
"""
import json
import os
from dataclasses import asdict, dataclass, field
from typing import Dict, List, Optional

from fairseq_distill.errors import DistillError
from fairseq_distill.progress import Progress
from fairseq_distill.seqkd.inputs import Inputs, Side
from fairseq_distill.seqkd.selection import chrf_pool, select_hypotheses
from fairseq_distill.text.segmentation import META_FILE, Segmenter, blank_pieces, load_meta

CHUNK_SENTENCES = 10_000  # sentences read, chosen and written at a time (their n-best lists held meanwhile)
STATE_FILE = "seqkd_merge.json"
WORK_PAIRS = "seqkd_pairs.tsv"  # the pairs' origins, in WORK until they are copied into the data
EXTERNAL_BACKEND = "ctranslate2 model"  # fairseq_distill.seqkd.external.BACKEND
FIRST_FEW = 10  # missing ids named in a refusal
BLANK_TARGET = -2  # seqkd_pairs.tsv's hypothesis of a source that shows nothing: its empty target


@dataclass
class Tally:
    """What the walk counted (the summary's numbers) and how far it went."""
    next: int = 0  # the first sentence not walked yet
    bytes: Dict[str, int] = field(default_factory=dict)  # each text file's length after the last chunk
    kept: int = 0
    filtered: int = 0
    train_missing: int = 0
    train_missing_first: List[int] = field(default_factory=list)
    mono_missing: int = 0
    mono_missing_first: List[int] = field(default_factory=list)  # line numbers of --source
    # sources that show nothing (only </s>, or invisible characters): an empty target each
    train_blank: int = 0
    train_blank_first: List[int] = field(default_factory=list)
    mono_blank: int = 0
    mono_blank_first: List[int] = field(default_factory=list)  # line numbers of --source
    monolingual_added: int = 0
    nbest: int = 0
    selected_other_than_1best: int = 0
    fewer_targets: int = 0
    at_limit: int = 0
    hypothesis_tokens: int = 0
    source_tokens: int = 0  # of the pairs kept


def text_paths(args, src: str, tgt: str, pairs: bool) -> Dict[str, str]:
    prefix = os.path.join(args.work, "seqkd")
    paths = {"src": f"{prefix}.{src}", "tgt": f"{prefix}.{tgt}"}
    if pairs:
        paths["pairs"] = os.path.join(args.work, WORK_PAIRS)
    return paths


def resumed(args, key: dict, paths: Dict[str, str]) -> Optional[Tally]:
    """The tally of an earlier walk of the same inputs, its text files cut back to what it recorded;
    None when there is none to continue."""
    try:
        with open(os.path.join(args.work, STATE_FILE), encoding="utf-8") as f:
            state = json.load(f)
        tally = Tally(**state["tally"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if state.get("key") != key or set(tally.bytes) != set(paths):
        return None
    if any(not os.path.isfile(p) or os.path.getsize(p) < tally.bytes[name] for name, p in paths.items()):
        return None
    for name, path in paths.items():
        os.truncate(path, tally.bytes[name])
    return tally


def save(args, key: dict, tally: Tally):
    """The walk's record after a chunk (a record of binarized pieces is dropped: the texts changed)."""
    write_state(args, {"key": key, "tally": asdict(tally)})


def write_state(args, state: dict):
    path = os.path.join(args.work, STATE_FILE)
    with open(path + ".tmp", "w", encoding="utf-8") as f:
        json.dump(state, f)
    os.replace(path + ".tmp", path)


class BinarizedPieces:
    """The pieces of the walk's texts binarized so far (:func:`fairseq_distill.text.binarize.binarize_train`'s
    record), kept in the walk's state file beside its tally: they stand while that record does (the
    same shards, data and options, the walk finished), and a walk that writes again drops them."""

    def __init__(self, args, key: dict):
        self.args = args
        with open(os.path.join(args.work, STATE_FILE), encoding="utf-8") as f:
            self.state = json.load(f)
        # the walk has just saved or resumed this record: its key is this merge's
        self.done = dict(self.state.get("binarized", {})) if self.state.get("key") == key else {}

    def finish(self, stage: str, value):
        self.done[stage] = value
        self.state["binarized"] = self.done
        write_state(self.args, self.state)

    def forget(self):
        """The pieces joined and removed: nothing left to keep."""
        self.done = {}
        self.state.pop("binarized", None)
        write_state(self.args, self.state)


class Chooser:
    """Which hypotheses of each n-best list become its targets (indices into the list, best first:
    one, or under --select mbr --targets K the first K non-empty ones by MBR score)."""

    def __init__(self, args, rankings=None):
        self.args, self.rankings = args, rankings
        self.k = (args.targets or 1) if args.select == "mbr" else 1
        self.segmenter, self.pool = None, None

    def choose(self, lists: Dict[int, List[str]], references: List[str], start: int, n: int) -> Dict[int, List[int]]:
        """``references``: the training references of the chunk that begins at sentence ``start``."""
        args = self.args
        if args.select == "mbr":
            rankings = self.rankings.get(sorted(lists))
            return {i: [j for j in rankings[i] if lists[i][j].strip()][:self.k] or rankings[i][:1] for i in lists}
        chosen = {i: [0] for i in lists}
        multi = [i for i in sorted(lists) if len(lists[i]) > 1]
        if args.select == "first" or not multi:
            return chosen
        if self.segmenter is None:
            if load_meta(args.data) is None:
                raise DistillError(f"--select chrf scores detokenised text and needs the subword model the data was "
                                   f"prepared with, but {args.data} has no {META_FILE}; pass --select first")
            self.segmenter = Segmenter.from_dir(args.data)
            self.pool = chrf_pool()
        decode = self.segmenter.decode
        # monolingual lines (ids from n on) have no reference: they keep the 1-best
        texts = [[decode(h.split()) for h in lists[i]] for i in multi]
        refs = [decode(references[i - start].split()) if i < n else None for i in multi]
        picks = select_hypotheses(texts, refs, "chrf", pool=self.pool)
        chosen.update((i, [k]) for i, k in zip(multi, picks))
        return chosen

    def close(self):
        if self.pool is not None:
            self.pool.terminate()
            self.pool.join()


def walk(args, src: str, tgt: str, index, inputs: Inputs, settings: dict, key: dict, rankings=None,
         pairs: bool = False) -> Tally:
    """Walk the corpus (see the module docstring), writing the pairs' texts (and, with ``pairs``,
    their origins) into ``args.work``; returns the counts."""
    paths = text_paths(args, src, tgt, pairs)
    n, total = len(inputs.train), len(inputs)
    tally = resumed(args, key, paths)
    if tally is not None and tally.next:
        print(f"[seqkd] merge resumed after {tally.next:,} of {total:,} sentences ({os.path.join(args.work, STATE_FILE)})")
    fresh = tally is None
    tally = tally or Tally()
    references = Side(args.data, args.subset, src, tgt, tgt)
    external = settings.get("backend") == EXTERNAL_BACKEND
    len_a, len_b = settings.get("max_len_a", args.max_len_a), settings.get("max_len_b", args.max_len_b)
    r = args.max_len_ratio
    chooser = Chooser(args, rankings)
    progress = Progress("seqkd", "merge", total - tally.next, unit="sentences")
    files = {name: open(path, "wb" if fresh else "ab") for name, path in paths.items()}
    try:
        if fresh and pairs:
            files["pairs"].write(b"pair\tsentence\thypothesis\n")
        for start in range(tally.next, total, CHUNK_SENTENCES):
            stop = min(start + CHUNK_SENTENCES, total)
            lists = index.lists(range(start, stop))
            sources = inputs.read(start, stop)
            refs = references.read(start, min(stop, n))
            chosen = chooser.choose(lists, refs, start, n)
            out = {name: [] for name in files}
            for i in range(start, stop):
                source = sources[i - start]
                if blank_pieces(source):
                    # nothing to translate: an empty target, whatever the teacher made of it
                    # (fsd-translate and fsd-evaluate give such a line an empty translation)
                    if i < n:
                        tally.train_blank += 1
                        tally.train_blank_first += [i][:FIRST_FEW - len(tally.train_blank_first)]
                    else:
                        tally.mono_blank += 1
                        tally.mono_blank_first += [i - n + 1][:FIRST_FEW - len(tally.mono_blank_first)]
                    out["src"].append(source + "\n")
                    out["tgt"].append("\n")
                    if pairs:
                        out["pairs"].append(f"{tally.kept}\t{i}\t{BLANK_TARGET}\n")
                    tally.kept += 1
                    tally.source_tokens += len(source.split())
                    tally.monolingual_added += i >= n
                    continue
                hyps = [lists[i][k] for k in chosen[i]] if i in lists else []
                missing = not any(h.strip() for h in hyps)
                if i in lists:
                    tally.nbest = max(tally.nbest, len(lists[i]))
                    tally.selected_other_than_1best += i < n and chosen[i][0] != 0
                    tally.fewer_targets += len(chosen[i]) < chooser.k
                if missing and i < n:
                    tally.train_missing += 1
                    tally.train_missing_first += [i][:FIRST_FEW - len(tally.train_missing_first)]
                elif missing:
                    tally.mono_missing += 1
                    tally.mono_missing_first += [i - n + 1][:FIRST_FEW - len(tally.mono_missing_first)]
                # each sentence's targets as (hypothesis index, text); -1: the reference (--on-missing reference)
                targets = ([(-1, refs[i - start])] if i < n else []) if missing else list(zip(chosen[i], hyps))
                source_words = len(source.split())
                for k, target in targets:
                    words = len(target.split())
                    if r and not 1 / r <= words / max(source_words, 1) <= r:
                        tally.filtered += 1
                        continue
                    out["src"].append(source + "\n")
                    out["tgt"].append(target + "\n")
                    if pairs:
                        out["pairs"].append(f"{tally.kept}\t{i}\t{k}\n")
                    tally.kept += 1
                    tally.hypothesis_tokens += words
                    tally.source_tokens += source_words
                    tally.monolingual_added += i >= n
                    if not external and not missing:
                        tally.at_limit += words >= int(len_a * (source_words + 1) + len_b)
            for name, f in files.items():
                f.write("".join(out[name]).encode("utf-8"))
                f.flush()
                tally.bytes[name] = f.tell()
            tally.next = stop
            save(args, key, tally)
            progress.update(stop - start)
    finally:
        chooser.close()
        for f in files.values():
            f.close()
    return tally
