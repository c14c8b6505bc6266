"""Self-check helpers: each raises an AssertionError whose message says what is wrong,
what was expected, and (with `hint`) the likely reason.

Test cells call these so that a student reads "rows of your attention weights sum to
3.0, not 1: did you take the softmax over the query axis?" instead of a bare assert.

Trust. A check never lets the value under test decide the comparison. It first turns
the value into plain data (`plain`): builtin containers and scalars are rebuilt element
by element through the builtin types' own methods (a subclass's `__eq__`, `__iter__`,
`__len__` or `__repr__` never runs), NumPy values become plain NumPy copies, and
tensors become plain `torch.Tensor` copies made with torch-function and dispatch hooks
switched off. It then compares from the trusted side, with functions bound when this
module was imported. A value that cannot be made plain (an object of the student's own
class where data is expected) fails with a message that says what to return instead.

While grading, the test cells and these checks run in a trusted process of their own,
never in the student's kernel (autograder/isolation/boundary); the student's objects reach them only
as data or as handles that never take part in a comparison.
"""
from __future__ import annotations

import sys
from typing import Any

import numpy
import torch

__all__ = ["call_with", "check_close", "check_equal", "check_shape", "check_true", "check_type", "is_instance",
           "load_weights", "plain", "stand_in"]

# While the grader runs the test cells in a process of its own (autograder/isolation/boundary), your
# names there stand for your objects in your kernel, and the grader sets this to what
# `stand_in`, `call_with` and `check_type` need of it. In a notebook it stays None.
_boundary = None

# Bound once, at import: later changes to these modules do not reach the checks.
_type, _len, _repr, _zip, _all, _any_of = type, len, repr, zip, all, any
_tuple, _frozenset, _bool, _int, _float = tuple, frozenset, bool, int, float
_type_name = type.__dict__["__name__"].__get__
_type_mro = type.__dict__["__mro__"].__get__
_list_iter, _tuple_iter, _dict_items = list.__iter__, tuple.__iter__, dict.items
_set_iter, _frozenset_iter = set.__iter__, frozenset.__iter__
_str_copy, _bytes_copy, _int_copy, _float_copy, _complex_copy = (
    str.__str__, bytes.__bytes__, int.__index__, float.__float__, complex.__complex__)
_AssertionError = AssertionError
_Tensor, _Parameter, _ndarray, _generic = torch.Tensor, torch.nn.Parameter, numpy.ndarray, numpy.generic
_no_torch_function, _no_dispatch = torch._C.DisableTorchFunction, torch._C._DisableTorchDispatch
_dispatch_keys, _PYTHON_KEY = torch._C._dispatch_keys, torch._C.DispatchKey.Python
_Base = torch._C.TensorBase
_as_subclass, _clone, _detach, _to = _Base.as_subclass, _Base.clone, _Base.detach, _Base.to
_from_numpy, _tensor_ctor = torch.from_numpy, torch.tensor
_isnan, _abs, _sub, _mul, _add, _le, _nonzero, _any, _equal, _promote = (
    torch.isnan, torch.abs, torch.sub, torch.mul, torch.add, torch.le, torch.nonzero, torch.any, torch.equal,
    torch.promote_types)
_float64, _strided, _cpu = torch.float64, torch.strided, torch.device("cpu")
_np_array, _np_ndarray_view, _np_item = numpy.array, numpy.ndarray.view, numpy.generic.item
_SCALARS = (type(None), bool, int, float, complex, str, bytes)


class _Unplain(Exception):
    """A value that cannot be turned into plain data (message for the student)."""


def _name(value: Any) -> str:
    return _type_name(_type(value))


def plain(value: Any, what: str = "the value") -> Any:
    """A trusted copy of `value` built without running any of its own methods.

    None, bool, int, float, complex, str, bytes: exact copies (a subclass becomes its
    builtin base). list, tuple, dict (Counter, OrderedDict...), set, frozenset: rebuilt
    as the builtin type with every element made plain. torch.Tensor (also a Parameter or
    a subclass that only overrides __torch_function__): a plain tensor copy on the same
    device that keeps the autograd graph. numpy.ndarray: a plain copy; NumPy scalars:
    the Python number. Anything else fails with a message that names `what`.
    """
    try:
        return _plain(value, 0)
    except _Unplain as exc:
        raise _AssertionError(f"{what}: {exc}") from None


