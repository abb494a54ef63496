"""Which teacher layers each student layer learns from (plain Python, no fairseq).

A layer map has one group per student layer, in order; a group is a non-empty tuple of
1-indexed teacher layers. Text syntax, as on the command line: groups separated by ``|``,
layers by ``,``, ranges ``low-high``::

    "1,2,3|4,5,6"   "1-3|4-6"   "3|6"

An empty group, an empty item or a reversed range is an error, never a student layer
silently left without a layer loss.

Presets for a teacher of T layers and a student of S layers, built on the *regular
buckets* B_1..B_S: consecutive runs of teacher layers whose sizes differ by at most one
(the larger ones first). For T=6, S=2 they are exactly those of Wu et al. (2020):

* ``rc`` (regular): B_j.                                      {1,2,3},{4,5,6}
* ``oc`` (overlap): B_j plus the adjacent layer of each neighbouring bucket.
                                                              {1,2,3,4},{3,4,5,6}
* ``sc`` (skip): B_j without its boundary layer that faces the middle of the stack:
  lower-half student layers drop their bucket's last layer, upper-half ones its first; a
  bucket of one layer, and the middle student layer of an odd-depth student, keep theirs.
                                                              {1,2},{5,6}
* ``cc`` (cross): every other layer of B_j, from its first, always ending on its last.
                                                              {1,3},{4,6}
* ``skip`` (PKD's evenly spaced map): student layer j ← teacher layer round(j·T/S).
                                                              {3},{6}
* ``all``: every teacher layer for every student layer (ALP-KD's default).
"""
from typing import List, Sequence, Tuple

from fairseq_distill.errors import DistillError

LayerMap = List[Tuple[int, ...]]
PRESETS = ("rc", "oc", "sc", "cc", "skip", "all")


def regular_buckets(teacher_layers: int, student_layers: int) -> LayerMap:
    check_depths(teacher_layers, student_layers)
    base, extra = divmod(teacher_layers, student_layers)
    buckets, start = [], 1
    for j in range(student_layers):
        size = base + (1 if j < extra else 0)
        buckets.append(tuple(range(start, start + size)))
        start += size
    return buckets


def check_depths(teacher_layers: int, student_layers: int):
    if student_layers < 1 or teacher_layers < 1:
        raise DistillError(f"layer maps need at least one layer on each side, got teacher "
                           f"{teacher_layers}, student {student_layers}")
    if student_layers > teacher_layers:
        raise DistillError(f"the student has more layers ({student_layers}) than the teacher "
                           f"({teacher_layers}); give an explicit --layer-map")


def preset_map(name: str, teacher_layers: int, student_layers: int) -> LayerMap:
    if name not in PRESETS:
        raise DistillError(f"unknown layer-map preset '{name}'; valid: {', '.join(PRESETS)}")
    check_depths(teacher_layers, student_layers)
    T, S = teacher_layers, student_layers
    buckets = regular_buckets(T, S)
    if name == "rc":
        return buckets
    if name == "all":
        return [tuple(range(1, T + 1)) for _ in range(S)]
    if name == "skip":
        return [(max(1, round((j + 1) * T / S)),) for j in range(S)]
    if name == "oc":
        out = []
        for j, b in enumerate(buckets):
            lo = b[0] - 1 if j > 0 else b[0]
            hi = b[-1] + 1 if j < S - 1 else b[-1]
            out.append(tuple(range(lo, hi + 1)))
        return out
    if name == "sc":
        out = []
        for j, b in enumerate(buckets):
            if len(b) == 1 or (S % 2 == 1 and j == S // 2):
                out.append(b)
            elif j < S / 2:
                out.append(b[:-1])
            else:
                out.append(b[1:])
        return out
    # cc: every other layer from the first; the last is always included
    out = []
    for b in buckets:
        picked = list(b[::2])
        if picked[-1] != b[-1]:
            picked.append(b[-1])
        out.append(tuple(picked))
    return out


def parse_layer_map(text: str, teacher_layers: int, student_layers: int) -> LayerMap:
    """Parse ``"1,2,3|4-6"``; every index must be a teacher layer 1..T."""
    groups = text.split("|")
    if len(groups) != student_layers:
        raise DistillError(
            f"layer map '{text}' has {len(groups)} group(s) but the student has {student_layers} "
            f"layer(s): give one '|'-separated group per student layer"
        )
    out = []
    for number, group in enumerate(groups, start=1):
        if not group.strip():
            raise DistillError(f"layer map '{text}': group {number} (student layer {number}) is empty; "
                               f"every student layer needs at least one teacher layer")
        layers = []
        for item in (x.strip() for x in group.split(",")):
            if not item:
                raise DistillError(f"layer map '{text}': group {number} has an empty item; separate "
                                   f"teacher layers by single commas")
            try:
                lo, hi = (int(x) for x in item.split("-", 1)) if "-" in item else (int(item),) * 2
            except ValueError:
                raise DistillError(f"layer map '{text}': '{item}' is not a layer number or range a-b")
            if lo > hi:
                raise DistillError(f"layer map '{text}': range '{item}' in group {number} is reversed; "
                                   f"write it low-high, e.g. '{hi}-{lo}'")
            layers.extend(range(lo, hi + 1))
        for layer in layers:
            if not 1 <= layer <= teacher_layers:
                raise DistillError(
                    f"layer map '{text}': teacher layer {layer} is out of range; the teacher has "
                    f"layers 1..{teacher_layers}"
                )
        out.append(tuple(sorted(set(layers))))
    return out


def resolve_layer_map(spec: str, teacher_layers: int, student_layers: int) -> LayerMap:
    """A preset name or an explicit map."""
    spec = spec.strip()
    if spec in PRESETS:
        return preset_map(spec, teacher_layers, student_layers)
    if spec and spec.replace(",", "").replace("|", "").replace("-", "").replace(" ", "").isalpha():
        raise DistillError(f"unknown layer-map preset '{spec}'; valid: {', '.join(PRESETS)}, "
                           f"or an explicit map such as '1,2,3|4,5,6'")
    return parse_layer_map(spec, teacher_layers, student_layers)


def format_layer_map(layer_map: Sequence[Tuple[int, ...]]) -> str:
    return "  ".join(f"student {j + 1} <- teacher {{{','.join(map(str, g))}}}" for j, g in enumerate(layer_map))
