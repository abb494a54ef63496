"""The Moses steps of the standard NMT preprocessing protocols, in Python: tokenisation
(``tokenizer.perl -l LANG``, with its XML escaping of ``&<>'"|[]``), lowercasing
(``lowercase.perl``) and the training-pair filter of ``clean-corpus-n.perl``, through
sacremoses (no perl checkout needed)."""
from typing import Iterable, List, Sequence, Tuple

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
    return [moses.tokenize(line, escape=True, return_str=True) for line in lines]


def lowercase(lines: Iterable[str]) -> List[str]:
    """``lowercase.perl``: Perl's ``lc``, which is Python's ``str.lower`` on Unicode text."""
    return [line.lower() for line in lines]


def clean_pairs(src: Sequence[str], tgt: Sequence[str], min_tokens: int, max_tokens: int,
                ratio: float) -> Tuple[List[int], List[str], List[str]]:
    """``clean-corpus-n.perl -ratio R ... MIN MAX``: whitespace collapsed, and a pair dropped
    when a side has fewer than ``min_tokens`` or more than ``max_tokens`` tokens, or one side is
    more than ``ratio`` times as long as the other. Returns the kept indices and both sides."""
    if min_tokens < 1:
        raise DistillError(f"a cleaned pair needs at least one token a side, got a minimum of {min_tokens}")
    if len(src) != len(tgt):
        raise DistillError(f"cannot clean a corpus whose sides differ in length: {len(src)} and {len(tgt)} lines")
    kept, out_src, out_tgt = [], [], []
    for i, (s, t) in enumerate(zip(src, tgt)):
        s_tokens, t_tokens = s.split(), t.split()
        ns, nt = len(s_tokens), len(t_tokens)
        if not (min_tokens <= ns <= max_tokens and min_tokens <= nt <= max_tokens):
            continue
        if ns / nt > ratio or nt / ns > ratio:
            continue
        kept.append(i)
        out_src.append(" ".join(s_tokens))
        out_tgt.append(" ".join(t_tokens))
    return kept, out_src, out_tgt
