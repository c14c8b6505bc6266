"""Where the course's files are, and safe loading of notebooks and assignment names."""
from __future__ import annotations

import codecs
import json
import re
from pathlib import Path

import nbformat

from autograder.course.jsonscan import JsonBounds, TooLarge, check
from autograder.course.wellformed import NotWellFormed, new_cell_id, well_formed
from utils.cells import grade_id  # noqa: F401  (the cell model is utils.cells; course.grade_id for scripts and tests)

REPO_ROOT = Path(__file__).resolve().parents[2]
SOLUTIONS_DIR = REPO_ROOT / "solutions"
RELEASE_DIR = REPO_ROOT / "notebooks"
MUTANTS_DIR = Path(__file__).resolve().parents[1] / "mutants"
ASSIGNMENT_NAME = re.compile(r"^\d\d_[a-z0-9_]+$")


class CourseError(Exception):
    """A problem the user can fix; the CLI prints its message without a traceback."""


def assignments() -> list[str]:
    """Names of every assignment that has a solution notebook, in course order."""
    return sorted(
        path.parent.name
        for path in SOLUTIONS_DIR.glob("*/*.ipynb")
        if path.stem == path.parent.name and ASSIGNMENT_NAME.match(path.stem)
    )


def check_assignment(name: str) -> str:
    """Return `name` if it is a known assignment, else raise a CourseError listing them."""
    known = assignments()
    if name not in known:
        raise CourseError(f"no assignment named {name!r}; the course has: {', '.join(known) or 'none'}")
    return name


def solution_path(name: str) -> Path:
    return SOLUTIONS_DIR / name / f"{name}.ipynb"


def release_path(name: str) -> Path:
    return RELEASE_DIR / name / f"{name}.ipynb"


def read_notebook(path: Path) -> nbformat.NotebookNode:
    """Read a notebook, turning a missing or unreadable file into a CourseError."""
    return load_notebook(path)[0]


def load_notebook(path: Path) -> tuple[nbformat.NotebookNode, list[str]]:
    """A notebook file as `decode_notebook` reads it: (notebook, conversion notes)."""
    path = Path(path)
    if not path.is_file():
        raise CourseError(f"{path}: no such notebook file")
    try:
        return decode_notebook(path.read_bytes())
    except CourseError as exc:
        raise CourseError(f"{path}: {exc}") from None


# A byte-order mark: (mark, codec, what to call the file). UTF-32 LE before UTF-16 LE (same start).
_BOMS = [
    (codecs.BOM_UTF32_LE, "utf-32-le", "UTF-32 (little-endian, with a byte-order mark)"),
    (codecs.BOM_UTF32_BE, "utf-32-be", "UTF-32 (big-endian, with a byte-order mark)"),
    (codecs.BOM_UTF8, "utf-8", "UTF-8 with a byte-order mark (as Windows Notepad saves it)"),
    (codecs.BOM_UTF16_LE, "utf-16-le", "UTF-16 (little-endian, as Windows Notepad saves \"Unicode\")"),
    (codecs.BOM_UTF16_BE, "utf-16-be", "UTF-16 (big-endian, as Windows Notepad saves \"Unicode big endian\")"),
]
_ENDIAN = {"le": "little-endian", "be": "big-endian"}
_WIDTH = {"utf-32-le": 4, "utf-32-be": 4, "utf-16-le": 2, "utf-16-be": 2}
# What a file that is not a notebook starts with.
_MAGIC = [
    (b"%PDF", "it starts with %PDF: a PDF document"),
    (b"PK\x03\x04", "it starts with PK: a zip archive, perhaps a zipped notebook or a Word file"),
    (b"\x89PNG", "it is a PNG image"),
    (b"\xff\xd8\xff", "it is a JPEG image"),
    (b"{\\rtf", "it is an RTF document"),
    (b"\xd0\xcf\x11\xe0", "it is an old Microsoft Office document"),
]
ASK_AGAIN = "ask the student to hand in the .ipynb file itself, from File \u2192 Download \u2192 .ipynb"


# What the grader reads of a notebook file: the course's notebooks are under 0.3 MiB and 5,000 values
# (brackets and commas) without outputs; outputs a student kept (images) add some, never this much.
# A file of at most 1 MiB is not measured (5.6 ms of the 13.7 ms that reading 07 takes).
NOTEBOOK_BOUNDS = JsonBounds(bytes=64 << 20, values=2_000_000, depth=100, scan_from=1 << 20)


def _not_a_notebook(what: str) -> CourseError:
    return CourseError(f"the file is not a Jupyter notebook ({what}): {ASK_AGAIN}")


def _sniff(head: bytes) -> str:
    """The codec of JSON text without a byte-order mark, from where its first NUL bytes are (RFC 4627)."""
    zeros = tuple(b == 0 for b in head[:4])
    return {(True, True, True, False): "utf-32-be", (False, True, True, True): "utf-32-le",
            (True, False, True, False): "utf-16-be", (False, True, False, True): "utf-16-le"}.get(zeros, "utf-8")


