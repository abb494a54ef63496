"""Synthetic official WMT English-German archives (no download), with the official archive names,
the paths inside them and the SGML format of the evaluation sets:

* ``training-parallel-europarl-v7.tgz``: ``training/europarl-v7.de-en.{de,en}`` (and a fr-en pair,
  not read);
* ``training-parallel-commoncrawl.tgz``: ``commoncrawl.de-en.{de,en}`` at the top (and fr-en);
* ``training-parallel-nc-v9.tgz``: ``training/news-commentary-v9.de-en.{de,en}``;
* ``training-parallel-nc-v11.tgz``: ``training-parallel-nc-v11/news-commentary-v11.de-en.{de,en}``;
* ``dev.tgz`` (WMT'17's): ``dev/newstest2013-{src.en,ref.de}.sgm``,
  ``dev/newstest2016-ende-{src.en,ref.de}.sgm`` and a copy of newstest2014 that the protocol must
  not take (``dev/newstest2014-deen-*.sgm``, other sentences);
* ``test-full.tgz``: ``test-full/newstest2014-deen-{src,ref}.{en,de}.sgm``.

Sentences are numbered so a test can follow each through the protocols; Europarl's pairs are
the hand-made cases of ``EUROPARL_CASES``."""
import io
import os
import tarfile

WORDS = {"en": ["the", "house", "is", "big", "and", "the", "dog", "runs", "fast"],
         "de": ["das", "Haus", "ist", "groß", "und", "der", "Hund", "läuft", "schnell"]}
LONG_WORD = {"en": "x" * 1001, "de": "y" * 1001}

# Europarl's ten pairs (en, de), each a case of the cleaning rules; what each protocol does:
EUROPARL_CASES = [
    None,                                                      # 0 an ordinary pair: kept
    ("", "Ein Satz ohne Gegenstück ."),                        # 1 an empty side: dropped by both
    ("He said \"yes\" .", "Er sagte „ja“ – wirklich …"),       # 2 punctuation: normalised by wmt14 only
    ("a\x07b c d", "a b c d"),                                 # 3 a control character: a space (wmt14), removed (wmt16)
    ("one two", "eins zwei drei vier"),                        # 4 length ratio 2: dropped by wmt14 (1.5), kept by wmt16 (9)
    (" ".join(["word"] * 100), " ".join(["wort"] * 100)),      # 5 100 tokens: kept by wmt14 (250), dropped by wmt16 (80)
    (LONG_WORD["en"] + " here", LONG_WORD["de"] + " hier"),    # 6 a word of 1,001 characters: dropped by both
    ("A state-of-the-art test .", "Ein hochmoderner Test ."),   # 7 a hyphenated word: one token (wmt16)
    None,                                                      # 8
    None,                                                      # 9
]


def sentence(lang: str, i: int, length: int = 6) -> str:
    words = WORDS[lang]
    return " ".join(words[(i + k) % len(words)] for k in range(length)).capitalize() + f" Nr{i}, gut!"


def europarl(lang: str):
    side = 0 if lang == "en" else 1
    return [sentence(lang, i) if case is None else case[side] for i, case in enumerate(EUROPARL_CASES)]


def corpus(lang: str, first: int, n: int):
    return [sentence(lang, first + i) for i in range(n)]


def sgm(setid: str, lang: str, segments, ref: bool):
    """A WMT SGML file: two documents, one ``<seg id="…">`` line per segment."""
    kind = "refset" if ref else "srcset"
    target = f' trglang="{lang}"' if ref else ""
    head = [f'<{kind} setid="{setid}" srclang="any"{target}>']
    half = (len(segments) + 1) // 2
    lines = head + ['<doc sysid="ref" docid="1-bbc" genre="news" origlang="en">', "<p>"]
    for k, text in enumerate(segments):
        if k == half:
            lines += ["</p>", "</doc>", '<doc sysid="ref" docid="2-dw" genre="news" origlang="de">', "<p>"]
        lines.append(f'<seg id="{k + 1}">{text}</seg>')
    return lines + ["</p>", "</doc>", f"</{kind}>"]


