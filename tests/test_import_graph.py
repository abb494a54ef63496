"""issue 49: each package's modules depend one way (no import circle, lazy imports included):
bench/runner had config -> schema -> plan -> config, fairseq_distill/seqkd inputs <-> external."""
import ast
import os

import pytest

from helpers import REPO


def module_imports(package_dir: str, package: str):
    """{module: modules of the same package it imports}, top-level and inside functions."""
    names = {f[:-3] for f in os.listdir(package_dir) if f.endswith(".py") and f != "__init__.py"}
    graph = {}
    for name in names:
        tree = ast.parse(open(os.path.join(package_dir, name + ".py"), encoding="utf-8").read())
        found = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                if node.level == 1 and node.module:
                    target = node.module.split(".")[0]
                elif node.module and node.module.startswith(package + "."):
                    target = node.module[len(package) + 1:].split(".")[0]
                else:
                    continue
                if target in names and target != name:
                    found.add(target)
        graph[name] = found
    return graph


def cycle(graph):
    state = {}

    def visit(node, path):
        state[node] = "open"
        for nxt in sorted(graph[node]):
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


@pytest.mark.parametrize("package_dir,package", [
    ("bench/runner", "bench.runner"), ("fairseq_distill/seqkd", "fairseq_distill.seqkd"),
    ("fairseq_distill/terms", "fairseq_distill.terms"), ("fairseq_distill/criterions", "fairseq_distill.criterions"),
    ("fairseq_distill/teacher", "fairseq_distill.teacher"), ("fairseq_distill/corpora", "fairseq_distill.corpora"),
])
def test_no_import_circle(package_dir, package):
    found = cycle(module_imports(os.path.join(REPO, package_dir), package))
    assert found is None, " -> ".join(found or [])
