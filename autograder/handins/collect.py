"""`collect SOURCE`: place the hand-ins of an LMS zip or a folder into the workspace as
WORKSPACE/submitted/<student>/<assignment>/<assignment>.ipynb.

The student comes from the LMS's file naming, or from the first folder under SOURCE:
    Canvas       janedoe_12345_67890_Copy of 03_lstm (2).ipynb   (also janedoe_LATE_...)
    Moodle       Jane Doe_12345_assignsubmission_file_/03_lstm.ipynb  (or ..._file_03_lstm.ipynb)
    Blackboard   HW3_jdoe_attempt_2026-11-20-10-22-33_03_lstm.ipynb
    a folder     jdoe/anything/03_lstm.ipynb
Student ids are made safe for folder names (lowercase ASCII letters, digits, hyphens).
The assignment comes from the original file name once Colab's "Copy of " and " (1)"
are removed ("03_lstm", "03 LSTM", "03_lstm_final", "lstm"), else from the notebook's
content (its locked cells). When a student has several notebooks for one assignment,
the latest is kept (LMS time stamp, then the copy number, then the file time) and the
others are reported. Every file is reported: placed, renamed or not placed, with why.
The SOURCE is only read.
"""
from __future__ import annotations

import csv
import io
import re
import unicodedata
import zipfile
from dataclasses import dataclass
from pathlib import Path

import nbformat

from autograder.course.layout import CourseError, assignments, decode_notebook, release_path
from autograder.handins.repair import affinity

CANVAS = re.compile(r"^(?P<name>[^_/\s]+?)(?:_LATE)?_(?P<uid>\d+)_(?P<sid>\d+)_(?P<file>.+)$")
MOODLE = re.compile(r"^(?P<name>.+?)_(?P<uid>\d+)_assignsubmission_(?:file|onlinetext)_(?P<file>.*)$")
BLACKBOARD = re.compile(r"^(?P<assign>.+?)_(?P<name>[^_]+)_attempt_(?P<time>\d{4}(?:-\d\d){5})(?:_(?P<file>.+))?$")
COPY_PREFIX = re.compile(r"^(copy of\s+)+", re.IGNORECASE)
COPY_SUFFIX = re.compile(r"(\s*\((?P<n>\d+)\)|\s*-\s*copy(\s*\((?P<m>\d+)\))?)$", re.IGNORECASE)
SYSTEM = re.compile(r"(^|/)(__MACOSX|\.DS_Store|\._[^/]*|Thumbs\.db|\.ipynb_checkpoints)(/|$)")


@dataclass
class Entry:
    source: str                 # the file as named in SOURCE
    action: str                 # placed | renamed | not placed
    student: str = ""
    assignment: str = ""
    target: str = ""
    reason: str = ""
    rank: tuple = ()            # what "latest" compares
    original: str = ""          # the file name the student gave it (without the LMS's prefix)


def slug(text: str) -> str:
    """A safe student id: ASCII letters, digits and hyphens, lowercase."""
    text = unicodedata.normalize("NFKD", text.encode("utf-8", "surrogateescape").decode("utf-8", "ignore"))
    text = text.encode("ascii", "ignore").decode().lower()
    return re.sub(r"[^a-z0-9]+", "-", text).strip("-")


def shown(name: str) -> str:
    """A file name as it can be printed (undecodable bytes as escapes)."""
    return name.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


def clean_name(filename: str) -> tuple[str, int]:
    """A file name without extension, "Copy of " and " (N)"; returns it and N (0 if none)."""
    stem = re.sub(r"\.ipynb$", "", filename.strip(), flags=re.IGNORECASE).strip()
    stem = COPY_PREFIX.sub("", stem).strip()
    copy_number = 0
    while True:
        found = COPY_SUFFIX.search(stem)
        if not found or found.start() == 0:
            break
        copy_number = max(copy_number, int(found.group("n") or found.group("m") or 1))
        stem = stem[: found.start()].strip()
    return stem, copy_number


def assignment_from_name(stem: str, known: list[str]) -> str | None:
    key = re.sub(r"[\s\-.]+", "_", stem.lower()).strip("_")
    if key in known:
        return key
    number = re.match(r"^(\d\d?)(?:_|$)", key)
    if number:
        hits = [a for a in known if a.startswith(f"{int(number.group(1)):02d}_")]
        if len(hits) == 1:
            return hits[0]
    for name in known:  # "lstm", "hw_03_lstm_final": the name part of one assignment
        topic = name.split("_", 1)[1]
        if re.search(rf"(^|_){re.escape(topic)}(_|$)", key):
            return name
    return None


