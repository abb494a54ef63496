"""What the analysis scripts share: an analysis is redone only when what it was made from
changed, so rerunning ``bench/run_all.sh`` does not measure finished work again.

Results JSON files store ``inputs``: for every recipe run they read, its cache key (which
changes with the step's configuration) and its run fingerprint (which changes with what the
run produced: a teacher retrained with the same recipe and seed keeps its key but, on another
CPU, not its weights), and the analysis' own options.
"""
import json
import os


def made_from(recipe, runs, **options) -> dict:
    """What an analysis of ``runs`` (recipe step names) with ``options`` is made from; a step
    that has not run (one whose configuration alone is measured) has no fingerprint."""
    return {"runs": {name: {"key": recipe.keys[name], "run": recipe.done.get(name, {}).get("run")}
                     for name in runs},
            "options": options}


def is_current(path: str, inputs: dict, force: bool = False) -> bool:
    """True, and says so, when ``path`` holds results made from exactly ``inputs``."""
    if force or not os.path.isfile(path):
        return False
    with open(path) as f:
        stored = json.load(f).get("inputs")
    # through JSON, so that tuples and lists compare equal
    if stored != json.loads(json.dumps(inputs)):
        return False
    print(f"[{os.path.basename(path)}] current: made from the same runs ({', '.join(inputs['runs'])}) "
          f"and options; --force measures again")
    return True
