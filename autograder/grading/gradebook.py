"""The gradebook (WORKSPACE/gradebook.db, nbgrader's SQLite database): every write the
grader makes to it, and the lock and retries that keep grade runs side by side apart.

Writers: the grader's own (`register_students`, `zero_grades`, `write_rows`),
and nbgrader's autograde runs (one per hand-in, in other processes). The grader's writes
hold a file lock beside the database (`lock`), so grade runs in threads (`--jobs`) and in
other processes (a second terminal, another instructor) take turns. nbgrader's runs do not
take that lock: a write that meets one of theirs gets SQLite's "database is locked" and is
tried again (`retry`), on both sides.
"""
from __future__ import annotations

import datetime
import time
import warnings

from filelock import FileLock
from nbgrader.api import Gradebook, MissingEntry
from sqlalchemy.exc import OperationalError, SAWarning

from autograder.grading.workspace import GradebookLocked, Workspace

ATTEMPTS = 5


def lock(ws: Workspace) -> FileLock:
    """The lock of the grader's writes to `ws`'s gradebook (threads and processes)."""
    return FileLock(ws.lock_path("gradebook"))


def workspace_lock(ws: Workspace) -> FileLock:
    """The lock of a whole `grade` run on `ws`: two runs on one workspace take turns."""
    return FileLock(ws.lock_path("grade"))


def retry(action, attempts: int = ATTEMPTS):
    """`action()`, tried again (after 1, 2, ... s) while the gradebook is locked by a writer
    beside us: SQLAlchemy's OperationalError in this process, GradebookLocked from an
    nbgrader run."""
    for attempt in range(attempts):
        try:
            return action()
        except (OperationalError, GradebookLocked):
            if attempt == attempts - 1:
                raise
            time.sleep(1 + attempt)


def register_students(ws: Workspace, students: list[str]) -> None:
    """Create the students' rows up front: grade runs side by side then only update."""
    def write():
        with lock(ws), Gradebook(ws.db_url) as gb:
            for student in students:
                gb.update_or_create_student(student)
    retry(write)


def zero_grades(ws: Workspace, student: str, assignment: str) -> None:
    """One row of zeros for a hand-in whose run produced no scores (as nbgrader does for
    a missing notebook), replacing whatever a killed run left half written."""
    def write():
        with lock(ws), Gradebook(ws.db_url) as gb, warnings.catch_warnings():
            warnings.simplefilter("ignore", SAWarning)  # nbgrader's add_submission autoflushes early
            gb.update_or_create_student(student)
            try:
                gb.find_submission(assignment, student)
            except MissingEntry:
                gb.add_submission(assignment, student)
            for nb in gb.find_assignment(assignment).notebooks:
                for g in gb.find_submission_notebook(nb.name, assignment, student).grades:
                    g.auto_score = 0
                    g.manual_score = None
                    g.needs_manual_grade = False
            gb.db.commit()
    retry(write)


def submission_rows(ws: Workspace, student: str, assignment: str) -> dict | None:
    """The rows nbgrader wrote for one submission: its timestamp, and every grade and comment."""
    with Gradebook(ws.db_url) as gb:
        try:
            sub = gb.find_submission(assignment, student)
        except MissingEntry:
            return None
        rows = {"timestamp": sub.timestamp.isoformat() if sub.timestamp else None, "extension": None,
                "notebooks": {}}
        if sub.extension is not None:
            rows["extension"] = sub.extension.total_seconds()
        for nb in sub.notebooks:
            rows["notebooks"][nb.name] = {
                "flagged": nb.flagged, "late_submission_penalty": nb.late_submission_penalty,
                "grades": {g.name: {"auto_score": g.auto_score, "manual_score": g.manual_score,
                                    "extra_credit": g.extra_credit, "needs_manual_grade": g.needs_manual_grade}
                           for g in nb.grades},
                "comments": {c.name: {"auto_comment": c.auto_comment, "manual_comment": c.manual_comment}
                             for c in nb.comments},
            }
        return rows


def write_rows(ws: Workspace, student: str, assignment: str, rows: dict) -> None:
    """Write the rows of `submission_rows` (from another workspace) into `ws`'s gradebook."""
    def write():
        with lock(ws), Gradebook(ws.db_url) as gb, warnings.catch_warnings():
            warnings.simplefilter("ignore", SAWarning)
            gb.update_or_create_student(student)
            try:
                sub = gb.find_submission(assignment, student)
            except MissingEntry:
                sub = gb.add_submission(assignment, student)
            sub.timestamp = datetime.datetime.fromisoformat(rows["timestamp"]) if rows["timestamp"] else None
            sub.extension = None if rows["extension"] is None else datetime.timedelta(seconds=rows["extension"])
            for name, nb_rows in rows["notebooks"].items():
                nb = gb.find_submission_notebook(name, assignment, student)
                nb.flagged = nb_rows["flagged"]
                nb.late_submission_penalty = nb_rows["late_submission_penalty"]
                for grade in nb.grades:
                    for key, value in nb_rows["grades"].get(grade.name, {}).items():
                        setattr(grade, key, value)
                for comment in nb.comments:
                    for key, value in nb_rows["comments"].get(comment.name, {}).items():
                        setattr(comment, key, value)
            gb.db.commit()
    retry(write)
