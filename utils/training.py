"""The training loop shared by the course's notebooks (nanoGPT-style, plain config values).

    config = TrainConfig(max_steps=2000, eval_every=250, grad_clip=1.0,
                         checkpoint_path="ckpt/gpt.pt")
    history = train(model, optimizer, get_batch, loss_fn, config, lr_schedule=schedule, step_fn=train_step)
    plot_history(history)

What the loop does for you:
  - a tqdm progress bar showing the loss, tokens per second and the learning rate;
  - an evaluation of the mean loss on both splits every `eval_every` steps, on the same
    `eval_batches` batches each time (a fixed generator), so the curve is comparable;
  - the gradient norm that step_fn returns (before clipping) recorded at every step;
  - mixed precision chosen from the device, handed to step_fn with a gradient scaler: bf16 on a
    GPU that computes in it natively (compute capability 8.0 or newer), fp16 with an enabled
    scaler on older GPUs (a Colab T4), plain fp32 on the CPU;
  - optional `torch.compile`;
  - checkpoints at every evaluation, through the save and load functions you pass (notebook 07's
    save_checkpoint and load_checkpoint, which students write: this module has none of its own),
    so that a Colab session that was cut off resumes where it stopped. The loop hands them what a
    run is (model, optimizer, scaler, step, history, the batches' generator) and the run's
    fingerprint (`run_fingerprint`: the parameters' names and shapes, every module's settings, the
    code of the model's classes and of the loss and step functions, the optimizer's groups, the
    schedule's learning rates, the first training batch and the settings that change the result),
    so that a checkpoint of another run can be refused (`CheckpointMismatch`,
    `fingerprint_differences`) instead of training on, or sampling from, stale weights;
  - the best checkpoint kept beside the last one (`best_checkpoint_path`): the weights of the
    evaluation with the lowest validation loss.

Your code supplies three functions, and two more with a checkpoint path:
  get_batch(split, generator) -> batch   split is "train" or "val"; draw random numbers
                                         only from `generator` (the loop saves its state)
  loss_fn(model, batch) -> scalar loss   the mean loss of the batch
  step_fn(model, batch, loss_fn, optimizer, scaler, precision, grad_clip) -> (loss, grad_norm)
                                         one optimizer step: notebook 07's train_step, which
                                         students write (this module has none of its own); the
                                         loop sets the learning rate before calling it
  save_fn(path, model, optimizer, scaler, step, history, generator, fingerprint)
  load_fn(path, model, optimizer, scaler, generator, fingerprint) -> (step, history)
                                         notebook 07's save_checkpoint and load_checkpoint
Tokens per second count `batch[0].numel()` tokens per step (the inputs), or
`config.tokens_per_batch` when that is set.
"""
from __future__ import annotations

import contextlib
import functools
import hashlib
import math
import random
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

import torch

__all__ = [
    "TrainConfig", "History", "choose_precision", "native_bf16", "device_precision", "autocast", "make_scaler",
    "unwrap", "rng_state", "set_rng_state", "CheckpointMismatch", "run_fingerprint", "fingerprint_differences",
    "best_checkpoint_path", "count_tokens",
    "evaluate", "train", "plot_history", "PEAK_FLOPS", "peak_flops",
]


PRECISIONS = ("bf16", "fp16", "fp32")


# --------------------------------------------------------------------------- configuration
@dataclass
class TrainConfig:
    """Plain values that define a training run (like nanoGPT's config files)."""

    max_steps: int = 1000          # optimizer steps in total (a resumed run continues up to here)
    eval_every: int = 100          # evaluate every N steps (and at step 0 and at the end); 0: never
    eval_batches: int = 20         # batches per split and evaluation
    grad_clip: float | None = 1.0  # clip the total gradient norm to this; None or 0: no clipping
    precision: str = "auto"        # "auto", "bf16", "fp16" or "fp32" (see choose_precision)
    compile: bool = False          # torch.compile the model (PyTorch 2, a GPU and a compiler)
    checkpoint_path: str | None = None  # where checkpoints go; None: no checkpoints
    checkpoint_every: int | None = None  # default: at every evaluation
    resume: bool = True            # continue from checkpoint_path if it exists (and was written by this run)
    seed: int = 0                  # seeds the generator passed to get_batch("train", ...)
    eval_seed: int = 1234          # seeds the evaluation batches (the same ones every time)
    tokens_per_batch: int | None = None  # override the token count used for tokens/s
    progress: bool = True          # show the tqdm progress bar
    stop_at_val_loss: float | None = None  # stop after the first evaluation at or below this validation loss


