"""Diagrams the notebooks draw with matplotlib (no image files shipped).

draw_lstm_cell(): one LSTM step, labelled with the names of notebook 03's code.
"""
from __future__ import annotations

import matplotlib.pyplot as plt
from matplotlib.patches import Circle, FancyBboxPatch

__all__ = ["draw_lstm_cell"]

_GATE = {"sigmoid": "#dbe9f6", "tanh": "#fde3c8"}


def _box(ax, x, y, w, h, text, color, size=11):
    ax.add_patch(FancyBboxPatch((x - w / 2, y - h / 2), w, h, boxstyle="round,pad=0.05", fc=color, ec="black"))
    ax.text(x, y, text, ha="center", va="center", fontsize=size)


def _node(ax, x, y, text):
    ax.add_patch(Circle((x, y), 0.28, fc="white", ec="black", zorder=3))
    ax.text(x, y, text, ha="center", va="center", fontsize=13, zorder=4)


def _arrow(ax, start, end, color="black", text=None, offset=(0.12, 0.0), width=1.3):
    ax.annotate("", xy=end, xytext=start, arrowprops=dict(arrowstyle="->", color=color, lw=width,
                                                          shrinkA=0, shrinkB=9))
    if text:
        ax.text((start[0] + end[0]) / 2 + offset[0], (start[1] + end[1]) / 2 + offset[1], text, fontsize=10,
                color=color)


def draw_lstm_cell(ax=None):
    """Draw one step of lstm_cell: the memory path c_prev -> c_t along the top, the four gates i, f, g, o
    computed from one product of x_t and h_prev with the packed weights, and h_t = o * tanh(c_t)."""
    if ax is None:
        _, ax = plt.subplots(figsize=(11, 6))
    mem = "#b22222"
    ax.add_patch(FancyBboxPatch((1.4, 0.3), 9.6, 6.4, boxstyle="round,pad=0.1", fc="#f7f7f7", ec="gray", ls="--"))
    ax.text(1.6, 6.45, "lstm_cell", fontsize=10, color="gray", style="italic")
    # the memory path, along the top
    _node(ax, 3.5, 5.9, "×")
    _node(ax, 6.25, 5.9, "+")
    _arrow(ax, (0.3, 5.9), (3.5, 5.9), mem, "c_prev", (-1.4, 0.18), 2.2)
    _arrow(ax, (3.5, 5.9), (6.25, 5.9), mem, None, width=2.2)
    _arrow(ax, (6.25, 5.9), (12.0, 5.9), mem, "c_t", (2.3, 0.18), 2.2)
    ax.text(6.7, 6.12, "c_t = f * c_prev + i * g", fontsize=10, color=mem)
    # one product of the inputs with the packed weights: (B, 4H), column blocks i, f, g, o
    _box(ax, 6.35, 1.05, 7.7, 0.75, "gates = x_t @ W_x + h_prev @ W_h + b,  (B, 4H): blocks i | f | g | o",
         "#eeeeee", 9)
    _arrow(ax, (0.3, 1.05), (2.45, 1.05), "black", "h_prev", (-1.4, 0.15))
    _arrow(ax, (1.9, -0.2), (2.5, 0.75), "black", "x_t", (-0.75, -0.35))
    gates = [(3.5, "f", "sigmoid", "forget"), (5.2, "i", "sigmoid", "input"), (7.0, "g", "tanh", "candidate"),
             (8.9, "o", "sigmoid", "output")]
    for x, name, squash, role in gates:
        _arrow(ax, (x, 1.45), (x, 2.3))
        _box(ax, x, 2.75, 1.35, 0.8, f"{name} = {'σ' if squash == 'sigmoid' else 'tanh'}\n{role}", _GATE[squash], 10)
    # f scales the old memory; i * g is written into it
    _arrow(ax, (3.5, 3.15), (3.5, 5.9), "black", "f")
    _node(ax, 6.25, 4.3, "×")
    _arrow(ax, (5.2, 3.15), (6.25, 4.3), "black", "i", (-0.45, 0.1))
    _arrow(ax, (7.0, 3.15), (6.25, 4.3), "black", "g", (0.15, 0.1))
    _arrow(ax, (6.25, 4.3), (6.25, 5.9))
    # h_t = o * tanh(c_t)
    _box(ax, 9.9, 4.9, 1.0, 0.55, "tanh", _GATE["tanh"], 10)
    _arrow(ax, (9.9, 5.9), (9.9, 5.2), mem)
    _node(ax, 9.9, 3.75, "×")
    _arrow(ax, (9.9, 4.6), (9.9, 3.75))
    _arrow(ax, (8.9, 3.15), (9.9, 3.75), "black", "o", (-0.35, 0.1))
    _arrow(ax, (9.9, 3.75), (12.0, 3.75), "black", "h_t = o * tanh(c_t)", (-0.2, 0.18))
    ax.text(6.2, -0.55, "W_x (D, 4H), W_h (H, 4H), b (4H,): one column block of H per gate, in PyTorch's order i, f, g, o",
            ha="center", fontsize=9, color="dimgray")
    ax.set(xlim=(-0.8, 12.6), ylim=(-0.9, 7.0), aspect="equal")
    ax.axis("off")
    return ax
