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

# -- written for issue 38, as students get them wrong: float16 at the edges of its range, the promised dtypes
# (float32 from the dequantisers; x's dtype elsewhere), float64 precision, the defaults, exp's overflow ----------
_HALF_BY_HAND = '''
def _half(lo, hi):
    """float16 from its two little-endian bytes: sign, 5 exponent bits (bias 15), 10 mantissa bits."""
    bits = lo.astype(np.uint32) | (hi.astype(np.uint32) << 8)
    sign = np.where(bits >> 15, -1.0, 1.0)
    exponent = ((bits >> 10) & 0x1F).astype(np.int32)
    mantissa = (bits & 0x3FF).astype(np.float64)
    return (sign * (1 + mantissa / 1024) * 2.0 ** (exponent - 15)).astype(np.float32)
'''

MUTANTS.update({
    "Q8_0 with float16 decoded by hand, subnormals forgotten (exponent 0 read as 2**-15 * 1.m)": {
        "dequantize_q8_0": _HALF_BY_HAND + '''
def dequantize_q8_0(raw):
    blocks = raw.reshape(*raw.shape[:-1], -1, 34)
    d = _half(blocks[..., 0], blocks[..., 1])[..., None]
    q = blocks[..., 2:].view(np.int8).astype(np.float32)
    return (d * q).reshape(*raw.shape[:-1], -1)
'''},
    "Q4_1 with float16 decoded by hand, subnormals forgotten": {"dequantize_q4_1": _HALF_BY_HAND + '''
def dequantize_q4_1(raw):
    blocks = raw.reshape(*raw.shape[:-1], -1, 20)
    d = _half(blocks[..., 0], blocks[..., 1])[..., None]
    m = _half(blocks[..., 2], blocks[..., 3])[..., None]
    packed = blocks[..., 4:]
    q = np.concatenate([packed & 15, packed >> 4], axis=-1).astype(np.float32)
    return (d * q + m).reshape(*raw.shape[:-1], -1)
'''},
    "Q8_0 multiplied in float16 (d * q rounded to 11 bits; 65504 * 127 overflows)": {"dequantize_q8_0": '''
def dequantize_q8_0(raw):
    blocks = raw.reshape(*raw.shape[:-1], -1, 34)
    d = np.ascontiguousarray(blocks[..., :2]).view(np.float16)
    q = blocks[..., 2:].view(np.int8).astype(np.float16)
    return (d * q).astype(np.float32).reshape(*raw.shape[:-1], -1)
'''},
    "Q8_0 returned as float64 (astype(float))": {"dequantize_q8_0": '''
def dequantize_q8_0(raw):
    blocks = raw.reshape(*raw.shape[:-1], -1, 34)
    d = np.ascontiguousarray(blocks[..., :2]).view(np.float16).astype(float)
    q = blocks[..., 2:].view(np.int8).astype(float)
    return (d * q).reshape(*raw.shape[:-1], -1)
'''},
    "Q4_1 returned as float64 (levels as float)": {"dequantize_q4_1": '''
def dequantize_q4_1(raw):
    blocks = raw.reshape(*raw.shape[:-1], -1, 20)
    d = np.ascontiguousarray(blocks[..., 0:2]).view(np.float16)
    m = np.ascontiguousarray(blocks[..., 2:4]).view(np.float16)
    packed = blocks[..., 4:]
    q = np.concatenate([packed & 15, packed >> 4], axis=-1).astype(float)
    return (d * q + m).reshape(*raw.shape[:-1], -1)
'''},
    "RMSNorm with the mean square accumulated in float64 (float32 in, float64 out)": {"rms_norm": '''
def rms_norm(x, weight, eps=1e-5):
    ms = np.mean(np.square(x, dtype=np.float64), axis=-1, keepdims=True)
    return weight * x / np.sqrt(ms + eps)
'''},
    "RMSNorm computed in float32 whatever x is (float64 in, float32 precision out)": {"rms_norm": '''
def rms_norm(x, weight, eps=1e-5):
    x32 = np.asarray(x, dtype=np.float32)
    y = weight.astype(np.float32) * x32 / np.sqrt(np.mean(x32 * x32, axis=-1, keepdims=True) + np.float32(eps))
    return y.astype(x.dtype)
'''},
    "RMSNorm with LLaMA-1's default eps 1e-6": {"rms_norm": '''
def rms_norm(x, weight, eps=1e-6):
    return weight * x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps)
'''},
    "RMSNorm with eps hard-coded to 1e-5 (the argument ignored)": {"rms_norm": '''
def rms_norm(x, weight, eps=1e-5):
    return weight * x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + 1e-5)
'''},
    "RoPE writing into np.empty(x.shape) (float64 for float32 x)": {"apply_rope": '''
def apply_rope(x, positions, base=10000.0):
    d = x.shape[-1]
    angles = np.asarray(positions)[:, None] * base ** (-np.arange(0, d, 2) / d)
    cos, sin = np.cos(angles), np.sin(angles)
    out = np.empty(x.shape)
    out[..., 0::2] = x[..., 0::2] * cos - x[..., 1::2] * sin
    out[..., 1::2] = x[..., 0::2] * sin + x[..., 1::2] * cos
    return out
'''},
    "RoPE with SmolLM2's base 1e5 as the default": {"apply_rope": '''
def apply_rope(x, positions, base=1e5):
    d = x.shape[-1]
    angles = np.asarray(positions)[:, None] * base ** (-np.arange(0, d, 2) / d)
    cos, sin = np.cos(angles).astype(x.dtype), np.sin(angles).astype(x.dtype)
    out = np.empty_like(x)
    out[..., 0::2] = x[..., 0::2] * cos - x[..., 1::2] * sin
    out[..., 1::2] = x[..., 0::2] * sin + x[..., 1::2] * cos
    return out
'''},
    "RoPE with float32 cos/sin tables (the model's dtype) also for float64 x": {"apply_rope": '''
def apply_rope(x, positions, base=10000.0):
    d = x.shape[-1]
    angles = np.asarray(positions)[:, None] * base ** (-np.arange(0, d, 2) / d)
    cos, sin = np.cos(angles).astype(np.float32), np.sin(angles).astype(np.float32)
    out = np.empty_like(x)
    out[..., 0::2] = x[..., 0::2] * cos - x[..., 1::2] * sin
    out[..., 1::2] = x[..., 0::2] * sin + x[..., 1::2] * cos
    return out
'''},
    "RoPE angles computed in float32 (positions and frequencies as float32)": {"apply_rope": '''
def apply_rope(x, positions, base=10000.0):
    d = x.shape[-1]
    omega = (base ** (-np.arange(0, d, 2) / d)).astype(np.float32)
    angles = np.asarray(positions, dtype=np.float32)[:, None] * omega
    cos, sin = np.cos(angles), np.sin(angles)
    out = np.empty_like(x)
    out[..., 0::2] = x[..., 0::2] * cos - x[..., 1::2] * sin
    out[..., 1::2] = x[..., 0::2] * sin + x[..., 1::2] * cos
    return out
'''},
    "silu written z e^z / (1 + e^z) (NaN where e^z overflows)": {"swiglu": '''
def swiglu(x, W_gate, W_up, W_down):
    g = x @ W_gate.T
    e = np.exp(g)
    return (g * e / (1 + e) * (x @ W_up.T)) @ W_down.T
'''},
    "silu with the sigmoid in float64 for stability (float32 in, float64 out)": {"swiglu": '''
def swiglu(x, W_gate, W_up, W_down):
    g = x @ W_gate.T
    sig = 1.0 / (1.0 + np.exp(-g.astype(np.float64)))
    return (g * sig * (x @ W_up.T)) @ W_down.T
'''},
    "GQA scores divided by np.sqrt(d) (a float64 scalar: float32 becomes float64)": {"grouped_query_attention": '''
def grouped_query_attention(q, k, v):
    n_heads, n_q, d = q.shape
    n_kv, n_k, _ = k.shape
    g = n_heads // n_kv
    kk, vv = np.repeat(k, g, axis=0), np.repeat(v, g, axis=0)
    s = q @ kk.transpose(0, 2, 1) / np.sqrt(d)
    s = np.where(np.arange(n_k)[None, :] > np.arange(n_k - n_q, n_k)[:, None], -np.inf, s)
    w = np.exp(s - s.max(-1, keepdims=True))
    return (w / w.sum(-1, keepdims=True)) @ vv
'''},
    "GQA softmax without the max shift (exp of scores in the thousands overflows)": {"grouped_query_attention": '''
def grouped_query_attention(q, k, v):
    n_heads, n_q, d = q.shape
    n_kv, n_k, _ = k.shape
    g = n_heads // n_kv
    kk, vv = np.repeat(k, g, axis=0), np.repeat(v, g, axis=0)
    s = q @ kk.transpose(0, 2, 1) / d ** 0.5
    w = np.where(np.arange(n_k)[None, :] > np.arange(n_k - n_q, n_k)[:, None], 0.0, np.exp(s))
    return (w / w.sum(-1, keepdims=True)) @ vv
'''},
    "GQA in float32 whatever the input (float64 in, float32 precision out)": {"grouped_query_attention": '''
def grouped_query_attention(q, k, v):
    n_heads, n_q, d = q.shape
    n_kv, n_k, _ = k.shape
    g = n_heads // n_kv
    q32, kk, vv = q.astype(np.float32), np.repeat(k, g, axis=0).astype(np.float32), np.repeat(v, g, axis=0).astype(np.float32)
    s = q32 @ kk.transpose(0, 2, 1) / np.float32(d ** 0.5)
    s = np.where(np.arange(n_k)[None, :] > np.arange(n_k - n_q, n_k)[:, None], -np.inf, s)
    w = np.exp(s - s.max(-1, keepdims=True))
    return ((w / w.sum(-1, keepdims=True)) @ vv).astype(q.dtype)
'''},
})

