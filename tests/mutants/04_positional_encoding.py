"""Plausible wrong implementations that the hidden tests of notebook 04 must catch.

Each entry maps a description to {solution grade_id: replacement source}.
"""

MUTANTS = {
    "sine and cosine swapped": {"positional_encoding": '''
def positional_encoding(n_positions, d_model):
    pos = np.arange(n_positions)[:, None]
    w = 1.0 / 10000.0 ** (np.arange(0, d_model, 2) / d_model)
    pe = np.zeros((n_positions, d_model))
    pe[:, 0::2] = np.cos(pos * w)
    pe[:, 1::2] = np.sin(pos * w)
    return pe
'''},
    "10000^(i/d) with the pair index i instead of 10000^(2i/d)": {"positional_encoding": '''
def positional_encoding(n_positions, d_model):
    pos = np.arange(n_positions)[:, None]
    i = np.arange(d_model // 2)
    w = 1.0 / 10000.0 ** (i / d_model)
    pe = np.zeros((n_positions, d_model))
    pe[:, 0::2] = np.sin(pos * w)
    pe[:, 1::2] = np.cos(pos * w)
    return pe
'''},
    "positions starting at 1": {"positional_encoding": '''
def positional_encoding(n_positions, d_model):
    pos = np.arange(1, n_positions + 1)[:, None]
    w = 1.0 / 10000.0 ** (np.arange(0, d_model, 2) / d_model)
    pe = np.zeros((n_positions, d_model))
    pe[:, 0::2] = np.sin(pos * w)
    pe[:, 1::2] = np.cos(pos * w)
    return pe
'''},
    "each column's own index in the exponent (cosines use (2i+1)/d)": {"positional_encoding": '''
def positional_encoding(n_positions, d_model):
    pos = np.arange(n_positions)[:, None]
    w = 1.0 / 10000.0 ** (np.arange(d_model) / d_model)
    angles = pos * w
    pe = np.sin(angles)
    pe[:, 1::2] = np.cos(angles[:, 1::2])
    return pe
'''},
    "sines and cosines concatenated instead of interleaved": {"positional_encoding": '''
def positional_encoding(n_positions, d_model):
    pos = np.arange(n_positions)[:, None]
    w = 1.0 / 10000.0 ** (np.arange(0, d_model, 2) / d_model)
    return np.concatenate([np.sin(pos * w), np.cos(pos * w)], axis=1)
'''},
    "base 1000 instead of 10000": {"positional_encoding": '''
def positional_encoding(n_positions, d_model):
    pos = np.arange(n_positions)[:, None]
    w = 1.0 / 1000.0 ** (np.arange(0, d_model, 2) / d_model)
    pe = np.zeros((n_positions, d_model))
    pe[:, 0::2] = np.sin(pos * w)
    pe[:, 1::2] = np.cos(pos * w)
    return pe
'''},
    "rotation block transposed (wrong sign: shifts backwards)": {"shift_matrix": '''
def shift_matrix(k, d_model):
    w = 1.0 / 10000.0 ** (np.arange(0, d_model, 2) / d_model)
    M = np.zeros((d_model, d_model))
    for i, theta in enumerate(k * w):
        c, s = np.cos(theta), np.sin(theta)
        M[2 * i:2 * i + 2, 2 * i:2 * i + 2] = [[c, s], [-s, c]]
    return M
'''},
    "shift angle k instead of k * w_i (one frequency for every pair)": {"shift_matrix": '''
def shift_matrix(k, d_model):
    M = np.zeros((d_model, d_model))
    for i in range(d_model // 2):
        c, s = np.cos(k), np.sin(k)
        M[2 * i:2 * i + 2, 2 * i:2 * i + 2] = [[c, -s], [s, c]]
    return M
'''},
    "shift matrix with 10000^(i/d) frequencies": {"shift_matrix": '''
def shift_matrix(k, d_model):
    w = 1.0 / 10000.0 ** (np.arange(d_model // 2) / d_model)
    M = np.zeros((d_model, d_model))
    for i, theta in enumerate(k * w):
        c, s = np.cos(theta), np.sin(theta)
        M[2 * i:2 * i + 2, 2 * i:2 * i + 2] = [[c, -s], [s, c]]
    return M
'''},
    "shift by |k| (negative offsets shift forwards)": {"shift_matrix": '''
def shift_matrix(k, d_model):
    w = 1.0 / 10000.0 ** (np.arange(0, d_model, 2) / d_model)
    M = np.zeros((d_model, d_model))
    for i, theta in enumerate(abs(k) * w):
        c, s = np.cos(theta), np.sin(theta)
        M[2 * i:2 * i + 2, 2 * i:2 * i + 2] = [[c, -s], [s, c]]
    return M
'''},
}

_DECODE_HEAD = '''
def decode_position(pe):
    pe = np.asarray(pe, dtype=float)
    d_model = pe.shape[-1]
    w = 1.0 / 10000.0 ** (np.arange(0, d_model, 2) / d_model)
    theta = np.arctan2(pe[..., 0::2], pe[..., 1::2])
'''
_UNWRAP = '''
    estimate = theta[..., -1] / w[-1]
    for i in range(d_model // 2 - 2, -1, -1):
        turns = np.round((estimate * w[i] - theta[..., i]) / (2 * np.pi))
        estimate = (theta[..., i] + 2 * np.pi * turns) / w[i]
'''
_CORRECT = _DECODE_HEAD + _UNWRAP + '''
    return np.round(estimate).astype(int)
'''


