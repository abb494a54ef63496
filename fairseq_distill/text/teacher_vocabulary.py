"""A Hugging Face teacher's vocabulary (MarianMT, M2M100/NLLB-200): which model directories can
teach, the tokenizer's pieces and special tokens, how a data-bin's symbols map onto the teacher's
ids, and what ``fsd-prepare-corpus --vocabulary-from MODEL_DIR`` needs to prepare data in those
pieces. Read by the teacher itself (:mod:`fairseq_distill.teacher.huggingface`), by data
preparation and by seq-KD; ``transformers`` is imported only when a tokenizer is loaded."""
import json
import logging
import os
from typing import Dict, List, Optional, Sequence

from fairseq_distill.errors import DistillError

logger = logging.getLogger(__name__)

# config.json's model_type -> what users call the family
FAMILIES = {"marian": "MarianMT (OPUS-MT)", "m2m_100": "M2M100 / NLLB-200"}
WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin", "model.safetensors.index.json",
                "pytorch_model.bin.index.json")
INSTALL = "pip install 'fairseq_distill[teachers]' (or: pip install transformers sentencepiece)"
# the data-bin's record (fairseq_distill.json) of the teacher whose vocabulary its data speaks
META_KEY = "teacher_vocabulary"


def is_model_dir(path: str) -> bool:
    """A Hugging Face model directory: config.json beside weights."""
    if not os.path.isdir(path):
        return False
    names = set(os.listdir(path))
    return "config.json" in names and bool(names & set(WEIGHT_FILES))


def require_transformers():
    try:
        import transformers  # noqa: F401
    except ImportError as e:
        raise DistillError(f"a Hugging Face teacher needs the transformers package, which is not installed: "
                           f"{INSTALL}") from e
    return transformers


def model_config(path: str) -> dict:
    try:
        with open(os.path.join(path, "config.json"), encoding="utf-8") as f:
            config = json.load(f)
    except (OSError, ValueError) as e:
        raise DistillError(f"teacher {path}: cannot read its config.json ({e})") from e
    family = config.get("model_type")
    if family not in FAMILIES:
        known = ", ".join(f"{k} ({v})" for k, v in FAMILIES.items())
        raise DistillError(f"teacher {path} is a Hugging Face '{family}' model; the families that can teach "
                           f"are {known}")
    if not config.get("is_encoder_decoder", True):
        raise DistillError(f"teacher {path} is not an encoder-decoder model")
    return config


# -- the teacher's vocabulary -----------------------------------------------------------------------

def load_tokenizer(path: str):
    """The model directory's tokenizer, or None where it has none (a vocab.json may still name
    its pieces, :func:`teacher_vocabulary`)."""
    transformers = require_transformers()
    try:
        return transformers.AutoTokenizer.from_pretrained(path)
    except Exception as e:  # no tokenizer files, or a tokenizer this transformers cannot build
        logger.debug(f"no tokenizer in {path}: {type(e).__name__}: {e}")
        return None


def special_tokens(tokenizer) -> set:
    """The tokenizer's special tokens, language codes included (M2M100's tokenizer keeps its codes
    out of both get_vocab and all_special_tokens, in lang_token_to_id)."""
    tokens = set(tokenizer.all_special_tokens)
    tokens |= set(getattr(tokenizer, "additional_special_tokens", None) or [])
    tokens |= set(getattr(tokenizer, "lang_token_to_id", None) or {})
    return tokens


def teacher_vocabulary(path: str, tokenizer=None) -> Dict[str, int]:
    """piece -> teacher id: the tokenizer's vocabulary and special tokens, else the directory's vocab.json."""
    if tokenizer is not None:
        vocab = dict(tokenizer.get_vocab())
        for token in special_tokens(tokenizer):
            if token not in vocab:
                vocab[token] = tokenizer.convert_tokens_to_ids(token)
        return vocab
    vocab_file = os.path.join(path, "vocab.json")
    if os.path.isfile(vocab_file):
        with open(vocab_file, encoding="utf-8") as f:
            return json.load(f)
    raise DistillError(f"teacher {path} has no tokenizer and no vocab.json, so its ids cannot be matched to "
                       f"the data's symbols: save the tokenizer beside the model (tokenizer.save_pretrained("
                       f"'{path}'))")


