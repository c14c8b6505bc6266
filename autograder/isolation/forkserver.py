"""Grading kernels forked from a process that has imported torch once.

Most of a fresh grading kernel's start is imports: torch 2.0-2.4 s, matplotlib 0.6-0.8 s,
ipykernel 0.2 s on a 2-core machine (benchmarks/README.md, "Where the time of one hand-in
goes"). Each nbgrader runner (autograder.isolation.nbgrader_runner) therefore keeps a *fork server*:
a process that imported PRELOAD once and waits on an abstract Unix socket. The sandbox's
launcher (the kernelspec's command, autograder.isolation.launcher) asks it for the kernel instead of
starting a new interpreter:

    launcher --request--> server --fork--> supervisor --fork--> kernel

The supervisor enters the namespaces the `unshare` command would have made (network,
mount, PID, and a user namespace where the grader is not root), forks the kernel (PID 1
of the new PID namespace, dying with the supervisor), and then only watches: when the
launcher ends (nbgrader killed it) it kills the kernel; when the kernel ends it sends the
exit status to the launcher, which exits with it. The kernel goes through the launcher's
own `inner` steps: private folder, hidden paths, locked mounts, limits, guard. Two kernels
share nothing but the unchanged pages of the imported modules (copy-on-write).

Only nbgrader's launchers are served: a process whose parent is the server's parent (the
runner), of the same user. A sandboxed kernel cannot reach the socket at all (it lives in
the runner's network namespace), and without namespaces its kernel is never a child of the
runner. If the server cannot be reached or cannot isolate, the launcher starts the kernel
as before. AUTOGRADER_FORKSERVER=0 turns fork servers off.

    address_for(env) -> address or None    the runner: this env's server (started once)
    request_kernel(argv)                    the launcher: never returns if a kernel ran
"""
from __future__ import annotations

import atexit
import gc
import importlib
import json
import os
import secrets
import select
import signal
import socket
import subprocess
import sys
import tempfile
import traceback

from autograder.isolation.waiting import readable_within

ADDRESS_ENV = "AUTOGRADER_FORKSERVER_ADDRESS"  # set by the runner for the launchers it starts
SWITCH_ENV = "AUTOGRADER_FORKSERVER"
# What a grading kernel imports anyway, slowest first. ipykernel.debugger (debugpy, 0.18 s) is
# imported by every IPythonKernel when it is made; torch's shape checks (torch._check_with, e.g.
# nn.MultiheadAttention given a key padding mask) import symbolic_shapes and sympy on first use,
# 0.6 s in every kernel of notebooks 06 and 07; sacrebleu (setup cells of 04 and 07, 0.08 s) and
# numpy.random (utils.runtime.seed_everything, 0.03 s) in every kernel and runner that grade them; the
# course's own utils modules that the notebooks' setup cells import, and regex (01's byte-level tokenizer),
# about 0.05 s in every kernel and again in every runner (which runs the setup cell too). Importing them
# starts no thread, sets no hook and reads no environment variable (utils reads COURSE_* when called).
# torch._dynamo (0.5-0.6 s in nearly every kernel: check_conventions' device probe, which runs the hand-in's
# code under a dispatch mode, and making any torch.optim optimizer import it on first use) reads its settings from
# environment variables a server shares with its kernels, and names one folder from the temp dir: its
# precompile cache, under the server's /tmp, which only torch.compile with caching_precompile set would use.
# tqdm.auto and ipywidgets are left out on purpose: they look for a running IPython when imported.
PRELOAD = ("numpy", "torch", "torch.nn", "matplotlib", "matplotlib.pyplot", "ipykernel.kernelapp",
           "ipykernel.debugger", "torch.fx.experimental.symbolic_shapes", "torch._dynamo", "autograder.isolation.guard",
           "autograder.isolation.sandbox", "autograder.isolation.boundary.kernel_side", "autograder.isolation.boundary.runner", "jupyter_client", "sacrebleu",
           "numpy.random", "regex", "torch.nn.utils.rnn", "torch.nn.attention", "utils.checks", "utils.data",
           "utils.plotting", "utils.runtime", "utils.widgets", "utils.lexicon", "utils.text", "utils.synthetic",
           "utils.purple_cats", "utils.attention_plots", "utils.training", "utils.translation", "utils.conventions")
# Variables that differ between two hand-ins (of one batch, or of two workspaces: JUPYTER_PATH
# leads nbgrader to the workspace's kernelspec) and that no import reads: a server serves them
# all. Any other difference (thread counts, matplotlib's backend) gets a server of its own.
PER_RUN = ("AUTOGRADER_SANDBOX", "AUTOGRADER_SPLIT", "JUPYTER_RUNTIME_DIR", "TMPDIR", "JUPYTER_PATH", ADDRESS_ENV)
STARTED, FALLBACK = b"started", b"fallback"
MAX_REQUEST = 1 << 20
BIND_TIMEOUT_S = 60


