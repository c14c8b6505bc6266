"""The student's side of the boundary: an agent in the grading kernel that answers the
trusted runner's requests.

The runner opens a Jupyter comm ("course.boundary") whose data names a ZeroMQ address the
runner has bound; the agent connects to it. For each test cell that calls the student's
code, the runner sends one comm message ("serve"): the agent then answers requests on that
socket, on the kernel's main thread, until the runner says "end". One request costs a socket
round trip, not a kernel message with its signature, status messages and dates.

It runs the student's objects and nothing else: the runner asks it to read a notebook name,
call something, read an attribute, iterate, index, or run a backward pass, always with
plain data (autograder.isolation.boundary.codec) and numbers of objects it keeps in its table. What it
answers is data too; an object that is not data stays here and the runner gets its number.
Everything here runs in the student's process, so the student can change or replace it:
that changes only what the kernel answers, which the runner treats as untrusted data.
"""
from __future__ import annotations

import io
import json
import sys

import torch

from autograder.isolation.boundary.codec import TARGET, CodecError, Limits, Ref, decode, encode, tensors_in

_EXACT = (type(None), bool, int, float, complex, str, bytes, list, tuple, dict, set, frozenset)


class Agent:
    """The kernel's table of objects and its answers to the runner's requests."""

    def __init__(self, namespace: dict, limits: Limits = Limits()):
        self.namespace, self.limits = namespace, limits
        self.objects: dict[int, object] = {}
        self.numbers: dict[int, int] = {}  # id of a kept object -> its number: one number per object
        self.nodes: dict[int, tuple[list, list]] = {}  # autograd: (input leaves, outputs) of a call
        self.stand_ins: dict[str, object] = {}  # what the tests defined here (utils.checks.stand_in)
        self.counter = 0
        self.rng: torch.Tensor | None = None  # torch's RNG state once a request has set it

    # -- the table -------------------------------------------------------------------
    def _number(self) -> int:
        self.counter += 1
        return self.counter

    def keep(self, value) -> object:
        """Data for `value` where it is data under another type, else a Ref to it."""
        if isinstance(value, torch.Tensor) and type(value) not in (torch.Tensor, torch.nn.Parameter):
            return value.as_subclass(torch.Tensor)
        for base in _EXACT[1:]:
            if isinstance(value, base) and type(value) is not base and type(value).__module__ != "collections":
                return base(value)
        number = self.numbers.get(id(value))
        if number is None:
            number = self.numbers[id(value)] = self._number()
            self.objects[number] = value
        return Ref("kernel", number)

    def resolve(self, ref: Ref):
        if ref.side != "kernel" or ref.number not in self.objects:
            raise CodecError("a reference to no object of this kernel")
        return self.objects[ref.number]

    def describe(self, ref_number: int) -> list[str]:
        """The class names of a kept object, most derived first (module.qualname)."""
        return [f"{c.__module__}.{c.__qualname__}" for c in type(self.objects[ref_number]).__mro__]

    # -- one request -----------------------------------------------------------------
    def answer(self, tree, buffers) -> tuple[list, list[bytes]]:
        """The reply to one request: {"value": ...} or {"error": [class name, message]}, and
        what the student's code printed meanwhile ("printed": [[stream name, text], ...])."""
        printed: list[list[str]] = []
        self.rng = None
        saved = sys.stdout, sys.stderr
        sys.stdout, sys.stderr = _Printed("stdout", printed), _Printed("stderr", printed)
        try:
            request = decode(tree, buffers, self.limits, self.resolve)
            reply = self._dispatch(request)
        except BaseException as exc:  # the student's code raised: the runner re-raises it
            if isinstance(exc, (KeyboardInterrupt, SystemExit)):
                raise
            reply = {"error": [type(exc).__name__, str(exc)[:2000]]}
        finally:
            sys.stdout, sys.stderr = saved
        before, self.rng = self.rng, None
        rng = torch.get_rng_state()
        if before is not None and not torch.equal(rng, before):  # else the runner keeps its own
            reply["rng"] = rng
        if printed:
            reply["printed"] = printed
        try:
            return encode(reply, self.limits, self.keep)
        except CodecError as exc:
            return encode({"error": ["TypeError", f"the answer cannot cross: {exc}"]}, self.limits)

    def _dispatch(self, request: dict) -> dict:
        op = request["op"]
        for number in request.get("release", ()):
            if number in self.objects:
                del self.numbers[id(self.objects.pop(number))]
            self.nodes.pop(number, None)
        if "rng" in request:
            torch.set_rng_state(request["rng"])
        self.rng = torch.get_rng_state()
        with torch.set_grad_enabled(bool(request.get("grad", True))):
            return getattr(self, "op_" + op)(request)

    def _target(self, request):
        target = request["target"]
        if type(target) is str:
            if target not in self.namespace:
                raise NameError(f"name '{target}' is not defined: run the cell that defines it")
            return self.namespace[target]
        return target

    def op_get(self, request) -> dict:
        value = self._target(request)
        for name in request.get("path", ()):
            value = getattr(value, name)
        return {"value": value}

    def op_describe(self, request) -> dict:
        value = self._target(request)
        return {"value": [f"{c.__module__}.{c.__qualname__}" for c in type(value).__mro__]}

    def op_len(self, request) -> dict:
        return {"value": len(self._target(request))}

    def op_list(self, request) -> dict:
        return {"value": list(self._target(request))}

    def op_getitem(self, request) -> dict:
        return {"value": self._target(request)[request["key"]]}

    def op_isinstance(self, request) -> dict:
        """Whether the object is an instance of one of the classes given (kept here) or named
        (module.qualname of the runner's classes)."""
        mro = type(self._target(request)).__mro__
        names = {f"{c.__module__}.{c.__qualname__}" for c in mro}
        return {"value": any(c in mro for c in request["classes"]) or any(n in names for n in request["names"])}

    def op_define(self, request) -> dict:
        """Define a test's stand-in (a reference part, a function to pass to your code) from its
        source, beside the notebook's names and the stand-ins defined before."""
        namespace = {**self.namespace, **self.stand_ins, **request["data"]}
        exec(compile(request["source"], "<stand-in>", "exec"), namespace)
        value = self.stand_ins[request["name"]] = namespace[request["name"]]
        return {"value": value}

    def op_call(self, request) -> dict:
        function = self._target(request)
        for name in request.get("path", ()):
            function = getattr(function, name)
        args, kwargs = request["args"], request["kwargs"]
        versions = [(t, (t._version, t.requires_grad)) for t in tensors_in((args, kwargs))]
        leaves = [t for t in tensors_in((args, kwargs)) if t.requires_grad]
        substitutes = request.get("substitutes", {})
        missing = object()
        saved = {name: self.namespace.get(name, missing) for name in substitutes}
        self.namespace.update(substitutes)
        try:
            result = function(*args, **kwargs)
        finally:
            for name, value in saved.items():
                if value is missing:
                    self.namespace.pop(name, None)
                else:
                    self.namespace[name] = value
        reply = {"value": result, "after": _changed(args, versions), "kwargs_after": _changed(kwargs, versions)}
        found = tensors_in(result)
        indices = [i for i, t in enumerate(found) if t.requires_grad]  # an argument given back counts too
        if indices:
            number = self._number()
            self.nodes[number] = (leaves, [found[i] for i in indices])
            reply["node"], reply["outputs"] = number, indices
        return reply

    def op_backward(self, request) -> dict:
        leaves, outputs = self.nodes[request["node"]]
        pairs = [(o, g) for o, g in zip(outputs, request["grads"]) if g is not None]
        for leaf in leaves:
            leaf.grad = None
        if pairs:
            torch.autograd.backward([o for o, _ in pairs], [g.to(o.dtype) for o, g in pairs], retain_graph=True)
        return {"value": [leaf.grad for leaf in leaves]}


