"""utils.conventions: one visible check of the course's conventions, that passes correct
answers written in several ways and names the rule each realistic mistake breaks; the same
through the grader's boundary (the non-contiguous copies made beside the student's code)."""
from __future__ import annotations

import pytest
import torch
import torch.nn as nn

from utils.conventions import RULES, check_conventions, conventions_markdown


def rnn_cell(x, h, W_xh, W_hh, b):
    return torch.tanh(x @ W_xh + h @ W_hh + b)


def rnn_cell_einsum(x, h, W_xh, W_hh, b):
    return torch.tanh(torch.einsum("bd,dh->bh", x, W_xh) + torch.einsum("bk,kh->bh", h, W_hh) + b)


def _example(gen=None):
    gen = gen or torch.Generator().manual_seed(0)
    x, h = torch.randn(3, 4, generator=gen), torch.randn(3, 5, generator=gen)
    W_xh, W_hh, b = (torch.randn(4, 5, generator=gen) * 0.5, torch.randn(5, 5, generator=gen) * 0.5,
                     torch.randn(5, generator=gen))
    return dict(x=x, h=h, W_xh=W_xh, W_hh=W_hh, b=b)


def _check(fn, **options):
    args = _example()
    check_conventions(fn, args, "rnn_cell", batch=("x", "h"), large=dict(x=100 * args["x"]), **options)


def test_the_rules_are_stated_once_and_rendered_as_one_box():
    keys = [rule.key for rule in RULES]
    assert len(keys) == len(set(keys)) and 5 <= len(keys) <= 8
    box = conventions_markdown()
    assert all(rule.title in box and rule.text in box for rule in RULES)


@pytest.mark.parametrize("fn", [rnn_cell, rnn_cell_einsum])
def test_correct_answers_pass(fn):
    _check(fn)


def test_the_check_leaves_the_caller_s_arguments_and_random_state_alone():
    args = _example()
    before = {n: t.clone() for n, t in args.items()}
    state = torch.get_rng_state()
    check_conventions(rnn_cell, args, "rnn_cell", batch=("x", "h"))
    assert all(torch.equal(args[n], before[n]) for n in args)
    assert torch.equal(torch.get_rng_state(), state)


def in_place(x, h, W_xh, W_hh, b):
    h += x @ W_xh
    return torch.tanh(h @ W_hh + b)


def returns_a_view(x, h, W_xh, W_hh, b):
    out = rnn_cell(x, h, W_xh, W_hh, b)
    h.copy_(out)  # "saves memory": the caller's h is overwritten
    return h


def viewed(x, h, W_xh, W_hh, b):
    flat = x.view(-1)
    return torch.tanh(flat.reshape(x.shape) @ W_xh + h @ W_hh + b)


def float32_detour(x, h, W_xh, W_hh, b):
    return torch.tanh((x @ W_xh + h @ W_hh + b).float())


def squeezed(x, h, W_xh, W_hh, b):
    return rnn_cell(x, h, W_xh, W_hh, b).squeeze()


def mixes_the_batch(x, h, W_xh, W_hh, b):
    pre = x @ W_xh + h @ W_hh + b
    return torch.tanh(pre - pre.mean(0, keepdim=True) + b)


def detached_state(x, h, W_xh, W_hh, b):
    return torch.tanh(x @ W_xh + h.detach() @ W_hh + b)


def half_cut(x, h, W_xh, W_hh, b):
    pre = x @ W_xh + h @ W_hh + b
    return torch.tanh(pre.detach()) + (pre - pre.detach()) * 0.5  # the value of tanh, half a slope of 1


def exp_tanh(x, h, W_xh, W_hh, b):
    pre = x @ W_xh + h @ W_hh + b
    return (torch.exp(pre) - torch.exp(-pre)) / (torch.exp(pre) + torch.exp(-pre))


def saturating_sigmoid_form(x, h, W_xh, W_hh, b):
    pre = x @ W_xh + h @ W_hh + b
    return 2 / (1 + torch.exp(-2 * pre)) - 1


def via_numpy(x, h, W_xh, W_hh, b):
    return torch.from_numpy(rnn_cell(x, h, W_xh, W_hh, b).detach().numpy().copy())


@pytest.mark.parametrize("fn, rule, words", [
    (in_place, "unchanged", "argument h"),
    (returns_a_view, "unchanged", "argument h"),
    (viewed, "layout", "non-contiguous"),
    (squeezed, "layout", "example"),
    (mixes_the_batch, "layout", "example 0"),
    (float32_detour, "dtype", "float64"),
    (detached_state, "grad", "h"),
    (half_cut, "grad", "not the true one"),
    (via_numpy, "grad", "no gradient"),
    (exp_tanh, "finite", "NaN"),
    (saturating_sigmoid_form, "finite", "gradient"),
])
def test_each_mistake_fails_with_the_rule_it_breaks(fn, rule, words):
    title = next(r.title for r in RULES if r.key == rule)
    with pytest.raises(AssertionError) as info:
        _check(fn)
    assert f'"{title}"' in str(info.value) and words in str(info.value), str(info.value)


