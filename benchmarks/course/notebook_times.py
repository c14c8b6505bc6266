"""Time each solution notebook run top to bottom, in full mode and in fast mode.

    python benchmarks/course/notebook_times.py [NN_name ...] [--repeat N]

Target (COURSE_SPEC section 7): notebooks 01–06 ≤ 90 s each on a 2-core CPU in full
mode; 07 ≤ 120 s in fast mode. Writes benchmarks/results/notebook_times.json.
"""
from __future__ import annotations

import os
import shutil
import statistics
import sys
import tempfile
import time
from unittest import mock
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import nbformat  # noqa: E402
from nbclient import NotebookClient  # noqa: E402

from autograder.course.layout import SOLUTIONS_DIR, grade_id  # noqa: E402
from autograder.grading.workspace import install_kernelspec, kernel_env  # noqa: E402
from benchmarks.machine import parse_args, save  # noqa: E402

TARGET_S = {"full": 90, "fast": 120}


def run_once(name: str, fast: bool) -> tuple[float, list[str], nbformat.NotebookNode]:
    """Seconds to execute the solution of `name` (kernel start included), the ids of
    cells that raised, and the executed notebook."""
    with tempfile.TemporaryDirectory(prefix="course-bench-") as tmp:
        work = Path(tmp) / name
        shutil.copytree(SOLUTIONS_DIR / name, work)
        install_kernelspec(Path(tmp))
        env = kernel_env(Path(tmp))
        env["MPLBACKEND"] = "agg"
        env.pop("COURSE_FAST", None)
        if fast:
            env["COURSE_FAST"] = "1"
        # The kernelspec lookup and the kernel itself both read os.environ.
        with mock.patch.dict(os.environ, env, clear=True):
            nb = nbformat.read(work / f"{name}.ipynb", as_version=4)
            # Killed when done: a graceful shutdown sometimes hangs in ipykernel 7 (3 s, not the notebook's time).
            client = NotebookClient(nb, timeout=600, allow_errors=True, resources={"metadata": {"path": str(work)}},
                                    shutdown_kernel="immediate")
            start = time.perf_counter()
            client.execute()
            seconds = time.perf_counter() - start
    errors = [
        grade_id(cell) or f"cell {i}"
        for i, cell in enumerate(nb.cells)
        if cell.cell_type == "code" and any(o.get("output_type") == "error" for o in cell.outputs)
    ]
    return seconds, errors, nb


def main() -> int:
    names, repeat = parse_args(__doc__, default_repeat=1)
    rows = []
    for name in names:
        for mode in ("full", "fast"):
            times, errors = [], []
            for _ in range(repeat):
                seconds, errors, _ = run_once(name, fast=mode == "fast")
                times.append(seconds)
            row = {
                "assignment": name,
                "mode": mode,
                "median_s": round(statistics.median(times), 1),
                "runs_s": [round(t, 1) for t in times],
                "target_s": TARGET_S[mode],
                "cells_with_errors": errors,
            }
            rows.append(row)
            print(f"{name:<28} {mode:<4} {row['median_s']:>6.1f} s  (target ≤ {TARGET_S[mode]} s)"
                  + (f"  ERRORS in {errors}" if errors else ""))
    print(f"saved {save('notebook_times', rows)}")
    return 1 if any(r["cells_with_errors"] for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
