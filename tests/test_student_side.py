"""The students' side, used the way a student and an instructor use it:

* every solution notebook carries the generated cells in canonical form (Colab badge on
  top, bootstrap before the setup cell's utils imports, `check_submission()` last),
  and the manifest check_submission reads matches the release;
* `python -m autograder dist OUT` contains no line of any solution or hidden test, and
  the release notebooks run from a clean copy of OUT, in a fresh virtual environment that has
  only OUT's requirements.txt;
* each release notebook runs "in Colab": a stand-in `google.colab` on the kernel's path,
  the course cloned (offline) from a git repository made of OUT;
* check_submission() catches a deleted test cell, stripped metadata, a wrong file name
  and a duplicated cell, each with what to do; it never writes to stderr.
"""
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from conftest import REPO_ROOT
from notebook_helpers import completed_notebook, errors, execute, execute_all, outputs_text, write

from autograder.course import config
from autograder.course import layout as course
from autograder.release import student_cells
from autograder.release.dist import KNOWN_COINCIDENCES, build, find_leaks
from autograder.release.build import secret_lines
from utils import colab, submission
from utils.conventions import RULES, conventions_markdown

ASSIGNMENTS = course.assignments()
CONFIG = config.load_config()
STANDIN = Path(__file__).resolve().parent / "colab_standin"


# ------------------------------------------------------------------ canonical cells


@pytest.mark.parametrize("name", ASSIGNMENTS)
def test_every_solution_has_the_canonical_student_cells(name):
    nb = course.read_notebook(course.solution_path(name))
    assert student_cells.problems(nb, name, CONFIG) == [], "run: python -m autograder student-cells"
    setup = next(c for c in nb.cells if course.grade_id(c) == "setup").source
    assert setup.index(student_cells.BOOT_END) < student_cells.IMPORTS_UTILS.search(setup).start()
    release = course.read_notebook(course.release_path(name))
    assert "colab.research.google.com/github/" in release.cells[0].source
    assert release.cells[-1].source.endswith("from utils.submission import check_submission\ncheck_submission()")
    boxes = [c for c in release.cells if c.source == student_cells.conventions_source()]
    assert len(boxes) == 1 and all(rule.text in boxes[0].source for rule in RULES)


def test_student_cells_are_idempotent_and_restore_lost_cells():
    name = ASSIGNMENTS[0]
    nb = course.read_notebook(course.solution_path(name))
    assert student_cells.apply(nb, name, CONFIG) == nb
    bare = nbformat.from_dict(json.loads(json.dumps(nb)))
    bare.cells = [c for c in bare.cells[1:-1] if c.get("id") != student_cells.CONVENTIONS_ID]
    setup = next(c for c in bare.cells if course.grade_id(c) == "setup")
    setup.source = student_cells._strip_bootstrap(setup.source)
    assert student_cells.BOOT_BEGIN not in setup.source and student_cells.problems(bare, name, CONFIG)
    assert student_cells.apply(bare, name, CONFIG) == nb


def test_bootstrap_follows_the_configured_address_and_gpu_list():
    acme = config.CourseConfig("https://github.com/acme/seq-course", "spring", ["07_transformer"])
    block = student_cells.bootstrap_block("07_transformer", acme)
    assert "COURSE_REPOSITORY = 'https://github.com/acme/seq-course'" in block
    assert "'--branch', 'spring'" in block and "want_gpu=True" in block
    assert "want_gpu=False" in student_cells.bootstrap_block("01_tokenization_embeddings", acme)
    assert "pip" not in block and "torch" not in block.replace("(never torch)", "")
    assert acme.colab_url("03_lstm").endswith("/github/acme/seq-course/blob/spring/notebooks/03_lstm/03_lstm.ipynb")
    placeholder = student_cells.bootstrap_block("01_tokenization_embeddings", CONFIG)
    if CONFIG.placeholder:
        assert "course address is not set" in placeholder and "git', 'clone" not in placeholder
    # The badge cell tells an instructor what to set while the address is the placeholder, and only then.
    unset = config.CourseConfig(repository=f"https://github.com/{config.PLACEHOLDER_MARK}/sequence-models-course")
    assert "**Instructors:**" in student_cells.badge_source("03_lstm", unset)
    assert "[tool.course]" in student_cells.badge_source("03_lstm", unset)
    assert "Instructors" not in student_cells.badge_source("03_lstm", acme)
    with pytest.raises(course.CourseError, match="not a GitHub address"):
        config.CourseConfig("https://gitlab.com/acme/course").github_slug


