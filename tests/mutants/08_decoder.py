"""Plausible wrong implementations that the hidden tests of notebook 08 must catch.

Each entry maps a description to {solution grade_id: replacement source}.
"""

_CAUSAL_HEAD = '''
def causal_self_attention(x, params, n_heads, cache=None):
    p = params
    q = split_heads(x @ p["W_Q"] + p["b_Q"], n_heads)
    k = split_heads(x @ p["W_K"] + p["b_K"], n_heads)
    v = split_heads(x @ p["W_V"] + p["b_V"], n_heads)
'''

_CAUSAL_TAIL = '''
    heads, weights = scaled_dot_product_attention(q, k, v, mask=mask)
    return merge_heads(heads) @ p["W_O"] + p["b_O"], weights, (k, v)
'''

_CONCAT = '''
    if cache is not None:
        k = np.concatenate([cache[0], k], axis=-2)
        v = np.concatenate([cache[1], v], axis=-2)
'''

_CROSS_HEAD = '''
def cross_attention(x, memory, params, n_heads, memory_mask=None):
    p = params
'''

_BLOCK_HEAD = '''
def decoder_block(x, memory, params, n_heads, norm_first=False):
    p = params
    ln = lambda h, i: layer_norm(h, p[f"ln{i}_gamma"], p[f"ln{i}_beta"])
    ffn = lambda h: feed_forward(h, p["W_1"], p["b_1"], p["W_2"], p["b_2"])
'''

_PRE_LN = '''
    if norm_first:
        attended, self_w, _ = causal_self_attention(ln(x, 1), p["self_attn"], n_heads)
        a = x + attended
        crossed, cross_w = cross_attention(ln(a, 2), memory, p["cross_attn"], n_heads)
        b = a + crossed
        return b + ffn(ln(b, 3)), self_w, cross_w
'''

_POST_LN = '''
    attended, self_w, _ = causal_self_attention(x, p["self_attn"], n_heads)
    a = ln(x + attended, 1)
    crossed, cross_w = cross_attention(a, memory, p["cross_attn"], n_heads)
    b = ln(a + crossed, 2)
    return ln(b + ffn(b), 3), self_w, cross_w
'''

_SAMPLING_HEAD = '''
def sampling_probabilities(logits, *, temperature=1.0, top_k=None, top_p=None):
    logits = np.asarray(logits, dtype=float)
    if temperature == 0:
        probs = np.zeros_like(logits)
        np.put_along_axis(probs, np.argmax(logits, axis=-1)[..., None], 1.0, axis=-1)
        return probs
'''

_TOP_K = '''
    order = np.argsort(-probs, axis=-1, kind="stable")
    if top_k is not None:
        keep = np.zeros(probs.shape, dtype=bool)
        np.put_along_axis(keep, order[..., :top_k], True, axis=-1)
        probs = np.where(keep, probs, 0.0)
        probs = probs / probs.sum(axis=-1, keepdims=True)
'''


def _top_p(keep_rule):
    return '''
    if top_p is not None and top_p < 1:
        sorted_p = np.take_along_axis(probs, order, axis=-1)
        cum = np.cumsum(sorted_p, axis=-1)
        mass_before = cum - sorted_p
        keep = np.zeros(probs.shape, dtype=bool)
        np.put_along_axis(keep, order, ''' + keep_rule + ''', axis=-1)
        probs = np.where(keep, probs, 0.0)
        probs = probs / probs.sum(axis=-1, keepdims=True)
    return probs
'''


_SOFTMAX_T = '''
    probs = softmax(logits / temperature, axis=-1)
'''

# top-p by counting: the nucleus is the first n sorted tokens, n = 1 + the index where the running sum
# first reaches top_p (searchsorted on the left; on the right is the boundary slip).
_SEARCHSORTED = '''
    if top_p is not None and top_p < 1:
        sorted_p = np.take_along_axis(probs, order, axis=-1)
        cum = np.cumsum(sorted_p, axis=-1).reshape(-1, probs.shape[-1])
        n_keep = np.array([np.searchsorted(row, top_p, side="{side}") + 1 for row in cum])
        keep_sorted = np.arange(probs.shape[-1]) < n_keep.reshape(probs.shape[:-1] + (1,))
        keep = np.zeros(probs.shape, dtype=bool)
        np.put_along_axis(keep, order, keep_sorted, axis=-1)
        probs = np.where(keep, probs, 0.0)
        probs = probs / probs.sum(axis=-1, keepdims=True)
    return probs
'''

_GENERATE_HEAD = '''
def generate(step_fn, prompt_ids, n_new, *, rng=None, temperature=1.0, top_k=None, top_p=None):
    ids = np.asarray(prompt_ids, dtype=np.int64)
'''

