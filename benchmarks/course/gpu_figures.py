"""Every figure of issue 26 part B (notebook 07 on a GPU) in one command; it needs a CUDA GPU.

    COURSE_DATA_DIR=.gpu-data PYTHONUNBUFFERED=1 python3 -m benchmarks.course.gpu_figures --copy-to "$OUT"

Stages, in this order (`--stages` picks some):
  train     the course GPT against the built-ins GPT, nanoGPT's shakespeare_char shape, bf16,
            without and with torch.compile, each stopped at validation loss 1.47 (--full-length: all
            5,000 steps): time to 1.47, best and final loss, tokens/s,
            peak memory, ratios -> results/gpu_train_shakespeare_char.json
  nanogpt   nanoGPT itself (its train.py and shakespeare_char configuration, a checkout given with
            --nanogpt DIR) on the same text, eager, after the course GPT: time to 1.47, best and
            final loss, tokens/s, and the course GPT's figures over nanoGPT's -> results/gpu_nanogpt_side.json
  fp16      the course GPT in bf16 and in fp16 with a GradScaler (a T4's path, forced), the same
            steps: steps the scaler skipped, largest gap between the validation curves
            -> results/gpu_fp16.json
  notebook  solution 07 top to bottom in full mode (wall time, validation loss, BLEU), then
            autograded (needs nbformat, nbclient, ipykernel, nbgrader) -> results/gpu_notebook_07.json
Each JSON is written (and copied to --copy-to) as soon as its stage ends, with the machine.
Without a CUDA device the command refuses at once (exit status 2).
"""
from __future__ import annotations

import argparse
import importlib.util
import re
import shutil
import sys
import tempfile
import time
from pathlib import Path

import torch

from benchmarks.course import transformer
from benchmarks.machine import save

STAGES = ("train", "nanogpt", "fp16", "notebook")
FP16_TOLERANCE = 0.02  # nats: fp16 + GradScaler must reach bf16's validation loss within this
NOTEBOOK = "07_transformer"
NOTEBOOK_NEEDS = ("nbformat", "nbclient", "ipykernel", "nbgrader")


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stages", nargs="+", choices=STAGES, default=list(STAGES))
    parser.add_argument("--config", choices=sorted(transformer.CONFIGS), default="shakespeare_char")
    parser.add_argument("--max-steps", type=int, default=None, help="override the configuration's steps (train)")
    parser.add_argument("--eval-batches", type=int, default=50,
                        help="batches per split and evaluation (50 x 64 x 256 tokens cover the validation text 7 times)")
    parser.add_argument("--compile", choices=["off", "on", "both"], default="both", help="torch.compile in stage train")
    parser.add_argument("--full-length", action="store_true",
                        help="stage train runs every step instead of stopping at validation loss 1.47")
    parser.add_argument("--fp16-steps", type=int, default=1000, help="steps of each run of stage fp16")
    parser.add_argument("--copy-to", type=Path, default=None, help="also copy each JSON here (the device's $OUT)")
    parser.add_argument("--nanogpt", type=Path, default=None, help="a checkout of github.com/karpathy/nanoGPT (stage nanogpt)")
    parser.add_argument("--progress", action="store_true", help="show the training progress bars")
    return parser.parse_args(argv)


def cuda_refusal() -> str | None:
    """Why this command cannot run here (None when a CUDA device is present)."""
    if torch.cuda.is_available():
        return None
    return ("gpu_figures needs a CUDA GPU and found none (torch.cuda.is_available() is False); "
            "run it on the device machine, see benchmarks/README.md, 'Notebook 07 on a GPU'.")


def record(name: str, rows: list[dict], copy_to: Path | None) -> Path:
    """save(name, rows), and a copy in copy_to if given."""
    path = save(name, rows)
    if copy_to is not None:
        copy_to.mkdir(parents=True, exist_ok=True)
        shutil.copy(path, copy_to / path.name)
    print(f"saved {path}", flush=True)
    return path


def stage_train(args, device, ns, data, rows: list[dict] | None = None) -> Path:
    """B.1: course against built-ins, bf16, for each compile mode; ratios per mode (also appended to `rows`)."""
    cfg = transformer.CONFIGS[args.config]
    modes = {"off": [False], "on": [True], "both": [False, True]}[args.compile]
    rows = [] if rows is None else rows
    for compiled in modes:
        stop_at = None if args.full_length else transformer.TARGET_LOSS
        pair = [transformer.train_one(name, cfg, ns, device, data, args.max_steps, compiled, "auto",
                                      args.eval_batches, args.progress, stop_at) for name in ("course", "builtin")]
        rows += pair + [{**transformer.ratios(*pair), "compile": compiled}]
        print(rows[-1], flush=True)
        path = record(f"gpu_train_{args.config}", rows, args.copy_to)  # after each mode: a cut-off run keeps the first
    return path


def stage_nanogpt(args, device, course_rows: list[dict]) -> Path:
    """nanoGPT beside the course GPT: its own run, and the course's eager row over it when stage train ran."""
    from benchmarks.course import nanogpt_side
    from utils.data import dataset_path

    if args.nanogpt is None:
        raise RuntimeError("stage nanogpt needs --nanogpt DIR, a checkout of github.com/karpathy/nanoGPT "
                           "(benchmarks/README.md, 'Notebook 07 on a GPU')")
    row = nanogpt_side.run(args.nanogpt, dataset_path("tinyshakespeare"), args.max_steps, device.type,
                           eval_iters=args.eval_batches)
    rows = [row]
    course = next((r for r in course_rows if r.get("model") == "course" and not r.get("compile")), None)
    if course is not None:
        rows.append(transformer.ratios(course, row, "course / nanoGPT"))
    print(rows[-1], flush=True)
    return record("gpu_nanogpt_side", rows, args.copy_to)


