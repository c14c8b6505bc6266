"""A notebook that nbformat 4.5's schema accepts, from one that is JSON but breaks it.

Editors, scripts and students save notebooks that read as notebooks but break the schema in
a few places: a cell id with "/" or over 64 characters, `tags` as a string, a Markdown cell
with `outputs`, a cell type nbformat does not know, `source: null`. Copied as they are, such
cells make nbformat refuse the repaired notebook later. `well_formed` checks the notebook
once, with the validator nbformat uses (fastjsonschema, compiled from nbformat's own
schema); only a notebook that fails is rebuilt, cell by cell, from the parts of each cell
that the schema accepts, with one note per cell that says what was dropped or changed.
A cell's text is kept whenever it is text, under a cell type the schema knows.
"""
from __future__ import annotations

import functools
import json
from pathlib import Path

import fastjsonschema
import nbformat
from nbformat.corpus.words import generate_corpus_id

VERSION = (4, 5)
# What a cell of each type holds besides its id, metadata and source (as nbformat.v4.new_code_cell
# and the others make it; they validate each cell once more, slowly, with jsonschema).
CELL_PARTS = {"code": {"outputs": [], "execution_count": None}, "markdown": {}, "raw": {}}


class NotWellFormed(ValueError):
    """A notebook that no removal of invalid parts makes valid."""


@functools.cache
def _validator(definition: str | None = None):
    """Whether an instance is valid under nbformat 4.5's schema, or one of its definitions."""
    path = Path(nbformat.v4.__file__).parent / nbformat.v4.nbformat_schema[VERSION]
    schema = json.loads(path.read_text(encoding="utf-8"))
    if definition:
        schema = {"$schema": schema["$schema"], "definitions": schema["definitions"], "$ref": f"#/definitions/{definition}"}
    check = fastjsonschema.compile(schema)

    def valid(instance) -> bool:
        try:
            check(instance)
        except fastjsonschema.JsonSchemaException:
            return False
        return True

    return valid


def _shown(value) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def well_formed(nb) -> tuple[nbformat.NotebookNode, list[str]]:
    """`nb` (nbformat 4.5, as `autograder.course.layout.decode_notebook` reads it) as the schema
    accepts it, and one note per cell that had to be rebuilt (none for a valid notebook).
    NotWellFormed if even the rebuilt notebook is not valid."""
    cells = nb.get("cells", [])
    ids = [cell.get("id") for cell in cells]
    if _validator()(nb) and len(set(map(str, ids))) == len(ids):
        return nb, []
    notes, used, rebuilt = [], set(), []
    for index, cell in enumerate(cells):
        fixed, changes = _cell(cell, used)
        if changes:
            notes.append(f"converted: cell {index + 1} did not follow the notebook format: {'; '.join(changes)}")
        rebuilt.append(fixed)
    metadata, dropped = _valid_parts(nb.get("metadata"), lambda key, value: _validator()(_notebook([], {key: value})))
    if dropped:
        notes.append(f"converted: removed the notebook's metadata {', '.join(dropped)} (not in the notebook format)")
    fixed = nbformat.from_dict(_notebook(rebuilt, metadata))
    if not _validator()(fixed):
        raise NotWellFormed("the notebook does not follow the notebook format, even with its invalid parts removed")
    return fixed, notes


def _notebook(cells: list, metadata: dict) -> dict:
    """A notebook of nbformat 4.5 (nbformat.v4.new_notebook would validate it once more, slowly)."""
    return {"cells": cells, "metadata": metadata, "nbformat": VERSION[0], "nbformat_minor": VERSION[1]}


def _valid_parts(mapping, valid) -> tuple[dict, list[str]]:
    """The items of `mapping` that `valid(key, value)` accepts, and the names of the others."""
    if not isinstance(mapping, dict):
        return {}, [] if mapping is None else [_shown(mapping)]
    kept = {key: value for key, value in mapping.items() if valid(key, value)}
    return kept, [_shown(key) for key in mapping if key not in kept]


def _cell(cell, used: set) -> tuple[nbformat.NotebookNode, list[str]]:
    """`cell` as the schema accepts it, with an id not in `used` (added to it), and what changed."""
    kind = cell.get("cell_type")
    known = isinstance(kind, str) and kind in CELL_PARTS
    if known and _validator(f"{kind}_cell")(cell) and cell.get("id") not in used:
        used.add(cell["id"])
        return cell, []
    changes = []
    if not known:
        changes.append(f"its type {_shown(kind)} is not code, markdown or raw: made a raw cell")
        kind = "raw"
    source = cell.get("source")
    if not isinstance(source, str):
        changes.append(f"its source {_shown(source)} is not text: emptied")
        source = ""
    fixed = nbformat.from_dict({"cell_type": kind, "id": "", "metadata": {}, "source": source, **CELL_PARTS[kind]})
    valid = _validator(f"{kind}_cell")
    fixed["id"] = _cell_id(cell.get("id"), used, lambda cid: valid({**fixed, "id": cid}), changes)
    fixed["metadata"], dropped = _valid_parts(cell.get("metadata"), lambda key, value: valid({**fixed, "metadata": {key: value}}))
    if dropped:
        changes.append(f"removed its metadata {', '.join(dropped)}")
    parts = ("outputs", "execution_count") if kind == "code" else ("attachments",)
    for part in parts:
        if part in cell and valid({**fixed, part: cell[part]}):
            fixed[part] = cell[part]
        elif part in cell:
            changes.append(f"removed its {part} (not valid)")
    for part in sorted(set(cell) - set(fixed) - {"cell_type", "source"}, key=str):
        changes.append(f"removed its {_shown(part)}, which a {kind} cell does not have")
    return fixed, changes


def _cell_id(cid, used: set, valid, changes: list[str]) -> str:
    """`cid` if it is a valid cell id not used yet, else a new one (the reason goes to `changes`)."""
    if isinstance(cid, str) and cid not in used and valid(cid):
        used.add(cid)
        return cid
    if cid is None:
        changes.append("its id was missing: gave it one")
    else:
        why = "was used by an earlier cell" if isinstance(cid, str) and cid in used else "is not a cell id"
        changes.append(f"its id {_shown(cid)} {why}: gave it a new one")
    return new_cell_id(used)


def new_cell_id(used: set) -> str:
    """A new cell id (as nbformat makes them) not in `used`, added to it."""
    fresh = generate_corpus_id()
    while fresh in used:
        fresh = generate_corpus_id()
    used.add(fresh)
    return fresh
