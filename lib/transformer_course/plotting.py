"""Plotting helpers shared by the notebooks: every figure titled, labelled and with a colour bar."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np


def attention_heatmap(weights, query_labels=None, key_labels=None, *, ax=None, title="Attention weights",
                      annotate=None, vmin=0.0, vmax=1.0, cmap="Blues", colorbar=True,
                      xlabel="key (attended to)", ylabel="query (attending)",
                      colorbar_label="attention weight"):
    """Draw a ``(n_q, n_k)`` weight matrix with token labels.

    Values are written into the cells when ``annotate`` is True, or by default
    when the matrix is at most 8 x 8. Returns the matplotlib image.
    """
    w = np.asarray(weights, dtype=float)
    if w.ndim != 2:
        raise ValueError(f"weights must be a 2-D (n_q, n_k) matrix, got shape {w.shape}")
    if ax is None:
        _, ax = plt.subplots(figsize=(1.0 + 0.75 * w.shape[1], 0.6 + 0.7 * w.shape[0]))
    im = ax.imshow(w, cmap=cmap, vmin=vmin, vmax=vmax)
    n_q, n_k = w.shape
    ax.set_xticks(range(n_k), key_labels if key_labels is not None else range(n_k),
                  rotation=45 if key_labels is not None else 0, ha="right" if key_labels is not None else "center")
    ax.set_yticks(range(n_q), query_labels if query_labels is not None else range(n_q))
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    if annotate is None:
        annotate = max(n_q, n_k) <= 8
    if annotate:
        mid = vmin + 0.55 * (vmax - vmin)
        for i in range(n_q):
            for j in range(n_k):
                ax.text(j, i, f"{w[i, j]:.2f}", ha="center", va="center", fontsize=8,
                        color="white" if w[i, j] > mid else "black")
    if colorbar:
        ax.figure.colorbar(im, ax=ax, label=colorbar_label, fraction=0.046, pad=0.04)
    return im


def multihead_grid(weights, tokens=None, *, title="Attention weights per head", vmax=1.0, ncols=None):
    """One heatmap per head for weights ``(n_heads, n_q, n_k)``; returns the figure."""
    w = np.asarray(weights, dtype=float)
    if w.ndim != 3:
        raise ValueError(f"weights must be (n_heads, n_q, n_k), got shape {w.shape}")
    h = w.shape[0]
    ncols = ncols or min(h, 4)
    nrows = int(np.ceil(h / ncols))
    fig, axes = plt.subplots(nrows, ncols, figsize=(3.6 * ncols + 1.0, 3.4 * nrows), squeeze=False,
                             layout="constrained")
    im = None
    for idx, ax in enumerate(axes.flat):
        if idx >= h:
            ax.axis("off")
            continue
        im = attention_heatmap(w[idx], tokens, tokens, ax=ax, title=f"head {idx}", vmax=vmax,
                               colorbar=False, annotate=False,
                               xlabel="key" if idx // ncols == nrows - 1 else "",
                               ylabel="query" if idx % ncols == 0 else "")
    fig.colorbar(im, ax=axes, label="attention weight")
    fig.suptitle(title)
    return fig


def line_with_theory(x, measured, theory, *, ax=None, title="", xlabel="", ylabel="",
                     measured_label="measured", theory_label="theory", logx=False, logy=False):
    """Measured points joined by a line, with the theoretical curve dashed; returns the axes."""
    if ax is None:
        _, ax = plt.subplots(figsize=(5.5, 3.8))
    ax.plot(x, measured, "o-", label=measured_label)
    ax.plot(x, theory, "--", color="gray", label=theory_label)
    if logx:
        ax.set_xscale("log", base=2)
    if logy:
        ax.set_yscale("log")
    ax.set_title(title)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.grid(True, alpha=0.3)
    ax.legend()
    return ax
