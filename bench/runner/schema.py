"""What a recipe may say: every key is checked when the recipe loads, so a misspelled key is
named (with the closest valid one) instead of being ignored or failing only when its step
runs. :func:`check_recipe` checks keys, models and the steps' dependencies and returns the
steps in an order that runs each after the steps it uses; :func:`check_train_flags` checks
the fairseq-train flags of every training step against fairseq-train's own parser, with the
plugin loaded, and :func:`check_tool_options` the ``seqkd:`` and ``cache:`` options against
``fsd-seqkd`` and ``fsd-cache-teacher``.
"""
import contextlib
import difflib
import io
from typing import Iterable, List, Set

from fairseq_distill.errors import DistillError

from .config import compared_baselines, dependencies, evaluated_checkpoint, load_recipe
from .plan import flags

RECIPE_KEYS = ("name", "seed", "data", "train", "models", "eval", "compare", "steps")
STEP_KEYS = ("name", "model", "teacher", "criterion", "criterion-args", "train", "data", "seqkd", "cache",
             "teacher-cache", "init", "continue", "finetune", "seeds", "pretrained")
# what expand_seeds adds to the copies of a step it makes: their seed and the step they repeat
SEED_KEYS = ("seed", "seed_of")
DATA_KEYS = ("corpus", "bpe", "vocab_size", "source", "target", "train", "valid", "test", "vocabulary_from")
EVAL_KEYS = ("beam", "batch-size", "lenpen", "checkpoint")
# the step keys that name another step, as dependencies() reads them
STEP_REFERENCES = (("teacher",), ("data",), ("seqkd", "teacher"), ("init", "from"), ("continue",), ("finetune",),
                   ("cache", "teacher"), ("cache", "data"), ("teacher-cache",))
# options of the tools that the runner sets itself: a recipe does not give them
RUNNER_SET = {"seqkd": {"teacher", "data", "out", "work"}, "cache": {"teacher", "data", "out"}}


def did_you_mean(word: str, valid: Iterable[str], prefix: str = "") -> str:
    close = difflib.get_close_matches(word, list(valid), n=1, cutoff=0.6)
    return f"; did you mean '{prefix}{close[0]}'?" if close else ""


def check_keys(given: dict, valid, path: str, where: str = ""):
    """Every key of ``given`` is one of ``valid``; ``where``: e.g. "step 'teacher'" (empty: the top level)."""
    for key in given:
        if key not in valid:
            place = f"{where}: unknown key '{key}'" if where else f"unknown key '{key}' at the top level"
            raise DistillError(f"{path}: {place}{did_you_mean(key, valid)} (valid: {', '.join(valid)})")


def check_recipe(cfg: dict, path: str) -> List[dict]:
    """The recipe's steps, each after the steps it uses (otherwise in recipe order), once every
    key is known, every model exists and no dependency is missing or circular."""
    check_keys(cfg, RECIPE_KEYS, path)
    check_keys(cfg.get("data") or {}, DATA_KEYS, path, "data")
    check_keys(cfg.get("eval") or {}, EVAL_KEYS, path, "eval")
    steps = expand_seeds(cfg.get("steps") or [], cfg.get("seed", 1), path)
    names = [s.get("name") for s in steps]
    models = cfg.get("models") or {}
    for step in steps:
        if not step.get("name"):
            raise DistillError(f"{path}: a step has no name: {step}")
        check_keys({k: v for k, v in step.items() if k not in SEED_KEYS}, STEP_KEYS, path, f"step '{step['name']}'")
        if "pretrained" in step and set(step) - {"name", "pretrained"}:
            raise DistillError(f"{path}: step '{step['name']}': a pretrained step names a model directory and "
                               f"nothing else; it also has {', '.join(sorted(set(step) - {'name', 'pretrained'}))}")
        model = step.get("model")
        if model is not None and model not in models:
            raise DistillError(f"{path}: step '{step['name']}': model '{model}' is not in models: "
                               f"{', '.join(models) or 'none'}{did_you_mean(str(model), models)}")
        for ref in STEP_REFERENCES:
            value = step
            for part in ref:
                value = value.get(part) if isinstance(value, dict) else None
            if not value:
                continue
            what = ".".join(ref)
            if value == step["name"]:
                raise DistillError(f"{path}: step '{value}' uses itself ({what})")
            if value not in names:
                raise DistillError(f"{path}: step '{step['name']}' uses step '{value}' ({what}), which is "
                                   f"not a step of the recipe{did_you_mean(str(value), names)}")
    return dependency_order(steps, path)


