"""A five-minute tour of attention, printed: ``python -m transformer_course``.

Each demo prints what it shows and asserts it, so the tour cannot claim what it
does not compute. ``tests/test_tour.py`` runs it and checks the claims again.
"""

from __future__ import annotations

import numpy as np

from . import toy
from .attention import scaled_dot_product_attention
from .masks import causal_mask
from .multihead import MultiHeadAttention
from .positional import positional_encoding
from .softmax import softmax

WIDTH = 72


def banner(title: str) -> None:
    print("\n" + "=" * WIDTH + "\n" + title + "\n" + "=" * WIDTH)


def demo_soft_lookup() -> dict:
    banner("1. Attention is a soft dictionary lookup")
    words = ["the", "cat", "ate", "food", "it"]
    X = toy.embed(words)
    print("tokens:", words, "  dims: [animal, action, food, pronoun]")
    _, w = scaled_dot_product_attention(X[-1:], X, X)
    print('query "it" -> weights:', dict(zip(words, np.round(w[0], 3).tolist())))
    _, w_sharp = scaled_dot_product_attention(16 * X[1:2], X, X)
    print('query 16 * "cat" -> weight on cat: %.4f' % w_sharp[0, 1])
    assert np.argmax(w[0]) == 4 and w[0].max() < 0.3, "a pronoun query spreads its weight"
    assert w_sharp[0, 1] > 0.99, "a sharp query retrieves one key"
    print("claim: a soft query spreads weight (max %.2f < 0.30); a sharp one retrieves (%.4f > 0.99)"
          % (w[0].max(), w_sharp[0, 1]))
    return {"soft_max_weight": float(w[0].max()), "sharp_weight": float(w_sharp[0, 1])}


def demo_why_scale() -> dict:
    banner("2. Why divide by sqrt(d_k)")
    rng = np.random.default_rng(1)
    result = {}
    for d_k in (4, 64, 512):
        q, k = rng.normal(size=(2000, d_k)), rng.normal(size=(2000, d_k))
        dots = np.einsum("nd,nd->n", q, k)
        raw = (q[:1] @ k[:16].T)[0]
        max_raw, max_scaled = softmax(raw).max(), softmax(raw / np.sqrt(d_k)).max()
        print(f"d_k={d_k:4d}  Var(q.k)={dots.var():7.1f}  Var(q.k/sqrt d_k)={(dots / np.sqrt(d_k)).var():5.2f}"
              f"  max weight raw={max_raw:.3f} scaled={max_scaled:.3f}")
        assert abs(dots.var() / d_k - 1) < 0.15 and abs((dots / np.sqrt(d_k)).var() - 1) < 0.15
        result[d_k] = (float(dots.var()), float(max_raw), float(max_scaled))
    assert result[512][1] > 0.9 > result[512][2]
    print("claim: Var(q.k) ~ d_k, scaled ~ 1; unscaled softmax saturates at d_k=512 (max > 0.9), scaled does not")
    return result


def demo_order_blind() -> dict:
    banner("3. Without positional encoding attention is blind to order")
    rng = np.random.default_rng(7)
    W_Q, W_K, W_V = (rng.normal(0, 0.5, (4, 4)) for _ in range(3))

    def attend(X):
        return scaled_dot_product_attention(X @ W_Q, X @ W_K, X @ W_V)[0]

    a, b = toy.embed(["cat", "ate", "food"]), toy.embed(["food", "ate", "cat"])
    perm = [2, 1, 0]                               # b is a with rows reversed
    same_without = bool(np.allclose(attend(b), attend(a)[perm]))
    pe = positional_encoding(3, 4)
    same_with = bool(np.allclose(attend(b + pe), attend(a + pe)[perm]))
    print("'cat ate food' vs 'food ate cat', outputs equal up to the word order:")
    print(f"  without positional encoding: {same_without}")
    print(f"  with positional encoding:    {same_with}")
    assert same_without and not same_with
    print("claim: attention is permutation-equivariant; adding PE breaks the tie")
    return {"same_without_pe": same_without, "same_with_pe": same_with}


def demo_causal_mask() -> dict:
    banner("4. The causal mask: no token reads the future")
    rng = np.random.default_rng(3)
    words = ["the", "cat", "ate", "food", "it"]
    X = toy.embed(words) + positional_encoding(5, 4)
    W_Q, W_K, W_V = (rng.normal(0, 0.5, (4, 4)) for _ in range(3))
    out, w = scaled_dot_product_attention(X @ W_Q, X @ W_K, X @ W_V, mask=causal_mask(5))
    print("weights (row = query):\n", np.round(w, 3))
    X2 = X.copy()
    X2[3:] += 10.0                                 # change the future of positions 0..2
    out2, _ = scaled_dot_product_attention(X2 @ W_Q, X2 @ W_K, X2 @ W_V, mask=causal_mask(5))
    upper = float(np.abs(np.triu(w, 1)).max())
    unchanged = bool(np.allclose(out[:3], out2[:3]))
    assert upper == 0.0 and unchanged
    print(f"claim: upper triangle is exactly {upper}; changing tokens 3..4 leaves outputs 0..2 unchanged: {unchanged}")
    return {"upper_max": upper, "past_unchanged": unchanged}


def demo_multihead() -> dict:
    banner("5. Multi-head: several attention patterns at once, shape unchanged")
    rng = np.random.default_rng(5)
    words = ["the", "cat", "ate", "food", "it"]
    d_model, n_heads = 8, 4
    X = np.pad(toy.embed(words), ((0, 0), (0, d_model - 4))) + positional_encoding(5, d_model)
    mha = MultiHeadAttention(d_model, n_heads, rng=rng)
    out, w = mha(X, mask=causal_mask(5))
    for h in range(n_heads):
        links = [words[int(np.argmax(row))] for row in w[h]]
        print(f"head {h}: strongest link per query {dict(zip(words, links))}")
    distinct = len({tuple(np.round(w[h], 6).ravel()) for h in range(n_heads)})
    assert out.shape == X.shape and distinct == n_heads
    print(f"claim: output shape {out.shape} == input shape {X.shape}; {distinct} distinct head patterns;"
          f" {mha.n_parameters} parameters = 4*d_model^2 + 4*d_model")
    return {"shape_in": X.shape, "shape_out": out.shape, "distinct_heads": distinct}


def main() -> int:
    np.set_printoptions(precision=3, suppress=True)
    demo_soft_lookup()
    demo_why_scale()
    demo_order_blind()
    demo_causal_mask()
    demo_multihead()
    banner("The whole paper, compressed")
    print("""  attention    softmax(Q K^T / sqrt(d_k)) V: a soft dictionary lookup
  self-attn    Q, K, V are three learned projections of the same tokens
  multi-head   h attentions on slices of d_model, concatenated, mixed by W_O
  positions    sinusoids added to the embeddings; attention alone ignores order
  mask         lower-triangular: a decoder never reads the future
  block        attention -> add & norm -> feed-forward -> add & norm; stack N of them""")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
