"""Google Colab: what the locked setup cell does there, after fetching the course.

The setup cell of every notebook starts with a short bootstrap (written by the
instructor's `python -m autograder student-cells`). In Colab it clones the course's
student distribution, puts it on `sys.path` and calls `prepare()` below, which

* installs only the packages of the course that Colab lacks (never torch: Colab's own
  build matches its GPU driver, and a package that is already there is never upgraded,
  so Colab's ipywidgets stays the one its front end speaks);
* turns on Colab's custom widget manager, so ipywidgets explorers render;
* for a notebook that wants a GPU, checks for one and says how to switch the runtime.

Outside Colab nothing here runs.
"""
from __future__ import annotations

import importlib.util
import subprocess
import sys
from typing import Callable

# Import name -> pip requirement: the course's run-time needs (pyproject's
# `dependencies`) without torch, which Colab always has and must keep.
# tests/test_colab.py checks this against pyproject.toml.
STUDENT_REQUIREMENTS = {
    "numpy": "numpy>=1.24",
    "matplotlib": "matplotlib>=3.7",
    "ipywidgets": "ipywidgets>=8",
    "nbformat": "nbformat>=5.9",
    "pooch": "pooch>=1.7",
    "tqdm": "tqdm>=4.66",
    "tokenizers": "tokenizers>=0.15",
}

GPU_ADVICE = (
    "This notebook is built for a GPU, and this Colab runtime has none.\n"
    "  Switch: Runtime -> Change runtime type -> Hardware accelerator: T4 GPU -> Save,\n"
    "  then run this cell again (the runtime restarts, so run the cells above it too).\n"
    "  On the CPU it still runs, with smaller models and longer waits."
)


def missing_requirements(
    requirements: dict[str, str] = STUDENT_REQUIREMENTS,
    find_spec: Callable[[str], object] = importlib.util.find_spec,
) -> list[str]:
    """The pip requirements whose module cannot be imported here (installed ones are kept as they are)."""
    return [req for module, req in requirements.items() if find_spec(module) is None]


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
    find_spec: Callable[[str], object] = importlib.util.find_spec,
) -> list[str]:
    """Make a fresh Colab runtime ready for the course; returns what was pip-installed."""
    missing = missing_requirements(find_spec=find_spec)
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
