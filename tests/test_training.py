"""utils.training: the shared loop (resume, clipping, history, precision choice, plots)."""
import functools
import math
import os
from pathlib import Path

import matplotlib
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

matplotlib.use("Agg")

from utils import training  # noqa: E402
from utils.training import History, TrainConfig, choose_precision  # noqa: E402

V, T = 11, 8


class TinyLM(nn.Module):
    """Embedding → dropout → linear: small, but with dropout so that resuming must restore the RNG."""

    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(V, 16)
        self.drop = nn.Dropout(0.3)
        self.out = nn.Linear(16, V)

    def forward(self, x):
        return self.out(self.drop(self.emb(x)))


DATA = torch.randint(0, V, (400,), generator=torch.Generator().manual_seed(0))


def get_batch(split, generator):
    data = DATA[:300] if split == "train" else DATA[300:]
    starts = torch.randint(0, len(data) - T - 1, (4,), generator=generator)
    x = torch.stack([data[s:s + T] for s in starts.tolist()])
    y = torch.stack([data[s + 1:s + T + 1] for s in starts.tolist()])
    return x, y


def loss_fn(model, batch):
    x, y = batch
    return F.cross_entropy(model(x).flatten(0, 1), y.flatten())


def reference_step(model, batch, loss_fn, optimizer, scaler, precision, grad_clip):
    """The optimizer step these tests train with (the course ships none: notebook 07's students write it)."""
    with training.autocast(next(model.parameters()).device, precision):
        loss = loss_fn(model, batch)
    optimizer.zero_grad(set_to_none=True)
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    norm = torch.nn.utils.clip_grad_norm_([p for p in model.parameters() if p.grad is not None],
                                          grad_clip if grad_clip else math.inf)
    scaler.step(optimizer)
    scaler.update()
    return loss.item(), float(norm)


def reference_save(path, model, optimizer, scaler, step, history, generator, fingerprint):
    """The checkpoint these tests train with (the course ships none: notebook 07's students write it)."""
    state = {"model": model.state_dict(), "optimizer": optimizer.state_dict(), "scaler": scaler.state_dict(),
             "step": step, "history": history.state_dict(), "rng": training.rng_state(generator),
             "fingerprint": fingerprint}
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    torch.save(state, f"{path}.part")
    os.replace(f"{path}.part", path)


def reference_load(path, model, optimizer, scaler, generator, fingerprint):
    state = torch.load(path, map_location="cpu", weights_only=False)
    differences = training.fingerprint_differences(state["fingerprint"], fingerprint)
    if differences:
        raise training.CheckpointMismatch(f"{path} belongs to another run ({'; '.join(differences)}): "
                                          "delete it, or train with resume=False")
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    scaler.load_state_dict(state["scaler"])
    training.set_rng_state(state["rng"], generator)
    return state["step"], History.from_state_dict(state["history"])


def train(*args, step_fn=reference_step, save_fn=reference_save, load_fn=reference_load, **kwargs):
    return training.train(*args, step_fn=step_fn, save_fn=save_fn, load_fn=load_fn, **kwargs)


def fresh(seed=0):
    torch.manual_seed(seed)
    model = TinyLM()
    return model, torch.optim.AdamW(model.parameters(), lr=1e-2)


def config(**overrides):
    values = dict(max_steps=20, eval_every=5, eval_batches=2, grad_clip=1.0, progress=False)
    values.update(overrides)
    return TrainConfig(**values)


def schedule(step):
    return 1e-2 * (step + 1) / 20


def test_history_records_every_step_and_every_evaluation():
    model, opt = fresh()
    history = train(model, opt, get_batch, loss_fn, config(), lr_schedule=schedule)
    assert history.steps == list(range(1, 21))
    assert len(history.train_loss) == len(history.lr) == len(history.grad_norm) == 20
    assert history.lr == [schedule(s) for s in range(20)]
    assert history.eval_steps == [0, 5, 10, 15, 20]
    assert len(history.eval_val_loss) == len(history.eval_train_loss) == len(history.eval_time) == 5
    assert history.eval_time == sorted(history.eval_time) and history.eval_time[0] == 0.0
    assert history.tokens_per_s > 0 and history.train_time > 0
    # at step 0 the model is untrained: its loss is close to log V
    assert abs(history.eval_val_loss[0] - math.log(V)) < 0.5
    assert history.eval_train_loss[-1] < history.eval_train_loss[0]
    assert history.best_val_loss == min(history.eval_val_loss)
    assert History.from_state_dict(history.state_dict()) == history


