"""Plausible wrong implementations that the hidden tests of notebook 09 must catch.

Each entry maps a description to {solution grade_id: replacement source}.
"""

MUTANTS = {
    "Q8_0 levels read as unsigned bytes (uint8 instead of int8)": {"dequantize_q8_0": '''
def dequantize_q8_0(raw):
    blocks = raw.reshape(*raw.shape[:-1], -1, 34)
    d = np.ascontiguousarray(blocks[..., :2]).view(np.float16).astype(np.float32)
    q = blocks[..., 2:].astype(np.float32)
    return (d * q).reshape(*raw.shape[:-1], -1)
'''},
    "Q8_0 scale read from the last two bytes of the block": {"dequantize_q8_0": '''
def dequantize_q8_0(raw):
    blocks = raw.reshape(*raw.shape[:-1], -1, 34)
    d = np.ascontiguousarray(blocks[..., 32:]).view(np.float16).astype(np.float32)
    q = blocks[..., :32].view(np.int8).astype(np.float32)
    return (d * q).reshape(*raw.shape[:-1], -1)
'''},
    "Q8_0 scale and levels of 2-D input flattened across rows (only 1-D input right)": {"dequantize_q8_0": '''
def dequantize_q8_0(raw):
    blocks = raw.reshape(-1, 34)
    d = np.ascontiguousarray(blocks[:, :2]).view(np.float16).astype(np.float32)
    q = blocks[:, 2:].view(np.int8).astype(np.float32)
    return (d * q).reshape(-1)
'''},
    "Q4_1 nibbles interleaved (low, high, low, high ...) instead of all lows then all highs": {"dequantize_q4_1": '''
def dequantize_q4_1(raw):
    blocks = raw.reshape(*raw.shape[:-1], -1, 20)
    d = np.ascontiguousarray(blocks[..., 0:2]).view(np.float16).astype(np.float32)
    m = np.ascontiguousarray(blocks[..., 2:4]).view(np.float16).astype(np.float32)
    packed = blocks[..., 4:]
    q = np.stack([packed & 15, packed >> 4], axis=-1).reshape(*packed.shape[:-1], 32)
    return (d * q + m).reshape(*raw.shape[:-1], -1)
'''},
    "Q4_1 offset m forgotten": {"dequantize_q4_1": '''
def dequantize_q4_1(raw):
    blocks = raw.reshape(*raw.shape[:-1], -1, 20)
    d = np.ascontiguousarray(blocks[..., 0:2]).view(np.float16).astype(np.float32)
    packed = blocks[..., 4:]
    q = np.concatenate([packed & 15, packed >> 4], axis=-1)
    return (d * q).reshape(*raw.shape[:-1], -1)
'''},
    "Q4_1 scale and offset swapped": {"dequantize_q4_1": '''
def dequantize_q4_1(raw):
    blocks = raw.reshape(*raw.shape[:-1], -1, 20)
    m = np.ascontiguousarray(blocks[..., 0:2]).view(np.float16).astype(np.float32)
    d = np.ascontiguousarray(blocks[..., 2:4]).view(np.float16).astype(np.float32)
    packed = blocks[..., 4:]
    q = np.concatenate([packed & 15, packed >> 4], axis=-1)
    return (d * q + m).reshape(*raw.shape[:-1], -1)
'''},
    "Q4_1 levels centred like Q4_0 (q - 8)": {"dequantize_q4_1": '''
def dequantize_q4_1(raw):
    blocks = raw.reshape(*raw.shape[:-1], -1, 20)
    d = np.ascontiguousarray(blocks[..., 0:2]).view(np.float16).astype(np.float32)
    m = np.ascontiguousarray(blocks[..., 2:4]).view(np.float16).astype(np.float32)
    packed = blocks[..., 4:]
    q = np.concatenate([packed & 15, packed >> 4], axis=-1).astype(np.float32) - 8
    return (d * q + m).reshape(*raw.shape[:-1], -1)
'''},
    "RMSNorm that subtracts the mean (LayerNorm without beta)": {"rms_norm": '''
def rms_norm(x, weight, eps):
    x = x - x.mean(axis=-1, keepdims=True)
    return weight * x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps)
'''},
    "RMSNorm with eps outside the square root": {"rms_norm": '''
def rms_norm(x, weight, eps):
    return weight * x / (np.sqrt(np.mean(x * x, axis=-1, keepdims=True)) + eps)
'''},
    "RMSNorm dividing by the L2 norm instead of the root mean square": {"rms_norm": '''
def rms_norm(x, weight, eps):
    return weight * x / np.sqrt(np.sum(x * x, axis=-1, keepdims=True) + eps)
'''},
    "RMSNorm over the first axis": {"rms_norm": '''
def rms_norm(x, weight, eps):
    return weight * x / np.sqrt(np.mean(x * x, axis=0, keepdims=True) + eps)
'''},
    "RoPE rotating the two halves (Hugging Face layout) instead of adjacent pairs": {"apply_rope": '''
def apply_rope(x, positions, base):
    d = x.shape[-1]
    angles = np.asarray(positions)[:, None] * base ** (-np.arange(0, d, 2) / d)
    cos, sin = np.cos(angles), np.sin(angles)
    a, b = x[..., : d // 2], x[..., d // 2:]
    return np.concatenate([a * cos - b * sin, a * sin + b * cos], axis=-1)
'''},
    "RoPE rotating the other way": {"apply_rope": '''
def apply_rope(x, positions, base):
    d = x.shape[-1]
    angles = np.asarray(positions)[:, None] * base ** (-np.arange(0, d, 2) / d)
    cos, sin = np.cos(angles), np.sin(angles)
    out = np.empty_like(x)
    out[..., 0::2] = x[..., 0::2] * cos + x[..., 1::2] * sin
    out[..., 1::2] = -x[..., 0::2] * sin + x[..., 1::2] * cos
    return out
'''},
    "RoPE frequencies base^(-i/d) with the pair index i": {"apply_rope": '''
def apply_rope(x, positions, base):
    d = x.shape[-1]
    angles = np.asarray(positions)[:, None] * base ** (-np.arange(d // 2) / d)
    cos, sin = np.cos(angles), np.sin(angles)
    out = np.empty_like(x)
    out[..., 0::2] = x[..., 0::2] * cos - x[..., 1::2] * sin
    out[..., 1::2] = x[..., 0::2] * sin + x[..., 1::2] * cos
    return out
'''},
    "RoPE with positions 0..n-1 instead of the given positions": {"apply_rope": '''
def apply_rope(x, positions, base):
    n, d = x.shape[-2:]
    angles = np.arange(n)[:, None] * base ** (-np.arange(0, d, 2) / d)
    cos, sin = np.cos(angles), np.sin(angles)
    out = np.empty_like(x)
    out[..., 0::2] = x[..., 0::2] * cos - x[..., 1::2] * sin
    out[..., 1::2] = x[..., 0::2] * sin + x[..., 1::2] * cos
    return out
'''},
    "RoPE ignoring base (always 10000)": {"apply_rope": '''
def apply_rope(x, positions, base):
    d = x.shape[-1]
    angles = np.asarray(positions)[:, None] * 10000.0 ** (-np.arange(0, d, 2) / d)
    cos, sin = np.cos(angles), np.sin(angles)
    out = np.empty_like(x)
    out[..., 0::2] = x[..., 0::2] * cos - x[..., 1::2] * sin
    out[..., 1::2] = x[..., 0::2] * sin + x[..., 1::2] * cos
    return out
'''},
    "SwiGLU with a sigmoid gate instead of silu (GLU)": {"swiglu": '''
def swiglu(x, W_gate, W_up, W_down):
    g = x @ W_gate.T
    return (1 / (1 + np.exp(-g)) * (x @ W_up.T)) @ W_down.T
'''},
    "SwiGLU with gate and up swapped": {"swiglu": '''
def swiglu(x, W_gate, W_up, W_down):
    g = x @ W_up.T
    return (g / (1 + np.exp(-g)) * (x @ W_gate.T)) @ W_down.T
'''},
    "SwiGLU with ReLU instead of silu": {"swiglu": '''
def swiglu(x, W_gate, W_up, W_down):
    return (np.maximum(x @ W_gate.T, 0) * (x @ W_up.T)) @ W_down.T
'''},
    "GQA sharing key/value heads round-robin (h % n_kv) instead of by groups (h // group)": {"grouped_query_attention": '''
def grouped_query_attention(q, k, v):
    n_heads, n_q, d = q.shape
    n_kv, n_k, _ = k.shape
    kk, vv = k[np.arange(n_heads) % n_kv], v[np.arange(n_heads) % n_kv]
    s = q @ kk.transpose(0, 2, 1) / np.sqrt(d)
    s = np.where(np.arange(n_k)[None, :] > np.arange(n_k - n_q, n_k)[:, None], -np.inf, s)
    w = np.exp(s - s.max(-1, keepdims=True))
    return (w / w.sum(-1, keepdims=True)) @ vv
'''},
    "GQA with the causal mask aligned to the first keys (query i sees keys 0..i)": {"grouped_query_attention": '''
def grouped_query_attention(q, k, v):
    n_heads, n_q, d = q.shape
    n_kv, n_k, _ = k.shape
    g = n_heads // n_kv
    kk, vv = np.repeat(k, g, axis=0), np.repeat(v, g, axis=0)
    s = q @ kk.transpose(0, 2, 1) / np.sqrt(d)
    s = np.where(np.arange(n_k)[None, :] > np.arange(n_q)[:, None], -np.inf, s)
    w = np.exp(s - s.max(-1, keepdims=True))
    return (w / w.sum(-1, keepdims=True)) @ vv
'''},
    "GQA without the causal mask": {"grouped_query_attention": '''
def grouped_query_attention(q, k, v):
    n_heads, n_q, d = q.shape
    g = n_heads // k.shape[0]
    kk, vv = np.repeat(k, g, axis=0), np.repeat(v, g, axis=0)
    s = q @ kk.transpose(0, 2, 1) / np.sqrt(d)
    w = np.exp(s - s.max(-1, keepdims=True))
    return (w / w.sum(-1, keepdims=True)) @ vv
'''},
    "GQA without the 1/sqrt(d) scale": {"grouped_query_attention": '''
def grouped_query_attention(q, k, v):
    n_heads, n_q, d = q.shape
    n_kv, n_k, _ = k.shape
    g = n_heads // n_kv
    kk, vv = np.repeat(k, g, axis=0), np.repeat(v, g, axis=0)
    s = q @ kk.transpose(0, 2, 1)
    s = np.where(np.arange(n_k)[None, :] > np.arange(n_k - n_q, n_k)[:, None], -np.inf, s)
    w = np.exp(s - s.max(-1, keepdims=True))
    return (w / w.sum(-1, keepdims=True)) @ vv
'''},
}
