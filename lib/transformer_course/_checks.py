"""Argument checks shared by every public function.

Each check raises ``TypeError`` (wrong kind of object) or ``ValueError`` (right
kind, wrong shape or value) with a message that names the argument, says what
was expected and shows what came.
"""

from __future__ import annotations

import numbers

import numpy as np


def describe(x) -> str:
    """A short description of an argument for error messages."""
    if isinstance(x, np.ndarray):
        return f"array of shape {x.shape} and dtype {x.dtype}"
    return f"{type(x).__name__} {x!r}"[:120]


def as_float_array(x, name: str, *, min_ndim: int = 1) -> np.ndarray:
    """Return ``x`` as a floating-point array with at least ``min_ndim`` axes.

    Integer and boolean inputs are promoted to float64; float16/32/64 keep
    their dtype. Strings, objects and complex numbers are refused.
    """
    if isinstance(x, (str, bytes)) or x is None:
        raise TypeError(f"{name} must be a real-valued array, got {describe(x)}")
    arr = np.asarray(x)
    kind = arr.dtype.kind          # f: floating, i/u: integer, b: bool; the rest is refused
    if kind not in "fiub":
        raise TypeError(
            f"{name} must be a real-valued numeric array, got {describe(x)}"
        )
    if kind != "f":
        arr = arr.astype(np.float64)
    if arr.ndim < min_ndim:
        raise ValueError(
            f"{name} must have at least {min_ndim} dimension(s) "
            f"(shape {'(..., n, d)' if min_ndim == 2 else '(..., d)'}), "
            f"got shape {arr.shape}"
        )
    return arr


def check_finite(arr: np.ndarray, name: str, *, allow_neg_inf: bool = False) -> None:
    """Refuse NaN (and +inf; and -inf unless ``allow_neg_inf``)."""
    if np.isnan(arr).any():
        raise ValueError(f"{name} contains NaN; expected finite values")
    if np.isposinf(arr).any():
        raise ValueError(f"{name} contains +inf; expected finite values")
    if not allow_neg_inf and np.isneginf(arr).any():
        raise ValueError(f"{name} contains -inf; expected finite values")


def positive_int(value, name: str) -> int:
    """Return ``value`` as an int, requiring a positive integer (bools refused)."""
    if type(value) is int and value > 0:                 # the common case, quickly
        return value
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be a positive integer, got {describe(value)}")
    if value <= 0:
        raise ValueError(f"{name} must be a positive integer, got {value}")
    return int(value)


def check_rng(rng, name: str = "rng") -> np.random.Generator:
    """Require an explicit ``numpy.random.Generator`` (no hidden global state)."""
    if not isinstance(rng, np.random.Generator):
        raise TypeError(
            f"{name} must be a numpy.random.Generator "
            f"(e.g. np.random.default_rng(0)), got {describe(rng)}"
        )
    return rng


def check_axis(axis, ndim: int, name: str = "axis") -> int:
    """Return ``axis`` normalised to ``0 <= axis < ndim``."""
    if isinstance(axis, bool) or not isinstance(axis, numbers.Integral):
        raise TypeError(f"{name} must be an integer, got {describe(axis)}")
    if not -ndim <= axis < ndim:
        raise ValueError(
            f"{name}={axis} is out of range for an array with {ndim} dimension(s)"
        )
    return int(axis) % ndim


def check_vector(arr, name: str, length: int) -> np.ndarray:
    """A 1-D float parameter of the given length (gamma, beta, a bias)."""
    out = as_float_array(arr, name, min_ndim=1)
    if out.shape != (length,):
        raise ValueError(f"{name} must have shape ({length},), got shape {out.shape}")
    return out


def check_matrix(arr, name: str, shape: tuple[int, int]) -> np.ndarray:
    """A 2-D float parameter of the given shape (a weight matrix)."""
    out = as_float_array(arr, name, min_ndim=2)
    if out.shape != shape:
        raise ValueError(f"{name} must have shape {shape}, got shape {out.shape}")
    return out
