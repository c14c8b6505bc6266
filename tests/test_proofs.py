"""The pipeline's proofs, for every assignment (COURSE_SPEC section 4):

1. the solution notebook, autograded through nbgrader, gets full marks, its test
   cells write nothing to stderr, and no cell ends in an error (its experiments skipped);
2. the blank release gets zero on every autograded test cell;
3. every `bug` mutant of the catalog loses points, every `correct` variant keeps full marks;
4. notebooks/ equals a fresh release of solutions/ (no drift).

The solution, the blank release and all mutants of an assignment are graded together
in one nbgrader run (a module-scoped workspace), then each proof reads its part.
"""
import functools

import nbformat
import pytest

from autograder import course, mutants
from autograder.release import drift

pytestmark = pytest.mark.slow

ASSIGNMENTS = course.assignments()
CATALOG = mutants.load_catalogs(mutants.default_catalogs())
BLANK = "blank-release"
MINIMUM_MUTANTS = {"bug": 10, "correct": 4}


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    """assignment → (outcomes by mutant id, scores by student)."""

    @functools.cache
    def grade(name):
        root = tmp_path_factory.mktemp(name)
        own = [m for m in CATALOG if m.assignment == name]
        outcomes, scores = mutants.grade_mutants(name, own, {BLANK: course.release_path(name)}, workspace=root)
        return {o.mutant.id: o for o in outcomes}, scores

    return grade


def test_every_assignment_has_a_release_and_a_catalog():
    assert ASSIGNMENTS, "no assignments found under solutions/"
    for name in ASSIGNMENTS:
        assert course.release_path(name).is_file(), f"{name}: run python -m autograder release"
        kinds = [m.kind for m in CATALOG if m.assignment == name]
        for kind, minimum in MINIMUM_MUTANTS.items():
            assert kinds.count(kind) >= minimum, f"{name}: only {kinds.count(kind)} {kind} mutants"


@pytest.mark.parametrize("name", ASSIGNMENTS)
def test_solution_gets_full_marks(graded, name):
    _, scores = graded(name)
    solution = scores[mutants.BASELINE]
    failed = [c.name for c in solution.auto_cells if c.score != c.max_score]
    assert solution.auto_max > 0 and not failed, f"the solution fails {failed}"


def _graded_solution(graded, name):
    """The solution's notebook as nbgrader executed it."""
    _, scores = graded(name)
    return nbformat.read(scores[mutants.BASELINE].autograded, as_version=4)


@pytest.mark.parametrize("name", ASSIGNMENTS)
def test_solution_test_cells_write_nothing_to_stderr(graded, name):
    nb = _graded_solution(graded, name)
    noisy = [
        course.grade_id(cell)
        for cell in nb.cells
        if cell.get("metadata", {}).get("nbgrader", {}).get("grade") and cell.cell_type == "code"
        if any(out.get("name") == "stderr" for out in cell.outputs)
    ]
    assert not noisy, f"test cells writing to stderr on the solution: {noisy}"


@pytest.mark.parametrize("name", ASSIGNMENTS)
def test_solution_runs_without_an_error_when_its_experiments_are_skipped(graded, name):
    """Grading skips the cells tagged as experiments (autograder/experiments.py): no other cell
    may depend on what they compute."""
    nb = _graded_solution(graded, name)
    failing = [
        f"{course.grade_id(cell) or index}: {out.get('ename')}: {str(out.get('evalue', ''))[:80]}"
        for index, cell in enumerate(nb.cells) if cell.cell_type == "code"
        for out in cell.outputs if out.get("output_type") == "error"
    ]
    assert not failing, f"cells of the graded solution that end in an error: {failing}"


@pytest.mark.parametrize("name", ASSIGNMENTS)
def test_blank_release_scores_zero_on_every_test_cell(graded, name):
    _, scores = graded(name)
    blank = scores[BLANK]
    scoring = [c.name for c in blank.auto_cells if c.score]
    assert blank.auto_cells and not scoring, f"the blank release scores in {scoring}"


@pytest.mark.parametrize("mutant", CATALOG, ids=[m.id for m in CATALOG])
def test_mutant(graded, mutant):
    if mutant.assignment not in ASSIGNMENTS:
        pytest.fail(f"{mutant.id}: no assignment named {mutant.assignment!r}")
    outcomes, _ = graded(mutant.assignment)
    outcome = outcomes[mutant.id]
    expected = "caught" if mutant.kind == "bug" else "kept"
    assert outcome.status == expected, f"{mutant.id} ({mutant.description}): {outcome.status}, {outcome.detail}"


def test_release_is_in_sync_with_solutions():
    stale = drift(ASSIGNMENTS)
    assert not stale, f"notebooks/ is out of date for {stale}: run python -m autograder release"
