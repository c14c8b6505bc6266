"""Where the course's files are, and safe loading of notebooks and assignment names."""
from __future__ import annotations

import json
import re
from pathlib import Path

import nbformat
from nbformat.reader import NotJSONError

REPO_ROOT = Path(__file__).resolve().parent.parent
SOLUTIONS_DIR = REPO_ROOT / "solutions"
RELEASE_DIR = REPO_ROOT / "notebooks"
MUTANTS_DIR = Path(__file__).resolve().parent / "mutants"
ASSIGNMENT_NAME = re.compile(r"^\d\d_[a-z0-9_]+$")


class CourseError(Exception):
    """A problem the user can fix; the CLI prints its message without a traceback."""


def assignments() -> list[str]:
    """Names of every assignment that has a solution notebook, in course order."""
    return sorted(
        path.parent.name
        for path in SOLUTIONS_DIR.glob("*/*.ipynb")
        if path.stem == path.parent.name and ASSIGNMENT_NAME.match(path.stem)
    )


def check_assignment(name: str) -> str:
    """Return `name` if it is a known assignment, else raise a CourseError listing them."""
    known = assignments()
    if name not in known:
        raise CourseError(f"no assignment named {name!r}; the course has: {', '.join(known) or 'none'}")
    return name


def solution_path(name: str) -> Path:
    return SOLUTIONS_DIR / name / f"{name}.ipynb"


def release_path(name: str) -> Path:
    return RELEASE_DIR / name / f"{name}.ipynb"


def read_notebook(path: Path) -> nbformat.NotebookNode:
    """Read a notebook, turning a missing, non-JSON or invalid file into a CourseError."""
    path = Path(path)
    if not path.is_file():
        raise CourseError(f"{path}: no such notebook file")
    try:
        nb = nbformat.read(path, as_version=4)
    except (NotJSONError, json.JSONDecodeError, UnicodeDecodeError):
        raise CourseError(f"{path}: not a notebook (the file is not valid JSON); ask for the .ipynb again") from None
    except Exception as exc:  # nbformat raises several kinds for a damaged structure
        raise CourseError(f"{path}: not a readable notebook ({type(exc).__name__}: {exc})") from None
    if not isinstance(nb.get("cells"), list):
        raise CourseError(f"{path}: not a notebook (it has no list of cells)")
    return nb


def grade_id(cell) -> str | None:
    """The nbgrader grade_id of a cell, or None for a cell nbgrader does not track."""
    return cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")
