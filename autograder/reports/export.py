"""`export`: CSV files of the autograded scores.

OUT/grades.csv          one row per student and assignment: totals, the grading status
                        and the reason (WORKSPACE/reports/), and the count of written
                        answers still to grade
OUT/<assignment>.csv    one row per student: one column per graded cell (question), then
                        the total and the status
OUT/questions.csv       one row per student, assignment and question (long format)
OUT/lms.csv             one row per student: one column per assignment (total points),
                        then the course total, ready to upload to an LMS grade book
A manually graded answer that nobody has graded yet is left blank and counted in
"pending_manual". Each file appears whole or not at all (autograder.grading.workspace.whole_file).
"""
from __future__ import annotations

import csv
import json
from pathlib import Path

from autograder.course.layout import CourseError, assignments
from autograder.grading.scores import read_scores
from autograder.grading.workspace import Workspace, whole_file


def _status(ws: Workspace, student: str, assignment: str) -> tuple[str, str]:
    path = ws.report_path(student, assignment)
    if not path.is_file():
        return "graded", ""
    report = json.loads(path.read_text())
    return report.get("status", ""), report.get("message", "")


def export(ws: Workspace, out_dir: Path) -> list[Path]:
    from nbgrader.api import MissingEntry

    if not ws.db_path.is_file():
        raise CourseError(f"{ws.root} has no gradebook yet: run `python -m autograder grade` first")
    out_dir.mkdir(parents=True, exist_ok=True)
    summary_rows, long_rows, written = [], [], []
    lms: dict[str, dict[str, float]] = {}
    names = []
    for name in assignments():
        try:
            scores = read_scores(ws, name)
        except MissingEntry:  # the assignment was never released in this workspace
            continue
        if not scores:
            continue
        names.append(name)
        questions = [c.name for c in scores[0].cells]
        per_question = out_dir / f"{name}.csv"
        with whole_file(per_question, newline="") as f:
            writer = csv.writer(f)
            writer.writerow(["student", *questions, "total", "status"])
            writer.writerow(["(max)", *[f"{c.max_score:g}" for c in scores[0].cells],
                             f"{sum(c.max_score for c in scores[0].cells):g}", ""])
            for s in scores:
                by_name = {c.name: c for c in s.cells}
                total = sum(c.score or 0.0 for c in s.cells)
                writer.writerow(
                    [s.student, *["" if by_name[q].score is None else f"{by_name[q].score:g}" for q in questions],
                     f"{total:g}", _status(ws, s.student, name)[0]]
                )
        written.append(per_question)
        for s in scores:
            pending = sum(c.score is None for c in s.cells)
            total = sum(c.score or 0.0 for c in s.cells)
            status, message = _status(ws, s.student, name)
            summary_rows.append(
                [s.student, name, f"{s.auto_score:g}", f"{s.auto_max:g}", f"{total:g}",
                 f"{sum(c.max_score for c in s.cells):g}", pending, status, message]
            )
            lms.setdefault(s.student, {})[name] = total
            for c in s.cells:
                long_rows.append([s.student, name, c.name, "" if c.score is None else f"{c.score:g}",
                                  f"{c.max_score:g}", "test" if c.autograded else "written"])
    summary = out_dir / "grades.csv"
    with whole_file(summary, newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["student", "assignment", "auto_score", "auto_max", "score", "max_score", "pending_manual",
                         "status", "reason"])
        writer.writerows(sorted(summary_rows))
    long_file = out_dir / "questions.csv"
    with whole_file(long_file, newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["student", "assignment", "question", "score", "max_score", "kind"])
        writer.writerows(sorted(long_rows))
    lms_file = out_dir / "lms.csv"
    with whole_file(lms_file, newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["student", *names, "total"])
        for student in sorted(lms):
            got = lms[student]
            writer.writerow([student, *[f"{got[n]:g}" if n in got else "" for n in names], f"{sum(got.values()):g}"])
    return [summary, *written, long_file, lms_file]
