"""`mutants`: mutation testing of the graded test cells.

A catalog (YAML or JSON) is a list of entries::

    - id: sdpa-no-scale
      assignment: 05_self_attention
      cell: scaled_dot_product_attention   # grade_id of the solution cell to replace
      kind: bug                            # bug: must lose points; correct: must keep full marks
      mistake: boundary                    # optional, bugs only: which of MISTAKES it is
      description: forgets to divide the scores by sqrt(d_k)
      source: |
        def scaled_dot_product_attention(q, k, v, mask=None):
            ...

Each mutant is the solution notebook with that cell's whole source replaced, graded by
`grade` as a student's hand-in (repair, scan, sandbox, split execution, status); the correct
variants in packs, and every mutant's run stopped at its first failing test cell, since only
the verdict counts; a bug's run skips the test cells before its cell, where the solution graded
so keeps full marks (`grade_mutants`).

Every graded code cell has, for each of the usual kinds of mistake (MISTAKES), a bug tagged
with it, or a line in `not_applicable/<assignment>.yaml` saying why that mistake cannot be
made in that cell: `coverage_gaps` lists what is missing.
"""
from __future__ import annotations

import copy
import json
import os
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path

import yaml

from autograder.course.layout import MUTANTS_DIR, CourseError, assignments, read_notebook, solution_path
from autograder.grading.batch import grade
from autograder.grading.handin import GradeResult
from autograder.grading.scores import NotebookScore
from autograder.grading.workspace import Verdict, add_submission, open_workspace
from utils.cells import grade_id, is_answer

KINDS = ("bug", "correct")
REQUIRED = ("id", "assignment", "cell", "kind", "source")
# The kinds of mistake every graded code cell is audited for: a bug tagged with the kind, or a
# reason in not_applicable/ why the cell cannot have it. The first five are issue 27's; the rest
# are the kinds the held-out bugs of issue 41 fell into.
MISTAKE_MEANINGS = {
    "gradient": "a gradient cut where the output feeds training",
    "arguments": "an argument changed in place",
    "dtype": "a float64 input computed in float32, or the output's dtype changed",
    "boundary": "a boundary case: empty or length-1 input, a batch of one, the first or last position",
    "special-tokens": "special tokens or capitals in token input",
    "aliasing": "an input, or a view of one, returned where new tensors are promised (often on the "
                "path where nothing needs changing)",
    "one-path-write": "an input changed in place for some argument values only (temperature 1, a k or p "
                      "that keeps everything), or by an amount only a bit-exact comparison sees",
    "partial-gradient": "every parameter still gets a gradient but one path is cut (a detached query, a "
                        "state detached between steps): seen only against a reference's gradients",
    "size-one": "B = 1 or T = 1 breaks an output, a stored attribute or a helper's output",
    "ties": "the exact boundary of a selection: ties at the maximum, a threshold equal to a cumulative sum",
    "tolerance": "a comparison looser than the stated tolerance (relative where an absolute one is stated, "
                 "on large values)",
    "input-domain": "an input the contract admits but the course's own code never passes (other or "
                    "unsorted specials, regex metacharacters, an iterator, an empty list, the zero byte)",
}
MISTAKES = tuple(MISTAKE_MEANINGS)
NOT_APPLICABLE_DIR = MUTANTS_DIR / "not_applicable"
BASELINE = "solution"


@dataclass
class Mutant:
    id: str
    assignment: str
    cell: str
    kind: str
    source: str
    description: str = ""
    mistake: str = ""
    catalog: str = ""

    @property
    def student(self) -> str:
        """A student id for nbgrader (a folder name): the mutant id, made safe."""
        return "mutant-" + _folder_safe(self.id)


def _folder_safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_-]+", "-", name)


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
        mistake = entry.get("mistake")
        if mistake is not None and (entry["kind"] != "bug" or mistake not in MISTAKES):
            raise CourseError(f"{where} ({entry['id']}): mistake tags a bug, as one of {MISTAKES}, not {mistake!r}")
        fields = {key: str(entry[key]) for key in (*REQUIRED, "description", "mistake") if key in entry}
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


class _UniqueKeyLoader(yaml.SafeLoader):
    """YAML's safe loader, refusing a key given twice in one mapping (plain YAML keeps the last silently,
    so a merged file could hide a cell's reasons under another cell)."""

    def construct_mapping(self, node, deep=False):
        keys = [self.construct_object(key, deep=deep) for key, _ in node.value]
        for key in keys:
            if keys.count(key) > 1:
                raise yaml.constructor.ConstructorError(None, None, f"the key {key!r} appears twice",
                                                        node.start_mark)
        return super().construct_mapping(node, deep=deep)


