"""The cells every notebook shares on the students' side, written from ONE address.

`python -m autograder student-cells` rewrites, in every solution notebook:

* a markdown cell at the top with the "Open in Colab" badge of the notebook;
* the box of the course's conventions (utils.conventions.RULES) after the title cell (the
  first markdown cell after the setup cell);
* the bootstrap at the start of the locked setup cell (before its `from utils...`
  imports): in Colab it clones the student distribution and calls
  `utils.colab.prepare()`; elsewhere it only lets Python find the `utils` of the course
  folder the notebook sits in;
* a locked last cell that calls `utils.submission.check_submission()`;

and the blocks of badges and conventions in README.md; then it regenerates the release and the
manifest (`utils/course_manifest.json`) that check_submission() compares against and
that carries pyproject's run-time requirements to `utils.colab.prepare()`.
It is idempotent: run it again after adding a notebook or changing the address.
The address, branch and GPU notebooks come from `[tool.course]` in pyproject.toml
(read by `autograder.course.config`).
"""
from __future__ import annotations

import copy
import json
import re
from pathlib import Path

import nbformat

from autograder.course.config import PLACEHOLDER_MARK, CourseConfig, load_config, requirements
from autograder.course.layout import REPO_ROOT, CourseError, read_notebook, release_path, solution_path
from utils.cells import grade_id
from utils.conventions import conventions_markdown

README = REPO_ROOT / "README.md"
MANIFEST = REPO_ROOT / "utils" / "course_manifest.json"

BADGE_ID = "colab-badge"
CONVENTIONS_ID = "conventions"
CHECK_ID = "check-submission"
CHECK_GRADE_ID = "check_submission"
BOOT_BEGIN = "# >>> course bootstrap"
BOOT_END = "# <<< course bootstrap"
README_BEGIN = "<!-- colab-badges: written by `python -m autograder student-cells` -->"
README_END = "<!-- /colab-badges -->"
CONVENTIONS_BEGIN = "<!-- conventions: written by `python -m autograder student-cells` from utils/conventions.py -->"
CONVENTIONS_END = "<!-- /conventions -->"
BADGE_IMAGE = "https://colab.research.google.com/assets/colab-badge.svg"


# ---------------------------------------------------------------- the generated cells


def badge_source(name: str, config: CourseConfig) -> str:
    text = (
        f"[![Open In Colab]({BADGE_IMAGE})]({config.colab_url(name)})\n\n"
        "*In Colab: run the first code cell, which fetches the course's `utils` (and, in the last "
        "notebook, asks for a GPU). Locally: open this file in JupyterLab from the course folder.*"
    )
    if PLACEHOLDER_MARK in config.repository:
        text += (
            "\n\n**Instructors:** this copy still carries the placeholder course address "
            f"(`{PLACEHOLDER_MARK}`), so the badge leads nowhere and Colab cannot fetch the course. Set "
            "`repository` under `[tool.course]` in `pyproject.toml` to the public repository your students "
            "open (the student distribution, `python -m autograder dist`), then run "
            "`python -m autograder student-cells`, which rewrites this cell and the setup cell of every notebook."
        )
    return text


# While the course address is the placeholder, Colab cannot fetch the course: the setup cell uses a copy
# of the course folder (utils/ inside) in the session's folder or up to two levels deep in a mounted
# Drive, and otherwise says exactly what to do.
PLACEHOLDER_SEARCH = [
    "        import glob  # the course address is not set: look for a copy of the course folder",
    "        _drive = os.path.join(os.getcwd(), 'drive', 'MyDrive')",
    "        _places = [os.getcwd()] + sorted(glob.glob(os.path.join(_drive, '*'))) + sorted(glob.glob(os.path.join(_drive, '*', '*')))",
    "        _course = next((p for p in _places if os.path.isfile(os.path.join(p, 'utils', '__init__.py'))), None)",
    "        if _course is None:",
    "            raise RuntimeError('The course address is not set in this notebook (COURSE_REPOSITORY above), so the course '",
    "                               'cannot be fetched. Ask your instructor for the course link (instructors: set repository '",
    "                               'under [tool.course] in pyproject.toml and run python -m autograder student-cells), or '",
    "                               'put the course folder '",
    "                               '(the one that holds utils/ and datasets/) in your Google Drive, mount the Drive (Files '",
    "                               'panel, Mount Drive) and run this cell again.')",
    "        print('Using the course folder', _course)",
]


