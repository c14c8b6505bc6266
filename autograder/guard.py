"""Runs inside the grading kernel (started by autograder.sandbox): refuses what the
sandbox forbids, caps the output, keeps student code from tampering with the tests, and
keeps the ledger of the test cells' verdicts.

Threat model (README, "What a hand-in cannot do to its grade"; the sandbox around it:
README, "The sandbox"): the hand-in's code runs in this process, before,
between and *during* the test cells (a test calls the student's functions). Python has
no private memory, so the guard keeps everything that decides a grade where Python code
cannot reach it: in the closure of an audit hook. An audit hook cannot be removed or
listed, and the ways to find objects without a reference (`gc.get_objects`,
`gc.get_referrers`, `ctypes` from notebook code, a new audit hook, trace and profile
functions) are refused while the notebook runs. IPython reaches the guard only through
two stateless trampolines that raise audit events.

The ledger. Each check of utils.checks reports its verdict with
sys.audit("course.check", passed). The hook counts a verdict only when it comes from the
checks' own code objects, called (through nothing but code of the test cells) by the
test cell that is running, on the main thread, while every function the checks and the
tests rely on is still the original. At the end of a test cell it writes the counts per
line of the cell; the grader compares them with the solution's (autograder/ledger.py): a
test cell keeps its points only when every check it runs on the solution ran here too and
passed. A check that was skipped, replaced, made to lie or called from elsewhere cannot
earn points.

Everything goes to a JSON-lines log, each line with a keyed MAC (blake2b) that only this
hook and the grader know, so lines the notebook writes itself are recognised:
    {"event": "start", "session": "..."}          the kernel's notebook
    {"event": "cell", "n": 3, "hash": "..."}      a cell starts (its source's sha1)
    {"event": "verdicts", "n": 3, "hash": "...", "lines": {"12": 2}, "failed": 0, "foreign": 0}
    {"event": "done", "n": 3}                     ... and finished
    {"event": "network"|"process"|"hidden-path"|"output"|"tamper", "detail": "...", "n": 3}

Tampering is also undone before every cell and after it: the functions tests rely on
(torch.allclose, torch.testing.assert_close, utils.checks.*, builtins ...), the modules
in sys.modules, the names the tests import, and IPython's input transformers, AST
transformers, event callbacks, custom exception handlers and trace functions. A cell
that disables the guard itself shows up as cells without a "cell" line.
"""
from __future__ import annotations

import _json
import _thread
import builtins
import hashlib
import operator
import os
import socket
import sys
import types

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
# Modules whose functions and classes the test cells compute references with: checked
# (not restored) at every verdict, so a change made during a test cell is seen even when
# it is undone before the cell ends.
VERIFIED_MODULES = ("math", "numpy", "torch", "torch.nn", "torch.nn.functional", "torch.nn.init",
                    "torch.testing", "utils.checks")
VERIFIED_PREFIXES = ("torch.nn.modules.",)
BUILTINS = (
    "abs", "all", "any", "bool", "callable", "dict", "enumerate", "float", "getattr", "hasattr", "int",
    "isinstance", "issubclass", "len", "list", "map", "max", "min", "next", "print", "range", "repr", "round",
    "set", "sorted", "str", "sum", "tuple", "type", "zip", "AssertionError", "Exception", "__import__",
)
# Callbacks that libraries register on IPython's events while a notebook runs.
TRUSTED_CALLBACK_MODULES = ("matplotlib", "matplotlib_inline", "IPython", "ipykernel", "ipywidgets", "tqdm", "autograder")
TAMPER_MESSAGE = "the grader restored {what}, which a cell had changed"
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
_getframe, _get_ident, _blake2b, _type = sys._getframe, _thread.get_ident, hashlib.blake2b, type
_str_copy, _int_repr = str.__str__, int.__repr__
_all, _is = all, operator.is_
_FunctionType = types.FunctionType


