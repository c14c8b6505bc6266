"""The autograder's own logic, without grading a notebook: damaged inputs, catalogs,
leak detection, workspace safety."""
import os
import sqlite3
import subprocess
import sys
from dataclasses import fields

import nbformat
import pytest
from conftest import REPO_ROOT
from nbformat.v4 import new_code_cell, new_notebook
from nbgrader.api import Gradebook

from autograder import cli
from autograder.course import layout as course
from autograder.quality import mutants
from autograder.release import build as release
from autograder.grading import workspace
from autograder.isolation.boundary import execute
from autograder.course.layout import CourseError
from autograder.isolation.sandbox import Limits


def run_cli(*args):
    return subprocess.run(
        [sys.executable, "-m", "autograder", *args], cwd=REPO_ROOT, capture_output=True, text=True, timeout=120
    )


def graded_cell(source, gid, **flags):
    meta = {"grade": False, "grade_id": gid, "locked": False, "schema_version": 3, "solution": False, "task": False}
    meta.update(flags)
    return new_code_cell(source, metadata={"nbgrader": meta})


def test_a_notebook_that_is_not_json_is_a_clear_error(tmp_path):
    bad = tmp_path / "Copy of 01.ipynb"
    bad.write_text('{"cells": [ oops')
    with pytest.raises(CourseError, match="not valid JSON"):
        course.read_notebook(bad)
    (tmp_path / "list.ipynb").write_text("[1, 2]")
    with pytest.raises(CourseError, match="not"):
        course.read_notebook(tmp_path / "list.ipynb")
    with pytest.raises(CourseError, match="no such notebook"):
        course.read_notebook(tmp_path / "missing.ipynb")


def test_an_unknown_assignment_is_named_with_the_known_ones():
    proc = run_cli("release", "99_nonexistent")
    assert proc.returncode == 2
    assert "no assignment named '99_nonexistent'" in proc.stderr
    assert "01_tokenization_embeddings" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_a_damaged_catalog_given_on_the_command_line_is_a_clear_error(tmp_path):
    catalog = tmp_path / "extra.yaml"
    catalog.write_text("- id: x\n  assignment: 01_tokenization_embeddings\n  kind: bug\n  source: pass\n")
    proc = run_cli("mutants", "--catalog", str(catalog))
    assert proc.returncode == 2 and "missing cell" in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.parametrize(
    "text, message",
    [
        ("{not: [yaml", "not a valid catalog"),
        ("id: lonely", "is a list of mutants"),
        ("- just a string", "expected a mapping"),
        ("- {id: a, assignment: x, cell: c, kind: maybe, source: s}", "kind must be one of"),
        ("- {id: a, assignment: x, cell: c, kind: bug, mistake: typo, source: s}", "mistake tags a bug"),
        ("- {id: a, assignment: x, cell: c, kind: correct, mistake: dtype, source: s}", "mistake tags a bug"),
    ],
)
def test_catalog_defects_are_reported_by_entry(tmp_path, text, message):
    path = tmp_path / "c.yaml"
    path.write_text(text)
    with pytest.raises(CourseError, match=message):
        mutants.load_catalog(path)


def test_duplicate_mutant_ids_across_catalogs_are_refused(tmp_path):
    entry = "- {id: same, assignment: x, cell: c, kind: bug, source: s}\n"
    (tmp_path / "a.yaml").write_text(entry)
    (tmp_path / "b.json").write_text('[{"id": "same", "assignment": "x", "cell": "c", "kind": "bug", "source": "s"}]')
    with pytest.raises(CourseError, match="appears twice"):
        mutants.load_catalogs([tmp_path / "a.yaml", tmp_path / "b.json"])


def test_mutants_of_a_missing_assignment_or_cell_are_errors_not_catches(tmp_path):
    (tmp_path / "c.yaml").write_text("- {id: ghost, assignment: 42_ghost, cell: c, kind: bug, source: s}\n")
    outcomes = mutants.run([tmp_path / "c.yaml"])
    assert [(o.status, o.ok) for o in outcomes] == [("error", False)]
    nb = new_notebook(cells=[graded_cell("x = 1", "answer", solution=True)])
    assert mutants.apply_mutant(nb, "nope", "x = 2") is None
    mutated = mutants.apply_mutant(nb, "answer", "x = 2")
    assert mutated.cells[0].source == "x = 2" and nb.cells[0].source == "x = 1"


