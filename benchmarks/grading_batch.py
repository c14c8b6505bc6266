"""Time `grade` (repair, integrity scan, sandboxed nbgrader run, report) on batches.

    python benchmarks/grading_batch.py [NN_name ...] [--repeat N] [--students 40]

1. one student's whole course (the solution of every assignment) at --jobs 1 and --jobs 2;
2. a batch of --students students (solution, buggy and blank hand-ins in turn) of the
   first assignment at --jobs 2.
Target (COURSE_SPEC section 7): one student's whole course ≤ 30 s on 2 cores. Writes
benchmarks/results/grading_batch.json.
"""
from __future__ import annotations

import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from autograder.course import release_path, solution_path  # noqa: E402
from autograder.demo import buggy_notebook  # noqa: E402
from autograder.grading import grade  # noqa: E402
from autograder.sandbox import describe  # noqa: E402
from autograder.workspace import add_sources, add_submission, open_workspace  # noqa: E402
from benchmarks.machine import save  # noqa: E402


def timed_grade(names, submissions, jobs):
    with tempfile.TemporaryDirectory(prefix="course-bench-batch-") as tmp:
        ws = open_workspace(tmp)
        add_sources(ws, names)
        for student, name, notebook in submissions:
            add_submission(ws, student, name, notebook)
        start = time.perf_counter()
        results = grade(ws, names, jobs=jobs)
        elapsed = time.perf_counter() - start
    statuses = sorted({r.status for r in results})
    return elapsed, statuses


def main() -> int:
    import argparse

    from autograder.course import assignments, check_assignment

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("assignments", nargs="*")
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--students", type=int, default=40)
    args = parser.parse_args()
    names = [check_assignment(n) for n in args.assignments] or assignments()
    rows = []
    course = [("student", name, solution_path(name)) for name in names]
    for jobs in (1, 2):
        times = [timed_grade(names, course, jobs)[0] for _ in range(args.repeat)]
        rows.append({"what": f"one student's course ({len(names)} notebooks)", "jobs": jobs,
                     "median_s": round(statistics.median(times), 1), "runs_s": [round(t, 1) for t in times]})
        print(f"{rows[-1]['what']}, --jobs {jobs}: {rows[-1]['median_s']} s")
    first = names[0]
    kinds = [solution_path(first), buggy_notebook(first)[0], release_path(first)]
    batch = [(f"s{i:02d}", first, kinds[i % 3]) for i in range(args.students)]
    elapsed, statuses = timed_grade([first], batch, 2)
    rows.append({"what": f"{args.students} students of {first}", "jobs": 2, "median_s": round(elapsed, 1),
                 "per_hand_in_s": round(elapsed / args.students, 2), "statuses": statuses})
    print(f"{rows[-1]['what']}, --jobs 2: {elapsed:.1f} s ({elapsed / args.students:.2f} s a hand-in)")
    rows.append({"sandbox": describe()})
    print(f"saved {save('grading_batch', rows)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
