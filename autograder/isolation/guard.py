"""Runs inside the grading kernel (started by autograder.isolation.sandbox): refuses what the
sandbox forbids, caps the output, and logs what an instructor should review.

Nothing here decides a grade: the test cells run in the trusted runner
(autograder.isolation.boundary), and the kernel, this guard included, is the student's to change.
What the guard gives is the sandbox's layer inside Python (network sockets, os.fork,
signals, the hidden paths, ctypes from the notebook's own code, the ways to find the
guard's objects without a reference: all refused) and a log for the instructor.

The log is JSON lines, each with a keyed MAC (blake2b) that only this hook and the grader
know, so lines the notebook writes itself are recognised:
    {"event": "start", "session": "..."}          the kernel's notebook
    {"event": "cell", "n": 3, "hash": "..."}      a cell starts (its source's sha1)
    {"event": "done", "n": 3}                     ... and finished
    {"event": "network"|"process"|"hidden-path"|"output"|"tamper", "detail": "...", "n": 3}
IPython reaches the guard only through two stateless trampolines that raise audit events;
a cell that removes them shows up as cells without a "cell" line (a flag).
"""
from __future__ import annotations

import _json
import hashlib
import os
import socket
import sys

OWN_FOLDER = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep  # the autograder package
REFUSED = {  # audit event -> what the notebook tried
    "sys.addaudithook": "added an audit hook",
    "sys.settrace": "set a trace function",
    "sys.setprofile": "set a profile function",
    "gc.get_objects": "walked the garbage collector's objects",
    "gc.get_referrers": "asked the garbage collector who refers to an object",
    "gc.get_referents": "asked the garbage collector what an object refers to",
    "sys._current_frames": "read the frames of other threads",
}
REFUSED_FROM_NOTEBOOK = ("ctypes.",)  # refused when the notebook's own code calls them
CTYPES_FOLDER = os.path.join(os.path.dirname(os.__file__), "ctypes") + os.sep
_encode = _json.encode_basestring_ascii  # C: the log cannot be bent by patching json
_getframe, _blake2b, _type = sys._getframe, hashlib.blake2b, type
_str_copy, _int_repr = str.__str__, int.__repr__


def _text(value) -> str:
    """A str of `value` without running a student's __str__."""
    return _str_copy(value) if isinstance(value, str) else object.__repr__(value)


def encode_line(fields: dict, key: bytes) -> str:
    """One log line: the fields as JSON (str, int, bool, or a dict of str -> int) and its MAC."""
    parts = []
    for name, value in fields.items():
        if _type(value) is bool:
            text = "true" if value else "false"
        elif _type(value) is int:
            text = _int_repr(value)
        elif _type(value) is dict:
            text = "{" + ", ".join(f"{_encode(_text(k))}: {_int_repr(v)}" for k, v in value.items()) + "}"
        else:
            text = _encode(_text(value))
        parts.append(f"{_encode(name)}: {text}")
    body = "{" + ", ".join(parts)
    mac = _blake2b(body.encode("utf-8"), key=key, digest_size=16).hexdigest()
    return f'{body}, "mac": "{mac}"}}\n'


class _Cap:
    """The output cap's count: apart from the guard, which it must not lead to."""

    def __init__(self, cap: int, note):
        self.cap, self.sent, self.capped, self.note = cap, 0, False, note

    def allow(self, size: int) -> int:
        """How many of `size` bytes may still be sent."""
        room = max(0, self.cap - self.sent)
        self.sent += min(size, room)
        if size > room and not self.capped:
            self.capped = True
            self.note(f"more than {self.cap // 1024} KiB of output; the rest was discarded")
        return min(size, room)


