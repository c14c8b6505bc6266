"""The report's figures (matplotlib), each as a data: URL of a PNG to embed in the page."""
from __future__ import annotations

import base64
import io

from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

LABELLED_ROWS = 60  # a heatmap with more students than this leaves out their names


def _data_url(fig: Figure) -> str:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=100, bbox_inches="tight")
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode("ascii")


def histogram(totals: list[float], max_total: float, title: str) -> str:
    fig = Figure(figsize=(6, 2.8))
    ax = fig.add_subplot()
    bins = min(20, max(5, int(max_total) or 5))
    ax.hist(totals, bins=bins, range=(0, max_total or 1), color="#3b6ea8", edgecolor="white")
    ax.set_xlabel(f"points (of {max_total:g})")
    ax.set_ylabel("students")
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_title(title)
    ax.spines[["top", "right"]].set_visible(False)
    return _data_url(fig)


def pass_shares(names: list[str], shares: list[float], title: str) -> str:
    """Horizontal bars: the share of students who passed each test cell."""
    fig = Figure(figsize=(6, 0.3 * len(names) + 1))
    ax = fig.add_subplot()
    y = range(len(names))
    colours = ["#2e7d32" if s >= 0.8 else "#f9a825" if s >= 0.5 else "#c62828" for s in shares]
    ax.barh(list(y), shares, color=colours)
    ax.set_yticks(list(y), names)
    ax.invert_yaxis()
    ax.set_xlim(0, 1)
    ax.set_xlabel("share of students with full points")
    ax.set_title(title)
    ax.spines[["top", "right"]].set_visible(False)
    return _data_url(fig)


def heatmap(students: list[str], assignments: list[str], shares: list[list[float | None]]) -> str:
    """Students (rows) by assignments (columns): the share of points, blank where not handed in
    (rows sorted by the mean share, counting blanks as 0, when there are too many to name)."""
    import numpy as np

    data = np.array([[np.nan if v is None else v for v in row] for row in shares], dtype=float)
    labelled = len(students) <= LABELLED_ROWS
    if not labelled:  # too many to name: best first, so the class reads as a gradient
        data = data[np.argsort(-np.nan_to_num(data).mean(axis=1), kind="stable")]
    height = min(14, 1.5 + 0.22 * len(students)) if labelled else 10
    fig = Figure(figsize=(1.2 * len(assignments) + 3, height))
    ax = fig.add_subplot()
    image = ax.imshow(np.ma.masked_invalid(data), aspect="auto", cmap="RdYlGn", vmin=0, vmax=1,
                      interpolation="nearest")
    ax.set_xticks(range(len(assignments)), assignments, rotation=30, ha="right")
    if labelled:
        ax.set_yticks(range(len(students)), students)
    else:
        ax.set_ylabel(f"{len(students)} students, best first")
        ax.set_yticks([])
    fig.colorbar(image, ax=ax, label="share of points")
    return _data_url(fig)
