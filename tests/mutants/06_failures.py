"""Plausible wrong implementations that the hidden tests of notebook 06 must catch.

Each entry maps a description to {solution grade_id: replacement source}.
"""

_ONLINE = '''
def online_softmax_attention(Q, K, V, block_size):
    Q, K, V = (np.asarray(a, dtype=float) for a in (Q, K, V))
    n_k = K.shape[-2]
    scale = {scale}
    row_max = np.full(Q.shape[:-1] + (1,), -np.inf)
    row_sum = np.zeros(Q.shape[:-1] + (1,))
    acc = np.zeros(Q.shape[:-1] + (V.shape[-1],))
    for start in {starts}:
        K_blk = K[..., start:start + block_size, :]
        V_blk = V[..., start:start + block_size, :]
        s = (Q @ np.swapaxes(K_blk, -1, -2)) * scale
        new_max = np.maximum(row_max, s.max(axis=-1, keepdims=True))
        rescale = np.exp(row_max - new_max)
        p = np.exp(s - new_max)
        row_sum = {row_sum}
        acc = {acc}
        row_max = new_max
    return {result}
'''
_DEFAULT = dict(scale="1.0 / np.sqrt(Q.shape[-1])", starts="range(0, n_k, block_size)",
                row_sum="row_sum * rescale + p.sum(axis=-1, keepdims=True)",
                acc="acc * rescale + p @ V_blk", result="acc / row_sum")


def _online(**changes):
    return {"online_attention": _ONLINE.format(**{**_DEFAULT, **changes})}


_LEAK = '''
def leaked_weight(scores, allowed, mask_value):
{body}
'''


def _leak(body):
    return {"leaked_weight": _LEAK.format(body=body)}


MUTANTS = {
    "online: accumulator not rescaled when the max changes": _online(acc="acc + p @ V_blk"),
    "online: running sum not rescaled when the max changes": _online(
        row_sum="row_sum + p.sum(axis=-1, keepdims=True)"),
    "online: neither sum nor accumulator rescaled": _online(
        row_sum="row_sum + p.sum(axis=-1, keepdims=True)", acc="acc + p @ V_blk"),
    "online: no division by the final sum": _online(result="acc"),
    "online: last partial block dropped": _online(starts="range(0, n_k - block_size + 1, block_size)"),
    "online: n_k // block_size blocks (partial block dropped)": _online(
        starts="[i * block_size for i in range(n_k // block_size)]"),
    "online: missing 1/sqrt(d_k)": _online(scale="1.0"),
    "online: scaled by 1/d_k": _online(scale="1.0 / Q.shape[-1]"),
    "online: divided by the sum of the last block only": _online(
        result="acc / p.sum(axis=-1, keepdims=True)"),
    "online: no running max (raw exp, overflows)": {"online_attention": '''
def online_softmax_attention(Q, K, V, block_size):
    n_k = K.shape[-2]
    total = np.zeros(Q.shape[:-1] + (1,))
    acc = np.zeros(Q.shape[:-1] + (V.shape[-1],))
    for start in range(0, n_k, block_size):
        p = np.exp(Q @ np.swapaxes(K[..., start:start + block_size, :], -1, -2) / np.sqrt(Q.shape[-1]))
        total = total + p.sum(axis=-1, keepdims=True)
        acc = acc + p @ V[..., start:start + block_size, :]
    return acc / total
'''},
    "online: old sums rescaled to each block's own maximum (exact, but exp(old - new) overflows when the "
    "maximum falls)": {"online_attention": '''
def online_softmax_attention(Q, K, V, block_size):
    n_k = K.shape[-2]
    prev_max = row_sum = acc = None
    for start in range(0, n_k, block_size):
        s = Q @ np.swapaxes(K[..., start:start + block_size, :], -1, -2) / np.sqrt(Q.shape[-1])
        block_max = s.max(axis=-1, keepdims=True)
        p = np.exp(s - block_max)
        if prev_max is None:
            row_sum, acc = p.sum(axis=-1, keepdims=True), p @ V[..., start:start + block_size, :]
        else:
            rescale = np.exp(prev_max - block_max)          # the old sums, relative to this block's max
            row_sum = row_sum * rescale + p.sum(axis=-1, keepdims=True)
            acc = acc * rescale + p @ V[..., start:start + block_size, :]
        prev_max = block_max
    return acc / row_sum
'''},
    "online: each block softmaxed separately, blocks averaged": {"online_attention": '''
def online_softmax_attention(Q, K, V, block_size):
    n_k = K.shape[-2]
    outs = []
    for start in range(0, n_k, block_size):
        s = Q @ np.swapaxes(K[..., start:start + block_size, :], -1, -2) / np.sqrt(Q.shape[-1])
        outs.append(softmax(s, axis=-1) @ V[..., start:start + block_size, :])
    return sum(outs) / len(outs)
'''},
    "leak: mask applied after the softmax": _leak('''
    weights = softmax(scores, axis=-1) * allowed
    return np.where(allowed, 0.0, weights).sum(axis=-1)'''),
    "leak: blocked scores replaced by mask_value (masked_fill) instead of penalised": _leak('''
    weights = softmax(np.where(allowed, scores, mask_value), axis=-1)
    return np.where(allowed, 0.0, weights).sum(axis=-1)'''),
    "leak: penalty added to the allowed keys": _leak('''
    weights = softmax(np.where(allowed, scores + mask_value, scores), axis=-1)
    return np.where(allowed, 0.0, weights).sum(axis=-1)'''),
    "leak: odds instead of probability (blocked / allowed mass)": _leak('''
    e = np.exp(np.where(allowed, scores, scores + mask_value))
    return np.where(allowed, 0.0, e).sum(axis=-1) / np.where(allowed, e, 0.0).sum(axis=-1)'''),
    "leak: summed over the query axis": _leak('''
    weights = softmax(np.where(allowed, scores, scores + mask_value), axis=-1)
    return np.where(allowed, 0.0, weights).sum(axis=-2)'''),
    "leak: penalty multiplied by the blocked indicator (0 * -inf = nan)": _leak('''
    weights = softmax(scores + (~allowed) * mask_value, axis=-1)
    return (weights * ~allowed).sum(axis=-1)'''),
    "leak: 1 - (the allowed weights) (every leak below 1e-16 lost)": _leak('''
    weights = softmax(np.where(allowed, scores, scores + mask_value), axis=-1)
    return 1.0 - np.where(allowed, weights, 0.0).sum(axis=-1)'''),
}

