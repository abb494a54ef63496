"""Subword segmentation of raw text and its inverse, as the data was prepared.

``prepare_corpus`` segments losslessly (sentencepiece on raw text, or subword-nmt on
whitespace-split raw text) and records which in ``fairseq_distill.json`` beside the
binarized data; :meth:`Segmenter.from_dir` reads that record, so raw text in → model
tokens, and model tokens → detokenised text, match what training and evaluation saw.

Before segmentation every run of whitespace becomes one space (:func:`normalize_whitespace`).
fairseq splits its tokens at any character ``str.isspace()`` accepts (tab, U+00A0, U+2028,
U+0085, ...) and fairseq-preprocess splits lines at a bare ``\\r``: a piece holding such a
character would be lost, or cut its line in two and misalign the corpus.
"""
import contextlib
import io
import json
import os
import re
from typing import List

from fairseq_distill.errors import DistillError

META_FILE = "fairseq_distill.json"
KINDS = ("sentencepiece", "subword_nmt")


def load_meta(directory: str):
    """The metadata written by ``prepare_corpus`` (or copied into a deployment); None if absent."""
    path = os.path.join(directory, META_FILE)
    if not os.path.isfile(path):
        return None
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def subword_models(data_bin: str) -> dict:
    """The subword models ``data_bin`` holds, by kind: subword-nmt codes, sentencepiece models."""
    names = sorted(os.listdir(data_bin))
    found = {"subword_nmt": [n for n in names if n in ("bpe.codes", "codes", "code") or n.endswith(".codes")],
             "sentencepiece": [n for n in names if n.endswith(".model")]}
    return {kind: files for kind, files in found.items() if files}


def find_subword_model(data_bin: str, given, where: str, noun: str = " subword model"):
    """(kind, path) of the subword model ``data_bin``'s text was segmented with: ``given``
    (``--subword-model``), else the one ``fairseq_distill.json`` records, else the only one the
    directory holds; refused otherwise, the message starting with ``where``."""
    if given is None:
        meta = load_meta(data_bin) or {}
        name = meta.get("sentencepiece_model") if meta.get("bpe") == "sentencepiece" else meta.get("bpe_codes")
        if meta.get("bpe") in KINDS and name:
            given = os.path.join(data_bin, name)
    if given is None:
        found = subword_models(data_bin)
        if len(found) != 1 or len(next(iter(found.values()))) != 1:
            held = ", ".join(f for names in found.values() for f in names) or "none"
            raise DistillError(f"{where} {'no' if not found else 'more than one'}{noun} ({held}): pass --subword-model "
                               f"FILE, the sentencepiece .model or subword-nmt codes its text was segmented with")
        given = os.path.join(data_bin, next(iter(found.values()))[0])
    if not os.path.isfile(given):
        raise DistillError(f"--subword-model {given}: no such file")
    return ("sentencepiece" if given.endswith(".model") else "subword_nmt"), given


def normalize_whitespace(line: str) -> str:
    """Runs of whitespace (as fairseq and ``str.split()`` see it) as one space, none at the ends."""
    return " ".join(line.split())


def blank_pieces(pieces: str) -> bool:
    """Whether space-joined subword pieces show nothing once their marks (sentencepiece's U+2581,
    subword-nmt's ``@@``) are removed: no piece, or only whitespace and invisible characters
    (:func:`fairseq_distill.text.files.is_blank`; e.g. a line of U+200B binarized by stock tools)."""
    from fairseq_distill.text.files import is_blank

    return is_blank(pieces.replace("@@", "").replace("\u2581", " "))


