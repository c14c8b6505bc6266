"""Notebooks as a student has them: the release, with answers filled in, executed in a kernel."""
from __future__ import annotations

import copy
import os
import re

import nbformat

from autograder import course

MARKER_LINE = re.compile(r"^\s*### (BEGIN|END) SOLUTION\s*$", re.MULTILINE)


def completed_notebook(name: str):
    """The release notebook of `name` with every answer cell filled in from the solution
    (without the solution markers): what a student who did everything hands in."""
    release = course.read_notebook(course.release_path(name))
    answers = {
        course.grade_id(c): MARKER_LINE.sub("", c.source).replace("\n\n\n", "\n\n")
        for c in course.read_notebook(course.solution_path(name)).cells
        if c.get("metadata", {}).get("nbgrader", {}).get("solution")
    }
    done = copy.deepcopy(release)
    for cell in done.cells:
        if course.grade_id(cell) in answers:
            cell.source = answers[course.grade_id(cell)]
    return done


def execute(nb, cwd, env: dict | None = None, timeout: int = 120):
    """Run `nb` top to bottom in a fresh kernel started in `cwd` (errors are kept as outputs)."""
    import nbclient

    old = dict(os.environ)
    os.environ.update(env or {})
    try:
        client = nbclient.NotebookClient(
            nb, timeout=timeout, allow_errors=True, kernel_name="python3",
            resources={"metadata": {"path": str(cwd)}},
        )
        client.execute()
    finally:
        os.environ.clear()
        os.environ.update(old)
    return nb


def outputs_text(cell, name: str = "stdout") -> str:
    return "".join(o.get("text", "") for o in cell.get("outputs", []) if o.get("name") == name)


def errors(cell) -> list[str]:
    return [f"{o['ename']}: {o['evalue']}" for o in cell.get("outputs", []) if o.get("output_type") == "error"]


def write(nb, path) -> None:
    nbformat.write(nb, str(path))
