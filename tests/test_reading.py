"""Reading hand-ins: a notebook saved oddly (a byte-order mark, UTF-16 or UTF-32, Windows
line ends, NUL padding, an older nbformat) is read like the original, with a note of what
was converted; only what is not a notebook is refused, saying what to ask the student for."""
import codecs
import copy
import json

import nbformat
import pytest
from hostile_cases import ASSIGNMENT, dump, solution

from autograder.course import layout as course
from autograder.handins.collect import collect
from autograder.course.layout import ASK_AGAIN, CourseError, decode_notebook, load_notebook, read_notebook
from autograder.grading.workspace import open_workspace


def original():
    """The release as committed, with a cell of non-ASCII text (a character beyond the BMP
    for UTF-16's surrogate pairs) and one only Windows-1252 can also hold."""
    nb = read_notebook(course.release_path(ASSIGNMENT))
    nb.cells.append(nbformat.v4.new_markdown_cell("Réponse: naïve café – 日本語 😀", id="unicode-cell"))
    nb.cells.append(nbformat.v4.new_code_cell("x = 'café – naïve'\r\nprint(x)", id="ansi-cell"))
    return nb


ORIGINAL = original()
TEXT = nbformat.writes(ORIGINAL)
ANSI = copy.deepcopy(ORIGINAL)  # only the cells that Windows-1252 can write
ANSI.cells = [c for c in ANSI.cells if nbformat.writes(nbformat.v4.new_notebook(cells=[c])).isascii() or c.id == "ansi-cell"]


def older(minor: int) -> bytes:
    """The notebook as nbformat 4.`minor` saves it: no cell ids before 4.5."""
    data = json.loads(TEXT)
    data["nbformat_minor"] = minor
    for cell in data["cells"]:
        cell.pop("id", None)
    return json.dumps(data, indent=1, ensure_ascii=False).encode()


NOTEPAD = "the file was UTF-16 (little-endian, as Windows Notepad saves"
VARIANTS = {
    # name: (bytes, the note expected in the conversion notes, or None when nothing is converted)
    "utf8-bom": (codecs.BOM_UTF8 + TEXT.encode(), "UTF-8 with a byte-order mark"),
    "crlf": (TEXT.replace("\n", "\r\n").encode(), "Windows line ends (CRLF)"),
    "utf16-le": (TEXT.encode("utf-16"), NOTEPAD),  # Python writes the BOM little-endian here, as Notepad does
    "utf16-be": (codecs.BOM_UTF16_BE + TEXT.encode("utf-16-be"), "UTF-16 (big-endian"),
    "utf16-no-bom": (TEXT.encode("utf-16-le"), "UTF-16 (little-endian, without a byte-order mark)"),
    "utf32-le": (codecs.BOM_UTF32_LE + TEXT.encode("utf-32-le"), "UTF-32 (little-endian"),
    "utf32-be": (codecs.BOM_UTF32_BE + TEXT.encode("utf-32-be"), "UTF-32 (big-endian"),
    "utf16-crlf": (TEXT.replace("\n", "\r\n").encode("utf-16"), NOTEPAD),
    "nul-padding": (TEXT.encode() + b"\x00" * 4096, "removed 4096 NUL bytes of padding"),
    "utf16-nul-padding": (TEXT.encode("utf-16") + b"\x00" * 5, NOTEPAD),
    "trailing-newline": (TEXT.encode() + b"\n", None),
    "trailing-whitespace": (TEXT.encode() + b" \t\n \n", None),
    "leading-whitespace": (b"\n  " + TEXT.encode(), None),
    **{f"nbformat-4.{minor}": (older(minor), f"nbformat 4.{minor} → 4.5 (added") for minor in range(5)},
    "nbformat-3": (nbformat.writes(nbformat.convert(copy.deepcopy(ORIGINAL), 3)).encode(), "nbformat 3.0 → 4.5"),
    "nbformat-3-utf16-crlf": (nbformat.writes(nbformat.convert(copy.deepcopy(ORIGINAL), 3)).replace("\n", "\r\n")
                              .encode("utf-16"), "nbformat 3.0 → 4.5"),
}


def cells(nb, v3=False):
    """What a student wrote and nbgrader reads: each cell's type, source, metadata, outputs
    (nbformat 3 adds `collapsed` to the metadata of code cells: only the nbgrader part)."""
    return [(c.cell_type, c.source, c.metadata.get("nbgrader") if v3 else c.metadata, c.get("outputs"))
            for c in nb.cells]


def test_a_notebook_saved_the_usual_way_needs_no_conversion():
    nb, notes = decode_notebook(TEXT.encode())
    assert notes == [] and nb == ORIGINAL


@pytest.mark.parametrize("name", VARIANTS)
def test_a_notebook_saved_oddly_is_read_like_the_original(name):
    data, expected = VARIANTS[name]
    nb, notes = decode_notebook(data)
    v3 = name.startswith("nbformat-3")
    assert cells(nb, v3) == cells(ORIGINAL, v3), f"{name}: a cell differs from the original"
    assert (nb.nbformat, nb.nbformat_minor) == (4, 5)
    ids = [c.id for c in nb.cells]
    assert all(ids) and len(set(ids)) == len(ids), f"{name}: every cell needs an id of its own"
    if "nbformat" not in name:
        assert ids == [c.id for c in ORIGINAL.cells], f"{name}: the cell ids changed"
    assert all(note.startswith("converted: ") for note in notes)
    if expected is None:
        assert notes == [], notes
    else:
        assert any(expected in note for note in notes), f"{name}: no note says {expected!r}: {notes}"


