"""utils.synthetic: the adding problem, the copy-memory task and the small adding-problem trainer."""
import math

import pytest
import torch

from utils import synthetic


def test_adding_problem_shapes_markers_and_targets():
    x, y = synthetic.adding_problem(64, 11, torch.Generator().manual_seed(0))
    assert x.shape == (64, 11, 2) and y.shape == (64,)
    assert x.dtype == torch.float32 and y.dtype == torch.float32
    values, markers = x[..., 0], x[..., 1]
    assert ((values >= 0) & (values < 1)).all()
    assert set(markers.unique().tolist()) == {0.0, 1.0}
    assert (markers.sum(dim=1) == 2).all()
    half = 11 // 2
    assert (markers[:, :half].sum(dim=1) == 1).all() and (markers[:, half:].sum(dim=1) == 1).all()
    assert torch.allclose(y, (values * markers).sum(dim=1))


def test_adding_problem_is_deterministic_from_the_generator():
    a = synthetic.adding_problem(8, 20, torch.Generator().manual_seed(3))
    torch.manual_seed(99)  # the global generator must not matter
    b = synthetic.adding_problem(8, 20, torch.Generator().manual_seed(3))
    c = synthetic.adding_problem(8, 20, torch.Generator().manual_seed(4))
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
    assert not torch.equal(a[0], c[0])


def test_adding_baseline_is_the_variance_of_the_target():
    _, y = synthetic.adding_problem(50_000, 4, torch.Generator().manual_seed(1))
    assert synthetic.ADDING_BASELINE_MSE == pytest.approx(1 / 6)
    assert float(((y - 1.0) ** 2).mean()) == pytest.approx(synthetic.ADDING_BASELINE_MSE, abs=3e-3)


def test_adding_problem_rejects_too_short_sequences():
    with pytest.raises(ValueError, match="seq_len"):
        synthetic.adding_problem(2, 1)


def test_copy_memory_layout():
    x, y = synthetic.copy_memory(16, delay=7, num_symbols=5, copy_len=3, generator=torch.Generator().manual_seed(0))
    assert x.shape == y.shape == (16, 3 + 7 + 3) and x.dtype == y.dtype == torch.long
    assert ((x[:, :3] >= 1) & (x[:, :3] <= 5)).all()
    assert (x[:, 3:9] == 0).all() and (x[:, 9] == 6).all() and (x[:, 10:] == 0).all()
    assert (y[:, :10] == 0).all() and torch.equal(y[:, 10:], x[:, :3])


def test_copy_memory_is_deterministic_and_checks_delay():
    a = synthetic.copy_memory(4, 5, generator=torch.Generator().manual_seed(2))
    b = synthetic.copy_memory(4, 5, generator=torch.Generator().manual_seed(2))
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
    with pytest.raises(ValueError, match="delay"):
        synthetic.copy_memory(1, 0)


def test_copy_memory_baseline_is_the_memoryless_cross_entropy():
    delay, k, m = 9, 4, 6
    x, y = synthetic.copy_memory(1, delay, num_symbols=m, copy_len=k)
    probs = torch.zeros(y.shape[1], m + 1)
    probs[: k + delay, 0] = 1.0
    probs[k + delay:, 1:] = 1.0 / m
    nll = -torch.log(probs[torch.arange(y.shape[1]), y[0]]).mean()
    assert synthetic.copy_memory_baseline(delay, m, k) == pytest.approx(float(nll))
    assert synthetic.copy_memory_baseline(delay, m, k) == pytest.approx(k * math.log(m) / (2 * k + delay))


def test_last_state_regressor_sets_the_forget_bias_and_reads_the_last_state():
    torch.manual_seed(0)
    model = synthetic.LastStateRegressor("lstm", 4, forget_bias=2.5)
    bias = model.rnn.bias_ih_l0 + model.rnn.bias_hh_l0
    assert torch.allclose(bias[4:8], torch.full((4,), 2.5))
    x = torch.randn(3, 6, 2)
    out = model(x)
    assert out.shape == (3,)
    x2 = x.clone()
    x2[:, :-1] += 1.0  # earlier steps change the output only through the state
    assert not torch.allclose(model(x2), out)
    with pytest.raises(ValueError):
        synthetic.LastStateRegressor("transformer", 4)


def test_last_state_regressor_gru_sets_the_update_gate_bias():
    torch.manual_seed(0)
    model = synthetic.LastStateRegressor("gru", 4, forget_bias=2.5)
    assert isinstance(model.rnn, torch.nn.GRU)
    bias = model.rnn.bias_ih_l0 + model.rnn.bias_hh_l0
    assert torch.allclose(bias[4:8], torch.full((4,), 2.5))  # r, z, n: the z block
    assert model(torch.randn(3, 6, 2)).shape == (3,)


@pytest.fixture
def one_thread():
    """Tiny models train faster on one thread, above all on a busy shared CPU."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def test_train_adding_is_seeded_and_learns_a_short_problem(one_thread):
    a = synthetic.train_adding("rnn", 5, seed=0, steps=30, hidden_size=8, eval_every=10, num_eval=64)
    b = synthetic.train_adding("rnn", 5, seed=0, steps=30, hidden_size=8, eval_every=10, num_eval=64)
    assert a["steps"] == [0, 10, 20, 30] and a["val_mse"] == b["val_mse"]
    assert a["final_mse"] == pytest.approx(sum(a["val_mse"][-3:]) / 3)
    assert a["val_mse"][-1] < a["val_mse"][0]


def test_train_adding_trains_the_module_model_from_builds(one_thread):
    built = []

    def same_model(regressor):
        built.append(regressor)
        return regressor

    a = synthetic.train_adding("gru", 5, seed=1, steps=20, hidden_size=8, eval_every=10, num_eval=64,
                               model_from=same_model)
    b = synthetic.train_adding("gru", 5, seed=1, steps=20, hidden_size=8, eval_every=10, num_eval=64)
    assert len(built) == 1 and isinstance(built[0], synthetic.LastStateRegressor)
    assert a["val_mse"] == b["val_mse"]


def test_recurrent_tagger_gives_logits_at_every_position():
    torch.manual_seed(0)
    model = synthetic.RecurrentTagger("rnn", vocab_size=6, num_classes=5, hidden_size=8)
    assert model(torch.zeros(3, 7, dtype=torch.long)).shape == (3, 7, 5)
    with pytest.raises(ValueError):
        synthetic.RecurrentTagger("gru", 6, 5, 8)


def test_train_copy_memory_is_seeded_and_reports_the_baseline(one_thread):
    a = synthetic.train_copy_memory("rnn", 2, seed=0, steps=5, hidden_size=8, num_eval=32)
    b = synthetic.train_copy_memory("rnn", 2, seed=0, steps=5, hidden_size=8, num_eval=32)
    assert a["final_ce"] == b["final_ce"] and a["copy_accuracy"] == b["copy_accuracy"]
    assert a["baseline_ce"] == pytest.approx(synthetic.copy_memory_baseline(2, 4, 3))
    assert 0.0 <= a["copy_accuracy"] <= 1.0