MUTANTS = {
    # -- the language-model loss ---------------------------------------------------------
    "LM loss without the shift (logits[t] scored against ids[t])": {"language_model_loss": '''
def language_model_loss(logits, ids):
    log_probs = np.log(softmax(logits, axis=-1))
    return float(-np.take_along_axis(log_probs, ids[..., None], axis=-1).mean())
'''},
    "LM loss shifted the wrong way (logits[t+1] scored against ids[t])": {"language_model_loss": '''
def language_model_loss(logits, ids):
    log_probs = np.log(softmax(logits[..., 1:, :], axis=-1))
    return float(-np.take_along_axis(log_probs, ids[..., :-1, None], axis=-1).mean())
'''},
    "LM loss summed instead of averaged": {"language_model_loss": '''
def language_model_loss(logits, ids):
    log_probs = np.log(softmax(logits[..., :-1, :], axis=-1))
    return float(-np.take_along_axis(log_probs, ids[..., 1:, None], axis=-1).sum())
'''},
    "LM loss that also scores the last row (against the first token)": {"language_model_loss": '''
def language_model_loss(logits, ids):
    log_probs = np.log(softmax(logits, axis=-1))
    targets = np.roll(ids, -1, axis=-1)[..., None]
    return float(-np.take_along_axis(log_probs, targets, axis=-1).mean())
'''},
    # -- causal self-attention with a cache -----------------------------------------------
    "no causal mask": {"causal_self_attention": _CAUSAL_HEAD + _CONCAT + '''
    mask = None
''' + _CAUSAL_TAIL},
    "causal mask that ignores the cache offset (tril with k=0)": {"causal_self_attention": _CAUSAL_HEAD + _CONCAT + '''
    mask = np.tril(np.ones((q.shape[-2], k.shape[-2]), dtype=bool))
''' + _CAUSAL_TAIL},
    "causal mask off by one (each query also sees the next key)": {"causal_self_attention": _CAUSAL_HEAD + _CONCAT + '''
    mask = np.tril(np.ones((q.shape[-2], k.shape[-2]), dtype=bool), k=k.shape[-2] - q.shape[-2] + 1)
''' + _CAUSAL_TAIL},
    "cache that drops its oldest position": {"causal_self_attention": _CAUSAL_HEAD + '''
    if cache is not None:
        k = np.concatenate([cache[0][..., 1:, :], k], axis=-2)
        v = np.concatenate([cache[1][..., 1:, :], v], axis=-2)
    mask = np.tril(np.ones((q.shape[-2], k.shape[-2]), dtype=bool), k=k.shape[-2] - q.shape[-2])
''' + _CAUSAL_TAIL},
    "cache that duplicates the last cached position": {"causal_self_attention": _CAUSAL_HEAD + '''
    if cache is not None:
        k = np.concatenate([cache[0], cache[0][..., -1:, :], k], axis=-2)
        v = np.concatenate([cache[1], cache[1][..., -1:, :], v], axis=-2)
    mask = np.tril(np.ones((q.shape[-2], k.shape[-2]), dtype=bool), k=k.shape[-2] - q.shape[-2])
''' + _CAUSAL_TAIL},
    "new keys and values put before the cached ones": {"causal_self_attention": _CAUSAL_HEAD + '''
    if cache is not None:
        k = np.concatenate([k, cache[0]], axis=-2)
        v = np.concatenate([v, cache[1]], axis=-2)
    mask = np.tril(np.ones((q.shape[-2], k.shape[-2]), dtype=bool), k=k.shape[-2] - q.shape[-2])
''' + _CAUSAL_TAIL},
    "cache returned without the new keys and values": {"causal_self_attention": _CAUSAL_HEAD + '''
    old = (k[..., :0, :], v[..., :0, :]) if cache is None else cache
    k = np.concatenate([old[0], k], axis=-2)
    v = np.concatenate([old[1], v], axis=-2)
    mask = np.tril(np.ones((q.shape[-2], k.shape[-2]), dtype=bool), k=k.shape[-2] - q.shape[-2])
    heads, weights = scaled_dot_product_attention(q, k, v, mask=mask)
    return merge_heads(heads) @ p["W_O"] + p["b_O"], weights, old
'''},
    # -- cross-attention ----------------------------------------------------------------
    "cross-attention with a causal mask": {"cross_attention": _CROSS_HEAD + '''
    q = split_heads(x @ p["W_Q"] + p["b_Q"], n_heads)
    k = split_heads(memory @ p["W_K"] + p["b_K"], n_heads)
    v = split_heads(memory @ p["W_V"] + p["b_V"], n_heads)
    mask = np.tril(np.ones((q.shape[-2], k.shape[-2]), dtype=bool))
    if memory_mask is not None:
        mask = mask & memory_mask[..., None, None, :]
    heads, weights = scaled_dot_product_attention(q, k, v, mask=mask)
    return merge_heads(heads) @ p["W_O"] + p["b_O"], weights
'''},
    "cross-attention ignoring the source padding": {"cross_attention": _CROSS_HEAD + '''
    q = split_heads(x @ p["W_Q"] + p["b_Q"], n_heads)
    k = split_heads(memory @ p["W_K"] + p["b_K"], n_heads)
    v = split_heads(memory @ p["W_V"] + p["b_V"], n_heads)
    heads, weights = scaled_dot_product_attention(q, k, v)
    return merge_heads(heads) @ p["W_O"] + p["b_O"], weights
'''},
    "cross-attention with the key and value projections swapped": {"cross_attention": _CROSS_HEAD + '''
    q = split_heads(x @ p["W_Q"] + p["b_Q"], n_heads)
    k = split_heads(memory @ p["W_V"] + p["b_V"], n_heads)
    v = split_heads(memory @ p["W_K"] + p["b_K"], n_heads)
    mask = None if memory_mask is None else memory_mask[..., None, None, :]
    heads, weights = scaled_dot_product_attention(q, k, v, mask=mask)
    return merge_heads(heads) @ p["W_O"] + p["b_O"], weights
'''},
    "cross-attention with the key projection applied to the queries too": {"cross_attention": _CROSS_HEAD + '''
    q = split_heads(x @ p["W_K"] + p["b_K"], n_heads)
    k = split_heads(memory @ p["W_K"] + p["b_K"], n_heads)
    v = split_heads(memory @ p["W_V"] + p["b_V"], n_heads)
    mask = None if memory_mask is None else memory_mask[..., None, None, :]
    heads, weights = scaled_dot_product_attention(q, k, v, mask=mask)
    return merge_heads(heads) @ p["W_O"] + p["b_O"], weights
'''},
    # -- the decoder block ----------------------------------------------------------------
    "decoder block without cross-attention": {"decoder_block": _BLOCK_HEAD + _PRE_LN + '''
    attended, self_w, _ = causal_self_attention(x, p["self_attn"], n_heads)
    a = ln(x + attended, 1)
    _, cross_w = cross_attention(a, memory, p["cross_attn"], n_heads)
    return ln(a + ffn(a), 3), self_w, cross_w
'''},
    "cross-attention queried with the block input x instead of a": {"decoder_block": _BLOCK_HEAD + _PRE_LN + '''
    attended, self_w, _ = causal_self_attention(x, p["self_attn"], n_heads)
    a = ln(x + attended, 1)
    crossed, cross_w = cross_attention(x, memory, p["cross_attn"], n_heads)
    b = ln(a + crossed, 2)
    return ln(b + ffn(b), 3), self_w, cross_w
'''},
    "norm_first ignored (always post-LN)": {"decoder_block": _BLOCK_HEAD + _POST_LN},
    "pre-LN that also normalises the memory": {"decoder_block": _BLOCK_HEAD + _PRE_LN.replace(
        "cross_attention(ln(a, 2), memory,", "cross_attention(ln(a, 2), ln(memory, 2),") + _POST_LN},
    "ln2 and ln3 swapped": {"decoder_block": _BLOCK_HEAD + _PRE_LN.replace("ln(a, 2)", "ln(a, 9)").replace(
        "ln(b, 3)", "ln(b, 2)").replace("ln(a, 9)", "ln(a, 3)") + '''
    attended, self_w, _ = causal_self_attention(x, p["self_attn"], n_heads)
    a = ln(x + attended, 1)
    crossed, cross_w = cross_attention(a, memory, p["cross_attn"], n_heads)
    b = ln(a + crossed, 3)
    return ln(b + ffn(b), 2), self_w, cross_w
'''},
    "post-LN residual around the cross-attention taken from x": {"decoder_block": _BLOCK_HEAD + _PRE_LN + '''
    attended, self_w, _ = causal_self_attention(x, p["self_attn"], n_heads)
    a = ln(x + attended, 1)
    crossed, cross_w = cross_attention(a, memory, p["cross_attn"], n_heads)
    b = ln(x + crossed, 2)
    return ln(b + ffn(b), 3), self_w, cross_w
'''},
    # -- sampling_probabilities -------------------------------------------------------------
    "temperature applied after the softmax": {"sampling_probabilities": _SAMPLING_HEAD + '''
    probs = softmax(logits, axis=-1) / temperature
    probs = probs / probs.sum(axis=-1, keepdims=True)
''' + _TOP_K + _top_p("mass_before < top_p")},
    "temperature multiplied instead of divided": {"sampling_probabilities": _SAMPLING_HEAD + '''
    probs = softmax(logits * temperature, axis=-1)
''' + _TOP_K + _top_p("mass_before < top_p")},
    "top-p that keeps one token too few (cumulative sum < p)": {"sampling_probabilities": _SAMPLING_HEAD + '''
    probs = softmax(logits / temperature, axis=-1)
''' + _TOP_K + _top_p("(cum < top_p) | (np.arange(cum.shape[-1]) == 0)")},
    "top-p that keeps one token too many": {"sampling_probabilities": _SAMPLING_HEAD + '''
    probs = softmax(logits / temperature, axis=-1)
''' + _TOP_K + _top_p("np.concatenate([np.ones(cum.shape[:-1] + (1,), dtype=bool), mass_before[..., :-1] < top_p], "
                      "axis=-1)")},
    "top-p that keeps the token whose mass before it equals p (<= instead of <)": {
        "sampling_probabilities": _SAMPLING_HEAD + _SOFTMAX_T + _TOP_K + _top_p("mass_before <= top_p")},
    "top-p by searchsorted on the right (one token too many where a running sum equals p)": {
        "sampling_probabilities": _SAMPLING_HEAD + _SOFTMAX_T + _TOP_K + _SEARCHSORTED.format(side="right")},
    "top-p computed on the distribution before top-k": {"sampling_probabilities": _SAMPLING_HEAD + '''
    probs = softmax(logits / temperature, axis=-1)
    order = np.argsort(-probs, axis=-1, kind="stable")
    sorted_p = np.take_along_axis(probs, order, axis=-1)
    keep_p = np.ones(probs.shape, dtype=bool)
    if top_p is not None and top_p < 1:
        np.put_along_axis(keep_p, order, np.cumsum(sorted_p, axis=-1) - sorted_p < top_p, axis=-1)
    keep_k = np.ones(probs.shape, dtype=bool)
    if top_k is not None:
        keep_k = np.zeros(probs.shape, dtype=bool)
        np.put_along_axis(keep_k, order[..., :top_k], True, axis=-1)
    probs = np.where(keep_p & keep_k, probs, 0.0)
    return probs / probs.sum(axis=-1, keepdims=True)
'''},
    "top-k that keeps the k smallest": {"sampling_probabilities": _SAMPLING_HEAD + '''
    probs = softmax(logits / temperature, axis=-1)
''' + _TOP_K.replace('order[..., :top_k]', 'order[..., -top_k:]') + _top_p("mass_before < top_p")},
    "truncation without renormalising": {"sampling_probabilities": _SAMPLING_HEAD + '''
    probs = softmax(logits / temperature, axis=-1)
''' + _TOP_K.replace("probs = probs / probs.sum(axis=-1, keepdims=True)", "pass") + _top_p(
        "mass_before < top_p").replace("probs = probs / probs.sum(axis=-1, keepdims=True)", "pass")},
    # -- sample_next_token ---------------------------------------------------------------------
    "sampling from the plain softmax (rules ignored)": {"sample_next_token": '''
def sample_next_token(logits, *, rng, temperature=1.0, top_k=None, top_p=None):
    probs = softmax(np.asarray(logits, dtype=float))
    return int(rng.choice(probs.shape[-1], p=probs))
'''},
    "uniform over the kept tokens": {"sample_next_token": '''
def sample_next_token(logits, *, rng, temperature=1.0, top_k=None, top_p=None):
    probs = sampling_probabilities(logits, temperature=temperature, top_k=top_k, top_p=top_p)
    kept = np.flatnonzero(probs > 0)
    return int(rng.choice(kept))
'''},
    "argmax of probabilities times uniform noise": {"sample_next_token": '''
def sample_next_token(logits, *, rng, temperature=1.0, top_k=None, top_p=None):
    probs = sampling_probabilities(logits, temperature=temperature, top_k=top_k, top_p=top_p)
    return int(np.argmax(probs * rng.random(probs.shape)))
'''},
    "inverse CDF over the sorted probabilities, returning the rank instead of the token": {"sample_next_token": '''
def sample_next_token(logits, *, rng, temperature=1.0, top_k=None, top_p=None):
    probs = sampling_probabilities(logits, temperature=temperature, top_k=top_k, top_p=top_p)
    if temperature == 0:
        return int(np.argmax(probs))
    running = np.cumsum(np.sort(probs)[::-1])
    return min(int(np.searchsorted(running, rng.random(), side="right")), int((probs > 0).sum()) - 1)
'''},
    "always the most likely token": {"sample_next_token": '''
def sample_next_token(logits, *, rng, temperature=1.0, top_k=None, top_p=None):
    probs = sampling_probabilities(logits, temperature=temperature, top_k=top_k, top_p=top_p)
    return int(np.argmax(probs))
'''},
    # -- generate -------------------------------------------------------------------------------
    "generation that returns only the new tokens": {"generate": _GENERATE_HEAD + '''
    new = []
    for _ in range(n_new):
        token = sample_next_token(step_fn(ids), rng=rng, temperature=temperature, top_k=top_k, top_p=top_p)
        ids = np.append(ids, token)
        new.append(token)
    return np.array(new)
'''},
    "generation one token short": {"generate": _GENERATE_HEAD + '''
    for _ in range(n_new - 1):
        token = sample_next_token(step_fn(ids), rng=rng, temperature=temperature, top_k=top_k, top_p=top_p)
        ids = np.append(ids, token)
    return ids
'''},
    "step_fn given only the last token": {"generate": _GENERATE_HEAD + '''
    for _ in range(n_new):
        token = sample_next_token(step_fn(ids[-1:]), rng=rng, temperature=temperature, top_k=top_k, top_p=top_p)
        ids = np.append(ids, token)
    return ids
'''},
    "step_fn given the prefix without the latest token": {"generate": _GENERATE_HEAD + '''
    for _ in range(n_new):
        token = sample_next_token(step_fn(ids[:-1] if len(ids) > 1 else ids), rng=rng, temperature=temperature,
                                  top_k=top_k, top_p=top_p)
        ids = np.append(ids, token)
    return ids
'''},
    "sampling options not passed on (top_k ignored)": {"generate": _GENERATE_HEAD + '''
    for _ in range(n_new):
        token = sample_next_token(step_fn(ids), rng=rng, temperature=temperature)
        ids = np.append(ids, token)
    return ids
'''},
}

