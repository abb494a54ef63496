"""fsd-seqkd --teacher-ctranslate2: a pretrained CTranslate2 model (its own vocabulary and
tokenizer) as the seq-KD teacher.

Fast: the tokenizers' rules, and the refusals.
Slow (marked): end to end with a fairseq teacher exported to CTranslate2 (the same output as
``--backend ctranslate2``), and with a tiny randomly initialised Marian model (OPUS-MT's
architecture and tokenizer), whose expected output is computed here with CTranslate2 and
transformers directly."""
import argparse
import json
import os
import sys

import pytest

from fairseq_distill.errors import DistillError
from fairseq_distill.seqkd.external import check_external_options
from fairseq_distill.seqkd.inputs import SeqKDJob, load_side
from fairseq_distill.seqkd.teacher_tokenizers import (SentencePieceTokenizer, find_tokenizer, load_tokenizer)
from helpers import REPO, fairseq_train, run, write_raw_corpus

ctranslate2 = pytest.importorskip("ctranslate2")
spm = pytest.importorskip("sentencepiece")

SEQKD = os.path.join(os.path.dirname(sys.executable), "fsd-seqkd")
EXPORT = os.path.join(os.path.dirname(sys.executable), "fsd-export-ctranslate2")
CT2_THREADS = ["--threads", "1"]


def train_spm(text, model: str, size: int):
    """A sentencepiece model of ``size`` pieces trained on the file ``text``, saved as ``model``
    (any name: OPUS-MT's are ``*.spm``); returns its ordinary pieces in id order."""
    prefix = str(model) + ".training"
    spm.SentencePieceTrainer.train(input=str(text), model_prefix=prefix, vocab_size=size, character_coverage=1.0,
                                   bos_id=-1, eos_id=1, unk_id=2, pad_id=0, minloglevel=2)
    os.replace(prefix + ".model", str(model))
    os.remove(prefix + ".vocab")
    sp = spm.SentencePieceProcessor(model_file=str(model))
    return [sp.id_to_piece(i) for i in range(sp.get_piece_size()) if not (sp.is_control(i) or sp.is_unknown(i))]


@pytest.fixture(scope="module")
def spm_model(tmp_path_factory):
    """A sentencepiece model (vocabulary 200) trained on the test corpus's German side."""
    root = tmp_path_factory.mktemp("spm")
    raw = write_raw_corpus(root / "raw", 400, 4, 4)
    train_spm(f"{raw}/train.de", root / "source.model", 200)
    return str(root / "source.model")


def model_dir(tmp_path, files=("model.bin",), config=None):
    for name in files:
        (tmp_path / name).write_text("")
    if config is not None:
        (tmp_path / "config.json").write_text(json.dumps(config))
    return str(tmp_path)


# -- fast: the tokenizers ------------------------------------------------------------------------

def test_sentencepiece_tokenizer_adds_the_prefix_and_the_end_the_model_does_not_add(spm_model, tmp_path):
    sp = spm.SentencePieceProcessor(model_file=spm_model)
    pieces = sp.encode("Ein Hund läuft im Park.", out_type=str)
    plain = load_tokenizer(spm_model, model_dir(tmp_path, config={"eos_token": "</s>", "add_source_eos": False}))
    assert isinstance(plain, SentencePieceTokenizer)
    assert plain.encode("Ein  Hund läuft\tim Park. ") == pieces + ["</s>"]  # whitespace as the corpus's
    adds = load_tokenizer(spm_model, model_dir(tmp_path, config={"add_source_eos": True}), source_prefix="__de__")
    assert adds.encode("Ein Hund läuft im Park.") == ["__de__"] + pieces
    assert plain.decode(pieces) == "Ein Hund läuft im Park."


