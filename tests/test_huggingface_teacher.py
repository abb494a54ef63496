"""Hugging Face teachers (fairseq_distill.teacher.huggingface): a fairseq pre-norm teacher written
out as an M2M100 model answers exactly as the fairseq teacher does, a MarianMT teacher answers as
its own teacher-forced forward does, position for position, masked rows stay masked, and bad
teachers are refused in one line."""
import json
import os
import re
import sys

import pytest
import torch
from fairseq.data import Dictionary

from fairseq_distill.errors import DistillError
from fairseq_distill.features import FeatureRequest, run_with_features, stack_shape
from fairseq_distill.losses import ensemble_log_probs, log_probs_at, topk_word_kd_loss, word_kd_loss
from fairseq_distill.teacher import huggingface
from fairseq_distill.text import teacher_vocabulary
from fairseq_distill.teacher.frozen import TeacherEnsemble, load_teacher
from helpers import build, build_trainer, transformer_flags
from hf_models import fairseq_as_m2m100, m2m100_teacher, marian_teacher, multi30k_lines, randomise_layer_norms

pytest.importorskip("transformers")

PRENORM = transformer_flags(2, 2, 16, 32) + ["--encoder-normalize-before", "--decoder-normalize-before"]
EVERYTHING = FeatureRequest(encoder_states=True, decoder_states=True,
                            attention=frozenset({"encoder_self", "decoder_self", "decoder_cross"}))


def varied_batch(task, ids=(0, 3, 7, 12, 20, 31)):
    """A batch of sentences of different lengths: the source left-padded, the target right-padded."""
    task.load_dataset("train")
    dataset = task.dataset("train")
    sample = dataset.collater([dataset[i] for i in ids])
    lengths = sample["net_input"]["src_lengths"]
    assert len(set(lengths.tolist())) > 2, "the batch must mix source lengths"
    return sample


@pytest.fixture(scope="module")
def task(tiny_data):
    return build(tiny_data, "--task", "translation_distill")[1]


@pytest.fixture(scope="module")
def pair(tiny_data, tmp_path_factory):
    """(task, fairseq teacher, the same as an HF M2M100 teacher, batch)."""
    _, task, model = build(tiny_data, "--task", "translation_distill", model=PRENORM)
    randomise_layer_norms(model)
    model.eval()
    out = fairseq_as_m2m100(model, task.target_dictionary, str(tmp_path_factory.mktemp("m2m100")))
    teacher = load_teacher(out, task)
    return task, model, teacher, out, varied_batch(task)


def masks(task, sample):
    src_real = sample["net_input"]["src_tokens"].ne(task.source_dictionary.pad())
    tgt_real = sample["target"].ne(task.target_dictionary.pad())
    return src_real, tgt_real


def test_an_m2m100_copy_of_a_fairseq_prenorm_teacher_gives_its_logits_states_and_maps(pair):
    task, model, teacher, _, sample = pair
    with torch.no_grad():
        want = run_with_features(model, sample["net_input"], EVERYTHING)
        got = teacher.features(sample["net_input"], EVERYTHING)
    src_real, tgt_real = masks(task, sample)
    symbols = task.target_dictionary.symbols
    # <s> and <pad> are never targets (the copy's vocabulary holds fairseq's padding symbols too)
    masked = [symbols.index("<s>"), symbols.index("<pad>")]
    kept = [i for i in range(len(symbols)) if i not in masked]
    assert masked and symbols.index("</s>") in kept and symbols.index("<unk>") in kept
    assert torch.allclose(got.logits[..., kept][tgt_real], want.logits[..., kept][tgt_real], atol=1e-5)
    assert torch.isneginf(got.logits[..., masked]).all()
    # states: embeddings first, then each layer's output before the final LayerNorm (fairseq's)
    assert len(got.encoder_states) == len(want.encoder_states) == 3
    assert len(got.decoder_states) == len(want.decoder_states) == 3
    for g, w in zip(got.encoder_states, want.encoder_states):
        assert g.shape == w.shape  # S x B x C
        assert torch.allclose(g.transpose(0, 1)[src_real], w.transpose(0, 1)[src_real], atol=1e-5)
    for g, w in zip(got.decoder_states, want.decoder_states):
        assert torch.allclose(g.transpose(0, 1)[tgt_real], w.transpose(0, 1)[tgt_real], atol=1e-5)
    assert torch.equal(got.encoder_padding_mask, want.encoder_padding_mask)
    # per-head maps, B x H x T x S, at real rows and columns
    for kind, rows, cols in (("encoder_self", src_real, src_real), ("decoder_self", tgt_real, tgt_real),
                             ("decoder_cross", tgt_real, src_real)):
        assert len(got.attention[kind]) == len(want.attention[kind]) == 2
        for g, w in zip(got.attention[kind], want.attention[kind]):
            assert g.shape == w.shape
            real = rows[:, None, :, None] & cols[:, None, None, :]
            assert torch.allclose(g.masked_fill(~real, 0), w.masked_fill(~real, 0), atol=1e-5)


