"""Backward passes: the gradient of a scalar loss L through each forward function (theory.md §11).

Every function here takes ``grad_output`` = dL/d(output of the forward) and returns dL/d(inputs),
computed from quantities the forward had (its inputs, or its outputs where cheaper). This module is
the index of the backward passes of notebook 10; where a concept's module exists the backward sits
beside its forward there and is imported here:

* :func:`softmax_backward`        -- :func:`transformer_course.softmax.softmax` (in ``softmax.py``)
* :func:`attention_backward`      -- :func:`transformer_course.attention.scaled_dot_product_attention`
  (in ``attention.py``)
* :func:`layer_norm_backward`     -- :func:`transformer_course.normalization.layer_norm`
* :func:`gelu_backward`           -- :func:`transformer_course.activations.gelu` (in ``activations.py``)
* :func:`feed_forward_backward`   -- :class:`transformer_course.feedforward.PositionwiseFeedForward` (GELU)
* :func:`embedding_backward`      -- the lookup ``E[token_ids]``
* :func:`tied_head_backward`      -- the tied output head ``logits = h E^T`` (notebook 11)
* :func:`cross_entropy_backward`  -- :func:`transformer_course.loss.cross_entropy`

No Jacobian is ever formed:
each backward is a vector-Jacobian product written with the same array operations as its forward.
Shapes follow the forwards: ``(..., n, d)``; gradients have the shape of what they differentiate.
Arguments are checked for shape and type; their values are not (a NaN in a gradient propagates, as
in PyTorch's autograd), so the backward passes cost no extra sweep over the data.
"""

from __future__ import annotations

import numpy as np

from ._checks import as_float_array, check_same_shape as _same_shape, check_vector, describe
from .activations import gelu, gelu_backward  # noqa: F401 (gelu_backward: exported from here too)
from .attention import attention_backward  # noqa: F401 (beside its forward; exported from here too)
from .loss import check_targets
from .softmax import softmax, softmax_backward  # noqa: F401


# -- layer normalisation ---------------------------------------------------------------------------

def layer_norm_backward(grad_output, x, gamma, eps=1e-5):
    """Gradient through ``y = gamma * (x - mu) / sqrt(var + eps) + beta`` over the last axis
    (forward: :func:`transformer_course.normalization.layer_norm`).

    With ``xhat = (x - mu) * r``, ``r = 1 / sqrt(var + eps)`` and ``g = dL/dxhat = grad_output * gamma``:

        dL/dx = r * (g - mean(g) - xhat * mean(g * xhat))

    The two mean terms are the gradient flowing through ``mu`` and through ``var``.

    Args:
        grad_output: ``dL/dy`` ``(..., d)``.
        x: the forward's input ``(..., d)``.
        gamma: the scale ``(d,)`` the forward used, or None (ones; passed explicitly).
        eps: the forward's eps.

    Returns:
        ``(dx, dgamma, dbeta)``: ``(..., d)``, ``(d,)``, ``(d,)`` (summed over every leading axis).
    """
    x = as_float_array(x, "x")
    dy = as_float_array(grad_output, "grad_output")
    _same_shape(dy, "grad_output", x.shape, "x")
    d = x.shape[-1]
    mu = x.mean(axis=-1, keepdims=True)
    centred = x - mu
    r = 1.0 / np.sqrt(np.mean(centred * centred, axis=-1, keepdims=True) + eps)   # (..., 1)
    xhat = centred * r                                                             # (..., d)
    g = dy if gamma is None else dy * check_vector(gamma, "gamma", d)
    dx = r * (g - g.mean(axis=-1, keepdims=True) - xhat * np.mean(g * xhat, axis=-1, keepdims=True))
    rows = dy.reshape(-1, d)                                                       # (rows, d)
    dgamma = np.sum(rows * xhat.reshape(-1, d), axis=0)                           # (d,)
    dbeta = np.sum(rows, axis=0)                                                   # (d,)
    return dx, dgamma, dbeta


# -- the feed-forward sub-layer (GELU and its derivative: activations.py) -----------------------------------------------------------

