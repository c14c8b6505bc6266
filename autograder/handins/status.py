"""A hand-in's status: the table of statuses, and the one function that decides it.

Every grading path (`grade`, `demo`, `mutants`, a cluster's worker) ends in
`decide_status(run, findings)`:
- `run`, how the run of the hand-in ended (`Run`): it could not start (unreadable, another
  assignment), it stopped (the kernel died, the notebook's time limit), nbgrader failed,
  or it completed;
- `findings`, what was found in a completed run (`Finding`, of a `Kind`): by the static scan
  of the student's code (autograder.handins.integrity.scan), in the guard's log
  (autograder.handins.integrity.guard_findings) and in the executed notebook's outputs
  (autograder.grading.handin).
A Finding's text goes to the report (flags or notes); its kind alone decides the status.
"""
from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

STATUSES = {
    # status: (meaning, whether the hand-in keeps the points it earned); most severe first
    "unreadable": ("not a notebook (not JSON, empty, damaged); scored 0", False),
    "wrong-assignment": ("the notebook belongs to another assignment; scored 0", False),
    "crashed": ("the kernel died (os._exit, a crash, a killed process); scored 0", False),
    "notebook-timeout": ("the notebook ran past its time limit and was stopped; scored 0", False),
    "runner-stopped": ("the trusted test runner died on what the kernel sent (past its memory limit); scored 0", False),
    "cell-timeout": ("graded; a cell was stopped at the per-cell time limit, the other cells ran", True),
    "failed": ("nbgrader, or the grader itself, could not grade it (the message names the error); scored 0", False),
    "flagged": ("graded, but tampering was detected: review by hand", True),
    "boundary": ("graded; an answer of the kernel past the grader's limits, or not data, was refused (its test failed)", True),
    "memory-limit": ("graded; a cell ran out of memory", True),
    "output-limit": ("graded; output beyond the cap was discarded", True),
    "sandbox": ("graded; the sandbox refused network, fork or a hidden file", True),
    "graded": ("graded normally", True),
}
ORDER = list(STATUSES)


class Run(Enum):
    """How the run of one hand-in ended; the value is the status of a run that did not complete."""

    UNREADABLE = "unreadable"
    WRONG_ASSIGNMENT = "wrong-assignment"
    CRASHED = "crashed"
    NOTEBOOK_TIMEOUT = "notebook-timeout"
    RUNNER_STOPPED = "runner-stopped"
    FAILED = "failed"  # nbgrader failed or recorded no score, or the grader itself raised
    COMPLETED = "graded"


class Kind(Enum):
    """What a finding is about."""

    SUSPICIOUS_CODE = "suspicious code"     # the static scan of the student's cells
    TAMPER = "tamper"                       # the guard refused something (gc, ctypes, trace functions...)
    GARBLED_LOG = "garbled log"             # the notebook wrote to the guard's log
    GUARD_DISABLED = "guard disabled"       # cells ran without the guard's notes
    CELL_TIMEOUT = "cell timeout"
    MEMORY = "memory"
    OUTPUT = "output"
    NETWORK = "network"
    PROCESS = "process"
    HIDDEN_PATH = "hidden-path"
    BOUNDARY = "boundary"                   # the runner refused a reply of the kernel (autograder.isolation.boundary)


KIND_STATUS = {
    Kind.SUSPICIOUS_CODE: "flagged", Kind.TAMPER: "flagged", Kind.GARBLED_LOG: "flagged",
    Kind.GUARD_DISABLED: "flagged",
    Kind.CELL_TIMEOUT: "cell-timeout", Kind.MEMORY: "memory-limit", Kind.OUTPUT: "output-limit",
    Kind.NETWORK: "sandbox", Kind.PROCESS: "sandbox", Kind.HIDDEN_PATH: "sandbox", Kind.BOUNDARY: "boundary",
}


@dataclass(frozen=True)
class Finding:
    kind: Kind
    text: str  # as the report shows it

    @property
    def is_flag(self) -> bool:
        """A reason to review the hand-in by hand (the report's flags; else a sandbox note)."""
        return KIND_STATUS[self.kind] == "flagged"


def worst(statuses: list[str]) -> str:
    return min(statuses, key=ORDER.index) if statuses else "graded"


def decide_status(run: Run, findings: list[Finding]) -> str:
    """The status of a hand-in: its run's when it did not complete, else the most severe
    of what its findings lead to."""
    if run is not Run.COMPLETED:
        return run.value
    return worst([KIND_STATUS[f.kind] for f in findings])


def keeps_points(status: str) -> bool:
    return STATUSES[status][1]