def test_readme_badges_and_manifest_are_up_to_date():
    readme = student_cells.README.read_text(encoding="utf-8")
    assert student_cells.update_readme(readme, ASSIGNMENTS, CONFIG) == readme
    for name in ASSIGNMENTS:
        assert CONFIG.colab_url(name) in readme
    assert not student_cells.manifest_drift(ASSIGNMENTS, CONFIG), "run: python -m autograder release"


# ------------------------------------------------------------------ the distribution


@pytest.fixture(scope="module")
def dist(tmp_path_factory):
    out = tmp_path_factory.mktemp("dist") / "sequence-models-course"
    build(out, ASSIGNMENTS, allow_placeholder=True)  # the address does not matter here (Colab tests clone locally)
    return out


def test_dist_refuses_while_the_course_address_is_the_placeholder(tmp_path, monkeypatch):
    from autograder.release import dist

    placeholder = config.CourseConfig(repository=f"https://github.com/{config.PLACEHOLDER_MARK}/sequence-models-course")
    monkeypatch.setattr(dist, "load_config", lambda: placeholder)
    with pytest.raises(course.CourseError, match="still the placeholder.*student-cells.*--allow-placeholder"):
        build(tmp_path / "out", ASSIGNMENTS)
    assert not (tmp_path / "out").exists()


def _secret_lines():
    return secret_lines([course.read_notebook(course.solution_path(name)) for name in ASSIGNMENTS])


def test_dist_has_the_student_files_and_nothing_of_the_instructor(dist):
    top = {p.name for p in dist.iterdir()}
    assert {"notebooks", "utils", "datasets", "README.md", "requirements.txt", "environment.yml", "LICENSE"} <= top
    assert not top & {"solutions", "autograder", "tests", "benchmarks", ".ci", "pyproject.toml", "Makefile"}
    for name in ASSIGNMENTS:
        assert (dist / "notebooks" / name / f"{name}.ipynb").is_file()
    assert (dist / "utils" / "course_manifest.json").is_file() and (dist / "datasets" / "registry.json").is_file()
    requirements = (dist / "requirements.txt").read_text()
    assert "jupyterlab" in requirements and "nbgrader" not in requirements and "pytest" not in requirements
    readme = (dist / "README.md").read_text()
    assert all(CONFIG.colab_url(n) in readme for n in ASSIGNMENTS) and "check_submission" in readme
    assert conventions_markdown() in readme and "{conventions}" not in readme


def test_dist_contains_no_line_of_any_solution_or_hidden_test(dist):
    secrets = _secret_lines()
    assert len(secrets) > 20 * len(ASSIGNMENTS), "too few solution lines found: is REGION right?"
    found = []
    for path in (p for p in dist.rglob("*") if p.is_file()):
        rel = path.relative_to(dist).as_posix()
        text = path.read_text(encoding="utf-8", errors="replace")
        if path.suffix == ".ipynb":  # compare cell sources, not their JSON escaping
            text += "\n" + "\n".join(c.source for c in nbformat.reads(text, as_version=4).cells)
        lines = {line.strip() for line in text.splitlines()}
        found += [(rel, s) for s in secrets if s in lines and (rel, s) not in KNOWN_COINCIDENCES]
        assert "BEGIN SOLUTION" not in text and "BEGIN HIDDEN TESTS" not in text, rel
    assert not found, f"solution or hidden-test lines in the distribution: {found[:10]}"


