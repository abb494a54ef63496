"""Minimum Bayes risk (MBR) ranking of a teacher's n-best list, for seq-KD data without a
reference (``fsd-seqkd --select mbr``).

The utility is sentence chrF with the statistics of the chrF selection
(:mod:`fairseq_distill.seqkd.selection`): sacreBLEU's ``CHRF()`` at its defaults, character
n-grams of orders 1 to 6 with whitespace removed, no word n-grams, beta 2, its effective-order
rule. ``U[i, j]`` is ``CHRF().sentence_score(hyp_i, [hyp_j]).score``: hypothesis i scored with
hypothesis j as the reference (chrF is not symmetric). Hypothesis i's MBR score is the mean of
``U[i, j]`` over the other hypotheses j != i of the same list: the expectation is uniform over the
n-best entries (beam search's list is not a sample, and the shards keep no model scores), and
self-pairs are left out (chrF of a hypothesis against itself is 100 for any non-empty one, so
including it would only add the same constant to every non-empty candidate). The ranking is by
MBR score, highest first; ties keep the teacher's order.

Speed: a sentence's N x N matrix comes from each hypothesis's n-gram counts, extracted once
(not once per pair, as N x N calls of ``sentence_score`` would), for a batch of sentences at a
time with numpy and without a sort: each n-gram of a sentence gets a dense id from the id of its
first n-1 characters and its last character, a count per hypothesis, and a pair's matches are
the sum of the element-wise minimum of the two count columns, per order. An n-gram that every
hypothesis holds adds the same to every pair, so only the rows where the hypotheses differ
(few, as an n-best list's hypotheses share most n-grams) go through the pairwise minimum, one
batched matrix product. The scores then follow sacreBLEU's arithmetic operation by operation,
so they are its floats exactly.
"""
import math
from typing import List, Sequence, Tuple

import numpy as np

CHAR_ORDER = 6  # sacreBLEU CHRF's defaults, as the chrf selection scores
BETA = 2
EPS = 1e-16  # sacreBLEU's stand-in for a precision or recall it cannot compute
# what a ranking was made with: recorded beside each shard's rankings (seqkd/mbr_shards.py)
UTILITY = {"utility": "sentence chrF (sacreBLEU CHRF defaults)", "char_order": CHAR_ORDER, "word_order": 0,
           "beta": BETA, "whitespace": False, "lowercase": False, "texts": "detokenised",
           "self_pairs": "excluded", "expectation": "uniform over the other hypotheses",
           "ties": "the teacher's order"}
BATCH = 64  # sentences scored together
SPACE = 1 << 24  # the largest n-gram id space of a batch (its memory: 9 bytes an id)
PAD_LIMIT = 1 << 22  # the most elements of pair_sums' padded levels (8 bytes each)


def chrf_from_counts(match, hyp_total, ref_total) -> np.ndarray:
    """sacreBLEU's sentence chrF (non-smoothed, effective order) from per-order statistics:
    arrays whose first axis is the order (1..CHAR_ORDER) and whose other axes broadcast;
    ``hyp_total``/``ref_total``: the n-grams of each order in the hypothesis / the reference.
    The operations are sacreBLEU's, in its order, so the floats are the same."""
    factor = BETA ** 2
    shape = np.broadcast_shapes(match.shape[1:], hyp_total.shape[1:], ref_total.shape[1:])
    avg_prec, avg_rec = np.zeros(shape), np.zeros(shape)
    effective = np.zeros(shape, dtype=np.int64)
    for n in range(match.shape[0]):
        n_ref = np.broadcast_to(ref_total[n], shape)
        n_hyp = np.where(n_ref > 0, hyp_total[n], 0)  # sacreBLEU counts none against an empty order
        m = np.broadcast_to(match[n], shape)
        with np.errstate(divide="ignore", invalid="ignore"):
            prec = np.where(n_hyp > 0, m / n_hyp, EPS)
            rec = np.where(n_ref > 0, m / n_ref, EPS)
        counted = (n_hyp > 0) & (n_ref > 0)
        avg_prec = np.where(counted, avg_prec + prec, avg_prec)
        avg_rec = np.where(counted, avg_rec + rec, avg_rec)
        effective += counted
    with np.errstate(divide="ignore", invalid="ignore"):
        avg_prec = np.where(effective > 0, avg_prec / effective, 0.0)
        avg_rec = np.where(effective > 0, avg_rec / effective, 0.0)
        score = (1 + factor) * avg_prec * avg_rec
        score = score / ((factor * avg_prec) + avg_rec)
    return np.where(avg_prec + avg_rec > 0, 100 * score, 0.0)