def feed_forward_backward(grad_output, x, W_1, b_1, W_2, b_2):
    """Gradient through ``FFN(x) = gelu(x W_1 + b_1) W_2 + b_2`` applied to every token
    (forward: :class:`transformer_course.feedforward.PositionwiseFeedForward` with ``activation="gelu"``).

        u = x W_1 + b_1,  h = gelu(u)
        dW_2 = h^T dy,  db_2 = sum dy,  dh = dy W_2^T,  du = gelu'(u) dh,
        dW_1 = x^T du,  db_1 = sum du,  dx = du W_1^T

    Args:
        grad_output: ``dL/dFFN(x)`` ``(..., d_model)``.
        x: the forward's input ``(..., d_model)``.
        W_1 ``(d_model, d_ff)``, b_1 ``(d_ff,)``, W_2 ``(d_ff, d_model)``, b_2 ``(d_model,)``: its weights.

    Returns:
        ``(dx, dW_1, db_1, dW_2, db_2)``, each of the shape of what it differentiates.
    """
    x = as_float_array(x, "x")
    dy = as_float_array(grad_output, "grad_output")
    _same_shape(dy, "grad_output", x.shape, "x")
    d_model = x.shape[-1]
    W_1 = as_float_array(W_1, "W_1", min_ndim=2)
    W_2 = as_float_array(W_2, "W_2", min_ndim=2)
    if W_1.shape[0] != d_model or W_2.shape != W_1.shape[::-1]:
        raise ValueError(f"W_1 must be (d_model={d_model}, d_ff) and W_2 (d_ff, d_model), "
                         f"got {describe(W_1)} and {describe(W_2)}")
    d_ff = W_1.shape[1]
    b_1 = check_vector(b_1, "b_1", d_ff)
    check_vector(b_2, "b_2", d_model)                     # b_2 does not enter the gradient, only its shape
    rows = x.reshape(-1, d_model)                         # (tokens, d_model)
    d_rows = dy.reshape(-1, d_model)                      # (tokens, d_model)
    u = rows @ W_1 + b_1                                  # (tokens, d_ff)
    h = gelu(u)                                           # (tokens, d_ff)
    dW_2 = h.T @ d_rows                                   # (d_ff, d_model)
    db_2 = d_rows.sum(axis=0)                             # (d_model,)
    du = gelu_backward(d_rows @ W_2.T, u)                 # (tokens, d_ff)
    dW_1 = rows.T @ du                                    # (d_model, d_ff)
    db_1 = du.sum(axis=0)                                 # (d_ff,)
    dx = (du @ W_1.T).reshape(x.shape)                    # (..., d_model)
    return dx, dW_1, db_1, dW_2, db_2


# -- embeddings ------------------------------------------------------------------------------------

def embedding_backward(grad_output, token_ids, vocab_size: int) -> np.ndarray:
    """Gradient through the lookup ``X = E[token_ids]`` with respect to the table ``E`` ``(vocab_size, d)``.

    Row ``v`` of ``dE`` is the sum of ``dL/dX`` over every position that holds token ``v``
    (``np.add.at``: a plain ``dE[ids] += g`` would keep only one of repeated tokens).

    Args:
        grad_output: ``dL/dX`` ``(..., n, d)``.
        token_ids: integers ``(..., n)`` in ``0..vocab_size-1``.
        vocab_size: rows of ``E``.

    Returns:
        ``dE`` ``(vocab_size, d)``; rows of tokens that do not occur are 0.
    """
    ids = np.asarray(token_ids)
    g = as_float_array(grad_output, "grad_output")
    if not np.issubdtype(ids.dtype, np.integer):
        raise TypeError(f"token_ids must be integers, got {describe(token_ids)}")
    _same_shape(g, "grad_output", ids.shape + g.shape[-1:], "token_ids + (d,)")
    if ids.size and (ids.min() < 0 or ids.max() >= vocab_size):
        raise ValueError(f"token_ids must lie in 0..{vocab_size - 1}, got {ids.min()}..{ids.max()}")
    dE = np.zeros((vocab_size, g.shape[-1]), dtype=g.dtype)
    np.add.at(dE, ids.reshape(-1), g.reshape(-1, g.shape[-1]))   # (tokens,) rows added into (V, d)
    return dE


def tied_head_backward(grad_logits, h, embedding):
    """Gradient through the tied output head ``logits = h E^T``.

    Returns ``(dh, dE_head)``: ``dh = dlogits E`` ``(..., d)`` and ``dE_head = dlogits^T h`` ``(V, d)``.
    The embedding table is also the input lookup ``x = E[ids]``, so the whole gradient of ``E`` is
    ``dE_head + embedding_backward(dx, ids, V)`` (the two uses add).
    """
    g = as_float_array(grad_logits, "grad_logits", min_ndim=1)
    h = as_float_array(h, "h", min_ndim=1)
    E = as_float_array(embedding, "embedding", min_ndim=2)
    if g.shape[:-1] != h.shape[:-1] or g.shape[-1] != E.shape[0] or h.shape[-1] != E.shape[1]:
        raise ValueError(f"expected grad_logits (..., V={E.shape[0]}) and h (..., d={E.shape[1]}) with the same "
                         f"leading axes, got {describe(g)} and {describe(h)}")
    dh = g @ E
    dE = g.reshape(-1, E.shape[0]).T @ h.reshape(-1, E.shape[1])
    return dh, dE


# -- cross-entropy ---------------------------------------------------------------------------------

def cross_entropy_backward(logits, targets) -> np.ndarray:
    """Gradient of the mean cross-entropy (forward: :func:`transformer_course.loss.cross_entropy`).

        L = mean over positions of -log softmax(z)[y]   =>   dL/dz = (softmax(z) - onehot(y)) / N

    Args:
        logits: ``(..., V)``; targets: integers ``(...)`` in ``0..V-1``; N = ``targets.size``.

    Returns:
        ``dL/dlogits`` ``(..., V)``.
    """
    z = as_float_array(logits, "logits")
    y = check_targets(targets, z.shape)
    p = softmax(z, axis=-1)                               # (..., V); a new array, changed below
    np.put_along_axis(p, y[..., None], np.take_along_axis(p, y[..., None], axis=-1) - 1.0, axis=-1)
    return p / y.size
