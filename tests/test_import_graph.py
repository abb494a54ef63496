"""The code's layers depend one way and its modules stay small.

* Inside each package, modules import each other without a circle (lazy imports included).
* Across ``fairseq_distill``, its parts (top-level modules and subpackages) sit in the layers
  of ``LAYERS``: a part imports only parts of its own layer or of lower ones, and the parts
  import each other without a circle (``import fairseq_distill``, which registers the plugin
  before a checkpoint is loaded, excepted). ``fairseq_distill`` imports nothing from ``bench``,
  ``scripts`` or ``tests``; ``bench/runner`` nothing else of ``bench``; ``bench/gpu`` only
  ``bench/runner`` besides itself.
* No module of the package, ``bench`` or ``scripts`` is over ``MAX_LINES`` lines.
"""
import ast
import os

import pytest

from helpers import REPO

MAX_LINES = 450

# fairseq_distill's parts, lowest layer first; a part imports parts of its own layer or lower ones
LAYERS = (
    # nothing else of the package
    ("errors", "compat", "quiet", "seeding", "progress", "streaming", "losses", "machine"),
    # building blocks: text and files, work dirs, the features and maps the terms read, layer stacks
    ("workdir", "user_errors", "collapse", "layer_maps", "features", "trainer_setup", "data_bin",
     "launch_checks", "text", "modules"),
    # checkpoints, decoding and scoring; corpora; depth plans and GPKD extraction
    ("deploy", "evaluation", "corpora", "depth"),
    # models, teachers, the KD terms
    ("models", "teacher", "terms"),
    # the deployment report: deployed forms, their scores and the teachers' dictionaries together
    ("report",),
    # what fairseq registers and the seq-KD jobs
    ("criterions", "tasks", "seqkd"),
    # the command-line front ends
    ("cli",),
    # the package itself: registers everything
    ("__init__",),
)


def _module_name(path: str) -> str:
    """bench/runner/plan.py -> bench.runner.plan; fairseq_distill/__init__.py -> fairseq_distill."""
    name = os.path.relpath(path, REPO)[:-3].replace(os.sep, ".")
    return name[:-len(".__init__")] if name.endswith(".__init__") else name


def _is_module(name: str) -> bool:
    path = os.path.join(REPO, *name.split("."))
    return os.path.isfile(path + ".py") or os.path.isdir(path)


def imported_modules(path: str):
    """Every module ``path`` imports (top-level and inside functions), relative imports resolved;
    ``from a import b`` yields ``a.b`` where that is a module of the checkout, else ``a``."""
    name = _module_name(path)
    package = name if path.endswith("__init__.py") else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(open(path, encoding="utf-8").read())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[:len(parts) - node.level + 1])
                module = f"{base}.{node.module}" if node.module else base
            else:
                module = node.module
            for alias in node.names:
                found.add(f"{module}.{alias.name}" if _is_module(f"{module}.{alias.name}") else module)
    return found


def python_files(top: str):
    for folder, dirs, files in os.walk(os.path.join(REPO, top)):
        dirs[:] = [d for d in dirs if d not in ("__pycache__", "results")]
        yield from (os.path.join(folder, f) for f in sorted(files) if f.endswith(".py"))


def packages(top: str):
    """Every folder under ``top`` (itself included) with Python modules."""
    return sorted({os.path.dirname(f) for f in python_files(top)})


def module_imports(package_dir: str):
    """{module: modules of the same package it imports}."""
    package = _module_name(os.path.join(package_dir, "__init__.py"))
    names = {f[:-3] for f in os.listdir(package_dir) if f.endswith(".py") and f != "__init__.py"}
    graph = {}
    for name in names:
        targets = {m[len(package) + 1:].split(".")[0] for m in imported_modules(os.path.join(package_dir, name + ".py"))
                   if m.startswith(package + ".")}
        graph[name] = {t for t in targets if t in names and t != name}
    return graph


