"""Plausible wrong implementations that the hidden tests of notebook 02 must catch.

Each entry maps a description to {solution grade_id: replacement source}.
"""

MUTANTS = {
    # -- attention_entropy ------------------------------------------------------------
    "entropy in bits (log2) instead of nats": {"attention_entropy": '''
def attention_entropy(weights):
    p = np.asarray(weights, dtype=float)
    return -np.sum(p * np.log2(np.where(p > 0, p, 1.0)), axis=-1)
'''},
    "entropy summed over the wrong axis": {"attention_entropy": '''
def attention_entropy(weights):
    p = np.asarray(weights, dtype=float)
    return -np.sum(p * np.log(np.where(p > 0, p, 1.0)), axis=-2)
'''},
    "entropy with log(0) giving nan": {"attention_entropy": '''
def attention_entropy(weights):
    p = np.asarray(weights, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        return -np.sum(p * np.log(p), axis=-1)
'''},
    "entropy with a +1e-12 fudge inside the log": {"attention_entropy": '''
def attention_entropy(weights):
    p = np.asarray(weights, dtype=float)
    return -np.sum(p * np.log(p + 1e-12), axis=-1)
'''},
    "entropy with probabilities clipped to 1e-12": {"attention_entropy": '''
def attention_entropy(weights):
    p = np.asarray(weights, dtype=float)
    return -np.sum(p * np.log(np.clip(p, 1e-12, 1.0)), axis=-1)
'''},
    "entropy with a +1e-300 fudge inside the log": {"attention_entropy": '''
def attention_entropy(weights):
    p = np.asarray(weights, dtype=float)
    return -np.sum(p * np.log(p + 1e-300), axis=-1)
'''},
    "entropy with probabilities clipped to 1e-300": {"attention_entropy": '''
def attention_entropy(weights):
    p = np.asarray(weights, dtype=float)
    return -np.sum(p * np.log(np.maximum(p, 1e-300)), axis=-1)
'''},
    "entropy with nansum (0 ln 0 = nan dropped, and with it any nan from upstream)": {"attention_entropy": '''
def attention_entropy(weights):
    p = np.asarray(weights, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        return -np.nansum(p * np.log(p), axis=-1)
'''},
    "entropy as np.where(p > 0, p ln p, 0) (a nan weight becomes 0)": {"attention_entropy": '''
def attention_entropy(weights):
    p = np.asarray(weights, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        return -np.sum(np.where(p > 0, p * np.log(p), 0.0), axis=-1)
'''},
    "entropy with the wrong sign": {"attention_entropy": '''
def attention_entropy(weights):
    p = np.asarray(weights, dtype=float)
    return np.sum(p * np.log(np.where(p > 0, p, 1.0)), axis=-1)
'''},
    "entropy averaged over keys instead of summed": {"attention_entropy": '''
def attention_entropy(weights):
    p = np.asarray(weights, dtype=float)
    return -np.mean(p * np.log(np.where(p > 0, p, 1.0)), axis=-1)
'''},
    # -- softmax_jacobian -------------------------------------------------------------
    "Jacobian -p p^T without the diagonal": {"softmax_jacobian": '''
def softmax_jacobian(p):
    p = np.asarray(p, dtype=float)
    return -p[..., :, None] * p[..., None, :]
'''},
    "Jacobian with the wrong sign (p p^T - diag(p))": {"softmax_jacobian": '''
def softmax_jacobian(p):
    p = np.asarray(p, dtype=float)
    n = p.shape[-1]
    return p[..., :, None] * p[..., None, :] - p[..., :, None] * np.eye(n)
'''},
    "Jacobian with the inner product p^T p instead of the outer product": {"softmax_jacobian": '''
def softmax_jacobian(p):
    p = np.asarray(p, dtype=float)
    n = p.shape[-1]
    inner = p[..., None, :] @ p[..., :, None]          # (..., 1, 1)
    return p[..., :, None] * np.eye(n) - inner
'''},
    "Jacobian p_i (1 - p_j) everywhere (delta forgotten)": {"softmax_jacobian": '''
def softmax_jacobian(p):
    p = np.asarray(p, dtype=float)
    return p[..., :, None] * (1.0 - p[..., None, :])
'''},
    "Jacobian of log-softmax (I - 1 p^T)": {"softmax_jacobian": '''
def softmax_jacobian(p):
    p = np.asarray(p, dtype=float)
    n = p.shape[-1]
    return np.eye(n) - np.ones_like(p)[..., :, None] * p[..., None, :]
'''},
    "Jacobian with diag(p) - p^2 on the diagonal only": {"softmax_jacobian": '''
def softmax_jacobian(p):
    p = np.asarray(p, dtype=float)
    n = p.shape[-1]
    return (p - p * p)[..., :, None] * np.eye(n)
'''},
    "Jacobian for a single row only (np.diag / np.outer, not batched)": {"softmax_jacobian": '''
def softmax_jacobian(p):
    p = np.asarray(p, dtype=float)
    return np.diag(p) - np.outer(p, p)
'''},
}

_BACKWARD = '''
def softmax_backward(p, g):
    p, g = np.asarray(p, dtype=float), np.asarray(g, dtype=float)
{body}
'''


def _backward(body):
    return {"softmax_backward": _BACKWARD.format(body=body)}


MUTANTS.update({
    "backward: p * g (the - sum p g term dropped)": _backward("    return p * g"),
    "backward: unweighted mean of g": _backward("    return p * (g - g.mean(axis=-1, keepdims=True))"),
    "backward: factor p dropped": _backward("    return g - (p * g).sum(axis=-1, keepdims=True)"),
    "backward: sum over the wrong axis": _backward("    return p * (g - (p * g).sum(axis=0, keepdims=True))"),
    "backward: builds the Jacobian (correct, O(n^2) memory)": _backward(
        "    J = p[..., :, None] * np.eye(p.shape[-1]) - p[..., :, None] * p[..., None, :]\n"
        "    return np.einsum('...ij,...i->...j', J, g)"),
})

# Correct implementations written differently: the hidden tests must accept them.
ALTERNATIVES = {
    "Jacobian with einsum (diag(p) - p p^T, batched)": {"softmax_jacobian": '''
def softmax_jacobian(p):
    p = np.asarray(p, dtype=float)
    eye = np.eye(p.shape[-1])
    return np.einsum("...i,ij->...ij", p, eye) - np.einsum("...i,...j->...ij", p, p)
'''},
    "backward: p * g minus p times the row's p-weighted sum of g": _backward(
        "    return p * g - p * np.einsum('...i,...i->...', p, g)[..., None]"),
    "backward: the weighted mean with np.average": _backward(
        "    mean = np.sum(p * g, axis=-1, keepdims=True) / np.sum(p, axis=-1, keepdims=True)\n"
        "    return p * (g - mean)"),
}
