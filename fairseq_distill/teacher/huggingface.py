"""Hugging Face seq2seq teachers: a MarianMT (OPUS-MT) or M2M100/NLLB-200 model directory as
``--teacher-path``, for every term and for the teacher cache.

The student speaks the teacher's vocabulary: its data is segmented with the teacher's own
tokenizer (``fsd-prepare-corpus --vocabulary-from MODEL_DIR``), so each fairseq dictionary
symbol is one of the teacher's pieces, and the student keeps only the pieces its training data
uses. :class:`HuggingFaceTeacher` wraps the model so that it answers what a fairseq teacher
answers (:class:`~fairseq_distill.features.Features`, in fairseq's layout), which is why no
term knows which kind of teacher it reads:

* ids: the student's source and target ids become the teacher's by symbol; the first decoder
  input (fairseq's ``</s>``) becomes the teacher's ``decoder_start_token_id`` (Marian starts
  with ``<pad>``, M2M100 with ``</s>``).
* padding: fairseq pads the source on the left; Marian's positions count from the first
  column whatever it holds, so its source is packed to the left and every source-side output
  (states, attention columns) unpacked to the student's layout; M2M100's positions skip padding,
  as fairseq's do, so its source goes in as the student has it.
* logits: the teacher's output projection restricted to the student's target symbols (a
  256k-piece NLLB teacher costs a student-vocabulary matmul, never a 256k one), so its
  softmax is the teacher's distribution renormalised over the kept pieces; rows the
  teacher never emits as a target (``<pad>``, whose Marian logit is exactly 0, ``<s>``,
  language codes, fairseq's padding symbols) are -inf. Where the data-bin keeps only the N
  most frequent pieces (``fsd-prepare-corpus --teacher-pieces N``), the pieces it trimmed
  are <unk> in the data, and the teacher's mass on them is put on the student's <unk> (a
  tail bucket); the pieces the training data never uses are renormalised away, and how much
  of the teacher's mass that drops is measured by :meth:`HuggingFaceTeacher.outside_mass`.
* states: index 0 the embedding output, index l the output of layer l, each T x B x C,
  taken by hooks on the layers as fairseq's ``return_all_hiddens`` gives them (before any
  final LayerNorm: ``transformers`` puts the last state after it).
* attention: per-head probabilities, B x H x T x S per layer, which ``transformers`` returns
  only from its eager attention: the model is switched to it when a term asks for maps.

Like a fairseq teacher it is frozen, in eval mode, and never registered in the student, its
optimizer or its checkpoint (:class:`~fairseq_distill.teacher.frozen.TeacherEnsemble`).
"""
import logging
import os
from typing import Dict, List, Optional, Sequence

import torch
import torch.nn as nn
import torch.nn.functional as F

from fairseq_distill.errors import DistillError
from fairseq_distill.features import FeatureRequest, Features
from fairseq_distill.text.teacher_vocabulary import (FAMILIES, META_KEY, check_vocabulary, is_model_dir,  # noqa: F401
                                                     load_tokenizer, model_config, never_targets,
                                                     require_transformers, symbol_map, teacher_vocabulary,
                                                     trimmed_pieces)

logger = logging.getLogger(__name__)

UNK = 3  # fairseq's <unk> index, which every fairseq Dictionary keeps


def _state(output):
    return output[0] if isinstance(output, (tuple, list)) else output


