"""The notebook cell model: what nbgrader's metadata says a cell is, and a cell's text.

Shared by the students' `check_submission()` (utils.submission) and the grader
(autograder: repair, integrity, grading, experiments, collect), so both read a notebook the
same way. Cells are plain dicts (json.load) or nbformat nodes. Standard library only.
"""
from __future__ import annotations

import ast
import hashlib
import threading

_AST_LOCK = threading.Lock()  # ast.parse is not thread-safe in CPython 3.11 (grade --jobs uses threads)

__all__ = [
    "EXPERIMENT_TAG", "cell_hash", "grade_id", "is_answer", "is_experiment", "is_locked", "is_test", "label", "nbgrader_meta",
    "normalized_source", "parse",
]

# The Jupyter tag of a locked cell that only shows an experiment (a plot, a training run):
# it grades nothing, and the grader does not run it (autograder/grading/experiments.py).
EXPERIMENT_TAG = "experiment"


def cell_hash(source: str) -> str:
    """A cell's name in the grading kernel's log: sha1 of its source, 16 hex digits."""
    return hashlib.sha1(source.encode("utf-8", "replace")).hexdigest()[:16]


def _metadata(cell) -> dict:
    meta = cell.get("metadata") or {}
    return meta if isinstance(meta, dict) else {}


def nbgrader_meta(cell) -> dict:
    """The cell's nbgrader metadata ({} when it has none, or something that is not a dict)."""
    found = _metadata(cell).get("nbgrader")
    return found if isinstance(found, dict) else {}


def grade_id(cell) -> str | None:
    """The nbgrader grade_id of a cell, or None for a cell nbgrader does not track (a grade id
    that is not a string, which nbgrader would refuse, is none)."""
    found = nbgrader_meta(cell).get("grade_id")
    return found if isinstance(found, str) else None


def is_locked(cell) -> bool:
    """A cell the student may not change (setup, tests, given code)."""
    return bool(nbgrader_meta(cell).get("locked")) and not nbgrader_meta(cell).get("solution")


def is_answer(cell) -> bool:
    """A cell the student writes in (code or a written answer)."""
    return bool(nbgrader_meta(cell).get("solution"))


def is_test(cell) -> bool:
    """An autograded test cell: graded, not an answer."""
    return cell.get("cell_type") == "code" and bool(nbgrader_meta(cell).get("grade")) and not is_answer(cell)


def is_experiment(cell) -> bool:
    """A cell tagged as a locked experiment (whether it may be one: autograder.grading.experiments)."""
    tags = _metadata(cell).get("tags")
    return isinstance(tags, list) and EXPERIMENT_TAG in tags


def normalized_source(source) -> str:
    """A cell's source with line ends and trailing spaces normalized (a list of lines is joined)."""
    text = "".join(source) if isinstance(source, list) else str(source or "")
    return "\n".join(line.rstrip() for line in text.strip().splitlines())


def label(cell, index: int) -> str:
    """How a message names a cell: its grade id, else its place (1-based)."""
    return grade_id(cell) or f"cell {index + 1}"


def parse(source: str) -> ast.Module:
    """ast.parse, safe to call from several threads."""
    with _AST_LOCK:
        return ast.parse(source)