def compare_precisions(reference: dict, other: dict, tolerance: float = FP16_TOLERANCE) -> dict:
    """The largest gap between two runs' validation curves (rows of train_one, same evaluation steps)."""
    if reference["eval_steps"] != other["eval_steps"]:
        raise ValueError(f"evaluated at different steps: {reference['eval_steps']} and {other['eval_steps']}")
    gap = max(abs(a - b) for a, b in zip(reference["eval_val_loss"], other["eval_val_loss"]))
    final = abs(reference["final_val_loss"] - other["final_val_loss"])
    return {"model": f"{other['precision']} against {reference['precision']}", "max_val_loss_gap": round(gap, 4),
            "final_val_loss_gap": round(final, 4), "tolerance": tolerance, "within_tolerance": final <= tolerance,
            "overflow_steps": other["overflow_steps"]}


def stage_fp16(args, device, ns, data) -> Path:
    """B.2: the same course-GPT run in bf16 and in fp16 + GradScaler (forced)."""
    cfg = transformer.CONFIGS[args.config]
    rows = [transformer.train_one("course", cfg, ns, device, data, args.fp16_steps, False, precision,
                                  args.eval_batches, args.progress) for precision in ("bf16", "fp16")]
    rows.append(compare_precisions(*rows))
    print(rows[-1], flush=True)
    return record("gpu_fp16", rows, args.copy_to)


def printed_number(cell, pattern: str) -> float | None:
    """The number that `pattern` (one group) finds in a cell's printed output, if any."""
    text = "".join(o.get("text", "") for o in cell.get("outputs", []))
    found = re.search(pattern, text)
    return float(found.group(1)) if found else None


def stage_notebook(args) -> Path:
    """B.3: solution 07 in full mode on this GPU, then graded (nbgrader, fast mode, as for students)."""
    missing = [name for name in NOTEBOOK_NEEDS if importlib.util.find_spec(name) is None]
    if missing:
        raise RuntimeError(f"stage notebook needs {', '.join(missing)}: carry their wheels (benchmarks/README.md)")
    from autograder.grading.batch import grade
    from autograder.course.layout import grade_id, solution_path
    from autograder.grading.workspace import add_sources, add_submission, open_workspace
    from benchmarks.course.notebook_times import run_once

    seconds, errors, nb = run_once(NOTEBOOK, fast=False)
    cells = {grade_id(cell): cell for cell in nb.cells}
    row = {"assignment": NOTEBOOK, "mode": "full", "wall_s": round(seconds, 1), "cells_with_errors": errors,
           "char_best_val_loss": printed_number(cells["exp_char_train"], r"validation loss: best ([\d.]+)"),
           "char_final_val_loss": printed_number(cells["exp_char_train"], r", last ([\d.]+) at step"),
           "bleu_greedy": printed_number(cells["exp_mt_bleu"], r"held-out sentences: ([\d.]+)"),
           "bleu_beam_4": printed_number(cells["exp_mt_beam_bleu"], r"beam search \(4 beams\) ([\d.]+)")}
    print(row, flush=True)
    with tempfile.TemporaryDirectory(prefix="course-gpu-grade-") as tmp:
        ws = open_workspace(tmp)
        add_sources(ws, [NOTEBOOK])
        add_submission(ws, "gpu", NOTEBOOK, solution_path(NOTEBOOK))
        start = time.perf_counter()
        [result] = grade(ws, [NOTEBOOK], ["gpu"], jobs=1)   # as `python -m autograder grade`: experiments skipped
        score = result.score
    grading = {"graded": NOTEBOOK, "grading_s": round(time.perf_counter() - start, 1),
               "score": score.auto_score, "max_score": score.auto_max, "full_marks": score.auto_score == score.auto_max}
    print(grading, flush=True)
    return record("gpu_notebook_07", [row, grading], args.copy_to)


def main(argv=None) -> int:
    args = parse_args(argv)
    refusal = cuda_refusal()
    if refusal:
        print(refusal, file=sys.stderr)
        return 2
    from utils.runtime import setup

    device = setup(seed=0, verbose=False)
    print(f"{torch.cuda.get_device_name(0)}, torch {torch.__version__}; stages {args.stages}", flush=True)
    ns, data = (transformer.course_namespace(), transformer.char_data()) if {"train", "fp16"} & set(args.stages) else (None, None)
    course_rows: list[dict] = []
    stages = {"train": lambda: stage_train(args, device, ns, data, course_rows),
              "nanogpt": lambda: stage_nanogpt(args, device, course_rows),
              "fp16": lambda: stage_fp16(args, device, ns, data), "notebook": lambda: stage_notebook(args)}
    failed = []
    start = time.perf_counter()
    for name in args.stages:
        print(f"--- stage {name} (at {time.perf_counter() - start:.0f} s)", flush=True)
        try:
            stages[name]()
        except Exception as exc:  # noqa: BLE001  (the other stages still run; the exit status says it)
            failed.append(name)
            print(f"stage {name} failed: {type(exc).__name__}: {exc}", flush=True)
    print(f"done in {time.perf_counter() - start:.0f} s" + (f"; failed: {failed}" if failed else ""), flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
