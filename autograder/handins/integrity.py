"""Integrity: what a hand-in did to earn points it should not have.

Two sources: a static reading of the cells the student wrote (`scan`), and the guard's
log from the grading kernel (`read_guard_logs`, written by autograder.isolation.guard).
"""
from __future__ import annotations

import ast
import functools
import hashlib
import heapq
import hmac
import os
import re
import stat
import symtable
from pathlib import Path

from autograder.isolation import kernel_text
from autograder.handins.status import Finding, Kind
from utils.cells import is_locked, label, nbgrader_meta, normalized_source, parse


GUARD_LOGS = 8              # logs read under one sandbox folder (one a kernel: nbgrader starts one a hand-in)
GUARD_LOG_LINES = 100_000   # lines read of them, all together
GUARD_LOG_BYTES = 16 << 20  # bytes read of them, all together
GUARD_LINE_BYTES = 4 << 10  # the guard's lines stay under 1 KiB: a file is read no further than a longer one


def read_guard_logs(base: Path, key: bytes) -> list[list[dict]]:
    """The guard's events of each kernel started under a sandbox folder. The notebook can write
    these files too (each up to `--file-mb`, and more of them), so they are read as streams within
    the bounds above, never whole. A line whose MAC does not match `key` (the notebook wrote it)
    becomes a "garbled" event, and so does a log that is not a regular file."""
    room = [GUARD_LOG_LINES, GUARD_LOG_BYTES]  # shared by the logs of the folder
    logs = []
    for path in _guard_log_paths(Path(base)):
        try:
            handle = open(os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK), "rb")
        except OSError:  # a link, or a folder, put in the log's place
            logs.append([{"event": "garbled", "detail": "not a file"}])
            continue
        with handle:
            if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):  # a FIFO would never end
                logs.append([{"event": "garbled", "detail": "not a file"}])
                continue
            logs.append([_event(line, key) for line in _lines_within(handle, room)])
    return logs


def _guard_log_paths(base: Path) -> list[Path]:
    """guard.jsonl of the first GUARD_LOGS kernel folders of `base` by name (the folder is listed as a
    stream too: the notebook may have made others)."""
    with os.scandir(base) as entries:
        names = heapq.nsmallest(GUARD_LOGS, (e.name for e in entries if e.name.startswith("kernel-")))
    return [base / name / "guard.jsonl" for name in names if os.path.lexists(base / name / "guard.jsonl")]


def _lines_within(handle, room: list[int]):
    """The lines of `handle` while `room` ([lines, bytes] left) lasts, each of at most
    GUARD_LINE_BYTES: a longer one is the last read of this file."""
    while room[0] > 0 and room[1] > 0:
        line = handle.readline(min(GUARD_LINE_BYTES, room[1]))
        if not line:
            return
        room[0], room[1] = room[0] - 1, room[1] - len(line)
        yield line
        if not line.endswith(b"\n"):
            return


def _event(line: bytes, key: bytes) -> dict:
    event = verified_line(line.rstrip(b"\n"), key)
    if event is None:
        return {"event": "garbled", "detail": line[:200].decode("utf-8", "replace")}
    return event


def verified_line(line: bytes, key: bytes) -> dict | None:
    """The event of one log line written by the guard with `key`, or None. Its strings are valid
    UTF-8 (autograder.isolation.kernel_text): the guard escapes what it logs, and JSON's escape of a lone
    surrogate would otherwise come back as one."""
    body, sep, tail = line.rpartition(b', "mac": "')
    if not sep or not tail.endswith(b'"}'):
        return None
    mac = hashlib.blake2b(body, key=key, digest_size=16).hexdigest().encode()
    if not hmac.compare_digest(mac, tail[:-2]):
        return None
    try:
        event = kernel_text.loads(body + b"}")
    except (ValueError, RecursionError):
        return None
    return event if isinstance(event, dict) else None


# What in a student's own cells suggests tampering, and why it matters.
READS_RUNNING = "reads the code that is running (the hidden tests)"
SUSPICIOUS = [
    (r"\b(torch|np|numpy|math)(\s*\.\s*testing)?\s*\.\s*(allclose|isclose|equal|assert_close|assert_allclose|testing)\s*=(?!=)",
     "replaces a comparison function the tests rely on"),
    (r"\bsetattr\s*\(\s*(?!self\b)", "sets attributes by name (can replace what the tests rely on)"),
    (r"\b(utils\s*\.\s*)?checks\s*\.\s*\w+\s*=(?!=)", "replaces a self-check helper"),
    (r"\bbuiltins\b|__builtins__", "changes Python's builtins"),
    (r"\bsys\s*\.\s*modules\b", "changes the module table"),
    (r"\bevents\s*\.\s*(register|callbacks)|input_transformers|ast_transformers|input_transformer_manager"
     r"|set_custom_exc|CustomTB|register_magic|showtraceback|\.\s*(run_cell|run_cell_async|run_ast_nodes|run_code"
     r"|transform_cell)\s*=(?!=)", "registers IPython hooks that can change later cells"),
    (r"\bsys\s*\.\s*(settrace|setprofile|_getframe)|\bf_back\b|\bf_locals\b|\bco_consts\b|\binspect\s*\.\s*"
     r"(stack|currentframe|getouterframes|getsource)|\blinecache\b|\b_ih\b|\bIn\s*\[|history_manager"
     r"|\bgc\s*\.\s*get_(objects|referrers)|\buser_ns\b", READS_RUNNING),
    (r"gradebook|nbgrader|autograded|HIDDEN TESTS|\bsolutions/|\brelease/", "refers to the grader's files"),
]


