"""The grading kernel's launcher: the command of each workspace's "python3" kernelspec,
``python -m autograder.isolation.launcher {connection_file}``.

Without sandbox settings (AUTOGRADER_SANDBOX) it is an ordinary IPython kernel. With them it
dies with nbgrader (taking the kernel's namespaces down), asks the fork server of its
nbgrader process for a kernel forked from preloaded modules (autograder.isolation.forkserver; it then
waits for that kernel and exits with its status), and where there is none it becomes the
sandboxed kernel itself in a new interpreter (autograder.isolation.sandbox).
"""
from __future__ import annotations

import os
import sys

from autograder.isolation import forkserver
from autograder.isolation.sandbox import ENV, die_with_parent, exec_inner


def main(argv: list[str] | None = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not os.environ.get(ENV):  # an ordinary kernel (no sandbox requested)
        from ipykernel import kernelapp

        sys.argv = [sys.argv[0], "-f", *argv]
        kernelapp.launch_new_instance()
        return
    die_with_parent()
    forkserver.request_kernel(argv)  # returns only when no server serves this launcher
    exec_inner(argv)


if __name__ == "__main__":
    main()