def _plain(value: Any, depth: int) -> Any:
    if depth > 50:
        raise _Unplain("is nested more than 50 levels deep")
    t = _type(value)
    if t in _SCALARS:
        return value
    mro = _type_mro(t)
    if _Base in mro:
        return _plain_tensor(value)
    if _ndarray in mro:
        return _np_array(_np_ndarray_view(value, _ndarray), copy=True)
    if _generic in mro:  # numpy.float64, numpy.int64, numpy.bool_ ...
        return _plain(_np_item(value), depth + 1)
    for base, copy in ((int, _int_copy), (float, _float_copy), (str, _str_copy),
                       (bytes, _bytes_copy), (complex, _complex_copy)):
        if base in mro:
            return copy(value)
    if list in mro:
        return [_plain(v, depth + 1) for v in _list_iter(value)]
    if tuple in mro:
        return _tuple(_plain(v, depth + 1) for v in _tuple_iter(value))
    if dict in mro:
        return {_plain(k, depth + 1): _plain(v, depth + 1) for k, v in _dict_items(value)}
    if set in mro:
        return {_plain(v, depth + 1) for v in _set_iter(value)}
    if frozenset in mro:
        return _frozenset(_plain(v, depth + 1) for v in _frozenset_iter(value))
    raise _Unplain(f"got a {_name(value)}, which the checks cannot compare; return plain data "
                   "(a list, tuple, dict, str, int, float, bool, torch.Tensor or NumPy array)")


def _plain_tensor(value: Any) -> Any:
    if _dispatch_keys(value).has(_PYTHON_KEY):
        raise _Unplain(f"got a {_name(value)} (a tensor subclass with its own dispatch); return a plain torch.Tensor")
    with _no_torch_function(), _no_dispatch():
        tensor = _as_subclass(value, _Tensor) if _type(value) is not _Tensor else value
        if tensor.layout != _strided or tensor.is_meta:
            raise _Unplain(f"got a {tensor.layout} tensor on {tensor.device}; return an ordinary (dense) tensor")
        return _clone(tensor)


def _report(problem: str | None, hint: str) -> None:
    """Fail with the message when there is a problem."""
    if problem is not None:
        raise _AssertionError(f"{problem}\nHint: {hint}" if hint else problem)


def _short(value: Any, limit: int = 300) -> str:
    """repr of plain data (never of a student's object), cut at `limit` characters."""
    text = _repr(value)
    return text if _len(text) <= limit else text[: limit - 3] + "..."


def check_true(condition: Any, message: str) -> None:
    """Fail with `message` unless `condition` is True (a bool, or a one-element tensor)."""
    _report(_truth_problem(condition, message), "")


def _truth_problem(condition: Any, message: str) -> str | None:
    try:
        value = _plain(condition, 0)
    except _Unplain as exc:
        return f"{message} (the condition {exc})"
    if _type(value) is _Tensor:
        with _no_torch_function(), _no_dispatch():
            if value.numel() != 1:
                return f"{message} (the condition is a tensor of shape {tuple(value.shape)}, not one value)"
            value = _bool(value.item())
    if _type(value) is _ndarray:
        if value.size != 1:
            return f"{message} (the condition is an array of shape {value.shape}, not one value)"
        value = _bool(value.item())
    if _type(value) not in (bool, int):
        return f"{message} (the condition is a {_name(value)}, not a bool)"
    return None if value else message


def check_equal(actual: Any, expected: Any, what: str, hint: str = "") -> None:
    """Fail unless `actual` equals `expected`, both made plain first.

    Lists and tuples are both sequences and compare element by element (a tuple where a
    list is expected is fine); dicts compare as dicts (a Counter equals the dict of its
    counts); where a number is expected, a one-element tensor or NumPy scalar compares as its
    number, but where a list is expected the shape counts (a 0-d tensor is not [2]: a
    .squeeze() that drops a batch axis of size 1 fails); tensors compare exactly (use
    check_close for floating point); a bool is never equal to a number.
    """
    try:
        a = _plain(actual, 0)
    except _Unplain as exc:
        return _report(f"{what}: {exc}.", hint)
    e = _plain(expected, 0)
    problem = None if _same(a, e) else f"{what}: got {_short(a)}, expected {_short(e)}."
    _report(problem, hint)


