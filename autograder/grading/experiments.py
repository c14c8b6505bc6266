"""Locked experiments are not run while grading: they grade nothing.

A notebook's experiments (training runs, plots, timings) are there for the student to
read; no test cell uses what they compute. The solution tags each such cell
`experiment` (utils.cells.EXPERIMENT_TAG), and nbgrader's autograde runs `SkipExperiments`
just before it executes a hand-in: every cell whose source is exactly the source of a
tagged cell of the assignment's source notebook is replaced by a one-line comment.

Only the grader decides which cells those are: the sources are read from the workspace's
copy of the solution (never from the hand-in, whose tags a student can change) and reach
nbgrader's process through the sandbox settings (`Settings.experiment_cells`, sha1 of the
sources as the guard names cells). A test cell is never skipped: its source is not an
experiment's, and a tag on a test cell of the solution is a CourseError. A student who
pastes an experiment's source into an answer cell finds it replaced, like the experiment.

The proofs check what this may break: the solution, graded, gets full marks and no cell of
it ends in an error (tests/test_proofs.py).
"""
from __future__ import annotations

import os

from nbgrader.preprocessors import NbGraderPreprocessor

from autograder.course.layout import CourseError
from autograder.isolation.sandbox import ENV, Settings
from utils.cells import cell_hash, grade_id, is_answer, is_experiment, is_locked, is_test, label

SKIPPED = "# A locked experiment: not run while grading (it grades nothing; its output is in your own notebook)."


def experiment_cells(source) -> list[str]:
    """The hashes of the experiment cells of `source` (the solution); CourseError when a
    tagged cell is not a locked, ungraded code cell."""
    found = []
    for index, cell in enumerate(source.cells):
        if not is_experiment(cell):
            continue
        if cell.cell_type != "code" or not is_locked(cell) or is_test(cell) or is_answer(cell) or not grade_id(cell):
            raise CourseError(f"{label(cell, index)} is tagged {cell.metadata.tags!r}, but only a locked code cell "
                              "that is neither a test nor an answer can be an experiment")
        found.append(cell_hash(cell.source))
    return sorted(found)


class SkipExperiments(NbGraderPreprocessor):
    """Replace the experiment cells of the hand-in (as named by AUTOGRADER_SANDBOX) before
    nbgrader's Execute runs it."""

    def preprocess(self, nb, resources):
        skip = set(Settings.from_env(os.environ[ENV]).experiment_cells) if os.environ.get(ENV) else set()
        for cell in nb.cells:
            if cell.cell_type == "code" and cell_hash(cell.source) in skip:
                cell.source = SKIPPED
        return nb, resources
