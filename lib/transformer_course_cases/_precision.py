"""What a correct implementation may differ by: the tolerances of the hidden cases of notebooks 08-11.

Both are measured against the output's scale (``Case.floor = 1``: an entry's error over
``max(|a| + |e|, max|e|)``), because round-off in a sum, a product of matrices or a rotation is
bounded relative to the sizes of the terms, not to an entry that happens to cancel to ~0.

FLOAT64_TOL = 1e-10 -- float64 inputs, float64 arithmetic. A correct implementation differs from
the reference only by round-off: each operation is correctly rounded (unit round-off u = 2**-53 =
1.1e-16) and every output here comes from at most a few hundred of them on terms no larger than the
output's scale times ~100 (the largest factors: RoPE angles at positions up to 8192, where an angle
computed as ``p * base**(-2i/d)`` or ``p * exp(-2i/d * log(base))`` carries ~1e-12 absolutely;
``1/sqrt(var + eps)`` of a row of variance ~1e-4, a factor ~100; logits offset by ~1000 in a
log-softmax, an absolute ~1e-13). So 1e-10 leaves a factor of >= 100 over the largest of those,
and still sits far below float32's unit round-off 2**-24 = 6e-8: a function that computes a float64
task in float32 anywhere (a table, an accumulation, a cast) errs by ~1e-8..1e-7 of the scale and fails.
Measured (the published solutions, every alternative of tests/mutants and the three independent students
of tests/fixtures, seeds 2000..2019, 2000..2099 for 10 and 11): at most 3.8e-13 (RoPE at positions up to
8192, frequencies as exp(-2i/d ln base)), 2.8e-13 (rope_backward, the same), 1.7e-13 (a one-pass variance in
layer_norm_backward), 5.7e-14 (cross-entropy of logits offset by ~1000 through logsumexp); most below 1e-15.

FLOAT32_TOL = 1e-4 -- float32 inputs, where the docstring promises a float32 result. A float32
computation rounds at u = 2**-24 = 6e-8 per operation; an output of these cases goes through at most
~100 roundings along its longest chain (inner dimensions <= 48, two or three layers of products, a
softmax, a layer norm) on terms of at most ~10 times the output's scale, so 100 * 10 * 6e-8 = 6e-5
bounds it for any evaluation order and for intermediate float64 (which only lowers the error). The
reference is the float64 computation from the same float32 inputs. Measured as above: at most 3.5e-7.
These cases exist for the dtype and for float32's own hazards (exp overflowing at 88.7); the values
themselves are held to FLOAT64_TOL by the float64 cases.
"""

from __future__ import annotations

import numpy as np

FLOAT64_TOL = 1e-10
FLOAT32_TOL = 1e-4
# float64's exp overflows above log(finfo.max) = 709.78 and gives 0 below -745: scores or logits
# offset beyond these break a softmax that does not subtract its row maximum first.
OVERFLOW_OFFSET = (750.0, 1000.0)


def as_dtype(tree, dtype):
    """``tree`` (arrays, numbers, None, and dicts/lists/tuples of them) with every float array cast to ``dtype``."""
    if isinstance(tree, dict):
        return {k: as_dtype(v, dtype) for k, v in tree.items()}
    if isinstance(tree, (list, tuple)):
        return type(tree)(as_dtype(v, dtype) for v in tree)
    if isinstance(tree, np.ndarray) and tree.dtype.kind == "f":
        return tree.astype(dtype)
    return tree


def float64_reference(reference):
    """A reference for float32 inputs: the same reference computed in float64 from them."""
    def computed_in_float64(**inputs):
        return reference(**as_dtype(inputs, np.float64))
    return computed_in_float64


def row_offsets(rng, shape) -> np.ndarray:
    """``shape + (1,)`` offsets of either sign with magnitude in OVERFLOW_OFFSET, one per row."""
    size = rng.uniform(*OVERFLOW_OFFSET, size=shape + (1,))
    return size * rng.choice([-1.0, 1.0], size=shape + (1,))