def _mutant(mid, cell, kind="correct", source="pass", mistake=""):
    return mutants.Mutant(mid, "01_tokenization_embeddings", cell, kind, source, mistake=mistake)


def test_correct_variants_are_packed_at_most_one_per_cell():
    variants = [_mutant("a1", "a"), _mutant("a2", "a"), _mutant("b1", "b"), _mutant("a3", "a"), _mutant("x", "b", "bug")]
    packs = mutants.pack_correct_variants(variants)
    assert [[m.id for m in pack] for pack in packs] == [["a1", "b1"], ["a2"], ["a3"]]


def test_a_pack_that_loses_points_is_graded_again_variant_by_variant(tmp_path):
    """A wrong "correct" variant must be reported lost on its own, and must not take the
    right one packed with it down. A bug's run stops at its first failing test cell: the
    later test cells score 0 without running; it skips the test cells before its own cell
    (they keep their points, as on the solution); the solution runs whole."""
    right = _mutant("right", "word_tokenize",
                    source="def word_tokenize(text, lower=True):\n    return re.findall(r'\\w+|[^\\w\\s]', text.lower() if lower else text)\n")
    wrong = _mutant("wrong", "embed", source="def one_hot(ids, vocab_size):\n    return ids\n")
    bug = _mutant("bug", "word_tokenize", "bug", source="def word_tokenize(text, lower=True):\n    return text.split()\n")
    late = _mutant("late", "nearest_neighbors", "bug", source="def cosine_similarity_matrix(E):\n    return E @ E.T\n\n\n"
                   "def nearest_neighbors(index, E, k):\n    return list(range(k))\n")
    assert [[m.id for m in p] for p in mutants.pack_correct_variants([right, wrong, bug])] == [["right", "wrong"]]
    name = "01_tokenization_embeddings"
    outcomes, scores = mutants.grade_mutants(name, [right, wrong, bug, late], workspace=tmp_path / "ws")
    assert {o.mutant.id: o.status for o in outcomes} == {"right": "kept", "wrong": "lost", "bug": "caught", "late": "caught"}
    assert set(scores) == {mutants.BASELINE, right.student, wrong.student, bug.student, late.student}
    points = {c.name: c.score == c.max_score for c in scores[late.student].auto_cells}
    graded = course.read_notebook(scores[late.student].autograded)
    tests = [c for c in graded.cells if c.cell_type == "code" and c.metadata.get("nbgrader", {}).get("grade")]
    order = [c.metadata["nbgrader"]["grade_id"] for c in tests]
    before = order[:order.index("test_cosine_similarity_matrix")]
    skipped = [gid for gid, c in zip(order, tests) if any(execute.SKIPPED in o.get("text", "") for o in c.outputs)]
    assert before and skipped == before and all(points[gid] for gid in before)
    assert not points["test_cosine_similarity_matrix"]
    caught = next(o for o in outcomes if o.mutant.id == "bug")
    tests = [c.name for c in scores[bug.student].auto_cells]
    assert "failed test_word_tokenize (then " in caught.detail and f"{len(tests) - 1} not run" in caught.detail
    assert scores[bug.student].auto_score == 0
    graded = course.read_notebook(scores[bug.student].autograded)
    unrun = [c for c in graded.cells if c.cell_type == "code" and any(o.get("ename") == "NotRun" for o in c.outputs)]
    assert len(unrun) == len(tests) - 1 and all(c.metadata["nbgrader"].get("grade") for c in unrun)
    assert scores[mutants.BASELINE].full_marks


