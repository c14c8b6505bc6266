"""`dist OUT`: the student distribution, the folder students clone or open in Colab.

OUT gets the release notebooks (notebooks/NN_name/), utils/ (with the manifest that
check_submission() reads), datasets/ (the registry and any generators), a student
README with the Open in Colab badges, requirements.txt, environment.yml and the
LICENSE; never solutions/, the autograder, the tests, mutants or benchmarks. Every line
of every solution region and hidden test is looked for in every file written, and the
command refuses (removing OUT's content) if one is found.

OUT may be a clone of the students' repository: its .git folder is kept, so the
instructor can commit the new distribution and push it to the address of
[tool.course] in pyproject.toml.
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

from autograder.course.config import load_config, requirements
from autograder.course.layout import REPO_ROOT, CourseError, read_notebook, release_path, solution_path
from autograder.release.build import secret_lines
from autograder.release.student_cells import MANIFEST, readme_block
from utils.conventions import conventions_markdown

MARKER = ".course-dist"
TEMPLATE = Path(__file__).resolve().parent / "templates" / "STUDENT_README.md"
IGNORED = shutil.ignore_patterns("__pycache__", "*.pyc", ".ipynb_checkpoints")


# A solution line that is also ordinary code elsewhere is no leak. Each entry names the file
# and the line, and is reviewed by hand: keep this list short.
KNOWN_COINCIDENCES = {
    ("utils/text.py", "return len(self.itos)"),  # CharCodec.__len__; also Vocab.__len__ in 01
    ("utils/lexicon.py", "return len(self.itos)"),  # Lexicon.__len__, likewise
    ("utils/lexicon.py", "for token in tokens:"),  # Lexicon.encode's loop; also 01's bpe_tokenize
}


def find_leaks(out: Path, secrets: set[str]) -> list[str]:
    """'file: line' for each secret line found in a text file under `out` (JSON strings are decoded)."""
    leaks = []
    for path in sorted(p for p in out.rglob("*") if p.is_file() and ".git" not in p.relative_to(out).parts):
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        variants = [text]
        if path.suffix in (".ipynb", ".json"):
            try:  # notebooks store sources as escaped JSON strings
                variants.append(json.dumps(json.loads(text), ensure_ascii=False, indent=0).replace("\\n", "\n").replace('\\"', '"'))
            except ValueError:
                pass
        haystack = {line.strip() for v in variants for line in v.splitlines()}
        rel = path.relative_to(out).as_posix()
        leaks += [
            f"{rel}: {line[:70]!r}" for line in sorted(secrets)
            if line in haystack and (rel, line) not in KNOWN_COINCIDENCES
        ]
    return leaks


def _clear(out: Path) -> None:
    if out.exists() and any(out.iterdir()):
        if not (out / MARKER).exists():
            raise CourseError(f"{out} is not empty and is not a previous distribution; choose a new folder")
        for child in out.iterdir():
            if child.name != ".git":
                shutil.rmtree(child) if child.is_dir() and not child.is_symlink() else child.unlink()
    out.mkdir(parents=True, exist_ok=True)


def student_readme(names: list[str]) -> str:
    config = load_config()
    text = TEMPLATE.read_text(encoding="utf-8")
    return text.replace("{badges}", readme_block(names, config)).replace("{conventions}", conventions_markdown())


def requirements_txt(student: list[str]) -> str:
    return (
        "# The course's notebooks on your own machine: pip install -r requirements.txt\n"
        "# (in Colab nothing is needed: the first cell of each notebook takes care of it)\n"
        + "".join(f"{r}\n" for r in student)
    )


def environment_yml(student: list[str]) -> str:
    deps = ["python>=3.10"] + [("pytorch" + r[len("torch"):]) if r.startswith("torch") else r for r in student]
    return (
        "# Conda environment for the course's notebooks: conda env create -f environment.yml\n"
        "name: sequence-models\nchannels:\n  - pytorch\n  - conda-forge\ndependencies:\n"
        + "".join(f"  - {d}\n" for d in deps)
    )


def build(out: Path, names: list[str], allow_placeholder: bool = False) -> list[Path]:
    """Write the student distribution of assignments `names` into `out`; return the files written.
    While [tool.course] repository is the placeholder it refuses, unless `allow_placeholder`
    (a trial copy for a local machine: its Colab badges and setup cells cannot fetch the course)."""
    out = Path(out).resolve()
    config = load_config()
    if config.placeholder and not allow_placeholder:
        raise CourseError(
            f"[tool.course] repository in pyproject.toml is still the placeholder {config.repository}: students "
            "who open the notebooks in Colab could not fetch the course. Set it to the GitHub address the students "
            "will clone, e.g. repository = \"https://github.com/your-org/sequence-models-course\", then run "
            "python -m autograder student-cells (it rewrites the badges and setup cells and releases again) and "
            "this command again. For a local trial copy only: python -m autograder dist OUT --allow-placeholder")
    own = [REPO_ROOT / d for d in ("solutions", "notebooks", "utils", "datasets", "autograder", "tests", "benchmarks")]
    if out == REPO_ROOT or out in REPO_ROOT.parents or any(out == d or d in out.parents for d in own):
        raise CourseError(f"{out}: write the distribution to a folder of its own (for example ./dist, which git ignores)")
    missing = [n for n in names if not release_path(n).is_file()]
    if missing:
        raise CourseError("no release for " + ", ".join(missing) + "; run: python -m autograder release")
    if not MANIFEST.is_file():
        raise CourseError(f"{MANIFEST} is missing; run: python -m autograder release")
    _clear(out)
    for name in names:
        shutil.copytree(release_path(name).parent, out / "notebooks" / name, ignore=IGNORED)
    shutil.copytree(REPO_ROOT / "utils", out / "utils", ignore=IGNORED)
    shutil.copytree(REPO_ROOT / "datasets", out / "datasets", ignore=IGNORED)
    shutil.copyfile(REPO_ROOT / "LICENSE", out / "LICENSE")
    needs = requirements()
    (out / "requirements.txt").write_text(requirements_txt(needs.student), encoding="utf-8")
    (out / "environment.yml").write_text(environment_yml(needs.student), encoding="utf-8")
    (out / "README.md").write_text(student_readme(names), encoding="utf-8")
    (out / ".gitignore").write_text(".ipynb_checkpoints/\n__pycache__/\n.venv/\n", encoding="utf-8")
    (out / MARKER).write_text("written by python -m autograder dist; the whole folder is rewritten next time\n")

    leaks = find_leaks(out, secret_lines([read_notebook(solution_path(name)) for name in names]))
    if leaks:
        _clear(out)
        raise CourseError("the distribution would leak solution or hidden-test lines:\n  " + "\n  ".join(leaks[:20]))
    return sorted(p for p in out.rglob("*") if p.is_file() and ".git" not in p.relative_to(out).parts)


def placeholder_warning() -> str | None:
    config = load_config()
    if config.placeholder:
        return ("warning: [tool.course] repository in pyproject.toml is still the placeholder "
                f"{config.repository}; the Colab badges and bootstrap will not work until it is set "
                "(then run: python -m autograder student-cells)")
    return None
