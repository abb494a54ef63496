"""The Moses steps of the standard NMT preprocessing protocols, in Python: tokenisation
(``tokenizer.perl -l LANG``, with its XML escaping of ``&<>'"|[]``), lowercasing
(``lowercase.perl``) and the training-pair filter of ``clean-corpus-n.perl``, through
sacremoses (no perl checkout needed).

Where sacremoses differs from the current Moses scripts (those fairseq's ``prepare-iwslt14.sh``
clones), this module follows the scripts: ``tokenizer.perl`` (since late 2018) splits the dot
off a sentence's last word whatever it is (``So am I.`` → ``So am I .``, ``the U.S.`` → ``the
U.S .``), which sacremoses keeps whole after a non-breaking prefix, a number or an abbreviation;
``clean-corpus-n.perl`` drops a pair with a word of more than 1,000 characters;
``tokenizer.perl`` deletes the control characters U+0000–U+001F that are not whitespace to Perl
(U+001C–U+001F among them, which Python's regular expressions and sacremoses take for spaces);
``lowercase.perl``'s ``lc`` lowercases character by character, so a word-final capital sigma
becomes σ, where ``str.lower`` writes ς. All are pinned against the perl scripts' own output on
an adversarial sample (``tests/fixtures/moses_parity``).
"""
import re
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

from fairseq_distill.errors import DistillError


def tokenizer(lang: str):
    try:
        from sacremoses import MosesTokenizer
    except ImportError as e:  # an optional dependency: only the benchmark recipes use it
        raise DistillError("the benchmark recipes tokenise with sacremoses: pip install sacremoses") from e
    return MosesTokenizer(lang=lang)


def detokenizer(lang: str):
    try:
        from sacremoses import MosesDetokenizer
    except ImportError as e:
        raise DistillError("the benchmark recipes detokenise with sacremoses: pip install sacremoses") from e
    return MosesDetokenizer(lang=lang)


def tokenize(lines: Iterable[str], lang: str) -> List[str]:
    """``tokenizer.perl -l LANG``: default (not aggressive) hyphen handling, special characters
    escaped as XML entities, as the protocols' data has them."""
    moses = tokenizer(lang)
    return [split_final_dot(moses.tokenize(CONTROL.sub("", line), escape=True, return_str=True)) for line in lines]


# the C0 control characters tokenizer.perl deletes: all but those Perl's \s takes for spaces
# (tab, newline, vertical tab, form feed, carriage return), which become spaces
CONTROL = re.compile(r"[\x00-\x08\x0e-\x1f]")


FINAL_WORD_WITH_DOT = re.compile(r"^(.*?)(\S*[^.\s])\.$")


def split_final_dot(line: str) -> str:
    """``tokenizer.perl``'s rule for a sentence's last word: a word ending in one dot is split
    from it, whether or not it is a non-breaking prefix (runs of dots, ``...``, stay whole)."""
    match = FINAL_WORD_WITH_DOT.match(line)
    if not match:
        return line
    return f"{match.group(1)}{match.group(2)} ."


def lowercase(lines: Iterable[str]) -> List[str]:
    """``lowercase.perl``: Perl's ``lc``, character by character (``str.lower`` would turn a
    word-final capital sigma into ς, context-sensitively; ``lc`` gives σ)."""
    return ["".join(c.lower() for c in line) for line in lines]


def clean_pairs(src: Sequence[str], tgt: Sequence[str], min_tokens: int, max_tokens: int,
                ratio: float, max_word_length: int = 1000,
                dropped: Optional[Dict[str, int]] = None) -> Tuple[List[int], List[str], List[str]]:
    """``clean-corpus-n.perl -ratio R ... MIN MAX``: whitespace collapsed, and a pair dropped
    when a side has fewer than ``min_tokens`` or more than ``max_tokens`` tokens, or one side is
    more than ``ratio`` times as long as the other, or a side has a word of more than
    ``max_word_length`` characters (the script's fixed 1,000). Returns the kept indices and both
    sides; ``dropped``, if given, is counted into by reason (``length``, ``ratio``, ``long_word``)."""
    dropped = dropped if dropped is not None else {}
    if min_tokens < 1:
        raise DistillError(f"a cleaned pair needs at least one token a side, got a minimum of {min_tokens}")
    if len(src) != len(tgt):
        raise DistillError(f"cannot clean a corpus whose sides differ in length: {len(src)} and {len(tgt)} lines")
    kept, out_src, out_tgt = [], [], []
    for i, (s, t) in enumerate(zip(src, tgt)):
        s_tokens, t_tokens = s.split(), t.split()
        ns, nt = len(s_tokens), len(t_tokens)
        if not (min_tokens <= ns <= max_tokens and min_tokens <= nt <= max_tokens):
            dropped["length"] = dropped.get("length", 0) + 1
            continue
        if ns / nt > ratio or nt / ns > ratio:
            dropped["ratio"] = dropped.get("ratio", 0) + 1
            continue
        if any(len(w) > max_word_length for w in s_tokens) or any(len(w) > max_word_length for w in t_tokens):
            dropped["long_word"] = dropped.get("long_word", 0) + 1
            continue
        kept.append(i)
        out_src.append(" ".join(s_tokens))
        out_tgt.append(" ".join(t_tokens))
    return kept, out_src, out_tgt
