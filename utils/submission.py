"""`check_submission()`: will the grader be able to grade this notebook, as saved?

The last cell of every notebook calls it. It reads the notebook the way it will be handed
in (in Colab through Colab's notebook API, elsewhere the saved file on disk), compares
it with the structure of the release (``utils/course_manifest.json``, written by the
instructor's ``python -m autograder release``), reruns the visible self-checks on the
code of this session, and prints what to fix and how to hand the file in.

It only prints (to stdout) and never raises, so the cell never fails; while nbgrader
grades (NBGRADER_EXECUTION set) it does nothing.
"""
from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import re
import warnings
from dataclasses import dataclass, field
from pathlib import Path

from utils.cells import grade_id, nbgrader_meta, normalized_source
from utils.runtime import in_colab

__all__ = ["ANSWER_STUB", "COMMON_IDS", "MANIFEST_FILE", "PLACEHOLDER_MARK", "Report", "check_submission", "compare_structure",
           "guess_assignment", "inspect_submission", "load_manifest", "locate_notebook", "rerun_self_checks", "source_digest"]

MANIFEST_FILE = Path(__file__).resolve().with_name("course_manifest.json")
PLACEHOLDER_MARK = "YOUR-GITHUB-ORG"
# grade_ids every notebook shares; they say nothing about which notebook this is.
COMMON_IDS = {"setup", "check_submission"}
ANSWER_STUB = "YOUR ANSWER HERE"


def source_digest(source) -> str:
    """sha256 of the normalized source, as stored in the manifest for locked cells."""
    return hashlib.sha256(normalized_source(source).encode("utf-8")).hexdigest()


def load_manifest(path: Path = MANIFEST_FILE) -> dict:
    """{"repository", "branch", "assignments": {name: {"cells": [...]}}}."""
    with open(path, encoding="utf-8") as f:
        return json.load(f)


@dataclass
class Report:
    """What check_submission found. `problems` stop the grader; `notes` do not."""

    assignment: str | None = None
    where: str = ""
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    checks: list[tuple[str, bool, str]] = field(default_factory=list)
    hand_in: str = ""

    @property
    def ready(self) -> bool:
        return not self.problems

    def text(self) -> str:
        lines = [f"Submission check of {self.assignment or 'this notebook'} ({self.where})"]
        if self.problems:
            lines.append(f"\nNOT READY: the grader cannot grade this file as it is. {len(self.problems)} thing(s) to fix:")
            lines += [f"  {i}. {p}" for i, p in enumerate(self.problems, 1)]
        else:
            lines.append("\nREADY: the grader will be able to grade this file (names, cells and metadata are intact).")
        if self.notes:
            lines.append("\nWorth knowing:")
            lines += [f"  - {n}" for n in self.notes]
        if self.checks:
            passed = sum(ok for _, ok, _ in self.checks)
            lines.append(f"\nVisible self-checks, rerun on the code of this session: {passed} of {len(self.checks)} pass")
            for name, ok, message in self.checks:
                lines.append(f"  {'pass' if ok else 'FAIL'}  {name}" + ("" if ok else f": {message}"))
            lines.append("  (the grader also runs hidden checks; run Restart & Run All before handing in)")
        if self.hand_in:
            lines.append("\nHand in: " + self.hand_in)
        return "\n".join(lines)


# ---------------------------------------------------------------- reading the notebook


def _colab_notebook() -> dict:
    from google.colab import _message

    reply = _message.blocking_request("get_ipynb", request="", timeout_sec=30)
    if not reply or "ipynb" not in reply:
        raise RuntimeError("Colab did not hand over the notebook")
    return reply["ipynb"]


def _colab_notebook_name() -> str | None:
    """The notebook's file name in Colab (its title), from the runtime's Jupyter sessions API."""
    import urllib.request

    host = os.environ.get("COLAB_JUPYTER_IP", "172.28.0.2")
    port = os.environ.get("COLAB_JUPYTER_PORT", "9000")
    try:
        with urllib.request.urlopen(f"http://{host}:{port}/api/sessions", timeout=2) as reply:
            sessions = json.load(reply)
        return sessions[0]["name"] or None
    except Exception:  # no such service: only real Colab runtimes have it
        return None


def _user_namespace() -> dict | None:
    try:
        from IPython import get_ipython
    except ImportError:
        return None
    shell = get_ipython()
    return getattr(shell, "user_ns", None)