def test_bugs_skip_earlier_test_cells_only_where_the_solution_keeps_full_marks_so(monkeypatch):
    """Where the solution, its test cells before a cell skipped, loses points (a later test cell
    needs what an earlier one left), that cell's bugs are graded again with every test cell."""
    from autograder.grading.handin import GradeResult
    from autograder.grading.scores import CellScore, NotebookScore
    from autograder.grading.workspace import Verdict

    batches = []

    def grade_batch(assignment, submissions, workspace, jobs, verdict_only=None):
        batches.append(dict(verdict_only or {}))
        breaks = {s for s, v in (verdict_only or {}).items() if s.startswith("solution-") and v.tests_from == "embed"}
        return {s: GradeResult(s, assignment, "graded", score=NotebookScore(
            s, assignment, [CellScore("test", 0.0 if s in breaks or s.startswith("mutant-") else 1.0, 1.0, True)]))
            for s in submissions}

    monkeypatch.setattr(mutants, "_grade_batch", grade_batch)
    early, late = _mutant("early", "word_tokenize", "bug"), _mutant("late", "embed", "bug")
    outcomes, _ = mutants.grade_mutants("01_tokenization_embeddings", [early, late])
    assert {o.mutant.id: o.status for o in outcomes} == {"early": "caught", "late": "caught"}
    first, again = batches
    assert first[early.student] == Verdict("word_tokenize") and first[late.student] == Verdict("embed")
    assert {s: v for s, v in first.items() if s.startswith("solution-")} == {  # no test cell before word_tokenize
        "solution-tests-from-embed": Verdict("embed")}
    assert again == {late.student: Verdict()}


def test_coverage_gaps_name_cells_without_a_bug_of_a_kind_and_false_reasons(tmp_path, monkeypatch):
    monkeypatch.setattr(mutants, "NOT_APPLICABLE_DIR", tmp_path)
    name = "01_tokenization_embeddings"
    (tmp_path / f"{name}.yaml").write_text(
        "word_tokenize: {gradient: strings, boundary: both, spelling: x}\nno_such_cell: {dtype: x}\n"
    )
    gaps = mutants.coverage_gaps(name, [_mutant("b", "word_tokenize", "bug", mistake="boundary")])
    assert f"{name}: not_applicable names 'no_such_cell', which is no graded code cell" in gaps
    assert f"{name}/word_tokenize: not_applicable names 'spelling', not one of {mutants.MISTAKES}" in gaps
    assert f"{name}/word_tokenize: boundary has a bug mutant and a reason it cannot happen" in gaps
    assert f"{name}/word_tokenize: no dtype bug mutant and no reason it cannot happen" in gaps
    assert not [g for g in gaps if "word_tokenize: no gradient" in g]
    (tmp_path / f"{name}.yaml").write_text("- a list\n")
    with pytest.raises(CourseError, match="expected cell"):
        mutants.coverage_gaps(name, [])
    # a reason given twice (as a merge can leave one cell's reasons under another cell) is refused, not lost
    (tmp_path / f"{name}.yaml").write_text("word_tokenize:\n  gradient: a\n  dtype: b\n  gradient: c\n")
    with pytest.raises(CourseError, match="'gradient' appears twice"):
        mutants.coverage_gaps(name, [])


def test_leak_detection_finds_markers_and_solution_text():
    source = new_notebook(
        cells=[
            graded_cell("def f():\n    ### BEGIN SOLUTION\n    return sum([40, 1, 1])\n    x = 1\n    ### END SOLUTION", "f", solution=True),
            graded_cell("assert f() == 42\n### BEGIN HIDDEN TESTS\nassert f() != 0 and f() > 41\n### END HIDDEN TESTS", "test_f", grade=True, points=1),
        ]
    )
    clean = new_notebook(cells=[new_code_cell("def f():\n    raise NotImplementedError()\nx = 1"), new_code_cell("assert f() == 42")])
    assert release.find_leaks(source, clean) == []  # a line as short as "x = 1" is no leak
    leaky = new_notebook(cells=[new_code_cell("def f():\n  return sum([40, 1, 1])"), new_code_cell("assert f() == 42\nassert f() != 0 and f() > 41")])
    assert len(release.find_leaks(source, leaky)) == 2
    marked = new_notebook(cells=[new_code_cell("### BEGIN SOLUTION")])
    assert "marker" in release.find_leaks(source, marked)[0]