# -- written for issue 38, as students get them wrong: each class of bug the hidden cases of 08 draw for ------
# (logits beyond exp's range, float32 in -> float32 out, one head / one token, a fully padded source, ties,
# top_k above V, a temperature near 0, u on a boundary, the Generator given, the defaults, int ids, precision)
_OWN_ATTENTION = '''
def _attend(q, k, v, allowed):
    scores = q @ np.swapaxes(k, -1, -2) / np.sqrt(q.shape[-1])
    scores = np.where(allowed, scores, -np.inf)
    w = np.exp(scores - scores.max(axis=-1, keepdims=True))
    w = w / w.sum(axis=-1, keepdims=True)
    return w @ v, w
'''

MUTANTS.update({
    "LM loss with its own softmax, no max shift (exp of logits ~1000 overflows)": {"language_model_loss": '''
def language_model_loss(logits, ids):
    e = np.exp(logits[..., :-1, :])
    p = e / e.sum(axis=-1, keepdims=True)
    return float(-np.mean(np.log(np.take_along_axis(p, ids[..., 1:, None], axis=-1))))
'''},
    "LM loss computed in float32 (a float64 task rounded to float32)": {"language_model_loss": '''
def language_model_loss(logits, ids):
    z = logits[..., :-1, :].astype(np.float32)
    z = z - z.max(axis=-1, keepdims=True)
    log_p = z - np.log(np.exp(z).sum(axis=-1, keepdims=True))
    return float(-np.take_along_axis(log_p, ids[..., 1:, None], axis=-1).mean())
'''},
    "LM loss that loops over positions t < n - 2 (the last scored position dropped)": {"language_model_loss": '''
def language_model_loss(logits, ids):
    losses = []
    for t in range(ids.shape[-1] - 2):
        lp = np.log(softmax(logits[..., t, :], axis=-1))
        losses.append(-np.take_along_axis(lp, ids[..., t + 1, None], axis=-1))
    return float(np.mean(losses)) if losses else 0.0
'''},
    "causal attention written by hand, scaled by np.sqrt(d_head) (a float64 scalar: float32 becomes float64)": {
        "causal_self_attention": _OWN_ATTENTION + _CAUSAL_HEAD + _CONCAT + '''
    n_new, n_total = q.shape[-2], k.shape[-2]
    allowed = np.tril(np.ones((n_new, n_total), dtype=bool), k=n_total - n_new)
    heads, weights = _attend(q, k, v, allowed)
    return merge_heads(heads) @ p["W_O"] + p["b_O"], weights, (k, v)
'''},
    "causal attention by hand with exp(scores) unshifted (overflows for large scores)": {
        "causal_self_attention": _CAUSAL_HEAD + _CONCAT + '''
    n_new, n_total = q.shape[-2], k.shape[-2]
    allowed = np.tril(np.ones((n_new, n_total), dtype=bool), k=n_total - n_new)
    scores = q @ np.swapaxes(k, -1, -2) * (q.shape[-1] ** -0.5)
    w = np.where(allowed, np.exp(scores), 0.0)
    w = w / w.sum(axis=-1, keepdims=True)
    return merge_heads(w @ v) @ p["W_O"] + p["b_O"], w, (k, v)
'''},
    "an empty cache made with np.zeros (float64) when there is none: float32 in, float64 out": {
        "causal_self_attention": _CAUSAL_HEAD + '''
    if cache is None:
        cache = (np.zeros(k.shape[:-2] + (0, k.shape[-1])), np.zeros(v.shape[:-2] + (0, v.shape[-1])))
    k = np.concatenate([cache[0], k], axis=-2)
    v = np.concatenate([cache[1], v], axis=-2)
    mask = np.tril(np.ones((q.shape[-2], k.shape[-2]), dtype=bool), k=k.shape[-2] - q.shape[-2])
''' + _CAUSAL_TAIL},
    "one head taken as no head axis at all (weights (n, n) for n_heads = 1)": {"causal_self_attention": '''
def causal_self_attention(x, params, n_heads, cache=None):
    p = params
    proj = [x @ p[f"W_{c}"] + p[f"b_{c}"] for c in "QKV"]
    q, k, v = proj if n_heads == 1 else [split_heads(a, n_heads) for a in proj]
''' + _CONCAT + '''
    mask = np.tril(np.ones((q.shape[-2], k.shape[-2]), dtype=bool), k=k.shape[-2] - q.shape[-2])
    heads, weights = scaled_dot_product_attention(q, k, v, mask=mask)
    return (heads if n_heads == 1 else merge_heads(heads)) @ p["W_O"] + p["b_O"], weights, (k, v)
'''},
    "cross-attention by hand: a fully padded source gives NaN (the max of an all -inf row)": {
        "cross_attention": _OWN_ATTENTION.replace("np.sqrt(q.shape[-1])", "q.shape[-1] ** 0.5") + _CROSS_HEAD + '''
    q = split_heads(x @ p["W_Q"] + p["b_Q"], n_heads)
    k = split_heads(memory @ p["W_K"] + p["b_K"], n_heads)
    v = split_heads(memory @ p["W_V"] + p["b_V"], n_heads)
    allowed = True if memory_mask is None else memory_mask[..., None, None, :]
    heads, weights = _attend(q, k, v, allowed)
    return merge_heads(heads) @ p["W_O"] + p["b_O"], weights
'''},
    "cross-attention padding as an additive finfo.min (a fully padded source attends uniformly)": {
        "cross_attention": _CROSS_HEAD + '''
    q = split_heads(x @ p["W_Q"] + p["b_Q"], n_heads)
    k = split_heads(memory @ p["W_K"] + p["b_K"], n_heads)
    v = split_heads(memory @ p["W_V"] + p["b_V"], n_heads)
    mask = None
    if memory_mask is not None:
        mask = np.where(memory_mask, 0.0, np.finfo(x.dtype).min)[..., None, None, :]
    heads, weights = scaled_dot_product_attention(q, k, v, mask=mask)
    return merge_heads(heads) @ p["W_O"] + p["b_O"], weights
'''},
    "cross-attention scores by hand, divided by np.sqrt(d_head) (float32 becomes float64)": {
        "cross_attention": _CROSS_HEAD + '''
    q = split_heads(x @ p["W_Q"] + p["b_Q"], n_heads)
    k = split_heads(memory @ p["W_K"] + p["b_K"], n_heads)
    v = split_heads(memory @ p["W_V"] + p["b_V"], n_heads)
    scores = q @ np.swapaxes(k, -1, -2) / np.sqrt(q.shape[-1])
    if memory_mask is not None:
        scores = np.where(memory_mask[..., None, None, :], scores, -np.inf)
    weights = softmax(scores, axis=-1)
    return merge_heads(weights @ v) @ p["W_O"] + p["b_O"], weights
'''},
    "decoder block with a hand-written layer norm whose statistics are float64 (float32 in, float64 out)": {
        "decoder_block": _BLOCK_HEAD.replace(
            'ln = lambda h, i: layer_norm(h, p[f"ln{i}_gamma"], p[f"ln{i}_beta"])',
            'ln = lambda h, i: p[f"ln{i}_gamma"] * (h - h.mean(-1, keepdims=True, dtype=np.float64)) / '
            'np.sqrt(h.var(-1, keepdims=True, dtype=np.float64) + 1e-5) + p[f"ln{i}_beta"]') + _PRE_LN + _POST_LN},
    "sampling with its own softmax, no max shift": {"sampling_probabilities": _SAMPLING_HEAD + '''
    e = np.exp(logits / temperature)
    probs = e / e.sum(axis=-1, keepdims=True)
''' + _TOP_K + _top_p("mass_before < top_p")},
    "sampling with a default temperature of 0.7": {"sampling_probabilities": _SAMPLING_HEAD.replace(
        "temperature=1.0", "temperature=0.7") + _SOFTMAX_T + _TOP_K + _top_p("mass_before < top_p")},
    "sampling with a default top_p of 0.9": {"sampling_probabilities": _SAMPLING_HEAD.replace(
        "top_p=None", "top_p=0.9") + _SOFTMAX_T + _TOP_K + _top_p("mass_before < top_p")},
    "greedy that marks every tied maximum (probs == max, renormalised)": {"sampling_probabilities": '''
def sampling_probabilities(logits, *, temperature=1.0, top_k=None, top_p=None):
    logits = np.asarray(logits, dtype=float)
    if temperature == 0:
        hot = (logits == logits.max(axis=-1, keepdims=True)).astype(float)
        return hot / hot.sum(axis=-1, keepdims=True)
''' + _SOFTMAX_T + _TOP_K + _top_p("mass_before < top_p")},
    "greedy at the last of the tied maxima (argmax of the reversed row)": {"sampling_probabilities": '''
def sampling_probabilities(logits, *, temperature=1.0, top_k=None, top_p=None):
    logits = np.asarray(logits, dtype=float)
    if temperature == 0:
        last = logits.shape[-1] - 1 - np.argmax(logits[..., ::-1], axis=-1)
        return (np.arange(logits.shape[-1]) == last[..., None]).astype(float)
''' + _SOFTMAX_T + _TOP_K + _top_p("mass_before < top_p")},
    "top-k by a threshold (probs >= the k-th largest: ties at the cut all kept)": {
        "sampling_probabilities": _SAMPLING_HEAD + _SOFTMAX_T + '''
    order = np.argsort(-probs, axis=-1, kind="stable")
    if top_k is not None:
        kth = np.take_along_axis(probs, order[..., top_k - 1:top_k], axis=-1)
        probs = np.where(probs >= kth, probs, 0.0)
        probs = probs / probs.sum(axis=-1, keepdims=True)
''' + _top_p("mass_before < top_p")},
    "top-k by np.partition (raises for top_k > V)": {"sampling_probabilities": _SAMPLING_HEAD + _SOFTMAX_T + '''
    if top_k is not None:
        kth = np.partition(probs, probs.shape[-1] - top_k, axis=-1)[..., probs.shape[-1] - top_k, None]
        keep = np.zeros(probs.shape, dtype=bool)
        np.put_along_axis(keep, np.argsort(-probs, axis=-1, kind="stable")[..., :top_k], True, axis=-1)
        probs = np.where(keep & (probs >= kth), probs, 0.0)
        probs = probs / probs.sum(axis=-1, keepdims=True)
    order = np.argsort(-probs, axis=-1, kind="stable")
''' + _top_p("mass_before < top_p")},
    "a temperature below 0.01 treated as greedy": {"sampling_probabilities": _SAMPLING_HEAD.replace(
        "if temperature == 0:", "if temperature < 0.01:") + _SOFTMAX_T + _TOP_K + _top_p("mass_before < top_p")},
    "top-p keeping the tokens whose running sum is <= p (none when p is below the largest probability)": {
        "sampling_probabilities": _SAMPLING_HEAD + _SOFTMAX_T + _TOP_K + _top_p("cum <= top_p")},
    "draw by searchsorted on the left (u on a running sum goes to the token before it)": {"sample_next_token": '''
def sample_next_token(logits, *, rng, temperature=1.0, top_k=None, top_p=None):
    probs = sampling_probabilities(logits, temperature=temperature, top_k=top_k, top_p=top_p)
    if temperature == 0:
        return int(np.argmax(probs))
    return int(np.searchsorted(np.cumsum(probs), rng.random(), side="left"))
'''},
    "draw from the global np.random (the rng given is ignored)": {"sample_next_token": '''
def sample_next_token(logits, *, rng, temperature=1.0, top_k=None, top_p=None):
    probs = sampling_probabilities(logits, temperature=temperature, top_k=top_k, top_p=top_p)
    if temperature == 0:
        return int(np.argmax(probs))
    return int(np.random.choice(probs.shape[-1], p=probs))
'''},
    "draw from a fresh unseeded Generator each call": {"sample_next_token": '''
def sample_next_token(logits, *, rng, temperature=1.0, top_k=None, top_p=None):
    probs = sampling_probabilities(logits, temperature=temperature, top_k=top_k, top_p=top_p)
    if temperature == 0:
        return int(np.argmax(probs))
    return int(np.random.default_rng().choice(probs.shape[-1], p=probs))
'''},
    "greedy that still draws a u (fails with rng=None)": {"sample_next_token": '''
def sample_next_token(logits, *, rng, temperature=1.0, top_k=None, top_p=None):
    probs = sampling_probabilities(logits, temperature=temperature, top_k=top_k, top_p=top_p)
    u = rng.random()
    return int(min(np.searchsorted(np.cumsum(probs), u, side="right"), np.flatnonzero(probs)[-1]))
'''},
    "generation with a fresh unseeded Generator each step": {"generate": _GENERATE_HEAD + '''
    for _ in range(n_new):
        step_rng = np.random.default_rng()
        token = sample_next_token(step_fn(ids), rng=step_rng, temperature=temperature, top_k=top_k, top_p=top_p)
        ids = np.append(ids, token)
    return ids
'''},
    "generation re-seeding np.random.default_rng(0) every step": {"generate": _GENERATE_HEAD + '''
    for _ in range(n_new):
        token = sample_next_token(step_fn(ids), rng=np.random.default_rng(0), temperature=temperature,
                                  top_k=top_k, top_p=top_p)
        ids = np.append(ids, token)
    return ids
'''},
    "generation greedy unless a temperature is given (default temperature 0)": {"generate": '''
def generate(step_fn, prompt_ids, n_new, *, rng=None, temperature=0.0, top_k=None, top_p=None):
    ids = np.asarray(prompt_ids, dtype=np.int64)
    for _ in range(n_new):
        token = sample_next_token(step_fn(ids), rng=rng, temperature=temperature, top_k=top_k, top_p=top_p)
        ids = np.append(ids, token)
    return ids
'''},
    "generation that concatenates the prompt with a list of new tokens (float64 when there are none)": {
        "generate": '''
def generate(step_fn, prompt_ids, n_new, *, rng=None, temperature=1.0, top_k=None, top_p=None):
    new = []
    for _ in range(n_new):
        ids = np.concatenate([np.asarray(prompt_ids), np.array(new, dtype=np.int64)])
        new.append(sample_next_token(step_fn(ids), rng=rng, temperature=temperature, top_k=top_k, top_p=top_p))
    return np.concatenate([np.asarray(prompt_ids), new])
'''},
})