def _path_from_jupyter_server() -> str | None:
    """The notebook path that the Jupyter server running this kernel knows now (after a
    rename too), from its sessions API; None when there is no such server."""
    try:
        import urllib.request

        from ipykernel.connect import get_connection_file
        from jupyter_server.serverapp import list_running_servers

        kernel_id = Path(get_connection_file()).stem.removeprefix("kernel-")
        for server in list_running_servers():
            url = f"{server['url'].rstrip('/')}/api/sessions?token={server.get('token', '')}"
            with urllib.request.urlopen(url, timeout=2) as reply:
                for session in json.load(reply):
                    if session.get("kernel", {}).get("id") == kernel_id:
                        return str(Path(server.get("root_dir") or server.get("notebook_dir") or ".") / session["path"])
    except Exception:  # no server, no kernel, another front end: fall back to the other clues
        return None
    return None


def locate_notebook(namespace: dict | None = None) -> Path | None:
    """The saved .ipynb file of the running notebook, when it can be found.

    Looks at VS Code's record of the file (``__vsc_ipynb_file__``), asks the Jupyter
    server that runs this kernel, falls back on ``JPY_SESSION_NAME`` (the path when the
    kernel started), then on the current folder when it holds exactly one notebook.
    """
    namespace = namespace or {}
    for candidate in (
        namespace.get("__vsc_ipynb_file__"),
        _path_from_jupyter_server(),
        os.environ.get("JPY_SESSION_NAME"),
        namespace.get("__session__"),
    ):
        if candidate and str(candidate).endswith(".ipynb") and Path(candidate).is_file():
            return Path(candidate).resolve()
    here = sorted(Path.cwd().glob("*.ipynb"))
    return here[0].resolve() if len(here) == 1 else None


def guess_assignment(nb: dict, file_name: str | None, manifest: dict) -> str | None:
    """Which course notebook this is: by its graded cells, else its file name, else its badge link."""
    known = manifest["assignments"]
    ids = {grade_id(c) for c in nb.get("cells", [])} - COMMON_IDS - {None}
    overlap = {name: len(ids & {c["grade_id"] for c in entry["cells"]}) for name, entry in known.items()}
    best = max(overlap, key=overlap.get, default=None)
    if best and overlap[best]:
        return best
    texts = [file_name or ""] + [normalized_source(c.get("source")) for c in nb.get("cells", [])[:3]]
    for text in texts:
        for name in sorted(known, key=len, reverse=True):
            if name in text:
                return name
    return None


# ---------------------------------------------------------------- comparing with the release


def _fresh_copy_hint(name: str, manifest: dict) -> str:
    repo = manifest.get("repository", "")
    if repo and PLACEHOLDER_MARK not in repo and repo.startswith("https://github.com/"):
        slug = repo.removeprefix("https://github.com/").removesuffix(".git").strip("/")
        where = f"https://colab.research.google.com/github/{slug}/blob/{manifest.get('branch', 'main')}/notebooks/{name}/{name}.ipynb"
    else:
        where = f"notebooks/{name}/{name}.ipynb of the course"
    return f"open a fresh copy of the notebook ({where})"


def _describe(cell: dict) -> str:
    gid, role = cell["grade_id"], cell["role"]
    points = cell.get("points")
    if role == "test":
        return f"the self-check cell '{gid}' ({points:g} point{'s' if points != 1 else ''})"
    if role == "solution":
        return f"your answer cell '{gid}'"
    if role == "answer":
        return f"the written-answer cell '{gid}'"
    return f"the locked cell '{gid}'"


def _looks_like(cell: dict, expected: dict) -> bool:
    """Whether a cell without nbgrader metadata is the expected cell that lost it."""
    if cell.get("cell_type") != expected["cell_type"]:
        return False
    source = normalized_source(cell.get("source"))
    if expected.get("sha256"):
        return source_digest(source) == expected["sha256"]
    if expected["role"] == "solution":
        return re.search(rf"^\s*(def|class)\s+{re.escape(expected['grade_id'])}\b", source, re.MULTILINE) is not None
    return False