def test_opus_mt_layout_decodes_the_output_with_target_spm(spm_model, tmp_path):
    import shutil

    shutil.copy(spm_model, tmp_path / "source.spm")
    directory = model_dir(tmp_path, config={})
    assert find_tokenizer(directory) == str(tmp_path / "source.spm")
    tokenizer = load_tokenizer(find_tokenizer(directory), directory)
    assert tokenizer.record["target"]["name"] == "source.spm"  # no target.spm: the same model
    shutil.copy(spm_model, tmp_path / "target.spm")
    tokenizer = load_tokenizer(find_tokenizer(directory), directory)
    assert tokenizer.record["target"]["name"] == "target.spm"


def test_a_plugin_export_uses_the_corpus_segmentation(tiny_data, tmp_path):
    import shutil

    meta = json.load(open(os.path.join(tiny_data, "fairseq_distill.json")))
    for name in ("fairseq_distill.json", meta["sentencepiece_model"]):
        shutil.copy(os.path.join(tiny_data, name), tmp_path / name)
    directory = model_dir(tmp_path, config={"add_source_eos": True})
    assert find_tokenizer(directory) == directory
    tokenizer = load_tokenizer(directory, directory)
    assert tokenizer.kind == "plugin"
    assert tokenizer.encode("Ein Hund.")[-1] != "</s>"  # the exported model adds it
    with pytest.raises(DistillError, match="do not apply to a model exported by fsd-export-ctranslate2"):
        load_tokenizer(directory, directory, source_prefix="__de__")


@pytest.mark.parametrize("files,path,message", [
    ((), None, "holds no tokenizer .* name it with --teacher-tokenizer"),
    (("notes.txt",), "notes.txt", "is not a sentencepiece model"),
    ((), "missing.spm", "--teacher-tokenizer not found: '.*missing.spm'"),
    (("sub/",), "sub", "is a directory without fairseq_distill.json"),
])
def test_a_tokenizer_that_is_not_there_is_named(tmp_path, files, path, message):
    for name in files:
        if name.endswith("/"):
            (tmp_path / name).mkdir()
        else:
            (tmp_path / name).write_text("not a model\n")
    directory = model_dir(tmp_path, config={})
    with pytest.raises(DistillError, match=message):
        load_tokenizer(os.path.join(directory, path), directory) if path else find_tokenizer(directory)


# -- fast: the options ---------------------------------------------------------------------------

def job(**kwargs) -> SeqKDJob:
    return SeqKDJob(data="data-bin", out="out", **kwargs)


@pytest.mark.parametrize("kwargs,message", [
    ({"teacher_target_prefix": "deu_Latn"}, "--teacher-target-prefix apply to --teacher-ctranslate2 DIR"),
    ({"raw_train_source": "train.de", "device": "cuda"}, "--raw-train-source, --device apply to"),
])
def test_its_options_need_the_external_teacher(kwargs, message):
    with pytest.raises(DistillError, match=message):
        check_external_options(job(**kwargs))


def test_the_external_teacher_takes_no_other_teacher_and_needs_a_model(tmp_path):
    directory = model_dir(tmp_path)
    with pytest.raises(DistillError, match="takes no --teacher, --backend ctranslate2"):
        check_external_options(job(teacher_ctranslate2=directory, teacher="t.pt", backend="ctranslate2"))
    with pytest.raises(DistillError, match="unknown --device 'gpu'; choose one of auto, cpu, cuda"):
        check_external_options(job(teacher_ctranslate2=directory, device="gpu"))
    with pytest.raises(DistillError, match="is not a CTranslate2 model directory \\(no model.bin\\)"):
        check_external_options(job(teacher_ctranslate2=str(tmp_path / "nowhere")))
    check_external_options(job(teacher_ctranslate2=directory))  # fine


def test_the_cli_parses_the_external_options():
    from fairseq_distill.cli.seqkd import build_parser

    args = build_parser().parse_args(["--data", "d", "--teacher-ctranslate2", "m", "--teacher-source-prefix",
                                      "eng_Latn", "--teacher-target-prefix", "deu_Latn", "--compute-type", "int8",
                                      "--inter-threads", "2"])
    parsed = SeqKDJob(**vars(args))
    assert (parsed.teacher_ctranslate2, parsed.teacher_source_prefix, parsed.teacher_target_prefix,
            parsed.device, parsed.inter_threads) == ("m", "eng_Latn", "deu_Latn", "auto", 2)


