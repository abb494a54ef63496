"""IWSLT'14 German-English (TED talks) by the protocol of fairseq's ``prepare-iwslt14.sh``, which
the CKD, A2D and flexible-depth papers' IWSLT'14 numbers come from:

* training pairs from ``train.tags.de-en.{de,en}``: the ``<url>``, ``<talkid>`` and
  ``<keywords>`` lines left out, the ``<title>``/``<description>`` tags removed (their text
  kept), Moses-tokenised, pairs filtered as ``clean-corpus-n.perl -ratio 1.5 … 1 175`` does, then
  lowercased; every 23rd pair (the 23rd, 46th, …) is the validation set, the rest training;
* the test set: the ``<seg>`` text of the TED dev2010, TEDX dev2012, TED tst2010, tst2011 and
  tst2012 XML files, in that order, ``’`` written as ``'``, tokenised and lowercased.

The archive is read as distributed (``de-en.tgz`` holding ``de-en/…``, or a directory with
those files). Every stage is counted and both sides must agree. Besides the protocol's text
the test set is also kept untokenised and in its original case (``test.orig.*``), the
reference for sacreBLEU.
"""
import os
import re
import tarfile
import zlib
from typing import Dict, List, Tuple

from fairseq_distill.corpora.moses import clean_pairs, lowercase, tokenize
from fairseq_distill.errors import DistillError

SRC, TGT = "de", "en"
TRAIN = "train.tags.de-en.{lang}"
TEST_SETS = ("IWSLT14.TED.dev2010", "IWSLT14.TEDX.dev2012", "IWSLT14.TED.tst2010", "IWSLT14.TED.tst2011",
             "IWSLT14.TED.tst2012")
TEST = "{name}.de-en.{lang}.xml"
DROPPED_TAGS = ("<url>", "<talkid>", "<keywords>")
KEPT_TAGS = re.compile(r"</?(title|description)>")
SEGMENT_OPEN, SEGMENT_CLOSE = re.compile(r'<seg id="[0-9]*">\s*'), re.compile(r"\s*</seg>\s*")
# a segment line as the XML files write them, one per line; its id counts within its <doc>
SEGMENT_LINE = re.compile(r'^\s*<seg id="([0-9]+)">.*</seg>\s*$')
DOC_OPEN = re.compile(r'<doc\b[^>]*?(?:docid="([^"]*)")?[^>]*>')
DAMAGED = (tarfile.TarError, EOFError, OSError, zlib.error)
CLEAN = {"min_tokens": 1, "max_tokens": 175, "ratio": 1.5}
VALID_EVERY = 23


class Archive:
    """The files of the distributed archive, by base name: a ``.tgz`` or a directory."""

    def __init__(self, path: str):
        self.path = path
        if os.path.isdir(path):
            self.files = {name: os.path.join(root, name) for root, _, names in os.walk(path) for name in names}
            self.tar = None
        elif os.path.isfile(path) and tarfile.is_tarfile(path):
            try:
                self.tar = tarfile.open(path)
                self.files = {os.path.basename(m.name): m for m in self.tar.getmembers() if m.isfile()}
            except DAMAGED as e:
                raise self.damaged(e) from e
        else:
            raise DistillError(f"--archive {path}: neither a directory nor a tar archive (de-en.tgz)")

    def read_lines(self, name: str) -> List[str]:
        if name not in self.files:
            raise DistillError(f"--archive {self.path} has no file {name}: is it IWSLT'14's de-en.tgz (or the "
                               f"directory it unpacks to)?")
        member = self.files[name]
        if self.tar is None:
            with open(member, "rb") as f:
                data = f.read()
        else:
            try:
                data = self.tar.extractfile(member).read()
            except DAMAGED as e:
                raise self.damaged(e) from e
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as e:
            raise DistillError(f"{self.path}: {name} is not UTF-8 ({e})") from e
        return text.split("\n")[:-1] if text.endswith("\n") else text.split("\n")

    def damaged(self, error) -> DistillError:
        return DistillError(f"--archive {self.path} is damaged (truncated or corrupt: {error or type(error).__name__}); "
                            f"download it again")


def training_lines(lines: List[str]) -> List[str]:
    """The talk text of a ``train.tags`` file: metadata lines dropped, title/description kept."""
    return [KEPT_TAGS.sub("", line) for line in lines if not any(tag in line for tag in DROPPED_TAGS)]


def segments(lines: List[str]) -> List[str]:
    """The ``<seg>`` text of a TED XML file: every line with a ``<seg id`` tag, the tags removed."""
    return [SEGMENT_CLOSE.sub("", SEGMENT_OPEN.sub("", line)).replace("\u2019", "'")
            for line in lines if "<seg id" in line]


