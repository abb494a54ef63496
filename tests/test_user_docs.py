"""The user docs (README.md, docs/**/*.md, bench/README.md, recipes/*/README.md) state what
is: they name no issue of the project's tracker ("issue 48", "issues 49 and 50", "#48"), which
mean nothing to a reader. History goes to CHANGELOG.md."""
import glob
import os
import re

from helpers import REPO

# "issue 48", "Issue 48.3's", "issues 49 and 50", "issue #48", a heading's anchor "issue-48",
# and a bare "#48" (not an HTML entity "&#160;" nor a link's fragment "page#1")
ISSUE_NUMBER = re.compile(r"\bissues?[\s-]+#?\d+|(?<![\w&/#])#\d+\b", re.I)


def user_docs():
    patterns = ("README.md", "docs/**/*.md", "bench/README.md", "recipes/*/README.md")
    return sorted({p for pattern in patterns for p in glob.glob(os.path.join(REPO, pattern), recursive=True)})


def issue_numbers(text: str):
    """(line number, the mention) of every issue number in ``text``."""
    return [(i, m.group(0)) for i, line in enumerate(text.splitlines(), 1) for m in ISSUE_NUMBER.finditer(line)]


def test_issue_numbers_are_found_in_every_spelling():
    text = ("the defaults of issue 48 and Issue 48.3's comparison\nissues 49 and 50; see #48, issue #12\n"
            "[below](#the-defaults-of-issue-48)\n")
    assert [m for _, m in issue_numbers(text)] == ["issue 48", "Issue 48", "issues 49", "#48", "issue #12",
                                                   "issue-48"]
    assert issue_numbers("3 issues remain; a&#160;b; [x](page.md#1); 48 tokens; C# code; step #3") == [
        (1, "#3")]


def test_the_user_docs_name_no_issue_number():
    docs = user_docs()
    assert os.path.join(REPO, "README.md") in docs and os.path.join(REPO, "bench", "README.md") in docs
    assert any(os.sep + "methods" + os.sep in d for d in docs) and any(os.sep + "recipes" + os.sep in d for d in docs)
    found = []
    for path in docs:
        with open(path, encoding="utf-8") as f:
            found += [f"{os.path.relpath(path, REPO)}:{line}: {mention}" for line, mention in issue_numbers(f.read())]
    assert not found, "user docs name issue numbers (say what is; history goes to CHANGELOG.md):\n" + "\n".join(found)


# a decimal figure, not part of a version, a path or an identifier
DECIMAL = re.compile(r"(?<![\w.])[+−-]?\d+\.\d+(?![\w.])")
# decimals the docs quote that no committed result holds, each for a stated reason
NOT_RESULTS = {
    # the papers' own figures, quoted beside ours (docs/reproducing.md, README's methods table)
    4.07, 4.14, 36.79, 37.13, 35.56, 35.46, 36.68,
    # training-log values quoted where a loss's scale is explained (docs/methods/a2d.md, layer_kd.md)
    67.1, 152.5, 5.23, 3.68,
    # arithmetic shown step by step in docs/methods/a2d.md (a scale and a decayed weight)
    0.0775, 0.00096,
}


def committed_figures() -> set:
    """Every number of bench/results/*.json (rounded to 0–3 decimals) and every decimal printed
    in bench/results/*.md."""
    import json

    known = set()

    def walk(value):
        if isinstance(value, dict):
            for v in value.values():
                walk(v)
        elif isinstance(value, list):
            for v in value:
                walk(v)
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            known.update(round(abs(float(value)), n) for n in (0, 1, 2, 3))

    for path in glob.glob(os.path.join(REPO, "bench", "results", "**", "*.json"), recursive=True):
        with open(path, encoding="utf-8") as f:
            walk(json.load(f))
    for path in glob.glob(os.path.join(REPO, "bench", "results", "**", "*.md"), recursive=True):
        with open(path, encoding="utf-8") as f:
            known.update(abs(float(m.replace("−", "-"))) for m in DECIMAL.findall(f.read()))
    return known


def test_every_decimal_in_the_readme_and_docs_is_a_committed_result():
    """A figure in README.md or docs/ that no committed result holds (a stale one, or one
    typed from memory) fails here; code blocks are left out (their numbers are options)."""
    known = committed_figures() | NOT_RESULTS
    unknown = {}
    for path in [os.path.join(REPO, "README.md"), *glob.glob(os.path.join(REPO, "docs", "**", "*.md"), recursive=True)]:
        with open(path, encoding="utf-8") as f:
            text = re.sub(r"```.*?```", "", f.read(), flags=re.S)
        found = [m for m in DECIMAL.findall(text) if abs(float(m.replace("−", "-"))) not in known]
        if found:
            unknown[os.path.relpath(path, REPO)] = found
    assert not unknown, f"figures no committed result holds: {unknown}"
