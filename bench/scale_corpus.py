"""A synthetic parallel corpus at WMT size, for the scale benchmark (bench/scale.py).

Deterministic by seed and written streaming (a chunk of pairs at a time), in the layout of the
official WMT'14 archives unpacked (what ``recipes/wmt14_en_de/prepare.sh --archive DIR`` and
``fsd-benchmark-corpus wmt14_en_de`` read): the training pairs split over Europarl, Common Crawl and
News Commentary in WMT'14's proportions, newstest2013 and newstest2014 as SGML.

What makes it like WMT for the tools (not for a model: the words are made up):
* a Zipfian vocabulary of about 50k word types per side (exponent ≈ 1.07, as in news text);
* sentence lengths log-normal with a mean of about 25 words and a tail past 250;
* about 1% of the pairs repeat an earlier pair (exact duplicates);
* about 1% of the pairs are ones the cleaning removes: a side of over 250 words, a length ratio
  over 1.5, a word of over 1,000 characters;
* non-ASCII: umlauts and ß, typographic quotes and dashes that punctuation normalisation rewrites,
  and the odd zero-width or control character that ``remove-non-printing-char`` removes.

    python bench/scale_corpus.py --pairs 1000000 --out DIR [--seed 1]
"""
import argparse
import os
import sys
import time

import numpy as np

VOCAB = 50_000
ZIPF = 1.07
CHUNK = 20_000
# WMT'14 en-de's training parts and their shares of the pairs (Europarl v7 1.92M, Common Crawl
# 2.40M, News Commentary v9 0.20M)
PARTS = (("europarl-v7.de-en", 0.424), ("commoncrawl.de-en", 0.531), ("news-commentary-v9.de-en", 0.045))
EVAL_SENTENCES = {"newstest2013": 3000, "newstest2014": 3003}
LETTERS = {"en": "etaoinshrdlcumwfgypbvkjxqz", "de": "enisratdhulcgmobwfkzpvüäößjyxq"}
ACCENTED = {"en": "éèàç", "de": "äöüß"}
# punctuation the normaliser rewrites ("„“" to '"', "–" to "-", "…" to "...") and ordinary punctuation
PUNCT = [",", ".", ",", ":", ";", "?", "!", "–", "…", "„", "“", "(", ")", "'s", "%", "€"]
INVISIBLE = ["\u200b", "\u00ad", "\x07"]


def word_list(lang: str, rng: np.random.Generator) -> np.ndarray:
    """``VOCAB`` distinct made-up words, frequent ones short (as in real text)."""
    letters = LETTERS[lang]
    weights = np.linspace(2.0, 0.2, len(letters))
    weights /= weights.sum()
    words, seen = [], set()
    rank = 0
    while len(words) < VOCAB:
        length = int(min(max(2, 1 + np.log2(rank + 2) * 0.55 + rng.integers(0, 3)), 16))
        chars = rng.choice(list(letters), size=length, p=weights)
        word = "".join(chars)
        if rng.random() < 0.02:
            position = rng.integers(0, length)
            word = word[:position] + rng.choice(list(ACCENTED[lang])) + word[position + 1:]
        if rng.random() < 0.05:
            word = word.capitalize()
        if word not in seen:
            seen.add(word)
            words.append(word)
            rank += 1
    return np.array(words, dtype=object)


def zipf_cdf(n: int, s: float) -> np.ndarray:
    p = 1.0 / np.arange(1, n + 1) ** s
    return np.cumsum(p / p.sum())


