"""What a graded class looks like, per assignment, from the workspace alone: the gradebook
(`autograder.grading.scores.read_scores`), the hand-ins' reports (WORKSPACE/reports/) and the failure
messages of the executed notebooks (`autograder.reports.feedback.cell_messages`, hidden-test lines
removed). Nothing is run. `autograder.reports.class_page` turns it into the page and the JSON.
"""
from __future__ import annotations

import json
import re
import statistics
from collections import Counter
from dataclasses import dataclass, field

import nbformat

from autograder.reports.feedback import cell_messages, hidden_lines
from autograder.grading.scores import NotebookScore
from autograder.grading.workspace import Workspace

TOP_MESSAGES = 3


@dataclass
class CellSummary:
    name: str
    max_score: float
    autograded: bool
    graded: int = 0                                           # students with a score in this cell
    passed: int = 0                                           # of them, with full points
    lost: list[str] = field(default_factory=list)             # students who lost points here
    messages: list[tuple[str, int]] = field(default_factory=list)  # (an example, how many) most frequent first

    @property
    def share_passed(self) -> float | None:
        return self.passed / self.graded if self.graded else None


@dataclass
class AssignmentSummary:
    name: str
    max_total: float
    totals: dict[str, float]                 # student → points (as export's `total`)
    cells: list[CellSummary]
    statuses: dict[str, list[str]]           # status → students
    repaired: list[str]                      # hand-ins the grader repaired before grading
    seconds: dict[str, float]                # student → grading time, where the report has one
    pairs: list = field(default_factory=list)  # similar pairs (autograder.reports.similarity.Pair), set by the report

    @property
    def median_seconds(self) -> float | None:
        return statistics.median(self.seconds.values()) if self.seconds else None

    @property
    def slowest(self) -> tuple[str, float] | None:
        return max(self.seconds.items(), key=lambda kv: (kv[1], kv[0])) if self.seconds else None


def message_key(text: str) -> str:
    """A failure message with what differs between two students' same mistake taken out:
    numbers, addresses, spacing."""
    text = re.sub(r"0x[0-9a-fA-F]+", "0x_", text)
    text = re.sub(r"(?<![A-Za-z_])[-+]?\d+(\.\d+)?([eE][-+]?\d+)?", "#", text)
    return re.sub(r"\s+", " ", text).strip()


def read_report(ws: Workspace, student: str, assignment: str) -> dict:
    path = ws.report_path(student, assignment)
    return json.loads(path.read_text()) if path.is_file() else {}


def summarise(ws: Workspace, assignment: str, scores: list[NotebookScore]) -> AssignmentSummary:
    """The summary of one assignment's graded hand-ins (`scores`, from read_scores)."""
    hidden = hidden_lines(nbformat.read(ws.source_path(assignment), as_version=4))
    first = scores[0].cells if scores else []
    cells = {c.name: CellSummary(c.name, c.max_score, c.autograded) for c in first}
    messages: dict[str, Counter] = {name: Counter() for name in cells}
    examples: dict[str, str] = {}
    totals, statuses, repaired, seconds = {}, {}, [], {}
    for s in scores:
        report = read_report(ws, s.student, assignment)
        status = report.get("status", "graded")
        statuses.setdefault(status, []).append(s.student)
        if report.get("repairs"):
            repaired.append(s.student)
        if isinstance(report.get("seconds"), (int, float)):
            seconds[s.student] = float(report["seconds"])
        totals[s.student] = sum(c.score or 0.0 for c in s.cells)
        failed = [c for c in s.cells if c.score is not None and c.score < c.max_score]
        found = cell_messages(s.autograded, hidden) if any(c.autograded for c in failed) and s.autograded else {}
        for c in s.cells:
            summary = cells.setdefault(c.name, CellSummary(c.name, c.max_score, c.autograded))
            if c.score is None:
                continue
            summary.graded += 1
            if c.score >= c.max_score:
                summary.passed += 1
                continue
            summary.lost.append(s.student)
            if c.autograded:
                text = found.get(c.name) or f"no message: the hand-in's status is {status}"
                key = message_key(text)
                messages.setdefault(c.name, Counter())[key] += 1
                examples.setdefault(key, text)
    for name, counter in messages.items():
        cells[name].messages = [(examples[key], n) for key, n in
                                sorted(counter.items(), key=lambda kv: (-kv[1], kv[0]))[:TOP_MESSAGES]]
    max_total = sum(c.max_score for c in first)
    return AssignmentSummary(assignment, max_total, totals, list(cells.values()), statuses, repaired, seconds)


def lost_points(summaries: list[AssignmentSummary]) -> list[tuple[str, str, int, int]]:
    """(assignment, graded cell, students who lost points there, students graded there), most lost first."""
    rows = [(a.name, c.name, len(c.lost), c.graded) for a in summaries for c in a.cells]
    return sorted(rows, key=lambda r: (-r[2], r[0], r[1]))
