"""Paired tests kept in the work dir between writes of a recipe's results.

A benchmark rewrites its results after every step, and each write tests every finished row
against every baseline, per seed and on the seeds' outputs pooled; resampling all of them again
took minutes after each step, for pairs whose outputs had not changed. sacreBLEU starts each
system's test from the same seed, on its own (``_paired_bs_test`` and ``_paired_ar_test`` each
make their generator), so a pair's result does not depend on the other systems tested beside
it (``tests/test_recipe.py`` checks this). Each (baseline, system) result is therefore kept
under a hash of everything it is made from (both outputs, the references, the test, sacreBLEU's
version and seed) and reused; a change to any of them tests the pair again. With
``SACREBLEU_SEED=none`` every test draws fresh samples, so nothing is kept."""
import hashlib
import json
import os
from typing import Optional, Sequence, Tuple

from fairseq_distill.evaluation.scoring import paired_significance

# a change to what a kept result holds makes this differ, so older files are not read
FORMAT = 1
# what paired_significance returns besides the systems, the same for each pair of one test
SHARED = ("test", "samples", "seed", "signatures", "baseline_scores")


def sacrebleu_seed() -> str:
    return os.environ.get("SACREBLEU_SEED", "12345")


def pair_key(test: str, baseline: Sequence[str], system: Sequence[str], references: Sequence[str]) -> str:
    import sacrebleu

    digest = hashlib.sha1(json.dumps([FORMAT, test, sacrebleu.__version__, sacrebleu_seed()]).encode())
    for lines in (baseline, system, references):
        digest.update(f"\0{len(lines)}\0".encode())
        for line in lines:
            digest.update(line.encode("utf-8") + b"\n")
    return digest.hexdigest()


def paired_tests(baseline: Tuple[str, Sequence[str]], systems: Sequence[Tuple[str, Sequence[str]]],
                 references: Sequence[str], test: str = "bootstrap", keep_dir: Optional[str] = None) -> dict:
    """``paired_significance``'s result (the same dict), with each pair's result read from
    ``keep_dir`` where an earlier call made it, and the others tested and kept there."""
    if not keep_dir or sacrebleu_seed().lower() == "none":
        return paired_significance(baseline, systems, references, test)
    paths = {name: os.path.join(keep_dir, pair_key(test, baseline[1], hyps, references) + ".json")
             for name, hyps in systems}
    kept = {}
    for name, path in paths.items():
        if os.path.isfile(path):
            with open(path) as f:
                kept[name] = json.load(f)
    missing = [(name, hyps) for name, hyps in systems if name not in kept]
    if missing:
        fresh = paired_significance(baseline, missing, references, test)
        os.makedirs(keep_dir, exist_ok=True)
        for name, _ in missing:
            kept[name] = {**{k: fresh[k] for k in SHARED}, "system": fresh["systems"][name]}
            partial = f"{paths[name]}.{os.getpid()}.tmp"
            with open(partial, "w") as f:
                json.dump(kept[name], f)
            os.replace(partial, paths[name])  # a reader never sees half a file
    first = kept[systems[0][0]]
    return {"test": first["test"], "samples": first["samples"], "seed": first["seed"], "baseline": baseline[0],
            "signatures": first["signatures"], "systems": {name: kept[name]["system"] for name, _ in systems},
            "baseline_scores": first["baseline_scores"]}
