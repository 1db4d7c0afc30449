"""Hidden-test cases of notebook 06 (failures: online-softmax attention, mask leak)."""

from __future__ import annotations

import numpy as np

from transformer_course.attention import scaled_dot_product_attention
from transformer_course.softmax import softmax
from . import CASES, Case


# ---------------------------------------------------------------------------
# online_softmax_attention(Q, K, V, block_size): tiled over key blocks.
# n_k is never a multiple of block_size (a dropped or mishandled last block
# shows); there are several blocks (a running max that is not rescaled shows);
# d_k > 1 and d_k != d_v, n_q != n_k (a missing or wrong 1/sqrt(d_k) shows).
# ---------------------------------------------------------------------------
def _block_and_length(rng, min_blocks, max_blocks):
    block = int(rng.integers(3, 9))
    n_k = block * int(rng.integers(min_blocks, max_blocks + 1)) + int(rng.integers(1, block))
    return block, n_k


def _widths(rng):
    d_k, d_v = rng.choice(np.arange(5, 17), size=2, replace=False)
    return int(d_k), int(d_v)


def _online_inputs(rng):
    block, n_k = _block_and_length(rng, 2, 5)
    n_q = int(rng.choice([m for m in range(3, 11) if m != n_k]))
    d_k, d_v = _widths(rng)
    lead = (int(rng.integers(2, 4)), int(rng.integers(2, 4)))          # (batch, heads)
    inputs = {
        "Q": rng.normal(0, 1.5, lead + (n_q, d_k)),
        "K": rng.normal(0, 1.5, lead + (n_k, d_k)),
        "V": rng.normal(0, 1, lead + (n_k, d_v)),
        "block_size": block,
    }
    # A saturated row whose maximum sits in the last block: query 0 points along the large first
    # coordinate of the last key (score gap >= ~15: weight > 0.999 there).
    inputs["K"][..., -1, 0] = 12.0
    inputs["Q"][..., 0, :] = 0.0
    inputs["Q"][..., 0, 0] = 2.0 * np.sqrt(d_k)
    return inputs


def _online_2d_inputs(rng):
    # Unbatched self-attention (n_q = n_k); exactly two blocks, the second one partial.
    block, n_k = _block_and_length(rng, 1, 1)
    n_q = n_k
    d_k, d_v = _widths(rng)
    return {
        "Q": rng.normal(0, 2, (n_q, d_k)),
        "K": rng.normal(0, 2, (n_k, d_k)),
        "V": rng.normal(0, 1, (n_k, d_v)),
        "block_size": block,
    }


def _online_large_inputs(rng):
    # Scores of about a thousand (exp overflows without a running max), spread over ~10, so the
    # rows are saturated; in the first sequence the keys' scores grow along the sequence (the max
    # moves from block to block), in the second they fall (the max is in the first block and the
    # rescaling factor is always 1).
    block, n_k = _block_and_length(rng, 3, 5)
    n_q = int(rng.choice([m for m in range(3, 9) if m != n_k]))
    d_k, d_v = _widths(rng)
    b = int(rng.integers(2, 4))
    Q = rng.normal(0, 1, (b, n_q, d_k))
    K = rng.normal(0, 1, (b, n_k, d_k))
    Q[..., 0] = 60 + rng.normal(0, 1, (b, n_q))                    # scores about 3600 / sqrt(d_k) > 709
    K[..., 0] = 60 + np.linspace(0, 0.5, n_k) + rng.normal(0, 0.05, (b, n_k))
    K[1, :, 0] = K[1, ::-1, 0]                                      # the second sequence: falling scores
    return {"Q": Q, "K": K, "V": rng.normal(0, 1, (b, n_k, d_v)), "block_size": block}


# log(float64 max) = 709.78: exp of a larger difference overflows.
EXP_RANGE = float(np.log(np.finfo(np.float64).max))


def _online_falling_inputs(rng):
    # Block maxima that fall by more than the exponent range: in every sequence the keys of one block
    # score ~1000-1400, the next block's score ~0, so exp(earlier max - later max) = exp(> 900) overflows.
    # An implementation that keeps the running maximum rescales by exp(0) = 1 and adds exp(s - m) = 0
    # there; one that re-expresses the old sums relative to each block's own maximum gets inf / inf.
    # Sequence 0: high block first, then low blocks; sequence 1: low, high, low..., so the fall comes after
    # a rise. Within the high block the scores spread over a few units (the weights are mixed, not one-hot).
    block, n_k = _block_and_length(rng, 2, 4)
    n_q = int(rng.choice([m for m in range(3, 9) if m != n_k]))
    d_k, d_v = _widths(rng)
    b = 2
    Q = rng.normal(0, 1, (b, n_q, d_k))
    K = rng.normal(0, 1, (b, n_k, d_k))
    Q[..., 0] = 40 + rng.uniform(0, 5, (b, n_q))                       # scores ~ 40 * 100 / sqrt(d_k) >= 1000
    K[..., 0] = rng.normal(0, 0.02, (b, n_k))                          # the low blocks: scores ~ N(0, 1)
    high = [slice(0, block), slice(block, 2 * block)]                  # sequence 0: block 0; sequence 1: block 1
    for seq, keys in enumerate(high):
        K[seq, keys, 0] += 100.0
    return {"Q": Q, "K": K, "V": rng.normal(0, 1, (b, n_k, d_v)), "block_size": block}


def _online_ref(Q, K, V, block_size):
    return scaled_dot_product_attention(Q, K, V)[0]


