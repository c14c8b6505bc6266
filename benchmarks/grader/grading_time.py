"""Time grading one hand-in (the solution) per assignment, as `python -m autograder grade` does.

    python benchmarks/grader/grading_time.py [NN_name ...] [--repeat N]

Measures `autograder.grading.batch.grade` for a single student and assignment: repair, integrity
scan, the sandboxed nbgrader run (the kernel, every cell in fast mode, experiments skipped,
test cells in the trusted runner), the gradebook update and the report. The workspace is
prepared (generate_assignment) beforehand and not timed. (Until 2026-11-26 this script called
`workspace.autograde` directly, without the sandbox settings that skip the experiments: 01's
experiments then ran on Tiny Shakespeare, 71 s a hand-in with the mirror set.) Target (COURSE_SPEC section 7): one
student's whole course ≤ 30 s on 2 cores. Writes benchmarks/results/grading_time.json.
"""
from __future__ import annotations

import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from autograder.course.layout import solution_path  # noqa: E402
from autograder.grading.scores import read_scores  # noqa: E402
from autograder.grading.batch import grade  # noqa: E402
from autograder.grading.workspace import add_sources, add_submission, open_workspace  # noqa: E402
from benchmarks.machine import parse_args, save  # noqa: E402


def grade_solution(ws, name: str, student: str):
    """`grade` one student's hand-in of `name` (the solution, added beforehand) alone, at --jobs 1;
    its GradeResult, or SystemExit when it did not get full marks."""
    [result] = grade(ws, [name], [student], jobs=1)
    if result.score is None or not result.score.full_marks:
        raise SystemExit(f"{name}: the solution was not graded at full marks ({result.status})")
    return result


def main() -> int:
    names, repeat = parse_args(__doc__, default_repeat=3)
    rows = []
    with tempfile.TemporaryDirectory(prefix="course-bench-grade-") as tmp:
        ws = open_workspace(tmp)
        add_sources(ws, names)
        for name in names:
            times = []
            for i in range(repeat):
                student = f"bench-{i}"
                add_submission(ws, student, name, solution_path(name))
                start = time.perf_counter()
                grade_solution(ws, name, student)
                times.append(time.perf_counter() - start)
            score = read_scores(ws, name, ["bench-0"])[0]
            rows.append({
                "assignment": name,
                "median_s": round(statistics.median(times), 1),
                "runs_s": [round(t, 1) for t in times],
                "score": f"{score.auto_score:g}/{score.auto_max:g}",
            })
            print(f"{name:<28} {rows[-1]['median_s']:>6.1f} s per hand-in  (runs {rows[-1]['runs_s']}, score {rows[-1]['score']})")
    total = sum(r["median_s"] for r in rows)
    print(f"one student's course ({len(rows)} notebooks): {total:.1f} s (target ≤ 30 s)")
    print(f"saved {save('grading_time', rows)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