def dense_ids(keys: np.ndarray, space: int) -> Tuple[np.ndarray, int]:
    """Each key (0 <= key < space) replaced by its rank among the distinct keys, and how many
    there are: np.unique's inverse without a sort, for keys from a small range."""
    present = np.zeros(space, dtype=np.bool_)
    present[keys] = True
    found = np.flatnonzero(present)
    ranks = np.empty(space, dtype=np.int64)
    ranks[found] = np.arange(len(found))
    return ranks[keys], len(found)


def pair_sums(rest: np.ndarray, starts: np.ndarray, size: int) -> np.ndarray:
    """For rows of counts (one per n-gram, one column per hypothesis) in groups beginning at
    ``starts``: each group's sum over its rows of min(count_i, count_j), [group, i, j].
    min(a, b) is the number of levels r >= 1 with a >= r and b >= r, so a group's sums are
    B^T B for its 0/1 rows "count >= r": one batched matrix product, exact in float64."""
    lengths = np.diff(np.r_[starts, len(rest)])
    groups, longest, top = len(starts), int(lengths.max()), int(rest.max())
    if groups * longest * top * size > PAD_LIMIT:  # one very long sentence: the minimum, row by row
        first, second = np.triu_indices(size)
        sums = np.add.reduceat(np.minimum(rest[:, first], rest[:, second]), starts, axis=0)
        out = np.zeros((groups, size, size), dtype=np.int64)
        out[:, first, second] = sums
        out[:, second, first] = sums
        return out
    group = np.repeat(np.arange(groups), lengths)
    position = np.arange(len(rest)) - np.repeat(starts, lengths)
    levels = np.zeros((groups, top * longest, size))
    for r in range(top):
        levels[group, r * longest + position] = rest > r
    return np.rint(np.matmul(levels.transpose(0, 2, 1), levels)).astype(np.int64)


