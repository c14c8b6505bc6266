"""Test-wide settings.

The offline dataset mirror (../shared/datasets beside the clone, as in CI) is handed to
the loader, and to every kernel nbgrader starts, through COURSE_DATA_DIR; downloads
go to a throw-away cache.

`make test` runs the tests in pytest-xdist workers (`--dist loadscope`): one worker runs a
test file whole (its module fixtures are built once), or a test class whole (the proofs: a
class per assignment, tests/test_proofs.py). The longest go first. The controller's folder
for the run (caches, the list of files left for a person) is inherited by its workers
and removed when the run ends.
"""
import os
import shutil
import tempfile
from pathlib import Path

import matplotlib

matplotlib.use("agg")

REPO_ROOT = Path(__file__).resolve().parent.parent
MIRROR = REPO_ROOT.parent / "shared" / "datasets"

if "COURSE_DATA_DIR" not in os.environ and MIRROR.is_dir():
    os.environ["COURSE_DATA_DIR"] = str(MIRROR)
IS_WORKER = "PYTEST_XDIST_WORKER" in os.environ
if not IS_WORKER:  # the controller, or a run without workers: a new folder for this run
    os.environ["COURSE_TEST_RUN_DIR"] = tempfile.mkdtemp(prefix="course-tests-")
RUN_DIR = Path(os.environ["COURSE_TEST_RUN_DIR"])
# Each process downloads into its own throw-away cache.
os.environ["COURSE_CACHE_DIR"] = tempfile.mkdtemp(prefix="cache-", dir=RUN_DIR)
os.environ["MPLBACKEND"] = "agg"

# Files that tests leave for a person to look at (browser screenshots, server logs), one
# path a line (appended by any worker): listed at the end of the test log.
ARTIFACTS = RUN_DIR / "artifacts.txt"


def record_artifact(path) -> None:
    with open(ARTIFACTS, "a", encoding="utf-8") as f:
        f.write(f"{Path(path).resolve()}\n")


import pytest  # noqa: E402

# The notebook that grades quickest (benchmarks/README.md, the proofs' times per hand-in). The grader's own
# tests (hostile and damaged hand-ins, the Dask cluster, the fork server) grade it: what they test does not
# depend on which notebook it is, and the course's first notebook costs them about 1.6 times as much.
QUICKEST_ASSIGNMENT = "05_self_attention"


# Scopes (a file, or a class of tests/test_proofs.py) by their time in `make test`
# (benchmarks/README.md), longest first: handed out in this order, two workers end close
# together. The others follow in collection order.
LONGEST_FIRST = (  # by their times in CI's run of 45f16b6, the proofs' scaled by their local times after f8c686b
    "test_proofs.py::Test_07_transformer", "test_hostile.py", "test_proofs.py::Test_02_rnn_vanishing_gradients",
    "test_proofs.py::Test_01_tokenization_embeddings", "test_proofs.py::Test_06_masking", "test_student_side.py",
    "test_proofs.py::Test_05_self_attention", "test_proofs.py::Test_04_seq2seq_attention", "test_demo.py",
    "test_proofs.py::Test_03_lstm", "test_bounded.py", "test_cluster.py", "test_property.py", "test_forkserver.py",
    "test_report.py",
)


def pytest_collection_modifyitems(config, items):
    """The order xdist hands out scopes in (`--no-loadscope-reorder`): LONGEST_FIRST."""
    order = {scope: rank for rank, scope in enumerate(LONGEST_FIRST)}

    def rank(item):
        scope = item.nodeid.rsplit("::", 1)[0]  # how xdist's loadscope groups: the file, or file::class
        return order.get(scope.rsplit("/", 1)[-1], len(order))

    items.sort(key=rank)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """Keep each phase's report on the test item (item.rep_call), for fixtures that act on failure."""
    outcome = yield
    report = outcome.get_result()
    setattr(item, f"rep_{report.when}", report)


def pytest_terminal_summary(terminalreporter):
    if IS_WORKER or not ARTIFACTS.is_file():
        return
    terminalreporter.section("files left by the tests")
    for path in dict.fromkeys(ARTIFACTS.read_text(encoding="utf-8").splitlines()):
        terminalreporter.write_line(path)


def pytest_unconfigure(config):
    if not IS_WORKER:
        shutil.rmtree(RUN_DIR, ignore_errors=True)
