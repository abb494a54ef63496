"""WMT English→German by the protocols the papers' WMT numbers come from
(``fsd-benchmark-corpus wmt14_en_de|wmt16_en_de``). Both use the same ≈4.5M-pair training data
(Europarl v7, Common Crawl, News Commentary) and test on the full newstest2014 (3,003
sentences); they differ in the News Commentary release, the validation set and the cleaning.

``wmt14_en_de`` (CKD, A2D: "follows Vaswani et al. (2017)"; SentencePiece; newstest2013 /
newstest2014): the WMT'14 training data as fairseq's ``prepare-wmt14en2de.sh --icml17`` takes
it (News Commentary v9), cleaned as that script does:

* training text: ``normalize-punctuation.perl -l LANG`` (sacremoses, perl parity), then
  ``remove-non-printing-char.perl`` (every ``\\p{C}`` character written as a space); not
  Moses-tokenised (the papers segment with SentencePiece, which works on raw text; CKD's
  released code detokenises with the SentencePiece model alone), not lowercased;
* pairs filtered as ``clean-corpus-n.perl -ratio 1.5 … 1 250`` does, on whitespace-separated
  words (fairseq's script applies it after BPE, to subword tokens);
* validation newstest2013, test newstest2014 (``test-full``): the ``<seg>`` text, ``’`` written
  as ``'`` (fairseq's treatment of its test set).

``wmt16_en_de`` (GPKD: "WMT'16 En-De", ≈4.5M tokenised pairs, 32K joint BPE merges; newstest2016
/ newstest2014): the Google-prepared "WMT'16 En-De" bundle's protocol (``wmt16_en_de.sh``, the
data fairseq's and Wang et al.'s deep-Transformer work call WMT'16), News Commentary v11:

* every text Moses-tokenised (``tokenizer.perl -l LANG``, no aggressive hyphen splitting, so
  the compound-split BLEU sees ``rich-text`` as one token), not normalised, not lowercased;
* training pairs filtered as ``clean-corpus-n.perl … 1 80`` does (its default length ratio 9);
* validation newstest2016 (GPKD's choice; the bundle's is newstest2013), test newstest2014.

Both drop, as ``clean-corpus-n.perl`` does, a pair with a word longer than 1,000 characters.
The archives are read as distributed: a directory holding them (under any file names) and/or
what they unpack to, each file found by its path inside the archive. Every stage is counted,
its output checked against its input, and both sides must agree. Besides the protocol's text,
the test set is kept as the ``<seg>`` text (``test.orig.*``), the references for sacreBLEU.
"""
import os
import re
import shutil
import tarfile
import zlib
from dataclasses import dataclass
from typing import Callable, Dict, List, Sequence, Tuple

from fairseq_distill.corpora import wmt_training
from fairseq_distill.corpora.moses import tokenize
from fairseq_distill.corpora.wmt_training import (MAX_WORD_LENGTH, PARTS_DIR, normalise_punctuation,  # noqa: F401
                                                  remove_non_printing)
from fairseq_distill.errors import DistillError

SRC, TGT = "en", "de"
LANGS = (SRC, TGT)
ARCHIVE_SUFFIXES = (".tgz", ".tar.gz", ".tar")


@dataclass(frozen=True)
class Part:
    """A parallel corpus or an evaluation set: each side's path inside its official archive
    (matched as the whole path or its end, ``…/PATH``)."""

    name: str
    archive: str              # the official archive's file name, for messages and search order
    files: Tuple[str, str]    # (en, de)
    sgm: bool = False


EUROPARL = Part("europarl-v7", "training-parallel-europarl-v7.tgz",
                ("europarl-v7.de-en.en", "europarl-v7.de-en.de"))
COMMONCRAWL = Part("commoncrawl", "training-parallel-commoncrawl.tgz",
                   ("commoncrawl.de-en.en", "commoncrawl.de-en.de"))
