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
