"""Merging the shards of a seq-KD job: hypotheses back in corpus order, counts verified, one
chosen per sentence (under ``--select mbr --targets K``, up to K, each a pair), pairs filtered,
the result binarized (:mod:`fairseq_distill.seqkd.job`).

The merge streams: the shard files are indexed (:mod:`fairseq_distill.seqkd.shard_index`; the
one thing held per sentence: where its record lies, 10 bytes), then the corpus is walked a chunk
at a time (:mod:`fairseq_distill.seqkd.merge_walk`), resumably, and the texts it wrote are
binarized a piece at a time, resumably too (:mod:`fairseq_distill.text.binarize`)."""
import json
import os
import shutil
import time
from typing import Optional

import fairseq_distill.text.binarize as pieces
from fairseq_distill.data_bin import directory_digest
from fairseq_distill.errors import DistillError
from fairseq_distill.seqkd.inputs import Inputs, count_side, sources_digest
from fairseq_distill.seqkd.merge_walk import EXTERNAL_BACKEND, FIRST_FEW, WORK_PAIRS, BinarizedPieces, walk
from fairseq_distill.seqkd.shard_index import index_shards
from fairseq_distill.text.segmentation import META_FILE

# an external teacher's text work around decoding, per shard (fairseq_distill.seqkd.external)
TEXT_STAGES = ("tokenize_seconds", "detokenize_seconds", "segment_seconds")
PAIRS_FILE = "seqkd_pairs.tsv"  # with --targets K > 1: which sentence and hypothesis each pair holds
PIECES_DIR = "seqkd-pieces"  # in WORK: the pairs binarized a piece at a time, until joined


def settings_differences(a: Optional[dict], b: Optional[dict]) -> str:
    """Where two shards' settings differ, each option with both values ("--batch-size 16 against 64")."""
    a, b = a or {}, b or {}
    keys = sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))
    if not keys:
        return "one of them has no record of its settings"
    def shown(value):  # a teacher's record is long: its start tells which
        text = value if isinstance(value, (int, float, str, type(None))) else json.dumps(value)
        return str(text) if len(str(text)) <= 60 else str(text)[:57] + "..."

    def name(key):  # an option, or a digest the run records of its input
        return key.replace("_", " ") if key.endswith("sha256") else f"--{key.replace('_', '-')}"

    return "; ".join(f"{name(k)} {shown(a.get(k))} against {shown(b.get(k))}" for k in keys)


def shard_settings(headers, args) -> dict:
    """The settings every shard was decoded with; shards decoded differently are refused, naming
    each option that differs and its two values."""
    settings = [(h or {}).get("settings") for h in headers]
    for shard_id, s in enumerate(settings[1:], 1):
        if s != settings[0]:
            raise DistillError(
                f"shards 0 and {shard_id} of {args.num_shards} were decoded with different settings "
                f"({settings_differences(settings[0], s)}); decode shard {shard_id} again with shard 0's options "
                f"(--shard-id {shard_id}), or every shard with the same ones")
    return settings[0] or {}


def check_source_matches(settings, args):
    """The --subset and --source given to the merge must be what the shards translated."""
    if settings.get("subset", args.subset) != args.subset:
        raise DistillError(f"the shards translated --subset {settings['subset']}, not {args.subset}: "
                           f"pass --subset {settings['subset']} to merge them")
    recorded = settings.get("source")
    if recorded and not args.source:
        raise DistillError(f"the shards hold translations of the monolingual source {recorded['name']}: "
                           f"pass --source {recorded['name']} (its path here) to merge them")
    if args.source and not recorded:
        raise DistillError(f"--source {args.source} was given, but the shards were decoded without a "
                           f"monolingual source; decode them again with --source, or merge without it")
    if recorded and args.source:
        from fairseq_distill.seqkd.monolingual import describe_source

        if describe_source(args.source)["sha256"] != recorded["sha256"]:
            raise DistillError(f"--source {args.source} is not the file the shards translated "
                               f"({recorded['name']}, since changed or another file); decode them again")


def check_translated_source(settings, args, train_sources):
    """The shards translated --data's training source (by content: its sentences in order), not
    another data set's, nor these data as they were before being binarized again."""
    recorded = settings.get("train_source_sha256")
    if not recorded:
        raise DistillError(f"the shards in {args.work} record no digest of the source they translated (decoded by "
                           f"an earlier version, or written otherwise), so they cannot be checked against --data "
                           f"{args.data}: decode them again (fsd-seqkd without --merge)")
    digest = sources_digest(train_sources)
    if recorded != digest:
        raise DistillError(f"the shards in {args.work} translated another training source than --data {args.data} "
                           f"(digest {recorded[:12]}; --data's '{args.subset}' source has {digest[:12]}): another data "
                           f"directory, or these data binarized again since; decode them again for this --data "
                           f"(fsd-seqkd without --merge), or merge them with the --data they were decoded from")


