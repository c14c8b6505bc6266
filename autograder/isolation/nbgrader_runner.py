"""nbgrader commands run in long-lived helper processes, so that nbgrader's own start-up is
paid once per process instead of once per hand-in.

Starting `python -m nbgrader` imports nbgrader, jupyter_server, nbconvert, SQLAlchemy and
the exchange: 3 to 5 s on a 2-core machine before any notebook is touched (measured in
benchmarks/README.md, "Where the time of one hand-in goes"). A *runner* pays it once, then
runs one nbgrader command at a time, each exactly as `python -m nbgrader ARGS` would (the
same arguments, working folder and environment, its own nbgrader application object, reset
afterwards). Nothing of the isolation changes: nbgrader still starts a fresh kernel for
every hand-in through the sandbox launcher, and that kernel still dies with its nbgrader
process (the launcher's PR_SET_PDEATHSIG): a command past its time limit is stopped by
killing the runner's whole process group, and the next command gets a new runner.

    run(args, env, cwd, timeout) -> (returncode, log)   used by autograder.grading.workspace.run_nbgrader

A runner also checks nbgrader's cell-metadata schema once (`check_schemas_once`) instead of
once per cell.

A runner serves at most MAX_COMMANDS commands, then is replaced, so that nothing accumulates
without bound (measured: its memory grows by about 0.15 MiB a hand-in; a replacement costs
its imports and its fork server's, about 7 CPU-s).
AUTOGRADER_NBGRADER_RUNNER=0 turns runners off (a fresh `python -m nbgrader` per command).
"""
from __future__ import annotations

import atexit
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time

from autograder.isolation import scratch
from autograder.isolation.waiting import readable_within

MAX_COMMANDS = 400
START_TIMEOUT_S = 300  # importing nbgrader on a loaded machine


def enabled() -> bool:
    from autograder.isolation.forkserver import switched_on

    return switched_on("AUTOGRADER_NBGRADER_RUNNER")


class RunnerDied(Exception):
    """The runner process ended in the middle of a command (its log is kept)."""


class Runner:
    """One helper process (`python -m autograder.isolation.nbgrader_runner --serve`)."""

    def __init__(self):
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "autograder.isolation.nbgrader_runner", "--serve"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
            start_new_session=True,  # its process group: nbgrader and the kernel launchers it starts
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
            pass_fds=scratch.reaper_fds(),  # it writes into our sandbox folders: the reaper waits for it too
        )
        self.ready = False
        self.commands = 0
        self._buffer = b""

    def _readline(self, deadline: float | None) -> bytes:
        fd = self.proc.stdout.fileno()
        while b"\n" not in self._buffer:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            if left == 0.0 or not readable_within(fd, left):
                raise TimeoutError
            chunk = os.read(fd, 65536)
            if not chunk:
                raise RunnerDied
            self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        return line

    def run(self, args: list[str], env: dict, cwd: str, timeout: float | None) -> tuple[int, str]:
        """Run one command; TimeoutError past `timeout` (the runner is then killed)."""
        if not self.ready:
            try:
                self._readline(time.monotonic() + START_TIMEOUT_S)
            except (TimeoutError, RunnerDied):
                self.kill()
                raise RunnerDied("the nbgrader runner did not start") from None
            self.ready = True
        with scratch.file("nbgrader-log-") as log:
            request = {"args": list(args), "env": env, "cwd": str(cwd), "log": str(log)}
            self.commands += 1
            try:
                self.proc.stdin.write((json.dumps(request) + "\n").encode())
                self.proc.stdin.flush()
                reply = json.loads(self._readline(None if timeout is None else time.monotonic() + timeout))
            except TimeoutError:
                self.kill()
                raise
            except (RunnerDied, BrokenPipeError, ValueError):
                self.kill()
                raise RunnerDied(_read(log)) from None
            return int(reply["rc"]), _read(log)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def kill(self) -> None:
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        self.proc.wait()

    def close(self) -> None:
        try:
            self.proc.stdin.close()
            self.proc.wait(timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            self.kill()


def _read(path: str) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read()
    except OSError:
        return ""


_idle: list[Runner] = []
_lock = threading.Lock()


def _take() -> Runner:
    with _lock:
        while _idle:
            runner = _idle.pop()
            if runner.alive():
                return runner
    return Runner()


def _give_back(runner: Runner) -> None:
    if runner.alive() and runner.commands < MAX_COMMANDS:
        with _lock:
            _idle.append(runner)
    else:
        runner.close()


def warm_up(count: int) -> None:
    """Start `count` runners now (they import nbgrader while the grader repairs hand-ins)."""
    if not enabled():
        return
    with _lock:
        missing = max(0, count - len(_idle))
    started = [Runner() for _ in range(missing)]
    with _lock:
        _idle.extend(started)


@atexit.register
def shutdown() -> None:
    with _lock:
        runners, _idle[:] = list(_idle), []
    for runner in runners:
        runner.close()


def run(args: list[str], env: dict, cwd: str, timeout: float | None) -> tuple[int, str]:
    """`python -m nbgrader ARGS` in a runner: (return code, its output). TimeoutError past
    `timeout`; RunnerDied (with the log so far) if the runner process itself died."""
    runner = _take()
    try:
        return runner.run(args, env, cwd, timeout)
    finally:
        _give_back(runner)


# ----------------------------------------------------------------------------- the runner side


def _serve() -> None:
    """Read one JSON request per line on stdin, answer one JSON line on (the original) stdout."""
    replies = os.fdopen(os.dup(1), "w", buffering=1)
    requests = os.fdopen(os.dup(0), "r")
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):  # nothing that nbgrader or a child prints may reach the protocol
        os.dup2(null, fd)
    import nbgrader.apps.nbgraderapp  # noqa: F401  (the slow part, once)
    import nbgrader.converters  # noqa: F401
    import nbclient.client  # noqa: F401

    check_schemas_once()

    parent = os.getppid()

    def orphaned() -> None:  # the grader died: stop, and the kernel launchers die with us
        while os.getppid() == parent:
            time.sleep(1)
        os._exit(1)

    threading.Thread(target=orphaned, daemon=True).start()
    replies.write(json.dumps({"ready": os.getpid()}) + "\n")
    for line in requests:
        request = json.loads(line)
        replies.write(json.dumps({"rc": _command(request)}) + "\n")


