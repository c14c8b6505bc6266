"""The trusted runner: one process per hand-in that runs the notebook's locked cells and its
test cells, and never a line the student wrote.

`python -m autograder.isolation.boundary.runner` reads requests from its stdin and answers on its stdout,
one JSON object a line, from the grader's preprocessor (autograder.isolation.boundary.execute), which is
trusted too:
    {"op": "start", "connection": {...}, "names": ["Vocab", ...], "timeout": 60}
        connects a kernel client of its own to the student's kernel and binds each graded name
        to a Handle (autograder.isolation.boundary.runner_side);
    {"op": "run", "source": "...", "test": true}
        runs a cell in the runner's namespace; the answer is the cell's outputs in nbformat's
        form: what it printed, what the student's code printed while the cell called it, and
        the error it ended with;
    {"op": "stop"}.
Nothing from the kernel reaches this process but data decoded by autograder.isolation.boundary.codec.
What it holds of the hand-in is bounded: the kernel's replies by the codec's limits, what the
cells print and the errors they end with by the caps below, and the process itself by a limit on
its data memory (`sandbox.Limits.runner_memory_mb`, RLIMIT_DATA: torch's reservations of address
space that it never writes do not count), so a reply that would need more ends as a MemoryError
of its own or a refused reply, not as a machine out of memory.
"""
from __future__ import annotations

import json
import os
import resource
import signal
import sys
import traceback

import utils.checks as checks
from autograder.isolation import kernel_text
from autograder.isolation.boundary.runner_side import MESSAGE_CAP, Boundary, Handle, KernelLink, NoAnswer

TIMEOUT_NAME = "CellTimeoutError"
STREAM_CAP = 128 << 10  # characters the test cells of one notebook may print themselves
ERROR_CAP = 2000        # characters of an error's message written into the executed notebook
TRACEBACK_LINES = 40    # lines of a locked cell's traceback kept (the last ones)


class CellTimeout(Exception):
    pass


class _Stream:
    """sys.stdout or sys.stderr of a cell: what it writes joins the cell's outputs in order,
    up to what is `left` of the notebook's STREAM_CAP (a one-item list, shared)."""

    def __init__(self, name: str, outputs: list, left: list):
        self.name, self.outputs, self.left = name, outputs, left

    def write(self, text: str) -> int:
        kept = text[:max(0, self.left[0])]
        if len(text) > self.left[0] >= 0:
            kept += f"\n[the grader kept the first {STREAM_CAP:,} characters the test cells printed]\n"
        self.left[0] -= len(text)
        if not kept:
            return len(text)
        if self.outputs and self.outputs[-1]["name"] == self.name:
            self.outputs[-1]["text"] += kept
        else:
            self.outputs.append({"name": self.name, "text": kept})
        return len(text)

    def flush(self) -> None:
        pass


