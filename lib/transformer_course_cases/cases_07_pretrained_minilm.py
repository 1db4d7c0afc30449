"""Hidden-test cases of notebook 07 (a pretrained model: embeddings, a checkpoint layer in the course's
block, mean pooling + L2 normalisation, head pattern scores, a long document read in windows).

Every case draws a small random "checkpoint" or batch, never the real model: the inputs are cheap, and
their shapes are chosen so that plausible mistakes show (see each section).
"""

from __future__ import annotations

import numpy as np

from transformer_course.pretrained import (LAYER_NAMES, embed_tokens, encode_long_document, encoder_layer, pattern_score,
                          sentence_embeddings)
from . import CASES, Case


def _lengths(rng, batch, n, *, full=True):
    """``batch`` different-ish lengths in 1..n, one of them n (when ``full``) and one short."""
    lengths = rng.integers(2, n, size=batch)
    if full:
        lengths[rng.integers(batch)] = n
    lengths[(np.argmax(lengths) + 1) % batch] = int(rng.integers(1, max(2, n // 2)))
    return lengths


def _mask(lengths, n):
    return (np.arange(n)[None, :] < np.asarray(lengths)[:, None]).astype(np.int64)   # (batch, n) 1/0


# ---------------------------------------------------------------------------
# embed_tokens(input_ids, token_type_ids, word, position, token_type, gamma, beta, eps)
# More position rows than tokens (positions must start at row 0), both segments present (a
# forgotten token-type row shows), small embeddings and eps ~ 1e-3..1e-2 (an eps that is not the
# argument shows), gamma/beta not 1/0 (a forgotten layer norm or its parameters show).
# ---------------------------------------------------------------------------
def _embed_inputs(rng, segments=False):
    b, n = int(rng.integers(2, 4)), int(rng.integers(4, 8))
    vocab, d = int(rng.integers(11, 21)), int(rng.integers(5, 11))
    max_pos, n_types = n + int(rng.integers(2, 6)), 2
    scale = 0.05
    type_ids = rng.integers(0, n_types, (b, n)) if segments else np.zeros((b, n), dtype=np.int64)
    if segments:
        type_ids[0, -1], type_ids[-1, 0] = 1, 0                 # both segments occur
    return {
        "input_ids": rng.integers(0, vocab, (b, n)),
        "token_type_ids": type_ids,
        "word": rng.normal(0, scale, (vocab, d)),
        "position": rng.normal(0, scale, (max_pos, d)),
        "token_type": rng.normal(0, scale, (n_types, d)),
        "gamma": 1 + rng.normal(0, 0.3, d),
        "beta": rng.normal(0, 0.3, d),
        "eps": float(rng.uniform(1e-3, 1e-2)),
    }


CASES["pretrained.embed_tokens"] = Case(
    _embed_inputs, embed_tokens, ("embeddings",),
    description="one segment, more position rows than tokens, small embeddings, eps 1e-3..1e-2")
CASES["pretrained.embed_tokens_segments"] = Case(
    lambda rng: _embed_inputs(rng, segments=True), embed_tokens, ("embeddings",),
    description="both segments (token_type_ids 0 and 1)")


# ---------------------------------------------------------------------------
# encoder_layer(x, attention_mask, weights, layer, n_heads, eps)
# A random checkpoint of 2-3 layers with BERT's names and (out, in) shapes; the layer asked for is
# random and never 0 in the unpadded case (always layer 0 shows); d_model = heads * d_head with several heads and d_ff != d (a missing
# transpose of a square attention matrix shows as wrong numbers, of W_1/W_2 as an error); the two
# layer norms have different parameters (swapping them shows); eps 0.05..0.2 (the default or 1e-12
# shows); the mask is 0/1 integers with padded sequences (an ignored or inverted mask shows).
# ---------------------------------------------------------------------------
def _checkpoint(rng, n_layers, d, d_ff):
    w = {}
    for layer in range(n_layers):
        for key, name in LAYER_NAMES.items():
            if key == "W_1":
                shape = (d_ff, d)
            elif key == "b_1":
                shape = (d_ff,)
            elif key == "W_2":
                shape = (d, d_ff)
            else:
                shape = (d, d) if key.startswith("W") else (d,)
            value = rng.normal(0, 0.5, shape)
            if key.endswith("gamma"):
                value = 1 + 0.4 * value
            w[f"encoder.layer.{layer}.{name}"] = value
    return w


def _layer_inputs(rng, padded=False):
    n_heads, d_head = int(rng.integers(2, 5)), int(rng.integers(2, 5))
    d = n_heads * d_head
    d_ff = d + int(rng.integers(3, 9))
    n_layers = int(rng.integers(2, 4))
    b, n = int(rng.integers(2, 4)), int(rng.integers(4, 8))
    lengths = _lengths(rng, b, n) if padded else np.full(b, n)
    return {
        "x": rng.normal(0, 1, (b, n, d)),
        "attention_mask": _mask(lengths, n),
        "weights": _checkpoint(rng, n_layers, d, d_ff),
        "layer": int(rng.integers(0 if padded else 1, n_layers)),    # never 0 in the unpadded case
        "n_heads": n_heads,
        "eps": float(rng.uniform(0.05, 0.2)),
    }


def _layer_ref(x, attention_mask, weights, layer, n_heads, eps):
    return encoder_layer(x, attention_mask, weights, layer, n_heads, eps)


CASES["pretrained.encoder_layer"] = Case(
    _layer_inputs, _layer_ref, ("states", "attention"),
    description="random BERT-named checkpoint, no padding, random layer, several heads, d_ff != d")
CASES["pretrained.encoder_layer_padded"] = Case(
    lambda rng: _layer_inputs(rng, padded=True), _layer_ref, ("states", "attention"),
    description="padded batch: attention_mask 0/1 integers, one short sequence")


# ---------------------------------------------------------------------------
# sentence_embeddings(states, attention_mask)
# Padding with large values (counting pads, or dividing by n instead of the length, shows), states
# with a non-zero mean (mean vs sum vs max vs first token differ), rows of norm != 1.
# ---------------------------------------------------------------------------
def _pool_inputs(rng, short=False):
    b, n, d = int(rng.integers(3, 5)), int(rng.integers(5, 9)), int(rng.integers(5, 10))
    lengths = _lengths(rng, b, n)
    if short:
        lengths[rng.integers(b)] = 1                              # a one-token sentence
    mask = _mask(lengths, n)
    states = rng.normal(0.5, 2.0, (b, n, d))
    states = np.where(mask[..., None] == 1, states, rng.normal(0, 30.0, (b, n, d)))   # loud pads
    return {"states": states, "attention_mask": mask}


CASES["pretrained.sentence_embeddings"] = Case(
    _pool_inputs, sentence_embeddings, ("embeddings",),
    description="padded batch with loud pads, one full-length sentence")
CASES["pretrained.sentence_embeddings_short"] = Case(
    lambda rng: _pool_inputs(rng, short=True), sentence_embeddings, ("embeddings",),
    description="a one-token sentence among longer ones")


# ---------------------------------------------------------------------------
# pattern_score(weights, target, query_mask)
# Rows are softmax distributions over each sentence's real keys; targets have 1-2 keys per query
# (sum vs max vs mean over keys differ); the counted queries differ in number between sentences
# (a mean of per-sentence means differs from the pooled mean) and exclude some real queries
# (ignoring query_mask shows); targets are not symmetric (summing over the query axis shows).
# ---------------------------------------------------------------------------
def _pattern_inputs(rng, padded=False):
    L, b, h = int(rng.integers(2, 4)), int(rng.integers(2, 4)), int(rng.integers(2, 5))
    n = int(rng.integers(5, 8))
    lengths = _lengths(rng, b, n) if padded else np.full(b, n)
    lengths = np.maximum(lengths, 3)
    real = _mask(lengths, n).astype(bool)                       # (b, n)
    scores = rng.normal(0, 2, (L, b, h, n, n))
    scores[:, 0, :, 0, 0] = scores[:, 0, :, 0].max(axis=-1) + 12.0   # saturated rows: > 0.999 on key 0
    scores = np.where(real[None, :, None, None, :], scores, -np.inf)
    weights = np.exp(scores - scores.max(axis=-1, keepdims=True))
    weights /= weights.sum(axis=-1, keepdims=True)
    target = (rng.random((b, n, n)) < 0.25) & real[:, None, :]
    rows = np.arange(n)
    target[:, rows, (rows + 1) % n] |= real[:, (rows + 1) % n]  # most queries have at least one target
    query_mask = real & (rng.random((b, n)) < 0.7)
    query_mask[0, :] = real[0]                                   # sentence 0: every real query counts
    query_mask[-1, :] = False
    query_mask[-1, 0] = True                                     # last sentence: a single counted query
    return {"weights": weights, "target": target, "query_mask": query_mask}


CASES["pretrained.pattern_score"] = Case(
    _pattern_inputs, pattern_score, ("scores",),
    description="(layers, batch, heads, n, n) softmax rows, random targets, uneven counted queries")
CASES["pretrained.pattern_score_padded"] = Case(
    lambda rng: _pattern_inputs(rng, padded=True), pattern_score, ("scores",),
    description="padded batch: pads get no weight and are never counted")


# ---------------------------------------------------------------------------
# encode_long_document(token_ids, window, stride, encode_window, cls_id, sep_id)
# A callable cannot be passed to the sandbox, so the case holds the tables of a stand-in encoder and
# the hidden test builds it (the same few lines as fake_window_encoder below). Its state for a real
# token at column p of a row with L real tokens is T[id] + mean of C over the row's real ids + A[p]
# + B[L - 1 - p]: it depends on the position from both ends (a state taken from the wrong window,
# an averaged one, a column off by one all show), on the window's content ([CLS]/[SEP] missing
# shows) and on the mask (padding without mask 0 shows); padded positions come out as 1e3.
# Five layouts, one per case: overlapping windows with ties and a shorter last window (window +
# stride odd, window != 2 stride so that reading stride as the overlap shows), n - window a multiple
# of stride (no window after the one that reaches the end), n = window + 1, a document of one
# window (n <= window), and chunks (stride = window) with a short last chunk.
# ---------------------------------------------------------------------------
def fake_window_encoder(T, C, A, B):
    """A stand-in for the model: ``(input_ids (b, m), attention_mask (b, m)) -> states (b, m, d)``."""
    def encode_window(input_ids, attention_mask):
        ids, real = np.asarray(input_ids), np.asarray(attention_mask) != 0      # (b, m) each
        if ids.ndim != 2 or real.shape != ids.shape:
            raise ValueError(f"expected input_ids and attention_mask (b, m), got {ids.shape} and {real.shape}")
        length = real.sum(axis=1, keepdims=True)                                # (b, 1) real tokens per row
        p = np.arange(ids.shape[1])[None, :]                                    # (1, m) column
        context = (C[ids] * real[..., None]).sum(axis=1, keepdims=True) / length[..., None]   # (b, 1, d)
        states = T[ids] + context + A[p] + B[np.maximum(length - 1 - p, 0)]     # (b, m, d)
        return np.where(real[..., None], states, 1e3)
    return encode_window


def _long_inputs(rng, layout):
    vocab, d = int(rng.integers(12, 21)), int(rng.integers(3, 6))
    cls_id, sep_id = (int(v) for v in rng.choice(vocab, size=2, replace=False))
    window = int(rng.integers(5, 11))
    if layout == "overlap":
        stride = int(rng.choice([s for s in range(2, window) if (window + s) % 2 == 1 and window != 2 * s]))
        n = window + int(rng.integers(2, 4)) * stride + int(rng.integers(1, stride))   # last window shorter
    elif layout == "exact":
        stride = int(rng.integers(1, window))
        n = window + int(rng.integers(1, 4)) * stride
    elif layout == "one_over":
        stride, n = int(rng.integers(1, window + 1)), window + 1
    elif layout == "one_window":
        stride, n = int(rng.integers(1, window + 1)), int(rng.integers(1, window + 1))
    else:                                                                       # chunks
        stride = window
        n = window * int(rng.integers(2, 4)) + int(rng.integers(1, window))
    words = np.setdiff1d(np.arange(vocab), [cls_id, sep_id])
    return {
        "token_ids": rng.choice(words, size=n), "window": window, "stride": stride,
        "cls_id": cls_id, "sep_id": sep_id,
        "T": rng.normal(0, 1, (vocab, d)), "C": rng.normal(0, 1, (vocab, d)),
        "A": rng.normal(0, 1, (window + 2, d)), "B": rng.normal(0, 1, (window + 2, d)),
    }


def _long_ref(token_ids, window, stride, cls_id, sep_id, T, C, A, B):
    return encode_long_document(token_ids, window, stride, fake_window_encoder(T, C, A, B), cls_id, sep_id)


LONG_LAYOUTS = {
    "overlap": "stride < window, window + stride odd (ties), the last window shorter",
    "exact": "n - window a multiple of stride: the last window is full",
    "one_over": "n = window + 1",
    "one_window": "n <= window: one window, the model's ordinary encoding",
    "chunks": "stride = window, a short last chunk",
}
for _layout, _description in LONG_LAYOUTS.items():
    CASES[f"pretrained.long_document_{_layout}"] = Case(
        lambda rng, layout=_layout: _long_inputs(rng, layout), _long_ref, ("states", "embedding"),
        description=_description)


# What each exercise's docstring promises, checked by tests/test_hidden_case_coverage.py.
COVERAGE = {
    "embed_tokens": {"cases": ("pretrained.embed_tokens", "pretrained.embed_tokens_segments"), "requires": {"rank2"}},
    "encoder_layer": {"cases": ("pretrained.encoder_layer", "pretrained.encoder_layer_padded"),
                      "requires": {"rank3", "padding"}},
    "sentence_embeddings": {"cases": ("pretrained.sentence_embeddings", "pretrained.sentence_embeddings_short"),
                            "requires": {"rank3", "padding"}},
    "pattern_score": {"cases": ("pretrained.pattern_score", "pretrained.pattern_score_padded"),
                      "requires": {"rank5", "saturated"}},
    # The five layouts are asserted per case by tests/test_pretrained_minilm.py (no generic situation fits).
    "encode_long_document": {"cases": tuple(f"pretrained.long_document_{k}" for k in LONG_LAYOUTS),
                             "requires": set()},
}

# The package computes sentence_embeddings as l2_normalize(mean_pool(...)): with those two the
# exercise is one line, so they count as its twins.
# block_from_weights is encoder_layer without its last line (it loads a checkpoint layer into the course's
# TransformerEncoderBlock, as the exercise does): it counts as encoder_layer's twin.
TWINS = {"sentence_embeddings": ("mean_pool", "l2_normalize"), "encoder_layer": ("block_from_weights",)}
