"""A2D's attention weight over a run (fairseq_distill/terms/a2d_schedule.py): its value per
epoch and per update, the start-up line's course, and the warning of a run too short for
the term. Expected values are worked out by hand from β·0.9^x."""
import logging

import pytest

from fairseq_distill.terms.a2d_schedule import DecaySchedule


def test_weight_per_update_and_per_epoch():
    # run schedule by updates: e − 1 = 99·u/U
    s = DecaySchedule(1.0, 0.9, "run", max_update=990)
    assert s.at(1, 0) == 1.0
    assert s.at(1, 10) == pytest.approx(0.9)          # 99·10/990 = 1
    assert s.at(1, 100) == pytest.approx(0.9 ** 10)
    assert s.at(1, 5000) == pytest.approx(0.9 ** 99)  # past the end: the last value
    # run schedule by epochs, 4 epochs: e − 1 = 33·(epoch − 1)
    s = DecaySchedule(1.0, 0.9, "run", max_epoch=4)
    assert [round(s.at(e, 0), 4) for e in (1, 2, 3, 4)] == [1.0, 0.0309, 0.001, 0.0]
    # the paper's per epoch, and per update with N = 1100, β = 2
    assert DecaySchedule(2.0, 0.9, "epoch").at(3, 12345) == pytest.approx(1.62)
    assert DecaySchedule(2.0, 0.9, "run", decay_updates=1100, max_epoch=4).at(4, 550) == pytest.approx(2 * 0.9 ** 0.5)


def test_course_names_the_weight_at_each_epoch_or_quarter_of_the_run():
    assert DecaySchedule(1.0, 0.9, "run", max_epoch=4).course() == \
        "β 1 (epoch 1) → 0.031 (epoch 2) → 0.00096 (epoch 3) → 3e-05 (epoch 4)"
    # 10 epochs: the first five, then the last; 0.9^(11·k)
    assert DecaySchedule(1.0, 0.9, "run", max_epoch=10).course() == \
        "β 1 (epoch 1) → 0.31 (epoch 2) → 0.098 (epoch 3) → 0.031 (epoch 4) → 0.0097 (epoch 5) → … → 3e-05 (epoch 10)"
    # by updates: quarters of --max-update, 0.9^(99·q/4)
    assert DecaySchedule(1.0, 0.9, "run", max_update=400).course() == \
        "β 1 (update 0) → 0.074 (update 100) → 0.0054 (update 200) → 0.0004 (update 300) → 3e-05 (update 400)"
    assert DecaySchedule(1.0, 0.5, "epoch").course() == \
        "β 1 (epoch 1) → 0.5 (epoch 2) → 0.25 (epoch 3) → 0.12 (epoch 4) → 0.062 (epoch 5)"


def test_updates_acting_counts_the_updates_at_a_tenth_of_beta_or_more():
    # run by updates: 0.9^(99 f) = 0.1 at f = ln 0.1 / (99 ln 0.9) = 0.220751
    assert DecaySchedule(1.0, 0.9, "run", max_update=1000).updates_acting() == pytest.approx(220.751, abs=0.001)
    # per update: 0.9^(u/N) = 0.1 at u = 21.854·N, capped by the run
    assert DecaySchedule(1.0, 0.9, "epoch", decay_updates=100).updates_acting() == pytest.approx(2185.4, abs=0.1)
    assert DecaySchedule(1.0, 0.9, "epoch", decay_updates=100, max_update=500).updates_acting() == 500
    # epoch-stepped: epochs at ≥ 0.1·β times the updates an epoch (unknown before one has run)
    s = DecaySchedule(1.0, 0.9, "run", max_epoch=10)  # 1, 0.31 (0.098 < 0.1)
    assert s.updates_acting() is None
    assert s.updates_acting(135) == 270
    assert DecaySchedule(1.0, 0.9, "epoch", max_epoch=30).updates_acting(100) == 2200  # epochs 1..22
    assert DecaySchedule(0.0, 0.9, "run", max_epoch=4).updates_acting(100) == 0


def test_a_run_under_a_thousand_updates_warns_with_the_terms_span_and_what_to_do():
    # 4 epochs of 135 updates: 540 updates, the term at >= 0.1·β in epoch 1 only (135 updates)
    short = DecaySchedule(1.0, 0.9, "run", max_epoch=4).short_run_warning(135)
    assert "about 540 updates" in short and "for about 135 of them" in short
    assert "β 1 (epoch 1) → 0.031 (epoch 2)" in short
    assert "--a2d-weight 0" in short and "--a2d-decay-updates N" in short and "a2d.md#run-length" in short
    assert DecaySchedule(1.0, 0.9, "run", max_epoch=10).short_run_warning(135) is None  # 1,350 updates
    assert DecaySchedule(1.0, 0.9, "run", max_epoch=4).short_run_warning() is None  # not known yet
    assert DecaySchedule(0.0, 0.9, "run", max_epoch=4).short_run_warning(10) is None  # the term is off
    # --max-update bounds the run from the start; with --max-epoch too, the smaller bound counts
    assert "about 500 updates" in DecaySchedule(1.0, 0.9, "run", max_update=500).short_run_warning()
    assert DecaySchedule(1.0, 0.9, "run", max_update=1000).short_run_warning() is None
    both = DecaySchedule(1.0, 0.9, "epoch", max_epoch=4, max_update=2000)
    assert both.run_updates() == 2000 and both.run_updates(135) == 540
    assert "about 540 updates" in both.short_run_warning(135)
    # per epoch, bounded by updates: short from the start, its span unknown before an epoch has run
    early = DecaySchedule(1.0, 0.9, "epoch", max_update=500).short_run_warning()
    assert "about 500 updates; β 1 (epoch 1)" in early and "of them" not in early


def test_the_term_states_its_course_at_start_up_and_warns_after_the_first_epoch(caplog):
    from test_a2d import run_term

    with caplog.at_level(logging.INFO, logger="fairseq_distill.terms.attention"):
        term = run_term(decay_schedule="run", max_epoch=4)
    assert "β 2 (epoch 1) → 0.062 (epoch 2)" in caplog.text
    assert "this run is short" not in caplog.text  # its length is known after the first epoch
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="fairseq_distill.terms.attention"):
        term.num_updates = 135
        term.begin_epoch(2)
        term.begin_epoch(3)
    assert caplog.text.count("this run is short (about 540 updates") == 1
    assert term.epoch == 3 and term.current_weight() == pytest.approx(2 * 0.9 ** 66)
    # a run bounded by updates is judged at start-up
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="fairseq_distill.terms.attention"):
        run_term(decay_schedule="run", max_update=500)
    assert "this run is short (about 500 updates" in caplog.text and "for about 110 of them" in caplog.text
