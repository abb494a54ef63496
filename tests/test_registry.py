"""The term registry: one name per term for --distill-terms, checkpoint keys and logs, with the
names of older versions still read."""
from types import SimpleNamespace

import pytest

from fairseq_distill.errors import DistillError
from fairseq_distill.terms import DistillationTerm
from fairseq_distill.terms.registry import (TERMS, build_terms, option_groups, parse_term_names, register_term,
                                            upgrade_criterion_keys)


def test_the_registered_terms_and_their_option_groups():
    assert list(TERMS) == ["word_kd", "pkd", "ckd", "alp_kd", "a2d"]
    assert {n: t.cls.name for n, t in TERMS.items()} == {n: n for n in TERMS}
    assert [g.__name__ for g in option_groups(["word_kd", "ckd"])] == ["WordKDOptions", "LayerKDOptions", "CKDOptions"]
    assert [g.__name__ for g in option_groups()] == ["WordKDOptions", "LayerKDOptions", "CKDOptions", "ALPKDOptions",
                                                     "AttentionKDOptions"]


@pytest.mark.parametrize("spec,message", [
    ("word_kd,xkd", "unknown term 'xkd'; valid terms: word_kd, pkd, ckd, alp_kd, a2d"),
    (" , ", "no term"),
    ("word_kd,word_kd", "names a term twice"),
    ("pkd,alp_kd", "at most one layer-KD term (pkd, ckd, alp_kd), got pkd, alp_kd"),
])
def test_bad_term_lists_are_refused_naming_what_is_valid(spec, message):
    with pytest.raises(DistillError, match=message.replace("(", r"\(").replace(")", r"\)")):
        parse_term_names(spec)
    assert parse_term_names(" word_kd, ckd ,a2d") == ("word_kd", "ckd", "a2d")


def test_keys_of_every_version_are_upgraded_to_todays():
    saved = {"fusers.encoder.maps.0.weight": 1,          # 0.1: the criterion held its modules
             "aams.encoder_self.weight": 2,
             "terms.layer.fusers.decoder.maps.0.weight": 3,  # before the registry
             "terms.attn.aams.decoder_cross.bias": 4,
             "terms.ckd.fusers.encoder.maps.1.weight": 5}    # today
    assert upgrade_criterion_keys(saved, ["word_kd", "ckd", "a2d"]) == {
        "terms.ckd.fusers.encoder.maps.0.weight": 1, "terms.a2d.aams.encoder_self.weight": 2,
        "terms.ckd.fusers.decoder.maps.0.weight": 3, "terms.a2d.aams.decoder_cross.bias": 4,
        "terms.ckd.fusers.encoder.maps.1.weight": 5}
    # a layer-KD state goes to whichever layer-KD term this run has
    assert upgrade_criterion_keys({"terms.layer.fusers.x": 1}, ["word_kd", "alp_kd"]) == {"terms.alp_kd.fusers.x": 1}


def test_a_new_term_needs_only_its_class_and_registration():
    @register_term("toy_kd")
    class ToyTerm(DistillationTerm):
        @classmethod
        def from_config(cls, cfg, context, names=()):
            return cls(cfg.toy_weight)

    try:
        assert ToyTerm.name == "toy_kd" and "toy_kd" in parse_term_names("word_kd,toy_kd")
        built = build_terms(["toy_kd"], SimpleNamespace(toy_weight=0.25), context=None)
        assert isinstance(built["toy_kd"], ToyTerm) and built["toy_kd"].weight == 0.25
        with pytest.raises(ValueError, match="registered twice"):
            register_term("toy_kd")(ToyTerm)
    finally:
        del TERMS["toy_kd"]
