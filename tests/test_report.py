"""`report`: the class page and report.json, on a small graded class, and the similarity of answers.

The graded class (one module fixture, five hand-ins of the quickest notebook): the solution,
the blank release, a buggy hand-in, the solution with the catalog's correct variants (different
correct answers) and a renamed copy of the buggy hand-in that also pastes a line of the hidden
tests into a comment.
"""
import csv
import html
import json
import random
import subprocess
import sys

import nbformat
import pytest
from conftest import QUICKEST_ASSIGNMENT, REPO_ROOT

from autograder.reports import similarity
from autograder.grading.batch import grade
from autograder.course.layout import read_notebook, solution_path
from autograder.quality.demo import buggy_notebook
from autograder.reports.export import export
from autograder.reports.feedback import hidden_lines
from autograder.quality.mutants import apply_mutant, default_catalogs, load_catalogs
from autograder.grading.workspace import add_sources, add_submission, open_workspace
from benchmarks.grader.similarity import rename, reorder, variants
from utils.cells import grade_id, is_answer

A = QUICKEST_ASSIGNMENT


def run_cli(*args):
    return subprocess.run([sys.executable, "-m", "autograder", *args], cwd=REPO_ROOT, capture_output=True, text=True,
                          timeout=600)


def with_correct_variants(name):
    nb = read_notebook(solution_path(name))
    done = set()
    for m in load_catalogs(default_catalogs()):
        if m.assignment == name and m.kind == "correct" and m.cell not in done:
            nb = apply_mutant(nb, m.cell, m.source) or nb
            done.add(m.cell)
    return nb


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    root = tmp_path_factory.mktemp("report")
    ws = open_workspace(root / "ws")
    add_sources(ws, [A])
    hidden = sorted(hidden_lines(read_notebook(ws.source_path(A))))
    buggy, _ = buggy_notebook(A)
    copy = nbformat.from_dict(json.loads(json.dumps(buggy)))
    answers = {grade_id(c): c for c in copy.cells if c.cell_type == "code" and is_answer(c)}
    renamed = rename({gid: c.source for gid, c in answers.items()}, random.Random(0))
    for gid, cell in answers.items():
        cell.source = renamed[gid]
    first = next(iter(answers.values()))
    first.source += f"\n# {hidden[0]}\n"
    for student, nb in [("ada", solution_path(A)), ("blank", ws.release_path(A)), ("bugsy", buggy),
                        ("carl", with_correct_variants(A)), ("mallory", copy)]:
        add_submission(ws, student, A, nb)
    grade(ws, [A], jobs=2)
    made = run_cli("report", A, "--workspace", str(ws.root), "--out", str(root / "out"))
    assert made.returncode == 0, made.stdout + made.stderr
    export(ws, root / "csv")
    return {"ws": ws, "out": root / "out", "csv": root / "csv", "hidden": hidden}


def test_the_reports_numbers_agree_with_exports_csvs(graded):
    data = json.loads((graded["out"] / "report.json").read_text())
    section = next(a for a in data["assignments"] if a["name"] == A)
    with open(graded["csv"] / f"{A}.csv", newline="") as f:
        table = list(csv.reader(f))
    header, maxima, rows = table[0], table[1], table[2:]
    assert sorted(section["scores"]) == sorted(r[0] for r in rows)
    for row in rows:
        assert section["scores"][row[0]] == pytest.approx(float(row[header.index("total")]))
    cells = {c["name"]: c for c in section["cells"]}
    for i, question in enumerate(header[1:-2], start=1):
        got = [float(r[i]) for r in rows if r[i] != ""]
        top = float(maxima[i])
        assert cells[question]["graded"] == len(got)
        assert cells[question]["passed"] == sum(g >= top for g in got)
        assert sorted(cells[question]["lost"]) == sorted(r[0] for r in rows if r[i] != "" and float(r[i]) < top)
    with open(graded["csv"] / "grades.csv", newline="") as f:
        statuses = {r["student"]: r["status"] for r in csv.DictReader(f) if r["assignment"] == A}
    assert {s: st for st, students in section["statuses"].items() for s in students} == statuses
    assert section["time"]["recorded"] == len(rows) and section["time"]["median_s"] > 0
    lost = {(e["assignment"], e["cell"]): e["lost"] for e in data["exercises"]}
    assert all(lost[A, q] == len(cells[q]["lost"]) for q in cells)
    # the buggy and blank hand-ins fail with messages; the same NotImplementedError counts once per cell
    failing = [c for c in section["cells"] if c["autograded"] and c["lost"]]
    assert failing and all(sum(m["count"] for m in c["messages"]) <= len(c["lost"]) for c in failing)
    assert any("NotImplementedError" in m["message"] for c in failing for m in c["messages"])


