"""fsd-seqkd in bounded memory: shard files written as the teacher's sentences arrive, the merge
walking the corpus a chunk at a time (and resuming), the binarized sides read a range at a time.
The merges here run in-process with the binarization left out: what is compared is what the
walk writes for it, and the summary."""
import io
import math
import os
import random
from types import SimpleNamespace

import pytest

import fairseq_distill.seqkd.merge as merge_module
import fairseq_distill.seqkd.merge_walk as walk_module
from fairseq_distill.errors import DistillError
from fairseq_distill.seqkd.decode import shard_records, write_shard
from fairseq_distill.seqkd.inputs import Inputs, SeqKDJob, Side, load_side, sources_digest
from fairseq_distill.seqkd.merge import merge
from fairseq_distill.seqkd.shard_index import ShardIndex
from fairseq_distill.seqkd.shard_writer import ShardWriter

TIMINGS = ("merge_seconds", "mbr_seconds")


@pytest.fixture(scope="module")
def corpus(tiny_data):
    src = load_side(tiny_data, "train", "de", "en", "de")
    ref = load_side(tiny_data, "train", "de", "en", "en")
    # per sentence: the reference reversed, the reference, and it without its last piece
    lists = [[" ".join(reversed(r.split())), r, " ".join(r.split()[:-1]) or r] for r in ref]
    lists[3] = [" ".join(h.split() * 10) for h in lists[3]]  # far too long for its source: filtered
    lists[5][0] = ""  # an empty 1-best
    return src, ref, lists


def write_shards(work, lists, sources, num_shards=3, drop=()):
    """Shard files of 3-best lists, each shard's records out of order (as a hand-made file may be)."""
    settings = {"backend": "fairseq", "subset": "train", "beam": 3, "nbest": 3, "source": None,
                "train_source_sha256": sources_digest(sources)}
    for shard in range(num_shards):
        ids = [i for i in range(len(lists)) if i % num_shards == shard and i not in drop]
        random.Random(shard).shuffle(ids)
        write_shard(work, shard, num_shards, settings, {},
                    ({"id": i, "hyp": lists[i][0], "nbest": lists[i]} for i in ids))


def run_merge(tiny_data, corpus, root, monkeypatch, chunk, **options):
    """A merge of fresh shards in ``root``, ``chunk`` sentences at a time: the summary (timings left
    out), the texts and pairs file it wrote, and the pairs it would binarize."""
    monkeypatch.setattr(walk_module, "CHUNK_SENTENCES", chunk)
    binarized = []
    monkeypatch.setattr(merge_module, "binarize", lambda args, src, tgt, dest, pairs, *_: binarized.append(pairs))
    work = str(root / "work")
    write_shards(work, corpus[2], corpus[0], drop={7})
    job = SeqKDJob(data=tiny_data, work=work, out=str(root / "out"), merge=True, num_shards=3, **options)
    summary = merge(job, "de", "en")
    texts = {name: open(os.path.join(dirname, name), encoding="utf-8").read()
             for dirname, name in ((work, "seqkd.de"), (work, "seqkd.en"), (str(root / "out"), "seqkd_pairs.tsv"))
             if os.path.exists(os.path.join(dirname, name))}
    return {k: v for k, v in summary.items() if k not in TIMINGS}, texts, binarized


