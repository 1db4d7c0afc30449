"""Plausible wrong implementations that the hidden tests of notebook 05 must catch.

Each entry maps a description to {solution grade_id: replacement source}.
"""

_BLOCK_HEAD = '''
def encoder_block(x, params, n_heads, norm_first=False):
    p = params

    def self_attention(h):
        q = split_heads(h @ p["W_Q"] + p["b_Q"], n_heads)
        k = split_heads(h @ p["W_K"] + p["b_K"], n_heads)
        v = split_heads(h @ p["W_V"] + p["b_V"], n_heads)
        heads, weights = scaled_dot_product_attention(q, k, v)
        return merge_heads(heads) @ p["W_O"] + p["b_O"], weights

    def ln1(h):
        return layer_norm(h, p["ln1_gamma"], p["ln1_beta"])

    def ln2(h):
        return layer_norm(h, p["ln2_gamma"], p["ln2_beta"])

    def ffn(h):
        return feed_forward(h, p["W_1"], p["b_1"], p["W_2"], p["b_2"])
'''

_PRE_LN = '''
    if norm_first:
        attended, weights = self_attention(ln1(x))
        z = x + attended
        return z + ffn(ln2(z)), weights
'''

MUTANTS = {
    "layer norm with the unbiased variance (ddof=1)": {"layer_norm": '''
def layer_norm(x, gamma, beta, eps=1e-5):
    mean = x.mean(axis=-1, keepdims=True)
    var = x.var(axis=-1, keepdims=True, ddof=1)
    return gamma * (x - mean) / np.sqrt(var + eps) + beta
'''},
    "layer norm over the wrong axis (axis 0)": {"layer_norm": '''
def layer_norm(x, gamma, beta, eps=1e-5):
    mean = x.mean(axis=0, keepdims=True)
    var = x.var(axis=0, keepdims=True)
    return gamma * (x - mean) / np.sqrt(var + eps) + beta
'''},
    "layer norm over the token axis (-2)": {"layer_norm": '''
def layer_norm(x, gamma, beta, eps=1e-5):
    mean = x.mean(axis=-2, keepdims=True)
    var = x.var(axis=-2, keepdims=True)
    return gamma * (x - mean) / np.sqrt(var + eps) + beta
'''},
    "layer norm with eps outside the square root": {"layer_norm": '''
def layer_norm(x, gamma, beta, eps=1e-5):
    mean = x.mean(axis=-1, keepdims=True)
    std = x.std(axis=-1, keepdims=True)
    return gamma * (x - mean) / (std + eps) + beta
'''},
    "layer norm ignoring eps": {"layer_norm": '''
def layer_norm(x, gamma, beta, eps=1e-5):
    mean = x.mean(axis=-1, keepdims=True)
    return gamma * (x - mean) / x.std(axis=-1, keepdims=True) + beta
'''},
    "layer norm with gamma and beta swapped": {"layer_norm": '''
def layer_norm(x, gamma, beta, eps=1e-5):
    mean = x.mean(axis=-1, keepdims=True)
    var = x.var(axis=-1, keepdims=True)
    return beta * (x - mean) / np.sqrt(var + eps) + gamma
'''},
    "feed-forward with ReLU after the second layer": {"feed_forward": '''
def feed_forward(x, W_1, b_1, W_2, b_2):
    return np.maximum(0.0, (x @ W_1 + b_1) @ W_2 + b_2)
'''},
    "feed-forward with ReLU before the first bias": {"feed_forward": '''
def feed_forward(x, W_1, b_1, W_2, b_2):
    return (np.maximum(0.0, x @ W_1) + b_1) @ W_2 + b_2
'''},
    "feed-forward without ReLU": {"feed_forward": '''
def feed_forward(x, W_1, b_1, W_2, b_2):
    return (x @ W_1 + b_1) @ W_2 + b_2
'''},
    "encoder block without the residual connections": {"encoder_block": _BLOCK_HEAD + '''
    if norm_first:
        attended, weights = self_attention(ln1(x))
        z = attended
        return ffn(ln2(z)), weights
    attended, weights = self_attention(x)
    z = ln1(attended)
    return ln2(ffn(z)), weights
'''},
    "post-LN asked but LN applied before the sub-layers (always pre-LN)": {"encoder_block": _BLOCK_HEAD + '''
    attended, weights = self_attention(ln1(x))
    z = x + attended
    return z + ffn(ln2(z)), weights
'''},
    "norm_first ignored (always post-LN)": {"encoder_block": _BLOCK_HEAD + '''
    attended, weights = self_attention(x)
    z = ln1(x + attended)
    return ln2(z + ffn(z)), weights
'''},
    "post-LN residual taken from before the first norm (x instead of z)": {"encoder_block": _BLOCK_HEAD + _PRE_LN + '''
    attended, weights = self_attention(x)
    z = ln1(x + attended)
    return ln2(x + ffn(z)), weights
'''},
    "ln1 and ln2 parameters swapped": {"encoder_block": _BLOCK_HEAD + _PRE_LN.replace("ln1(", "LNA(").replace(
        "ln2(", "ln1(").replace("LNA(", "ln2(") + '''
    attended, weights = self_attention(x)
    z = ln2(x + attended)
    return ln1(z + ffn(z)), weights
'''},
    "pre-LN with the final sub-layer input not normalised": {"encoder_block": _BLOCK_HEAD + '''
    if norm_first:
        attended, weights = self_attention(ln1(x))
        z = x + attended
        return z + ffn(z), weights
    attended, weights = self_attention(x)
    z = ln1(x + attended)
    return ln2(z + ffn(z)), weights
'''},
}

