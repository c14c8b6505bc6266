"""The trust property, over every assignment, through the real `grade` path (repair,
sandbox, guard, nbgrader, split execution): a hand-in that plays tricks on the grader never
scores above the same answers handed in honestly.

For each assignment the honest hand-in is the demo's buggy notebook (the solution with
catalog bugs, so it scores below full), and the hostile one is the same
notebook with every trick of tests/tricks.py at once (values that decide their own
comparison, checks neutralized and torch's references poisoned while the tests run,
refused reaches for the grader's objects), saved as Windows Notepad saves it.
"""
import pytest
import tricks
from hostile_cases import notepad

from autograder.course import layout as course
from autograder.quality.demo import buggy_notebook
from autograder.grading.batch import grade
from autograder.isolation.sandbox import Limits
from autograder.grading.workspace import add_submission, open_workspace

pytestmark = pytest.mark.slow

ASSIGNMENTS = course.assignments()
LIMITS = Limits(cell_timeout=90, notebook_timeout=600)


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    root = tmp_path_factory.mktemp("property")
    ws = open_workspace(root / "ws")
    for name in ASSIGNMENTS:
        honest = buggy_notebook(name)[0]
        add_submission(ws, "honest", name, honest)
        hostile = ws.submission_path("hostile", name)
        hostile.parent.mkdir(parents=True, exist_ok=True)
        hostile.write_bytes(notepad(tricks.apply(honest, "all")))
    return {(r.student, r.assignment): r for r in grade(ws, ASSIGNMENTS, jobs=2, limits=LIMITS)}


@pytest.mark.parametrize("name", ASSIGNMENTS)
def test_tricks_never_score_above_the_honest_hand_in(results, name):
    honest, hostile = results[("honest", name)], results[("hostile", name)]
    assert honest.status == "graded", honest.message
    assert honest.score.auto_score < honest.score.auto_max, "the honest hand-in must have bugs"
    assert hostile.score is not None, hostile.message
    assert hostile.score.auto_score <= honest.score.auto_score, (
        f"tricks earned {hostile.score.auto_score:g} > honest {honest.score.auto_score:g}: {hostile.flags}")
    assert hostile.status == "flagged", f"{hostile.status}: {hostile.message}"
    assert any(r.startswith("converted") for r in hostile.repairs), "the Notepad copy was read and converted"
