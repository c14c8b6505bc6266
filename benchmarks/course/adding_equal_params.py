"""The adding problem at T = 40 with the recurrent layers given the same number of weights.

    python benchmarks/course/adding_equal_params.py [--seeds 0,1,2] [--steps 600]

Notebook 03 (section 4) trains an RNN, an LSTM and a GRU of 32 units each, with 1,152, 4,608 and
3,456 recurrent parameters. Here the RNN gets 66 units (4,620) and the GRU 37 (4,551), the LSTM's
4,608 with its 32, in the recipe of utils.synthetic.train_adding (notebooks 02 and 03: batch 64,
Adam 1e-2, clipping at 1, 600 steps, forget / update-gate bias 1), seeds 0 to 2. Records the final
validation MSE (mean of the last three evaluations), the first evaluation below half the baseline,
and the seconds of each run. Writes benchmarks/results/adding_equal_params.json.
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch  # noqa: E402

from benchmarks.machine import save  # noqa: E402
from utils.synthetic import ADDING_BASELINE_MSE, LastStateRegressor, train_adding  # noqa: E402

SIZES = {"rnn": 66, "lstm": 32, "gru": 37}


def recurrent_parameters(cell: str, hidden: int) -> int:
    return sum(p.numel() for p in LastStateRegressor(cell, hidden).rnn.parameters())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--steps", type=int, default=600)
    args = parser.parse_args()
    torch.set_num_threads(1)
    rows = []
    for seed in (int(s) for s in args.seeds.split(",")):
        for cell, hidden in SIZES.items():
            load = os.getloadavg()
            r = train_adding(cell, 40, seed=seed, steps=args.steps, hidden_size=hidden)
            below = [s for s, m in zip(r["steps"], r["val_mse"]) if m < ADDING_BASELINE_MSE / 2]
            rows.append({"cell": cell, "hidden": hidden, "recurrent_parameters": recurrent_parameters(cell, hidden),
                         "seed": seed, "T": 40, "steps": args.steps, "final_mse": round(r["final_mse"], 5),
                         "below_half_baseline_from": below[0] if below else None,
                         "seconds": round(r["seconds"], 1), "load_average_before": [round(v, 2) for v in load]})
            print(rows[-1], flush=True)
    print(f"wrote {save('adding_equal_params', rows)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
