"""One way into each tool: the fsd-* console scripts the documentation (README.md, docs/,
bench/README.md) names are the ones setup.py installs, each starts, and a user error ends in
one line, not a traceback."""
import glob
import os
import re
import sys

import pytest

from helpers import REPO, run

BIN = os.path.dirname(sys.executable)


def installed_tools():
    with open(os.path.join(REPO, "setup.py"), encoding="utf-8") as f:
        return dict(re.findall(r'"(fsd-[\w-]+)=([\w.]+):main"', f.read()))


def documentation_pages():
    """README.md, every page under docs/, and bench/README.md: where commands are documented."""
    pages = [os.path.join(REPO, "README.md"),
             *sorted(glob.glob(os.path.join(REPO, "docs", "**", "*.md"), recursive=True)),
             os.path.join(REPO, "bench", "README.md")]
    return pages


def documentation() -> str:
    text = []
    for page in documentation_pages():
        with open(page, encoding="utf-8") as f:
            text.append(f.read())
    return "\n".join(text)


def test_the_readme_documents_console_scripts_only():
    readme = documentation()
    tools = installed_tools()
    documented = set(re.findall(r"\bfsd-[a-z0-9-]*[a-z0-9]", readme))
    assert documented and documented <= set(tools), documented - set(tools)
    # scripts/ keeps set-up, the demo, the tests and the GPU check; a tool is never run through
    # a wrapper there
    kept = {"setup_env.sh", "demo.sh", "test.sh", "gpu_check.sh", "gpu_check.py"}
    assert set(os.listdir(os.path.join(REPO, "scripts"))) <= kept
    assert not [m for m in re.findall(r"scripts/([\w.]+)", readme) if m not in kept]


# each tool's entry point called with --help in one process (torch and fairseq imported once), as its
# installed script calls it: prints the tool's usage under the script's name
HELP_OF_EVERY_TOOL = """
import contextlib, importlib, io, json, sys
out = {}
for tool, module in json.loads(sys.argv[1]).items():
    sys.argv = [tool, "--help"]
    text = io.StringIO()
    with contextlib.redirect_stdout(text), contextlib.redirect_stderr(text):
        try:
            importlib.import_module(module).main()
        except SystemExit:
            pass
    out[tool] = text.getvalue()
print(json.dumps(out))
"""


@pytest.mark.slow
def test_every_console_script_starts():
    import json

    tools = installed_tools()
    # the installed wrapper itself, for one tool; every entry point behind it, in one process
    out = run([os.path.join(BIN, "fsd-report"), "--help"]).stdout
    assert re.search(r"usage: fsd-report\b", out), out[-1000:]
    helps = json.loads(run([sys.executable, "-c", HELP_OF_EVERY_TOOL, json.dumps(tools)]).stdout.splitlines()[-1])
    for tool in tools:
        assert os.access(os.path.join(BIN, tool), os.X_OK), tool
        assert re.search(rf"usage: {tool}\b", helps[tool]), (tool, helps[tool][-1000:])


@pytest.mark.slow
def test_bad_depth_lists_are_named_not_a_traceback(tmp_path):
    for tool, args in (("fsd-depth-strategies", ["--encoder-layers", "12"]),
                       ("fsd-evaluate-depths", [str(tmp_path / "model.pt"), str(tmp_path), "--out", str(tmp_path / "o")])):
        proc = run([os.path.join(BIN, tool), *args, "--encoder-depths", "2,x"], check=False)
        assert proc.returncode == 1 and "Traceback" not in proc.stdout, (tool, proc.stdout[-2000:])
        assert "--encoder-depths '2,x': expected whole numbers separated by commas" in proc.stdout, proc.stdout
