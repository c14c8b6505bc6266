"""The hostile and damaged hand-in suite, end to end: a folder of LMS-named files is
collected, repaired and graded with `--jobs 2` in the sandbox (small limits so the
suite stays quick); every case must end with its expected status and score, the batch
must complete, the hand-ins must stay byte for byte, the gradebook must hold one
consistent row per student, no feedback page may show a hidden-test line, and grading
again (with one job, and on a Dask cluster) must give the same scores.
"""
import hashlib
import html
import json
import os
from pathlib import Path

import nbformat
import pytest
from hostile_cases import ASSIGNMENT, TIMER_RACES, cases, exfiltrated

from autograder.course import layout as course
from autograder.handins.collect import collect
from autograder.reports.export import export
from autograder.reports.feedback import feedback, hidden_lines
from autograder.grading.batch import grade
from autograder.isolation.sandbox import Limits
from autograder.grading.workspace import add_submission, open_workspace

pytestmark = pytest.mark.slow

# Small enough to keep the suite quick; the per-cell limit leaves room for importing
# torch in the setup cell on a busy 2-core machine.
LIMITS = Limits(cell_timeout=15, notebook_timeout=150, memory_mb=3072, output_kb=256)
CASES = cases("WORKSPACE")  # for the ids; the fixture builds them with the real path


def write_handins(folder: Path, suite) -> dict[Path, str]:
    digests = {}
    for case in suite:
        name = case.filename if isinstance(case.filename, bytes) else case.filename.encode()
        path = Path(os.fsdecode(os.fsencode(folder) + b"/" + name))
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(case.data)
        digests[path] = hashlib.sha256(case.data).hexdigest()
    return digests


@pytest.fixture(scope="module")
def batch(tmp_path_factory):
    root = tmp_path_factory.mktemp("hostile")
    ws = open_workspace(root / "ws")
    suite = cases(str(ws.root))
    digests = write_handins(root / "handins", suite)
    entries, _ = collect(root / "handins", ws)
    results = {r.student: r for r in grade(ws, [ASSIGNMENT], jobs=2, limits=LIMITS)}
    return ws, suite, digests, entries, results


def test_the_suite_has_at_least_44_cases():
    assert len(CASES) >= 44 and len({c.student for c in CASES}) == len(CASES)


def test_every_hand_in_is_collected_under_its_student(batch):
    ws, suite, _, entries, results = batch
    assert {e.student for e in entries if e.action != "not placed"} == {c.student for c in suite}
    assert set(results) == {c.student for c in suite}, "the batch did not complete"


@pytest.mark.parametrize("case", CASES, ids=[c.student for c in CASES])
def test_case_ends_with_its_status_and_score(batch, case):
    _, _, _, _, results = batch
    r = results[case.student]
    assert r.status == case.status, f"{case.why}: {r.status} ({r.message})"
    assert r.score is not None, f"{case.why}: no row in the gradebook"
    full, got = r.score.auto_max, r.score.auto_score
    buggy = results["buggy"].score.auto_score
    assert 0 < buggy < full
    expected = {"full": got == full, "zero": got == 0, "buggy": got == buggy, "less": 0 < got < full,
                "atmost": got <= buggy}[case.score]
    assert expected, f"{case.why}: scored {got:g}/{full:g}, expected {case.score} (buggy scores {buggy:g})"
    assert full == results["solution"].score.auto_max, "points must come from the release"
    if case.status != "graded":
        assert r.message, "a status other than graded says why"


def test_hand_ins_are_unchanged_byte_for_byte(batch):
    ws, _, digests, _, results = batch
    for path, digest in digests.items():
        assert hashlib.sha256(path.read_bytes()).hexdigest() == digest, f"{path.name} changed"
    for student in results:
        original = ws.path("originals", student, ASSIGNMENT, f"{ASSIGNMENT}.ipynb")
        assert hashlib.sha256(original.read_bytes()).hexdigest() in digests.values()


