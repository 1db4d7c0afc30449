"""Bad input to the package's public API: one rule, one clear error.

The rule (lib/transformer_course/_checks.py): NaN and infinities are refused with a ValueError
that names the caller's argument -- except ``-inf`` where it means "blocked" (softmax scores, an
additive mask); an axis that is summed over (the softmax axis, the keys n_k, the widths d_k
and d) must not be empty; wrong kinds of object (strings, None, complex, integer dtypes for
parameters) are TypeErrors. Every message names the argument and says what was expected and
what came ("... got ..."). The fast path (transformer_course_fast) follows the same rule.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import transformer_course as tc
from transformer_course import generation as tg
from transformer_course import llama as tl
from transformer_course import pretrained as tp
from transformer_course import smollm2 as ts
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


def tiny_llama(context_length=8, nan_in=None):
    """A 1-layer LLaMA (d 8, 2 heads, vocab 11) with random weights; ``nan_in``: a tensor given one NaN."""
    cfg = tl.LlamaConfig(n_layers=1, d_model=8, n_heads=2, n_kv_heads=1, d_ff=12, vocab_size=11,
                         rope_base=1e4, eps=1e-5, context_length=context_length)
    rng = np.random.default_rng(4)
    shapes = {"attn_norm": (8,), "ffn_norm": (8,), "attn_q": (8, 8), "attn_k": (4, 8), "attn_v": (4, 8),
              "attn_output": (8, 8), "ffn_gate": (12, 8), "ffn_up": (12, 8), "ffn_down": (8, 12)}
    w = {f"blk.0.{name}.weight": rng.normal(size=shape) for name, shape in shapes.items()}
    w.update({"token_embd.weight": rng.normal(size=(11, 8)), "output_norm.weight": np.ones(8)})
    if nan_in is not None:
        w[nan_in] = with_nan(w[nan_in])
    return tl.Llama(cfg, w, np.float64)


def tiny_smollm2():
    """A SmolLM2 object over a toy vocabulary: the 256 byte symbols but 0x04 and 0xbf, one merge, one
    control token -- the tokenizer code of the real model without its file."""
    symbols = ts.byte_symbols()
    tokens = [symbols[b] for b in range(256) if b not in (0x04, 0xBF)] + ["ĠĠ", "<|im_end|>"]
    metadata = {"tokenizer.ggml.pre": "smollm", "tokenizer.ggml.tokens": tokens, "tokenizer.ggml.merges": ["Ġ Ġ"],
                "tokenizer.ggml.token_type": [1] * (len(tokens) - 1) + [3]}
    return ts.SmolLM2(tiny_llama(), ts.load_tokenizer(metadata), metadata, {})


def tiny_sentence_encoder():
    """A SentenceEncoder with no layers (embeddings only): enough for what comes before the model."""
    cfg = tp.EncoderConfig(d_model=4, n_heads=1, n_layers=0, d_ff=8, vocab_size=5, max_positions=6,
                           type_vocab_size=2, eps=1e-12, activation="gelu", pad_token_id=0, max_seq_length=6,
                           pooling="mean")
    w = {"embeddings.word_embeddings.weight": np.ones((5, 4)), "embeddings.position_embeddings.weight": np.ones((6, 4)),
         "embeddings.token_type_embeddings.weight": np.ones((2, 4)), "embeddings.LayerNorm.weight": np.ones(4),
         "embeddings.LayerNorm.bias": np.zeros(4)}
    return tp.SentenceEncoder(cfg, w, FakeTokenizer())


SMOL = tiny_smollm2()
F32 = np.float32
Q32, K32, V32 = (a.astype(F32) for a in (Q, K, V))


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
    # -- arrays of the wrong shape, in the caller's words -------------------------------------------
    ("a ragged list to softmax", lambda: tc.softmax([[1.0, 2.0], [3.0]]), ValueError,
     r"x must be a rectangular array of numbers \(every row the same length\), got a ragged list"),
    ("a ragged list to layer norm", lambda: tc.layer_norm([[1.0, 2.0, 3.0], [4.0]]), ValueError,
     r"x must be a rectangular array"),
    ("mean_pool with a mask of the wrong length", lambda: tp.mean_pool(X, np.ones((2, 4))), ValueError,
     r"attention_mask must have shape \(2, 3\) \(batch, n\) to match states \(2, 3, 8\), got shape \(2, 4\)"),
    ("mean_pool with a mask of the wrong batch", lambda: tp.mean_pool(X, np.ones(3)), ValueError,
     r"attention_mask must have shape \(2, 3\)"),
    # -- the LLaMA model and its generation -------------------------------------------------------
    ("a NaN in the embedding weights", lambda: tiny_llama(nan_in="token_embd.weight"), ValueError,
     r"weights\['token_embd.weight'\] contains NaN"),
    ("a NaN in a layer's weights", lambda: tiny_llama(nan_in="blk.0.ffn_up.weight"), ValueError,
     r"weights\['blk.0.ffn_up.weight'\] contains NaN"),
    ("9 tokens into a context of 4", lambda: tiny_llama(context_length=4).forward(np.arange(9)), ValueError,
     r"positions 0..8, past the model's context of 4 positions \(0..3, the range RoPE was trained on\)"),
    ("a cached step past the context", lambda: tiny_llama(context_length=4).forward(
        np.arange(2), _filled_cache(tiny_llama(context_length=4), 3)), ValueError, r"positions 3..4, past"),
    ("greedy generation past the context", lambda: tiny_llama(context_length=4).generate_greedy([1, 2], 3),
     ValueError, r"2 prompt ids \+ n_new=3 = 5 positions, past the model's context of 4"),
    ("greedy generation from an empty prompt", lambda: tiny_llama().generate_greedy([], 0), ValueError,
     r"prompt_ids must be a non-empty 1-D sequence of ints, got list \[\]"),
    ("greedy generation with n_new = -1", lambda: tiny_llama().generate_greedy([1], -1), ValueError,
     r"n_new must be an int >= 0, got int -1"),
    ("a LLaMA in float16", lambda: tiny_llama().__class__(tiny_llama().config, {}, np.float16), ValueError,
     r"dtype must be np.float32 or np.float64, got float16"),
    ("a temperature that overflows the logits", lambda: tg.sampling_probabilities(np.array([1.0, -2.0]),
                                                                                 temperature=1e-310),
     ValueError, r"temperature=1e-310 is too small for these logits: logits / temperature overflows float64 "
                 r"\(max \|logit\| = 2\); use temperature=0"),
    ("a float32 temperature that rounds to 0", lambda: tg.sample_next_token(np.array([1.0, 0.5], F32),
                                                                            rng=R, temperature=1e-50),
     ValueError, r"temperature=1e-50 is too small .*overflows float32"),
    ("a temperature that overflows, in generate", lambda: tg.generate(lambda ids: np.array([0.0, 3.0]), [0], 1,
                                                                      rng=R, temperature=1e-309),
     ValueError, r"temperature=1e-309 is too small"),
    # -- SmolLM2: loading, ids, text ----------------------------------------------------------------
    ("SmolLM2 in float16 (refused before the file is read)",
     lambda: ts.load_smollm2("/nonexistent/model.gguf", dtype=np.float16), ValueError,
     r"dtype must be np.float32 or np.float64, got float16"),
    ("SmolLM2 in bfloat16", lambda: ts.load_smollm2("/nonexistent/model.gguf", dtype="bfloat16"), TypeError,
     r"dtype must be a floating dtype such as np.float32, got str 'bfloat16'"),
    ("dequantising to bfloat16", lambda: ts.dequantize(np.zeros((1, 20), np.uint8), "Q4_1", "bfloat16"), TypeError,
     r"dtype must be a floating dtype such as np.float32, got str 'bfloat16'"),
    ("dequantising to int8", lambda: ts.dequantize(np.zeros((1, 34), np.uint8), "Q8_0", np.int8), TypeError,
     r"dtype must be a floating dtype such as np.float32, got int8"),
    ("decoding id -1", lambda: SMOL.decode([-1]), ValueError,
     r"ids must lie in 0..255 \(the vocabulary has 256 tokens\), got -1"),
    ("decoding id = vocabulary size", lambda: SMOL.decode(np.array([5, 256])), ValueError,
     r"ids must lie in 0..255 .*got 256"),
    ("decoding float ids", lambda: SMOL.decode([1.0, 2.0]), TypeError,
     r"ids must be a 1-D sequence of integer token ids, got list \[1.0, 2.0\]"),
    ("decoding a batch of ids", lambda: SMOL.decode(np.ones((2, 2), int)), TypeError,
     r"ids must be a 1-D sequence .*shape \(2, 2\)"),
    ("encoding bytes, not text", lambda: SMOL.encode(b"abc"), TypeError, r"text must be a string, got bytes"),
    ("encoding invalid UTF-8 bytes", lambda: SMOL.encode(b"a\xc3("), TypeError,
     r"text must be a string, got bytes .*not valid UTF-8 either: byte 0xc3 at offset 1"),
    ("encoding a lone surrogate", lambda: SMOL.encode("ok\udc80"), ValueError,
     r"text\[2\] is a lone surrogate U\+DC80: it has no UTF-8 encoding"),
    ("encoding a byte the vocabulary lacks", lambda: SMOL.encode("ab\x04c"), ValueError,
     r"text\[2\] = '\\x04' \(U\+0004\) cannot be tokenized: its UTF-8 byte 0x04 has no token"),
    ("encoding a character whose UTF-8 holds such a byte", lambda: SMOL.encode("aé\u00ff"), ValueError,
     r"text\[2\] = 'ÿ' \(U\+00FF\) .*byte 0xbf"),
    ("encoding with an unknown policy", lambda: SMOL.encode("a", unknown_bytes="skip"), ValueError,
     r'unknown_bytes must be "error" or "drop", got str \'skip\''),
    # -- attention scores that overflow: refused by the reference and the fast path alike ---------------
    ("float32 scores that overflow", lambda: tc.scaled_dot_product_attention(Q32 * F32(1e20), K32 * F32(1e20), V32),
     ValueError, r"the scores Q K\^T / sqrt\(d_k\) overflow float32: 24 of 24 are not finite \(max \|Q\| = .*"
                 r"d_k = 5\); expected scores within \+-3.4e\+38"),
    ("float32 scores that overflow, fast path (the same message)",
     lambda: flash_attention(Q32 * F32(1e20), K32 * F32(1e20), V32), ValueError,
     r"the scores Q K\^T / sqrt\(d_k\) overflow float32: 24 of 24 are not finite"),
    ("float64 scores that overflow to -inf (not 'blocked')",
     lambda: tc.attention_scores(np.full((4, 5), 1e160), np.full((6, 5), -1e160)), ValueError,
     r"overflow float64: 24 of 24 are not finite \(max \|Q\| = 1e\+160, max \|K\| = 1e\+160, d_k = 5\)"),
    ("grouped-query scores that overflow", lambda: tl.grouped_query_attention(
        np.full((2, 3, 4), 1e20, F32), np.full((1, 3, 4), 1e20, F32), np.ones((1, 3, 4), F32)), ValueError,
     r"the scores Q K\^T / sqrt\(d_k\) overflow float32: 18 of 18"),   # grouped-query = the one attention core
]


def _filled_cache(model, n):
    cache = model.new_cache(8)
    cache.length = n
    return cache


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


def test_a_batch_of_no_sentences_gives_no_embeddings():
    """SentenceEncoder.encode([]) is a batch of 0 (nothing is averaged over): an empty (0, d) result,
    not "key must hold at least one position" from deep inside attention."""
    encoder = tiny_sentence_encoder()
    out = encoder.encode([])
    assert out.shape == (0, 4) and out.dtype == np.float32
    batch = tp.tokenize(FakeTokenizer(), [])
    assert batch.input_ids.shape == batch.attention_mask.shape == (0, 0) and batch.tokens == []


def test_entropy_accepts_distributions_and_all_masked_rows():
    w = np.array([[0.5, 0.5, 0.0], [0.0, 0.0, 0.0], [1 / 3, 1 / 3, 1 / 3]])
    np.testing.assert_allclose(tc.attention_entropy(w), [np.log(2), 0.0, np.log(3)], rtol=1e-15, atol=0)
    probs = tc.softmax(R.normal(size=(50, 512)).astype(np.float32))   # float32 sums off by ~n eps
    assert tc.attention_entropy(probs).shape == (50,)


# -- overflow: the result is right whenever it is representable (_checks.py's rule) ------------------------
# (dtype, scale): the squares of float32 rows overflow from |x| ~ 1.8e19, float64 from ~1.3e154, float16 from 256.
OVERFLOWING = [(np.float32, 1e20), (np.float32, 1e30), (np.float64, 1e200), (np.float16, 300.0)]
TOL = {np.float16: 3e-3, np.float32: 1e-6, np.float64: 1e-14}      # ~ 10-20 eps of the dtype, relative to 1


def _huge(dtype, scale, shape=(3, 16), seed=5):
    x = np.random.default_rng(seed).normal(size=shape)
    return (x * scale).astype(dtype), x


@pytest.mark.parametrize(("dtype", "scale"), OVERFLOWING)
def test_normalisations_of_huge_rows_are_right(dtype, scale):
    """layer_norm, rms_norm and l2_normalize of rows whose squares overflow: the exact answer (the
    rows' scale cancels; eps is negligible next to their variance), without a warning."""
    big, x = _huge(dtype, scale)
    gamma, beta = np.linspace(0.5, 2, 16), np.linspace(-1, 1, 16)
    tiny_eps = 1e-300                              # what eps / scale^2 is, as near as float64 can say
    with warnings.catch_warnings():
        warnings.simplefilter("error")             # no "overflow encountered" either
        got = {"layer_norm": tc.layer_norm(big, gamma.astype(dtype), beta.astype(dtype)),
               "rms_norm": tl.rms_norm(big, gamma.astype(dtype)),
               "l2_normalize": tp.l2_normalize(big)}
    want = {"layer_norm": tc.layer_norm(x, gamma, beta, tiny_eps), "rms_norm": tl.rms_norm(x, gamma, tiny_eps),
            "l2_normalize": tp.l2_normalize(x)}
    for name, out in got.items():
        assert out.dtype == dtype, f"{name}: dtype {out.dtype}, expected {np.dtype(dtype)}"
        err = np.abs(out.astype(np.float64) - want[name]).max()
        assert err < TOL[dtype] * 4, f"{name} of rows ~{scale:g} in {np.dtype(dtype)}: max error {err:.3g}"


@pytest.mark.parametrize(("dtype", "scale"), OVERFLOWING)
def test_mean_pool_of_huge_states_is_right(dtype, scale):
    big, x = _huge(dtype, np.finfo(dtype).max / 3, shape=(2, 5, 4))      # sums of 5 overflow, the mean does not
    mask = np.array([[1, 1, 1, 1, 0], [1, 1, 1, 0, 0]])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = tp.mean_pool(big, mask)
    want = tp.mean_pool(x, mask) * (np.finfo(dtype).max / 3)
    assert np.isfinite(got).all() and np.abs(got / want - 1).max() < TOL[dtype] * 4


def test_overflow_rule_keeps_ordinary_rows_bit_for_bit_and_constant_rows_at_zero():
    rows = np.random.default_rng(6).normal(size=(4, 8)).astype(np.float32)
    mixed = rows.copy()
    mixed[1] *= np.float32(1e25)                  # one row overflows
    mixed[2] = np.float32(3e30)                   # a constant huge row: variance 0, output 0
    out = tc.layer_norm(mixed)
    np.testing.assert_array_equal(out[[0, 3]], tc.layer_norm(rows[[0, 3]]))
    assert np.array_equal(out[2], np.zeros(8, np.float32))
    np.testing.assert_allclose(out[1], tc.layer_norm(rows[1:2].astype(np.float64), eps=1e-300)[0], rtol=0, atol=4e-6)
    l2 = tp.l2_normalize(mixed)
    np.testing.assert_array_equal(l2[[0, 3]], tp.l2_normalize(rows[[0, 3]]))
    np.testing.assert_allclose(l2[2], np.full(8, 8 ** -0.5), rtol=1e-6)


def test_flash_attention_follows_the_reference_where_its_sums_would_overflow():
    """V near float32's max: the tiles' unnormalised sums (up to n_k max|V|) would overflow; the
    reference's weights (summing to 1) do not. The fast path gives the reference's answer."""
    for V_big in (np.full((6, 3), 3.3e38, F32), V32 * F32(1e37)):
        for causal in (False, True):
            mask = np.tril(np.ones((4, 6), bool)) if causal else None
            want = tc.scaled_dot_product_attention(Q32, K32, V_big, mask)[0]
            with warnings.catch_warnings():
                warnings.simplefilter("error")
                got = flash_attention(Q32, K32, V_big, causal=causal)
            assert np.isfinite(got).all(), f"causal={causal}: non-finite output"
            # float32 rounding of sums of 6 terms, relative to the output's scale
            np.testing.assert_allclose(got, want, rtol=0, atol=1e-6 * np.abs(want).max())


def test_fast_multi_head_follows_the_reference_where_scores_or_sums_would_overflow():
    """Huge inputs: the reference refuses scores that overflow; FastMultiHeadAttention gives the
    same refusal (not a silent NaN), and where only its tiles' sums could overflow, the
    reference's answer, the causal flag read as the lower-triangular mask."""
    fast = FastMultiHeadAttention(MHA)
    x = R.normal(size=(2, 3, 8))
    for scale in (1e160, 1e200):
        with pytest.raises(ValueError, match=r"the scores Q K\^T / sqrt\(d_k\) overflow float64"):
            MHA(x * scale)
        with pytest.raises(ValueError, match=r"the scores Q K\^T / sqrt\(d_k\) overflow float64"):
            fast(x * scale)
    for causal in (False, True):
        want = fast(x, causal=causal)                             # the tiled path
        got = fast._by_the_reference(x, x, x, None, None, causal)   # the fallback
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-12 * np.abs(want).max(),
                                   err_msg=f"causal={causal}: the fallback differs from the tiled path")
    mask = np.array([[True, False, True]] * 3)
    np.testing.assert_allclose(fast._by_the_reference(x, x, x, mask, None, True), fast(x, mask=mask, causal=True),
                               rtol=0, atol=1e-12, err_msg="boolean mask and causal: the fallback differs")
