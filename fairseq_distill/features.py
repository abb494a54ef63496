"""Capture the features a distillation loss needs from any fairseq encoder-decoder model.

One forward of the model, for student and teacher alike, returns a :class:`Features`
record; every loss term reads from it. The student must run through its own (possibly
DDP-wrapped) ``forward`` so that data-parallel gradient synchronisation still works,
so the encoder output, which ``FairseqEncoderDecoderModel.forward`` does not return,
is taken with a forward hook on the encoder module.

Hidden states come from fairseq's own ``return_all_hiddens``: index 0 is the embedding
output, index l (1-based) the output of layer l before any final layer norm. This path
exists in every fairseq build we support, in training and eval mode.
"""
from dataclasses import dataclass, field
from typing import FrozenSet, List, Optional

import torch.nn as nn
from torch import Tensor


@dataclass(frozen=True)
class FeatureRequest:
    """What a criterion needs beyond the output logits."""

    encoder_states: bool = False
    decoder_states: bool = False
    # reserved for attention-map capture: a subset of ATTENTION_TYPES
    attention: FrozenSet[str] = frozenset()

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
    ``encoder_padding_mask``: B x S, True at padding.
    """

    net_output: tuple
    encoder_padding_mask: Optional[Tensor] = None
    encoder_states: List[Tensor] = field(default_factory=list)
    decoder_states: List[Tensor] = field(default_factory=list)

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


def run_with_features(model: nn.Module, net_input: dict, request: FeatureRequest) -> Features:
    """Run ``model(**net_input)`` once and collect what ``request`` asks for."""
    inner = unwrap_model(model)
    captured = {}

    def keep_encoder_out(_module, _inputs, output):
        captured["encoder_out"] = output

    handle = inner.encoder.register_forward_hook(keep_encoder_out)
    try:
        if request.needs_hiddens:
            net_output = model(**net_input, return_all_hiddens=True)
        else:
            net_output = model(**net_input)
    finally:
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
    return features


def stack_shape(model: nn.Module) -> dict:
    """``{"encoder": (layers, width), "decoder": (layers, width)}`` of a fairseq Transformer."""
    inner = unwrap_model(model)
    shape = {}
    for side in ("encoder", "decoder"):
        layers = getattr(getattr(inner, side), "layers", None)
        if layers is None or len(layers) == 0:
            raise ValueError(f"{type(inner).__name__} has no {side} layers to distil")
        shape[side] = (len(layers), layers[0].embed_dim)
    return shape