def _decoder(old, new):
    """The correct decoder with one line changed."""
    assert old in _CORRECT, old
    return {"decode_position": _CORRECT.replace(old, new)}


MUTANTS.update({
    "decode: the fastest pair alone (wraps every 2 pi)": {"decode_position": _DECODE_HEAD + '''
    return np.round(np.mod(theta[..., 0], 2 * np.pi)).astype(int)
'''},
    "decode: the slowest pair alone (exact without noise, dozens of positions off with it)": {
        "decode_position": _DECODE_HEAD + '''
    return np.round(theta[..., -1] / w[-1]).astype(int)
'''},
    "decode: arcsin of the sine (the quadrant is lost)": _decoder(
        "np.arctan2(pe[..., 0::2], pe[..., 1::2])", "np.arcsin(np.clip(pe[..., 0::2], -1, 1))"),
    "decode: sine and cosine swapped in arctan2": _decoder(
        "np.arctan2(pe[..., 0::2], pe[..., 1::2])", "np.arctan2(pe[..., 1::2], pe[..., 0::2])"),
    "decode: slowest pair, then straight to the fastest (the step is too big under noise)": {
        "decode_position": _DECODE_HEAD + '''
    estimate = theta[..., -1] / w[-1]
    turns = np.round((estimate - theta[..., 0]) / (2 * np.pi))
    return np.round(theta[..., 0] + 2 * np.pi * turns).astype(int)
'''},
    "decode: the slowest angle taken in [0, 2 pi) (position 0 with noise reads as P)": _decoder(
        "theta = np.arctan2(pe[..., 0::2], pe[..., 1::2])",
        "theta = np.mod(np.arctan2(pe[..., 0::2], pe[..., 1::2]), 2 * np.pi)"),
    "decode: unwrapped from the fastest pair to the slowest (wrong direction)": {
        "decode_position": _DECODE_HEAD + '''
    estimate = theta[..., 0] / w[0]
    for i in range(1, d_model // 2):
        turns = np.round((estimate * w[i] - theta[..., i]) / (2 * np.pi))
        estimate = (theta[..., i] + 2 * np.pi * turns) / w[i]
    return np.round(estimate).astype(int)
'''},
    "decode: frequencies 10000^(i/d) with the pair index": _decoder(
        "np.arange(0, d_model, 2) / d_model", "np.arange(d_model // 2) / d_model"),
    "decode: the estimate is not rounded (a float, off by the noise)": _decoder(
        "return np.round(estimate).astype(int)", "return estimate"),
    "decode: truncated (astype(int)) instead of rounded (off by one below every estimate's integer)": _decoder(
        "return np.round(estimate).astype(int)", "return estimate.astype(int)"),
    "decode: rounded, but returned as floats": _decoder(
        "return np.round(estimate).astype(int)", "return np.round(estimate)"),
    "decode: nearest row of a table of every candidate encoding (correct values, O(P d) memory)": {
        "decode_position": '''
def decode_position(pe):
    pe = np.asarray(pe, dtype=float)
    d_model = pe.shape[-1]
    w = 1.0 / 10000.0 ** (np.arange(0, d_model, 2) / d_model)
    top = int(0.45 * 2 * np.pi / w[-1])
    angles = np.arange(top)[:, None] * w
    table = np.stack([np.sin(angles), np.cos(angles)], axis=-1).reshape(top, d_model)
    return np.argmax(pe @ table.T, axis=-1)
'''},
})

# Correct implementations written differently: the hidden tests must accept them
# (tests/test_positional.py runs them through the hidden tests).
ALTERNATIVES = {
    "decode: unwrap every pair, then a least-squares fit of p to all unwrapped angles": {
        "decode_position": _DECODE_HEAD + '''
    unwrapped = theta.copy()
    estimate = theta[..., -1] / w[-1]
    for i in range(d_model // 2 - 2, -1, -1):
        turns = np.round((estimate * w[i] - theta[..., i]) / (2 * np.pi))
        unwrapped[..., i] = theta[..., i] + 2 * np.pi * turns
        estimate = unwrapped[..., i] / w[i]
    fit = (unwrapped * w).sum(axis=-1) / (w * w).sum()      # least squares: p w_i ~ unwrapped_i
    return np.rint(fit).astype(np.int32)
'''},
    "decode: nearest candidate, searched in chunks of 16 positions (small memory)": {"decode_position": '''
def decode_position(pe):
    pe = np.asarray(pe, dtype=float)
    d_model = pe.shape[-1]
    w = 1.0 / 10000.0 ** (np.arange(0, d_model, 2) / d_model)
    top = int(0.45 * 2 * np.pi / w[-1]) + 1
    flat = pe.reshape(-1, d_model)
    best_score = np.full(len(flat), -np.inf)
    best = np.zeros(len(flat), dtype=np.int64)
    for start in range(0, top, 16):
        angles = np.arange(start, min(start + 16, top))[:, None] * w
        chunk = np.stack([np.sin(angles), np.cos(angles)], axis=-1).reshape(-1, d_model)
        scores = flat @ chunk.T
        k = scores.argmax(axis=1)
        better = scores[np.arange(len(flat)), k] > best_score
        best = np.where(better, start + k, best)
        best_score = np.where(better, scores[np.arange(len(flat)), k], best_score)
    return best.reshape(pe.shape[:-1])
'''},
}