class HuggingFaceTeacher(nn.Module):
    """A frozen Hugging Face seq2seq model that answers in the student's ids and fairseq's layout.

    ``source_prefix``/``target_prefix``: teacher ids of the language codes an M2M100/NLLB teacher
    reads before a source and emits first in a target. The student's data holds no language code
    (it is a plain bilingual model, so every fairseq and deployment tool serves it as it is):
    the teacher gets them here, and its outputs at their positions are left out (the logits that
    predict the target code, the states of the codes, their attention columns, each map's rows
    renormalised over what remains)."""

    def __init__(self, model, path: str, config: dict, source_map, target_map, never: set,
                 source_pad: int, target_pad: int, target_eos: int,
                 source_prefix: Optional[int] = None, target_prefix: Optional[int] = None,
                 trimmed: Sequence[int] = ()):
        super().__init__()
        self.model, self.path, self.family = model, path, config["model_type"]
        self.source_pad, self.target_pad, self.target_eos = source_pad, target_pad, target_eos
        self.source_prefix, self.target_prefix = source_prefix, target_prefix
        # Marian counts positions from the first column whatever it holds; M2M100 skips padding as
        # fairseq does, so its source stays left-padded and its outputs need no unpacking
        self.pack_source = self.family == "marian"
        self.teacher_pad = config["pad_token_id"]
        self.decoder_start = config.get("decoder_start_token_id")
        if self.decoder_start is None:
            self.decoder_start = config["eos_token_id"]
        unk = target_map[3] if target_map[3] is not None else self.teacher_pad
        # inputs: a symbol the teacher lacks never occurs in the data (check_vocabulary)
        self.register_buffer("source_ids", torch.tensor([unk if m is None else m for m in source_map]),
                             persistent=False)
        self.register_buffer("target_ids", torch.tensor([unk if m is None else m for m in target_map]),
                             persistent=False)
        # the teacher ids of the pieces --teacher-pieces trimmed from the data-bin: the data has
        # <unk> where they were, so the teacher's mass on them is its mass on the student's <unk>
        trimmed = sorted({t for t in trimmed if t not in never})
        unmapped = torch.tensor([m is None or m in never for m in target_map])
        self.register_buffer("unmapped", unmapped, persistent=False)  # rows whose own logit is -inf
        masked = unmapped.clone()
        if trimmed:  # <unk> stands for the trimmed pieces, whether or not the teacher has an <unk>
            masked[UNK] = False
        self.register_buffer("masked", masked, persistent=False)  # rows no target can be
        self.register_buffer("trimmed_ids", torch.tensor(trimmed, dtype=torch.long), persistent=False)
        self.register_buffer("never_ids", torch.tensor(sorted(never), dtype=torch.long), persistent=False)
        self.requires_grad_(False)
        self.eval()

    # the layout the layer and attention terms map between (features.stack_shape's form)
    def stack_shape(self) -> dict:
        c = self.model.config
        return {"encoder": (c.encoder_layers, c.d_model), "decoder": (c.decoder_layers, c.d_model),
                "encoder_self": (c.encoder_layers, c.encoder_attention_heads),
                "decoder_self": (c.decoder_layers, c.decoder_attention_heads),
                "decoder_cross": (c.decoder_layers, c.decoder_attention_heads)}

    def _layers(self, side: str):
        return getattr(self.model.get_encoder() if side == "encoder" else self.model.get_decoder(), "layers")

    def output_projection(self):
        """The teacher's output layer restricted to the student's target symbols: weight V_s x C, bias V_s."""
        weight = self.model.get_output_embeddings().weight
        bias = getattr(self.model, "final_logits_bias", None)
        rows = weight.index_select(0, self.target_ids)
        return rows, (bias.view(-1).index_select(0, self.target_ids) if bias is not None else None)

    def logits_of(self, decoder_out: torch.Tensor) -> torch.Tensor:
        """B x T x V_s logits of decoder outputs (student positions), -inf at the masked rows; where
        the data-bin was trimmed (``--teacher-pieces``), the <unk> logit is the log-sum-exp of the
        teacher's <unk> and trimmed pieces, so its softmax puts their summed mass on <unk>."""
        weight, bias = self.output_projection()
        logits = F.linear(decoder_out, weight, bias).masked_fill(self.unmapped, float("-inf"))
        if not self.trimmed_ids.numel():
            return logits
        # one column rewritten in place, not a copy of the whole B x T x V tensor (masked_fill's
        # backward does not read its output, so this is safe under autograd too)
        tail = self.trimmed_logsumexp(decoder_out).to(logits.dtype)
        logits[..., UNK] = torch.logaddexp(logits[..., UNK], tail)
        return logits

    def trimmed_logsumexp(self, decoder_out: torch.Tensor, chunk: int = 4096) -> torch.Tensor:
        """B x T: log-sum-exp of the teacher's logits over the trimmed pieces, in float32, ``chunk``
        pieces at a time (at a 256k-piece teacher the trimmed columns may be most of them: a
        chunk's logits are tokens x chunk, never tokens x every trimmed piece)."""
        weight = self.model.get_output_embeddings().weight
        bias = getattr(self.model, "final_logits_bias", None)
        total = None
        for ids in self.trimmed_ids.split(chunk):
            part = F.linear(decoder_out, weight.index_select(0, ids),
                            None if bias is None else bias.view(-1).index_select(0, ids)).float().logsumexp(-1)
            total = part if total is None else torch.logaddexp(total, part)
        return total

    def teacher_inputs(self, src_tokens, prev_output_tokens):
        """(input ids, attention mask, decoder ids, decoder mask, unpack): the teacher's inputs,
        its source behind its language code (packed to the left where the teacher needs it), and
        the permutation back (None: the student's layout as it is)."""
        src_pad = src_tokens.eq(self.source_pad)
        order = unpack = None
        if self.pack_source:
            # a stable sort of the padding flags: each row's tokens first, in their order
            order = torch.sort(src_pad.to(torch.int8), dim=1, stable=True).indices
            unpack = order.argsort(dim=1)
            src_tokens, src_pad = src_tokens.gather(1, order), src_pad.gather(1, order)
        input_ids = self.source_ids[src_tokens].masked_fill(src_pad, self.teacher_pad)
        attention_mask = (~src_pad).long()
        decoder_ids = self.target_ids[prev_output_tokens].masked_fill(
            prev_output_tokens.eq(self.target_pad), self.teacher_pad)
        decoder_mask = prev_output_tokens.ne(self.target_pad).long()
        starts = prev_output_tokens[:, 0].eq(self.target_eos)
        decoder_ids[:, 0] = torch.where(starts, torch.full_like(decoder_ids[:, 0], self.decoder_start),
                                        decoder_ids[:, 0])
        if self.source_prefix is not None:
            input_ids = torch.cat([torch.full_like(input_ids[:, :1], self.source_prefix), input_ids], 1)
            attention_mask = torch.cat([torch.ones_like(attention_mask[:, :1]), attention_mask], 1)
        if self.target_prefix is not None:
            code = torch.full_like(decoder_ids[:, :1], self.target_prefix)
            decoder_ids = torch.cat([decoder_ids[:, :1], code, decoder_ids[:, 1:]], 1)
            decoder_mask = torch.cat([decoder_mask[:, :1], decoder_mask], 1)
        return input_ids, attention_mask, decoder_ids, decoder_mask, unpack

    def _source(self, x: torch.Tensor, dim: int, unpack) -> torch.Tensor:
        """Source positions along ``dim`` as the student has them: the code dropped, unpacked."""
        if self.source_prefix is not None:
            x = x.narrow(dim, 1, x.size(dim) - 1)
        return to_student_layout(x, unpack, dim)

    def _target(self, x: torch.Tensor, dim: int) -> torch.Tensor:
        """Target positions along ``dim`` as the student has them (the one predicting the code dropped)."""
        return x.narrow(dim, 1, x.size(dim) - 1) if self.target_prefix is not None else x

    def set_attention_implementation(self, eager: bool):
        if eager and getattr(self.model.config, "_attn_implementation", None) != "eager":
            self.model.set_attn_implementation("eager")

    def _run(self, net_input: dict, request: FeatureRequest):
        """One teacher-forced forward: (decoder output in student positions, states, maps, unpack)."""
        input_ids, attention_mask, decoder_ids, decoder_mask, unpack = self.teacher_inputs(
            net_input["src_tokens"], net_input["prev_output_tokens"])
        states = {"encoder": [], "decoder": []}
        maps: Dict[str, List] = {}
        handles = []
        for side, wanted in (("encoder", request.encoder_states), ("decoder", request.decoder_states)):
            if not wanted:
                continue
            layers, slots = self._layers(side), states[side]
            slots.extend([None] * (len(layers) + 1))

            def embedding(_m, args, kwargs, slots=slots):
                slots[0] = args[0] if args else kwargs["hidden_states"]

            handles.append(layers[0].register_forward_pre_hook(embedding, with_kwargs=True))
            for i, layer in enumerate(layers):
                def keep(_m, _args, output, i=i, slots=slots):
                    slots[i + 1] = _state(output)
                handles.append(layer.register_forward_hook(keep))
        if request.attention:
            self.set_attention_implementation(True)
        for kind in sorted(request.attention):
            side, which = kind.split("_")
            layers = self._layers(side)
            slots = maps[kind] = [None] * len(layers)
            for i, layer in enumerate(layers):
                module = layer.encoder_attn if which == "cross" else layer.self_attn

                def keep_map(_m, _args, output, i=i, slots=slots):
                    slots[i] = output[1]
                handles.append(module.register_forward_hook(keep_map))
        try:
            outputs = self.model.model(input_ids=input_ids, attention_mask=attention_mask,
                                       decoder_input_ids=decoder_ids, decoder_attention_mask=decoder_mask,
                                       use_cache=False, return_dict=True)
        finally:
            for handle in handles:
                handle.remove()
        return self._target(outputs.last_hidden_state, 1), states, maps, unpack

    def decoder_output(self, net_input: dict) -> torch.Tensor:
        """B x T x C: the decoder's output (after its final LayerNorm) at the student's target positions."""
        return self._run(net_input, FeatureRequest())[0]

    def features(self, net_input: dict, request: FeatureRequest) -> Features:
        hidden, states, maps, unpack = self._run(net_input, request)
        src_tokens = net_input["src_tokens"]
        features = Features(net_output=(self.logits_of(hidden), {}),
                            encoder_padding_mask=src_tokens.eq(self.source_pad))
        if request.encoder_states:
            features.encoder_states = [self._source(s, 1, unpack).transpose(0, 1) for s in states["encoder"]]
        if request.decoder_states:
            features.decoder_states = [self._target(s, 1).transpose(0, 1) for s in states["decoder"]]
        for kind, layer_maps in maps.items():
            missing = [i + 1 for i, m in enumerate(layer_maps) if m is None]
            if missing:
                raise RuntimeError(f"teacher {self.path}: no {kind} attention weights came back from layers "
                                   f"{missing} (transformers returns them from its eager attention only)")
            features.attention[kind] = [self._student_map(kind, m, unpack) for m in layer_maps]
        return features

    def _student_map(self, kind: str, m: torch.Tensor, unpack) -> torch.Tensor:
        """A B x H x T x S map in the student's positions; rows renormalised where a code's column went."""
        dropped = False
        if kind == "encoder_self":
            m = self._source(self._source(m, 2, unpack), 3, unpack)
            dropped = self.source_prefix is not None
        elif kind == "decoder_cross":
            m = self._source(self._target(m, 2), 3, unpack)
            dropped = self.source_prefix is not None
        else:
            m = self._target(self._target(m, 2), 3)
            dropped = self.target_prefix is not None
        if dropped:
            m = m / m.sum(-1, keepdim=True).clamp_min(torch.finfo(m.dtype).tiny)
        return m

    def outside_mass(self, rows: torch.Tensor, chunk: int = 128) -> float:
        """The teacher's probability mass on the pieces the student does not keep, summed over
        decoder outputs ``rows`` (N x C): what vocabulary trimming drops. The full-vocabulary
        softmax is taken ``chunk`` rows at a time, so a 256k-piece teacher's N x V logits never
        exist at once (a chunk's are chunk x V floats: 128 MiB at 128 rows and 256k pieces). Pieces no target can be are left out, as :meth:`logits_of` leaves them out."""
        weight = self.model.get_output_embeddings().weight
        bias = getattr(self.model, "final_logits_bias", None)
        target = torch.ones(weight.size(0), dtype=torch.bool, device=weight.device)
        target[self.never_ids] = False
        kept = torch.zeros_like(target)
        kept[self.target_ids[~self.masked]] = True
        kept[self.trimmed_ids] = True  # their mass is the student's <unk>: not lost
        outside = 0.0
        for part in rows.split(chunk):
            logits = F.linear(part.float(), weight.float(), None if bias is None else bias.view(-1).float())
            log_probs = logits.masked_fill(~target, float("-inf")).log_softmax(-1)
            outside += float(log_probs[:, target & ~kept].exp().sum())
        return outside

    def forward(self, src_tokens, src_lengths=None, prev_output_tokens=None, **unused):
        """The logits alone, as ``fairseq_model(**net_input)[0]`` gives them."""
        hidden = self.decoder_output({"src_tokens": src_tokens, "prev_output_tokens": prev_output_tokens})
        return self.logits_of(hidden), {}