def test_evaluation_uses_the_same_batches_and_restores_train_mode():
    model, _ = fresh()
    model.train()
    a = training.evaluate(model, get_batch, loss_fn, 3, "cpu")
    b = training.evaluate(model, get_batch, loss_fn, 3, "cpu")
    assert a == b and model.training  # eval mode inside (no dropout noise), train mode after


def test_resume_after_an_interruption_equals_uninterrupted_training(tmp_path):
    model, opt = fresh()
    reference = train(model, opt, get_batch, loss_fn, config(), lr_schedule=schedule)
    expected = {k: v.clone() for k, v in model.state_dict().items()}

    # The same run, cut off (an exception, as when Colab disconnects) after step 13;
    # the last checkpoint is the one written at step 10.
    path = tmp_path / "ckpt" / "run.pt"
    asked = []

    def flaky_schedule(step):  # read once for the run's fingerprint, then once per step, before the step
        asked.append(step)
        if step == 13 and asked.count(13) == 2:
            raise KeyboardInterrupt("session cut off")
        return schedule(step)

    model, opt = fresh()
    with pytest.raises(KeyboardInterrupt):
        train(model, opt, get_batch, loss_fn, config(checkpoint_path=str(path)), lr_schedule=flaky_schedule)
    assert torch.load(path, weights_only=False)["step"] == 10
    # the last and the best checkpoint, no temporary file left behind
    assert sorted(p.name for p in path.parent.iterdir()) == ["run.best.pt", "run.pt"]

    # A new session: fresh objects, other random state; resume from the checkpoint.
    torch.manual_seed(999)
    model, opt = fresh(seed=5)
    resumed = train(model, opt, get_batch, loss_fn, config(checkpoint_path=str(path)), lr_schedule=schedule)
    for name, value in model.state_dict().items():
        assert torch.equal(value, expected[name]), name
    assert resumed.steps == reference.steps
    assert resumed.train_loss == reference.train_loss
    assert resumed.eval_steps == reference.eval_steps
    assert resumed.eval_val_loss == reference.eval_val_loss


def test_the_fingerprint_tells_runs_apart_by_what_they_compute():
    """A dropout's rate, the schedule (its peak, and its length through max_steps), the data, the optimizer's
    settings and the loop's settings each change the fingerprint, and are named; evaluation, progress and
    where checkpoints go do not."""
    def fingerprint(dropout=0.3, peak=1e-2, batches=get_batch, betas=(0.9, 0.999), **settings):
        model, _ = fresh()
        model.drop.p = dropout
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2, betas=betas)
        return training.run_fingerprint(model, optimizer, config(**settings), loss_fn, reference_step,
                                        lr_schedule=lambda s: peak * (s + 1) / 20, get_batch=batches)

    def other_data(split, generator):
        x, y = get_batch(split, generator)
        return (x + 1) % V, y

    base = fingerprint()
    assert training.fingerprint_differences(base, fingerprint()) == []
    assert training.fingerprint_differences(base, fingerprint(eval_every=7, progress=True, checkpoint_path="x.pt")) == []
    changed = {"modules": fingerprint(dropout=0.1), "schedule": fingerprint(peak=5e-3),
               "data": fingerprint(batches=other_data), "optimizer": fingerprint(betas=(0.9, 0.99)),
               "settings": fingerprint(grad_clip=0.5)}
    for part, other in changed.items():
        differences = training.fingerprint_differences(base, other)
        assert len(differences) == 1 and differences[0].startswith({"modules": "the model's settings",
            "schedule": "the learning-rate schedule", "data": "the training data", "optimizer": "the optimizer",
            "settings": "the training settings"}[part]), (part, differences)
    # max_steps counts where the schedule depends on it (a cosine decay over the run), and only there
    model, opt = fresh()

    def cosine(max_steps):
        return training.run_fingerprint(model, opt, config(max_steps=max_steps),
                                        lr_schedule=lambda s: 0.5 * (1 + math.cos(math.pi * min(s, max_steps) / max_steps)))

    assert training.fingerprint_differences(cosine(1000), cosine(300)) == [
        "the learning-rate schedule (its peak, warm-up, floor or length: max_steps counts)"]
    assert training.fingerprint_differences(base, fingerprint(max_steps=40)) == []


