"""What grading a mutant from a fork of the run at its cell could save, at most (issue 44, part 1).

    python benchmarks/grader/late_cell_prefix.py [NN_name ...] [--repeat N]

A mutant's hand-in runs every cell before its mutated one, as the solution does. A run forked
from the solution's own run at that cell would skip that prefix, nothing else: the mutant's
own cells, nbgrader's passes, the report and the start of the processes stay. This script
grades each solution through `grade` (as `python -m autograder grade` does: sandbox, split
execution, experiments skipped), reads when each of its cells started (nbclient's
`metadata.execution` timestamps in the autograded notebook), and adds up, over the catalog's
bugs and correct-variant packs (the hand-ins `mutants.grade_mutants` grades), the time from the
first cell's start to the start of the hand-in's first mutated cell: an upper bound of what
forking would save, counted as if the fork cost nothing. Test cells run in the trusted runner
and carry no timestamps of their own; their time falls into the next timed cell's offset.
Writes benchmarks/results/late_cell_prefix.json.
"""
from __future__ import annotations

import datetime
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from autograder.course.layout import read_notebook, solution_path  # noqa: E402
from autograder.quality.mutants import default_catalogs, load_catalogs, pack_correct_variants  # noqa: E402
from autograder.grading.workspace import add_sources, add_submission, open_workspace  # noqa: E402
from benchmarks.grader.grading_time import grade_solution  # noqa: E402
from benchmarks.machine import parse_args, save  # noqa: E402


def cell_starts(notebook) -> dict[str, float]:
    """Seconds from the first timed cell's start to each graded cell's start (grade_id -> s)."""
    starts, first = {}, None
    for cell in notebook.cells:
        stamp = cell.metadata.get("execution", {}).get("iopub.execute_input")
        if stamp is None:
            continue
        at = datetime.datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()
        first = at if first is None else first
        grade_id = cell.metadata.get("nbgrader", {}).get("grade_id")
        if grade_id:
            starts[grade_id] = at - first
    return starts


def main() -> int:
    names, repeat = parse_args(__doc__, default_repeat=3)
    catalog = load_catalogs(default_catalogs())
    rows = []
    with tempfile.TemporaryDirectory(prefix="course-bench-prefix-") as tmp:
        ws = open_workspace(tmp)
        add_sources(ws, names)
        for name in names:
            runs, seconds = [], []
            for i in range(repeat + 1):  # the first run of each assignment starts its fork servers: not timed
                student = f"bench-{i}"
                add_submission(ws, student, name, solution_path(name))
                result = grade_solution(ws, name, student)
                if i == 0:
                    continue
                seconds.append(result.seconds)
                runs.append(cell_starts(read_notebook(ws.root / "autograded" / student / name / f"{name}.ipynb")))
            start = {cell: statistics.median(run.get(cell, 0.0) for run in runs) for cell in runs[0]}
            mutants = [m for m in catalog if m.assignment == name]
            hand_ins = [[m] for m in mutants if m.kind == "bug"] + pack_correct_variants(mutants)
            untimed = sorted({m.cell for hand_in in hand_ins for m in hand_in if m.cell not in start})
            prefixes = [min(start.get(m.cell, 0.0) for m in hand_in) for hand_in in hand_ins]
            rows.append({
                "assignment": name,
                "solution_hand_in_s": round(statistics.median(seconds), 2),
                "solution_runs_s": seconds,
                "last_cell_start_s": round(max(start.values()), 2),
                "mutant_hand_ins": len(hand_ins),
                "prefix_sum_s": round(sum(prefixes), 1),
                "prefix_median_s": round(statistics.median(prefixes), 2),
                "untimed_cells": untimed,
            })
            print(f"{name:<28} {len(hand_ins):>4} mutant hand-ins, prefixes {rows[-1]['prefix_sum_s']:>6.1f} s in all "
                  f"(median {rows[-1]['prefix_median_s']} s; the solution's hand-in {rows[-1]['solution_hand_in_s']} s)")
    total = sum(r["prefix_sum_s"] for r in rows)
    print(f"at most {total:.0f} worker-seconds of the proofs' grading are prefixes a fork could skip")
    print(f"saved {save('late_cell_prefix', rows)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