def test_dist_leak_check_catches_a_planted_line(dist, tmp_path):
    secret = sorted(_secret_lines())[0]
    planted = tmp_path / "copy"
    shutil.copytree(dist, planted)
    (planted / "utils" / "oops.py").write_text(f"def f():\n    {secret}\n")
    assert any("utils/oops.py" in leak for leak in find_leaks(planted, {secret}))


def test_dist_refuses_a_folder_that_is_not_a_distribution(tmp_path):
    (tmp_path / "thesis.tex").write_text("precious")
    with pytest.raises(course.CourseError, match="not empty"):
        build(tmp_path, ASSIGNMENTS, allow_placeholder=True)
    assert (tmp_path / "thesis.tex").read_text() == "precious"


MISSING = ("ModuleNotFoundError", "ImportError", "FileNotFoundError", "DatasetUnavailable")


def _missing_pieces(nb) -> list[str]:
    """Errors that mean a file or module is missing (the blank release raises
    NotImplementedError, and cells that use an unanswered exercise fail in their own ways)."""
    return [e for c in nb.cells if c.cell_type == "code" for e in errors(c) if e.startswith(MISSING) or "unknown dataset" in e]


@pytest.fixture(scope="module")
def clean_copy_runs(dist, student_kernel, tmp_path_factory):
    """name -> (the release notebook run from a clean copy of the dist in the student environment, that
    copy), two at a time."""
    jupyter_path, _ = student_kernel
    jobs, copies = {}, {}
    for name in ASSIGNMENTS:
        clean = tmp_path_factory.mktemp(name) / "my course"  # a student's machine: the dist copied anywhere
        shutil.copytree(dist, clean)
        folder = clean / "notebooks" / name
        nb = nbformat.read(folder / f"{name}.ipynb", as_version=4)
        nb.cells.append(nbformat.v4.new_code_cell("import sys, utils\nprint(utils.__file__)\nprint(sys.executable)"))
        jobs[name], copies[name] = (nb, folder, {"COURSE_FAST": "1", "JUPYTER_PATH": str(jupyter_path)}), clean
    return {name: (ran, copies[name]) for name, ran in execute_all(jobs).items()}


@pytest.mark.slow
@pytest.mark.parametrize("name", ASSIGNMENTS)
def test_release_notebook_runs_from_a_clean_copy_of_the_dist(clean_copy_runs, student_kernel, name):
    """A student's machine: the dist copied anywhere, a Python with exactly the distribution's
    requirements.txt, the notebook started in its folder. Every cell runs (the blank answers raise
    NotImplementedError); the setup cell, the locked cells and the test cells find every module and
    file they import, and the notebook's own check runs."""
    nb, clean = clean_copy_runs[name]
    if isinstance(nb, Exception):
        raise nb
    setup = next(c for c in nb.cells if course.grade_id(c) == "setup")
    assert not errors(setup), errors(setup)
    where = outputs_text(nb.cells[-1]).strip().splitlines()  # the path of utils, then the Python
    assert where == [str(clean / "utils" / "__init__.py"), str(student_kernel[1])], \
        "the notebook did not run in the student environment with the copy's utils"
    assert not _missing_pieces(nb), "the distribution or its requirements lack something the notebook needs"
    check = nb.cells[-2]
    assert course.grade_id(check) == "check_submission" and not errors(check)
    assert "READY" in outputs_text(check) and "Not answered yet" in outputs_text(check)
    assert outputs_text(check, "stderr") == ""


def _torch_requirement() -> str:
    """The torch a student environment gets here: $TORCH, else the Makefile's TORCH (the CPU
    build the course is tested with, which pip takes from a local file where there is one)."""
    default = re.search(r"^TORCH \?= *(\S+)", (REPO_ROOT / "Makefile").read_text(), re.MULTILINE).group(1)
    return os.environ.get("TORCH") or default


