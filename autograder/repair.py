"""`repair`: bring a hand-in back to the release's structure before it is graded.

Colab ignores locked cells, and students (or their editors) delete, duplicate, move and
edit cells, change cell types and strip metadata. nbgrader needs every graded cell with
its metadata, so this restores, against the release:

- the nbgrader metadata of every cell the release grades (points and grade ids come
  from the release, never from the hand-in);
- locked cells (setup, tests, given code) to the release's text, and deleted ones at
  their place; duplicated graded cells are undone;
- the cell type of answer cells.

It never changes the code or text a student wrote in an answer cell: answers are only
moved back into their cell, and cells the student added stay where they were (without
any grading metadata). Every change is described in `Repair.changes`.

Cells are matched by nbgrader grade id, then by cell id, then by identical text; an
answer cell still unmatched is the student cell that sits where the release's answer
cell sits, between the same matched neighbours.
"""
from __future__ import annotations

import ast
import copy
import uuid
from dataclasses import dataclass, field

import nbformat

from utils.cells import grade_id, is_answer, is_locked, label, nbgrader_meta, normalized_source, parse


@dataclass
class Repair:
    notebook: nbformat.NotebookNode
    changes: list[str] = field(default_factory=list)
    match_ratio: float = 1.0  # share of the release's locked cells found in the hand-in


def defines(source: str, name: str) -> bool:
    """Whether `source` defines `name` at top level (a def, class or assignment)."""
    try:
        tree = parse(source)
    except (SyntaxError, ValueError):
        return name in source
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.name == name:
            return True
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
            return True
    return False


def _texts(release, source) -> dict[int, set[str]]:
    """Release cell index → the texts it may have in a hand-in: the release's, and for a
    graded cell also the source (solution) notebook's (a test cell with its hidden tests)."""
    texts = {i: {normalized_source(r.source)} for i, r in enumerate(release.cells)}
    if source is not None:
        by_gid = {grade_id(c): normalized_source(c.source) for c in source.cells if grade_id(c)}
        for i, r in enumerate(release.cells):
            if grade_id(r) in by_gid and not is_answer(r):
                texts[i].add(by_gid[grade_id(r)])
    return texts


def _same_meta(a, b) -> bool:
    keys = ("grade", "grade_id", "locked", "points", "solution", "task")
    return all(nbgrader_meta(a).get(k) == nbgrader_meta(b).get(k) for k in keys)


def match_cells(release, handin, source=None) -> dict[int, list[int]]:
    """Release cell index → indices of the hand-in cells that claim to be it."""
    R, H = release.cells, handin.cells
    texts = _texts(release, source)
    by_gid = {grade_id(r): i for i, r in enumerate(R) if grade_id(r)}
    by_id = {r.get("id"): i for i, r in enumerate(R) if r.get("id")}
    by_source: dict[str, list[int]] = {}
    for i, r in enumerate(R):
        for text in texts[i]:
            if text:
                by_source.setdefault(text, []).append(i)
    claims: dict[int, list[int]] = {}
    matched: set[int] = set()

    def claim(i, j):
        claims.setdefault(i, []).append(j)
        matched.add(j)

    for j, h in enumerate(H):
        if grade_id(h) in by_gid:
            claim(by_gid[grade_id(h)], j)
    for j, h in enumerate(H):
        if j not in matched and h.get("id") in by_id and by_id[h.get("id")] not in claims:
            i = by_id[h.get("id")]
            if not grade_id(R[i]) or R[i].cell_type == h.cell_type or normalized_source(h.source) in texts[i]:
                claim(i, j)
    for j, h in enumerate(H):
        if j not in matched:
            free = [i for i in by_source.get(normalized_source(h.source), []) if i not in claims]
            if free:
                claim(free[0], j)
    return claims


def _position_matches(release, handin, claims: dict[int, list[int]]) -> None:
    """Answer cells still unmatched: the one student cell between the same neighbours."""
    R, H = release.cells, handin.cells
    for i, r in enumerate(R):
        if i in claims or not is_answer(r):
            continue
        taken = {j for js in claims.values() for j in js}
        before = [claims[p][0] for p in range(i) if p in claims]
        after = [claims[q][0] for q in range(i + 1, len(R)) if q in claims]
        lo = max(before) if before else -1
        hi = min([a for a in after if a > lo], default=len(H))
        free = [j for j in range(lo + 1, hi) if j not in taken and not is_locked(H[j])]
        same = [j for j in free if H[j].cell_type == r.cell_type]
        gid = grade_id(r)
        named = [j for j in same if r.cell_type == "code" and defines(normalized_source(H[j].source), gid)]
        if named:
            claims[i] = [named[-1]]
        elif len(same) == 1:
            claims[i] = same
        elif not same and len(free) == 1:
            claims[i] = free


def _fresh_id(used: set[str]) -> str:
    while True:
        candidate = uuid.uuid4().hex[:8]
        if candidate not in used:
            return candidate


def _clean(cell):
    cell = copy.deepcopy(cell)
    if cell.cell_type == "code":
        cell.outputs = []
        cell.execution_count = None
    cell.pop("attachments", None) if cell.cell_type != "markdown" else None
    return cell


def _as_type(cell, cell_type: str):
    """A copy of `cell` as `cell_type`, with the same source."""
    if cell.cell_type == cell_type:
        return _clean(cell)
    make = {"code": nbformat.v4.new_code_cell, "markdown": nbformat.v4.new_markdown_cell,
            "raw": nbformat.v4.new_raw_cell}[cell_type]
    return make(source=cell.source, metadata=copy.deepcopy(cell.get("metadata", {})))