@pytest.mark.parametrize("options", [
    {"select": "chrf", "on_missing": "reference", "max_len_ratio": 3.0},
    {"select": "mbr", "targets": 2, "on_missing": "reference"},
    {"select": "first", "on_missing": "reference", "max_len_ratio": 3.0},
], ids=["chrf", "mbr-targets-2", "first"])
def test_a_merge_in_small_chunks_writes_what_one_chunk_writes(tiny_data, corpus, tmp_path, monkeypatch, options):
    whole = run_merge(tiny_data, corpus, tmp_path / "whole", monkeypatch, 10 ** 6, **options)
    reads = []
    real_lists = ShardIndex.lists
    monkeypatch.setattr(ShardIndex, "lists", lambda self, ids: reads.append(ids) or real_lists(self, ids))
    chunked = run_merge(tiny_data, corpus, tmp_path / "chunked", monkeypatch, 7, **options)
    assert sum(isinstance(ids, range) for ids in reads) == math.ceil(400 / 7)  # walked 7 sentences at a time
    assert chunked == whole
    summary, texts, binarized = whole
    # sentence 7 has no record; under --select first, sentence 5's chosen hypothesis is empty too
    missing = 2 if options["select"] == "first" else 1
    assert summary["missing_or_empty"] == summary["replaced_by_reference"] == missing
    assert binarized == [summary["kept"]] == [texts["seqkd.en"].count("\n")]
    if options["select"] == "first":  # by hand: the 1-best, the reference for those without, 3 filtered
        src, ref, lists = corpus
        kept = [i for i in range(400) if i != 3]
        assert texts["seqkd.en"] == "".join((ref[i] if i in (5, 7) else lists[i][0]) + "\n" for i in kept)
        assert texts["seqkd.de"] == "".join(src[i] + "\n" for i in kept)
        assert summary["filtered_by_length_ratio"] == 1 and summary["kept"] == 399
    if options["select"] == "mbr":
        assert texts["seqkd_pairs.tsv"].splitlines()[0] == "pair\tsentence\thypothesis"
        assert summary["kept"] == 2 * 399 + 1 and summary["targets"] == 2  # sentence 7: its reference


def test_an_interrupted_merge_resumes_after_its_last_whole_chunk(tiny_data, corpus, tmp_path, monkeypatch, capsys):
    options = {"select": "chrf", "on_missing": "reference", "max_len_ratio": 3.0}
    whole = run_merge(tiny_data, corpus, tmp_path / "whole", monkeypatch, 10 ** 6, **options)
    calls, interrupt = [], [True]
    real_choose = walk_module.Chooser.choose

    def choose(self, lists, references, start, n):
        calls.append(start)
        if len(calls) == 3 and interrupt and interrupt.pop():  # Ctrl-C while the third chunk is chosen
            raise KeyboardInterrupt
        return real_choose(self, lists, references, start, n)

    monkeypatch.setattr(walk_module.Chooser, "choose", choose)
    with pytest.raises(KeyboardInterrupt):
        run_merge(tiny_data, corpus, tmp_path / "cut", monkeypatch, 7, **options)
    capsys.readouterr()
    # the same merge again: the two whole chunks are not walked again
    calls.clear()
    work = str(tmp_path / "cut" / "work")
    job = SeqKDJob(data=tiny_data, work=work, out=str(tmp_path / "cut" / "out"), merge=True, num_shards=3, **options)
    binarized = []
    monkeypatch.setattr(merge_module, "binarize", lambda args, src, tgt, dest, pairs, *_: binarized.append(pairs))
    summary = merge(job, "de", "en")
    assert "merge resumed after 14 of 400 sentences" in capsys.readouterr().out
    assert calls[0] == 14 and len(calls) == math.ceil((400 - 14) / 7)
    texts = {name: open(os.path.join(work, name), encoding="utf-8").read() for name in ("seqkd.de", "seqkd.en")}
    assert ({k: v for k, v in summary.items() if k not in TIMINGS}, texts, binarized) == whole

    # other options: walked from the start
    calls.clear()
    merge(SeqKDJob(data=tiny_data, work=work, out=str(tmp_path / "cut" / "out"), merge=True, num_shards=3,
                   **dict(options, max_len_ratio=2.0)), "de", "en")
    assert "merge resumed" not in capsys.readouterr().out and calls[0] == 0


