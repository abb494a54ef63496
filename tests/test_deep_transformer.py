"""The deep pre-norm Transformer: relative attention, group permutation, Skipping Sub-Layer."""
import itertools
import math
from collections import Counter

import pytest
import torch
from fairseq import options
from fairseq.data import Dictionary
from fairseq.models import ARCH_MODEL_REGISTRY
from fairseq.sequence_generator import SequenceGenerator
from fairseq.tasks.translation import TranslationConfig, TranslationTask

import fairseq_distill  # noqa: F401  (registers the plugin)
from fairseq_distill.errors import DistillError
from fairseq_distill.modules.layer_stack import StochasticLayerStack, TrainingDraws, skip_probabilities
from fairseq_distill.modules.relative_attention import RelativeMultiheadAttention


def dictionary(size=24):
    d = Dictionary()
    while len(d) < size:
        d.add_symbol(f"w{len(d)}")
    return d


def build(*flags, arch="deep_transformer_tiny", seed=1):
    """A deep_transformer built from command-line flags, as fairseq-train would build it."""
    d = dictionary()
    task = TranslationTask(TranslationConfig(), d, d)
    args = options.parse_args_and_arch(
        options.get_training_parser(),
        ["unused-data-dir", "--arch", arch, "--share-all-embeddings", "--dropout", "0",
         "--seed", str(seed), *flags])
    torch.manual_seed(seed)
    return ARCH_MODEL_REGISTRY[args.arch].build_model(args, task)


def batch(bsz=3, src_len=7, tgt_len=5, seed=0):
    g = torch.Generator().manual_seed(seed)
    src = torch.randint(4, 24, (bsz, src_len), generator=g)
    prev = torch.randint(4, 24, (bsz, tgt_len), generator=g)
    return src, torch.full((bsz,), src_len), prev


# -- relative position representations ---------------------------------------------------

def hand_relative_attention(attn, x, key_padding_mask=None):
    """Shaw et al.'s formulas written out position by position."""
    T, B, E = x.shape
    H, d, k = attn.num_heads, attn.head_dim, attn.max_relative_length
    q, key, v = attn.q_proj(x), attn.k_proj(x), attn.v_proj(x)
    aK = attn.relative_keys.weight
    aV = attn.relative_values.weight if attn.relative_values is not None else torch.zeros_like(aK)
    out = torch.zeros(T, B, E)
    probs = torch.zeros(H, B, T, T)
    for b in range(B):
        for h in range(H):
            cols = slice(h * d, (h + 1) * d)
            for i in range(T):
                r = [min(max(j - i, -k), k) + k for j in range(T)]
                scores = torch.stack([(q[i, b, cols] @ (key[j, b, cols] + aK[r[j]])) / math.sqrt(d)
                                      for j in range(T)])
                if key_padding_mask is not None:
                    scores = scores.masked_fill(key_padding_mask[b], float("-inf"))
                p = torch.softmax(scores, dim=0)
                probs[h, b, i] = p
                out[i, b, cols] = sum(p[j] * (v[j, b, cols] + aV[r[j]]) for j in range(T))
    return attn.out_proj(out), probs


@pytest.mark.parametrize("relative_values", [False, True])
def test_relative_attention_equals_hand_computation(relative_values):
    torch.manual_seed(0)
    attn = RelativeMultiheadAttention(8, 2, max_relative_length=2, relative_values=relative_values).eval()
    x = torch.randn(5, 2, 8)
    mask = torch.tensor([[False] * 5, [False, False, False, True, True]])
    with torch.no_grad():
        out, weights = attn(x, x, x, key_padding_mask=mask, need_head_weights=True)
        want_out, want_probs = hand_relative_attention(attn, x, mask)
    assert torch.allclose(out, want_out, atol=1e-5)
    assert torch.allclose(weights, want_probs, atol=1e-6)
    # 2k + 1 embeddings; on 5 positions distances reach ±4, so the hand computation clips
    assert attn.relative_keys.weight.shape == (5, 4)


def test_incremental_decoding_equals_full_forward():
    model = build("--relative-values", "--max-relative-length", "2").eval()
    src, lengths, prev = batch(tgt_len=6)
    with torch.no_grad():
        full = model(src, lengths, prev)[0]
        encoder_out = model.encoder(src, lengths)
        state = {}
        steps = [model.decoder(prev[:, : t + 1], encoder_out=encoder_out, incremental_state=state)[0]
                 for t in range(prev.size(1))]
    assert torch.allclose(torch.cat(steps, dim=1), full, atol=1e-5)


def test_beam_search_scores_equal_full_forward_scores():
    """Beam search reorders the cached keys/values between steps; the scores it reports must
    be what a full forward of the chosen hypothesis gives."""
    d = dictionary()
    model = build("--max-relative-length", "2").eval()
    src, lengths, _ = batch(bsz=2)
    generator = SequenceGenerator([model], d, beam_size=3, max_len_b=6, normalize_scores=False)
    hypos = generator.forward({"net_input": {"src_tokens": src, "src_lengths": lengths}})
    for b in range(2):
        best = hypos[b][0]
        tokens = best["tokens"]
        prev = torch.cat([torch.tensor([d.eos()]), tokens[:-1]])[None]
        with torch.no_grad():
            lprobs = model.get_normalized_probs(model(src[b:b + 1], lengths[b:b + 1], prev), log_probs=True)
        want = lprobs[0].gather(1, tokens[:, None]).squeeze(1)
        assert torch.allclose(best["positional_scores"], want, atol=1e-4)


