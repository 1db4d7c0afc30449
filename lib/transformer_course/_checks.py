"""Argument checks shared by every public function: each function makes one call per argument.

Each check raises ``TypeError`` (wrong kind of object) or ``ValueError`` (right
kind, wrong shape or value) with a message that names the caller's argument, says
what was expected and shows what came.

The rules, the same for every public function of the package:

* **NaN and infinities are refused** (``ValueError`` naming the argument). The one
  exception is ``-inf`` where it means "blocked": the scores given to ``softmax``
  and an additive attention mask.
* **An axis that is summed or averaged over must not be empty**: the softmax axis,
  the keys ``n_k``, the feature widths ``d_k`` and ``d``. An empty axis that is not
  reduced over (a batch of 0 sentences, 0 queries) is fine and gives an empty result.
* Integers and booleans are promoted to float64; float16/32/64 keep their dtype.
  Parameter dtypes (``dtype=`` of a layer) must be floating. A ragged list (rows of
  different lengths) is refused, naming the argument.
* **Overflow: the result is right whenever it is representable.** A reduction whose
  intermediate can overflow although the answer cannot (the sum of squares of
  ``layer_norm``, ``rms_norm`` and ``l2_normalize``: float32 rows near 1e20, float64 near
  1e155; the sum of ``mean_pool``) is computed as usual and, for the rows where the
  intermediate came out non-finite, recomputed from the row divided by its largest
  ``|x|`` (:func:`row_max_abs`); ordinary rows keep their bits. Where the answer itself is
  not representable or would be silently wrong, the call is refused with the numbers:
  attention scores ``Q K^T / sqrt(d_k)`` that overflow (they would read as "blocked" or
  NaN), a temperature so small that ``logits / T`` overflows.
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
    try:
        arr = np.asarray(x)
    except ValueError as exc:                       # NumPy: "... inhomogeneous shape after 1 dimensions ..."
        raise ValueError(f"{name} must be a rectangular array of numbers (every row the same length), "
                         f"got a ragged {type(x).__name__}: {str(exc).split('. ', 1)[-1]}") from None
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


def check_array(x, name: str, *, min_ndim: int = 1, allow_neg_inf: bool = False,
                nonempty: tuple[int, ...] = ()) -> np.ndarray:
    """:func:`as_float_array`, then :func:`check_finite`, then: the axes ``nonempty`` have length >= 1."""
    arr = as_float_array(x, name, min_ndim=min_ndim)
    check_finite(arr, name, allow_neg_inf=allow_neg_inf)
    for axis in nonempty:
        if arr.shape[axis] == 0:
            raise ValueError(f"{name} must not be empty along axis {axis} (it is summed over), "
                             f"got shape {arr.shape}")
    return arr


def check_width(x, name: str, width: int, *, min_ndim: int = 1, width_name: str = "d_model") -> np.ndarray:
    """A finite float array ``(..., width)`` (token vectors of a layer of that width)."""
    arr = check_array(x, name, min_ndim=min_ndim)
    if arr.shape[-1] != width:
        raise ValueError(f"{name} must have last dimension {width_name}={width}, got shape {arr.shape}")
    return arr


def row_max_abs(x: np.ndarray) -> np.ndarray:
    """``max |x|`` over the last axis ``(..., 1)``, 1 for a row of zeros: the divisor that brings a row
    to ``[-1, 1]`` before a sum of squares (the overflow rule above)."""
    s = np.max(np.abs(x), axis=-1, keepdims=True, initial=0)
    return np.where(s > 0, s, 1).astype(x.dtype, copy=False)


def check_finite(arr: np.ndarray, name: str, *, allow_neg_inf: bool = False) -> None:
    """Refuse NaN (and +inf; and -inf unless ``allow_neg_inf``).

    The common case, nothing to refuse, costs one or two reductions: NaN propagates through ``max`` and
    ``min``, and an infinity shows in them; only an array that fails them is searched for what to name."""
    if arr.size and np.isfinite(arr.max()) and (allow_neg_inf or np.isfinite(arr.min())):
        return
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


def positive_float(value, name: str) -> float:
    """A finite real number > 0 (Python or NumPy scalar; bools refused), as a float."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a positive number, got {describe(value)}")
    if not (np.isfinite(value) and value > 0):
        raise ValueError(f"{name} must be a positive number, got {describe(value)}")
    return float(value)


