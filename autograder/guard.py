"""Runs inside the grading kernel (started by autograder.sandbox): refuses what the
sandbox forbids, caps the output, and keeps student code from tampering with the tests.

Everything it notices goes to a JSON-lines log the grader reads afterwards
(`autograder.integrity.read_guard_log`):
    {"event": "cell", "n": 3, "hash": "..."}      a cell starts (its source's sha1)
    {"event": "done", "n": 3}                     ... and finished
    {"event": "network"|"process"|"hidden-path"|"output"|"tamper", "detail": "..."}

Tampering is undone before every cell and after it: the functions tests rely on
(torch.allclose, torch.testing.assert_close, utils.checks.*, builtins ...), the modules
in sys.modules, the names the tests import, and IPython's input transformers, AST
transformers, event callbacks, custom exception handlers and trace functions. A cell
that disables the guard itself shows up as cells without a "cell" line.
"""
from __future__ import annotations

import builtins
import hashlib
import json
import os
import socket
import sys

OWN_FOLDER = os.path.dirname(os.path.abspath(__file__)) + os.sep
PROTECTED = {
    "torch": ("allclose", "isclose", "equal", "all", "any", "testing"),
    "torch.testing": ("assert_close", "assert_allclose"),
    "numpy": ("allclose", "isclose", "array_equal", "testing"),
    "numpy.testing": ("assert_allclose", "assert_array_equal", "assert_equal"),
    "math": ("isclose",),
    "utils": ("checks",),
    "utils.checks": None,  # every public function
}
BUILTINS = (
    "abs", "all", "any", "bool", "callable", "dict", "enumerate", "float", "getattr", "hasattr", "int",
    "isinstance", "issubclass", "len", "list", "map", "max", "min", "next", "print", "range", "repr", "round",
    "set", "sorted", "str", "sum", "tuple", "type", "zip", "AssertionError", "Exception", "__import__",
)
# Callbacks that libraries register on IPython's events while a notebook runs.
TRUSTED_CALLBACK_MODULES = ("matplotlib", "matplotlib_inline", "IPython", "ipykernel", "ipywidgets", "tqdm", "autograder")
TAMPER_MESSAGE = "the grader restored {what}, which a cell had changed"


def _trusted(callback) -> bool:
    module = getattr(callback, "__module__", None) or type(getattr(callback, "__self__", None)).__module__
    return isinstance(module, str) and module.split(".")[0] in TRUSTED_CALLBACK_MODULES


