"""Where the time of grading one hand-in goes: the grader's own phases, nbgrader's process
and the kernel's cells, measured (not guessed).

    python benchmarks/grader/grading_profile.py [NN_name ...] [--workspace DIR] [--cprofile]

Grades the solution of each assignment as one student (`grade --jobs 1`) in a workspace
whose sources are already built (the first run builds them; pass --workspace to reuse
one), with:

* wall-clock timers around each phase of the coordinator (`autograder.grading.handin`): repair
  (reading the hand-in, the release and the source), the integrity scan, protected-name
  analysis, the nbgrader run, reading the executed notebook, the gradebook reads/writes;
* inside the nbgrader process (run through a small wrapper script; nothing of the grader is
  changed): the time to import nbgrader's application, the gradebook's opening (its
  SQLAlchemy engine and schema check), the kernel's start (launch to the first reply,
  which includes the sandbox and the kernel's own imports), every cell's execution
  (nbclient), and the saving of the grades;
* with --cprofile, a cProfile of the coordinator (top functions by cumulative time).

Runs nbgrader as one process per hand-in (AUTOGRADER_NBGRADER_RUNNER=0, as before the
runners), so its start-up shows. Writes benchmarks/results/grading_profile.json (with the
machine and the load average).
"""
from __future__ import annotations

import cProfile
import collections
import io
import json
import os
import pstats
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

# Runs as every nbgrader process of this benchmark (in place of `python -m nbgrader`): times
# the phases nbgrader goes through and appends them, one JSON object per line, to
# $GRADING_PROFILE_LOG, then runs nbgrader's own entry point unchanged.
WRAPPER = r'''
import json, os, sys, time, atexit
_T0 = time.perf_counter()
_events = [("python started", 0.0)]
def _mark(what):
    _events.append((what, round(time.perf_counter() - _T0, 3)))
def _dump():
    _mark("exit")
    with open(os.environ["GRADING_PROFILE_LOG"], "a") as f:
        f.write(json.dumps({"pid": os.getpid(), "argv": sys.argv[1:3], "events": _events}) + "\n")
atexit.register(_dump)

def _wrap(obj, attr, label, is_async=False):
    fn = getattr(obj, attr)
    if is_async:
        async def wrapped(*a, **k):
            t = time.perf_counter(); r = await fn(*a, **k)
            _events.append((label, round(t - _T0, 3), round(time.perf_counter() - t, 3))); return r
    else:
        def wrapped(*a, **k):
            t = time.perf_counter(); r = fn(*a, **k)
            _events.append((label, round(t - _T0, 3), round(time.perf_counter() - t, 3))); return r
    setattr(obj, attr, wrapped)

import nbgrader.apps.nbgraderapp as app
_mark("nbgrader imported (nbgrader, jupyter_server, nbconvert, sqlalchemy...)")
import nbclient.client, nbgrader.api, nbgrader.converters.base
from nbgrader.preprocessors import saveautogrades
_mark("the rest imported")
_wrap(nbgrader.api.Gradebook, "__init__", "Gradebook() opened")
_wrap(nbclient.client.NotebookClient, "start_new_kernel", "kernel process started")
_wrap(nbclient.client.NotebookClient, "start_new_kernel_client", "kernel ready (first reply)")
_wrap(nbclient.client.NotebookClient, "execute_cell", "cell")
_wrap(saveautogrades.SaveAutoGrades, "preprocess", "SaveAutoGrades (gradebook writes)")
_wrap(nbgrader.converters.base.BaseConverter, "convert_single_notebook", "convert_single_notebook (all preprocessors)")
sys.argv[0] = "nbgrader"
sys.exit(app.main())
'''


PHASES = [  # (module, function, label): the coordinator's phases, timed by wrapping
    ("autograder.grading.batch", "ensure_sources", "ensure_sources (sources up to date?)"),
    ("autograder.grading.gradebook", "register_students", "register students in the gradebook"),
    ("autograder.grading.handin", "keep_original", "keep the original"),
    ("autograder.grading.handin", "read_notebook", "read + validate the release and source notebooks"),
    ("autograder.handins.repair", "affinity", "affinity (right assignment?)"),
    ("autograder.handins.repair", "repair", "repair against the release"),
    ("autograder.grading.handin", "prepare", "prepare (all of the above + write)"),
    ("autograder.handins.integrity", "scan", "integrity scan"),
    ("autograder.handins.integrity", "protected_names", "protected names"),
    ("autograder.isolation.sandbox", "probe", "probe isolation"),
    ("autograder.grading.workspace", "run_nbgrader", "nbgrader autograde process"),
    ("autograder.grading.handin", "_executed", "read the executed notebook"),
    ("autograder.handins.integrity", "read_guard_logs", "read the guard log"),
    ("autograder.grading.handin", "read_scores", "read scores from the gradebook"),
    ("autograder.grading.gradebook", "zero_grades", "zero grades"),
    ("autograder.grading.handin", "finish", "write the report (and read its scores)"),
]


def instrument(totals):
    import importlib

    for modname, fname, label in PHASES:
        mod = importlib.import_module(modname)
        fn = getattr(mod, fname)

        def wrapped(*a, _fn=fn, _label=label, **k):
            t = time.perf_counter()
            try:
                return _fn(*a, **k)
            finally:
                totals[_label].append(time.perf_counter() - t)

        wrapped.cache_clear = getattr(fn, "cache_clear", None)
        for other in list(sys.modules.values()):  # every module that imported it by name
            if getattr(other, "__name__", "").startswith("autograder") and getattr(other, fname, None) is fn:
                setattr(other, fname, wrapped)


