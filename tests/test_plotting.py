"""Plotting helpers: every figure titled, labelled, with a colour bar; annotations; bad shapes."""

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

from transformer_course.plotting import attention_heatmap, line_with_theory, multihead_grid  # noqa: E402


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


def uniform(n_q, n_k):
    return np.full((n_q, n_k), 1.0 / n_k)


# -- attention_heatmap ---------------------------------------------------------------
def test_heatmap_has_title_labels_and_colorbar():
    im = attention_heatmap(uniform(3, 4))
    ax = im.axes
    assert ax.get_title() == "Attention weights"
    assert ax.get_xlabel() == "key (attended to)"
    assert ax.get_ylabel() == "query (attending)"
    assert im.colorbar is not None
    assert im.colorbar.ax.get_ylabel() == "attention weight"
    assert len(ax.figure.axes) == 2                                  # the heatmap and its colour bar
    np.testing.assert_array_equal(im.get_array(), uniform(3, 4))
    assert im.get_clim() == (0.0, 1.0)


def test_heatmap_custom_title_labels_and_tokens():
    im = attention_heatmap(uniform(2, 3), ["a", "b"], ["x", "y", "z"], title="Mine", xlabel="K", ylabel="Q")
    ax = im.axes
    assert (ax.get_title(), ax.get_xlabel(), ax.get_ylabel()) == ("Mine", "K", "Q")
    assert [t.get_text() for t in ax.get_xticklabels()] == ["x", "y", "z"]
    assert [t.get_text() for t in ax.get_yticklabels()] == ["a", "b"]


def test_heatmap_annotates_small_matrices():
    w = np.array([[0.9, 0.1], [0.25, 0.75]])
    ax = attention_heatmap(w).axes
    texts = {(t.get_position(), t.get_text()) for t in ax.texts}
    assert texts == {((0, 0), "0.90"), ((1, 0), "0.10"), ((0, 1), "0.25"), ((1, 1), "0.75")}
    colours = {t.get_text(): t.get_color() for t in ax.texts}
    assert colours["0.90"] == "white" and colours["0.10"] == "black"   # readable on dark and light cells


def test_heatmap_annotation_threshold_is_8():
    assert len(attention_heatmap(uniform(8, 8)).axes.texts) == 64
    assert len(attention_heatmap(uniform(9, 9)).axes.texts) == 0
    assert len(attention_heatmap(uniform(9, 9), annotate=True).axes.texts) == 81
    assert len(attention_heatmap(uniform(2, 2), annotate=False).axes.texts) == 0


def test_heatmap_draws_into_a_given_axes_without_colorbar():
    fig, ax = plt.subplots()
    im = attention_heatmap(uniform(2, 2), ax=ax, colorbar=False)
    assert im.axes is ax
    assert im.colorbar is None
    assert len(fig.axes) == 1


@pytest.mark.parametrize("shape", [(4,), (2, 3, 4), ()])
def test_heatmap_refuses_wrong_ndim(shape):
    with pytest.raises(ValueError, match=r"weights must be a 2-D \(n_q, n_k\) matrix, got shape " + str(shape).replace("(", r"\(").replace(")", r"\)")):
        attention_heatmap(np.zeros(shape))


# -- multihead_grid ----------------------------------------------------------------------
def test_grid_one_panel_per_head_with_titles_and_colorbar():
    w = np.stack([uniform(3, 3)] * 5)
    fig = multihead_grid(w, ["a", "b", "c"])
    assert fig.get_suptitle() == "Attention weights per head"
    panels = [ax for ax in fig.axes if ax.get_images()]
    assert [ax.get_title() for ax in panels] == [f"head {i}" for i in range(5)]
    # 5 heads in a 2 x 4 grid: 3 empty panels switched off, plus one shared colour bar.
    assert len(fig.axes) == 8 + 1
    assert sum(not ax.axison for ax in fig.axes) == 3
    colorbars = [ax for ax in fig.axes if ax.get_ylabel() == "attention weight" and not ax.get_images()]
    assert len(colorbars) == 1
    assert all(len(ax.texts) == 0 for ax in panels)                 # no per-cell numbers in the grid
    assert [t.get_text() for t in panels[0].get_xticklabels()] == ["a", "b", "c"]


def test_grid_labels_only_on_outer_panels():
    fig = multihead_grid(np.stack([uniform(2, 2)] * 4), ncols=2, title="T")
    panels = [ax for ax in fig.axes if ax.get_images()]
    assert fig.get_suptitle() == "T"
    assert [ax.get_xlabel() for ax in panels] == ["", "", "key", "key"]
    assert [ax.get_ylabel() for ax in panels] == ["query", "", "query", ""]


@pytest.mark.parametrize("shape", [(3, 3), (2, 2, 3, 3)])
def test_grid_refuses_wrong_ndim(shape):
    with pytest.raises(ValueError, match=r"weights must be \(n_heads, n_q, n_k\), got shape"):
        multihead_grid(np.zeros(shape))


# -- line_with_theory ------------------------------------------------------------------------
def test_line_with_theory_labels_legend_and_scales():
    x = np.array([1, 2, 4, 8])
    ax = line_with_theory(x, x ** 2 + 0.1, x ** 2, title="cost", xlabel="n", ylabel="time",
                          logx=True, logy=True)
    assert (ax.get_title(), ax.get_xlabel(), ax.get_ylabel()) == ("cost", "n", "time")
    assert ax.get_xscale() == "log" and ax.get_yscale() == "log"
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["measured", "theory"]
    lines = ax.get_lines()
    assert len(lines) == 2
    np.testing.assert_array_equal(lines[1].get_ydata(), x ** 2)
    assert lines[1].get_linestyle() == "--"


def test_line_with_theory_linear_by_default():
    ax = line_with_theory([1, 2], [1, 2], [1, 2])
    assert ax.get_xscale() == "linear" and ax.get_yscale() == "linear"