def float_dtype(dtype, name: str = "dtype", allowed: tuple = ()) -> np.dtype:
    """A floating NumPy dtype (float16/32/64); integer, bool and complex are refused, and so is
    a name NumPy does not know (``"bfloat16"``). ``allowed``: the only dtypes accepted, if given."""
    try:
        out = np.dtype(dtype)
    except TypeError:
        raise TypeError(f"{name} must be a floating dtype such as np.float32, got {describe(dtype)}") from None
    if out.kind != "f":
        raise TypeError(f"{name} must be a floating dtype such as np.float32, got {out}")
    if allowed and out not in [np.dtype(a) for a in allowed]:
        names = " or ".join(f"np.{np.dtype(a).name}" for a in allowed)
        raise ValueError(f"{name} must be {names}, got {out}")
    return out


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


def check_same_shape(arr: np.ndarray, name: str, shape, what: str) -> None:
    """Refuse ``arr`` unless its shape is ``shape`` (a gradient has the shape of what it differentiates)."""
    if arr.shape != tuple(shape):
        raise ValueError(f"{name} must have the shape of {what} {tuple(shape)}, got shape {arr.shape}")


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


# ---------------------------------------------------------------------------------------------
# Attention inputs (shared by the reference and the fast path in transformer_course_fast)
# ---------------------------------------------------------------------------------------------
def check_qk(Q, K, *, finite: bool = True):
    """Q ``(..., n_q, d_k)`` and K ``(..., n_k, d_k)``: one batch shape, one ``d_k >= 1``."""
    check = check_array if finite else as_float_array
    Q = check(Q, "Q", min_ndim=2)
    K = check(K, "K", min_ndim=2)
    if Q.shape[-1] != K.shape[-1]:
        raise ValueError(f"Q and K must have the same last dimension d_k, got Q {Q.shape} and K {K.shape}")
    if Q.shape[-1] == 0:
        raise ValueError(f"Q and K must have d_k >= 1 features (the scores divide by sqrt(d_k)), "
                         f"got Q {Q.shape} and K {K.shape}")
    if Q.shape[:-2] != K.shape[:-2]:
        raise ValueError(f"Q and K must have the same leading (batch) dimensions, got Q {Q.shape} and K {K.shape}")
    return Q, K


def check_qkv(Q, K, V, *, finite: bool = True):
    """Q ``(..., n_q, d_k)``, K ``(..., n_k, d_k)``, V ``(..., n_k, d_v)``, one batch shape, ``n_k >= 1``."""
    Q, K = check_qk(Q, K, finite=finite)
    V = (check_array if finite else as_float_array)(V, "V", min_ndim=2)
    if K.shape[-2] != V.shape[-2]:
        raise ValueError("K and V must have the same number of positions n_k (axis -2), "
                         f"got K {K.shape} and V {V.shape}")
    if K.shape[:-2] != V.shape[:-2]:
        raise ValueError(f"K and V must have the same leading (batch) dimensions, got K {K.shape} and V {V.shape}")
    if K.shape[-2] == 0:
        raise ValueError(f"K and V must hold at least one key (n_k >= 1): each query's weights sum over "
                         f"the keys, got K {K.shape}")
    return Q, K, V


def check_attention_inputs(query, key, value, d_model: int, *, finite: bool = True):
    """Multi-head attention's inputs: ``query (..., n_q, d_model)``; ``key``, ``value``
    ``(..., n_k, d_model)`` defaulting to ``query`` (self-attention; the same array is
    returned, checked once), one batch shape, ``n_k >= 1``."""
    check = check_array if finite else as_float_array
    query = check(query, "query", min_ndim=2)
    key = query if key is None else check(key, "key", min_ndim=2)
    value = key if value is None else check(value, "value", min_ndim=2)
    for name, arr in (("query", query), ("key", key), ("value", value)):
        if arr.shape[-1] != d_model:
            raise ValueError(f"{name} must have last dimension d_model={d_model}, got shape {arr.shape}")
    if key.shape != value.shape:
        raise ValueError(f"key and value must have the same shape, got key {key.shape} and value {value.shape}")
    if query.shape[:-2] != key.shape[:-2]:
        raise ValueError(f"query and key must have the same leading (batch) dimensions, "
                         f"got query {query.shape} and key {key.shape}")
    if key.shape[-2] == 0:
        raise ValueError(f"key must hold at least one position (n_k >= 1), got key {key.shape}")
    return query, key, value