# -- slow: end to end ----------------------------------------------------------------------------

def seqkd(*args):
    return run([SEQKD, *CT2_THREADS, *args]).stdout


def targets_as_text(data_bin, sp_model, src="de", tgt="en"):
    """The binarized training targets of ``data_bin``, detokenised with sentencepiece itself, runs
    of whitespace as one space (a hypothesis of pieces may end in a bare ``▁``; raw text does not)."""
    sp = spm.SentencePieceProcessor(model_file=sp_model)
    return [" ".join(sp.decode_pieces(line.split()).split()) for line in load_side(data_bin, "train", src, tgt, tgt)]


def corpus_spm(data_bin):
    with open(os.path.join(data_bin, "fairseq_distill.json")) as f:
        return os.path.join(data_bin, json.load(f)["sentencepiece_model"])


@pytest.mark.slow
def test_an_exported_fairseq_teacher_teaches_what_the_ctranslate2_backend_does(tiny_data, fluent_teacher, tmp_path):
    """A small teacher exported with fsd-export-ctranslate2 and used as an external model (raw text
    in, text out) gives the same translations as --backend ctranslate2 on its checkpoint."""
    export = str(tmp_path / "export")
    run([EXPORT, fluent_teacher, tiny_data, export, "--quantization", "float32"])
    run([SEQKD, "--teacher", fluent_teacher, "--backend", "ctranslate2", *CT2_THREADS, "--data", tiny_data,
         "--out", str(tmp_path / "backend"), "--subset", "valid", "--beam", "1"])
    # the valid set holds a piece the training data lacks: its raw text cannot be read back
    failed = run([SEQKD, "--teacher-ctranslate2", export, "--data", tiny_data, "--out", str(tmp_path / "no"),
                  "--subset", "valid"], check=False)
    assert "1 sentences of the 'valid' set" in failed.stdout and "pass --raw-train-source FILE" in failed.stdout
    raw_valid = os.path.join(os.path.dirname(tiny_data), "raw", "valid.de")
    out = seqkd("--teacher-ctranslate2", export, "--data", tiny_data, "--out", str(tmp_path / "external"),
                "--subset", "valid", "--beam", "1", "--raw-train-source", raw_valid)
    assert "(ctranslate2 model): 40 sentences" in out
    spm_model = corpus_spm(tiny_data)
    want = targets_as_text(str(tmp_path / "backend"), spm_model)
    assert targets_as_text(str(tmp_path / "external"), spm_model) == want
    summary, backend = (json.load(open(tmp_path / name / "seqkd_summary.json")) for name in ("external", "backend"))
    assert summary["backend"] == "ctranslate2 model" and summary["sentences"] == 40
    # counted on the teacher's own tokens, here the corpus's
    assert summary["hypotheses_at_length_limit"] == backend["hypotheses_at_length_limit"]
    assert {"tokenize_seconds", "detokenize_seconds", "segment_seconds"} <= set(summary)
    # bench/seqkd_data_diff.py counts what differs: the text nowhere here
    sys.path.insert(0, os.path.join(REPO, "bench"))
    from bench.seqkd_data_diff import compare

    diff = compare(str(tmp_path / "backend"), str(tmp_path / "external"))
    assert (diff["sentences"], diff["text_differs"], diff["examples"]) == (40, 0, [])


