"""`collect`: LMS zips and folders into submitted/<student>/<assignment>/, with a report."""
import csv
import hashlib
import zipfile

import nbformat
import pytest

from autograder.course import layout as course
from autograder.handins.collect import assignment_from_name, clean_name, collect, parse, slug
from autograder.grading.workspace import open_workspace

A = course.assignments()[0]
RELEASE = course.release_path(A).read_bytes()


@pytest.mark.parametrize(
    "name, stem, number",
    [
        (f"Copy of {A} (2).ipynb", A, 2),
        (f"Copy of Copy of {A}.ipynb", A, 0),
        (f"{A} - Copy (3).ipynb", A, 3),
        (f"{A}.IPYNB", A, 0),
    ],
)
def test_colab_and_os_copy_markers_are_removed(name, stem, number):
    assert clean_name(name) == (stem, number)


def test_assignment_names_are_recognised_loosely():
    known = course.assignments()
    number, topic = A.split("_", 1)
    for given in (A, A.upper(), A.replace("_", " "), f"{number}", f"{number}_{topic}_final", f"hw_{topic}"):
        assert assignment_from_name(given, known) == A, given
    assert assignment_from_name("my_notes", known) is None


@pytest.mark.parametrize(
    "path, student",
    [
        (f"janedoe_12345_67890_Copy of {A} (1).ipynb", "janedoe"),
        (f"janedoe_LATE_12345_67890_{A}.ipynb", "janedoe"),
        (f"Jane Doe_12345_assignsubmission_file_/{A}.ipynb", "jane-doe"),
        (f"Jane Doe_12345_assignsubmission_file_{A}.ipynb", "jane-doe"),
        (f"HW1_jdoe_attempt_2026-11-20-10-22-33_{A}.ipynb", "jdoe"),
        (f"Jdoe/week 1/{A}.ipynb", "jdoe"),
    ],
)
def test_students_come_from_lms_names_or_folders(path, student):
    assert parse(path)[0] == student


def test_slugs_are_safe_folder_names():
    assert slug("José García") == "jose-garcia"
    assert slug("Jos\udce9") == "jos"  # an undecodable byte is dropped
    assert slug("../../etc") == "etc"


def test_a_zip_is_collected_with_a_report_and_left_unchanged(tmp_path, monkeypatch):
    # Write names as old zip tools do: in the legacy code page, without the UTF-8 flag.
    monkeypatch.setattr(zipfile.ZipInfo, "_encodeFilenameFlags", lambda self: (self.filename.encode("cp437"), self.flag_bits))
    source = tmp_path / "canvas.zip"
    with zipfile.ZipFile(source, "w") as zf:
        zf.writestr(f"alice_1_10_Copy of {A} (1).ipynb", RELEASE)
        zf.writestr(f"alice_1_11_Copy of {A} (2).ipynb", RELEASE + b" ")   # a later copy: kept
        zf.writestr(f"bob_2_20_{A}.ipynb", RELEASE)
        zf.writestr("bob_2_21_notes.py", b"print(1)")
        zf.writestr(f"__MACOSX/._bob_2_20_{A}.ipynb", b"junk")
        zf.writestr("carol_3_30_whatever.ipynb", RELEASE)                 # named oddly: found by content
        zf.writestr("dave_4_40_diary.ipynb", nbformat.writes(nbformat.v4.new_notebook()))
        zf.writestr(f"{A}.ipynb", RELEASE)                                 # no student anywhere
        info = zipfile.ZipInfo(f"Jos\xe9_5_50_{A}.ipynb".encode("latin-1").decode("cp437"))
        zf.writestr(info, RELEASE)                                         # Latin-1 name, no UTF-8 flag
    before = hashlib.sha256(source.read_bytes()).hexdigest()
    ws = open_workspace(tmp_path / "ws")
    entries, report = collect(source, ws)
    assert hashlib.sha256(source.read_bytes()).hexdigest() == before
    placed = {(e.student, e.assignment) for e in entries if e.action in ("placed", "renamed")}
    assert placed == {("alice", A), ("bob", A), ("carol", A), ("jos", A)}
    assert ws.submission_path("alice", A).read_bytes() == RELEASE + b" "
    assert ws.submission_path("carol", A).is_file()
    why = {e.source: (e.action, e.reason) for e in entries}
    assert why[f"alice_1_10_Copy of {A} (1).ipynb"][0] == "not placed"
    assert "older hand-in" in why[f"alice_1_10_Copy of {A} (1).ipynb"][1]
    assert "not a notebook" in why["bob_2_21_notes.py"][1]
    assert "system file" in why[f"__MACOSX/._bob_2_20_{A}.ipynb"][1]
    assert "no assignment matches" in why["dave_4_40_diary.ipynb"][1]
    assert "no student" in why[f"{A}.ipynb"][1]
    assert why[f"bob_2_20_{A}.ipynb"][0] == "placed"
    assert why[f"alice_1_11_Copy of {A} (2).ipynb"][0] == "renamed"
    latin = [e for e in entries if e.source.endswith(f"_5_50_{A}.ipynb")][0]
    assert latin.action == "placed" and latin.student.startswith("jos")
    with open(report, newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == len(entries) == 9


def test_a_folder_with_a_non_utf8_name_is_collected(tmp_path):
    source = tmp_path / "handins"
    folder = source / "Jos\udce9 Garc\udced_4242_assignsubmission_file_"  # Latin-1 bytes on disk
    folder.mkdir(parents=True)
    (folder / f"{A}.ipynb").write_bytes(RELEASE)
    ws = open_workspace(tmp_path / "ws")
    entries, _ = collect(source, ws)
    assert [(e.action, e.student) for e in entries] == [("placed", "jos-garc")]
    assert "\\xe9" in entries[0].source  # the report shows the undecodable byte, escaped
