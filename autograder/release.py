"""`release`: build the student notebooks in notebooks/ from solutions/ with nbgrader."""
from __future__ import annotations

import re
import shutil
import tempfile
from pathlib import Path

from autograder.course import RELEASE_DIR, CourseError, read_notebook, release_path, solution_path
from autograder.workspace import add_sources, open_workspace

MARKERS = ("BEGIN SOLUTION", "END SOLUTION", "BEGIN HIDDEN TESTS", "END HIDDEN TESTS", "BEGIN MARK SCHEME")
REGION = re.compile(
    r"### BEGIN (SOLUTION|HIDDEN TESTS)\n(.*?)### END \1", re.DOTALL
)


def hidden_regions(source_nb) -> list[str]:
    """Text of every solution and hidden-test region of a source notebook."""
    regions = []
    for cell in source_nb.cells:
        for _, body in REGION.findall(cell.source):
            body = "\n".join(line.strip() for line in body.strip().splitlines() if line.strip())
            if body:
                regions.append(body)
    return regions


def find_leaks(source_nb, release_nb) -> list[str]:
    """What of the solution or the hidden tests a release notebook still shows."""
    released = "\n".join(
        "\n".join(line.strip() for line in cell.source.splitlines()) for cell in release_nb.cells
    )
    leaks = [f"marker '### {m}'" for m in MARKERS if m in released]
    for region in hidden_regions(source_nb):
        if region in released:
            first = region.splitlines()[0]
            leaks.append(f"hidden region starting {first[:60]!r}")
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
            leaks = find_leaks(read_notebook(solution_path(name)), read_notebook(nb_file))
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
