"""The grader's own processes and files stay bounded whatever a kernel sends (issue 42).

Hand-ins of the quickest notebook whose kernels answer the tests with what the grader must not
take whole: a tree of tens of megabytes, one nested a million deep, one of too many parts, a
buffer past the byte limit, parts that together would need more memory than the runner may use,
error messages and printed text of megabytes, and broadcasts past nbgrader's message cap. They
are graded with `--jobs 2` beside the solution while a monitor samples the resident memory of
every trusted process (the grade command, the nbgrader runner, the fork server and the test
runners it forks; the kernels do not count). Each hand-in must end with its status and a message
that says why, the solution keep full marks, no trusted process pass 2 GiB, no executed notebook
10 MiB and no feedback page 2 MiB. Four of them on a Dask cluster end the same way.
"""
from __future__ import annotations

import threading
import time

import psutil
import pytest
from hostile_cases import ASSIGNMENT, solution, with_attack

from autograder.grading.batch import grade
from autograder.reports.feedback import feedback
from autograder.isolation.sandbox import Limits
from autograder.grading.workspace import add_submission, open_workspace

pytestmark = pytest.mark.slow

# No case here expects a cell timeout. After "runner-memory" is refused, its kernel waits in its own serve loop until
# the runner has dealt with 2.4 GB; beside another heavy scope of the suite that once took past a 30 s cell limit
# (status cell-timeout instead of boundary, in the whole suite at d0edcb6), and once past 90 s (at da2eeab; the
# case alone takes 45 s there), so the cells get 240 s and the notebook 600 s.
LIMITS = Limits(cell_timeout=240, notebook_timeout=600, memory_mb=3072, output_kb=256)
GIB = 1 << 30
AGENT = "from autograder.isolation.boundary import kernel_side as _k\n"
ANSWER = AGENT + "_k.reply_frames = lambda number, tree, buffers: [number, _TREE]\n"
# What each kernel does, the status it must end with, its score ("full", or "less" than full) and
# words its message must hold.
CASES = {
    "solution": ("", "graded", "full", ""),
    "tree-bytes": ("_TREE = b'[\"list\", [' + b'[\"none\"],' * 8_000_000 + b'[\"none\"]]]'\n" + ANSWER,
                   "boundary", "less", "bytes, more than the limit"),
    "tree-deep": ("_TREE = b'[' * 1_500_000 + b']' * 1_500_000\n" + ANSWER, "boundary", "less", "deep"),
    "tree-parts": ("_TREE = b'[\"list\", [' + b'[\"none\"],' * 300_000 + b'[\"none\"]]]'\n" + ANSWER,
                   "boundary", "less", "parts"),
    "buffer-bytes": (AGENT + "_BIG = b'x' * (300 << 20)\n"
                     "_k.reply_frames = lambda number, tree, buffers: [number, b'[\"dict\", []]', _BIG]\n",
                     "boundary", "less", "larger than"),
    # twelve parts of 200 MiB, each within the byte limit, sent without a copy: 2.4 GB that the
    # runner's ZeroMQ would hold before the reply could be refused, past its memory limit
    "runner-memory": (AGENT + "import zmq\n_PART = bytearray(200 << 20)\n"
                      "def _serve(agent, socket):\n"
                      "    try:\n"
                      "        while True:\n"
                      "            frames = socket.recv_multipart()\n"
                      "            if frames[0] == b'end' or len(frames) < 2:\n"
                      "                return\n"
                      "            socket.send_multipart([frames[0], b'[\"dict\", []]', *[_PART] * 12], copy=False)\n"
                      "    except KeyboardInterrupt:\n"
                      "        return\n"
                      "_k.serve = _serve\n", "boundary", "less", "memory"),
    "error-text": (AGENT + "_k.Agent.answer = lambda self, tree, buffers: "
                   "_k.encode({'error': ['ValueError', 'e' * 3_000_000]})\n", "graded", "less", ""),
    # (wrapping every answer function changes one of 05 that is used as a method: less than full)
    # 900,000 characters a call: past the runner's cap of printed text, and within the tree's byte limit even where a
    # convention check calls the answer four times in one reply (05's MultiHeadAttention)
    "printed-text": (AGENT + "_k.PRINTED_CAP = 1 << 30\ndef _attack():\n    print('p' * 900_000)\n", "output-limit", "less", "output"),
    # at the end of the notebook: past the message cap, nbgrader's client loses the kernel's broadcasts
    # for good (ZeroMQ does not reconnect after a protocol error), and each later cell waits for them
    "broadcasts": ("_k = get_ipython().kernel\n"
                   "for _size in [1 << 20] * 20 + [8 << 20]:\n"
                   "    _k.session.send(_k.iopub_socket, 'stream', {'name': 'stdout', 'text': 'b' * _size},"
                   " parent=_k.get_parent(), ident=b'stream')\n", "output-limit", "full", "output"),
}