def never_targets(config: dict, tokenizer, vocab: Dict[str, int]) -> set:
    """Teacher ids that are never a target after the first position: padding, <s> where it is
    not </s>, the decoder's start symbol, and every special token but </s> and <unk> (language
    codes, <mask>)."""
    eos, unk = config.get("eos_token_id"), vocab.get("<unk>")
    ids = {config.get("pad_token_id"), config.get("decoder_start_token_id"), config.get("bos_token_id")}
    if tokenizer is not None:
        ids |= {vocab[t] for t in special_tokens(tokenizer) if t in vocab}
    else:
        ids |= {i for piece, i in vocab.items() if piece.startswith("__") and piece.endswith("__")}
    return {i for i in ids if i is not None and i != eos and i != unk}


def symbol_map(symbols: Sequence[str], vocab: Dict[str, int], config: dict) -> List[Optional[int]]:
    """Each student symbol's teacher id (None: the teacher has no such piece). fairseq's own
    four specials map onto the teacher's </s>, <unk>, <pad> and <s> by role, not by spelling."""
    by_role = {"</s>": config.get("eos_token_id"), "<pad>": config.get("pad_token_id"),
               "<unk>": vocab.get("<unk>"), "<s>": vocab.get("<s>")}
    return [by_role[s] if i < 4 and s in by_role else vocab.get(s) for i, s in enumerate(symbols)]


def unmatched_symbols(symbols: Sequence[str], mapped: Sequence[Optional[int]]) -> List[str]:
    """Symbols of the data the teacher does not have (fairseq's padding ``madeupword`` symbols
    and <s> are allowed: they never occur in the data)."""
    return [s for i, (s, m) in enumerate(zip(symbols, mapped))
            if m is None and i >= 4 and not s.startswith("madeupword")]


def check_vocabulary(side: str, dictionary, mapped, path: str):
    missing = unmatched_symbols(dictionary.symbols, mapped)
    if missing:
        shown = ", ".join(repr(s) for s in missing[:5])
        raise DistillError(
            f"teacher {path}: {len(missing):,} of the data's {len(dictionary.symbols):,} {side} symbols are not in "
            f"the teacher's vocabulary (e.g. {shown}): the data was made with another vocabulary than the "
            f"teacher's. Prepare it with the teacher's tokenizer: fsd-prepare-corpus --vocabulary-from {path}")


# -- data in the teacher's vocabulary (fsd-prepare-corpus --vocabulary-from MODEL_DIR) -------------

def segmentation_models(path: str, family: str):
    """(source, target) sentencepiece models the teacher's tokenizer segments with: Marian has
    one per side (source.spm, target.spm), M2M100/NLLB one for both."""
    names = sorted(os.listdir(path))
    if family == "marian":
        pair = [os.path.join(path, n) for n in ("source.spm", "target.spm")]
        if all(os.path.isfile(p) for p in pair):
            return tuple(pair)
    else:
        models = [n for n in names if n.endswith(".model")]
        if len(models) == 1:
            return (os.path.join(path, models[0]),) * 2
    raise DistillError(f"--vocabulary-from {path}: the teacher's sentencepiece model{'s' if family == 'marian' else ''} "
                       f"({'source.spm and target.spm' if family == 'marian' else 'one .model file'}) are not in the "
                       f"model directory (it holds {', '.join(names)}): save the tokenizer beside the model "
                       f"(tokenizer.save_pretrained), as the model's own repository has it")