class _SchemaOnce:
    """`jsonschema` as nbgrader's metadata validator uses it (`jsonschema.validate(instance,
    schema)`), with each schema checked once. jsonschema.validate checks the schema itself on
    every call before it validates the instance: 1.4 ms of the 1.5 ms a call takes, and
    nbgrader makes one call per cell that has nbgrader metadata, in each of the two passes of
    every hand-in (about 0.2 CPU-s a hand-in of 07). The instance is validated by the same
    validator class, and the error raised is the same (`best_match` of the same errors)."""

    def __init__(self, module):
        self._module, self._validators = module, {}

    def validate(self, instance, schema) -> None:
        key = json.dumps(schema, sort_keys=True)
        validator = self._validators.get(key)
        if validator is None:
            cls = self._module.validators.validator_for(schema)
            cls.check_schema(schema)
            validator = self._validators[key] = cls(schema)
        error = self._module.exceptions.best_match(validator.iter_errors(instance))
        if error is not None:
            raise error

    def __getattr__(self, name):
        return getattr(self._module, name)


def check_schemas_once() -> None:
    """nbgrader's cell-metadata validator (nbgrader.nbgraderformat.common) with `_SchemaOnce`
    in place of its `jsonschema`: in this process only."""
    import jsonschema
    from nbgrader.nbgraderformat import common

    if not isinstance(common.jsonschema, _SchemaOnce):
        common.jsonschema = _SchemaOnce(jsonschema)


def _command(request: dict) -> int:
    from jupyter_core.application import NoStart
    from jupyter_core.utils import ensure_event_loop
    from nbgrader.apps.nbgraderapp import NbGraderApp

    from autograder.isolation import forkserver

    saved_env, saved_path, saved_cwd = dict(os.environ), list(sys.path), os.getcwd()
    log = os.open(request["log"], os.O_WRONLY | os.O_APPEND)
    saved_fds = os.dup(1), os.dup(2)
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.environ.clear()
    os.environ.update(request["env"])
    address = request["args"][:1] == ["autograde"] and forkserver.address_for(request["env"])
    if address:  # the hand-in's kernel: forked from a process that imported torch once
        os.environ[forkserver.ADDRESS_ENV] = address
    os.chdir(request["cwd"])
    tempfile.tempdir = None  # TMPDIR is the command's own
    sys.argv = ["nbgrader", *request["args"]]
    app = None
    code = 0
    try:  # NbGraderApp.launch_instance(), without its sys.exit
        ensure_event_loop()
        app = NbGraderApp.instance()
        app.initialize(request["args"])
        app.start()
    except NoStart:  # how a jupyter application says its subcommand ran
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException:  # what `python -m nbgrader` would print before exiting with 1
        import traceback

        traceback.print_exc()
        code = 1
    finally:
        try:
            if app is not None:
                app.reset()
        except Exception:
            pass
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:
                pass
        os.dup2(saved_fds[0], 1)
        os.dup2(saved_fds[1], 2)
        for fd in (*saved_fds, log):
            os.close(fd)
        os.chdir(saved_cwd)
        os.environ.clear()
        os.environ.update(saved_env)
        sys.path[:] = saved_path
        tempfile.tempdir = None
    return code


if __name__ == "__main__":
    if sys.argv[1:] == ["--serve"]:
        _serve()
