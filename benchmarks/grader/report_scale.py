"""Time `report` on a large class: 1,000 hand-ins of one assignment (target: under 60 s).

    python benchmarks/grader/report_scale.py [--students 250 500 1000] [--assignment 05_self_attention] [--workspace DIR]

The class is made, not graded (grading 1,000 hand-ins takes hours on 2 cores): the synthetic
students of benchmarks/grader/similarity.py (catalog answers, about one in twenty a planted copy),
written as hand-ins into a workspace with a gradebook row each (a test cell fails where the
answer is a catalog bug or left blank), a report (status, seconds) and an executed notebook
whose failing test cells carry an error output, as nbgrader writes them. Then `report` runs
on it, timed, in this process, and its pairs are checked against the planted ones. Writes benchmarks/results/report_scale.json.
"""
from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from autograder.reports import class_page as report  # noqa: E402
from autograder.quality.mutants import default_catalogs, load_catalogs  # noqa: E402
from autograder.grading.workspace import add_sources, ensure_scripts_on_path, open_workspace  # noqa: E402
from benchmarks.machine import save  # noqa: E402
from benchmarks.grader.similarity import honest_class, plant, variants  # noqa: E402
from utils.cells import grade_id, is_answer, is_test  # noqa: E402

STATUSES = ["graded"] * 95 + ["cell-timeout"] * 2 + ["flagged", "memory-limit", "sandbox"]


def make_class(ws, assignment: str, n: int, rng: random.Random) -> set[frozenset]:
    """Write the class into `ws`; returns the planted pairs."""
    from nbgrader.api import Gradebook

    add_sources(ws, [assignment])
    pool, given = variants(assignment)
    honest = honest_class(pool, given, n - n // 20, rng)
    students, planted = dict(honest), set()
    for i, original in enumerate(rng.sample(sorted(honest), n - len(honest))):
        students[f"copy-{i:03d}"] = plant(honest[original], rng)[0]
        planted.add(frozenset((original, f"copy-{i:03d}")))
    bugs = {m.source: m.description for m in load_catalogs(default_catalogs())
            if m.assignment == assignment and m.kind == "bug"}
    release = json.loads(ws.release_path(assignment).read_text())
    ensure_scripts_on_path()
    with Gradebook(ws.db_url) as gb, warnings.catch_warnings():
        warnings.simplefilter("ignore")  # nbgrader's add_submission autoflushes early (SAWarning)
        for student, cells in students.items():
            failing = {f"test_{cell}": bugs.get(source, "the function is not implemented")
                       for cell, source in cells.items() if source in bugs or source == given[cell]}
            nb = json.loads(json.dumps(release))
            for cell in nb["cells"]:
                gid = grade_id(cell)
                if cell["cell_type"] == "code" and is_answer(cell) and gid in cells:
                    cell["source"] = cells[gid]
            ws.submission_path(student, assignment).parent.mkdir(parents=True, exist_ok=True)
            ws.submission_path(student, assignment).write_text(json.dumps(nb))
            for cell in nb["cells"]:
                if cell["cell_type"] == "code":
                    cell["execution_count"] = 1
                    if is_test(cell) and grade_id(cell) in failing:
                        cell["outputs"] = [{"output_type": "error", "ename": "AssertionError", "traceback": [],
                                            "evalue": f"{failing[grade_id(cell)]} (got {rng.random():.4f})"}]
            ws.autograded_path(student, assignment).parent.mkdir(parents=True, exist_ok=True)
            ws.autograded_path(student, assignment).write_text(json.dumps(nb))
            gb.update_or_create_student(student)
            gb.add_submission(assignment, student)
            for g in gb.find_submission_notebook(assignment, assignment, student).grades:
                g.auto_score = 0 if g.name in failing else g.max_score
            status = rng.choice(STATUSES)
            ws.report_path(student, assignment).parent.mkdir(parents=True, exist_ok=True)
            ws.report_path(student, assignment).write_text(json.dumps({
                "student": student, "assignment": assignment, "status": status, "message": "",
                "repairs": ["restored a deleted test cell"] if rng.random() < 0.05 else [], "flags": [], "notes": [],
                "seconds": round(rng.uniform(2, 6), 2)}))
        gb.db.commit()
    return planted


def run(assignment: str, students: int, seed: int, workspace: str | None) -> dict:
    with tempfile.TemporaryDirectory(prefix="report-scale-") as tmp:
        ws = open_workspace(Path(workspace) / str(students) if workspace else Path(tmp) / "ws")
        start = time.perf_counter()
        planted = make_class(ws, assignment, students, random.Random(seed))
        made = time.perf_counter() - start
        start = time.perf_counter()
        cpu = time.process_time()
        written = report.write(ws, [assignment], Path(tmp) / "report")
        seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
        reported = {frozenset(p["students"]) for p in json.loads(written[1].read_text())["similar"]}
        row = {"assignment": assignment, "students": students, "class_made_s": round(made, 1),
               "report_s": round(seconds, 1), "report_cpu_s": round(cpu, 1), "pairs": len(reported),
               "planted": len(planted), "planted_found": len(reported & planted),
               "page_kb": round(written[0].stat().st_size / 1024)}
    print(f"{students} hand-ins of {assignment}: report in {seconds:.1f} s ({cpu:.1f} CPU s), "
          f"{row['pairs']} similar pairs reported, {row['planted_found']} of the {row['planted']} planted, "
          f"page {row['page_kb']} KiB (class made in {made:.0f} s)")
    return row


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--students", type=int, nargs="+", default=[1000], help="class sizes, one run each")
    parser.add_argument("--assignment", default="05_self_attention")
    parser.add_argument("--workspace", help="keep the class here (a folder per class size; default: a temporary folder)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    rows = [run(args.assignment, n, args.seed, args.workspace) for n in args.students]
    save("report_scale", rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