def load_not_applicable(assignment: str) -> dict[str, dict[str, str]]:
    """cell → {mistake: why it cannot be made there}, from not_applicable/<assignment>.yaml."""
    path = NOT_APPLICABLE_DIR / f"{assignment}.yaml"
    if not path.is_file():
        return {}
    try:
        found = yaml.load(path.read_text(encoding="utf-8"), Loader=_UniqueKeyLoader) or {}
    except yaml.YAMLError as exc:
        raise CourseError(f"{path}: not valid YAML ({exc})") from None
    if not isinstance(found, dict) or not all(isinstance(v, dict) for v in found.values()):
        raise CourseError(f"{path}: expected cell: {{mistake: reason}} mappings")
    return {str(cell): {str(k): str(v) for k, v in reasons.items()} for cell, reasons in found.items()}


def coverage_gaps(assignment: str, mutants: list[Mutant]) -> list[str]:
    """What keeps the catalog from covering every kind of mistake in every graded code cell
    of `assignment`: a (cell, mistake) with neither a tagged bug nor a reason it cannot
    happen, or with both, and reasons for cells or mistakes that do not exist."""
    cells = [
        grade_id(c) for c in read_notebook(solution_path(assignment)).cells
        if c.cell_type == "code" and is_answer(c)
    ]
    reasons = load_not_applicable(assignment)
    tagged = {(m.cell, m.mistake) for m in mutants if m.assignment == assignment and m.kind == "bug" and m.mistake}
    gaps = [f"{assignment}: not_applicable names {cell!r}, which is no graded code cell" for cell in reasons if cell not in cells]
    for cell in cells:
        mine = reasons.get(cell, {})
        gaps += [f"{assignment}/{cell}: not_applicable names {k!r}, not one of {MISTAKES}" for k in mine if k not in MISTAKES]
        for mistake in MISTAKES:
            if (cell, mistake) in tagged and mistake in mine:
                gaps.append(f"{assignment}/{cell}: {mistake} has a bug mutant and a reason it cannot happen")
            elif (cell, mistake) not in tagged and mistake not in mine:
                gaps.append(f"{assignment}/{cell}: no {mistake} bug mutant and no reason it cannot happen")
    return gaps


def apply_mutant(solution_nb, cell_id: str, source: str):
    """A copy of `solution_nb` whose cell `cell_id` has `source`; None if no such cell."""
    mutated = copy.deepcopy(solution_nb)
    targets = [cell for cell in mutated.cells if grade_id(cell) == cell_id]
    if len(targets) != 1:
        return None
    targets[0].source = source
    return mutated


def _not_run(autograded: Path | None) -> set[str]:
    """The test cells a verdict-only run left unrun (after its first failing test cell)."""
    try:
        nb = read_notebook(autograded)
    except (CourseError, OSError, TypeError):
        return set()
    return {
        grade_id(cell) for cell in nb.cells if cell.cell_type == "code"
        if any(out.get("ename") == "NotRun" for out in cell.get("outputs", []))
    }


def _cells_after_a_test(notebook) -> set[str]:
    """The grade_ids of the cells that some test cell stands before."""
    cells, seen_test = set(), False
    for cell in notebook.cells:
        if seen_test and grade_id(cell):
            cells.add(grade_id(cell))
        seen_test = seen_test or (cell.cell_type == "code" and bool(cell.metadata.get("nbgrader", {}).get("grade")))
    return cells


def classify(mutant: Mutant, result: GradeResult | None) -> Outcome:
    score = None if result is None else result.score
    if score is None:
        why = "nbgrader produced no score" if result is None else f"{result.status}: {result.message}"
        return Outcome(mutant, "error", why)
    lost = [c.name for c in score.auto_cells if (c.score or 0) < c.max_score]
    unrun = _not_run(score.autograded)
    failed = ", ".join(name for name in lost if name not in unrun) + (f" (then {len(unrun)} not run)" if unrun else "")
    points = f"{score.auto_score:g}/{score.auto_max:g}" + ("" if result.status == "graded" else f" ({result.status})")
    if mutant.kind == "bug":
        if lost:
            return Outcome(mutant, "caught", f"{points}, failed {failed}")
        return Outcome(mutant, "missed", f"{points}: every test cell passed")
    if lost:
        return Outcome(mutant, "lost", f"{points}, failed {failed}")
    return Outcome(mutant, "kept", points)


def pack_correct_variants(mutants: list[Mutant]) -> list[list[Mutant]]:
    """The correct variants of `mutants` in packs of at most one per cell (the first pack
    takes each cell's first variant, the second its second, ...): a pack is graded as one
    hand-in, with all its cells replaced at once."""
    packs: list[list[Mutant]] = []
    for mutant in (m for m in mutants if m.kind == "correct"):
        home = next((p for p in packs if all(m.cell != mutant.cell for m in p)), None)
        if home is None:
            packs.append(home := [])
        home.append(mutant)
    return packs