ALTERNATIVES = {
    "silu through tanh: z (1 + tanh(z / 2)) / 2": {"swiglu": '''
def swiglu(x, W_gate, W_up, W_down):
    g = x @ W_gate.T
    return (g * (1 + np.tanh(g / 2)) / 2 * (x @ W_up.T)) @ W_down.T
'''},
    "RoPE with frequencies exp(-2i/d log base) and angles from float64 positions": {"apply_rope": '''
def apply_rope(x, positions, base=10000.0):
    d = x.shape[-1]
    freq = np.exp(-np.arange(0, d, 2) / d * np.log(base))
    theta = np.asarray(positions, dtype=np.float64)[:, None] * freq
    c, s = np.cos(theta).astype(x.dtype), np.sin(theta).astype(x.dtype)
    pairs = x.reshape(*x.shape[:-1], d // 2, 2)
    return np.stack([pairs[..., 0] * c - pairs[..., 1] * s, pairs[..., 0] * s + pairs[..., 1] * c], -1).reshape(x.shape)
'''},
    "RMSNorm with statistics in float64, cast back to x's dtype": {"rms_norm": '''
def rms_norm(x, weight, eps=1e-5):
    ms = np.mean(np.square(x, dtype=np.float64), axis=-1, keepdims=True)
    return (weight * (x / np.sqrt(ms + eps))).astype(x.dtype)
'''},
    "dequantisers computing in float64, cast to float32 at the end": {"dequantize_q8_0": '''
def dequantize_q8_0(raw):
    blocks = raw.reshape(*raw.shape[:-1], -1, 34)
    d = np.ascontiguousarray(blocks[..., :2]).view(np.float16).astype(np.float64)
    q = blocks[..., 2:].view(np.int8).astype(np.float64)
    return (d * q).astype(np.float32).reshape(*raw.shape[:-1], -1)
''', "dequantize_q4_1": '''
def dequantize_q4_1(raw):
    blocks = raw.reshape(*raw.shape[:-1], -1, 20)
    d = np.ascontiguousarray(blocks[..., 0:2]).view(np.float16).astype(np.float64)
    m = np.ascontiguousarray(blocks[..., 2:4]).view(np.float16).astype(np.float64)
    packed = blocks[..., 4:]
    q = np.concatenate([packed & 15, packed >> 4], axis=-1)
    return (m + q * d).astype(np.float32).reshape(*raw.shape[:-1], -1)
'''},
    "GQA in float64 for float64 input through notebook 01's attention, one head at a time": {"grouped_query_attention": '''
def grouped_query_attention(q, k, v):
    n_heads, n_q, d = q.shape
    n_kv, n_k, _ = k.shape
    mask = np.tril(np.ones((n_q, n_k), dtype=bool), k=n_k - n_q)
    return np.stack([scaled_dot_product_attention(q[h], k[h * n_kv // n_heads], v[h * n_kv // n_heads], mask)[0]
                     for h in range(n_heads)])
'''},
}
