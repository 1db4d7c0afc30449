"""Element-wise non-linearities used by the feed-forward sub-layers: ReLU, GELU, SiLU, with their derivatives,
and the error function ``erf`` that exact GELU is made of."""

from __future__ import annotations

import numpy as np

from ._checks import as_float_array, check_array, check_same_shape

# -- erf, in NumPy -----------------------------------------------------------------------------------
# The rational approximations of the Cephes library's ndtr.c (S. L. Moshier), which SciPy's erf also
# evaluates: erf(x) = x T(x^2) / U(x^2) for |x| <= 1, and 1 - exp(-x^2) P(x) / Q(x) for 1 < |x| < 6;
# beyond 6, erfc(6) = 2e-17 is below half an ulp of 1, so erf is +-1 in float64. U and Q are monic (their
# leading 1 is left out). tests/test_exercise_rule.py: within 1 ulp of scipy.special.erf on 440,000 points.
_ERF_T = (9.60497373987051638749e0, 9.00260197203842689217e1, 2.23200534594684319226e3,
          7.00332514112805075473e3, 5.55923013010394962768e4)
_ERF_U = (3.35617141647503099647e1, 5.21357949780152679795e2, 4.59432382970980127987e3,
          2.26290000613890934246e4, 4.92673942608635921086e4)
_ERFC_P = (2.46196981473530512524e-10, 5.64189564831068821977e-1, 7.46321056442269912687e0,
           4.86371970985681366614e1, 1.96520832956077098242e2, 5.26445194995477358631e2,
           9.34528527171957607540e2, 1.02755188689515710272e3, 5.57535335369399327526e2)
_ERFC_Q = (1.32281951154744992508e1, 8.67072140885989742329e1, 3.54937778887819891062e2,
           9.75708501743205489753e2, 1.82390916687909736289e3, 2.24633760818710981792e3,
           1.65666309194161350182e3, 5.57535340817727675546e2)


_CHUNK = 1 << 14                 # numbers per pass: the work arrays stay in the cache (3x faster than whole arrays)


def _polynomial(x: np.ndarray, coefficients, monic: bool = False) -> np.ndarray:
    """The polynomial with ``coefficients`` (highest power first; a leading 1 left out if ``monic``) at ``x``."""
    y = x + coefficients[0] if monic else np.full_like(x, coefficients[0])
    for c in coefficients[1:]:
        y = y * x + c
    return y


def erf(x, out=None) -> np.ndarray:
    """The error function ``erf(x) = 2/sqrt(pi) * integral_0^x exp(-t^2) dt``, element-wise, in NumPy.

    Evaluated in float64 and returned in ``x``'s floating dtype (float64 for integers). ``out``: an array to
    write the result into, as a ufunc's ``out=``. erf(+-inf) = +-1, erf(nan) = nan, erf(-0.0) = -0.0.
    Within 1 ulp of ``scipy.special.erf``, at about its speed: both forms are evaluated on every number, a
    chunk at a time (the chunk's arrays stay in the cache), and the right one kept.
    """
    x = np.asarray(x)
    dtype = x.dtype if x.dtype.kind == "f" else np.dtype(np.float64)
    result = np.empty(x.shape, dtype)
    src, dst = x.reshape(-1), result.reshape(-1)
    with np.errstate(invalid="ignore", over="ignore", divide="ignore", under="ignore"):
        for start in range(0, src.size, _CHUNK):
            xc = src[start:start + _CHUNK].astype(np.float64)                  # (chunk,)
            z, ax = xc * xc, np.abs(xc)
            inner = xc * _polynomial(z, _ERF_T) / _polynomial(z, _ERF_U, monic=True)           # |x| <= 1
            tail = np.exp(-z) * _polynomial(np.minimum(ax, 6.0), _ERFC_P) \
                / _polynomial(np.minimum(ax, 6.0), _ERFC_Q, monic=True)                        # erfc(|x|)
            outer = np.where(ax >= 6.0, np.copysign(1.0, xc), np.copysign(1.0 - tail, xc))  # beyond 6: +-1
            dst[start:start + _CHUNK] = np.where(ax <= 1.0, inner, outer)
    if out is not None:
        out[...] = result
        return out
    return result[()]                                    # a 0-d input gives a scalar, as a ufunc does


def relu(x) -> np.ndarray:
    """``max(0, x)`` element-wise; same shape and dtype as ``x``."""
    x = check_array(x, "x", min_ndim=0)
    return np.maximum(x, x.dtype.type(0))


def gelu(x) -> np.ndarray:
    """Exact GELU, ``x * Phi(x) = 0.5 x (1 + erf(x / sqrt 2))`` (BERT's form, PyTorch's default).

    The tanh approximation differs by up to ~1e-3; this is the erf form.
    Same shape and dtype as ``x``.
    """
    x = check_array(x, "x", min_ndim=0)
    z = x.astype(np.promote_types(x.dtype, np.float32))       # float16: computed in float32
    return (0.5 * z * (1 + erf(z / 2 ** 0.5))).astype(x.dtype, copy=False)


def gelu_backward(grad_output, x) -> np.ndarray:
    """Gradient through the exact ``gelu(x) = x Phi(x)`` (forward: :func:`transformer_course.activations.gelu`).

        d gelu / dx = Phi(x) + x phi(x),   Phi = standard normal CDF, phi = its density.

    Args / returns: ``grad_output`` and ``x`` of one shape; ``dL/dx`` of that shape.
    """
    x = as_float_array(x, "x", min_ndim=0)
    dy = as_float_array(grad_output, "grad_output", min_ndim=0)
    check_same_shape(dy, "grad_output", x.shape, "x")
    cdf = 0.5 * (1.0 + erf(x / np.sqrt(2.0)))
    pdf = np.exp(-0.5 * x * x) / np.sqrt(2.0 * np.pi)
    return dy * (cdf + x * pdf)


# -- SiLU (swish), the gate of SwiGLU (notebook 09) ------------------------------------------------

def silu(x) -> np.ndarray:
    """``x * sigmoid(x) = x / (1 + exp(-x))`` element-wise (also called swish), in ``x``'s dtype.

    Stable for any ``x``: where ``exp(-x)`` overflows (``x < -88`` in float32, ``< -709`` in float64) the
    result is ``x / inf = -0``, silu's limit, with the overflow warning silenced.
    """
    x = as_float_array(x, "x", min_ndim=0)
    with np.errstate(over="ignore"):                # exp(-x) = inf for x << 0 gives x / inf = -0
        return x / (1 + np.exp(-x))


def silu_backward(grad_output, x) -> np.ndarray:
    """Gradient through ``silu(x) = x sigmoid(x)`` (forward: :func:`silu`).

        silu'(x) = sigmoid(x) (1 + x (1 - sigmoid(x)))
    """
    x = as_float_array(x, "x", min_ndim=0)
    dy = as_float_array(grad_output, "grad_output", min_ndim=0)
    if dy.shape != x.shape:
        raise ValueError(f"grad_output must have the shape of x {x.shape}, got shape {dy.shape}")
    with np.errstate(over="ignore"):
        s = 1 / (1 + np.exp(-x))
    return dy * (s * (1 + x * (1 - s)))
