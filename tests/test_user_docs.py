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
    # the papers' BLEU that the recipes' READMEs quote in their "paper's BLEU" columns and notes:
    # GPKD (Li et al., AAAI 2021) Tables 1, 3, 5 and 6 (recipes/wmt16_en_de), A2D Table 2 and CKD
    # Table 3 (recipes/wmt14_en_de), A2D's IWSLT'14 table (recipes/iwslt14_de_en)
    30.03, 29.19, 30.59, 29.01, 29.68, 30.05, 30.16, 29.71, 30.63,
    25.74, 24.31, 24.14, 23.97, 26.37, 25.97,
    36.61,
    # an option's value, the papers' Adam β2 (recipes/wmt16_en_de)
    0.997,
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
    """A figure in a user doc (README.md, docs/, bench/README.md, the recipes' READMEs) that no
    committed result holds (a stale one, or one typed from memory) fails here; code blocks are
    left out (their numbers are options)."""
    known = committed_figures() | NOT_RESULTS
    unknown = {}
    docs = user_docs()
    assert os.path.join(REPO, "bench", "README.md") in docs and any(os.sep + "recipes" + os.sep in d for d in docs)
    for path in docs:
        with open(path, encoding="utf-8") as f:
            text = re.sub(r"```.*?```", "", f.read(), flags=re.S)
        found = [m for m in DECIMAL.findall(text) if abs(float(m.replace("−", "-"))) not in known]
        if found:
            unknown[os.path.relpath(path, REPO)] = found
    assert not unknown, f"figures no committed result holds: {unknown}"


# --user-dir with the package's name works only where that name is a folder of the working
# directory (the checkout's root); the installed package's folder works from anywhere
CHECKOUT_ONLY = re.compile(r"--user-dir[ =]+[\"']?\.?/?fairseq_distill\b")


def cli_messages():
    """The plugin's command-line tools: their docstrings are their --help, their strings what
    they print."""
    return sorted(glob.glob(os.path.join(REPO, "fairseq_distill", "cli", "*.py")))


def checkout_only_user_dirs(text: str):
    """(line number, line) of every ``--user-dir fairseq_distill`` not said to be the checkout's
    form on its own line."""
    return [(i, line.strip()) for i, line in enumerate(text.splitlines(), 1)
            if CHECKOUT_ONLY.search(line) and "checkout" not in line]


def test_the_checkout_only_user_dir_is_found():
    assert [i for i, _ in checkout_only_user_dirs(
        "fairseq-train d --user-dir fairseq_distill\n--user-dir ./fairseq_distill \\\n"
        "--user-dir=fairseq_distill\n--user-dir \"fairseq_distill\"\n"
        "--user-dir \"$(fsd-options --user-dir)\"\n--user-dir \"$PLUGIN\"\n"
        "``--user-dir fairseq_distill`` only from the checkout\n--user-dir fairseq_distill_x\n")] == [1, 2, 3, 4]


def test_no_user_doc_or_message_gives_the_checkout_only_user_dir():
    """Every ``--user-dir`` a user is shown works from any directory: ``"$(fsd-options
    --user-dir)"`` (or a variable holding it), never ``--user-dir fairseq_distill``, which
    fairseq resolves against the working directory (FileNotFoundError outside the checkout)."""
    found = []
    for path in user_docs() + cli_messages():
        with open(path, encoding="utf-8") as f:
            found += [f"{os.path.relpath(path, REPO)}:{i}: {line}" for i, line in checkout_only_user_dirs(f.read())]
    assert not found, ("the checkout-only --user-dir (use --user-dir \"$(fsd-options --user-dir)\"):\n"
                       + "\n".join(found))


# the project's own history, which a user cannot act on: device loans and sessions, helpers'
# runs, a call's time limit, what one machine lacked ("no network here")
HISTORY = re.compile(
    r"\blent\b|\bthis session\b|\ba helper(?:'s)?\b|\bhelpers' runs\b|--budget 420|\$OUT/results"
    r"|\b\d+-minute call\b|\bcall timeout\b|\bdevice call\b|\bno network\b(?! access)"
    r"|\bthere was no network\b|\bnetwork here\b|\b(?:checked|measured|tested|run) here\b",
    re.I)


def history_phrases(text: str):
    return [(i, m.group(0)) for i, line in enumerate(text.splitlines(), 1) for m in HISTORY.finditer(line)]


def test_history_phrases_are_found():
    text = ("a helper's runs\non a lent device\nin this session\n--budget 420 and $OUT/results\n"
            "one 8-minute call\na call timeout\nnot checked here (no network)\n")
    assert [m.lower() for _, m in history_phrases(text)] == [
        "a helper's", "lent", "this session", "--budget 420", "$out/results", "8-minute call", "call timeout",
        "checked here", "no network"]
    assert history_phrases("shared helpers and constants; a machine without network access; "
                           "the session fixtures; silent; measured on 2 cores") == []


def test_the_user_docs_hold_no_project_history():
    """User docs say what is and how to use it; how the project's own runs were done (device
    loans, sessions, helpers, a call's limits, what one machine lacked) belongs in CHANGELOG.md
    and the commit log."""
    found = []
    for path in user_docs():
        with open(path, encoding="utf-8") as f:
            found += [f"{os.path.relpath(path, REPO)}:{i}: {m}" for i, m in history_phrases(f.read())]
    assert not found, "project history in user docs:\n" + "\n".join(found)