@dataclass
class History:
    """What happened during training. Per step: `steps`, `train_loss`, `lr`, `grad_norm`;
    per evaluation: `eval_steps`, `eval_train_loss`, `eval_val_loss`, `eval_time` (seconds
    of training wall time so far, resumed sessions added up); `tokens_per_s` of the last run."""

    steps: list[int] = field(default_factory=list)
    train_loss: list[float] = field(default_factory=list)
    lr: list[float] = field(default_factory=list)
    grad_norm: list[float] = field(default_factory=list)
    eval_steps: list[int] = field(default_factory=list)
    eval_train_loss: list[float] = field(default_factory=list)
    eval_val_loss: list[float] = field(default_factory=list)
    eval_time: list[float] = field(default_factory=list)
    train_time: float = 0.0
    tokens_per_s: float = 0.0

    def state_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_state_dict(cls, state: dict) -> "History":
        return cls(**state)

    @property
    def best_val_loss(self) -> float:
        return min(self.eval_val_loss) if self.eval_val_loss else math.nan

    @property
    def best_step(self) -> int | None:
        """The step of the evaluation with the lowest validation loss (the first, on a tie)."""
        if not self.eval_val_loss:
            return None
        return self.eval_steps[self.eval_val_loss.index(min(self.eval_val_loss))]


# --------------------------------------------------------------------------- mixed precision
def choose_precision(device_type: str, bf16_supported: bool = False, requested: str = "auto") -> str:
    """The number format to train in, as a pure function of the device's capability.

    "auto": "bf16" on a CUDA GPU that supports bfloat16 (Ampere and newer: A100, H100, L4),
    "fp16" on an older CUDA GPU (a Colab T4, V100), "fp32" everywhere else (CPU, Apple MPS).
    An explicit request is honoured, except fp16 off CUDA (no gradient scaler there), which
    raises a ValueError.
    """
    if requested not in ("auto",) + PRECISIONS:
        raise ValueError(f"precision must be 'auto', 'bf16', 'fp16' or 'fp32', got {requested!r}")
    if requested == "auto":
        if device_type == "cuda":
            return "bf16" if bf16_supported else "fp16"
        return "fp32"
    if requested == "fp16" and device_type != "cuda":
        raise ValueError("fp16 training needs a CUDA GPU (and a gradient scaler); use bf16 or fp32")
    return requested


def native_bf16(device: torch.device) -> bool:
    """True on a CUDA GPU whose tensor cores compute in bfloat16: compute capability 8.0 or newer
    (A100, L4, H100). A Colab T4 (7.5) only emulates bfloat16, slowly, although
    torch.cuda.is_bf16_supported() answers True there (it counts emulation by default)."""
    device = torch.device(device)
    return device.type == "cuda" and torch.cuda.is_available() and torch.cuda.get_device_capability(device) >= (8, 0)


def device_precision(device: torch.device, requested: str = "auto") -> str:
    """choose_precision for an actual device (bfloat16 only where native_bf16)."""
    device = torch.device(device)
    return choose_precision(device.type, native_bf16(device), requested)


def autocast(device: torch.device, precision: str):
    """A context manager that runs the forward pass in `precision` (nothing for fp32)."""
    if precision == "fp32":
        return contextlib.nullcontext()
    dtype = torch.bfloat16 if precision == "bf16" else torch.float16
    return torch.autocast(device_type=torch.device(device).type, dtype=dtype)