def test_word_kd_and_cache_rows_from_the_m2m100_copy_equal_the_fairseq_teachers(pair):
    task, model, teacher, _, sample = pair
    with torch.no_grad():
        fairseq_logits = model(**sample["net_input"])[0]
        hf_logits = teacher(**sample["net_input"])[0]
    # the fairseq teacher with the rows no target can be (<s>, <pad>) masked as well
    symbols = task.target_dictionary.symbols
    never = torch.tensor([s in ("<s>", "<pad>") for s in symbols])
    fairseq_logits = fairseq_logits.masked_fill(never, float("-inf"))
    _, tgt_real = masks(task, sample)
    torch.manual_seed(1)
    student = log_probs_at(torch.randn_like(hf_logits), 2.0)
    want = word_kd_loss(student, ensemble_log_probs([fairseq_logits], 2.0), tgt_real, 2.0)
    got = word_kd_loss(student, ensemble_log_probs([hf_logits], 2.0), tgt_real, 2.0)
    assert torch.isfinite(got) and abs(float(got) - float(want)) < 1e-4 * max(1.0, abs(float(want)))
    # top-8 rows as fsd-cache-teacher stores them: the same tokens, the same log-probabilities
    want_v, want_i = ensemble_log_probs([fairseq_logits]).topk(8, dim=-1)
    got_v, got_i = ensemble_log_probs([hf_logits]).topk(8, dim=-1)
    assert torch.equal(got_i[tgt_real], want_i[tgt_real])
    assert torch.allclose(got_v[tgt_real], want_v[tgt_real], atol=1e-5)
    assert not never[got_i[tgt_real]].any()
    loss = topk_word_kd_loss(student, got_v, got_i, tgt_real, 2.0, True)
    assert torch.isfinite(loss)


def test_the_hf_teacher_states_its_layout_and_stays_frozen_in_the_ensemble(pair, tiny_data):
    task, model, teacher, out, sample = pair
    assert stack_shape(teacher) == stack_shape(model)
    ensemble = TeacherEnsemble.load(out, task)
    before = {k: v.clone() for k, v in ensemble.models[0].model.state_dict().items()}
    assert all(not p.requires_grad for p in ensemble.parameters())
    like = torch.zeros(1, dtype=torch.float64)
    (features,) = ensemble.features(sample["net_input"], EVERYTHING, like)
    assert features.logits.dtype == torch.float64  # follows the student's dtype
    assert not ensemble.models[0].training
    after = ensemble.models[0].model.state_dict()
    assert all(torch.equal(before[k].double() if before[k].is_floating_point() else before[k],
                           after[k].double() if after[k].is_floating_point() else after[k]) for k in before)



def test_a_mixed_ensemble_of_a_fairseq_teacher_and_its_m2m100_copy_averages_like_either(pair, tiny_data, tmp_path):
    """--teacher-path fairseq.pt:HF_DIR: one teacher of each kind, same vocabulary. The two are
    the same network, so the ensemble's distribution is each one's (the mean of two equal
    distributions), and each member answers every feature request."""
    from omegaconf import OmegaConf

    task, model, teacher, out, sample = pair
    cfg, _, _ = build(tiny_data, "--task", "translation_distill", model=PRENORM)
    checkpoint = tmp_path / "fairseq_teacher.pt"
    # weights only, laid out as fsd-export-student writes a decoding checkpoint
    torch.save({"args": None, "cfg": OmegaConf.to_container(cfg, resolve=True), "model": model.state_dict(),
                "optimizer_history": [{"criterion_name": "CrossEntropyCriterion", "optimizer_name": "none",
                                       "lr_scheduler_state": {}, "num_updates": 0}], "extra_state": {}}, checkpoint)
    ensemble = TeacherEnsemble.load(f"{checkpoint}:{out}", task)
    assert [type(m).__name__ for m in ensemble.models][1] == type(teacher).__name__
    like = torch.zeros(1)
    fairseq_features, hf_features = ensemble.features(sample["net_input"], EVERYTHING, like)
    _, tgt_real = masks(task, sample)
    symbols = task.target_dictionary.symbols
    kept = [i for i, s in enumerate(symbols) if s not in ("<s>", "<pad>")]
    mixed = ensemble_log_probs([fairseq_features.logits.masked_fill(
        torch.tensor([s in ("<s>", "<pad>") for s in symbols]), float("-inf")), hf_features.logits])
    alone = ensemble_log_probs([hf_features.logits])
    assert torch.allclose(mixed[..., kept][tgt_real], alone[..., kept][tgt_real], atol=1e-5)
    for f in (fairseq_features, hf_features):
        assert len(f.encoder_states) == len(f.decoder_states) == 3 and len(f.attention["decoder_cross"]) == 2

# -- MarianMT: its own sentencepiece models, <pad> as the decoder's start, absolute positions ----------

@pytest.fixture(scope="module")
def marian(tmp_path_factory):
    out = marian_teacher(str(tmp_path_factory.mktemp("marian")))
    from transformers import AutoTokenizer, MarianMTModel

    return out, AutoTokenizer.from_pretrained(out), MarianMTModel.from_pretrained(out).eval()