class Guard:
    def __init__(self, log, settings, hidden, key: bytes):
        self.write_raw = log.write
        self.key = key
        self.hidden = [h.rstrip(os.sep) + os.sep for h in (*hidden, *settings.hide)]
        self.count = 0
        self.armed = False
        self.busy = False
        self.cell_prefixes: tuple[str, ...] = ("<ipython-input-",)

    def write(self, event: str, **fields) -> None:
        try:
            self.write_raw(encode_line({"event": event, **fields}, self.key))
        except Exception:
            pass

    # -- the audit hook: cannot be removed by Python code -------------------------------
    def audit(self, event: str, args) -> None:
        if self.busy or not self.armed:  # the hook's own work, or the kernel's start-up
            return
        handler = self.handlers.get(event)
        if handler is None:
            if event.startswith(REFUSED_FROM_NOTEBOOK):
                handler = Guard.on_notebook_only
            else:
                return
        self.busy = True
        try:
            handler(self, event, args)
        finally:
            self.busy = False

    def refuse(self, what: str) -> None:
        self.write("tamper", detail=f"the notebook {what}; refused while grading", n=self.count)
        raise PermissionError(f"not allowed while grading: the notebook {what}")

    def on_refused(self, event, args) -> None:
        self.refuse(REFUSED[event])

    def from_notebook(self) -> bool:
        """Whether the code that raised the event (called from a handler) is the notebook's
        own, looking through the frames of ctypes' Python wrappers."""
        frame = _getframe(3)  # 0 this, 1 the handler, 2 audit, 3 the event's source
        while frame is not None and frame.f_code.co_filename.startswith(CTYPES_FOLDER):
            frame = frame.f_back
        return frame is not None and frame.f_code.co_filename.startswith(self.cell_prefixes)

    def on_notebook_only(self, event, args) -> None:
        if self.from_notebook():
            self.refuse(f"used {event}")

    def on_output(self, event, args) -> None:
        self.write("output", detail=_text(args[0])[:200])

    def on_network(self, event, args) -> None:
        if event == "socket.getaddrinfo":
            self.write("network", detail=f"looked up {_text(args[0])[:100]}")
            raise PermissionError("network access is disabled while grading")
        sock = args[0]
        if getattr(sock, "family", None) in (socket.AF_INET, socket.AF_INET6):
            self.write("network", detail=f"{event} {object.__repr__(args[1]) if not isinstance(args[1], tuple) else args[1]!r}"[:200])
            raise PermissionError("network access is disabled while grading")

    def on_fork(self, event, args) -> None:
        self.write("process", detail=event)
        raise PermissionError("starting processes with fork is disabled while grading")

    def on_signal(self, event, args) -> None:
        """os.kill / os.killpg from the notebook: logged and refused (without namespaces the kernel
        could reach the grader's processes; with them, only its own)."""
        if self.from_notebook():
            self.write("process", detail=f"{event}({_int_repr(int(args[0]))}, {_int_repr(int(args[1]))})")
            raise PermissionError("sending signals to processes is disabled while grading")

    def on_open(self, event, args) -> None:
        path = args[0]
        if not self.hidden:
            return
        if isinstance(path, bytes):
            path = os.fsdecode(bytes(path))
        if isinstance(path, str):
            full = os.path.abspath(_str_copy(path)) + os.sep
            if any(full.startswith(h) for h in self.hidden):
                if not full.startswith(OWN_FOLDER):  # tracebacks through this file read it
                    self.write("hidden-path", detail=path[:200])
                raise PermissionError(f"{path}: not readable while grading")

    def on_guard(self, event, args) -> None:
        """The trampolines: IPython starts or ends a cell."""
        what, payload = args
        trampoline = _getframe(2)
        trigger = trampoline.f_back if trampoline is not None else None
        if trampoline is None or trampoline.f_code not in self.trampolines or trigger is None or trigger.f_code is not self.trigger_code:
            self.write("tamper", detail="a cell called the guard's hooks itself", n=self.count)
            return
        if what == "pre":
            self.pre_run_cell(payload)
        else:
            self.post_run_cell(payload)

    handlers = {
        "course.guard": on_guard,
        "socket.getaddrinfo": on_network, "socket.connect": on_network, "socket.bind": on_network,
        "socket.sendto": on_network, "socket.sendmsg": on_network, "os.fork": on_fork, "os.forkpty": on_fork,
        "os.kill": on_signal, "os.killpg": on_signal, "open": on_open, "course.output": on_output, **dict.fromkeys(REFUSED, on_refused),
    }

    # -- output cap ---------------------------------------------------------------------
    def install_output_cap(self, cap: _Cap) -> None:
        from ipykernel import iostream, zmqshell

        write = iostream.OutStream.write

        def capped_write(stream, string):
            if not isinstance(string, str):
                return write(stream, string)
            room = cap.allow(len(string))
            if room < len(string):
                if room:
                    write(stream, string[:room])
                if not getattr(stream, "_grader_noted", False):
                    stream._grader_noted = True
                    write(stream, f"\n[the grader discarded output beyond {cap.cap // 1024} KiB]\n")
                return len(string)
            return write(stream, string)

        iostream.OutStream.write = capped_write
        publish = zmqshell.ZMQDisplayPublisher.publish

        def capped_publish(publisher, data, *args, **kwargs):
            import json

            size = sum(len(v) if isinstance(v, (str, bytes)) else len(json.dumps(v, default=str)) for v in data.values())
            if cap.allow(size) < size:
                data = {"text/plain": f"[the grader discarded a display output of {size // 1024} KiB]"}
            return publish(publisher, data, *args, **kwargs)

        zmqshell.ZMQDisplayPublisher.publish = capped_publish

    # -- cells ---------------------------------------------------------------------------
    def pre_run_cell(self, info) -> None:
        self.count += 1
        raw = getattr(info, "raw_cell", "") or ""
        self.write("cell", n=self.count, hash=hashlib.sha1(_text(raw).encode("utf-8", "replace")).hexdigest()[:16])

    def post_run_cell(self, result) -> None:
        self.write("done", n=self.count)

    def install(self, shell) -> None:
        """Note each cell's start and end (through the trampolines)."""
        from IPython.core.events import EventManager

        self.trigger_code = EventManager.trigger.__code__
        self.trampolines = (_pre_run_cell.__code__, _post_run_cell.__code__)
        try:
            from ipykernel.compiler import get_tmp_directory

            self.cell_prefixes += (get_tmp_directory() + os.sep,)
        except Exception:
            pass
        shell.events.register("pre_run_cell", _pre_run_cell)
        shell.events.register("post_run_cell", _post_run_cell)


