"""What the plugin's two model families share: a pre-norm fairseq Transformer whose
encoder and decoder are subclasses chosen by the model class.

fairseq builds a model from the ``argparse.Namespace`` of its registered options (restored
from a checkpoint as a ``DictConfig``, see :func:`fairseq_distill.compat.legacy_model_args`),
applies the architecture function, then ``build_encoder``/``build_decoder``. A subclass sets
:attr:`encoder_class`, :attr:`decoder_class`, :meth:`architecture` and, if it has any,
:meth:`check_options`; LayerDrop is refused because both families own their layer lists.
"""
from fairseq.models.transformer import TransformerDecoder, TransformerEncoder, TransformerModel

from fairseq_distill import compat
from fairseq_distill.errors import DistillError


def set_defaults(args, **values):
    """Set options the user did not pass (architecture functions never override flags)."""
    for name, value in values.items():
        if getattr(args, name, None) is None:
            setattr(args, name, value)


def force_pre_norm(args):
    # pre-norm is what these models are; the flags are store_true, so this never undoes a choice
    args.encoder_normalize_before = args.decoder_normalize_before = True


class PreNormTransformerModel(TransformerModel):
    encoder_class = TransformerEncoder
    decoder_class = TransformerDecoder
    # why LayerDrop does not apply, and what to use instead (completes "--{side}-layerdrop ...")
    layerdrop_advice = "is not supported"

    @staticmethod
    def architecture(args):
        raise NotImplementedError

    @classmethod
    def check_options(cls, args):
        pass

    @classmethod
    def build_model(cls, args, task):
        args = compat.legacy_model_args(args)
        cls.architecture(args)
        for side in ("encoder", "decoder"):
            if (getattr(args, f"{side}_layerdrop", 0) or 0) > 0:
                raise DistillError(cls.layerdrop_advice.format(side=side))
        cls.check_options(args)
        return super().build_model(args, task)

    @classmethod
    def build_encoder(cls, args, src_dict, embed_tokens):
        return cls.encoder_class(args, src_dict, embed_tokens)

    @classmethod
    def build_decoder(cls, args, tgt_dict, embed_tokens):
        return cls.decoder_class(args, tgt_dict, embed_tokens,
                                 no_encoder_attn=getattr(args, "no_cross_attention", False))