def marian_dictionaries(tokenizer, lines_de, lines_en, codes=0):
    """fairseq dictionaries of the pieces the text uses (as fsd-prepare-corpus --vocabulary-from
    MODEL_DIR makes them) and the text's pieces; ``codes``: how many leading language codes the
    tokenizer puts before each side's pieces (left out, as the student's data leaves them out)."""
    dictionary = Dictionary()
    src = [tokenizer.convert_ids_to_tokens(tokenizer(line)["input_ids"][codes:-1]) for line in lines_de]
    tgt = [tokenizer.convert_ids_to_tokens(tokenizer(text_target=line)["input_ids"][codes:-1]) for line in lines_en]
    for pieces in src + tgt:
        for p in pieces:
            dictionary.add_symbol(p)
    dictionary.finalize(padding_factor=8)
    return dictionary, src, tgt


def fairseq_batch(dictionary, src, tgt):
    """A fairseq batch: source left-padded with </s> at the end, prev_output_tokens = </s> + target."""
    pad, eos = dictionary.pad(), dictionary.eos()
    src_ids = [[dictionary.index(p) for p in pieces] + [eos] for pieces in src]
    tgt_ids = [[dictionary.index(p) for p in pieces] + [eos] for pieces in tgt]
    S, T = max(map(len, src_ids)), max(map(len, tgt_ids))
    src_tokens = torch.full((len(src), S), pad)
    prev = torch.full((len(tgt), T), pad)
    target = torch.full((len(tgt), T), pad)
    for b, (s, t) in enumerate(zip(src_ids, tgt_ids)):
        src_tokens[b, S - len(s):] = torch.tensor(s)
        target[b, :len(t)] = torch.tensor(t)
        prev[b, :len(t)] = torch.tensor([eos] + t[:-1])
    return {"src_tokens": src_tokens, "src_lengths": torch.tensor([len(s) for s in src_ids]),
            "prev_output_tokens": prev}, target


def test_a_marian_teacher_answers_as_its_own_teacher_forced_forward_position_for_position(marian):
    out, tokenizer, hf = marian
    lines_de, lines_en = multi30k_lines("de", 6), multi30k_lines("en", 6)
    dictionary, src, tgt = marian_dictionaries(tokenizer, lines_de, lines_en)
    net_input, target = fairseq_batch(dictionary, src, tgt)
    assert len(set(net_input["src_lengths"].tolist())) > 2
    teacher = huggingface.load(out, dictionary, dictionary)
    with torch.no_grad():
        got = teacher.features(net_input, FeatureRequest(encoder_states=True))
    vocab = tokenizer.get_vocab()
    for b in range(len(lines_de)):
        # Marian's own teacher forcing: labels = target + </s>, the decoder starts with <pad>
        enc = tokenizer(lines_de[b], return_tensors="pt")
        labels = tokenizer(text_target=lines_en[b], return_tensors="pt")["input_ids"]
        with torch.no_grad():
            ref = hf(**enc, labels=labels, output_hidden_states=True)
        n = labels.size(1)
        kept = torch.tensor([vocab[s] if s in vocab else 0 for s in dictionary.symbols])
        real = ~teacher.masked
        assert torch.allclose(got.logits[b, :n][:, real], ref.logits[0][:, kept][:, real], atol=1e-5)
        # the source state of each real token, where fairseq has it (left-padded)
        length = int(net_input["src_lengths"][b])
        state = got.encoder_states[1][-length:, b]
        assert torch.allclose(state, ref.encoder_hidden_states[1][0], atol=1e-5)
    # the rows no target can be: <pad> (its logit would be exactly the bias), <s>, padding symbols
    for symbol in ("<pad>", "<s>"):
        assert torch.isneginf(got.logits[..., dictionary.index(symbol)]).all()
    assert not torch.isneginf(got.logits[..., dictionary.eos()]).any()


def test_a_one_position_shift_of_the_decoder_input_is_caught(marian):
    """Feeding fairseq's </s> where Marian starts with <pad> (or shifting the target) changes every
    position's logits: the mapping is what makes the comparison above pass."""
    out, tokenizer, hf = marian
    lines_de, lines_en = multi30k_lines("de", 3), multi30k_lines("en", 3)
    dictionary, src, tgt = marian_dictionaries(tokenizer, lines_de, lines_en)
    net_input, _ = fairseq_batch(dictionary, src, tgt)
    teacher = huggingface.load(out, dictionary, dictionary)
    with torch.no_grad():
        right = teacher(**net_input)[0]
        teacher.decoder_start = tokenizer.eos_token_id  # fairseq's start symbol, unmapped
        wrong = teacher(**net_input)[0]
    real = ~teacher.masked
    assert not torch.allclose(right[0, 0, real], wrong[0, 0, real], atol=1e-3)


@pytest.fixture(scope="module")
def m2m100(tmp_path_factory):
    out = m2m100_teacher(str(tmp_path_factory.mktemp("m2m100-codes")))
    from transformers import AutoTokenizer, M2M100ForConditionalGeneration

    return out, AutoTokenizer.from_pretrained(out), M2M100ForConditionalGeneration.from_pretrained(out).eval()