# Correct outputs, but not tiled: the memory part of the hidden test must catch them.
MUTANTS.update({
    "online: the naive attention (the whole n x n score matrix)": {"online_attention": '''
def online_softmax_attention(Q, K, V, block_size):
    return scaled_dot_product_attention(Q, K, V)[0]
'''},
    "online: scores computed block by block, then concatenated and softmaxed at once": {"online_attention": '''
def online_softmax_attention(Q, K, V, block_size):
    n_k = K.shape[-2]
    blocks = [Q @ np.swapaxes(K[..., s:s + block_size, :], -1, -2) / np.sqrt(Q.shape[-1])
              for s in range(0, n_k, block_size)]
    return softmax(np.concatenate(blocks, axis=-1), axis=-1) @ V
'''},
})


# Correct implementations written differently: the hidden tests must accept them.
ALTERNATIVES = {
    "online: the rescale applied only where the maximum rose": {"online_attention": '''
def online_softmax_attention(Q, K, V, block_size):
    Q, K, V = (np.asarray(a, dtype=float) for a in (Q, K, V))
    m = np.full(Q.shape[:-1] + (1,), -np.inf)
    l = np.zeros(Q.shape[:-1] + (1,))
    o = np.zeros(Q.shape[:-1] + (V.shape[-1],))
    for start in range(0, K.shape[-2], block_size):
        s = Q @ np.swapaxes(K[..., start:start + block_size, :], -1, -2) / np.sqrt(Q.shape[-1])
        m_new = np.maximum(m, s.max(axis=-1, keepdims=True))
        rose = m_new > m
        factor = np.where(rose, np.exp(np.where(rose, m - m_new, 0.0)), 1.0)
        p = np.exp(s - m_new)
        l = l * factor + p.sum(axis=-1, keepdims=True)
        o = o * factor + p @ V[..., start:start + block_size, :]
        m = m_new
    return o / l
'''},
    "online: each block's exponentials taken at its own maximum, then brought down to the running one":
        {"online_attention": '''
def online_softmax_attention(Q, K, V, block_size):
    m = np.full(Q.shape[:-1] + (1,), -np.inf)
    l = np.zeros(Q.shape[:-1] + (1,))
    o = np.zeros(Q.shape[:-1] + (V.shape[-1],))
    for start in range(0, K.shape[-2], block_size):
        s = Q @ np.swapaxes(K[..., start:start + block_size, :], -1, -2) / np.sqrt(Q.shape[-1])
        b = s.max(axis=-1, keepdims=True)
        m_new = np.maximum(m, b)
        p = np.exp(s - b) * np.exp(b - m_new)              # both factors <= 1
        l = l * np.exp(m - m_new) + p.sum(axis=-1, keepdims=True)
        o = o * np.exp(m - m_new) + p @ V[..., start:start + block_size, :]
        m = m_new
    return o / l
'''},
    "online: a running log-sum-exp instead of (max, sum)": {"online_attention": '''
def online_softmax_attention(Q, K, V, block_size):
    lse = np.full(Q.shape[:-1] + (1,), -np.inf)               # log of the running sum of exp(s)
    o = np.zeros(Q.shape[:-1] + (V.shape[-1],))               # the running output, already normalised
    for start in range(0, K.shape[-2], block_size):
        s = Q @ np.swapaxes(K[..., start:start + block_size, :], -1, -2) / np.sqrt(Q.shape[-1])
        block_lse = np.logaddexp.reduce(s, axis=-1, keepdims=True)
        new_lse = np.logaddexp(lse, block_lse)
        o = o * np.exp(lse - new_lse) + np.exp(s - new_lse) @ V[..., start:start + block_size, :]
        lse = new_lse
    return o
'''},
}
