"""`grade`: autograde every hand-in placed under WORKSPACE/submitted/.

Each student's notebook is graded in its own nbgrader run, so one broken hand-in gets
a status of its own and never stops the batch.
"""
from __future__ import annotations

import filecmp
from dataclasses import dataclass

from autograder.course import SOLUTIONS_DIR, CourseError, check_assignment, read_notebook
from autograder.scores import NotebookScore, read_scores
from autograder.workspace import Workspace, add_sources, autograde


@dataclass
class GradeResult:
    student: str
    assignment: str
    status: str                   # graded | unreadable | failed
    score: NotebookScore | None = None
    message: str = ""


def ensure_sources(ws: Workspace, names: list[str]) -> None:
    """(Re)build the workspace's copy of each assignment when the solution changed."""
    stale = []
    for name in names:
        ours, theirs = SOLUTIONS_DIR / name / f"{name}.ipynb", ws.path("source", name, f"{name}.ipynb")
        released = ws.path("release", name, f"{name}.ipynb")
        if not (theirs.is_file() and released.is_file() and filecmp.cmp(ours, theirs, shallow=False)):
            stale.append(name)
    if stale:
        add_sources(ws, stale)


def submitted(ws: Workspace, assignment: str) -> list[str]:
    """Students with a hand-in of `assignment` in the workspace."""
    return sorted(p.parent.parent.name for p in ws.path("submitted").glob(f"*/{assignment}/{assignment}.ipynb"))


def grade(ws: Workspace, names: list[str], students: list[str] | None = None) -> list[GradeResult]:
    """Autograde the hand-ins of `names` (every assignment with hand-ins when empty)."""
    if not names:
        names = sorted({p.name for p in ws.path("submitted").glob("*/*") if p.is_dir()})
        if not names:
            raise CourseError(f"nothing to grade: {ws.path('submitted')} holds no hand-ins")
    for name in names:
        check_assignment(name)
    ensure_sources(ws, names)
    results = []
    for name in names:
        for student in submitted(ws, name):
            if students and student not in students:
                continue
            results.append(grade_one(ws, student, name))
    return results


def grade_one(ws: Workspace, student: str, assignment: str) -> GradeResult:
    try:
        read_notebook(ws.submission_path(student, assignment))
    except CourseError as exc:
        return GradeResult(student, assignment, "unreadable", message=str(exc))
    try:
        autograde(ws, assignment, student)
    except CourseError as exc:
        return GradeResult(student, assignment, "failed", message=str(exc).splitlines()[-1])
    scores = read_scores(ws, assignment, [student])
    if not scores:
        return GradeResult(student, assignment, "failed", message="nbgrader recorded no score")
    return GradeResult(student, assignment, "graded", scores[0])


def score_table(results: list[GradeResult]) -> str:
    rows = [("assignment", "student", "status", "autograded score", "failed test cells")]
    for r in results:
        if r.score is None:
            rows.append((r.assignment, r.student, r.status, "-", r.message))
            continue
        failed = [c.name for c in r.score.auto_cells if (c.score or 0) < c.max_score]
        rows.append(
            (
                r.assignment,
                r.student,
                r.status,
                f"{r.score.auto_score:g}/{r.score.auto_max:g}",
                ", ".join(failed) if failed else "none",
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(4)]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row[:4], widths)) + "  " + row[4] for row in rows]
    lines.insert(1, "-" * len(lines[0]))
    return "\n".join(lines)
