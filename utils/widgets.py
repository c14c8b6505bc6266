"""Interactive explorers built on ipywidgets, with a static fallback.

Widgets need a live front end (JupyterLab 4, Notebook 7, Colab with its custom widget
manager, which the Colab setup turns on). Under nbgrader, in CI, in fast mode or where
ipywidgets is missing, the explorer draws a few fixed views instead, so the notebook
still shows the idea and never fails on a widget. Where a widget is shown, its output
also carries a static HTML view of the first step (`show_widget`), which front ends that
cannot render widgets (a saved notebook on GitHub, nbviewer, an HTML export) display.
"""
from __future__ import annotations

import base64
import os
import html
from typing import Callable

from utils.runtime import fast_mode

__all__ = ["widgets_available", "step_explorer", "static_html", "show_widget"]


def widgets_available() -> bool:
    """True when ipywidgets imports and an IPython kernel with a front end is running.

    Off in fast mode (grading, CI) unless COURSE_WIDGETS=1; COURSE_WIDGETS=0 turns the
    widgets off everywhere (for a front end that cannot show them).
    """
    forced = os.environ.get("COURSE_WIDGETS", "").strip()
    if forced == "0" or (fast_mode() and forced != "1"):
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
        show_widget(widgets.VBox([slider, output]), lambda: render(value), f"{description} = {value}")
        return
    for step in dict.fromkeys((value, max_step)):
        print(f"--- {description} = {step} ---")
        render(step)


def static_html(render: Callable[[], None], caption: str = "") -> str:
    """HTML of what `render()` prints and plots (figures as embedded PNG)."""
    from IPython.utils.capture import capture_output

    with capture_output() as captured:
        render()
    parts = [f"<p><em>Static view ({html.escape(caption)}); run the notebook to use the interactive explorer.</em></p>"]
    if captured.stdout:
        parts.append(f"<pre>{html.escape(captured.stdout)}</pre>")
    for output in captured.outputs:
        data = output.data
        if "image/png" in data:
            png = data["image/png"]
            png = png if isinstance(png, str) else base64.b64encode(png).decode("ascii")
            parts.append(f'<img src="data:image/png;base64,{png}"/>')
        elif "text/html" in data:
            parts.append(data["text/html"])
        elif "text/plain" in data:
            parts.append(f"<pre>{html.escape(data['text/plain'])}</pre>")
    return '<div class="course-static-view">' + "".join(parts) + "</div>"


def show_widget(widget, render_static: Callable[[], None], caption: str = "") -> None:
    """Display `widget`, with a static view for front ends that cannot render widgets.

    The output holds the widget view and, as text/html, what `render_static()` shows;
    JupyterLab and Colab render the widget, a viewer without widgets the HTML. In Colab
    (whose output area may prefer HTML) the widget is displayed alone.
    """
    from IPython.display import display

    from utils.runtime import in_colab

    bundle_of = getattr(widget, "_repr_mimebundle_", None)
    bundle = bundle_of() if bundle_of is not None and not in_colab() else None
    if not isinstance(bundle, dict) or "application/vnd.jupyter.widget-view+json" not in bundle:
        display(widget)
        return
    bundle["text/html"] = static_html(render_static, caption)
    display(bundle, raw=True)