def keyed_segments(lines: List[str], name: str) -> Dict[Tuple[str, str], str]:
    """A TED XML file's segments by (document, segment id), in file order, the text as
    :func:`segments` gives it (the protocol's). Refused, naming the file and line: a ``<seg`` that
    is not one whole ``<seg id="N">…</seg>`` line, an id twice in a document, and a file that does
    not end with ``</mteval>`` (truncated)."""
    found: Dict[Tuple[str, str], str] = {}
    doc = "0"
    for number, line in enumerate(lines, 1):
        opened = DOC_OPEN.search(line)
        if opened:
            doc = opened.group(1) or str(int(doc) + 1 if doc.isdigit() else doc + "+")
        if "<seg" not in line:
            continue
        match = SEGMENT_LINE.match(line)
        if not match:
            raise DistillError(f"{name} line {number}: a segment that is not one whole <seg id=\"N\">…</seg> line "
                               f"({line.strip()[:60]!r}); the archive is damaged or not IWSLT'14's")
        key = (doc, match.group(1))
        if key in found:
            raise DistillError(f"{name} line {number}: segment id {key[1]} appears twice in document {doc}")
        found[key] = segments([line])[0]
    last = next((line.strip() for line in reversed(lines) if line.strip()), "")
    if last != "</mteval>":
        raise DistillError(f"{name} ends at line {len(lines)} without </mteval> (its last line: {last[:60]!r}): "
                           f"the file is truncated; download the archive again")
    return found


def paired_segments(archive, name: str) -> Dict[str, List[str]]:
    """Both sides of one TED XML set, paired by document and segment id, in the German file's
    order; a segment on one side only is refused, naming it."""
    sides = {lang: keyed_segments(archive.read_lines(TEST.format(name=name, lang=lang)), TEST.format(name=name, lang=lang))
             for lang in (SRC, TGT)}
    only = {lang: [k for k in sides[lang] if k not in sides[other]] for lang, other in ((SRC, TGT), (TGT, SRC))}
    for lang, keys in only.items():
        if keys:
            doc, seg = keys[0]
            raise DistillError(f"{TEST.format(name=name, lang=lang)}: segment {seg} of document {doc} has no "
                               f"counterpart in the other side's file ({len(keys)} such segment(s)); the archive "
                               f"is damaged or not IWSLT'14's")
    order = list(sides[SRC])
    return {lang: [sides[lang][k] for k in order] for lang in (SRC, TGT)}


def same_count(what: str, counts: Dict[str, int]):
    if len(set(counts.values())) != 1:
        raise DistillError(f"{what}: the sides differ in length ({', '.join(f'{k} {v:,}' for k, v in counts.items())}); "
                           f"the archive is damaged or not IWSLT'14's")


def prepare(archive_path: str, out: str, report=print) -> Dict[str, Dict[str, int]]:
    """Write ``OUT/{train,valid,test}.{de,en}`` (the protocol's text) and ``OUT/test.orig.{de,en}``;
    returns the line count of every stage."""
    archive = Archive(archive_path)
    counts: Dict[str, Dict[str, int]] = {}
    text = {}
    for lang in (SRC, TGT):
        raw = archive.read_lines(TRAIN.format(lang=lang))
        talk = training_lines(raw)
        counts.setdefault("train.tags", {})[lang] = len(raw)
        counts.setdefault("train talk text", {})[lang] = len(talk)
        text[lang] = tokenize(talk, lang)
    same_count("training talk text", counts["train talk text"])
    report(f"[iwslt14] training text: {counts['train talk text'][SRC]:,} pairs from "
           f"{counts['train.tags'][SRC]:,} lines of train.tags (metadata lines left out), tokenised")
    kept, src, tgt = clean_pairs(text[SRC], text[TGT], **CLEAN)
    counts["cleaned"] = {SRC: len(src), TGT: len(tgt)}
    report(f"[iwslt14] cleaned: {len(kept):,} pairs kept, {len(text[SRC]) - len(kept):,} left out "
           f"(1 to {CLEAN['max_tokens']} tokens a side, length ratio at most {CLEAN['ratio']})")
    src, tgt = lowercase(src), lowercase(tgt)
    splits = {"valid": ([], []), "train": ([], [])}
    for i, pair in enumerate(zip(src, tgt), 1):
        target = splits["valid" if i % VALID_EVERY == 0 else "train"]
        target[0].append(pair[0])
        target[1].append(pair[1])
    test: Dict[str, Tuple[List[str], List[str]]] = {}
    orig: Dict[str, List[str]] = {SRC: [], TGT: []}
    for name in TEST_SETS:
        paired = paired_segments(archive, name)
        for lang in (SRC, TGT):
            counts.setdefault(name, {})[lang] = len(paired[lang])
            orig[lang] += paired[lang]
    for lang in (SRC, TGT):
        test[lang] = (orig[lang], lowercase(tokenize(orig[lang], lang)))
    os.makedirs(out, exist_ok=True)
    files = {"train": dict(zip((SRC, TGT), splits["train"])), "valid": dict(zip((SRC, TGT), splits["valid"])),
             "test": {lang: test[lang][1] for lang in (SRC, TGT)},
             "test.orig": {lang: test[lang][0] for lang in (SRC, TGT)}}
    for split, sides in files.items():
        for lang, lines in sides.items():
            with open(os.path.join(out, f"{split}.{lang}"), "w", encoding="utf-8") as f:
                f.writelines(line + "\n" for line in lines)
        counts[split] = {lang: len(lines) for lang, lines in sides.items()}
    report(f"[iwslt14] train {counts['train'][SRC]:,}, valid {counts['valid'][SRC]:,} (every {VALID_EVERY}rd "
           f"cleaned pair), test {counts['test'][SRC]:,} ({' + '.join(f'{counts[n][SRC]:,}' for n in TEST_SETS)} "
           f"segments of {', '.join(n.split('.', 1)[1] for n in TEST_SETS)}) -> {out}")
    return counts