def test_cli_sets_every_limit_and_shows_the_defaults_of_limits():
    options = [f"--{f.name.replace('_', '-')}" for f in fields(Limits)]
    values = range(len(options), 0, -1)  # (the kernel's /tmp, the last, is a part of its memory)
    args = cli.build_parser().parse_args(["grade", *(x for o, v in zip(options, values) for x in (o, str(v)))])
    assert cli._limits(args) == Limits(*values)
    assert cli._limits(cli.build_parser().parse_args(["grade", "--memory-mb", "100"])) == Limits(memory_mb=100)
    grade_help = " ".join(run_cli("grade", "--help").stdout.split())
    for f in fields(Limits):
        assert f"--{f.name.replace('_', '-')} N {f.metadata['help']} (default {f.default})" in grade_help


TABLE_UNDER_ASCII = """
import sys
from autograder.grading import batch
from autograder import cli
from autograder.grading.handin import GradeResult
batch.grade = lambda *args, **kwargs: [GradeResult("Jos\\N{LATIN SMALL LETTER E WITH ACUTE}", "05_self_attention",
                                                   "sandbox", message="hidden-path: opened /srv/\\N{EM DASH}")]
sys.exit(cli.main(["grade", "--workspace", sys.argv[1]]))
"""


def test_grades_table_prints_whatever_the_terminal_s_encoding(tmp_path):
    """Under a strict locale (here PYTHONIOENCODING=ascii) a name or a message the encoding lacks is
    printed escaped, never a UnicodeEncodeError instead of the table."""
    proc = subprocess.run([sys.executable, "-c", TABLE_UNDER_ASCII, str(tmp_path / "ws")], cwd=REPO_ROOT,
                          capture_output=True, text=True, timeout=120, env={**os.environ, "PYTHONIOENCODING": "ascii"})
    assert proc.returncode == 1 and "Error" not in proc.stderr, proc.stderr  # 1: a status other than graded
    assert "Jos\\xe9 " in proc.stdout and "opened /srv/\\u2014" in proc.stdout


def test_the_workspace_is_never_the_repository_or_a_tracked_folder(tmp_path):
    for bad in (REPO_ROOT, REPO_ROOT.parent, REPO_ROOT / "solutions" / "x", REPO_ROOT / "notebooks"):
        with pytest.raises(CourseError):
            workspace.open_workspace(bad)
    ws = workspace.open_workspace(tmp_path / "ws")
    assert (ws.root / "nbgrader_config.py").is_file()
    assert sys.executable in (ws.root / "jupyter" / "kernels" / "python3" / "kernel.json").read_text()


def test_a_new_gradebook_is_the_one_nbgrader_creates(tmp_path):
    """The grader creates a workspace's gradebook without nbgrader's `alembic heads` command: same
    tables, same revision as a gradebook nbgrader made itself (that command included)."""
    def contents(path):
        db = sqlite3.connect(path)
        try:
            return sorted(db.execute("SELECT type, name, sql FROM sqlite_master")), list(db.execute("SELECT * FROM alembic_version"))
        finally:
            db.close()

    ws = workspace.open_workspace(tmp_path / "ws")
    workspace.create_gradebook(ws)
    workspace.ensure_scripts_on_path()
    Gradebook(f"sqlite:///{tmp_path / 'nbgrader.db'}").close()
    ours, theirs = contents(ws.db_path), contents(tmp_path / "nbgrader.db")
    assert ours[1] and ours == theirs
    assert sorted(p.name for p in ws.root.glob("*.db")) == ["gradebook.db"]  # no draft left
    with Gradebook(ws.db_url) as gb:  # kept as it is when it exists
        gb.add_student("ada")
    workspace.create_gradebook(ws)
    with Gradebook(ws.db_url) as gb:
        assert [s.id for s in gb.students] == ["ada"]