def switched_on(variable: str) -> bool:
    """An on/off environment variable of the grader's: on unless set to 0, false, no or off."""
    return os.environ.get(variable, "1").strip().lower() not in {"0", "false", "no", "off"}


def enabled() -> bool:
    return switched_on(SWITCH_ENV)


def _available() -> bool:
    return sys.platform == "linux" and hasattr(os, "pidfd_open") and hasattr(socket, "send_fds")


# ----------------------------------------------------------------------------- the runner side

_server: dict = {}  # {"env": ..., "address": ..., "proc": Popen} of this runner


def address_for(env: dict) -> str | None:
    """The address of a fork server whose imports ran in `env` (started now if needed)."""
    if not (enabled() and _available()):
        return None
    wanted = {k: v for k, v in env.items() if k not in PER_RUN}
    if _server and (_server["env"] != wanted or _server["proc"].poll() is not None):
        _stop()
    if not _server:
        address = f"course-forkserver-{os.getpid()}-{secrets.token_hex(8)}"
        package_root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        proc = subprocess.Popen(  # same process group as the runner: killed with it
            [sys.executable, "-m", "autograder.isolation.forkserver", address], env=wanted, cwd=package_root,
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
        )
        _server.update(env=wanted, address=address, proc=proc)
        # It says when it listens (before its imports: launchers that come early wait for them).
        if not readable_within(proc.stdout, BIND_TIMEOUT_S) or proc.stdout.readline() != b"listening\n":
            _stop()
            return None
    return _server["address"]


@atexit.register
def _stop() -> None:
    proc = _server.pop("proc", None)
    _server.clear()
    if proc is not None and proc.poll() is None:
        proc.terminate()  # between commands: no kernel is running
        proc.wait()


# ----------------------------------------------------------------------------- the launcher side


def request_kernel(argv: list[str]) -> None:
    """Have the runner's fork server run this kernel, and exit with its status. Returns
    (having started nothing) when there is no server to ask or it could not isolate."""
    address = os.environ.get(ADDRESS_ENV)
    if not address or not _available():
        return
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    try:
        conn.connect("\0" + address)
        request = {"argv": list(argv), "env": dict(os.environ), "cwd": os.getcwd()}
        socket.send_fds(conn, [json.dumps(request).encode()], [0, 1, 2])
        first = conn.recv(64)  # after the server's imports (a new server) and the fork
    except OSError:
        conn.close()
        return
    if first != STARTED:  # no kernel was started (the server died, or could not isolate)
        conn.close()
        return
    try:
        status = conn.recv(64)  # when the kernel ends
        code = int(status) if status else 1
    except (OSError, ValueError):
        code = 1
    os._exit(code if code >= 0 else 128 - code)


# ----------------------------------------------------------------------------- the server side


def _parent_of(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return -1


def _peer(conn: socket.socket, runner: int) -> str | None:
    """"launcher" for one of the runner's kernel launchers, "runner" for the runner itself (it asks
    for a trusted test runner, autograder.isolation.boundary.runner), None for anyone else."""
    creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12)
    pid, uid = int.from_bytes(creds[0:4], sys.byteorder), int.from_bytes(creds[4:8], sys.byteorder)
    if uid != os.getuid():
        return None
    return "runner" if pid == runner else "launcher" if _parent_of(pid) == runner else None


def serve(address: str) -> None:
    """Bind first (a launcher that comes early waits in the backlog), import, then fork a
    supervisor for every launcher that asks."""
    from autograder.isolation import sandbox

    sandbox.die_with_parent()
    runner = os.getppid()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    listener.bind("\0" + address)
    listener.listen(64)
    os.write(1, b"listening\n")
    os.dup2(os.open(os.devnull, os.O_WRONLY), 1)
    for name in PRELOAD:
        importlib.import_module(name)
    # The imported modules live as long as any kernel: out of the garbage collector's sight, a kernel's
    # full collections skip their ~275,000 objects (0.13-0.3 s each) and leave their pages shared.
    gc.freeze()
    signal.signal(signal.SIGCHLD, _reap)
    while True:
        conn, _ = listener.accept()
        peer = _peer(conn, runner)
        if peer and os.fork() == 0:
            listener.close()
            (_supervise if peer == "launcher" else _run_tests)(conn)  # never returns
        conn.close()


def _reap(signum, frame) -> None:
    """Wait for the supervisors that ended (so their CPU time counts as the runner's children's)."""
    try:
        while os.waitpid(-1, os.WNOHANG)[0] > 0:
            pass
    except ChildProcessError:
        pass


