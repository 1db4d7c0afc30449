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