def evaluation_set(name: str, n: int, first: int):
    """``n`` segment pairs; the first English one has a ’, the first German one a compound, the
    second an ampersand and spaces inside the tags."""
    en = [sentence("en", first + k) for k in range(n)]
    de = [sentence("de", first + k) for k in range(n)]
    en[0] = f"It’s {name} ’s first"
    de[0] = f"Ein state-of-the-art Satz aus {name}"
    if n > 1:
        de[1] = f" Haus & Hof {first} "
    return en, de


NEWSTEST = {"newstest2013": (3, 1000), "newstest2016": (4, 2000), "newstest2014": (5, 3000)}


def archive_files(nc_pairs=(4, 5), commoncrawl_pairs: int = 6):
    """``{archive name: {path inside: lines}}`` of the six official archives."""
    nc9, nc11 = nc_pairs
    files = {
        "training-parallel-europarl-v7.tgz": {
            "training/europarl-v7.de-en.en": europarl("en"), "training/europarl-v7.de-en.de": europarl("de"),
            "training/europarl-v7.fr-en.en": ["not read"], "training/europarl-v7.fr-en.fr": ["pas lu"]},
        "training-parallel-commoncrawl.tgz": {
            "commoncrawl.de-en.en": corpus("en", 100, commoncrawl_pairs),
            "commoncrawl.de-en.de": corpus("de", 100, commoncrawl_pairs),
            "commoncrawl.fr-en.en": ["not read"], "commoncrawl.fr-en.fr": ["pas lu"]},
        "training-parallel-nc-v9.tgz": {
            "training/news-commentary-v9.de-en.en": corpus("en", 200, nc9),
            "training/news-commentary-v9.de-en.de": corpus("de", 200, nc9)},
        "training-parallel-nc-v11.tgz": {
            "training-parallel-nc-v11/news-commentary-v11.de-en.en": corpus("en", 300, nc11),
            "training-parallel-nc-v11/news-commentary-v11.de-en.de": corpus("de", 300, nc11)},
    }
    dev, test = {}, {}
    for name, (n, first) in NEWSTEST.items():
        en, de = evaluation_set(name, n, first)
        if name == "newstest2013":
            dev["dev/newstest2013-src.en.sgm"] = sgm(name, "en", en, ref=False)
            dev["dev/newstest2013-ref.de.sgm"] = sgm(name, "de", de, ref=True)
        elif name == "newstest2016":
            dev["dev/newstest2016-ende-src.en.sgm"] = sgm(name, "en", en, ref=False)
            dev["dev/newstest2016-ende-ref.de.sgm"] = sgm(name, "de", de, ref=True)
        else:
            test["test-full/newstest2014-deen-src.en.sgm"] = sgm(name, "en", en, ref=False)
            test["test-full/newstest2014-deen-ref.de.sgm"] = sgm(name, "de", de, ref=True)
            test["test-full/newstest2014-deen-src.de.sgm"] = sgm(name, "de", de, ref=False)
            test["test-full/newstest2014-deen-ref.en.sgm"] = sgm(name, "en", en, ref=True)
            # dev.tgz's copy: not the full set, never to be taken
            dev["dev/newstest2014-deen-src.en.sgm"] = sgm(name, "en", ["Wrong set"] * 2, ref=False)
            dev["dev/newstest2014-deen-ref.de.sgm"] = sgm(name, "de", ["Falscher Satz"] * 2, ref=True)
    files["dev.tgz"] = dev
    files["test-full.tgz"] = test
    return files


def write_archives(directory, files=None, names=None, unpacked: bool = False):
    """Write the archives into ``directory`` (``names``: {official name: name to write it as}),
    or, ``unpacked``, the files they hold under their paths; returns ``directory``."""
    files = files or archive_files()
    os.makedirs(directory, exist_ok=True)
    for archive, members in files.items():
        if unpacked:
            for path, lines in members.items():
                full = os.path.join(directory, os.path.splitext(archive)[0], path)
                os.makedirs(os.path.dirname(full), exist_ok=True)
                with open(full, "w", encoding="utf-8", newline="\n") as f:
                    f.write("\n".join(lines) + "\n")
            continue
        with tarfile.open(os.path.join(directory, (names or {}).get(archive, archive)), "w:gz") as tar:
            for path, lines in members.items():
                data = ("\n".join(lines) + "\n").encode("utf-8")
                info = tarfile.TarInfo(path)
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    return directory
