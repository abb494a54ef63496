"""A recipe file: YAML with ``extends`` resolved, checked, with the evaluation defaults.

A recipe (see ``configs/*.yaml``)::

    name: foundation
    seed: 1
    data: {corpus: multi30k, bpe: sentencepiece, vocab_size: 8000}
    train: {optimizer: adam, lr: 0.001, ...}     # fairseq-train flags shared by all runs
    models: {teacher: {arch: transformer, encoder-layers: 6, ...}, student: {...}}
    eval: {beam: 4, batch-size: 128}           # checkpoint: best (default) or last
    compare: {baseline: student}               # paired significance of every row against it
                                               # (or a list: [student, student-wordkd])
    steps:
      - {name: teacher, model: teacher, train: {max-epoch: 20}}
      - {name: seqkd, seqkd: {teacher: teacher, beam: 4}}
      - {name: student-wordkd, model: student, teacher: teacher, criterion: word_kd,
         criterion-args: {kd-weight: 0.5}}
      - {name: student-seqkd, model: student, data: seqkd}
      # word-level KD from the teacher's cached top-k outputs (fsd-cache-teacher)
      - {name: cache-k8, cache: {teacher: teacher, top-k: 8}}
      - {name: student-cached, model: student, teacher-cache: cache-k8, criterion: word_kd}
      # GPKD: the student starts from layers extracted from a group-permuted teacher
      - {name: student-gpkd, model: student, data: seqkd, init: {from: teacher, keep: top}}
      # two-stage training: continue another step's run (weights, optimizer, update count)
      - {name: teacher-stage2, model: teacher, continue: teacher, train: {skip-sublayer-rate: 0.4}}
      # start from another step's weights only (fairseq's --finetune-from-model)
      - {name: multidepth, model: flexible, finetune: full, train: {task: translation_multidepth}}

Flags are written without the leading dashes; ``true`` means a bare switch.
"""
import os
from typing import List, Optional

import yaml

from fairseq_distill.errors import DistillError

# what the test set is decoded with when the recipe's ``eval`` does not say
EVAL_DEFAULTS = {"beam": 4, "batch-size": 128, "lenpen": 1.0}
CHECKPOINTS = ("best", "last")


def load_recipe(path: str) -> dict:
    """A recipe, with ``extends: other.yaml`` resolved: everything but ``name`` is inherited
    (``models`` are added to the base's, replacing those of the same name), the base's steps
    run first (finished ones come from the cache); ``base_steps: [...]`` keeps only the named
    base steps (e.g. the teacher and the baselines a table compares to)."""
    with open(path) as f:
        cfg = yaml.safe_load(f)
    if "extends" in cfg:
        base_path = os.path.join(os.path.dirname(path), cfg.pop("extends"))
        base = load_recipe(base_path)
        base_steps = base.get("steps", [])
        keep = cfg.pop("base_steps", None)
        if keep is not None:
            known = [s["name"] for s in base_steps]
            unknown = [n for n in keep if n not in known]
            if unknown:
                raise DistillError(f"{path}: base_steps {unknown} are not steps of {base_path}; "
                                   f"its steps are {known}")
            base_steps = [s for s in base_steps if s["name"] in keep]
        steps = base_steps + cfg.pop("steps", [])
        models = {**base.get("models", {}), **cfg.pop("models", {})}  # add to the base's models
        cfg = {**base, **cfg, "models": models, "steps": steps}
    return cfg


def recipe_name(cfg: dict, path: str) -> str:
    return cfg.get("name") or os.path.splitext(os.path.basename(path))[0]


def evaluation_settings(cfg: dict) -> dict:
    """The decoding settings of the test-set evaluation: the recipe's ``eval``, else the defaults."""
    ev = cfg.get("eval", {})
    return {k: ev.get(k, default) for k, default in EVAL_DEFAULTS.items()}


def evaluated_checkpoint(cfg: dict, path: str = "recipe") -> str:
    """Which checkpoint of a training run is exported and evaluated (``eval: {checkpoint:}``):
    ``best``, fairseq's checkpoint_best.pt (lowest validation loss; the default), or
    ``last``, the end of the run's budget. Validation loss is measured against the
    references, so it can rise while a model trained on seq-KD targets improves in BLEU;
    a recipe comparing such runs at a fixed budget evaluates ``last``."""
    which = cfg.get("eval", {}).get("checkpoint", "best")
    if which not in CHECKPOINTS:
        raise DistillError(f"{path}: eval checkpoint {which!r} is not one of 'best', 'last'")
    return which


def compared_baselines(compare: Optional[dict], steps) -> List[str]:
    """The steps named by ``compare: {baseline: STEP}`` or ``compare: {baseline: [STEP, ...]}``."""
    if not compare:
        return []
    unknown = set(compare) - {"baseline", "test"}
    if unknown:
        raise DistillError(f"compare: unknown key(s) {', '.join(sorted(unknown))}; valid: baseline, test")
    bases = compare.get("baseline")
    bases = [bases] if isinstance(bases, str) else list(bases or [])
    if not bases:
        raise DistillError("compare: needs 'baseline: STEP' (or a list of steps)")
    names = {s["name"] for s in steps}
    for base in bases:
        if base not in names:
            raise DistillError(f"compare: baseline {base!r} is not a step of this recipe; "
                               f"steps: {', '.join(s['name'] for s in steps)}")
    return bases


def dependencies(step: dict) -> List[str]:
    """Names of the steps whose files a step uses."""
    deps = [step.get("teacher"), step.get("data"), step.get("seqkd", {}).get("teacher"),
            (step.get("init") or {}).get("from"), step.get("continue"), step.get("finetune"),
            step.get("cache", {}).get("teacher"), step.get("cache", {}).get("data"), step.get("teacher-cache")]
    return [d for d in deps if d]