def test_an_m2m100_teacher_gets_its_language_codes_which_the_students_data_does_not_hold(m2m100, tmp_path):
    """The teacher reads __de__ x </s> and is forced with </s> __en__ y; the student's data holds
    x and y alone: the teacher's logits at the student's positions are its own from position 1 on."""
    out, tokenizer, hf = m2m100
    lines_de, lines_en = multi30k_lines("de", 5), multi30k_lines("en", 5)
    # the student's pieces: the teacher's, without the language codes
    dictionary, src, tgt = marian_dictionaries(tokenizer, lines_de, lines_en, codes=1)
    assert not any(s.startswith("__") for s in dictionary.symbols)
    net_input, _ = fairseq_batch(dictionary, src, tgt)
    data = tmp_path / "data-bin"
    data.mkdir()
    (data / "fairseq_distill.json").write_text(json.dumps(
        {"teacher_vocabulary": {"source_code": "__de__", "target_code": "__en__"}}))
    teacher = huggingface.load(out, dictionary, dictionary, str(data))
    with torch.no_grad():
        got = teacher.features(net_input, EVERYTHING)
    vocab = teacher_vocabulary.teacher_vocabulary(out, tokenizer)
    kept = torch.tensor([vocab.get(s, 0) for s in dictionary.symbols])
    real = ~teacher.masked
    for b in range(len(lines_de)):
        enc = tokenizer(lines_de[b], text_target=lines_en[b], return_tensors="pt")
        assert enc["input_ids"][0, 0] == vocab["__de__"] and enc["labels"][0, 0] == vocab["__en__"]
        with torch.no_grad():
            ref = hf(input_ids=enc["input_ids"], labels=enc["labels"], output_hidden_states=True)
        n = enc["labels"].size(1) - 1  # the student's target: y </s>
        assert torch.allclose(got.logits[b, :n][:, real], ref.logits[0, 1:][:, kept][:, real], atol=1e-5)
        length = int(net_input["src_lengths"][b])
        # the encoder's embedding output of each source token, the code's position left out
        assert torch.allclose(got.encoder_states[0][-length:, b], ref.encoder_hidden_states[0][0, 1:], atol=1e-5)
    # language codes are never targets; maps keep the student's shape and rows sum to 1 at real positions
    assert torch.isneginf(got.logits[..., [i for i, s in enumerate(dictionary.symbols) if s == "<pad>"]]).all()
    S, T = net_input["src_tokens"].size(1), net_input["prev_output_tokens"].size(1)
    assert got.attention["decoder_cross"][0].shape[-2:] == (T, S)
    assert got.attention["encoder_self"][0].shape[-2:] == (S, S)
    rows = got.attention["decoder_self"][0].sum(-1)
    assert torch.allclose(rows, torch.ones_like(rows), atol=1e-5)


def test_a_data_bin_prepared_for_a_code_the_teacher_lacks_is_refused(m2m100, tmp_path):
    out, tokenizer, _ = m2m100
    dictionary, _, _ = marian_dictionaries(tokenizer, multi30k_lines("de", 3), multi30k_lines("en", 3), codes=1)
    data = tmp_path / "data-bin"
    data.mkdir()
    (data / "fairseq_distill.json").write_text(json.dumps(
        {"teacher_vocabulary": {"source_code": "__xx__", "target_code": "__en__"}}))
    with pytest.raises(DistillError, match="has no language code '__xx__'"):
        huggingface.load(out, dictionary, dictionary, str(data))


def test_mass_outside_the_kept_pieces_is_counted(marian):
    out, tokenizer, _ = marian
    lines_de, lines_en = multi30k_lines("de", 4), multi30k_lines("en", 4)
    dictionary, src, tgt = marian_dictionaries(tokenizer, lines_de, lines_en)
    net_input, target = fairseq_batch(dictionary, src, tgt)
    teacher = huggingface.load(out, dictionary, dictionary)
    non_pad = target.ne(dictionary.pad())
    with torch.no_grad():
        rows = teacher.decoder_output(net_input)[non_pad]
        outside = teacher.outside_mass(rows, chunk=5)
        assert abs(teacher.outside_mass(rows, chunk=1000) - outside) < 1e-4  # chunks change nothing
    positions = int(non_pad.sum())
    # the student keeps a fraction of the teacher's pieces; a random teacher spreads its mass over all
    kept = int((~teacher.masked).sum())
    assert kept < len(tokenizer.get_vocab()) - 2
    assert 0.0 < outside / positions < 1.0



def test_the_merged_cache_records_the_mass_outside_weighted_by_each_shards_tokens():
    from fairseq_distill.teacher.cache_writer import outside_mass_of

    # shard 0 measured 0.10 on 300 of its tokens, shard 1 0.40 on 100: (30 + 40) / 400
    records = [{"tokens": 2400, "teacher_mass_outside_vocabulary": 0.10, "teacher_mass_measured_tokens": 300},
               {"tokens": 800, "teacher_mass_outside_vocabulary": 0.40, "teacher_mass_measured_tokens": 100}]
    assert outside_mass_of(records) == {"teacher_mass_outside_vocabulary": pytest.approx(0.175),
                                        "teacher_mass_measured_tokens": 400}
    assert outside_mass_of([{"tokens": 300}]) == {}  # a fairseq teacher measures none

# -- --teacher-pieces N: the N most frequent pieces kept, the teacher's mass on the rest on <unk> ----

