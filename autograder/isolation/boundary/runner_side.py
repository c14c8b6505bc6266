"""The trusted side of the boundary: stand-ins for the student's names in the runner.

In the runner each graded name of the notebook is a `Handle`: calling it sends the arguments
to the student's kernel by value (autograder.isolation.boundary.codec) and brings the result back by
value. What is not data (an instance of the student's class, a module, a generator) stays in
the kernel and comes back as a `Handle`, through which attribute reads, method calls, `len`,
iteration and indexing are forwarded. A handle is never data: `utils.checks.plain` refuses
it, and comparing it raises, so a check only ever compares values the runner decoded itself.

Semantics a single kernel gives and the tests rely on:
- gradients: a call whose outputs require grad is joined to the runner's graph by `_Bridge`,
  whose backward sends the output gradients to the kernel and brings back the inputs';
- in-place changes: an argument the call changed (a list, a dict, a tensor written in place)
  is copied back into the runner's object;
- randomness: torch's global generator state goes with every call and comes back, and a
  torch.Generator argument comes back advanced, so seeded draws are those of one kernel;
- grad mode: a call made under `torch.no_grad()` runs under it in the kernel.
"""
from __future__ import annotations

import ast
import json
import os
import queue
import sys
import time
import uuid
import weakref

import torch

from autograder.isolation.boundary.codec import TARGET, CodecError, Limits, Ref, decode, encode, parse, tensors_in

BUILTIN_ERRORS = {
    cls.__name__: cls for cls in (
        ArithmeticError, AssertionError, AttributeError, IndexError, KeyError, LookupError, NameError,
        NotImplementedError, OverflowError, RecursionError, RuntimeError, StopIteration, TypeError,
        ValueError, ZeroDivisionError, MemoryError)
}


class KernelError(Exception):
    """The student's code raised an exception that is not one of Python's own."""


class BoundaryError(Exception):
    """The kernel did not answer as the protocol says (dead, too slow, or a malformed reply)."""


class NoAnswer(BoundaryError):
    """The kernel did not answer within the limit (the grader interrupts it)."""


class ReplyRefused(BoundaryError):
    """A reply of the kernel past the grader's limits, refused before it was read whole, or one that
    is not data the codec builds (the hand-in's status is then `boundary`: autograder.grading.handin)."""


ERROR_CHARS = 2000            # of the message of an error the kernel reports (its agent cuts there too)
PRINTED_CAP = 256 << 10       # characters the student's code may print during the test cells of one notebook
# bytes of one kernel broadcast the runner reads: it sees every broadcast (a plot of the kernel's cells too),
# and a larger one ends its subscription for good; a kernel's guard keeps an honest notebook's output
# under 2 MiB in all (sandbox.Limits.output_kb)
MESSAGE_CAP = 4 << 20


