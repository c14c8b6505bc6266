"""The boundary between the student's kernel and the trusted runner (autograder/isolation/boundary):
the codec refuses what is not data, and a call through a real kernel behaves as a call in
one process (values, gradients, in-place changes, random draws, exceptions, printing)."""
from __future__ import annotations

import json
import pickle
import time
from collections import Counter, OrderedDict

import numpy
import pytest
import torch
from jupyter_client.manager import start_new_kernel

from autograder.isolation.boundary.codec import CodecError, Limits, Ref, decode, encode, parse
from autograder.isolation.boundary.runner_side import BoundaryError, Handle, KernelError, KernelLink
from utils.checks import plain


def roundtrip(value):
    tree, buffers = encode(value)
    tree = json.loads(json.dumps(tree))  # what a Jupyter message carries
    return decode(tree, buffers)


@pytest.mark.parametrize("value", [
    None, True, False, 0, -7, 10**40, 1.5, float("inf"), 2.0**-1074, 1 + 2j, "purple cats", "", b"\x00\xff",
    [1, [2, (3, "x")]], (), {"a": 1, 2: [3]}, {1, 2, 3}, frozenset({"a"}), Counter("purple"),
    OrderedDict([("b", 1), ("a", 2)]), numpy.arange(6, dtype=numpy.int32).reshape(2, 3), numpy.float64(0.25),
    numpy.bool_(True),
])
def test_data_round_trips_with_its_exact_type(value):
    back = roundtrip(value)
    assert type(back) is type(value)
    if isinstance(value, numpy.ndarray):
        assert back.dtype == value.dtype and numpy.array_equal(back, value)
    else:
        assert back == value


def test_nan_survives():
    assert roundtrip(float("nan")) != roundtrip(float("nan"))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.int64, torch.bool, torch.complex64])
def test_tensors_keep_dtype_shape_and_values(dtype):
    t = (torch.arange(24).reshape(2, 3, 4) % 5).to(dtype)
    back = roundtrip(t[:, 1:])  # not contiguous
    assert type(back) is torch.Tensor and back.dtype == dtype and torch.equal(back, t[:, 1:])
    assert roundtrip(torch.empty(0, 3)).shape == (0, 3)


def test_a_tensor_with_a_zero_stride_on_an_axis_of_size_one_crosses():
    value = torch.tensor(2.5, dtype=torch.float64).expand(1, 1)   # stride (0, 0), as autograd's grad of a sum
    tree, buffers = encode(value)
    back = decode(tree, buffers)
    assert back.shape == (1, 1) and back.dtype == torch.float64 and back.item() == 2.5


def test_parameters_keep_requires_grad_and_their_gradient():
    p = torch.nn.Parameter(torch.randn(3))
    p.grad = torch.ones(3)
    back = roundtrip(p)
    assert type(back) is torch.nn.Parameter and back.requires_grad and torch.equal(back.grad, torch.ones(3))
    assert roundtrip(torch.randn(2, requires_grad=True)).requires_grad


def test_a_generator_crosses_as_its_state():
    g = torch.Generator().manual_seed(3)
    back = roundtrip(g)
    assert torch.equal(torch.randn(4, generator=back), torch.randn(4, generator=g))


def test_objects_that_are_not_data_need_a_reference():
    with pytest.raises(CodecError, match="Linear is not data"):
        encode(torch.nn.Linear(2, 2))
    with pytest.raises(CodecError):
        encode(torch.zeros(2).as_subclass(type("Sub", (torch.Tensor,), {})))
    tree, buffers = encode([torch.nn.Linear(2, 2)], other=lambda v: Ref("kernel", 7))
    assert decode(tree, buffers, resolve=lambda ref: ("resolved", ref.number)) == [("resolved", 7)]
    with pytest.raises(CodecError, match="reference"):
        decode(tree, buffers)  # a side that keeps no objects refuses references


def _tensor_node(shape, nbytes, dtype="float32"):
    return ["tensor", dtype, shape, False, "cpu", 0, None], [b"\x00" * nbytes]