class PeakMemory:
    """The largest resident memory of each trusted process under this one, sampled every 20 ms
    (psutil): this process (the grade command), and every descendant but the kernels (the
    children of the fork server's supervisors, or what a launcher started)."""

    def __init__(self):
        self.peaks: dict[str, int] = {}
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._watch, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.done.set()
        self.thread.join()

    def _watch(self) -> None:
        me = psutil.Process()
        while not self.done.is_set():
            self._note("grade command", me)
            for process in self._trusted(me):
                try:
                    name = " ".join(process.cmdline()[1:4])[:80]
                except psutil.Error:
                    continue
                self._note(name, process)
            time.sleep(0.02)

    def _note(self, name: str, process) -> None:
        try:
            rss = process.memory_info().rss
        except psutil.Error:
            return
        self.peaks[name] = max(self.peaks.get(name, 0), rss)

    @staticmethod
    def _trusted(root):
        found, stack = [], [root]
        while stack:
            for child in _children(stack.pop()):
                try:
                    command = " ".join(child.cmdline())
                    kernel = "ipykernel" in command or "autograder.isolation.launcher" in command or \
                        "autograder.isolation.forkserver" in command and _is_supervisor(child.parent())
                except psutil.Error:
                    continue
                if not kernel:
                    found.append(child)
                    stack.append(child)
        return found


def _children(process):
    try:
        return process.children()
    except psutil.Error:
        return []


def _is_supervisor(process) -> bool:
    """A child of a fork server that has children of its own (the kernel); a test runner has none."""
    try:
        parent = process.parent()
        return parent is not None and "autograder.isolation.forkserver" in " ".join(parent.cmdline()) and \
            "autograder.isolation.forkserver" in " ".join(process.cmdline()) and bool(process.children())
    except psutil.Error:
        return False


AT_END = ("broadcasts",)  # the cell goes after the notebook's last cell, not before its setup cell
ON_CLUSTER = ("solution", "tree-bytes", "runner-memory", "error-text")  # the Dask repeat: fewer, to stay quick


def place(ws, students=tuple(CASES)) -> None:
    honest = solution()
    for student in students:
        code = CASES[student][0]
        add_submission(ws, student, ASSIGNMENT, with_attack(honest, code, student not in AT_END) if code else honest)


def check_results(ws, results: dict, where: str) -> None:
    assert set(results) <= set(CASES) and "solution" in results, f"{where}: the batch did not complete"
    full = results["solution"].score.auto_max
    for student, r in results.items():
        _, status, score, words = CASES[student]
        assert r.status == status, f"{where}, {student}: {r.status} ({r.message})"
        assert words in r.message, f"{where}, {student}: {r.message!r} does not say {words!r}"
        got = r.score.auto_score
        assert got == full if score == "full" else got < full, f"{where}, {student}: {got:g}/{full:g}"
        executed = ws.autograded_path(student, ASSIGNMENT)
        assert executed.stat().st_size < 10 << 20, f"{where}, {student}: the executed notebook is {executed.stat().st_size:,} bytes"


