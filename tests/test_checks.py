"""utils.checks against values that try to decide their own comparison (hostile
hand-ins), and against correct but unusual answers that must keep passing."""
import collections
import sys

import numpy as np
import pytest
import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

from utils import checks
from utils.checks import check_close, check_equal, check_shape, check_true, check_type, plain


class AlwaysEqualList(list):
    def __eq__(self, other):
        return True

    def __ne__(self, other):
        return False

    def __len__(self):
        return 3

    def __iter__(self):
        return iter(["H", "i", "!"])

    def __repr__(self):
        raise RuntimeError("student code ran")


class AlwaysEqualStr(str):
    def __eq__(self, other):
        return True

    __hash__ = str.__hash__


class AlwaysEqualInt(int):
    def __eq__(self, other):
        return True

    def __ne__(self, other):
        return False

    __hash__ = int.__hash__


class LyingCounter(collections.Counter):
    def __eq__(self, other):
        return True

    def items(self):
        return [(("a", "b"), 2)]


class LyingTensor(torch.Tensor):
    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        name = getattr(func, "__name__", "")
        if name in ("allclose", "equal", "__eq__", "eq", "isclose", "sub", "abs", "le", "any", "clone", "to"):
            raise RuntimeError("student code ran")
        return super().__torch_function__(func, types, args, kwargs or {})


class Wrapper(torch.Tensor):
    @staticmethod
    def __new__(cls, elem):
        return torch.Tensor._make_wrapper_subclass(cls, elem.shape, dtype=elem.dtype)

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        raise RuntimeError("student code ran")


class LyingArray(np.ndarray):
    def __eq__(self, other):
        return np.ones(self.shape, dtype=bool)

    def __array__(self, *args, **kwargs):
        return np.zeros(self.shape)


class Impostor:
    __class__ = list  # isinstance(Impostor(), list) is True

    def __eq__(self, other):
        return True

    def __float__(self):
        return 0.0

    def __array__(self, *args, **kwargs):
        return np.zeros(2)

    def __len__(self):
        return 2


def test_subclasses_of_builtins_are_judged_by_their_real_content():
    fake = AlwaysEqualList(["x"])
    with pytest.raises(AssertionError, match=r"got \['x'\], expected"):
        check_equal(fake, ["H", "i", "!"], "char_tokenize")
    assert type(plain(fake)) is list and plain(fake) == ["x"]
    with pytest.raises(AssertionError):
        check_equal(AlwaysEqualStr("no"), "yes", "a string")
    with pytest.raises(AssertionError):
        check_equal(AlwaysEqualInt(1), 42, "a count")
    check_equal(AlwaysEqualInt(42), 42, "a count")  # the real value is right: it passes
    with pytest.raises(AssertionError):
        check_equal(LyingCounter({("x", "y"): 1}), collections.Counter({("a", "b"): 2}), "pair counts")


def test_tensor_hooks_never_run_during_a_check():
    lying = torch.zeros(3).as_subclass(LyingTensor)
    with pytest.raises(AssertionError, match="differs"):
        check_close(lying, torch.ones(3), "out")
    check_close(torch.ones(3).as_subclass(LyingTensor), torch.ones(3), "out")
    check_shape(lying, (3,), "out")
    with pytest.raises(AssertionError, match="plain torch.Tensor"):
        check_close(Wrapper(torch.ones(3)), torch.ones(3), "out")
    with pytest.raises(AssertionError, match="plain torch.Tensor"):
        check_shape(Wrapper(torch.ones(3)), (3,), "out")