GENERATOR_BYTES = len(torch.Generator().get_state())
# Data whose dtype, shape and byte count are right, that torch itself refuses with a RuntimeError
TORCH_REFUSES = [
    (*_tensor_node([0, 2**62, 2**62], 0), "malformed tensor.*overflow"),  # no elements, strides past int64
    (["generator", 0], [b"\xff" * GENERATOR_BYTES], "malformed generator"),  # not an mt19937 state
    (["tensor", "float32", [1], True, "cpu", 0, ["tensor", "float64", [1], False, "cpu", 1, None]],
     [b"\0" * 4, b"\0" * 8], "malformed tensor.*dtype"),  # a gradient of another dtype
]


@pytest.mark.parametrize("tree, buffers, reason", [
    (*_tensor_node([10**12], 16), "elements|needs"),
    (*_tensor_node([2, 2], 15), "needs 16 bytes"),
    (*_tensor_node([-1], 0), "sizes >= 0"),
    (*_tensor_node([2], 8, dtype="object"), "dtype"),
    (["tensor", "float32", [1], False, "cpu", 3, None], [b"\x00" * 4], "buffer index"),
    (["ndarray", "float64", [10**9, 10**9], 0], [b""], "elements|bytes"),
    (["int", "9" * 100_000], [], "digits"),
    (["pickle", "gASVAAAAAAAAAAB9lC4="], [], "unknown tag"),
    (["bytes", 0], [pickle.dumps(object())], None),  # pickled bytes stay bytes: nothing unpickles them
    (["list", "not a list"], [], "list of items"),
    (["dict", [[["str", "k"]]]], [], "pairs"),
    (["set", [["list", []]]], [], "malformed set"),
    ("just a string", [], "tagged list"),
    (["float", "0x1p+99999999999"], [], "malformed float|hex"),
    *TORCH_REFUSES,
])
def test_hostile_messages_are_refused_with_a_reason(tree, buffers, reason):
    if reason is None:
        assert type(decode(tree, buffers)) is bytes
        return
    with pytest.raises(CodecError, match=reason):
        decode(tree, buffers)


ONE_HASH = [["int", str((2**61 - 1) * k)] for k in range(1, 18)]  # 17 ints whose hash is 0


@pytest.mark.parametrize("tree", [
    ["set", ONE_HASH], ["frozenset", ONE_HASH],
    *[[tag, [[key, ["none"]] for key in ONE_HASH]] for tag in ("dict", "counter", "odict")],
    ["set", [["tuple", [key]] for key in ONE_HASH]],  # tuples of them share a hash too
])
def test_keys_that_share_one_hash_are_refused_before_a_set_or_dict_compares_them(tree):
    """n keys of one hash cost a set or dict n²/2 comparisons (a set's in one uninterruptible C
    call): past `Limits.same_hash` of them the reply is refused, so decoding stays linear."""
    with pytest.raises(CodecError, match="keys of one hash"):
        decode(tree, [])
    few = [tree[0], tree[1][:16]]
    assert len(decode(few, [])) == 16


def test_keys_of_honest_data_whose_hashes_collide_decode():
    assert decode(*encode({-1: "a", -2: "b", 0: 0.0, (1, 2): {frozenset({-1, -2})}})) == \
        {-1: "a", -2: "b", 0: 0.0, (1, 2): {frozenset({-1, -2})}}


def _nbgraders_session():
    from autograder.isolation.boundary.execute import CappedKernelManager

    return CappedKernelManager().session


def _runners_session():
    from autograder.isolation.boundary.runner import kernel_client

    return kernel_client({}).session