class Runner:
    def __init__(self):
        self.namespace: dict = {"__name__": "__main__", "__builtins__": __builtins__}
        self.link: KernelLink | None = None
        self.count, self.timeout = 0, 0
        self.stream_left = [STREAM_CAP]

    def start(self, connection: dict, names: list[str], timeout: float) -> dict:
        client = kernel_client(connection)
        client.start_channels()
        self.link = KernelLink(client, timeout=timeout)
        self.timeout = timeout
        checks._boundary = Boundary(self.link, self.namespace)
        for name in names:
            self.namespace[name] = Handle(self.link, name)
        return {"ok": True}

    def run(self, source: str, test: bool) -> dict:
        """Run one cell; its outputs (stream outputs and the error, nbformat's form)."""
        self.count += 1
        streams: list[dict] = []
        error, interrupt = None, False
        if self.link is not None:
            self.link.outputs = streams  # the student's prints join the cell's, in order
        saved = sys.stdout, sys.stderr
        sys.stdout, sys.stderr = _Stream("stdout", streams, self.stream_left), _Stream("stderr", streams, self.stream_left)
        signal.signal(signal.SIGALRM, _alarm)
        signal.setitimer(signal.ITIMER_REAL, self.timeout)
        try:
            checks._boundary.sources.append(source)  # where stand_in finds its definitions
            try:
                exec(compile(source, f"<cell {self.count}>", "exec"), self.namespace)
            except BaseException as exc:  # the cell's outcome, whatever it is
                error = exc
            closed = self.link is not None and self.link.closed is not None
            if not _timed_out(error) and self.link is not None and not closed:
                try:
                    self.link.end()  # the kernel stops serving the cell's requests
                except BaseException as exc:
                    error = error or exc
            if _timed_out(error) or closed and self.link.serving is not None:  # the kernel is stopped instead
                interrupt = True
                if _timed_out(error):
                    error = CellTimeout(f"the cell ran past its {self.timeout:g} s limit")
                self.link.abandon()
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            sys.stdout, sys.stderr = saved
        outputs = [{"output_type": "stream", **s} for s in streams]
        if error is not None:
            outputs.append(_error_output(error, test))
        return {"outputs": outputs, "interrupt": interrupt}


def kernel_client(connection: dict):
    """The runner's client of the kernel: it reads broadcasts of at most MESSAGE_CAP bytes (a larger
    one drops the connection, not the runner) and every str of them valid (autograder.isolation.kernel_text)."""
    import zmq
    from jupyter_client import BlockingKernelClient

    client = BlockingKernelClient(session=kernel_text.session())
    client.load_connection_info(connection)
    client.context.setsockopt(zmq.MAXMSGSIZE, MESSAGE_CAP)
    return client


def _timed_out(error) -> bool:
    return isinstance(error, (CellTimeout, NoAnswer))


def _alarm(signum, frame):
    raise CellTimeout()


def _error_output(exc: BaseException, test: bool) -> dict:
    """The error as nbformat shows it. A test cell's traceback names only the exception: no line
    of the test's source (hidden tests included) is written into the notebook."""
    name = TIMEOUT_NAME if isinstance(exc, CellTimeout) else type(exc).__name__
    value = _cut(str(exc))
    lines = [f"{name}: {value}"] if test else [_cut(line) for line in traceback.format_exception(exc)[-TRACEBACK_LINES:]]
    return {"output_type": "error", "ename": name, "evalue": value, "traceback": lines}


def _cut(text: str) -> str:
    return text if len(text) <= ERROR_CAP else text[:ERROR_CAP] + f" [... {len(text) - ERROR_CAP:,} more characters]"


def serve(stdin, stdout) -> None:
    runner = Runner()
    for line in stdin:
        request = json.loads(line)
        op = request.get("op")
        if op == "stop":
            break
        try:
            if op == "start":
                reply = runner.start(request["connection"], request["names"], request["timeout"])
            elif op == "run":
                reply = runner.run(request["source"], request.get("test", False))
            else:
                reply = {"failed": f"unknown request {op!r}"}
        except Exception as exc:  # the runner could not do it (no kernel...): the grader says so
            reply = {"failed": f"{type(exc).__name__}: {exc}"}
        stdout.write(json.dumps(reply) + "\n")
        stdout.flush()


def limit_memory() -> None:
    """Bound this process's data memory (RLIMIT_DATA) to the hand-in's `runner_memory_mb`."""
    from autograder.isolation.sandbox import ENV, Settings

    megabytes = Settings.from_env(os.environ.get(ENV) or "{}").limits.runner_memory_mb
    if megabytes > 0:
        resource.setrlimit(resource.RLIMIT_DATA, (megabytes << 20, megabytes << 20))


def main() -> None:
    protocol = sys.stdout
    sys.stdout = sys.stderr  # what a cell prints never reaches the protocol's stream
    limit_memory()
    serve(sys.stdin, protocol)


if __name__ == "__main__":
    main()