def test_modes_left_active_by_student_code_do_not_reach_the_checks():
    class SayEqual(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            return torch.tensor(False) if getattr(func, "__name__", "") in ("any", "le") else func(*args, **(kwargs or {}))

    class Zeros(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            return out.zero_() if isinstance(out, torch.Tensor) and out.is_floating_point() else out

    zeros, ones = torch.zeros(3), torch.ones(3)
    for mode in (SayEqual(), Zeros()):
        with mode:
            with pytest.raises(AssertionError, match="differs"):
                check_close(zeros, ones, "out")


def test_objects_that_are_not_data_fail_with_a_message():
    with pytest.raises(AssertionError, match="Impostor.*cannot compare"):
        check_equal(Impostor(), [0, 0], "value")
    with pytest.raises(AssertionError, match="Impostor"):
        check_close(Impostor(), [0.0, 0.0], "value")
    with pytest.raises(AssertionError, match="Impostor, expected a list"):
        check_type(Impostor(), list, "value")
    with pytest.raises(AssertionError, match="not a bool|cannot compare"):
        check_true(Impostor(), "condition")
    with pytest.raises(AssertionError, match="differs"):
        check_close(np.ones(2).view(LyingArray), np.zeros(2), "array")


def test_correct_but_unusual_answers_pass():
    check_equal(("H", "i"), ["H", "i"], "a tuple where a list is expected")
    check_equal([["a", "b"]], [("a", "b")], "pairs as lists")
    check_equal({("a", "b"): 2}, collections.Counter({("a", "b"): 2}), "a dict where a Counter is expected")
    check_equal(np.int64(3), 3, "a NumPy integer")
    check_equal(torch.tensor(3), 3, "a 0-d tensor")
    check_equal(torch.tensor([3]), 3, "a one-element tensor where a number is expected")
    check_close(np.array([1.0, 2.0]), torch.tensor([1.0, 2.0]), "a NumPy array")
    check_close(torch.tensor([1.0, 2.0], dtype=torch.float64), torch.tensor([1.0, 2.0]), "float64")
    check_close(torch.nn.Parameter(torch.ones(2)), torch.ones(2), "a Parameter")
    check_true(torch.tensor(True), "a tensor condition")
    check_true(np.bool_(True), "a NumPy bool")


def test_plain_keeps_the_autograd_graph_and_detaches_from_the_original():
    x = torch.ones(2, requires_grad=True)
    y = x * 2
    p = plain(y)
    assert type(p) is torch.Tensor and p.requires_grad
    p.sum().backward()
    assert torch.equal(x.grad, torch.full((2,), 2.0))
    y.data.zero_()
    assert torch.equal(p.detach(), torch.full((2,), 2.0))


def test_a_squeezed_batch_of_one_is_not_a_list_of_one():
    """A .squeeze() that drops the batch axis of a batch of one gives a 0-d tensor: where a list of one
    is expected, that fails (the shape counts), as it does for a list of two."""
    check_equal(torch.tensor([2]), [2], "a batch of one")
    with pytest.raises(AssertionError):
        check_equal(torch.tensor(2), [2], "a squeezed batch of one")
    with pytest.raises(AssertionError):
        check_equal(torch.tensor([[2]]), [2], "an extra axis")


def test_python_floats_are_compared_as_the_doubles_they_are():
    """A float64 check at a tight tolerance must see a float32 computation even when both
    sides are Python floats (torch.tensor(0.1) alone would round them to float32)."""
    third = torch.tensor(1.0, dtype=torch.float64) / 3
    check_close(float(third), float(third), "a float64 value", rtol=1e-12, atol=0)
    check_close([float(third), 0.5], torch.stack([third, third / third / 2]), "a list of floats", rtol=1e-12, atol=0)
    with pytest.raises(AssertionError, match="rtol=1e-12"):
        check_close(float(third.float()), float(third), "a float32 value", rtol=1e-12, atol=0)


def test_a_bool_is_not_a_number_and_strictness_is_kept():
    with pytest.raises(AssertionError):
        check_equal(True, 1, "a flag")
    with pytest.raises(AssertionError):
        check_equal("3", 3, "a count")
    with pytest.raises(AssertionError):
        check_equal([1, 2], [1, 2, 3], "a list")


def test_the_public_names_are_listed_in_order():
    assert checks.__all__ == sorted(checks.__all__)


def test_call_with_substitutes_notebook_names_for_the_call_only():
    main = sys.modules["__main__"].__dict__
    main["_course_part"] = "original"

    def build():
        return sys.modules["__main__"].__dict__["_course_part"]

    try:
        assert checks.call_with({"_course_part": "reference"}, build) == "reference"
        assert main["_course_part"] == "original"
        assert checks.call_with({"_course_new": 1}, lambda: main["_course_new"]) == 1
        assert "_course_new" not in main
    finally:
        main.pop("_course_part", None)


def test_stand_in_and_is_instance_act_locally_in_a_notebook():
    @checks.stand_in
    class Part(torch.nn.Module):
        pass

    assert checks.stand_in(len) is len and checks.stand_in(W=1)(Part) is Part
    assert checks.is_instance(Part(), torch.nn.Module) and not checks.is_instance([], (dict, torch.nn.Module))


def test_load_weights_copies_by_name_and_names_what_the_module_lacks():
    layer = torch.nn.Linear(3, 2)
    checks.load_weights(layer, {"bias": torch.ones(2)}, "Linear(3, 2)")
    assert torch.equal(layer.bias.detach(), torch.ones(2))
    with pytest.raises(AssertionError, match="Linear.3, 2. has no parameter named gain"):
        checks.load_weights(layer, {"gain": torch.ones(2)}, "Linear(3, 2)")