def test_only_a_scratch_workspace_keeps_a_write_ahead_log(tmp_path):
    """The mutant harness's workspaces commit without syncing three files each time; an instructor's
    keeps SQLite's default journal (a write-ahead log needs one host: a workspace may be on NFS)."""
    def journal(ws):
        workspace.create_gradebook(ws)
        db = sqlite3.connect(ws.db_path)
        try:
            return db.execute("PRAGMA journal_mode").fetchone()[0]
        finally:
            db.close()

    assert journal(workspace.open_workspace(tmp_path / "instructor")) == "delete"
    scratch = workspace.open_workspace(tmp_path / "scratch", scratch=True)
    assert journal(scratch) == "wal"
    with Gradebook(scratch.db_url) as gb:  # nbgrader reads and writes it as any gradebook
        gb.add_student("ada")
    with Gradebook(scratch.db_url) as gb:
        assert [s.id for s in gb.students] == ["ada"]


def test_grading_a_workspace_without_hand_ins_says_so(tmp_path):
    proc = run_cli("grade", "--workspace", str(tmp_path / "empty"))
    assert proc.returncode == 2 and "holds no hand-ins" in proc.stderr


def test_export_before_grading_says_what_to_run(tmp_path):
    proc = run_cli("export", "--workspace", str(tmp_path / "fresh"))
    assert proc.returncode == 2 and "autograder grade" in proc.stderr


def test_solution_notebooks_are_committed_without_outputs():
    for path in sorted((REPO_ROOT / "solutions").glob("*/*.ipynb")):
        nb = nbformat.read(path, as_version=4)
        for cell in nb.cells:
            if cell.cell_type == "code":
                assert not cell.outputs and cell.execution_count is None, f"{path.name}: clear the outputs"




def test_the_grader_parses_python_only_through_the_thread_safe_parse():
    """`grade --jobs N` grades in threads, and ast.parse is not thread-safe in CPython 3.11 (two at
    once fail with "AST constructor recursion depth mismatch"): every parse in the grader's process
    goes through utils.cells.parse, which holds a lock. The runner's own process is single-threaded."""
    import ast as python_ast

    own_process_only = {"autograder/isolation/boundary/runner_side.py", "autograder/isolation/boundary/runner.py",
                        "autograder/isolation/boundary/kernel_side.py"}
    offenders = []
    for path in sorted((REPO_ROOT / "autograder").rglob("*.py")):
        name = path.relative_to(REPO_ROOT).as_posix()
        for node in python_ast.walk(python_ast.parse(path.read_text())):
            if (isinstance(node, python_ast.Call) and python_ast.unparse(node.func) in ("ast.parse", "compile")
                    and name not in own_process_only):
                offenders.append(f"{name}:{node.lineno}")
    assert not offenders, offenders


def test_nbgraders_metadata_check_with_the_schema_checked_once_accepts_and_refuses_the_same(monkeypatch):
    """The nbgrader runner's schema cache (nbgrader_runner.check_schemas_once) changes only how
    often the schema is checked: every cell of every solution passes as before, and a cell with
    bad metadata raises the same error."""
    import jsonschema
    from nbgrader.nbgraderformat import common
    from nbgrader.nbgraderformat.v3 import MetadataValidatorV3

    from autograder.isolation import nbgrader_runner

    monkeypatch.setattr(common, "jsonschema", jsonschema)
    validator = MetadataValidatorV3()
    bad = course.read_notebook(course.solution_path(course.assignments()[0]))
    cell = next(c for c in bad.cells if c.metadata.get("nbgrader", {}).get("grade"))
    cell.metadata.nbgrader["points"] = "three"

    def outcome(nb):
        try:
            validator.validate_nb(nb)
        except jsonschema.ValidationError as exc:
            return exc.message, list(exc.path)
        return None

    expected = outcome(bad)
    assert expected is not None and "three" in expected[0]
    nbgrader_runner.check_schemas_once()
    assert isinstance(common.jsonschema, nbgrader_runner._SchemaOnce)
    for name in course.assignments():
        assert outcome(course.read_notebook(course.solution_path(name))) is None, name
    assert outcome(bad) == expected