def compare_structure(nb: dict, name: str, file_name: str | None, manifest: dict) -> tuple[list[str], list[str]]:
    """(problems, notes) of the saved notebook `nb` against the release of assignment `name`."""
    problems, notes = [], []
    fresh = _fresh_copy_hint(name, manifest)
    expected_cells = manifest["assignments"][name]["cells"]
    cells = nb.get("cells") if isinstance(nb.get("cells"), list) else []

    if file_name is not None and file_name != f"{name}.ipynb":
        problems.append(
            f"The file is named '{file_name}', but the grader looks for '{name}.ipynb'. "
            f"Fix: rename it to {name}.ipynb (JupyterLab: right-click the notebook's tab -> Rename Notebook; "
            "Colab: click the title at the top left, or File -> Rename) before you download and hand it in."
        )
    if not str(nb.get("nbformat", "")).startswith("4"):
        problems.append("The file is not a version-4 Jupyter notebook. Fix: save it from JupyterLab or Colab as .ipynb.")

    tagged: dict[str, list[dict]] = {}
    for cell in cells:
        gid = grade_id(cell)
        if gid:
            tagged.setdefault(gid, []).append(cell)
    if not tagged and cells:
        problems.append(
            "The notebook has lost all of its hidden nbgrader metadata, with which the grader finds your "
            "answers and its tests (this happens when a notebook is rebuilt by copying cells into a new one, "
            f"or saved by a tool that drops cell metadata). Fix: {fresh}, copy your answers into it cell by cell, "
            "save it and run this check again."
        )
        return problems, notes

    untagged = [c for c in cells if not grade_id(c)]
    unanswered, unwritten = [], []
    for expected in expected_cells:
        gid, what = expected["grade_id"], _describe(expected)
        found = tagged.get(gid, [])
        if not found:
            if any(_looks_like(c, expected) for c in untagged):
                problems.append(
                    f"{what[0].upper() + what[1:]} is there but has lost its hidden nbgrader metadata, so the "
                    f"grader cannot find it. Fix: {fresh} and copy your answers into it; do not copy cells "
                    "between notebooks with a tool that drops metadata."
                )
            elif expected["role"] in ("test", "solution", "answer") or gid == "setup":
                undo = "Edit -> Undo Cell Operation (z)" if not in_colab() else "Edit -> Undo (Ctrl+M Z)"
                problems.append(
                    f"{what[0].upper() + what[1:]} was deleted; the grader needs it. Fix: if you deleted it just now, "
                    f"{undo}; otherwise {fresh}, copy that cell and paste it back where it was "
                    "(or copy your answers into the fresh copy)."
                )
            else:
                notes.append(f"{what[0].upper() + what[1:]} is missing (the grader runs without it, but your notebook may not).")
            continue
        if len(found) > 1:
            problems.append(
                f"{what[0].upper() + what[1:]} appears {len(found)} times (a copied or duplicated cell keeps its hidden id). "
                "Fix: keep the one with your answer and delete the others (select the cell, Edit -> Delete Cells)."
            )
        cell = found[0]
        meta = nbgrader_meta(cell)
        if cell.get("cell_type") != expected["cell_type"]:
            problems.append(
                f"{what[0].upper() + what[1:]} was turned into a {cell.get('cell_type')} cell. "
                f"Fix: change it back to {expected['cell_type']} (Jupyter: y for code, m for markdown)."
            )
        flags = {k: bool(meta.get(k)) for k in ("grade", "solution", "locked")}
        if flags != {k: bool(expected[k]) for k in ("grade", "solution", "locked")} or (
            expected["role"] in ("test", "answer") and meta.get("points") != expected.get("points")
        ):
            problems.append(
                f"The hidden nbgrader settings of {what} were changed (for example with the nbgrader toolbar). "
                f"Fix: {fresh} and copy your answers into it."
            )
        source = normalized_source(cell.get("source"))
        if expected.get("sha256") and source_digest(source) != expected["sha256"]:
            notes.append(f"You changed {what}; the grader runs the original instead, so your edit will not count.")
        if expected["role"] == "solution" and "raise NotImplementedError" in source:
            unanswered.append(gid)
        if expected["role"] == "answer" and ANSWER_STUB in source:
            unwritten.append(gid)
    if unanswered:
        notes.append(f"Not answered yet (still raise NotImplementedError, worth 0 points): {', '.join(unanswered)}.")
    if unwritten:
        notes.append(f"Written answers still to write ({ANSWER_STUB}): {', '.join(unwritten)}.")
    return problems, notes


# ---------------------------------------------------------------- rerunning the visible checks


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__


