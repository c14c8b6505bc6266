"""Synthetic long-range tasks for recurrent networks (notebooks 02 and 03).

Both tasks are generated from a `torch.Generator`, so the same seed always gives the
same data, and both have a known "learned nothing" baseline:

* the **adding problem** (Hochreiter & Schmidhuber 1997; Le et al. 2015): a sequence of
  random numbers, two of which are marked; the target is the sum of the two marked
  numbers. Predicting the constant 1 (the mean of the target) gives a mean squared
  error of Var(u1 + u2) = 2/12 ≈ 0.167 (`ADDING_BASELINE_MSE`).
* the **copy-memory task** (Hochreiter & Schmidhuber 1997; Arjovsky et al. 2016): a few
  symbols, then a long stretch of blanks, then a delimiter; the model must output the
  symbols again after the delimiter. Guessing the blank during the wait and a uniformly
  random symbol at the end gives `copy_memory_baseline(...)` nats per position.
"""
from __future__ import annotations

import math

import torch

__all__ = [
    "ADDING_BASELINE_MSE", "adding_problem", "copy_memory", "copy_memory_baseline", "LastStateRegressor",
    "train_adding", "RecurrentTagger", "train_copy_memory",
]


ADDING_BASELINE_MSE = 1.0 / 6.0
"""MSE of always predicting 1.0 on the adding problem: Var(U1 + U2) for U ~ Uniform(0, 1)."""


