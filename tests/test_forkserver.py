"""Grading kernels forked from a preloaded process (autograder/isolation/forkserver.py): as isolated as
a fresh kernel, served only to nbgrader's launchers, and never outliving their launcher."""
import json
import os
import signal
import subprocess
import sys
import tempfile
import time

import nbformat
import pytest
from conftest import QUICKEST_ASSIGNMENT, REPO_ROOT
from jupyter_client import BlockingKernelClient
from jupyter_client.connect import write_connection_file
from nbformat.v4 import new_code_cell

from autograder.course import layout as course
from autograder.isolation import forkserver
from autograder.grading.batch import grade
from autograder.isolation.sandbox import ENV, Settings, probe
from autograder.grading.workspace import add_submission, hidden_paths, open_workspace

ASSIGNMENT = QUICKEST_ASSIGNMENT

# Runs first in the hand-in, before the setup cell imports anything.
REPORT = r'''
import json, os, resource, socket, sys
_own = os.path.basename(os.path.dirname(os.path.dirname(os.getcwd())))  # its run folder: <temp>/course-sandbox-*/kernel-*/work
def _listing(path):
    try:
        return sorted(os.listdir(path))
    except OSError as exc:
        return type(exc).__name__
_status = dict(line.split(":", 1) for line in open("/proc/self/status").read().splitlines() if ":" in line)
print("REPORT " + json.dumps({
    "command": open("/proc/self/cmdline", "rb").read().decode(errors="replace").split("\0"),
    "pid": os.getpid(),
    "interfaces": sorted(name for _, name in socket.if_nameindex()),
    "hidden": [_listing(path) for path in HIDDEN_PATHS],
    "needed": [os.path.isdir(path) and len(os.listdir(path)) > 0 for path in NEEDED_PATHS],
    "tmp": sorted("<own>" if name == _own else name for name in _listing(TEMP_ROOT)),
    "uid_map": open("/proc/self/uid_map").read().split(),
    "environment": sorted(os.environ),
    "cwd": os.path.basename(os.getcwd()),
    "tmpdir": os.environ.get("TMPDIR") == os.getcwd(),
    "limits": [resource.getrlimit(getattr(resource, n)) for n in ("RLIMIT_AS", "RLIMIT_FSIZE", "RLIMIT_NPROC", "RLIMIT_CPU", "RLIMIT_CORE")],
    "no_new_privs": _status["NoNewPrivs"].strip(),
    "read_only_root": os.access("/usr", os.W_OK) is False,
}))
'''


def _needed() -> list[str]:
    """What a grading kernel needs to read: the course (its utils), the interpreter's
    environment and the dataset mirror."""
    return [str(REPO_ROOT / "utils"), sys.prefix, *filter(os.path.isdir, [os.environ.get("COURSE_DATA_DIR", "")])]


def _visible_in_tmp() -> list[str]:
    """What a kernel's private temp folder (the parent of every run's folder) may show,
    wherever the clone lies: its own run folder, and the outermost folder there of each
    path it needs that lies inside it (a clone under /tmp, its .venv, ../shared/datasets),
    nothing else."""
    tmp = os.path.realpath(tempfile.gettempdir())
    tops = {os.path.relpath(os.path.realpath(path), tmp).split(os.sep)[0] for path in _needed()}
    return sorted({"<own>"} | {top for top in tops if top not in (os.curdir, os.pardir)})


def _graded_report(tmp_path, monkeypatch, switch: str) -> tuple[dict, object]:
    monkeypatch.setenv(forkserver.SWITCH_ENV, switch)
    ws = open_workspace(tmp_path / f"ws-{switch}")
    handin = course.read_notebook(course.solution_path(ASSIGNMENT))
    report = (REPORT.replace("HIDDEN_PATHS", repr(hidden_paths(ws))).replace("NEEDED_PATHS", repr(_needed()))
              .replace("TEMP_ROOT", repr(tempfile.gettempdir())))
    handin.cells.insert(1, new_code_cell(report))
    add_submission(ws, "ada", ASSIGNMENT, handin)
    [result] = grade(ws, [ASSIGNMENT], jobs=1)
    graded = nbformat.read(ws.autograded_path("ada", ASSIGNMENT), as_version=4)
    lines = [line for cell in graded.cells if cell.cell_type == "code" for out in cell.outputs
             if out.get("name") == "stdout" for line in out.text.splitlines() if line.startswith("REPORT ")]
    assert len(lines) == 1, lines
    return json.loads(lines[0][len("REPORT "):]), result