@pytest.fixture(scope="module")
def marian(tmp_path_factory):
    """A tiny randomly initialised Marian model (OPUS-MT's architecture) with its own sentencepiece
    models and MarianTokenizer, converted by CTranslate2's own converter with the tokenizer's files."""
    transformers = pytest.importorskip("transformers")
    import torch

    root = tmp_path_factory.mktemp("marian")
    raw = write_raw_corpus(root / "raw", 400, 4, 4)
    hf = root / "hf"
    hf.mkdir()
    vocab = {"</s>": 0, "<unk>": 1}
    for side, lang in (("source", "de"), ("target", "en")):
        for piece in train_spm(f"{raw}/train.{lang}", hf / f"{side}.spm", 150):
            vocab.setdefault(piece, len(vocab))
    vocab["<pad>"] = len(vocab)
    (hf / "vocab.json").write_text(json.dumps(vocab))
    tokenizer = transformers.MarianTokenizer(source_spm=str(hf / "source.spm"), target_spm=str(hf / "target.spm"),
                                             vocab=str(hf / "vocab.json"), source_lang="de", target_lang="en")
    tokenizer.save_pretrained(str(hf))
    torch.manual_seed(0)
    config = transformers.MarianConfig(
        vocab_size=len(vocab), d_model=16, encoder_layers=1, decoder_layers=1, encoder_attention_heads=2,
        decoder_attention_heads=2, encoder_ffn_dim=32, decoder_ffn_dim=32, max_position_embeddings=256,
        pad_token_id=vocab["<pad>"], eos_token_id=0, decoder_start_token_id=vocab["<pad>"])
    transformers.MarianMTModel(config).save_pretrained(str(hf))
    ct2 = root / "ct2"
    files = [str(hf / n) for n in os.listdir(hf) if n.endswith((".spm", ".json")) and n != "config.json"
             and not n.startswith("generation")]
    ctranslate2.converters.TransformersConverter(str(hf), copy_files=files).convert(str(ct2))
    return argparse.Namespace(raw=str(raw), ct2=str(ct2), hf=str(hf), tokenizer=transformers.AutoTokenizer
                              .from_pretrained(str(hf)))


def marian_translations(marian, lines, beam=2, nbest=1, limit=12, prefix=None):
    """What the Marian model writes for ``lines``, through CTranslate2 and its tokenizer directly."""
    tok = marian.tokenizer
    translator = ctranslate2.Translator(marian.ct2, device="cpu", intra_threads=1)
    source = [tok.convert_ids_to_tokens(tok.encode(line)) for line in lines]
    found = translator.translate_batch(source, beam_size=beam, num_hypotheses=nbest, max_input_length=0,
                                       max_decoding_length=limit + (1 if prefix else 0),
                                       target_prefix=[[prefix]] * len(source) if prefix else None)
    texts = []
    for result in found:
        hyps = [h[1:] if prefix else h for h in result.hypotheses]
        texts.append([" ".join(tok.decode(tok.convert_tokens_to_ids(h), skip_special_tokens=True).split())
                      for h in hyps])
    return texts


@pytest.mark.slow
def test_a_marian_teacher_translates_the_raw_source_with_its_own_tokenizer(tiny_data, marian, tmp_path):
    """OPUS-MT's layout: the Hugging Face tokenizer found in the model directory; the raw training
    source read back from the binarized data; --source lines translated too; a rerun keeps the shard."""
    raw_train = os.path.join(os.path.dirname(tiny_data), "raw", "train.de")
    lines = open(raw_train, encoding="utf-8").read().splitlines()
    mono = tmp_path / "mono.de"
    mono.write_text("Ein Mann fährt Fahrrad.\nZwei Kinder spielen im Sand.\n", encoding="utf-8")
    argv = ["--teacher-ctranslate2", marian.ct2, "--data", tiny_data, "--out", str(tmp_path / "out"), "--beam", "2",
            "--max-len-a", "0", "--max-len-b", "12", "--source", str(mono), "--on-missing", "reference"]
    out = seqkd(*argv)
    want = [hyps[0] for hyps in marian_translations(marian, lines + mono.read_text().splitlines())]
    got = targets_as_text(str(tmp_path / "out"), corpus_spm(tiny_data))
    with open(tmp_path / "out" / "seqkd_summary.json") as f:
        summary = json.load(f)
    assert summary["sentences"] == len(lines) == 400 and summary["monolingual_added"] == 2
    empty = [i for i, text in enumerate(want) if not text]
    assert summary["missing_or_empty"] == len(empty)
    assert [g for i, g in enumerate(got) if i not in empty] == [w for i, w in enumerate(want) if i not in empty]
    assert all("<unk>" not in g for g in got)
    header = json.loads(open(tmp_path / "out.work" / "shard0-of-1.jsonl", encoding="utf-8").readline())
    assert header["settings"]["tokenizer"]["kind"] == "huggingface"
    assert header["settings"]["teacher_model"]["name"] == "ct2"
    assert header["settings"]["raw_train_source"] == "desegmented"
    assert "kept from an earlier run" in seqkd(*argv) and "kept from an earlier run" not in out
    # a student trains on it like on any data-bin
    trained = fairseq_train(str(tmp_path / "out"), str(tmp_path / "student"), "--criterion",
                            "label_smoothed_cross_entropy", "--max-update", "2")
    assert os.path.isfile(tmp_path / "student" / "checkpoint_last.pt"), trained.stdout[-2000:]