def make_scaler(device: torch.device, precision: str) -> torch.amp.GradScaler:
    """A gradient scaler, enabled only for fp16 (whose small range underflows gradients)."""
    device_type = torch.device(device).type
    return torch.amp.GradScaler(device_type if device_type == "cuda" else "cpu", enabled=precision == "fp16")


# --------------------------------------------------------------------------- checkpoints
def unwrap(model: torch.nn.Module) -> torch.nn.Module:
    """The original module behind a torch.compile wrapper (its state_dict has plain names)."""
    return getattr(model, "_orig_mod", model)


def rng_state(generator: torch.Generator | None = None) -> dict:
    """Every random generator the run depends on: Python, NumPy, torch (CPU, CUDA), `generator`."""
    import numpy as np

    state = {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    if generator is not None:
        state["generator"] = generator.get_state()
    return state


def set_rng_state(state: dict, generator: torch.Generator | None = None) -> None:
    import numpy as np

    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])
    if generator is not None and "generator" in state:
        generator.set_state(state["generator"])


class CheckpointMismatch(RuntimeError):
    """A checkpoint that another run wrote: another model, code, optimizer or setting."""


# Settings that change what training computes; the others (max_steps, evaluation, progress, where the
# checkpoint goes) may change between sessions of one run: max_steps reaches the fingerprint only where
# the schedule depends on it, through the learning rates run_fingerprint reads from it.
_FINGERPRINTED_SETTINGS = ("grad_clip", "precision", "seed", "tokens_per_batch")
# The steps at which the schedule is read: every one of the first 16, then about 20% apart up to ~750,000.
_SCHEDULE_STEPS = sorted(set(range(16)) | {int(16 * 1.2 ** k) for k in range(60)})


def _module_settings(model) -> dict:
    """Each module's plain settings (its extra_repr and its plain attributes: a dropout's p, a norm's eps,
    the sizes a module keeps), by module name."""
    settings = {}
    for name, module in model.named_modules():
        plain = {k: repr(v) for k, v in sorted(vars(module).items())
                 if not k.startswith("_") and k != "training" and isinstance(v, (bool, int, float, str, tuple))}
        settings[name or "(model)"] = [type(module).__qualname__, module.extra_repr(), plain]
    return settings


def _schedule_samples(lr_schedule) -> list[str] | None:
    """The schedule's learning rates at _SCHEDULE_STEPS (its warm-up, peak and decay: a changed max_lr,
    min_lr, warm-up or length shows)."""
    if lr_schedule is None:
        return None
    return [repr(float(lr_schedule(step))) for step in _SCHEDULE_STEPS]


def _data_digest(get_batch, seed: int) -> str:
    """A digest of the first training batch drawn from a generator seeded like the run's (another dataset,
    batch size or block size shows); the run's own generator is not touched."""
    batch = get_batch("train", torch.Generator().manual_seed(seed))
    digest = hashlib.sha256()
    for tensor in (batch if isinstance(batch, (tuple, list)) else [batch]):
        if isinstance(tensor, torch.Tensor):
            tensor = tensor.detach().cpu().contiguous()
            digest.update(repr((str(tensor.dtype), tuple(tensor.shape))).encode())
            digest.update(tensor.view(-1).view(torch.uint8).numpy().tobytes())
        else:
            digest.update(repr(tensor).encode())
    return digest.hexdigest()


def _code_digest(code, digest) -> None:
    """Feed a code object into `digest`: its bytecode, names and constants, nested code included."""
    digest.update(code.co_code)
    digest.update(repr(code.co_names).encode())
    for const in code.co_consts:
        if hasattr(const, "co_code"):
            _code_digest(const, digest)
        else:
            digest.update(repr(const).encode())


def _function_digest(value, digest) -> None:
    if isinstance(value, functools.partial):  # a step with some of its arguments fixed: the step's own code
        _function_digest(value.func, digest)
        return
    code = getattr(getattr(value, "__func__", value), "__code__", None)
    if code is not None:
        _code_digest(code, digest)


