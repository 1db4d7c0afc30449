"""Bad input to the package's public API: one rule, one clear error.

The rule (lib/transformer_course/_checks.py): NaN and infinities are refused with a ValueError
that names the caller's argument -- except ``-inf`` where it means "blocked" (softmax scores, an
additive mask); an axis that is summed over (the softmax axis, the keys n_k, the widths d_k
and d) must not be empty; wrong kinds of object (strings, None, complex, integer dtypes for
parameters) are TypeErrors. Every message names the argument and says what was expected and
what came ("... got ..."). The fast path (transformer_course_fast) follows the same rule.
"""

from __future__ import annotations

import numpy as np
import pytest

import transformer_course as tc
from transformer_course import pretrained as tp
from transformer_course_fast import FastMultiHeadAttention, flash_attention

R = np.random.default_rng(0)
X = R.normal(size=(2, 3, 8))              # (batch, n, d_model)


def with_nan(a, index=(0,) * 3):
    a = np.array(a, dtype=float)
    a[index[:a.ndim]] = np.nan
    return a


def with_inf(a, sign=1.0):
    a = np.array(a, dtype=float)
    a.flat[1] = sign * np.inf
    return a


MHA = tc.MultiHeadAttention(8, 2, rng=np.random.default_rng(1))
FFN = tc.PositionwiseFeedForward(8, 16, rng=np.random.default_rng(2))
BLOCK = tc.TransformerEncoderBlock(8, 2, rng=np.random.default_rng(3))
Q, K, V = R.normal(size=(4, 5)), R.normal(size=(6, 5)), R.normal(size=(6, 3))
EMPTY_K, EMPTY_V = np.ones((0, 5)), np.ones((0, 3))
W = np.full(5, 0.2)                       # a distribution over 5 keys


class FakeTokenizer:
    def encode_batch(self, sentences):    # never reached by bad input
        raise AssertionError("the tokenizer library must not see bad input")


