"""RNN, LSTM and GRU character models on Tiny Shakespeare at equal parameter count and equal budget.

    python benchmarks/course/char_models.py [--steps 2000] [--seeds 0,1,2] [--cells rnn,lstm,gru] [--merge]
                                     [--record char_models]

The recipe of notebook 03's character LSTM (and of notebook 02's truncated-BPTT RNN): an embedding
of 32, one recurrent layer, a linear head; the training text read as 32 parallel streams, 64
characters a step, the state carried from chunk to chunk and detached (truncated BPTT; a new pass
over the text starts from zeros); Adam 5e-3, gradient clipping at 1, one torch thread. Each cell gets
the hidden size that brings the whole model to about 93 k parameters, the notebook's LSTM of 128
units: RNN 256, LSTM 128, GRU 149. The LSTM starts with forget-gate bias +1, the GRU with
update-gate bias +1 (its counterpart, as in notebook 03's adding problem). Validation: the first
40 000 characters of the validation text read as 16 streams with the state carried, in bits per
character, at the evaluation steps; at the end also the loss at each position of a chunk when
every chunk starts from a zero state (how fast each model rebuilds its context). The cell `rnn128`
is notebook 02's RNN (128 units, about 31 k parameters), under the same recipe. Writes
benchmarks/results/char_models.json (--merge: adds these runs to it, replacing runs of the same
cell and seed; --record NAME writes results/NAME.json instead, e.g. the longer budget of seed 0,
char_models_long); notebook 03 reads both.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from benchmarks.machine import RESULTS_DIR, machine_info, save  # noqa: E402
from utils.data import load_text  # noqa: E402
from utils.text import CharCodec, split_ids, stream_chunks  # noqa: E402

HIDDEN = {"rnn": 256, "lstm": 128, "gru": 149, "rnn128": 128}
LAYERS = {"rnn": nn.RNN, "lstm": nn.LSTM, "gru": nn.GRU, "rnn128": nn.RNN}
GATE_BLOCK = {"lstm": 1, "gru": 1}   # forget block (i, f, g, o) and update block (r, z, n): the second one
BATCH, CHUNK, EMB, LR, VAL_CHARS = 32, 64, 32, 5e-3, 40_000


class CharModel(nn.Module):
    def __init__(self, cell: str, vocab_size: int):
        super().__init__()
        hidden = HIDDEN[cell]
        self.embedding = nn.Embedding(vocab_size, EMB)
        self.rnn = LAYERS[cell](EMB, hidden, batch_first=True)
        self.head = nn.Linear(hidden, vocab_size)
        if cell in GATE_BLOCK:
            with torch.no_grad():
                k = GATE_BLOCK[cell]
                self.rnn.bias_ih_l0[k * hidden:(k + 1) * hidden] += 1.0

    def forward(self, ids, state=None):
        out, state = self.rnn(self.embedding(ids), state)
        return self.head(out), state


def detach(state):
    return tuple(s.detach() for s in state) if isinstance(state, tuple) else state.detach()


@torch.no_grad()
def per_position(model, ids, carry: bool, rows: int = 16) -> torch.Tensor:
    """Cross-entropy in nats at each position of a chunk, averaged over the text read as `rows` streams."""
    total, count, state = torch.zeros(CHUNK), 0, None
    for x, y in stream_chunks(ids, rows, CHUNK):
        logits, new_state = model(x, state if carry else None)
        state = new_state
        total += F.cross_entropy(logits.transpose(1, 2), y, reduction="none").sum(0)
        count += x.shape[0]
    return total / count


def batches(ids):
    """Chunks of the training streams without end: each pass starts over, the state from zeros."""
    while True:
        yield None
        yield from stream_chunks(ids, BATCH, CHUNK)


def run(cell: str, seed: int, steps: int, evals: list[int], train_ids, val_ids, vocab_size: int) -> dict:
    torch.manual_seed(seed)
    model = CharModel(cell, vocab_size)
    optimizer = torch.optim.Adam(model.parameters(), lr=LR)
    curve, losses, state, step, start = [], [], None, 0, time.perf_counter()
    for chunk in batches(train_ids):
        if chunk is None:
            state = None
            continue
        x, y = chunk
        logits, state = model(x, state)
        loss = F.cross_entropy(logits.flatten(0, 1), y.flatten())
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        state = detach(state)
        losses.append(loss.item())
        step += 1
        if step in evals:
            bits = float(per_position(model, val_ids, carry=True).mean()) / math.log(2)
            curve.append({"step": step, "val_bits": round(bits, 4), "seconds": round(time.perf_counter() - start, 1)})
            print(f"{cell} seed {seed} step {step}: {bits:.3f} bits/char ({curve[-1]['seconds']} s)", flush=True)
        if step == steps:
            break
    zero = per_position(model, val_ids, carry=False) / math.log(2)
    carried = per_position(model, val_ids, carry=True) / math.log(2)
    return {"cell": cell, "seed": seed, "hidden": HIDDEN[cell], "parameters": sum(p.numel() for p in model.parameters()),
            "steps": steps, "curve": curve, "seconds": round(time.perf_counter() - start, 1),
            "train_loss_last_50": round(sum(losses[-50:]) / len(losses[-50:]), 4),
            "zero_state_bits_by_position": [round(float(v), 4) for v in zero],
            "carried_bits_by_position": [round(float(v), 4) for v in carried]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--cells", default="rnn,lstm,gru", help="rnn, lstm, gru and/or rnn128")
    parser.add_argument("--merge", action="store_true", help="add these runs to the recorded ones")
    parser.add_argument("--record", default="char_models", help="the name of the record in benchmarks/results")
    args = parser.parse_args()
    torch.set_num_threads(1)
    text = load_text("tinyshakespeare")
    codec = CharCodec.from_text(text)
    train_ids, val_ids = split_ids(codec.encode(text), val_fraction=0.1)
    val_ids = val_ids[:VAL_CHARS]
    evals = sorted({s for s in (100, 200, 400, 700, 1000, 1500, 2000, 3000, 4000, 5000, 6000) if s <= args.steps}
                   | {args.steps})
    rows, load = [], [os.getloadavg()]
    for seed in (int(s) for s in args.seeds.split(",")):
        for cell in args.cells.split(","):          # the cells of one seed back to back, under the same load
            rows.append(run(cell, seed, args.steps, evals, train_ids, val_ids, len(codec)))
            load.append(os.getloadavg())
    head = {"recipe": {"batch": BATCH, "chunk": CHUNK, "emb": EMB, "lr": LR, "clip": 1.0, "val_chars": VAL_CHARS,
                       "hidden": HIDDEN, "gate_bias": "+1 (LSTM forget, GRU update)"},
            "load_average": [[round(v, 2) for v in la] for la in load]}
    recorded = RESULTS_DIR / f"{args.record}.json"
    if args.merge and recorded.is_file():
        old = json.loads(recorded.read_text())
        new_runs = {(r["cell"], r["seed"]) for r in rows}
        head = {**old["rows"][0], "machine_of_the_first_runs": old["machine"],
                "merged": {"machine": machine_info(), "cells": args.cells, **head}}
        rows = [r for r in old["rows"][1:] if (r["cell"], r["seed"]) not in new_runs] + rows
    path = save(args.record, [head] + rows)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
