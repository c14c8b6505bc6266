"""`report`: after grading, one static page and one JSON file about the whole class.

OUT/index.html   openable offline (figures embedded as PNG): per assignment the score
                 histogram, each test cell's pass share and most frequent failure messages,
                 the statuses and the students they concern, the time per hand-in, and the
                 pairs of hand-ins with similar answers; across assignments a students ×
                 assignments heatmap and the exercises by how many students lost points.
OUT/report.json  the same numbers; "similar" lists the pairs above the threshold.

It reads the gradebook, the reports, the executed notebooks' failure messages
(`autograder.reports.class_summary`) and the graded hand-ins' answer cells (`autograder.reports.similarity`);
it runs nothing. Every message and every answer shown passes through feedback's `scrub`,
which removes any line of the hidden tests.
"""
from __future__ import annotations

import html
import json
from pathlib import Path

import nbformat

from autograder.reports import plots
from autograder.reports import similarity
from autograder.reports.class_summary import AssignmentSummary, lost_points, summarise
from autograder.course.layout import CourseError
from autograder.reports.feedback import hidden_lines, scrub
from autograder.grading.scores import read_scores
from autograder.handins.status import STATUSES
from autograder.grading.workspace import Workspace, whole_file

SHOWN_PAIRS = 50  # pairs shown side by side per assignment (report.json lists them all)
DISCLAIMER = ("Similar answers are a pointer for a person to look at, never an automatic penalty: students may "
              "have worked together as allowed, followed the same lecture code, or written the only natural "
              "answer to a short exercise.")


