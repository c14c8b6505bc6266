"""A grading workspace: an nbgrader course directory outside the tracked tree.

Layout (nbgrader's own):
    WORKSPACE/nbgrader_config.py   copied from autograder/grading/nbgrader_config.py
    WORKSPACE/source/<a>/<a>.ipynb copied from solutions/
    WORKSPACE/release/<a>/...      built by nbgrader generate_assignment
    WORKSPACE/submitted/<student>/<a>/<a>.ipynb
    WORKSPACE/autograded/..., WORKSPACE/feedback/..., WORKSPACE/gradebook.db
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import uuid
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from autograder.isolation import scratch
from autograder.course.layout import REPO_ROOT, SOLUTIONS_DIR, CourseError, check_assignment, read_notebook
from autograder.handins.integrity import read_guard_logs
from autograder.isolation.sandbox import Settings, probe

BASE_CONFIG = Path(__file__).resolve().parent / "nbgrader_config.py"
DEFAULT_WORKSPACE = REPO_ROOT / "grading"
IGNORED = shutil.ignore_patterns(".ipynb_checkpoints", "__pycache__", "*.pyc")


@dataclass
class Workspace:
    root: Path
    scratch: bool = False  # thrown away after one batch (the mutant harness): see write_ahead_log

    @property
    def db_path(self) -> Path:
        return self.root / "gradebook.db"

    @property
    def db_url(self) -> str:
        return f"sqlite:///{self.db_path}"

    def path(self, *parts: str) -> Path:
        return self.root.joinpath(*parts)

    # An assignment's notebooks, and a hand-in's files: always (student, assignment).
    def source_path(self, assignment: str) -> Path:
        return self.path("source", assignment, f"{assignment}.ipynb")

    def release_path(self, assignment: str) -> Path:
        return self.path("release", assignment, f"{assignment}.ipynb")

    def submission_path(self, student: str, assignment: str) -> Path:
        return self.path("submitted", student, assignment, f"{assignment}.ipynb")

    def original_path(self, student: str, assignment: str) -> Path:
        """The hand-in as it arrived, before any repair."""
        return self.path("originals", student, assignment, f"{assignment}.ipynb")

    def repaired_marker(self, student: str, assignment: str) -> Path:
        """sha1 of the repaired notebook written to submitted/ from the original."""
        return self.path("originals", student, assignment, ".repaired.sha1")

    def autograded_path(self, student: str, assignment: str) -> Path:
        return self.path("autograded", student, assignment, f"{assignment}.ipynb")

    def report_path(self, student: str, assignment: str) -> Path:
        return self.path("reports", assignment, f"{student}.json")

    def lock_path(self, name: str) -> Path:
        """A lock file (filelock) that grade runs on this workspace share, threads and processes."""
        folder = self.path("locks")
        folder.mkdir(exist_ok=True)
        return folder / f"{name}.lock"


def open_workspace(root: Path | str | None = None, scratch: bool = False) -> Workspace:
    """Create (if needed) a workspace at `root`, refusing the repository itself. A `scratch`
    workspace, used for one batch and thrown away, gets a gradebook with a write-ahead log."""
    root = Path(root or os.environ.get("COURSE_WORKSPACE") or DEFAULT_WORKSPACE).resolve()
    if root == REPO_ROOT or root in REPO_ROOT.parents:
        raise CourseError(f"{root} holds the repository; choose a grading workspace of its own")
    for tracked in (SOLUTIONS_DIR, REPO_ROOT / "notebooks"):
        if root == tracked or tracked in root.parents:
            raise CourseError(f"{root} is inside the tracked folder {tracked}; choose another workspace")
    root.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(BASE_CONFIG, root / "nbgrader_config.py")
    install_kernelspec(root)
    return Workspace(root, scratch)


def install_kernelspec(root: Path) -> None:
    """Pin the notebooks' "python3" kernel to this interpreter.

    Found first through JUPYTER_PATH, it wins over any user-wide kernelspec that could
    point at another Python without the course's packages.
    """
    spec_dir = root / "jupyter" / "kernels" / "python3"
    spec_dir.mkdir(parents=True, exist_ok=True)
    spec = {
        # autograder.isolation.sandbox starts an ordinary kernel unless the grader asks for a sandbox.
        "argv": [sys.executable, "-m", "autograder.isolation.launcher", "{connection_file}"],
        "display_name": "Python 3 (course)",
        "language": "python",
        "interrupt_mode": "message",  # a signal would reach the sandbox's launcher, not the kernel
    }
    (spec_dir / "kernel.json").write_text(json.dumps(spec, indent=1))


def ensure_scripts_on_path() -> None:
    """Put this interpreter's scripts folder on PATH: nbgrader runs `alembic` as a command for a
    gradebook that create_gradebook did not make, which a virtual environment that is not
    activated would not find."""
    scripts = str(Path(sys.executable).parent)
    if scripts not in os.environ.get("PATH", "").split(os.pathsep):
        os.environ["PATH"] = os.pathsep.join(filter(None, [scripts, os.environ.get("PATH")]))


def kernel_env(root: Path) -> dict[str, str]:
    """os.environ with JUPYTER_PATH leading to the kernelspec of install_kernelspec(root)."""
    env = dict(os.environ)
    env["JUPYTER_PATH"] = os.pathsep.join(filter(None, [str(root / "jupyter"), env.get("JUPYTER_PATH")]))
    return env


def nbgrader_env(ws: Workspace) -> dict[str, str]:
    """The environment nbgrader and the kernels it starts run in."""
    ensure_scripts_on_path()
    env = kernel_env(ws.root)
    env["COURSE_OFFLINE"] = "1"  # grading never downloads
    env["PYTHONWARNINGS"] = "ignore"
    env["MPLBACKEND"] = "agg"
    # One thread per kernel: notebooks graded side by side must not fight over the cores.
    env["OMP_NUM_THREADS"] = env["MKL_NUM_THREADS"] = "1"
    return env


# nbgrader commands run in a long-lived runner (autograder.isolation.nbgrader_runner): the one run per
# hand-in, and building an assignment's sources (once per workspace and assignment). The others (a release build, a few per batch) keep a process of their own.
RUNNER_COMMANDS = ("autograde", "generate_assignment")


class NotebookTimeout(CourseError):
    """The nbgrader run went past its time limit and was killed with its kernel."""


class KernelDied(CourseError):
    """The nbgrader run failed because the notebook's kernel died (os._exit, a crash, a kill)."""