@pytest.mark.parametrize("read, expected", [
    (lambda: decode(parse(b'["dict", [[["str", "k\\udcff"], ["str", "a\\ud800b"]]]]'), []),
     {"k\\udcff": "a\\ud800b"}),
    (lambda: decode(parse(b'["list", [["str", "\xed\xa0\x80"]]]'), []), ["\\ud800"]),  # UTF-8 of one: json passes it
    (lambda: _nbgraders_session().unpack(b'{"text": ["a\\ud800b", {"k\\udcff": "\\ud83d\\ude00"}]}'),
     {"text": ["a\\ud800b", {"k\\udcff": "\N{GRINNING FACE}"}]}),
    (lambda: _runners_session().unpack(b'{"name": "stdout", "text": "a\\ud800b"}'), {"name": "stdout", "text": "a\\ud800b"}),
], ids=["codec", "codec-utf8", "nbgrader-session", "runner-session"])
def test_a_lone_surrogate_from_the_kernel_comes_in_as_its_escape(read, expected):
    """Every way text of a kernel enters a grader process (autograder.isolation.kernel_text): each lone
    surrogate (which no UTF-8 file can hold) comes in as its escape written out; a pair of them, one
    character, as that character."""
    assert read() == expected


def test_deep_nesting_and_huge_counts_are_refused_before_building():
    tree = ["none"]
    for _ in range(100_000):
        tree = ["list", [tree]]
    with pytest.raises(CodecError, match="nested"):
        decode(tree, [])
    with pytest.raises(CodecError, match="parts"):
        decode(["list", [["none"]] * 1000], [], Limits(nodes=100))
    with pytest.raises(CodecError, match="carries"):
        decode(["bytes", 0], [b"x" * 1000], Limits(bytes=100))


STUDENT = '''
import torch, torch.nn as nn
from autograder.isolation.boundary.kernel_side import install
install(get_ipython())

def double(xs):
    print("hello from your function")
    return [2 * x for x in xs]

def weighted_sum(x, w):
    return (x * w).sum(-1)

class Tiny(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.fc = nn.Linear(d, d)
    def forward(self, x):
        return self.fc(x).tanh()

def append_and_add(xs, t):
    xs.append(9)
    t.add_(1)

def change_inside(state, layers):
    state[0].mul_(2)
    state[1].append("x")
    layers[0][1].zero_()

def draw(n, generator=None):
    return torch.randn(n, generator=generator)

def grad_mode():
    return torch.is_grad_enabled()

def fails():
    raise ValueError("a bad value")

def count(xs):
    return len(xs)

def draw_then_fail(n):
    torch.randn(n)
    raise ValueError("drew, then failed")

class Odd(Exception):
    pass

def fails_oddly():
    raise Odd("odd")
'''


def _kernel_link():
    km, kc = start_new_kernel(kernel_name="python3")
    try:
        reply = kc.execute_interactive(STUDENT, timeout=120)
        assert reply["content"]["status"] == "ok"
        yield KernelLink(kc, timeout=20)
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)


def run_in_kernel(link, code):
    """Run a cell in the kernel, as between two test cells (the agent stops serving first)."""
    link.end()
    assert link.client.execute_interactive(code, timeout=30)["content"]["status"] == "ok"


link = pytest.fixture(scope="module")(_kernel_link)
hostile_link = pytest.fixture(_kernel_link)  # a kernel of its own: the test changes its agent


def test_a_call_sends_and_returns_values_and_keeps_what_the_function_printed(link):
    assert Handle(link, "double")([1, 2.5, "a"]) == [2, 5.0, "aa"]
    assert {"name": "stdout", "text": "hello from your function\n"} in link.outputs


def test_gradients_cross_the_boundary_both_ways(link):
    x, w = torch.randn(3, 4, requires_grad=True), torch.randn(4, requires_grad=True)
    Handle(link, "weighted_sum")(x, w).pow(2).sum().backward()
    x2, w2 = x.detach().clone().requires_grad_(), w.detach().clone().requires_grad_()
    (x2 * w2).sum(-1).pow(2).sum().backward()
    torch.testing.assert_close(x.grad, x2.grad)
    torch.testing.assert_close(w.grad, w2.grad)