def expand_seeds(steps: List[dict], recipe_seed: int, path: str) -> List[dict]:
    """A training step with ``seeds: [1, 2, 3]`` runs once per seed: under the recipe's own seed
    as itself (same name and cache key as without ``seeds``), under every other seed as a copy
    named ``NAME-seedS`` that records ``seed`` and ``seed_of: NAME``."""
    out = []
    for step in steps:
        if "seeds" not in step:
            out.append(step)
            continue
        seeds = step["seeds"]
        name = step.get("name")
        if (not isinstance(seeds, list) or not seeds or not all(isinstance(x, int) and not isinstance(x, bool)
                                                                 for x in seeds) or len(set(seeds)) != len(seeds)):
            raise DistillError(f"{path}: step '{name}': seeds must be a list of distinct integers, got {seeds!r}")
        if "model" not in step:
            raise DistillError(f"{path}: step '{name}': seeds repeat a training step; this step trains no model")
        if recipe_seed not in seeds:
            raise DistillError(f"{path}: step '{name}': seeds {seeds} must include the recipe's seed "
                               f"{recipe_seed} (the run that keeps the step's name)")
        base = {k: v for k, v in step.items() if k != "seeds"}
        out.append(base)
        for seed in seeds:
            if seed != recipe_seed:
                out.append({**base, "name": f"{name}-seed{seed}", "seed": seed, "seed_of": name})
    return out


def dependency_order(steps: List[dict], path: str) -> List[dict]:
    """Steps ordered so that each comes after those it uses; otherwise recipe order."""
    by_name = {s["name"]: s for s in steps}
    ordered, state = [], {}  # state: 1 visiting, 2 done

    def visit(name: str, chain: List[str]):
        if state.get(name) == 2:
            return
        if state.get(name) == 1:
            cycle = chain[chain.index(name):] + [name]
            raise DistillError(f"{path}: steps depend on each other in a cycle: {' -> '.join(cycle)}")
        state[name] = 1
        for dep in dependencies(by_name[name]):
            visit(dep, chain + [name])
        state[name] = 2
        ordered.append(by_name[name])

    for step in steps:
        visit(step["name"], [])
    return ordered


def tool_option_names(tool: str) -> Set[str]:
    """A tool's long options without dashes (``seqkd``: fsd-seqkd, ``cache``: fsd-cache-teacher)."""
    if tool == "seqkd":
        from fairseq_distill.cli.seqkd import build_parser
    else:
        from fairseq_distill.cli.cache_teacher import build_parser
    return {o[2:] for action in build_parser()._actions for o in action.option_strings if o.startswith("--")}


def check_tool_options(cfg: dict, path: str):
    """The ``seqkd:`` and ``cache:`` options of every step are options of the tool they go to."""
    for step in cfg["steps"]:
        for kind, tool in (("seqkd", "fsd-seqkd"), ("cache", "fsd-cache-teacher")):
            if kind not in step:
                continue
            valid = tool_option_names(kind) - RUNNER_SET[kind]
            for key in step[kind]:
                if key in ("teacher", "data") or (kind, key) == ("seqkd", "external"):
                    continue  # names a step; or the runner's own switch (plan.Plan.seqkd_commands)
                if key in RUNNER_SET[kind]:
                    raise DistillError(f"{path}: step '{step['name']}': {kind} option '{key}' is set by the runner")
                if key not in valid:
                    raise DistillError(f"{path}: step '{step['name']}': {kind} option '{key}' is not an option "
                                       f"of {tool}{did_you_mean(key, sorted(valid))}")


def check_train_flags(plan) -> None:
    """Parse every training step's fairseq-train flags as fairseq-train would (the plugin
    imported, the step's architecture, task and criterion chosen) and name the first flag it
    does not know, with the closest one it does, before anything runs."""
    from fairseq import options

    for step in plan.steps:
        if "model" not in step:
            continue
        train = plan.train_options(step)
        parser = options.get_training_parser()
        # fairseq adds the chosen architecture's, task's and criterion's options to this parser;
        # argparse reports a bad value (e.g. an unknown --arch) on stderr and exits
        refused = io.StringIO()
        try:
            with contextlib.redirect_stderr(refused):
                _, unknown = options.parse_args_and_arch(parser, [plan.data_of(step), *flags(train)],
                                                         parse_known=True)
        except SystemExit:
            message = refused.getvalue().strip().splitlines()[-1].split("error: ", 1)[-1]
            raise DistillError(f"{plan.path}: step '{step['name']}': fairseq-train refuses its flags: {message}")
        if not unknown:
            continue
        flag = next((a for a in unknown if a.startswith("--")), unknown[0])
        valid = sorted({o for a in parser._actions for o in a.option_strings if o.startswith("--")})
        close = difflib.get_close_matches(flag, valid, n=1, cutoff=0.6)
        raise DistillError(f"{plan.path}: step '{step['name']}': {flag} is not a fairseq-train option "
                           f"(with the plugin and criterion {train.get('criterion')})"
                           f"{f'; did you mean {close[0]}?' if close else ''}")


def load_checked(path: str) -> dict:
    """:func:`load_recipe`, with the checks every use of a recipe needs."""
    cfg = load_recipe(path)
    names = [s.get("name") for s in cfg.get("steps") or []]
    if len(set(names)) != len(names):
        raise DistillError(f"{path}: step names must be unique, got {names}")
    cfg["steps"] = check_recipe(cfg, path)
    check_tool_options(cfg, path)
    evaluated_checkpoint(cfg, path)
    compared_baselines(cfg.get("compare"), cfg["steps"])
    return cfg