class RunnerStopped(CourseError):
    """The nbgrader run failed because the hand-in's trusted test runner died (past its memory limit)."""


class GradebookLocked(CourseError):
    """The nbgrader run failed on SQLite's "database is locked": another writer held the gradebook."""


def run_nbgrader(
    ws: Workspace, *args: str, timeout: float | None = None, env: dict | None = None, cwd: Path | None = None
) -> subprocess.CompletedProcess:
    """Run `nbgrader ARGS` inside the workspace; raise a CourseError with its log on failure.

    Past `timeout` seconds the run is killed; its kernel dies with it (the sandbox's
    launcher has PR_SET_PDEATHSIG) and NotebookTimeout is raised."""
    command = [sys.executable, "-m", "nbgrader", *args, "--CourseDirectory.root=" + str(ws.root)]
    from autograder.isolation import nbgrader_runner

    create_gradebook(ws)

    if args and args[0] in RUNNER_COMMANDS and nbgrader_runner.enabled():
        try:  # the same command in a process that has imported nbgrader already
            code, output = nbgrader_runner.run(command[3:], {**nbgrader_env(ws), **(env or {})}, str(cwd or ws.root), timeout)
        except TimeoutError:
            raise NotebookTimeout(f"nbgrader {' '.join(args)} ran past {timeout:g} s and was stopped") from None
        except nbgrader_runner.RunnerDied as exc:
            code, output = -9, f"{exc}\nthe nbgrader process died"
        return _check_nbgrader(args, subprocess.CompletedProcess(command, code, output, ""))
    with subprocess.Popen(
        command, cwd=cwd or ws.root, env={**nbgrader_env(ws), **(env or {})}, stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True, errors="replace", start_new_session=True,
        pass_fds=scratch.reaper_fds(),  # it writes into our sandbox folder: the reaper waits for it too
    ) as popen:
        try:
            output, _ = popen.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(popen.pid, signal.SIGKILL)
            popen.communicate()
            raise NotebookTimeout(f"nbgrader {' '.join(args)} ran past {timeout:g} s and was stopped") from None
    return _check_nbgrader(args, subprocess.CompletedProcess(command, popen.returncode, output, ""))