def bootstrap_block(name: str, config: CourseConfig, repository: str | None = None) -> str:
    """The first lines of the setup cell. `repository` overrides the address (tests use a local clone)."""
    url = repository or config.repository
    branch = "" if repository else f"'--branch', {config.branch!r}, "
    want_gpu = name in config.gpu_notebooks
    return "\n".join([
        f"{BOOT_BEGIN} (written by `python -m autograder student-cells`; the same in every notebook)",
        "# In Google Colab: fetch the course's utils and dataset registry from COURSE_REPOSITORY and install",
        "# only what Colab lacks (never torch). Elsewhere: use the utils of the course folder this notebook is in.",
        f"COURSE_REPOSITORY = {url!r}",
        "import os, subprocess, sys",
        "try:",
        "    import google.colab  # noqa: F401  (only Colab has it)",
        "    _course = os.path.abspath(COURSE_REPOSITORY.rstrip('/').split('/')[-1].removesuffix('.git'))",
        "    if not os.path.isdir(os.path.join(_course, 'utils')):",
        *(PLACEHOLDER_SEARCH if PLACEHOLDER_MARK in url else [
            "        print('Fetching the course from', COURSE_REPOSITORY)",
            f"        subprocess.run(['git', 'clone', '--quiet', '--depth', '1', {branch}COURSE_REPOSITORY, _course], check=True)",
        ]),
        "    sys.path.insert(0, _course)",
        "    from utils.colab import prepare",
        f"    prepare(want_gpu={want_gpu})",
        "except ModuleNotFoundError as _error:",
        "    if not (_error.name or '').startswith('google'):",
        "        raise",
        "    _course = os.getcwd()",
        "    while not os.path.isfile(os.path.join(_course, 'datasets', 'registry.json')) and os.path.dirname(_course) != _course:",
        "        _course = os.path.dirname(_course)",
        "    if os.path.isfile(os.path.join(_course, 'utils', '__init__.py')) and _course not in sys.path:",
        "        sys.path.insert(0, _course)",
        BOOT_END,
    ])


def check_cell_source() -> str:
    return (
        "# Before you hand in (locked): checks the notebook as saved, the way the grader will read it, and\n"
        "# reruns the visible self-checks. Save first (Ctrl+S; Colab saves by itself), then run this cell.\n"
        "from utils.submission import check_submission\n"
        "check_submission()"
    )


def _badge_cell(name, config):
    cell = nbformat.v4.new_markdown_cell(badge_source(name, config), id=BADGE_ID)
    cell.metadata["course"] = {"generated": "colab-badge"}
    return cell


def conventions_source() -> str:
    """The conventions box: a quotation block, so that it stands apart from the notebook's own text."""
    return "\n".join("> " + line if line else ">" for line in conventions_markdown().split("\n"))


def _conventions_cell():
    cell = nbformat.v4.new_markdown_cell(conventions_source(), id=CONVENTIONS_ID)
    cell.metadata["course"] = {"generated": "conventions"}
    return cell


def _title_index(cells) -> int:
    """The index of the title cell: the first markdown cell after the setup cell."""
    setup = next(i for i, c in enumerate(cells) if grade_id(c) == "setup")
    return next((i for i in range(setup + 1, len(cells)) if cells[i].cell_type == "markdown"), setup)


def _check_cell():
    cell = nbformat.v4.new_code_cell(check_cell_source(), id=CHECK_ID)
    cell.metadata["nbgrader"] = {
        "grade": False, "grade_id": CHECK_GRADE_ID, "locked": True,
        "schema_version": 3, "solution": False, "task": False,
    }
    return cell


def _generated(cell, kind: str) -> bool:
    return cell.get("metadata", {}).get("course", {}).get("generated") == kind