@pytest.fixture(scope="module")
def student_kernel(dist, tmp_path_factory):
    """JUPYTER_PATH of a "python3" kernel whose Python is a fresh virtual environment that has
    exactly the student distribution's requirements.txt (torch pinned as above) and nothing of
    the instructor's environment: what a student who installs the distribution has."""
    root = tmp_path_factory.mktemp("student-env")
    python = root / "venv" / "bin" / "python"
    subprocess.run([sys.executable, "-m", "venv", str(root / "venv")], check=True)
    # --no-compile: no bytecode for the thousands of modules nothing here imports (a third of the install's time)
    subprocess.run([str(python), "-m", "pip", "install", "-qq", "--no-compile", "-r", str(dist / "requirements.txt"),
                    _torch_requirement()], check=True, timeout=1800)
    spec = root / "jupyter" / "kernels" / "python3"
    spec.mkdir(parents=True)
    (spec / "kernel.json").write_text(json.dumps({
        "argv": [str(python), "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "student environment", "language": "python",
    }))
    return root / "jupyter", python


# ------------------------------------------------------------------ Colab, with a stand-in


@pytest.fixture(scope="module")
def dist_repository(dist, tmp_path_factory):
    """The distribution as the git repository that the Colab bootstrap clones."""
    repo = tmp_path_factory.mktemp("remote") / "sequence-models-course"
    shutil.copytree(dist, repo)
    git = ["git", "-C", str(repo), "-c", "user.name=course", "-c", "user.email=course@example.org"]
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-q", "-m", "student distribution"]):
        subprocess.run(git + args, check=True)
    return repo


def _run_in_colab_standin(nb, name, repository, tmp_path):
    """Run `nb` as Colab would: stand-in google.colab importable, working folder /content-like,
    the bootstrap cloning `repository`; returns (nb, content folder, standin log lines)."""
    content = tmp_path / "content"  # Colab's working folder; the notebook itself lives in Drive
    content.mkdir()
    setup = next(c for c in nb.cells if course.grade_id(c) == "setup")
    canonical = student_cells.bootstrap_block(name, CONFIG)
    assert canonical in setup.source
    setup.source = setup.source.replace(canonical, student_cells.bootstrap_block(name, CONFIG, repository=str(repository)))
    saved = tmp_path / "drive" / f"Copy of {name}.ipynb"  # Colab's name for a copy
    saved.parent.mkdir()
    write(nb, saved)
    nb.cells.append(nbformat.v4.new_code_cell("import utils\nprint(utils.__file__)"))
    log = tmp_path / "colab.log"
    env = {
        "PYTHONPATH": os.pathsep.join(filter(None, [str(STANDIN), os.environ.get("PYTHONPATH")])),
        "COLAB_STANDIN_NOTEBOOK": str(saved), "COLAB_STANDIN_LOG": str(log), "COURSE_FAST": "1",
    }
    execute(nb, content, env)
    cloned = content / repository.name
    assert (cloned / "utils" / "__init__.py").is_file(), "the bootstrap did not clone the course"
    assert not errors(setup), errors(setup)
    assert "| Colab |" in outputs_text(setup) and "installing" not in outputs_text(setup)
    assert outputs_text(nb.cells[-1]).strip() == str(cloned / "utils" / "__init__.py")
    assert log.read_text().splitlines() == ["enable_custom_widget_manager", "blocking_request get_ipynb"]
    check = nb.cells[-2]
    assert course.grade_id(check) == "check_submission" and not errors(check)
    assert outputs_text(check, "stderr") == ""
    report = outputs_text(check)
    assert "READY" in report and "NOT READY" not in report, report
    assert "Download .ipynb" in report and f"named {name}.ipynb" in report
    return nb, report


@pytest.mark.slow
@pytest.mark.parametrize("name", ASSIGNMENTS)
def test_release_notebook_runs_in_a_colab_standin(dist_repository, tmp_path, name):
    """The blank release, as a student first opens it from the badge."""
    nb = course.read_notebook(course.release_path(name))
    nb, report = _run_in_colab_standin(nb, name, dist_repository, tmp_path)
    assert not _missing_pieces(nb), "the Colab clone lacks something the notebook needs"
    if name in CONFIG.gpu_notebooks:  # the stand-in runtime has no GPU
        assert "Change runtime type" in outputs_text(next(c for c in nb.cells if course.grade_id(c) == "setup"))
    assert "Not answered yet" in report and "not answered yet (NotImplementedError)" in report


@pytest.mark.slow
def test_completed_notebook_passes_everything_in_a_colab_standin(dist_repository, tmp_path):
    """A student who did all the work, in Colab: every cell runs, every visible check passes."""
    name = ASSIGNMENTS[0]
    nb, report = _run_in_colab_standin(completed_notebook(name), name, dist_repository, tmp_path)
    failing = [(course.grade_id(c), errors(c)) for c in nb.cells if c.cell_type == "code" and errors(c)]
    assert not failing, f"cells failing in Colab with every answer filled in: {failing}"
    assert "Not answered" not in report and " pass  " in report and "FAIL" not in report


@pytest.mark.slow
def test_without_a_course_address_colab_uses_a_course_folder_in_drive_or_says_what_to_do(dist, tmp_path):
    """The setup cell as shipped while the address is the placeholder: in Colab it finds a copy of the course
    folder in the mounted Drive (or in the session's folder); without one it stops with what to do."""
    name = ASSIGNMENTS[0]
    placeholder = config.CourseConfig(repository=f"https://github.com/{config.PLACEHOLDER_MARK}/sequence-models-course")
    setup = next(c for c in course.read_notebook(course.release_path(name)).cells if course.grade_id(c) == "setup")
    block = student_cells.bootstrap_block(name, placeholder)
    bootstrap = block + "\nimport utils\nprint('utils from', utils.__file__)"
    env = {"PYTHONPATH": os.pathsep.join(filter(None, [str(STANDIN), os.environ.get("PYTHONPATH")])),
           "COLAB_STANDIN_LOG": str(tmp_path / "colab.log"), "COURSE_FAST": "1"}
    assert block in setup.source or CONFIG.repository != placeholder.repository
    for case in ("in drive", "nowhere"):
        content = tmp_path / case / "content"  # Colab's working folder
        content.mkdir(parents=True)
        if case == "in drive":
            shutil.copytree(dist, content / "drive" / "MyDrive" / "courses" / "seq-models")
        nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(bootstrap)])
        execute(nb, content, env)
        if case == "in drive":
            assert not errors(nb.cells[0]), errors(nb.cells[0])
            found = content / "drive" / "MyDrive" / "courses" / "seq-models"
            assert f"utils from {found / 'utils' / '__init__.py'}" in outputs_text(nb.cells[0])
        else:
            message = " ".join(errors(nb.cells[0]))
            assert "course address is not set" in message and "Mount Drive" in message, message
            assert "pyproject.toml" in message and "student-cells" in message, message  # what the instructor sets


