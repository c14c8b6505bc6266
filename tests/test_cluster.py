"""`grade --cluster`: the per-hand-in grading on Dask workers (autograder.cluster).

* the same small batch (solution, buggy and blank hand-ins of one assignment) graded with
  `--jobs 2` and on a 2-worker LocalCluster gives the same scores, statuses, reports and
  gradebook rows;
* workers killed in the middle of a hand-in lose nothing: a hand-in whose worker died
  once is graded elsewhere; one that took two workers down gets `crashed`, and the batch
  finishes.
"""
import glob
import json
import os
import shutil
import signal
import tempfile
import threading
from pathlib import Path

import pytest

from autograder.course import release_path, solution_path
from autograder.demo import buggy_notebook
from autograder.batch import grade
from autograder.scores import read_scores
from autograder.workspace import add_submission, open_workspace

from autograder.course import CourseError
from conftest import QUICKEST_ASSIGNMENT

ASSIGNMENT = QUICKEST_ASSIGNMENT


def _dask():
    return pytest.importorskip("distributed", reason="Dask is an optional extra: pip install .[cluster]")


def test_without_dask_cluster_says_how_to_install_it(tmp_path, monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "distributed", None)  # import distributed -> ImportError
    ws = _workspace(tmp_path / "ws")
    with pytest.raises(CourseError, match=r"pip install \.\[cluster\]"):
        grade(ws, [ASSIGNMENT], cluster="local:2")
    assert not ws.path("reports").exists()


def _workspace(root):
    ws = open_workspace(root)
    add_submission(ws, "solution", ASSIGNMENT, solution_path(ASSIGNMENT))
    add_submission(ws, "buggy", ASSIGNMENT, buggy_notebook(ASSIGNMENT)[0])
    add_submission(ws, "blank", ASSIGNMENT, release_path(ASSIGNMENT))
    return ws


def _summary(ws, results):
    out = {}
    for r in results:
        report = json.loads(ws.path("reports", ASSIGNMENT, f"{r.student}.json").read_text())
        report.pop("seconds", None)  # the wall time of that grading run: different on every run
        [score] = read_scores(ws, ASSIGNMENT, [r.student])
        out[r.student] = {
            "status": r.status, "message": r.message, "flags": r.flags, "notes": r.notes, "repairs": r.repairs,
            "cells": {c.name: c.score for c in r.score.cells}, "report": report,
            "gradebook": {c.name: c.score for c in score.cells},
            "autograded": ws.autograded_path(r.student, ASSIGNMENT).is_file(),
            "submitted": ws.submission_path(r.student, ASSIGNMENT).read_bytes(),
        }
    return out


@pytest.fixture(scope="module")
def local_batch(tmp_path_factory):
    ws = _workspace(tmp_path_factory.mktemp("jobs") / "ws")
    return _summary(ws, grade(ws, [ASSIGNMENT], jobs=2))


@pytest.mark.slow
def test_a_local_cluster_grades_like_jobs_2(local_batch, tmp_path):
    _dask()
    ws = _workspace(tmp_path / "ws")
    on_cluster = _summary(ws, grade(ws, [ASSIGNMENT], cluster="local:2"))
    assert on_cluster == local_batch
    points = {student: sum(s or 0 for s in row["cells"].values()) for student, row in local_batch.items()}
    assert local_batch["solution"]["status"] == "graded" and points["solution"] > points["buggy"] > points["blank"] == 0


def _grading(leftovers: str, notebook: bytes) -> bool:
    """Whether a grading kernel holds `notebook` now: the sandbox copies the hand-in into the
    kernel's own folder (course-sandbox-*/kernel-*/work/, under the worker's TMPDIR) as the
    kernel starts, and the folder goes when its nbgrader run ends."""
    for copy in glob.glob(os.path.join(leftovers, "course-sandbox-*", "kernel-*", "work", "*.ipynb")):
        try:
            if Path(copy).read_bytes() == notebook:
                return True
        except OSError:  # removed as we looked: that run has ended
            pass
    return False


@pytest.mark.slow
def test_workers_killed_mid_hand_in_lose_nothing(local_batch, tmp_path, monkeypatch):
    """The worker grading the solution is killed (SIGKILL) in the middle of it, once the
    kernel grading it has started: Dask grades it again on another worker, and the batch
    ends exactly as with --jobs 2. (A hand-in whose workers die twice gets `crashed`: seen
    when collateral kills happened in early versions of this test; not asserted, since it
    depends on where Dask places tasks.)"""
    distributed = _dask()
    import dask

    ws = _workspace(tmp_path / "ws")
    # What the killed worker leaves (its scratch workspace, sandbox folder, nbgrader log) goes
    # into a folder removed at the end (short: the kernels' ipc sockets live under it).
    leftovers = tempfile.mkdtemp(prefix="course-killed-")
    monkeypatch.setenv("TMPDIR", leftovers)
    with dask.config.set({"distributed.scheduler.allowed-failures": 1, "distributed.scheduler.worker-saturation": 1.0}):
        cluster = distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                           dashboard_address=None, silence_logs=50)
    client = distributed.Client(cluster)
    # The solution as the worker repaired it (the same as with --jobs 2, asserted at the end).
    solution = local_batch["solution"]["submitted"]
    kills = {"solution": 0}
    wanted = {"solution": 1}
    done = threading.Event()

    killed = set()  # worker addresses killed (the scheduler may list them a little longer)
    pids = {}

    def kill_one() -> None:
        fresh = [a for a in client.scheduler_info()["workers"] if a not in pids and a not in killed]
        if fresh:
            pids.update(client.run(os.getpid, workers=fresh))
        if not _grading(leftovers, solution):
            return
        for worker, keys in client.processing().items():  # one hand-in at a time per worker
            if worker not in killed and worker in pids and "solution" in [str(key).split("-")[-2] for key in keys]:
                os.kill(pids[worker], signal.SIGKILL)
                killed.add(worker)
                kills["solution"] += 1
                return

    def killer():
        while not done.is_set() and kills != wanted:
            try:
                kill_one()
            except Exception:  # a worker going away while we ask: ask again
                pass
            done.wait(0.05)  # polls: the kernel's folder lives for the whole notebook run

    thread = threading.Thread(target=killer, daemon=True)
    thread.start()
    try:
        results = grade(ws, [ASSIGNMENT], cluster=cluster.scheduler_address)
    finally:
        done.set()
        thread.join()
        client.close()
        cluster.close()
        shutil.rmtree(leftovers, ignore_errors=True)
    summary = _summary(ws, results)
    assert kills == wanted, {k: (v["status"], v["message"]) for k, v in summary.items()}
    assert summary == local_batch