def test_a_step_with_arguments_fixed_is_fingerprinted_by_its_own_code():
    """A step handed to train as functools.partial (07's accumulated_step with its micro-batches) counts by the
    code of the function it fixes arguments of: a fixed bug in it changes the fingerprint."""
    def step_one(model, batch, loss_fn, optimizer, scaler, precision, grad_clip, micro_batches=1):
        return reference_step(model, batch, loss_fn, optimizer, scaler, precision, grad_clip)

    def step_two(model, batch, loss_fn, optimizer, scaler, precision, grad_clip, micro_batches=1):
        return reference_step(model, batch, loss_fn, optimizer, scaler, precision, 2 * grad_clip)

    model, opt = fresh()

    def fingerprint(step):
        return training.run_fingerprint(model, opt, config(), loss_fn, step)

    base = fingerprint(functools.partial(step_one, micro_batches=2))
    assert training.fingerprint_differences(base, fingerprint(functools.partial(step_one, micro_batches=2))) == []
    assert training.fingerprint_differences(base, fingerprint(functools.partial(step_two, micro_batches=2))) != []


def test_a_finished_run_is_not_trained_again(tmp_path):
    path = tmp_path / "done.pt"
    model, opt = fresh()
    first = train(model, opt, get_batch, loss_fn, config(checkpoint_path=str(path)))
    model2, opt2 = fresh(seed=3)
    second = train(model2, opt2, get_batch, loss_fn, config(checkpoint_path=str(path)))
    assert second.steps == first.steps and second.eval_steps == first.eval_steps
    for a, b in zip(model.parameters(), model2.parameters()):
        assert torch.equal(a, b)


def test_gradient_clipping_bounds_the_update_and_records_the_unclipped_norm():
    torch.manual_seed(0)
    model = nn.Linear(3, 1)
    before = [p.detach().clone() for p in model.parameters()]
    opt = torch.optim.SGD(model.parameters(), lr=1.0)
    x = torch.full((2, 3), 10.0)

    def big_loss(m, batch):
        return (m(batch[0]) ** 2).mean() * 100  # a gradient norm in the thousands

    history = train(model, opt, lambda split, g: (x,), big_loss, config(max_steps=1, eval_every=0, grad_clip=0.5))
    update = torch.cat([(p.detach() - b).flatten() for p, b in zip(model.parameters(), before)])
    assert history.grad_norm[0] > 100
    assert update.norm().item() == pytest.approx(0.5, rel=1e-5)  # SGD, lr 1: the step is the clipped gradient

    torch.manual_seed(0)
    unclipped = nn.Linear(3, 1)
    opt = torch.optim.SGD(unclipped.parameters(), lr=1.0)
    history = train(unclipped, opt, lambda split, g: (x,), big_loss, config(max_steps=1, eval_every=0, grad_clip=None))
    update = torch.cat([(p.detach() - b).flatten() for p, b in zip(unclipped.parameters(), before)])
    assert update.norm().item() == pytest.approx(history.grad_norm[0], rel=1e-5)


@pytest.mark.parametrize(
    "device_type, bf16, requested, expected",
    [
        ("cuda", True, "auto", "bf16"),   # A100, H100, L4
        ("cuda", False, "auto", "fp16"),  # a Colab T4
        ("cpu", False, "auto", "fp32"),
        ("mps", False, "auto", "fp32"),
        ("cuda", True, "fp32", "fp32"),
        ("cpu", False, "bf16", "bf16"),
    ],
)
def test_precision_follows_the_device(device_type, bf16, requested, expected):
    assert choose_precision(device_type, bf16, requested) == expected