@pytest.mark.slow
def test_a_forked_kernel_is_isolated_exactly_like_a_fresh_one(tmp_path, monkeypatch):
    """What isolation promises wherever the clone lies (under /tmp, under /home, in a path
    with a space): the workspace, the solutions, the autograder and the git history are
    hidden (empty, or gone with the rest of the temp folder); the course, its environment
    and the dataset mirror stay readable; the temp folder shows nothing but the kernel's
    own run folder and the folders that lead to those."""
    forked, forked_result = _graded_report(tmp_path, monkeypatch, "1")
    fresh, fresh_result = _graded_report(tmp_path, monkeypatch, "0")
    assert any("autograder.isolation.forkserver" in part or part.endswith("forkserver.py") for part in forked["command"]), forked["command"]
    assert "--inner" in fresh["command"]
    isolated = probe()[0] == "namespaces"
    for report in (forked, fresh):
        del report["command"]
        if not isolated:
            del report["tmp"]  # the machine's own temp folder, which other tests change meanwhile
    assert forked == fresh
    assert all(forked["needed"]), list(zip(_needed(), forked["needed"]))
    if isolated:  # what the namespaces give, seen from inside
        assert forked["pid"] == 1 and forked["interfaces"] == ["lo"]
        assert all(listing in ([], "FileNotFoundError") for listing in forked["hidden"]), forked["hidden"]
        assert forked["tmp"] == _visible_in_tmp() and forked["read_only_root"]
    assert forked["no_new_privs"] == "1" and forked["cwd"] == "work" and forked["tmpdir"]
    for result in (forked_result, fresh_result):
        assert result.status == "graded" and result.score.auto_score == result.score.auto_max > 0, result.message


def _descendants(pid: int) -> set[int]:
    parents = {int(entry): forkserver._parent_of(int(entry)) for entry in os.listdir("/proc") if entry.isdigit()}
    found, frontier = set(), {pid}
    while frontier:
        frontier = {child for child, parent in parents.items() if parent in frontier} - found
        found |= frontier
    return found


@pytest.fixture
def server(tmp_path):
    """A fork server of this test process, which plays the runner."""
    env = {**os.environ, "TMPDIR": str(tmp_path), "OMP_NUM_THREADS": "1", "MPLBACKEND": "agg"}
    env.pop(ENV, None)
    address = forkserver.address_for(env)
    assert address, "fork servers are off or unavailable on this machine"
    yield address, env
    forkserver._stop()


CLIENT = r'''
import json, os, socket, sys
conn = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
conn.connect("\0" + sys.argv[1])
request = {"argv": [os.path.join(os.getcwd(), "missing-connection.json")], "env": dict(os.environ), "cwd": os.getcwd()}
try:
    socket.send_fds(conn, [json.dumps(request).encode()], [0, 1, 2])
    first, then = conn.recv(64), conn.recv(64)
except OSError:  # a refused request may also end in a closed or reset connection, even before it is sent
    first = then = b""
print(repr(first), repr(then))
'''


