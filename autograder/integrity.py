"""Integrity: what a hand-in did to earn points it should not have.

Two sources: a static reading of the cells the student wrote (`scan`), and the guard's
log from the grading kernel (`read_guard_logs`, written by autograder.guard).
"""
from __future__ import annotations

import json
from pathlib import Path


def read_guard_logs(base: Path) -> list[list[dict]]:
    """The guard's events of each kernel started under a sandbox folder."""
    logs = []
    for path in sorted(Path(base).glob("kernel-*/guard.jsonl")):
        events = []
        for line in path.read_text(encoding="utf-8", errors="replace").splitlines()[:100000]:
            try:
                event = json.loads(line)
            except json.JSONDecodeError:
                events.append({"event": "garbled", "detail": line[:200]})
                continue
            if isinstance(event, dict):
                events.append(event)
        logs.append(events)
    return logs