def test_the_gradebook_holds_one_consistent_row_per_student(batch):
    from nbgrader.api import Gradebook

    ws, _, _, _, results = batch
    graded_cells = sum(1 for c in course.read_notebook(course.release_path(ASSIGNMENT)).cells
                       if c.get("metadata", {}).get("nbgrader", {}).get("grade"))
    with Gradebook(ws.db_url) as gb:
        submissions = gb.find_assignment(ASSIGNMENT).submissions
        assert sorted(s.student.id for s in submissions) == sorted(results)
        for s in submissions:
            nb = gb.find_submission_notebook(ASSIGNMENT, ASSIGNMENT, s.student.id)
            assert len(nb.grades) == graded_cells
            assert all(g.score is not None for g in nb.grades if g.cell_type == "code"), s.student.id


def test_no_feedback_page_shows_a_hidden_test_line(batch):
    ws, _, _, _, results = batch
    pages = feedback(ws, [ASSIGNMENT])
    assert len(pages) == len(results)
    hidden = hidden_lines(course.read_notebook(course.solution_path(ASSIGNMENT)))
    assert hidden
    for page in pages:
        text = html.unescape(page.read_text(encoding="utf-8"))
        leaked = [line for line in hidden if line in text]
        assert not leaked, f"{page}: shows {leaked[:2]}"
    readhidden = html.unescape(ws.path("feedback", "readhidden", ASSIGNMENT, f"{ASSIGNMENT}.html").read_text())
    assert "For review by your instructor" in readhidden
    buggy = html.unescape(ws.path("feedback", "buggy", ASSIGNMENT, f"{ASSIGNMENT}.html").read_text())
    assert "failed" in buggy and "AssertionError" in buggy


def test_what_a_hand_in_finds_in_its_kernel_holds_no_hidden_test_line(batch):
    """split-exfiltrate searched its kernel (history, linecache, the frames of a test's call, its
    globals, every file it can read) while the tests called it, and printed what it found
    compressed and in base64, a form no feedback filter recognises. Decoded, the graded
    notebook's copy holds lines of the course's code and not one line of a hidden test of any
    notebook: what the kernel does not hold, no page can show, in any encoding."""
    ws, _, _, _, results = batch
    hidden = set().union(*(hidden_lines(course.read_notebook(course.solution_path(a))) for a in course.assignments()))
    graded = nbformat.read(ws.autograded_path("split-exfiltrate", ASSIGNMENT), as_version=4)
    printed = "".join(o.get("text", "") for c in graded.cells for o in c.get("outputs", []))
    found = exfiltrated(printed)
    assert found and all(len(lines) > 20 for lines in found), "the search found nothing to print"
    leaked = set().union(*found) & hidden
    assert not leaked, f"the kernel held hidden test lines: {sorted(leaked)[:3]}"


def test_export_has_a_column_per_question_and_the_status(batch, tmp_path):
    import csv

    ws, _, _, _, results = batch
    export(ws, tmp_path)
    with open(tmp_path / f"{ASSIGNMENT}.csv", newline="") as f:
        table = list(csv.reader(f))
    assert table[0][-2:] == ["total", "status"] and len(table) == 2 + len(results)
    status = {row[0]: row[-1] for row in table[2:]}
    assert status["osexit"] == "crashed" and status["notjson"] == "unreadable"
    with open(tmp_path / "lms.csv", newline="") as f:
        lms = {row["student"]: row for row in csv.DictReader(f)}
    assert set(lms) == set(results)


def test_grading_again_with_one_job_gives_the_same_scores(batch):
    ws, _, _, _, results = batch
    again = {r.student: r for r in grade(ws, [ASSIGNMENT], ["solution", "metadata"], jobs=1,
                                         limits=LIMITS)}
    for student, r in again.items():
        before = {c.name: c.score for c in results[student].score.cells}
        assert {c.name: c.score for c in r.score.cells} == before, student
        assert r.status == results[student].status
    # Nothing of the grading stays open in this process (an instructor's long session, a
    # cluster worker): once it kept two deleted files per hand-in, and then select() refused
    # the 1024th descriptor.
    still_open = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith(str(ws.root)):
            still_open.append(target)
    assert not still_open, f"{len(still_open)} files of the workspace still open after grading, e.g. {still_open[:3]}"


