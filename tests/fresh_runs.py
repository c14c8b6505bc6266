"""Run the README's test command several times, each time in a fresh clone, and print each
run's failures and wall time: the check that `make test` is green on every run, wherever
the clone lies.

    python tests/fresh_runs.py [--runs 3] [--dir DIR] [--command "make test"] [-- PYTEST ARGS]
    make test-fresh RUNS=3 DIR=/somewhere PYTEST_ARGS="tests/test_datasets.py"

Each run gets DIR/run-N/ (DIR: a new folder under the system's temp dir unless given),
holding a `git clone` of this repository's committed HEAD and, beside it as in CI, a copy of
the offline dataset mirror (shared/datasets: $COURSE_DATA_DIR, or ../shared/datasets beside
this clone). The command runs in the clone (so `make test` installs a new .venv first, as
on a fresh machine); PYTEST ARGS go to pytest through the Makefile's PYTEST_ARGS (in the
environment, so `--command .ci/run` passes them on too). The log of
each run is DIR/run-N/test.log. Exits 1 if any run failed.

Every run adds a row to benchmarks/results/fresh_runs.json (`record`): the commit, the clone's
folder, pytest's own seconds and the whole command's (install included), the counts, whether
the browser test ran, and the machine.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
MIRROR = Path(os.environ.get("COURSE_DATA_DIR") or REPO_ROOT.parent / "shared" / "datasets")
RECORD = REPO_ROOT / "benchmarks" / "results" / "fresh_runs.json"


def fresh_clone(run_dir: Path) -> Path:
    """A clone of HEAD in run_dir, with the dataset mirror beside it (run_dir/shared/datasets)."""
    clone = run_dir / REPO_ROOT.name
    subprocess.run(["git", "clone", "--quiet", str(REPO_ROOT), str(clone)], check=True)
    if MIRROR.is_dir():
        shutil.copytree(MIRROR, run_dir / "shared" / "datasets")
    return clone


def outcome(log: str) -> tuple[str, list[str]]:
    """pytest's last summary line ("3 failed, 845 passed in 1320.5s") and the tests it
    reports as FAILED or ERROR (the -ra summary)."""
    summaries = re.findall(r"^=+ (.*\d+ (?:passed|failed|errors?|skipped|deselected).*) =+$", log, re.MULTILINE)
    failures = re.findall(r"^(?:FAILED|ERROR) (\S+)", log, re.MULTILINE)
    return (summaries[-1] if summaries else "no pytest summary (see the log)"), failures


def counts(summary: str) -> dict:
    """passed, failed (failures and errors) and skipped from pytest's summary line, and pytest's
    own seconds ("1 failed, 1277 passed, 2 skipped in 593.2s (0:09:53)")."""
    found = {word: int(n) for n, word in re.findall(r"(\d+) (passed|failed|errors?|skipped)", summary)}
    seconds = re.search(r" in ([\d.]+)s", summary)
    return {"pytest_s": float(seconds.group(1)) if seconds else None, "passed": found.get("passed", 0),
            "failed": found.get("failed", 0) + found.get("error", 0) + found.get("errors", 0),
            "skipped": found.get("skipped", 0)}


def browser_ran(log: str, pytest_args: str) -> str:
    """'skipped' when pytest's -ra summary lists the browser test as skipped, 'not selected' when
    PYTEST ARGS chose other tests, else 'ran'."""
    if pytest_args and "test_browser" not in pytest_args:
        return "not selected"
    return "skipped" if re.search(r"^SKIPPED .*test_browser\.py", log, re.MULTILINE) else "ran"


def machine() -> str:
    cpu = platform.machine()
    try:
        cpu = next(line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                   if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return f"{cpu}, {len(os.sched_getaffinity(0))} cores, Python {platform.python_version()}"


def record(row: dict, path: Path = RECORD) -> None:
    """Append one run's row to the fresh-runs record (a JSON list)."""
    rows = json.loads(path.read_text()) if path.is_file() else []
    rows.append(row)
    path.write_text(json.dumps(rows, indent=1) + "\n")


def run_once(run_dir: Path, command: list[str], pytest_args: str) -> bool:
    """Clone into run_dir, run `command` there; print what happened and record it. True when it passed."""
    run_dir.mkdir(parents=True)
    clone = fresh_clone(run_dir)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=clone, capture_output=True, text=True).stdout
    # Nothing of this shell's setup: no mirror named (the one beside the clone is found, as in CI),
    # no virtual environment, no make variables of an enclosing `make test-fresh`.
    dropped = ("COURSE_DATA_DIR", "VIRTUAL_ENV", "PYTEST_ARGS", "MAKEFLAGS", "MFLAGS", "MAKELEVEL")
    env = {k: v for k, v in os.environ.items() if k not in dropped}
    if pytest_args:
        env["PYTEST_ARGS"] = pytest_args  # make reads it (PYTEST_ARGS ?=), also under .ci/run
    log_path = run_dir / "test.log"
    started = time.monotonic()
    with open(log_path, "w") as log:
        code = subprocess.run(command, cwd=clone, env=env, stdout=log, stderr=subprocess.STDOUT).returncode
    total = time.monotonic() - started
    minutes, seconds = divmod(round(total), 60)
    text = log_path.read_text(errors="replace")
    summary, failures = outcome(text)
    print(f"{run_dir.name}: exit {code}, {minutes}:{seconds:02d} wall (install included), {summary}")
    for test in failures:
        print(f"    {test}")
    print(f"    log: {log_path}", flush=True)
    record({"date": time.strftime("%Y-%m-%d %H:%M"), "commit": commit.strip(), "clone_dir": str(clone),
            "command": shlex.join(command), "pytest_args": pytest_args, "exit": code, **counts(summary),
            "total_s": round(total, 1), "browser": browser_ran(text, pytest_args), "machine": machine()})
    return code == 0 and not failures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3, help="how many fresh clones to test (default 3)")
    parser.add_argument("--dir", type=Path, help="where the clones go (default: a new folder under the temp dir)")
    parser.add_argument("--command", default="make test", help="run in each clone (default: make test; or .ci/run)")
    parser.add_argument("pytest_args", nargs="*", help="after --: arguments for pytest (PYTEST_ARGS)")
    args = parser.parse_args(argv)
    base = args.dir.resolve() if args.dir else Path(tempfile.mkdtemp(prefix="course-fresh-"))
    command, pytest_args = shlex.split(args.command), shlex.join(args.pytest_args)
    shown = (f"PYTEST_ARGS={shlex.quote(pytest_args)} " if pytest_args else "") + args.command
    print(f"{args.runs} run(s) of `{shown}` from fresh clones of {REPO_ROOT} under {base}", flush=True)
    passed = [run_once(base / f"run-{n}", command, pytest_args) for n in range(1, args.runs + 1)]
    print(f"{sum(passed)} of {len(passed)} run(s) passed")
    return 0 if all(passed) else 1


if __name__ == "__main__":
    sys.exit(main())
