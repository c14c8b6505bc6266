"""`repair` and the integrity scan, without running a notebook."""
import copy
import json

import nbformat
import pytest
from hostile_cases import (
    ASSIGNMENT, TAMPERING, answer_in_wrong_cell, bare_workspace, dump, colab_round_trip, duplicated_and_deleted, edit_metadata, first_answer,
    reads_running_cell, release, solution, strip_metadata, edited_test_cells, with_cell,
)

from autograder.course import layout as course
from autograder.handins import integrity
from autograder.course.layout import ASK_AGAIN
from autograder.handins.repair import affinity, repair
from autograder.handins.status import Kind, Run, decide_status
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


def _with_answer_code(nb, code):
    nb = copy.deepcopy(nb)
    nb.cells[first_answer(nb)].source += "\n\n" + code
    return nb


def test_a_loop_variable_named_like_ipythons_history_is_not_flagged_but_the_history_is():
    sol, rel = solution(), release()
    own = "def _count(xs):\n    n = 0\n    for _i in range(len(xs)):\n        n += xs[_i] > 0\n    return n\n"
    fixed = repair(_with_answer_code(sol, own), rel, sol).notebook
    assert integrity.scan(fixed, rel, integrity.protected_names(sol)) == []
    for reads in ("print(_i)", "previous = _ii + _i3"):
        fixed = repair(_with_answer_code(sol, own + reads), rel, sol).notebook
        flags = integrity.scan(fixed, rel, integrity.protected_names(sol))
        assert any(integrity.READS_RUNNING in f.text for f in flags), reads


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


def _first(cells, kind):
    return next(c for c in cells if c["cell_type"] == kind)


def _added(**cell):
    return lambda nb: nb["cells"].insert(2, {"cell_type": "code", "id": "added", "metadata": {}, "source": "x = 1",
                                              "outputs": [], "execution_count": None, **cell})


def _set(where, **parts):
    return lambda nb: where(nb["cells"]).update(parts)


def _nbgrader(nb):
    return next(c for c in nb["cells"] if c["metadata"].get("nbgrader", {}).get("grade_id"))["metadata"]["nbgrader"]


# JSON that reads as a notebook but breaks nbformat's schema (or the nbgrader metadata's types),
# each as an editor or a script could write it, and whether it is "repaired" (with a note) or "refused".
BROKEN_FORMAT = {
    "grade id a list": (lambda nb: _nbgrader(nb).update(grade_id=["setup"]), "repaired"),
    "id with a slash": (_added(id="a/b"), "repaired"),
    "id of 65 characters": (_added(id="x" * 65), "repaired"),
    "id a list": (_added(id=["a"]), "repaired"),
    "two cells with one id": (_added(id="c-lookup-intro"), "repaired"),
    "tags a string": (_set(lambda cells: cells[3]["metadata"], tags="experiment"), "repaired"),
    "markdown with outputs": (_set(lambda cells: _first(cells, "markdown"), outputs=[], execution_count=None), "repaired"),
    "unknown cell type": (_set(lambda cells: cells[3], cell_type="heading"), "repaired"),
    "source null": (_set(lambda cells: cells[3], source=None), "repaired"),
    "execution count a string": (_set(lambda cells: _first(cells, "code"), execution_count="3"), "repaired"),
    "kernelspec a string": (lambda nb: nb["metadata"].update(kernelspec="python3"), "repaired"),
    "a lone surrogate": (_set(lambda cells: cells[3], source="caf\ud800"), "repaired"),
    "cell metadata a list": (_set(lambda cells: cells[3], metadata=[]), "refused"),
}


@pytest.mark.parametrize("kind", BROKEN_FORMAT)
def test_a_hand_in_that_breaks_the_notebook_format_is_repaired_or_refused(kind, tmp_path):
    """Preparing the hand-in (reading, matching, repairing, writing what nbgrader reads) never
    raises: it is repaired, with a note that says what was changed and the answers untouched, or
    refused as unreadable with a message (issue 51)."""
    from autograder.grading.handin import prepare

    ws = bare_workspace(tmp_path / "ws")
    data = json.loads(dump(solution()))
    damage, outcome = BROKEN_FORMAT[kind]
    damage(data)
    target = ws.submission_path("student", ASSIGNMENT)
    target.parent.mkdir(parents=True)
    target.write_text(json.dumps(data))
    notebook, unfit, repairs = prepare(ws, "student", ASSIGNMENT)
    if outcome == "refused":
        assert unfit is not None and unfit.status == "unreadable" and ASK_AGAIN in unfit.message
        return
    assert unfit is None, unfit.message
    assert repairs, "nothing was noted"
    written = nbformat.read(target, as_version=4)
    nbformat.validate(written)
    assert answers(written) == answers(solution())


def test_a_long_hand_in_is_prepared_with_each_cell_parsed_at_most_once(tmp_path, monkeypatch):
    """A hand-in of many one-line cells and none of the release's: repair looks for every missing
    answer among them by position and by the name it defines, and the scan reads each as the
    student's code. Each cell is parsed at most once by each, whatever the number of missing
    answers (repair parsed every cell once per missing code answer: 9 times for this notebook;
    120,000 such cells took 210 s of a grade process, issue 51)."""
    from nbformat.v4 import new_code_cell, new_notebook

    from autograder.grading import handin as grading
    from autograder.handins import repair as repair_module
    from utils import cells as cell_model

    parses = {"repair": 0, "scan": 0}

    def counting(module):
        def parse(source):
            parses[module] += 1
            return cell_model.parse(source)
        return parse

    protected = integrity.protected_names(solution())  # (read from the course's own cells, before counting)
    monkeypatch.setattr(repair_module, "parse", counting("repair"))
    monkeypatch.setattr(integrity, "parse", counting("scan"))
    ws = bare_workspace(tmp_path / "ws")
    cells = 2000
    target = ws.submission_path("long", ASSIGNMENT)
    target.parent.mkdir(parents=True)
    nbformat.write(new_notebook(cells=[new_code_cell(f"x{i} = {i}") for i in range(cells)]), target)
    notebook, unfit, _ = grading.prepare(ws, "long", ASSIGNMENT)
    assert unfit is None
    integrity.scan(notebook, release(), protected)
    assert 0 < parses["repair"] <= cells and 0 < parses["scan"] <= cells, parses
