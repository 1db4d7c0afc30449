"""The all-MiniLM-L6-v2 forward pass, fast: the same model as ``transformer_course.pretrained``.

:class:`FastSentenceEncoder` is a :class:`~transformer_course.pretrained.SentenceEncoder` (same
loading, tokenizer, weights and results up to float32 rounding) whose forward pass

* runs parts of the batch in parallel Python threads, with OpenBLAS held at one thread meanwhile,
  so the element-wise steps (GELU, layer norms, softmax) use every core, not only the products;
* multiplies every token of every sentence as one 2-D product, ``(batch·n, d) @ W`` (a stack of
  small ``(n, d)`` products is several times slower), adding biases and residuals in place;
* computes the float32 GELU with an erf accurate to float32 rounding instead of SciPy's
  double-precision one (the slowest step of the readable forward pass).

``bench/minilm_speed.py`` times it against PyTorch (notebook 07's target: at most 1.5x);
``tests/test_pretrained_minilm.py`` checks it against the readable encoder and against PyTorch.
"""

from __future__ import annotations

import concurrent.futures

import numpy as np

from transformer_course.activations import gelu
from transformer_course.attention import scaled_dot_product_attention
from transformer_course.multihead import merge_heads, split_heads
from transformer_course.normalization import layer_norm
from transformer_course.pretrained import SentenceEncoder, embed_tokens

from ._threads import _blas_pinned, _effective_threads, _executor

__all__ = ["FastSentenceEncoder"]


class FastSentenceEncoder(SentenceEncoder):
    """:class:`~transformer_course.pretrained.SentenceEncoder` with a threaded, fused forward pass."""

    def token_states(self, input_ids, attention_mask=None, token_type_ids=None, *, return_weights=False,
                     threads=None):
        """As :meth:`SentenceEncoder.token_states`; ``threads``: how many parts of the batch run at once
        (default: as many as OpenBLAS has threads). Sentences never interact, so the result is the same."""
        input_ids, real, token_type_ids = self._check_batch(input_ids, attention_mask, token_type_ids)
        threads = min(_effective_threads(threads), len(input_ids))
        if threads <= 1:
            x, all_weights = self._forward(input_ids, real, token_type_ids, return_weights)
        else:
            parts = np.array_split(np.arange(len(input_ids)), threads)        # contiguous sentences
            with _blas_pinned(threads):
                pool = _executor(threads - 1)
                futures = [pool.submit(self._forward, input_ids[p], real[p], token_type_ids[p], return_weights)
                           for p in parts[1:]]
                try:                                                          # the caller does part 0
                    first = self._forward(input_ids[parts[0]], real[parts[0]], token_type_ids[parts[0]],
                                          return_weights)
                finally:
                    concurrent.futures.wait(futures)                          # never leave a part running
                results = [first] + [f.result() for f in futures]
            x = np.concatenate([r[0] for r in results])                       # (batch, n, d)
            all_weights = [np.concatenate([r[1][layer] for r in results]) for layer in range(len(results[0][1]))]
        return (x, all_weights) if return_weights else x

    def _forward(self, input_ids, real, token_type_ids, return_weights):
        x = embed_tokens(input_ids, token_type_ids, self.word, self.position, self.token_type,
                         self.emb_gamma, self.emb_beta, self.config.eps)      # (batch, n, d)
        all_weights = []
        for block in self.blocks:
            x, w = _post_ln_block(block, x, real)
            if return_weights:
                all_weights.append(w)
        return x, all_weights