def merge(args, src, tgt, inputs: Optional[Inputs] = None, dest: Optional[str] = None):
    """The merged data binarized into ``dest`` (default ``args.out``); returns the summary, which
    the caller writes (:mod:`fairseq_distill.seqkd.output` builds a new directory and switches it in)."""
    dest = dest or args.out
    started = time.time()
    index = index_shards(args)
    settings = shard_settings(index.headers, args)
    check_source_matches(settings, args)
    if args.select == "mbr":
        from fairseq_distill.seqkd.mbr_shards import check_merge

        check_merge(settings, args)
    if inputs is None:
        mono_dir = None
        if args.source:
            from fairseq_distill.seqkd.monolingual import prepare_source

            mono_dir = prepare_source(args.source, args.data, src, tgt, args.work, info=settings["source"])
        inputs = Inputs(args, src, tgt, mono_dir)
    check_translated_source(settings, args, inputs.train)
    n, m = len(inputs.train), len(inputs.mono)
    index.locate(n + m)
    rankings, selection = None, {"targets": 1}
    if args.select == "mbr":
        from fairseq_distill.seqkd.mbr_shards import rank_shards

        rankings, seconds = rank_shards(args, index)
        selection = {"targets": args.targets or 1, "mbr_seconds": round(seconds, 1)}
    pairs = selection["targets"] > 1
    # what the walk was made from: one of other shards, data or options is not continued
    key = {"shards_sha256": index.digests, "data_sha256": directory_digest(args.data),
           "options": {"subset": args.subset, "select": args.select, "targets": args.targets,
                       "on_missing": args.on_missing, "max_len_ratio": args.max_len_ratio}}
    tally = walk(args, src, tgt, index, inputs, settings, key, rankings, pairs)
    if args.select == "mbr":
        selection["sources_with_fewer_targets"] = tally.fewer_targets
    missing = tally.train_missing + tally.mono_missing
    if tally.train_blank or tally.mono_blank:
        where = ([f"training sentence ids {tally.train_blank_first}{' ...' if tally.train_blank > FIRST_FEW else ''}"]
                 if tally.train_blank else [])
        where += ([f"--source lines {tally.mono_blank_first}{' ...' if tally.mono_blank > FIRST_FEW else ''}"]
                  if tally.mono_blank else [])
        print(f"[seqkd] {tally.train_blank + tally.mono_blank:,} source(s) show nothing ({'; '.join(where)}): "
              f"each pair keeps its place with an empty target (blank_sources)")
    if missing and args.on_missing == "fail":
        what = []
        translations = settings.get("backend") == "translations file"
        if tally.train_missing and translations:
            lines = [i + 1 for i in tally.train_missing_first]
            what.append(f"{tally.train_missing} of {n} lines of --teacher-translations {args.teacher_translations} "
                        f"are empty or blank (first lines: {lines})")
        elif tally.train_missing:
            what.append(f"{tally.train_missing} of {n} training sentences have no (or an empty) teacher "
                        f"hypothesis (first sentence ids, 0-based: {tally.train_missing_first})")
        if tally.mono_missing:
            what.append(f"{tally.mono_missing} of {m} lines of --source have none (first lines: "
                        f"{tally.mono_missing_first})")
        remedy = ("fill those lines" if translations else
                  "decode those sentences again (delete their shard files under --work and rerun)")
        raise DistillError(
            f"{'; '.join(what)}; {remedy}, or pass --on-missing reference to keep the original reference "
            f"for training sentences (and leave such --source lines out)")

    # given back before the binarization: the walk no longer needs them
    index.shard_of = index.offset_of = rankings = None
    os.makedirs(dest, exist_ok=True)
    binarize(args, src, tgt, dest, tally.kept, tally.source_tokens + tally.hypothesis_tokens + 2 * tally.kept, key)
    copy_other_splits(args.data, dest, n_train=tally.kept, source=args.source)
    if pairs:
        shutil.copyfile(os.path.join(args.work, WORK_PAIRS), os.path.join(dest, PAIRS_FILE))

    stats = [(h or {}).get("stats", {}) for h in index.headers]
    summary = {
        "sentences": n, "kept": tally.kept, "filtered_by_length_ratio": tally.filtered,
        "missing_or_empty": missing,
        "blank_sources": tally.train_blank + tally.mono_blank,
        "monolingual_blank": tally.mono_blank,
        "replaced_by_reference": tally.train_missing if args.on_missing == "reference" else 0,
        "monolingual_sentences": m,
        "monolingual_added": tally.monolingual_added,
        "monolingual_left_out": tally.mono_missing if args.on_missing == "reference" else 0,
        "backend": settings.get("backend", "fairseq"),
        "compute_type": settings.get("compute_type"),
        "beam": settings.get("beam"), "lenpen": settings.get("lenpen"),
        "nbest": tally.nbest or 1,
        "select": args.select, **selection,
        "selected_other_than_1best": tally.selected_other_than_1best,
        # counted on the teacher's own tokens for an external teacher
        "hypotheses_at_length_limit": (sum(s.get("at_length_limit", 0) for s in stats)
                                       if settings.get("backend") == EXTERNAL_BACKEND else tally.at_limit),
        "redecoded_with_fairseq": sum(s.get("redecoded_with_fairseq", 0) for s in stats),
        "hypothesis_tokens": tally.hypothesis_tokens,
        **{key: round(sum(s[key] for s in stats), 2) for key in TEXT_STAGES if all(key in s for s in stats)},
        "merge_seconds": round(time.time() - started, 1),
    }
    return summary


