"""`grade`: autograde every hand-in placed under WORKSPACE/submitted/.

For each student and assignment, in its own nbgrader run (N of them side by side with
`jobs`), so one bad hand-in gets a status of its own and never stops the batch:

1. the hand-in as it arrived is kept once in WORKSPACE/originals/ (never modified);
2. it is checked (a notebook at all? of this assignment?) and repaired against the
   release (`autograder.repair`), the repaired notebook replacing submitted/'s copy;
3. the code the student wrote is scanned for tampering (`autograder.integrity`);
4. nbgrader autogrades it, its kernel in the sandbox (`autograder.sandbox`);
5. the executed notebook and the guard's log give the status; a run that produced no
   scores (crash, notebook time limit, unreadable, wrong assignment) gets zero on every
   graded cell in the gradebook, so every student has one consistent row;
6. the report (status, messages, repairs, flags) goes to WORKSPACE/reports/<a>/<student>.json.

Statuses, most severe first (see STATUSES): a result keeps the points it earned unless
its status says the run produced none.
"""
from __future__ import annotations

import filecmp
import hashlib
import json
import re
import shutil
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path

import nbformat

from autograder import ledger
from autograder.course import (
    SOLUTIONS_DIR, CourseError, assignments, check_assignment, load_notebook, read_notebook, release_path,
)
from autograder.scores import NotebookScore, read_scores
from autograder.workspace import NotebookTimeout, Workspace, add_sources, autograde, ensure_scripts_on_path

STATUSES = {
    # status: (meaning, whether the hand-in keeps the points it earned)
    "unreadable": ("not a notebook (not JSON, empty, damaged); scored 0", False),
    "wrong-assignment": ("the notebook belongs to another assignment; scored 0", False),
    "crashed": ("the kernel died (os._exit, a crash, a killed process); scored 0", False),
    "timeout": ("a time limit was hit", True),  # a cell: it was interrupted; the notebook: scored 0
    "failed": ("nbgrader could not grade it; scored 0", False),
    "flagged": ("graded, but tampering was detected: review by hand", True),
    "memory-limit": ("graded; a cell ran out of memory", True),
    "output-limit": ("graded; output beyond the cap was discarded", True),
    "sandbox": ("graded; the sandbox refused network, fork or a hidden file", True),
    "graded": ("graded normally", True),
}
ORDER = list(STATUSES)
_db_lock = threading.Lock()
GUARD_DISABLED = "the integrity guard saw"


@dataclass
class GradeResult:
    student: str
    assignment: str
    status: str                   # one of STATUSES
    score: NotebookScore | None = None
    message: str = ""
    repairs: list[str] = field(default_factory=list)
    flags: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def to_json(self) -> dict:
        data = asdict(self)
        data["score"] = None if self.score is None else {
            "auto_score": self.score.auto_score, "auto_max": self.score.auto_max,
            "cells": {c.name: c.score for c in self.score.cells},
        }
        return data


def worst(statuses: list[str]) -> str:
    return min(statuses, key=ORDER.index) if statuses else "graded"


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


def grade(
    ws: Workspace,
    names: list[str],
    students: list[str] | None = None,
    jobs: int = 1,
    limits=None,
    cluster: str | None = None,
) -> list[GradeResult]:
    """Autograde the hand-ins of `names` (every assignment with hand-ins when empty),
    `jobs` notebooks at a time, or on the Dask cluster at `cluster` (autograder.cluster)."""
    if not names:
        names = sorted({p.name for p in ws.path("submitted").glob("*/*") if p.is_dir()})
        if not names:
            raise CourseError(f"nothing to grade: {ws.path('submitted')} holds no hand-ins")
    for name in names:
        check_assignment(name)
    if cluster:
        from autograder.cluster import _dask, grade_pairs

        _dask()  # says how to install it before any work
    ensure_sources(ws, names)
    ensure_scripts_on_path()
    pairs = [(s, n) for n in names for s in submitted(ws, n) if not students or s in students]
    if not cluster and pairs:
        from autograder import nbgrader_runner

        nbgrader_runner.warm_up(min(max(1, jobs), len(pairs)))  # they import nbgrader meanwhile
    if pairs:
        with _db_lock:  # create the gradebook's students up front: runs side by side only update
            _register_students(ws, sorted({s for s, _ in pairs}))
    if cluster:
        return grade_pairs(ws, pairs, cluster, limits) if pairs else []
    with ThreadPoolExecutor(max(1, jobs)) as pool:
        return list(pool.map(lambda pair: grade_one(ws, *pair, limits=limits), pairs))