def test_colab_prepare_installs_only_what_is_missing_never_torch():
    present = {colab.requirement_name(r) for r in colab.student_requirements()} - {"pooch"}
    calls = []
    installed = colab.prepare(
        want_gpu=False, run=lambda cmd, check: calls.append(cmd),
        installed=lambda distribution: distribution in present,
    )
    assert installed == ["pooch>=1.7"]
    assert calls == [[sys.executable, "-m", "pip", "install", "--quiet", "pooch>=1.7"]]
    assert colab.prepare(run=lambda *a, **k: pytest.fail("nothing to install"), installed=lambda d: True) == []
    assert all(not r.startswith("torch") for r in colab.missing_requirements(installed=lambda d: False))


def test_colab_installs_pyprojects_run_time_dependencies_without_torch():
    """The manifest carries pyproject's `dependencies` to the Colab bootstrap (release --check keeps it current)."""
    assert submission.load_manifest()["requirements"] == config.requirements().run
    assert colab.student_requirements() == [d for d in config.requirements().run if not d.startswith("torch")]
    assert colab.is_installed("numpy") and not colab.is_installed("no-such-course-package")


def test_colab_gpu_advice_says_how_to_switch_the_runtime():
    assert colab.gpu_advice(True) is None
    assert "Runtime -> Change runtime type" in colab.gpu_advice(False) and "T4" in colab.gpu_advice(False)


