"""`mutants`: mutation testing of the graded test cells.

A catalog (YAML or JSON) is a list of entries::

    - id: sdpa-no-scale
      assignment: 05_self_attention
      cell: scaled_dot_product_attention   # grade_id of the solution cell to replace
      kind: bug                            # bug: must lose points; correct: must keep full marks
      description: forgets to divide the scores by sqrt(d_k)
      source: |
        def scaled_dot_product_attention(q, k, v, mask=None):
            ...

Each mutant is the solution notebook with that cell's whole source replaced, graded
through nbgrader like any hand-in.
"""
from __future__ import annotations

import copy
import json
import os
import re
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import yaml

from autograder import ledger
from autograder.course import MUTANTS_DIR, CourseError, assignments, grade_id, read_notebook, solution_path
from autograder.scores import NotebookScore, read_scores
from autograder.workspace import add_sources, add_submission, autograde, open_workspace

KINDS = ("bug", "correct")
REQUIRED = ("id", "assignment", "cell", "kind", "source")
BASELINE = "solution"


@dataclass
class Mutant:
    id: str
    assignment: str
    cell: str
    kind: str
    source: str
    description: str = ""
    catalog: str = ""

    @property
    def student(self) -> str:
        """A student id for nbgrader (a folder name): the mutant id, made safe."""
        return "mutant-" + re.sub(r"[^A-Za-z0-9_-]+", "-", self.id)


@dataclass
class Outcome:
    mutant: Mutant
    status: str                  # caught | missed | kept | lost | error
    detail: str = ""

    @property
    def ok(self) -> bool:
        return self.status in ("caught", "kept")


def default_catalogs() -> list[Path]:
    return sorted(p for p in MUTANTS_DIR.glob("*") if p.suffix in (".yaml", ".yml", ".json"))