def test_precision_rejects_fp16_off_cuda_and_unknown_names():
    with pytest.raises(ValueError, match="CUDA"):
        choose_precision("cpu", False, "fp16")
    with pytest.raises(ValueError, match="precision must be"):
        choose_precision("cuda", True, "fp8")


def test_scaler_is_enabled_only_for_fp16_and_autocast_only_below_fp32():
    assert not training.make_scaler("cpu", "fp32").is_enabled()
    assert not training.make_scaler("cpu", "bf16").is_enabled()
    with training.autocast("cpu", "bf16"):
        assert (torch.ones(2, 2) @ torch.ones(2, 2)).dtype == torch.bfloat16
    with training.autocast("cpu", "fp32"):
        assert (torch.ones(2, 2) @ torch.ones(2, 2)).dtype == torch.float32


def test_bf16_autocast_trains_on_the_cpu():
    model, opt = fresh()
    history = train(model, opt, get_batch, loss_fn, config(precision="bf16", max_steps=5, eval_every=5))
    assert all(math.isfinite(v) for v in history.train_loss)
    assert next(model.parameters()).dtype == torch.float32  # weights stay fp32; only the compute is bf16


def test_a_checkpoint_path_needs_the_save_and_load_functions(tmp_path):
    with pytest.raises(TypeError, match="save_fn=save_checkpoint"):
        training.train(*fresh(), get_batch, loss_fn, config(checkpoint_path=str(tmp_path / "c.pt")),
                       step_fn=reference_step)


def test_unwrap_returns_the_module_behind_a_compile_wrapper():
    model = nn.Linear(2, 2)
    wrapper = nn.Module()
    wrapper._orig_mod = model
    assert training.unwrap(wrapper) is model and training.unwrap(model) is model


def test_plot_history_draws_curves_against_steps_and_time():
    import matplotlib.pyplot as plt

    model, opt = fresh()
    history = train(model, opt, get_batch, loss_fn, config(max_steps=10))
    ax = training.plot_history(history)
    assert len(ax.lines) == 3 and ax.get_xlabel() == "optimizer step"
    ax = training.plot_history(history, x="time")
    assert len(ax.lines) == 2 and list(ax.lines[1].get_xdata()) == history.eval_time
    with pytest.raises(ValueError):
        training.plot_history(history, x="epoch")
    plt.close("all")