# ------------------------------------------------------------------ check_submission


MANIFEST = submission.load_manifest()


def _saved(tmp_path, nb, file_name):
    path = tmp_path / file_name
    write(nb, path)
    return path


def _first(name, role):
    return next(c["grade_id"] for c in MANIFEST["assignments"][name]["cells"] if c["role"] == role)


@pytest.mark.parametrize("name", ASSIGNMENTS)
def test_check_submission_passes_a_completed_notebook(tmp_path, name):
    report = submission.inspect_submission(_saved(tmp_path, completed_notebook(name), f"{name}.ipynb"), rerun=False)
    assert report.assignment == name and report.ready, report.text()
    assert "Not answered" not in report.text()


@pytest.mark.parametrize("name", ASSIGNMENTS)
def test_check_submission_catches_a_deleted_test_cell(tmp_path, name):
    nb = completed_notebook(name)
    test_id = _first(name, "test")
    nb.cells = [c for c in nb.cells if course.grade_id(c) != test_id]
    report = submission.inspect_submission(_saved(tmp_path, nb, f"{name}.ipynb"), rerun=False)
    assert not report.ready
    [problem] = report.problems
    assert f"'{test_id}'" in problem and "was deleted" in problem and "Fix:" in problem and "fresh copy" in problem


@pytest.mark.parametrize("name", ASSIGNMENTS)
def test_check_submission_catches_stripped_metadata(tmp_path, name):
    nb = completed_notebook(name)
    for cell in nb.cells:
        cell.metadata.pop("nbgrader", None)
    report = submission.inspect_submission(_saved(tmp_path, nb, f"{name}.ipynb"), rerun=False)
    assert report.assignment == name, "the notebook should still be recognized by its name and badge"
    assert not report.ready and "lost all of its hidden nbgrader metadata" in report.problems[0]
    assert "Fix:" in report.problems[0]
    # one cell stripped: named, with the fix
    nb = completed_notebook(name)
    solution_id = _first(name, "solution")
    next(c for c in nb.cells if course.grade_id(c) == solution_id).metadata.pop("nbgrader")
    report = submission.inspect_submission(_saved(tmp_path, nb, f"{name}.ipynb"), rerun=False)
    assert [p for p in report.problems if f"'{solution_id}'" in p and "lost its hidden nbgrader metadata" in p]


@pytest.mark.parametrize("name", ASSIGNMENTS)
def test_check_submission_catches_a_wrong_file_name(tmp_path, name):
    report = submission.inspect_submission(_saved(tmp_path, completed_notebook(name), f"Copy of {name} (2).ipynb"), rerun=False)
    assert report.assignment == name and not report.ready
    [problem] = report.problems
    assert f"'{name}.ipynb'" in problem and "rename" in problem and "File -> Rename" in problem


def test_check_submission_catches_a_duplicated_cell_and_a_changed_locked_cell(tmp_path):
    name = ASSIGNMENTS[0]
    nb = completed_notebook(name)
    solution_id, test_id = _first(name, "solution"), _first(name, "test")
    index = next(i for i, c in enumerate(nb.cells) if course.grade_id(c) == solution_id)
    nb.cells.insert(index, nbformat.from_dict(json.loads(json.dumps(nb.cells[index]))))
    nb.cells[index].id = "duplicate"
    next(c for c in nb.cells if course.grade_id(c) == test_id).source += "\npass"
    report = submission.inspect_submission(_saved(tmp_path, nb, f"{name}.ipynb"), rerun=False)
    assert [p for p in report.problems if f"'{solution_id}' appears 2 times" in p and "delete" in p]
    assert [n for n in report.notes if f"'{test_id}'" in n and "runs the original" in n]


