"""The student's side of the boundary: an agent in the grading kernel that answers the
trusted runner's requests over a Jupyter comm ("course.boundary").

It runs the student's objects and nothing else: the runner asks it to read a notebook name,
call something, read an attribute, iterate, index, or run a backward pass, always with
plain data (autograder.boundary.codec) and numbers of objects it keeps in its table. What it
answers is data too; an object that is not data stays here and the runner gets its number.
Everything here runs in the student's process, so the student can change or replace it:
that changes only what the kernel answers, which the runner treats as untrusted data.
"""
from __future__ import annotations

import torch

from autograder.boundary.codec import TARGET, CodecError, Limits, Ref, decode, encode, tensors_in

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
        """The reply to one request: {"value": ...} or {"error": [class name, message]}."""
        try:
            request = decode(tree, buffers, self.limits, self.resolve)
            reply = self._dispatch(request)
        except BaseException as exc:  # the student's code raised: the runner re-raises it
            if isinstance(exc, (KeyboardInterrupt, SystemExit)):
                raise
            reply = {"error": [type(exc).__name__, str(exc)[:2000]]}
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
        with torch.set_grad_enabled(bool(request.get("grad", True))):
            reply = getattr(self, "op_" + op)(request)
        reply["rng"] = torch.get_rng_state()
        return reply

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
    if isinstance(args, dict):
        return {k: None if isinstance(v, torch.Tensor) and id(v) in untouched else v for k, v in args.items()}
    return [None if isinstance(v, torch.Tensor) and id(v) in untouched else v for v in args]


def install(shell) -> Agent:
    """Answer the runner on the comm target TARGET of `shell`'s kernel."""
    agent = Agent(shell.user_ns)

    def opened(comm, open_msg):
        @comm.on_msg
        def on_request(msg):
            tree, buffers = agent.answer(msg["content"]["data"].get("tree"), list(msg.get("buffers") or []))
            comm.send({"tree": tree}, buffers=buffers)

    shell.kernel.comm_manager.register_target(TARGET, opened)
    return agent
