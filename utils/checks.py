"""Self-check helpers: each raises an AssertionError whose message says what is wrong,
what was expected, and (with `hint`) the likely reason.

Test cells call these so that a student reads "rows of your attention weights sum to
3.0, not 1: did you take the softmax over the query axis?" instead of a bare assert.
"""
from __future__ import annotations

from typing import Any


def _fail(message: str, hint: str = "") -> None:
    raise AssertionError(f"{message}\nHint: {hint}" if hint else message)


def _short(value: Any, limit: int = 300) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def check_true(condition: bool, message: str) -> None:
    """Fail with `message` unless `condition` holds."""
    if not condition:
        _fail(message)


def check_equal(actual: Any, expected: Any, what: str, hint: str = "") -> None:
    """Fail unless actual == expected (for non-tensor values: lists, dicts, ints, strings)."""
    if actual != expected:
        _fail(f"{what}: got {_short(actual)}, expected {_short(expected)}.", hint)


def check_type(value: Any, types: type | tuple[type, ...], what: str, hint: str = "") -> None:
    """Fail unless `value` is an instance of `types`."""
    if not isinstance(value, types):
        names = types.__name__ if isinstance(types, type) else " or ".join(t.__name__ for t in types)
        _fail(f"{what}: got a {type(value).__name__}, expected a {names}.", hint)


def check_shape(tensor: Any, expected_shape: tuple, what: str, hint: str = "") -> None:
    """Fail unless `tensor` is a torch.Tensor of exactly `expected_shape`."""
    import torch

    check_type(tensor, torch.Tensor, what, hint or "return a torch.Tensor, not a list or a NumPy array.")
    if tuple(tensor.shape) != tuple(expected_shape):
        _fail(f"{what} has shape {tuple(tensor.shape)}, expected {tuple(expected_shape)}.", hint)


def check_close(
    actual: Any,
    expected: Any,
    what: str,
    rtol: float = 1e-5,
    atol: float = 1e-8,
    hint: str = "",
) -> None:
    """Fail unless `actual` matches `expected` elementwise within |a - e| <= atol + rtol * |e|.

    Tensors are compared on the CPU in float64 after their shapes are checked; plain
    numbers are accepted too. The message names the largest error and where it is.
    """
    import torch

    expected_t = torch.as_tensor(expected).detach().cpu()
    if isinstance(actual, torch.Tensor):
        check_shape(actual, tuple(expected_t.shape), what, hint)
    else:
        try:
            actual = torch.as_tensor(actual)
        except (TypeError, ValueError, RuntimeError):
            _fail(f"{what}: got a {type(actual).__name__}, expected a number or a tensor.", hint)
        check_shape(actual, tuple(expected_t.shape), what, hint)
    a = actual.detach().cpu().to(torch.float64)
    e = expected_t.to(torch.float64)
    if torch.isnan(a).any() and not torch.isnan(e).any():
        _fail(f"{what} contains NaN where the expected values are finite.", hint)
    error = (a - e).abs()
    allowed = atol + rtol * e.abs()
    bad = ~(error <= allowed)
    if bad.any():
        where = tuple(int(i) for i in torch.nonzero(bad)[0]) if a.dim() else ()
        worst = float(error.nan_to_num(float("inf")).max())
        _fail(
            f"{what} differs from the expected values: {int(bad.sum())} of {a.numel()} "
            f"entries are off, the largest absolute error is {worst:.3g} "
            f"(first at index {where}: got {float(a[where]):.6g}, expected {float(e[where]):.6g}; "
            f"tolerance rtol={rtol:g}, atol={atol:g}).",
            hint,
        )