class KernelLink:
    """Requests to the kernel's agent (autograder.isolation.boundary.kernel_side).

    The link binds a ZeroMQ PAIR socket of its own (beside the kernel's sockets) and opens a
    comm that tells the agent its address. A cell's first request sends one comm message
    ("serve"); from then on each request is one round trip on the socket, [number, tree as
    JSON, buffers...], until `end()` at the end of the cell. Replies are numbered: one to
    an earlier request (a call the grader gave up on) is dropped.

    What the kernel sends is bounded before it is read: a part of a reply larger than
    `limits.bytes` makes ZeroMQ drop the connection (seen on the socket's monitor), the tree
    is measured before it is parsed (codec.parse), and what the student's code prints is kept
    up to `output_cap` characters over all of the notebook's test cells."""

    def __init__(self, client, timeout: float = 60.0, limits: Limits = Limits(), output_cap: int = PRINTED_CAP):
        import zmq

        self.client, self.timeout, self.limits, self.output_cap = client, timeout, limits, output_cap
        self.comm_id = uuid.uuid4().hex
        self.outputs: list[dict] = []     # what the student's code printed during calls (stream outputs)
        self.printed = 0
        self.handles: weakref.WeakValueDictionary[int, Handle] = weakref.WeakValueDictionary()
        self.released: list[int] = []
        self.number, self.serving = 0, None
        self.closed: str | None = None  # why the link reads no more answers (a reply was dropped unread)
        self.rng = None  # torch's RNG state as the kernel has it during this cell's requests
        self.socket = zmq.Context.instance().socket(zmq.PAIR)
        self.socket.linger = 0
        self.socket.setsockopt(zmq.MAXMSGSIZE, limits.bytes)
        if client.transport == "ipc":
            self.socket.bind(f"ipc://{os.path.abspath(client.ip)}-boundary-{self.comm_id[:8]}")
        else:
            self.socket.bind("tcp://127.0.0.1:*")
        self.dropped = self.socket.get_monitor_socket(zmq.EVENT_DISCONNECTED)
        self.pollers = {}
        for event in (zmq.POLLIN, zmq.POLLOUT):
            self.pollers[event] = zmq.Poller()
            self.pollers[event].register(self.socket, event)
            self.pollers[event].register(self.dropped, zmq.POLLIN)
        self._send("comm_open", {"comm_id": self.comm_id, "target_name": TARGET,
                                 "data": {"address": self.socket.getsockopt_string(zmq.LAST_ENDPOINT)}})

    def _send(self, msg_type: str, content: dict) -> str:
        msg = self.client.session.msg(msg_type, content)
        self.client.session.send(self.client.shell_channel.socket, msg)
        return msg["header"]["msg_id"]

    def request(self, fields: dict):
        """The kernel's decoded answer to one request, or the exception its code raised."""
        if self.closed is not None:
            raise ReplyRefused(f"{self.closed}; no later answer of your code is read")
        if self.released:
            fields["release"], self.released = self.released, []
        # torch's RNG state goes only where the kernel's is not ours; the kernel sends its own
        # back only when the request changed it
        rng, known, self.rng = torch.get_rng_state(), self.rng, None
        if known is None or not torch.equal(rng, known):
            fields["rng"] = rng
        fields["grad"] = torch.is_grad_enabled()
        try:
            tree, buffers = encode(fields, self.limits, self._reference)
        except CodecError as exc:
            raise TypeError(f"cannot send this to your code: {exc}") from None
        if self.serving is None:
            self.serving = self._send("comm_msg", {"comm_id": self.comm_id, "data": {"op": "serve"}})
        self.number += 1
        number = str(self.number).encode()
        deadline = time.monotonic() + self.timeout
        self._send_frames([number, json.dumps(tree).encode(), *buffers], deadline)
        frames = self._reply(number, deadline)
        try:
            reply = decode(parse(frames[0], self.limits), frames[1:], self.limits, self._handle)
        except CodecError as exc:  # past a limit (OverLimit), or not data the codec builds
            raise ReplyRefused(f"the grader refused your code's answer: {exc}") from None
        except MemoryError:
            raise ReplyRefused("the grader refused your code's answer: reading it needs more memory than "
                               "the grader's runner may use") from None
        if type(reply) is not dict:
            raise BoundaryError("the kernel's reply is not a dict")
        self._printed(reply.get("printed"))
        if type(reply.get("rng")) is torch.Tensor and reply["rng"].dtype == torch.uint8:
            torch.set_rng_state(reply["rng"])
            self.rng = reply["rng"]
        elif "error" not in reply:
            self.rng = rng
        if "error" in reply:
            error = reply["error"]
            if type(error) is not list or len(error) != 2 or not all(type(x) is str for x in error):
                raise BoundaryError("a malformed error in the kernel's reply")
            name, message = error[0][:100], error[1][:ERROR_CHARS]
            raise BUILTIN_ERRORS.get(name, KernelError)(f"{name}: {message}" if name not in BUILTIN_ERRORS else message)
        return reply

    def _wait(self, event: int, deadline: float) -> None:
        """Until the socket is ready for `event` (POLLIN, POLLOUT), checking every half second
        that the kernel lives and still serves (an agent that never connected, or stopped
        serving, makes the request fail instead of wait)."""
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise NoAnswer(f"your code did not answer within {self.timeout:g} s")
            ready = dict(self.pollers[event].poll(min(left, 0.5) * 1000))
            if self.dropped in ready:  # the connection is not used again: the runner interrupts the kernel
                self.dropped.recv_multipart()
                self.closed = (f"the grader refused your code's answer: a part of it was larger than "
                               f"{self.limits.bytes} bytes, or than the memory the grader's runner may use")
                raise ReplyRefused(self.closed)
            if self.socket in ready:
                return
            if not self.client.is_alive():
                raise BoundaryError("the kernel died")
            if self.serving is not None and self._drain(self.serving, block=False):
                self.serving = None
                raise BoundaryError("the kernel ended the request without an answer")

    def _send_frames(self, frames: list, deadline: float) -> None:
        import zmq

        try:  # a PAIR socket whose peer is connected takes a message at once
            self.socket.send_multipart(frames, flags=zmq.NOBLOCK, copy=False)
        except zmq.Again:
            self._wait(zmq.POLLOUT, deadline)
            self.socket.send_multipart(frames, copy=False)

    def _reply(self, number: bytes, deadline: float) -> list[bytes]:
        """The frames of the reply to request `number`, less the number."""
        import zmq

        while True:
            self._wait(zmq.POLLIN, deadline)
            frames, size = [self.socket.recv()], 0
            while self.socket.rcvmore:
                frames.append(self.socket.recv())
                size += len(frames[-1])
                if size > self.limits.bytes:
                    while self.socket.rcvmore:
                        self.socket.recv()
                    raise ReplyRefused(f"the grader refused your code's answer: it carries more than "
                                       f"{self.limits.bytes} bytes")
            if frames[0] == number and len(frames) >= 2:
                return frames[1:]

    def end(self) -> None:
        """End the cell's requests: the agent stops serving and the kernel goes idle."""
        if self.serving is None:
            return
        deadline = time.monotonic() + self.timeout
        self._send_frames([b"end"], deadline)
        serving, self.serving, self.rng = self.serving, None, None
        while not self._drain(serving, block=True):
            if time.monotonic() > deadline:
                raise NoAnswer(f"your code did not answer within {self.timeout:g} s")
            if not self.client.is_alive():
                raise BoundaryError("the kernel died")

    def abandon(self) -> None:
        """Forget the cell's requests (the grader interrupts the kernel instead)."""
        self.serving, self.rng = None, None

    def _drain(self, msg_id: str | None, block: bool) -> bool:
        """Read the kernel's broadcasts; keep what it printed outside a request (e.g. from C
        code) while it served `msg_id`; whether it has gone idle after serving it."""
        while True:
            try:
                msg = self.client.get_iopub_msg(timeout=0.5 if block else 0)
            except queue.Empty:
                return False
            except Exception as exc:  # a message the session cannot read (forged, nested too deep...)
                raise BoundaryError(f"an unreadable message from the kernel ({type(exc).__name__})") from None
            if msg_id is None or msg.get("parent_header", {}).get("msg_id") != msg_id:
                continue
            kind, content = msg.get("msg_type"), msg.get("content", {})
            if kind == "stream" and type(content.get("text")) is str and content.get("name") in ("stdout", "stderr"):
                self._printed([[content["name"], content["text"]]])
            elif kind == "status" and content.get("execution_state") == "idle":
                return True

    def _printed(self, printed) -> None:
        if type(printed) is not list:
            return
        for entry in printed:
            if type(entry) is list and len(entry) == 2 and entry[0] in ("stdout", "stderr") and type(entry[1]) is str:
                room = self.output_cap - self.printed
                self.printed += len(entry[1])
                if room > 0:
                    self.outputs.append({"name": entry[0], "text": entry[1][:room]})
                if self.printed > self.output_cap >= self.printed - len(entry[1]):
                    self.outputs.append({"name": "stderr", "text": f"\n[the grader kept the first {self.output_cap:,} "
                                                                  "characters your code printed in the test cells]\n"})

    def _reference(self, value) -> Ref:
        if type(value) is Handle:
            return value._ref()
        raise CodecError(f"a {type(value).__name__} of the test")

    def _handle(self, ref: Ref) -> "Handle":
        if ref.side != "kernel":
            raise CodecError("the kernel named an object of the runner")
        handle = self.handles.get(ref.number)
        if handle is None:
            handle = self.handles[ref.number] = Handle(self, ref)
            while ref.number in self.released:  # an earlier handle of it died: the kernel must keep it now
                self.released.remove(ref.number)
        return handle

    # -- the operations ----------------------------------------------------------------
    def call(self, target, path: list[str], args: tuple, kwargs: dict, substitutes: dict | None = None):
        request = {"op": "call", "target": target, "path": path, "args": list(args), "kwargs": dict(kwargs),
                   "substitutes": dict(substitutes or {})}
        reply = self.request(request)
        _copy_back(args, reply.get("after"))
        _copy_back(kwargs, reply.get("kwargs_after"))
        value = reply.get("value")
        if "node" in reply:
            value = _bridge(self, reply["node"], (args, kwargs), value, reply.get("outputs"))
        return value

    def backward(self, node: int, grads: list):
        value = self.request({"op": "backward", "node": node, "grads": grads})["value"]
        if type(value) is not list or not all(g is None or type(g) is torch.Tensor for g in value):
            raise BoundaryError("the kernel's gradients are not a list of tensors")
        return value

    def value(self, op: str, target, **fields):
        return self.request({"op": op, "target": target, **fields})["value"]