MUTANTS.update({
    "fold: gamma on the columns of W (W * gamma[None, :])": {"fold_layer_norm": '''
def fold_layer_norm(gamma, beta, W, b):
    return W * gamma[None, :], beta @ W + b
'''},
    "fold: beta added to the bias without passing through W": {"fold_layer_norm": '''
def fold_layer_norm(gamma, beta, W, b):
    return gamma[:, None] * W, b + beta
'''},
    "fold: gamma applied to beta too (b' = beta @ W' + b)": {"fold_layer_norm": '''
def fold_layer_norm(gamma, beta, W, b):
    W_folded = gamma[:, None] * W
    return W_folded, beta @ W_folded + b
'''},
    "fold: the old bias dropped (b' = beta @ W)": {"fold_layer_norm": '''
def fold_layer_norm(gamma, beta, W, b):
    return gamma[:, None] * W, beta @ W
'''},
    "fold: beta dropped (b' = b)": {"fold_layer_norm": '''
def fold_layer_norm(gamma, beta, W, b):
    return gamma[:, None] * W, b
'''},
    "fold: divided by gamma instead of multiplied (undoing the norm)": {"fold_layer_norm": '''
def fold_layer_norm(gamma, beta, W, b):
    return W / gamma[:, None], beta @ W + b
'''},
    "fold: W @ diag(gamma) (the scale after the map)": {"fold_layer_norm": '''
def fold_layer_norm(gamma, beta, W, b):
    return W @ np.diag(gamma), beta @ W + b
'''},
    "fold: W unchanged, only the bias folded": {"fold_layer_norm": '''
def fold_layer_norm(gamma, beta, W, b):
    return W, beta @ W + b
'''},
})

# Correct implementations written differently: the hidden tests must accept them
# (tests/test_encoder.py runs them through the hidden tests).
ALTERNATIVES = {
    "fold: diag(gamma) @ W and a sum over rows for the bias": {"fold_layer_norm": '''
def fold_layer_norm(gamma, beta, W, b):
    return np.diag(gamma) @ W, (beta[:, None] * W).sum(axis=0) + b
'''},
    "fold: W' with its column means removed (normalised tokens sum to 0 and cannot see them)": {"fold_layer_norm": '''
def fold_layer_norm(gamma, beta, W, b):
    W_folded = np.einsum("j,jk->jk", gamma, W)
    return W_folded - W_folded.mean(axis=0, keepdims=True), beta @ W + b
'''},
}