def _register_students(ws: Workspace, students: list[str]) -> None:
    from nbgrader.api import Gradebook

    with Gradebook(ws.db_url) as gb:
        for student in students:
            gb.update_or_create_student(student)


def _originals(ws: Workspace, student: str, assignment: str) -> Path:
    """The hand-in as it arrived (kept once); a newer hand-in placed in submitted/ replaces it."""
    sub = ws.submission_path(student, assignment)
    orig = ws.path("originals", student, assignment, sub.name)
    marker = orig.with_name(".repaired.sha1")
    current = hashlib.sha1(sub.read_bytes()).hexdigest()
    if not (orig.is_file() and marker.is_file() and marker.read_text() == current):
        orig.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(sub, orig)
        marker.unlink(missing_ok=True)
    return orig


def release_notebook(ws: Workspace, assignment: str):
    return read_notebook(ws.path("release", assignment, f"{assignment}.ipynb"))


def source_notebook(ws: Workspace, assignment: str):
    return read_notebook(ws.path("source", assignment, f"{assignment}.ipynb"))


def prepare(ws: Workspace, student: str, assignment: str):
    """Repair the hand-in in submitted/ from its original. Returns (repaired notebook or
    None, a GradeResult when it cannot be graded, repairs)."""
    from autograder.repair import affinity, repair

    orig = _originals(ws, student, assignment)
    try:
        handin, converted = load_notebook(orig)  # a file saved oddly is converted, and the conversion noted
    except CourseError as exc:
        return None, GradeResult(student, assignment, "unreadable", message=str(exc).replace(str(orig), "the hand-in")), []
    release, source = release_notebook(ws, assignment), source_notebook(ws, assignment)
    mine = affinity(handin, release, source)
    if mine < 0.5:
        others = {}
        for other in assignments():
            path = ws.path("release", other, f"{other}.ipynb")
            if not path.is_file():  # an assignment this batch does not grade: the course's release
                path = release_path(other)
            if other != assignment and path.is_file():
                others[other] = affinity(handin, read_notebook(path), None)
        best = max(others, key=others.get, default=None)
        if best and others[best] > mine:
            message = f"this is a notebook of {best} ({others[best]:.0%} of its locked cells), not of {assignment}"
            return None, GradeResult(student, assignment, "wrong-assignment", message=message), []
    fixed = repair(handin, release, source)
    fixed.changes[:0] = converted
    sub = ws.submission_path(student, assignment)
    nbformat.write(fixed.notebook, sub)
    orig.with_name(".repaired.sha1").write_text(hashlib.sha1(sub.read_bytes()).hexdigest())
    return fixed.notebook, None, fixed.changes