def test_shard_records_arriving_in_any_order_are_written_by_id_in_bounded_runs(tmp_path, monkeypatch):
    import fairseq_distill.seqkd.shard_writer as writer_module

    monkeypatch.setattr(writer_module, "RUN_BYTES", 200)  # a run every few records
    rng = random.Random(3)
    lists = {i: [f"h{i} ä{k}" for k in range(rng.randint(0, 3))] for i in range(0, 300, 3)}
    writer = ShardWriter(str(tmp_path / "new"), 1, 3, kept=3)
    for i in rng.sample(sorted(lists), len(lists)):
        writer.add(i, lists[i])
    assert len(writer.runs) > 10
    path = writer.finish({"nbest": 3}, {"sentences": writer.count})
    # the file the writer of every sentence at once wrote
    expected = write_shard(str(tmp_path / "old"), 1, 3, {"nbest": 3}, {"sentences": len(lists)},
                           shard_records(lists, 3))
    assert open(path, "rb").read() == open(expected, "rb").read()
    assert sorted(os.listdir(tmp_path / "new")) == ["shard1-of-3.jsonl"]  # the runs are gone

    writer = ShardWriter(str(tmp_path / "twice"), 0, 1, kept=1)
    for i in (4, 2, 4):
        writer.add(i, ["x"])
    with pytest.raises(DistillError, match="held sentence 4 twice in shard 0 of 1; decode the shard again"):
        writer.finish({}, {})
    assert os.listdir(tmp_path / "twice") == []


def test_generate_hands_each_sentence_over_as_its_hypotheses_end(monkeypatch):
    """fairseq-generate's lines of a sentence come together (S, T, then H, D, P per hypothesis):
    each sentence is handed over once, with its hypotheses in order, and nothing is kept."""
    import fairseq_distill.evaluation.generate as generate

    printed = "".join([
        "2024 | INFO | fairseq_cli.generate | loading\n",
        "S-5\tein Hund\n", "T-5\ta dog\n",
        "H-5\t-0.1\ta dog\n", "D-5\t-0.1\ta dog\n", "P-5\t-0.1 -0.1\n",
        "H-5\t-0.2\tthe dog\n", "D-5\t-0.2\tthe dog\n", "P-5\t-0.1 -0.3\n",
        "S-2\tzwei\n", "T-2\ttwo\n", "H-2\t-0.3\ttwo\n", "D-2\t-0.3\ttwo\n", "H-2\t-0.5\t\n",
        "Translated 2 sentences (5 tokens) in 0.1s (20.00 sentences/s, 50.00 tokens/s)\n",
    ])

    class Finished:
        def __init__(self, *args, **kwargs):
            self.stdout = io.StringIO(printed)

        def wait(self):
            return 0

        def poll(self):
            return 0

    monkeypatch.setattr(generate.subprocess, "Popen", Finished)
    handed = []
    result = generate.run_generate("data", "model.pt", "train", [], on_sentence=lambda i, h: handed.append((i, h)))
    assert handed == [(5, ["a dog", "the dog"]), (2, ["two", ""])]
    assert result.nbest == result.hypotheses == result.detokenized == result.references == {}
    assert result.sentences == 2


def test_a_side_read_a_range_at_a_time_is_the_side_read_one_by_one(tiny_data):
    side = Side(tiny_data, "train", "de", "en", "en")
    one_by_one = [side[i] for i in range(len(side))]
    assert side.read(0, len(side)) == one_by_one == list(side)
    for start, stop in ((0, 1), (17, 18), (3, 250), (399, 400), (390, 500), (50, 50)):
        assert side.read(start, stop) == one_by_one[start:stop]
    inputs = Inputs(SimpleNamespace(data=tiny_data, subset="train"), "de", "en", train=side)
    inputs.mono = Side(tiny_data, "valid", "de", "en", "en")  # standing in for --source's lines
    assert inputs.read(395, 405) == one_by_one[395:] + inputs.mono.read(0, 5)
    assert inputs.read(402, 404) == inputs.mono.read(2, 4) and inputs[401] == inputs.mono[1]
