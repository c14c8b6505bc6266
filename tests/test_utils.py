"""utils: setup, fast mode, self-check messages, plotting and the widget fallback."""
import importlib
import pkgutil

import pytest
import torch

import utils
from utils import checks, plotting, runtime, widgets


@pytest.mark.parametrize(
    "env, expected",
    [({}, False), ({"COURSE_FAST": "1"}, True), ({"COURSE_FAST": "0"}, False), ({"NBGRADER_EXECUTION": "autograde"}, True)],
)
def test_fast_mode_follows_nbgrader_and_course_fast(monkeypatch, env, expected):
    monkeypatch.delenv("COURSE_FAST", raising=False)
    monkeypatch.delenv("NBGRADER_EXECUTION", raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    assert runtime.fast_mode() is expected


def test_setup_seeds_every_generator_and_reports(capsys):
    device = utils.setup(seed=3)
    first = (torch.rand(3), __import__("random").random(), __import__("numpy").random.rand())
    utils.setup(seed=3)
    second = (torch.rand(3), __import__("random").random(), __import__("numpy").random.rand())
    assert torch.equal(first[0], second[0]) and first[1:] == second[1:]
    assert isinstance(device, torch.device)
    assert "seed 3" in capsys.readouterr().out


def test_setup_silences_warnings_that_would_reach_stderr(capfd):
    import warnings

    utils.setup(seed=0, verbose=False)
    warnings.warn("noisy library", UserWarning)
    assert capfd.readouterr().err == ""


def test_device_can_be_forced(monkeypatch):
    monkeypatch.setenv("COURSE_DEVICE", "cpu")
    assert runtime.get_device() == torch.device("cpu")


def test_time_call_warms_up_once_then_returns_the_median(monkeypatch):
    ticks = iter([0.0, 5.0, 10.0, 11.0, 20.0, 23.0])  # three timed calls: 5 s, 1 s, 3 s
    monkeypatch.setattr("time.perf_counter", lambda: next(ticks))
    calls = []
    assert runtime.time_call(lambda: calls.append(1), repeats=3) == 3.0
    assert len(calls) == 4  # the warm-up, then the three timed calls


def test_the_package_exports_setup_and_every_submodule_lists_its_public_names():
    assert utils.__all__ == ["setup"] and utils.setup is runtime.setup
    for info in pkgutil.iter_modules(utils.__path__):
        module = importlib.import_module(f"utils.{info.name}")
        assert hasattr(module, "__all__"), f"utils.{info.name} has no __all__"
        defined = {n for n, v in vars(module).items() if getattr(v, "__module__", module.__name__) == module.__name__
                   and callable(v) and not n.startswith("_")}
        assert defined <= set(module.__all__), f"utils.{info.name}: public names missing from __all__: {defined - set(module.__all__)}"
        assert all(hasattr(module, n) for n in module.__all__), info.name


def test_check_close_passes_within_tolerance_and_names_the_worst_entry():
    checks.check_close(torch.tensor([1.0, 2.0]), torch.tensor([1.0, 2.0 + 1e-9]), "x")
    with pytest.raises(AssertionError) as info:
        checks.check_close(torch.tensor([[1.0, 2.0], [3.0, 4.0]]), torch.tensor([[1.0, 2.0], [3.0, 5.0]]), "logits", hint="look")
    message = str(info.value)
    assert "logits" in message and "(1, 1)" in message and "Hint: look" in message and "1 of 4" in message


def test_check_close_reports_shape_type_and_nan():
    with pytest.raises(AssertionError, match=r"shape \(3,\), expected \(2,\)"):
        checks.check_close(torch.zeros(3), torch.zeros(2), "v")
    with pytest.raises(AssertionError, match="expected a Tensor"):
        checks.check_shape([0.0, 1.0], (2,), "v")
    with pytest.raises(AssertionError, match="NaN"):
        checks.check_close(torch.tensor([float("nan")]), torch.tensor([0.0]), "v")
    checks.check_close(0.5, 0.5, "a float")


def test_check_equal_and_check_true_messages():
    checks.check_equal([1, 2], [1, 2], "ids")
    with pytest.raises(AssertionError, match=r"ids: got \[2, 1\], expected \[1, 2\]\.\nHint: order"):
        checks.check_equal([2, 1], [1, 2], "ids", hint="order")
    with pytest.raises(AssertionError, match="rows must sum to 1"):
        checks.check_true(False, "rows must sum to 1")


def test_pca_2d_finds_the_direction_of_largest_variance():
    gen = torch.Generator().manual_seed(0)
    line = torch.linspace(-5, 5, 50)[:, None] * torch.tensor([[1.0, 2.0, 2.0]]) / 3
    points = line + 0.01 * torch.randn(50, 3, generator=gen)
    projected = plotting.pca_2d(points)
    assert projected.shape == (50, 2)
    assert projected[:, 0].var() > 1000 * projected[:, 1].var()
    assert torch.allclose(projected.mean(0), torch.zeros(2), atol=1e-5)


def test_plots_draw_on_their_axes():
    import matplotlib.pyplot as plt

    ax = plotting.plot_lines([1, 2, 3], {"a": [1, 2, 3], "b": [3, 2, 1]}, "x", "y", title="t", logy=True)
    assert len(ax.lines) == 2 and ax.get_yscale() == "log"
    ax = plotting.plot_lines(range(1, 5), {"stopped early": [4, 3], "ran on": [4, 3, 2, 1]}, "epoch", "loss")
    assert [list(line.get_xdata()) for line in ax.lines] == [[1, 2], [1, 2, 3, 4]]
    ax = plotting.plot_heatmap(torch.rand(2, 3), ["r1", "r2"], ["a", "b", "c"], title="h")
    assert [t.get_text() for t in ax.get_xticklabels()] == ["a", "b", "c"]
    ax = plotting.plot_embeddings_2d(torch.rand(4, 5), ["w", "x", "y", "z"])
    assert [t.get_text() for t in ax.texts] == ["w", "x", "y", "z"]
    plt.close("all")


def test_step_explorer_falls_back_to_static_views(monkeypatch, capsys):
    monkeypatch.setenv("COURSE_FAST", "1")
    seen = []
    widgets.step_explorer(seen.append, max_step=5, description="merges")
    assert seen == [0, 5]
    assert "merges = 5" in capsys.readouterr().out


def test_utils_defines_no_graded_name():
    """utils must not reveal an exercise's answer: none of its public names is the
    grade_id of a solution cell in any solution notebook."""
    import importlib
    import pkgutil

    import nbformat
    from conftest import REPO_ROOT

    graded = set()
    for path in (REPO_ROOT / "solutions").glob("*/*.ipynb"):
        for cell in nbformat.read(path, as_version=4).cells:
            meta = cell.get("metadata", {}).get("nbgrader", {})
            if meta.get("solution") and cell.cell_type == "code":
                graded.add(meta["grade_id"])
    assert graded, "no solution cells found"
    defined = set(dir(utils))
    for module in pkgutil.iter_modules(utils.__path__):
        defined |= set(dir(importlib.import_module(f"utils.{module.name}")))
    assert not graded & defined, f"utils defines graded names: {sorted(graded & defined)}"
