"""The course's diagrams draw, are titled, and write the shapes they are given."""

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402

from transformer_course import diagrams  # noqa: E402


def _texts(fig):
    return " ".join(t.get_text() for ax in fig.axes for t in ax.texts + [ax.title]) + " " + (
        fig._suptitle.get_text() if fig._suptitle else "")


@pytest.mark.parametrize("norm_first", [False, True])
def test_encoder_block_labels_every_shape(norm_first):
    fig = diagrams.encoder_block_diagram(n_heads=3, d_model=12, d_ff=40, norm_first=norm_first)
    text = _texts(fig)
    assert "(b, n, 12)" in text and "(b, 3, n, 4)" in text and "(b, n, 40)" in text
    assert ("pre-LN" if norm_first else "post-LN") in text
    assert text.count("residual") == 2
    plt.close(fig)


def test_split_merge_heads_shows_every_cell_three_times():
    fig = diagrams.split_merge_heads(n=3, n_heads=2, d_head=2)
    labels = [t.get_text() for t in fig.axes[0].texts]
    # every (token, column) label appears in x, in its head, and in the merged matrix
    assert all(labels.count(f"{t},{c}") == 3 for t in range(3) for c in range(4))
    plt.close(fig)


def test_mask_types_marks_the_fully_masked_rows():
    fig = diagrams.mask_types(n=5, n_padding=2)
    red_boxes = [p for ax in fig.axes[2:] for p in ax.patches]
    assert len(red_boxes) == 2 * 2          # two padding queries, outlined in two panels
    plt.close(fig)


def test_tiling_names_each_block():
    fig = diagrams.tiling(n_q=4, n_k=10, block_size=4, current=1)
    text = _texts(fig)
    assert "block 2" in text and "(n_q, 2)" not in text and "exists now:\n(n_q, 4)" in text
    assert "(4, 10)" in text
    plt.close(fig)
