"""`demo`: the whole pipeline, offline, on the course's own notebooks.

For every assignment it builds the release, hands in three demo submissions (the
solution, the blank release, and a buggy one made from catalog mutants), grades them
through nbgrader and prints the score table.
"""
from __future__ import annotations

import tempfile
from pathlib import Path

from autograder.course.layout import CourseError, assignments, read_notebook, solution_path
from autograder.grading.batch import grade, score_table
from autograder.grading.handin import GradeResult
from autograder.quality.mutants import apply_mutant, default_catalogs, load_catalogs
from autograder.grading.workspace import add_sources, add_submission, open_workspace

BUGS_IN_DEMO = 3
STUDENTS = ("demo-solution", "demo-buggy", "demo-blank")  # the order of the score table
DEMO_JOBS = 2  # hand-ins graded at a time (a laptop or the 2-core CI machine)


def buggy_notebook(assignment: str):
    """The solution with up to BUGS_IN_DEMO catalog bugs, each in a different cell."""
    nb = read_notebook(solution_path(assignment))
    used = set()
    for mutant in load_catalogs(default_catalogs()):
        if mutant.assignment != assignment or mutant.kind != "bug" or mutant.cell in used:
            continue
        mutated = apply_mutant(nb, mutant.cell, mutant.source)
        if mutated is not None:
            nb, used = mutated, used | {mutant.cell}
        if len(used) == BUGS_IN_DEMO:
            break
    return nb, sorted(used)


def demo(workspace: Path | None = None) -> tuple[list[GradeResult], list[str]]:
    """Grade the demo submissions; returns the results and the problems found."""
    names = assignments()
    if not names:
        raise CourseError("the course has no assignments under solutions/")
    with tempfile.TemporaryDirectory(prefix="course-demo-") as tmp:
        ws = open_workspace(workspace or tmp)
        add_sources(ws, names)
        solution, buggy, blank = STUDENTS
        for name in names:
            add_submission(ws, solution, name, solution_path(name))
            add_submission(ws, blank, name, ws.release_path(name))
            nb, cells = buggy_notebook(name)
            if cells:
                add_submission(ws, buggy, name, nb)
                print(f"{buggy} for {name}: bugs in {', '.join(cells)}")
        results = grade(ws, names, jobs=DEMO_JOBS)
    return results, check_demo(results)


def check_demo(results: list[GradeResult]) -> list[str]:
    """What in the demo contradicts the pipeline's promises (empty: all as expected)."""
    solution, buggy, blank = STUDENTS
    problems = []
    for r in results:
        if r.score is None:
            problems.append(f"{r.assignment} {r.student}: {r.status} {r.message}")
        elif r.student == solution and not r.score.full_marks:
            problems.append(f"{r.assignment}: the solution does not get full marks")
        elif r.student == blank and r.score.auto_score != 0:
            problems.append(f"{r.assignment}: the blank release scores {r.score.auto_score:g}, not 0")
        elif r.student == buggy and r.score.full_marks:
            problems.append(f"{r.assignment}: the buggy submission gets full marks")
    return problems


def print_demo(results: list[GradeResult], problems: list[str]) -> None:
    print(score_table(sorted(results, key=lambda r: (r.assignment, STUDENTS.index(r.student)))))
    print()
    if problems:
        print("The demo found problems:\n  " + "\n  ".join(problems))
    else:
        print("As expected: the solution gets full marks, the blank release 0, the buggy hand-in in between.")