def scores_may_overflow(Q: np.ndarray, K: np.ndarray) -> bool:
    """Whether ``Q K^T`` can overflow: every partial sum of a product is at most
    ``d_k max|Q| max|K|``. Four reductions of Q and K, so that the ``(n_q, n_k)`` scores need a
    check only when this bound comes within a factor 2 of the dtype's largest number."""
    if Q.size == 0 or K.size == 0:
        return False
    bound = float(max(Q.max(), -Q.min())) * float(max(K.max(), -K.min())) * Q.shape[-1]
    return not bound < float(np.finfo(np.result_type(Q, K)).max) / 2


def check_scores_finite(scores: np.ndarray, Q: np.ndarray, K: np.ndarray, names: str = "Q and K") -> None:
    """Refuse scores ``Q K^T / sqrt(d_k)`` that overflowed: +inf or NaN would be refused later as
    "x contains ...", and -inf would silently read as a blocked key."""
    if np.isfinite(scores).all():
        return
    q_name, k_name = names.split(" and ")
    check_finite(Q, q_name)                         # a NaN or inf that came in is named as such
    check_finite(K, k_name)
    bad = int(np.count_nonzero(~np.isfinite(scores)))
    raise ValueError(
        f"the scores {q_name} {k_name}^T / sqrt(d_k) overflow {scores.dtype}: {bad} of {scores.size} are not finite "
        f"(max |{q_name}| = {float(np.abs(Q).max()):.3g}, max |{k_name}| = {float(np.abs(K).max()):.3g}, "
        f"d_k = {Q.shape[-1]}); expected scores within +-{float(np.finfo(scores.dtype).max):.3g}: scale {names} "
        f"down, or pass float64")


def check_mask(mask, score_shape) -> np.ndarray:
    """A boolean (True = may attend) or additive float mask that broadcasts to
    ``score_shape`` = ``(..., n_q, n_k)`` without enlarging it, as an array.
    (Finiteness of a float mask is checked by the caller: -inf allowed, NaN and +inf not.)"""
    mask = np.asarray(mask)
    if mask.dtype == object or not (mask.dtype == bool or np.issubdtype(mask.dtype, np.floating)):
        raise TypeError("mask must be boolean (True = may attend) or floating (added to the "
                        f"scores, -inf = blocked), got {describe(mask)}")
    try:
        broadcast = np.broadcast_shapes(mask.shape, score_shape)
    except ValueError:
        broadcast = None
    if broadcast != tuple(score_shape):
        raise ValueError(f"mask of shape {mask.shape} does not broadcast to the score shape "
                         f"{tuple(score_shape)} (..., n_q, n_k)")
    return mask


def check_scores(x, axis):
    """Softmax scores: finite or -inf, the softmax axis (normalised) non-empty."""
    x = check_array(x, "x", allow_neg_inf=True)
    axis = check_axis(axis, x.ndim)
    if x.shape[axis] == 0:
        raise ValueError(f"x must have at least one entry along axis {axis} (the softmax sums over it), "
                         f"got shape {x.shape}")
    return x, axis


def check_distributions(weights, axis):
    """Rows of probabilities along ``axis``: non-negative, each summing to 1 (or all 0)."""
    w = check_array(weights, "weights")
    axis = check_axis(axis, w.ndim)
    if (w < 0).any():
        raise ValueError(f"weights must be non-negative (probabilities), got a minimum of {w.min():.3g}")
    total = w.sum(axis=axis)
    # A sum of n rounded probabilities is off by at most n eps of the dtype; 8 n eps leaves room.
    tol = 8 * max(w.shape[axis], 1) * np.finfo(w.dtype).eps
    bad = (np.abs(total - 1) > tol) & (total != 0)
    if bad.any():
        raise ValueError(f"weights must sum to 1 along axis {axis} (or be all 0), "
                         f"got a row summing to {total[bad].flat[0]:.6g}")
    return w, axis