@pytest.mark.slow
def test_sentencepiece_tokenizer_target_prefix_shards_and_nbest(tiny_data, marian, tmp_path):
    """The same model read through its source.spm (no transformers in the path), a forced first
    target token removed from the output, two shards merged, 2-best lists with --select first,
    and the raw source given as a file (checked against the binarized one)."""
    raw_train = os.path.join(os.path.dirname(tiny_data), "raw", "train.de")
    lines = open(raw_train, encoding="utf-8").read().splitlines()
    prefix = "▁A"
    argv = ["--teacher-ctranslate2", marian.ct2, "--teacher-tokenizer", os.path.join(marian.ct2, "source.spm"),
            "--teacher-target-prefix", prefix, "--data", tiny_data, "--work", str(tmp_path / "work"),
            "--beam", "2", "--nbest", "2", "--select", "first", "--max-len-a", "0", "--max-len-b", "12",
            "--num-shards", "2", "--raw-train-source", raw_train, "--on-missing", "reference"]
    for shard in ("0", "1"):
        seqkd(*argv, "--shard-id", shard)
    seqkd(*argv, "--merge", "--out", str(tmp_path / "out"))
    want = [hyps[0] for hyps in marian_translations(marian, lines, nbest=2, prefix=prefix)]
    got = targets_as_text(str(tmp_path / "out"), corpus_spm(tiny_data))
    assert [g for g, w in zip(got, want) if w] == [w for w in want if w]
    header = json.loads(open(tmp_path / "work" / "shard1-of-2.jsonl", encoding="utf-8").readline())
    assert header["settings"]["tokenizer"]["kind"] == "sentencepiece"
    assert header["settings"]["target_prefix"] == prefix
    assert header["settings"]["raw_train_source"]["name"] == "train.de"
    with open(tmp_path / "work" / "shard1-of-2.jsonl", encoding="utf-8") as f:
        records = [json.loads(line) for line in f][1:]
    assert [r["id"] for r in records] == list(range(1, 400, 2)) and all(len(r["nbest"]) == 2 for r in records)
    # the same shards merged again: the 2-best of best chrF kept, pairs beyond a length ratio dropped
    chrf = [a if a != "first" else "chrf" for a in argv]
    seqkd(*chrf, "--merge", "--out", str(tmp_path / "chrf"), "--max-len-ratio", "1.5")
    summary = json.load(open(tmp_path / "chrf" / "seqkd_summary.json"))
    assert summary["selected_other_than_1best"] > 0 and summary["filtered_by_length_ratio"] > 0
    assert summary["kept"] + summary["filtered_by_length_ratio"] == 400
    # a shard decoded again with another target prefix is not merged with the other
    vocabulary = json.load(open(os.path.join(marian.ct2, "shared_vocabulary.json"), encoding="utf-8"))
    other = next(t for t in vocabulary if t.startswith("▁") and len(t) > 1 and t != prefix)
    seqkd(*[a if a != prefix else other for a in argv], "--shard-id", "1")
    failed = run([SEQKD, *argv, "--merge", "--out", str(tmp_path / "mixed")], check=False)
    assert failed.returncode != 0
    assert f"decoded with different settings (--target-prefix {prefix} against {other})" in failed.stdout