def repair(handin, release, source=None) -> Repair:
    """The hand-in rebuilt on the release's structure, and what was changed. `source`
    (the solution notebook), if given, is another accepted text of locked cells."""
    R, H = release.cells, handin.cells
    texts = _texts(release, source)
    claims = match_cells(release, handin, source)
    changes: list[str] = []
    dropped: set[int] = set()
    extras_kept: set[int] = set()
    # Duplicates: one hand-in cell per release cell.
    for i, js in sorted(claims.items()):
        if len(js) == 1:
            continue
        r, name = R[i], label(R[i], i)
        if is_answer(r):
            answered = [j for j in js if normalized_source(H[j].source) != normalized_source(r.source)]
            keep = answered[-1] if answered else js[0]
        else:
            keep = js[0]
        for j in js:
            if j == keep:
                continue
            if is_answer(r) and normalized_source(H[j].source) != normalized_source(r.source):
                extras_kept.add(j)
                changes.append(f"{name}: a second copy of the answer cell is kept as an ordinary cell (not graded)")
            else:
                dropped.add(j)
                changes.append(f"{name}: removed a duplicated copy of the cell")
        claims[i] = [keep]
    _position_matches(release, handin, claims)
    where = {js[0]: i for i, js in claims.items()}
    located = sum(1 for i, r in enumerate(R) if is_locked(r) and i in claims)
    total_locked = sum(1 for r in R if is_locked(r))

    # Cells the student added follow the matched cell that precedes them in the hand-in.
    following: dict[int, list[int]] = {}
    last = -1
    for j in range(len(H)):
        if j in where:
            last = where[j]
        elif j not in dropped:
            following.setdefault(last, []).append(j)

    cells, used = [], set()
    release_ids = {r.get("id") for r in R if r.get("id")}

    def add(cell, wanted_id=None, extra=False):
        cid = wanted_id if wanted_id and wanted_id not in used and not (extra and wanted_id in release_ids) else None
        cell["id"] = cid or _fresh_id(used)
        used.add(cell["id"])
        cells.append(cell)

    def add_extras(after: int):
        for j in following.get(after, []):
            cell = _clean(H[j])
            meta = cell.get("metadata", {})
            if "nbgrader" in meta:
                had = meta.pop("nbgrader")
                if isinstance(had, dict) and (had.get("grade") or had.get("points")):
                    changes.append(f"cell {j + 1} of the hand-in: removed grading metadata the release does not have")
            add(cell, H[j].get("id"), extra=True)

    add_extras(-1)
    for i, r in enumerate(R):
        name = label(r, i)
        j = claims.get(i, [None])[0]
        if j is None:
            if grade_id(r) or r.cell_type == "code":
                what = "answer cell was missing: inserted the release's empty one" if is_answer(r) else "was deleted: re-inserted"
                changes.append(f"{name}: {what}")
            add(_clean(r), r.get("id"))
            add_extras(i)
            continue
        h = H[j]
        if is_locked(r):
            if normalized_source(h.source) not in texts[i]:
                changes.append(f"{name}: locked cell had been edited: restored the release's text")
            if h.cell_type != r.cell_type:
                changes.append(f"{name}: restored the cell type ({r.cell_type})")
            if not _same_meta(h, r):
                changes.append(f"{name}: restored the grading metadata{_points_note(h, r)}")
            add(_clean(r), r.get("id"))
        elif is_answer(r):
            cell = _as_type(h, r.cell_type)
            if h.cell_type != r.cell_type:
                changes.append(f"{name}: restored the cell type ({r.cell_type}, was {h.cell_type}); the answer is unchanged")
            if not _same_meta(h, r):
                changes.append(f"{name}: restored the grading metadata{_points_note(h, r)}")
            cell.metadata = copy.deepcopy(r.metadata)
            add(cell, r.get("id"))
        else:
            cell = _clean(h)
            if "nbgrader" in cell.get("metadata", {}) and "nbgrader" not in r.get("metadata", {}):
                cell.metadata.pop("nbgrader")
            if nbgrader_meta(r):
                cell.metadata["nbgrader"] = copy.deepcopy(nbgrader_meta(r))
            add(cell, r.get("id"))
        add_extras(i)

    notebook = nbformat.v4.new_notebook(cells=cells, metadata=copy.deepcopy(release.metadata))
    notebook.nbformat, notebook.nbformat_minor = release.nbformat, release.nbformat_minor
    return Repair(notebook, changes, located / total_locked if total_locked else 1.0)


def _points_note(handin_cell, release_cell) -> str:
    got, want = nbgrader_meta(handin_cell), nbgrader_meta(release_cell)
    notes = []
    if got.get("points") != want.get("points") and "points" in got:
        notes.append(f"points {got.get('points')} -> {want.get('points')}")
    if got.get("grade_id") and got.get("grade_id") != want.get("grade_id"):
        notes.append(f"grade id {got.get('grade_id')!r} -> {want.get('grade_id')!r}")
    return f" ({', '.join(notes)})" if notes else ""


def affinity(handin, release, source=None) -> float:
    """How much of a release's locked cells a notebook contains (by grade id or text)."""
    gids = {grade_id(c) for c in handin.cells if grade_id(c)}
    present = {normalized_source(c.source) for c in handin.cells}
    texts = _texts(release, source)
    locked = [i for i, r in enumerate(release.cells) if is_locked(r)]
    if not locked:
        return 0.0
    found = sum(1 for i in locked if grade_id(release.cells[i]) in gids or texts[i] & present)
    return found / len(locked)