@pytest.fixture(scope="module")
def batch(tmp_path_factory):
    ws = open_workspace(tmp_path_factory.mktemp("bounded") / "ws")
    place(ws)
    with PeakMemory() as memory:
        results = {r.student: r for r in grade(ws, [ASSIGNMENT], jobs=2, limits=LIMITS)}
    print("peak resident memory (MiB):", {k: v >> 20 for k, v in sorted(memory.peaks.items())})
    return ws, results, memory.peaks


def test_each_hostile_kernel_ends_with_its_status_and_the_solution_keeps_full_marks(batch):
    ws, results, _ = batch
    assert set(results) == set(CASES), "the batch did not complete"
    check_results(ws, results, "--jobs 2")


def test_no_trusted_process_passes_2_gib_whatever_the_kernels_sent(batch):
    _, _, peaks = batch
    assert any("forkserver" in name for name in peaks) and "grade command" in peaks, f"the monitor saw {list(peaks)}"
    over = {name: rss >> 20 for name, rss in peaks.items() if rss > 2 * GIB}
    assert not over, f"past 2 GiB (MiB): {over}"


def test_no_feedback_page_passes_2_mib(batch):
    ws, results, _ = batch
    pages = feedback(ws, [ASSIGNMENT])
    assert len(pages) == len(results)
    assert max(page.stat().st_size for page in pages) < 2 << 20


def test_what_was_cut_says_so_in_the_executed_notebook(batch):
    import nbformat

    from autograder.isolation.boundary.runner import ERROR_CAP
    from autograder.isolation.boundary.runner_side import PRINTED_CAP

    ws, _, _ = batch

    def outputs(student):  # of the test cells (run by the runner)
        nb = nbformat.read(ws.autograded_path(student, ASSIGNMENT), as_version=4)
        return [o for c in nb.cells if c.cell_type == "code" and c.metadata.get("nbgrader", {}).get("grade")
                for o in c.outputs]

    errors = [o for o in outputs("error-text") if o.output_type == "error" and o.ename == "ValueError"]
    assert errors and all(len(o.evalue) <= ERROR_CAP + 40 and len("".join(o.traceback)) <= 2 * ERROR_CAP + 80
                          for o in errors)
    printed = "".join(o.get("text", "") for o in outputs("printed-text") if o.output_type == "stream")
    assert "kept the first" in printed and printed.count("p") <= PRINTED_CAP + 200


def test_on_a_dask_cluster_the_hand_ins_end_the_same_way(batch, tmp_path):
    """The workers survive every hand-in (none is retried or lost), and the instructor's table
    shows each status."""
    pytest.importorskip("distributed", reason="Dask is an optional extra: pip install .[cluster]")
    from autograder.grading.batch import score_table

    ws = open_workspace(tmp_path / "ws")
    place(ws, ON_CLUSTER)
    with PeakMemory() as memory:
        on_cluster = grade(ws, [ASSIGNMENT], cluster="local:2", limits=LIMITS)
    print("peak resident memory on the cluster (MiB):", {k: v >> 20 for k, v in sorted(memory.peaks.items())})
    assert {r.student for r in on_cluster} == set(ON_CLUSTER)
    check_results(ws, {r.student: r for r in on_cluster}, "on the cluster")
    assert not {name: rss for name, rss in memory.peaks.items() if rss > 2 * GIB}
    table = score_table(on_cluster)
    for student in ON_CLUSTER:
        assert any(student in line and CASES[student][1] in line for line in table.splitlines()), table


def _log(base, name: str, content: bytes) -> None:
    (base / name).mkdir()
    (base / name / "guard.jsonl").write_bytes(content)


