"""Plausible wrong implementations that the hidden tests of notebook 01 must catch.

Each entry maps a description to {solution grade_id: replacement source}.
"""

MUTANTS = {
    "softmax without the max-shift (overflows)": {"softmax": '''
def softmax(x, axis=-1):
    e = np.exp(x)
    return e / e.sum(axis=axis, keepdims=True)
'''},
    "softmax that ignores axis": {"softmax": '''
def softmax(x, axis=-1):
    x = np.asarray(x, dtype=float)
    m = np.max(x, axis=-1, keepdims=True)
    m = np.where(np.isneginf(m), 0.0, m)
    e = np.exp(x - m)
    s = e.sum(axis=-1, keepdims=True)
    return e / np.where(s == 0, 1.0, s)
'''},
    "softmax giving nan on a fully masked row": {"softmax": '''
def softmax(x, axis=-1):
    e = np.exp(x - np.max(x, axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)
'''},
    "attention scaled by d_k instead of sqrt(d_k)": {"sdpa": '''
def scaled_dot_product_attention(Q, K, V, mask=None):
    scores = Q @ np.swapaxes(K, -1, -2) / Q.shape[-1]
    if mask is not None:
        mask = np.asarray(mask)
        scores = np.where(mask, scores, -np.inf) if mask.dtype == bool else scores + mask
    w = softmax(scores, axis=-1)
    return w @ V, w
'''},
    "attention without scaling": {"sdpa": '''
def scaled_dot_product_attention(Q, K, V, mask=None):
    scores = Q @ np.swapaxes(K, -1, -2)
    if mask is not None:
        mask = np.asarray(mask)
        scores = np.where(mask, scores, -np.inf) if mask.dtype == bool else scores + mask
    w = softmax(scores, axis=-1)
    return w @ V, w
'''},
    "mask applied after the softmax (rows no longer sum to 1)": {"sdpa": '''
def scaled_dot_product_attention(Q, K, V, mask=None):
    w = softmax(Q @ np.swapaxes(K, -1, -2) / np.sqrt(Q.shape[-1]), axis=-1)
    if mask is not None:
        mask = np.asarray(mask)
        w = w * mask if mask.dtype == bool else w * np.isfinite(mask)
    return w @ V, w
'''},
    "additive mask treated as boolean": {"sdpa": '''
def scaled_dot_product_attention(Q, K, V, mask=None):
    scores = Q @ np.swapaxes(K, -1, -2) / np.sqrt(Q.shape[-1])
    if mask is not None:
        scores = np.where(np.isfinite(mask), scores, -np.inf)
    w = softmax(scores, axis=-1)
    return w @ V, w
'''},
    "softmax over the query axis": {"sdpa": '''
def scaled_dot_product_attention(Q, K, V, mask=None):
    scores = Q @ np.swapaxes(K, -1, -2) / np.sqrt(Q.shape[-1])
    if mask is not None:
        mask = np.asarray(mask)
        scores = np.where(mask, scores, -np.inf) if mask.dtype == bool else scores + mask
    w = softmax(scores, axis=-2)
    return w @ V, w
'''},
    # -- lookup_query -----------------------------------------------------------------
    "lookup along K[j] itself (q = c K[j], c from the margin)": {"lookup_query": '''
def lookup_query(K, j, confidence=0.99):
    K = np.asarray(K, dtype=float)
    n, d = K.shape
    m = np.log((n - 1) * confidence / (1 - confidence))
    return np.sqrt(d) * m * K[j] / (K[j] @ K[j])          # key j's scaled score is m, the others' are not 0
'''},
    "lookup with q = K^T t, as if the keys were orthonormal": {"lookup_query": '''
def lookup_query(K, j, confidence=0.99):
    K = np.asarray(K, dtype=float)
    n, d = K.shape
    t = np.zeros(n)
    t[j] = np.sqrt(d) * np.log((n - 1) * confidence / (1 - confidence))
    return K.T @ t
'''},
    "lookup margin without the n - 1 other keys": {"lookup_query": '''
def lookup_query(K, j, confidence=0.99):
    K = np.asarray(K, dtype=float)
    n, d = K.shape
    t = np.zeros(n)
    t[j] = np.sqrt(d) * np.log(confidence / (1 - confidence))
    return np.linalg.lstsq(K, t, rcond=None)[0]
'''},
    "lookup scaled by d instead of sqrt(d)": {"lookup_query": '''
def lookup_query(K, j, confidence=0.99):
    K = np.asarray(K, dtype=float)
    n, d = K.shape
    t = np.zeros(n)
    t[j] = d * np.log((n - 1) * confidence / (1 - confidence))
    return np.linalg.lstsq(K, t, rcond=None)[0]
'''},
    "lookup that forgets the 1/sqrt(d) of the scores": {"lookup_query": '''
def lookup_query(K, j, confidence=0.99):
    K = np.asarray(K, dtype=float)
    n, d = K.shape
    t = np.zeros(n)
    t[j] = np.log((n - 1) * confidence / (1 - confidence))
    return np.linalg.lstsq(K, t, rcond=None)[0]
'''},
    "lookup that solves a square system on the first n coordinates (not the shortest)": {"lookup_query": '''
def lookup_query(K, j, confidence=0.99):
    K = np.asarray(K, dtype=float)
    n, d = K.shape
    t = np.zeros(n)
    t[j] = np.sqrt(d) * np.log((n - 1) * confidence / (1 - confidence))
    q = np.zeros(d)
    q[:n] = np.linalg.solve(K[:, :n], t)                   # right scores, but a part orthogonal to the keys
    return q
'''},
    "lookup with centred scores (+m/2 for key j, -m/2 for the others)": {"lookup_query": '''
def lookup_query(K, j, confidence=0.99):
    K = np.asarray(K, dtype=float)
    n, d = K.shape
    m = np.log((n - 1) * confidence / (1 - confidence))
    t = np.full(n, -m / 2)
    t[j] = m / 2
    return np.linalg.lstsq(K, np.sqrt(d) * t, rcond=None)[0]
'''},
}

# Correct implementations written differently: the hidden tests must accept them
# (tests/test_hidden_tests_catch_mutants.py runs them through the hidden tests).
ALTERNATIVES = {
    "lookup: the minimum-norm solution of K q = t by the pseudo-inverse": {"lookup_query": '''
def lookup_query(K, j, confidence=0.99):
    K = np.asarray(K, dtype=float)
    n, d = K.shape
    t = np.zeros(n)
    t[j] = np.sqrt(d) * np.log((n - 1) * confidence / (1 - confidence))
    return np.linalg.pinv(K) @ t
'''},
    "lookup: least squares, and the margin as a logit of the odds against one other key": {"lookup_query": '''
def lookup_query(K, j, confidence=0.99):
    K = np.asarray(K, dtype=float)
    n, d = K.shape
    odds = confidence / (1 - confidence)           # weight of key j over all the others together
    scores = np.zeros(n)
    scores[j] = np.log(odds) + np.log(n - 1)       # against n - 1 keys of score 0
    return np.linalg.lstsq(K, np.sqrt(d) * scores, rcond=None)[0]
'''},
}
