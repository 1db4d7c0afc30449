"""Plausible wrong implementations that the hidden tests of notebook 07 must catch.

Each entry maps a description to {solution grade_id: replacement source}.
"""

_LAYER = '''
def encoder_layer(x, attention_mask, weights, layer, n_heads, eps):
    def p(name):
        return weights[f"encoder.layer.{LAYER}.{name}"]

    d_ff, d = p("intermediate.dense.weight").shape
    block = TransformerEncoderBlock(d, n_heads, d_ff, rng=np.random.default_rng(0),
                                    activation=ACT, eps=EPS, dtype=x.dtype, norm_first=PRE_LN)
    s, o = "attention.self.", "attention.output."
    block.attention.set_weights(p(s + "query.weight")T_, p(s + "key.weight")T_, p(s + "value.weight")T_,
                                p(o + "dense.weight")T_, p(s + "query.bias"), p(s + "key.bias"),
                                p(s + "value.bias"), p(o + "dense.bias"))
    block.feed_forward.set_weights(p("intermediate.dense.weight").T, p("intermediate.dense.bias"),
                                   p("output.dense.weight").T, p("output.dense.bias"))
    block.ln1_gamma, block.ln1_beta = p(LN1 + "LayerNorm.weight"), p(LN1 + "LayerNorm.bias")
    block.ln2_gamma, block.ln2_beta = p(LN2 + "LayerNorm.weight"), p(LN2 + "LayerNorm.bias")
    return block(x, key_padding_mask=MASK)
'''
_LAYER_OK = {"LAYER": "layer", "ACT": '"gelu"', "EPS": "eps", "PRE_LN": "False", "T_": ".T",
             "LN1": '"attention.output."', "LN2": '"output."', "MASK": "np.asarray(attention_mask) != 0"}


def _layer(**changes):
    src = _LAYER
    for key, value in {**_LAYER_OK, **changes}.items():
        src = src.replace(key, value)
    return {"encoder_layer": src}