def grade_one(ws: Workspace, student: str, assignment: str, limits=None) -> GradeResult:
    from autograder.integrity import guard_findings, protected_names, scan
    from autograder.sandbox import Limits, Settings

    limits = limits or Limits()
    notebook, early, repairs = prepare(ws, student, assignment)
    if early is not None:
        zero_grades(ws, assignment, student)
        return _finish(ws, early, read_scores(ws, assignment, [student]))
    source = source_notebook(ws, assignment)
    flags = scan(notebook, release_notebook(ws, assignment), protected_names(source))
    tests = ledger.test_cells(source)
    settings = Settings(limits=limits, notebook=str(ws.submission_path(student, assignment)),
                        protected_names=protected_names(source), test_cells=sorted(tests))
    logs: list[list[dict]] = []
    status, message = "graded", ""
    try:
        for attempt in range(3):  # nbgrader runs side by side share one SQLite gradebook
            try:
                logs.clear()
                autograde(ws, assignment, student, settings=settings, keep=logs)
                break
            except CourseError as exc:
                if "database is locked" not in str(exc) or attempt == 2 or isinstance(exc, NotebookTimeout):
                    raise
                time.sleep(1 + attempt)
    except NotebookTimeout:
        status, message = "timeout", f"the notebook ran past its {limits.notebook_timeout} s limit and was stopped"
    except CourseError as exc:
        log = str(exc)
        if "DeadKernelError" in log or "Kernel died" in log or "kernel died" in log.lower():
            status = "crashed"
            message = "the kernel died" + _crash_cell(logs, notebook, source)
        else:
            status, message = "failed", _reason(log)
    result = GradeResult(student, assignment, status, message=message, repairs=repairs, flags=flags)
    if status != "graded":
        zero_grades(ws, assignment, student)
        return _finish(ws, result, read_scores(ws, assignment, [student]))
    executed, events = _executed(ws.autograded_path(student, assignment), limits)
    guard_flags, notes = guard_findings(logs, executed)
    result.flags += guard_flags
    if any(f.startswith(GUARD_DISABLED) for f in guard_flags):
        zero_grades(ws, assignment, student)  # nothing that ran after it can be trusted
        result.message = "points withheld: a cell disabled the integrity guard; review by hand"
    result.notes = events + notes
    result.flags += _judge_verdicts(ws, student, assignment, logs, tests, limits)
    statuses = [s for s, text in (("timeout", "timeout"), ("memory-limit", "memory"), ("output-limit", "output"),
                                  ("sandbox", "network"), ("sandbox", "process"), ("sandbox", "hidden-path"))
                if any(n.startswith(text) for n in result.notes)]
    if result.flags:
        statuses.append("flagged")
    result.status = worst(statuses)
    scores = read_scores(ws, assignment, [student])
    if not scores:
        result.status, result.message = "failed", "nbgrader recorded no score"
    return _finish(ws, result, scores)


def _judge_verdicts(ws: Workspace, student: str, assignment: str, logs, tests: dict, limits) -> list[str]:
    """Withhold the points of every test cell whose checks did not run as on the solution
    (autograder/ledger.py); one flag per cell withheld."""
    try:
        expected = calibrate(ws, assignment, limits)
    except CourseError as exc:
        return [f"the test cells could not be verified: {exc}"]
    reasons = ledger.judge([e for events in logs for e in events], tests, expected)
    if not reasons:
        return []
    return [f"{name}: points withheld, {why}" for name, why in _withhold(ws, assignment, student, reasons)]


def calibrate(ws: Workspace, assignment: str, limits=None) -> dict:
    """The solution's verdicts for `assignment` (cached in WORKSPACE/calibration/)."""
    from autograder.sandbox import Limits

    limits = limits or Limits()
    return ledger.calibration(ws, assignment, lambda root, path: _calibration_run(root, assignment, path, limits))


def _calibration_run(root: Path, assignment: str, source: Path, limits) -> list[dict]:
    """Grade the solution in a scratch workspace at `root`; the guard's events."""
    from autograder.integrity import protected_names
    from autograder.sandbox import Settings
    from autograder.workspace import add_submission, open_workspace

    scratch = open_workspace(root)
    add_sources(scratch, [assignment])
    add_submission(scratch, "solution", assignment, source)
    nb = source_notebook(scratch, assignment)
    settings = Settings(limits=limits, notebook=str(scratch.submission_path("solution", assignment)),
                        protected_names=protected_names(nb), test_cells=sorted(ledger.test_cells(nb)))
    logs: list[list[dict]] = []
    autograde(scratch, assignment, "solution", settings=settings, keep=logs)
    return [e for events in logs for e in events]


def _withhold(ws: Workspace, assignment: str, student: str, reasons: dict[str, str]) -> list[tuple[str, str]]:
    """Set to 0 the test cells of `reasons` that nbgrader scored above 0; (cell, why) of each."""
    import warnings

    from nbgrader.api import Gradebook
    from sqlalchemy.exc import OperationalError, SAWarning

    for attempt in range(5):
        try:
            withheld = []
            with _db_lock, Gradebook(ws.db_url) as gb, warnings.catch_warnings():
                warnings.simplefilter("ignore", SAWarning)
                for nb in gb.find_assignment(assignment).notebooks:
                    for g in gb.find_submission_notebook(nb.name, assignment, student).grades:
                        if g.name in reasons and (g.auto_score or 0) > 0:
                            g.auto_score = 0
                            withheld.append((g.name, reasons[g.name]))
                gb.db.commit()
            return withheld
        except OperationalError:  # the gradebook is locked by an nbgrader run beside us
            if attempt == 4:
                raise
            time.sleep(1 + attempt)
    return []


