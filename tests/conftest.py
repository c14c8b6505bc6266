"""Test-wide settings.

The offline dataset mirror (../shared/datasets beside the clone, as in CI) is handed to
the loader, and to every kernel nbgrader starts, through COURSE_DATA_DIR; downloads
go to a throw-away cache.
"""
import os
import tempfile
from pathlib import Path

import matplotlib

matplotlib.use("agg")

REPO_ROOT = Path(__file__).resolve().parent.parent
MIRROR = REPO_ROOT.parent / "shared" / "datasets"

if "COURSE_DATA_DIR" not in os.environ and MIRROR.is_dir():
    os.environ["COURSE_DATA_DIR"] = str(MIRROR)
os.environ["COURSE_CACHE_DIR"] = tempfile.mkdtemp(prefix="course-cache-")
# The solution's verdicts (autograder/ledger.py) computed once per assignment for the whole run.
os.environ["COURSE_CALIBRATION_DIR"] = tempfile.mkdtemp(prefix="course-calibration-")
os.environ["MPLBACKEND"] = "agg"

# Files that tests leave for a person to look at (browser screenshots, server logs):
# listed at the end of the test log.
ARTIFACTS: list = []


def record_artifact(path) -> None:
    ARTIFACTS.append(Path(path).resolve())


import pytest  # noqa: E402


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """Keep each phase's report on the test item (item.rep_call), for fixtures that act on failure."""
    outcome = yield
    report = outcome.get_result()
    setattr(item, f"rep_{report.when}", report)


def pytest_terminal_summary(terminalreporter):
    if ARTIFACTS:
        terminalreporter.section("files left by the tests")
        for path in ARTIFACTS:
            terminalreporter.write_line(str(path))