def test_a_rule_the_contract_sets_aside_is_not_tried():
    check_conventions(via_numpy, _example(), "rnn_cell", skip=("grad",))


def test_a_returned_input_shares_memory():
    def identity_when_small(x, h, W_xh, W_hh, b):
        return x if x.abs().max() < 0 else x.clone()  # honest: always a copy

    check_conventions(identity_when_small, _example(), "copy", grad=())

    def returns_x(x, h, W_xh, W_hh, b):
        return x

    with pytest.raises(AssertionError, match="shares its memory with the argument x"):
        check_conventions(returns_x, _example(), "returns_x", grad=())


class Cell(nn.Module):
    def __init__(self, d, h):
        super().__init__()
        self.w_x, self.w_h = nn.Linear(d, h), nn.Linear(h, h, bias=False)

    def forward(self, x, h):
        return torch.tanh(self.w_x(x) + self.w_h(h))


class CellWithDetach(Cell):
    def forward(self, x, h):
        return torch.tanh(self.w_x(x) + self.w_h(h).detach())


def test_a_module_is_checked_in_float32_with_its_own_parameters():
    torch.manual_seed(0)
    args = {k: v for k, v in _example().items() if k in ("x", "h")}
    check_conventions(Cell(4, 5), args, "Cell", batch=("x", "h"), large=dict(x=100 * args["x"]), module=True)
    with pytest.raises(AssertionError, match="Differentiable"):
        check_conventions(CellWithDetach(4, 5), args, "Cell", batch=("x", "h"), module=True)
    with pytest.raises(TypeError, match="module=True"):
        check_conventions(Cell(4, 5), args, "Cell")


def cpu_bias(x, h, W_xh, W_hh, b):
    return torch.tanh(x @ W_xh + h @ W_hh + b + torch.zeros(W_hh.shape[1]))


def cpu_buffer(x, h, W_xh, W_hh, b):
    out = torch.empty(x.shape[0], W_hh.shape[1], dtype=x.dtype)
    out[:] = rnn_cell(x, h, W_xh, W_hh, b)  # a copy between devices, which PyTorch makes silently
    return out


def cpu_count(x, h, W_xh, W_hh, b):
    return rnn_cell(x, h, W_xh, W_hh, b), torch.ones(x.shape[0], dtype=torch.long)


def branches_on_a_value(x, h, W_xh, W_hh, b):
    pre = x @ W_xh + h @ W_hh + b
    return torch.tanh(pre) if bool(torch.isfinite(pre).all()) else torch.zeros_like(pre)


@pytest.mark.parametrize("fn, words", [
    (cpu_bias, "raised RuntimeError"), (cpu_buffer, "found at least two devices"), (cpu_count, "came back on the CPU")])
def test_a_tensor_made_on_the_cpu_fails_the_device_part_on_meta_inputs(fn, words):
    with pytest.raises(AssertionError, match=f'"dtype and device kept".*{words}'):
        _check(fn)
    _check(fn, skip=("device",))


def test_code_that_reads_values_leaves_the_device_part_untried():
    _check(branches_on_a_value)  # .item() has no meaning on meta tensors: not a device mistake


class CellOnTheCpu(Cell):
    def forward(self, x, h):
        return torch.tanh(self.w_x(x) + self.w_h(h) + torch.ones(h.shape[1]))


def test_a_module_runs_on_the_meta_device_as_a_copy():
    torch.manual_seed(0)
    args = {k: v for k, v in _example().items() if k in ("x", "h")}
    cell = Cell(4, 5)
    weight = cell.w_x.weight.detach().clone()
    check_conventions(cell, args, "Cell", batch=("x", "h"), module=True)
    assert cell.w_x.weight.device.type == "cpu" and torch.equal(cell.w_x.weight, weight)
    with pytest.raises(AssertionError, match="dtype and device kept"):
        check_conventions(CellOnTheCpu(4, 5), args, "Cell", module=True)


class CellKeepingItsOutput(CellOnTheCpu):
    def forward(self, x, h):
        self.last = super().forward(x, h)  # a tensor of the graph, which deepcopy refuses
        return self.last


def test_a_module_that_keeps_a_tensor_of_its_graph_is_still_tried_on_the_meta_device():
    """Attention layers keep their last weights: the copy for the meta device must not fail on them
    (it did, and the device part was left untried)."""
    args = {k: v for k, v in _example().items() if k in ("x", "h")}
    with pytest.raises(AssertionError, match="dtype and device kept"):
        check_conventions(CellKeepingItsOutput(4, 5), args, "Cell", module=True)