HISTORY = re.compile(r"_i{1,3}|_i\d+")  # IPython's input history: _i, _ii, _iii, _i<N>


def history_reads(source: str) -> set[str]:
    """IPython's input-history variables (`HISTORY`) that a cell reads: as globals, except where
    the cell's own top level binds them (IPython sets them again after every cell, so a
    function reading one, or another cell, reads the history). A student's own `_i` (a loop
    variable, an argument, a function's local, as Python's scope analysis, `symtable`, finds
    them) is theirs. Code that does not compile is searched as text."""
    try:
        tables = [symtable.symtable(source, "<cell>", "exec")]
    except (SyntaxError, ValueError):
        return {m.group() for m in re.finditer(r"(?<!\w)_i\d*(?!\w)", source)}
    read = set()
    while tables:
        table = tables.pop()
        tables += table.get_children()
        top = table.get_type() == "module"
        read |= {sym.get_name() for sym in table.get_symbols() if HISTORY.fullmatch(sym.get_name())
                 and sym.is_referenced() and (sym.is_global() and not top
                                              or top and not (sym.is_assigned() or sym.is_imported()))}
    return read


def student_code(repaired, release) -> list[tuple[str, str]]:
    """(label, source) of each code cell whose text the student wrote: answer cells and
    cells they added (not a copy of any release cell)."""
    given = {normalized_source(c.source) for c in release.cells}
    return [
        (label(cell, index), cell.source)
        for index, cell in enumerate(repaired.cells)
        if cell.cell_type == "code" and not is_locked(cell) and normalized_source(cell.source) not in given
    ]


def bound_names(source: str, assignments: bool = True, imports: bool = True) -> set[str]:
    """Names a cell binds at top level (defs, classes, imports, and assignments)."""
    try:
        tree = parse(source)
    except (SyntaxError, ValueError):
        return set()
    names = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif imports and isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif assignments and isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                names.update(n.id for n in ast.walk(target) if isinstance(n, ast.Name))
    return names


def protected_names(source_nb) -> list[str]:
    """Names the locked cells give (imports, functions, classes, CONSTANTS) that the test
    cells use: a student who rebinds one changes what the tests check with."""
    code = tuple((cell.source, is_locked(cell), bool(nbgrader_meta(cell).get("grade")))
                 for cell in source_nb.cells if cell.cell_type == "code")
    return list(_protected_names(code))


@functools.lru_cache(maxsize=16)  # asked for every hand-in of a batch, always of the same few sources
def _protected_names(code: tuple[tuple[str, bool, bool], ...]) -> tuple[str, ...]:
    given = set()
    for source, locked, graded in code:
        if locked and not graded:
            given |= {n for n in bound_names(source, assignments=False)}
            given |= {n for n in bound_names(source) if n.isupper() and len(n) > 1}
    used = set()
    for source, _, graded in code:
        if graded:
            try:
                used |= {n.id for n in ast.walk(parse(source)) if isinstance(n, ast.Name)}
            except SyntaxError:
                continue
    return tuple(sorted(n for n in given & used if not n.startswith("_")))


def scan(repaired, release, protected: list[str]) -> list[Finding]:
    """Reasons to review a hand-in by hand, from the code the student wrote."""
    flags = []
    for where, source in student_code(repaired, release):
        history = sorted(history_reads(source))
        if history:
            flags.append(Finding(Kind.SUSPICIOUS_CODE, f"{where}: {READS_RUNNING} (`{', '.join(history)}`)"))
        for pattern, reason in SUSPICIOUS:
            found = re.search(pattern, source)
            if found:
                line = next(l for l in source.splitlines() if found.group(0).splitlines()[0] in l).strip()
                flags.append(Finding(Kind.SUSPICIOUS_CODE, f"{where}: {reason} (`{line[:100]}`)"))
        rebound = sorted(bound_names(source, imports=False) & set(protected))
        if rebound:
            flags.append(Finding(Kind.SUSPICIOUS_CODE, f"{where}: redefines {', '.join(rebound)}, which the tests use"))
    return flags


SANDBOX_EVENTS = {"network": Kind.NETWORK, "process": Kind.PROCESS, "hidden-path": Kind.HIDDEN_PATH, "output": Kind.OUTPUT}


def guard_findings(logs: list[list[dict]], executed: int | None) -> list[Finding]:
    """What the guard's logs of one hand-in's kernel say: tampering (flags) and what the
    sandbox refused or cut (notes). `executed` is the number of cells nbgrader ran, when known."""
    found = []
    for events in logs:
        seen = set()
        for e in events:
            kind, detail = e.get("event"), str(e.get("detail", ""))
            key = (kind, detail)
            if key in seen:
                continue
            seen.add(key)
            if kind == "tamper":
                found.append(Finding(Kind.TAMPER, f"cell #{e.get('n')}: {detail}"))
            elif kind in SANDBOX_EVENTS:
                found.append(Finding(SANDBOX_EVENTS[kind], f"{kind}: {detail}"))
            elif kind == "garbled":
                found.append(Finding(Kind.GARBLED_LOG, "the guard's log was written to by the notebook"))
        started = sum(1 for e in events if e.get("event") == "cell")
        if executed is not None and started < executed:
            found.append(Finding(Kind.GUARD_DISABLED,
                                 f"the guard saw {started} of the {executed} cells the kernel ran: a cell removed its hooks"))
    return found
