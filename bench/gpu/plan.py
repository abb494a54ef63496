"""What the GPU benchmark measures in each mode: the teachers and students (shapes given
explicitly, whatever the architecture's defaults), the precisions, the budget of sentences
and steps, and CTranslate2's compute types."""
from dataclasses import dataclass
from typing import List

SOURCE, TARGET = "de", "en"
PRECISION_FLAGS = {"fp16": ["--fp16"], "bf16": ["--bf16"], "fp32": []}


@dataclass
class ModelSpec:
    """A Transformer shape; ``flags`` gives it explicitly, whatever the architecture's defaults."""
    name: str
    arch: str
    encoder_layers: int
    decoder_layers: int
    dim: int
    ffn: int
    heads: int

    def shape(self) -> str:
        return f"{self.encoder_layers}+{self.decoder_layers}, d={self.dim}, ffn={self.ffn}, {self.heads} heads"

    def flags(self) -> List[str]:
        return ["--arch", self.arch, "--share-all-embeddings",
                "--encoder-layers", str(self.encoder_layers), "--decoder-layers", str(self.decoder_layers),
                "--encoder-embed-dim", str(self.dim), "--decoder-embed-dim", str(self.dim),
                "--encoder-ffn-embed-dim", str(self.ffn), "--decoder-ffn-embed-dim", str(self.ffn),
                "--encoder-attention-heads", str(self.heads), "--decoder-attention-heads", str(self.heads)]


@dataclass
class Budget:
    vocab: int
    train_sentences: int
    mean_length: float
    max_length: int
    max_tokens: int
    warmup: int
    steps: int
    top_k: int
    decode_sentences: int
    decode_batch: int
    beam: int
    repeats: int


def plan(mode: str):
    """(teachers, students, precisions, budget, CTranslate2 compute types) of a mode."""
    if mode == "cpu-decoding":  # decoding speed only, at the papers' shapes, on the CPU
        teachers = [ModelSpec("teacher-iwslt", "transformer_iwslt_de_en", 6, 6, 512, 1024, 4)]
        students = [ModelSpec("student-2+2", "transformer_iwslt_de_en", 2, 2, 512, 1024, 4),
                    ModelSpec("student-3+3", "transformer_iwslt_de_en", 3, 3, 512, 1024, 4)]
        budget = Budget(vocab=10000, train_sentences=600, mean_length=25, max_length=100, max_tokens=4096,
                        warmup=0, steps=0, top_k=8, decode_sentences=256, decode_batch=32, beam=4, repeats=2)
        return teachers, students, [], budget, ["float32", "int8"]
    if mode == "cpu-decoding-smoke":  # the same at tiny sizes, for the tests
        teachers = [ModelSpec("teacher", "transformer", 2, 2, 32, 64, 2)]
        students = [ModelSpec("student-1+1", "transformer", 1, 1, 32, 64, 2)]
        budget = Budget(vocab=64, train_sentences=48, mean_length=8, max_length=20, max_tokens=256, warmup=0,
                        steps=0, top_k=4, decode_sentences=12, decode_batch=6, beam=4, repeats=1)
        return teachers, students, [], budget, ["float32", "int8"]
    if mode == "cpu-smoke":
        teachers = [ModelSpec("teacher-base", "transformer", 1, 1, 32, 64, 2),
                    ModelSpec("teacher-big", "transformer", 1, 1, 48, 96, 4)]
        students = [ModelSpec("student-1+1", "transformer", 1, 1, 32, 64, 2),
                    ModelSpec("student-2+1", "transformer", 2, 1, 32, 64, 2)]
        budget = Budget(vocab=64, train_sentences=48, mean_length=8, max_length=20, max_tokens=256, warmup=1,
                        steps=2, top_k=4, decode_sentences=12, decode_batch=6, beam=4, repeats=1)
        return teachers, students, ["fp32"], budget, ["float32", "int8"]
    teachers = [ModelSpec("teacher-iwslt", "transformer_iwslt_de_en", 6, 6, 512, 1024, 4),
                ModelSpec("teacher-big", "transformer_vaswani_wmt_en_de_big", 6, 6, 1024, 4096, 16)]
    students = [ModelSpec("student-2+2", "transformer_iwslt_de_en", 2, 2, 512, 1024, 4),
                ModelSpec("student-3+3", "transformer_iwslt_de_en", 3, 3, 512, 1024, 4)]
    if mode == "quick":
        budget = Budget(vocab=10000, train_sentences=1000, mean_length=25, max_length=100, max_tokens=4096,
                        warmup=2, steps=5, top_k=8, decode_sentences=128, decode_batch=64, beam=4, repeats=1)
    else:
        budget = Budget(vocab=10000, train_sentences=2000, mean_length=25, max_length=100, max_tokens=4096,
                        warmup=3, steps=10, top_k=8, decode_sentences=512, decode_batch=64, beam=4, repeats=2)
    return teachers, students, ["fp16", "bf16"], budget, ["float16", "int8_float16"]