def test_a_renamed_copy_is_paired_and_different_correct_answers_are_not(graded):
    data = json.loads((graded["out"] / "report.json").read_text())
    pairs = {frozenset(p["students"]): p for p in data["similar"]}
    copy = pairs[frozenset(("bugsy", "mallory"))]
    assert copy["score"] >= similarity.THRESHOLD and copy["cells"]
    assert frozenset(("ada", "carl")) not in pairs
    assert not any("blank" in pair for pair in pairs)  # the release's own code is no copy
    page = (graded["out"] / "index.html").read_text()
    assert "never an automatic penalty" in page and "bugsy and mallory" in page


def test_no_hidden_test_line_in_the_page_or_the_json(graded):
    page = (graded["out"] / "index.html").read_text()
    text = (graded["out"] / "report.json").read_text()
    assert graded["hidden"]
    for line in graded["hidden"]:
        assert line not in page and html.escape(line) not in page and html.escape(line, quote=False) not in page
        assert line not in text and json.dumps(line)[1:-1] not in text
    assert "[a line quoting the hidden tests was removed]" in page  # mallory's pasted line, shown side by side


def _copy_of(graded, tmp_path):
    import shutil

    shutil.copytree(graded["ws"].root, tmp_path / "ws")
    return open_workspace(tmp_path / "ws")


def test_a_lone_surrogate_a_kernel_logged_leaves_feedback_and_export_whole(graded, tmp_path):
    """The guard logs a refused path escaped ("\\udcff", a byte that is not UTF-8); read back, it is
    valid text (its escape written out), so its note reaches the report, the feedback pages and every
    CSV, all whole."""
    import os

    from autograder.isolation import guard
    from autograder.handins import integrity
    from autograder.reports.feedback import feedback
    from autograder.grading.handin import GradeResult, finish

    ws = _copy_of(graded, tmp_path)
    key = os.urandom(32)
    (tmp_path / "sandbox" / "kernel-1").mkdir(parents=True)
    (tmp_path / "sandbox" / "kernel-1" / "guard.jsonl").write_text(
        guard.encode_line({"event": "hidden-path", "detail": "opened /srv/gr\udcffding", "n": 2}, key))
    logs = integrity.read_guard_logs(tmp_path / "sandbox", key)
    notes = [f.text for f in integrity.guard_findings(logs, None)]
    finish(ws, GradeResult("ada", A, "sandbox", message=notes[0], notes=notes))
    files = [*feedback(ws, [A]), *export(ws, tmp_path / "csv")]
    texts = {path.name if path.suffix == ".csv" else path.parts[-3]: path.read_bytes().decode("utf-8")
             for path in files}
    assert len(texts) == 5 + 4 and all(texts.values())
    for name in ("ada", "grades.csv"):
        assert "hidden-path: opened /srv/gr\\udcffding" in texts[name]


def test_an_export_or_a_feedback_page_that_fails_midway_leaves_the_files_as_they_were(graded, tmp_path, monkeypatch):
    """Written beside, then moved into place: an error while writing (here: the disk is full while
    export writes bugsy's row, a page that cannot be encoded) leaves no file cut short."""
    from autograder.reports import export as exporting
    from autograder.reports import feedback as pages

    ws = _copy_of(graded, tmp_path)
    before = {p: p.read_bytes() for p in [*export(ws, tmp_path / "csv"), *pages.feedback(ws, [A])]}
    status, render = exporting._status, pages.render

    def status_or_full_disk(ws, student, assignment):
        if student == "bugsy":
            raise OSError("no space left on device")
        return status(ws, student, assignment)

    monkeypatch.setattr(exporting, "_status", status_or_full_disk)
    monkeypatch.setattr(pages, "render", lambda student, *args: render(student, *args) + "\ud800")
    with pytest.raises(OSError):
        export(ws, tmp_path / "csv")
    with pytest.raises(UnicodeEncodeError):
        pages.feedback(ws, [A])
    assert {p: p.read_bytes() for p in before} == before, "a file was left cut short"
    assert not list(tmp_path.rglob("*.draft"))


