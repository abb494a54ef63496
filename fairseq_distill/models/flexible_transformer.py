"""``--arch flexible_transformer``: one pre-norm Transformer, decodable at many depths.

After Wang, Xiao and Zhu (Findings of EMNLP 2021). An M-layer encoder and N-layer decoder
support the depths that divide M and N (or the subsets ``--encoder-depths`` /
``--decoder-depths``); depth d runs the fixed sub-network that ``--depth-strategy`` assigns
to it (:mod:`fairseq_distill.depth.strategies`), with the embeddings and final layer norms
shared by all depths. Training every (encoder depth, decoder depth) pair on each batch is
the job of the ``translation_multidepth`` task; decoding picks one pair:

    fairseq-generate ... --user-dir "$(fsd-options --user-dir)" \\
        --model-overrides "{'encoder_depth': 6, 'decoder_depth': 3}"

``fsd-export-subnetwork`` turns one pair into an ordinary ``transformer`` checkpoint.
"""
import contextlib

from fairseq.models import register_model, register_model_architecture
from fairseq.models.transformer import TransformerDecoder, TransformerEncoder, TransformerModel, base_architecture

from fairseq_distill import compat
from fairseq_distill.depth.strategies import STRATEGIES, subnetworks
from fairseq_distill.models.prenorm import PreNormTransformerModel, force_pre_norm, set_defaults
from fairseq_distill.modules.layer_stack import SubnetworkLayerStack


class FlexibleTransformerEncoder(TransformerEncoder):
    def __init__(self, args, dictionary, embed_tokens, return_fc=False):
        super().__init__(args, dictionary, embed_tokens, return_fc=return_fc)
        self.layers = SubnetworkLayerStack(list(self.layers), subnetworks(args, "encoder"), "encoder")
        self._reuse, self._cached = False, None

    @contextlib.contextmanager
    def reusing_output(self):
        """Within this block, forwards after the first return the first one's output: the
        decoder depths trained on one encoder depth share one encoder pass (and graph)."""
        self._reuse, self._cached = True, None
        try:
            yield
        finally:
            self._reuse, self._cached = False, None

    def forward(self, src_tokens, *args, **kwargs):
        if self._reuse and self._cached is not None and self._cached[0] is src_tokens:
            return self._cached[1]
        out = super().forward(src_tokens, *args, **kwargs)
        if self._reuse:
            self._cached = (src_tokens, out)
        return out


class FlexibleTransformerDecoder(TransformerDecoder):
    def __init__(self, args, dictionary, embed_tokens, no_encoder_attn=False, output_projection=None):
        super().__init__(args, dictionary, embed_tokens, no_encoder_attn=no_encoder_attn,
                         output_projection=output_projection)
        self.layers = SubnetworkLayerStack(list(self.layers), subnetworks(args, "decoder"), "decoder")


@register_model("flexible_transformer")
class FlexibleTransformerModel(PreNormTransformerModel):
    encoder_class = FlexibleTransformerEncoder
    decoder_class = FlexibleTransformerDecoder
    layerdrop_advice = ("flexible_transformer trains its depths explicitly; drop --{side}-layerdrop "
                        "(LayerDrop is the separate baseline, with --arch transformer)")

    @staticmethod
    def architecture(args):
        flexible_transformer(args)

    @staticmethod
    def add_args(parser):
        TransformerModel.add_args(parser)
        parser.add_argument("--encoder-depths", type=str, metavar="D1,D2,...",
                            help="encoder depths to support (divisors of --encoder-layers; default all)")
        parser.add_argument("--decoder-depths", type=str, metavar="D1,D2,...",
                            help="decoder depths to support (divisors of --decoder-layers; default all)")
        parser.add_argument("--depth-strategy", choices=STRATEGIES,
                            help="which layers each depth uses (default optimal)")
        parser.add_argument("--encoder-depth", type=int, metavar="M",
                            help="encoder depth to run when not training every depth, e.g. when "
                            "decoding (default: the largest)")
        parser.add_argument("--decoder-depth", type=int, metavar="N",
                            help="decoder depth to run when decoding (default: the largest)")

    @classmethod
    def build_model(cls, args, task):
        args = compat.legacy_model_args(args)  # the same Namespace the base class completes
        model = super().build_model(args, task)
        model.set_depth(args.encoder_depth, args.decoder_depth)
        return model

    @property
    def depths(self):
        """(encoder depths, decoder depths) this model supports."""
        return sorted(self.encoder.layers.subnetworks), sorted(self.decoder.layers.subnetworks)

    @property
    def depth(self):
        return self.encoder.layers.depth, self.decoder.layers.depth

    def set_depth(self, encoder_depth=None, decoder_depth=None):
        """Run the (encoder_depth, decoder_depth) sub-network; None: the largest depth."""
        enc, dec = self.depths
        self.encoder.layers.select(encoder_depth or enc[-1])
        self.decoder.layers.select(decoder_depth or dec[-1])


@register_model_architecture("flexible_transformer", "flexible_transformer")
def flexible_transformer(args):
    force_pre_norm(args)  # as in the paper
    set_defaults(args, encoder_depths=None, decoder_depths=None, depth_strategy="optimal",
                 encoder_depth=None, decoder_depth=None)
    base_architecture(args)