# Correct implementations written differently: the hidden tests must accept them.
ALTERNATIVES = {
    "a draw with rng.choice (NumPy's own inverse CDF) instead of one rng.random() by hand": {"sample_next_token": '''
def sample_next_token(logits, *, rng, temperature=1.0, top_k=None, top_p=None):
    probs = sampling_probabilities(logits, temperature=temperature, top_k=top_k, top_p=top_p)
    if temperature == 0:
        return int(np.argmax(probs))
    return int(rng.choice(probs.shape[-1], p=probs))
'''},
    "top-p by searchsorted on the left (the first index whose running sum reaches p)": {
        "sampling_probabilities": _SAMPLING_HEAD + _SOFTMAX_T + _TOP_K + _SEARCHSORTED.format(side="left")},
    "top-p by counting the running sums below p (an inclusive cumulative sum)": {
        "sampling_probabilities": _SAMPLING_HEAD + _SOFTMAX_T + _TOP_K + _top_p(
            "np.arange(cum.shape[-1]) <= (cum < top_p).sum(axis=-1, keepdims=True)")},
    "top-p as Hugging Face writes it (ascending sort, drop the tail whose mass is <= 1 - p)": {
        "sampling_probabilities": _SAMPLING_HEAD + _SOFTMAX_T + _TOP_K + '''
    if top_p is not None and top_p < 1:
        up = np.argsort(probs, axis=-1, kind="stable")              # ascending
        tail = np.cumsum(np.take_along_axis(probs, up, axis=-1), axis=-1) <= 1 - top_p
        tail[..., -1] = False                                        # the most likely token always stays
        drop = np.zeros(probs.shape, dtype=bool)
        np.put_along_axis(drop, up, tail, axis=-1)
        probs = np.where(drop, 0.0, probs)
        probs = probs / probs.sum(axis=-1, keepdims=True)
    return probs
'''},
}