def load_catalog(path: Path) -> list[Mutant]:
    """Parse and validate one catalog file; any defect is a CourseError naming the entry."""
    path = Path(path)
    if not path.is_file():
        raise CourseError(f"{path}: no such catalog file")
    try:
        text = path.read_text(encoding="utf-8")
        entries = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    except (yaml.YAMLError, json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise CourseError(f"{path}: not a valid catalog ({exc})") from None
    if not isinstance(entries, list):
        raise CourseError(f"{path}: a catalog is a list of mutants, found {type(entries).__name__}")
    mutants = []
    for index, entry in enumerate(entries):
        where = f"{path}, entry {index + 1}"
        if not isinstance(entry, dict):
            raise CourseError(f"{where}: expected a mapping with keys {', '.join(REQUIRED)}")
        missing = [key for key in REQUIRED if not entry.get(key)]
        if missing:
            raise CourseError(f"{where} ({entry.get('id', 'no id')}): missing {', '.join(missing)}")
        if entry["kind"] not in KINDS:
            raise CourseError(f"{where} ({entry['id']}): kind must be one of {KINDS}, not {entry['kind']!r}")
        fields = {key: str(entry[key]) for key in (*REQUIRED, "description") if key in entry}
        mutants.append(Mutant(catalog=str(path), **fields))
    return mutants


def load_catalogs(paths: list[Path]) -> list[Mutant]:
    mutants = [m for path in paths for m in load_catalog(path)]
    seen: dict[str, str] = {}
    for m in mutants:
        if m.id in seen:
            raise CourseError(f"mutant id {m.id!r} appears twice ({seen[m.id]} and {m.catalog})")
        seen[m.id] = m.catalog
    return mutants


def apply_mutant(solution_nb, cell_id: str, source: str):
    """A copy of `solution_nb` whose cell `cell_id` has `source`; None if no such cell."""
    mutated = copy.deepcopy(solution_nb)
    targets = [cell for cell in mutated.cells if grade_id(cell) == cell_id]
    if len(targets) != 1:
        return None
    targets[0].source = source
    return mutated


def classify(mutant: Mutant, score: NotebookScore | None) -> Outcome:
    if score is None:
        return Outcome(mutant, "error", "nbgrader produced no score")
    lost = [c.name for c in score.auto_cells if (c.score or 0) < c.max_score]
    points = f"{score.auto_score:g}/{score.auto_max:g}"
    if mutant.kind == "bug":
        if lost:
            return Outcome(mutant, "caught", f"{points}, failed {', '.join(lost)}")
        return Outcome(mutant, "missed", f"{points}: every test cell passed")
    if lost:
        return Outcome(mutant, "lost", f"{points}, failed {', '.join(lost)}")
    return Outcome(mutant, "kept", points)


def grade_mutants(
    assignment: str,
    mutants: list[Mutant],
    extra: dict | None = None,
    workspace: Path | None = None,
    jobs: int | None = None,
) -> tuple[list[Outcome], dict[str, NotebookScore]]:
    """Grade the solution, every mutant and the `extra` hand-ins (student → notebook or
    path) of one assignment; returns the mutants' outcomes and every score by student
    ("solution" is the unchanged solution).

    The hand-ins are dealt round-robin to `jobs` workspaces (default: one per core),
    graded side by side, each with one nbgrader run.
    """
    solution = read_notebook(solution_path(assignment))
    outcomes: list[Outcome] = []
    submissions = {BASELINE: solution, **(extra or {})}
    graded = []
    for mutant in mutants:
        mutated = apply_mutant(solution, mutant.cell, mutant.source)
        if mutated is None:
            outcomes.append(Outcome(mutant, "error", f"{assignment} has no solution cell {mutant.cell!r}"))
            continue
        submissions[mutant.student] = mutated
        graded.append(mutant)
    jobs = max(1, min(jobs or os.cpu_count() or 1, len(submissions)))
    items = list(submissions.items())
    with tempfile.TemporaryDirectory(prefix="course-mutants-") as tmp:
        base = Path(workspace or tmp)
        chunks = [(base / f"job-{i}", dict(items[i::jobs])) for i in range(jobs)]
        tests = ledger.test_cells(solution)
        with ThreadPoolExecutor(jobs) as pool:
            results = list(pool.map(lambda chunk: _grade_chunk(assignment, *chunk, tests), chunks))
        scores = {s.student: s for chunk_scores, _ in results for s in chunk_scores}
        events = {student: e for _, chunk_events in results for student, e in chunk_events.items()}
    _apply_ledger(scores, events, tests)
    outcomes.extend(classify(m, scores.get(m.student)) for m in graded)
    return outcomes, scores


def _grade_chunk(assignment: str, root: Path, submissions: dict, tests: dict):
    """Scores of one nbgrader run over `submissions`, and the guard's events by student."""
    from autograder.sandbox import Settings

    ws = open_workspace(root)
    add_sources(ws, [assignment])
    for student, notebook in submissions.items():
        add_submission(ws, student, assignment, notebook)
    logs: list[list[dict]] = []
    autograde(ws, assignment, settings=Settings(test_cells=sorted(tests)), keep=logs)
    events: dict[str, list[dict]] = {}
    for log in logs:
        events.setdefault(ledger.session_student(log) or "", []).extend(log)
    return read_scores(ws, assignment), events


def _apply_ledger(scores: dict, events: dict, tests: dict) -> None:
    """Zero, as `grade` does, the test cells whose verdicts differ from the solution's."""
    if BASELINE not in events:
        return
    expected = {d: v["lines"] for d, v in ledger.verdicts(events[BASELINE]).items()}
    for student, score in scores.items():
        reasons = ledger.judge(events.get(student, []), tests, expected)
        for cell in score.cells:
            if cell.name in reasons and (cell.score or 0) > 0:
                cell.score = 0.0


def run_assignment(assignment: str, mutants: list[Mutant], jobs: int | None = None) -> list[Outcome]:
    """Outcomes of the mutants of one assignment, once its solution has full marks."""
    outcomes, scores = grade_mutants(assignment, mutants, jobs=jobs)
    baseline = scores.get(BASELINE)
    if baseline is None or not baseline.full_marks:
        detail = "no score" if baseline is None else f"{baseline.auto_score:g}/{baseline.auto_max:g}"
        raise CourseError(f"the solution of {assignment} does not get full marks ({detail}); fix it first")
    return outcomes


def run(catalogs: list[Path] | None = None, only: list[str] | None = None, jobs: int | None = None) -> list[Outcome]:
    """Run every mutant of the given catalogs (default: the project's own)."""
    mutants = load_catalogs(catalogs if catalogs else default_catalogs())
    known = set(assignments())
    outcomes = [
        Outcome(m, "error", f"no assignment named {m.assignment!r}") for m in mutants if m.assignment not in known
    ]
    targets = sorted({m.assignment for m in mutants if m.assignment in known})
    for assignment in targets:
        if only and assignment not in only:
            continue
        outcomes.extend(run_assignment(assignment, [m for m in mutants if m.assignment == assignment], jobs))
    return outcomes


def report(outcomes: list[Outcome]) -> str:
    lines = []
    for assignment in sorted({o.mutant.assignment for o in outcomes}):
        mine = [o for o in outcomes if o.mutant.assignment == assignment]
        bugs = [o for o in mine if o.mutant.kind == "bug"]
        correct = [o for o in mine if o.mutant.kind == "correct"]
        lines.append(
            f"{assignment}: {sum(o.status == 'caught' for o in bugs)}/{len(bugs)} bugs caught, "
            f"{sum(o.status == 'kept' for o in correct)}/{len(correct)} correct variants at full marks"
        )
        for o in mine:
            mark = "ok  " if o.ok else "FAIL"
            lines.append(f"  {mark} {o.status:<7} {o.mutant.kind:<7} {o.mutant.id}: {o.detail}")
    return "\n".join(lines)
