"""Labelled diagrams for the places where a picture says more than a paragraph.

Four drawings, each a function that returns a matplotlib ``Figure`` (nothing is computed
from data; the shapes written on them are the arguments):

* ``encoder_block_diagram`` the data flow through one encoder block, with the shape of every arrow
* ``split_merge_heads``  how ``split_heads`` cuts the columns into heads and ``merge_heads`` glues them back
* ``mask_types``         causal, key-padding, their combination, and the additive form of a mask
* ``tiling``             which part of the score matrix exists during one step of the online softmax

Used by notebooks 01, 03, 05 and 06: ``from transformer_course import diagrams``.
"""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.patches import FancyArrowPatch, FancyBboxPatch, Rectangle

HEAD_COLOURS = ("tab:blue", "tab:orange", "tab:green", "tab:red", "tab:purple", "tab:brown")


def _box(ax, x, y, w, h, text, colour="white", fontsize=9):
    """A rounded box centred at (x, y) with a label."""
    ax.add_patch(FancyBboxPatch((x - w / 2, y - h / 2), w, h, boxstyle="round,pad=0.02",
                                facecolor=colour, edgecolor="black", lw=1))
    ax.text(x, y, text, ha="center", va="center", fontsize=fontsize)


def _arrow(ax, start, end, label=None, side="right", style="-|>", colour="black", rad=0.0):
    ax.add_patch(FancyArrowPatch(start, end, arrowstyle=style, mutation_scale=12, color=colour, lw=1.2,
                                 connectionstyle=f"arc3,rad={rad}"))
    if label:
        mx, my = (start[0] + end[0]) / 2, (start[1] + end[1]) / 2
        dx = 0.08 if side == "right" else -0.08
        ax.text(mx + dx, my, label, ha="left" if side == "right" else "right", va="center", fontsize=8,
                color="dimgray", family="monospace")


def encoder_block_diagram(n_heads=4, d_model=16, d_ff=64, norm_first=False):
    """Data flow through one encoder block (post-LN by default), every arrow labelled with its shape.

    Shapes are written for a batch of b sequences of n tokens: (b, n, d_model) in and out.
    """
    d_head = d_model // n_heads
    fig, ax = plt.subplots(figsize=(7.5, 8.2))
    x0 = 0.35                                                        # the main column
    rows = [9.2, 7.9, 6.6, 5.3, 4.0, 2.7, 1.4, 0.2]                    # y of the boxes, top to bottom
    _box(ax, x0, rows[0], 0.36, 0.5, "input x", "#eeeeee")
    if norm_first:
        labels = ["LayerNorm 1", "multi-head attention\n(h heads, weights (b, h, n, n))", "+",
                  "LayerNorm 2", "feed-forward\nmax(0, z W1 + b1) W2 + b2", "+"]
    else:
        labels = ["multi-head attention\n(h heads, weights (b, h, n, n))", "+", "LayerNorm 1",
                  "feed-forward\nmax(0, z W1 + b1) W2 + b2", "+", "LayerNorm 2"]
    colours = {"+": "#fff2cc", "LayerNorm 1": "#d9ead3", "LayerNorm 2": "#d9ead3"}
    for y, text in zip(rows[1:7], labels):
        width = 0.12 if text == "+" else 0.5
        _box(ax, x0, y, width, 0.55 if text != "+" else 0.4, text, colours.get(text, "#dae8fc"))
    _box(ax, x0, rows[7], 0.36, 0.5, "output", "#eeeeee")
    shape = f"(b, n, {d_model})"
    for upper, lower in zip(rows[:-1], rows[1:]):
        _arrow(ax, (x0, upper - 0.3), (x0, lower + 0.3), shape)
    # Residual paths: from the block's input (or the middle sum) around each sub-layer into its "+".
    plus = [rows[1 + i] for i, t in enumerate(labels) if t == "+"]
    starts = [rows[0], plus[0]] if norm_first else [rows[0], rows[3]]
    for start, end in zip(starts, plus):
        x_start = x0 - (0.06 if start in plus else 0.2)             # leave from the box's left edge
        _arrow(ax, (x_start, start - 0.1), (x0 - 0.07, end), None, rad=0.35, colour="tab:gray")
        ax.text(x0 - 0.42, (start + end) / 2, "residual\n(identity)", fontsize=8, color="tab:gray",
                ha="center", va="center")
    # What happens inside the two sub-layers, with their internal shapes.
    mha_y = rows[2] if norm_first else rows[1]
    ffn_y = rows[5] if norm_first else rows[4]
    ax.text(0.68, mha_y,
            f"X W_Q, X W_K, X W_V: (b, n, {d_model})\n"
            f"split_heads -> (b, {n_heads}, n, {d_head})\n"
            f"scores, weights: (b, {n_heads}, n, n)\n"
            f"heads: (b, {n_heads}, n, {d_head})\n"
            f"merge_heads -> (b, n, {d_model}), then W_O",
            fontsize=8, va="center", family="monospace",
            bbox=dict(boxstyle="round", facecolor="#f7f7f7", edgecolor="lightgray"))
    ax.text(0.68, ffn_y,
            f"z W1 + b1: (b, n, {d_ff})   (d_ff = {d_ff // d_model} d_model)\n"
            f"ReLU, then W2 + b2: (b, n, {d_model})\n"
            "each token on its own: no mixing over n",
            fontsize=8, va="center", family="monospace",
            bbox=dict(boxstyle="round", facecolor="#f7f7f7", edgecolor="lightgray"))
    ax.set_xlim(-0.15, 1.25)
    ax.set_ylim(-0.3, 9.6)
    ax.axis("off")
    ax.set_title(f"One encoder block ({'pre' if norm_first else 'post'}-LN): "
                 f"d_model = {d_model}, {n_heads} heads, d_ff = {d_ff}")
    fig.tight_layout()
    return fig


