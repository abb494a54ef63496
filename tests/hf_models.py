"""Tiny Hugging Face teachers made in the test, offline: a random MarianMT model with a tokenizer
on sentencepiece models trained here, and a fairseq pre-norm Transformer written out as an
M2M100 model (the same weights; M2M100 is fairseq's layout)."""
import gzip
import json
import os

import torch

from helpers import MULTI30K


def multi30k_lines(lang: str, n: int, source: str = "train"):
    with gzip.open(os.path.join(MULTI30K, f"{source}.{lang}.gz"), "rt", encoding="utf-8") as f:
        return [next(f).rstrip("\n") for _ in range(n)]


def train_sentencepiece(lines, prefix: str, vocab_size: int = 120) -> str:
    import sentencepiece as spm

    with open(prefix + ".txt", "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    spm.SentencePieceTrainer.train(input=prefix + ".txt", model_prefix=prefix, vocab_size=vocab_size,
                                   model_type="unigram", character_coverage=1.0, minloglevel=2,
                                   num_threads=1)
    return prefix + ".model"


def spm_pieces(model: str):
    import sentencepiece as spm

    sp = spm.SentencePieceProcessor(model_file=model)
    return [sp.id_to_piece(i) for i in range(sp.get_piece_size()) if not sp.is_control(i) and not sp.is_unknown(i)]


def marian_teacher(out_dir: str, seed: int = 0, layers=(2, 2), dim: int = 16, n_lines: int = 300) -> str:
    """A random MarianMT de->en model with its own tokenizer (separate sentencepiece models per
    side, one vocab.json: </s> 0, <unk> 1, the pieces, <pad> last, as OPUS-MT lays it out)."""
    from transformers import MarianConfig, MarianMTModel, MarianTokenizer

    os.makedirs(out_dir, exist_ok=True)
    work = out_dir.rstrip("/") + "-spm"
    os.makedirs(work, exist_ok=True)
    src_spm = train_sentencepiece(multi30k_lines("de", n_lines), os.path.join(work, "de"))
    tgt_spm = train_sentencepiece(multi30k_lines("en", n_lines), os.path.join(work, "en"))
    pieces = ["</s>", "<unk>"]
    for p in spm_pieces(src_spm) + spm_pieces(tgt_spm):
        if p not in pieces:
            pieces.append(p)
    pieces.append("<pad>")
    vocab = {p: i for i, p in enumerate(pieces)}
    with open(os.path.join(work, "vocab.json"), "w", encoding="utf-8") as f:
        json.dump(vocab, f)
    tokenizer = MarianTokenizer(src_spm, tgt_spm, os.path.join(work, "vocab.json"), source_lang="de", target_lang="en")
    torch.manual_seed(seed)
    config = MarianConfig(vocab_size=len(vocab), d_model=dim, encoder_layers=layers[0], decoder_layers=layers[1],
                          encoder_attention_heads=2, decoder_attention_heads=2, encoder_ffn_dim=2 * dim,
                          decoder_ffn_dim=2 * dim, max_position_embeddings=256, pad_token_id=vocab["<pad>"],
                          eos_token_id=0, decoder_start_token_id=vocab["<pad>"], forced_eos_token_id=0,
                          dropout=0.0, attention_dropout=0.0, activation_dropout=0.0, scale_embedding=True,
                          share_encoder_decoder_embeddings=True)
    model = MarianMTModel(config)
    with torch.no_grad():  # a bias that is not zero, as a trained model's
        model.final_logits_bias.normal_(0, 0.5)
    model.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)
    return out_dir


