"""Layer maps: the CKD paper's presets, a general depth, parsing and errors."""
import re

import pytest

from fairseq_distill.errors import DistillError
from fairseq_distill.layer_maps import parse_layer_map, preset_map, resolve_layer_map


def test_paper_presets_for_six_to_two():
    assert preset_map("rc", 6, 2) == [(1, 2, 3), (4, 5, 6)]
    assert preset_map("oc", 6, 2) == [(1, 2, 3, 4), (3, 4, 5, 6)]
    assert preset_map("sc", 6, 2) == [(1, 2), (5, 6)]
    assert preset_map("cc", 6, 2) == [(1, 3), (4, 6)]
    assert preset_map("skip", 6, 2) == [(3,), (6,)]


def test_presets_for_twelve_to_four():
    # buckets {1,2,3},{4,5,6},{7,8,9},{10,11,12}
    assert preset_map("rc", 12, 4) == [(1, 2, 3), (4, 5, 6), (7, 8, 9), (10, 11, 12)]
    assert preset_map("oc", 12, 4) == [(1, 2, 3, 4), (3, 4, 5, 6, 7), (6, 7, 8, 9, 10), (9, 10, 11, 12)]
    # lower half drops the last layer of its bucket, upper half the first
    assert preset_map("sc", 12, 4) == [(1, 2), (4, 5), (8, 9), (11, 12)]
    assert preset_map("cc", 12, 4) == [(1, 3), (4, 6), (7, 9), (10, 12)]
    assert preset_map("skip", 12, 4) == [(3,), (6,), (9,), (12,)]


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
    with pytest.raises(DistillError, match="unknown layer-map preset 'xc'; valid: rc, oc, sc, cc, skip, all"):
        resolve_layer_map("xc", 6, 2)


def test_student_deeper_than_teacher():
    with pytest.raises(DistillError, match=r"more layers \(4\) than the teacher \(2\)"):
        preset_map("rc", 2, 4)
