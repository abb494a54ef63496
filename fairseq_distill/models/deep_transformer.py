"""``--arch deep_transformer*``: the deep pre-norm Transformer of Li et al. (AAAI 2021).

fairseq's Transformer with:

* pre-norm layers (layer norm before each sub-layer, a final layer norm on each stack);
* relative position representations in every self-attention (Shaw et al., 2018),
  ``--max-relative-length k`` (keys, and values with ``--relative-values``);
* GPKD group permutation while training (``--encoder-group-size``/``--decoder-group-size``);
* Skipping Sub-Layer on the encoder (``--skip-sublayer-rate φ``).

Only builders are overridden: the model builds our encoder and decoder, which build our
layers (relative self-attention) and keep them in a
:class:`~fairseq_distill.modules.layer_stack.StochasticLayerStack`; fairseq's forward
passes, incremental decoding and checkpointing are used as they are.
"""
import logging

from fairseq.distributed import fsdp_wrap
from fairseq.models import register_model, register_model_architecture
from fairseq.models.transformer import (
    TransformerConfig,
    TransformerDecoder,
    TransformerEncoder,
    TransformerModel,
    base_architecture,
)
from fairseq.modules.transformer_layer import TransformerDecoderLayerBase, TransformerEncoderLayerBase
from fairseq.modules.checkpoint_activations import checkpoint_wrapper

from fairseq_distill import compat
from fairseq_distill.errors import DistillError
from fairseq_distill.models.prenorm import PreNormTransformerModel, force_pre_norm, set_defaults
from fairseq_distill.modules.layer_stack import StochasticLayerStack, TrainingDraws, skip_probabilities
from fairseq_distill.modules.relative_attention import RelativeMultiheadAttention

logger = logging.getLogger(__name__)

SKIP_WHICH = ("both", "attention", "ffn")
SKIP_SCHEDULES = ("linear", "uniform")


def _option(cfg, name, default):
    value = getattr(cfg, name, None)
    return default if value is None else value


def _relative_attention(embed_dim, heads, cfg):
    return RelativeMultiheadAttention(
        embed_dim, heads,
        max_relative_length=_option(cfg, "max_relative_length", 8),
        relative_values=bool(_option(cfg, "relative_values", False)),
        dropout=cfg.attention_dropout,
    )


def _wrap_layer(layer, cfg):
    # what fairseq's own build_*_layer does after constructing a layer
    if cfg.checkpoint_activations:
        layer = checkpoint_wrapper(layer, offload_to_cpu=cfg.offload_activations)
    return fsdp_wrap(layer, min_num_params=0 if cfg.checkpoint_activations else cfg.min_params_to_wrap)


class DeepEncoderLayer(TransformerEncoderLayerBase):
    """A pre-norm encoder layer with relative self-attention whose two sub-layers can be
    omitted (training) or scaled by their keep probability (inference).

    fairseq's layer adds each sub-layer's output to the residual through
    ``residual_connection`` (attention first, then FFN); that is the one place a sub-layer
    is dropped or scaled. An omitted sub-layer is still computed, then discarded: the
    regulariser is about what reaches the residual stream, not about speed.
    """

    def __init__(self, cfg, return_fc=False):
        super().__init__(cfg, return_fc=return_fc)
        compat.use_unfused_encoder_layers(self)  # fairseq 0.12.2's fused path skips residual_connection
        self.skip_probs = (0.0, 0.0)   # (attention, FFN) at this layer's position
        self.skipped = (False, False)  # this training forward's draw
        self._sublayer = 0

    def build_self_attention(self, embed_dim, cfg):
        return _relative_attention(embed_dim, cfg.encoder.attention_heads, cfg)

    def set_sublayer_skipping(self, probs, skipped):
        self.skip_probs, self.skipped = probs, skipped

    def forward(self, *args, **kwargs):
        self._sublayer = 0
        return super().forward(*args, **kwargs)

    def residual_connection(self, x, residual):
        which = min(self._sublayer, 1)
        self._sublayer += 1
        p = self.skip_probs[which]
        if p == 0.0:
            return residual + x
        if self.training:
            return residual if self.skipped[which] else residual + x
        return residual + (1.0 - p) * x


class DeepDecoderLayer(TransformerDecoderLayerBase):
    def build_self_attention(self, embed_dim, cfg, add_bias_kv=False, add_zero_attn=False):
        if add_bias_kv or add_zero_attn:
            raise DistillError("deep_transformer: relative self-attention does not support "
                               "add_bias_kv / add_zero_attn")
        return _relative_attention(embed_dim, cfg.decoder.attention_heads, cfg)


class _StochasticStackMixin:
    """Shared by encoder and decoder: replace fairseq's layer list by a
    :class:`StochasticLayerStack` and draw its order/skips once per forward."""

    def _stochastic_stack(self, cfg, side, stream, skip_probs=None):
        draws = TrainingDraws(_option(cfg, "seed", 1), stream)
        self.layers = StochasticLayerStack(
            list(self.layers), group_size=_option(cfg, f"{side}_group_size", 0),
            skip_probs=skip_probs, draws=draws, side=side,
        )


class DeepTransformerEncoder(_StochasticStackMixin, TransformerEncoder):
    def __init__(self, args, dictionary, embed_tokens, return_fc=False):
        super().__init__(args, dictionary, embed_tokens, return_fc=return_fc)
        rate = float(_option(args, "skip_sublayer_rate", 0.0))
        probs = skip_probabilities(len(self.layers), rate, _option(args, "skip_sublayer", "both"),
                                   _option(args, "skip_sublayer_schedule", "linear"))
        self._stochastic_stack(args, "encoder", stream=0, skip_probs=probs)

    def build_encoder_layer(self, cfg):
        cfg = TransformerConfig.from_namespace(cfg)
        return _wrap_layer(DeepEncoderLayer(cfg, return_fc=self.return_fc), cfg)

    def forward(self, *args, **kwargs):
        self.layers.draw()
        return super().forward(*args, **kwargs)