class Handle:
    """A name of the student's notebook (`target` a str, read in the kernel each time it is
    used), or an object that stays in the kernel (`target` a Ref: an instance of your class,
    a module, a bound method...). Attribute reads, calls, len, iteration and indexing are
    forwarded; what comes back is data or another Handle."""

    def __init__(self, link: KernelLink, target):
        object.__setattr__(self, "_link", link)
        object.__setattr__(self, "_target", target)
        object.__setattr__(self, "_names", None)

    def _ref(self):
        if type(self._target) is Ref:
            return self._target
        return self._link.value("get", self._target)  # the notebook's object now: a Handle, or data

    def __call__(self, *args, **kwargs):
        return self._link.call(self._target, [], args, kwargs)

    def __getattr__(self, name: str):
        if name.startswith("__") and name not in ("__name__", "__qualname__"):
            raise AttributeError(name)
        return self._link.value("get", self._target, path=[name])

    def __setattr__(self, name, value):
        raise TypeError(f"the test cannot set attributes of {self!r}")

    def __eq__(self, other):
        raise TypeError(f"{self!r} is not data: the checks compare only the data it returns")

    __ne__ = __lt__ = __le__ = __gt__ = __ge__ = __eq__
    __hash__ = object.__hash__

    def type_names(self) -> list[str]:
        """The kernel's names for the object's classes, most derived first (data, untrusted)."""
        if self._names is None:
            names = self._link.value("describe", self._target)
            if type(names) is not list or not all(type(n) is str for n in names):
                raise BoundaryError("the kernel described a class with something other than names")
            object.__setattr__(self, "_names", names)
        return self._names

    def __len__(self) -> int:
        n = self._link.value("len", self._target)
        if type(n) is not int or n < 0:
            raise BoundaryError("len() of your object is not a non-negative int")
        return n

    def __iter__(self):
        items = self._link.value("list", self._target)
        if type(items) is not list:
            raise BoundaryError("iterating over your object gave no list")
        return iter(items)

    def __getitem__(self, key):
        return self._link.value("getitem", self._target, key=key)

    def __bool__(self) -> bool:
        return True

    def __del__(self):
        if type(self._target) is Ref:
            try:
                self._link.released.append(self._target.number)
            except Exception:  # the link is gone with the runner
                pass

    def __repr__(self) -> str:
        if type(self._target) is str:
            return f"your {self._target}"
        try:
            return f"your {self.type_names()[0].rsplit('.', 1)[-1][:60]} object"
        except Exception:
            return "your object"


