"""The ledger of verdicts: a test cell keeps its points only when its checks really ran.

Inside the grading kernel the guard counts, for each test cell, the verdicts that
utils.checks reported from the test's own code, per line of the cell (autograder/guard.py).
The solution's run of the same test cells gives the expected counts (`calibration`).
A test cell whose nbgrader score stands must show, in the hand-in's run, exactly the
solution's counts, no failed check, no verdict from elsewhere, and no tampering while it
ran. Otherwise its points are withheld (`judge`), whatever its output looks like: a
check that was skipped, replaced, swallowed or made to lie cannot earn points.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
from pathlib import Path

from filelock import FileLock

from autograder.course import CourseError, read_notebook
from autograder.workspace import Workspace
from utils.cells import grade_id, is_test

CALIBRATION_DIR_ENV = "COURSE_CALIBRATION_DIR"  # a cache shared by workspaces (the tests use one)


def cell_hash(source: str) -> str:
    """The guard's name for a cell: sha1 of its source, 16 hex digits."""
    return hashlib.sha1(source.encode("utf-8", "replace")).hexdigest()[:16]


def test_cells(notebook) -> dict[str, str]:
    """hash → grade_id of every autograded test cell of `notebook` (the source)."""
    return {cell_hash(cell.source): grade_id(cell) for cell in notebook.cells if is_test(cell)}


def verdicts(events: list[dict]) -> dict[str, dict]:
    """hash → {"lines", "failed", "foreign", "tampered"} of each test cell the guard saw run."""
    found, cells = {}, {}
    for e in events:
        if e.get("event") == "cell":
            cells[e.get("n")] = e.get("hash")
        elif e.get("event") == "verdicts" and isinstance(e.get("lines"), dict):
            found[e.get("hash")] = {"lines": e["lines"], "failed": e.get("failed", 0), "foreign": e.get("foreign", 0),
                                    "tampered": [], "n": e.get("n")}
    for e in events:
        if e.get("event") == "tamper":
            entry = found.get(cells.get(e.get("n")))
            if entry is not None and entry["n"] == e.get("n"):
                entry["tampered"].append(str(e.get("detail", "")))
    return found


def judge(events: list[dict], tests: dict[str, str], expected: dict[str, dict]) -> dict[str, str]:
    """grade_id → why the test cell's points do not stand, for every test cell whose
    run differs from the solution's."""
    seen = verdicts(events)
    reasons = {}
    for digest, name in tests.items():
        want = expected.get(digest, {})
        got = seen.get(digest)
        if got is None:
            reasons[name] = "the grader saw no verdict of its checks (it did not run under the guard)"
        elif got["tampered"]:
            reasons[name] = f"changed while it ran: {got['tampered'][0]}"
        elif got["foreign"]:
            reasons[name] = f"{got['foreign']} verdict(s) did not come from the test's own checks"
        elif got["failed"]:
            reasons[name] = f"{got['failed']} of its checks failed"
        elif got["lines"] != want:
            ran, total = sum(min(got["lines"].get(k, 0), v) for k, v in want.items()), sum(want.values())
            reasons[name] = f"{ran} of its {total} checks ran and passed"
    return reasons


def calibration(ws: Workspace, assignment: str, run) -> dict[str, dict]:
    """The solution's verdicts (hash → lines) of `assignment`'s test cells, computed once
    with `run(scratch_workspace, source_path) -> events` and cached in the workspace (and
    in $COURSE_CALIBRATION_DIR when set), keyed by the source notebook, the checks and the
    guard."""
    from autograder import guard
    from utils import checks

    source = ws.source_path(assignment)
    digest = hashlib.sha1(b"".join(Path(p).read_bytes() for p in (source, checks.__file__, guard.__file__))).hexdigest()
    places = [ws.calibration_path(assignment)]
    locks = [FileLock(ws.lock_path(f"calibration-{assignment}"))]  # one run at a time (threads and processes)
    if os.environ.get(CALIBRATION_DIR_ENV):
        shared = Path(os.environ[CALIBRATION_DIR_ENV]) / f"{assignment}-{digest}.json"
        shared.parent.mkdir(parents=True, exist_ok=True)
        places.append(shared)
        locks.append(FileLock(shared.with_suffix(".lock")))  # and one across the workspaces that share the cache
    with contextlib.ExitStack() as held:
        for lock in locks:  # always in this order: the workspace's, then the shared one
            held.enter_context(lock)
        for place in places:
            try:
                saved = json.loads(place.read_text())
            except (OSError, ValueError):
                continue
            if saved.get("key") == digest:
                if place != places[0]:  # the workspace keeps its own copy (the cluster ships it)
                    places[0].parent.mkdir(parents=True, exist_ok=True)
                    places[0].write_text(json.dumps(saved, indent=1))
                return saved["cells"]
        scratch = ws.path("calibration", f"{assignment}-run")
        shutil.rmtree(scratch, ignore_errors=True)
        try:
            events = run(scratch, source)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
        seen = verdicts(events)
        bad = {d: v for d, v in seen.items() if v["failed"] or v["foreign"] or v["tampered"]}
        missing = set(test_cells(read_notebook(source))) - set(seen)
        if bad or missing:
            raise CourseError(f"the solution of {assignment} does not pass its own checks under the grader "
                              f"({len(bad)} test cell(s) with failed or foreign verdicts, {len(missing)} not seen)")
        cells = {d: v["lines"] for d, v in seen.items()}
        for place in places:  # whole or not at all: other processes (test workers) read the shared one
            place.parent.mkdir(parents=True, exist_ok=True)
            partial = place.with_name(f".{place.name}.{os.getpid()}")
            partial.write_text(json.dumps({"key": digest, "cells": cells}, indent=1))
            os.replace(partial, place)
        return cells

