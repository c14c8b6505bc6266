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
import bisect
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


def defined_names(source: str, names: set[str]) -> set[str]:
    """Which of `names` `source` defines at top level (a def, class or assignment); of a source
    that does not parse, those it mentions."""
    try:
        tree = parse(source)
    except (SyntaxError, ValueError):
        return {name for name in names if name in source}
    found = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            found.add(node.name)
        elif isinstance(node, ast.Assign):
            found.update(t.id for t in node.targets if isinstance(t, ast.Name))
    return found & names


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
    """Answer cells still unmatched: the one student cell between the same neighbours. Each
    hand-in cell is parsed at most once, and each answer costs a search of the candidates, not a
    pass over the hand-in: linear in its cells (a notebook of 120,000 cells, issue 51)."""
    R = release.cells
    candidates = _Candidates(handin.cells, {j for js in claims.values() for j in js},
                             {grade_id(r) for r in R if is_answer(r) and r.cell_type == "code"})
    for i, r in enumerate(R):
        if i in claims or not is_answer(r):
            continue
        before = [claims[p][0] for p in range(i) if p in claims]
        lo = max(before, default=-1)
        hi = min((claims[q][0] for q in range(i + 1, len(R)) if q in claims and claims[q][0] > lo),
                 default=len(handin.cells))
        found = candidates.pick(lo, hi, r.cell_type, grade_id(r) if r.cell_type == "code" else None)
        if found is not None:
            claims[i] = [found]
            candidates.claimed.add(found)


class _Candidates:
    """The hand-in cells a position match may give an answer cell (neither locked nor claimed),
    by place: all of them, those of each cell type, and the code cells that define each answer's
    name (parsed once, on the first search by name). What position matches claim is a set of its
    own (a few cells): the lists are never rebuilt or copied."""

    def __init__(self, cells, taken: set[int], names: set[str]):
        self.cells, self.names, self.claimed = cells, names, set()
        self.all = [j for j, cell in enumerate(cells) if j not in taken and not is_locked(cell)]
        self.by_type: dict[str, list[int]] = {}
        for j in self.all:
            self.by_type.setdefault(cells[j].cell_type, []).append(j)
        self._defining: dict[str, list[int]] | None = None

    def defining(self, name: str) -> list[int]:
        if self._defining is None:
            self._defining = {}
            for j in self.by_type.get("code", []):
                for found in defined_names(normalized_source(self.cells[j].source), self.names):
                    self._defining.setdefault(found, []).append(j)
        return self._defining.get(name, [])

    def between(self, places: list[int], lo: int, hi: int) -> tuple[int, int | None, int | None]:
        """Of the sorted `places`, those strictly between lo and hi and not claimed: how many,
        the first and the last."""
        span = range(bisect.bisect_right(places, lo), bisect.bisect_left(places, hi))
        claimed = sum(1 for j in self.claimed if lo < j < hi and _holds(places, j))
        first = next((places[k] for k in span if places[k] not in self.claimed), None)
        last = next((places[k] for k in reversed(span) if places[k] not in self.claimed), None)
        return len(span) - claimed, first, last

    def pick(self, lo: int, hi: int, cell_type: str, name: str | None) -> int | None:
        """The cell between lo and hi for an answer of `cell_type` (`name`: a code answer's):
        the last one that defines `name`, else the only one of that type, else the only one."""
        if name is not None:
            _, _, named = self.between(self.defining(name), lo, hi)
            if named is not None:
                return named
        same, only, _ = self.between(self.by_type.get(cell_type, []), lo, hi)
        if same == 1:
            return only
        free, only, _ = self.between(self.all, lo, hi)
        return only if same == 0 and free == 1 else None


def _holds(places: list[int], j: int) -> bool:
    """Whether the sorted `places` hold `j`."""
    k = bisect.bisect_left(places, j)
    return k < len(places) and places[k] == j


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