def test_keeping_the_most_frequent_teacher_pieces_lists_and_counts_the_rest(tmp_path):
    """A joined dictionary as fairseq writes it (most frequent first): 'zz' is not the teacher's
    (it becomes <unk> whatever N), the two most frequent of the others stay, 'c' and 'd' are
    trimmed (3 + 1 occurrences), fairseq's padding symbol stays."""
    lines = "a 10\nzz 5\nb 7\nc 3\nd 1\nmadeupword0000 0\n"
    for lang in ("de", "en"):
        (tmp_path / f"dict.{lang}.txt").write_text(lines, encoding="utf-8")
    teacher = {"vocab": {"</s>": 0, "<unk>": 1, "a": 2, "b": 3, "c": 4, "d": 5}, "record": {}}
    record = teacher_vocabulary.keep_teacher_pieces(str(tmp_path), ("de", "en"), teacher, 2)
    assert record == {"kept_pieces": 2, "unknown_pieces": 1, "unknown_occurrences": 5, "piece_occurrences": 26,
                      "teacher_pieces": 2, "trimmed_pieces": 2, "trimmed_occurrences": 4,
                      "trimmed_pieces_file": teacher_vocabulary.TRIMMED_PIECES}
    for lang in ("de", "en"):
        assert (tmp_path / f"dict.{lang}.txt").read_text(encoding="utf-8") == "a 10\nb 7\nmadeupword0000 0\n"
    assert (tmp_path / teacher_vocabulary.TRIMMED_PIECES).read_text(encoding="utf-8") == "c 3\nd 1\n"
    said = teacher_vocabulary.teacher_dictionary_summary({**record, "pieces": 6})
    assert "2 of its 6" in said and "--teacher-pieces 2 trimmed the other 2" in said
    assert "whose 4 occurrences (15.38% of the training text's pieces) became <unk>" in said  # 4 / 26
    # without N: every piece the teacher has stays, nothing is listed as trimmed
    for lang in ("de", "en"):
        (tmp_path / f"dict.{lang}.txt").write_text(lines, encoding="utf-8")
    record = teacher_vocabulary.keep_teacher_pieces(str(tmp_path), ("de", "en"), teacher)
    assert record["kept_pieces"] == 4 and "trimmed_pieces" not in record


def trimmed_teacher(out, dictionary, trimmed, directory):
    """The teacher of a data-bin whose dictionary lacks the pieces ``trimmed`` (as --teacher-pieces
    leaves them out), with the record and list fsd-prepare-corpus writes."""
    kept = Dictionary()
    for symbol, count in zip(dictionary.symbols[4:], dictionary.count[4:]):
        if symbol not in trimmed and not symbol.startswith("madeupword"):
            kept.add_symbol(symbol, count)
    os.makedirs(directory, exist_ok=True)
    with open(os.path.join(directory, "fairseq_distill.json"), "w") as f:
        json.dump({"teacher_vocabulary": {"trimmed_pieces_file": "trimmed.txt", "trimmed_pieces": len(trimmed)}}, f)
    with open(os.path.join(directory, "trimmed.txt"), "w", encoding="utf-8") as f:
        f.write("".join(f"{p} 1\n" for p in trimmed))
    return huggingface.load(out, kept, kept, str(directory)), kept


def test_the_teachers_mass_on_trimmed_pieces_goes_to_the_students_unk(marian, tmp_path):
    """The student's <unk> logit is log(exp(teacher <unk>) + sum of exp(teacher trimmed piece)),
    from Marian's own full-vocabulary logits; every other kept symbol keeps its logit, so the
    softmax holds the trimmed pieces' mass on <unk> and renormalises only over what is left."""
    out, tokenizer, hf = marian
    lines_de, lines_en = multi30k_lines("de", 5), multi30k_lines("en", 5)
    dictionary, src, tgt = marian_dictionaries(tokenizer, lines_de, lines_en)
    used = [p for pieces in tgt for p in pieces]
    trimmed = sorted(set(used), key=used.index)[3:9]  # six pieces the targets use
    teacher, kept = trimmed_teacher(out, dictionary, trimmed, tmp_path / "data")
    assert teacher.trimmed_ids.numel() == 6 and not teacher.masked[kept.unk()]
    net_input, target = fairseq_batch(kept, src, tgt)  # the trimmed pieces are <unk> in the data
    vocab = tokenizer.get_vocab()
    with torch.no_grad():
        got = teacher(**net_input)[0]
        for b in range(len(lines_de)):
            as_unk = [p if p not in trimmed else "<unk>" for p in src[b]]
            input_ids = torch.tensor([[vocab[p] for p in as_unk] + [tokenizer.eos_token_id]])
            labels = torch.tensor([[vocab[p] if p not in trimmed else vocab["<unk>"] for p in tgt[b]]
                                   + [tokenizer.eos_token_id]])
            ref = hf(input_ids=input_ids, labels=labels).logits[0]
            n = labels.size(1)
            columns = [vocab["<unk>"]] + [vocab[p] for p in trimmed]
            assert torch.allclose(got[b, :n, kept.unk()], ref[:, columns].logsumexp(-1), atol=1e-5)
            others = [i for i in range(len(kept)) if i != kept.unk() and not teacher.masked[i]]
            assert len(others) > 20
            assert torch.allclose(got[b, :n, others], ref[:, [vocab[kept[i]] for i in others]], atol=1e-5)
        hidden = teacher.decoder_output(net_input)
        assert torch.allclose(teacher.trimmed_logsumexp(hidden, chunk=2), teacher.trimmed_logsumexp(hidden), atol=1e-6)
        # the mass the trimming loses is the mass keeping those pieces would lose: they are on <unk>
        rows = hidden[target.ne(kept.pad())]
        whole = huggingface.load(out, dictionary, dictionary)
        assert teacher.outside_mass(rows) == pytest.approx(whole.outside_mass(rows), rel=1e-5)
        assert teacher.outside_mass(rows) < huggingface.load(out, kept, kept).outside_mass(rows)
    # without the record the same dictionary renormalises: <unk> is the teacher's <unk> alone
    with torch.no_grad():
        plain = huggingface.load(out, kept, kept)(**net_input)[0]
    assert plain[0, 0, kept.unk()] < got[0, 0, kept.unk()]