def assignment_from_content(data: bytes, known: list[str]) -> str | None:
    try:
        nb, _ = decode_notebook(data)  # the encodings and versions grading accepts
    except CourseError:
        return None
    scores = {}
    for name in known:
        if release_path(name).is_file():
            scores[name] = affinity(nb, nbformat.read(release_path(name), as_version=4))
    best = max(scores, key=scores.get, default=None)
    return best if best and scores[best] >= 0.5 else None


def parse(path: str) -> tuple[str | None, str, tuple]:
    """(student or None, original file name, time stamp key) from a path inside SOURCE."""
    parts = [p for p in path.split("/") if p]
    filename = parts[-1]
    for part in [filename, *reversed(parts[:-1])]:
        for pattern in (CANVAS, MOODLE, BLACKBOARD):
            found = pattern.match(part)
            if found:
                original = found.groupdict().get("file") or filename
                if part != filename:
                    original = filename
                stamp = found.groupdict().get("time") or ""
                return slug(found.group("name")), original, (stamp,)
    if len(parts) > 1:
        return slug(parts[0]), filename, ("",)
    return None, filename, ("",)


def read_source(source: Path) -> list[tuple[str, bytes, tuple]]:
    """(path inside SOURCE, bytes, date key) of every file in a zip or a folder."""
    files = []
    if source.is_file() and zipfile.is_zipfile(source):
        with zipfile.ZipFile(source) as zf:
            for info in zf.infolist():
                if info.is_dir():
                    continue
                name = info.filename
                if not info.flag_bits & 0x800:  # no UTF-8 flag: try UTF-8 before the cp437 default
                    try:
                        name = name.encode("cp437").decode("utf-8")
                    except (UnicodeEncodeError, UnicodeDecodeError):
                        pass
                files.append((name, zf.read(info), info.date_time))
    elif source.is_dir():
        for path in sorted(p for p in source.rglob("*") if p.is_file()):
            files.append((path.relative_to(source).as_posix(), path.read_bytes(), (path.stat().st_mtime,)))
    else:
        raise CourseError(f"{source}: neither a zip file nor a folder")
    return files


def collect(source: Path, ws) -> tuple[list[Entry], Path]:
    """Place every hand-in of `source` in the workspace; returns the entries and the report."""
    known = assignments()
    entries: list[Entry] = []
    chosen: dict[tuple[str, str], tuple[Entry, bytes]] = {}
    for path, data, date in read_source(Path(source)):
        name = shown(path)
        if SYSTEM.search(path):
            entries.append(Entry(name, "not placed", reason="a system file, not a hand-in"))
            continue
        if not path.lower().endswith(".ipynb"):
            entries.append(Entry(name, "not placed", reason=f"not a notebook ({Path(path).suffix or 'no extension'})"))
            continue
        student, original, stamp = parse(path)
        if not student:
            entries.append(Entry(name, "not placed", reason="no student in the path (expected an LMS name or a folder per student)"))
            continue
        stem, copy_number = clean_name(original)
        assignment = assignment_from_name(stem, known) or assignment_from_content(data, known)
        if not assignment:
            entries.append(Entry(name, "not placed", student=student, reason=f"no assignment matches {shown(original)!r}"))
            continue
        entry = Entry(name, "placed", student, assignment, rank=(stamp, copy_number, date), original=original)
        key = (student, assignment)
        if key in chosen:
            previous, _ = chosen[key]
            older, newer = sorted([previous, entry], key=lambda e: e.rank)
            older.action, older.reason = "not placed", f"an older hand-in of {student} for {assignment} (kept {newer.source})"
            entries.append(entry)
            if newer is entry:
                chosen[key] = (entry, data)
            continue
        chosen[key] = (entry, data)
        entries.append(entry)
    for (student, assignment), (entry, data) in chosen.items():
        target = ws.submission_path(student, assignment)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
        entry.target = str(target.relative_to(ws.root))
        if entry.original != f"{assignment}.ipynb":
            entry.action = "renamed"
            entry.reason = f"{shown(entry.original)} -> {assignment}.ipynb"
    report = ws.path("reports", "collect.csv")
    report.parent.mkdir(parents=True, exist_ok=True)
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    writer.writerow(["source", "action", "student", "assignment", "target", "reason"])
    for e in entries:
        writer.writerow([e.source, e.action, e.student, e.assignment, e.target, e.reason])
    report.write_text(buffer.getvalue(), encoding="utf-8")
    return entries, report


def format_report(entries: list[Entry]) -> str:
    lines = []
    for action in ("placed", "renamed", "not placed"):
        mine = [e for e in entries if e.action == action]
        if not mine:
            continue
        lines.append(f"{action}: {len(mine)}")
        for e in mine:
            where = f" -> {e.target}" if e.target else ""
            why = f"  ({e.reason})" if e.reason else ""
            lines.append(f"  {e.source}{where}{why}")
    return "\n".join(lines) or "no files found"