def adding_problem(
    num_samples: int,
    seq_len: int,
    generator: torch.Generator | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Examples of the adding problem → (x, y).

    x: float32 (num_samples, seq_len, 2). Channel 0 holds numbers drawn uniformly from
       [0, 1); channel 1 is 0 everywhere except two 1s, one at a position drawn uniformly
       from the first half (0 .. seq_len//2 - 1) and one from the second half
       (seq_len//2 .. seq_len - 1).
    y: float32 (num_samples,): the sum of the two marked numbers, in [0, 2).

    The first marker is at least seq_len - seq_len//2 steps before the end, so a model that
    reads the sequence left to right must carry it over about half the sequence or more.
    Needs seq_len >= 2.
    """
    if seq_len < 2:
        raise ValueError(f"the adding problem needs seq_len >= 2, got {seq_len}")
    half = seq_len // 2
    values = torch.rand(num_samples, seq_len, generator=generator)
    first = torch.randint(0, half, (num_samples,), generator=generator)
    second = torch.randint(half, seq_len, (num_samples,), generator=generator)
    markers = torch.zeros(num_samples, seq_len)
    rows = torch.arange(num_samples)
    markers[rows, first] = 1.0
    markers[rows, second] = 1.0
    x = torch.stack([values, markers], dim=-1)
    y = values[rows, first] + values[rows, second]
    return x, y


def copy_memory(
    num_samples: int,
    delay: int,
    num_symbols: int = 8,
    copy_len: int = 10,
    generator: torch.Generator | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Examples of the copy-memory task → (x, y), both LongTensor (num_samples, L).

    L = copy_len + delay + copy_len. Ids: 0 is the blank, 1..num_symbols the symbols to
    remember, num_symbols + 1 the delimiter (so a model needs num_symbols + 2 input ids and
    num_symbols + 1 output classes).

    x: copy_len random symbols, then delay - 1 blanks, the delimiter, and copy_len blanks.
    y: blanks for the first copy_len + delay positions, then the copy_len symbols of x.
    Needs delay >= 1.
    """
    if delay < 1:
        raise ValueError(f"the copy-memory task needs delay >= 1, got {delay}")
    symbols = torch.randint(1, num_symbols + 1, (num_samples, copy_len), generator=generator)
    length = 2 * copy_len + delay
    x = torch.zeros(num_samples, length, dtype=torch.long)
    y = torch.zeros(num_samples, length, dtype=torch.long)
    x[:, :copy_len] = symbols
    x[:, copy_len + delay - 1] = num_symbols + 1
    y[:, -copy_len:] = symbols
    return x, y


def copy_memory_baseline(delay: int, num_symbols: int = 8, copy_len: int = 10) -> float:
    """Cross-entropy (nats per position, averaged over all L positions) of the memoryless
    strategy: the blank with certainty for the first copy_len + delay positions, then a
    uniform guess among the symbols. Equals copy_len * ln(num_symbols) / (2 * copy_len + delay)."""
    return copy_len * math.log(num_symbols) / (2 * copy_len + delay)


class LastStateRegressor(torch.nn.Module):
    """A one-layer recurrent network that reads x (B, T, input_size) and predicts one number
    per sequence from its last hidden state → (B,). `cell` is "rnn" (tanh, nn.RNN), "lstm"
    (nn.LSTM, forget-gate bias initialised to `forget_bias`) or "gru" (nn.GRU, update-gate
    bias initialised to `forget_bias`: the gate that keeps the old state, the GRU's
    counterpart of the forget gate)."""

    def __init__(self, cell: str, hidden_size: int, input_size: int = 2, forget_bias: float = 1.0):
        super().__init__()
        layers = {"rnn": torch.nn.RNN, "lstm": torch.nn.LSTM, "gru": torch.nn.GRU}
        if cell not in layers:
            raise ValueError(f"cell must be 'rnn', 'lstm' or 'gru', got {cell!r}")
        self.rnn = layers[cell](input_size, hidden_size, batch_first=True)
        self.head = torch.nn.Linear(hidden_size, 1)
        if cell != "rnn":
            # PyTorch's block orders: i, f, g, o (LSTM) and r, z, n (GRU); f and z are the second
            with torch.no_grad():
                self.rnn.bias_ih_l0[hidden_size:2 * hidden_size].fill_(forget_bias)
                self.rnn.bias_hh_l0[hidden_size:2 * hidden_size].zero_()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        states, _ = self.rnn(x)
        return self.head(states[:, -1]).squeeze(-1)


def train_adding(
    cell: str,
    seq_len: int,
    seed: int,
    steps: int = 800,
    hidden_size: int = 32,
    batch_size: int = 64,
    lr: float = 1e-2,
    max_norm: float = 1.0,
    eval_every: int = 50,
    num_eval: int = 512,
    model_from=None,
) -> dict:
    """Train a fresh LastStateRegressor on the adding problem and report how it went.

    Everything is seeded by `seed` (weights, training batches); the evaluation set is the
    same for every seed (its own generator, seed 12345). Adam with gradient clipping.
    Returns {"steps": [...], "val_mse": [...] (at step 0, every eval_every steps and at the
    end), "final_mse": the mean of the last three evaluations (one unlucky last update
    should not decide the result), "seconds": float}.
    model_from: None, or a function that takes the freshly seeded LastStateRegressor and returns
    the module to train instead (e.g. the same weights run by another implementation of the
    cell): it maps x (B, T, 2) to (B,) predictions like the regressor.
    """
    import time

    torch.manual_seed(seed)
    model = LastStateRegressor(cell, hidden_size)
    if model_from is not None:
        model = model_from(model)
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    train_gen = torch.Generator().manual_seed(10_000 + seed)
    x_val, y_val = adding_problem(num_eval, seq_len, torch.Generator().manual_seed(12345))

    def evaluate() -> float:
        with torch.no_grad():
            return float(((model(x_val) - y_val) ** 2).mean())

    start = time.perf_counter()
    record_steps, record_mse = [0], [evaluate()]
    for step in range(1, steps + 1):
        x, y = adding_problem(batch_size, seq_len, train_gen)
        loss = ((model(x) - y) ** 2).mean()
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
        optimizer.step()
        if step % eval_every == 0 or step == steps:
            record_steps.append(step)
            record_mse.append(evaluate())
    last = record_mse[-3:]
    return {"steps": record_steps, "val_mse": record_mse, "final_mse": sum(last) / len(last),
            "seconds": time.perf_counter() - start}


class RecurrentTagger(torch.nn.Module):
    """Embedding → one recurrent layer ("rnn": tanh nn.RNN, "lstm": nn.LSTM) → linear, giving
    logits at every position: ids (B, L) → (B, L, num_classes). Used for the copy-memory task."""

    def __init__(self, cell: str, vocab_size: int, num_classes: int, hidden_size: int, emb_dim: int = 16):
        super().__init__()
        if cell not in ("rnn", "lstm"):
            raise ValueError(f"cell must be 'rnn' or 'lstm', got {cell!r}")
        self.embedding = torch.nn.Embedding(vocab_size, emb_dim)
        self.rnn = (torch.nn.RNN if cell == "rnn" else torch.nn.LSTM)(emb_dim, hidden_size, batch_first=True)
        self.head = torch.nn.Linear(hidden_size, num_classes)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        states, _ = self.rnn(self.embedding(ids))
        return self.head(states)


def train_copy_memory(
    cell: str,
    delay: int,
    seed: int,
    steps: int = 400,
    num_symbols: int = 4,
    copy_len: int = 3,
    hidden_size: int = 64,
    batch_size: int = 64,
    lr: float = 3e-3,
    max_norm: float = 1.0,
    num_eval: int = 256,
) -> dict:
    """Train a fresh RecurrentTagger on the copy-memory task (cross-entropy at every position,
    Adam, gradient clipping), everything seeded by `seed`; evaluate on `num_eval` sequences
    from a fixed generator (seed 12345).

    Returns {"final_ce": nats per position on the evaluation set, "baseline_ce":
    copy_memory_baseline(...), "copy_accuracy": fraction of the copy_len symbols after the
    delimiter predicted correctly (chance: 1 / num_symbols), "seconds": float}.
    """
    import time

    torch.manual_seed(seed)
    model = RecurrentTagger(cell, num_symbols + 2, num_symbols + 1, hidden_size)
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    train_gen = torch.Generator().manual_seed(20_000 + seed)
    start = time.perf_counter()
    for _ in range(steps):
        x, y = copy_memory(batch_size, delay, num_symbols, copy_len, train_gen)
        loss = torch.nn.functional.cross_entropy(model(x).flatten(0, 1), y.flatten())
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
        optimizer.step()
    x, y = copy_memory(num_eval, delay, num_symbols, copy_len, torch.Generator().manual_seed(12345))
    with torch.no_grad():
        logits = model(x)
        ce = float(torch.nn.functional.cross_entropy(logits.flatten(0, 1), y.flatten()))
        accuracy = float((logits[:, -copy_len:].argmax(-1) == y[:, -copy_len:]).float().mean())
    return {"final_ce": ce, "baseline_ce": copy_memory_baseline(delay, num_symbols, copy_len),
            "copy_accuracy": accuracy, "seconds": time.perf_counter() - start}