def test_a_module_stays_in_the_kernel_and_its_parameters_get_gradients(link):
    model = Handle(link, "Tiny")(4)
    assert "torch.nn.modules.module.Module" in model.type_names()
    assert len(list(model.parameters())) == 2
    with pytest.raises(AssertionError, match="not data|cannot compare"):
        plain(model)
    with pytest.raises(TypeError):
        model == model  # noqa: B015 (a handle never takes part in a comparison)
    x = torch.randn(2, 4)
    model(x).sum().backward()
    weight, bias = model.fc.weight, model.fc.bias
    expected = (1 - torch.tanh(x @ weight.detach().T + bias.detach()) ** 2)
    torch.testing.assert_close(bias.grad, expected.sum(0))


def test_in_place_changes_to_arguments_come_back(link):
    xs, t = [1], torch.zeros(2)
    Handle(link, "append_and_add")(xs, t)
    assert xs == [1, 9] and torch.equal(t, torch.ones(2))


def test_in_place_changes_inside_tuples_and_lists_come_back_to_the_same_tensors(link):
    h, names, w, b = torch.ones(2), ["a"], torch.ones(3), torch.ones(3)
    state, layers = (h, names, 7), [(w, b), (w.clone(), b.clone())]
    Handle(link, "change_inside")(state, layers)
    assert torch.equal(h, torch.full((2,), 2.0)) and names == ["a", "x"]
    assert layers[0][1] is b and torch.equal(b, torch.zeros(3)) and torch.equal(w, torch.ones(3))


def test_random_draws_are_those_of_one_process(link):
    torch.manual_seed(0)
    remote, after = Handle(link, "draw")(3), torch.randn(2)
    torch.manual_seed(0)
    assert torch.equal(remote, torch.randn(3)) and torch.equal(after, torch.randn(2))
    g, g2 = torch.Generator().manual_seed(5), torch.Generator().manual_seed(5)
    remote = Handle(link, "draw")(2, generator=g)
    assert torch.equal(remote, torch.randn(2, generator=g2))
    assert torch.equal(torch.randn(2, generator=g), torch.randn(2, generator=g2))


def test_random_draws_stay_those_of_one_process_over_many_requests(link):
    """The RNG state crosses only when it changed; the sequence stays that of one process,
    through requests that draw nothing, draws on either side, and a call that fails after drawing."""
    def sequence(draw, draw_then_fail, length):
        torch.manual_seed(1)
        out = [draw(2), torch.randn(1)]
        length([1, 2]), length([3])
        out.append(draw(3))
        with pytest.raises(ValueError):
            draw_then_fail(4)
        out += [draw(2), torch.randn(2)]
        torch.manual_seed(1)
        out.append(draw(1))
        return out

    def failing(n):
        torch.randn(n)
        raise ValueError("drew, then failed")

    here = sequence(lambda n: torch.randn(n), failing, len)
    there = sequence(Handle(link, "draw"), Handle(link, "draw_then_fail"), Handle(link, "count"))
    assert all(torch.equal(a, b) for a, b in zip(here, there, strict=True))


def test_grad_mode_goes_with_the_call(link):
    assert Handle(link, "grad_mode")() is True
    with torch.no_grad():
        assert Handle(link, "grad_mode")() is False


def test_exceptions_come_back_as_python_s_own_class_or_a_kernel_error(link):
    with pytest.raises(ValueError, match="a bad value"):
        Handle(link, "fails")()
    with pytest.raises(KernelError, match="Odd: odd"):
        Handle(link, "fails_oddly")()
    with pytest.raises(NameError, match="not defined"):
        Handle(link, "never_defined")()
    with pytest.raises(TypeError, match="cannot send"):
        Handle(link, "double")([object()])


FORGE = """
import autograder.isolation.boundary.kernel_side as agent
agent.Agent.answer = lambda self, tree, buffers: (%s, %s)
"""


DEEP = """
agent.reply_frames = lambda number, tree, buffers: [number, b"[" * 100000 + b"]" * 100000]
"""