def _strip_bootstrap(source: str) -> str:
    start = source.find(BOOT_BEGIN)
    if start < 0:
        return source
    end = source.find(BOOT_END, start)
    if end < 0:
        raise CourseError("the setup cell has the start of a course bootstrap but not its end marker")
    end = source.find("\n", end)
    return source[:start] + (source[end + 1:] if end >= 0 else "")


def _with_bootstrap(source: str, block: str) -> str:
    """Insert `block` after the setup cell's leading comment lines (before any code)."""
    lines = _strip_bootstrap(source).split("\n")
    head = 0
    while head < len(lines) and lines[head].startswith("#"):
        head += 1
    return "\n".join(lines[:head] + block.split("\n") + lines[head:])


IMPORTS_UTILS = re.compile(r"^(import utils\b|from utils\b)", re.MULTILINE)


def _imports_utils_after_bootstrap(source: str) -> bool:
    end = source.find(BOOT_END)
    return end >= 0 and IMPORTS_UTILS.search(source[end:]) is not None


def apply(nb, name: str, config: CourseConfig, repository: str | None = None):
    """A copy of notebook `nb` with the badge, bootstrap and check cells in canonical form."""
    nb = copy.deepcopy(nb)
    cells = [c for c in nb.cells if not _generated(c, "colab-badge") and not _generated(c, "conventions")
             and grade_id(c) != CHECK_GRADE_ID]
    setup = [c for c in cells if grade_id(c) == "setup"]
    if len(setup) != 1:
        raise CourseError(f"{name}: expected one setup cell (grade_id 'setup'), found {len(setup)}")
    setup_source = setup[0].source
    if not IMPORTS_UTILS.search(_strip_bootstrap(setup_source)):
        raise CourseError(f"{name}: the setup cell imports nothing from utils")
    setup[0].source = _with_bootstrap(setup_source, bootstrap_block(name, config, repository))
    if not _imports_utils_after_bootstrap(setup[0].source):
        raise CourseError(f"{name}: the setup cell must import from utils after its leading comments")
    title = _title_index(cells)
    nb.cells = [_badge_cell(name, config)] + cells[:title + 1] + [_conventions_cell()] + cells[title + 1:] + [_check_cell()]
    return nb


def problems(nb, name: str, config: CourseConfig) -> list[str]:
    """How `nb` differs from the canonical form (empty: canonical)."""
    found = []
    if not nb.cells or not _generated(nb.cells[0], "colab-badge") or nb.cells[0].source != badge_source(name, config):
        found.append("the first cell is not the canonical Open in Colab badge")
    if not nb.cells or grade_id(nb.cells[-1]) != CHECK_GRADE_ID or nb.cells[-1].source != check_cell_source():
        found.append("the last cell is not the canonical check_submission() cell")
    setup = [c for c in nb.cells if grade_id(c) == "setup"]
    if len(setup) != 1 or bootstrap_block(name, config) not in setup[0].source:
        found.append("the setup cell does not start with the canonical course bootstrap")
    elif not _imports_utils_after_bootstrap(setup[0].source):
        found.append("the setup cell does not import utils after the bootstrap")
    boxes = [i for i, c in enumerate(nb.cells) if _generated(c, "conventions")]
    others = [c for c in nb.cells if not _generated(c, "conventions")]
    if len(boxes) != 1 or nb.cells[boxes[0]].source != conventions_source() or (
            setup and boxes[0] != _title_index(others) + 1):
        found.append("the conventions box is missing, changed or not right after the title cell")
    count = sum(grade_id(c) == CHECK_GRADE_ID for c in nb.cells)
    if count != 1:
        found.append(f"{count} check_submission cells instead of one")
    return found


def readme_block(names: list[str], config: CourseConfig) -> str:
    rows = "\n".join(f"| `{n}` | [![Open In Colab]({BADGE_IMAGE})]({config.colab_url(n)}) |" for n in names)
    return f"{README_BEGIN}\n| notebook | open |\n| --- | --- |\n{rows}\n{README_END}"


