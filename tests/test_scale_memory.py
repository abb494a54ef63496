"""A regression guard on the data tools' memory: their peak anonymous resident memory (the whole
process tree; file pages they map are left out) must not grow with the corpus. Each tool runs on a synthetic WMT-like corpus of 5,000 and
of 100,000 pairs (bench/scale_corpus.py); the larger may use at most 1.3 times the smaller's peak.
A tool that held every line's pieces would use far more: 100,000 pairs are about 30 MB of text,
hundreds of MB as Python strings of pieces. Timings and larger corpora belong to bench/scale.py,
not here (the suite's time)."""
import os
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.path.dirname(sys.executable)
SIZES = (5_000, 100_000)
GROWTH = 1.3
SAMPLE_SECONDS = 0.01

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def corpora(tmp_path_factory):
    sys.path.insert(0, os.path.join(REPO, "bench"))
    from scale_corpus import write_corpus

    root = tmp_path_factory.mktemp("scale")
    for n in SIZES:
        write_corpus(n, str(root / f"corpus-{n}"), seed=1, report=lambda _: None)
    return root


def peak(argv, root, name, outputs):
    from scale_measure import measure

    # sampled often: the smaller corpus's merges are over in well under a second, and sampling every
    # quarter second (the benchmark's rate) caught their peak only sometimes, making the larger
    # corpus look as if it grew
    result = measure(argv, str(root / f"{name}.log"), [str(p) for p in outputs], interval=SAMPLE_SECONDS)
    assert result["exit_code"] == 0, open(root / f"{name}.log", encoding="utf-8").read()[-3000:]
    # what the tool holds itself: pages of the files it maps (shards, arrays) are the kernel's to drop
    return result["peak_anonymous_bytes"]


def clean(root, n):
    out = root / f"text-{n}"
    return peak([os.path.join(BIN, "fsd-benchmark-corpus"), "wmt14_en_de", "--archive", str(root / f"corpus-{n}"),
                 "--out", str(out), "--workers", "2"], root, f"clean-{n}", [out])


def prepare(root, n):
    text, out = root / f"text-{n}", root / f"data-{n}"
    # the same subword sample at both sizes (all of the smaller corpus): the sample's memory is
    # bounded by its option, not by the corpus; everything else must be flat
    return peak([os.path.join(BIN, "fsd-prepare-corpus"), "-s", "en", "-t", "de", "--train-prefix",
                 str(text / "train"), "--valid-prefix", str(text / "valid"), "--test-prefix", str(text / "test"),
                 "--vocab-size", "4000", "--subword-sample", "5000", "--workers", "2", "--out", str(out)],
                root, f"prepare-{n}", [out])


def cache_merge(root, n):
    from scale_cache import write_shards

    data, out = root / f"data-{n}" / "bin", root / f"cache-{n}"
    write_shards(str(data), str(out), num_shards=3, top_k=8)
    return peak([os.path.join(BIN, "fsd-cache-teacher"), "--data", str(data), "--out", str(out), "--num-shards",
                 "3", "--merge"], root, f"cache-{n}", [out])


def seqkd_merge(root, n):
    """fsd-seqkd's merge of 4-best shards written as decoding writes them (bench/scale_seqkd.py):
    indexing the shards, walking the corpus in chunks, binarizing. --select first: chrF's scoring
    (per chunk, the same walk) would take minutes here; its memory is a chunk's either way."""
    from scale_seqkd import write_shards

    data, work, out = root / f"data-{n}" / "bin", root / f"seqkd-{n}.work", root / f"seqkd-{n}"
    write_shards(str(data), str(work), num_shards=3, nbest=4)
    return peak([os.path.join(BIN, "fsd-seqkd"), "--data", str(data), "--work", str(work), "--num-shards", "3",
                 "--merge", "--out", str(out), "--select", "first"], root, f"seqkd-{n}", [out, work])


def test_the_data_tools_memory_does_not_grow_with_the_corpus(corpora):
    peaks = {}
    for tool in (clean, prepare, cache_merge, seqkd_merge):
        peaks[tool.__name__] = [tool(corpora, n) for n in SIZES]
    grown = {name: round(big / small, 2) for name, (small, big) in peaks.items() if big > GROWTH * small}
    assert not grown, f"peak memory grew with the corpus (100k against 5k pairs): {grown}; all: {peaks}"
