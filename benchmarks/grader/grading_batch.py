"""Time `grade` (repair, integrity scan, sandboxed nbgrader run, report) on batches.

    python benchmarks/grader/grading_batch.py [NN_name ...] [--repeat N] [--students 40] [--class-assignments all|first|none]
                                       [--class-jobs 1 2] [--compare-runner] [--compare-forkserver] [--cluster local:2]

1. one student's whole course (the solution of every assignment) at --jobs 1 and --jobs 2
   (with --compare-runner also with AUTOGRADER_NBGRADER_RUNNER=0: a fresh `python -m
   nbgrader` per hand-in, as before the runners; with --compare-forkserver also with
   AUTOGRADER_FORKSERVER=0: a new interpreter per kernel, as before the fork servers; with
   --cluster also on that Dask cluster);
2. a class of --students students (solution, buggy and blank hand-ins in turn) at each of
   --class-jobs (default 2), of the first assignment (default) or of every assignment
   (`--class-assignments all`, one batch per assignment, each recorded as soon as it finishes).
Every row has the load average before and after (the machine may be shared), the CPU
seconds the grader and its children used, and hand-ins per core-minute (wall time × the
cores the batch could use). Target (COURSE_SPEC section 7): one student's whole course
≤ 30 s on 2 cores. Writes benchmarks/results/grading_batch.json.
"""
from __future__ import annotations

import os
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from autograder.isolation import forkserver  # noqa: E402
from autograder.isolation import nbgrader_runner
from autograder.course.layout import release_path, solution_path  # noqa: E402
from autograder.quality.demo import buggy_notebook  # noqa: E402
from autograder.grading.batch import grade  # noqa: E402
from autograder.isolation.sandbox import describe  # noqa: E402
from autograder.grading.workspace import add_sources, add_submission, open_workspace  # noqa: E402
from benchmarks.machine import save  # noqa: E402

CORES = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()


def _cpu() -> float:
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def timed_grade(names, submissions, jobs, cluster=None, sources=None):
    """(wall s, statuses, load before, load after, CPU s of this process and its children)."""
    with tempfile.TemporaryDirectory(prefix="course-bench-batch-") as tmp:
        ws = open_workspace(tmp)
        if sources:  # a workspace whose sources were built once: copy its nbgrader folders
            import shutil

            for part in ("source", "release"):
                shutil.copytree(Path(sources) / part, ws.path(part), dirs_exist_ok=True)
            shutil.copyfile(Path(sources) / "gradebook.db", ws.path("gradebook.db"))
        else:
            add_sources(ws, names)
        for student, name, notebook in submissions:
            add_submission(ws, student, name, notebook)
        nbgrader_runner.shutdown()  # no runner left from before: each batch pays its start-up
        load, cpu = os.getloadavg()[0], _cpu()
        start = time.perf_counter()
        results = grade(ws, names, jobs=jobs, cluster=cluster)
        elapsed = time.perf_counter() - start
        nbgrader_runner.shutdown()  # the runners' CPU time is counted once they have exited
        cpu = _cpu() - cpu
    return elapsed, sorted({r.status for r in results}), round(load, 2), round(os.getloadavg()[0], 2), round(cpu, 1)


def row(what, jobs, n, times, statuses, loads, cpus, cluster=None):
    median = statistics.median(times)
    cores = min(CORES, jobs if not cluster else CORES)
    return {"what": what, "jobs": jobs, "cluster": cluster, "hand_ins": n, "median_s": round(median, 1),
            "runs_s": [round(t, 1) for t in times], "per_hand_in_s": round(median / n, 2),
            "hand_ins_per_core_minute": round(n / (median / 60 * cores), 2), "cpu_s": cpus,
            "load_before_after": loads, "statuses": statuses,
            "nbgrader_runner": nbgrader_runner.enabled(), "fork_server": forkserver.enabled()}


def main() -> int:
    import argparse

    from autograder.course.layout import assignments, check_assignment

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("assignments", nargs="*")
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--students", type=int, default=40)
    parser.add_argument("--class-assignments", choices=["first", "all", "none"], default="first")
    parser.add_argument("--class-jobs", type=int, nargs="+", default=[2])
    parser.add_argument("--compare-runner", action="store_true")
    parser.add_argument("--compare-forkserver", action="store_true")
    parser.add_argument("--cluster")
    args = parser.parse_args()
    names = [check_assignment(n) for n in args.assignments] or assignments()
    rows = []
    sources = tempfile.mkdtemp(prefix="course-bench-sources-")
    t = time.perf_counter()
    add_sources(open_workspace(sources), names)
    rows.append({"what": f"build the sources of {len(names)} assignments (once per workspace)",
                 "median_s": round(time.perf_counter() - t, 1)})
    course = [("student", name, solution_path(name)) for name in names]
    modes = [("", {})]
    if args.compare_runner:
        modes.append((", no runner", {"AUTOGRADER_NBGRADER_RUNNER": "0"}))
    if args.compare_forkserver:
        modes.append((", no fork server", {"AUTOGRADER_FORKSERVER": "0"}))
    for label, env in modes:
        saved = {k: os.environ.get(k) for k in env}
        os.environ.update(env)
        for jobs in (1, 2):
            runs = [timed_grade(names, course, jobs, sources=sources) for _ in range(args.repeat)]
            rows.append(row(f"one student's course ({len(names)} notebooks){label}", jobs, len(names), [r[0] for r in runs],
                            runs[-1][1], [r[2:4] for r in runs], [r[4] for r in runs]))
            print(rows[-1], flush=True)
            save("grading_batch", rows)
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k)
            else:
                os.environ[k] = v
    if args.cluster:
        runs = [timed_grade(names, course, 0, cluster=args.cluster, sources=sources) for _ in range(args.repeat)]
        rows.append(row(f"one student's course ({len(names)} notebooks)", 0, len(names), [r[0] for r in runs],
                        runs[-1][1], [r[2:4] for r in runs], [r[4] for r in runs], cluster=args.cluster))
        print(rows[-1], flush=True)
        save("grading_batch", rows)
    batch_names = {"first": names[:1], "all": names, "none": []}[args.class_assignments]
    for first in batch_names:
        kinds = [solution_path(first), buggy_notebook(first)[0], release_path(first)]
        batch = [(f"s{i:02d}", first, kinds[i % 3]) for i in range(args.students)]
        for jobs in args.class_jobs:
            elapsed, statuses, l0, l1, cpu = timed_grade([first], batch, jobs, sources=sources)
            rows.append(row(f"{args.students} students of {first} (solution/buggy/blank)", jobs, args.students,
                            [elapsed], statuses, [(l0, l1)], [cpu]))
            print(rows[-1], flush=True)
            save("grading_batch", rows)
    rows.append({"sandbox": describe()})
    print(f"saved {save('grading_batch', rows)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