def run_fingerprint(model, optimizer, config: TrainConfig | None = None, *functions, lr_schedule=None,
                    get_batch=None) -> dict:
    """What a checkpoint must share with the run that resumes from it (plain strings and numbers):
    the parameters' and buffers' names and shapes; every module's settings (a dropout's p, a norm's
    eps, the sizes it keeps); a digest of the code of every class of the model's modules that is not
    PyTorch's own (a fixed bug changes it) and of `functions` (the loss, the step); the optimizer's
    class and its groups' sizes and settings (the learning rate too when there is no schedule); the
    learning rates of `lr_schedule` at fixed steps (so a changed peak, warm-up or length shows); a
    digest of the first training batch of `get_batch` (the data: drawn once more, from a generator of
    its own); and the settings of `config` that change the result."""
    model = unwrap(model)
    shapes = {name: list(t.shape) for name, t in model.state_dict().items()}
    digest = hashlib.sha256()
    classes = sorted({cls for module in model.modules() for cls in type(module).__mro__
                      if not cls.__module__.startswith(("torch", "builtins"))}, key=lambda c: c.__qualname__)
    for cls in classes:
        digest.update(cls.__qualname__.encode())
        for name in sorted(vars(cls)):
            _function_digest(vars(cls)[name], digest)
    for function in functions:
        _function_digest(function, digest)
    scheduled = ("params", "lr") if lr_schedule is not None else ("params",)
    groups = [{"params": len(g["params"]), **{k: repr(v) for k, v in sorted(g.items()) if k not in scheduled}}
              for g in optimizer.param_groups] if optimizer is not None else None
    settings = {k: getattr(config, k) for k in _FINGERPRINTED_SETTINGS} if config is not None else None
    return {"parameters": shapes, "modules": _module_settings(model), "code": digest.hexdigest(),
            "optimizer": [type(optimizer).__name__, groups] if optimizer is not None else None,
            "schedule": _schedule_samples(lr_schedule),
            "data": _data_digest(get_batch, config.seed if config is not None else 0) if get_batch is not None else None,
            "settings": settings}


def fingerprint_differences(saved: dict | None, current: dict) -> list[str]:
    """What differs between the fingerprint a checkpoint recorded and the run's own (run_fingerprint),
    in words, one item per part; an empty list when the checkpoint belongs to this run."""
    if not saved:
        return ["it records no fingerprint (an older version of the course wrote it)"]
    what = {"parameters": "the model's parameters (names or shapes)",
            "modules": "the model's settings (a dropout, a norm's eps, a size)",
            "code": "the code of the model's classes, the loss or the step (a fixed bug counts)",
            "optimizer": "the optimizer or its parameter groups",
            "schedule": "the learning-rate schedule (its peak, warm-up, floor or length: max_steps counts)",
            "data": "the training data or its batches (the first batch differs)",
            "settings": "the training settings"}
    return [what[key] for key in what if saved.get(key) != current.get(key)]


def best_checkpoint_path(path) -> Path:
    """Where the best checkpoint of a run lies: beside `path`, with `.best` before the suffix."""
    path = Path(path)
    return path.with_name(f"{path.stem}.best{path.suffix}")


# --------------------------------------------------------------------------- the loop
def count_tokens(batch) -> int:
    """Tokens in a batch: the number of elements of its first tensor."""
    first = batch[0] if isinstance(batch, (tuple, list)) else batch
    return int(first.numel())


@torch.no_grad()
def evaluate(model, get_batch: Callable, loss_fn: Callable, num_batches: int, device, precision: str = "fp32",
             seed: int = 1234) -> dict[str, float]:
    """Mean loss over `num_batches` batches of each split, the same batches every call.

    The model is put in eval mode (dropout off) and back in train mode afterwards.
    """
    was_training = model.training
    model.eval()
    losses = {}
    for split in ("train", "val"):
        generator = torch.Generator().manual_seed(seed)
        total = 0.0
        for _ in range(num_batches):
            with autocast(device, precision):
                total += float(loss_fn(model, get_batch(split, generator)))
        losses[split] = total / num_batches
    model.train(was_training)
    return losses


