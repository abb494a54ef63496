"""What the analysis scripts share: an analysis is redone only when what it was made from
changed, so rerunning ``bench/run_all.sh`` does not measure finished work again.

Results JSON files store ``inputs``: the cache keys of the recipe runs they read (a key
changes with anything that changes a run's result) and the analysis' own options.
"""
import json
import os


def made_from(recipe, runs, **options) -> dict:
    return {"runs": {name: recipe.keys[name] for name in runs}, "options": options}


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
