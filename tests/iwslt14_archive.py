"""A synthetic IWSLT'14 de-en archive with the official layout and file formats (no download):
``de-en/train.tags.de-en.{de,en}`` with the talk metadata lines interleaved, and the TED/TEDX
dev and test XML files with ``<seg id="…">`` lines. Sentences are numbered so a test can follow
each one through the protocol."""
import io
import os
import tarfile

from fairseq_distill.corpora.iwslt14 import TEST_SETS

WORDS = {"de": ["das", "Haus", "ist", "groß", "und", "der", "Hund", "läuft", "schnell"],
         "en": ["the", "house", "is", "big", "and", "the", "dog", "runs", "fast"]}


def sentence(lang: str, i: int, length: int = 6) -> str:
    words = WORDS[lang]
    return " ".join(words[(i + k) % len(words)] for k in range(length)).capitalize() + f" Nr{i}, gut!"


def train_tags(lang: str, pairs: int, extra=None):
    """A train.tags file: every 10 talk lines, a talk's metadata block; ``extra``: {index: line}
    replacing pair ``index``'s line on this side."""
    lines = []
    for i in range(pairs):
        if i % 10 == 0:
            lines += [f"<url>http://www.ted.com/talks/talk{i}.html</url>",
                      f"<keywords>talks, {WORDS[lang][1]}</keywords>",
                      f"<talkid>{i}</talkid>",
                      f"<title>Talk {i}: {WORDS[lang][1]}</title>",
                      f"<description>About {WORDS[lang][6]} {i}</description>"]
        lines.append((extra or {}).get(i, sentence(lang, i)))
    return lines


def xml_file(name: str, lang: str, segments):
    head = ['<?xml version="1.0" encoding="UTF-8"?>', "<mteval>",
            f'<{"srcset" if lang == "de" else "refset"} setid="{name}" srclang="german" trglang="english">',
            '<doc docid="1" genre="lectures">', "<url>http://www.ted.com/talks/x.html</url>",
            "<description>TED Talk Subtitles and Transcript: a talk</description>", "<talkid>1</talkid>",
            "<title>A talk</title>"]
    body = [f'<seg id="{k + 1}"> {text} </seg>' for k, text in enumerate(segments)]
    return head + body + ["</doc>", f"</{'srcset' if lang == 'de' else 'refset'}>", "</mteval>"]


def test_segments(name: str, lang: str, n: int):
    base = TEST_SETS.index(name) * 100
    return [sentence(lang, base + k) + (" It’s" if lang == "en" and k == 0 else "") for k in range(n)]


def write_archive(path, pairs: int = 60, test_sizes=(3, 2, 4, 2, 3), extra_de=None, extra_en=None,
                  as_directory: bool = False):
    """Write ``de-en.tgz`` (or its unpacked directory) at ``path``; returns ``path``."""
    files = {f"de-en/train.tags.de-en.{lang}": train_tags(lang, pairs, extra)
             for lang, extra in (("de", extra_de), ("en", extra_en))}
    for name, n in zip(TEST_SETS, test_sizes):
        for lang in ("de", "en"):
            files[f"de-en/{name}.de-en.{lang}.xml"] = xml_file(name, lang, test_segments(name, lang, n))
    files["de-en/README"] = ["not read"]
    if as_directory:
        for name, lines in files.items():
            os.makedirs(os.path.join(path, os.path.dirname(name)), exist_ok=True)
            with open(os.path.join(path, name), "w", encoding="utf-8") as f:
                f.write("\n".join(lines) + "\n")
        return path
    with tarfile.open(path, "w:gz") as tar:
        for name, lines in files.items():
            data = ("\n".join(lines) + "\n").encode("utf-8")
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path
