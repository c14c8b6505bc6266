"""Locked experiments are not run while grading (autograder/grading/experiments.py)."""
import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_notebook

from autograder.course import layout as course
from autograder.course.layout import CourseError
from autograder.grading.experiments import SKIPPED, SkipExperiments, experiment_cells
from autograder.isolation.sandbox import ENV, Settings
from utils.cells import EXPERIMENT_TAG, cell_hash, is_experiment, is_test


def _cell(source, grade_id, *, locked=True, grade=False, solution=False, tags=()):
    meta = {"nbgrader": {"grade_id": grade_id, "locked": locked, "grade": grade, "solution": solution,
                         "schema_version": 3, "task": False}}
    if grade:
        meta["nbgrader"]["points"] = 1
    if tags:
        meta["tags"] = list(tags)
    return new_code_cell(source, metadata=meta)


def _source():
    return new_notebook(cells=[
        _cell("import math", "setup"),
        _cell("def f(x):\n    return x", "f", locked=False, solution=True),
        _cell("assert f(1) == 1", "test_f", grade=True),
        _cell("print('a long training run')", "exp_train", tags=[EXPERIMENT_TAG]),
    ])


def test_experiment_cells_are_the_tagged_locked_cells():
    source = _source()
    assert len(experiment_cells(source)) == 1
    assert [c.metadata.nbgrader.grade_id for c in source.cells if is_experiment(c)] == ["exp_train"]


@pytest.mark.parametrize("kind", ["test", "answer", "unlocked"])
def test_a_tag_on_a_cell_that_cannot_be_an_experiment_is_a_course_error(kind):
    source = _source()
    cell = {"test": source.cells[2], "answer": source.cells[1], "unlocked": new_code_cell("x = 1")}[kind]
    if kind == "unlocked":
        source.cells.append(cell)
    cell.metadata["tags"] = [EXPERIMENT_TAG]
    with pytest.raises(CourseError, match="experiment"):
        experiment_cells(source)


def test_only_the_sources_the_grader_names_are_replaced_whatever_the_hand_in_tags(monkeypatch):
    source = _source()
    monkeypatch.setenv(ENV, Settings(experiment_cells=experiment_cells(source)).to_env())
    handin = nbformat.from_dict(nbformat.v4.new_notebook(cells=[dict(c) for c in _source().cells]))
    for cell in handin.cells:  # a student tags every cell of the hand-in, the test included
        cell.metadata["tags"] = [EXPERIMENT_TAG]
    handin.cells[3].metadata.pop("tags")  # ... and untags the experiment
    handin.cells.append(_cell("print('a long training run')", "mine", locked=False, solution=True))
    out, _ = SkipExperiments().preprocess(handin, {})
    assert [c.source for c in out.cells] == ["import math", "def f(x):\n    return x", "assert f(1) == 1",
                                             SKIPPED, SKIPPED]


def test_without_sandbox_settings_nothing_is_replaced(monkeypatch):
    monkeypatch.delenv(ENV, raising=False)
    out, _ = SkipExperiments().preprocess(_source(), {})
    assert [c.source for c in out.cells] == [c.source for c in _source().cells]


@pytest.mark.parametrize("name", course.assignments())
def test_every_notebook_names_its_experiments_and_no_test_is_one(name):
    source = course.read_notebook(course.solution_path(name))
    assert experiment_cells(source), f"{name}: no cell is tagged {EXPERIMENT_TAG!r}"
    assert not set(experiment_cells(source)) & {cell_hash(c.source) for c in source.cells if is_test(c)}
