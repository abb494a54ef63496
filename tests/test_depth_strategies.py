"""Depth strategies of the flexible-depth model: sub-networks, task balance, layer distance."""
import math
import re

import pytest

from helpers import python_module, run
from fairseq_distill.depth.strategies import (STRATEGIES, DepthError, average_layer_distance, parse_depths, plan,
                                              subnetworks, supported_depths, task_balance)
from fairseq_distill.errors import DistillError


@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize("n", [12, 6])
def test_subnetworks_are_well_formed(strategy, n):
    sub = plan(n, supported_depths(n), strategy)
    assert sorted(sub) == [d for d in range(1, n + 1) if n % d == 0]
    for d, layers in sub.items():
        assert len(layers) == d and len(set(layers)) == d  # each layer at most once
        assert layers == sorted(layers) and all(0 <= i < n for i in layers)
    assert plan(n, supported_depths(n), strategy) == sub  # deterministic
    assert sub[n] == list(range(n))


# two hand-checked depths per strategy on M = 12 (0-based layer indices)
HAND = {
    "head": {3: [0, 1, 2], 6: [0, 1, 2, 3, 4, 5]},
    "left": {4: [0, 3, 6, 9], 2: [0, 6]},
    "middle_left": {4: [1, 4, 7, 10], 2: [2, 8]},  # chunk of 3: offset 1; chunk of 6: offset 2
    # 1 -> [0]; 2 -> [1, 2]; 3 -> [3, 4, 5]; 4 -> [6..9]; 6 wraps: 10, 11, 0, 1, 2, 3
    "seq": {3: [3, 4, 5], 6: [0, 1, 2, 3, 10, 11]},
    # 12 takes all; all revived; 6 takes 0,2,..,10; 4 finds alive {1},{3,5},{7},{9,11} around
    # targets 1,4,7,10 and breaks the ties upwards: 1,5,7,11; 3 cannot be served by {3,9};
    # 2 takes 3 and 9 (targets 2 and 8)
    "optimal": {4: [1, 5, 7, 11], 2: [3, 9]},
}


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_hand_checked_subnetworks(strategy):
    sub = plan(12, supported_depths(12), strategy)
    for d, layers in HAND[strategy].items():
        assert sub[d] == layers, (strategy, d)


def test_optimal_revives_layers_when_no_depth_can_be_served():
    sub = plan(12, supported_depths(12), "optimal")
    # after 12, 6, 4 and 2 no layer is alive: 3 and 1 are served after a revival
    assert sub[3] == [1, 5, 9] and sub[1] == [6]  # 1: target 5 is taken, 4 and 6 tie -> 6


def test_left_task_balance_and_layer_distance_by_hand():
    sub = plan(12, supported_depths(12), "left")
    # uses per layer: layer 0 by all 6 depths; 6 by 2,4,6,12; 4 and 8 by 3,6,12; ...
    counts = [6, 1, 2, 2, 3, 1, 4, 1, 3, 2, 2, 1]
    mean = sum(counts) / 12
    tb = math.sqrt(sum((c - mean) ** 2 for c in counts) / 11)
    assert task_balance(12, sub) == pytest.approx(tb)
    # gaps: depth 2: 6; depth 3: 4, 4; depth 4: 3, 3, 3; depth 6: five 2s; depth 12: eleven 1s
    assert average_layer_distance(sub) == pytest.approx((6 + 8 + 9 + 10 + 11) / 22)


def test_restricted_depths_and_errors():
    assert supported_depths(12, [4, 2, 12]) == [2, 4, 12]
    assert sorted(plan(12, [2, 4], "optimal")) == [2, 4]
    with pytest.raises(DepthError, match=r"encoder depth\(s\) \[5\] not supported by 12 layers; .*\[1, 2, 3, 4, 6, 12\]"):
        supported_depths(12, [4, 5], "encoder")
    with pytest.raises(DepthError, match="unknown depth strategy 'middle'"):
        plan(12, [1], "middle")


def test_depths_and_subnetworks_from_a_models_options():
    from argparse import Namespace

    assert parse_depths("1, 2,4") == [1, 2, 4] and parse_depths([3, "6"]) == [3, 6]
    assert parse_depths(None) is None and parse_depths("") is None and parse_depths([]) is None
    with pytest.raises(DistillError, match="depths must be comma-separated integers, got '2,x'"):
        parse_depths("2,x")
    options = Namespace(encoder_layers=6, decoder_layers=4, encoder_depths="2,6", decoder_depths=None,
                        depth_strategy="left")
    assert subnetworks(options, "encoder") == {2: [0, 3], 6: [0, 1, 2, 3, 4, 5]}
    assert subnetworks(options, "decoder") == {1: [0], 2: [0, 2], 4: [0, 1, 2, 3]}
    with pytest.raises(DistillError, match=r"encoder depth\(s\) \[4\] not supported by 6 layers"):
        subnetworks(Namespace(encoder_layers=6, encoder_depths="4"), "encoder")


@pytest.mark.slow
def test_command_prints_the_table():
    out = run(python_module("fairseq_distill.cli.depth_strategies", "--encoder-layers", "12",
                            "--decoder-layers", "6")).stdout
    rows = dict((m.group(1), [float(x) for x in m.group(2).split(" | ")])
                for m in re.finditer(r"^\| (\w+) \| ([\d. |]+) \|$", out, re.M))
    assert set(rows) == set(STRATEGIES)
    left = plan(12, supported_depths(12), "left")
    assert rows["left"][0] == pytest.approx(task_balance(12, left), abs=1e-3)
    assert rows["left"][1] == pytest.approx(2.0)
    assert rows["head"][1] == pytest.approx(1.0)  # contiguous layers
    bad = run(python_module("fairseq_distill.cli.depth_strategies", "--encoder-layers", "12",
                            "--encoder-depths", "5"), check=False)
    assert bad.returncode != 0 and "not supported by 12 layers" in bad.stdout