def create_gradebook(ws: Workspace) -> None:
    """Create WORKSPACE/gradebook.db as nbgrader would, if it does not exist yet.

    nbgrader stamps a new gradebook with its newest alembic revision, which it learns by running
    the `alembic heads` command: a new interpreter that imports nbgrader, 3-4 CPU-s for every new
    workspace (releases make scratch ones). This reads the same revision from
    nbgrader's migration scripts in this process, then lets nbgrader create its tables. The file
    appears whole (a hard link), so a run beside this one sees no gradebook or a complete one.
    """
    if ws.db_path.exists():
        return
    import sqlite3

    import nbgrader
    from alembic.config import Config
    from alembic.script import ScriptDirectory
    from nbgrader.api import Gradebook

    config = Config()
    config.set_main_option("script_location", str(Path(nbgrader.__file__).parent / "alembic"))
    revision = ScriptDirectory.from_config(config).get_current_head()
    fd, draft = tempfile.mkstemp(prefix=".gradebook-", suffix=".db", dir=ws.root)
    os.close(fd)
    try:
        db = sqlite3.connect(draft)
        if ws.scratch:
            write_ahead_log(db)
        with db:  # what nbgrader.api.Gradebook writes into a new database, with the same revision
            db.execute("CREATE TABLE alembic_version (version_num VARCHAR(32) NOT NULL)")
            db.execute("INSERT INTO alembic_version (version_num) VALUES (?)", (revision,))
        db.close()
        Gradebook(f"sqlite:///{draft}").close()  # nbgrader's own tables
        try:
            os.link(draft, ws.db_path)
        except FileExistsError:  # another run created it first
            pass
    finally:
        os.unlink(draft)


def write_ahead_log(db) -> None:
    """Switch the gradebook `db` (an sqlite3 connection) to a write-ahead log, which the file keeps.

    nbgrader commits about 14 times a hand-in; in SQLite's default journal each commit syncs the
    journal, the database and its folder (12.7 ms on the development machine), with a write-ahead
    log one append and one sync (0.38 ms), equally durable (benchmarks/README.md, "The fixed cost of
    a hand-in"). Only scratch workspaces and a cluster worker's get it: a write-ahead log needs every
    process that opens the file on one host, and an instructor's workspace may live on a network
    file system."""
    db.execute("PRAGMA journal_mode=WAL")


def _check_nbgrader(args, proc: subprocess.CompletedProcess) -> subprocess.CompletedProcess:
    """The failed run's error, by kind. nbgrader runs in another process (a runner, or its own):
    what went wrong reaches us only as the text of its log, so the kind is read from it."""
    if proc.returncode != 0:
        log = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-40:])
        text = f"nbgrader {' '.join(args)} failed:\n" + log
        if "database is locked" in log:  # sqlite3.OperationalError's message: it has no type of its own
            raise GradebookLocked(text)
        if "DeadKernelError" in log or "kernel died" in log.lower():  # nbclient's exception, printed by nbgrader
            raise KernelDied(text)
        if "the test runner died" in log:  # autograder.isolation.boundary.execute.RUNNER_DIED, printed by nbgrader
            raise RunnerStopped(text)
        raise CourseError(text)
    return proc


def add_sources(ws: Workspace, names: list[str]) -> None:
    """Copy the solution folders of `names` into the workspace and build their releases.

    generate_assignment also records every graded cell (hidden tests included) in the
    workspace's gradebook, which autograde later uses to restore the test cells.
    """
    for name in names:
        check_assignment(name)
        target = ws.path("source", name)
        if target.exists():
            shutil.rmtree(target)
        shutil.copytree(SOLUTIONS_DIR / name, target, ignore=IGNORED)
        run_nbgrader(ws, "generate_assignment", name, "--force")


def add_submission(ws: Workspace, student: str, assignment: str, notebook: Path | object) -> Path:
    """Place a hand-in (a path, or an in-memory notebook) as `student`'s submission."""
    import nbformat

    target = ws.submission_path(student, assignment)
    if target.parent.exists():
        shutil.rmtree(target.parent)
    target.parent.mkdir(parents=True)
    if isinstance(notebook, (str, Path)):
        shutil.copyfile(notebook, target)
    else:
        nbformat.write(notebook, target)
    return target


def hidden_paths(ws: Workspace) -> list[str]:
    """Folders a grading kernel must not see: the workspace (gradebook, hidden tests,
    other hand-ins), the solutions, the autograder (mutant catalogs) and git history."""
    paths = [ws.root, SOLUTIONS_DIR, REPO_ROOT / "autograder"]
    git = REPO_ROOT / ".git"
    if git.is_dir():
        paths.append(git)
    elif git.is_file():  # a worktree: .git names its folder inside the main repository's .git
        text = git.read_text().strip()
        if text.startswith("gitdir:"):
            gitdir = (REPO_ROOT / text.split(":", 1)[1].strip()).resolve()
            paths.append(gitdir.parent.parent if gitdir.parent.name == "worktrees" else gitdir)
    return [str(Path(p).resolve()) for p in paths]


def _private_file(ws: Workspace, prefix: str, suffix: str, data: bytes) -> Path:
    """A new file in the workspace's root holding `data`, readable by this user only (its
    descriptor closed: a long grading session must not keep one per hand-in)."""
    fd, path = tempfile.mkstemp(prefix=prefix, suffix=suffix, dir=ws.root)
    with os.fdopen(fd, "wb") as file:
        file.write(data)
    return Path(path)


