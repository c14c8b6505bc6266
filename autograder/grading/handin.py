"""`grade_one`: grade one hand-in, what every path that grades runs (`grade` of
autograder.grading.batch on threads or a Dask worker, `demo`, `mutants`):

1. the hand-in as it arrived is kept once in WORKSPACE/originals/ (never modified);
2. it is checked (a notebook at all? of this assignment?) and repaired against the
   release (`autograder.handins.repair`), the repaired notebook replacing submitted/'s copy;
3. the code the student wrote is scanned for tampering (`autograder.handins.integrity`);
4. nbgrader autogrades it: the student's cells in a kernel in the sandbox
   (`autograder.isolation.sandbox`), the test cells in the trusted runner (`autograder.isolation.boundary`);
5. the executed notebook and the guard's log give the findings, and
   `autograder.handins.status.decide_status` the status; a run that produced no scores (crash, notebook time limit, unreadable, wrong assignment) gets zero on every
   graded cell in the gradebook (`autograder.grading.gradebook`), so every student has one
   consistent row;
6. the report (status, messages, repairs, flags) goes to WORKSPACE/reports/<a>/<student>.json.
"""
from __future__ import annotations

import hashlib
import json
import re
import shutil
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import nbformat
from filelock import FileLock

from autograder.grading import gradebook
from autograder.course.layout import CourseError, assignments, error_text, load_notebook, read_notebook, release_path
from autograder.grading.experiments import experiment_cells
from autograder.handins.integrity import guard_findings, protected_names, scan
from autograder.handins.repair import affinity, repair
from autograder.isolation.sandbox import Limits, Settings
from autograder.grading.scores import NotebookScore, read_scores
from autograder.handins.status import Finding, Kind, Run, decide_status, keeps_points
from autograder.grading.workspace import KernelDied, NotebookTimeout, RunnerStopped, Verdict, Workspace, autograde, whole_file
from utils.cells import cell_hash, grade_id, is_test, label

AUTOGRADE_ATTEMPTS = 3  # an nbgrader run that met a locked gradebook runs again (it is long)


@dataclass
class GradeResult:
    student: str
    assignment: str
    status: str                   # one of autograder.handins.status.STATUSES
    score: NotebookScore | None = None
    message: str = ""
    repairs: list[str] = field(default_factory=list)
    flags: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    seconds: float | None = None  # wall time of grading the hand-in (repair to report), when it was graded here

    def to_json(self) -> dict:
        data = asdict(self)
        data["score"] = None if self.score is None else {
            "auto_score": self.score.auto_score, "auto_max": self.score.auto_max,
            "cells": {c.name: c.score for c in self.score.cells},
        }
        return data


@dataclass
class NotGradable:
    """Why a hand-in cannot be graded at all (`prepare`)."""

    run: Run
    message: str

    @property
    def status(self) -> str:
        return decide_status(self.run, [])


def keep_original(ws: Workspace, student: str, assignment: str) -> Path:
    """The hand-in as it arrived (kept once); a newer hand-in placed in submitted/ replaces it."""
    sub, orig, marker = ws.submission_path(student, assignment), ws.original_path(student, assignment), \
        ws.repaired_marker(student, assignment)
    current = hashlib.sha1(sub.read_bytes()).hexdigest()
    if not (orig.is_file() and marker.is_file() and marker.read_text() == current):
        orig.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(sub, orig)
        marker.unlink(missing_ok=True)
    return orig


def prepare(ws: Workspace, student: str, assignment: str):
    """Repair the hand-in in submitted/ from its original. Returns (repaired notebook or
    None, NotGradable when it cannot be graded, repairs)."""
    orig = keep_original(ws, student, assignment)
    try:
        handin, converted = load_notebook(orig)  # a file saved oddly is converted, and the conversion noted
    except CourseError as exc:
        return None, NotGradable(Run.UNREADABLE, str(exc).replace(str(orig), "the hand-in")), []
    release, source = read_notebook(ws.release_path(assignment)), read_notebook(ws.source_path(assignment))
    mine = affinity(handin, release, source)
    if mine < 0.5:
        others = {}
        for other in assignments():
            path = ws.release_path(other)
            if not path.is_file():  # an assignment this batch does not grade: the course's release
                path = release_path(other)
            if other != assignment and path.is_file():
                others[other] = affinity(handin, read_notebook(path), None)
        best = max(others, key=others.get, default=None)
        if best and others[best] > mine:
            message = f"this is a notebook of {best} ({others[best]:.0%} of its locked cells), not of {assignment}"
            return None, NotGradable(Run.WRONG_ASSIGNMENT, message), []
    fixed = repair(handin, release, source)
    fixed.changes[:0] = converted
    sub = ws.submission_path(student, assignment)
    nbformat.write(fixed.notebook, sub)
    ws.repaired_marker(student, assignment).write_text(hashlib.sha1(sub.read_bytes()).hexdigest())
    return fixed.notebook, None, fixed.changes