def part_of(module: str):
    """fairseq_distill.text.files -> text; fairseq_distill -> __init__; None outside the package."""
    parts = module.split(".")
    if parts[0] != "fairseq_distill":
        return None
    return parts[1] if len(parts) > 1 else "__init__"


def part_imports():
    """{part of fairseq_distill: its modules' imports of other parts}. A bare ``import
    fairseq_distill`` is left out: it registers the plugin with fairseq (as ``--user-dir`` does)
    before a checkpoint of its architectures is loaded, and uses nothing of the package."""
    graph = {}
    for path in python_files("fairseq_distill"):
        source = part_of(_module_name(path))
        targets = {part_of(m) for m in imported_modules(path)} - {None, source, "__init__"}
        graph.setdefault(source, set()).update(targets)
    return graph


def cycle(graph):
    state = {}

    def visit(node, path):
        state[node] = "open"
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == "open":
                return path + [node, nxt]
            if nxt not in state:
                found = visit(nxt, path + [node])
                if found:
                    return found
        state[node] = "done"
        return None

    for node in sorted(graph):
        if node not in state:
            found = visit(node, [])
            if found:
                return found
    return None


def test_cycle_finds_a_circle_and_none_where_there_is_none():
    assert cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert cycle({"a": {"b", "c"}, "b": {"c"}, "c": set()}) is None


def test_relative_imports_are_resolved():
    found = imported_modules(os.path.join(REPO, "fairseq_distill", "models", "__init__.py"))
    assert "fairseq_distill.models.flexible_transformer" in found


@pytest.mark.parametrize("package_dir", [os.path.relpath(p, REPO) for p in packages("fairseq_distill")]
                         + [os.path.relpath(p, REPO) for p in packages("bench") if p != os.path.join(REPO, "bench")])
def test_no_import_circle(package_dir):
    found = cycle(module_imports(os.path.join(REPO, package_dir)))
    assert found is None, f"{package_dir}: " + " -> ".join(found or [])


def test_every_part_of_the_package_has_a_layer():
    layered = {part for layer in LAYERS for part in layer}
    missing = sorted(set(part_imports()) - layered)
    assert not missing, (f"fairseq_distill parts {missing} are in no layer: add each to LAYERS in "
                         f"tests/test_import_graph.py, in the lowest layer above everything it imports")


def test_the_package_layers_depend_one_way():
    rank = {part: i for i, layer in enumerate(LAYERS) for part in layer}
    graph = part_imports()
    upward = sorted(f"{source} (layer {rank[source]}) imports {target} (layer {rank[target]})"
                    for source, targets in graph.items() if source in rank
                    for target in targets if target in rank and rank[target] > rank[source])
    assert not upward, "imports that run up the layers: " + "; ".join(upward)
    found = cycle(graph)
    assert found is None, "parts of fairseq_distill import each other in a circle: " + " -> ".join(found or [])


def test_the_package_imports_nothing_of_bench_scripts_or_tests_and_bench_runner_nothing_above_it():
    wrong = []
    for path in python_files("fairseq_distill"):
        wrong += [(path, m) for m in imported_modules(path) if m.split(".")[0] in ("bench", "scripts", "tests")]
    for path in python_files(os.path.join("bench", "runner")):
        wrong += [(path, m) for m in imported_modules(path)
                  if m.startswith("bench.") and not m.startswith("bench.runner")]
    for path in python_files(os.path.join("bench", "gpu")):
        wrong += [(path, m) for m in imported_modules(path)
                  if m.startswith("bench.") and not m.startswith(("bench.runner", "bench.gpu"))]
    assert not wrong, [f"{os.path.relpath(p, REPO)} imports {m}" for p, m in wrong]


def test_no_module_is_over_the_line_limit():
    long = []
    for top in ("fairseq_distill", "bench", "scripts"):
        for path in python_files(top):
            with open(path, encoding="utf-8") as f:
                n = sum(1 for _ in f)
            if n > MAX_LINES:
                long.append(f"{os.path.relpath(path, REPO)} ({n} lines)")
    assert not long, f"modules over {MAX_LINES} lines; split them by concern: {long}"