@contextmanager
def whole_file(path: Path, newline: str | None = None):
    """A text file (UTF-8) to write that appears at `path` only when written whole: it is written
    beside it under another name, then moved into place; on an error `path` is left as it was and
    the draft removed. Every report, feedback page and export is written so."""
    path.parent.mkdir(parents=True, exist_ok=True)
    draft = path.with_name(f".{path.name}.{uuid.uuid4().hex[:12]}.draft")
    try:
        with open(draft, "x", encoding="utf-8", newline=newline) as handle:
            yield handle
        os.replace(draft, path)
    finally:
        draft.unlink(missing_ok=True)


@dataclass(frozen=True)
class Verdict:
    """A verdict-only run, for the mutant harness (never a student's grade): it stops at the first
    test cell that fails, the later test cells scoring 0. With `tests_from` (a grade_id), the test
    cells before that cell are not run and keep their points: a hand-in that differs from the
    solution from that cell on passes them as the solution does, since a test cell runs before
    any later cell. (The harness checks that skipping them leaves the solution at full marks.)"""

    tests_from: str | None = None


def autograde(
    ws: Workspace,
    student: str,
    assignment: str,
    settings=None,
    keep: list | None = None,
    verdict_only: Verdict | None = None,
    timeout: float | None = None,
) -> None:
    """nbgrader autograde one student's hand-in of `assignment`, its kernel in the sandbox (`autograder.isolation.sandbox`) with `settings` (default limits).
    The run is stopped (NotebookTimeout) past `timeout` seconds (default: the notebook's limit).

    `keep`, a list, receives the guard logs (one list of events per kernel started).
    `verdict_only`: a Verdict run (SplitExecute), for the mutant harness, never for a student's grade."""
    settings = settings or Settings()
    # A cell's output that stops flowing (a flood cut by the cap, a killed child) must not
    # fail the whole notebook: raise_on_iopub_timeout off. Once the last cell has run, the kernel
    # is killed, not asked to shut down: nothing of it is needed any more (the guard's log is
    # written line by line), the hand-in's own exit handlers never run, and ipykernel 7 sometimes
    # hangs in its shutdown (its control thread publishes "idle" to the IOPub thread that has
    # just stopped, and the main thread waits for it), which cost 3.1 s in about one hand-in in
    # five until jupyter_client's SIGTERM (benchmarks/README.md, issue 44).
    args = ["autograde", assignment, "--force", f"--Execute.timeout={settings.limits.cell_timeout}",
            "--Execute.raise_on_iopub_timeout=False", "--Execute.shutdown_kernel=immediate",
            "--KernelManager.transport=ipc", f"--student={student}"]
    from autograder.isolation.boundary.execute import course_cells  # (it imports nbgrader)

    # The test cells run in the trusted runner (autograder.isolation.boundary): which cells are the course's.
    cells = json.dumps({**course_cells(read_notebook(ws.source_path(assignment))),
                        "stop_after_failed_test": verdict_only is not None,
                        "tests_from": verdict_only and verdict_only.tests_from})
    key = os.urandom(32)  # the guard signs its log with it: lines the notebook writes are seen
    course = key_file = None
    # AUTOGRADER_KEEP_SANDBOX keeps the folder, for debugging the sandbox
    with scratch.folder("course-sandbox-", keep=bool(os.environ.get("AUTOGRADER_KEEP_SANDBOX"))) as base:
        try:
            course = _private_file(ws, ".course-cells-", ".json", cells.encode())
            key_file = _private_file(ws, ".guard-", ".key", key)
            os.chmod(base, 0o711)  # kernels (another user) reach their own folders, never list them
            (base / "runtime").mkdir()
            settings.base, settings.hide = str(base), settings.hide or hidden_paths(ws)
            settings.key_file = str(key_file)
            settings.isolation = probe()[1]
            runtime = str(base / "runtime")  # the connection file and the kernel's sockets (nbclient uses TMPDIR)
            env = {"AUTOGRADER_SANDBOX": settings.to_env(), "JUPYTER_RUNTIME_DIR": runtime, "TMPDIR": runtime,
                   "AUTOGRADER_SPLIT": str(course)}
            args.append(f"--KernelManager.ip={runtime}/kernel")  # Unix sockets: kernel-1 ... kernel-5
            try:
                run_nbgrader(ws, *args, timeout=settings.limits.notebook_timeout if timeout is None else timeout, env=env)
            finally:
                if keep is not None:
                    keep.extend(read_guard_logs(base, key))
        finally:
            for path in (key_file, course):
                if path is not None:
                    path.unlink(missing_ok=True)