@pytest.mark.parametrize("tree, buffers, error", [
    ("['tensor', 'float32', [10**12], False, 'cpu', 0, None]", "[b'1234']", "elements|needs"),
    ("['pickle', 'gASVAAAAAAAAAAB9lC4=']", "[]", "unknown tag"),
    ("['list', []]", "[]", "nests"),  # sent as JSON nested 100,000 deep (DEEP below)
    ("['list', [['int', '1']]]", "[]", "not a dict"),
])
def test_a_forged_reply_is_refused_with_a_reason(hostile_link, tree, buffers, error):
    Handle(hostile_link, "double")([1])  # opens the comm
    run_in_kernel(hostile_link, FORGE % (tree, buffers) + (DEEP if error == "nests" else ""))
    with pytest.raises((CodecError, BoundaryError), match=error):
        Handle(hostile_link, "double")([1])


@pytest.mark.parametrize("tree, buffers, reason", TORCH_REFUSES)
def test_a_reply_torch_refuses_to_build_is_a_refused_reply(hostile_link, tree, buffers, reason):
    """Refused as every reply that is not data is (ReplyRefused: the hand-in's status is `boundary`),
    never torch's own RuntimeError in the test cell."""
    from autograder.isolation.boundary.runner_side import ReplyRefused

    Handle(hostile_link, "double")([1])  # opens the comm
    run_in_kernel(hostile_link, FORGE % (repr(["dict", [[["str", "value"], tree]]]), repr(buffers)))
    with pytest.raises(ReplyRefused, match="refused your code's answer: a " + reason):
        Handle(hostile_link, "double")([1])


def test_the_runner_side_never_unpickles_or_imports_what_the_kernel_wrote():
    """The modules that read the kernel's replies build values only through the codec: no pickle,
    marshal, torch.load, numpy.load or eval in them, and no import of a module the kernel names."""
    import ast
    from pathlib import Path

    import autograder.isolation.boundary as boundary

    folder = Path(boundary.__file__).parent
    for name in ("codec.py", "runner_side.py", "runner.py", "execute.py"):
        tree = ast.parse((folder / name).read_text())
        imported = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom))
                    for a in (n.names if isinstance(n, ast.Import) else [ast.alias(n.module or "")])}
        assert not imported & {"pickle", "marshal", "dill", "cloudpickle", "shelve", "importlib"}, name
        calls = {ast.unparse(n.func) for n in ast.walk(tree) if isinstance(n, ast.Call)}
        assert not calls & {"torch.load", "numpy.load", "eval", "pickle.loads", "__import__"}, name


def test_only_the_course_s_own_cells_run_in_the_runner():
    import nbformat
    from nbformat.v4 import new_code_cell, new_notebook

    from autograder.isolation.boundary.execute import SplitExecute, course_cells

    def cell(source, **meta):
        c = new_code_cell(source)
        c.metadata["nbgrader"] = meta
        return c

    source = new_notebook(cells=[
        cell("import torch", grade_id="setup", locked=True),
        cell("def f(x):\n    return x\n\nclass G:\n    pass", grade_id="f", solution=True),
        cell("assert f(1) == 1", grade_id="test_f", grade=True, locked=True, points=1),
    ])
    course = course_cells(source)
    assert course["names"] == ["f", "G"]
    assert course["cells"] == {"setup": {"source": "import torch", "test": False},
                               "test_f": {"source": "assert f(1) == 1", "test": True}}
    executor = SplitExecute()
    executor.course = json.loads(json.dumps(course))
    assert executor._course_cell(source.cells[2]) == {"source": "assert f(1) == 1", "test": True}
    forged = cell("import os; os.system('evil')", grade_id="test_f", grade=True, locked=True, points=1)
    assert executor._course_cell(forged) is None  # the test's grade_id with other code: the kernel runs it
    assert executor._course_cell(cell("assert f(1) == 1")) is None  # no grade_id: a student's cell
    assert nbformat.validate(source) is None


