"""Layer maps: the CKD and ALP-KD papers' presets, a general depth, parsing and errors."""
import re

import pytest

from fairseq_distill.errors import DistillError
from fairseq_distill.layer_maps import format_layer_map, parse_layer_map, preset_map, resolve_layer_map

ALL6 = (1, 2, 3, 4, 5, 6)


def test_paper_presets_for_six_to_two():
    # Wu et al. (2020), Section 4: "cross-model layer mappings ... are as follow"
    assert preset_map("rc", 6, 2) == [(1, 2, 3), (4, 5, 6)]
    assert preset_map("oc", 6, 2) == [(1, 2, 3, 4), (3, 4, 5, 6)]
    assert preset_map("sc", 6, 2) == [(1, 2), (5, 6)]
    assert preset_map("cc", 6, 2) == [(1, 3), (4, 6)]
    assert preset_map("skip", 6, 2) == [(3,), (6,)]
    assert preset_map("interleave", 6, 2) == [(1, 3, 5), (2, 4, 6)]
    assert preset_map("all", 6, 2) == [ALL6, ALL6]
    # Passban et al. (2021): the last layer of a 2-layer student is not connected
    assert preset_map("alp", 6, 2) == [ALL6, ()]


def test_interleave_is_the_cc_of_figure_two():
    # Figure 2 of Wu et al. (2020): T has 5 and S has 2 layers, "for the CC case M(1) = {1, 3, 5}"
    assert preset_map("interleave", 5, 2) == [(1, 3, 5), (2, 4)]
    assert preset_map("interleave", 12, 4) == [(1, 5, 9), (2, 6, 10), (3, 7, 11), (4, 8, 12)]
    assert preset_map("interleave", 7, 3) == [(1, 4, 7), (2, 5), (3, 6)]
    for t, s in [(6, 2), (5, 2), (12, 4), (7, 3), (24, 6), (4, 4)]:
        used = sorted(layer for group in preset_map("interleave", t, s) for layer in group)
        assert used == list(range(1, t + 1)), (t, s)  # every teacher layer exactly once


def test_alp_leaves_only_the_last_student_layer_unconnected():
    every = tuple(range(1, 13))
    assert preset_map("alp", 12, 4) == [every, every, every, ()]
    assert preset_map("alp", 12, 6) == [every] * 5 + [()]
    assert preset_map("alp", 3, 1) == [(1, 2, 3)]  # a 1-layer student keeps its only layer
    assert format_layer_map(preset_map("alp", 3, 2)) == "student 1 <- teacher {1,2,3}  student 2 <- none (no layer loss)"


def test_presets_for_twelve_to_four():
    # buckets {1,2,3},{4,5,6},{7,8,9},{10,11,12}
    assert preset_map("rc", 12, 4) == [(1, 2, 3), (4, 5, 6), (7, 8, 9), (10, 11, 12)]
    assert preset_map("oc", 12, 4) == [(1, 2, 3, 4), (3, 4, 5, 6, 7), (6, 7, 8, 9, 10), (9, 10, 11, 12)]
    # lower half drops the last layer of its bucket, upper half the first
    assert preset_map("sc", 12, 4) == [(1, 2), (4, 5), (8, 9), (11, 12)]
    assert preset_map("cc", 12, 4) == [(1, 3), (4, 6), (7, 9), (10, 12)]
    assert preset_map("skip", 12, 4) == [(3,), (6,), (9,), (12,)]


def test_presets_that_degenerate_at_these_depths():
    # buckets of two layers: every other layer of a bucket, ending on its last, is the bucket
    assert preset_map("cc", 12, 6) == preset_map("rc", 12, 6) == [(1, 2), (3, 4), (5, 6), (7, 8), (9, 10), (11, 12)]
    assert preset_map("cc", 6, 3) == preset_map("rc", 6, 3) == [(1, 2), (3, 4), (5, 6)]
    # and dropping a layer from each leaves one teacher layer per student layer
    assert preset_map("sc", 12, 6) == [(1,), (3,), (5,), (8,), (10,), (12,)]
    assert preset_map("sc", 6, 3) == [(1,), (3, 4), (6,)]
    assert preset_map("interleave", 12, 6) == [(1, 7), (2, 8), (3, 9), (4, 10), (5, 11), (6, 12)]