def test_a_module_given_as_an_argument_goes_to_the_meta_device_with_the_inputs():
    def through(x, model):
        return model(x)

    def through_then_cpu(x, model):
        return model(x) + torch.zeros(2)

    args, layer = dict(x=torch.randn(4, 3)), nn.Linear(3, 2)
    check_conventions(through, args, "through", kwargs=dict(model=layer), grad=("x",), module=True)
    with pytest.raises(AssertionError, match="dtype and device kept"):
        check_conventions(through_then_cpu, args, "through", kwargs=dict(model=layer), grad=("x",), module=True)


def test_default_init_refuses_linear_layers_initialised_otherwise():
    torch.manual_seed(0)
    args = {k: v for k, v in _example().items() if k in ("x", "h")}
    check_conventions(Cell(4, 5), args, "Cell", module=True, default_init=True)
    for init, name in ((nn.init.xavier_uniform_, "w_h.weight"), (nn.init.zeros_, "w_x.bias"), (nn.init.zeros_, "w_h.weight")):
        cell = Cell(4, 5)
        init(cell.get_parameter(name))
        with pytest.raises(AssertionError, match='"Modules own their parameters"'):
            check_conventions(cell, args, "Cell", module=True, default_init=True)


def test_default_init_refuses_weights_drawn_far_narrower_than_pytorchs():
    """A layer of 48 weights drawn from N(0, 0.02) (GPT-2's rule) stays within the bound, but nowhere near it."""
    args = dict(x=torch.randn(3, 8))
    for seed in range(5):
        torch.manual_seed(seed)
        check_conventions(nn.Linear(8, 6), args, "Linear(8, 6)", module=True, default_init=True)
    layer = nn.Linear(8, 6)
    nn.init.normal_(layer.weight, std=0.02)
    with pytest.raises(AssertionError, match='"Modules own their parameters"'):
        check_conventions(layer, args, "Linear(8, 6)", module=True, default_init=True)


def test_draws_from_a_given_generator_are_the_same_in_every_variant():
    def noisy(x, generator):
        return x + torch.randn(x.shape, generator=generator, dtype=x.dtype)

    gen = torch.Generator().manual_seed(3)
    state = gen.get_state()
    check_conventions(noisy, dict(x=torch.randn(3, 2), generator=gen), "noisy", batch=("x",), skip=("layout",))
    assert torch.equal(gen.get_state(), state)


KERNEL_CODE = '''
import torch
from autograder.isolation.boundary.kernel_side import install
install(get_ipython())

def rnn_cell(x, h, W_xh, W_hh, b):
    return torch.tanh(x @ W_xh + h @ W_hh + b)

def flattened(x, h, W_xh, W_hh, b):
    return torch.tanh((x.view(-1).reshape(x.shape) @ W_xh) + h @ W_hh + b)

def keeps_the_state(x, h, W_xh, W_hh, b):
    return h.copy_(torch.tanh(x @ W_xh + h @ W_hh + b))

def gives_back_x(x, h, W_xh, W_hh, b):
    return x[:, :2]

def cpu_bias(x, h, W_xh, W_hh, b):
    return torch.tanh(x @ W_xh + h @ W_hh + b + torch.zeros(W_hh.shape[1]))
'''


@pytest.fixture(scope="module")
def kernel():
    from jupyter_client.manager import start_new_kernel

    from autograder.isolation.boundary.runner_side import Boundary, Handle, KernelLink
    from utils import checks

    km, kc = start_new_kernel(kernel_name="python3")
    try:
        assert kc.execute_interactive(KERNEL_CODE, timeout=120)["content"]["status"] == "ok"
        link = KernelLink(kc, timeout=20)
        checks._boundary = Boundary(link, {})
        yield lambda name: Handle(link, name)
    finally:
        checks._boundary = None
        link.dropped.close()
        link.socket.close()
        kc.stop_channels()
        km.shutdown_kernel(now=True)


@pytest.mark.slow
def test_through_the_boundary_the_strided_copies_the_memory_and_the_device_tests_are_made_beside_the_code(kernel):
    args = _example()
    check_conventions(kernel("rnn_cell"), args, "rnn_cell", batch=("x", "h"), large=dict(x=100 * args["x"]))
    with pytest.raises(AssertionError, match='"Any layout, any batch".*raised RuntimeError'):
        check_conventions(kernel("flattened"), _example(), "flattened")
    with pytest.raises(AssertionError, match='"Inputs stay as they were".*argument h'):
        check_conventions(kernel("keeps_the_state"), _example(), "keeps_the_state")
    with pytest.raises(AssertionError, match="shares its memory with the argument x"):
        check_conventions(kernel("gives_back_x"), _example(), "gives_back_x", grad=())
    with pytest.raises(AssertionError, match='"dtype and device kept"'):
        check_conventions(kernel("cpu_bias"), _example(), "cpu_bias")
