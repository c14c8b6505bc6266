"""nanoGPT itself beside the course GPT: its own train.py and shakespeare_char configuration, run on the
course's copy of Tiny Shakespeare, so that a ratio of the two is measured on one machine in one call.

nanoGPT's code is not part of this repository: fetch it (github.com/karpathy/nanoGPT) and give its folder.
The folder is copied to a scratch directory first (nanoGPT's prepare.py writes its data next to itself);
its prepare.py finds `input.txt` already there and so downloads nothing.

    python -m benchmarks.course.nanogpt_side NANOGPT_DIR [--max-iters N] [--device cuda] [--compile] [--tiny]

`--tiny` shrinks the model and batches (TINY) so that the whole path runs on a CPU in seconds (the check
made here before a GPU is lent); without it nanoGPT's own sizes are kept.

`run` returns one row in the shape of benchmarks/transformer.train_one's (validation curve, best and final
loss, time to validation loss 1.47, tokens per second), from what nanoGPT prints: "step N: train loss X,
val loss Y" at each evaluation and "iter N: loss X, time T ms, mfu M%" at each iteration (log_interval 1).
"""
from __future__ import annotations

import argparse
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TARGET_LOSS = 1.47
EVAL_LINE = re.compile(r"^step (\d+): train loss ([\d.]+), val loss ([\d.]+)")
ITER_LINE = re.compile(r"^iter (\d+): loss ([\d.]+), time ([\d.]+)ms, mfu (-?[\d.]+)%")
SIZES = dict(batch_size=64, block_size=256)  # config/train_shakespeare_char.py's
TINY = dict(batch_size=8, block_size=32, n_layer=1, n_head=2, n_embd=32, dropout=0.0)


def parse_log(lines: list[tuple[float, str]], tokens_per_iter: int, eval_interval: int) -> dict:
    """Figures from nanoGPT's output, given as (seconds since the start, line) pairs.

    Training time leaves out the evaluations: an iteration that follows an evaluation is timed by nanoGPT
    with the evaluation inside, so its time is replaced by the median of the other iterations'. `time_to_val_1.47_s` is
    the training time up to the first evaluation at or below 1.47; `wall_to_val_1.47_s` the wall time from
    the start of the process to the line that reported it (start-up, data loading and evaluations in)."""
    evals, iters = [], {}
    for seconds, line in lines:
        if found := EVAL_LINE.match(line):
            evals.append((int(found[1]), float(found[2]), float(found[3]), seconds))
        elif found := ITER_LINE.match(line):
            iters[int(found[1])] = (float(found[3]) / 1000, float(found[4]))
    if not evals or not iters:
        raise ValueError("nanoGPT printed no evaluation or no iteration: see its output above")
    plain_steps = [dt for n, (dt, _) in iters.items() if n % eval_interval != 0]
    typical = statistics.median(plain_steps or [dt for dt, _ in iters.values()])
    step_time = {n: (typical if n % eval_interval == 0 else dt) for n, (dt, _) in iters.items()}
    reached = [(step, wall) for step, _, val, wall in evals if val <= TARGET_LOSS]
    val_losses = [val for _, _, val, _ in evals]
    mfus = [mfu for n, (_, mfu) in iters.items() if mfu > 0]
    return {
        "model": "nanoGPT",
        "steps": max(iters) + 1,
        "final_val_loss": val_losses[-1],
        "best_val_loss": min(val_losses),
        "train_time_s": round(sum(step_time.values()), 3),
        "time_to_val_1.47_s": round(sum(t for n, t in step_time.items() if n < reached[0][0]), 3) if reached else None,
        "wall_to_val_1.47_s": round(reached[0][1], 1) if reached else None,
        "tokens_per_s": round(tokens_per_iter / typical) if typical > 0 else None,
        "mfu_percent_median": round(statistics.median(mfus), 2) if mfus else None,
        "eval_steps": [step for step, _, _, _ in evals],
        "eval_val_loss": val_losses,
    }