def rerun_self_checks(nb: dict, name: str, manifest: dict, namespace: dict) -> list[tuple[str, bool, str]]:
    """Run each visible self-check cell of the saved notebook on a copy of `namespace`."""
    results = []
    tests = [c for c in manifest["assignments"][name]["cells"] if c["role"] == "test"]
    by_id = {grade_id(c): c for c in nb.get("cells", []) if c.get("cell_type") == "code"}
    for expected in tests:
        cell = by_id.get(expected["grade_id"])
        if cell is None:
            results.append((expected["grade_id"], False, "the cell is missing (see above)"))
            continue
        scope = dict(namespace)
        out, err = io.StringIO(), io.StringIO()
        try:
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), warnings.catch_warnings():
                warnings.simplefilter("ignore")
                exec(compile(normalized_source(cell.get("source")), f"<{expected['grade_id']}>", "exec"), scope)
        except NotImplementedError:
            results.append((expected["grade_id"], False, "not answered yet (NotImplementedError)"))
        except NameError as exc:
            results.append((expected["grade_id"], False, f"{_first_line(exc)}: run the cells above it first (Run -> Run All Cells)"))
        except Exception as exc:  # a failed check is an AssertionError; any other error is the answer's
            results.append((expected["grade_id"], False, _first_line(exc)))
        else:
            results.append((expected["grade_id"], True, ""))
    return results


# ---------------------------------------------------------------- the entry point


def inspect_submission(path: str | os.PathLike | None = None, rerun: bool = True, manifest: dict | None = None) -> Report:
    """Build the Report of check_submission() without printing it."""
    manifest = manifest or load_manifest()
    namespace = _user_namespace()
    report = Report()
    file_name = None
    if path is None and in_colab():
        nb = _colab_notebook()
        file_name = _colab_notebook_name()
        report.where = f"Colab{', ' + file_name if file_name else ''}"
        report.hand_in = (
            "File -> Download -> Download .ipynb saves this notebook to your computer; hand in that file. "
            "If your browser renamed it (for example '... (1).ipynb'), rename it first."
        )
    else:
        located = Path(path) if path is not None else locate_notebook(namespace)
        if located is None or not located.is_file():
            report.problems.append(
                "Could not find this notebook's saved file. Fix: save it (File -> Save Notebook, Ctrl+S) and run "
                "utils.check_submission('path/to/NN_name.ipynb') with the path of the file."
            )
            return report
        file_name = located.name
        report.where = f"saved file {located}"
        report.hand_in = f"the file {located} (save it first: File -> Save Notebook, Ctrl+S)."
        try:
            with open(located, encoding="utf-8") as f:
                nb = json.load(f)
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            report.problems.append(
                f"The saved file is not a readable notebook ({type(exc).__name__}). Fix: save it again from "
                "JupyterLab or Colab (File -> Save / Download .ipynb), never from a text editor."
            )
            return report
    if not isinstance(nb, dict):
        report.problems.append("The saved file is not a notebook. Fix: save it again as .ipynb.")
        return report
    name = guess_assignment(nb, file_name, manifest)
    report.assignment = name
    if name is None:
        report.problems.append(
            "This is not one of the course's notebooks (none of its graded cells is known). Fix: work in the "
            "notebook from the course's notebooks/ folder or its Open in Colab link."
        )
        return report
    if file_name is None:
        report.notes.append(
            f"Could not read the notebook's file name here: make sure the file you hand in is named {name}.ipynb "
            "(Colab calls a copy 'Copy of ...'; rename it with File -> Rename)."
        )
    problems, notes = compare_structure(nb, name, file_name, manifest)
    report.problems += problems
    report.notes += notes
    if rerun and namespace is not None:
        report.checks = rerun_self_checks(nb, name, manifest, namespace)
    return report


def check_submission(path: str | os.PathLike | None = None, rerun: bool = True) -> None:
    """Print whether the grader can grade this notebook as saved, what to fix, and how to hand it in.

    path: the saved .ipynb (default: found automatically; in Colab, read through Colab).
    rerun: also rerun the visible self-checks on the code of this session.
    Never raises; prints only to stdout; does nothing while nbgrader grades.
    """
    if os.environ.get("NBGRADER_EXECUTION"):
        print("check_submission: skipped while grading.")
        return
    try:
        report = inspect_submission(path, rerun=rerun)
    except Exception as exc:  # the check must never fail the notebook
        print(f"check_submission could not finish ({_first_line(exc)}). Save the notebook and try again, "
              "or pass the file: utils.check_submission('path/to/NN_name.ipynb').")
        return
    print(report.text())
