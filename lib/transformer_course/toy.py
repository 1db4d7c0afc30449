"""A toy vocabulary whose embedding dimensions have hand-assigned meanings.

Four "meaning slots": [0] animal, [1] action, [2] food, [3] pronoun. Real
models learn their embeddings; these are chosen so attention weights are
readable by eye.
"""

from __future__ import annotations

import numpy as np

SLOTS = ("animal", "action", "food", "pronoun")

EMBEDDINGS = {
    "the": np.array([0.0, 0.0, 0.0, 0.0]),
    "cat": np.array([1.0, 0.0, 0.0, 0.0]),
    "dog": np.array([0.9, 0.0, 0.0, 0.1]),
    "ate": np.array([0.0, 1.0, 0.0, 0.0]),
    "sat": np.array([0.0, 0.8, 0.0, 0.0]),
    "food": np.array([0.0, 0.0, 1.0, 0.0]),
    "fish": np.array([0.5, 0.0, 0.8, 0.0]),
    "it": np.array([0.0, 0.0, 0.0, 1.0]),
}


def embed(tokens) -> np.ndarray:
    """``list[str]`` of n known words -> ``(n, 4)`` matrix, one row per token."""
    if isinstance(tokens, str):
        raise TypeError(f"tokens must be a list of words, got the string {tokens!r}; try tokens.split()")
    unknown = [t for t in tokens if t not in EMBEDDINGS]
    if unknown:
        raise ValueError(f"unknown token(s) {unknown}; the toy vocabulary is {sorted(EMBEDDINGS)}")
    if not tokens:
        raise ValueError("tokens must not be empty")
    return np.stack([EMBEDDINGS[t] for t in tokens])