# -- copying back and gradients ---------------------------------------------------------
def _copy_back(originals, after) -> None:
    """Write what the call did to its arguments into the runner's own objects (None in
    `after`: a tensor argument the call left alone)."""
    if after is None:
        return
    pairs = originals.items() if isinstance(originals, dict) else enumerate(originals)
    for key, original in pairs:
        new = after[key] if isinstance(after, dict) and key in after or isinstance(after, list) and \
            type(key) is int and key < len(after) else None
        if new is not None:
            _copy_into(original, new)


def _copy_into(original, new) -> None:
    """Make `original` hold what `new` holds, in place and as deep as it goes: a tensor takes
    the new values and keeps its identity; a list, dict or set takes the new items (each item
    that is itself a tensor or a container is updated in turn); a tuple cannot change, but the
    tensors and lists inside it can, so it passes the change on to its items."""
    kind = type(original)
    if isinstance(original, torch.Tensor) and type(new) is torch.Tensor:
        with torch.no_grad():
            if original.shape != new.shape:
                original.data = new.to(original.dtype)
            elif not torch.equal(original, new.to(original.dtype)):
                original.copy_(new.to(original.dtype))
        if original.is_leaf and original.requires_grad != new.requires_grad:
            original.requires_grad_(new.requires_grad)
    elif kind is list and type(new) is list:
        if len(original) != len(new):
            original[:] = new
            return
        for index, (old, item) in enumerate(zip(original, new)):
            if _updatable(old, item):
                _copy_into(old, item)
            else:
                original[index] = item
    elif kind is tuple and type(new) is tuple and len(original) == len(new):
        for old, item in zip(original, new):
            if _updatable(old, item):
                _copy_into(old, item)
    elif kind is dict and type(new) is dict:
        for key in [k for k in original if k not in new]:
            del original[key]
        for key, item in new.items():
            if key in original and _updatable(original[key], item):
                _copy_into(original[key], item)
            else:
                original[key] = item
    elif kind is set and type(new) is set:
        original.clear()
        original.update(new)
    elif isinstance(original, torch.Generator) and type(new) is torch.Generator:
        original.set_state(new.get_state())


