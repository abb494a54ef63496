"""The benchmark's corpus: random token sequences of realistic lengths over one fairseq
Dictionary, binarized with fairseq's indexed-dataset builder. Nothing is trained on it; it
gives the models batches of the right shapes."""
import json
import os
from typing import List

from bench.gpu.plan import SOURCE, TARGET


def synthetic_lengths(rng, n: int, mean: float, maximum: int, sigma: float = 0.5):
    """Sentence lengths (tokens, </s> excluded): log-normal around ``mean``, as subword corpora
    (``sigma`` 0: every sentence ``mean`` tokens long)."""
    import numpy as np

    raw = rng.lognormal(np.log(mean) - sigma ** 2 / 2, sigma, size=n)
    return np.clip(np.rint(raw), 3, maximum).astype(int)


def write_synthetic_corpus(out_dir: str, vocab: int, sentences: int, mean_length: float, max_length: int,
                           seed: int = 1, sigma: float = 0.5) -> List[List[str]]:
    """A binarized de->en corpus (subset ``train``) of random tokens over one shared fairseq
    Dictionary of ``vocab`` symbols (specials included), written with fairseq's mmap
    indexed-dataset builder, and the metadata CTranslate2's export reads. Returns the source
    sentences as symbol lists (the decoding input)."""
    import numpy as np
    import torch
    from fairseq.data import Dictionary, indexed_dataset

    from fairseq_distill.text.segmentation import META_FILE

    os.makedirs(out_dir, exist_ok=True)
    rng = np.random.default_rng(seed)
    dictionary = Dictionary()
    for i in range(vocab - dictionary.nspecial):
        dictionary.add_symbol(f"w{i}", n=vocab - i)
    for lang in (SOURCE, TARGET):
        dictionary.save(os.path.join(out_dir, f"dict.{lang}.txt"))
    src_lengths = synthetic_lengths(rng, sentences, mean_length, max_length, sigma)
    ratio = rng.uniform(0.8, 1.25, size=sentences)
    tgt_lengths = np.clip(np.rint(src_lengths * ratio), 2, max_length).astype(int)
    sources = []
    for lang, lengths in ((SOURCE, src_lengths), (TARGET, tgt_lengths)):
        prefix = os.path.join(out_dir, f"train.{SOURCE}-{TARGET}.{lang}")
        builder = indexed_dataset.make_builder(prefix + ".bin", impl="mmap", vocab_size=len(dictionary))
        for length in lengths:
            ids = rng.integers(dictionary.nspecial, len(dictionary), size=int(length))
            builder.add_item(torch.IntTensor([*ids.tolist(), dictionary.eos()]))
            if lang == SOURCE:
                sources.append([dictionary[i] for i in ids.tolist()])
        builder.finalize(prefix + ".idx")
    with open(os.path.join(out_dir, META_FILE), "w", encoding="utf-8") as f:
        json.dump({"source_lang": SOURCE, "target_lang": TARGET, "bpe": None, "synthetic": True}, f)
    return sources
