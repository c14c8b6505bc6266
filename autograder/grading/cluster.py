"""`grade --cluster ADDRESS`: the per-hand-in grading on Dask workers.

The coordinator (the machine that holds the workspace) does what needs the workspace:
it keeps each original, sends every task the bytes it needs, and writes everything back.
A worker needs the course installed (the same `autograder` and `utils`) and nothing else:
no shared file system, no gradebook.

    coordinator                                   worker (any machine)
    -----------                                   --------------------
    per assignment, once: its source and release  a fresh temporary workspace per hand-in:
    folders and an empty gradebook of the         the template unpacked, the hand-in placed,
    assignment (~80 KiB)                          then autograder.grading.handin.grade_one, the very
    per hand-in: the original's bytes       --->  function `grade --jobs N` runs (repair,
                                                  scan, nbgrader, the same sandbox, report)
    writes submitted/ (repaired), autograded/, <--- the repaired and graded notebooks, the
    reports/, and the gradebook rows                report and the gradebook rows

ADDRESS is a Dask scheduler address (tcp://host:8786) or `local:N`, a LocalCluster of N
worker processes on this machine (one hand-in at a time each). A worker that dies while
grading a hand-in (killed, out of memory, its machine lost) costs nothing but time: Dask
reschedules the task on another worker; a hand-in whose tasks killed workers too often
(`distributed.scheduler.allowed-failures`, 1 for `local:N`: two deaths) gets the status
`crashed` and the rest of the batch goes on. The coordinator keeps no more hand-ins in
flight than the workers have threads, so a worker holds only the hand-in it is grading.
What a hand-in's kernel sends cannot take a worker down: the worker grades with the same
bounded runner (its replies refused past the codec's limits, its data memory limited: status
`boundary` or `runner-stopped`), so such a hand-in is not retried (tests/test_bounded.py).
A task that raises is not run again either (what fails there fails the same way again: a
failure of the hand-in is already its status, from grade_one), and whatever fails for one
hand-in (sending it, its task, storing what came back) is that hand-in's `failed` with a
message. A result is released from the cluster as soon as it is stored, so a worker that dies
later makes no one compute it again. A worker's folders (its scratch workspace, the sandbox,
nbgrader's log) are removed whatever ends it, by its reaper if it is killed (autograder.isolation.scratch).
"""
from __future__ import annotations

import contextlib
import hashlib
import io
import json
import shutil
import sqlite3
import tarfile
import tempfile
from dataclasses import asdict
from pathlib import Path

from nbgrader.api import Gradebook

from autograder.grading import gradebook
from autograder.isolation import scratch
from autograder.course.layout import CourseError
from autograder.grading.handin import GradeResult, failure, grade_one, keep_original, scored_zero
from autograder.isolation.sandbox import Limits
from autograder.grading.scores import read_scores
from autograder.handins.status import Run
from autograder.grading.workspace import Workspace, ensure_scripts_on_path, open_workspace, write_ahead_log

INSTALL_HINT = "grading on a cluster needs Dask: pip install .[cluster]  (or: pip install 'dask[distributed]>=2024.1')"
KILLED = "the grading worker died each time it graded this hand-in; scored 0 (grade it again alone to see why)"


def _dask():
    try:
        import distributed  # noqa: F401
    except ImportError:
        raise CourseError(INSTALL_HINT) from None
    return distributed


def client_for(address: str):
    """A dask.distributed Client for `address` (`local:N` starts a LocalCluster)."""
    distributed = _dask()
    import dask

    if address.startswith("local:"):
        try:
            workers = int(address.split(":", 1)[1])
        except ValueError:
            raise CourseError(f"--cluster {address}: expected local:N with N a number of workers") from None
        # Two deaths of a worker while it grades one hand-in: that hand-in is `crashed`. A worker
        # holds one hand-in at a time (saturation 1), so its death counts against that one only.
        with dask.config.set({"distributed.scheduler.allowed-failures": 1, "distributed.scheduler.worker-saturation": 1.0}):
            cluster = distributed.LocalCluster(n_workers=max(1, workers), threads_per_worker=1, processes=True,
                                               dashboard_address=None, silence_logs=50)
        return distributed.Client(cluster)
    try:
        return distributed.Client(address, timeout=30)
    except OSError as exc:
        raise CourseError(f"--cluster {address}: cannot reach the Dask scheduler ({exc})") from None