@pytest.mark.parametrize("spec,teacher,student,message", [
    ("cc", 12, 6, "layer-map preset 'cc' for 12 teacher -> 6 student layers gives the same map as 'rc': "
                  "student 1 <- teacher {1,2}  student 2 <- teacher {3,4}  student 3 <- teacher {5,6}  "
                  "student 4 <- teacher {7,8}  student 5 <- teacher {9,10}  student 6 <- teacher {11,12}"),
    ("cc", 6, 3, "layer-map preset 'cc' for 6 teacher -> 3 student layers gives the same map as 'rc': "
                 "student 1 <- teacher {1,2}  student 2 <- teacher {3,4}  student 3 <- teacher {5,6}"),
    ("sc", 12, 6, "layer-map preset 'sc' for 12 teacher -> 6 student layers combines no teacher layers (one "
                  "per student layer, as PKD does): student 1 <- teacher {1}  student 2 <- teacher {3}  "
                  "student 3 <- teacher {5}  student 4 <- teacher {8}  student 5 <- teacher {10}  "
                  "student 6 <- teacher {12}"),
    ("skip", 4, 4, "layer-map preset 'skip' for 4 teacher -> 4 student layers gives the same map as 'rc', "
                   "'sc', 'cc', 'interleave': student 1 <- teacher {1}  student 2 <- teacher {2}  "
                   "student 3 <- teacher {3}  student 4 <- teacher {4}"),
    ("alp", 3, 1, "layer-map preset 'alp' leaves the last student layer without a layer loss, but a 1-layer "
                  "student has no other: its only layer learns from every teacher layer (as with 'all')"),
])
def test_degenerate_presets_are_warned_about(caplog, spec, teacher, student, message):
    with caplog.at_level("WARNING", logger="fairseq_distill.layer_maps"):
        resolve_layer_map(spec, teacher, student)
    assert message in [r.getMessage() for r in caplog.records]


@pytest.mark.parametrize("spec,teacher,student", [
    ("cc", 6, 2), ("sc", 6, 2), ("interleave", 6, 2), ("alp", 6, 2), ("cc", 12, 4), ("sc", 6, 3),
    ("rc", 12, 6),  # cc equals rc there, but that is news for a user of cc, not of rc
    ("1,3|4,6", 6, 2), ("1,2|3,4|5,6", 6, 3),  # written maps are taken as they are
])
def test_distinct_presets_and_written_maps_are_not_warned_about(caplog, spec, teacher, student):
    with caplog.at_level("WARNING", logger="fairseq_distill.layer_maps"):
        resolve_layer_map(spec, teacher, student)
    assert not caplog.records


def test_presets_for_uneven_seven_to_three():
    assert preset_map("rc", 7, 3) == [(1, 2, 3), (4, 5), (6, 7)]
    assert preset_map("sc", 7, 3) == [(1, 2), (4, 5), (7,)]  # the middle student layer keeps its bucket
    assert preset_map("oc", 7, 3) == [(1, 2, 3, 4), (3, 4, 5, 6), (5, 6, 7)]


def test_every_teacher_layer_used_by_rc_and_oc():
    for t, s in [(6, 2), (12, 4), (7, 3), (24, 6)]:
        for name in ("rc", "oc"):
            used = {layer for group in preset_map(name, t, s) for layer in group}
            assert used == set(range(1, t + 1)), (name, t, s)


def test_parse_ranges():
    assert parse_layer_map("1-3|4,5,6", 6, 2) == [(1, 2, 3), (4, 5, 6)]
    assert parse_layer_map(" 2 | 5-6 ", 6, 2) == [(2,), (5, 6)]
    assert resolve_layer_map("cc", 6, 2) == [(1, 3), (4, 6)]
    assert resolve_layer_map("interleave", 6, 2) == [(1, 3, 5), (2, 4, 6)]


@pytest.mark.parametrize("text,students,message", [
    # a student layer without a teacher group would silently get no layer loss
    ("|2", 2, "layer map '|2': group 1 (student layer 1) is empty"),
    ("2||5-6", 3, "layer map '2||5-6': group 2 (student layer 2) is empty"),
    ("|", 2, "layer map '|': group 1 (student layer 1) is empty"),
    ("2-1|2", 2, "layer map '2-1|2': range '2-1' in group 1 is reversed; write it low-high, e.g. '1-2'"),
    ("1,,2|3", 2, "layer map '1,,2|3': group 1 has an empty item"),
])
def test_empty_groups_and_reversed_ranges_are_errors(text, students, message):
    with pytest.raises(DistillError, match=re.escape(message)):
        resolve_layer_map(text, 6, students)


def test_out_of_range_layer_names_value_and_range():
    with pytest.raises(DistillError, match=r"teacher layer 7 is out of range; the teacher has layers 1\.\.6"):
        parse_layer_map("1,2,3|5,6,7", 6, 2)
    with pytest.raises(DistillError, match="teacher layer 0 is out of range"):
        parse_layer_map("0|4", 6, 2)


def test_wrong_number_of_groups():
    with pytest.raises(DistillError, match=r"has 3 group\(s\) but the student has 2 layer\(s\)"):
        parse_layer_map("1|2|3", 6, 2)


def test_unknown_preset_lists_valid_ones():
    with pytest.raises(DistillError, match="unknown layer-map preset 'xc'; valid: rc, oc, sc, cc, interleave, "
                                           "skip, all, alp"):
        resolve_layer_map("xc", 6, 2)


def test_student_deeper_than_teacher():
    with pytest.raises(DistillError, match=r"more layers \(4\) than the teacher \(2\)"):
        preset_map("rc", 2, 4)
