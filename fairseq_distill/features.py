"""Capture the features a distillation loss needs from any fairseq encoder-decoder model.

One forward of the model, for student and teacher alike, returns a :class:`Features`
record; every loss term reads from it. The student must run through its own (possibly
DDP-wrapped) ``forward`` so that data-parallel gradient synchronisation still works,
so the encoder output, which ``FairseqEncoderDecoderModel.forward`` does not return,
is taken with a forward hook on the encoder module.

Hidden states come from fairseq's own ``return_all_hiddens``: index 0 is the embedding
output, index l (1-based) the output of layer l before any final layer norm. This path
exists in every fairseq build we support, in training and eval mode.

Per-head attention maps are not returned by fairseq's layers (encoder and decoder
self-attention ask for no weights, cross-attention returns one layer's head average), so
they are asked for on purpose: a forward pre-hook on each ``MultiheadAttention`` module
adds ``need_head_weights=True`` to its call and a forward hook keeps the returned
B x H x T x S probabilities (after softmax, before dropout). The hook also passes
``static_kv=True``, which outside incremental decoding only steers fairseq away from its
fused ``F.multi_head_attention_forward`` path (that path averages heads and returns weights
after dropout). Only the attention types a criterion asks for are hooked, and the maps are
the tensors autograd keeps anyway: capturing them adds no copies.
"""
from dataclasses import dataclass, field
from typing import Dict, FrozenSet, List, Optional

import torch.nn as nn
from torch import Tensor

from fairseq_distill import compat


# encoder self-attention (S x S), decoder self-attention (T x T), decoder cross-attention (T x S)
ATTENTION_TYPES = ("encoder_self", "decoder_self", "decoder_cross")


@dataclass(frozen=True)
class FeatureRequest:
    """What a criterion needs beyond the output logits."""

    encoder_states: bool = False
    decoder_states: bool = False
    # per-head attention maps: a subset of ATTENTION_TYPES
    attention: FrozenSet[str] = frozenset()

    def __post_init__(self):
        unknown = set(self.attention) - set(ATTENTION_TYPES)
        if unknown:
            raise ValueError(f"unknown attention types {sorted(unknown)}; known: {ATTENTION_TYPES}")

    def __or__(self, other: "FeatureRequest") -> "FeatureRequest":
        return FeatureRequest(
            encoder_states=self.encoder_states or other.encoder_states,
            decoder_states=self.decoder_states or other.decoder_states,
            attention=self.attention | other.attention,
        )

    @property
    def needs_hiddens(self) -> bool:
        return self.encoder_states or self.decoder_states


@dataclass
class Features:
    """One model's outputs for one batch.

    ``logits``: B x T x V. ``net_output``: what ``model(**net_input)`` returned, for
    fairseq helpers such as ``get_normalized_probs``. ``encoder_states`` and
    ``decoder_states``: lists of T x B x C tensors, embeddings first.
    ``encoder_padding_mask``: B x S, True at padding. ``attention``: attention type ->
    one B x H x T x S tensor of per-head probabilities per layer, first layer first.
    ``log_probs``: B x T x V fp32 log-probabilities, filled in by a criterion that computes
    them anyway (the student's, shared by cross-entropy and word-level KD).
    """

    net_output: tuple
    encoder_padding_mask: Optional[Tensor] = None
    encoder_states: List[Tensor] = field(default_factory=list)
    decoder_states: List[Tensor] = field(default_factory=list)
    attention: Dict[str, List[Tensor]] = field(default_factory=dict)
    log_probs: Optional[Tensor] = None

    @property
    def logits(self) -> Tensor:
        return self.net_output[0]


def unwrap_model(model: nn.Module) -> nn.Module:
    """The fairseq model inside DDP/FSDP/proxy wrappers."""
    while hasattr(model, "module") and isinstance(model.module, nn.Module):
        model = model.module
    return model


def _first(value):
    if isinstance(value, (list, tuple)):
        return value[0] if len(value) > 0 else None
    return value


