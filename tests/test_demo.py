"""The README's main job end to end, then the batch commands on the demo's workspace (grade, export, report)."""
import csv
import json
import subprocess
import sys

import pytest
from conftest import REPO_ROOT

from autograder.course import layout as course

pytestmark = pytest.mark.slow


def run_cli(*args):
    return subprocess.run(
        [sys.executable, "-m", "autograder", *args], cwd=REPO_ROOT, capture_output=True, text=True, timeout=900
    )


def test_demo_then_grade_a_batch_with_a_damaged_hand_in_then_export(tmp_path):
    ws = tmp_path / "ws"
    demo = run_cli("demo", "--workspace", str(ws))
    assert demo.returncode == 0, demo.stdout + demo.stderr
    assert "As expected" in demo.stdout
    for name in course.assignments():
        assert name in demo.stdout

    name = course.assignments()[0]
    damaged = ws / "submitted" / "mallory" / name / f"{name}.ipynb"
    damaged.parent.mkdir(parents=True)
    damaged.write_text('{"cells": [')
    graded = run_cli("grade", name, "--workspace", str(ws))
    assert graded.returncode == 1, "a batch with an unreadable hand-in must not exit 0"
    rows = {line.split()[1]: line for line in graded.stdout.splitlines()[2:] if line.strip()}
    assert "unreadable" in rows["mallory"] and "not valid JSON" in rows["mallory"]
    assert "graded" in rows["demo-solution"] and "graded" in rows["demo-buggy"]

    exported = run_cli("export", "--workspace", str(ws), "--out", str(tmp_path / "csv"))
    assert exported.returncode == 0, exported.stderr
    with open(tmp_path / "csv" / f"{name}.csv", newline="") as f:
        table = list(csv.reader(f))
    header, maxima, students = table[0], table[1], {row[0]: row for row in table[2:]}
    assert header[0] == "student" and any(q.startswith("test_") for q in header)
    solution = students["demo-solution"]
    for question, top, got in zip(header[1:], maxima[1:], solution[1:]):
        if question.startswith("test_"):
            assert got == top, f"{question}: the solution scored {got} of {top}"
    with open(tmp_path / "csv" / "grades.csv", newline="") as f:
        totals = {(r["student"], r["assignment"]): r for r in csv.DictReader(f)}
    assert totals[("demo-blank", name)]["auto_score"] == "0"
    assert float(totals[("demo-buggy", name)]["auto_score"]) < float(totals[("demo-buggy", name)]["auto_max"])

    reported = run_cli("report", "--workspace", str(ws), "--out", str(tmp_path / "report"))
    assert reported.returncode == 0, reported.stderr
    data = json.loads((tmp_path / "report" / "report.json").read_text())
    assert [a["name"] for a in data["assignments"]] == course.assignments()
    for a in data["assignments"]:
        for student, points in a["scores"].items():
            assert points == pytest.approx(float(totals[(student, a["name"])]["score"]))
    assert (tmp_path / "report" / "index.html").stat().st_size > 0
