"""Run chosen cells of a solution notebook in this process, for benchmarks that time the
notebook's own code (the solution's functions, not a copy of them)."""
from __future__ import annotations

import os

from autograder.course.layout import grade_id, read_notebook, solution_path


def solution_namespace(name: str, cells: list[str], stop_at: dict[str, str] | None = None,
                       namespace: dict | None = None) -> dict:
    """The globals after executing the code cells `cells` (grade_ids, or the cell id of a cell without
    one, such as 07's settings cell "c8-settings"; in this order) of the solution of `name`. stop_at maps a grade_id to a line of its source: that cell runs only up to
    the line (for a cell that defines what a benchmark needs, then trains something it does not).
    The cells run in `namespace` if given (names set beforehand, or the globals of an earlier call,
    to run further cells), else in a new one."""
    os.environ.setdefault("MPLBACKEND", "agg")
    sources = {grade_id(cell) or cell.get("id"): cell.source
               for cell in read_notebook(solution_path(name)).cells if cell.cell_type == "code"}
    ns: dict = {} if namespace is None else namespace
    for gid in cells:
        source = sources[gid]
        if stop_at and gid in stop_at:
            cut = source.find(stop_at[gid])
            if cut < 0:
                raise ValueError(f"{name}: cell {gid} has no line {stop_at[gid]!r} to stop at")
            source = source[:cut]
        exec(compile(source, f"{name}:{gid}", "exec"), ns)
    return ns