def test_report_before_grading_says_what_to_run(tmp_path):
    proc = run_cli("report", "--workspace", str(tmp_path / "fresh"))
    assert proc.returncode == 2 and "autograder grade" in proc.stderr


# ------------------------------------------------------------------ similarity alone (no grading)


def _prints(cells, given):
    return similarity.fingerprint_hand_in("x", cells, similarity.release_prints(given)).all_prints


def test_normalising_ignores_names_comments_strings_formatting_and_independent_order():
    a = {"c": "def f(xs, n):\n    total = sum(xs)  # add\n    count = len(xs)\n    label = 'mean'\n"
              "    return total / count * n, label\n"}
    b = {"c": "def f( values,k ):\n    '''docstring'''\n    size=len( values )\n\n    s = sum(values)\n"
              "    tag = \"avg\"\n    return s/size*k, tag\n"}
    assert similarity.normal_tokens(a) == similarity.normal_tokens(b)
    c = {"c": a["c"].replace("total / count", "total - count")}  # a different computation
    assert similarity.normal_tokens(a) != similarity.normal_tokens(c)
    items = "def g(n):\n    pe = torch.zeros(n, 2)\n    pe[:, 0] = 1.0\n    pe[:, 1] = 2.0\n    return pe.sum()\n"
    swapped = items.replace("pe[:, 0] = 1.0\n    pe[:, 1] = 2.0", "pe[:, 1] = 2.0\n    pe[:, 0] = 1.0")
    assert similarity.normal_tokens({"c": items}) == similarity.normal_tokens({"c": swapped})
    read_first = items.replace("    pe[:, 1] = 2.0\n    return pe.sum()", "    s = pe.sum()\n    pe[:, 1] = 2.0\n    return s")
    read_after = items.replace("    pe[:, 1] = 2.0\n    return pe.sum()", "    pe[:, 1] = 2.0\n    s = pe.sum()\n    return s")
    assert similarity.normal_tokens({"c": read_first}) != similarity.normal_tokens({"c": read_after})


def test_the_release_code_and_short_answers_are_not_compared():
    pool, given = variants(A)
    assert not _prints(dict(given), given)  # a blank hand-in has nothing of its own
    assert not _prints({"c": "def f(x):\n    return x.mean()\n"}, {})


def test_code_that_does_not_parse_or_nests_too_deep_is_compared_as_text():
    broken = {"c": "def f(xs):\n    total = sum(xs\n    return total / len(xs) if xs else None, [x * 2 for x in xs]\n"}
    renamed = {"c": broken["c"].replace("xs", "values").replace("total", "s")}
    assert similarity.normal_tokens(broken) == similarity.normal_tokens(renamed)
    deep = {"c": "x = " + "(" * 5000 + "1" + ")" * 5000 + "\n"}
    assert similarity.normal_tokens(deep)["c"]


def test_pairs_come_from_the_index_not_from_every_pair(monkeypatch):
    pool, given = variants(A)
    solution = {cell: options[0] for cell, options in pool.items()}
    base = similarity.release_prints(given)
    rng = random.Random(0)
    hand_ins = [similarity.fingerprint_hand_in("ada", solution, base),
                similarity.fingerprint_hand_in("copy", reorder(rename(solution, rng), rng), base),
                similarity.fingerprint_hand_in("blank", dict(given), base)]
    scored = []
    real = similarity.pair_score
    monkeypatch.setattr(similarity, "pair_score", lambda *args: scored.append(args) or real(*args))
    pairs = similarity.similar_pairs(hand_ins)
    assert [p.students for p in pairs] == [("ada", "copy")] and pairs[0].score == 1.0
    assert len(scored) == 1  # the blank hand-in shares no fingerprint: never scored against the others
    assert similarity.clusters(pairs) == [["ada", "copy"]]


