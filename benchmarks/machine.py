"""What a benchmark ran on, recorded beside every figure."""
from __future__ import annotations

import json
import os
import platform
import time
from pathlib import Path

RESULTS_DIR = Path(__file__).resolve().parent / "results"


def datasets_available() -> dict[str, bool]:
    """Which registered datasets the notebooks could load (else they ran on fallbacks)."""
    from utils.data import DatasetUnavailable, dataset_path, registry

    available = {}
    for name in registry():
        try:
            dataset_path(name)
            available[name] = True
        except DatasetUnavailable:
            available[name] = False
    return available


def gpu_driver() -> str | None:
    """The NVIDIA driver's version as nvidia-smi reports it (None without one)."""
    import subprocess

    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=30, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return out.splitlines()[0].strip() if out.strip() else None


def machine_info() -> dict:
    import torch

    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {
        "date": time.strftime("%Y-%m-%d %H:%M"),
        "cpu": cpu,
        "cores": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
        "gpu_driver": gpu_driver() if torch.cuda.is_available() else None,
        "cuda": torch.version.cuda,
        "datasets": datasets_available(),
    }


def parse_args(doc: str, default_repeat: int) -> tuple[list[str], int]:
    """The assignments (default: all) and the number of repeats from the command line."""
    import argparse

    from autograder.course.layout import assignments, check_assignment

    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("assignments", nargs="*", help="default: every assignment")
    parser.add_argument("--repeat", type=int, default=default_repeat)
    args = parser.parse_args()
    return [check_assignment(n) for n in args.assignments] or assignments(), args.repeat


def save(name: str, rows: list[dict]) -> Path:
    """Write rows and the machine to results/<name>.json; returns the path."""
    RESULTS_DIR.mkdir(exist_ok=True)
    path = RESULTS_DIR / f"{name}.json"
    path.write_text(json.dumps({"machine": machine_info(), "rows": rows}, indent=1) + "\n")
    return path
