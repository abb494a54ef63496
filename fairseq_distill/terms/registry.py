"""The distillation terms by name: each registers itself with :func:`register_term`, and
``--criterion distill --distill-terms a,b`` (or a preset's fixed terms) builds them by that name.

One name per term everywhere: the ``--distill-terms`` value, the criterion's checkpoint keys
(``terms.<name>.…``) and the logged values (``<name>_loss``, ``<name>_weighted``,
``<name>_weight``). fairseq_distill 0.1 to 0.3 used other names, still read where they were
written: checkpoint keys ``terms.layer.…`` / ``terms.attn.…`` (and 0.1's bare ``fusers.…`` /
``aams.…``), log names ``kd_…``, ``layer_…``, ``attn_…`` (:data:`LEGACY_NAMES`).

Adding a method: its term module (a :class:`~fairseq_distill.terms.base.DistillationTerm`
subclass decorated with ``@register_term("name", options=(NameOptions,))`` and a
``from_config`` classmethod) imported in :mod:`fairseq_distill.terms`; its options dataclass
holds its defaults. ``docs/architecture.md`` has the checklist.
"""
from dataclasses import dataclass
from typing import Dict, Optional, Sequence, Tuple, Type

from fairseq_distill.errors import DistillError


@dataclass(frozen=True)
class TermSpec:
    name: str
    cls: Type
    options: Tuple[type, ...]  # the dataclass groups of its command-line options
    family: Optional[str] = None  # terms of one family exclude each other (one layer-KD term)
    legacy_name: Optional[str] = None  # its checkpoint and log name before the registry


TERMS: Dict[str, TermSpec] = {}


def register_term(name: str, options: Sequence[type] = (), family: Optional[str] = None,
                  legacy_name: Optional[str] = None):
    """Class decorator: register a term under ``name`` (which it then carries as ``cls.name``)."""
    def register(cls):
        if name in TERMS:
            raise ValueError(f"distillation term '{name}' is registered twice")
        cls.name = name
        TERMS[name] = TermSpec(name, cls, tuple(options), family, legacy_name)
        return cls
    return register


def term_names() -> Tuple[str, ...]:
    return tuple(TERMS)


def option_groups(names: Sequence[str] = ()) -> Tuple[type, ...]:
    """The option groups of these terms (of all terms if none are named), each once, in
    registration order."""
    groups = []
    for spec in TERMS.values():
        if names and spec.name not in names:
            continue
        for group in spec.options:
            if group not in groups:
                groups.append(group)
    return tuple(groups)


def parse_term_names(spec: str) -> Tuple[str, ...]:
    """``--distill-terms``: a comma list of registered names, each once, one per family."""
    names = [n.strip() for n in spec.split(",") if n.strip()]
    unknown = [n for n in names if n not in TERMS]
    if unknown or not names:
        raise DistillError(f"--distill-terms '{spec}': {'unknown term ' + repr(unknown[0]) if unknown else 'no term'}; "
                           f"valid terms: {', '.join(TERMS)}")
    if len(set(names)) != len(names):
        raise DistillError(f"--distill-terms '{spec}' names a term twice")
    for family in {TERMS[n].family for n in names} - {None}:
        members = [n for n in names if TERMS[n].family == family]
        if len(members) > 1:
            allowed = [n for n, s in TERMS.items() if s.family == family]
            raise DistillError(f"--distill-terms '{spec}': at most one {family} term ({', '.join(allowed)}), "
                               f"got {', '.join(members)}")
    return tuple(names)


def build_terms(names: Sequence[str], cfg, context) -> Dict[str, object]:
    """Each named term built from the criterion's options, keyed by its name."""
    return {name: TERMS[name].cls.from_config(cfg, context, names) for name in names}


# Names used before the registry, for checkpoints and logs written then: the old name of each
# term, and the bare prefixes of fairseq_distill 0.1's criterion state.
LEGACY_NAMES = {"kd": "word_kd", "layer": "layer KD", "attn": "a2d"}
V01_PREFIXES = {"fusers.": "layer", "aams.": "attn"}


def upgrade_criterion_keys(state_dict: dict, names: Sequence[str]) -> dict:
    """A criterion state written by any version, with the keys of the terms ``names`` today."""
    today = {TERMS[n].legacy_name: n for n in names if TERMS[n].legacy_name}
    upgraded = {}
    for key, value in state_dict.items():
        for bare, legacy in V01_PREFIXES.items():
            if key.startswith(bare):
                key = f"terms.{legacy}.{key}"
                break
        parts = key.split(".", 2)
        if len(parts) == 3 and parts[0] == "terms" and parts[1] in today:
            key = f"terms.{today[parts[1]]}.{parts[2]}"
        upgraded[key] = value
    return upgraded