def test_the_server_serves_the_runners_launchers_and_no_one_else(server, tmp_path):
    address, env = server
    child = [sys.executable, "-c", CLIENT, address]
    served = subprocess.run(child, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    # The kernel it forked ended at once (no connection file): its status comes back.
    assert served.stdout.split() == [repr(forkserver.STARTED), repr(b"1")], served.stderr
    grandchild = [sys.executable, "-c", "import subprocess, sys; subprocess.run(sys.argv[1:])", *child]
    stranger = subprocess.run(grandchild, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert stranger.stdout.split() == ["b''", "b''"], stranger.stderr


def test_a_kernel_dies_with_its_launcher(server, tmp_path):
    address, env = server
    connection_file, _ = write_connection_file(str(tmp_path / "kernel.json"), transport="ipc", ip=str(tmp_path / "k"))
    env = {**env, ENV: Settings(base=str(tmp_path / "base")).to_env(), forkserver.ADDRESS_ENV: address}
    (tmp_path / "base").mkdir()
    launcher = subprocess.Popen([sys.executable, "-m", "autograder.isolation.launcher", connection_file], env=env, cwd=tmp_path,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    server_pid = forkserver._server["proc"].pid
    deadline = time.monotonic() + 120
    while len(_descendants(server_pid)) < 2:  # the supervisor and the kernel it forked
        assert launcher.poll() is None and time.monotonic() < deadline, "no kernel was forked"
        time.sleep(0.2)
    client = BlockingKernelClient(connection_file=connection_file)
    client.load_connection_file()
    client.start_channels()
    try:
        client.wait_for_ready(timeout=120)  # the kernel is up and waiting for nbgrader: it answers
    finally:
        client.stop_channels()
    assert launcher.poll() is None
    launcher.send_signal(signal.SIGKILL)  # what jupyter_client does to a kernel that will not stop
    launcher.wait()
    deadline = time.monotonic() + 30
    while _descendants(server_pid):
        assert time.monotonic() < deadline, f"left running: {_descendants(server_pid)}"
        time.sleep(0.2)


ORPHAN = r"""
import ctypes, os, sys, time
from autograder.isolation.sandbox import die_with_parent
# This process adopts orphans (PR_SET_CHILD_SUBREAPER): its grandchild's getppid() is then neither
# 1 nor its parent's, as a kernel's is inside a new PID namespace (0).
ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0)
if os.fork() == 0:  # the supervisor
    parent_alive, keep_alive = os.pipe()
    if os.fork() == 0:  # the kernel
        os.close(keep_alive)
        time.sleep(0.5)  # the supervisor has ended by now: a death signal set from here on never comes
        die_with_parent(parent_alive if sys.argv[2] == "pipe" else None)
        open(sys.argv[1], "w").write("survived")
        time.sleep(5)
    os._exit(0)
time.sleep(1.5)
while True:
    try:
        os.wait()
    except ChildProcessError:
        break
"""


def test_a_process_whose_parent_ended_before_it_asked_to_die_with_it_ends(tmp_path):
    """What a kernel forked as PID 1 of a new PID namespace relies on: its getppid() is 0 there
    while its supervisor lives, so only the pipe tells it that the supervisor ended before it set
    its death signal (else the kernel would stay, ignoring SIGTERM as a namespace's init does)."""
    marker = tmp_path / "survived"
    subprocess.run([sys.executable, "-c", ORPHAN, str(marker), "pipe"], cwd=REPO_ROOT, check=True, timeout=60)
    assert not marker.exists(), "the kernel outlived its supervisor"


def test_two_hand_ins_differ_only_in_what_a_fork_server_serves_them_all(tmp_path, monkeypatch):
    """A fork server is started again whenever the environment of a hand-in's nbgrader run
    differs in a variable outside PER_RUN: every variable that differs between two hand-ins
    (of one workspace, or of two) must be in PER_RUN, or each hand-in pays a new server."""
    from autograder.grading import workspace

    seen = []
    monkeypatch.setattr(workspace, "run_nbgrader",
                        lambda ws, *args, env=None, **kw: seen.append({**workspace.nbgrader_env(ws), **env}))
    for name in ("one", "two"):
        ws = open_workspace(tmp_path / name)
        ws.source_path(ASSIGNMENT).parent.mkdir(parents=True)
        ws.source_path(ASSIGNMENT).write_bytes(course.solution_path(ASSIGNMENT).read_bytes())
        for student in ("ada", "bob"):
            workspace.autograde(ws, student, ASSIGNMENT)
    differ = {key for env in seen[1:] for key in set(env) | set(seen[0]) if env.get(key) != seen[0].get(key)}
    assert differ and differ <= set(forkserver.PER_RUN), sorted(differ - set(forkserver.PER_RUN))
