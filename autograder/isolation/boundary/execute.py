"""nbgrader's executor, split in two: the cells the student wrote run in the student's kernel,
the test cells run in the trusted runner (autograder.isolation.boundary.runner), and the locked cells
in both (the student's code sees their names, the tests see the runner's own copy).

`SplitExecute` takes the place of nbgrader's `Execute` in the autograde preprocessors. Which
cells are the course's is read from the file named by AUTOGRADER_SPLIT (written by the grader
from the source notebook, in the workspace the kernel cannot see): a cell runs in the runner
only when its grade_id and its source are those of a locked or test cell of the source, so a
cell the student added with copied metadata still runs in the kernel. The executed notebook
has every cell's outputs in order, so nbgrader's scoring and the feedback work unchanged.

What the kernel's own cells send is bounded here, on the trusted side, whatever the kernel's
guard did: a message larger than KERNEL_MESSAGE_CAP makes ZeroMQ drop the kernel's connection
(nothing of it is read; ZeroMQ does not reconnect after such an error, so the kernel's later
broadcasts are lost too and each later cell waits nbclient's iopub timeout: a kernel's guard keeps
an honest notebook's output under `Limits.output_kb`, 2 MiB, far below the cap), at most
KERNEL_QUEUE messages wait to be read, and outputs past OUTPUT_CAP bytes (as JSON) in a notebook
are discarded with a note. With the
runner's caps (autograder.isolation.boundary.runner) an executed notebook stays well under 10 MiB.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from queue import Empty

import zmq
from jupyter_client import AsyncKernelClient, AsyncKernelManager
from nbformat.notebooknode import from_dict
from nbformat.v4 import new_output
from nbgrader.preprocessors import Execute
from traitlets import default

from autograder.isolation import kernel_text
from autograder.isolation.waiting import readable_within

ENV = "AUTOGRADER_SPLIT"
KERNEL_MESSAGE_CAP = 4 << 20  # bytes of one message of the kernel that nbgrader's client reads
KERNEL_QUEUE = 256            # messages of the kernel ZeroMQ holds, per socket, until they are read
OUTPUT_CAP = 3 << 20          # bytes (as JSON) of outputs the kernel's cells may add to one notebook
OUTPUT_TYPES = ("stream", "display_data", "execute_result", "error", "update_display_data")
OUTPUT_NOTE = "[the grader discarded what the kernel sent past"  # the note, as autograder.grading.handin finds it
RUNNER_DIED = "the test runner died"  # in nbgrader's log: autograder.grading.workspace tells it apart
SKIPPED = "[not run: a test cell before the changed cell, in a verdict-only grading]"  # the output of a skipped test cell


class RunnerFailed(Exception):
    """The trusted runner died or could not reach the kernel (the hand-in ends as failed)."""


def course_cells(notebook) -> dict:
    """What the runner needs of a source notebook: the locked and test cells (grade_id ->
    source and whether it is a test) and the names the solution cells define."""
    import ast

    from utils.cells import parse

    cells, names = {}, []
    for cell in notebook.cells:
        meta = cell.metadata.get("nbgrader", {})
        if cell.cell_type != "code" or "grade_id" not in meta:
            continue
        if meta.get("solution"):
            for node in parse(cell.source).body:  # (grade --jobs parses in threads: the locked parse)
                if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
                    names.append(node.name)
        elif meta.get("grade") or meta.get("locked"):
            cells[meta["grade_id"]] = {"source": cell.source, "test": bool(meta.get("grade"))}
    return {"cells": cells, "names": names}


class TrustedRunner:
    """The runner process of one hand-in, spoken to over two pipes: forked from the command's
    fork server (autograder.isolation.forkserver, torch imported once), or a new interpreter."""

    def __init__(self, connection: dict, names: list[str], timeout: float):
        from autograder.isolation import forkserver

        forked = forkserver.request_test_runner()
        if forked is not None:
            self.pid, requests, replies = forked
            self.requests, self.replies = os.fdopen(requests, "w"), os.fdopen(replies, "r")
            self.process = None
        else:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "autograder.isolation.boundary.runner"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL, text=True, start_new_session=True,
            )
            self.pid, self.requests, self.replies = self.process.pid, self.process.stdin, self.process.stdout
        self.ask({"op": "start", "connection": connection, "names": names, "timeout": timeout})

    def ask(self, request: dict) -> dict:
        try:
            self.requests.write(json.dumps(request) + "\n")
            self.requests.flush()
            line = self.replies.readline()
        except (BrokenPipeError, OSError) as exc:
            raise RunnerFailed(f"{RUNNER_DIED} ({exc})") from None
        if not line:
            raise RunnerFailed(RUNNER_DIED)
        reply = json.loads(line)
        if "failed" in reply:
            raise RunnerFailed(f"the test runner failed: {reply['failed']}")
        return reply

    def close(self) -> None:
        """Ask it to stop; kill it when it has not within 10 s."""
        try:
            self.requests.write(json.dumps({"op": "stop"}) + "\n")
            self.requests.close()
        except OSError:
            pass
        if not readable_within(self.replies, 10):
            try:
                os.kill(self.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.replies.close()
        if self.process is not None:
            self.process.wait()


def _capped(context: zmq.Context) -> zmq.Context:
    """`context`, whose new sockets read messages of at most KERNEL_MESSAGE_CAP bytes, KERNEL_QUEUE queued."""
    context.setsockopt(zmq.MAXMSGSIZE, KERNEL_MESSAGE_CAP)
    context.setsockopt(zmq.RCVHWM, KERNEL_QUEUE)
    return context


class PromptKernelClient(AsyncKernelClient):
    """nbclient's client of the hand-in's kernel, ready as soon as the kernel has answered
    kernel_info and a message has come through IOPub (so IOPub is connected and no output of the
    first cell is lost). jupyter_client's own wait_for_ready goes on reading IOPub until 0.2 s
    pass without a message: 0.2 s of every hand-in. What it would have read (the status messages
    of the kernel_info requests) is ignored anyway: nbclient reads only the IOPub messages whose
    parent is the cell it runs."""

    async def wait_for_ready(self, timeout: float | None = None) -> None:
        deadline = time.monotonic() + (float("inf") if timeout is None else timeout)
        while True:
            self.kernel_info()
            try:
                reply = await self.shell_channel.get_msg(timeout=1)
            except Empty:
                reply = None
            if reply is not None and reply["msg_type"] == "kernel_info_reply":
                try:
                    await self.iopub_channel.get_msg(timeout=0.2)
                except Empty:
                    pass  # IOPub not connected yet: ask again
                else:
                    self._handle_kernel_info_reply(reply)
                    return
            if not await self.is_alive():
                raise RuntimeError("Kernel died before replying to kernel_info")
            if time.monotonic() > deadline:
                raise RuntimeError(f"Kernel didn't respond in {timeout} seconds")


class CappedKernelManager(AsyncKernelManager):
    """nbclient's kernel manager, whose sockets and whose clients' sockets (every socket the grader
    reads the kernel on) take messages up to KERNEL_MESSAGE_CAP, and whose session (its clients')
    reads every str of them valid (autograder.isolation.kernel_text); its clients are PromptKernelClient."""

    @default("context")
    def _context_default(self):
        return _capped(super()._context_default())

    @default("session")
    def _session_default(self):
        return kernel_text.session(parent=self)

    @default("client_factory")
    def _client_factory_default(self):
        return PromptKernelClient

    def client(self, **kwargs):
        kc = super().client(**kwargs)
        _capped(kc.context)  # before its channels start: a client makes its own context
        return kc


class SplitExecute(Execute):
    """Execute, with the course's test cells run by the trusted runner.

    When the course file asks for a verdict only (`stop_after_failed_test`: the mutant
    harness, which needs to know whether a hand-in loses points, not how many), the first
    test cell that fails ends the run: no later cell runs, and each later test cell gets an
    error output (so it scores 0, never more). With `tests_from` (a grade_id) too, the test
    cells before that cell are not run: each gets a line saying so, and keeps its points."""

    def preprocess(self, nb, resources=None, km=None):
        self.course, self.runner, self.stopped = {"cells": {}, "names": []}, None, False
        self.output_bytes, self.output_cut = 0, False
        if os.environ.get(ENV):  # else every cell runs in the kernel, as nbgrader's Execute does
            with open(os.environ[ENV], encoding="utf-8") as handle:
                self.course = json.load(handle)
        self.skipping = bool(self.course.get("tests_from"))
        try:
            return super().preprocess(nb, resources, km)
        finally:
            if self.runner is not None:
                self.runner.close()

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("kernel_manager_class", CappedKernelManager)
        super().__init__(*args, **kwargs)

    def process_message(self, msg, cell, cell_index):
        """nbclient's, with the outputs of the notebook's kernel cells kept up to OUTPUT_CAP."""
        if msg.get("msg_type") in OUTPUT_TYPES:
            self.output_bytes += len(json.dumps(msg.get("content"), default=str))
            if self.output_bytes > OUTPUT_CAP:
                if not self.output_cut:
                    self.output_cut = True
                    cell.outputs.append(new_output("stream", name="stderr",
                                                   text=f"{OUTPUT_NOTE} {OUTPUT_CAP >> 20} MiB of output]\n"))
                return None
        return super().process_message(msg, cell, cell_index)

    def _course_cell(self, cell) -> dict | None:
        grade_id = cell.metadata.get("nbgrader", {}).get("grade_id")
        known = self.course["cells"].get(grade_id)
        return known if known is not None and known["source"] == cell.source else None

    def _runner(self) -> TrustedRunner:
        if self.runner is None:
            info = dict(self.km.get_connection_info())
            info["key"] = info["key"].decode() if isinstance(info["key"], bytes) else info["key"]
            self.runner = TrustedRunner(info, self.course["names"], self.timeout or 60)
        return self.runner

    def preprocess_cell(self, cell, resources, index):
        known = self._course_cell(cell) if cell.cell_type == "code" else None
        if self.stopped:
            if cell.cell_type == "code" and cell.metadata.get("nbgrader", {}).get("grade"):
                cell.outputs = [new_output("error", ename="NotRun", traceback=[],
                                           evalue="not run: an earlier test cell failed (a verdict-only grading)")]
            return cell, resources
        if self.skipping and cell.metadata.get("nbgrader", {}).get("grade_id") == self.course["tests_from"]:
            self.skipping = False
        if known is not None and known["test"] and self.skipping:
            cell.outputs = [new_output("stream", name="stdout", text=f"{SKIPPED}\n")]
            return cell, resources
        if known is None or not known["test"]:
            cell, resources = super().preprocess_cell(cell, resources, index)
            if known is not None:  # a locked cell: the runner runs its own copy
                self._runner().ask({"op": "run", "source": known["source"], "test": False})
            return cell, resources
        reply = self._runner().ask({"op": "run", "source": known["source"], "test": True})
        if reply.get("interrupt"):
            self._interrupt()
        cell.outputs = [from_dict(o) for o in reply["outputs"]]
        if self.course.get("stop_after_failed_test") and any(o.output_type == "error" for o in cell.outputs):
            self.stopped = True
        self.code_cells_executed += 1
        cell.execution_count = self.code_cells_executed
        return cell, self.resources

    def _interrupt(self) -> None:
        """A call into the student's code ran past the limit: stop it, as nbgrader does."""
        from nbclient.util import run_sync

        run_sync(self.km.interrupt_kernel)()