def _changed(args, versions):
    """`args` as the call left them, with None for each tensor argument whose values and
    requires_grad it left alone (the runner copies the rest back into its own objects)."""
    untouched = {id(t) for t, before in versions if (t._version, t.requires_grad) == before}

    def left_alone(v) -> bool:  # a tensor, or a tuple of tensors and constants, that nothing changed
        if isinstance(v, torch.Tensor):
            return id(v) in untouched
        return type(v) is tuple and all(left_alone(x) or type(x) in (int, float, bool, str, type(None)) for x in v)

    if isinstance(args, dict):
        return {k: None if left_alone(v) else v for k, v in args.items()}
    return [None if left_alone(v) else v for v in args]


class _Printed(io.TextIOBase):
    """sys.stdout or sys.stderr during a request: the text goes back with the reply, in order
    (at most PRINTED_CAP characters of it)."""

    def __init__(self, name: str, printed: list):
        self.name, self.printed = name, printed

    def writable(self) -> bool:
        return True

    def write(self, text) -> int:
        text = str(text)
        room = PRINTED_CAP - sum(len(t) for _, t in self.printed)
        if room > 0 and text:
            if self.printed and self.printed[-1][0] == self.name:
                self.printed[-1][1] += text[:room]
            else:
                self.printed.append([self.name, text[:room]])
        return len(text)


PRINTED_CAP = 1 << 20


def reply_frames(number: bytes, tree, buffers) -> list[bytes]:
    """One reply on the socket: the request's number, the tree as JSON, the byte buffers."""
    return [number, json.dumps(tree).encode(), *buffers]


def serve(agent: Agent, socket) -> None:
    """Answer requests ([number, tree as JSON, buffers...]) until the runner sends [b"end"]."""
    try:
        while True:
            frames = socket.recv_multipart()
            if frames[0] == b"end" or len(frames) < 2:
                return
            try:
                tree = json.loads(frames[1])
            except (ValueError, RecursionError):
                tree = None
            socket.send_multipart(reply_frames(frames[0], *agent.answer(tree, frames[2:])))
    except KeyboardInterrupt:  # the grader stopped a call that ran past the cell's limit
        return


def install(shell) -> Agent:
    """Answer the runner that opens a comm on the target TARGET of `shell`'s kernel."""
    agent = Agent(shell.user_ns)

    def opened(comm, open_msg):
        import zmq

        socket = zmq.Context.instance().socket(zmq.PAIR)
        socket.linger = 0
        socket.connect(str(open_msg["content"]["data"]["address"]))

        @comm.on_msg
        def on_request(msg):
            if msg["content"]["data"].get("op") == "serve":
                serve(agent, socket)

    shell.kernel.comm_manager.register_target(TARGET, opened)
    return agent