def language_code(path: str, tokenizer, vocab, option: str, lang: str, given: Optional[str]) -> str:
    """The teacher's code for ``lang`` (M2M100 ``__de__``, NLLB ``deu_Latn``), or ``given``."""
    specials = special_tokens(tokenizer)
    candidates = [given] if given else [f"__{lang}__", lang]
    for code in candidates:
        if code in vocab and (code in specials or given):
            return code
    known = sorted(t for t in specials if t in vocab and t not in ("<s>", "<pad>", "</s>", "<unk>", "<mask>"))
    raise DistillError(f"{option} {lang}: the teacher {path} has no language code "
                       f"{' or '.join(repr(c) for c in candidates)} (its codes include "
                       f"{', '.join(known[:8]) or 'none'}); pass --teacher-languages SRC_CODE TGT_CODE with two of them")


def prepared_vocabulary(path: str, src: str, tgt: str, codes=None) -> dict:
    """What ``fsd-prepare-corpus --vocabulary-from MODEL_DIR`` needs of a Hugging Face teacher:
    its family, the sentencepiece models of each side, the language codes it reads (M2M100/NLLB;
    from -s/-t or ``codes``), and its vocabulary (piece -> id)."""
    config = model_config(path)
    tokenizer = load_tokenizer(path)
    if tokenizer is None:
        raise DistillError(f"--vocabulary-from {path}: the model directory has no tokenizer that transformers "
                           f"can load, so the data cannot be segmented as the teacher reads it: save the "
                           f"tokenizer beside the model (tokenizer.save_pretrained('{path}'))")
    vocab = teacher_vocabulary(path, tokenizer)
    family = config["model_type"]
    source_model, target_model = segmentation_models(path, family)
    record = {"model": os.path.abspath(path), "family": family, "pieces": len(vocab),
              "source_code": None, "target_code": None}
    if codes and family == "marian":
        raise DistillError(f"--teacher-languages: the teacher {path} is a MarianMT model, which reads no language "
                           f"codes (a multilingual OPUS-MT model reads its target code, e.g. >>fra<<, in the source text)")
    if family == "marian":
        # an OPUS-MT tokenizer names its pair (tokenizer_config.json: source_lang, target_lang)
        for option, lang, named in (("--source-lang", src, getattr(tokenizer, "source_lang", None)),
                                    ("--target-lang", tgt, getattr(tokenizer, "target_lang", None))):
            if named and str(named).split("_")[0].lower() != lang.split("_")[0].lower():
                raise DistillError(f"{option} {lang}: the teacher {path} translates {tokenizer.source_lang} -> "
                                   f"{tokenizer.target_lang} (its tokenizer_config.json); give -s "
                                   f"{tokenizer.source_lang} -t {tokenizer.target_lang}, or that pair's teacher")
    else:
        given = codes or (None, None)
        record["source_code"] = language_code(path, tokenizer, vocab, "--source-lang", src, given[0])
        record["target_code"] = language_code(path, tokenizer, vocab, "--target-lang", tgt, given[1])
    return {"record": record, "vocab": vocab, "models": (source_model, target_model)}


# a Marian teacher's target-side sentencepiece model in the data-bin (not named .model: the
# data-bin's one subword model, for the source, which translating needs, stays the only one)
TARGET_SENTENCEPIECE = "target.spm"


# the pieces ``--teacher-pieces N`` left out of the data-bin's dictionary, one "piece count" line
# each, most frequent first: the teacher puts its mass on them into the student's <unk>
TRIMMED_PIECES = "teacher_pieces_trimmed.txt"


