"""The grader's temporary folders and files, removed whatever ends the process that made them.

Per hand-in, a grading process (`grade`, a Dask worker) makes a sandbox folder
(`course-sandbox-*`, autograder.grading.workspace.autograde), an nbgrader log (`nbgrader-log-*`,
autograder.isolation.nbgrader_runner) and, on a Dask worker, a scratch workspace (`course-worker-*`,
autograder.grading.cluster.grade_remote). Each goes when its block ends. A process killed in the middle
of a hand-in (SIGKILL, the out-of-memory killer, a Dask nanny past its memory limit, a cluster
closed under it) removes nothing, so each process has a *reaper*: a small process in a session
of its own that reads, from a pipe, which paths are in use, and removes those still in use once
the pipe ends. The pipe ends when every process holding it has ended, however it ended: this
process, and the helpers that write into these folders (the nbgrader runners and nbgrader
processes it starts hold it too, `reaper_fds`), so nothing is removed under a live writer.
"""
from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import Iterator

# The reaper: "+path" and "-path" records (NUL-terminated) until the pipe ends, then the paths
# still in use are removed (again, while a kernel dying at that moment still writes in one).
REAPER = r"""
import os, shutil, sys, time
used, pending = set(), b""
for chunk in iter(lambda: os.read(0, 65536), b""):
    *records, pending = (pending + chunk).split(b"\0")
    for record in records:
        (used.add if record[:1] == b"+" else used.discard)(record[1:])
for attempt in range(20):
    used = {p for p in used if os.path.lexists(p)}
    for path in used:
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path, ignore_errors=True)
        else:
            try:
                os.unlink(path)
            except OSError:
                pass
    if not any(os.path.lexists(p) for p in used):
        break
    time.sleep(0.25)
"""

_lock = threading.Lock()
_reaper: dict = {}  # {"proc": Popen} of this process's reaper, once started


def _pipe():
    """The write end of this process's reaper's pipe (the reaper started now if needed)."""
    if "proc" not in _reaper:
        _reaper["proc"] = subprocess.Popen([sys.executable, "-I", "-S", "-c", REAPER], stdin=subprocess.PIPE,
                                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    return _reaper["proc"].stdin


def reaper_fds() -> tuple[int, ...]:
    """For `pass_fds` of a helper process that writes into this process's folders: while it
    runs, the reaper waits for it too."""
    with _lock:
        return (_pipe().fileno(),)


def _tell(mark: bytes, path: Path) -> None:
    with _lock:
        pipe = _pipe()
        try:
            pipe.write(mark + os.fsencode(path) + b"\0")
            pipe.flush()
        except OSError:  # the reaper was killed: the path is removed by its block alone
            pass


@contextlib.contextmanager
def _in_use(path: Path) -> Iterator[Path]:
    _tell(b"+", path)
    try:
        yield path
    finally:
        _tell(b"-", path)


@contextlib.contextmanager
def folder(prefix: str, keep: bool = False) -> Iterator[Path]:
    """A new folder in the temporary directory for the block, removed at its end or, when this
    process dies first, by its reaper. `keep`: left in place (for debugging)."""
    path = Path(tempfile.mkdtemp(prefix=prefix))
    if keep:
        yield path
        return
    with _in_use(path):
        try:
            yield path
        finally:
            shutil.rmtree(path, ignore_errors=True)


@contextlib.contextmanager
def file(prefix: str) -> Iterator[Path]:
    """A new empty file in the temporary directory for the block, removed as `folder` is."""
    fd, name = tempfile.mkstemp(prefix=prefix)
    os.close(fd)
    with _in_use(Path(name)) as path:
        try:
            yield path
        finally:
            path.unlink(missing_ok=True)