def _reason(log: str) -> str:
    """The line of an nbgrader log that names the error."""
    errors = [l.strip() for l in log.splitlines() if re.match(r"^\s*[\w.]*(Error|Exception|Timeout)\b", l)]
    return (errors[-1] if errors else log.strip().splitlines()[-1])[:300]


def _finish(ws: Workspace, result: GradeResult, scores: list[NotebookScore]) -> GradeResult:
    result.score = scores[0] if scores else None
    if not result.message:
        result.message = "; ".join((result.flags + result.notes)[:3])
    report = ws.path("reports", result.assignment, f"{result.student}.json")
    report.parent.mkdir(parents=True, exist_ok=True)
    report.write_text(json.dumps(result.to_json(), indent=1))
    return result


def _executed(autograded: Path, limits) -> tuple[int | None, list[str]]:
    """How many cells ran, and what the outputs say about limits hit."""
    try:
        nb = nbformat.read(autograded, as_version=4)
    except Exception:
        return None, []
    from autograder.repair import label

    ran, events = 0, []
    for index, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        ran += cell.get("execution_count") is not None or bool(cell.get("outputs"))
        for out in cell.get("outputs", []):
            if out.get("output_type") != "error":
                continue
            ename, evalue = out.get("ename", ""), str(out.get("evalue", ""))
            where = label(cell, index)
            if ename in ("CellTimeoutError", "KeyboardInterrupt", "TimeoutError") and "timeout" not in " ".join(events):
                events.append(f"timeout: {where} was stopped at the {limits.cell_timeout} s per-cell limit")
            elif ename == "MemoryError" or "can't allocate memory" in evalue or "not enough memory" in evalue:
                events.append(f"memory: {where} ran out of memory (limit {limits.memory_mb} MiB)")
    return ran, events


def _crash_cell(logs: list[list[dict]], notebook, source) -> str:
    """' in cell X' for the cell that started and never finished, when the log says."""
    for events in logs:
        started = [e for e in events if e.get("event") == "cell"]
        finished = {e.get("n") for e in events if e.get("event") == "done"}
        open_cells = [e for e in started if e.get("n") not in finished]
        if not open_cells:
            continue
        digest = open_cells[-1].get("hash")
        from autograder.repair import label

        for nb in (notebook, source):
            for index, cell in enumerate(nb.cells):
                if hashlib.sha1(cell.source.encode("utf-8", "replace")).hexdigest()[:16] == digest:
                    return f" while running {label(cell, index)}"
        return f" while running cell #{open_cells[-1].get('n')}"
    return ""


def zero_grades(ws: Workspace, assignment: str, student: str) -> None:
    """One row of zeros for a hand-in whose run produced no scores (as nbgrader does for
    a missing notebook), replacing whatever a killed run left half written."""
    from sqlalchemy.exc import OperationalError

    for attempt in range(5):
        try:
            return _zero_grades(ws, assignment, student)
        except OperationalError:  # the gradebook is locked by an nbgrader run beside us
            if attempt == 4:
                raise
            time.sleep(1 + attempt)


def _zero_grades(ws: Workspace, assignment: str, student: str) -> None:
    import warnings

    from nbgrader.api import Gradebook, MissingEntry
    from sqlalchemy.exc import SAWarning

    with _db_lock, Gradebook(ws.db_url) as gb, warnings.catch_warnings():
        warnings.simplefilter("ignore", SAWarning)  # nbgrader's add_submission autoflushes early
        gb.update_or_create_student(student)
        try:
            gb.find_submission(assignment, student)
        except MissingEntry:
            gb.add_submission(assignment, student)
        for nb in gb.find_assignment(assignment).notebooks:
            sub = gb.find_submission_notebook(nb.name, assignment, student)
            for g in sub.grades:
                g.auto_score = 0
                g.manual_score = None
                g.needs_manual_grade = False
        gb.db.commit()


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
