"""Plausible wrong implementations that the hidden tests of notebook 10 must catch.

Each entry maps a description to {solution grade_id: replacement source}. The classic bugs of the
issue are here: a missing 1/sqrt(d_k), the transpose of dK, the mean terms of the layer-norm gradient,
a mask that lets gradient through blocked positions.
"""

MUTANTS = {
    # -- softmax_backward -------------------------------------------------------------
    "softmax backward p * g (the <g, p> term dropped)": {"softmax_backward": '''
def softmax_backward(p, g):
    return p * g
'''},
    "softmax backward with <g, p> summed over the wrong axis": {"softmax_backward": '''
def softmax_backward(p, g):
    return p * (g - np.sum(g * p, axis=-2, keepdims=True))
'''},
    "softmax backward subtracting sum(g) instead of <g, p>": {"softmax_backward": '''
def softmax_backward(p, g):
    return p * (g - np.sum(g, axis=-1, keepdims=True))
'''},
    "softmax backward (1 - p) g (diagonal of the Jacobian only)": {"softmax_backward": '''
def softmax_backward(p, g):
    return p * (1 - p) * g
'''},
    "softmax backward for a single row only (np.diag / np.outer)": {"softmax_backward": '''
def softmax_backward(p, g):
    J = np.diag(p.reshape(-1)) - np.outer(p.reshape(-1), p.reshape(-1))
    return (J @ g.reshape(-1)).reshape(p.shape)
'''},
    "softmax backward renormalising p first (a fully masked row becomes NaN)": {"softmax_backward": '''
def softmax_backward(p, g):
    q = p / p.sum(axis=-1, keepdims=True)
    return q * (g - np.sum(g * q, axis=-1, keepdims=True))
'''},
    # -- attention_backward -----------------------------------------------------------
    "attention backward without the 1/sqrt(d_k)": {"attention_backward": '''
def attention_backward(grad_output, Q, K, V, mask=None):
    _, P = scaled_dot_product_attention(Q, K, V, mask)
    dV = np.swapaxes(P, -1, -2) @ grad_output
    dS = softmax_backward(P, grad_output @ np.swapaxes(V, -1, -2))
    return dS @ K, np.swapaxes(dS, -1, -2) @ Q, dV
'''},
    "attention backward with dK = dS Q (transpose of dK forgotten)": {"attention_backward": '''
def attention_backward(grad_output, Q, K, V, mask=None):
    _, P = scaled_dot_product_attention(Q, K, V, mask)
    dV = np.swapaxes(P, -1, -2) @ grad_output
    dS = softmax_backward(P, grad_output @ np.swapaxes(V, -1, -2)) / np.sqrt(Q.shape[-1])
    return dS @ K, dS @ Q, dV
'''},
    "attention backward recomputing P without the mask": {"attention_backward": '''
def attention_backward(grad_output, Q, K, V, mask=None):
    _, P = scaled_dot_product_attention(Q, K, V)
    dV = np.swapaxes(P, -1, -2) @ grad_output
    dS = softmax_backward(P, grad_output @ np.swapaxes(V, -1, -2)) / np.sqrt(Q.shape[-1])
    return dS @ K, np.swapaxes(dS, -1, -2) @ Q, dV
'''},
    "attention backward with the mask only in dV (gradient through blocked scores)": {"attention_backward": '''
def attention_backward(grad_output, Q, K, V, mask=None):
    _, P = scaled_dot_product_attention(Q, K, V, mask)
    _, P_open = scaled_dot_product_attention(Q, K, V)
    dV = np.swapaxes(P, -1, -2) @ grad_output
    dS = softmax_backward(P_open, grad_output @ np.swapaxes(V, -1, -2)) / np.sqrt(Q.shape[-1])
    return dS @ K, np.swapaxes(dS, -1, -2) @ Q, dV
'''},
    "attention backward with dV = P dO (no transpose; square case only)": {"attention_backward": '''
def attention_backward(grad_output, Q, K, V, mask=None):
    _, P = scaled_dot_product_attention(Q, K, V, mask)
    dV = P @ grad_output
    dS = softmax_backward(P, grad_output @ np.swapaxes(V, -1, -2)) / np.sqrt(Q.shape[-1])
    return dS @ K, np.swapaxes(dS, -1, -2) @ Q, dV
'''},
    "attention backward skipping the softmax (dS = dP)": {"attention_backward": '''
def attention_backward(grad_output, Q, K, V, mask=None):
    _, P = scaled_dot_product_attention(Q, K, V, mask)
    dV = np.swapaxes(P, -1, -2) @ grad_output
    dS = (grad_output @ np.swapaxes(V, -1, -2)) * (P > 0) / np.sqrt(Q.shape[-1])
    return dS @ K, np.swapaxes(dS, -1, -2) @ Q, dV
'''},
    "attention backward scaled by 1/sqrt(d_v)": {"attention_backward": '''
def attention_backward(grad_output, Q, K, V, mask=None):
    _, P = scaled_dot_product_attention(Q, K, V, mask)
    dV = np.swapaxes(P, -1, -2) @ grad_output
    dS = softmax_backward(P, grad_output @ np.swapaxes(V, -1, -2)) / np.sqrt(V.shape[-1])
    return dS @ K, np.swapaxes(dS, -1, -2) @ Q, dV
'''},
    "attention backward with .T (reverses the batch axes too)": {"attention_backward": '''
def attention_backward(grad_output, Q, K, V, mask=None):
    _, P = scaled_dot_product_attention(Q, K, V, mask)
    dV = P.T @ grad_output
    dS = softmax_backward(P, grad_output @ V.T) / np.sqrt(Q.shape[-1])
    return dS @ K, dS.T @ Q, dV
'''},
    "attention backward written for (batch, heads, n, d) only (swapaxes(2, 3))": {"attention_backward": '''
def attention_backward(grad_output, Q, K, V, mask=None):
    _, P = scaled_dot_product_attention(Q, K, V, mask)
    dV = np.swapaxes(P, 2, 3) @ grad_output
    dS = softmax_backward(P, grad_output @ np.swapaxes(V, 2, 3)) / np.sqrt(Q.shape[-1])
    return dS @ K, np.swapaxes(dS, 2, 3) @ Q, dV
'''},
    # -- layer_norm_backward ----------------------------------------------------------
    "layer-norm backward without the mean(g) term": {"layer_norm_backward": '''
def layer_norm_backward(grad_output, x, gamma, eps=1e-5):
    d = x.shape[-1]
    c = x - x.mean(-1, keepdims=True)
    r = 1 / np.sqrt((c ** 2).mean(-1, keepdims=True) + eps)
    xhat, g = c * r, grad_output * gamma
    dx = r * (g - xhat * (g * xhat).mean(-1, keepdims=True))
    return dx, (grad_output * xhat).reshape(-1, d).sum(0), grad_output.reshape(-1, d).sum(0)
'''},
    "layer-norm backward without the xhat mean(g xhat) term": {"layer_norm_backward": '''
def layer_norm_backward(grad_output, x, gamma, eps=1e-5):
    d = x.shape[-1]
    c = x - x.mean(-1, keepdims=True)
    r = 1 / np.sqrt((c ** 2).mean(-1, keepdims=True) + eps)
    xhat, g = c * r, grad_output * gamma
    dx = r * (g - g.mean(-1, keepdims=True))
    return dx, (grad_output * xhat).reshape(-1, d).sum(0), grad_output.reshape(-1, d).sum(0)
'''},
    "layer-norm backward treating mean and variance as constants": {"layer_norm_backward": '''
def layer_norm_backward(grad_output, x, gamma, eps=1e-5):
    d = x.shape[-1]
    c = x - x.mean(-1, keepdims=True)
    r = 1 / np.sqrt((c ** 2).mean(-1, keepdims=True) + eps)
    xhat = c * r
    return r * grad_output * gamma, (grad_output * xhat).reshape(-1, d).sum(0), grad_output.reshape(-1, d).sum(0)
'''},
    "layer-norm backward forgetting gamma in dx": {"layer_norm_backward": '''
def layer_norm_backward(grad_output, x, gamma, eps=1e-5):
    d = x.shape[-1]
    c = x - x.mean(-1, keepdims=True)
    r = 1 / np.sqrt((c ** 2).mean(-1, keepdims=True) + eps)
    xhat, g = c * r, grad_output
    dx = r * (g - g.mean(-1, keepdims=True) - xhat * (g * xhat).mean(-1, keepdims=True))
    return dx, (grad_output * xhat).reshape(-1, d).sum(0), grad_output.reshape(-1, d).sum(0)
'''},
    "layer-norm backward with eps left out": {"layer_norm_backward": '''
def layer_norm_backward(grad_output, x, gamma, eps=1e-5):
    d = x.shape[-1]
    c = x - x.mean(-1, keepdims=True)
    r = 1 / np.sqrt((c ** 2).mean(-1, keepdims=True))
    xhat, g = c * r, grad_output * gamma
    dx = r * (g - g.mean(-1, keepdims=True) - xhat * (g * xhat).mean(-1, keepdims=True))
    return dx, (grad_output * xhat).reshape(-1, d).sum(0), grad_output.reshape(-1, d).sum(0)
'''},
    "layer-norm backward with the unbiased variance (ddof=1)": {"layer_norm_backward": '''
def layer_norm_backward(grad_output, x, gamma, eps=1e-5):
    d = x.shape[-1]
    c = x - x.mean(-1, keepdims=True)
    r = 1 / np.sqrt(x.var(-1, ddof=1, keepdims=True) + eps)
    xhat, g = c * r, grad_output * gamma
    dx = r * (g - g.mean(-1, keepdims=True) - xhat * (g * xhat).mean(-1, keepdims=True))
    return dx, (grad_output * xhat).reshape(-1, d).sum(0), grad_output.reshape(-1, d).sum(0)
'''},
    "layer-norm backward with dgamma, dbeta summed over the first axis only": {"layer_norm_backward": '''
def layer_norm_backward(grad_output, x, gamma, eps=1e-5):
    c = x - x.mean(-1, keepdims=True)
    r = 1 / np.sqrt((c ** 2).mean(-1, keepdims=True) + eps)
    xhat, g = c * r, grad_output * gamma
    dx = r * (g - g.mean(-1, keepdims=True) - xhat * (g * xhat).mean(-1, keepdims=True))
    return dx, (grad_output * xhat).sum(0), grad_output.sum(0)
'''},
    "layer-norm backward with dgamma, dbeta summed over axes (0, 1) (batched inputs only)": {"layer_norm_backward": '''
def layer_norm_backward(grad_output, x, gamma, eps=1e-5):
    c = x - x.mean(-1, keepdims=True)
    r = 1 / np.sqrt((c ** 2).mean(-1, keepdims=True) + eps)
    xhat, g = c * r, grad_output * gamma
    dx = r * (g - g.mean(-1, keepdims=True) - xhat * (g * xhat).mean(-1, keepdims=True))
    return dx, (grad_output * xhat).sum((0, 1)), grad_output.sum((0, 1))
'''},
    # -- feed_forward_backward --------------------------------------------------------
    "feed-forward backward with the tanh-GELU derivative": {"feed_forward_backward": '''
def feed_forward_backward(grad_output, x, W_1, b_1, W_2, b_2):
    d = x.shape[-1]
    rows, dy = x.reshape(-1, d), grad_output.reshape(-1, d)
    u = rows @ W_1 + b_1
    c = np.sqrt(2 / np.pi)
    t = np.tanh(c * (u + 0.044715 * u ** 3))
    h = 0.5 * u * (1 + t)
    dgelu = 0.5 * (1 + t) + 0.5 * u * (1 - t ** 2) * c * (1 + 3 * 0.044715 * u ** 2)
    du = (dy @ W_2.T) * dgelu
    return (du @ W_1.T).reshape(x.shape), rows.T @ du, du.sum(0), h.T @ dy, dy.sum(0)
'''},
    "feed-forward backward with gelu'(u) = Phi(u) (the u phi(u) term dropped)": {"feed_forward_backward": '''
from scipy.special import erf
def feed_forward_backward(grad_output, x, W_1, b_1, W_2, b_2):
    d = x.shape[-1]
    rows, dy = x.reshape(-1, d), grad_output.reshape(-1, d)
    u = rows @ W_1 + b_1
    cdf = 0.5 * (1 + erf(u / np.sqrt(2)))
    du = (dy @ W_2.T) * cdf
    return (du @ W_1.T).reshape(x.shape), rows.T @ du, du.sum(0), (u * cdf).T @ dy, dy.sum(0)
'''},
    "feed-forward backward with a ReLU-style derivative (u > 0)": {"feed_forward_backward": '''
from scipy.special import erf
def feed_forward_backward(grad_output, x, W_1, b_1, W_2, b_2):
    d = x.shape[-1]
    rows, dy = x.reshape(-1, d), grad_output.reshape(-1, d)
    u = rows @ W_1 + b_1
    h = u * 0.5 * (1 + erf(u / np.sqrt(2)))
    du = (dy @ W_2.T) * (u > 0)
    return (du @ W_1.T).reshape(x.shape), rows.T @ du, du.sum(0), h.T @ dy, dy.sum(0)
'''},
    "feed-forward backward with bias gradients averaged over tokens": {"feed_forward_backward": '''
from scipy.special import erf
def feed_forward_backward(grad_output, x, W_1, b_1, W_2, b_2):
    d = x.shape[-1]
    rows, dy = x.reshape(-1, d), grad_output.reshape(-1, d)
    u = rows @ W_1 + b_1
    cdf = 0.5 * (1 + erf(u / np.sqrt(2)))
    pdf = np.exp(-0.5 * u ** 2) / np.sqrt(2 * np.pi)
    du = (dy @ W_2.T) * (cdf + u * pdf)
    return (du @ W_1.T).reshape(x.shape), rows.T @ du, du.mean(0), (u * cdf).T @ dy, dy.mean(0)
'''},
    "feed-forward backward with dW_2 from the pre-activation u instead of gelu(u)": {"feed_forward_backward": '''
from scipy.special import erf
def feed_forward_backward(grad_output, x, W_1, b_1, W_2, b_2):
    d = x.shape[-1]
    rows, dy = x.reshape(-1, d), grad_output.reshape(-1, d)
    u = rows @ W_1 + b_1
    cdf = 0.5 * (1 + erf(u / np.sqrt(2)))
    pdf = np.exp(-0.5 * u ** 2) / np.sqrt(2 * np.pi)
    du = (dy @ W_2.T) * (cdf + u * pdf)
    return (du @ W_1.T).reshape(x.shape), rows.T @ du, du.sum(0), u.T @ dy, dy.sum(0)
'''},
    "feed-forward backward for (batch, n, d) only (rows = b * n from the first two axes)": {"feed_forward_backward": '''
from scipy.special import erf
def feed_forward_backward(grad_output, x, W_1, b_1, W_2, b_2):
    b, n, d = x.shape[0], x.shape[1], x.shape[-1]
    rows, dy = x.reshape(b * n, d), grad_output.reshape(b * n, d)
    u = rows @ W_1 + b_1
    cdf = 0.5 * (1 + erf(u / np.sqrt(2)))
    pdf = np.exp(-0.5 * u ** 2) / np.sqrt(2 * np.pi)
    du = (dy @ W_2.T) * (cdf + u * pdf)
    return (du @ W_1.T).reshape(x.shape), rows.T @ du, du.sum(0), (u * cdf).T @ dy, dy.sum(0)
'''},
    # -- cross_entropy_backward -------------------------------------------------------
    "cross-entropy backward without the 1/N of the mean": {"cross_entropy_backward": '''
def cross_entropy_backward(logits, targets):
    z = logits - logits.max(-1, keepdims=True)
    p = np.exp(z) / np.exp(z).sum(-1, keepdims=True)
    return p - np.eye(logits.shape[-1])[targets]
'''},
    "cross-entropy backward with the wrong sign (onehot - p)": {"cross_entropy_backward": '''
def cross_entropy_backward(logits, targets):
    z = logits - logits.max(-1, keepdims=True)
    p = np.exp(z) / np.exp(z).sum(-1, keepdims=True)
    return (np.eye(logits.shape[-1])[targets] - p) / targets.size
'''},
    "cross-entropy backward logits - onehot (softmax forgotten)": {"cross_entropy_backward": '''
def cross_entropy_backward(logits, targets):
    return (logits - np.eye(logits.shape[-1])[targets]) / targets.size
'''},
    "cross-entropy backward divided by the batch size only": {"cross_entropy_backward": '''
def cross_entropy_backward(logits, targets):
    z = logits - logits.max(-1, keepdims=True)
    p = np.exp(z) / np.exp(z).sum(-1, keepdims=True)
    return (p - np.eye(logits.shape[-1])[targets]) / len(targets)
'''},
    # -- embedding_backward -----------------------------------------------------------
    "embedding backward with dE[ids] += g (repeated tokens lost)": {"embedding_backward": '''
def embedding_backward(grad_output, token_ids, vocab_size):
    d = grad_output.shape[-1]
    dE = np.zeros((vocab_size, d))
    dE[token_ids.reshape(-1)] += grad_output.reshape(-1, d)
    return dE
'''},
    "embedding backward with dE[ids] = g": {"embedding_backward": '''
def embedding_backward(grad_output, token_ids, vocab_size):
    d = grad_output.shape[-1]
    dE = np.zeros((vocab_size, d))
    dE[token_ids.reshape(-1)] = grad_output.reshape(-1, d)
    return dE
'''},
    "embedding backward averaging repeated tokens": {"embedding_backward": '''
def embedding_backward(grad_output, token_ids, vocab_size):
    d = grad_output.shape[-1]
    dE = np.zeros((vocab_size, d))
    np.add.at(dE, token_ids.reshape(-1), grad_output.reshape(-1, d))
    counts = np.bincount(token_ids.reshape(-1), minlength=vocab_size)
    return dE / np.maximum(counts, 1)[:, None]
'''},
}

