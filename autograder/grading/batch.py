"""`grade`: autograde a batch of hand-ins, the ones placed under WORKSPACE/submitted/.

Each hand-in is graded by `autograder.grading.handin.grade_one` in its own nbgrader run: `jobs` of
them side by side on threads, or on the Dask cluster at `cluster` (autograder.grading.cluster), so
one bad hand-in gets a status of its own and never stops the batch. `score_table` is what
`grade` prints.
"""
from __future__ import annotations

import filecmp
from concurrent.futures import ThreadPoolExecutor

from autograder.grading import gradebook
from autograder.isolation import nbgrader_runner
from autograder.course.layout import SOLUTIONS_DIR, CourseError, check_assignment
from autograder.grading.handin import GradeResult, grade_one
from autograder.handins.status import STATUSES
from autograder.grading.workspace import Verdict, Workspace, add_sources, ensure_scripts_on_path


def ensure_sources(ws: Workspace, names: list[str]) -> None:
    """(Re)build the workspace's copy of each assignment when the solution changed."""
    stale = []
    for name in names:
        ours, theirs = SOLUTIONS_DIR / name / f"{name}.ipynb", ws.source_path(name)
        if not (theirs.is_file() and ws.release_path(name).is_file() and filecmp.cmp(ours, theirs, shallow=False)):
            stale.append(name)
    if stale:
        add_sources(ws, stale)


def submitted(ws: Workspace, assignment: str) -> list[str]:
    """Students with a hand-in of `assignment` in the workspace."""
    return sorted(p.parent.parent.name for p in ws.path("submitted").glob(f"*/{assignment}/{assignment}.ipynb"))


def grade(
    ws: Workspace,
    names: list[str],
    students: list[str] | None = None,
    jobs: int = 1,
    limits=None,
    cluster: str | None = None,
    verdict_only: dict[str, Verdict] | None = None,
) -> list[GradeResult]:
    """Autograde the hand-ins of `names` (every assignment with hand-ins when empty),
    `jobs` notebooks at a time, or on the Dask cluster at `cluster` (autograder.grading.cluster).
    The students in `verdict_only` (the mutant harness; local runs only) get verdict-only runs
    (autograder.grading.workspace.Verdict)."""
    if not names:
        names = sorted({p.name for p in ws.path("submitted").glob("*/*") if p.is_dir()})
        if not names:
            raise CourseError(f"nothing to grade: {ws.path('submitted')} holds no hand-ins")
    for name in names:
        check_assignment(name)
    if cluster:
        if verdict_only:
            raise CourseError("verdict-only grading runs locally, not on a cluster")
        from autograder.grading.cluster import _dask, grade_pairs  # Dask is optional: only when asked for

        _dask()  # says how to install it before any work
    # A second `grade` on the same workspace (another terminal, another instructor) waits for
    # this one: the sources and releases it rewrites are read by this run's nbgrader.
    with gradebook.workspace_lock(ws):
        ensure_sources(ws, names)
        ensure_scripts_on_path()
        pairs = [(s, n) for n in names for s in submitted(ws, n) if not students or s in students]
        if not cluster and pairs:
            nbgrader_runner.warm_up(min(max(1, jobs), len(pairs)))  # they import nbgrader meanwhile
        if pairs:
            gradebook.register_students(ws, sorted({s for s, _ in pairs}))
        if cluster:
            return grade_pairs(ws, pairs, cluster, limits) if pairs else []
        with ThreadPoolExecutor(max(1, jobs)) as pool:
            return list(pool.map(
                lambda pair: grade_one(ws, *pair, limits=limits, verdict_only=(verdict_only or {}).get(pair[0])), pairs))


def score_table(results: list[GradeResult]) -> str:
    rows = [("assignment", "student", "status", "autograded score", "failed test cells / reason")]
    for r in results:
        if r.score is None:
            rows.append((r.assignment, r.student, r.status, "-", r.message))
            continue
        failed = [c.name for c in r.score.auto_cells if (c.score or 0) < c.max_score]
        detail = ", ".join(failed) if failed else "none"
        if not STATUSES.get(r.status, ("", True))[1]:  # scored 0 as a whole: say why, not which cells
            detail = r.message
        elif r.status != "graded" and r.message:
            detail += f" | {r.message}"
        rows.append((r.assignment, r.student, r.status, f"{r.score.auto_score:g}/{r.score.auto_max:g}", detail))
    widths = [max(len(row[i]) for row in rows) for i in range(4)]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row[:4], widths)) + "  " + row[4] for row in rows]
    lines.insert(1, "-" * len(lines[0]))
    return "\n".join(lines)