def batch_statistics(lists: Sequence[Sequence[str]], size: int):
    """For S sentences of ``size`` hypotheses each: (matches [S, order, i, j], totals
    [S, order, i]), or None when the n-gram id spaces of so many sentences would be too large
    (split the batch)."""
    texts = ["".join(h.split()) for hyps in lists for h in hyps]  # chrF ignores whitespace
    lengths = np.fromiter(map(len, texts), dtype=np.int64, count=len(texts))
    n_sent = len(lists)
    match = np.zeros((n_sent, CHAR_ORDER, size, size), dtype=np.int64)
    chars = np.frombuffer("".join(texts).encode("utf-32-le"), dtype=np.uint32)
    total = len(chars)
    if total == 0:
        return match, np.zeros((n_sent, CHAR_ORDER, size), dtype=np.int64)
    hyp = np.repeat(np.arange(len(texts)), lengths)  # which hypothesis each character is in
    sentence = hyp // size
    local = hyp - sentence * size
    # characters left in the hypothesis from each position on: an n-gram starts where >= n
    left = np.repeat(np.cumsum(lengths), lengths) - np.arange(total)
    digit, letters = dense_ids(chars, int(chars.max()) + 1)  # the batch's alphabet, 0..letters-1
    # the ids of (sentence, n-gram): order 1 from (sentence, character), order n from the id of
    # (sentence, its first n-1 characters) and its last character; ids stay sorted by sentence
    count, previous = n_sent, sentence
    for n in range(1, min(CHAR_ORDER, total) + 1):
        at = np.flatnonzero(left >= n)
        space = count * letters
        if space > SPACE and n_sent > 1:
            return None
        ids = np.full(total, -1, dtype=np.int64)
        ids[at], count = dense_ids(previous[at] * letters + digit[at + n - 1], space)
        if count == 0:
            break  # every hypothesis is shorter than n characters
        previous, rows = ids, ids[at]
        counts = np.bincount(rows * size + local[at], minlength=count * size).reshape(count, size)
        row_sentence = np.zeros(count, dtype=np.int64)
        row_sentence[rows] = sentence[at]
        # an n-gram every hypothesis holds at least `common` times adds `common` to the matches
        # of every pair: only the rows where the hypotheses differ need the pairwise minimum
        common = counts.min(axis=1)
        match[:, n - 1] += np.bincount(row_sentence, weights=common, minlength=n_sent).astype(np.int64)[:, None, None]
        differ = np.flatnonzero(counts.max(axis=1) > common)
        if len(differ):
            owner = row_sentence[differ]
            starts = np.flatnonzero(np.r_[True, owner[1:] != owner[:-1]])
            match[owner[starts], n - 1] += pair_sums(counts[differ] - common[differ, None], starts, size)
    totals = np.diagonal(match, axis1=2, axis2=3).copy()  # min(c, c) = c
    return match, totals


def statistics(lists: Sequence[Sequence[str]], size: int):
    """:func:`batch_statistics` for any number of sentences: batches of :data:`BATCH`, halved
    where their id spaces are too large (one sentence is always scored)."""
    matches, totals = [], []
    pending = [lists[k:k + BATCH] for k in range(0, len(lists), BATCH)]
    while pending:
        part = pending.pop(0)
        found = batch_statistics(part, size)
        if found is None:
            half = len(part) // 2
            pending[:0] = [part[:half], part[half:]]
            continue
        matches.append(found[0])
        totals.append(found[1])
    return np.concatenate(matches), np.concatenate(totals)


def utility_matrices(lists: Sequence[Sequence[str]]) -> List[np.ndarray]:
    """``U[i, j]`` = sentence chrF of hypothesis i against hypothesis j as the reference, one
    matrix per n-best list (texts as they are compared: detokenised)."""
    out: List[np.ndarray] = [np.zeros((len(h), len(h))) for h in lists]
    by_size = {}
    for k, hyps in enumerate(lists):
        by_size.setdefault(len(hyps), []).append(k)
    for size, members in by_size.items():
        if size == 0:
            continue
        match, totals = statistics([lists[k] for k in members], size)
        # orders first: [order, S, i, j]; the candidate i's totals vary along i, the reference's along j
        u = chrf_from_counts(match.transpose(1, 0, 2, 3), totals.transpose(1, 0, 2)[:, :, :, None],
                             totals.transpose(1, 0, 2)[:, :, None, :])
        for k, matrix in zip(members, u):
            out[k] = matrix
    return out


def mbr_scores(utility: np.ndarray) -> List[float]:
    """Each hypothesis's expected utility: the mean of its row over the other hypotheses, summed
    exactly (math.fsum), so that two equal hypotheses tie exactly whatever their places."""
    size = utility.shape[0]
    if size < 2:
        return [0.0] * size
    return [math.fsum(row[:i].tolist() + row[i + 1:].tolist()) / (size - 1) for i, row in enumerate(utility)]


def rank(lists: Sequence[Sequence[str]]) -> List[Tuple[List[int], List[float]]]:
    """For each n-best list: its hypotheses' indices by MBR score, best first (ties in the
    teacher's order), and the scores in the list's own order."""
    ranked = []
    for utility in utility_matrices(lists):
        scores = mbr_scores(utility)
        ranked.append((sorted(range(len(scores)), key=lambda k: -scores[k]), scores))  # stable: ties in order
    return ranked