def _same(a: Any, e: Any) -> bool:
    ta, te = _type(a), _type(e)
    if te is _Tensor or ta is _Tensor or te is _ndarray or ta is _ndarray:
        return _tensors_equal(a, e)
    if te in (list, tuple):
        if ta not in (list, tuple) or _len(a) != _len(e):
            return False
        return _all(_same(x, y) for x, y in _zip(a, e))
    if te is dict:
        if ta is not dict or _len(a) != _len(e):
            return False
        for key, value in _dict_items(e):
            if key not in a or not _same(a[key], value):
                return False
        return True
    if te in (set, frozenset):
        return ta in (set, frozenset) and a == e
    if (ta is bool) != (te is bool):
        return False
    if te in (int, float, complex) and ta not in (int, float, complex):
        return False
    if te in (str, bytes, type(None)) and ta is not te:
        return False
    return a == e


def _tensors_equal(a: Any, e: Any) -> bool:
    try:
        a, e = _as_plain_tensor(a), _as_plain_tensor(e)
    except _Unplain:
        return False
    with _no_torch_function(), _no_dispatch():
        if a.numel() == 1 and e.dim() == 0:  # a number is expected: a one-element tensor is that number
            a = a.reshape(())
        if a.shape != e.shape:
            return False
        common = _promote(a.dtype, e.dtype)
        return _equal(_to(_detach(a), _cpu, common), _to(_detach(e), _cpu, common))


def _as_plain_tensor(value: Any, doubles: bool = False) -> Any:
    """A plain tensor from plain data: a tensor, a NumPy array or scalar, a number, a
    (nested) list or tuple of numbers. With `doubles`, Python floats (which are doubles)
    become float64, not torch's default float32."""
    t = _type(value)
    if t is _Tensor:
        return value
    if t is _ndarray:
        if value.dtype.kind not in "biuf":
            raise _Unplain(f"got a NumPy array of {value.dtype}, not numbers")
        return _from_numpy(_np_array(value, copy=True))
    if t in (bool, int, float, list, tuple):
        try:
            with _no_torch_function(), _no_dispatch():
                made = _tensor_ctor(value)
                return _tensor_ctor(value, dtype=_float64) if doubles and made.dtype.is_floating_point else made
        except (TypeError, ValueError, RuntimeError):
            raise _Unplain("is not a number, a tensor, or a (nested) list of numbers") from None
    raise _Unplain(f"got a {_type_name(t)}, expected a number or a tensor")


def check_type(value: Any, types: type | tuple[type, ...], what: str, hint: str = "") -> None:
    """Fail unless `value`'s class is (a subclass of) `types`. The class is read from the
    object itself: a `__class__` that claims otherwise is not believed."""
    wanted = types if _type(types) is tuple else (types,)
    got = _boundary.type_name(value) if _boundary is not None and _boundary.is_remote(value) else _name(value)
    names = " or ".join(_type_name(w) if type in _type_mro(_type(w)) else _repr(w) for w in wanted)
    _report(None if is_instance(value, wanted) else f"{what}: got a {got}, expected a {names}.", hint)


def is_instance(value: Any, types: type | tuple[type, ...]) -> bool:
    """Whether `value`'s class is (a subclass of) `types`, read as check_type reads it."""
    wanted = types if _type(types) is tuple else (types,)
    if _boundary is not None and (_boundary.is_remote(value) or _any_of(_boundary.is_remote(w) for w in wanted)):
        return _boundary.isinstance(value, wanted)
    return _any_of(w in _type_mro(_type(value)) for w in wanted)


def load_weights(module, weights: dict, what: str) -> None:
    """Copy `weights` (name -> tensor, named as in `module.state_dict()`) into `module`, and
    fail when it has no parameter or buffer of one of those names (your module may hold more)."""
    result = module.load_state_dict(weights, strict=False)
    _, unexpected = _plain(_tuple(result), 0)
    names = ", ".join(_str_copy(n) for n in unexpected if _type(n) is str)
    _report(f"{what} has no parameter named {names}." if unexpected else None, "")


def stand_in(obj=None, **data):
    """Mark a class or function of a test cell that is handed to your code (a reference part
    to build your layer with, a function to test yours on). In a notebook it is returned as
    it is; while grading, the same definition is made in your kernel, with `data` (plain
    values it uses) beside it, and that is what your code gets. Use as `@stand_in` or
    `@stand_in(W=W)`."""
    if obj is None:
        return lambda target: stand_in(target, **data)
    if _boundary is None:  # the data are the test cell's own names, beside the definition already
        return obj
    return _boundary.stand_in(obj, data)