def _grade_batch(
    assignment: str, submissions: dict, workspace: Path | None, jobs: int | None, verdict_only: dict | None = None
) -> dict[str, GradeResult]:
    """Grade the hand-ins `submissions` (student → notebook or path) in one workspace; those
    in `verdict_only` (student → Verdict) in verdict-only runs."""
    jobs = max(1, min(jobs or os.cpu_count() or 1, len(submissions)))
    with tempfile.TemporaryDirectory(prefix="course-mutants-") as tmp:
        ws = open_workspace(workspace or tmp, scratch=True)
        for student, notebook in submissions.items():
            add_submission(ws, student, assignment, notebook)
        return {r.student: r for r in grade(ws, [assignment], jobs=jobs, verdict_only=verdict_only)}


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

    The hand-ins go into one workspace and are graded by `grade`, `jobs` at a time (default:
    one per core): repaired, scanned, run in the sandbox and the trusted runner, and given a
    status exactly as a student's hand-in. Each bug is graded alone. The correct variants
    are graded in packs (`pack_correct_variants`): a pack at full marks keeps every variant
    in it; the variants of a pack that loses points are graded again one by one (in a
    second workspace beside `workspace`), so that each outcome is the variant's own.
    The bugs and the variants need a verdict only (do they lose points?): their runs stop at
    the first test cell that fails. A bug's run also skips the test cells before its cell
    (Verdict.tests_from), once the solution graded so, from that cell, keeps full marks (a
    "solution-tests-from-<cell>" hand-in of the same batch, for each cell that a test cell stands
    before); where it does not, that cell's bugs are graded again with every test cell. The
    solution and the `extra` hand-ins run whole.
    """
    solution = read_notebook(solution_path(assignment))
    outcomes: list[Outcome] = []
    alone_notebooks = {}  # student -> the solution with just that mutant's cell replaced
    for mutant in mutants:
        mutated = apply_mutant(solution, mutant.cell, mutant.source)
        if mutated is None:
            outcomes.append(Outcome(mutant, "error", f"{assignment} has no solution cell {mutant.cell!r}"))
        else:
            alone_notebooks[mutant.student] = mutated
    applicable = [m for m in mutants if m.student in alone_notebooks]
    submissions = {BASELINE: solution, **(extra or {})}
    submissions.update({m.student: alone_notebooks[m.student] for m in applicable if m.kind == "bug"})
    packs = {f"correct-pack-{i + 1}": pack for i, pack in enumerate(pack_correct_variants(applicable))}
    for student, pack in packs.items():
        notebook = solution
        for mutant in pack:
            notebook = apply_mutant(notebook, mutant.cell, mutant.source)
        submissions[student] = notebook
    verdict_only = {s: Verdict() for s in submissions if s not in {BASELINE, *(extra or {})}}
    bugs = [m for m in applicable if m.kind == "bug"]
    after_a_test = _cells_after_a_test(solution)  # (the others skip nothing: the solution's own run is their guard)
    skipping = {f"solution-tests-from-{_folder_safe(m.cell)}": m.cell for m in bugs if m.cell in after_a_test}
    submissions.update({guard: solution for guard in skipping})
    verdict_only.update({guard: Verdict(tests_from=cell) for guard, cell in skipping.items()})
    verdict_only.update({m.student: Verdict(tests_from=m.cell) for m in bugs})
    results = _grade_batch(assignment, submissions, workspace, jobs, verdict_only)
    unsafe = set()  # cells whose earlier test cells cannot be skipped
    for guard, cell in skipping.items():
        result = results.pop(guard, None)
        if result is None or result.score is None or not result.score.full_marks:
            unsafe.add(cell)
    again = {m.student: alone_notebooks[m.student] for m in bugs if m.cell in unsafe}
    alone = {}
    for student, pack in packs.items():
        result = results.pop(student, None)
        score = None if result is None else result.score
        if score is not None and score.full_marks:
            results.update({m.student: result for m in pack})
        else:
            alone.update({m.student: alone_notebooks[m.student] for m in pack})
    alone.update(again)
    if alone:
        second = None if workspace is None else Path(workspace).with_name(Path(workspace).name + "-alone")
        results.update(_grade_batch(assignment, alone, second, jobs, {s: Verdict() for s in alone}))
    outcomes.extend(classify(m, results.get(m.student)) for m in applicable)
    students = {BASELINE, *(extra or {}), *(m.student for m in applicable)}
    return outcomes, {s: r.score for s, r in results.items() if s in students and r.score is not None}


def run_assignment(assignment: str, mutants: list[Mutant], jobs: int | None = None) -> list[Outcome]:
    """Outcomes of the mutants of one assignment, once its solution has full marks."""
    with tempfile.TemporaryDirectory(prefix="course-mutants-") as tmp:  # kept until the outcomes are read
        outcomes, scores = grade_mutants(assignment, mutants, workspace=Path(tmp) / "ws", jobs=jobs)
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