def _read_json(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def similar_answers(ws: Workspace, assignment: str, students: list[str]):
    """The pairs of `students` whose answers to `assignment` are similar, and every hand-in's answers."""
    release = _read_json(ws.release_path(assignment))
    release_cells = similarity.answer_cells(release) if release else {}
    given, names = similarity.release_prints(release_cells), similarity.release_names(release_cells)
    hand_ins = []
    for student in students:
        nb = _read_json(ws.submission_path(student, assignment))
        if nb and isinstance(nb.get("cells"), list):
            hand_ins.append(similarity.fingerprint_hand_in(student, similarity.answer_cells(nb), given, names))
    return similarity.similar_pairs(hand_ins), {h.student: h.cells for h in hand_ins}


def build(ws: Workspace, names: list[str]) -> tuple[list[AssignmentSummary], dict, dict[str, dict]]:
    """The summaries of `names` (those graded in `ws`), report.json's content, and the answers
    (assignment → student → answer cell → code) that the page shows side by side."""
    from nbgrader.api import MissingEntry

    if not ws.db_path.is_file():
        raise CourseError(f"{ws.root} has no gradebook yet: run `python -m autograder grade` first")
    summaries, data = [], {"assignments": [], "similar": [], "threshold": similarity.THRESHOLD}
    answers: dict[str, dict] = {}
    for name in names:
        try:
            scores = read_scores(ws, name)
        except MissingEntry:  # never released in this workspace
            continue
        if not scores:
            continue
        summary = summarise(ws, name, scores)
        pairs, answers[name] = similar_answers(ws, name, [s.student for s in scores])
        summary.pairs = pairs
        summaries.append(summary)
        data["assignments"].append(_assignment_json(summary))
        data["similar"] += [{"assignment": name, **p.to_json()} for p in pairs]
    if not summaries:
        raise CourseError(f"nothing graded in {ws.root} for {', '.join(names)}: run `python -m autograder grade` first")
    data["exercises"] = [{"assignment": a, "cell": c, "lost": n, "graded": g} for a, c, n, g in lost_points(summaries)]
    return summaries, data, answers


def _assignment_json(s: AssignmentSummary) -> dict:
    slowest = s.slowest
    return {
        "name": s.name, "students": len(s.totals), "max": s.max_total,
        "scores": {student: round(total, 4) for student, total in sorted(s.totals.items())},
        "cells": [{"name": c.name, "max": c.max_score, "autograded": c.autograded, "graded": c.graded,
                   "passed": c.passed, "share_passed": c.share_passed, "lost": sorted(c.lost),
                   "messages": [{"message": m, "count": n} for m, n in c.messages]} for c in s.cells],
        "statuses": {status: sorted(students) for status, students in s.statuses.items()},
        "repaired": sorted(s.repaired),
        "time": {"recorded": len(s.seconds), "median_s": s.median_seconds,
                 "slowest": None if slowest is None else {"student": slowest[0], "seconds": slowest[1]}},
        "clusters": similarity.clusters(s.pairs),
    }


def write(ws: Workspace, names: list[str], out: Path) -> list[Path]:
    summaries, data, answers = build(ws, names)
    hidden = set()
    for s in summaries:
        hidden |= hidden_lines(nbformat.read(ws.source_path(s.name), as_version=4))
    out.mkdir(parents=True, exist_ok=True)
    page, report = out / "index.html", out / "report.json"
    with whole_file(page) as handle:
        handle.write(render(summaries, answers, hidden))
    with whole_file(report) as handle:
        json.dump(data, handle, indent=1)
    return [page, report]


# ------------------------------------------------------------------ the page

STYLE = """body{font-family:system-ui,sans-serif;max-width:72em;margin:2em auto;padding:0 1em;color:#222}
table{border-collapse:collapse;margin:.5em 0}td,th{border-bottom:1px solid #ddd;padding:.25em .6em;text-align:left;vertical-align:top}
th{background:#f4f4f4}img{max-width:100%}section{border-top:3px solid #3b6ea8;margin-top:2.5em}
pre{white-space:pre-wrap;margin:0;font-size:.85em}.side{display:grid;grid-template-columns:1fr 1fr;gap:1em}
.side pre{background:#f8f8f8;padding:.5em;border:1px solid #e4e4e4}.note{background:#fff8e1;border-left:4px solid #f9a825;padding:.5em 1em}
.students{font-size:.85em;color:#555}"""


def _students(names: list[str], limit: int = 30) -> str:
    shown = ", ".join(names[:limit]) + (f" and {len(names) - limit} more" if len(names) > limit else "")
    return f"<span class='students'>{html.escape(shown)}</span>"


def _section(s: AssignmentSummary, answers: dict[str, dict], hidden: set[str]) -> str:
    esc = html.escape
    parts = [f"<section id='{esc(s.name)}'><h2>{esc(s.name)}</h2>",
             f"<p>{len(s.totals)} hand-ins; out of {s.max_total:g} points.</p>",
             f"<img alt='score histogram of {esc(s.name)}' src='{plots.histogram(list(s.totals.values()), s.max_total, 'Scores')}'>"]
    tests = [c for c in s.cells if c.autograded and c.graded]
    if tests:
        parts.append(f"<img alt='pass share per test cell of {esc(s.name)}' "
                     f"src='{plots.pass_shares([c.name for c in tests], [c.share_passed for c in tests], 'Passed per test cell')}'>")
    rows = []
    for c in s.cells:
        share = "" if c.share_passed is None else f"{c.share_passed:.0%}"
        messages = "".join(f"<li>{n} × <pre>{esc(scrub(m, hidden, 400))}</pre></li>" for m, n in c.messages)
        rows.append(f"<tr><td>{esc(c.name)}</td><td>{'test' if c.autograded else 'written'}</td><td>{c.max_score:g}</td>"
                    f"<td>{share}</td><td>{len(c.lost)}</td><td><ul>{messages}</ul></td></tr>")
    parts.append("<h3>Graded cells</h3><table><tr><th>cell</th><th>kind</th><th>points</th><th>passed</th>"
                 "<th>lost points</th><th>most frequent failure messages</th></tr>" + "".join(rows) + "</table>")
    status_rows = "".join(
        f"<tr><td>{esc(status)}</td><td>{esc(STATUSES.get(status, ('', True))[0])}</td><td>{len(students)}</td>"
        f"<td>{_students(sorted(students)) if status != 'graded' else ''}</td></tr>"
        for status, students in sorted(s.statuses.items(), key=lambda kv: list(STATUSES).index(kv[0])
                                       if kv[0] in STATUSES else len(STATUSES)))
    status_rows += (f"<tr><td>repaired</td><td>the grader restored cells or metadata before grading</td>"
                    f"<td>{len(s.repaired)}</td><td>{_students(sorted(s.repaired))}</td></tr>")
    parts.append("<h3>Statuses</h3><table><tr><th>status</th><th>meaning</th><th>hand-ins</th><th>students</th></tr>"
                 + status_rows + "</table>")
    slowest = s.slowest
    parts.append("<h3>Time per hand-in</h3><p>" + (
        f"median {s.median_seconds:.1f} s, slowest {slowest[1]:.1f} s ({esc(slowest[0])}), over {len(s.seconds)} hand-ins"
        if slowest else "not recorded (these hand-ins were graded before the grader kept times)") + "</p>")
    parts.append(_similar(s, answers, hidden))
    return "".join(parts) + "</section>"


def _similar(s: AssignmentSummary, answers: dict[str, dict], hidden: set[str]) -> str:
    esc = html.escape
    pairs = s.pairs
    head = (f"<h3>Similar answers</h3><p class='note'>{esc(DISCLAIMER)} Pairs scoring at least "
            f"{similarity.THRESHOLD:g} are listed: the score is the share of the answer cells in which both hand-ins wrote "
            f"code of their own (not the release's, not what much of the class wrote) that the other hand-in "
            f"also holds; each cell's similarity is shown beside it.</p>")
    if not pairs:
        return head + "<p>No pair above the threshold.</p>"
    groups = [g for g in similarity.clusters(pairs) if len(g) > 2]
    body = "".join(f"<p>Group of {len(g)}: {_students(g)}</p>" for g in groups)
    for p in pairs[:SHOWN_PAIRS]:
        a, b = p.students
        sides = "".join(
            f"<div><b>{esc(student)}</b>" + "".join(
                f"<p>{esc(cell)}</p><pre>{esc(scrub(answers[s.name][student].get(cell, ''), hidden, 4000))}</pre>"
                for cell in p.cells) + "</div>"
            for student in (a, b))
        alike = ", ".join(f"{cell} {p.alike[cell]:.2f}" for cell in p.cells)
        body += (f"<details><summary>{esc(a)} and {esc(b)}: score {p.score:.2f}, cells alike {esc(alike)}"
                 f"</summary><div class='side'>{sides}</div></details>")
    if len(pairs) > SHOWN_PAIRS:
        body += f"<p>{len(pairs) - SHOWN_PAIRS} more pairs in report.json.</p>"
    return head + body


def render(summaries: list[AssignmentSummary], answers: dict[str, dict], hidden: set[str]) -> str:
    esc = html.escape
    students = sorted({st for s in summaries for st in s.totals})
    names = [s.name for s in summaries]
    shares = [[(s.totals[st] / s.max_total if s.max_total else None) if st in s.totals else None for s in summaries]
              for st in students]
    lost = "".join(f"<tr><td>{esc(a)}</td><td>{esc(c)}</td><td>{n}</td><td>{g}</td></tr>"
                   for a, c, n, g in lost_points(summaries) if n)
    contents = "".join(f"<li><a href='#{esc(n)}'>{esc(n)}</a></li>" for n in names)
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>Class report</title><style>{STYLE}</style></head>
<body><h1>Class report</h1><ul>{contents}</ul>
<h2>Across assignments</h2>
<p>Points are those of export's totals: a written answer not graded by hand yet counts 0.</p>
<img alt="share of points per student and assignment" src="{plots.heatmap(students, names, shares)}">
<h3>Exercises by how many students lost points</h3>
<table><tr><th>assignment</th><th>graded cell</th><th>students who lost points</th><th>graded</th></tr>{lost}</table>
{''.join(_section(s, answers, hidden) for s in summaries)}
</body></html>
"""