def summarize_nbgrader(log: Path) -> list[dict]:
    runs = []
    for line in log.read_text().splitlines():
        rec = json.loads(line)
        if rec["argv"][:1] != ["autograde"]:
            continue
        ev = rec["events"]
        cells = [e for e in ev if e[0] == "cell"]
        def first(label):
            return next((e for e in ev if e[0] == label), None)
        runs.append({
            "assignment": rec["argv"][1],
            "nbgrader app imported at": ev[1][1],
            "gradebook opens": [e[2] for e in ev if e[0] == "Gradebook() opened"],
            "kernel process started": (first("kernel process started") or (0, 0, None))[2],
            "kernel ready (first reply)": (first("kernel ready (first reply)") or (0, 0, None))[2],
            "cells": len(cells),
            "cells total": round(sum(e[2] for e in cells), 3),
            "slowest cells": sorted((e[2] for e in cells), reverse=True)[:3],
            "first cell (setup: imports torch...)": cells[0][2] if cells else None,
            "SaveAutoGrades": (first("SaveAutoGrades (gradebook writes)") or (0, 0, None))[2],
            "convert_single_notebook": (first("convert_single_notebook (all preprocessors)") or (0, 0, None))[2],
            "exit at": (first("exit") or (0, None))[1],
            "events": ev,
        })
    return runs


def main() -> int:
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("assignments", nargs="*")
    parser.add_argument("--workspace")
    parser.add_argument("--cprofile", action="store_true")
    args = parser.parse_args()

    from autograder.course.layout import assignments, check_assignment, solution_path
    from autograder.grading.workspace import add_submission, open_workspace
    from benchmarks.machine import save

    names = [check_assignment(n) for n in args.assignments] or assignments()
    ws = open_workspace(args.workspace or tempfile.mkdtemp(prefix="course-profile-"))
    from autograder.grading.batch import ensure_sources

    t = time.perf_counter()
    ensure_sources(ws, names)
    build_s = time.perf_counter() - t
    for name in names:
        add_submission(ws, "alice", name, solution_path(name))

    # nbgrader in a process of its own per hand-in (no runner), so that its start-up is seen
    # and the wrapper below can time its phases.
    os.environ["AUTOGRADER_NBGRADER_RUNNER"] = "0"
    hook = Path(tempfile.mkdtemp(prefix="course-profile-hook-"))
    (hook / "nbgrader_timed.py").write_text(WRAPPER)
    log = hook / "events.jsonl"
    os.environ["GRADING_PROFILE_LOG"] = str(log)
    import subprocess

    from autograder.grading import workspace

    class TimedPopen(subprocess.Popen):  # `python -m nbgrader ARGS` -> `python nbgrader_timed.py ARGS`
        def __init__(self, command, *a, **k):
            if list(command[1:3]) == ["-m", "nbgrader"]:
                command = [command[0], str(hook / "nbgrader_timed.py"), *command[3:]]
            super().__init__(command, *a, **k)

    workspace.subprocess = type("subprocess", (), {"Popen": TimedPopen, "CompletedProcess": subprocess.CompletedProcess,
                                                   "PIPE": subprocess.PIPE, "STDOUT": subprocess.STDOUT,
                                                   "TimeoutExpired": subprocess.TimeoutExpired})

    totals = collections.defaultdict(list)
    instrument(totals)
    from autograder.grading import batch

    profiler = cProfile.Profile() if args.cprofile else None
    load_before = os.getloadavg()
    start = time.perf_counter()
    if profiler:
        profiler.enable()
    results = batch.grade(ws, names, jobs=1)
    if profiler:
        profiler.disable()
    wall = time.perf_counter() - start
    load_after = os.getloadavg()

    phases = {label: {"calls": len(v), "total_s": round(sum(v), 3)} for label, v in totals.items()}
    runs = summarize_nbgrader(log)
    print(f"one student's course ({len(names)} notebooks), --jobs 1: {wall:.1f} s; load {load_before[0]:.2f} -> {load_after[0]:.2f}")
    for label, row in phases.items():
        print(f"  {label:45s} {row['calls']:3d} calls  {row['total_s']:7.3f} s")
    print("  inside nbgrader (per hand-in):")
    for run in runs:
        print(f"    {run['assignment']:28s} app imported at {run['nbgrader app imported at']}s; gradebook opens {run['gradebook opens']}; "
              f"kernel start {run['kernel process started']} s, ready after {run['kernel ready (first reply)']} s; "
              f"{run['cells']} cells {run['cells total']} s (setup {run['first cell (setup: imports torch...)']} s); "
              f"SaveAutoGrades {run['SaveAutoGrades']} s; whole conversion {run['convert_single_notebook']} s; exit at {run['exit at']} s")
    top = ""
    if profiler:
        out = io.StringIO()
        pstats.Stats(profiler, stream=out).sort_stats("cumulative").print_stats(35)
        top = out.getvalue()
        print(top)
    rows = [{"what": "grading_profile", "wall_s": round(wall, 2), "build_sources_s": round(build_s, 1),
             "statuses": sorted({r.status for r in results}), "load_before": load_before, "load_after": load_after,
             "coordinator_phases": phases, "nbgrader_runs": runs, "cprofile_top": top[:20000]}]
    print(f"saved {save('grading_profile', rows)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
