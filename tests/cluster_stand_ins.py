"""What the Dask workers of tests/test_cluster.py run in place of `autograder.grading.cluster.grade_remote`
(they import this module by name): the worker's own grade_remote, with the nbgrader run replaced,
each call leaving a file `<student>-<n>` in the folder named by $COURSE_TEST_CALLS, and per student
the end the test wants:

- `*-killed`: its first call kills its worker (SIGKILL) in the middle of the hand-in, when its
  scratch workspace and sandbox folder exist; the second grades it;
- `*-raises`: raises, the same way every time;
- any other: graded (with nbgrader replaced by a run that does nothing: status `failed`,
  "nbgrader recorded no score", which the test does not look at).
"""
import os
import signal
import subprocess
from pathlib import Path

from autograder.grading import cluster
from autograder.grading import workspace

CALLS = "COURSE_TEST_CALLS"


def grade_remote(template_bytes, student, assignment, handin, limits):
    calls = Path(os.environ[CALLS])
    number = len(list(calls.glob(f"{student}-*")))
    (calls / f"{student}-{number}").write_text(str(os.getpid()))
    if student.endswith("-raises"):
        raise RuntimeError("this task fails the same way every time")
    workspace.run_nbgrader = _killed if student.endswith("-killed") and number == 0 else _ran
    return cluster.grade_remote(template_bytes, student, assignment, handin, limits)


def _killed(ws, *args, **kwargs):
    os.kill(os.getpid(), signal.SIGKILL)


def _ran(ws, *args, **kwargs):
    return subprocess.CompletedProcess(args, 0, "", "")