class Guard:
    def __init__(self, log, settings, hidden):
        self.log = log
        self.cap = settings.limits.output_kb * 1024
        self.sent = 0
        self.capped = False
        self.hidden = [h.rstrip(os.sep) + os.sep for h in (*hidden, *settings.hide)]
        self.protected_names = set(settings.protected_names)
        self.originals: dict[tuple[str, str], object] = {}
        self.modules: dict[str, object] = {}
        self.names: dict[str, object] = {}
        self.builtins = {name: getattr(builtins, name) for name in BUILTINS}
        self.count = 0
        self.shell = None
        self.armed = False

    def write(self, event: str, **fields) -> None:
        try:
            self.log.write(json.dumps({"event": event, **fields}) + "\n")
        except Exception:
            pass

    # -- the audit hook: cannot be removed by Python code -------------------------------
    def audit(self, event: str, args) -> None:
        if not self.armed:  # the kernel's own start-up (its heartbeat binds a port)
            return
        if event == "socket.getaddrinfo":
            self.write("network", detail=f"looked up {str(args[0])[:100]}")
            raise PermissionError("network access is disabled while grading")
        if event in ("socket.connect", "socket.bind", "socket.sendto", "socket.sendmsg"):
            sock = args[0]
            if getattr(sock, "family", None) in (socket.AF_INET, socket.AF_INET6):
                self.write("network", detail=f"{event} {args[1]!r}"[:200])
                raise PermissionError("network access is disabled while grading")
        elif event in ("os.fork", "os.forkpty"):
            self.write("process", detail=event)
            raise PermissionError("starting processes with fork is disabled while grading")
        elif event == "open" and self.hidden:
            path = args[0]
            if isinstance(path, bytes):
                path = os.fsdecode(path)
            if isinstance(path, str):
                full = os.path.abspath(path) + os.sep
                if any(full.startswith(h) for h in self.hidden):
                    if not full.startswith(OWN_FOLDER):  # tracebacks through this file read it
                        self.write("hidden-path", detail=path[:200])
                    raise PermissionError(f"{path}: not readable while grading")

    # -- output cap ---------------------------------------------------------------------
    def allow(self, size: int) -> int:
        """How many of `size` bytes may still be sent."""
        room = max(0, self.cap - self.sent)
        self.sent += min(size, room)
        if size > room and not self.capped:
            self.capped = True
            self.write("output", detail=f"more than {self.cap // 1024} KiB of output; the rest was discarded")
        return min(size, room)

    def install_output_cap(self) -> None:
        from ipykernel import iostream, zmqshell

        guard = self
        write = iostream.OutStream.write

        def capped_write(stream, string):
            if not isinstance(string, str):
                return write(stream, string)
            room = guard.allow(len(string))
            if room < len(string):
                if room:
                    write(stream, string[:room])
                if not getattr(stream, "_grader_noted", False):
                    stream._grader_noted = True
                    write(stream, f"\n[the grader discarded output beyond {guard.cap // 1024} KiB]\n")
                return len(string)
            return write(stream, string)

        iostream.OutStream.write = capped_write
        publish = zmqshell.ZMQDisplayPublisher.publish

        def capped_publish(publisher, data, *args, **kwargs):
            size = sum(len(v) if isinstance(v, (str, bytes)) else len(json.dumps(v, default=str)) for v in data.values())
            if guard.allow(size) < size:
                data = {"text/plain": f"[the grader discarded a display output of {size // 1024} KiB]"}
            return publish(publisher, data, *args, **kwargs)

        zmqshell.ZMQDisplayPublisher.publish = capped_publish

    # -- integrity ----------------------------------------------------------------------
    def snapshot_shell(self) -> None:
        sh = self.shell
        tm = sh.input_transformer_manager
        self.lists = {
            "input_transformers_cleanup": (sh, list(sh.input_transformers_cleanup)),
            "input_transformers_post": (sh, list(sh.input_transformers_post)),
            "ast_transformers": (sh, list(sh.ast_transformers)),
            "cleanup_transforms": (tm, list(tm.cleanup_transforms)),
            "line_transforms": (tm, list(tm.line_transforms)),
            "token_transformers": (tm, list(tm.token_transformers)),
        }
        self.callbacks = {name: list(cbs) for name, cbs in sh.events.callbacks.items()}
        self.instance_attrs = set(vars(sh))
        self.custom = (sh.custom_exceptions, sh.CustomTB)
        self.class_methods = {n: getattr(type(sh), n) for n in ("run_cell", "run_cell_async", "transform_cell", "run_ast_nodes", "run_code", "showtraceback", "_showtraceback")}

    def restore_shell(self) -> list[str]:
        sh, found = self.shell, []
        for name, (owner, original) in self.lists.items():
            current = getattr(owner, name)
            if list(current) != original:
                current[:] = original
                found.append(f"IPython {name}")
        for name, original in self.callbacks.items():
            current = sh.events.callbacks.get(name, [])
            foreign = [cb for cb in current if cb not in original and not _trusted(cb)]
            if foreign or any(cb not in current for cb in original):
                current[:] = [cb for cb in original] + [cb for cb in current if cb not in original and _trusted(cb)]
                found.append(f"IPython {name} callbacks")
        for name in set(vars(sh)) - self.instance_attrs:
            if name in self.class_methods or name in ("events",):
                delattr(sh, name)
                found.append(f"shell.{name}")
        if (sh.custom_exceptions, sh.CustomTB) != self.custom:
            sh.custom_exceptions, sh.CustomTB = self.custom
            found.append("IPython custom exception handler")
        for name, method in self.class_methods.items():
            if getattr(type(sh), name) is not method:
                setattr(type(sh), name, method)
                found.append(f"InteractiveShell.{name}")
        if sys.gettrace() is not None or sys.getprofile() is not None:
            sys.settrace(None)
            sys.setprofile(None)
            found.append("a trace or profile function")
        return found

    def restore_objects(self) -> list[str]:
        found = []
        for name, original in self.builtins.items():
            if vars(builtins).get(name) is not original:
                setattr(builtins, name, original)
                found.append(f"builtins.{name}")
        for modname, attrs in PROTECTED.items():
            module = sys.modules.get(modname)
            if module is None:
                continue
            if modname not in self.modules:
                self.modules[modname] = module
                names = attrs if attrs is not None else [n for n in vars(module) if not n.startswith("_")]
                for attr in names:
                    if hasattr(module, attr):
                        self.originals[(modname, attr)] = getattr(module, attr)
            elif module is not self.modules[modname]:
                sys.modules[modname] = module = self.modules[modname]
                found.append(f"sys.modules[{modname!r}]")
        for (modname, attr), original in self.originals.items():
            module = self.modules[modname]
            if getattr(module, attr, None) is not original:
                setattr(module, attr, original)
                found.append(f"{modname}.{attr}")
        ns = self.shell.user_ns
        for name in self.protected_names:
            if name in ns and name not in self.names:
                self.names[name] = ns[name]
            elif name in self.names and ns.get(name) is not self.names[name]:
                ns[name] = self.names[name]
                found.append(f"the name {name!r} the tests use")
        return found

    def check(self, when: str) -> None:
        found = self.restore_shell() + self.restore_objects()
        for what in found:
            self.write("tamper", detail=TAMPER_MESSAGE.format(what=what), when=when, n=self.count)

    def pre_run_cell(self, info) -> None:
        self.count += 1
        digest = hashlib.sha1((info.raw_cell or "").encode("utf-8", "replace")).hexdigest()[:16]
        self.write("cell", n=self.count, hash=digest)
        self.check("before")

    def post_run_cell(self, result) -> None:
        self.check("after")
        self.write("done", n=self.count)

    def install(self, shell) -> None:
        """Register the per-cell checks and take the originals now, before any cell runs:
        a hand-in may patch the checkers in a cell placed before its setup cell."""
        import importlib

        for modname in PROTECTED:
            try:
                importlib.import_module(modname)
            except Exception:  # a module the course does not use (or cannot import here)
                pass
        self.shell = shell
        self.restore_objects()
        shell.events.register("pre_run_cell", self.pre_run_cell)
        shell.events.register("post_run_cell", self.post_run_cell)
        self.snapshot_shell()


def launch(connection_file: str, extra: list[str], log, settings, hidden: list[str]) -> None:
    """Start the IPython kernel in this process, with the guard installed."""
    guard = Guard(log, settings, hidden)
    sys.addaudithook(guard.audit)
    guard.install_output_cap()
    from ipykernel.kernelapp import IPKernelApp

    app = IPKernelApp.instance()
    app.initialize(["-f", connection_file, *extra])
    guard.install(app.shell)
    guard.armed = True
    app.start()