def grade_one(ws: Workspace, student: str, assignment: str, limits=None,
              verdict_only: Verdict | None = None) -> GradeResult:
    """Grade one hand-in, report and gradebook row included: what every grading path runs.
    Two grade runs on one workspace (two terminals) take turns on the same hand-in.
    `verdict_only` (the mutant harness): a verdict-only run (autograder.grading.workspace.Verdict).
    Never raises: whatever fails in preparing, grading or storing the hand-in (an error of the
    grader's own, a file it cannot write) is its status `failed`, with the error in its message,
    so one hand-in never stops a batch."""
    try:
        with FileLock(ws.lock_path(f"{assignment}-{student}")):
            return _grade_one(ws, student, assignment, limits or Limits(), verdict_only)
    except Exception as exc:  # noqa: BLE001  (any error of one hand-in is that hand-in's status)
        return scored_zero(ws, student, assignment, Run.FAILED, failure("the grader", exc))


def failure(who: str, exc: Exception) -> str:
    """The message of a hand-in whose grading raised `exc` in `who`."""
    return (f"{who} failed on this hand-in ({type(exc).__name__}: {error_text(exc)}); scored 0: grade it again "
            "alone, and if it fails the same way, report it as a bug of the grader")


def scored_zero(ws: Workspace, student: str, assignment: str, run: Run, message: str) -> GradeResult:
    """The result of a hand-in that scores 0 because its run did not complete (`run`): its
    gradebook row zeroed and its report written, or, when even that fails, its message says so.
    Never raises."""
    result = GradeResult(student, assignment, decide_status(run, []), message=message)
    try:
        gradebook.zero_grades(ws, student, assignment)
        return finish(ws, result)
    except Exception as exc:  # noqa: BLE001  (the batch goes on; the score table shows the message)
        result.message += f"; its gradebook row and report could not be written ({type(exc).__name__}: {error_text(exc)})"
        return result


def _grade_one(ws: Workspace, student: str, assignment: str, limits,
               verdict_only: Verdict | None = None) -> GradeResult:
    start = time.monotonic()
    deadline = start + limits.notebook_timeout  # the grader's own preparation counts too
    notebook, unfit, repairs = prepare(ws, student, assignment)
    findings: list[Finding] = []
    scored = []  # the scores nbgrader recorded
    if unfit is not None:
        run, message = unfit.run, unfit.message
    else:
        source = read_notebook(ws.source_path(assignment))
        findings += scan(notebook, read_notebook(ws.release_path(assignment)), protected_names(source))
        logs: list[list[dict]] = []
        run, message = _run(ws, student, assignment, limits, source, logs, deadline, verdict_only)
        if run is Run.CRASHED:
            message += _crash_cell(logs, notebook, source)
        if run is Run.COMPLETED:
            tests = {grade_id(cell) for cell in source.cells if is_test(cell)}  # run by the runner, not the kernel
            executed, outputs = _executed(ws.autograded_path(student, assignment), limits, tests)
            findings += outputs + guard_findings(logs, executed)
            scored = read_scores(ws, assignment, [student])
            if not scored:
                run, message = Run.FAILED, "nbgrader recorded no score"
    status = decide_status(run, findings)
    if not keeps_points(status):
        gradebook.zero_grades(ws, student, assignment)
        scored = []
    result = GradeResult(student, assignment, status, message=message, repairs=repairs,
                         flags=[f.text for f in findings if f.is_flag],
                         notes=[f.text for f in findings if not f.is_flag])
    result.seconds = round(time.monotonic() - start, 2)
    return finish(ws, result, scored)


