"""The course's conventions: what every graded function or module does unless its own
contract says otherwise, stated once (RULES, shown at the top of every notebook and in the
students' README) and checked by one visible call in each self-check (check_conventions).

A self-check calls, with its own small example::

    check_conventions(rnn_forward, dict(x=x, h0=h0, W_xh=W_xh, W_hh=W_hh, b_h=b_h),
                      "rnn_forward", batch=("x", "h0"), large=dict(x=100 * x))

The arguments are given by name, in the order of the signature, and passed by position.
Each rule that applies is tried on that example; the first one broken fails with its name,
the input concerned and the symptom. The hidden tests try the same rules on more inputs.

Trust: every comparison is made here, on plain copies (utils.checks.plain) of what the code
under test returned. Only the non-contiguous copies and the memory test are made beside the
student's code (`_layout_probe`, a stand-in): while grading, tensors reach the student's
kernel as contiguous copies, and memory is not visible from the other side.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from utils.checks import check_close, plain, stand_in

__all__ = ["RULES", "Rule", "check_conventions", "conventions_markdown"]


@dataclass(frozen=True)
class Rule:
    key: str
    title: str
    text: str


RULES = (
    Rule("unchanged", "Inputs stay as they were",
         "Your code never writes into its arguments (tensors, lists, dicts), and what it returns has memory of "
         "its own: no result is an input, or a view of one, that a later change of the input would change."),
    Rule("layout", "Any layout, any batch",
         "Tensor inputs may be non-contiguous (a transposed or strided view of a larger tensor), and a batch may "
         "hold one element: the result depends on the values only, and example b of a batch gets the result it "
         "gets alone."),
    Rule("dtype", "dtype and device kept",
         "Floating results have the dtype of the floating inputs (float32 in, float32 out; float64 in, float64 "
         "out) and are computed in it; tensors you create are made on the device of the inputs."),
    Rule("grad", "Differentiable",
         "Results stay on the autograd graph of every input that requires gradients, and the gradient that "
         "arrives is the true one: no detach, no .item() or NumPy detour, no torch.no_grad."),
    Rule("finite", "Finite where the mathematics is",
         "For finite inputs whose exact result is finite, the result and its gradients are finite, also at "
         "large magnitudes (the checks try pre-activations and logits around 100): never an exp that overflows."),
    Rule("random", "Randomness from what you are given",
         "Random draws come from the generator argument when there is one, otherwise from torch's global "
         "generator; never reseed a generator yourself."),
    Rule("modules", "Modules own their parameters",
         "A module registers its weights as parameters (nn.Parameter or sub-modules) under the names its "
         "contract gives, and starts from PyTorch's default initialisation of the layers it is built from, or "
         "the one its contract states: never from zeros or constants."),
)

_TITLES = {rule.key: rule.title for rule in RULES}


def conventions_markdown() -> str:
    """The box at the top of every notebook (and in the students' README)."""
    lines = ["**Conventions of every exercise.** Unless an exercise's contract says otherwise, every function "
             "or module you write follows these rules; each self-check tries them once with "
             "`check_conventions` and names the rule a failure breaks.", ""]
    lines += [f"{i}. **{rule.title}.** {rule.text}" for i, rule in enumerate(RULES, 1)]
    return "\n".join(lines)


def _fail(what: str, key: str, detail: str, hint: str = "") -> None:
    message = f'{what} breaks the convention "{_TITLES[key]}": {detail}'
    raise AssertionError(f"{message}\nHint: {hint}" if hint else message)


# ---------------------------------------------------------------- plain data, walked the same way


def _map(value, f):
    """`value` with f applied to every tensor in it (lists, tuples and dicts rebuilt)."""
    if isinstance(value, torch.Tensor):
        return f(value)
    if type(value) in (list, tuple):
        return type(value)(_map(v, f) for v in value)
    if type(value) is dict:
        return {k: _map(v, f) for k, v in value.items()}
    return value


def _leaves(value, path: str = "the result") -> list[tuple[str, object]]:
    """(path, leaf) for every tensor and number in plain data, in order."""
    if type(value) in (list, tuple):
        return [leaf for i, v in enumerate(value) for leaf in _leaves(v, f"{path}[{i}]")]
    if type(value) is dict:
        return [leaf for k, v in value.items() for leaf in _leaves(v, f"{path}[{k!r}]")]
    return [(path, value)]


def _tensors(value, path: str = "the result") -> list[tuple[str, torch.Tensor]]:
    return [(p, t) for p, t in _leaves(value, path) if type(t) is torch.Tensor]


def _floating(value) -> list[tuple[str, torch.Tensor]]:
    return [(p, t) for p, t in _tensors(value) if t.dtype.is_floating_point]


def _copy(value):
    """A copy of one argument: tensors detached and cloned, a generator in the same state."""
    if isinstance(value, torch.Generator):
        twin = torch.Generator(device=value.device)
        twin.set_state(value.get_state())
        return twin
    return _map(value, lambda t: t.detach().clone())


def _clone(args: dict) -> dict:
    return {name: _copy(v) for name, v in args.items()}


def _structure(value) -> list:
    return [(p, type(t).__name__, tuple(t.shape) if type(t) is torch.Tensor else None) for p, t in _leaves(value)]


def _raising_as(key, what, label, fn, *args, **kwargs):
    if key is None:
        return fn(*args, **kwargs)
    try:
        return fn(*args, **kwargs)
    except Exception as exc:  # noqa: BLE001 (any error of the code under test is its answer)
        _fail(what, key, f"{label}, it raised {type(exc).__name__}: {str(exc)[:300]}", _ERROR_HINTS.get(key, ""))


_ERROR_HINTS = {
    "layout": "an operation that needs contiguous memory (view) fails on a strided input, and a size read from "
              "the wrong axis fails on a batch of one.",
    "dtype": "mixing float32 and float64 tensors fails: create new tensors with the dtype of the inputs.",
}


def _same_values(got, expected, what: str, key: str, where: str, hint: str, rtol: float, atol: float) -> None:
    if _structure(got) != _structure(expected):
        _fail(what, key, f"{where}, the result has another structure or shape: {_structure(got)[:4]} "
                         f"instead of {_structure(expected)[:4]}.", hint)
    for (path, g), (_, e) in zip(_leaves(got), _leaves(expected)):
        if type(e) is torch.Tensor and not e.dtype.is_floating_point:
            if not torch.equal(g, e):
                _fail(what, key, f"{where}, {path} differs from your result on the example.", hint)
        elif type(e) in (torch.Tensor, float, int) and type(e) is not bool:
            try:
                check_close(g, e, path, rtol=rtol, atol=atol)
            except AssertionError as exc:
                _fail(what, key, f"{where}, {str(exc).splitlines()[0]} (expected: your result on the example)", hint)
        elif g != e:
            _fail(what, key, f"{where}, {path} is {g!r} instead of {e!r}.", hint)


# ---------------------------------------------------------------- beside the code under test


def _strided(t: torch.Tensor) -> torch.Tensor:
    """t's values in memory laid out backwards with every stride doubled (not contiguous, and no
    two axes can be merged by a view), or a copy when t has fewer than two elements."""
    if t.numel() < 2:
        return t.detach().clone()
    order = tuple(range(t.dim() - 1, -1, -1))
    wide = t.new_empty(tuple(t.shape[i] for i in order) + (2,))
    view = wide[..., 0].permute(order)
    view.copy_(t.detach())
    return view


def _layout_probe(fn, args: list, kwargs: dict):
    """fn on non-contiguous copies of every tensor argument, and which results share memory with
    an argument: ([(result path, argument index)], the result on the strided copies). Runs beside
    the student's code; its answer is data the trusted side checks."""
    own = [_copy(a) for a in args]
    result = fn(*own, **kwargs)
    storages = {}
    for i, a in enumerate(own):
        for _, t in _tensors(a):
            if t.numel():
                storages.setdefault(t.untyped_storage().data_ptr(), i)
    shared = [(path, storages[ptr]) for path, t in _tensors(result)
              if t.numel() and (ptr := t.untyped_storage().data_ptr()) in storages]
    strided = [a if isinstance(a, torch.Generator) else _map(a, _strided) for a in args]
    return shared, _map(fn(*strided, **kwargs), lambda t: t.detach())


class _DevicesMet(TorchDispatchMode):
    """Refuses an operation that meets a meta tensor with a tensor of another device (some operations
    would copy between them silently); a 0-dim tensor and an index into a tensor may live on the CPU,
    as PyTorch allows beside a GPU."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        checked = list(args)
        if func.overloadpacket.__name__ in ("index", "index_put", "index_put_", "_index_put_impl_") and len(checked) > 1:
            checked[1] = None
        devices = {t.device.type for t in tree_leaves((checked, kwargs)) if isinstance(t, torch.Tensor) and t.dim()}
        if "meta" in devices and len(devices) > 1:
            raise RuntimeError(f"{func.overloadpacket.__name__} found at least two devices, {' and '.join(sorted(devices))}")
        return func(*args, **kwargs)


def _copy_module(module: torch.nn.Module) -> torch.nn.Module:
    """A deep copy of `module` in which a tensor of the autograd graph that it keeps (an attention
    layer's last weights), which deepcopy refuses, becomes a detached copy."""
    memo = {}
    for part in module.modules():
        for value in vars(part).values():
            if isinstance(value, torch.Tensor) and value.grad_fn is not None:
                memo[id(value)] = value.detach().clone()
    return copy.deepcopy(module, memo)


def _device_probe(fn, args: list, kwargs: dict, module: bool):
    """fn (a copy of it on the meta device, for a module) on copies of the arguments on the meta
    device (tensors, and modules given as arguments), a device without data: (the device of every result tensor, or None; the error fn raised,
    or None). A tensor made on the CPU meets the inputs there and fails, or comes out on the CPU.
    Runs beside the student's code; its answer is data the trusted side checks."""
    def to_meta(value):
        if isinstance(value, torch.nn.Module):
            return _copy_module(value).to("meta")
        if type(value) in (list, tuple):
            return type(value)(to_meta(v) for v in value)
        if type(value) is dict:
            return {k: to_meta(v) for k, v in value.items()}
        return value.detach().to("meta") if isinstance(value, torch.Tensor) else value

    try:
        target = to_meta(fn) if module else fn
        meta, meta_kwargs = [to_meta(a) for a in args], to_meta(kwargs)
        with _DevicesMet():
            result = target(*meta, **meta_kwargs)
    except Exception as exc:  # noqa: BLE001 (the trusted side reads what it was)
        return None, f"{type(exc).__name__}: {exc}"[:300]
    return [(path, t.device.type) for path, t in _tensors(result)], None


# an error that says two devices met; others (.item(), .tolist() of a tensor without data) leave the rule untried
_DEVICES_MET = ("is not on the expected device", "to be on the same device", "found at least two devices")


def _linear_init_probe(module):
    """(name, in_features, largest |weight|, number of weights, largest |bias| or None) of every nn.Linear
    in the module, read beside the student's code."""
    return [(name, int(m.in_features), float(m.weight.detach().abs().max()), int(m.weight.numel()),
             None if m.bias is None else float(m.bias.detach().abs().max()))
            for name, m in module.named_modules() if type(m) is torch.nn.Linear and m.weight.numel()]


# ---------------------------------------------------------------- the check


def check_conventions(fn, args: dict, what: str, *, kwargs: dict | None = None, batch: tuple = (),
                      batch_out: tuple | None = None, large: dict | None = None, grad: tuple | None = None,
                      skip: tuple = (), module: bool = False, default_init: bool = False, rtol: float = 1e-4,
                      atol: float = 1e-5) -> None:
    """Try the course's conventions (RULES) on `fn(*args.values(), **kwargs)`.

    args:      the example's arguments by name, in the order of fn's signature (passed by position)
    batch:     names of the arguments whose first axis is the batch: each result tensor's batch axis
               is its first one, or the one `batch_out` gives (None for a result without one), and
               examples 0 and B-1 run alone must give their rows of the whole result
    large:     arguments to use instead (by name) for a large-magnitude example, whose results and
               gradients must be finite
    grad:      names of the inputs gradients must reach (default: every floating tensor argument),
               tried in float64 against a central finite difference along a random direction
    skip:      rule keys that do not apply to this exercise (its contract says why); "device" skips
               the device part of the dtype rule alone (tried on the meta device when a tensor is given
               and no generator: a generator has a device of its own)
    module:    fn is a module (its parameters stay float32: float64 is not tried, gradients are
               checked in float32); the test says so, rather than asking the object under test
    default_init: the module's nn.Linear layers start at PyTorch's default initialisation (weights
               and biases within 1/sqrt(in_features), the weights spread over that range, biases not
               all zero), for a contract that says so
    rtol/atol: how close a variant's result must be to the example's
    """
    kwargs = dict(kwargs or {})
    rules = {rule.key for rule in RULES} - set(skip)
    if not module and isinstance(fn, torch.nn.Module):  # the test's author forgot to say so (never true of a handle)
        raise TypeError(f"check_conventions({what}): fn is a module; pass module=True")
    rng = torch.get_rng_state()
    try:
        if default_init:
            _check_linear_init(what, fn)
        _check_all(fn, args, what, kwargs, batch, batch_out, large, grad, rules, module, rng, rtol, atol)
        values = [*args.values(), *kwargs.values()]
        if "device" not in skip and _tensors(values) and not any(isinstance(v, torch.Generator) for v in values):
            _check_device(what, fn, args, kwargs, module, rng)
    finally:
        torch.set_rng_state(rng)


def _check_all(fn, args, what, kwargs, batch, batch_out, large, grad, rules, module, rng, rtol, atol):
    def call(values: dict, label: str, key: str | None = None):
        """fn on `values`; in a variant (`key`), an exception of fn fails as that rule."""
        torch.set_rng_state(rng)  # every variant draws what the example draws, from generators in the same state
        values = [_copy(v) if isinstance(v, torch.Generator) else v for v in values.values()]
        return plain(_raising_as(key, what, label, fn, *values, **kwargs), f"{what} ({label})")

    given = _clone(args)
    expected = call(given, "on the self-check's example")
    floating_in = {t.dtype for v in args.values() for _, t in _tensors(v, "") if t.dtype.is_floating_point}
    if "unchanged" in rules:
        _check_unchanged(what, args, given)
    if "dtype" in rules:
        _check_dtype(what, expected, floating_in, call, args, module, rtol)
    if "layout" in rules:
        _check_layout(what, fn, args, kwargs, expected, rng, rules, rtol, atol)
        if batch:
            _check_batch(what, args, batch, batch_out, expected, call, rtol, atol)
    floating_out = _floating(expected)
    names = tuple(grad) if grad is not None else tuple(
        n for n, v in args.items() if isinstance(v, torch.Tensor) and v.dtype.is_floating_point)
    if "grad" in rules and floating_out and names:
        _check_grad(what, args, names, call, module)
    if "finite" in rules and large:
        _check_finite(what, {**args, **large}, names, call, "grad" in rules and bool(floating_out))


def _check_device(what, fn, args, kwargs, module, rng):
    torch.set_rng_state(rng)
    devices, error = plain(stand_in(_device_probe)(fn, list(_clone(args).values()), kwargs, module),
                           f"{what} (on meta-device inputs)")
    hint = ("a tensor made without device= (torch.zeros, torch.arange, torch.ones, torch.tensor, a mask) lives on "
            "the CPU whatever the inputs' device: make it with device=x.device, or with zeros_like / new_zeros.")
    if error is not None:
        if any(words in error for words in _DEVICES_MET):
            _fail(what, "dtype", f"with every input on another device (meta, a device without data, standing for "
                                 f"a GPU), it raised {error}", hint)
        return
    away = [path for path, device in devices if device != "meta"]
    if away:
        _fail(what, "dtype", f"with every input on another device (meta, standing for a GPU), {away[0]} came back "
                             f"on the CPU.", hint)


def _check_linear_init(what, module):
    layers = plain(stand_in(_linear_init_probe)(module), f"the nn.Linear layers of {what}")
    for name, fan_in, weight, count, bias in layers:
        bound = 1 / fan_in ** 0.5
        narrow = count >= 32 and weight < bound / 2  # 32 or more draws of U(-b, b) all within b/2: odds 2e-10
        if weight > bound * (1 + 1e-6) or weight == 0 or narrow or bias is not None and (bias > bound * (1 + 1e-6) or bias == 0):
            _fail(what, "modules", f"its nn.Linear {name or '(the module itself)'} starts with weights up to "
                                   f"{weight:.4g} and biases up to {bias}, where PyTorch's default draws both "
                                   f"from U(-{bound:.4g}, {bound:.4g}) (1/sqrt(in_features)).",
                  "the contract keeps nn.Linear's own initialisation: do not re-initialise the layers "
                  "(xavier, zeros) after building them.")


def _check_unchanged(what, args, given):
    for name, original in args.items():
        if isinstance(original, torch.Generator):
            continue
        before, after = _leaves(plain(original, name)), _leaves(given[name])
        changed = len(before) != len(after) or any(
            type(a) is not type(b) or (torch.equal(a, b) if type(b) is torch.Tensor else a == b) is False
            for (_, a), (_, b) in zip(after, before))
        if changed:
            _fail(what, "unchanged", f"after the call, the argument {name} reads differently from what was passed.",
                  "an in-place operation (add_, x[...] = ..., +=, append) on an argument, or on a view of one, "
                  "changes the caller's data; compute into new tensors.")


def _check_dtype(what, expected, floating_in, call, args, module, rtol):
    wrong = [(p, t.dtype) for p, t in _floating(expected) if len(floating_in) == 1 and t.dtype not in floating_in]
    if wrong:
        _fail(what, "dtype", f"for {next(iter(floating_in))} inputs, {wrong[0][0]} is {wrong[0][1]}.",
              "a tensor you create (zeros, a constant, torch.tensor(...)) takes torch's default dtype unless you "
              "give it the dtype of the inputs.")
    if module or not floating_in:
        return
    doubled = {n: _map(v, lambda t: t.double() if t.dtype.is_floating_point else t) for n, v in _clone(args).items()}
    result = call(doubled, "with float64 inputs", "dtype")
    wrong = [(p, t.dtype) for p, t in _floating(result) if t.dtype != torch.float64]
    if wrong:
        _fail(what, "dtype", f"for float64 inputs, {wrong[0][0]} is {wrong[0][1]}.",
              "keep the inputs' dtype: a .float(), or a tensor created with the default dtype, "
              "brings the computation back to float32.")
    _same_values(_map(result, lambda t: t.float() if t.dtype == torch.float64 else t), expected, what, "dtype",
                 "in float64", "the float64 result should be the float32 one, more precisely.", max(rtol, 1e-3), 1e-4)


def _check_layout(what, fn, args, kwargs, expected, rng, rules, rtol, atol):
    probe = stand_in(_layout_probe)
    torch.set_rng_state(rng)
    shared, strided = plain(_raising_as("layout", what, "with non-contiguous copies of the tensor inputs", probe, fn,
                                        list(_clone(args).values()), kwargs), f"{what} (on non-contiguous inputs)")
    names = list(args)
    if "unchanged" in rules and shared:
        path, index = shared[0]
        _fail(what, "unchanged", f"{path} shares its memory with the argument {names[index]}: changing "
                                 f"{names[index]} afterwards would change your result.",
              "a view (indexing, reshape, transpose, or the argument itself) given back is not a new tensor; "
              "return a copy where the result would otherwise be a view of an input.")
    _same_values(strided, expected, what, "layout", "with non-contiguous copies of the tensor inputs (same values)",
                 "an operation that reads memory as if it were contiguous (view, or a raw storage access) "
                 "sees other numbers in a strided input.", rtol, atol)


def _check_batch(what, args, batch, batch_out, expected, call, rtol, atol):
    size = args[batch[0]].shape[0]
    tensors = _tensors(expected)
    axes = tuple(batch_out) if batch_out is not None else (0,) * len(tensors)
    for b in sorted({0, size - 1}):
        alone = {n: (v[b:b + 1].detach().clone() if n in batch else v) for n, v in _clone(args).items()}
        result = _tensors(call(alone, f"with example {b} of the batch alone", "layout"))
        for (path, whole), (_, single), axis in zip(tensors, result, axes):
            if axis is None:
                continue
            row = whole.narrow(axis, b, 1)
            if tuple(single.shape) != tuple(row.shape):
                _fail(what, "layout", f"example {b} of the batch alone gives {path} of shape {tuple(single.shape)}, "
                                      f"expected {tuple(row.shape)} (a batch of one).",
                      "a squeeze, or a size read from the wrong axis, loses the batch axis when B = 1.")
            try:
                check_close(single, row, path, rtol=rtol, atol=atol)
            except AssertionError as exc:
                _fail(what, "layout", f"example {b} of the batch alone: {str(exc).splitlines()[0]} "
                                      f"(expected: its row of the whole batch's result).",
                      "examples of a batch must not mix: an operation over the batch axis (a sum, a softmax, a "
                      "mean) where the contract wants one per example.")


def _weights(result, seed: int = 7) -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    return [torch.randn(t.shape, generator=gen, dtype=torch.float64) for _, t in _floating(result)]


def _projection(result, weights) -> torch.Tensor:
    return sum((t.double() * w.to(t.device)).sum() for (_, t), w in zip(_floating(result), weights))


def _check_grad(what, args, names, call, module):
    dtype = torch.float32 if module else torch.float64
    base = {n: _map(v, lambda t: t.to(dtype) if t.dtype.is_floating_point else t) for n, v in _clone(args).items()}
    leaves = {n: base[n].detach().clone().requires_grad_(True) for n in names}
    result = call({**base, **leaves}, "with inputs that require grad", "grad")
    if not any(t.requires_grad for _, t in _floating(result)):
        _fail(what, "grad", "for inputs that require grad, the result carries no gradient.",
              "every step from the inputs to the result must be a differentiable torch operation.")
    weights = _weights(result)
    _projection(result, weights).backward()
    eps, tol = (1e-3, 2e-2) if module else (1e-6, 1e-4)
    gen = torch.Generator().manual_seed(11)
    for name in names:
        g = leaves[name].grad
        if g is None or not bool(torch.isfinite(g).all()):
            _fail(what, "grad", f"no finite gradient reached the input {name}.",
                  "a path from this input to the result is cut (detach, .data, .item(), a NumPy detour, no_grad).")
        direction = torch.randn(g.shape, generator=gen, dtype=dtype)
        slopes = []
        for sign in (1, -1):
            moved = {**base, name: base[name] + sign * eps * direction}
            slopes.append(float(_projection(call(moved, f"with {name} moved slightly", "grad"), weights).detach()))
        numeric, analytic = (slopes[0] - slopes[1]) / (2 * eps), float((g.double() * direction.double()).sum())
        if abs(numeric - analytic) > tol * (1 + abs(numeric)):
            _fail(what, "grad", f"the gradient that reaches {name} is not the true one: along a random direction "
                                f"the result changes at rate {numeric:.6g}, the gradient says {analytic:.6g}.",
                  "part of the computation from this input is cut from the graph (a detach, .data, or a value "
                  "computed under no_grad), so only the rest of the gradient arrives.")


def _check_finite(what, values, names, call, differentiable):
    leaves = {n: values[n].detach().clone().requires_grad_(differentiable) for n in names}
    result = call({**_clone(values), **leaves}, "at large magnitudes", "finite")
    for path, t in _floating(result):
        if not bool(torch.isfinite(t).all()):
            _fail(what, "finite", f"at large magnitudes (the example with inputs around 100), {path} holds "
                                  f"{'NaN' if bool(torch.isnan(t).any()) else 'inf'}.",
                  "exp of a large number overflows (float32 ends near 88): rewrite the formula so that only exp of "
                  "non-positive numbers is taken, or use the library's stable function.")
    if not differentiable or not any(t.requires_grad for _, t in _floating(result)):
        return
    _projection(result, _weights(result)).backward()
    for name in names:
        g = leaves[name].grad
        if g is not None and not bool(torch.isfinite(g).all()):
            _fail(what, "finite", f"at large magnitudes, the gradient that reaches {name} holds NaN or inf, although "
                                  "the result is finite.",
                  "a formula whose value saturates can still divide inf by inf in its backward pass: write it "
                  "so that no intermediate overflows.")
