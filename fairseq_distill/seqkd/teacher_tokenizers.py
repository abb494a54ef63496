"""The tokenizer of a pretrained CTranslate2 teacher (``fsd-seqkd --teacher-ctranslate2 DIR``):
raw text in, the model's source tokens out, and its output tokens back to raw text.

Three kinds, found in the model directory unless ``--teacher-tokenizer`` names one:

* ``plugin``: a model exported with ``fsd-export-ctranslate2`` (its ``fairseq_distill.json``
  names the corpus's sentencepiece model or BPE codes): the corpus's own segmentation.
* ``huggingface``: a Hugging Face tokenizer directory (``tokenizer_config.json``; what
  ``ct2-transformers-converter --copy_files`` puts beside the model), e.g. OPUS-MT's
  ``MarianTokenizer`` or NLLB's; needs the ``transformers`` package. The source language
  (``--teacher-source-prefix``) is set as the tokenizer's ``src_lang``, which places the
  language token where the model expects it.
* ``sentencepiece``: a sentencepiece model file, e.g. OPUS-MT's ``source.spm`` (and
  ``target.spm`` for the output, found beside it). The source prefix token goes first, and the
  model's end-of-sentence token last unless the converted model adds it itself
  (``add_source_eos`` in its ``config.json``), as Hugging Face's tokenizers do.
"""
import importlib.util
import json
import os
from typing import List, Optional

from fairseq_distill.errors import DistillError
from fairseq_distill.text.segmentation import META_FILE, Segmenter, normalize_whitespace

HF_FILES = ("tokenizer_config.json", "tokenizer.json")
SPM_FILES = ("source.spm", "sentencepiece.bpe.model", "spm.model", "sentencepiece.model")
KINDS = ("plugin", "huggingface", "sentencepiece")


def model_config(model_dir: str) -> dict:
    """The converted model's ``config.json`` (special tokens, ``add_source_eos``); {} if absent."""
    path = os.path.join(model_dir, "config.json")
    if not os.path.isfile(path):
        return {}
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def file_record(path: str) -> dict:
    """A file named by name and size (shards may be decoded on other machines)."""
    return {"name": os.path.basename(path), "size": os.path.getsize(path)}


class PluginTokenizer:
    kind = "plugin"

    def __init__(self, directory: str, eos: Optional[str]):
        self.segmenter = Segmenter.from_dir(directory)
        self.eos = eos
        self.record = {"kind": self.kind, **file_record(self.segmenter.model_path)}

    def encode(self, line: str) -> List[str]:
        return self.segmenter.encode(line) + ([self.eos] if self.eos else [])

    def decode(self, tokens: List[str]) -> str:
        return self.segmenter.decode(tokens)


class SentencePieceTokenizer:
    kind = "sentencepiece"

    def __init__(self, source_model: str, target_model: Optional[str], source_prefix: Optional[str],
                 eos: Optional[str]):
        import sentencepiece as spm

        self.source = spm.SentencePieceProcessor(model_file=source_model)
        self.target = spm.SentencePieceProcessor(model_file=target_model) if target_model else self.source
        self.prefix = [source_prefix] if source_prefix else []
        self.eos = [eos] if eos else []
        self.record = {"kind": self.kind, "source": file_record(source_model),
                       "target": file_record(target_model or source_model)}

    def encode(self, line: str) -> List[str]:
        return self.prefix + self.source.encode(normalize_whitespace(line), out_type=str) + self.eos

    def decode(self, tokens: List[str]) -> str:
        return self.target.decode_pieces(tokens)


