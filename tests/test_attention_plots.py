"""utils.attention_plots: bars for one query, the explorer's static fallback and its input check."""
import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

from utils import attention_plots  # noqa: E402

TOKENS = ["The", "animal", "was", "tired"]


def test_query_bars_show_one_bar_per_key_with_token_labels():
    ax = attention_plots.plot_query_bars(torch.tensor([0.1, 0.6, 0.2, 0.1]), TOKENS, "it", title="head 1")
    heights = [round(p.get_height(), 3) for p in ax.patches]
    assert heights == [0.1, 0.6, 0.2, 0.1]
    assert [t.get_text() for t in ax.get_xticklabels()] == TOKENS
    assert "'it'" in ax.get_ylabel() and ax.get_title() == "head 1"
    plt.close("all")


def test_explorer_falls_back_to_one_heatmap_per_head(monkeypatch):
    monkeypatch.setenv("COURSE_FAST", "1")           # no widgets: static heatmaps
    monkeypatch.setattr(plt, "show", lambda: None)
    weights = torch.softmax(torch.randn(3, 4, 4, generator=torch.Generator().manual_seed(0)), dim=-1)
    plt.close("all")
    attention_plots.attention_explorer(weights, TOKENS, head_names=["a", "b", "c"])
    fig = plt.gcf()
    titled = [ax.get_title() for ax in fig.axes if ax.get_title()]
    assert titled == ["a", "b", "c"]
    assert [t.get_text() for t in fig.axes[0].get_yticklabels()] == TOKENS
    plt.close("all")


def test_explorer_with_a_single_head(monkeypatch):
    monkeypatch.setenv("COURSE_FAST", "1")
    monkeypatch.setattr(plt, "show", lambda: None)
    plt.close("all")
    attention_plots.attention_explorer(torch.full((1, 4, 4), 0.25), TOKENS)
    assert [ax.get_title() for ax in plt.gcf().axes if ax.get_title()] == ["head 0"]
    plt.close("all")


def test_explorer_rejects_weights_that_do_not_match_the_tokens():
    with pytest.raises(ValueError, match=r"\(num_heads, 4, 4\)"):
        attention_plots.attention_explorer(torch.rand(2, 4, 5), TOKENS)