def _text(data: bytes) -> tuple[str, list[str]]:
    """The text of a notebook file saved in any Unicode encoding, and what was converted."""
    notes = []
    for bom, codec, name in _BOMS:
        if data.startswith(bom):
            data = data[len(bom):]
            break
    else:
        codec = _sniff(data)
        name = f"{codec[:6].upper()} ({_ENDIAN[codec[-2:]]}, without a byte-order mark)" if codec != "utf-8" else None
        for magic, what in _MAGIC:
            if data.startswith(magic):
                raise _not_a_notebook(what)
    body = data.rstrip(b"\x00")
    width = _WIDTH.get(codec, 1)
    body += b"\x00" * (-len(body) % width)  # the last character's own NUL bytes
    if not body.strip(b"\x00 \t\r\n"):
        raise _not_a_notebook("it is empty" if not data else "it holds only NUL bytes: it was not saved completely"
                              if not data.strip(b"\x00") else "it holds only spaces and line ends")
    if len(data) > len(body):
        notes.append(f"converted: removed {len(data) - len(body)} NUL bytes of padding at the end of the file")
    try:
        text = body.decode(codec)
    except UnicodeDecodeError:
        if codec != "utf-8" or name:
            raise _not_a_notebook(f"it is not text in {codec.upper()}") from None
        try:
            text = body.decode("cp1252")
        except UnicodeDecodeError:
            raise _not_a_notebook("it is not text in UTF-8 or another encoding notebooks use") from None
        name = "not UTF-8 but Windows-1252 (ANSI); check the non-ASCII characters of its answers"
    if name:
        notes.insert(0, f"converted: the file was {name}; converted to UTF-8")
    if "\r\n" in text:  # JSON strings hold line ends escaped: only the file's own line ends change
        text = text.replace("\r\n", "\n")
        notes.append("converted: Windows line ends (CRLF) → LF")
    return text, notes


def decode_notebook(data: bytes) -> tuple[nbformat.NotebookNode, list[str]]:
    """A notebook from the bytes of a file, whatever way it was saved: UTF-8 with or without
    a byte-order mark, UTF-16 or UTF-32, Windows line ends, NUL padding at the end, any
    nbformat version (upgraded to 4.5: nbformat 3's worksheets become cells, missing cell
    ids are added), lone surrogates in its strings, cells that break the notebook format
    (`autograder.course.wellformed`: rebuilt from their valid parts). Returns the notebook and one
    note per conversion (nothing is noted for a file saved the usual way). Only what is not
    a notebook raises a CourseError that says what to ask the student for. A cell's text is
    never changed but for those characters, and a source that is not text (null)."""
    if len(data) > NOTEBOOK_BOUNDS.bytes:
        raise CourseError(f"the file is {len(data) >> 20} MiB, more than the {NOTEBOOK_BOUNDS.bytes >> 20} MiB the grader "
                          "reads: ask for it again with its outputs cleared (Edit > Clear All Outputs)")
    text, notes = _text(data)
    try:
        check(text.encode("utf-8", "surrogatepass"), NOTEBOOK_BOUNDS, "the notebook")
    except TooLarge as exc:
        raise CourseError(f"{exc}: ask for it again with its outputs cleared (Edit > Clear All Outputs)") from None
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as exc:
        start = text.lstrip()[:15]
        what = "it is a web page (HTML), perhaps the notebook's page saved from the browser" if start.lower().startswith(("<!doctype", "<html")) else \
            f"it is not valid JSON: {exc.msg} at line {exc.lineno}; it may be cut short"
        raise _not_a_notebook(what) from None
    if not isinstance(raw, dict) or not isinstance(raw.get("cells", raw.get("worksheets")), list) \
            or not isinstance(raw.get("nbformat"), int):
        raise _not_a_notebook("it is JSON, but has no nbformat version and list of cells")
    text, replaced = _without_lone_surrogates(text, raw)
    notes += replaced
    try:  # validated below, against the version the grader writes (nbformat.reads would validate it once more)
        nb = nbformat.convert(nbformat.reader.reads(text), 4)
    except Exception as exc:  # nbformat raises several kinds for a damaged structure
        raise CourseError(f"the notebook is damaged ({type(exc).__name__}: {error_text(exc)}): {ASK_AGAIN}") from None
    if not isinstance(nb.get("cells"), list):
        raise _not_a_notebook("it has no list of cells")
    minor = raw.get("nbformat_minor", 0)
    old = (raw["nbformat"], minor if isinstance(minor, int) else 0)
    new = (nbformat.v4.nbformat, nbformat.v4.nbformat_minor)
    missing = [cell for cell in nb.cells if not isinstance(cell.get("id"), str) or not cell.get("id")]
    if old < new:
        used = {cell.get("id") for cell in nb.cells if cell.get("id") and isinstance(cell.get("id"), str)}
        for cell in missing:
            cell["id"] = new_cell_id(used)
        nb.nbformat, nb.nbformat_minor = new
        ids = f" (added {len(missing)} cell ids)" if missing else ""
        notes.append(f"converted: nbformat {old[0]}.{old[1]} → {new[0]}.{new[1]}{ids}")
    try:
        nb, rebuilt = well_formed(nb)
    except NotWellFormed as exc:
        raise CourseError(f"{exc}: {ASK_AGAIN}") from None
    return nb, notes + rebuilt


def error_text(exc: Exception) -> str:
    """An error's text for a message: its first 200 characters, lone surrogates escaped."""
    return str(exc)[:200].encode("utf-8", "backslashreplace").decode("utf-8")


# A JSON escape of a UTF-16 surrogate: in a valid file only as half of a pair (two escapes in a row).
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


def _without_lone_surrogates(text: str, raw) -> tuple[str, list[str]]:
    """`text` with each lone surrogate that a JSON escape ("\\ud800") put in its strings replaced
    by U+FFFD (the text could not be written as UTF-8 otherwise), and a note when any was."""
    if not _SURROGATE_ESCAPE.search(text):
        return text, []
    parsed = json.dumps(raw, ensure_ascii=False)
    fixed, count = re.subn("[\ud800-\udfff]", "\ufffd", parsed)
    if not count:
        return text, []
    return fixed, [f"converted: {count} character{'s' if count != 1 else ''} that Unicode does not allow "
                   "(lone surrogates, written as JSON escapes) → U+FFFD"]