def _updatable(old, new) -> bool:
    """Whether `old` can take `new`'s content in place (else it is replaced where it sits)."""
    if isinstance(old, torch.Tensor):
        return type(new) is torch.Tensor
    return type(old) in (list, tuple, dict, set) and type(new) is type(old)


class _Bridge(torch.autograd.Function):
    """Joins a call's outputs to the runner's graph; backward asks the kernel for the inputs' gradients."""

    @staticmethod
    def forward(ctx, link, node, n_inputs, *tensors):
        ctx.link, ctx.node, ctx.n_inputs = link, node, n_inputs
        ctx.input_meta = [(t.shape, t.dtype) for t in tensors[:n_inputs]]
        return tuple(t.clone() for t in tensors[n_inputs:])

    @staticmethod
    def backward(ctx, *grads):
        sent = [None if g is None else g.detach() for g in grads]
        received = ctx.link.backward(ctx.node, sent)
        inputs = []
        for i, (shape, dtype) in enumerate(ctx.input_meta):
            g = received[i] if i < len(received) else None
            if g is not None and (g.shape != shape or not g.dtype.is_floating_point and not g.dtype.is_complex):
                raise BoundaryError("the kernel sent a gradient of the wrong shape")
            inputs.append(None if g is None else g.to(dtype))
        return (None, None, None, *inputs, *[None] * len(grads))


def _bridge(link: KernelLink, node: int, arguments, value, output_indices):
    """`value` with its gradient-carrying tensors replaced by outputs of a `_Bridge` node."""
    found = tensors_in(value)
    if type(output_indices) is not list or not all(type(i) is int and 0 <= i < len(found) for i in output_indices):
        raise BoundaryError("the kernel named outputs that its answer does not hold")
    outputs = [found[i] for i in output_indices]
    inputs = [t for t in tensors_in(arguments) if t.requires_grad]
    if len(inputs) == 0:
        inputs = [torch.zeros((), requires_grad=True)]  # so that the outputs require grad (parameters only)
    bridged = _Bridge.apply(link, node, len(inputs), *inputs, *[o.detach() for o in outputs])
    mapping = {id(o): b for o, b in zip(outputs, bridged)}
    return _replace(value, mapping)