# (description, call, exception, regex the message must match)
CASES = [
    # -- empty axes that are summed over --------------------------------------------------------
    ("softmax over an empty axis", lambda: tc.softmax(np.ones((3, 0))), ValueError,
     r"x must have at least one entry along axis 1 .* got shape \(3, 0\)"),
    ("attention with n_k = 0", lambda: tc.scaled_dot_product_attention(Q, EMPTY_K, EMPTY_V), ValueError,
     r"at least one key \(n_k >= 1\).*got K \(0, 5\)"),
    ("flash attention with n_k = 0 (the same message)", lambda: flash_attention(Q, EMPTY_K, EMPTY_V),
     ValueError, r"at least one key \(n_k >= 1\).*got K \(0, 5\)"),
    ("online softmax with n_k = 0", lambda: tc.online_softmax_attention(Q, EMPTY_K, EMPTY_V, 2), ValueError,
     r"at least one key \(n_k >= 1\)"),
    ("multi-head attention with n_k = 0", lambda: MHA(X, np.ones((2, 0, 8))), ValueError,
     r"key must hold at least one position .*got key \(2, 0, 8\)"),
    ("attention with d_k = 0", lambda: tc.scaled_dot_product_attention(np.ones((2, 0)), np.ones((3, 0)),
                                                                       np.ones((3, 4))), ValueError,
     r"d_k >= 1 .*got Q \(2, 0\) and K \(3, 0\)"),
    ("scores with d_k = 0", lambda: tc.attention_scores(np.ones((2, 0)), np.ones((3, 0))), ValueError,
     r"d_k >= 1"),
    ("layer norm of width 0", lambda: tc.layer_norm(np.ones((3, 0))), ValueError,
     r"x must not be empty along axis -1 .*got shape \(3, 0\)"),
    # -- NaN and infinities: refused everywhere, naming the argument ----------------------------
    ("NaN scores", lambda: tc.attention_scores(with_nan(Q), K), ValueError, r"Q contains NaN"),
    ("NaN keys", lambda: tc.scaled_dot_product_attention(Q, with_nan(K), V), ValueError, r"K contains NaN"),
    ("+inf values", lambda: tc.scaled_dot_product_attention(Q, K, with_inf(V)), ValueError, r"V contains \+inf"),
    ("NaN in softmax", lambda: tc.softmax(with_nan(Q)), ValueError, r"x contains NaN"),
    ("+inf in softmax", lambda: tc.softmax(with_inf(Q)), ValueError, r"x contains \+inf"),
    ("NaN in gelu", lambda: tc.gelu(with_nan(Q)), ValueError, r"x contains NaN"),
    ("-inf in gelu", lambda: tc.gelu(with_inf(Q, -1)), ValueError, r"x contains -inf"),
    ("NaN in relu", lambda: tc.relu(with_nan(Q)), ValueError, r"x contains NaN"),
    ("NaN in layer norm", lambda: tc.layer_norm(with_nan(Q)), ValueError, r"x contains NaN"),
    ("NaN in the feed-forward", lambda: FFN(with_nan(X)), ValueError, r"x contains NaN"),
    ("NaN in the encoder block", lambda: BLOCK(with_nan(X)), ValueError, r"x contains NaN"),
    ("NaN query", lambda: MHA(with_nan(X)), ValueError, r"query contains NaN"),
    ("NaN value", lambda: MHA(X, X, with_nan(X)), ValueError, r"value contains NaN"),
    ("NaN in split_heads", lambda: tc.split_heads(with_nan(X), 2), ValueError, r"x contains NaN"),
    ("NaN in the Jacobian's p", lambda: tc.softmax_jacobian(with_nan(W)), ValueError, r"p contains NaN"),
    ("NaN in l2_normalize", lambda: tp.l2_normalize(with_nan(Q)), ValueError, r"x contains NaN"),
    ("NaN in mean_pool", lambda: tp.mean_pool(with_nan(X), np.ones((2, 3))), ValueError, r"states contains NaN"),
    ("NaN in flash attention", lambda: flash_attention(with_nan(Q), K, V), ValueError, r"Q contains NaN"),
    ("NaN in an additive mask", lambda: tc.scaled_dot_product_attention(Q, K, V, mask=with_nan(np.zeros((4, 6)))),
     ValueError, r"mask contains NaN"),
    # -- numbers that are not what the maths needs ----------------------------------------------
    ("layer norm eps = NaN", lambda: tc.layer_norm(Q, eps=np.nan), ValueError,
     r"eps must be a positive number, got float nan"),
    ("layer norm eps = 0", lambda: tc.layer_norm(Q, eps=0.0), ValueError, r"eps must be a positive number, got"),
    ("layer norm eps as a string", lambda: tc.layer_norm(Q, eps="1e-5"), TypeError, r"eps must be a positive number"),
    ("entropy of negative weights", lambda: tc.attention_entropy(np.array([1.5, -0.5])), ValueError,
     r"weights must be non-negative .*got a minimum of -0.5"),
    ("entropy of rows that do not sum to 1", lambda: tc.attention_entropy(np.array([[0.5, 0.6]])), ValueError,
     r"weights must sum to 1 along axis 1 \(or be all 0\), got a row summing to 1.1"),
    ("entropy of raw scores", lambda: tc.attention_entropy(Q), ValueError, r"weights must"),
    # -- parameter dtypes -----------------------------------------------------------------------
    ("integer weights for attention", lambda: tc.MultiHeadAttention(8, 2, rng=R, dtype=int), TypeError,
     r"dtype must be a floating dtype such as np.float32, got int64"),
    ("boolean weights for the feed-forward", lambda: tc.PositionwiseFeedForward(8, 4, rng=R, dtype=bool),
     TypeError, r"dtype must be a floating dtype .*got bool"),
    ("integer weights for the block", lambda: tc.TransformerEncoderBlock(8, 2, rng=R, dtype=np.int32),
     TypeError, r"dtype must be a floating dtype .*got int32"),
    ("not a dtype", lambda: tc.MultiHeadAttention(8, 2, rng=R, dtype="weights"), TypeError,
     r"dtype must be a floating dtype"),
    # -- errors in the caller's words -----------------------------------------------------------
    ("query batch 2, key batch 3", lambda: MHA(X, R.normal(size=(3, 3, 8))), ValueError,
     r"query and key must have the same leading \(batch\) dimensions, got query \(2, 3, 8\) and key \(3, 3, 8\)"),
    ("fast multi-head: query batch 2, key batch 3", lambda: FastMultiHeadAttention(MHA)(X, R.normal(size=(3, 3, 8))),
     ValueError, r"got query \(2, 3, 8\) and key \(3, 3, 8\)"),
    ("block input of the wrong width", lambda: BLOCK(np.ones((2, 5))), ValueError,
     r"x must have last dimension d_model=8, got shape \(2, 5\)"),
    # -- token ids ------------------------------------------------------------------------------
    ("token id -1", lambda: tp.embed_tokens(np.array([[1, -1]]), np.zeros((1, 2), int), np.ones((5, 4)),
                                            np.ones((3, 4)), np.ones((2, 4)), np.ones(4), np.zeros(4), 1e-12),
     ValueError, r"input_ids must lie in 0..4 \(the table has 5 rows\), got -1"),
    ("token id = vocabulary size", lambda: tp.embed_tokens(np.array([[5]]), np.zeros((1, 1), int), np.ones((5, 4)),
                                                           np.ones((3, 4)), np.ones((2, 4)), np.ones(4),
                                                           np.zeros(4), 1e-12),
     ValueError, r"input_ids must lie in 0..4 .*got 5"),
    ("token type 2 of 2", lambda: tp.embed_tokens(np.array([[1]]), np.array([[2]]), np.ones((5, 4)),
                                                  np.ones((3, 4)), np.ones((2, 4)), np.ones(4), np.zeros(4), 1e-12),
     ValueError, r"token_type_ids must lie in 0..1 .*got 2"),
    ("float token ids", lambda: tp.embed_tokens(np.array([[1.0]]), np.zeros((1, 1), int), np.ones((5, 4)),
                                                np.ones((3, 4)), np.ones((2, 4)), np.ones(4), np.zeros(4), 1e-12),
     TypeError, r"input_ids must be integers, got array of shape \(1, 1\) and dtype float64"),
    ("a sentence that is None", lambda: tp.tokenize(FakeTokenizer(), ["A cat.", None]), TypeError,
     r"sentences\[1\] must be a string, got NoneType None"),
    ("one string instead of a list", lambda: tp.tokenize(FakeTokenizer(), "A cat."), TypeError,
     r"sentences must be a list of strings"),
    # -- a long document read in windows ------------------------------------------------------------
    ("stride larger than the window", lambda: tp.encode_long_document(np.arange(9), 4, 5, LONG_ENC, 1, 2),
     ValueError, r"stride must be at most window=4 .*got 5"),
    ("stride 0", lambda: tp.encode_long_document(np.arange(9), 4, 0, LONG_ENC, 1, 2), ValueError,
     r"stride must be a positive integer, got 0"),
    ("an empty document", lambda: tp.encode_long_document(np.arange(0), 4, 2, LONG_ENC, 1, 2), ValueError,
     r"token_ids must be a non-empty 1-D array \(n,\) with n >= 1, got array of shape \(0,\)"),
    ("a batch of documents", lambda: tp.encode_long_document(np.ones((2, 5), int), 4, 2, LONG_ENC, 1, 2),
     ValueError, r"token_ids must be a non-empty 1-D array .*got array of shape \(2, 5\)"),
    ("float token ids for a long document", lambda: tp.encode_long_document(np.ones(5), 4, 2, LONG_ENC, 1, 2),
     TypeError, r"token_ids must be integer ids, got array of shape \(5,\) and dtype float64"),
    ("a [CLS] id that is a string", lambda: tp.encode_long_document(np.arange(5), 4, 2, LONG_ENC, "[CLS]", 2),
     TypeError, r"cls_id must be a non-negative integer id, got str"),
    ("an encoder that is not a function", lambda: tp.encode_long_document(np.arange(5), 4, 2, None, 1, 2),
     TypeError, r"encode_window must be a function .*got NoneType None"),
    ("an encoder that drops the batch axis", lambda: tp.encode_long_document(np.arange(5), 4, 2,
                                                                             lambda i, m: np.ones((6, 3)), 1, 2),
     ValueError, r"encode_window\(\.\.\.\) must have at least 3 dimension"),
    ("an encoder that returns one state per window", lambda: tp.encode_long_document(
        np.arange(5), 4, 2, lambda i, m: np.ones((i.shape[0], 1, 3)), 1, 2),
     ValueError, r"encode_window must return states \(b, m, d\) for input_ids \(2, 6\), got array of shape"),
]