NEWS_COMMENTARY_V9 = Part("news-commentary-v9", "training-parallel-nc-v9.tgz",
                          ("news-commentary-v9.de-en.en", "news-commentary-v9.de-en.de"))
NEWS_COMMENTARY_V11 = Part("news-commentary-v11", "training-parallel-nc-v11.tgz",
                           ("news-commentary-v11.de-en.en", "news-commentary-v11.de-en.de"))
NEWSTEST2013 = Part("newstest2013", "dev.tgz", ("newstest2013-src.en.sgm", "newstest2013-ref.de.sgm"), sgm=True)
NEWSTEST2016 = Part("newstest2016", "dev.tgz", ("newstest2016-ende-src.en.sgm", "newstest2016-ende-ref.de.sgm"),
                    sgm=True)
# the full set (3,003 sentences, sacreBLEU's wmt14/full), not test-filtered.tgz's 2,737 nor dev.tgz's copy
NEWSTEST2014 = Part("newstest2014", "test-full.tgz",
                    ("test-full/newstest2014-deen-src.en.sgm", "test-full/newstest2014-deen-ref.de.sgm"), sgm=True)


@dataclass(frozen=True)
class Protocol:
    name: str
    training: Tuple[Part, ...]
    valid: Part
    test: Part
    normalise_punctuation: bool   # normalize-punctuation.perl on the training text
    remove_non_printing: bool     # remove-non-printing-char.perl on the training text
    tokenise: bool                # tokenizer.perl on every text
    test_apostrophe: bool         # ’ written as ' in the validation and test input
    clean: Tuple[int, int, float]  # clean-corpus-n.perl: MIN, MAX tokens a side, -ratio


WMT14_EN_DE = Protocol("wmt14_en_de", (EUROPARL, COMMONCRAWL, NEWS_COMMENTARY_V9), NEWSTEST2013, NEWSTEST2014,
                       normalise_punctuation=True, remove_non_printing=True, tokenise=False,
                       test_apostrophe=True, clean=(1, 250, 1.5))
WMT16_EN_DE = Protocol("wmt16_en_de", (EUROPARL, COMMONCRAWL, NEWS_COMMENTARY_V11), NEWSTEST2016, NEWSTEST2014,
                       normalise_punctuation=False, remove_non_printing=False, tokenise=True,
                       test_apostrophe=False, clean=(1, 80, 9.0))
PROTOCOLS = {p.name: p for p in (WMT14_EN_DE, WMT16_EN_DE)}


# ---------------------------------------------------------------------------------------------
# the archives


def _inside(path: str, suffix: str) -> bool:
    path = path.replace(os.sep, "/")
    path = path[2:] if path.startswith("./") else path
    return path == suffix or path.endswith("/" + suffix)


