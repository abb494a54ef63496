"""Shared fixtures (a tiny slice of the vendored Multi30k, binarized, and tiny teachers) and
the two tiers. Helpers and constants live in tests/helpers.py.

Tiers: a test that starts a process (fairseq-train, fairseq-generate, an fsd-* command, a
data-parallel run) is marked ``slow`` and runs in the full suite only (``make test``); the
rest, unit tests and tiny in-process runs, are the fast tier (``make test-fast``, i.e.
``pytest -m "not slow"``). Session and module fixtures may start processes for both tiers
(``tiny_data``, ``tiny_teacher``, ``deep_teacher``); a test not marked slow that starts one
itself fails, saying so."""
import fcntl
import os
import pathlib
import shutil
import subprocess

# Under pytest-xdist (scripts/test.sh runs the slow tier on one worker per core) each worker and
# the processes it starts use one thread: two workers of two threads each on two cores would
# oversubscribe them. Set before torch is imported, which reads it once.
if int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")) > 1:
    for _variable in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(_variable, "1")

import pytest  # noqa: E402

from helpers import DEEP_TEACHER, TRAIN_FLAGS, fairseq_train, prepare_corpus_argv, python_module, run, \
    write_raw_corpus

# slow tests in files whose owners keep them (only their imports are changed from here)
SLOW_ELSEWHERE = {
    "test_checkpoint_compat.py": {"test_old_checkpoint_resumes_with_fairseq_train"},
    "test_export_plugin_architectures.py": {
        "test_deep_transformer_export_names_the_plugin_requirement_and_decodes_with_it",
        "test_transformer_export_says_it_needs_nothing"},
    "test_teacher_dictionaries.py": {"test_seqkd_refuses_a_teacher_of_other_dictionaries"},
    "test_terms.py": {"test_combined_terms_train_from_the_command_line",
                      "test_resuming_with_another_layer_map_says_what_to_do"},
}


def pytest_collection_modifyitems(config, items):
    modules = {}
    for item in items:
        module = os.path.basename(str(item.fspath))
        modules[module] = item.module
        if getattr(item, "originalname", item.name) in SLOW_ELSEWHERE.get(module, ()):
            item.add_marker(pytest.mark.slow)
    # a renamed test must not drop into the fast tier unnoticed
    for module, obj in modules.items():
        missing = sorted(n for n in SLOW_ELSEWHERE.get(module, ()) if not hasattr(obj, n))
        if missing:
            raise pytest.UsageError(f"tests/conftest.py: SLOW_ELSEWHERE names tests that {module} does not have: "
                                    f"{missing}")


@pytest.fixture(scope="session", autouse=True)
def _matplotlib_font_cache():
    """matplotlib builds its font cache the first time it is imported on a machine, and runs
    fc-list to do it: a process the guard below refuses in whichever fast test (the heat maps)
    imports it first. Building it here, outside any test, keeps that test in-process."""
    try:
        import matplotlib.font_manager  # noqa: F401
    except ImportError:
        pass


@pytest.fixture(autouse=True)
def _fast_tests_start_no_process(request, monkeypatch):
    """The fast tier is in-process: a test not marked slow may not start a process."""
    if request.node.get_closest_marker("slow"):
        return
    nodeid = request.node.nodeid

    class Refused(subprocess.Popen):
        def __init__(self, args, *rest, **kwargs):
            raise AssertionError(f"{nodeid} starts a process ({args!r}): mark it @pytest.mark.slow "
                                 f"(tests/conftest.py says which tests are slow)")

    monkeypatch.setattr(subprocess, "Popen", Refused)


def shared_build(tmp_path_factory, name, build):
    """The folder ``name``, made once by ``build(folder)`` for every worker of this pytest run, and
    for both tiers of one ``scripts/test.sh`` run (which sets FSD_TEST_SHARED to a folder of its
    own and removes it at the end): each worker and tier building the same data and teachers
    again cost minutes of the suite. A lock file makes the other workers wait for the first; a
    build that failed leaves no completion mark, so the next one starts again from nothing.
    Users must treat the folder as read-only."""
    if os.environ.get("FSD_TEST_SHARED"):
        base = pathlib.Path(os.environ["FSD_TEST_SHARED"])
    elif os.environ.get("PYTEST_XDIST_WORKER"):
        base = tmp_path_factory.getbasetemp().parent  # this run's folder, above the workers' own
    else:
        base = tmp_path_factory.getbasetemp()
    folder, done = base / name, base / f"{name}.complete"
    with open(base / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not done.exists():
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir(parents=True)
            build(folder)
            done.touch()
    return folder


@pytest.fixture(scope="session")
def tiny_data(tmp_path_factory):
    """Binarized data-bin from 400/40/40 Multi30k sentence pairs, sentencepiece vocab 300."""
    def build(root):
        raw = write_raw_corpus(root / "raw_in", 400, 40, 40)
        run(prepare_corpus_argv(raw, root / "prep", "--vocab-size", "300", "--workers", "1"))
    return str(shared_build(tmp_path_factory, "tiny_data", build) / "prep" / "bin")


@pytest.fixture(scope="session")
def tiny_teacher(tiny_data, tmp_path_factory):
    """A tiny stock-fairseq teacher checkpoint trained for 30 updates."""
    def build(save):
        fairseq_train(tiny_data, str(save), "--max-update", "30", "--criterion", "label_smoothed_cross_entropy")
    return str(shared_build(tmp_path_factory, "teacher", build) / "checkpoint_last.pt")


@pytest.fixture(scope="session")
def deep_teacher(tiny_data, tmp_path_factory):
    """A 3+2-layer, 24-wide stock-fairseq teacher (``DEEP_TEACHER``) trained for 20 updates."""
    def build(save):
        run(python_module("fairseq_cli.train", tiny_data, *TRAIN_FLAGS, *DEEP_TEACHER, "--save-dir", str(save),
                          "--max-update", "20", "--criterion", "label_smoothed_cross_entropy"))
    return str(shared_build(tmp_path_factory, "deep_teacher", build) / "checkpoint_last.pt")


@pytest.fixture(scope="session")
def fluent_teacher(tiny_data, tmp_path_factory):
    """A small teacher trained until it writes real sentences that mostly end before the limit
    (as tests/test_ctranslate2.py's student): the CTranslate2 tests' teacher."""
    wide = [f"--{side}-{what}" for side in ("encoder", "decoder") for what in ("embed-dim", "ffn-embed-dim")]

    def build(root):
        fairseq_train(tiny_data, str(root), "--criterion", "label_smoothed_cross_entropy",
                      "--max-update", "150", "--lr", "0.005", "--log-interval", "50",
                      *[x for flag, dim in zip(wide, ("32", "64", "32", "64")) for x in (flag, dim)])
    return str(shared_build(tmp_path_factory, "fluent_teacher", build) / "checkpoint_last.pt")