# ----------------------------------------------------------------------------- bytes in, bytes out


def _pack(root: Path, parts: list[str]) -> bytes:
    """A gzip'd tar of root/part for each part (folders or files)."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for part in parts:
            if (root / part).exists():
                tar.add(root / part, arcname=part)
    return buffer.getvalue()


def _unpack(data: bytes, root: Path) -> None:
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        try:
            tar.extractall(root, filter="data")
        except TypeError:  # a Python without extraction filters (< 3.10.12): our own archives only
            tar.extractall(root)


def template(ws: Workspace, assignment: str) -> bytes:
    """The assignment's source and release folders and a gradebook that knows the assignment
    (its notebooks, graded cells, hidden tests) but holds no student: what a worker needs."""
    parts = ["source", "release", "gradebook.db"]
    with tempfile.TemporaryDirectory(prefix="course-template-") as tmp:
        tmp = Path(tmp)
        for part in ("source", "release"):
            shutil.copytree(ws.path(part, assignment), tmp / part / assignment)
        source, copy = sqlite3.connect(ws.db_path), sqlite3.connect(tmp / "gradebook.db")
        with copy:
            source.backup(copy)
        source.close()
        copy.close()
        with Gradebook(f"sqlite:///{tmp / 'gradebook.db'}") as gb:
            for student in [s.id for s in gb.students]:
                gb.remove_student(student)
            for other in [a.name for a in gb.assignments if a.name != assignment]:
                gb.remove_assignment(other)
        with contextlib.closing(sqlite3.connect(tmp / "gradebook.db")) as db:
            write_ahead_log(db)  # once here, for every worker's copy (the file keeps it)
        return _pack(tmp, parts)


def grade_remote(template_bytes: bytes, student: str, assignment: str, handin: dict, limits: dict) -> dict:
    """On a worker: grade one hand-in (`handin`: file name -> bytes of its submission folder,
    the notebook as it arrived) in a temporary workspace; return what the coordinator writes."""
    ensure_scripts_on_path()
    with scratch.folder("course-worker-") as tmp:
        ws = open_workspace(tmp / "ws", scratch=True)  # its gradebook, the template's, keeps a write-ahead log
        _unpack(template_bytes, ws.root)
        folder = ws.submission_path(student, assignment).parent
        folder.mkdir(parents=True)
        for name, data in handin.items():
            (folder / name).write_bytes(data)
        result = grade_one(ws, student, assignment, limits=Limits(**limits))
        marker = ws.repaired_marker(student, assignment)
        autograded = ws.autograded_path(student, assignment).parent
        return {
            "report": ws.report_path(student, assignment).read_bytes(),
            "submitted": ws.submission_path(student, assignment).read_bytes(),
            "repaired_marker": marker.read_text() if marker.is_file() else None,
            "autograded": _pack(autograded.parent, [autograded.name]) if autograded.is_dir() else None,
            "rows": gradebook.submission_rows(ws, student, assignment),
            "status": result.status,
        }


# ----------------------------------------------------------------------------- the coordinator


def grade_pairs(ws: Workspace, pairs: list[tuple[str, str]], address: str, limits=None) -> list:
    """Grade (student, assignment) pairs of `ws` on the Dask cluster at `address`; results in
    the order of `pairs`, written to the workspace exactly as the local path writes them."""
    distributed = _dask()
    limits = asdict(limits or Limits())
    client = client_for(address)
    try:
        # The template (tens of KiB) travels inside each task: a task then depends on nothing,
        # any idle worker takes it, and a worker holds only the hand-in it grades (no more are
        # sent than there are worker threads), so a worker's death counts against that one only.
        templates = {a: template(ws, a) for a in sorted({a for _, a in pairs})}
        waiting = list(pairs)
        running = distributed.as_completed()
        futures, results = {}, {}

        def slots() -> int:
            workers = client.scheduler_info().get("workers", {}).values()
            return max(1, sum(w.get("nthreads", 1) for w in workers))

        def submit_more() -> None:
            while waiting and running.count() < slots():
                student, assignment = waiting.pop(0)
                try:
                    handin = _handin(ws, student, assignment)
                except Exception as exc:  # noqa: BLE001  (a hand-in that cannot be sent: its status)
                    results[(student, assignment)] = scored_zero(ws, student, assignment, Run.FAILED,
                                                                 failure("sending it to a worker", exc))
                    continue
                digest = hashlib.sha1(handin[ws.original_path(student, assignment).name]).hexdigest()[:12]
                key = f"grade-{assignment}-{student}-{digest}"
                # No retries: what fails in a task fails the same way again (grade_one turns every
                # failure of the hand-in into its status); a worker's death is Dask's allowed-failures.
                future = client.submit(grade_remote, templates[assignment], student, assignment, handin, limits,
                                       key=key, pure=False)
                futures[future] = (student, assignment)
                running.add(future)

        submit_more()
        for future in running:
            pair = futures.pop(future)
            results[pair] = _result(ws, *pair, future, distributed)
            # Stored: the cluster may forget it. A future still held (this loop's variable holds the
            # last one) is computed again when the worker that keeps its result dies.
            future.release()
            submit_more()
        return [results[pair] for pair in pairs]
    finally:
        cluster = getattr(client, "cluster", None)
        client.close()
        if cluster is not None and address.startswith("local:"):
            cluster.close()


def _handin(ws: Workspace, student: str, assignment: str) -> dict:
    """The files of a hand-in's submission folder, its notebook as it arrived (kept once)."""
    original = keep_original(ws, student, assignment)
    folder = ws.submission_path(student, assignment).parent
    handin = {p.name: p.read_bytes() for p in folder.iterdir() if p.is_file() and not p.name.startswith(".")}
    handin[original.name] = original.read_bytes()
    return handin


