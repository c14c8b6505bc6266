"""`repair` and the integrity scan, without running a notebook."""
import copy

import pytest
from hostile_cases import (
    TAMPERING, answer_in_wrong_cell, colab_round_trip, duplicated_and_deleted, edit_metadata, first_answer,
    reads_running_cell, release, solution, strip_metadata, edited_test_cells, with_cell,
)

from autograder import course, integrity
from autograder.repair import affinity, repair
from autograder.status import Kind, Run, decide_status
from utils.cells import is_answer, is_locked, nbgrader_meta


def answers(nb):
    return {course.grade_id(c): c.source for c in nb.cells if is_answer(c)}


def structure(nb):
    """What nbgrader relies on: each graded or locked cell's id, type, metadata and (locked) text."""
    return [
        (course.grade_id(c), c.cell_type, {k: nbgrader_meta(c).get(k) for k in ("grade", "locked", "points", "solution")},
         c.source if is_locked(c) else None)
        for c in nb.cells if course.grade_id(c)
    ]


DAMAGE = {
    "stripped": strip_metadata,
    "colab": colab_round_trip,
    "mangled": duplicated_and_deleted,
    "metadata": edit_metadata,
    "edited tests": edited_test_cells,
}


def test_an_intact_release_or_solution_needs_no_repair():
    rel, sol = release(), solution()
    assert repair(rel, rel, sol).changes == []
    fixed = repair(sol, rel, sol)
    assert fixed.changes == [] and answers(fixed.notebook) == answers(sol)


@pytest.mark.parametrize("kind", DAMAGE)
def test_damage_is_undone_and_the_answers_are_untouched(kind):
    rel, sol = release(), solution()
    damaged = DAMAGE[kind](sol)
    fixed = repair(damaged, rel, sol)
    assert fixed.changes or kind == "colab", f"{kind}: nothing reported"  # Colab keeps nbgrader's metadata
    assert structure(fixed.notebook) == structure(rel), f"{kind}: the graded structure differs from the release"
    assert answers(fixed.notebook) == answers(sol), f"{kind}: an answer changed"
    again = repair(fixed.notebook, rel, sol)
    assert again.changes == [] and again.notebook.cells == fixed.notebook.cells, f"{kind}: repair is not idempotent"


def test_points_and_grade_ids_come_from_the_release():
    rel, sol = release(), solution()
    fixed = repair(edit_metadata(sol), rel, sol)
    assert any("points 100 ->" in change for change in fixed.changes)
    assert any("grade id 'my_test'" in change for change in fixed.changes)
    points = sum(nbgrader_meta(c).get("points", 0) for c in fixed.notebook.cells if nbgrader_meta(c).get("grade"))
    assert points == sum(nbgrader_meta(c).get("points", 0) for c in rel.cells if nbgrader_meta(c).get("grade"))


def test_added_cells_stay_in_place_without_grading_metadata():
    rel, sol = release(), solution()
    nb = with_cell(sol, "helper = 42")
    nb.cells[1].metadata["nbgrader"] = {"grade": True, "points": 50, "grade_id": "bonus", "locked": False,
                                        "solution": False, "schema_version": 3}
    fixed = repair(nb, rel, sol)
    assert fixed.notebook.cells[1].source == "helper = 42" and "nbgrader" not in fixed.notebook.cells[1].metadata
    assert any("removed grading metadata" in change for change in fixed.changes)


def test_an_answer_written_in_the_wrong_cell_is_not_moved():
    rel, sol = release(), solution()
    fixed = repair(answer_in_wrong_cell(sol), rel, sol)
    first = course.grade_id(sol.cells[first_answer(sol)])
    stub = rel.cells[first_answer(rel)].source
    assert answers(fixed.notebook)[first] == stub
    assert sum(c.source == sol.cells[first_answer(sol)].source for c in fixed.notebook.cells) == 1


def test_affinity_tells_the_assignment_apart():
    rel, sol = release(), solution()
    assert affinity(sol, rel, sol) == 1.0 and affinity(strip_metadata(rel), rel) == 1.0
    assert affinity(course.read_notebook(course.release_path(course.assignments()[0])).__class__(cells=[], metadata={},
                                                                                                  nbformat=4, nbformat_minor=5), rel) == 0.0


def test_the_solution_raises_no_integrity_flag():
    sol, rel = solution(), release()
    assert integrity.scan(repair(sol, rel, sol).notebook, rel, integrity.protected_names(sol)) == []


@pytest.mark.parametrize("name", sorted(TAMPERING))
def test_tampering_code_is_flagged_by_the_scan(name):
    sol, rel = solution(), release()
    fixed = repair(with_cell(sol, TAMPERING[name]), rel, sol).notebook
    assert integrity.scan(fixed, rel, integrity.protected_names(sol)), f"{name} raised no flag"


def test_reading_the_running_cell_is_flagged():
    sol, rel = solution(), release()
    fixed = repair(reads_running_cell(sol), rel, sol).notebook
    flags = integrity.scan(fixed, rel, integrity.protected_names(sol))
    assert any("reads the code that is running" in f.text for f in flags)


def test_guard_logs_become_flags_and_notes():
    logs = [[{"event": "cell", "n": 1}, {"event": "done", "n": 1}, {"event": "tamper", "detail": "refused x", "n": 1},
             {"event": "network", "detail": "looked up example.com"}]]
    found = integrity.guard_findings(logs, executed=3)
    flags, notes = [f.text for f in found if f.is_flag], [f.text for f in found if not f.is_flag]
    assert any("refused x" in f for f in flags) and any("saw 1 of the 3 cells" in f for f in flags)
    assert notes == ["network: looked up example.com"]
    assert [f.kind for f in found] == [Kind.TAMPER, Kind.NETWORK, Kind.GUARD_DISABLED]
    assert decide_status(Run.COMPLETED, found) == "flagged"
    assert decide_status(Run.COMPLETED, found[1:2]) == "sandbox"
    assert integrity.guard_findings([[{"event": "cell", "n": 1}]], executed=1) == []


def test_copies_of_cells_do_not_share_ids():
    rel, sol = release(), solution()
    fixed = repair(duplicated_and_deleted(copy.deepcopy(sol)), rel, sol).notebook
    ids = [c.get("id") for c in fixed.cells]
    assert len(ids) == len(set(ids))