def _post_ln_block(block, x, real):
    """``TransformerEncoderBlock.__call__`` (post-LN, key padding mask ``real``), fused."""
    mha, ffn, eps = block.attention, block.feed_forward, block.eps
    batch, n, d = x.shape
    rows = x.reshape(-1, d)                                                   # (batch·n, d)
    q, k, v = (split_heads(_affine(rows, W, b).reshape(batch, n, d), mha.n_heads)   # (batch, h, n, d_head)
               for W, b in ((mha.W_Q, mha.b_Q), (mha.W_K, mha.b_K), (mha.W_V, mha.b_V)))
    heads, weights = scaled_dot_product_attention(q, k, v, mask=real[:, None, None, :])
    attended = _affine(merge_heads(heads).reshape(-1, d), mha.W_O, mha.b_O)   # (batch·n, d)
    attended += rows                                                          # residual, in place
    z = layer_norm(attended, block.ln1_gamma, block.ln1_beta, eps)            # (batch·n, d)
    hidden = _affine(z, ffn.W_1, ffn.b_1)                                     # (batch·n, d_ff)
    hidden = _gelu_float32_inplace(hidden) if hidden.dtype == np.float32 else gelu(hidden)
    out = _affine(hidden, ffn.W_2, ffn.b_2)                                   # (batch·n, d)
    out += z
    return layer_norm(out, block.ln2_gamma, block.ln2_beta, eps).reshape(batch, n, d), weights


def _affine(x, W, b):
    """``x @ W + b``, adding ``b`` in place when that keeps the dtype."""
    y = x @ W
    if b is None:
        return y
    if np.result_type(y, b) == y.dtype:
        y += b
        return y
    return y + b


# The exact GELU, 0.5 x (1 + erf(x / sqrt 2)), for float32 hidden layers. SciPy's erf costs ~20 ns per
# element (it works in double precision), which made it the slowest step of a real model's forward pass.
# In float32, erf is evaluated here with Abramowitz & Stegun 7.1.26,
#     erf(z) = 1 - t (a1 + a2 t + a3 t^2 + a4 t^3 + a5 t^4) exp(-z^2),   t = 1 / (1 + p z),   z >= 0,
# whose error (at most 1.5e-7) is about float32's resolution of 1 + erf (6e-8 to 1.2e-7): the GELU is off
# by at most ~2e-7 |x| (tests/test_pretrained_minilm.py checks it; PyTorch's own float32 GELU is off by
# ~1e-6). float64 uses SciPy's erf (transformer_course.gelu), exact to double rounding.
# The array is processed in place, in pieces of ~32k elements so that the temporaries stay in the CPU
# cache: ~22 cheap passes instead of one slow one.
_AS_P = 0.3275911
_AS_A = (0.254829592, -0.284496736, 1.421413741, -1.453152027, 1.061405429)
_PIECE = 32768


def _gelu_float32_inplace(h):
    """``h <- 0.5 h (1 + erf(h / sqrt 2))`` for a float32 ``(rows, width)`` array; returns ``h``."""
    f = np.float32
    rows, width = h.shape
    step = max(1, _PIECE // width)
    z2, t, y = (np.empty((min(step, rows), width), dtype=f) for _ in range(3))
    for start in range(0, rows, step):
        x = h[start:start + step]                              # (step, width), a view
        n = x.shape[0]
        zz, tt, yy = z2[:n], t[:n], y[:n]
        np.multiply(x, x, out=zz)
        zz *= f(-0.5)                                          # -z^2, z = |x| / sqrt 2
        np.abs(x, out=tt)
        tt *= f(_AS_P / np.sqrt(2.0))
        tt += f(1.0)
        np.reciprocal(tt, out=tt)                              # t = 1 / (1 + p z)
        np.multiply(tt, f(-_AS_A[4]), out=yy)
        for a in _AS_A[3::-1]:                                 # Horner: yy = -t (a1 + a2 t + ... + a5 t^4)
            yy += f(-a)
            yy *= tt
        np.exp(zz, out=zz)
        yy *= zz
        yy += f(1.0)                                           # erf(z)
        np.copysign(yy, x, out=yy)                             # erf(x / sqrt 2)
        yy += f(1.0)
        x *= yy
        x *= f(0.5)
    return h