class PairMaker:
    """Sentence pairs from one seeded generator: the same seed gives the same corpus."""

    def __init__(self, seed: int):
        self.rng = np.random.default_rng(seed)
        self.words = {lang: word_list(lang, np.random.default_rng(seed * 1000 + i)) for i, lang in enumerate(("en", "de"))}
        self.cdf = zipf_cdf(VOCAB, ZIPF)
        self.recent = []

    def sentence(self, lang: str, length: int) -> str:
        ids = np.searchsorted(self.cdf, self.rng.random(length))
        ids = np.minimum(ids, VOCAB - 1)
        tokens = list(self.words[lang][ids])
        rng = self.rng
        for _ in range(rng.binomial(length, 0.08)):
            tokens.insert(int(rng.integers(0, len(tokens) + 1)), PUNCT[int(rng.integers(0, len(PUNCT)))])
        if rng.random() < 0.003:
            tokens.insert(int(rng.integers(0, len(tokens) + 1)), INVISIBLE[int(rng.integers(0, len(INVISIBLE)))])
        return " ".join(tokens) + "."

    def lengths(self):
        source = max(1, int(round(self.rng.lognormal(3.0, 0.65))))
        target = max(1, int(round(source * self.rng.lognormal(0.05, 0.15))))
        # an ordinary pair passes the cleaning's length ratio of 1.5 (the bad ones are made apart)
        target = min(max(target, -(-source * 2 // 3)), source * 3 // 2 or 1)
        return source, target

    def pair(self):
        rng = self.rng
        r = rng.random()
        if r < 0.01 and self.recent:                       # a duplicate of a recent pair
            return self.recent[int(rng.integers(0, len(self.recent)))]
        source, target = self.lengths()
        if r < 0.0125:                                     # cleaning: a side over 250 words
            source = int(rng.integers(251, 400))
            target = int(source * rng.uniform(0.9, 1.1))
        elif r < 0.0175:                                   # cleaning: length ratio over 1.5
            target = max(3, source) * int(rng.integers(2, 4))
        elif r < 0.0195:                                   # cleaning: a word over 1,000 characters
            pair = (self.sentence("en", source) + " " + "x" * int(rng.integers(1001, 1500)),
                    self.sentence("de", target))
            return pair
        pair = (self.sentence("en", source), self.sentence("de", target))
        if len(self.recent) < 1000:
            self.recent.append(pair)
        else:
            self.recent[int(rng.integers(0, 1000))] = pair
        return pair


def sgm(path: str, lines, lang: str, kind: str, name: str):
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        f.write(f'<{kind} setid="{name}" srclang="any" trglang="{lang}">\n<doc docid="synthetic" sysid="ref">\n')
        for i, line in enumerate(lines, 1):
            f.write(f'<seg id="{i}">{line}</seg>\n')
        f.write(f"</doc>\n</{kind}>\n")


def write_evaluation_sets(out: str, seed: int = 1) -> dict:
    """newstest2013 and newstest2014 as SGML, from a generator of their own: ordinary pairs only
    (of at most 100 words), as an evaluation set passes no cleaning."""
    maker = PairMaker(seed)
    maker.rng = np.random.default_rng(seed + 7919)
    dev, test = os.path.join(out, "dev"), os.path.join(out, "test-full")
    os.makedirs(dev, exist_ok=True)
    os.makedirs(test, exist_ok=True)
    counts = {}
    for name, directory, stem in (("newstest2013", dev, "newstest2013-{side}.{lang}.sgm"),
                                  ("newstest2014", test, "newstest2014-deen-{side}.{lang}.sgm")):
        evaluation = []
        while len(evaluation) < EVAL_SENTENCES[name]:
            source, target = maker.lengths()
            if source <= 100 and target <= 100:
                evaluation.append((maker.sentence("en", source), maker.sentence("de", target)))
        for lang, side, kind, lines in (("en", "src", "srcset", [s for s, _ in evaluation]),
                                        ("de", "ref", "refset", [t for _, t in evaluation])):
            sgm(os.path.join(directory, stem.format(side=side, lang=lang)), lines, lang, kind, name)
        counts[name] = len(evaluation)
    return counts


def write_corpus(pairs: int, out: str, seed: int = 1, report=print) -> dict:
    """Write ``pairs`` training pairs and the two evaluation sets under ``out``; returns counts."""
    os.makedirs(out, exist_ok=True)
    maker = PairMaker(seed)
    started = time.time()
    written = 0
    counts = {}
    for p, (name, share) in enumerate(PARTS):
        n = pairs - written if p == len(PARTS) - 1 else int(round(pairs * share))
        with open(os.path.join(out, f"{name}.en"), "w", encoding="utf-8", newline="\n") as en, \
                open(os.path.join(out, f"{name}.de"), "w", encoding="utf-8", newline="\n") as de:
            for start in range(0, n, CHUNK):
                chunk = [maker.pair() for _ in range(min(CHUNK, n - start))]
                en.write("".join(s + "\n" for s, _ in chunk))
                de.write("".join(t + "\n" for _, t in chunk))
                written += len(chunk)
                if written % 500_000 < CHUNK:
                    rate = written / max(time.time() - started, 1e-9)
                    report(f"[scale-corpus] {written:,} of {pairs:,} pairs ({rate:,.0f}/s, ETA "
                           f"{(pairs - written) / rate:,.0f}s)")
        counts[name] = n
    counts.update(write_evaluation_sets(out, seed))
    return counts


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pairs", type=int, required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    if args.pairs < 1:
        parser.error(f"--pairs must be at least 1, got {args.pairs}")
    counts = write_corpus(args.pairs, args.out, args.seed)
    print(f"[scale-corpus] {args.out}: {counts}")


if __name__ == "__main__":
    sys.exit(main())