def randomise_layer_norms(model, seed: int = 0):
    """LayerNorm weights and biases away from 1 and 0, so that a missing or extra norm shows."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "layer_norm" in name:
                p.copy_(p + 0.3 * torch.randn(p.shape, generator=g))


def fairseq_as_m2m100(model, dictionary, out_dir: str) -> str:
    """A fairseq pre-norm Transformer with shared embeddings, written out as an HF M2M100 model
    (config, weights, and a vocab.json naming the dictionary's symbols)."""
    from transformers import M2M100Config, M2M100ForConditionalGeneration

    args = model.cfg if hasattr(model, "cfg") else model.args
    enc, dec = model.encoder, model.decoder
    config = M2M100Config(
        vocab_size=len(dictionary), d_model=enc.embed_tokens.embedding_dim,
        encoder_layers=len(enc.layers), decoder_layers=len(dec.layers),
        encoder_attention_heads=enc.layers[0].self_attn.num_heads,
        decoder_attention_heads=dec.layers[0].self_attn.num_heads,
        encoder_ffn_dim=enc.layers[0].fc1.out_features, decoder_ffn_dim=dec.layers[0].fc1.out_features,
        activation_function="relu", dropout=0.0, attention_dropout=0.0, activation_dropout=0.0,
        encoder_layerdrop=0.0, decoder_layerdrop=0.0, scale_embedding=True, max_position_embeddings=1024,
        pad_token_id=dictionary.pad(), bos_token_id=dictionary.bos(), eos_token_id=dictionary.eos(),
        decoder_start_token_id=dictionary.eos(), tie_word_embeddings=True)
    del args
    hf = M2M100ForConditionalGeneration(config)
    state = {}
    for key, value in model.state_dict().items():
        if "embed_positions" in key or "version" in key:
            continue
        if key == "decoder.output_projection.weight":
            state["lm_head.weight"] = value
            continue
        state["model." + key] = value
    state["model.shared.weight"] = model.encoder.embed_tokens.weight.detach()
    missing, unexpected = hf.load_state_dict(state, strict=False)
    assert not unexpected, unexpected
    assert all("embed_positions" in k for k in missing), missing
    hf.save_pretrained(out_dir)
    with open(os.path.join(out_dir, "vocab.json"), "w", encoding="utf-8") as f:
        json.dump({s: i for i, s in enumerate(dictionary.symbols)}, f)
    return out_dir


def m2m100_teacher(out_dir: str, seed: int = 0, dim: int = 16, n_lines: int = 300) -> str:
    """A random M2M100 model with its own tokenizer: one sentencepiece model for both languages,
    vocab.json, and M2M100's language codes (__de__, __en__, ...) after the pieces."""
    from transformers import M2M100Config, M2M100ForConditionalGeneration, M2M100Tokenizer

    os.makedirs(out_dir, exist_ok=True)
    work = out_dir.rstrip("/") + "-spm"
    os.makedirs(work, exist_ok=True)
    spm_model = train_sentencepiece(multi30k_lines("de", n_lines) + multi30k_lines("en", n_lines),
                                    os.path.join(work, "joint"), vocab_size=160)
    pieces = ["<s>", "<pad>", "</s>", "<unk>"] + [p for p in spm_pieces(spm_model)]
    with open(os.path.join(work, "vocab.json"), "w", encoding="utf-8") as f:
        json.dump({p: i for i, p in enumerate(pieces)}, f)
    import shutil

    shutil.copy(spm_model, os.path.join(work, "sentencepiece.bpe.model"))
    tokenizer = M2M100Tokenizer(os.path.join(work, "vocab.json"), os.path.join(work, "sentencepiece.bpe.model"),
                                src_lang="de", tgt_lang="en")
    torch.manual_seed(seed)
    # the pieces, then the language codes, then tokenizer's 8 "madeup" words, as M2M100 lays them out
    vocab_size = max(tokenizer.lang_token_to_id.values()) + 1 + 8
    config = M2M100Config(vocab_size=vocab_size, d_model=dim, encoder_layers=2, decoder_layers=2,
                          encoder_attention_heads=2, decoder_attention_heads=2, encoder_ffn_dim=2 * dim,
                          decoder_ffn_dim=2 * dim, max_position_embeddings=256, pad_token_id=1, bos_token_id=0,
                          eos_token_id=2, decoder_start_token_id=2, dropout=0.0, attention_dropout=0.0,
                          activation_dropout=0.0, encoder_layerdrop=0.0, decoder_layerdrop=0.0)
    model = M2M100ForConditionalGeneration(config)
    randomise_layer_norms(model, seed)
    model.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)
    return out_dir
