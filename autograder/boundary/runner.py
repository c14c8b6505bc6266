"""The trusted runner: one process per hand-in that runs the notebook's locked cells and its
test cells, and never a line the student wrote.

`python -m autograder.boundary.runner` reads requests from its stdin and answers on its stdout,
one JSON object a line, from the grader's preprocessor (autograder.boundary.execute), which is
trusted too:
    {"op": "start", "connection": {...}, "names": ["Vocab", ...], "timeout": 60}
        connects a kernel client of its own to the student's kernel and binds each graded name
        to a Handle (autograder.boundary.runner_side);
    {"op": "run", "source": "...", "test": true}
        runs a cell in the runner's namespace; the answer is the cell's outputs in nbformat's
        form: what it printed, what the student's code printed while the cell called it, and
        the error it ended with;
    {"op": "stop"}.
Nothing from the kernel reaches this process but data decoded by autograder.boundary.codec.
"""
from __future__ import annotations

import json
import signal
import sys
import traceback

import utils.checks as checks
from autograder.boundary.runner_side import Boundary, Handle, KernelLink, NoAnswer

TIMEOUT_NAME = "CellTimeoutError"


class CellTimeout(Exception):
    pass


class _Stream:
    """sys.stdout or sys.stderr of a cell: what it writes joins the cell's outputs in order."""

    def __init__(self, name: str, outputs: list):
        self.name, self.outputs = name, outputs

    def write(self, text: str) -> int:
        if self.outputs and self.outputs[-1]["name"] == self.name:
            self.outputs[-1]["text"] += text
        else:
            self.outputs.append({"name": self.name, "text": text})
        return len(text)

    def flush(self) -> None:
        pass


class Runner:
    def __init__(self):
        self.namespace: dict = {"__name__": "__main__", "__builtins__": __builtins__}
        self.link: KernelLink | None = None
        self.count, self.timeout = 0, 0

    def start(self, connection: dict, names: list[str], timeout: float) -> dict:
        from jupyter_client import BlockingKernelClient

        client = BlockingKernelClient()
        client.load_connection_info(connection)
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
            self.link.outputs, self.link.printed = streams, 0  # the student's prints join the cell's, in order
        saved = sys.stdout, sys.stderr
        sys.stdout, sys.stderr = _Stream("stdout", streams), _Stream("stderr", streams)
        signal.signal(signal.SIGALRM, _alarm)
        signal.setitimer(signal.ITIMER_REAL, self.timeout)
        try:
            checks._boundary.sources.append(source)  # where stand_in finds its definitions
            try:
                exec(compile(source, f"<cell {self.count}>", "exec"), self.namespace)
            except BaseException as exc:  # the cell's outcome, whatever it is
                error = exc
            if not _timed_out(error) and self.link is not None:
                try:
                    self.link.end()  # the kernel stops serving the cell's requests
                except BaseException as exc:
                    error = error or exc
            if _timed_out(error):
                interrupt = True
                error = CellTimeout(f"the cell ran past its {self.timeout:g} s limit")
                if self.link is not None:
                    self.link.abandon()
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            sys.stdout, sys.stderr = saved
        outputs = [{"output_type": "stream", **s} for s in streams]
        if error is not None:
            outputs.append(_error_output(error, test))
        return {"outputs": outputs, "interrupt": interrupt}


def _timed_out(error) -> bool:
    return isinstance(error, (CellTimeout, NoAnswer))


def _alarm(signum, frame):
    raise CellTimeout()


def _error_output(exc: BaseException, test: bool) -> dict:
    """The error as nbformat shows it. A test cell's traceback names only the exception: no line
    of the test's source (hidden tests included) is written into the notebook."""
    name = TIMEOUT_NAME if isinstance(exc, CellTimeout) else type(exc).__name__
    value = str(exc)
    lines = [f"{name}: {value}"] if test else traceback.format_exception(exc)
    return {"output_type": "error", "ename": name, "evalue": value, "traceback": lines}


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


def main() -> None:
    protocol = sys.stdout
    sys.stdout = sys.stderr  # what a cell prints never reaches the protocol's stream
    serve(sys.stdin, protocol)


if __name__ == "__main__":
    main()