def _lines(data: bytes, where: str, report: Callable[[str], None]) -> List[str]:
    """A file's lines as ``wc -l`` counts them (split at ``\\n`` only); invalid UTF-8 is read as
    U+FFFD, with a message, as Moses' perl scripts read past it."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        report(f"[wmt] warning: {where} is not valid UTF-8 (first at line {line:,}: {e.reason}); invalid bytes "
               f"read as U+FFFD")
        text = data.decode("utf-8", errors="replace")
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return lines


class Sources:
    """The official archives: a directory holding them (``.tgz``, ``.tar.gz`` or ``.tar``, under
    any names, in subdirectories too) and/or the files they unpack to, or one archive. A file is
    looked for among the unpacked files first, then in the archives, the part's official archive
    first; each archive is read once, front to back, until what is wanted from it is found."""

    def __init__(self, path: str, report: Callable[[str], None] = print):
        self.path, self.report = path, report
        self.files: List[str] = []
        self.archives: List[str] = []
        if os.path.isdir(path):
            for root, dirs, names in os.walk(path):
                dirs.sort()
                for name in sorted(names):
                    full = os.path.join(root, name)
                    (self.archives if name.endswith(ARCHIVE_SUFFIXES) else self.files).append(full)
        elif os.path.isfile(path) and tarfile.is_tarfile(path):
            self.archives = [path]
        else:
            raise DistillError(f"--archive {path}: neither a directory (holding the official WMT archives or what "
                               f"they unpack to) nor a tar archive")

    def read(self, part: Part) -> Dict[str, Tuple[str, List[str]]]:
        """Each side of ``part``: ``{lang: (where it was found, its lines)}``."""
        missing = dict(zip(LANGS, part.files))
        found: Dict[str, Tuple[str, bytes]] = {}
        for lang, suffix in list(missing.items()):
            for f in self.files:
                if _inside(os.path.relpath(f, self.path) if os.path.isdir(self.path) else f, suffix):
                    with open(f, "rb") as handle:
                        found[lang] = (f, handle.read())
                    del missing[lang]
                    break
        for archive in sorted(self.archives, key=lambda a: os.path.basename(a) != part.archive):
            if not missing:
                break
            self._scan(archive, missing, found)
        if missing:
            names = ", ".join(missing.values())
            raise DistillError(f"--archive {self.path} has no {names} ({part.name}, in the official {part.archive}): "
                               f"pass the directory that holds the official archives (or what they unpack to)")
        return {lang: (where, _lines(data, where, self.report)) for lang, (where, data) in found.items()}

    def locate(self, part: Part) -> Dict[str, "wmt_training.Side"]:
        """Each side of ``part`` as a file to stream (:class:`wmt_training.Side`): an unpacked file
        is read where it lies; a file inside an archive is copied out when it is needed."""
        missing = dict(zip(LANGS, part.files))
        found: Dict[str, wmt_training.Side] = {}
        for lang, suffix in list(missing.items()):
            for f in self.files:
                if _inside(os.path.relpath(f, self.path) if os.path.isdir(self.path) else f, suffix):
                    found[lang] = wmt_training.Side(f, os.path.getsize(f), f)
                    del missing[lang]
                    break
        for archive in sorted(self.archives, key=lambda a: os.path.basename(a) != part.archive):
            if not missing:
                break
            members: Dict[str, tarfile.TarInfo] = {}
            self._scan(archive, missing, members, names_only=True)
            for lang, member in members.items():
                found[lang] = wmt_training.Side(f"{archive}:{member.name}", member.size, archive, member.name)
        if missing:
            names = ", ".join(missing.values())
            raise DistillError(f"--archive {self.path} has no {names} ({part.name}, in the official {part.archive}): "
                               f"pass the directory that holds the official archives (or what they unpack to)")
        return found

    @staticmethod
    def _scan(archive: str, missing: Dict[str, str], found: dict, names_only: bool = False):
        """Fill ``found`` with ``{lang: (where, bytes)}``, or with ``{lang: member name}`` when
        ``names_only``, for the files of ``missing`` in ``archive``."""
        try:
            with tarfile.open(archive, "r|*") as tar:   # a stream: read front to back, once
                for member in tar:
                    if not member.isfile():
                        continue
                    for lang, suffix in list(missing.items()):
                        if _inside(member.name, suffix):
                            found[lang] = member if names_only else \
                                (f"{archive}:{member.name}", tar.extractfile(member).read())
                            del missing[lang]
                    if not missing:
                        break
        except (tarfile.TarError, EOFError, zlib.error, OSError) as e:
            raise DistillError(f"{archive}: not a readable tar archive ({e}): a damaged or unfinished download? "
                               f"Remove it and fetch it again") from e


SEGMENT = re.compile(r"^\s*<seg[^>]*>\s*(.*?)\s*</seg>\s*$")
SEGMENT_LINE = re.compile(r"<seg[\s>]")


def sgm_segments(lines: Sequence[str], where: str) -> List[str]:
    """The ``<seg id="…">…</seg>`` text of a WMT SGML file, in order, tags and surrounding
    whitespace removed (what fairseq's scripts, ``input-from-sgm.perl`` and sacreBLEU take)."""
    segments = []
    for number, line in enumerate(lines, 1):
        if not SEGMENT_LINE.search(line):
            continue
        match = SEGMENT.match(line)
        if not match:
            raise DistillError(f"{where}:{number}: a <seg> line that is not one <seg id=\"…\">text</seg>: "
                               f"{line[:100]!r}")
        segments.append(match.group(1))
    return segments


def evaluation_text(protocol: Protocol, segments: List[str], lang: str) -> List[str]:
    """The model's input form of a validation or test side."""
    lines = [s.replace("\u2019", "'") for s in segments] if protocol.test_apostrophe else list(segments)
    if protocol.tokenise:
        lines = tokenize(lines, lang)
    return [" ".join(line.split()) for line in lines]


# ---------------------------------------------------------------------------------------------
# the protocol


def same_count(what: str, counts: Dict[str, int], hint: str = "the archive is damaged or not the official one"):
    if len(set(counts.values())) != 1:
        raise DistillError(f"{what}: the sides differ in length ({', '.join(f'{k} {v:,}' for k, v in counts.items())}); "
                           f"{hint}")


def write_checked(path: str, lines: Sequence[str], mode: str = "w") -> int:
    """Write ``lines`` and count them back as ``wc -l`` would: a line that would break in two
    stops here, naming it."""
    bad = next((i for i, line in enumerate(lines) if "\n" in line or "\r" in line), None)
    if bad is not None:
        raise DistillError(f"{path}: line {bad + 1} holds a line break after the protocol's steps: {lines[bad][:100]!r}")
    with open(path, mode, encoding="utf-8", newline="\n") as f:
        f.writelines(line + "\n" for line in lines)
    return len(lines)


def count_lines(path: str) -> int:
    with open(path, "rb") as f:
        return sum(block.count(b"\n") for block in iter(lambda: f.read(1 << 20), b""))


def prepare(protocol: Protocol, archive_path: str, out: str, report: Callable[[str], None] = print,
            workers: int = 1) -> Dict[str, Dict[str, int]]:
    """Write ``OUT/{train,valid,test}.{en,de}`` (the protocol's text) and ``OUT/test.orig.{en,de}``
    (the test set's ``<seg>`` text); returns the line count of every stage, per side."""
    if workers < 1:
        raise DistillError(f"--workers must be at least 1, got {workers}")
    tag = f"[{protocol.name}]"
    sources = Sources(archive_path, report)
    counts: Dict[str, Dict[str, int]] = {}
    os.makedirs(out, exist_ok=True)
    train_paths = {lang: os.path.join(out, f"train.{lang}") for lang in LANGS}
    parts_dir = os.path.join(out, PARTS_DIR)
    os.makedirs(parts_dir, exist_ok=True)
    min_tokens, max_tokens, ratio = protocol.clean
    steps = [name for name, on in (("punctuation normalised", protocol.normalise_punctuation),
                                   ("non-printing characters removed", protocol.remove_non_printing),
                                   ("Moses-tokenised", protocol.tokenise)) if on]
    pool = None
    if workers > 1:
        import multiprocessing

        pool = multiprocessing.get_context("fork").Pool(workers)
    try:
        for part in protocol.training:
            sides = sources.locate(part)
            part_counts = wmt_training.clean_part(protocol, part, [sides[lang] for lang in LANGS], LANGS,
                                                  parts_dir, pool, workers, report)
            where = sides[SRC].where
            counts[part.name] = part_counts[part.name]
            same_count(f"{part.name} ({sides[SRC].where}, {sides[TGT].where})", counts[part.name])
            kept = counts[f"{part.name} cleaned"] = part_counts[f"{part.name} cleaned"]
            n = counts[part.name][SRC]
            long_words = part_counts["dropped"].get("long_word", 0)
            report(f"{tag} {part.name} ({where}, .{TGT}): {n:,} pairs{', ' if steps else ''}{', '.join(steps)}; "
                   f"{kept[SRC]:,} kept, "
                   f"{n - kept[SRC]:,} left out ({min_tokens} to {max_tokens} tokens a side, length ratio at most "
                   f"{ratio:g}, no word over {MAX_WORD_LENGTH:,} characters: {long_words:,} for that)")
    finally:
        if pool is not None:
            pool.close()
            pool.join()
    wmt_training.join_parts(parts_dir, [p.name for p in protocol.training], LANGS, train_paths)
    counts["training"] = {lang: sum(counts[p.name][lang] for p in protocol.training) for lang in LANGS}
    counts["cleaned"] = {lang: sum(counts[f"{p.name} cleaned"][lang] for p in protocol.training) for lang in LANGS}

    for split, part in (("valid", protocol.valid), ("test", protocol.test)):
        sides = sources.read(part)
        segments = {lang: sgm_segments(sides[lang][1], sides[lang][0]) for lang in LANGS}
        counts[part.name] = {lang: len(segments[lang]) for lang in LANGS}
        same_count(f"{part.name} ({sides[SRC][0]}, {sides[TGT][0]})", counts[part.name])
        for lang in LANGS:
            write_checked(os.path.join(out, f"{split}.{lang}"), evaluation_text(protocol, segments[lang], lang))
            if split == "test":
                write_checked(os.path.join(out, f"test.orig.{lang}"), segments[lang])

    for split in ("train", "valid", "test", "test.orig"):
        counts[split] = {lang: count_lines(os.path.join(out, f"{split}.{lang}")) for lang in LANGS}
        same_count(f"{out}/{split}.*", counts[split], "a file was changed while it was written")
    if counts["train"][SRC] != counts["cleaned"][SRC]:
        raise DistillError(f"{out}/train.{SRC} has {counts['train'][SRC]:,} lines, the cleaning kept "
                           f"{counts['cleaned'][SRC]:,} pairs")
    for split, part in (("valid", protocol.valid), ("test", protocol.test)):
        if counts[split][SRC] != counts[part.name][SRC]:
            raise DistillError(f"{out}/{split}.{SRC} has {counts[split][SRC]:,} lines, {part.name} "
                               f"{counts[part.name][SRC]:,} segments")
    shutil.rmtree(parts_dir)   # the cleaned parts are in train.*, checked: no need to resume any more
    kept = " + ".join(f"{counts[p.name + ' cleaned'][SRC]:,}" for p in protocol.training)
    report(f"{tag} train {counts['train'][SRC]:,} of {counts['training'][SRC]:,} pairs ({kept} from "
           f"{', '.join(p.name for p in protocol.training)}), valid {counts['valid'][SRC]:,} "
           f"({protocol.valid.name}), test {counts['test'][SRC]:,} ({protocol.test.name}; the full set has 3,003) "
           f"-> {out}")
    return counts


def prepare_wmt14_en_de(archive_path: str, out: str, report: Callable[[str], None] = print,
                        workers: int = 1) -> Dict[str, Dict[str, int]]:
    """WMT'14 En→De as CKD and A2D use it (see the module's description)."""
    return prepare(WMT14_EN_DE, archive_path, out, report, workers)


def prepare_wmt16_en_de(archive_path: str, out: str, report: Callable[[str], None] = print,
                        workers: int = 1) -> Dict[str, Dict[str, int]]:
    """GPKD's "WMT'16" En→De (see the module's description)."""
    return prepare(WMT16_EN_DE, archive_path, out, report, workers)


PREPARE: Dict[str, Callable[..., Dict[str, Dict[str, int]]]] = {
    "wmt14_en_de": prepare_wmt14_en_de,
    "wmt16_en_de": prepare_wmt16_en_de,
}