def eval_interval(max_iters: int | None) -> int:
    """Steps between nanoGPT's evaluations: its configuration's 250, or four evaluations in a shortened run."""
    return 250 if max_iters is None else max(1, max_iters // 4)


def command(workdir: Path, max_iters: int | None, device: str, compile: bool, eval_iters: int,
            overrides: dict | None = None) -> list[str]:
    """nanoGPT's train.py with its shakespeare_char configuration; only what the comparison needs changed:
    one log line per iteration, the evaluation batches, the device, compilation, (short runs) the steps,
    and `overrides` (nanoGPT's own configuration names, e.g. TINY)."""
    cmd = [sys.executable, "train.py", "config/train_shakespeare_char.py", "--log_interval=1",
           f"--eval_iters={eval_iters}", f"--device={device}", f"--compile={compile}", f"--out_dir={workdir / 'out'}"]
    cmd += [f"--{key}={value}" for key, value in (overrides or {}).items()]
    if device == "cpu":
        cmd.append("--dtype=float32")  # nanoGPT's default float16 only makes sense with CUDA
    if max_iters is not None:
        cmd += [f"--max_iters={max_iters}", f"--lr_decay_iters={max_iters}", f"--eval_interval={eval_interval(max_iters)}",
                f"--warmup_iters={min(100, max(1, max_iters // 10))}"]
    return cmd


def run(nanogpt_dir: Path, text_path: Path, max_iters: int | None = None, device: str = "cuda",
        compile: bool = False, eval_iters: int = 50, overrides: dict | None = None) -> dict:
    """Prepare the course's Tiny Shakespeare in nanoGPT's format, train, and return the row."""
    nanogpt_dir = Path(nanogpt_dir)
    if not (nanogpt_dir / "train.py").is_file() or not (nanogpt_dir / "config" / "train_shakespeare_char.py").is_file():
        raise FileNotFoundError(f"{nanogpt_dir} is not a nanoGPT checkout (no train.py and config/): fetch "
                                "github.com/karpathy/nanoGPT and give its folder")
    with tempfile.TemporaryDirectory(prefix="course-nanogpt-") as tmp:
        work = Path(tmp) / "nanoGPT"
        shutil.copytree(nanogpt_dir, work, ignore=shutil.ignore_patterns(".git"))
        data = work / "data" / "shakespeare_char"
        shutil.copy(text_path, data / "input.txt")
        subprocess.run([sys.executable, "prepare.py"], cwd=data, check=True, stdout=subprocess.DEVNULL)
        cmd = command(Path(tmp), max_iters, device, compile, eval_iters, overrides)
        print("nanoGPT:", " ".join(cmd[1:]), flush=True)
        start, lines = time.perf_counter(), []
        with subprocess.Popen(cmd, cwd=work, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) as proc:
            for line in proc.stdout:
                lines.append((time.perf_counter() - start, line.rstrip("\n")))
                if EVAL_LINE.match(line):
                    print("  nanoGPT", line.rstrip(), flush=True)
        if proc.returncode != 0:
            raise RuntimeError("nanoGPT's train.py failed; its last lines:\n" + "\n".join(l for _, l in lines[-15:]))
    sizes = {**SIZES, **(overrides or {})}
    row = parse_log(lines, sizes["batch_size"] * sizes["block_size"], eval_interval(max_iters))
    row.update(device=device, compile=compile, eval_batches=eval_iters, overrides=overrides or {},
               wall_time_s=round(time.perf_counter() - start, 1))
    return row


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("nanogpt_dir", type=Path)
    parser.add_argument("--max-iters", type=int, default=None, help="default: the configuration's 5000")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--compile", action="store_true")
    parser.add_argument("--eval-iters", type=int, default=50)
    parser.add_argument("--tiny", action="store_true", help="a tiny model and batch (TINY), for a CPU check")
    args = parser.parse_args(argv)
    from utils.data import dataset_path

    row = run(args.nanogpt_dir, dataset_path("tinyshakespeare"), args.max_iters, args.device, args.compile,
              args.eval_iters, TINY if args.tiny else None)
    print({k: v for k, v in row.items() if not k.startswith("eval_")})
    return 0


if __name__ == "__main__":
    sys.exit(main())