def test_a_trimmed_list_that_disagrees_with_its_record_is_refused(marian, tmp_path):
    out, tokenizer, _ = marian
    dictionary, _, _ = marian_dictionaries(tokenizer, multi30k_lines("de", 3), multi30k_lines("en", 3))
    (tmp_path / "fairseq_distill.json").write_text(json.dumps(
        {"teacher_vocabulary": {"trimmed_pieces_file": "trimmed.txt", "trimmed_pieces": 3}}))
    (tmp_path / "trimmed.txt").write_text("x 1\n", encoding="utf-8")
    with pytest.raises(DistillError, match=r"lists 1 pieces, but the data-bin's record says 3 were trimmed"):
        huggingface.load(out, dictionary, dictionary, str(tmp_path))


# -- refusals: one line each ------------------------------------------------------------------------

def test_a_data_bin_of_another_vocabulary_is_refused_naming_both(marian, tiny_data):
    out, _, _ = marian
    other = Dictionary.load(os.path.join(tiny_data, "dict.en.txt"))
    with pytest.raises(DistillError) as raised:
        huggingface.load(out, other, other)
    message = str(raised.value)
    assert out in message and "not in the teacher's vocabulary" in message
    assert "fsd-prepare-corpus --vocabulary-from" in message and "\n" not in message


def test_an_unsupported_family_is_named(tmp_path, task):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "t5", "is_encoder_decoder": True}))
    (tmp_path / "model.safetensors").write_bytes(b"")
    with pytest.raises(DistillError, match=r"a Hugging Face 't5' model; the families that can teach are marian"):
        load_teacher(str(tmp_path), task)


def test_a_model_without_tokenizer_or_vocabulary_is_refused(pair, tmp_path, task):
    _, _, _, out, _ = pair
    bare = tmp_path / "bare"
    bare.mkdir()
    for name in ("config.json", "model.safetensors"):
        (bare / name).write_bytes(open(os.path.join(out, name), "rb").read())
    with pytest.raises(DistillError, match="has no tokenizer and no vocab.json"):
        load_teacher(str(bare), task)


def test_without_transformers_the_teacher_is_refused_in_one_line(pair, task, monkeypatch):
    _, _, _, out, _ = pair
    monkeypatch.setitem(sys.modules, "transformers", None)  # import transformers fails
    with pytest.raises(DistillError) as raised:
        load_teacher(out, task)
    assert "needs the transformers package" in str(raised.value)
    assert "pip install 'fairseq_distill[teachers]'" in str(raised.value)


# -- every term in the loop, through fairseq's trainer ------------------------------------------------

@pytest.mark.parametrize("terms", ["word_kd", "word_kd,pkd", "word_kd,ckd", "word_kd,alp_kd", "word_kd,a2d"])
def test_every_term_trains_a_student_from_the_hf_teacher_which_stays_frozen(pair, tiny_data, tmp_path, terms):
    _, _, _, out, _ = pair
    cfg, task, model, crit, trainer = build_trainer(
        tiny_data, "--task", "translation_distill", "--teacher-path", out, "--distill-terms", terms,
        criterion="distill")
    teacher = task.teacher
    assert isinstance(teacher.models[0], huggingface.HuggingFaceTeacher)
    before = [p.detach().clone() for p in teacher.parameters()]
    sample = varied_batch(task)
    for _ in range(2):
        logs = trainer.train_step([sample])
    for name in terms.split(","):
        value = logs[f"{name}_loss"]
        assert value == value and value > 0, (name, value)  # finite (not NaN) and positive
    assert all(torch.equal(a, b) for a, b in zip(before, teacher.parameters()))
    teacher_ids = {id(p) for p in teacher.parameters()}
    assert not teacher_ids & {id(p) for g in trainer.optimizer.param_groups for p in g["params"]}
    path = str(tmp_path / "checkpoint.pt")
    trainer.consolidate_optimizer()
    trainer.save_checkpoint(path, {})
    saved = torch.load(path, map_location="cpu", weights_only=False)
    assert set(saved["model"]) == set(model.state_dict())


def read_cache(directory):
    import numpy as np

    return [np.load(os.path.join(directory, name)) for name in ("offsets.npy", "log_probs.npy", "indices.npy")]