def _result(ws: Workspace, student: str, assignment: str, future, distributed) -> GradeResult:
    """What a hand-in's task gave, written into the workspace: the GradeResult; whatever failed
    (the task, its workers, storing what it sent) is the hand-in's status."""
    try:
        outcome = future.result()
    except distributed.KilledWorker:
        return scored_zero(ws, student, assignment, Run.CRASHED, KILLED)
    except Exception as exc:  # noqa: BLE001
        return scored_zero(ws, student, assignment, Run.FAILED, failure("the grading worker", exc))
    try:
        return _store(ws, student, assignment, outcome)
    except Exception as exc:  # noqa: BLE001
        return scored_zero(ws, student, assignment, Run.FAILED, failure("storing what the worker sent", exc))


def _store(ws: Workspace, student: str, assignment: str, outcome: dict):
    """Write a worker's results into the workspace; the GradeResult as the local path gives it."""
    sub = ws.submission_path(student, assignment)
    sub.write_bytes(outcome["submitted"])
    marker = ws.repaired_marker(student, assignment)
    if outcome["repaired_marker"] is not None:
        marker.write_text(hashlib.sha1(outcome["submitted"]).hexdigest())
    autograded = ws.autograded_path(student, assignment).parent
    if autograded.exists():
        shutil.rmtree(autograded)
    if outcome["autograded"] is not None:
        autograded.parent.mkdir(parents=True, exist_ok=True)
        _unpack(outcome["autograded"], autograded.parent)
    if outcome["rows"] is not None:
        gradebook.write_rows(ws, student, assignment, outcome["rows"])
    report = ws.report_path(student, assignment)
    report.parent.mkdir(parents=True, exist_ok=True)
    report.write_bytes(outcome["report"])
    data = json.loads(outcome["report"])
    fields = set(GradeResult.__dataclass_fields__) - {"score"}
    result = GradeResult(**{k: v for k, v in data.items() if k in fields})
    scores = read_scores(ws, assignment, [student])
    result.score = scores[0] if scores else None
    return result
