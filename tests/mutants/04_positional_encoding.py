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