def call_with(substitutes: dict, function, *args, **kwargs):
    """`function(*args, **kwargs)` while the notebook's names in `substitutes` stand for the
    given objects, restored afterwards: e.g. your EncoderLayer built with PyTorch's LayerNorm
    (`call_with({"LayerNorm": RefLN}, EncoderLayer, 16, 4, 32)`), so that a test checks one
    part at a time."""
    if _boundary is not None:
        return _boundary.call_with(substitutes, function, args, kwargs)
    namespace = sys.modules["__main__"].__dict__
    missing = object()
    saved = {name: namespace.get(name, missing) for name in substitutes}
    namespace.update(substitutes)
    try:
        return function(*args, **kwargs)
    finally:
        for name, value in saved.items():
            if value is missing:
                namespace.pop(name, None)
            else:
                namespace[name] = value


def check_shape(tensor: Any, expected_shape: tuple, what: str, hint: str = "") -> None:
    """Fail unless `tensor` is a torch.Tensor of exactly `expected_shape`."""
    _report(_shape_problem(tensor, expected_shape, what), hint)


def _shape_problem(tensor: Any, expected_shape: tuple, what: str) -> str | None:
    if _Base not in _type_mro(_type(tensor)):
        return (f"{what}: got a {_name(tensor)}, expected a Tensor "
                "(return a torch.Tensor, not a list or a NumPy array).")
    try:
        t = _plain_tensor(tensor)
    except _Unplain as exc:
        return f"{what}: {exc}."
    shape = _tuple(_int(n) for n in t.shape)
    wanted = _tuple(_int(n) for n in expected_shape)
    return None if shape == wanted else f"{what} has shape {shape}, expected {wanted}."


def check_close(
    actual: Any,
    expected: Any,
    what: str,
    rtol: float = 1e-5,
    atol: float = 1e-8,
    hint: str = "",
) -> None:
    """Fail unless `actual` matches `expected` elementwise within |a - e| <= atol + rtol * |e|.

    `actual` may be a tensor, a NumPy array, a number or a (nested) list of numbers; it is
    made plain, its shape is checked, and both are compared on the CPU in float64. The
    message names the largest error and where it is.
    """
    _report(_close_problem(actual, expected, what, rtol, atol), hint)


def _close_problem(actual: Any, expected: Any, what: str, rtol: float, atol: float) -> str | None:
    e = _as_plain_tensor(_plain(expected, 0), doubles=True)
    try:
        a = _as_plain_tensor(_plain(actual, 0), doubles=True)
    except _Unplain as exc:
        return f"{what}: {exc}."
    with _no_torch_function(), _no_dispatch():
        a_shape, e_shape = _tuple(_int(n) for n in a.shape), _tuple(_int(n) for n in e.shape)
        if a_shape != e_shape:
            return f"{what} has shape {a_shape}, expected {e_shape}."
        if a.dtype.is_complex or (not a.dtype.is_floating_point and a.dtype not in _INTEGRAL):
            return f"{what}: got a tensor of {a.dtype}, expected real numbers."
        a = _to(_detach(a), _cpu, _float64)
        e = _to(_detach(e), _cpu, _float64)
        if _bool(_any(_isnan(a))) and not _bool(_any(_isnan(e))):
            return f"{what} contains NaN where the expected values are finite."
        error = _abs(_sub(a, e))
        allowed = _add(_mul(_abs(e), _float(rtol)), _float(atol))
        bad = ~_le(error, allowed)
        if not _bool(_any(bad)):
            return None
        where = _tuple(_int(i) for i in _nonzero(bad)[0]) if a.dim() else ()
        worst = _float(error.nan_to_num(float("inf"))[bad].max())
        return (
            f"{what} differs from the expected values: {_int(bad.sum())} of {a.numel()} "
            f"entries are off, the largest absolute error is {worst:.3g} "
            f"(first at index {where}: got {_float(a[where]):.6g}, expected {_float(e[where]):.6g}; "
            f"tolerance rtol={rtol:g}, atol={atol:g})."
        )


_INTEGRAL = (torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64)