@pytest.mark.slow
def test_fsd_cache_teacher_from_the_m2m100_copy_stores_the_fairseq_teachers_rows(tiny_data, tmp_path):
    from fairseq_distill.trainer_setup import build_training
    from helpers import python_module, run, train_argv

    _, task, model, _, trainer = build_training(train_argv(tiny_data, "--task", "translation_distill",
                                                           criterion="label_smoothed_cross_entropy", model=PRENORM))
    randomise_layer_norms(model)
    checkpoint = str(tmp_path / "teacher.pt")
    trainer.consolidate_optimizer()  # as checkpoint_utils.save_checkpoint does
    trainer.save_checkpoint(checkpoint, {})
    hf_dir = fairseq_as_m2m100(model, task.target_dictionary, str(tmp_path / "teacher-hf"))
    caches = {}
    for name, teacher in (("fairseq", checkpoint), ("hf", hf_dir)):
        out = run(python_module("fairseq_distill.cli.cache_teacher", "--teacher", teacher, "--data", tiny_data,
                                "--top-k", "4", "--dtype", "float32", "--out", str(tmp_path / name), "--cpu")).stdout
        caches[name] = read_cache(str(tmp_path / name))
    (f_offsets, f_values, f_indices), (h_offsets, h_values, h_indices) = caches["fairseq"], caches["hf"]
    assert (f_offsets == h_offsets).all() and f_values.shape == h_values.shape
    symbols = task.target_dictionary.symbols
    never = {symbols.index("<s>"), symbols.index("<pad>")}
    clean = ~np_isin(f_indices, never).any(axis=1)  # rows where the fairseq teacher ranks no masked row
    assert clean.mean() > 0.5
    assert (f_indices[clean] == h_indices[clean]).all()
    # the same distribution, renormalised without the two rows no target can be: each row's
    # log-probabilities shift by one constant, log 1/(1 − the mass fairseq gives <s> and <pad>)
    shift = h_values[clean] - f_values[clean]
    assert (shift.max(axis=1) - shift.min(axis=1)).max() < 1e-4 and (shift > 0).all()
    assert not np_isin(h_indices, never).any()
    meta = json.load(open(tmp_path / "hf" / "meta.json")) if os.path.isfile(tmp_path / "hf" / "meta.json") else None
    assert meta is None or meta["teachers"][0].endswith("teacher-hf")
    assert "tokens/s" in out


def np_isin(array, values):
    import numpy as np

    return np.isin(array, sorted(values))


@pytest.mark.slow
def test_from_a_marian_model_directory_to_a_deployed_student(tmp_path):
    """fsd-prepare-corpus --vocabulary-from MODEL_DIR, fsd-cache-teacher, fairseq-train with word-level
    KD from the cache and CKD in the loop, fsd-export-ctranslate2, fsd-translate: the user's path."""
    from transformers import AutoTokenizer

    from helpers import PACKAGE_DIR, TINY_MODEL, TRAIN_FLAGS, prepare_corpus_argv, python_module, run, write_raw_corpus

    teacher = marian_teacher(str(tmp_path / "opus-mt-de-en"))
    raw = write_raw_corpus(tmp_path / "raw", 200, 10, 10)
    out = run(prepare_corpus_argv(raw, tmp_path / "data", "--vocabulary-from", teacher)).stdout
    assert "the tokenizer of the marian teacher" in out and "of the teacher's pieces that the training data uses" in out
    data = str(tmp_path / "data" / "bin")
    meta = json.load(open(os.path.join(data, "fairseq_distill.json")))
    assert meta["teacher_vocabulary"]["family"] == "marian" and os.path.isfile(os.path.join(data, "target.spm"))
    # the segmented text is the teacher tokenizer's pieces, each side with its own model
    tokenizer = AutoTokenizer.from_pretrained(teacher)
    de = open(raw / "train.de", encoding="utf-8").readline().strip()
    en = open(raw / "train.en", encoding="utf-8").readline().strip()
    tok = tmp_path / "data" / "tok"
    assert open(tok / "train.de", encoding="utf-8").readline().split() == tokenizer.tokenize(de)
    assert open(tok / "train.en", encoding="utf-8").readline().split() == \
        tokenizer.convert_ids_to_tokens(tokenizer(text_target=en)["input_ids"][:-1])
    vocab = tokenizer.get_vocab()
    symbols = Dictionary.load(os.path.join(data, "dict.en.txt")).symbols
    assert all(s in vocab or s in ("<s>", "<pad>") or s.startswith("madeupword") for s in symbols)
    assert meta["teacher_vocabulary"]["kept_pieces"] == sum(1 for s in symbols[4:] if not s.startswith("madeupword"))

    # seq-KD data from the same directory, in one command (converted to CTranslate2 under OUT.work)
    seqkd = run(python_module("fairseq_distill.cli.seqkd", "--teacher", teacher, "--data", data, "--out",
                              str(tmp_path / "seqkd"), "--beam", "2", "--max-len-b", "20")).stdout
    assert "is a Hugging Face model: decoding it with CTranslate2" in seqkd
    assert os.path.isfile(tmp_path / "seqkd.work" / "teacher-ctranslate2-hf" / "model.bin")
    summary = json.load(open(tmp_path / "seqkd" / "seqkd_summary.json"))
    assert summary["kept"] + summary["missing_or_empty"] == 200
    cache = run(python_module("fairseq_distill.cli.cache_teacher", "--teacher", teacher, "--data", data, "--top-k", "8",
                              "--out", str(tmp_path / "cache"), "--cpu")).stdout
    assert "on pieces outside the student's vocabulary" in cache
    said = re.search(r"put ([0-9.]+)% of its probability", cache)
    extra = json.load(open(tmp_path / "cache" / "meta.json"))["extra"]
    recorded = extra["teacher_mass_outside_vocabulary"]
    assert 0 < extra["teacher_mass_measured_tokens"] <= json.load(open(tmp_path / "cache" / "meta.json"))["tokens"]
    assert 0 <= recorded < 1 and abs(100 * recorded - float(said.group(1))) < 1e-3  # the one shard's, recorded
    run(python_module("fairseq_cli.train", data, *TRAIN_FLAGS, *TINY_MODEL, "--user-dir", PACKAGE_DIR,
                      "--task", "translation_distill", "--teacher-path", teacher, "--teacher-cache",
                      str(tmp_path / "cache"), "--criterion", "distill", "--distill-terms", "word_kd,ckd",
                      "--max-update", "4", "--save-dir", str(tmp_path / "student")))
    run(python_module("fairseq_distill.cli.export_ctranslate2", str(tmp_path / "student" / "checkpoint_last.pt"),
                      data, str(tmp_path / "deployed")))
    src = tmp_path / "in.de"
    src.write_text("".join(open(raw / "test.de", encoding="utf-8").readlines()[:4]), encoding="utf-8")
    run(python_module("fairseq_distill.cli.translate", "--model-dir", str(tmp_path / "deployed"),
                      "--input", str(src), "--output", str(tmp_path / "out.en"), "--max-len-b", "5"))
    assert len(open(tmp_path / "out.en", encoding="utf-8").read().splitlines()) == 4