def keep_teacher_pieces(dictionary_dir, langs, teacher, most: Optional[int] = None) -> dict:
    """Drop from the joined dictionary the pieces the teacher's vocabulary lacks (they binarize as
    <unk>) and, with ``most``, all but the ``most`` most frequent of the rest (they binarize as
    <unk> too, and are listed in ``TRIMMED_PIECES`` beside the dictionary). Returns what the
    teacher's record states: the pieces kept, and how many pieces and occurrences each rule
    turned into <unk>, of how many occurrences in all."""
    vocab = teacher["vocab"]
    record = {"unknown_pieces": 0, "unknown_occurrences": 0, "piece_occurrences": 0}
    trimmed: List[str] = []
    for i, lang in enumerate(langs):
        path = os.path.join(dictionary_dir, f"dict.{lang}.txt")
        with open(path, encoding="utf-8") as f:
            lines = f.read().splitlines()
        keep, taught, dropped = [], 0, []
        for line in lines:  # fairseq writes the most frequent first
            piece, count = line.rsplit(" ", 1)
            if piece.startswith("madeupword"):  # fairseq's padding symbols
                keep.append(line)
                continue
            if i == 0:
                record["piece_occurrences"] += int(count)
            if piece not in vocab:
                if i == 0:
                    record["unknown_pieces"] += 1
                    record["unknown_occurrences"] += int(count)
            elif most is not None and taught >= most:
                dropped.append(line)
            else:
                keep.append(line)
                taught += 1
        with open(path, "w", encoding="utf-8") as f:
            f.write("".join(line + "\n" for line in keep))
        record["kept_pieces"] = taught
        trimmed = dropped
    if most is not None:
        with open(os.path.join(dictionary_dir, TRIMMED_PIECES), "w", encoding="utf-8") as f:
            f.write("".join(line + "\n" for line in trimmed))
        record.update(teacher_pieces=most, trimmed_pieces=len(trimmed),
                      trimmed_occurrences=sum(int(line.rsplit(" ", 1)[1]) for line in trimmed),
                      trimmed_pieces_file=TRIMMED_PIECES)
    return record


def teacher_dictionary_summary(record: dict) -> str:
    """What fsd-prepare-corpus says of a dictionary of the teacher's pieces (its record)."""
    total = max(record.get("piece_occurrences", 0), 1)
    which = "most frequent pieces" if record.get("teacher_pieces") else "pieces that the training data uses"
    said = (f"a joined dictionary of the teacher's {which}: {record['kept_pieces']:,} of its {record['pieces']:,}, "
            f"plus 4 specials")
    if record.get("trimmed_pieces"):
        said += (f"; --teacher-pieces {record['teacher_pieces']:,} trimmed the other {record['trimmed_pieces']:,} the "
                 f"data uses, whose {record['trimmed_occurrences']:,} occurrences "
                 f"({100 * record['trimmed_occurrences'] / total:.2f}% of the training text's pieces) became <unk>, "
                 f"and the teacher's mass on them goes to the student's <unk>")
    elif record.get("teacher_pieces"):
        said += f" (--teacher-pieces {record['teacher_pieces']:,} trimmed none: the data uses no more)"
    if record.get("unknown_pieces"):
        said += (f"; {record['unknown_occurrences']:,} occurrences of {record['unknown_pieces']:,} pieces it lacks "
                 f"became <unk>")
    return said


def trimmed_pieces(data: Optional[str], record: dict) -> List[str]:
    """The pieces ``--teacher-pieces`` trimmed from the data-bin ``data`` (its record ``record``);
    [] where it trimmed none."""
    name = record.get("trimmed_pieces_file")
    if not name:
        return []
    path = os.path.join(data, name)
    try:
        with open(path, encoding="utf-8") as f:
            pieces = [line.rsplit(" ", 1)[0] for line in f.read().splitlines() if line]
    except OSError as e:
        raise DistillError(f"the data-bin {data} records pieces trimmed by --teacher-pieces in {name}, which cannot "
                           f"be read ({e}): prepare it again with fsd-prepare-corpus") from e
    if len(pieces) != record.get("trimmed_pieces", len(pieces)):
        raise DistillError(f"{path} lists {len(pieces):,} pieces, but the data-bin's record says "
                           f"{record['trimmed_pieces']:,} were trimmed: prepare it again with fsd-prepare-corpus")
    return pieces
