"""CS336's optimizer tests against notebook 07's AdamW and lr_at, through a thin adapter (issue 56).

    python benchmarks/course/cs336_adamw.py

CS336 (Stanford, spring 2025) assignment 1 tests a student's AdamW with `test_adamw` (1,000 steps of
a Linear(3, 2) from lr=1e-3, weight_decay=0.01, against torch.optim.AdamW within atol=1e-4, or
against its own reference's snapshot) and the schedule with `test_get_lr_cosine_schedule`. This
script copies CS336's tests/__init__.py, conftest.py and test_optimizer.py (and the snapshots they
read) out of a bare git mirror of stanford-cs336/assignment1-basics (CS336_MIRROR, default
/work/.mirror/stanford-cs336+assignment1-basics/repo) into a temporary folder, never into this
repository, writes an adapters.py there that hands CS336's tests the solution's `AdamW` class and
`lr_at` (CS336's cosine_cycle_iters is lr_at's max_steps), and runs pytest on them. Without the
mirror the row says so. Writes benchmarks/results/cs336_adamw.json.
"""
from __future__ import annotations

import os
import subprocess
import sys
import tarfile
import tempfile
from io import BytesIO
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from benchmarks.machine import save  # noqa: E402

CS336 = Path(os.environ.get("CS336_MIRROR", "/work/.mirror/stanford-cs336+assignment1-basics/repo"))
FILES = ["tests/__init__.py", "tests/conftest.py", "tests/test_optimizer.py", "tests/_snapshots"]
ADAPTER = '''"""CS336's adapter functions, answered by notebook 07's solution (written by benchmarks/course/cs336_adamw.py)."""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from benchmarks.course.solution_cells import solution_namespace

_ns = solution_namespace("07_transformer", ["lr_at", "AdamW"], namespace={"torch": torch, "nn": nn, "F": F, "math": math})


def get_adamw_cls():
    return _ns["AdamW"]


def run_get_lr_cosine_schedule(it, max_learning_rate, min_learning_rate, warmup_iters, cosine_cycle_iters):
    return _ns["lr_at"](it, warmup_iters, cosine_cycle_iters, max_learning_rate, min_learning_rate)
'''


def main() -> None:
    if not (CS336 / "HEAD").is_file():
        path = save("cs336_adamw", [{"skipped": f"no CS336 mirror at {CS336} (set CS336_MIRROR)"}])
        print(f"skipped: no CS336 mirror at {CS336}; wrote {path}")
        return
    commit = subprocess.run(["git", "--git-dir", str(CS336), "rev-parse", "HEAD"], capture_output=True, text=True,
                            check=True).stdout.strip()
    archive = subprocess.run(["git", "--git-dir", str(CS336), "archive", "HEAD", *FILES], capture_output=True,
                             check=True).stdout
    with tempfile.TemporaryDirectory(prefix="cs336-") as tmp:
        with tarfile.open(fileobj=BytesIO(archive)) as tar:
            tar.extractall(tmp, filter="data")
        (Path(tmp) / "tests" / "adapters.py").write_text(ADAPTER)
        env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{tmp}"}
        proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:randomly",
                               "tests/test_optimizer.py", "-o", "addopts=", "-rA"], cwd=tmp, env=env,
                              capture_output=True, text=True)
    lines = [line for line in proc.stdout.splitlines() if line.startswith(("PASSED", "FAILED", "ERROR"))]
    summary = proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else proc.stderr[-500:]
    print("\n".join(lines) or proc.stdout[-3000:], "\n", summary)
    path = save("cs336_adamw", [{"cs336_commit": commit, "tests": lines, "summary": summary,
                                 "exit_code": proc.returncode}])
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