def shipped_module(obj) -> str | None:
    """The name of the `utils` module that defines `obj` at its top level, or None."""
    module, name = getattr(obj, "__module__", None), getattr(obj, "__name__", None)
    if type(module) is not str or module.split(".")[0] != "utils" or type(name) is not str:
        return None
    return module if getattr(sys.modules.get(module), name, None) is obj else None


def _replace(value, mapping: dict):
    if isinstance(value, torch.Tensor):
        return mapping.get(id(value), value)
    if type(value) in (list, tuple):
        return type(value)(_replace(v, mapping) for v in value)
    if type(value) is dict:
        return {k: _replace(v, mapping) for k, v in value.items()}
    return value


class Boundary:
    """What utils.checks asks of the grader while the tests run here (`utils.checks._boundary`):
    stand-ins made in the kernel, calls with names substituted, class checks of handles."""

    def __init__(self, link: KernelLink, namespace: dict):
        self.link, self.namespace = link, namespace
        self.sources: list[str] = []  # the cells run here, the running one last (the runner adds them)

    def stand_in(self, obj, data: dict):
        """The same class or function, defined in the kernel from its definition in the running cell
        or an earlier locked cell (a lambda from its line), with the plain values it reads from the
        cell's names beside it. A function of the course's `utils` (a module the release ships) is
        imported there from the kernel's own copy."""
        module = shipped_module(obj)
        if module is not None:
            return self.link.value("define", None, source=f"from {module} import {obj.__name__}", name=obj.__name__,
                                   data=data)
        node = self._definition(obj)
        names = {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
        captured = {}
        for name in sorted(names - set(data)):
            if name in self.namespace:
                try:
                    encode(self.namespace[name], self.link.limits)
                except CodecError:  # a module, a class, a function: the kernel has its own
                    continue
                captured[name] = self.namespace[name]
        if isinstance(node, ast.Lambda):
            source, name = f"_stand_in = {ast.unparse(node)}", "_stand_in"
        else:
            node.decorator_list = []
            source, name = ast.unparse(node), node.name
        return self.link.value("define", None, source=source, name=name, data={**captured, **data})

    def _definition(self, obj) -> ast.AST:
        name, code = getattr(obj, "__name__", None), getattr(obj, "__code__", None)
        for source in reversed(self.sources):
            tree = ast.parse(source)
            if name == "<lambda>" and code is not None and source is self.sources[-1]:
                line = code.co_firstlineno
                found = [n for n in ast.walk(tree) if isinstance(n, ast.Lambda) and n.lineno == line]
                if len(found) == 1:
                    return found[0]
                raise TypeError(f"stand_in: {len(found)} lambdas on line {line}; give each its own line or a def")
            found = [n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef)) and n.name == name]
            if found:
                return found[-1]
        raise TypeError("stand_in takes a function or class defined with def, class or lambda in a cell of the course")

    def call_with(self, substitutes: dict, function, args: tuple, kwargs: dict):
        if type(function) is not Handle:
            raise TypeError("call_with calls a name of your notebook")
        return self.link.call(function._target, [], args, kwargs, substitutes)

    def is_remote(self, value) -> bool:
        return type(value) is Handle

    def isinstance(self, value, wanted: tuple) -> bool:
        if type(value) is not Handle:
            return False
        classes = [w._ref() for w in wanted if type(w) is Handle]
        names = [f"{w.__module__}.{w.__qualname__}" for w in wanted if isinstance(w, type)]
        return self.link.value("isinstance", value._target, classes=classes, names=names) is True

    def type_name(self, value) -> str:
        if type(value) is Handle:
            return value.type_names()[0].rsplit(".", 1)[-1]
        return type(value).__name__
