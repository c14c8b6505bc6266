"""The pipeline's proofs, for every assignment (COURSE_SPEC section 4):

1. the solution notebook, autograded through nbgrader, gets full marks, its test
   cells write nothing to stderr, and no cell ends in an error (its experiments skipped);
2. the blank release gets zero on every autograded test cell;
3. every `bug` mutant of the catalog loses points, every `correct` variant keeps full marks,
   and every graded code cell has a bug of each usual kind of mistake (or a reason it has none);
4. notebooks/ equals a fresh release of solutions/ (no drift).

The solution, the blank release and all mutants of an assignment are graded together
in one batch (a class-scoped workspace, one class per assignment), then each proof reads
its part.
"""
import nbformat
import pytest

from autograder.course import layout as course
from autograder.quality import mutants
from autograder.release.build import drift

pytestmark = pytest.mark.slow

ASSIGNMENTS = course.assignments()
CATALOG = mutants.load_catalogs(mutants.default_catalogs())
BLANK = "blank-release"
MINIMUM_MUTANTS = {"bug": 10, "correct": 4}


def test_every_assignment_has_a_release_and_a_catalog():
    assert ASSIGNMENTS, "no assignments found under solutions/"
    unknown = sorted({m.id for m in CATALOG if m.assignment not in ASSIGNMENTS})
    assert not unknown, f"mutants of no known assignment: {unknown}"
    for name in ASSIGNMENTS:
        assert course.release_path(name).is_file(), f"{name}: run python -m autograder release"
        kinds = [m.kind for m in CATALOG if m.assignment == name]
        for kind, minimum in MINIMUM_MUTANTS.items():
            assert kinds.count(kind) >= minimum, f"{name}: only {kinds.count(kind)} {kind} mutants"


def test_every_graded_cell_has_a_bug_of_each_kind_of_mistake():
    gaps = [gap for name in ASSIGNMENTS for gap in mutants.coverage_gaps(name, CATALOG)]
    assert not gaps, f"{len(gaps)} gaps in the mutant catalogs:\n" + "\n".join(gaps)


class Proofs:
    """The proofs of one assignment: a class per assignment (Test_01_..., below), which
    `make test` runs whole in one worker (xdist --dist loadscope), so that two workers
    grade two assignments side by side."""

    name: str

    @pytest.fixture(scope="class")
    @classmethod
    def graded(cls, tmp_path_factory):
        """(outcomes by mutant id, scores by student) of the one grading batch."""
        root = tmp_path_factory.mktemp(cls.name)
        own = [m for m in CATALOG if m.assignment == cls.name]
        outcomes, scores = mutants.grade_mutants(cls.name, own, {BLANK: course.release_path(cls.name)}, workspace=root)
        return {o.mutant.id: o for o in outcomes}, scores

    @pytest.fixture(scope="class")
    @classmethod
    def graded_solution(cls, graded):
        """The solution's notebook as nbgrader executed it."""
        _, scores = graded
        return nbformat.read(scores[mutants.BASELINE].autograded, as_version=4)

    def test_solution_gets_full_marks(self, graded):
        _, scores = graded
        solution = scores[mutants.BASELINE]
        failed = [c.name for c in solution.auto_cells if c.score != c.max_score]
        assert solution.auto_max > 0 and not failed, f"the solution fails {failed}"

    def test_solution_test_cells_write_nothing_to_stderr(self, graded_solution):
        noisy = [
            course.grade_id(cell)
            for cell in graded_solution.cells
            if cell.get("metadata", {}).get("nbgrader", {}).get("grade") and cell.cell_type == "code"
            if any(out.get("name") == "stderr" for out in cell.outputs)
        ]
        assert not noisy, f"test cells writing to stderr on the solution: {noisy}"

    def test_solution_runs_without_an_error_when_its_experiments_are_skipped(self, graded_solution):
        """Grading skips the cells tagged as experiments (autograder/grading/experiments.py): no other cell
        may depend on what they compute."""
        failing = [
            f"{course.grade_id(cell) or index}: {out.get('ename')}: {str(out.get('evalue', ''))[:80]}"
            for index, cell in enumerate(graded_solution.cells) if cell.cell_type == "code"
            for out in cell.outputs if out.get("output_type") == "error"
        ]
        assert not failing, f"cells of the graded solution that end in an error: {failing}"

    def test_blank_release_scores_zero_on_every_test_cell(self, graded):
        _, scores = graded
        blank = scores[BLANK]
        scoring = [c.name for c in blank.auto_cells if c.score]
        assert blank.auto_cells and not scoring, f"the blank release scores in {scoring}"

    def test_mutant(self, graded, mutant):
        outcomes, _ = graded
        outcome = outcomes[mutant.id]
        expected = "caught" if mutant.kind == "bug" else "kept"
        assert outcome.status == expected, f"{mutant.id} ({mutant.description}): {outcome.status}, {outcome.detail}"


def pytest_generate_tests(metafunc):
    if "mutant" in metafunc.fixturenames:
        own = [m for m in CATALOG if m.assignment == metafunc.cls.name]
        metafunc.parametrize("mutant", own, ids=[m.id for m in own])


for _name in ASSIGNMENTS:
    globals()[f"Test_{_name}"] = type(f"Test_{_name}", (Proofs,), {"name": _name})


def test_release_is_in_sync_with_solutions():
    stale = drift(ASSIGNMENTS)
    assert not stale, f"notebooks/ is out of date for {stale}: run python -m autograder release"