def attention_modules(model: nn.Module, kind: str) -> List[nn.Module]:
    """The ``MultiheadAttention`` modules of one attention type, one per layer."""
    inner = unwrap_model(model)
    if kind not in ATTENTION_TYPES:
        raise ValueError(f"unknown attention type '{kind}'; known: {ATTENTION_TYPES}")
    side, which = kind.split("_")
    layers = getattr(getattr(inner, f"{side}"), "layers", None)
    if layers is None or len(layers) == 0:
        raise ValueError(f"{type(inner).__name__} has no {side} layers with attention")
    name = "encoder_attn" if which == "cross" else "self_attn"
    # indexed, not iterated: a stochastic layer stack iterates in this forward's order
    modules = [getattr(layers[i], name, None) for i in range(len(layers))]
    if any(m is None for m in modules):
        raise ValueError(f"{type(inner).__name__}: not every {side} layer has '{name}'")
    return modules


def _ask_for_head_weights(_module, args, kwargs):
    if kwargs.get("incremental_state") is not None:  # step-wise decoding: leave it alone
        return None
    if len(args) > 3:
        raise RuntimeError("attention capture expects MultiheadAttention(query, key, value, **options)")
    return args, {**kwargs, "need_weights": True, "need_head_weights": True, "static_kv": True}


def _attention_hooks(model: nn.Module, kinds, captured: Dict[str, List]) -> list:
    handles = []
    for kind in kinds:
        modules = attention_modules(model, kind)
        slots = captured[kind] = [None] * len(modules)

        def keep(index, slots=slots):
            def hook(_module, _inputs, output):
                weights = output[1]
                if weights is not None and weights.dim() == 4:
                    slots[index] = weights.transpose(0, 1)  # H x B x T x S -> B x H x T x S (a view)
            return hook

        for i, m in enumerate(modules):
            handles.append(m.register_forward_pre_hook(_ask_for_head_weights, with_kwargs=True))
            handles.append(m.register_forward_hook(keep(i)))
    return handles


def run_with_features(model: nn.Module, net_input: dict, request: FeatureRequest) -> Features:
    """Run ``model(**net_input)`` once and collect what ``request`` asks for."""
    inner = unwrap_model(model)
    if request.needs_hiddens or request.attention:
        compat.use_unfused_encoder_layers(inner)
    captured = {}
    attention: Dict[str, List] = {}

    def keep_encoder_out(_module, _inputs, output):
        captured["encoder_out"] = output

    handles = [inner.encoder.register_forward_hook(keep_encoder_out)]
    try:
        handles += _attention_hooks(inner, sorted(request.attention), attention)
        if request.needs_hiddens:
            net_output = model(**net_input, return_all_hiddens=True)
        else:
            net_output = model(**net_input)
    finally:
        for handle in handles:
            handle.remove()

    encoder_out = captured.get("encoder_out") or {}
    features = Features(
        net_output=net_output,
        encoder_padding_mask=_first(encoder_out.get("encoder_padding_mask")),
    )
    if request.encoder_states:
        features.encoder_states = list(encoder_out.get("encoder_states") or [])
    if request.decoder_states:
        features.decoder_states = list(net_output[1].get("inner_states") or [])
    for kind, maps in attention.items():
        missing = [i + 1 for i, m in enumerate(maps) if m is None]
        if missing:
            raise RuntimeError(f"{type(inner).__name__}: no {kind} attention weights came back from "
                               f"layers {missing}; the layer bypassed its attention module")
        features.attention[kind] = maps
    return features


def stack_shape(model: nn.Module) -> Optional[dict]:
    """The layout of a fairseq Transformer: ``{"encoder": (layers, width), "decoder": (layers,
    width)}`` plus, for each attention type it has, ``{type: (layers, heads)}``; None for a
    model without an encoder and a decoder made of ``.layers`` (the terms that need a layout
    say so, :class:`~fairseq_distill.terms.base.TermContext`)."""
    inner = unwrap_model(model)
    if callable(getattr(inner, "stack_shape", None)):  # a teacher kind that states its layout
        return inner.stack_shape()
    shape = {}
    for side in ("encoder", "decoder"):
        layers = getattr(getattr(inner, side, None), "layers", None)
        if layers is None or len(layers) == 0:
            return None
        shape[side] = (len(layers), layers[0].embed_dim)
    for kind in ATTENTION_TYPES:
        try:
            modules = attention_modules(inner, kind)
        except ValueError:
            continue
        shape[kind] = (len(modules), modules[0].num_heads)
    return shape