def test_equivalent_spellings_normalise_alike():
    source = {"c": "class M(nn.Module):\n    def __init__(self, d):\n        super().__init__()\n"
                   "        self.proj = nn.Linear(d, d)\n    def forward(self, x):\n"
                   "        scores = torch.matmul(x, x.transpose(-1, -2)) / math.sqrt(x.size(-1))\n"
                   "        w = F.softmax(scores, dim=-1)\n        out = []\n        for row in w:\n"
                   "            out.append(row.sum(dim=0))\n        return self.proj(torch.stack(out))\n"}
    disguised = {"c": "def helper(a):\n    return a.softmax(-1)\nclass M(nn.Module):\n    def __init__(self, d):\n"
                      "        super().__init__()\n        self.lin = nn.Linear(d, d)\n    def forward(self, x):\n"
                      "        print('checking', x.shape)\n        unused = x\n"
                      "        scores = x @ x.transpose(-2, -1) / math.sqrt(x.shape[-1])\n"
                      "        out = [r.sum(0) for r in helper(scores)]\n        return self.lin(torch.stack(out))\n"}
    assert similarity.normal_tokens(source) == similarity.normal_tokens(disguised)
    counted = {"c": "def f(xs, n):\n    i = 0\n    total = 0\n    while i < n:\n        total += xs[i] ** 0.5\n"
                    "        i += 1\n    return total\n"}
    ranged = {"c": "def f(xs, n):\n    total = 0\n    for i in range(n):\n        total = total + torch.sqrt(xs[i])\n"
                   "    return total\n"}
    assert similarity.normal_tokens(counted) == similarity.normal_tokens(ranged)
    other = {"c": ranged["c"].replace("torch.sqrt", "torch.exp")}  # a different computation stays different
    assert similarity.normal_tokens(ranged) != similarity.normal_tokens(other)


def test_a_statement_kept_whole_keeps_its_subtree_fingerprint():
    a = {"c": "def f(x, w):\n    h = torch.tanh(x @ w + x.mean(0))\n    return h * 2\n"}
    b = {"c": "def f(x, w):\n    print('start')\n    h = torch.tanh(x @ w + x.mean(0))\n    return (h * 3).sum()\n"}
    (ta, tree_a), (tb, tree_b) = similarity.normal_cells(a)["c"], similarity.normal_cells(b)["c"]
    assert similarity.subtree_prints(tree_a) & similarity.subtree_prints(tree_b)


def _class(cells_of):
    given = {c: "" for c in next(iter(cells_of.values()))}
    base = similarity.release_prints(given)
    return [similarity.fingerprint_hand_in(s, cells, base) for s, cells in cells_of.items()]


def _answers(seed, n=6):
    """n cells of distinct arithmetic, different for every seed."""
    rng = random.Random(seed)
    out = {}
    for i in range(n):
        a, b, c = (rng.randint(2, 99) for _ in range(3))
        out[f"cell{i}"] = (f"def g{i}(x, y):\n    z = x * {a} + y ** {b} - torch.tanh(x / {c})\n"
                           f"    w = torch.cumsum(z, {a % 3}) @ y.T\n    return w.clamp(min={b}) + z.mean({c % 2})\n")
    return out


def test_code_the_class_shares_counts_on_neither_side_of_a_pair():
    honest = {f"s{i}": _answers(i) for i in range(12)}
    shared = _answers(99)["cell0"]  # everybody's answer to cell0, so common
    for cells in honest.values():
        cells["cell0"] = shared
    copy = dict(honest["s0"])
    copy["cell0"] = shared.replace("w.clamp", "(w * 1.0).clamp")  # the copier's edit of the common answer
    pairs = similarity.similar_pairs(_class({**honest, "copy": copy}))
    pair = next(p for p in pairs if set(p.students) == {"s0", "copy"})
    assert "cell0" not in pair.alike and pair.score == 1.0
    assert len(pairs) == 1


def test_a_partial_copy_is_listed_with_each_cells_similarity():
    honest = {f"s{i}": _answers(i, n=10) for i in range(12)}
    copied = ["cell0", "cell1", "cell2", "cell3", "cell4", "cell5"]  # 60%: the rest answered honestly
    copy = {**_answers(50, n=10), **{c: honest["s0"][c] for c in copied}}
    pairs = similarity.similar_pairs(_class({**honest, "copy": copy}))
    assert [set(p.students) for p in pairs] == [{"s0", "copy"}]
    assert pairs[0].cells == copied and pairs[0].score == 0.6
    assert pairs[0].alike["cell0"] == 1.0 and pairs[0].alike["cell7"] < similarity.CELL_MATCH