def fake_cuda(monkeypatch, capability):
    """torch.cuda answering as on a GPU of this compute capability (no GPU needed). Like the real
    is_bf16_supported, the fake counts emulation by default: True on every CUDA GPU."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: capability)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported",
                        lambda including_emulation=True: including_emulation or capability >= (8, 0))


@pytest.mark.parametrize("capability, expected", [
    ((7, 5), "fp16"),  # a Colab T4: bfloat16 only emulated
    ((7, 0), "fp16"),  # a V100
    ((8, 0), "bf16"),  # an A100
    ((8, 9), "bf16"),  # an L4
    ((9, 0), "bf16"),  # an H100
])
def test_auto_precision_follows_the_compute_capability(monkeypatch, capability, expected):
    fake_cuda(monkeypatch, capability)
    assert training.device_precision(torch.device("cuda")) == expected
    assert training.device_precision("cuda", "fp32") == "fp32"
    assert training.make_scaler("cuda", expected).is_enabled() == (expected == "fp16")


def test_without_cuda_the_device_is_the_cpu_and_the_precision_fp32(monkeypatch):
    from utils.runtime import get_device

    def no_gpu(device=None):
        raise AssertionError("asked a GPU's capability without CUDA")

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.cuda, "get_device_capability", no_gpu)
    monkeypatch.delenv("COURSE_DEVICE", raising=False)
    device = get_device()
    assert training.device_precision(device) == "fp32"
    assert not training.make_scaler(device, "fp32").is_enabled()


def test_an_fp16_step_whose_gradients_overflow_is_skipped(monkeypatch):
    """A T4's path (fp16 autocast and a GradScaler), run on the CPU: the step whose gradients are
    inf leaves the weights and the optimizer as they were, and training goes on."""
    monkeypatch.setattr(training, "device_precision", lambda device, requested="auto": "fp16")
    clean = [get_batch("train", torch.Generator().manual_seed(s)) for s in range(2)]

    def run(batches):
        torch.manual_seed(0)
        model = nn.Sequential(nn.Embedding(V, 16), nn.Linear(16, V))  # no dropout: both runs draw alike
        start = [p.detach().clone() for p in model.parameters()]
        feed = iter(batches)

        def poisoned_loss(m, batch):
            x, y, poison = batch
            loss = loss_fn(m, (x, y))
            return loss * math.inf if poison else loss

        opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
        history = train(model, opt, lambda split, g: next(feed), poisoned_loss,
                        config(max_steps=len(batches), eval_every=0))
        return model, start, history

    skipped, start, history = run([(*clean[0], False), (*clean[0], True), (*clean[1], False)])
    plain, _, _ = run([(*clean[0], False), (*clean[1], False)])
    assert not math.isfinite(history.grad_norm[1]) and all(math.isfinite(g) for g in history.grad_norm[::2])
    for got, want, before in zip(skipped.parameters(), plain.parameters(), start):
        assert torch.equal(got, want)
        assert not torch.equal(got, before)  # the other two steps did update


def test_resuming_past_a_lowered_max_steps_stops_at_once(tmp_path, capsys):
    """A checkpoint at step 10, resumed with max_steps 6: no step is taken, the history is the
    checkpoint's and the run says why (it used to train on forever: `step == max_steps` never held)."""
    path = tmp_path / "run.pt"
    model, opt = fresh()
    before = train(model, opt, get_batch, loss_fn, config(max_steps=10, checkpoint_path=str(path)), lr_schedule=schedule)
    weights = {k: v.clone() for k, v in model.state_dict().items()}
    capsys.readouterr()
    model, opt = fresh(seed=3)
    after = train(model, opt, get_batch, loss_fn, config(max_steps=6, checkpoint_path=str(path)), lr_schedule=schedule)
    assert after.steps == before.steps and after.eval_steps == before.eval_steps
    assert all(torch.equal(v, weights[k]) for k, v in model.state_dict().items())
    assert torch.load(path, weights_only=False)["step"] == 10
    assert "nothing to train" in capsys.readouterr().out


class TinyLMFixed(TinyLM):
    """TinyLM after a bug fix: the same parameters, other code."""

    def forward(self, x):
        return self.out(self.drop(self.emb(x)) * 2)


def test_a_checkpoint_of_another_run_is_refused_with_how_to_start_fresh(tmp_path):
    path = tmp_path / "run.pt"
    train(*fresh(), get_batch, loss_fn, config(max_steps=5, checkpoint_path=str(path)))
    written = path.read_bytes()
    torch.manual_seed(0)
    fixed, same = TinyLMFixed(), TinyLM()
    others = {
        "the code of the model's classes": (fixed, torch.optim.AdamW(fixed.parameters(), lr=1e-2)),
        "the model's parameters": (nn.Sequential(nn.Embedding(V, 8), nn.Linear(8, V)), None),
        "the optimizer or its parameter groups": (same, torch.optim.AdamW([{"params": [p]} for p in same.parameters()])),
    }
    for what, (model, opt) in others.items():
        opt = opt or torch.optim.AdamW(model.parameters(), lr=1e-2)
        with pytest.raises(training.CheckpointMismatch, match="another run") as refused:
            train(model, opt, get_batch, loss_fn, config(max_steps=8, checkpoint_path=str(path)))
        assert what in str(refused.value) and "resume=False" in str(refused.value) and "delete" in str(refused.value)
        assert path.read_bytes() == written  # nothing overwritten
    with pytest.raises(training.CheckpointMismatch, match="training settings"):
        train(*fresh(), get_batch, loss_fn, config(max_steps=8, grad_clip=0.5, checkpoint_path=str(path)))
    # Starting fresh on purpose: the fixed model trains from step 0 and its checkpoint replaces the old one.
    model = TinyLMFixed()
    history = train(model, torch.optim.AdamW(model.parameters(), lr=1e-2), get_batch, loss_fn,
                    config(max_steps=5, checkpoint_path=str(path), resume=False))
    assert history.steps == [1, 2, 3, 4, 5] and path.read_bytes() != written
    # Raising max_steps is not another run: it resumes.
    more = train(model, torch.optim.AdamW(model.parameters(), lr=1e-2), get_batch, loss_fn,
                 config(max_steps=8, checkpoint_path=str(path)))
    assert more.steps == list(range(1, 9))