class Segmenter:
    def __init__(self, kind: str, model_path: str):
        if kind not in KINDS:
            raise DistillError(f"unknown subword segmentation '{kind}'; known: {', '.join(KINDS)}")
        if not os.path.isfile(model_path):
            raise DistillError(f"{kind} model not found: '{model_path}'")
        self.kind, self.model_path = kind, model_path
        if kind == "sentencepiece":
            import sentencepiece as spm

            self._sp = spm.SentencePieceProcessor(model_file=model_path)
        else:
            from subword_nmt.apply_bpe import BPE

            with open(model_path, encoding="utf-8") as f:
                self._bpe = BPE(f)

    @classmethod
    def from_dir(cls, directory: str, side: str = "source") -> "Segmenter":
        """The segmentation of ``directory``'s text; ``side="target"``: of its target text, which
        has a model of its own where the data speaks a Marian teacher's vocabulary."""
        meta = load_meta(directory)
        if meta is None:
            raise DistillError(f"{directory} has no {META_FILE}: it was not prepared with "
                               f"prepare_corpus, so its subword segmentation is unknown")
        kind = meta.get("bpe")
        model = meta.get("sentencepiece_model") if kind == "sentencepiece" else meta.get("bpe_codes")
        target_model = (meta.get("teacher_vocabulary") or {}).get("target_sentencepiece_model")
        if side == "target" and target_model:
            model = target_model
        return cls(kind, os.path.join(directory, model or ""))

    def encode(self, line: str) -> List[str]:
        line = normalize_whitespace(line)
        if self.kind == "sentencepiece":
            return self._sp.encode(line, out_type=str)
        return self._bpe.process_line(line).split()

    def encode_lines(self, lines: List[str]) -> List[str]:
        """Space-joined pieces per line, as fairseq-preprocess reads them: no line holds a
        character that fairseq reads as a line or token break, other than the spaces."""
        if self.kind == "sentencepiece":
            normalized = [normalize_whitespace(line) for line in lines]
            return [" ".join(pieces) for pieces in self._sp.encode(normalized, out_type=str)]
        return [" ".join(self.encode(line)) for line in lines]

    def decode(self, pieces: List[str]) -> str:
        # the same rules as fairseq's --post-process, so both backends detokenise alike
        if self.kind == "sentencepiece":
            return "".join(pieces).replace("\u2581", " ").strip()
        return (" ".join(pieces) + " ").replace("@@ ", "").rstrip()


# learning the subword models fsd-prepare-corpus segments with
def train_sentencepiece(train_text, model_prefix, vocab_size, model_type):
    import sentencepiece as spm

    try:
        spm.SentencePieceTrainer.train(
            input=train_text,
            model_prefix=model_prefix,
            vocab_size=vocab_size,
            model_type=model_type,
            character_coverage=1.0,
            # fairseq's dictionary adds its own specials; keep sentencepiece's ids out of the way
            bos_id=-1,
            eos_id=-1,
            unk_id=0,
            pad_id=-1,
            minloglevel=2,
        )
    except RuntimeError as e:
        raise vocab_size_error(str(e), vocab_size) from e
    return model_prefix + ".model"


def vocab_size_error(message, vocab_size):
    """sentencepiece's complaint about the vocabulary size, as a DistillError naming the limit."""
    too_high = re.search(r"Please set it to a value <= (\d+)", message)
    if too_high:
        return DistillError(
            f"--vocab-size {vocab_size} is more than sentencepiece can make from this training data; "
            f"use at most {too_high.group(1)} (or more training data)")
    too_low = re.search(r"smaller than required_chars\. \d+ vs (\d+)", message)
    if too_low:
        # character_coverage=1.0 keeps every character as a piece, plus the one special piece <unk>
        smallest = int(too_low.group(1)) + 1
        return DistillError(
            f"--vocab-size {vocab_size} is too small: the training data has {too_low.group(1)} distinct "
            f"characters, each needs a piece of its own, plus <unk>; use at least {smallest}")
    return DistillError(f"sentencepiece could not train with --vocab-size {vocab_size}: {message}")


def learn_subword_nmt(train_text, codes_path, num_merges):
    from subword_nmt.learn_bpe import learn_bpe

    # newline="\n": learn from the lines as they were read, not re-split at a bare \r
    # its progress bar (one tick per merge, on stderr) would scroll through a log: one line per
    # stage is printed instead
    with open(train_text, encoding="utf-8", newline="\n") as inp, \
            open(codes_path, "w", encoding="utf-8") as out, contextlib.redirect_stderr(io.StringIO()):
        learn_bpe(inp, out, num_merges)
    return codes_path
