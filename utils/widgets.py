"""Interactive explorers built on ipywidgets, with a static fallback.

Widgets need a live front end (JupyterLab, Notebook 7, Colab). Under nbgrader, in CI,
in fast mode or where ipywidgets is missing, the explorer draws a few fixed views
instead, so the notebook still shows the idea and never fails on a widget.
"""
from __future__ import annotations

from typing import Callable

from utils.runtime import fast_mode


def widgets_available() -> bool:
    """True when ipywidgets imports and an IPython kernel with a front end is running."""
    if fast_mode():
        return False
    try:
        import ipywidgets  # noqa: F401
        from IPython import get_ipython
    except ImportError:
        return False
    shell = get_ipython()
    return shell is not None and getattr(shell, "kernel", None) is not None


def step_explorer(
    render: Callable[[int], None],
    max_step: int,
    description: str = "step",
    value: int = 0,
) -> None:
    """Let the reader move a slider over 0..max_step and re-run `render(step)`.

    Without widgets, calls `render(value)` and `render(max_step)` once each.
    """
    if widgets_available():
        import ipywidgets as widgets
        from IPython.display import display

        slider = widgets.IntSlider(value=value, min=0, max=max_step, step=1, description=description)
        output = widgets.interactive_output(lambda step: render(step), {"step": slider})
        display(widgets.VBox([slider, output]))
        return
    for step in dict.fromkeys((value, max_step)):
        print(f"--- {description} = {step} ---")
        render(step)