def _grid(ax, x, y, values, colours, cell=0.3, label=None):
    """Draw a matrix of cells at (x, y) (top-left); colours[i][j] per cell; optional text per cell."""
    n_rows, n_cols = len(colours), len(colours[0])
    for i in range(n_rows):
        for j in range(n_cols):
            ax.add_patch(Rectangle((x + j * cell, y - (i + 1) * cell), cell, cell, facecolor=colours[i][j],
                                   edgecolor="white", lw=1, alpha=0.85))
            if values is not None:
                ax.text(x + (j + 0.5) * cell, y - (i + 0.5) * cell, values[i][j], ha="center", va="center",
                        fontsize=6.5)
    if label:
        ax.text(x + n_cols * cell / 2, y + 0.15, label, ha="center", va="bottom", fontsize=8.5)
    return x + n_cols * cell, y - n_rows * cell


def split_merge_heads(n=4, n_heads=3, d_head=2):
    """x (n, d_model) -> split_heads -> (n_heads, n, d_head) -> merge_heads -> (n, d_model).

    Cell (t, c) of x is labelled "t,c"; each head's columns share a colour, so one can follow
    where every number goes.
    """
    d_model = n_heads * d_head
    cell = 0.32
    head_of_col = [c // d_head for c in range(d_model)]
    colours = [[HEAD_COLOURS[head_of_col[c] % len(HEAD_COLOURS)] for c in range(d_model)] for _ in range(n)]
    values = [[f"{t},{c}" for c in range(d_model)] for t in range(n)]
    fig, ax = plt.subplots(figsize=(11, 3.9))
    right, bottom = _grid(ax, 0, 0, values, colours, cell, f"x: (n, d_model) = ({n}, {d_model})")
    ax.text(-0.1, -n * cell / 2, "token t", rotation=90, ha="right", va="center", fontsize=8)
    # The split: head i is the column block i*d_head .. (i+1)*d_head, moved in front of the positions.
    x_heads = right + 2.0
    _arrow(ax, (right + 0.1, -n * cell / 2), (x_heads - 0.1, -n * cell / 2))
    # The arrows name the two functions and their shapes only: which NumPy steps get there is notebook 03's
    # Exercise 1 (the instructor's guide checks that no picture above it says).
    ax.text((right + x_heads) / 2, -n * cell / 2 + 0.1, "split_heads\n(n, d_model)\n-> (h, n, d_head)",
            ha="center", va="bottom", fontsize=7.5, family="monospace")
    gap = 0.35
    for i in range(n_heads):
        cols = range(i * d_head, (i + 1) * d_head)
        y = -i * (0.0) + 0.0
        x = x_heads + i * (d_head * cell + gap)
        _grid(ax, x, y, [[values[t][c] for c in cols] for t in range(n)],
              [[colours[t][c] for c in cols] for t in range(n)], cell, f"head {i}")
    heads_right = x_heads + n_heads * (d_head * cell + gap) - gap
    ax.text((x_heads + heads_right) / 2, -n * cell - 0.35, f"(h, n, d_head) = ({n_heads}, {n}, {d_head}): "
            "each head attends on its own", ha="center", fontsize=8)
    x_merged = heads_right + 2.0
    _arrow(ax, (heads_right + 0.1, -n * cell / 2), (x_merged - 0.1, -n * cell / 2))
    ax.text((heads_right + x_merged) / 2, -n * cell / 2 + 0.12, "merge_heads\n(h, n, d_head)\n-> (n, d_model)",
            ha="center", va="bottom", fontsize=7.5, family="monospace")
    _grid(ax, x_merged, 0, values, colours, cell, f"merged: (n, d_model), head 0 first")
    ax.set_xlim(-0.3, x_merged + d_model * cell + 0.2)
    ax.set_ylim(-n * cell - 0.6, 0.9)
    ax.set_aspect("equal")
    ax.axis("off")
    ax.set_title("Splitting and merging heads: columns move, numbers do not change (label = token, column)")
    fig.tight_layout()
    return fig


def mask_types(n=6, n_padding=2):
    """Causal, key-padding (the first ``n_padding`` tokens are padding: a left-padded sequence), both
    combined, and the additive form of the combination; True / 0 = may attend, False / -inf = blocked.
    Combined, the padding queries see no key at all: fully masked rows, marked in red."""
    causal = np.tril(np.ones((n, n), dtype=bool))                    # key j <= query i
    real = np.arange(n) >= n_padding                                 # (n,) padding at the start
    padding = np.broadcast_to(real[None, :], (n, n))                 # blocks padded KEYS
    both = causal & padding
    fig, axes = plt.subplots(1, 4, figsize=(13, 3.6))
    panels = [(causal, "causal: key j <= query i"), (padding, f"key padding: first {n_padding} keys"),
              (both, "causal & padding (combine with &)")]
    for ax, (m, title) in zip(axes, panels):
        ax.imshow(m, cmap="Greens", vmin=-0.3, vmax=1.2)
        for i in range(n):
            for j in range(n):
                ax.text(j, i, "T" if m[i, j] else "F", ha="center", va="center", fontsize=8,
                        color="white" if m[i, j] else "gray")
        ax.set_title(title, fontsize=9)
        ax.set_xlabel("key j")
        ax.set_ylabel("query i")
        ax.set_xticks(range(n))
        ax.set_yticks(range(n))
    additive = np.where(both, 0.0, -np.inf)
    ax = axes[3]
    ax.imshow(both, cmap="Greens", vmin=-0.3, vmax=1.2)
    for i in range(n):
        for j in range(n):
            ax.text(j, i, "0" if additive[i, j] == 0 else "-inf", ha="center", va="center", fontsize=7,
                    color="white" if both[i, j] else "black")
    for a in axes[2:]:
        for i in np.flatnonzero(~both.any(axis=1)):                  # no key left: softmax must give zeros
            a.add_patch(Rectangle((-0.5, i - 0.5), n, 1, fill=False, edgecolor="tab:red", lw=2))
    ax.set_title("the same, additive: scores + mask", fontsize=9)
    ax.set_xlabel("key j")
    ax.set_xticks(range(n))
    ax.set_yticks(range(n))
    fig.suptitle("Masks: True (0) = may attend, False (-inf) = blocked; rows are queries, columns keys; "
                 "red: fully masked rows")
    fig.tight_layout()
    return fig


def tiling(n_q=6, n_k=14, block_size=4, current=2):
    """The (n_q, n_k) score matrix of the online softmax, cut into key blocks; during step ``current``
    (0-based) only that block's (n_q, block) scores exist, next to the running state m, l, o. The update rule is
    not drawn: notebook 06 asks students to derive it."""
    n_blocks = -(-n_k // block_size)
    cell = 0.35
    fig, ax = plt.subplots(figsize=(11, 3.8))
    for b in range(n_blocks):
        cols = range(b * block_size, min((b + 1) * block_size, n_k))
        state = "done" if b < current else "now" if b == current else "later"
        face = {"done": "#dddddd", "now": "tab:orange", "later": "white"}[state]
        for j in cols:
            for i in range(n_q):
                ax.add_patch(Rectangle((j * cell, -(i + 1) * cell), cell, cell, facecolor=face,
                                       edgecolor="lightgray", lw=0.8, alpha=0.8))
        x_left, width = cols[0] * cell, len(cols) * cell
        ax.add_patch(Rectangle((x_left, -n_q * cell), width, n_q * cell, fill=False, edgecolor="black", lw=1.4,
                               ls="-" if state != "later" else "--"))
        text = {"done": "folded into\nm, l, o; freed", "now": f"exists now:\n(n_q, {len(cols)})",
                "later": "not yet\ncomputed"}[state]
        ax.text(x_left + width / 2, -n_q * cell - 0.3, f"block {b}\n{text}", ha="center", va="top", fontsize=7.5)
    ax.text(n_k * cell / 2, 0.15, f"scores Q K^T / sqrt(d_k): ({n_q}, {n_k}) -- never stored whole", ha="center",
            va="bottom", fontsize=9)
    ax.text(-0.15, -n_q * cell / 2, "query", rotation=90, ha="right", va="center", fontsize=8)
    x_state = n_k * cell + 0.9
    lines = ["running state, per query:",
             "m   (n_q, 1)    max of the scores seen",
             "l   (n_q, 1)    sum of exp(s - m) seen",
             "o   (n_q, d_v)  sum of exp(s - m) v seen",
             "",
             "each step: the new block's scores",
             "update m, l, o (Exercise 1: derive how);",
             "after the last block, the output",
             "comes from o and l alone"]
    ax.text(x_state, 0.1, "\n".join(lines), ha="left", va="top", fontsize=8, family="monospace",
            bbox=dict(boxstyle="round", facecolor="#f7f7f7", edgecolor="lightgray"))
    _arrow(ax, ((current + 1) * block_size * cell + 0.05, -n_q * cell / 2),
           (x_state - 0.1, -n_q * cell / 2 - 0.3), colour="tab:orange", rad=-0.2)
    ax.set_xlim(-0.4, x_state + 4.6)
    ax.set_ylim(-n_q * cell - 1.2, 0.6)
    ax.set_aspect("equal")
    ax.axis("off")
    ax.set_title(f"Online softmax, step {current}: memory is one block plus the state, not n_q x n_k", fontsize=10)
    fig.tight_layout()
    return fig