# -- group permutation -------------------------------------------------------------------

class Recorder(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.probs, self.skipped = None, None

    def set_sublayer_skipping(self, probs, skipped):
        self.probs, self.skipped = probs, skipped


def stack(n=4, group_size=2, seed=1, rate=0.0):
    probs = skip_probabilities(n, rate) if rate else None
    s = StochasticLayerStack([Recorder() for _ in range(n)], group_size=group_size,
                             skip_probs=probs, draws=TrainingDraws(seed, stream=0))
    return s.train()


def orders(s, updates):
    seen = []
    for u in updates:
        s.set_num_updates(u)
        s.draw()
        seen.append(tuple(s.order))
    return seen


def test_every_order_appears_and_groups_are_independent():
    seen = orders(stack(6, 3), range(1, 601))
    first = Counter(o[:3] for o in seen)
    assert set(first) == set(itertools.permutations(range(3)))
    assert set(o[3:] for o in seen) == set(itertools.permutations(range(3, 6)))
    # independence: all 36 combinations of the two groups' orders occur, none dominates
    joint = Counter(seen)
    assert len(joint) == 36
    assert max(joint.values()) < 3 * 600 / 36
    assert all(sorted(o[:3]) == [0, 1, 2] and sorted(o[3:]) == [3, 4, 5] for o in seen)


def test_order_is_natural_in_eval_mode():
    s = stack(4, 2)
    s.eval()
    assert orders(s, range(1, 30)) == [(0, 1, 2, 3)] * 29
    assert [i for i, _ in enumerate(s)] == [0, 1, 2, 3]
    assert list(s) == [s[i] for i in range(4)]


def test_order_follows_seed_and_update_not_global_rng():
    torch.manual_seed(123)
    a = orders(stack(seed=5), [3, 9, 4, 9])
    torch.manual_seed(999)  # another worker: different global RNG state, same seed and updates
    b = orders(stack(seed=5), [3, 9, 4, 9])
    assert a == b
    assert a[1] == a[3]  # same seed and update number: same order
    assert orders(stack(seed=5), range(40)) != orders(stack(seed=6), range(40))
    # forwards within one update (gradient accumulation) get fresh draws
    s = stack(seed=5)
    s.set_num_updates(1)
    within = []
    for _ in range(40):
        s.draw()
        within.append(tuple(s.order))
    assert len(set(within)) > 1


def test_model_runs_layers_in_the_drawn_order():
    model = build("--encoder-layers", "4", "--encoder-group-size", "2",
                  "--decoder-layers", "2", "--decoder-group-size", "2").train()
    calls = {"encoder": [], "decoder": []}
    for side in calls:
        for i in range(len(getattr(model, side).layers)):
            getattr(model, side).layers[i].register_forward_pre_hook(
                lambda _m, _a, i=i, side=side: calls[side].append(i))
    src, lengths, prev = batch()
    seen = set()
    for update in range(1, 40):
        calls["encoder"].clear(), calls["decoder"].clear()
        model.set_num_updates(update)
        model(src, lengths, prev)
        assert calls["encoder"] == model.encoder.layers.order
        assert calls["decoder"] == model.decoder.layers.order
        seen.add(tuple(calls["encoder"]))
    assert seen == {(0, 1, 2, 3), (1, 0, 2, 3), (0, 1, 3, 2), (1, 0, 3, 2)}
    model.eval()
    calls["encoder"].clear()
    model(src, lengths, prev)
    assert calls["encoder"] == [0, 1, 2, 3]


def test_group_size_must_divide_depth():
    with pytest.raises(DistillError, match=r"--encoder-group-size 4 does not divide --encoder-layers 6.*\[1, 2, 3, 6\]"):
        build("--encoder-layers", "6", "--encoder-group-size", "4")


def test_layerdrop_is_refused_with_a_pointer_to_uniform_skipping():
    with pytest.raises(DistillError, match="skip-sublayer-schedule uniform"):
        build("--encoder-layerdrop", "0.2")


# -- Skipping Sub-Layer -------------------------------------------------------------------

def test_skip_probabilities_follow_the_schedule():
    def flat(pairs):
        return [p for pair in pairs for p in pair]

    # sub-layer l = 1..2L (attention, FFN of layer 1, then layer 2, ...) has p_l = l/(2L)·φ
    assert flat(skip_probabilities(2, 0.4)) == pytest.approx([0.1, 0.2, 0.3, 0.4])
    assert flat(skip_probabilities(2, 0.4, which="attention")) == pytest.approx([0.1, 0, 0.3, 0])
    assert flat(skip_probabilities(2, 0.4, which="ffn")) == pytest.approx([0, 0.2, 0, 0.4])
    assert flat(skip_probabilities(2, 0.3, schedule="uniform")) == pytest.approx([0.3] * 4)


def test_empirical_skip_frequencies_match_the_rates():
    s = stack(3, group_size=0, rate=0.6)
    n = 4000
    counts = torch.zeros(3, 2)
    for u in range(n):
        s.set_num_updates(u)
        s.draw()
        counts += torch.tensor(s.skipped, dtype=torch.float)
    want = torch.tensor(skip_probabilities(3, 0.6))
    # binomial standard deviation at p = 0.6, n = 4000 is 0.0077
    assert torch.allclose(counts / n, want, atol=0.03), (counts / n, want)
    # each layer learns its own position's rates and draw
    for position, layer in enumerate(s):
        assert layer.probs == pytest.approx(want[position].tolist())
        assert layer.skipped == s.skipped[position]


def hand_encoder(model, src, scales):
    """Pre-norm encoder with sub-layer outputs multiplied by ``scales[layer] = (s_attn, s_ffn)``."""
    enc = model.encoder
    x = enc.forward_embedding(src)[0].transpose(0, 1)
    for position, index in enumerate(enc.layers.order if enc.training else range(len(enc.layers))):
        layer = enc.layers[index]
        s_attn, s_ffn = scales[position]
        h = layer.self_attn_layer_norm(x)
        x = x + s_attn * layer.self_attn(h, h, h, key_padding_mask=None, need_weights=False)[0]
        h = layer.final_layer_norm(x)
        x = x + s_ffn * layer.fc2(layer.activation_fn(layer.fc1(h)))
    return enc.layer_norm(x)


def test_eval_output_scales_each_sublayer_by_its_keep_probability():
    model = build("--encoder-layers", "3", "--skip-sublayer-rate", "0.4").eval()
    src, lengths, _ = batch()
    probs = skip_probabilities(3, 0.4)
    with torch.no_grad():
        got = model.encoder(src, lengths)["encoder_out"][0]
        want = hand_encoder(model, src, [(1 - pa, 1 - pf) for pa, pf in probs])
        unscaled = hand_encoder(model, src, [(1, 1)] * 3)
    assert torch.allclose(got, want, atol=1e-5)
    assert not torch.allclose(got, unscaled, atol=1e-3)


def test_training_forward_omits_the_drawn_sublayers():
    model = build("--encoder-layers", "3", "--encoder-group-size", "3", "--skip-sublayer-rate", "1.0").train()
    src, lengths, _ = batch()
    skipped_any = kept_any = False
    for update in range(1, 12):
        model.set_num_updates(update)
        got = model.encoder(src, lengths)["encoder_out"][0]
        drawn = model.encoder.layers.skipped
        with torch.no_grad():
            want = hand_encoder(model, src, [(0 if sa else 1, 0 if sf else 1) for sa, sf in drawn])
        assert torch.allclose(got, want, atol=1e-5)
        flat = [s for pair in drawn for s in pair]
        skipped_any |= any(flat)
        kept_any |= not all(flat)
    assert skipped_any and kept_any


def test_rate_zero_is_the_plain_pre_norm_model():
    model = build("--encoder-layers", "3", "--encoder-group-size", "0")
    src, lengths, prev = batch()
    for mode in (model.train, model.eval):
        mode()
        got = model.encoder(src, lengths)["encoder_out"][0]
        with torch.no_grad():
            assert torch.allclose(got, hand_encoder(model, src, [(1, 1)] * 3), atol=1e-5)
    assert not model.encoder.layers.stochastic
    # passing φ = 0 explicitly builds the same model
    other = build("--encoder-layers", "3", "--skip-sublayer-rate", "0.0")
    other.load_state_dict(model.state_dict())
    model.eval(), other.eval()
    assert torch.equal(model(src, lengths, prev)[0], other(src, lengths, prev)[0])


def test_options_are_validated():
    with pytest.raises(DistillError, match="--skip-sublayer-rate must be in \\[0, 1\\], got 1.5"):
        build("--skip-sublayer-rate", "1.5")
    with pytest.raises(DistillError, match="--max-relative-length must be >= 1, got 0"):
        build("--max-relative-length", "0")


def test_named_shapes_and_flags_win_over_architecture_defaults():
    # build_model only reads the options; check the architecture functions directly
    from fairseq.models import ARCH_CONFIG_REGISTRY
    import argparse

    args = argparse.Namespace(encoder_layers=None, decoder_layers=2, encoder_embed_dim=None)
    ARCH_CONFIG_REGISTRY["deep_transformer_48_3"](args)
    assert (args.encoder_layers, args.decoder_layers, args.encoder_embed_dim) == (48, 2, 512)
    assert args.encoder_normalize_before and args.decoder_normalize_before
    args = argparse.Namespace()
    ARCH_CONFIG_REGISTRY["deep_transformer_24_1"](args)
    assert (args.encoder_layers, args.decoder_layers, args.encoder_ffn_embed_dim) == (24, 1, 2048)
    assert args.max_relative_length == 8 and not args.relative_values