MUTANTS = {
    # ---------------------------------------------------------------- embed_tokens
    "embeddings: positions start at row 1": {"embed_tokens": '''
def embed_tokens(input_ids, token_type_ids, word, position, token_type, gamma, beta, eps):
    n = np.shape(input_ids)[-1]
    x = word[input_ids] + position[1:n + 1] + token_type[token_type_ids]
    return layer_norm(x, gamma, beta, eps)
'''},
    "embeddings: token types forgotten": {"embed_tokens": '''
def embed_tokens(input_ids, token_type_ids, word, position, token_type, gamma, beta, eps):
    n = np.shape(input_ids)[-1]
    return layer_norm(word[input_ids] + position[:n], gamma, beta, eps)
'''},
    "embeddings: no layer norm": {"embed_tokens": '''
def embed_tokens(input_ids, token_type_ids, word, position, token_type, gamma, beta, eps):
    n = np.shape(input_ids)[-1]
    return word[input_ids] + position[:n] + token_type[token_type_ids]
'''},
    "embeddings: layer norm with PyTorch's default eps instead of the argument": {"embed_tokens": '''
def embed_tokens(input_ids, token_type_ids, word, position, token_type, gamma, beta, eps):
    n = np.shape(input_ids)[-1]
    return layer_norm(word[input_ids] + position[:n] + token_type[token_type_ids], gamma, beta, 1e-5)
'''},
    "embeddings: position rows indexed by token id": {"embed_tokens": '''
def embed_tokens(input_ids, token_type_ids, word, position, token_type, gamma, beta, eps):
    x = word[input_ids] + position[np.minimum(input_ids, len(position) - 1)] + token_type[token_type_ids]
    return layer_norm(x, gamma, beta, eps)
'''},
    # ---------------------------------------------------------------- encoder_layer
    "layer: attention matrices not transposed (x @ weight)": _layer(T_=""),
    "layer: the two layer norms swapped": _layer(LN1='"output."', LN2='"attention.output."'),
    "layer: ReLU instead of GELU": _layer(ACT='"relu"'),
    "layer: PyTorch's default eps instead of the checkpoint's": _layer(EPS="1e-5"),
    "layer: pre-LN instead of post-LN": _layer(PRE_LN="True"),
    "layer: always layer 0": _layer(LAYER="0"),
    "layer: padding mask ignored": _layer(MASK="None"),
    "layer: padding mask inverted (True = pad)": _layer(MASK="np.asarray(attention_mask) == 0"),
    # ---------------------------------------------------------------- sentence_embeddings
    "pooling: mean over every position, pads included": {"sentence_embeddings": '''
def sentence_embeddings(states, attention_mask):
    pooled = states.mean(axis=1)
    return pooled / np.linalg.norm(pooled, axis=-1, keepdims=True)
'''},
    "pooling: every token normalised, then averaged": {"sentence_embeddings": '''
def sentence_embeddings(states, attention_mask):
    m = np.asarray(attention_mask, dtype=float)[..., None]
    unit = states / np.linalg.norm(states, axis=-1, keepdims=True)
    return (unit * m).sum(axis=1) / m.sum(axis=1)
'''},
    "pooling: not normalised": {"sentence_embeddings": '''
def sentence_embeddings(states, attention_mask):
    m = np.asarray(attention_mask, dtype=float)[..., None]
    return (states * m).sum(axis=1) / m.sum(axis=1)
'''},
    "pooling: normalised over the batch axis": {"sentence_embeddings": '''
def sentence_embeddings(states, attention_mask):
    m = np.asarray(attention_mask, dtype=float)[..., None]
    pooled = (states * m).sum(axis=1) / m.sum(axis=1)
    return pooled / np.linalg.norm(pooled, axis=0, keepdims=True)
'''},
    "pooling: the [CLS] token instead of the mean": {"sentence_embeddings": '''
def sentence_embeddings(states, attention_mask):
    pooled = states[:, 0]
    return pooled / np.linalg.norm(pooled, axis=-1, keepdims=True)
'''},
    "pooling: max over the real tokens": {"sentence_embeddings": '''
def sentence_embeddings(states, attention_mask):
    m = np.asarray(attention_mask)[..., None] != 0
    pooled = np.where(m, states, -np.inf).max(axis=1)
    return pooled / np.linalg.norm(pooled, axis=-1, keepdims=True)
'''},
    # ---------------------------------------------------------------- pattern_score
    "pattern score: query_mask ignored": {"pattern_score": '''
def pattern_score(weights, target, query_mask):
    on_target = np.where(target[None, :, None], weights, 0.0).sum(axis=-1)
    return on_target.mean(axis=(1, 3))
'''},
    "pattern score: mean of per-sentence means": {"pattern_score": '''
def pattern_score(weights, target, query_mask):
    on_target = np.where(target[None, :, None], weights, 0.0).sum(axis=-1)        # (L, B, H, n)
    q = query_mask[None, :, None, :]
    per_sentence = np.where(q, on_target, 0.0).sum(axis=-1) / np.maximum(q.sum(axis=-1), 1)
    return per_sentence.mean(axis=1)
'''},
    "pattern score: max over the target keys instead of their sum": {"pattern_score": '''
def pattern_score(weights, target, query_mask):
    on_target = np.where(target[None, :, None], weights, 0.0).max(axis=-1)
    return np.where(query_mask[None, :, None, :], on_target, 0.0).sum(axis=(1, 3)) / query_mask.sum()
'''},
    "pattern score: summed over the query axis (target transposed)": {"pattern_score": '''
def pattern_score(weights, target, query_mask):
    on_target = np.where(target[None, :, None], weights, 0.0).sum(axis=-2)
    return np.where(query_mask[None, :, None, :], on_target, 0.0).sum(axis=(1, 3)) / query_mask.sum()
'''},
    "pattern score: mean over the keys instead of the sum": {"pattern_score": '''
def pattern_score(weights, target, query_mask):
    on_target = np.where(target[None, :, None], weights, 0.0).mean(axis=-1)
    return np.where(query_mask[None, :, None, :], on_target, 0.0).sum(axis=(1, 3)) / query_mask.sum()
'''},
}