CASES["failures.online_attention"] = Case(
    _online_inputs, _online_ref, ("output",),
    description="(batch, heads, n, d), several key blocks, n_k not a multiple of block_size")
CASES["failures.online_attention_2d"] = Case(
    _online_2d_inputs, _online_ref, ("output",),
    description="unbatched self-attention (n_q = n_k), one full block and one partial block")
def _online_memory_inputs(rng):
    # Self-attention long enough that one (n, n) float64 matrix (>= 18 MB) dwarfs the bound of
    # the hidden test (a few (n, block) blocks: < 7 MB), small blocks that do not divide n.
    block = int(rng.integers(16, 65))
    n = 1536 + int(rng.integers(0, 1024))
    n += n % block == 0
    d_k, d_v = _widths(rng)
    return {"Q": rng.normal(0, 1, (n, d_k)), "K": rng.normal(0, 1, (n, d_k)),
            "V": rng.normal(0, 1, (n, d_v)), "block_size": block}


def tiled_memory_bound(n_q, n_k, d_k, d_v, block_size, itemsize=8):
    """Bytes a tiled attention may hold at once: a few (n_q, block) blocks of scores and their
    exponentials, the accumulator and running statistics (n_q, d_v + 2) and their rescaled copies,
    copies of K and V, and 64 KB for NumPy's own overheads. One (n_q, n_k) matrix is far more when
    block_size << n_k. The hidden test of notebook 06 writes the same formula inline (the sandbox
    has no cases modules)."""
    return itemsize * (6 * n_q * block_size + 4 * n_q * (d_v + 2) + 2 * n_k * (d_k + d_v)) + 2**16


def _online_memory_ref(Q, K, V, block_size):
    return scaled_dot_product_attention(Q, K, V)[0], 1.0        # 1.0: the peak stayed within the bound


CASES["failures.online_attention_memory"] = Case(
    _online_memory_inputs, _online_memory_ref, ("output", "within_memory_bound"),
    description="self-attention, n = 1536..2560, blocks of 16..64: output, and the peak memory of the call "
                "(tracemalloc) below a few (n, block_size) blocks")
CASES["failures.online_attention_large"] = Case(
    _online_large_inputs, _online_ref, ("output",),
    description="scores of about a thousand, rising along the sequence (the max moves) and falling")
CASES["failures.online_attention_falling"] = Case(
    _online_falling_inputs, _online_ref, ("output",),
    description="block maxima that fall by more than the exponent range (~1000 -> ~0): a rescale relative to "
                "each block's own maximum overflows, the running maximum's does not")


# ---------------------------------------------------------------------------
# leaked_weight(scores, allowed, mask_value): softmax weight on blocked keys
# when they are penalised additively by mask_value.
# ---------------------------------------------------------------------------
def _leak_inputs(rng, mask_value=None):
    b = int(rng.integers(2, 4))
    n_q, n_k = (int(v) for v in rng.choice(np.arange(3, 9), size=2, replace=False))
    scores = rng.normal(0, 2, (b, n_q, n_k))
    allowed = rng.random((b, n_q, n_k)) < 0.5
    cols = rng.permuted(np.tile(np.arange(n_k), (b * n_q, 1)), axis=1)[:, :2].reshape(b, n_q, 2)
    np.put_along_axis(allowed, cols[..., :1], True, axis=-1)     # every query: an allowed key
    np.put_along_axis(allowed, cols[..., 1:], False, axis=-1)    # ... and a blocked one
    allowed[0, -1, :] = False                                    # one query sees nothing: leak 1 (or 0 for -inf)
    top = cols[0, 0, 0]
    scores[0, 0, top] = scores[0, 0].max() + 12.0                # a saturated row: > 0.999 on one allowed key
    if mask_value is None:
        mask_value = -float(rng.uniform(1.0, 8.0))               # weak: the leak is visible
    else:
        scores, allowed = scores[0], allowed[0]                  # (n_q, n_k): the docstring's `...` may be empty
    return {"scores": scores, "allowed": allowed, "mask_value": mask_value}


def _leak_ref(scores, allowed, mask_value):
    weights = softmax(np.where(allowed, scores, scores + mask_value), axis=-1)
    return np.where(allowed, 0.0, weights).sum(axis=-1)


CASES["failures.leaked_weight"] = Case(
    _leak_inputs, _leak_ref, ("leak",),
    description="batched scores, random allowed keys, a query with none (leak 1), a saturated row, "
                "a finite penalty between -8 and -1")
CASES["failures.leaked_weight_inf"] = Case(
    lambda rng: _leak_inputs(rng, -np.inf), _leak_ref, ("leak",),
    description="unbatched (n_q, n_k), mask_value = -inf: exactly zero leak, no nan, also for a fully masked row")


# What each exercise's docstring promises, checked by tests/test_hidden_case_coverage.py.
COVERAGE = {
    "online_softmax_attention": {
        "cases": ("failures.online_attention", "failures.online_attention_2d", "failures.online_attention_large",
                  "failures.online_attention_falling", "failures.online_attention_memory"),
        "requires": {"rank2", "rank3", "rank4", "self", "cross", "saturated", "max_first_block", "max_later_block",
                     "max_falls_past_exp_range"}},
    "leaked_weight": {"cases": ("failures.leaked_weight", "failures.leaked_weight_inf"),
                      "requires": {"rank2", "rank3", "fully_masked", "saturated"}},
}