def test_each_conversion_is_noted_once():
    data = (codecs.BOM_UTF8 + older(4).replace(b"\n", b"\r\n")) + b"\x00\x00\x00"
    _, notes = decode_notebook(data)
    assert len(notes) == 4 and len(set(notes)) == 4, notes
    assert "UTF-8 with a byte-order mark" in notes[0]


def test_a_notebook_saved_in_the_windows_ansi_code_page_is_read():
    nb, notes = decode_notebook(nbformat.writes(ANSI).encode("cp1252"))
    assert cells(nb) == cells(ANSI)
    assert any("Windows-1252" in note for note in notes), notes


@pytest.mark.parametrize(
    "data, says",
    [
        (b"", "it is empty"),
        (b"\x00" * 4096, "only NUL bytes"),
        (b" \r\n\t\n", "only spaces and line ends"),
        (codecs.BOM_UTF16_LE, "it is empty"),
        (b"%PDF-1.7\n%\xe2\xe3\xcf\xd3\n1 0 obj", "it starts with %PDF"),
        (b"PK\x03\x04\x14\x00\x00\x00\x08\x00", "a zip archive"),
        (b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR", "PNG image"),
        (b"<!DOCTYPE html>\n<html><head><title>Colab</title>", "web page"),
        (b'{"cells": [', "not valid JSON"),
        (TEXT.encode()[: len(TEXT) // 2], "not valid JSON"),
        (b'{"cells": [ oops', "not valid JSON"),
        (b"[1, 2]", "is JSON, but"),
        (b'{"name": "package", "version": "1.0"}', "is JSON, but"),
        (b'{"nbformat": 4, "nbformat_minor": 5, "metadata": {}}', "is JSON, but"),
        (b"\x81\x8d\x8f\x90\x9d binary", "not text"),
    ],
    ids=["empty", "nul", "whitespace", "bom-only", "pdf", "zip", "png", "html", "cut-json", "half-notebook",
         "not-json", "json-list", "json-not-notebook", "no-cells", "binary"],
)
def test_what_is_not_a_notebook_is_refused_saying_what_to_ask_for(data, says):
    with pytest.raises(CourseError) as info:
        decode_notebook(data)
    message = str(info.value)
    assert says in message and message.endswith(ASK_AGAIN), message
    assert "File → Download → .ipynb" in message


def test_files_are_read_through_the_same_function(tmp_path):
    path = tmp_path / "handin.ipynb"
    path.write_bytes(VARIANTS["utf16-crlf"][0])
    nb, notes = load_notebook(path)
    assert cells(nb) == cells(ORIGINAL) and notes == decode_notebook(path.read_bytes())[1]
    assert cells(read_notebook(path)) == cells(ORIGINAL)
    path.write_bytes(b"%PDF-1.4")
    with pytest.raises(CourseError, match=f"^{path}: the file is not a Jupyter notebook \\(it starts with %PDF"):
        read_notebook(path)


def test_collect_finds_the_assignment_of_a_utf16_hand_in_by_content(tmp_path):
    source = tmp_path / "handins"
    source.mkdir()
    data = nbformat.writes(solution()).replace("\n", "\r\n").encode("utf-16")
    (source / "alice_1_10_my homework.ipynb").write_bytes(data)
    ws = open_workspace(tmp_path / "ws")
    entries, _ = collect(source, ws)
    assert [(e.action, e.student, e.assignment) for e in entries] == [("renamed", "alice", ASSIGNMENT)]
    assert ws.submission_path("alice", ASSIGNMENT).read_bytes() == data  # placed as handed in


@pytest.mark.slow
def test_a_utf16_crlf_hand_in_is_graded_like_the_solution(tmp_path):
    """End to end: the same score as the plain solution, the conversion in the report, the
    original bytes kept."""
    from autograder.grading.batch import grade

    ws = open_workspace(tmp_path / "ws")
    notepad = nbformat.writes(solution()).replace("\n", "\r\n").encode("utf-16") + b"\x00\x00"
    for student, data in (("plain", dump(solution())), ("notepad", notepad)):
        target = ws.submission_path(student, ASSIGNMENT)
        target.parent.mkdir(parents=True)
        target.write_bytes(data)
    results = {r.student: r for r in grade(ws, [ASSIGNMENT], jobs=2)}
    plain, converted = results["plain"], results["notepad"]
    assert plain.status == converted.status == "graded", (converted.status, converted.message)
    assert plain.score.auto_score == plain.score.auto_max > 0
    assert {c.name: c.score for c in converted.score.cells} == {c.name: c.score for c in plain.score.cells}
    assert plain.repairs == []
    assert any(r.startswith("converted: the file was UTF-16") for r in converted.repairs), converted.repairs
    assert any("CRLF" in r for r in converted.repairs) and any("NUL" in r for r in converted.repairs)
    report = json.loads(ws.path("reports", ASSIGNMENT, "notepad.json").read_text())
    assert report["repairs"] == converted.repairs
    assert ws.path("originals", "notepad", ASSIGNMENT, f"{ASSIGNMENT}.ipynb").read_bytes() == notepad