# ---------------------------------------------------------------- encode_long_document
# The notebook's loop, with each knob a place where a plausible mistake goes.
_LONG = '''
def encode_long_document(token_ids, window, stride, encode_window, cls_id, sep_id):
    ids = np.asarray(token_ids)
    n = len(ids)
    windows = [(0, min(window, n))]
    while MORE:
        start = windows[-1][0] + STEP
        windows.append((start, min(start + window, n)))
    best = np.full(n, -1.0)
    token_states = [None] * n
    for k, (start, end) in enumerate(windows):
        row = np.concatenate([[cls_id], ids[start:end], [sep_id]])[None, :]
        states = encode_window(row, np.ones_like(row))[0]
        if k == 0:
            cls_state = states[0]
        if SEP_WHEN:
            sep_state = states[-1]
        for i in range(start, end):
            context = SCORE
            if BETTER:
                best[i], token_states[i] = context, states[COLUMN]
    doc = np.stack([cls_state, *token_states, sep_state])
    pooled = POOLED
    return doc, pooled / np.linalg.norm(pooled)
'''
_LONG_OK = {"MORE": "windows[-1][1] < n", "STEP": "stride", "SEP_WHEN": "True",
            "SCORE": "min(i - start, end - 1 - i)", "BETTER": "context > best[i]", "COLUMN": "1 + i - start",
            "POOLED": "doc.mean(axis=0)"}


def _long(**changes):
    src = _LONG
    for key, value in {**_LONG_OK, **changes}.items():
        src = src.replace(key, value)
    return {"encode_long_document": src}


MUTANTS.update({
    "long document: each token from the first window that holds it": _long(BETTER="best[i] < 0"),
    "long document: each token from the last window that holds it": _long(BETTER="True"),
    "long document: ties go to the later window": _long(BETTER="context >= best[i]"),
    "long document: the window whose centre is nearest (not the most context)":
        _long(SCORE="-abs(i - (start + end - 1) / 2)", BETTER="context > best[i] or best[i] == -1"),
    "long document: the window's [CLS] state read as the first token (column off by one)": _long(COLUMN="i - start"),
    "long document: stride read as the overlap (as in HF tokenizers)": _long(STEP="max(window - stride, 1)"),
    "long document: one more window when the last one ends exactly at n": _long(MORE="windows[-1][0] + window <= n"),
    "long document: windows start every stride up to n": _long(MORE="windows[-1][0] + stride < n"),
    "long document: [SEP] from the first window": _long(SEP_WHEN="k == 0"),
    "long document: embedding over the document's tokens only ([CLS], [SEP] left out)":
        _long(POOLED="doc[1:-1].mean(axis=0)"),
    "long document: only full windows (the tail dropped)": {"encode_long_document": '''
def encode_long_document(token_ids, window, stride, encode_window, cls_id, sep_id):
    ids = np.asarray(token_ids)
    n = len(ids)
    starts = list(range(0, max(n - window, 0) + 1, stride))
    best, token_states = np.full(n, -1), [np.zeros(1)] * n
    for k, start in enumerate(starts):
        end = min(start + window, n)
        row = np.concatenate([[cls_id], ids[start:end], [sep_id]])[None, :]
        states = encode_window(row, np.ones_like(row))[0]
        if k == 0:
            cls_state = states[0]
        sep_state = states[-1]
        for i in range(start, end):
            context = min(i - start, end - 1 - i)
            if context > best[i]:
                best[i], token_states[i] = context, states[1 + i - start]
    token_states = [s if s.shape == cls_state.shape else np.zeros_like(cls_state) for s in token_states]
    doc = np.stack([cls_state, *token_states, sep_state])
    pooled = doc.mean(axis=0)
    return doc, pooled / np.linalg.norm(pooled)
'''},
    "long document: overlapping states averaged": {"encode_long_document": '''
def encode_long_document(token_ids, window, stride, encode_window, cls_id, sep_id):
    ids = np.asarray(token_ids)
    n = len(ids)
    total, count, start = 0.0, np.zeros(n), 0
    while True:
        end = min(start + window, n)
        row = np.concatenate([[cls_id], ids[start:end], [sep_id]])[None, :]
        states = encode_window(row, np.ones_like(row))[0]
        if start == 0:
            cls_state = states[0]
            total = np.zeros((n, states.shape[-1]))
        total = total + np.pad(states[1:-1], ((start, n - end), (0, 0)))
        count = count + ((np.arange(n) >= start) & (np.arange(n) < end))
        sep_state = states[-1]
        if end == n:
            break
        start = start + stride
    doc = np.concatenate([cls_state[None], total / count[:, None], sep_state[None]])
    pooled = doc.mean(axis=0)
    return doc, pooled / np.linalg.norm(pooled)
'''},
    "long document: windows batched and padded, but the mask all ones": {"encode_long_document": '''
def encode_long_document(token_ids, window, stride, encode_window, cls_id, sep_id):
    ids = np.asarray(token_ids)
    n = len(ids)
    windows = [(0, min(window, n))]
    while windows[-1][1] < n:
        start = windows[-1][0] + stride
        windows.append((start, min(start + window, n)))
    m = max(e - s for s, e in windows) + 2
    batch = np.zeros((len(windows), m), dtype=int)
    for k, (s, e) in enumerate(windows):
        batch[k, :e - s + 2] = np.concatenate([[cls_id], ids[s:e], [sep_id]])
    states = encode_window(batch, np.ones_like(batch))
    starts, ends = np.array(windows).T
    i = np.arange(n)
    score = np.where((starts[:, None] <= i) & (i < ends[:, None]),
                     np.minimum(i - starts[:, None], ends[:, None] - 1 - i), -1)
    owner = score.argmax(axis=0)
    doc = np.concatenate([states[0, :1], states[owner, 1 + i - starts[owner]],
                          states[-1, 1 + ends[-1] - starts[-1]][None]])
    pooled = doc.mean(axis=0)
    return doc, pooled / np.linalg.norm(pooled)
'''},
    "long document: the embedding is the mean of the windows' own embeddings": {"encode_long_document": '''
def encode_long_document(token_ids, window, stride, encode_window, cls_id, sep_id):
    ids = np.asarray(token_ids)
    n = len(ids)
    windows = [(0, min(window, n))]
    while windows[-1][1] < n:
        start = windows[-1][0] + stride
        windows.append((start, min(start + window, n)))
    best, token_states, window_embs = np.full(n, -1), [None] * n, []
    for k, (start, end) in enumerate(windows):
        row = np.concatenate([[cls_id], ids[start:end], [sep_id]])[None, :]
        states = encode_window(row, np.ones_like(row))[0]
        if k == 0:
            cls_state = states[0]
        sep_state = states[-1]
        e = states.mean(axis=0)
        window_embs.append(e / np.linalg.norm(e))
        for i in range(start, end):
            context = min(i - start, end - 1 - i)
            if context > best[i]:
                best[i], token_states[i] = context, states[1 + i - start]
    doc = np.stack([cls_state, *token_states, sep_state])
    pooled = np.mean(window_embs, axis=0)
    return doc, pooled / np.linalg.norm(pooled)
'''},
})