def test_on_a_dask_cluster_every_case_ends_as_with_jobs_2(batch, tmp_path):
    """The same hand-ins, collected into another workspace and graded on a 2-worker Dask
    LocalCluster (`grade --cluster local:2`: each hand-in in a fresh workspace on a worker):
    every case gets the same status and the same points per test cell (the hand-ins that race a
    timer thread of their own: the same status and, both times, no more than the honest score)."""
    pytest.importorskip("distributed", reason="Dask is an optional extra: pip install .[cluster]")
    _, _, _, _, results = batch
    ws = open_workspace(tmp_path / "ws")
    write_handins(tmp_path / "handins", cases(str(ws.root)))
    collect(tmp_path / "handins", ws)
    on_cluster = {r.student: r for r in grade(ws, [ASSIGNMENT], cluster="local:2", limits=LIMITS)}
    assert set(on_cluster) == set(results)
    for student, r in on_cluster.items():
        expected = results[student]
        assert r.status == expected.status, f"{student}: {r.status} ({r.message}) on the cluster, {expected.status} with --jobs 2"
        if student in TIMER_RACES:
            assert r.score.auto_score <= results["buggy"].score.auto_score, student
        elif expected.score is not None:
            assert {c.name: c.score for c in r.score.cells} == {c.name: c.score for c in expected.score.cells}, student


def test_a_notebook_past_its_time_limit_is_stopped_and_scores_zero(tmp_path):
    from hostile_cases import dump, solution, with_cell

    ws = open_workspace(tmp_path / "ws")
    stuck = with_cell(solution(), "import signal, time\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\n"
                                  "while True:\n    time.sleep(0.1)")
    target = ws.submission_path("stuck", ASSIGNMENT)
    target.parent.mkdir(parents=True)
    target.write_bytes(dump(stuck))
    limits = Limits(cell_timeout=5, notebook_timeout=30, memory_mb=3072, output_kb=256)
    [result] = grade(ws, [ASSIGNMENT], jobs=1, limits=limits)
    assert result.status == "notebook-timeout" and "30 s" in result.message
    assert result.score is not None and result.score.auto_score == 0