def binarize(args, src: str, tgt: str, dest: str, pairs: int, tokens: int, key: dict):
    """The walk's texts (WORK/seqkd.SRC, .TGT) binarized into ``dest`` with the data's
    dictionaries, in pieces (:mod:`fairseq_distill.text.binarize`) kept in ``WORK/seqkd-pieces``
    until they are joined and recorded in the walk's state file, so that a rerun of the same merge
    binarizes only the pieces not finished: the files (``dict.LANG.txt`` too) are byte for byte
    those of one fairseq-preprocess call. The train split must hold exactly ``pairs`` pairs;
    ``tokens`` (both sides', </s> included) paces the progress line."""
    from fairseq.data import Dictionary

    texts = {lang: os.path.join(args.work, f"seqkd.{lang}") for lang in (src, tgt)}
    dictionaries = {lang: os.path.join(args.data, f"dict.{lang}.txt") for lang in (src, tgt)}
    pieces_dir = os.path.join(args.work, PIECES_DIR)
    log_path = os.path.join(args.work, "preprocess.log")  # its counts, not the terminal's
    count = max(1, len(pieces.piece_ranges(pairs, 1, pieces.PIECE_PAIRS)))
    print(f"[seqkd] binarizing {pairs:,} pairs in {count} piece{'s' if count > 1 else ''} of at most "
          f"{pieces.PIECE_PAIRS:,} with fairseq's binarizer (its log: {log_path})", flush=True)
    with open(log_path, "w", encoding="utf-8") as log:
        log.write(f"{texts[src]} and {texts[tgt]} binarized with the dictionaries of {args.data}\n")
    record = BinarizedPieces(args, key)
    pieces.binarize_train(src, tgt, texts, dictionaries, dest, pieces_dir, pairs, tokens, 1, record,
                          tag="seqkd", what="binarizing", log_path=log_path)
    record.forget()
    pieces.remove_pieces(pieces_dir)
    for lang in (src, tgt):  # what fairseq-preprocess writes beside the data: the dictionaries it used
        Dictionary.load(dictionaries[lang]).save(os.path.join(dest, f"dict.{lang}.txt"))
    shutil.copyfile(log_path, os.path.join(dest, "preprocess.log"))
    # binarized train must hold exactly the kept pairs
    written = count_side(dest, "train", src, tgt, tgt)
    if written != pairs:
        raise DistillError(f"binarized {written} pairs but wrote {pairs}")


def copy_other_splits(data, out, n_train, source=None):
    """Valid/test sets, the subword model and the raw references stay as they were; OUT's
    train split is the new data (whichever split the teacher translated)."""
    for name in os.listdir(data):
        path = os.path.join(data, name)
        if name.startswith("train.") or name.startswith("dict.") or name == "preprocess.log":
            continue
        target = os.path.join(out, name)
        if os.path.isdir(path):
            if not os.path.exists(target):
                shutil.copytree(path, target)
        elif name == META_FILE:
            with open(path) as f:
                meta = json.load(f)
            meta.setdefault("sizes", {})["train"] = n_train
            meta["seqkd_from"] = os.path.abspath(data)
            if source:
                meta["seqkd_monolingual_source"] = os.path.abspath(source)
            with open(target, "w") as f:
                json.dump(meta, f, indent=2)
        else:
            shutil.copy(path, target)