def test_a_call_that_sets_requires_grad_on_an_argument_is_seen(link):
    run_in_kernel(link, "def grad_on(h):\n    h.requires_grad_()\n    return h.sum()")
    h = torch.zeros(3)
    Handle(link, "grad_on")(h)
    assert h.requires_grad  # as in one process: the caller's tensor changed


def test_a_kernel_whose_agent_never_connects_fails_the_call_with_a_reason(hostile_link):
    """The comm that names the runner's socket reaches a handler of the student's instead of the
    agent: nothing ever connects, and the call fails within the half-second checks, not at the
    limit and never blocked in a send."""
    run_in_kernel(hostile_link, "get_ipython().kernel.comm_manager.register_target("
                                "'course.boundary', lambda comm, msg: comm.on_msg(lambda m: None))")
    link = KernelLink(hostile_link.client, timeout=20)
    started = time.monotonic()
    with pytest.raises(BoundaryError, match="without an answer"):
        Handle(link, "double")([1])
    assert time.monotonic() - started < 10


# -- limits before allocation (issue 42) ---------------------------------------------------
def test_json_is_measured_on_its_bytes_with_strings_taken_out():
    from autograder.course.jsonscan import JsonBounds, TooLarge, check

    bounds = JsonBounds(bytes=1000, values=10, depth=3)
    check(b'["[[[[,,,,,,,,,,,,", "\\"]]]"]', bounds, "it")  # brackets and commas inside strings are text
    with pytest.raises(TooLarge, match="it is 1,001 bytes"):
        check(b" " * 1001, bounds, "it")
    with pytest.raises(TooLarge, match="about 12 values"):
        check(b"[" + b"1," * 11 + b"1]", bounds, "it")
    with pytest.raises(TooLarge, match="nests 4 deep"):
        check(b"[[[[]]]]", bounds, "it")
    check(b"[[[]]] [[[]]]", bounds, "it")  # depth is the deepest point, not the count
    check(b"[[[[]]]]", JsonBounds(bytes=1000, values=10, depth=3, scan_from=8), "it")  # small: not measured
    with pytest.raises(TooLarge, match="bytes"):
        check(b" " * 1001, JsonBounds(bytes=1000, values=10, depth=3, scan_from=2000), "it")


def test_a_hand_in_past_the_notebook_bounds_is_refused_before_it_is_parsed():
    from autograder.course.layout import CourseError, decode_notebook

    with pytest.raises(CourseError, match="values.*outputs cleared"):
        decode_notebook(b'{"cells": [], "nbformat": 4, "x": [' + b"[]," * 1_200_000 + b"[]]}")
    with pytest.raises(CourseError, match="MiB.*outputs cleared"):
        decode_notebook(b" " * (65 << 20))


def test_a_tree_past_the_limits_is_refused_before_json_builds_it(monkeypatch):
    from autograder.isolation.boundary import codec
    from autograder.isolation.boundary.codec import OverLimit, parse

    def never(*args, **kwargs):
        raise AssertionError("json.loads ran on a tree past the limits")

    small = Limits(nodes=100, depth=4, frame=10_000, scan_from=0)
    tree = json.dumps(encode(list(range(50)))[0]).encode()
    assert parse(tree, small) == json.loads(tree)
    monkeypatch.setattr(codec.json, "loads", never)
    for raw, reason in [(b'["str", "' + b"x" * 10_000 + b'"]', "bytes"),
                        (b'["list", [' + b'["none"],' * 1000 + b'["none"]]]', "values"),
                        (b"[" * 30 + b"]" * 30, "deep")]:
        with pytest.raises(OverLimit, match=reason):
            parse(raw, small)
    monkeypatch.undo()
    with pytest.raises(CodecError, match="not JSON"):  # a small tree is parsed at once; json.loads refuses the depth
        parse(b"[" * 60_000 + b"]" * 60_000, Limits(scan_from=1 << 20))


CUT = """
import autograder.isolation.boundary.kernel_side as agent
agent.Agent.answer = lambda self, tree, buffers: agent.encode({"value": 1, "printed": [["stdout", "p" * 300_000]]})
"""


