"""Which teacher layers each student layer learns from (plain Python, no fairseq).

A layer map has one group per student layer, in order; a group is a tuple of 1-indexed
teacher layers. Text syntax, as on the command line: groups separated by ``|``, layers by
``,``, ranges ``low-high``::

    "1,2,3|4,5,6"   "1-3|4-6"   "3|6"

An empty group, an empty item or a reversed range in a written map is an error, never a
student layer silently left without a layer loss. Only the ``alp`` preset leaves a student
layer (the last) without teacher layers, by design; the layer-KD term logs it.

Presets for a teacher of T layers and a student of S layers, built on the *regular
buckets* B_1..B_S: consecutive runs of teacher layers whose sizes differ by at most one
(the larger ones first). For T=6, S=2 ``rc``, ``oc``, ``sc`` and ``cc`` are exactly the
mappings Wu et al. (2020) list for their experiments (Section 4, "for results reported in
Table 1"):

* ``rc`` (regular): B_j.                                      {1,2,3},{4,5,6}
* ``oc`` (overlap): B_j plus the adjacent layer of each neighbouring bucket.
                                                              {1,2,3,4},{3,4,5,6}
* ``sc`` (skip): B_j without its boundary layer that faces the middle of the stack:
  lower-half student layers drop their bucket's last layer, upper-half ones its first; a
  bucket of one layer, and the middle student layer of an odd-depth student, keep theirs.
                                                              {1,2},{5,6}
* ``cc`` (cross): every other layer of B_j, from its first, always ending on its last.
                                                              {1,3},{4,6}
* ``interleave``: student layer j ← teacher layers j, j+S, j+2S, ... (the whole stack
  interleaved). This is the CC the paper's Figure 2 draws for T=5, S=2 (its caption:
  M(1) = {1,3,5}); for T=6, S=2 its experiments use ``cc`` above.
                                                              {1,3,5},{2,4,6}
* ``skip`` (PKD's evenly spaced map): student layer j ← teacher layer round(j·T/S).
                                                              {3},{6}
* ``all``: every teacher layer for every student layer (ALP-KD's Eq. 6, A(j) = H_T for all j).
* ``alp``: ``all`` for every student layer except the last, which gets no layer loss: the
  connection pattern of the ALP-KD paper's experiments (Passban et al., 2021: "there is no
  connection between the last layer of 2-layer students and the teacher model", "similar to
  previous experiments", those with 4- and 6-layer students). A 1-layer student's only
  layer is also its last; there ``alp`` keeps it (as ``all``), since dropping it would
  leave no layer loss at all.
                                                              {1,...,6},{}

Where a preset degenerates at the given depths (it gives the same map as a preset listed
before it, e.g. ``cc`` = ``rc`` for 12 -> 6 and 6 -> 3, or a combination preset gives every
student layer a single teacher layer, e.g. ``sc`` for 12 -> 6), :func:`resolve_layer_map`
logs a warning naming the preset, the depths, the preset(s) it equals and the map.
"""
import logging
from typing import List, Sequence, Tuple

from fairseq_distill.errors import DistillError

logger = logging.getLogger(__name__)

LayerMap = List[Tuple[int, ...]]
PRESETS = ("rc", "oc", "sc", "cc", "interleave", "skip", "all", "alp")
# presets meant to combine several teacher layers per student layer
COMBINATIONS = ("rc", "oc", "sc", "cc", "interleave")


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
    if name == "alp":
        every = tuple(range(1, T + 1))
        return [every] if S == 1 else [every] * (S - 1) + [()]
    if name == "interleave":
        return [tuple(range(j, T + 1, S)) for j in range(1, S + 1)]
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


def preset_notes(name: str, teacher_layers: int, student_layers: int) -> List[str]:
    """What a user of preset ``name`` at these depths should know: that it degenerates into a
    preset listed before it in :data:`PRESETS` (gives the same map), that a combination preset
    combines nothing, or that ``alp`` keeps a 1-layer student's only layer."""
    T, S = teacher_layers, student_layers
    layer_map = preset_map(name, T, S)
    depths = f"{T} teacher -> {S} student layers"
    notes = []
    # only earlier (simpler) presets: 'cc' = 'rc' is news for a user of cc, not of rc
    same = [other for other in PRESETS[:PRESETS.index(name)] if preset_map(other, T, S) == layer_map]
    if same:
        notes.append(f"layer-map preset '{name}' for {depths} gives the same map as "
                     f"{', '.join(repr(o) for o in same)}: {format_layer_map(layer_map)}")
    elif name in COMBINATIONS and all(len(g) == 1 for g in layer_map):
        notes.append(f"layer-map preset '{name}' for {depths} combines no teacher layers (one per "
                     f"student layer, as PKD does): {format_layer_map(layer_map)}")
    if name == "alp" and S == 1:
        notes.append(f"layer-map preset 'alp' leaves the last student layer without a layer loss, but "
                     f"a 1-layer student has no other: its only layer learns from every teacher layer "
                     f"(as with 'all')")
    return notes


def resolve_layer_map(spec: str, teacher_layers: int, student_layers: int) -> LayerMap:
    """A preset name or an explicit map; a preset's :func:`preset_notes` are logged as warnings."""
    spec = spec.strip()
    if spec in PRESETS:
        layer_map = preset_map(spec, teacher_layers, student_layers)
        for note in preset_notes(spec, teacher_layers, student_layers):
            logger.warning(note)
        return layer_map
    if spec and spec.replace(",", "").replace("|", "").replace("-", "").replace(" ", "").isalpha():
        raise DistillError(f"unknown layer-map preset '{spec}'; valid: {', '.join(PRESETS)}, "
                           f"or an explicit map such as '1,2,3|4,5,6'")
    return parse_layer_map(spec, teacher_layers, student_layers)


def format_layer_map(layer_map: Sequence[Tuple[int, ...]]) -> str:
    return "  ".join(f"student {j + 1} <- teacher {{{','.join(map(str, g))}}}" if g
                     else f"student {j + 1} <- none (no layer loss)" for j, g in enumerate(layer_map))
