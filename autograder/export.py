"""`export`: CSV files of the autograded scores.

OUT/grades.csv          one row per student and assignment: totals
OUT/<assignment>.csv    one row per student: one column per graded cell (question)
A manually graded answer that nobody has graded yet is left blank and counted in
"pending_manual".
"""
from __future__ import annotations

import csv
from pathlib import Path

from autograder.course import CourseError, assignments
from autograder.scores import read_scores
from autograder.workspace import Workspace


def export(ws: Workspace, out_dir: Path) -> list[Path]:
    from nbgrader.api import MissingEntry

    if not ws.path("gradebook.db").is_file():
        raise CourseError(f"{ws.root} has no gradebook yet: run `python -m autograder grade` first")
    out_dir.mkdir(parents=True, exist_ok=True)
    summary_rows, written = [], []
    for name in assignments():
        try:
            scores = read_scores(ws, name)
        except MissingEntry:  # the assignment was never released in this workspace
            continue
        if not scores:
            continue
        questions = [c.name for c in scores[0].cells]
        per_question = out_dir / f"{name}.csv"
        with open(per_question, "w", newline="", encoding="utf-8") as f:
            writer = csv.writer(f)
            writer.writerow(["student", *questions])
            writer.writerow(["(max)", *[f"{c.max_score:g}" for c in scores[0].cells]])
            for s in scores:
                by_name = {c.name: c for c in s.cells}
                writer.writerow(
                    [s.student, *["" if by_name[q].score is None else f"{by_name[q].score:g}" for q in questions]]
                )
        written.append(per_question)
        for s in scores:
            pending = sum(c.score is None for c in s.cells)
            total = sum(c.score or 0.0 for c in s.cells)
            summary_rows.append(
                [s.student, name, f"{s.auto_score:g}", f"{s.auto_max:g}", f"{total:g}",
                 f"{sum(c.max_score for c in s.cells):g}", pending]
            )
    summary = out_dir / "grades.csv"
    with open(summary, "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(["student", "assignment", "auto_score", "auto_max", "score", "max_score", "pending_manual"])
        writer.writerows(sorted(summary_rows))
    return [summary, *written]