def test_what_the_student_s_code_prints_in_the_test_cells_is_kept_up_to_a_cap(hostile_link):
    from autograder.isolation.boundary.runner_side import PRINTED_CAP

    Handle(hostile_link, "double")([1])
    run_in_kernel(hostile_link, CUT)
    hostile_link.outputs, hostile_link.printed = [], 0  # as a new notebook starts
    for _ in range(3):
        assert Handle(hostile_link, "double")([1]) == 1
    kept = "".join(o["text"] for o in hostile_link.outputs if o["name"] == "stdout")
    assert kept == "p" * PRINTED_CAP
    assert "kept the first" in hostile_link.outputs[-1]["text"] and len(hostile_link.outputs) == 2  # the note once


LONG_ERROR = """
import autograder.isolation.boundary.kernel_side as agent
agent.Agent.answer = lambda self, tree, buffers: agent.encode({"error": ["ValueError", "e" * 3_000_000]})
"""


def test_an_error_message_is_cut_on_the_runner_s_side(hostile_link):
    from autograder.isolation.boundary.runner_side import ERROR_CHARS

    Handle(hostile_link, "double")([1])
    run_in_kernel(hostile_link, LONG_ERROR)
    with pytest.raises(ValueError) as info:
        Handle(hostile_link, "double")([1])
    assert str(info.value) == "e" * ERROR_CHARS


BIG_PART = """
import autograder.isolation.boundary.kernel_side as agent
agent.reply_frames = lambda number, tree, buffers: [number, b'["dict", []]', b"x" * %d]
"""


@pytest.mark.parametrize("parts, reason", [(1, "larger than"), (3, "carries more than")])
def test_a_reply_with_more_bytes_than_the_limit_is_refused_at_once(hostile_link, parts, reason):
    """One part past the limit: ZeroMQ drops the connection without reading it (the socket's monitor
    says so at once) and the link reads no later answer (the runner interrupts the kernel); parts
    within it that add up past it: refused as they are read, and the next reply is read as usual."""
    from autograder.isolation.boundary.runner_side import ReplyRefused

    limit = 1 << 20
    link = KernelLink(hostile_link.client, timeout=20, limits=Limits(bytes=limit))
    assert Handle(link, "double")([1]) == [2]
    size = limit + 1 if parts == 1 else limit // 2 + 1
    run_in_kernel(link, BIG_PART.replace('b"x" * %d', ", ".join([f'b"x" * {size}'] * parts)))
    started = time.monotonic()
    with pytest.raises(ReplyRefused, match=reason):
        Handle(link, "double")([1])
    assert time.monotonic() - started < 10  # not the call's time limit (20 s)
    if parts == 1:
        assert link.closed and link.serving is not None  # the runner interrupts the kernel (Runner.run)
        with pytest.raises(ReplyRefused, match="no later answer"):
            Handle(link, "double")([1])
        return
    run_in_kernel(link, "agent.reply_frames = lambda number, tree, buffers: [number, json.dumps(tree).encode(), *buffers]\n"
                        "import json")
    assert Handle(link, "double")([1]) == [2]


def test_a_runner_that_died_ends_its_hand_in_as_runner_stopped_with_no_points():
    """The runner's death reaches the grader only as nbgrader's log (RunnerFailed, printed by
    nbgrader): it is told apart from a failure of nbgrader's own and scores 0."""
    import subprocess

    from autograder.isolation.boundary.execute import RUNNER_DIED
    from autograder.handins.status import Run, decide_status, keeps_points
    from autograder.grading.workspace import RunnerStopped, _check_nbgrader

    log = f"[AutogradeApp | ERROR] autograder.isolation.boundary.execute.RunnerFailed: {RUNNER_DIED}\n"
    with pytest.raises(RunnerStopped):
        _check_nbgrader(["autograde"], subprocess.CompletedProcess([], 1, log, ""))
    status = decide_status(Run.RUNNER_STOPPED, [])
    assert status == "runner-stopped" and not keeps_points(status)
