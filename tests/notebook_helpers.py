"""Notebooks as a student has them: the release, with answers filled in, executed in a kernel."""
from __future__ import annotations

import copy
import os
import re

import nbformat

from autograder.course import layout as course

MARKER_LINE = re.compile(r"^\s*### (BEGIN|END) SOLUTION\s*$", re.MULTILINE)


def completed_notebook(name: str):
    """The release notebook of `name` with every answer cell filled in from the solution
    (without the solution markers): what a student who did everything hands in."""
    release = course.read_notebook(course.release_path(name))
    answers = {
        course.grade_id(c): MARKER_LINE.sub("", c.source).replace("\n\n\n", "\n\n")
        for c in course.read_notebook(course.solution_path(name)).cells
        if c.get("metadata", {}).get("nbgrader", {}).get("solution")
    }
    done = copy.deepcopy(release)
    for cell in done.cells:
        if course.grade_id(cell) in answers:
            cell.source = answers[course.grade_id(cell)]
    return done


def execute(nb, cwd, env: dict | None = None, timeout: int = 120):
    """Run `nb` top to bottom in a fresh kernel started in `cwd` (errors are kept as outputs),
    with `env` added to the kernel's environment; its JUPYTER_PATH, if any, is searched first
    for the "python3" kernel. Touches no global state, so notebooks can run side by side."""
    import nbclient
    from jupyter_client.kernelspec import KernelSpecManager
    from jupyter_client.manager import KernelManager

    env = {**os.environ, **(env or {})}
    first = [os.path.join(p, "kernels") for p in env.get("JUPYTER_PATH", "").split(os.pathsep) if p]
    specs = KernelSpecManager()
    specs.kernel_dirs = first + [d for d in specs.kernel_dirs if d not in first]
    client = nbclient.NotebookClient(
        nb, km=KernelManager(kernel_name="python3", kernel_spec_manager=specs), timeout=timeout,
        allow_errors=True, resources={"metadata": {"path": str(cwd)}},
        shutdown_kernel="immediate",  # ipykernel 7 sometimes hangs in a graceful shutdown (3 s until SIGTERM)
    )
    client.execute(env=env)
    return nb


def execute_all(jobs: dict, workers: int = 2) -> dict:
    """{key: (nb, cwd, env)} -> {key: the executed nb, or the exception its run raised},
    `workers` notebooks at a time."""
    from concurrent.futures import ThreadPoolExecutor

    def run(args):
        try:
            return execute(*args)
        except Exception as exc:  # noqa: BLE001  (the test of that notebook reports it)
            return exc

    with ThreadPoolExecutor(workers) as pool:
        return dict(zip(jobs, pool.map(run, jobs.values())))


def outputs_text(cell, name: str = "stdout") -> str:
    return "".join(o.get("text", "") for o in cell.get("outputs", []) if o.get("name") == name)


def errors(cell) -> list[str]:
    return [f"{o['ename']}: {o['evalue']}" for o in cell.get("outputs", []) if o.get("output_type") == "error"]


def write(nb, path) -> None:
    nbformat.write(nb, str(path))