def _pre_run_cell(info, _audit=sys.audit) -> None:
    _audit("course.guard", "pre", info)


def _post_run_cell(result, _audit=sys.audit) -> None:
    _audit("course.guard", "post", result)


def _note_output(detail: str, _audit=sys.audit) -> None:
    _audit("course.output", detail)


def read_key(path: str) -> bytes:
    """The MAC key the grader wrote for this kernel (random bytes if there is none)."""
    try:
        with open(path, "rb") as handle:
            return handle.read()
    except (OSError, TypeError):
        return os.urandom(32)


def launch(connection_file: str, extra: list[str], log, settings, hidden: list[str], key: bytes, origin: str = "",
           serve_runner=None) -> None:
    """Start the IPython kernel in this process, with the guard installed and the agent that
    answers the trusted runner (`serve_runner(shell)`, autograder.isolation.boundary.kernel_side.install).
    Only the audit hook keeps a reference to the guard: this frame forgets it before the kernel runs."""
    guard = Guard(log, settings, hidden, key)
    del key
    sys.addaudithook(guard.audit)
    guard.install_output_cap(_Cap(settings.limits.output_kb * 1024, _note_output))
    guard.write("start", session=origin)
    from ipykernel.kernelapp import IPKernelApp

    app = IPKernelApp.instance()
    app.initialize(["-f", connection_file, *extra])
    guard.install(app.shell)
    if serve_runner is not None:
        serve_runner(app.shell)
    guard.armed = True
    del guard
    app.start()