def conventions_block() -> str:
    return f"{CONVENTIONS_BEGIN}\n{conventions_markdown()}\n{CONVENTIONS_END}"


def _replace_block(text: str, begin: str, end: str, block: str, what: str) -> str:
    pattern = re.compile(re.escape(begin) + r".*?" + re.escape(end), re.DOTALL)
    if not pattern.search(text):
        raise CourseError(f"README.md has no {what} block; add the two lines {begin} and {end}")
    return pattern.sub(lambda _: block, text)


def update_readme(text: str, names: list[str], config: CourseConfig) -> str:
    text = _replace_block(text, README_BEGIN, README_END, readme_block(names, config), "badge")
    return _replace_block(text, CONVENTIONS_BEGIN, CONVENTIONS_END, conventions_block(), "conventions")


# ---------------------------------------------------------------- the manifest check_submission reads


def _role(meta: dict, cell_type: str) -> str:
    if meta.get("solution"):
        return "answer" if meta.get("grade") else "solution"
    if meta.get("grade"):
        return "test"
    if meta.get("task"):
        return "task"
    return "locked"


def manifest_entry(release_nb) -> dict:
    """The structure of one release notebook: its nbgrader cells, in order."""
    from utils.submission import source_digest

    cells = []
    for cell in release_nb.cells:
        meta = cell.get("metadata", {}).get("nbgrader")
        if not meta or not meta.get("grade_id"):
            continue
        role = _role(meta, cell.cell_type)
        entry = {
            "grade_id": meta["grade_id"], "cell_type": cell.cell_type, "role": role,
            "grade": bool(meta.get("grade")), "solution": bool(meta.get("solution")), "locked": bool(meta.get("locked")),
        }
        if meta.get("grade"):
            entry["points"] = meta.get("points", 0)
        if role in ("test", "locked"):
            entry["sha256"] = source_digest(cell.source)
        cells.append(entry)
    return {"cells": cells}


def build_manifest(names: list[str], config: CourseConfig, release_dir: Path | None = None) -> dict:
    def path(name):
        return (release_dir / name / f"{name}.ipynb") if release_dir else release_path(name)

    return {
        "about": "Structure of the release notebooks, for utils.submission.check_submission(), and the run-time requirements "
                 "that utils.colab.prepare() installs; written by `python -m autograder release`.",
        "repository": config.repository,
        "branch": config.branch,
        "requirements": requirements().run,
        "assignments": {name: manifest_entry(read_notebook(path(name))) for name in names},
    }


def manifest_text(manifest: dict) -> str:
    return json.dumps(manifest, indent=1, sort_keys=False) + "\n"


def write_manifest(names: list[str], config: CourseConfig | None = None) -> Path:
    """Rewrite utils/course_manifest.json from the release notebooks of `names` (all assignments)."""
    MANIFEST.write_text(manifest_text(build_manifest(names, config or load_config())), encoding="utf-8")
    return MANIFEST


def manifest_drift(names: list[str], config: CourseConfig | None = None) -> bool:
    """True when the committed manifest differs from one built from the committed release."""
    expected = manifest_text(build_manifest(names, config or load_config()))
    return not MANIFEST.is_file() or MANIFEST.read_text(encoding="utf-8") != expected


# ---------------------------------------------------------------- the command


def write_notebook(nb, path: Path) -> None:
    nbformat.write(nb, str(path))


def rewrite(names: list[str], config: CourseConfig | None = None) -> list[str]:
    """Put every solution notebook of `names` and README.md in canonical form; return what changed."""
    config = config or load_config()
    changed = []
    for name in names:
        path = solution_path(name)
        nb = read_notebook(path)
        fixed = apply(nb, name, config)
        if fixed != nb:
            write_notebook(fixed, path)
            changed.append(str(path.relative_to(REPO_ROOT)))
    readme = README.read_text(encoding="utf-8")
    new_readme = update_readme(readme, names, config)
    if new_readme != readme:
        README.write_text(new_readme, encoding="utf-8")
        changed.append("README.md")
    return changed
