"""A damaged .gz input names the file and says what is wrong with it, in both readers (the
whole-file one and the streaming one), rather than ending in zlib's or gzip's traceback."""
import gzip

import pytest

from fairseq_distill.errors import DistillError
from fairseq_distill.text.files import iter_lines, read_bytes

TEXT = "".join(f"sentence number {i} of a small test file\n" for i in range(200)).encode()


def damaged(tmp_path, kind):
    packed = gzip.compress(TEXT)
    path = tmp_path / "train.de.gz"
    if kind == "truncated":
        path.write_bytes(packed[: len(packed) // 2])
    elif kind == "corrupt":  # the deflate stream's bytes overwritten after the 10-byte header
        path.write_bytes(packed[:10] + b"\xff" * 40 + packed[50:])
    else:  # plain text under a .gz name
        path.write_bytes(TEXT)
    return str(path)


EXPECTED = {"truncated": r"train\.de\.gz is a truncated gzip file: .*`gzip -t .*train\.de\.gz` confirms it",
            "corrupt": r"train\.de\.gz is a corrupt gzip file \(.*\); `gzip -t",
            "not-gzip": r"train\.de\.gz is not a valid gzip file \(.*\); give it uncompressed without the \.gz ending"}


@pytest.mark.parametrize("kind", sorted(EXPECTED))
def test_read_bytes_names_a_damaged_gzip_file(tmp_path, kind):
    with pytest.raises(DistillError, match=EXPECTED[kind]):
        read_bytes(damaged(tmp_path, kind))


@pytest.mark.parametrize("kind", sorted(EXPECTED))
def test_iter_lines_names_a_damaged_gzip_file(tmp_path, kind):
    with pytest.raises(DistillError, match=EXPECTED[kind]):
        list(iter_lines(damaged(tmp_path, kind)))


def test_an_intact_gzip_file_reads_as_its_lines(tmp_path):
    path = tmp_path / "ok.gz"
    path.write_bytes(gzip.compress(TEXT))
    lines = list(iter_lines(str(path)))
    assert len(lines) == 200 and lines[7] == "sentence number 7 of a small test file"
    assert read_bytes(str(path)) == TEXT