def _supervise(conn: socket.socket) -> None:
    """The supervisor: isolate, fork the kernel, report its start and its end."""
    from autograder.isolation import sandbox

    try:
        sandbox.die_with_parent()
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        payload, fds, _, _ = socket.recv_fds(conn, MAX_REQUEST, 3)
        request = json.loads(payload)
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
            os.close(fd)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        settings = sandbox.Settings.from_env(os.environ.get(sandbox.ENV, "{}"))
        isolated = bool(settings.isolation)
        if isolated:
            try:
                sandbox.enter_namespaces(user="--user" in settings.isolation)
            except OSError:
                conn.send(FALLBACK)  # the launcher starts the kernel the usual way
                return
        parent_alive, keep_alive = os.pipe()  # end of file for the kernel once this process ends
        kernel = os.fork()
        if kernel == 0:
            conn.close()
            os.close(keep_alive)
            _run_kernel(request, isolated, parent_alive)  # never returns
        os.close(parent_alive)
        conn.send(STARTED)
        code = _watch(conn, kernel)
        conn.send(str(code).encode())
    except BaseException:  # noqa: BLE001  (nothing may escape a forked child)
        traceback.print_exc()
    finally:
        os._exit(0)


def _run_tests(conn: socket.socket) -> None:
    """A trusted test runner (autograder.isolation.boundary.runner) on the two pipes the runner sent: no
    sandbox, a session of its own; it says its pid, then serves until its requests end."""
    from autograder.isolation import sandbox
    from autograder.isolation.boundary import runner

    code = 0
    try:
        sandbox.die_with_parent()
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        os.setsid()
        payload, fds, _, _ = socket.recv_fds(conn, MAX_REQUEST, 2)
        request = json.loads(payload)
        os.dup2(fds[0], 0)
        os.dup2(fds[1], 1)
        for fd in fds:
            os.close(fd)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        conn.send(str(os.getpid()).encode())
        conn.close()
        sys.stdin, sys.stdout = os.fdopen(0, "r"), os.fdopen(1, "w")
        runner.main()
    except BaseException:  # noqa: BLE001  (nothing may escape a forked child)
        traceback.print_exc()
        code = 1
    finally:
        os._exit(code)


def request_test_runner() -> tuple[int, int, int] | None:
    """From the runner: a trusted test runner forked by this command's fork server, as (pid, the fd
    to write its requests to, the fd to read its replies from); None when there is no server."""
    address = os.environ.get(ADDRESS_ENV)
    if not address or not _available():
        return None
    requests_r, requests_w = os.pipe()
    replies_r, replies_w = os.pipe()
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    try:
        conn.connect("\0" + address)
        request = {"env": dict(os.environ), "cwd": os.getcwd()}
        socket.send_fds(conn, [json.dumps(request).encode()], [requests_r, replies_w])
        pid = int(conn.recv(64))
    except (OSError, ValueError):
        for fd in (requests_w, replies_r):
            os.close(fd)
        return None
    finally:
        conn.close()
        os.close(requests_r)
        os.close(replies_w)
    return pid, requests_w, replies_r


def _watch(conn: socket.socket, kernel: int) -> int:
    """Wait for the kernel to end (its exit code), or kill it when the launcher is gone."""
    pidfd = os.pidfd_open(kernel)
    poller = select.poll()
    poller.register(conn.fileno(), select.POLLIN | select.POLLHUP)
    poller.register(pidfd, select.POLLIN)
    while True:
        for fd, _ in poller.poll():
            if fd == pidfd:
                return os.waitstatus_to_exitcode(os.waitpid(kernel, 0)[1])
            if not conn.recv(16):  # the launcher died or was killed: so does its kernel
                os.kill(kernel, signal.SIGKILL)
                os.waitpid(kernel, 0)
                os._exit(0)


def _run_kernel(request: dict, isolated: bool, parent_alive: int) -> None:
    """The kernel process: what the launcher's `inner` does in a new interpreter."""
    from autograder.isolation import sandbox

    code = 0
    try:
        sandbox.die_with_parent(parent_alive)
        if isolated:
            sandbox.mount_proc()
            os.environ["AUTOGRADER_IN_NAMESPACE"] = "1"
        tempfile.tempdir = None  # TMPDIR is this kernel's own
        sys.path[0] = request["cwd"]  # as `python -m` started there would have it
        sys.argv = [sys.argv[0], *request["argv"]]
        sandbox.inner(request["argv"])
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException:  # noqa: BLE001
        traceback.print_exc()
        code = 1
    finally:
        try:
            atexit._run_exitfuncs()
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


if __name__ == "__main__":
    serve(sys.argv[1])
