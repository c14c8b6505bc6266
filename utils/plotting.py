"""Small matplotlib helpers shared by the notebooks.

Every function draws on `ax` when given (so figures can be composed) or on a new
figure, and returns the Axes.
"""
from __future__ import annotations

from typing import Sequence

__all__ = ["pca_2d", "plot_embeddings_2d", "plot_lines", "plot_heatmap"]


def _axes(ax, figsize=(6, 4)):
    import matplotlib.pyplot as plt

    if ax is None:
        _, ax = plt.subplots(figsize=figsize)
    return ax


def pca_2d(E):
    """Project the rows of E (N, d) onto their first two principal components → (N, 2)."""
    import torch

    X = torch.as_tensor(E, dtype=torch.float32).detach().cpu()
    X = X - X.mean(dim=0, keepdim=True)
    _, _, V = torch.linalg.svd(X, full_matrices=False)
    return X @ V[:2].T


def plot_embeddings_2d(E, labels: Sequence[str], title: str | None = None, ax=None):
    """Scatter the rows of E (N, d) in 2-D (PCA), each point labelled with its token."""
    ax = _axes(ax, figsize=(6, 5))
    points = pca_2d(E)
    ax.scatter(points[:, 0], points[:, 1], s=18)
    for (x, y), label in zip(points.tolist(), labels):
        ax.annotate(label, (x, y), xytext=(3, 3), textcoords="offset points", fontsize=9)
    ax.set_xlabel("principal component 1")
    ax.set_ylabel("principal component 2")
    if title:
        ax.set_title(title)
    return ax


def plot_lines(
    x: Sequence[float],
    series: dict[str, Sequence[float]],
    xlabel: str,
    ylabel: str,
    title: str | None = None,
    logy: bool = False,
    ax=None,
):
    """One line per entry of `series` (label → y values), over the same `x`; a shorter series
    (a run that stopped early) covers the first len(ys) values of `x`."""
    ax = _axes(ax)
    xs = list(x)
    for label, ys in series.items():
        ys = list(ys)
        ax.plot(xs[:len(ys)], ys, marker="o", markersize=3, label=label)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if logy:
        ax.set_yscale("log")
    if title:
        ax.set_title(title)
    if len(series) > 1:
        ax.legend()
    ax.grid(alpha=0.3)
    return ax


def plot_heatmap(
    matrix,
    row_labels: Sequence[str] | None = None,
    col_labels: Sequence[str] | None = None,
    title: str | None = None,
    ax=None,
    cmap: str = "viridis",
):
    """Draw a (R, C) matrix as a heatmap with optional token labels and a colour bar."""
    import torch

    values = torch.as_tensor(matrix).detach().cpu().float()
    ax = _axes(ax, figsize=(1 + 0.45 * values.shape[1], 1 + 0.4 * values.shape[0]))
    image = ax.imshow(values.numpy(), cmap=cmap, aspect="auto")
    ax.figure.colorbar(image, ax=ax, fraction=0.046, pad=0.04)
    if row_labels is not None:
        ax.set_yticks(range(len(row_labels)), labels=list(row_labels))
    if col_labels is not None:
        ax.set_xticks(range(len(col_labels)), labels=list(col_labels), rotation=60, ha="right")
    if title:
        ax.set_title(title)
    return ax