class DeepTransformerDecoder(_StochasticStackMixin, TransformerDecoder):
    def __init__(self, args, dictionary, embed_tokens, no_encoder_attn=False, output_projection=None):
        super().__init__(args, dictionary, embed_tokens, no_encoder_attn=no_encoder_attn,
                         output_projection=output_projection)
        self._stochastic_stack(args, "decoder", stream=1)

    def build_decoder_layer(self, cfg, no_encoder_attn=False):
        cfg = TransformerConfig.from_namespace(cfg)
        return _wrap_layer(DeepDecoderLayer(cfg, no_encoder_attn), cfg)

    def forward(self, *args, **kwargs):
        self.layers.draw()
        return super().forward(*args, **kwargs)


@register_model("deep_transformer")
class DeepTransformerModel(PreNormTransformerModel):
    """Pre-norm Transformer with relative self-attention, group permutation and Skipping
    Sub-Layer. Its checkpoints load in ``fairseq-generate --user-dir "$(fsd-options --user-dir)"``."""

    encoder_class = DeepTransformerEncoder
    decoder_class = DeepTransformerDecoder
    layerdrop_advice = ("deep_transformer does not combine --{side}-layerdrop with its own layer stack; "
                        "for a LayerDrop-like regulariser use --skip-sublayer-rate with "
                        "--skip-sublayer-schedule uniform")

    @staticmethod
    def add_args(parser):
        TransformerModel.add_args(parser)
        parser.add_argument("--max-relative-length", type=int, metavar="K",
                            help="clip relative distances to [-K, K] in self-attention (default 8)")
        parser.add_argument("--relative-values", action="store_true", default=None,
                            help="also learn relative value embeddings (the paper uses keys only)")
        parser.add_argument("--encoder-group-size", type=int, metavar="H",
                            help="GPKD: permute encoder layers within consecutive groups of H on "
                            "every training forward (0: off)")
        parser.add_argument("--decoder-group-size", type=int, metavar="H",
                            help="GPKD: the same for decoder layers (0: off)")
        parser.add_argument("--skip-sublayer-rate", type=float, metavar="PHI",
                            help="Skipping Sub-Layer: omit encoder sub-layer l of 2L with "
                            "probability l/(2L)*PHI while training (0: off; paper 0.4)")
        parser.add_argument("--skip-sublayer", choices=SKIP_WHICH,
                            help="which encoder sub-layers may be skipped (default both)")
        parser.add_argument("--skip-sublayer-schedule", choices=SKIP_SCHEDULES,
                            help="linear: p_l = l/(2L)*PHI (paper); uniform: p_l = PHI (LayerDrop-like)")

    @staticmethod
    def architecture(args):
        deep_transformer(args)

    @classmethod
    def check_options(cls, args):
        check_options(args)


def check_options(args):
    if getattr(args, "cross_self_attention", False):
        raise DistillError("deep_transformer does not support --cross-self-attention")
    if args.max_relative_length < 1:
        raise DistillError(f"--max-relative-length must be >= 1, got {args.max_relative_length}")
    if not 0.0 <= args.skip_sublayer_rate <= 1.0:
        raise DistillError(f"--skip-sublayer-rate must be in [0, 1], got {args.skip_sublayer_rate}")
    for side in ("encoder", "decoder"):
        h, n = getattr(args, f"{side}_group_size"), getattr(args, f"{side}_layers")
        if h < 0 or (h > 1 and n % h != 0):
            divisors = [d for d in range(1, n + 1) if n % d == 0]
            raise DistillError(f"--{side}-group-size {h} does not divide --{side}-layers {n}; "
                               f"valid group sizes: 0 (off) or one of {divisors}")


@register_model_architecture("deep_transformer", "deep_transformer")
def deep_transformer(args):
    force_pre_norm(args)
    set_defaults(args, max_relative_length=8, relative_values=False,
              encoder_group_size=0, decoder_group_size=0,
              skip_sublayer_rate=0.0, skip_sublayer="both", skip_sublayer_schedule="linear")
    base_architecture(args)


def _shape(encoder_layers, decoder_layers, width=512, ffn=2048, heads=8):
    def arch(args):
        set_defaults(args, encoder_layers=encoder_layers, decoder_layers=decoder_layers,
                  encoder_embed_dim=width, decoder_embed_dim=width,
                  encoder_ffn_embed_dim=ffn, decoder_ffn_embed_dim=ffn,
                  encoder_attention_heads=heads, decoder_attention_heads=heads)
        deep_transformer(args)
    return arch


# The paper's shapes at base width (d=512, FFN 2048, 8 heads): deep encoders, and DESDAR
# (deep encoder, shallow decoder) shapes for fast decoding.
SHAPES = {f"deep_transformer_{e}_{d}": (e, d) for e, d in
          [(6, 6), (24, 6), (48, 6), (24, 3), (24, 1), (48, 3), (48, 1)]}
for _name, (_enc, _dec) in SHAPES.items():
    register_model_architecture("deep_transformer", _name)(_shape(_enc, _dec))

# Small widths for CPU benchmarks and tests.
register_model_architecture("deep_transformer", "deep_transformer_small")(_shape(6, 6, 128, 512, 4))
register_model_architecture("deep_transformer", "deep_transformer_tiny")(_shape(2, 2, 16, 32, 2))
