"""`feedback`: one HTML page per student and assignment, from the graded run.

It shows the status, each test cell's points and pass/fail with the message of its
failure (the exception's text, e.g. a self-check's "what is wrong and why"), the written
answers' points, and what the grader repaired or flagged. It never shows code: no cell
source, no traceback (tracebacks quote the test cell's lines), no printed output (a
notebook can print the running cell); and any message line that contains a line of
the hidden tests is removed before writing.

Written to WORKSPACE/feedback/<student>/<assignment>/<assignment>.html, where nbgrader's
`release_feedback` picks feedback up (do not run nbgrader's `generate_feedback`, whose
pages include the hidden tests).
"""
from __future__ import annotations

import html
import json
import re
from pathlib import Path

import nbformat

from autograder.release.build import secret_lines
from autograder.grading.scores import read_scores
from autograder.handins.status import STATUSES
from autograder.grading.workspace import Workspace, whole_file
from utils.cells import grade_id

ANSI = re.compile(r"\x1b\[[0-9;]*m")


def hidden_lines(source_nb) -> set[str]:
    """The lines of a source notebook's hidden tests that no feedback page may show."""
    return secret_lines([source_nb], kinds=("HIDDEN TESTS",))


def scrub(text: str, hidden: set[str], limit: int = 1500) -> str:
    text = ANSI.sub("", text)
    kept = []
    for line in text.splitlines():
        if any(h in line for h in hidden):
            kept.append("[a line quoting the hidden tests was removed]")
        else:
            kept.append(line)
    text = "\n".join(kept)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def cell_messages(autograded: Path, hidden: set[str]) -> dict[str, str]:
    """grade_id → the failure message of that graded cell in the executed notebook."""
    try:
        nb = nbformat.read(autograded, as_version=4)
    except Exception:
        return {}
    messages = {}
    for cell in nb.cells:
        gid = grade_id(cell)
        if not gid or cell.cell_type != "code":
            continue
        errors = [o for o in cell.get("outputs", []) if o.get("output_type") == "error"]
        if errors:
            e = errors[0]
            messages[gid] = scrub(f"{e.get('ename', 'Error')}: {e.get('evalue', '')}", hidden)
        elif any(o.get("name") == "stderr" for o in cell.get("outputs", [])):
            messages[gid] = "the cell wrote to stderr (a warning or a log line), which nbgrader scores as a failure"
        elif cell.get("execution_count") is None:
            messages[gid] = "the cell did not run"
    return messages


def render(student: str, assignment: str, report: dict, score, messages: dict[str, str], hidden: set[str]) -> str:
    esc = html.escape
    status = report.get("status", "graded")
    rows = []
    if score is not None:
        for c in score.cells:
            if c.autograded:
                passed = (c.score or 0) >= c.max_score
                mark = "passed" if passed else "failed"
                note = "" if passed else messages.get(c.name, "")
                rows.append(
                    f"<tr class='{mark}'><td>{esc(c.name)}</td><td>{c.score or 0:g} / {c.max_score:g}</td>"
                    f"<td>{mark}</td><td><pre>{esc(note)}</pre></td></tr>"
                )
            else:
                got = "to be graded by hand" if c.score is None else f"{c.score:g} / {c.max_score:g}"
                rows.append(f"<tr><td>{esc(c.name)}</td><td>{esc(got)}</td><td>written answer</td><td></td></tr>")
    total = "" if score is None else f"<p><b>Autograded score: {score.auto_score:g} / {score.auto_max:g}</b></p>"

    def items(title, values):
        values = [scrub(str(v), hidden, 400) for v in values]
        if not values:
            return ""
        return f"<h2>{esc(title)}</h2><ul>" + "".join(f"<li>{esc(v)}</li>" for v in values) + "</ul>"

    meaning = STATUSES.get(status, ("", True))[0]
    message = scrub(report.get("message", ""), hidden, 600)
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{esc(assignment)}: feedback for {esc(student)}</title>
<style>body{{font-family:sans-serif;max-width:60em;margin:2em auto}}td,th{{border-bottom:1px solid #ddd;padding:.3em .6em;vertical-align:top}}
tr.failed td:nth-child(3){{color:#b00}}tr.passed td:nth-child(3){{color:#070}}pre{{white-space:pre-wrap;margin:0}}</style></head>
<body><h1>{esc(assignment)}</h1><p>Student: {esc(student)}</p>
<p>Status: <b>{esc(status)}</b> ({esc(meaning)}){': ' + esc(message) if message and status != 'graded' else ''}</p>
{total}
<table><tr><th>graded cell</th><th>points</th><th>result</th><th>message</th></tr>{''.join(rows)}</table>
<p>The grader also ran hidden checks on new inputs; their code is not shown.</p>
{items("Repaired before grading", report.get("repairs", []))}
{items("For review by your instructor", report.get("flags", []))}
{items("Sandbox notes", report.get("notes", []))}
</body></html>
"""


def feedback(ws: Workspace, names: list[str], students: list[str] | None = None) -> list[Path]:
    """Write the feedback pages of the graded hand-ins of `names`."""
    written = []
    for assignment in names:
        reports = sorted(ws.path("reports", assignment).glob("*.json"))
        if not reports:
            continue
        source = nbformat.read(ws.path("source", assignment, f"{assignment}.ipynb"), as_version=4)
        hidden = hidden_lines(source)
        scores = {s.student: s for s in read_scores(ws, assignment)}
        for path in reports:
            student = path.stem
            if students and student not in students:
                continue
            report = json.loads(path.read_text())
            messages = cell_messages(ws.autograded_path(student, assignment), hidden)
            page = render(student, assignment, report, scores.get(student), messages, hidden)
            out = ws.path("feedback", student, assignment, f"{assignment}.html")
            with whole_file(out) as handle:
                handle.write(page)
            written.append(out)
    return written