@pytest.mark.slow
def test_teacher_pieces_keeps_the_most_frequent_and_the_cache_puts_the_rest_on_unk(tmp_path):
    """fsd-prepare-corpus --vocabulary-from MODEL_DIR --teacher-pieces 40: 40 pieces in the
    dictionary, the others listed and counted (against the segmented text itself), and
    fsd-cache-teacher from the same teacher says where their mass went."""
    from helpers import prepare_corpus_argv, python_module, run, write_raw_corpus

    teacher = marian_teacher(str(tmp_path / "opus-mt-de-en"))
    raw = write_raw_corpus(tmp_path / "raw", 120, 8, 8)
    refused = run(prepare_corpus_argv(raw, tmp_path / "plain", "--teacher-pieces", "40"), check=False)
    assert refused.returncode != 0 and "Traceback" not in refused.stdout
    assert "--teacher-pieces 40 goes with --vocabulary-from MODEL_DIR" in refused.stdout
    out = run(prepare_corpus_argv(raw, tmp_path / "data", "--vocabulary-from", teacher, "--teacher-pieces", "40")).stdout
    data = tmp_path / "data" / "bin"
    record = json.load(open(data / "fairseq_distill.json"))["teacher_vocabulary"]
    symbols = Dictionary.load(str(data / "dict.en.txt")).symbols
    taught = [s for s in symbols[4:] if not s.startswith("madeupword")]
    assert len(taught) == record["kept_pieces"] == 40 and record["teacher_pieces"] == 40
    listed = [line.split()[0] for line in open(data / teacher_vocabulary.TRIMMED_PIECES, encoding="utf-8")]
    assert len(listed) == record["trimmed_pieces"] > 0 and not set(listed) & set(taught)
    # what became <unk>: every piece of the segmented training text that the dictionary lacks
    pieces = [p for lang in ("de", "en") for line in open(tmp_path / "data" / "tok" / f"train.{lang}", encoding="utf-8")
              for p in line.split()]
    outside = [p for p in pieces if p not in set(taught)]
    assert len(pieces) == record["piece_occurrences"]
    assert len(outside) == record["trimmed_occurrences"] + record["unknown_occurrences"]
    assert f"--teacher-pieces 40 trimmed the other {len(listed):,} the data uses" in out
    assert f"{100 * record['trimmed_occurrences'] / len(pieces):.2f}% of the training text's pieces" in out
    cache = run(python_module("fairseq_distill.cli.cache_teacher", "--teacher", teacher, "--data", str(data),
                              "--top-k", "4", "--out", str(tmp_path / "cache"), "--cpu")).stdout
    assert f"with its mass on the {len(listed):,} pieces --teacher-pieces trimmed on <unk>" in cache
    meta = json.load(open(tmp_path / "cache" / "meta.json"))
    assert meta["extra"]["teacher_trimmed_pieces_in_unk"] == len(listed)


def test_preparing_data_for_another_language_pair_than_the_teachers_is_refused(marian, m2m100):
    out, _, _ = marian
    with pytest.raises(DistillError, match=r"--source-lang en: the teacher .* translates de -> en"):
        teacher_vocabulary.prepared_vocabulary(out, "en", "de")
    assert teacher_vocabulary.prepared_vocabulary(out, "de", "en")["record"]["source_code"] is None
    m2m, _, _ = m2m100
    with pytest.raises(DistillError, match=r"--target-lang xx: the teacher .* has no language code '__xx__' or 'xx'"):
        teacher_vocabulary.prepared_vocabulary(m2m, "de", "xx")
    record = teacher_vocabulary.prepared_vocabulary(m2m, "de", "en")["record"]
    assert (record["source_code"], record["target_code"]) == ("__de__", "__en__")