# -- written for issue 38, as students get them wrong: logits and masks beyond exp's range, a 0-d target,
# eps passed or left to its default, float64 precision (float32 inside a float64 task) --------------------
MUTANTS.update({
    "cross-entropy backward with its own softmax, no max shift (logits ~1000 overflow)": {"cross_entropy_backward": '''
def cross_entropy_backward(logits, targets):
    e = np.exp(logits)
    p = e / e.sum(axis=-1, keepdims=True)
    return (p - np.eye(logits.shape[-1])[targets]) / targets.size
'''},
    "cross-entropy backward flattened to (N, V) and returned that way ((1, V) for one position)": {
        "cross_entropy_backward": '''
def cross_entropy_backward(logits, targets):
    z = logits.reshape(-1, logits.shape[-1])
    t = np.asarray(targets).reshape(-1)
    p = softmax(z, axis=-1)
    p[np.arange(t.size), t] -= 1.0
    return (p / t.size).reshape(targets.shape + (logits.shape[-1],)) if targets.ndim else p / t.size
'''},
    "cross-entropy backward with the softmax in float32": {"cross_entropy_backward": '''
def cross_entropy_backward(logits, targets):
    z = (logits - logits.max(axis=-1, keepdims=True)).astype(np.float32)
    p = np.exp(z) / np.exp(z).sum(axis=-1, keepdims=True)
    return (p - np.eye(logits.shape[-1])[targets]) / targets.size
'''},
    "attention backward recomputing the weights by hand without the max shift": {"attention_backward": '''
def attention_backward(grad_output, Q, K, V, mask=None):
    S = Q @ np.swapaxes(K, -1, -2) / np.sqrt(Q.shape[-1])
    if mask is not None:
        S = np.where(mask, S, -np.inf) if np.asarray(mask).dtype == bool else S + mask
    E = np.exp(S)
    P = E / E.sum(axis=-1, keepdims=True)
    dV = np.swapaxes(P, -1, -2) @ grad_output
    dS = softmax_backward(P, grad_output @ np.swapaxes(V, -1, -2)) / np.sqrt(Q.shape[-1])
    return dS @ K, np.swapaxes(dS, -1, -2) @ Q, dV
'''},
    "attention backward treating every mask as boolean (an additive mask's nonzero entries read as True)": {
        "attention_backward": '''
def attention_backward(grad_output, Q, K, V, mask=None):
    _, P = scaled_dot_product_attention(Q, K, V, None if mask is None else np.asarray(mask).astype(bool))
    dV = np.swapaxes(P, -1, -2) @ grad_output
    dS = softmax_backward(P, grad_output @ np.swapaxes(V, -1, -2)) / np.sqrt(Q.shape[-1])
    return dS @ K, np.swapaxes(dS, -1, -2) @ Q, dV
'''},
    "layer-norm backward with eps hard-coded to 1e-5 (the argument ignored)": {"layer_norm_backward": '''
def layer_norm_backward(grad_output, x, gamma, eps=1e-5):
    d = x.shape[-1]
    c = x - x.mean(-1, keepdims=True)
    r = 1 / np.sqrt((c ** 2).mean(-1, keepdims=True) + 1e-5)
    xhat, g = c * r, grad_output * gamma
    dx = r * (g - g.mean(-1, keepdims=True) - xhat * (g * xhat).mean(-1, keepdims=True))
    return dx, (grad_output * xhat).reshape(-1, d).sum(0), grad_output.reshape(-1, d).sum(0)
'''},
    "layer-norm backward with BERT's default eps 1e-12": {"layer_norm_backward": '''
def layer_norm_backward(grad_output, x, gamma, eps=1e-12):
    d = x.shape[-1]
    c = x - x.mean(-1, keepdims=True)
    r = 1 / np.sqrt((c ** 2).mean(-1, keepdims=True) + eps)
    xhat, g = c * r, grad_output * gamma
    dx = r * (g - g.mean(-1, keepdims=True) - xhat * (g * xhat).mean(-1, keepdims=True))
    return dx, (grad_output * xhat).reshape(-1, d).sum(0), grad_output.reshape(-1, d).sum(0)
'''},
    "layer-norm backward computed in float32": {"layer_norm_backward": '''
def layer_norm_backward(grad_output, x, gamma, eps=1e-5):
    d = x.shape[-1]
    x32, g32 = x.astype(np.float32), (grad_output * gamma).astype(np.float32)
    c = x32 - x32.mean(-1, keepdims=True)
    r = 1 / np.sqrt((c ** 2).mean(-1, keepdims=True) + np.float32(eps))
    xhat = c * r
    dx = r * (g32 - g32.mean(-1, keepdims=True) - xhat * (g32 * xhat).mean(-1, keepdims=True))
    return dx.astype(x.dtype), (grad_output * xhat).reshape(-1, d).sum(0), grad_output.reshape(-1, d).sum(0)
'''},
    "softmax backward with <g, p> accumulated in float32": {"softmax_backward": '''
def softmax_backward(p, g):
    return p * (g - np.sum(g * p, axis=-1, keepdims=True, dtype=np.float32))
'''},
    "embedding backward into a float32 table (np.zeros(..., dtype=np.float32))": {"embedding_backward": '''
def embedding_backward(grad_output, token_ids, vocab_size):
    d = grad_output.shape[-1]
    dE = np.zeros((vocab_size, d), dtype=np.float32)
    np.add.at(dE, token_ids.reshape(-1), grad_output.reshape(-1, d))
    return dE
'''},
})

ALTERNATIVES = {
    "layer-norm backward with the one-pass variance E[x^2] - E[x]^2": {"layer_norm_backward": '''
def layer_norm_backward(grad_output, x, gamma, eps=1e-5):
    d = x.shape[-1]
    mean = x.mean(-1, keepdims=True)
    var = (x * x).mean(-1, keepdims=True) - mean * mean
    r = 1 / np.sqrt(var + eps)
    xhat, g = (x - mean) * r, grad_output * gamma
    dx = r * (g - g.mean(-1, keepdims=True) - xhat * (g * xhat).mean(-1, keepdims=True))
    return dx, (grad_output * xhat).reshape(-1, d).sum(0), grad_output.reshape(-1, d).sum(0)
'''},
    "cross-entropy backward through scipy's logsumexp": {"cross_entropy_backward": '''
from scipy.special import logsumexp
def cross_entropy_backward(logits, targets):
    p = np.exp(logits - logsumexp(logits, axis=-1, keepdims=True))
    return (p - np.eye(logits.shape[-1])[targets]) / np.size(targets)
'''},
}
