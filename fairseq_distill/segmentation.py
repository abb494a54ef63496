"""Subword segmentation of raw text and its inverse, as the data was prepared.

``prepare_corpus`` segments losslessly (sentencepiece on raw text, or subword-nmt on
whitespace-split raw text) and records which in ``fairseq_distill.json`` beside the
binarized data; :meth:`Segmenter.from_dir` reads that record, so raw text in → model
tokens, and model tokens → detokenised text, match what training and evaluation saw.
"""
import json
import os
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
    def from_dir(cls, directory: str) -> "Segmenter":
        meta = load_meta(directory)
        if meta is None:
            raise DistillError(f"{directory} has no {META_FILE}: it was not prepared with "
                               f"prepare_corpus, so its subword segmentation is unknown")
        kind = meta.get("bpe")
        model = meta.get("sentencepiece_model") if kind == "sentencepiece" else meta.get("bpe_codes")
        return cls(kind, os.path.join(directory, model or ""))

    def encode(self, line: str) -> List[str]:
        if self.kind == "sentencepiece":
            return self._sp.encode(line, out_type=str)
        return self._bpe.process_line(line.strip()).split()

    def encode_lines(self, lines: List[str]) -> List[str]:
        """Space-joined pieces per line, as fairseq-preprocess reads them."""
        if self.kind == "sentencepiece":
            return [" ".join(pieces) for pieces in self._sp.encode(lines, out_type=str)]
        return [" ".join(self.encode(line)) for line in lines]

    def decode(self, pieces: List[str]) -> str:
        # the same rules as fairseq's --post-process, so both backends detokenise alike
        if self.kind == "sentencepiece":
            return "".join(pieces).replace("\u2581", " ").strip()
        return (" ".join(pieces) + " ").replace("@@ ", "").rstrip()