def test_check_submission_reruns_the_visible_self_checks(tmp_path):
    name = ASSIGNMENTS[0]
    nb = completed_notebook(name)
    namespace = {}
    for cell in nb.cells:
        if cell.cell_type == "code" and (course.grade_id(cell) == "setup" or cell.metadata.get("nbgrader", {}).get("solution")):
            exec(cell.source, namespace)
    test_ids = [c["grade_id"] for c in MANIFEST["assignments"][name]["cells"] if c["role"] == "test"]
    results = submission.rerun_self_checks(nb, name, MANIFEST, namespace)
    assert [r[0] for r in results] == test_ids
    assert any(ok for _, ok, _ in results)
    broken = dict(namespace, **{_first(name, "solution"): lambda *a, **k: None})
    results_broken = submission.rerun_self_checks(nb, name, MANIFEST, broken)
    assert sum(ok for _, ok, _ in results_broken) < sum(ok for _, ok, _ in results)


def test_check_submission_never_raises_nor_writes_to_stderr(tmp_path, capfd, monkeypatch):
    garbage = tmp_path / "01_tokenization_embeddings.ipynb"
    garbage.write_text("{ this is not json")
    submission.check_submission(garbage)
    submission.check_submission(tmp_path / "missing.ipynb")
    out, err = capfd.readouterr()
    assert err == "" and "not a readable notebook" in out and "Could not find" in out
    monkeypatch.setenv("NBGRADER_EXECUTION", "autograde")
    submission.check_submission(garbage)
    assert capfd.readouterr().out.strip() == "check_submission: skipped while grading."


# ------------------------------------------------------------------ widgets


def test_widget_output_carries_a_static_view_for_front_ends_without_widgets(monkeypatch):
    import ipywidgets
    import matplotlib.pyplot as plt

    from utils import widgets

    shown = []
    monkeypatch.setattr("IPython.display.display", lambda obj, raw=False: shown.append((obj, raw)))

    def render():
        print("step 3 of 7")
        plt.plot([0, 1], [1, 0])
        plt.show()

    widgets.show_widget(ipywidgets.IntSlider(value=3), render, "merges = 3")
    [(bundle, raw)] = shown
    assert raw and "application/vnd.jupyter.widget-view+json" in bundle
    html = bundle["text/html"]
    assert "Static view (merges = 3)" in html and "step 3 of 7" in html
    plt.close("all")


@pytest.mark.parametrize("env, expected", [({"COURSE_FAST": "1"}, False), ({"COURSE_FAST": "1", "COURSE_WIDGETS": "1"}, True), ({"COURSE_WIDGETS": "0"}, False)])
def test_course_widgets_overrides_the_widget_detection(monkeypatch, env, expected):
    from utils import widgets

    for key in ("COURSE_FAST", "NBGRADER_EXECUTION", "COURSE_WIDGETS"):
        monkeypatch.delenv(key, raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)

    class Shell:
        kernel = object()

    monkeypatch.setattr("IPython.get_ipython", lambda: Shell())
    assert widgets.widgets_available() is expected


def test_bootstrap_outside_colab_and_outside_a_course_changes_nothing(tmp_path):
    """Run the setup cell's bootstrap alone, in a plain folder: no output, sys.path as it was."""
    block = student_cells.bootstrap_block(ASSIGNMENTS[0], CONFIG)
    script = "import sys\nbefore = list(sys.path)\n" + block + "\nassert sys.path == before, sys.path\nprint('unchanged')\n"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout == "unchanged\n" and done.stderr == "", done.stderr