def _trusted(callback) -> bool:
    module = getattr(callback, "__module__", None) or type(getattr(callback, "__self__", None)).__module__
    return isinstance(module, str) and module.split(".")[0] in TRUSTED_CALLBACK_MODULES


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
        self.test_hashes = set(settings.test_cells)
        self.protected_names = set(settings.protected_names)
        self.originals: dict[tuple[str, str], object] = {}
        self.modules: dict[str, object] = {}
        self.names: dict[str, object] = {}
        self.builtins = {name: getattr(builtins, name) for name in BUILTINS}
        self.verified: list[list] = []
        self.digest = ""
        self.verified_ids: set[int] = set()
        self.count = 0
        self.shell = None
        self.armed = False
        self.busy = False
        self.main_thread = _get_ident()
        self.cell_prefixes: tuple[str, ...] = ("<ipython-input-",)
        # the running cell
        self.is_test = False
        self.top_codes: dict[int, object] = {}
        self.test_codes: dict[int, object] = {}
        self.lines: dict[str, int] = {}
        self.failed = self.foreign = 0

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

    def on_setattr(self, event, args) -> None:
        target, name = args[0], args[1]
        if id(target) in self.verified_ids and self.from_notebook():
            self.refuse(f"changed {_text(name)} of {object.__repr__(target)[:80]}")

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

    def on_exec(self, event, args) -> None:
        """IPython runs a cell's code: remember the code objects of the test cells."""
        code = args[0]
        caller = _getframe(2)
        if not self.is_test or caller is None or caller.f_code is not self.run_code or _type(code).__name__ != "code":
            return
        self.top_codes[id(code)] = code
        stack = [code]
        while stack:
            current = stack.pop()
            self.test_codes[id(current)] = current
            stack.extend(c for c in current.co_consts if _type(c) is _type(code))

    def on_check(self, event, args) -> None:
        """A verdict: count it only when it is genuine (see the module's docstring)."""
        if not self.is_test:
            return
        passed = args[0] is True
        report = _getframe(2)  # utils.checks._report
        check = report.f_back if report is not None else None
        site = check.f_back if check is not None else None
        why = ""
        if report is None or report.f_code is not self.report_code or check is None or id(check.f_code) not in self.check_codes:
            why = "a verdict that did not come from utils.checks"
        elif _get_ident() != self.main_thread:
            why = "a check called from another thread"
        else:
            frame = site
            while frame is not None and id(frame.f_code) not in self.top_codes:
                if id(frame.f_code) not in self.test_codes:
                    frame = None
                    break
                frame = frame.f_back
            if frame is None:
                why = "a check called from code that is not the test's"
            else:
                changed = self.changed()
                if changed:
                    why = f"a check ran while {changed} was changed"
        if why:
            self.foreign += 1
            self.write("tamper", detail=f"{why}; the verdict does not count", n=self.count)
            return
        if passed:
            line = _int_repr(site.f_lineno)
            self.lines[line] = self.lines.get(line, 0) + 1
        else:
            self.failed += 1

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
        "course.check": on_check, "course.guard": on_guard, "exec": on_exec, "object.__setattr__": on_setattr,
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

    # -- integrity ----------------------------------------------------------------------
    def snapshot_verified(self) -> None:
        """What every verdict checks is unchanged: the functions and classes of the modules
        the tests compute with, the methods of torch.Tensor and of those classes. Kept per
        namespace as (owner, namespace, keys, ids, values), compared by identity in C."""
        import torch

        namespaces = []
        for name in [n for n in sys.modules if n in VERIFIED_MODULES or n.startswith(VERIFIED_PREFIXES)]:
            module = sys.modules.get(name)
            if isinstance(module, types.ModuleType):
                namespaces.append((module, vars(module)))
        classes = [torch.Tensor, torch.nn.Module]  # and the layers the tests build references with
        classes += [v for v in vars(torch.nn).values() if isinstance(v, type) and issubclass(v, torch.nn.Module)]
        namespaces += [(cls, cls.__dict__) for cls in classes]
        seen = set()
        for owner, ns in namespaces:
            if id(ns) in seen:
                continue
            seen.add(id(ns))
            keys = tuple(k for k, v in list(ns.items())
                         if callable(v) or isinstance(v, (type, types.ModuleType, property, staticmethod, classmethod)))
            values = tuple(map(ns.get, keys))
            self.verified.append([owner, ns, keys, tuple(map(id, values)), values])
            self.verified_ids.update(map(id, values))
        self.verified_ids.update(map(id, classes))

    def changed(self) -> str:
        """The first verified name whose value is no longer the one the running test cell
        started with ('' if none)."""
        for entry in self.verified:
            owner, ns, keys, ids, values = entry
            if _all(map(_is, map(ns.get, keys), values)):  # no tuples built: no collection runs
                continue
            current = list(values)
            for i, (key, old) in enumerate(zip(keys, values)):
                new = ns.get(key)
                if new is old:
                    continue
                if _type(new) is _FunctionType and vars(new).get("__wrapped__") is old:
                    current[i] = new  # a library's own wrapper (torch wraps manual_seed when it first compiles)
                    continue
                return f"{_text(getattr(owner, '__name__', '?'))}.{_text(key)}"
            entry[3], entry[4] = tuple(map(id, current)), tuple(current)
        for name, value in self.builtins.items():
            if vars(builtins).get(name) is not value:
                return f"builtins.{name}"
        return ""

    def rebaseline(self) -> list[str]:
        """At the start of a test cell: a verified name that a notebook's own function or
        class replaced is restored (and reported); one that a library rebound since (torch
        wraps some functions when it first compiles) is the new original."""
        found = []
        for entry in self.verified:
            owner, ns, keys, ids, values = entry
            current = tuple(map(ns.get, keys))
            if tuple(map(id, current)) == ids:
                continue
            kept = list(current)
            for i, (key, old, new) in enumerate(zip(keys, values, current)):
                if new is not old and self.is_notebook_object(new):
                    try:
                        setattr(owner, key, old)
                        kept[i] = old
                    except (TypeError, AttributeError):
                        pass
                    found.append(f"{_text(getattr(owner, '__name__', '?'))}.{_text(key)}")
            entry[3], entry[4] = tuple(map(id, kept)), tuple(kept)
        return found

    def is_notebook_object(self, value) -> bool:
        """A function, method or class whose code comes from the notebook's cells, or any
        object that is not a plain library function or class (a student's callable)."""
        if isinstance(value, (types.FunctionType, types.MethodType)):
            code = getattr(value, "__code__", None) or getattr(getattr(value, "__func__", None), "__code__", None)
            return code is None or code.co_filename.startswith(self.cell_prefixes)
        if isinstance(value, type):
            return any(getattr(getattr(v, "__code__", None), "co_filename", "").startswith(self.cell_prefixes)
                       for v in vars(value).values())
        return not isinstance(value, (types.BuiltinFunctionType, types.ModuleType, property, staticmethod, classmethod))

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
        raw = getattr(info, "raw_cell", "") or ""
        digest = hashlib.sha1(_text(raw).encode("utf-8", "replace")).hexdigest()[:16]
        self.write("cell", n=self.count, hash=digest)
        self.check("before")
        self.is_test = digest in self.test_hashes
        if self.is_test:
            for what in self.rebaseline():
                self.write("tamper", detail=TAMPER_MESSAGE.format(what=what), when="before", n=self.count)
        self.digest = digest
        self.top_codes, self.lines, self.failed, self.foreign = {}, {}, 0, 0

    def post_run_cell(self, result) -> None:
        self.check("after")
        if self.is_test:
            self.write("verdicts", n=self.count, hash=self.digest, lines=dict(self.lines), failed=self.failed,
                       foreign=self.foreign)
        self.is_test = False
        self.write("done", n=self.count)

    def install(self, shell) -> None:
        """Register the per-cell checks and take the originals now, before any cell runs:
        a hand-in may patch the checkers in a cell placed before its setup cell."""
        import importlib

        for modname in (*PROTECTED, *VERIFIED_MODULES):
            try:
                importlib.import_module(modname)
            except Exception:  # a module the course does not use (or cannot import here)
                pass
        from IPython.core.events import EventManager
        from IPython.core.interactiveshell import InteractiveShell

        import utils.checks

        self.shell = shell
        self.run_code = InteractiveShell.run_code.__code__
        self.trigger_code = EventManager.trigger.__code__
        self.trampolines = (_pre_run_cell.__code__, _post_run_cell.__code__)
        self.report_code = utils.checks._report.__code__
        self.check_codes = {id(getattr(utils.checks, n).__code__) for n in utils.checks.__all__ if n != "plain"}
        try:
            from ipykernel.compiler import get_tmp_directory

            self.cell_prefixes += (get_tmp_directory() + os.sep,)
        except Exception:
            pass
        self.restore_objects()
        self.snapshot_verified()
        shell.events.register("pre_run_cell", _pre_run_cell)
        shell.events.register("post_run_cell", _post_run_cell)
        self.snapshot_shell()


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
    answers the trusted runner (`serve_runner(shell)`, autograder.boundary.kernel_side.install).
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