def to_student_layout(x: torch.Tensor, unpack: torch.Tensor, dim: int) -> torch.Tensor:
    """``x`` (batch first) with its source positions along ``dim`` put back where the student has
    them: ``unpack`` (B x S) is the inverse of the packing :meth:`HuggingFaceTeacher.teacher_inputs` did
    (None: there was none)."""
    if unpack is None:
        return x
    shape = [x.size(0)] + [1] * (dim - 1) + [x.size(dim)] + [1] * (x.dim() - dim - 1)
    return x.gather(dim, unpack.view(shape).expand_as(x))


def data_record(data: Optional[str]) -> dict:
    """What ``fsd-prepare-corpus --vocabulary-from MODEL_DIR`` recorded of the teacher in the
    data-bin ``data`` (its language codes, the pieces it trimmed); {} where it recorded nothing."""
    from fairseq_distill.text.segmentation import load_meta

    return ((load_meta(data) if data and os.path.isdir(data) else None) or {}).get(META_KEY) or {}


def load(path: str, source_dictionary, target_dictionary, data: Optional[str] = None) -> HuggingFaceTeacher:
    """The frozen teacher of a Hugging Face model directory, checked against the dictionaries of
    the data-bin ``data`` (whose record gives the language codes an M2M100/NLLB teacher reads)."""
    config = model_config(path)
    transformers = require_transformers()
    tokenizer = load_tokenizer(path)
    vocab = teacher_vocabulary(path, tokenizer)
    source_map = symbol_map(source_dictionary.symbols, vocab, config)
    target_map = symbol_map(target_dictionary.symbols, vocab, config)
    check_vocabulary("source", source_dictionary, source_map, path)
    check_vocabulary("target", target_dictionary, target_map, path)
    try:
        model = transformers.AutoModelForSeq2SeqLM.from_pretrained(path, attn_implementation="sdpa")
    except Exception as e:
        raise DistillError(f"cannot load the Hugging Face teacher {path}: {type(e).__name__}: {e}") from e
    record = data_record(data)
    codes = record.get("source_code"), record.get("target_code")
    trimmed = trimmed_pieces(data, record)
    for code in codes:
        if code is not None and code not in vocab:
            raise DistillError(f"teacher {path} has no language code {code!r}, which the data-bin {data} was "
                               f"prepared for: it was prepared for another teacher")
    teacher = HuggingFaceTeacher(model, path, config, source_map, target_map,
                                 never_targets(config, tokenizer, vocab), source_dictionary.pad(),
                                 target_dictionary.pad(), target_dictionary.eos(),
                                 *(None if c is None else vocab[c] for c in codes),
                                 trimmed=[vocab[p] for p in trimmed if p in vocab])
    kept = int((~teacher.masked).sum())
    logger.info(f"teacher {path}: {FAMILIES[config['model_type']]}; its output restricted to the {kept:,} of its "
                f"{len(vocab):,} pieces that are target symbols of the data"
                + (f", its mass on the {teacher.trimmed_ids.numel():,} pieces --teacher-pieces trimmed in <unk>"
                   if trimmed else "")
                + (f"; language codes {codes[0]} -> {codes[1]}" if codes[0] else ""))
    return teacher
