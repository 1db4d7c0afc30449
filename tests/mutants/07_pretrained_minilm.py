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