@pytest.mark.slow
def test_a_wrong_raw_source_or_prefix_is_named(tiny_data, marian, tmp_path):
    raw_train = os.path.join(os.path.dirname(tiny_data), "raw", "train.de")
    lines = open(raw_train, encoding="utf-8").read().splitlines()
    shifted = tmp_path / "shifted.de"
    shifted.write_text("\n".join(lines[1:] + lines[:1]) + "\n", encoding="utf-8")
    base = [SEQKD, "--teacher-ctranslate2", marian.ct2, "--data", tiny_data, "--out", str(tmp_path / "out")]
    failed = run([*base, "--raw-train-source", str(shifted)], check=False)
    assert failed.returncode != 0 and "Traceback" not in failed.stdout
    assert "line 1 is not training sentence 0" in failed.stdout
    failed = run([*base, "--teacher-target-prefix", "deu_Latn"], check=False)
    assert "--teacher-target-prefix deu_Latn is not a token of the model's target vocabulary" in failed.stdout


@pytest.fixture(scope="module")
def m2m100(tmp_path_factory):
    """A tiny randomly initialised M2M-100 model (many-to-many, language tokens on both sides)
    with its M2M100Tokenizer, converted by CTranslate2's converter."""
    transformers = pytest.importorskip("transformers")
    import torch

    root = tmp_path_factory.mktemp("m2m100")
    raw = write_raw_corpus(root / "raw", 400, 4, 4)
    hf = root / "hf"
    hf.mkdir()
    both = root / "both.txt"
    both.write_text(open(f"{raw}/train.de").read() + open(f"{raw}/train.en").read())
    vocab = {"<s>": 0, "<pad>": 1, "</s>": 2, "<unk>": 3}
    for piece in train_spm(both, hf / "sentencepiece.bpe.model", 200):
        vocab.setdefault(piece, len(vocab))
    (hf / "vocab.json").write_text(json.dumps(vocab))
    files = {"vocab_file": str(hf / "vocab.json"), "spm_file": str(hf / "sentencepiece.bpe.model")}
    plain = transformers.M2M100Tokenizer(**files, src_lang="de", tgt_lang="en")
    languages = [plain.convert_ids_to_tokens([plain.get_lang_id(code)])[0] for code in plain.lang_code_to_id]
    # transformers 5's M2M100Tokenizer keeps its language tokens out of get_vocab(), where
    # CTranslate2 4's converter reads the vocabulary; as additional special tokens they are in it
    tokenizer = transformers.M2M100Tokenizer(**files, src_lang="de", tgt_lang="en", additional_special_tokens=languages)
    tokenizer.save_pretrained(str(hf))
    torch.manual_seed(0)
    config = transformers.M2M100Config(
        vocab_size=len(tokenizer) + tokenizer.num_madeup_words, d_model=16, encoder_layers=1, decoder_layers=1,
        encoder_attention_heads=2, decoder_attention_heads=2, encoder_ffn_dim=32, decoder_ffn_dim=32,
        max_position_embeddings=256, pad_token_id=1, bos_token_id=0, eos_token_id=2, decoder_start_token_id=2)
    transformers.M2M100ForConditionalGeneration(config).save_pretrained(str(hf))
    ct2 = root / "ct2"
    files = [str(hf / n) for n in os.listdir(hf) if n.endswith((".model", ".json")) and n != "config.json"
             and not n.startswith("generation")]
    ctranslate2.converters.TransformersConverter(str(hf), copy_files=files).convert(str(ct2))
    return argparse.Namespace(ct2=str(ct2), tokenizer=transformers.AutoTokenizer.from_pretrained(str(hf)))