def _run(ws: Workspace, student: str, assignment: str, limits, source, logs: list, deadline: float,
         verdict_only: Verdict | None = None) -> tuple[Run, str]:
    """nbgrader autograde of the hand-in in the sandbox, stopped at `deadline` (time.monotonic):
    how it ended, and why when it did not complete. `logs` receives the guard's logs."""
    settings = Settings(limits=limits, notebook=str(ws.submission_path(student, assignment)),
                        experiment_cells=experiment_cells(source))

    def attempt():
        logs.clear()
        left = deadline - time.monotonic()
        if left <= 0:
            raise NotebookTimeout("no time left")
        autograde(ws, student, assignment, settings=settings, keep=logs, verdict_only=verdict_only, timeout=left)

    try:
        gradebook.retry(attempt, attempts=AUTOGRADE_ATTEMPTS)  # nbgrader runs side by side share the gradebook
    except NotebookTimeout:
        return Run.NOTEBOOK_TIMEOUT, (f"the notebook ran past its {limits.notebook_timeout} s limit (reading, repairing "
                                      "and scanning it included) and was stopped")
    except KernelDied:
        return Run.CRASHED, "the kernel died"
    except RunnerStopped:
        return Run.RUNNER_STOPPED, (f"the trusted test runner died while it read what the kernel sent (its limit: "
                                    f"{limits.runner_memory_mb} MiB of data memory)")
    except CourseError as exc:
        return Run.FAILED, _reason(str(exc))
    return Run.COMPLETED, ""


def _reason(log: str) -> str:
    """The line of an nbgrader log that names the error."""
    errors = [l.strip() for l in log.splitlines() if re.match(r"^\s*[\w.]*(Error|Exception|Timeout)\b", l)]
    return (errors[-1] if errors else log.strip().splitlines()[-1])[:300]


def finish(ws: Workspace, result: GradeResult, scores: list | None = None) -> GradeResult:
    """The result with its score (`scores`, else read back from the gradebook), written as its report."""
    scores = scores or read_scores(ws, result.assignment, [result.student])
    result.score = scores[0] if scores else None
    if not result.message:
        result.message = "; ".join((result.flags + result.notes)[:3])
    with whole_file(ws.report_path(result.student, result.assignment)) as handle:
        json.dump(result.to_json(), handle, indent=1)
    return result


def _executed(autograded: Path, limits, in_runner: set) -> tuple[int | None, list[Finding]]:
    """How many cells ran in the kernel (not counting the test cells `in_runner` ran), and what
    the outputs say about limits hit. The kernel's errors reach us as the names and texts of
    its error outputs."""
    from autograder.isolation.boundary.execute import OUTPUT_CAP, OUTPUT_NOTE  # (it imports nbgrader)

    try:
        nb = nbformat.read(autograded, as_version=4)
    except Exception:
        return None, []
    ran, found = 0, []
    for index, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        if cell.metadata.get("nbgrader", {}).get("grade_id") not in in_runner:
            ran += cell.get("execution_count") is not None or bool(cell.get("outputs"))
        for out in cell.get("outputs", []):
            if out.get("output_type") == "stream" and str(out.get("text", "")).startswith(OUTPUT_NOTE):
                if not any(f.kind is Kind.OUTPUT for f in found):
                    found.append(Finding(Kind.OUTPUT, f"output: the grader kept the first {OUTPUT_CAP >> 20} MiB "
                                                      f"of what the kernel's cells sent ({label(cell, index)} on)"))
            if out.get("output_type") != "error":
                continue
            ename, evalue = out.get("ename", ""), str(out.get("evalue", ""))
            where = label(cell, index)
            if ename in ("CellTimeoutError", "KeyboardInterrupt", "TimeoutError"):
                if not any(f.kind is Kind.CELL_TIMEOUT for f in found):
                    found.append(Finding(Kind.CELL_TIMEOUT,
                                         f"timeout: {where} was stopped at the {limits.cell_timeout} s per-cell limit"))
            # torch says "can't allocate memory" / "not enough memory" in a RuntimeError's text: no type of its own
            elif ename == "ReplyRefused":  # autograder.isolation.boundary.runner_side: over the grader's limits, or not data
                found.append(Finding(Kind.BOUNDARY, f"boundary: {where}: {evalue[:300]}"))
            elif ename == "MemoryError" or "can't allocate memory" in evalue or "not enough memory" in evalue:
                found.append(Finding(Kind.MEMORY, f"memory: {where} ran out of memory (limit {limits.memory_mb} MiB)"))
    return ran, found


def _crash_cell(logs: list[list[dict]], notebook, source) -> str:
    """' while running cell X' for the cell that started and never finished, when the log says."""
    for events in logs:
        started = [e for e in events if e.get("event") == "cell"]
        finished = {e.get("n") for e in events if e.get("event") == "done"}
        open_cells = [e for e in started if e.get("n") not in finished]
        if not open_cells:
            continue
        digest = open_cells[-1].get("hash")
        for nb in (notebook, source):
            for index, cell in enumerate(nb.cells):
                if cell_hash(cell.source) == digest:
                    return f" while running {label(cell, index)}"
        return f" while running cell #{open_cells[-1].get('n')}"
    return ""