# Correct implementations written differently: the hidden tests must accept them.
ALTERNATIVES = {
    "long document: all windows in one padded batch, owners by one argmax over a (windows, n) score table": {
        "encode_long_document": '''
def encode_long_document(token_ids, window, stride, encode_window, cls_id, sep_id):
    ids = np.asarray(token_ids)
    n = len(ids)
    starts = [0]
    while starts[-1] + window < n:
        starts.append(starts[-1] + stride)
    ends = [min(s + window, n) for s in starts]
    m = max(ends[k] - starts[k] for k in range(len(starts))) + 2
    batch = np.zeros((len(starts), m), dtype=ids.dtype)
    mask = np.zeros((len(starts), m), dtype=np.int64)
    for k, (s, e) in enumerate(zip(starts, ends)):
        batch[k, :e - s + 2] = np.concatenate([[cls_id], ids[s:e], [sep_id]])
        mask[k, :e - s + 2] = 1
    states = encode_window(batch, mask)                                  # (windows, m, d)
    i = np.arange(n)
    s, e = np.array(starts)[:, None], np.array(ends)[:, None]
    score = np.where((s <= i) & (i < e), np.minimum(i - s, e - 1 - i), -1)   # (windows, n)
    owner = np.argmax(score, axis=0)                                      # first maximum: the earlier window
    tokens = states[owner, 1 + i - np.array(starts)[owner]]              # (n, d)
    last = len(starts) - 1
    doc = np.concatenate([states[0, :1], tokens, states[last, ends[last] - starts[last] + 1][None]])
    pooled = doc.mean(axis=0)
    return doc, pooled / max(np.linalg.norm(pooled), 1e-12)
'''},
}