def _progress(total: int, initial: int, enabled: bool):
    if not enabled:
        return None
    from tqdm.auto import tqdm

    return tqdm(total=total, initial=initial, desc="training", unit="step", dynamic_ncols=True)


def train(
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    get_batch: Callable[[str, torch.Generator], Any],
    loss_fn: Callable[[torch.nn.Module, Any], torch.Tensor],
    config: TrainConfig,
    lr_schedule: Callable[[int], float] | None = None,
    device=None,
    *,
    step_fn: Callable,
    save_fn: Callable | None = None,
    load_fn: Callable | None = None,
) -> History:
    """Train `model` for `config.max_steps` optimizer steps; returns the History.

    lr_schedule(step) -> learning rate for that step (None: keep the optimizer's). With
    `config.checkpoint_path` set and a checkpoint of this run there, training resumes from it;
    a checkpoint of another run raises CheckpointMismatch. The checkpoint of the evaluation with
    the lowest validation loss is kept at best_checkpoint_path(config.checkpoint_path).
    step_fn(model, batch, loss_fn, optimizer, scaler, precision, grad_clip) -> (loss, grad_norm)
    takes one optimizer step (notebook 07's train_step). With a checkpoint path, save_fn and load_fn
    write and read the checkpoints (notebook 07's save_checkpoint and load_checkpoint; see the module's
    docstring); load_fn raises CheckpointMismatch for a checkpoint of another run.
    The model should already be on `device` (default: the device of its parameters).
    """
    if config.checkpoint_path and (save_fn is None or load_fn is None):
        raise TypeError(f"train: checkpoint_path is {config.checkpoint_path!r}, so pass save_fn=save_checkpoint and "
                        "load_fn=load_checkpoint (notebook 07's), or set checkpoint_path=None to train without "
                        "checkpoints.")
    device = torch.device(device) if device is not None else next(model.parameters()).device
    precision = device_precision(device, config.precision)
    scaler = make_scaler(device, precision)
    generator = torch.Generator().manual_seed(config.seed)
    fingerprint = run_fingerprint(model, optimizer, config, loss_fn, step_fn, lr_schedule=lr_schedule,
                                  get_batch=get_batch) if config.checkpoint_path else None  # (for save_fn and load_fn)
    history, step = History(), 0
    if config.checkpoint_path and config.resume and Path(config.checkpoint_path).exists():
        step, history = load_fn(config.checkpoint_path, model, optimizer, scaler, generator, fingerprint)
        step = int(step)
        print(f"resumed from {config.checkpoint_path} at step {step}")
        if step >= config.max_steps:
            print(f"nothing to train: the checkpoint is at step {step} and max_steps is {config.max_steps}; "
                  "raise max_steps to train on")
    start_step = step
    net = torch.compile(model) if config.compile else model
    checkpoint_every = config.checkpoint_every or config.eval_every
    model.train()

    bar = _progress(config.max_steps, step, config.progress)
    run_tokens, run_time = 0, 0.0
    try:
        while True:
            resumed_here = step == start_step and step > 0  # already evaluated and saved here
            last = step >= config.max_steps  # a checkpoint may lie past a lowered max_steps
            if config.eval_every and not resumed_here and (step % config.eval_every == 0 or last):
                losses = evaluate(net, get_batch, loss_fn, config.eval_batches, device, precision, config.eval_seed)
                history.eval_steps.append(step)
                history.eval_train_loss.append(losses["train"])
                history.eval_val_loss.append(losses["val"])
                history.eval_time.append(history.train_time)
                if bar is not None:
                    bar.write(f"step {step}: train loss {losses['train']:.4f}, val loss {losses['val']:.4f}")
                if config.stop_at_val_loss is not None and losses["val"] <= config.stop_at_val_loss:
                    last = True  # the target is reached: the checkpoint below if asked, then stop
                if config.checkpoint_path and history.best_step == step:
                    save_fn(best_checkpoint_path(config.checkpoint_path), model, optimizer, scaler, step, history,
                            generator, fingerprint)
            if (config.checkpoint_path and step > start_step and checkpoint_every
                    and (step % checkpoint_every == 0 or last)):
                save_fn(config.checkpoint_path, model, optimizer, scaler, step, history, generator, fingerprint)
            if last:
                break

            t0 = time.perf_counter()
            lr = lr_schedule(step) if lr_schedule is not None else optimizer.param_groups[0]["lr"]
            for group in optimizer.param_groups:
                group["lr"] = lr
            batch = get_batch("train", generator)
            loss_value, grad_norm = step_fn(net, batch, loss_fn, optimizer, scaler, precision, config.grad_clip)
            loss_value, grad_norm = float(loss_value), float(grad_norm)  # waits for the GPU: honest timing
            dt = time.perf_counter() - t0

            step += 1
            history.steps.append(step)
            history.train_loss.append(loss_value)
            history.lr.append(lr)
            history.grad_norm.append(float(grad_norm))
            history.train_time += dt
            run_tokens += config.tokens_per_batch or count_tokens(batch)
            run_time += dt
            history.tokens_per_s = run_tokens / run_time if run_time > 0 else 0.0
            if bar is not None:
                bar.update(1)
                bar.set_postfix(loss=f"{loss_value:.4f}", tok_s=f"{history.tokens_per_s:,.0f}", lr=f"{lr:.2e}")
    finally:
        if bar is not None:
            bar.close()
    return history