def test_the_best_checkpoint_holds_the_weights_of_the_lowest_validation_loss(tmp_path):
    path = tmp_path / "run.pt"
    model, opt = fresh()
    history = train(model, opt, get_batch, loss_fn, config(max_steps=20, eval_every=5, checkpoint_path=str(path)))
    best = torch.load(training.best_checkpoint_path(path), weights_only=False)
    assert best["step"] == history.best_step == history.eval_steps[history.eval_val_loss.index(history.best_val_loss)]
    replay, replay_opt = fresh()
    train(replay, replay_opt, get_batch, loss_fn, config(max_steps=history.best_step))
    for name, value in replay.state_dict().items():
        assert torch.equal(best["model"][name], value), name


def test_the_loop_needs_a_step_function():
    with pytest.raises(TypeError, match="step_fn"):
        training.train(*fresh(), get_batch, loss_fn, config(max_steps=1))


def test_a_step_function_of_ones_own_does_each_step():
    calls = []

    def my_step(model, batch, loss_fn, optimizer, scaler, precision, grad_clip):
        calls.append((precision, grad_clip))
        return reference_step(model, batch, loss_fn, optimizer, scaler, precision, grad_clip)

    mine = train(*fresh(), get_batch, loss_fn, config(max_steps=6), step_fn=my_step)
    builtin = train(*fresh(), get_batch, loss_fn, config(max_steps=6))
    assert calls == [("fp32", 1.0)] * 6 and mine.train_loss == builtin.train_loss


def test_compiled_training_equals_eager_training_and_saves_plain_names(tmp_path, monkeypatch):
    """TrainConfig(compile=True) with Dynamo's eager backend standing in for a GPU's Inductor."""
    import functools

    eager = train(*fresh(), get_batch, loss_fn, config(max_steps=6, eval_every=3))
    monkeypatch.setattr(torch, "compile", functools.partial(torch.compile, backend="eager"))
    path = tmp_path / "compiled.pt"
    model, opt = fresh()
    compiled = train(model, opt, get_batch, loss_fn, config(max_steps=6, eval_every=3, compile=True,
                                                            checkpoint_path=str(path)))
    assert compiled.train_loss == pytest.approx(eager.train_loss, rel=1e-5)
    assert compiled.eval_val_loss == pytest.approx(eager.eval_val_loss, rel=1e-5)
    assert set(torch.load(path, weights_only=False)["model"]) == set(model.state_dict())


def test_peak_flops_names_known_gpus_and_nothing_else(monkeypatch):
    assert training.peak_flops("cpu") is None
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    for name, peak in [("NVIDIA H100 80GB HBM3", 989e12), ("NVIDIA H100 PCIe", 756e12), ("Tesla T4", 65e12),
                       ("NVIDIA A100-SXM4-40GB", 312e12), ("NVIDIA L4", 121e12), ("NVIDIA L40S", 362e12), ("NVIDIA GeForce RTX 4090", None)]:
        monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None, name=name: name)
        assert training.peak_flops(torch.device("cuda", 0)) == peak, name


def test_training_stops_at_the_first_evaluation_that_reaches_the_target():
    full = train(*fresh(), get_batch, loss_fn, config(max_steps=20, eval_every=5))
    target = full.eval_val_loss[2]  # reached at step 10 (or earlier, if an earlier evaluation was as low)
    first = next(step for step, loss in zip(full.eval_steps, full.eval_val_loss) if loss <= target)
    stopped = train(*fresh(), get_batch, loss_fn, config(max_steps=20, eval_every=5, stop_at_val_loss=target))
    assert stopped.eval_steps[-1] == first == stopped.steps[-1] and stopped.eval_val_loss[-1] <= target
    assert stopped.train_loss == full.train_loss[:first]