@pytest.mark.slow
def test_an_m2m100_teacher_reads_and_writes_language_tokens(tiny_data, m2m100, tmp_path):
    """The source language set on the tokenizer (it puts __de__ first), the target language token
    forced first and removed: the data equals CTranslate2's output through the tokenizer directly."""
    raw_train = os.path.join(os.path.dirname(tiny_data), "raw", "train.de")
    lines = open(raw_train, encoding="utf-8").read().splitlines()
    base = [SEQKD, "--teacher-ctranslate2", m2m100.ct2, "--data", tiny_data, "--out", str(tmp_path / "no")]
    for extra, message in (([], "is multilingual: pass --teacher-source-prefix with the corpus's source language"),
                           (["--teacher-source-prefix", "xx"], "--teacher-source-prefix xx: not a language of"),
                           (["--teacher-source-prefix", "de"], "is multilingual: pass --teacher-target-prefix with "
                                                               "the token of the language it should write (for 'en': "
                                                               "__en__")):
        failed = run([*base, *extra], check=False)
        assert failed.returncode != 0 and message in failed.stdout and "Traceback" not in failed.stdout
    seqkd("--teacher-ctranslate2", m2m100.ct2, "--teacher-source-prefix", "de", "--teacher-target-prefix", "__en__",
          "--data", tiny_data, "--out", str(tmp_path / "out"), "--beam", "2", "--max-len-a", "0", "--max-len-b", "12",
          "--on-missing", "reference")
    tok = m2m100.tokenizer
    tok.src_lang = "de"
    source = [tok.convert_ids_to_tokens(tok.encode(line)) for line in lines]
    assert all(s[0] == "__de__" and s[-1] == "</s>" for s in source)
    translator = ctranslate2.Translator(m2m100.ct2, device="cpu", intra_threads=1)
    found = translator.translate_batch(source, beam_size=2, max_input_length=0, max_decoding_length=13,
                                       target_prefix=[["__en__"]] * len(source))
    assert all(r.hypotheses[0][0] == "__en__" for r in found)
    want = [" ".join(tok.decode(tok.convert_tokens_to_ids(r.hypotheses[0][1:]), skip_special_tokens=True).split())
            for r in found]
    got = targets_as_text(str(tmp_path / "out"), corpus_spm(tiny_data))
    assert [g for g, w in zip(got, want) if w] == [w for w in want if w]
    header = json.loads(open(tmp_path / "out.work" / "shard0-of-1.jsonl", encoding="utf-8").readline())
    assert (header["settings"]["source_prefix"], header["settings"]["target_prefix"]) == ("de", "__en__")


class _FailingTranslator:
    def translate_batch(self, source, asynchronous=False, **kwargs):
        raise RuntimeError("Library libcublas.so.12 is not found or cannot be loaded")


class _WordTokenizer:
    def encode(self, text):
        return text.split()


def test_an_external_teacher_names_a_missing_cuda_library():
    """The external teacher's way out is its own --device cpu (it has no fairseq backend)."""
    from fairseq_distill.seqkd.external import ExternalTeacher

    teacher = object.__new__(ExternalTeacher)  # no model to load: only translate() is under test
    teacher.args = argparse.Namespace(max_len_a=1.2, max_len_b=10, max_tokens=None, batch_size=4, beam=4, nbest=1,
                                      lenpen=1.0)
    teacher.tokenizer, teacher.prefix, teacher.adds_eos = _WordTokenizer(), [], True
    teacher.translator, teacher.inter_threads = _FailingTranslator(), 1
    with pytest.raises(DistillError, match=r"could not load libcublas\.so\.12.*pip install nvidia-cublas-cu12.*"
                                           r"or decode with --device cpu"):
        teacher.translate({0: "ein Satz", 1: "noch einer hier"})
