"""Calibrate the vanishing-gradient lab: RNN and LSTM (and the GRU on request) on the adding
problem at growing T, and on the copy-memory task at growing delays.

    python benchmarks/course/vanishing_gradients.py [--cells rnn,lstm] [--lengths 5,10,20,40,80]
                                             [--seeds 0,1,2] [--steps 600] [--copy-cells rnn,lstm]
                                             [--copy-delays 2,5,10,20] [--copy-steps 400] [--merge]

Trains a fresh model per (cell, T, seed) with utils.synthetic.train_adding, the recipe
notebooks 02 and 03 use (H = 32, batch 64, Adam 1e-2, clipping at 1, one torch thread), and
records the final validation MSE (mean of the last three evaluations) and the time of
every run (the LSTM and the GRU start with the forget / update-gate bias at 1). A run "fails"
when its final MSE is at least 90 % of the constant baseline (1/6) and "solves" the task when
it is below 10 % of it. The copy-memory runs
(utils.synthetic.train_copy_memory: 3 symbols out of 4, 64 units, Adam 3e-3, the recipe of
notebook 02) record the cross-entropy against the memoryless baseline and the share of
copied symbols right (chance 25 %). Writes benchmarks/results/vanishing_gradients.json.

--merge keeps the recorded file and replaces only the adding-problem runs of the cells and
lengths run now (`--cells lstm,gru --lengths 40 --copy-delays ""` re-runs the LSTM and adds
the GRU of notebook 03, back to back), noting the machine and its load average for that part under "merged".
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch  # noqa: E402

from benchmarks.machine import RESULTS_DIR, machine_info, save  # noqa: E402
from utils.synthetic import ADDING_BASELINE_MSE, train_adding, train_copy_memory  # noqa: E402

FAIL = 0.9 * ADDING_BASELINE_MSE
SOLVE = 0.1 * ADDING_BASELINE_MSE


def ints(text: str) -> list[int]:
    return [int(v) for v in text.split(",") if v]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lengths", type=ints, default=[5, 10, 20, 40, 80])
    parser.add_argument("--seeds", type=ints, default=[0, 1, 2])
    parser.add_argument("--steps", type=int, default=600)
    parser.add_argument("--cells", default="rnn,lstm", help="rnn, lstm and/or gru")
    parser.add_argument("--copy-cells", default="rnn,lstm")
    parser.add_argument("--copy-delays", type=ints, default=[2, 5, 10, 20])
    parser.add_argument("--copy-steps", type=int, default=400)
    parser.add_argument("--merge", action="store_true",
                        help="add these adding-problem runs to the recorded results instead of replacing them")
    args = parser.parse_args()
    torch.set_num_threads(1)
    load_before = os.getloadavg()

    rows, summary = [], []
    start = time.perf_counter()
    for cell in args.cells.split(","):
        for T in args.lengths:
            finals = []
            for seed in args.seeds:
                r = train_adding(cell, T, seed, steps=args.steps)
                rows.append({"cell": cell, "seq_len": T, "seed": seed, "steps": args.steps,
                             "final_mse": round(r["final_mse"], 5), "seconds": round(r["seconds"], 2),
                             "curve": {"steps": r["steps"], "val_mse": [round(v, 5) for v in r["val_mse"]]}})
                finals.append(r["final_mse"])
            verdict = ("solved" if all(f < SOLVE for f in finals) else
                       "failed" if all(f >= FAIL for f in finals) else "mixed")
            summary.append({"cell": cell, "seq_len": T, "final_mse": [round(f, 4) for f in finals],
                            "median_mse": round(statistics.median(finals), 4), "verdict": verdict})
            print(f"{cell:>4} T={T:>3}: final MSE {', '.join(f'{f:.4f}' for f in finals)} -> {verdict}", flush=True)

    copy_rows = []
    for cell in args.copy_cells.split(","):
        for delay in args.copy_delays:
            runs = [train_copy_memory(cell, delay, seed, steps=args.copy_steps) for seed in args.seeds]
            copy_rows.append({"cell": cell, "delay": delay, "steps": args.copy_steps,
                              "baseline_ce": round(runs[0]["baseline_ce"], 4),
                              "final_ce": [round(r["final_ce"], 4) for r in runs],
                              "copy_accuracy": [round(r["copy_accuracy"], 3) for r in runs],
                              "seconds": [round(r["seconds"], 2) for r in runs]})
            print(f"{cell:>4} copy delay={delay:>2}: CE {copy_rows[-1]['final_ce']} (baseline "
                  f"{copy_rows[-1]['baseline_ce']}), copied right {copy_rows[-1]['copy_accuracy']}", flush=True)

    seconds = round(time.perf_counter() - start, 1)
    if args.merge:
        path = RESULTS_DIR / "vanishing_gradients.json"
        recorded = json.loads(path.read_text())
        record = recorded["rows"][0]
        done = {(s["cell"], s["seq_len"]) for s in summary}
        record["summary"] = [s for s in record["summary"] if (s["cell"], s["seq_len"]) not in done] + summary
        record["runs"] = [r for r in record["runs"] if (r["cell"], r["seq_len"]) not in done] + rows
        record["findings"] = findings_of(record["summary"], record["findings"]["total_seconds"])
        record["merged"] = [m for m in record.get("merged", []) if {tuple(k) for k in m["runs"]} - done] + [
            {"runs": sorted(done), "seconds": seconds, "machine": machine_info(),
             "load_average_1min": {"before": round(load_before[0], 2), "after": round(os.getloadavg()[0], 2)}}]
        path.write_text(json.dumps(recorded, indent=1) + "\n")
        print(record["findings"])
        print(f"merged into {path}")
        return 0
    findings = findings_of(summary, seconds)
    print(findings)
    print(f"saved {save('vanishing_gradients', [{'summary': summary, 'findings': findings, 'runs': rows, 'copy_memory': copy_rows}])}")
    return 0


def findings_of(summary: list[dict], total_seconds: float) -> dict:
    def lengths(cell, verdict):
        return [s["seq_len"] for s in summary if s["cell"] == cell and s["verdict"] == verdict]

    findings = {"baseline_mse": ADDING_BASELINE_MSE, "fail_threshold": FAIL, "solve_threshold": SOLVE}
    for cell in dict.fromkeys(s["cell"] for s in summary):
        findings[f"{cell}_solves_at"] = lengths(cell, "solved")
        findings[f"{cell}_fails_at"] = lengths(cell, "failed")
    findings["total_seconds"] = total_seconds
    return findings


if __name__ == "__main__":
    sys.exit(main())
