"""`release`: build the student notebooks in notebooks/ from solutions/ with nbgrader."""
from __future__ import annotations

import re
import shutil
import tempfile
from pathlib import Path

from autograder.course.layout import RELEASE_DIR, CourseError, read_notebook, release_path, solution_path
from autograder.grading.experiments import experiment_cells
from autograder.grading.workspace import add_sources, open_workspace

MARKERS = ("BEGIN SOLUTION", "END SOLUTION", "BEGIN HIDDEN TESTS", "END HIDDEN TESTS", "BEGIN MARK SCHEME")
REGION = re.compile(
    r"### BEGIN (SOLUTION|HIDDEN TESTS)\n(.*?)### END \1", re.DOTALL
)


# The one rule for what counts as a line of a solution or a hidden test, for the release
# (`find_leaks` below), the student distribution (autograder.release.dist) and the feedback pages
# (autograder.reports.feedback): a stripped line at least this long, inside a region, that the
# notebooks do not also show outside their regions. Shorter lines ("return x", ")",
# "else:") occur in any Python code; longer ones are specific enough that finding one
# elsewhere is a leak.
MIN_SECRET_LINE = 16
REGION_KINDS = ("SOLUTION", "HIDDEN TESTS")


def visible_lines(source_nb) -> set[str]:
    """Stripped lines of a source notebook outside its solution and hidden-test regions."""
    return {line.strip() for cell in source_nb.cells for line in REGION.sub("", cell.source).splitlines()}


def secret_lines(source_nbs, kinds: tuple[str, ...] = REGION_KINDS) -> set[str]:
    """The distinctive lines (stripped) of the `kinds` regions of the source notebooks,
    less any line that one of them shows outside its regions (a reference that a visible
    check defines is no secret elsewhere)."""
    shown = set().union(*(visible_lines(nb) for nb in source_nbs))
    return {
        line.strip()
        for nb in source_nbs
        for cell in nb.cells
        for kind, body in REGION.findall(cell.source) if kind in kinds
        for line in body.splitlines()
        if len(line.strip()) >= MIN_SECRET_LINE and line.strip() not in shown
    }


def find_leaks(source_nb, release_nb) -> list[str]:
    """What of the solution or the hidden tests a release notebook still shows."""
    released = {line.strip() for cell in release_nb.cells for line in cell.source.splitlines()}
    text = "\n".join(released)
    leaks = [f"marker '### {m}'" for m in MARKERS if m in text]
    leaks += [f"line {line[:60]!r}" for line in sorted(secret_lines([source_nb]) & released)]
    return leaks


def build_release(names: list[str], out_dir: Path) -> dict[str, Path]:
    """Generate the release of each assignment into out_dir/<a>/; refuse any leak."""
    built = {}
    with tempfile.TemporaryDirectory(prefix="course-release-") as tmp:
        ws = open_workspace(tmp)
        add_sources(ws, names)
        for name in names:
            generated = ws.path("release", name)
            nb_file = generated / f"{name}.ipynb"
            source = read_notebook(solution_path(name))
            try:
                experiment_cells(source)
            except CourseError as exc:
                raise CourseError(f"{name}: {exc}") from None
            leaks = find_leaks(source, read_notebook(nb_file))
            if leaks:
                raise CourseError(f"the release of {name} leaks: " + "; ".join(leaks))
            target = out_dir / name
            if target.exists():
                shutil.rmtree(target)
            shutil.copytree(generated, target)
            built[name] = target / f"{name}.ipynb"
    return built


def release(names: list[str]) -> dict[str, Path]:
    """Regenerate notebooks/<a>/ for each assignment."""
    return build_release(names, RELEASE_DIR)


def drift(names: list[str]) -> list[str]:
    """Assignments whose committed release differs from a fresh build (empty: in sync)."""
    with tempfile.TemporaryDirectory(prefix="course-drift-") as tmp:
        fresh = build_release(names, Path(tmp))
        return [
            name
            for name, path in fresh.items()
            if not release_path(name).is_file() or read_notebook(path) != read_notebook(release_path(name))
        ]
