"""Google Colab: what the locked setup cell does there, after fetching the course.

The setup cell of every notebook starts with a short bootstrap (written by the
instructor's `python -m autograder student-cells`). In Colab it clones the course's
student distribution, puts it on `sys.path` and calls `prepare()` below, which

* installs only the packages of the course that Colab lacks: the run-time requirements
  of pyproject.toml, which the course manifest (utils/course_manifest.json) carries,
  less torch (Colab's own build matches its GPU driver); a package that is already
  there is never upgraded, so Colab's ipywidgets stays the one its front end speaks;
* turns on Colab's custom widget manager, so ipywidgets explorers render;
* for a notebook that wants a GPU, checks for one and says how to switch the runtime.

Outside Colab nothing here runs.
"""
from __future__ import annotations

import importlib
import importlib.metadata
import re
import subprocess
import sys
from typing import Callable

from utils.submission import load_manifest

__all__ = ["GPU_ADVICE", "enable_widgets", "gpu_advice", "is_installed", "missing_requirements", "prepare", "requirement_name",
           "student_requirements"]

# Colab's own torch build matches its GPU driver: never installed over it.
KEEP = ("torch",)


def student_requirements(manifest: dict | None = None) -> list[str]:
    """The course's run-time requirements (pyproject's `dependencies`, carried by the
    manifest that `python -m autograder release` writes) less torch."""
    run = (manifest or load_manifest())["requirements"]
    return [req for req in run if requirement_name(req) not in KEEP]


def requirement_name(requirement: str) -> str:
    """The distribution a pip requirement names ("numpy>=1.24" -> "numpy")."""
    return re.match(r"\s*([A-Za-z0-9_.\-]+)", requirement).group(1).lower()


def is_installed(distribution: str) -> bool:
    try:
        importlib.metadata.distribution(distribution)
    except importlib.metadata.PackageNotFoundError:
        return False
    return True


GPU_ADVICE = (
    "This notebook is built for a GPU, and this Colab runtime has none.\n"
    "  Switch: Runtime -> Change runtime type -> Hardware accelerator: T4 GPU -> Save,\n"
    "  then run this cell again (the runtime restarts, so run the cells above it too).\n"
    "  On the CPU it still runs, with smaller models and longer waits."
)


def missing_requirements(
    requirements: list[str] | None = None,
    installed: Callable[[str], bool] = is_installed,
) -> list[str]:
    """The pip requirements not installed here (installed ones are kept as they are)."""
    return [req for req in (student_requirements() if requirements is None else requirements)
            if not installed(requirement_name(req))]


def gpu_advice(cuda_available: bool) -> str | None:
    """The message for a notebook that wants a GPU, or None when one is there."""
    return None if cuda_available else GPU_ADVICE


def enable_widgets() -> bool:
    """Turn on Colab's custom widget manager (ipywidgets 8 explorers need it); False outside Colab."""
    try:
        from google.colab import output
    except ImportError:
        return False
    output.enable_custom_widget_manager()
    return True


def prepare(
    want_gpu: bool = False,
    run: Callable = subprocess.run,
    installed: Callable[[str], bool] = is_installed,
) -> list[str]:
    """Make a fresh Colab runtime ready for the course; returns what was pip-installed."""
    missing = missing_requirements(installed=installed)
    if missing:
        print("Colab: installing what this runtime lacks: " + ", ".join(missing))
        run([sys.executable, "-m", "pip", "install", "--quiet", *missing], check=True)
        importlib.invalidate_caches()
    enable_widgets()
    if want_gpu:
        import torch

        advice = gpu_advice(torch.cuda.is_available())
        if advice:
            print(advice)
    return missing