def test_guard_logs_are_read_as_streams_within_their_bounds(tmp_path, monkeypatch):
    """A kernel can write its guard log up to `--file-mb` and make more of them: 8 MiB of line ends,
    a line of 8 MiB and twenty more logs cost the grader the bounds' bytes (tracemalloc's count of
    what Python allocated), never the files' size."""
    import os
    import tracemalloc

    from autograder.isolation import guard
    from autograder.handins import integrity

    monkeypatch.setattr(integrity, "GUARD_LOG_LINES", 1000, raising=False)
    monkeypatch.setattr(integrity, "GUARD_LOG_BYTES", 64 << 10, raising=False)
    key = os.urandom(32)
    cell = guard.encode_line({"event": "cell", "n": 1, "hash": "x"}, key).encode()
    _log(tmp_path, "kernel-a", b"x" * (8 << 20) + b"\n" + cell)
    _log(tmp_path, "kernel-b", cell + b"\n" * (8 << 20))
    for n in range(20):
        _log(tmp_path, f"kernel-c{n:02}", cell)
    tracemalloc.start()
    try:
        logs = integrity.read_guard_logs(tmp_path, key)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20, f"{peak:,} bytes allocated to read 16 MiB of logs"
    assert len(logs) == integrity.GUARD_LOGS and sum(map(len, logs)) <= 1000
    assert [e["event"] for e in logs[0]] == ["garbled"]  # the long line is the last read of its file
    assert logs[1][0]["event"] == "cell" and {e["event"] for e in logs[1][1:]} == {"garbled"}


def test_a_guard_log_that_is_not_a_file_is_garbled_not_waited_for(tmp_path):
    """A FIFO in the log's place (it would block a reader until someone writes), or a link."""
    import os
    import threading

    from autograder.handins import integrity

    (tmp_path / "kernel-a").mkdir()
    os.mkfifo(tmp_path / "kernel-a" / "guard.jsonl")
    (tmp_path / "kernel-b").mkdir()
    os.symlink("/dev/zero", tmp_path / "kernel-b" / "guard.jsonl")
    logs = []
    reader = threading.Thread(target=lambda: logs.extend(integrity.read_guard_logs(tmp_path, b"k")), daemon=True)
    reader.start()
    reader.join(60)
    assert not reader.is_alive(), "the grader waits on the FIFO"
    assert logs == [[{"event": "garbled", "detail": "not a file"}]] * 2


@pytest.mark.parametrize("preparing", [30, 41])
def test_preparing_a_hand_in_counts_in_its_notebook_limit(preparing, tmp_path, monkeypatch):
    """The notebook limit holds the grader's own preparation of a hand-in too (reading, matching,
    repairing, the scan; issue 51: 210 s of it came before a 240 s limit started): a preparation
    that took 30 s of a 40 s limit leaves the nbgrader run 10 s, one that took 41 s ends the hand-in
    as notebook-timeout, and nbgrader never runs. A clock of the test's stands in for grading's
    (each preparation takes the seconds it is given), and the nbgrader run is replaced by one
    that records its time limit."""
    from types import SimpleNamespace

    from autograder.grading import handin as grading
    from autograder.grading.batch import ensure_sources

    ws = open_workspace(tmp_path / "ws")
    add_submission(ws, "student", ASSIGNMENT, solution())
    ensure_sources(ws, [ASSIGNMENT])
    now = [1000.0]
    real_prepare, limits_given = grading.prepare, []

    def slow_prepare(*args):
        now[0] += preparing
        return real_prepare(*args)

    monkeypatch.setattr(grading, "time", SimpleNamespace(monotonic=lambda: now[0]))
    monkeypatch.setattr(grading, "prepare", slow_prepare)
    monkeypatch.setattr(grading, "autograde", lambda *args, timeout=None, **kwargs: limits_given.append(timeout))
    result = grading.grade_one(ws, "student", ASSIGNMENT, limits=Limits(notebook_timeout=40))
    if preparing < 40:
        assert limits_given == [40 - preparing]
    else:
        assert limits_given == [] and result.status == "notebook-timeout" and "40 s" in result.message