def test_two_grade_runs_on_one_workspace_at_once_both_finish(tmp_path):
    """Two `grade` processes (two terminals, two instructors) on one workspace: the gradebook
    lock and the per-hand-in lock keep them apart; both finish and every row is whole."""
    import subprocess
    import sys

    from nbgrader.api import Gradebook

    from conftest import REPO_ROOT

    name = ASSIGNMENT
    ws = open_workspace(tmp_path / "ws")
    for student, notebook in (("alice", course.solution_path(name)), ("bob", course.release_path(name))):
        target = ws.submission_path(student, name)
        target.parent.mkdir(parents=True)
        target.write_bytes(notebook.read_bytes())
    command = [sys.executable, "-m", "autograder", "grade", name, "--workspace", str(ws.root), "--jobs", "2"]
    runs = [subprocess.Popen(command, cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            for _ in range(2)]
    outputs = [run.communicate(timeout=1200)[0] for run in runs]
    for run, output in zip(runs, outputs):
        assert run.returncode == 0, output
        assert "database is locked" not in output
    reports = {s: json.loads(ws.report_path(s, name).read_text()) for s in ("alice", "bob")}
    assert {s: r["status"] for s, r in reports.items()} == {"alice": "graded", "bob": "graded"}
    assert reports["alice"]["score"]["auto_score"] == reports["alice"]["score"]["auto_max"] > 0
    assert reports["bob"]["score"]["auto_score"] == 0
    with Gradebook(ws.db_url) as gb:
        assert sorted(s.id for s in gb.students) == ["alice", "bob"]
        assert len(gb.find_assignment(name).submissions) == 2


HOLDS_MEMORY = r'''
import errno, json, os, resource
_held = {"tmp": 0, "address_space": resource.getrlimit(resource.RLIMIT_AS)[0] >> 20}
try:
    with open("/tmp/held", "wb") as _file:
        for _ in range(2 * TMP_MB):
            _file.write(b"x" * (1 << 20))
            _file.flush()
            _held["tmp"] += 1
except OSError as _exc:
    _held["tmp_error"] = errno.errorcode[_exc.errno]
os.remove("/tmp/held") if os.path.exists("/tmp/held") else None
try:
    os.write(os.memfd_create("held"), b"x" * (1 << 20))
    _held["memfd"] = "held"
except OSError as _exc:
    _held["memfd"] = errno.errorcode[_exc.errno]
print("HELD " + json.dumps(_held))
'''


def test_what_a_kernel_holds_beyond_its_address_space_is_within_its_memory_limit(tmp_path):
    """`--memory-mb` counts all a kernel can hold: its private /tmp is a tmpfs of `--tmp-mb` (the
    rest is its address space), and memfd_create, whose pages nothing counts, is refused. The
    kernel tries to write twice its /tmp's size there and a memfd of 1 MiB."""
    from hostile_cases import solution, with_cell

    from autograder.isolation.sandbox import _libseccomp, probe

    limits = Limits(cell_timeout=60, notebook_timeout=300, memory_mb=3072, output_kb=256, tmp_mb=16)
    ws = open_workspace(tmp_path / "ws")
    add_submission(ws, "holder", ASSIGNMENT, with_cell(solution(), HOLDS_MEMORY.replace("TMP_MB", str(limits.tmp_mb))))
    [result] = grade(ws, [ASSIGNMENT], jobs=1, limits=limits)
    assert result.status == "graded" and result.score.auto_score == result.score.auto_max, result.message
    graded = nbformat.read(ws.autograded_path("holder", ASSIGNMENT), as_version=4)
    [line] = [line for cell in graded.cells if cell.cell_type == "code" for out in cell.outputs
              if out.get("name") == "stdout" for line in out.text.splitlines() if line.startswith("HELD ")]
    held = json.loads(line[len("HELD "):])
    assert held["address_space"] == limits.memory_mb - limits.tmp_mb
    if probe()[0] == "namespaces":
        assert held["tmp"] <= limits.tmp_mb and held["tmp_error"] == "ENOSPC", held
    if _libseccomp() is not None:
        assert held["memfd"] == "EPERM", held


def test_a_hand_in_whose_grading_raises_anywhere_ends_failed_and_the_batch_goes_on(tmp_path, monkeypatch):
    """One bad hand-in never stops a local batch (issue 51): whatever raises for one hand-in, in
    preparing it (repair), grading it (the nbgrader run) or storing it (its report), is its status
    `failed` with the error in its message, and the solutions handed in before and after it (in
    the batch's order) are graded with full marks. Before, `grade` raised the first error and the
    executor dropped every hand-in not yet started."""
    from autograder.grading import handin as grading
    from autograder.grading.workspace import add_submission

    ws = open_workspace(tmp_path / "ws")
    students = ["a-before", "prepare", "run", "store", "z-after"]
    for student in students:
        add_submission(ws, student, ASSIGNMENT, course.solution_path(ASSIGNMENT))

    def failing(stage, real, student_of):
        def stand_in(*args, **kwargs):
            if student_of(*args) == stage:
                raise TypeError(f"{stage} broke")
            return real(*args, **kwargs)
        return stand_in

    monkeypatch.setattr(grading, "prepare", failing("prepare", grading.prepare, lambda ws, student, assignment: student))
    monkeypatch.setattr(grading, "_run", failing("run", grading._run, lambda ws, student, *rest: student))
    monkeypatch.setattr(grading, "finish", failing("store", grading.finish, lambda ws, result, *rest: result.student))
    results = {r.student: r for r in grade(ws, [ASSIGNMENT], jobs=2, limits=LIMITS)}
    assert set(results) == set(students), "the batch did not finish"
    for student in ("a-before", "z-after"):
        r = results[student]
        assert r.status == "graded" and r.score.auto_score == r.score.auto_max > 0, (student, r.status, r.message)
    for stage in ("prepare", "run", "store"):
        r = results[stage]
        assert r.status == "failed" and f"TypeError: {stage} broke" in r.message, (stage, r.status, r.message)
    for stage in ("prepare", "run"):  # a report and a row of zeros, as for any hand-in that scored 0
        report = json.loads(ws.report_path(stage, ASSIGNMENT).read_text())
        assert report["status"] == "failed" and results[stage].score.auto_score == 0
    assert not ws.report_path("store", ASSIGNMENT).exists() and "could not be written" in results["store"].message