def LONG_ENC(ids, mask):                  # a stand-in encoder: (b, m) -> (b, m, 2)
    return np.stack([np.asarray(ids, float), np.asarray(mask, float)], axis=-1)


@pytest.mark.parametrize(("description", "call", "exc", "match"), CASES, ids=[c[0] for c in CASES])
def test_bad_input_gets_a_clear_error(description, call, exc, match):
    with pytest.raises(exc, match=match):
        call()


@pytest.mark.parametrize("func", [tc.gelu, tc.relu, tc.softmax, tc.layer_norm])
@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_element_wise_functions_keep_the_floating_dtype(func, dtype):
    x = R.normal(size=(3, 4)).astype(dtype)
    out = func(x)
    assert out.dtype == dtype and out.shape == x.shape


def test_gelu_float16_is_the_float32_gelu_rounded():
    x = np.linspace(-4, 4, 101).astype(np.float16)
    assert np.array_equal(tc.gelu(x), tc.gelu(x.astype(np.float32)).astype(np.float16))


def test_minus_inf_means_blocked_where_it_may_appear():
    """The exception to the NaN/inf rule: -inf in softmax scores and in additive masks."""
    assert np.array_equal(tc.softmax(np.array([0.0, -np.inf])), [1.0, 0.0])
    mask = np.where(np.eye(4, 6, dtype=bool), 0.0, -np.inf)
    out, weights = tc.scaled_dot_product_attention(Q, K, V, mask=mask)
    assert np.array_equal(weights, np.eye(4, 6)) and np.allclose(out, V[:4], rtol=0, atol=1e-15)


def test_empty_axes_that_are_not_summed_over_give_empty_results():
    """A batch of 0 sentences or 0 queries is not an error: nothing is reduced over it."""
    out, weights = tc.scaled_dot_product_attention(np.ones((0, 5)), K, V)
    assert out.shape == (0, 3) and weights.shape == (0, 6)
    assert tc.softmax(np.ones((0, 4))).shape == (0, 4)
    assert tc.layer_norm(np.ones((0, 4))).shape == (0, 4)
    assert MHA(np.ones((0, 3, 8)))[0].shape == (0, 3, 8)


def test_entropy_accepts_distributions_and_all_masked_rows():
    w = np.array([[0.5, 0.5, 0.0], [0.0, 0.0, 0.0], [1 / 3, 1 / 3, 1 / 3]])
    np.testing.assert_allclose(tc.attention_entropy(w), [np.log(2), 0.0, np.log(3)], rtol=1e-15, atol=0)
    probs = tc.softmax(R.normal(size=(50, 512)).astype(np.float32))   # float32 sums off by ~n eps
    assert tc.attention_entropy(probs).shape == (50,)
