"""Plausible wrong implementations that the hidden tests of notebook 03 must catch.

Each entry maps a description to {solution grade_id: replacement source}.
"""

MUTANTS = {
    # -- split_heads / merge_heads ----------------------------------------------------
    "split by a reshape without the transpose": {"split_heads": '''
def split_heads(x, n_heads):
    *lead, n, d_model = x.shape
    return x.reshape(*lead, n_heads, n, d_model // n_heads)
'''},
    "split that only works without a batch axis": {"split_heads": '''
def split_heads(x, n_heads):
    n, d_model = x.shape[-2:]
    return x.reshape(n, n_heads, d_model // n_heads).transpose(1, 0, 2)
'''},
    "split with interleaved columns (head i gets columns i, i + h, ...)": {"split_heads": '''
def split_heads(x, n_heads):
    *lead, n, d_model = x.shape
    x = x.reshape(*lead, n, d_model // n_heads, n_heads)      # (..., n, d_head, h)
    return np.moveaxis(x, -1, -3)                             # (..., h, n, d_head)
'''},
    "merge by a reshape without the transpose": {"merge_heads": '''
def merge_heads(x):
    *lead, h, n, d_head = x.shape
    return x.reshape(*lead, n, h * d_head)
'''},
    "merge with the heads interleaved (wrong concatenation order)": {"merge_heads": '''
def merge_heads(x):
    *lead, h, n, d_head = x.shape
    x = np.moveaxis(x, -3, -1)                                # (..., n, d_head, h)
    return x.reshape(*lead, n, h * d_head)
'''},
    "merge with the heads in reverse order": {"merge_heads": '''
def merge_heads(x):
    *lead, h, n, d_head = x.shape
    return np.concatenate([x[..., i, :, :] for i in reversed(range(h))], axis=-1)
'''},
    # -- multi_head_attention ---------------------------------------------------------
    "attention scaled by sqrt(d_model) instead of sqrt(d_head)": {"multi_head_attention": '''
def multi_head_attention(X, W_Q, W_K, W_V, W_O, n_heads, mask=None):
    d_model = X.shape[-1]
    Q, K, V = (split_heads(X @ W, n_heads) for W in (W_Q, W_K, W_V))
    scores = Q @ np.swapaxes(K, -1, -2) / np.sqrt(d_model)
    if mask is not None:
        scores = np.where(mask, scores, -np.inf)
    e = np.exp(scores - scores.max(axis=-1, keepdims=True))
    w = e / e.sum(axis=-1, keepdims=True)
    return merge_heads(w @ V) @ W_O, w
'''},
    "attention without W_O": {"multi_head_attention": '''
def multi_head_attention(X, W_Q, W_K, W_V, W_O, n_heads, mask=None):
    Q, K, V = (split_heads(X @ W, n_heads) for W in (W_Q, W_K, W_V))
    heads, w = scaled_dot_product_attention(Q, K, V, mask=mask)
    return merge_heads(heads), w
'''},
    "heads concatenated in reverse order before W_O": {"multi_head_attention": '''
def multi_head_attention(X, W_Q, W_K, W_V, W_O, n_heads, mask=None):
    Q, K, V = (split_heads(X @ W, n_heads) for W in (W_Q, W_K, W_V))
    heads, w = scaled_dot_product_attention(Q, K, V, mask=mask)
    return merge_heads(heads[..., ::-1, :, :]) @ W_O, w
'''},
    "W_O applied on the left (W_O @ concat^T)": {"multi_head_attention": '''
def multi_head_attention(X, W_Q, W_K, W_V, W_O, n_heads, mask=None):
    Q, K, V = (split_heads(X @ W, n_heads) for W in (W_Q, W_K, W_V))
    heads, w = scaled_dot_product_attention(Q, K, V, mask=mask)
    return merge_heads(heads) @ W_O.T, w
'''},
    "the mask is ignored": {"multi_head_attention": '''
def multi_head_attention(X, W_Q, W_K, W_V, W_O, n_heads, mask=None):
    Q, K, V = (split_heads(X @ W, n_heads) for W in (W_Q, W_K, W_V))
    heads, w = scaled_dot_product_attention(Q, K, V)
    return merge_heads(heads) @ W_O, w
'''},
    "weights averaged over the heads": {"multi_head_attention": '''
def multi_head_attention(X, W_Q, W_K, W_V, W_O, n_heads, mask=None):
    Q, K, V = (split_heads(X @ W, n_heads) for W in (W_Q, W_K, W_V))
    heads, w = scaled_dot_product_attention(Q, K, V, mask=mask)
    return merge_heads(heads) @ W_O, w.mean(axis=-3)
'''},
    "one head of width d_model (n_heads ignored)": {"multi_head_attention": '''
def multi_head_attention(X, W_Q, W_K, W_V, W_O, n_heads, mask=None):
    out, w = scaled_dot_product_attention(X @ W_Q, X @ W_K, X @ W_V, mask=mask)
    return out @ W_O, np.repeat(w[..., None, :, :], n_heads, axis=-3)
'''},
    # -- head_bilinear_forms ----------------------------------------------------------
    "bilinear forms scaled by sqrt(d_model) instead of sqrt(d_head)": {"head_bilinear_forms": '''
def head_bilinear_forms(W_Q, W_K, n_heads):
    q, k = split_heads(W_Q, n_heads), split_heads(W_K, n_heads)
    return q @ np.swapaxes(k, -1, -2) / np.sqrt(W_Q.shape[-1])
'''},
    "bilinear forms without the scale": {"head_bilinear_forms": '''
def head_bilinear_forms(W_Q, W_K, n_heads):
    q, k = split_heads(W_Q, n_heads), split_heads(W_K, n_heads)
    return q @ np.swapaxes(k, -1, -2)
'''},
    "bilinear forms from a plain reshape of W (not column blocks)": {"head_bilinear_forms": '''
def head_bilinear_forms(W_Q, W_K, n_heads):
    d_model = W_Q.shape[-1]
    d_head = d_model // n_heads
    q, k = W_Q.reshape(n_heads, d_model, d_head), W_K.reshape(n_heads, d_model, d_head)
    return q @ np.swapaxes(k, -1, -2) / np.sqrt(d_head)
'''},
    "bilinear forms transposed (W_K W_Q^T: keys on the query side)": {"head_bilinear_forms": '''
def head_bilinear_forms(W_Q, W_K, n_heads):
    q, k = split_heads(W_Q, n_heads), split_heads(W_K, n_heads)
    return k @ np.swapaxes(q, -1, -2) / np.sqrt(q.shape[-1])
'''},
    "bilinear forms from row blocks of W (W^(i) = W[rows_i, :])": {"head_bilinear_forms": '''
def head_bilinear_forms(W_Q, W_K, n_heads):
    d_model = W_Q.shape[-1]
    d_head = d_model // n_heads
    q, k = W_Q.reshape(n_heads, d_head, d_model), W_K.reshape(n_heads, d_head, d_model)
    return np.swapaxes(q, -1, -2) @ k / np.sqrt(d_head)
'''},
    "every head given the full W_Q W_K^T": {"head_bilinear_forms": '''
def head_bilinear_forms(W_Q, W_K, n_heads):
    d_head = W_Q.shape[-1] // n_heads
    return np.repeat((W_Q @ W_K.T / np.sqrt(d_head))[None], n_heads, axis=0)
'''},
    "bilinear forms with interleaved columns (head i gets columns i, i + h, ...)": {"head_bilinear_forms": '''
def head_bilinear_forms(W_Q, W_K, n_heads):
    q, k = W_Q[:, None, :].reshape(1, W_Q.shape[0], -1, n_heads), W_K.reshape(W_K.shape[0], -1, n_heads)
    q = np.moveaxis(q[0], -1, 0)                           # (h, d_model, d_head)
    k = np.moveaxis(k, -1, 0)
    return q @ np.swapaxes(k, -1, -2) / np.sqrt(q.shape[-1])
'''},
}
