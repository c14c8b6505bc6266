"""Seeding, device choice, Colab detection, warning filters and fast mode."""
from __future__ import annotations

import os
import random
import sys
import warnings

__all__ = ["fast_mode", "in_colab", "seed_everything", "get_device", "quiet_warnings", "setup", "time_call"]


FAST_ENV_VARS = ("NBGRADER_EXECUTION", "COURSE_FAST")


def fast_mode() -> bool:
    """True while nbgrader grades the notebook or when COURSE_FAST=1.

    Notebooks shrink their long experiments in fast mode so that grading and CI stay
    quick; graded cells never depend on those experiments.
    """
    if os.environ.get("NBGRADER_EXECUTION"):
        return True
    return os.environ.get("COURSE_FAST", "").strip().lower() in {"1", "true", "yes", "on"}


def in_colab() -> bool:
    """True when running inside Google Colab."""
    return "google.colab" in sys.modules or "COLAB_RELEASE_TAG" in os.environ


def seed_everything(seed: int) -> None:
    """Seed Python's, NumPy's and PyTorch's generators (CPU and every GPU)."""
    import numpy as np
    import torch

    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)  # also seeds every CUDA device


def get_device(prefer: str | None = None):
    """The best available torch.device: CUDA, then Apple's MPS, then the CPU.

    `prefer` (for example "cpu") overrides the choice; so does the COURSE_DEVICE
    environment variable.
    """
    import torch

    choice = prefer or os.environ.get("COURSE_DEVICE")
    if choice:
        return torch.device(choice)
    if torch.cuda.is_available():
        return torch.device("cuda")
    mps = getattr(torch.backends, "mps", None)
    if mps is not None and mps.is_available():
        return torch.device("mps")
    return torch.device("cpu")


def quiet_warnings() -> None:
    """Silence library warnings that would reach stderr.

    nbgrader scores any output on stderr in a test cell as a failure, so the locked
    setup cell filters the warnings of the libraries a correct answer may trigger.
    """
    warnings.filterwarnings("ignore", category=UserWarning)
    warnings.filterwarnings("ignore", category=DeprecationWarning)
    warnings.filterwarnings("ignore", category=FutureWarning)
    warnings.filterwarnings("ignore", category=RuntimeWarning, module="numpy")
    if os.environ.get("NBGRADER_EXECUTION"):
        os.environ.setdefault("TQDM_DISABLE", "1")  # progress bars write to stderr


def setup(seed: int = 0, device: str | None = None, verbose: bool = True):
    """Prepare a notebook: seeds, device, warning filters; returns the torch.device.

    Call it once, in the locked first cell of every notebook.
    """
    import torch

    quiet_warnings()
    seed_everything(seed)
    chosen = get_device(device)
    torch.set_printoptions(precision=4, sci_mode=False)
    if verbose:
        where = "Colab" if in_colab() else "local"
        mode = "fast mode (experiments shrunk)" if fast_mode() else "full mode"
        print(f"torch {torch.__version__} | device {chosen} | {where} | seed {seed} | {mode}")
    return chosen


def time_call(fn, repeats: int = 3) -> float:
    """Median wall time of fn() in seconds over `repeats` calls, after one warm-up call (kernel
    selection, memory allocation); a GPU in use (CUDA or Apple's MPS) is synchronised around each call,
    since both run asynchronously and a call would otherwise return before its work is done."""
    import time

    import torch

    def sync():
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            torch.cuda.synchronize()
        mps = getattr(torch.backends, "mps", None)
        if mps is not None and mps.is_available():
            torch.mps.synchronize()

    fn()
    times = []
    for _ in range(repeats):
        sync()
        start = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - start)
    return sorted(times)[len(times) // 2]