class HuggingFaceTokenizer:
    kind = "huggingface"

    def __init__(self, directory: str, source_lang: Optional[str]):
        try:
            from transformers import AutoTokenizer
        except ImportError as e:
            raise DistillError(f"{directory} holds a Hugging Face tokenizer, which needs the transformers "
                               f"package (pip install transformers); or name its sentencepiece model with "
                               f"--teacher-tokenizer (e.g. {os.path.join(directory, 'source.spm')})") from e
        self.tokenizer = AutoTokenizer.from_pretrained(directory)
        name = type(self.tokenizer).__name__
        # a many-to-many tokenizer (NLLB, M2M-100) marks the source language with a token
        self.multilingual = hasattr(self.tokenizer, "src_lang")
        if source_lang:
            if not self.multilingual:
                raise DistillError(f"--teacher-source-prefix {source_lang}: the tokenizer in {directory} ({name}) "
                                   f"takes no source language")
            codes = self.language_codes()
            if codes and source_lang not in codes:
                raise DistillError(f"--teacher-source-prefix {source_lang}: not a language of the tokenizer in "
                                   f"{directory} ({name}); it knows {len(codes)}, e.g. {', '.join(codes[:8])}")
            self.tokenizer.src_lang = source_lang
        elif self.multilingual:
            codes = self.language_codes()
            raise DistillError(f"the tokenizer in {directory} ({name}) is multilingual: pass --teacher-source-prefix "
                               f"with the corpus's source language as it names it (it would use "
                               f"'{self.tokenizer.src_lang}'" + (f"; e.g. {', '.join(codes[:8])}" if codes else "") + ")")
        files = sorted(n for n in os.listdir(directory)
                       if n in HF_FILES or n == "vocab.json" or n.endswith((".spm", ".model")))
        self.record = {"kind": self.kind, "class": type(self.tokenizer).__name__,
                       "files": [file_record(os.path.join(directory, n)) for n in files]}

    def language_codes(self) -> List[str]:
        """The languages a multilingual tokenizer knows ([] if it does not say)."""
        return sorted(getattr(self.tokenizer, "lang_code_to_id", None) or [])

    def language_token(self, code: str) -> str:
        """The token that names language ``code`` (M2M-100: ``__en__``; NLLB: the code itself)."""
        try:
            return self.tokenizer.get_lang_token(code)
        except (AttributeError, KeyError):
            return code

    def encode(self, line: str) -> List[str]:
        return self.tokenizer.convert_ids_to_tokens(self.tokenizer.encode(normalize_whitespace(line)))

    def decode(self, tokens: List[str]) -> str:
        return self.tokenizer.decode(self.tokenizer.convert_tokens_to_ids(tokens), skip_special_tokens=True)


def find_tokenizer(model_dir: str) -> str:
    """The tokenizer that lies in the model directory, as a path for :func:`load_tokenizer`."""
    if os.path.isfile(os.path.join(model_dir, META_FILE)):
        return model_dir
    if any(os.path.isfile(os.path.join(model_dir, n)) for n in HF_FILES):
        if importlib.util.find_spec("transformers") is not None:
            return model_dir
        # else a sentencepiece model beside it serves without transformers
    for name in SPM_FILES:
        if os.path.isfile(os.path.join(model_dir, name)):
            return os.path.join(model_dir, name)
    if any(os.path.isfile(os.path.join(model_dir, n)) for n in HF_FILES):
        return model_dir  # load_tokenizer says transformers is needed
    raise DistillError(
        f"--teacher-ctranslate2 {model_dir} holds no tokenizer (looked for {META_FILE}, {', '.join(HF_FILES)}, "
        f"{', '.join(SPM_FILES)}): name it with --teacher-tokenizer (a sentencepiece model or a Hugging Face "
        f"tokenizer directory), or convert the model with ct2-transformers-converter --copy_files and the "
        f"tokenizer's files")


def load_tokenizer(path: str, model_dir: str, source_prefix: Optional[str] = None,
                   target_tokenizer: Optional[str] = None):
    """The tokenizer at ``path`` (a file or directory, see the module docstring) for the model in
    ``model_dir``."""
    config = model_config(model_dir)
    # the model adds </s> itself, or the tokenizer must
    eos = None if config.get("add_source_eos") else config.get("eos_token", "</s>")
    if os.path.isdir(path):
        if os.path.isfile(os.path.join(path, META_FILE)):
            if source_prefix or target_tokenizer:
                raise DistillError("--teacher-source-prefix and --teacher-target-tokenizer do not apply to a model "
                                   "exported by fsd-export-ctranslate2 (its corpus's segmentation is used)")
            return PluginTokenizer(path, eos)
        if any(os.path.isfile(os.path.join(path, n)) for n in HF_FILES):
            if target_tokenizer:
                raise DistillError("--teacher-target-tokenizer applies to a sentencepiece --teacher-tokenizer; "
                                   f"the Hugging Face tokenizer in {path} decodes the output itself")
            return HuggingFaceTokenizer(path, source_prefix)
        raise DistillError(f"--teacher-tokenizer {path} is a directory without {META_FILE} or "
                           f"{' / '.join(HF_FILES)}: name a sentencepiece model file or a Hugging Face tokenizer "
                           f"directory")
    if not os.path.isfile(path):
        raise DistillError(f"--teacher-tokenizer not found: '{path}'")
    if target_tokenizer is None:
        beside = os.path.join(os.path.dirname(path), "target.spm")
        if os.path.basename(path) == "source.spm" and os.path.isfile(beside):
            target_tokenizer = beside  # OPUS-MT: the target side has its own model
    elif not os.path.isfile(target_tokenizer):
        raise DistillError(f"--teacher-target-tokenizer not found: '{target_tokenizer}'")
    try:
        return SentencePieceTokenizer(path, target_tokenizer, source_prefix, eos)
    except (RuntimeError, OSError) as e:
        raise DistillError(f"--teacher-tokenizer {path} is not a sentencepiece model ({e}); name a sentencepiece "
                           f"model file or a Hugging Face tokenizer directory") from e