# --------------------------------------------------------------------------- plots
def plot_history(history: History, x: str = "step", ax=None, title: str | None = None, logy: bool = False):
    """Learning curves: the per-step training loss (faint), and the evaluated train and
    validation losses. `x` is "step" or "time" (seconds of training wall time)."""
    import matplotlib.pyplot as plt

    if x not in ("step", "time"):
        raise ValueError(f"x must be 'step' or 'time', got {x!r}")
    if ax is None:
        _, ax = plt.subplots(figsize=(7, 4))
    if x == "step":
        if history.steps:
            ax.plot(history.steps, history.train_loss, color="tab:blue", alpha=0.25, lw=1, label="train (per step)")
        xs = history.eval_steps
        ax.set_xlabel("optimizer step")
    else:
        xs = history.eval_time
        ax.set_xlabel("training wall time (s)")
    if xs:
        ax.plot(xs, history.eval_train_loss, "o-", color="tab:blue", ms=3, label="train (evaluated)")
        ax.plot(xs, history.eval_val_loss, "o-", color="tab:orange", ms=3, label="validation")
    ax.set_ylabel("loss (nats per token)")
    if logy:
        ax.set_yscale("log")
    if title:
        ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend()
    return ax


# --------------------------------------------------------------------------- hardware accounting
# Dense peak throughput of tensor-core matrix products, FLOP/s, from the vendors' data sheets (no sparsity):
# bf16 where the GPU has it natively, fp16 otherwise. Matched against torch.cuda.get_device_name.
PEAK_FLOPS = {
    "H100 80GB HBM3": 989e12,   # H100 SXM, bf16
    "H100 PCIe": 756e12,        # bf16
    "H100": 756e12,             # other H100 boards: the PCIe figure, the lower one
    "A100": 312e12,             # bf16, SXM and PCIe alike
    "L40S": 362e12,             # bf16
    "L40": 181e12,              # bf16
    "L4": 121e12,               # bf16 (after L40S and L40, whose names contain "L4")
    "T4": 65e12,                # fp16 (no native bf16)
    "V100": 125e12,             # fp16
}


def peak_flops(device: torch.device) -> float | None:
    """The data-sheet peak of a known CUDA GPU in its 16-bit training precision, in FLOP/s (None for a CPU,
    Apple's GPUs or a GPU not in PEAK_FLOPS): what model FLOPs utilisation (MFU) is measured against."""
    device = torch.device(device)
    if device.type != "cuda" or not torch.cuda.is_available():
        return None
    name = torch.cuda.get_device_name(device)
    return next((peak for key, peak in PEAK_FLOPS.items() if key in name), None)
