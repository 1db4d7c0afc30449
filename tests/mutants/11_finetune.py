"""Plausible wrong implementations that the hidden tests of notebook 11 must catch, and correct ones
written differently that they must accept.

Each entry maps a description to {solution grade_id: replacement source}.
"""

MUTANTS = {
    # -- rms_norm_backward ------------------------------------------------------------
    "RMSNorm backward without the path through r (r treated as a constant)": {"rms_norm_backward": '''
def rms_norm_backward(grad_output, x, weight, eps=1e-5):
    r = 1 / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps)
    return r * grad_output * weight, np.sum((grad_output * x * r).reshape(-1, x.shape[-1]), axis=0)
'''},
    "RMSNorm backward with layer norm's extra mean term (centring that RMSNorm does not do)": {"rms_norm_backward": '''
def rms_norm_backward(grad_output, x, weight, eps=1e-5):
    r = 1 / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps)
    xhat, g = x * r, grad_output * weight
    dx = r * (g - g.mean(-1, keepdims=True) - xhat * np.mean(g * xhat, axis=-1, keepdims=True))
    return dx, np.sum((grad_output * xhat).reshape(-1, x.shape[-1]), axis=0)
'''},
    "RMSNorm backward with eps left out": {"rms_norm_backward": '''
def rms_norm_backward(grad_output, x, weight, eps=1e-5):
    r = 1 / np.sqrt(np.mean(x * x, axis=-1, keepdims=True))
    xhat, g = x * r, grad_output * weight
    dx = r * (g - xhat * np.mean(g * xhat, axis=-1, keepdims=True))
    return dx, np.sum((grad_output * xhat).reshape(-1, x.shape[-1]), axis=0)
'''},
    "RMSNorm backward forgetting the gain in dx": {"rms_norm_backward": '''
def rms_norm_backward(grad_output, x, weight, eps=1e-5):
    r = 1 / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps)
    xhat, g = x * r, grad_output
    dx = r * (g - xhat * np.mean(g * xhat, axis=-1, keepdims=True))
    return dx, np.sum((grad_output * xhat).reshape(-1, x.shape[-1]), axis=0)
'''},
    "RMSNorm backward with dweight = sum of grad_output * x (not x normalised)": {"rms_norm_backward": '''
def rms_norm_backward(grad_output, x, weight, eps=1e-5):
    r = 1 / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps)
    xhat, g = x * r, grad_output * weight
    dx = r * (g - xhat * np.mean(g * xhat, axis=-1, keepdims=True))
    return dx, np.sum((grad_output * x).reshape(-1, x.shape[-1]), axis=0)
'''},
    "RMSNorm backward with dweight summed over the first axis only": {"rms_norm_backward": '''
def rms_norm_backward(grad_output, x, weight, eps=1e-5):
    r = 1 / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps)
    xhat, g = x * r, grad_output * weight
    dx = r * (g - xhat * np.mean(g * xhat, axis=-1, keepdims=True))
    return dx, np.sum(grad_output * xhat, axis=0)
'''},
    "RMSNorm backward with a sum instead of the mean in the r path": {"rms_norm_backward": '''
def rms_norm_backward(grad_output, x, weight, eps=1e-5):
    r = 1 / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps)
    xhat, g = x * r, grad_output * weight
    dx = r * (g - xhat * np.sum(g * xhat, axis=-1, keepdims=True))
    return dx, np.sum((grad_output * xhat).reshape(-1, x.shape[-1]), axis=0)
'''},
    # -- rope_backward ----------------------------------------------------------------
    "RoPE backward rotating forwards (R instead of R^T)": {"rope_backward": '''
def rope_backward(grad_output, positions, base=10000.0):
    cos, sin = rope_tables(positions, grad_output.shape[-1], base, grad_output.dtype)
    return rotate_pairs(grad_output, cos, sin)
'''},
    "RoPE backward ignoring the base (always 10000)": {"rope_backward": '''
def rope_backward(grad_output, positions, base=10000.0):
    cos, sin = rope_tables(positions, grad_output.shape[-1], 10000.0, grad_output.dtype)
    return rotate_pairs(grad_output, cos, -sin)
'''},
    "RoPE backward with float32 tables in a float64 computation": {"rope_backward": '''
def rope_backward(grad_output, positions, base=10000.0):
    cos, sin = rope_tables(positions, grad_output.shape[-1], base)
    return rotate_pairs(grad_output, cos, -sin)
'''},
    "RoPE backward as the identity (a rotation has no gradient)": {"rope_backward": '''
def rope_backward(grad_output, positions, base=10000.0):
    return grad_output
'''},
    "RoPE backward on the half-split pairs (i, i + d/2) instead of adjacent ones": {"rope_backward": '''
def rope_backward(grad_output, positions, base=10000.0):
    cos, sin = rope_tables(positions, grad_output.shape[-1], base, grad_output.dtype)
    h = grad_output.shape[-1] // 2
    a, b = grad_output[..., :h], grad_output[..., h:]
    return np.concatenate([a * cos + b * sin, -a * sin + b * cos], axis=-1)
'''},
    "RoPE backward with the positions reversed": {"rope_backward": '''
def rope_backward(grad_output, positions, base=10000.0):
    cos, sin = rope_tables(np.asarray(positions)[::-1], grad_output.shape[-1], base, grad_output.dtype)
    return rotate_pairs(grad_output, cos, -sin)
'''},
    # -- kv_head_gradient -------------------------------------------------------------
    "K/V gradient averaged over the group instead of summed": {"kv_head_gradient": '''
def kv_head_gradient(grad_per_query_head, n_kv_heads):
    n = grad_per_query_head.shape[0]
    return grad_per_query_head.reshape(n_kv_heads, n // n_kv_heads, *grad_per_query_head.shape[1:]).mean(axis=1)
'''},
    "K/V gradient with strided groups (head h -> h % n_kv)": {"kv_head_gradient": '''
def kv_head_gradient(grad_per_query_head, n_kv_heads):
    n = grad_per_query_head.shape[0]
    return grad_per_query_head.reshape(n // n_kv_heads, n_kv_heads, *grad_per_query_head.shape[1:]).sum(axis=0)
'''},
    "K/V gradient from the first query head of each group only": {"kv_head_gradient": '''
def kv_head_gradient(grad_per_query_head, n_kv_heads):
    n = grad_per_query_head.shape[0]
    return grad_per_query_head[::n // n_kv_heads]
'''},
    # -- lora_forward -----------------------------------------------------------------
    "LoRA forward without the scale": {"lora_forward": '''
def lora_forward(x, W, A, B, scale):
    return x @ W.T + (x @ A.T) @ B.T
'''},
    "LoRA forward without the frozen path x W^T": {"lora_forward": '''
def lora_forward(x, W, A, B, scale):
    return scale * ((x @ A.T) @ B.T)
'''},
    "LoRA forward dividing by the scale (r / alpha)": {"lora_forward": '''
def lora_forward(x, W, A, B, scale):
    return x @ W.T + (x @ A.T) @ B.T / scale
'''},
    # -- lora_backward ----------------------------------------------------------------
    "LoRA backward with dx = dy W only (the adapter's path to x dropped)": {"lora_backward": '''
def lora_backward(grad_output, x, W, A, B, scale):
    rows, dy = x.reshape(-1, x.shape[-1]), grad_output.reshape(-1, grad_output.shape[-1])
    z = rows @ A.T
    dz = scale * dy @ B
    return (dy @ W).reshape(x.shape), dz.T @ rows, scale * dy.T @ z
'''},
    "LoRA backward without the scale in dA": {"lora_backward": '''
def lora_backward(grad_output, x, W, A, B, scale):
    rows, dy = x.reshape(-1, x.shape[-1]), grad_output.reshape(-1, grad_output.shape[-1])
    z = rows @ A.T
    dz = scale * dy @ B
    return (dy @ W + dz @ A).reshape(x.shape), (dy @ B).T @ rows, scale * dy.T @ z
'''},
    "LoRA backward without the scale in dB": {"lora_backward": '''
def lora_backward(grad_output, x, W, A, B, scale):
    rows, dy = x.reshape(-1, x.shape[-1]), grad_output.reshape(-1, grad_output.shape[-1])
    z = rows @ A.T
    dz = scale * dy @ B
    return (dy @ W + dz @ A).reshape(x.shape), dz.T @ rows, dy.T @ z
'''},
    "LoRA backward with the scale applied twice in dx": {"lora_backward": '''
def lora_backward(grad_output, x, W, A, B, scale):
    rows, dy = x.reshape(-1, x.shape[-1]), grad_output.reshape(-1, grad_output.shape[-1])
    z = rows @ A.T
    dz = scale * dy @ B
    return (dy @ W + scale * dz @ A).reshape(x.shape), dz.T @ rows, scale * dy.T @ z
'''},
    "LoRA backward with dA, dB averaged over tokens": {"lora_backward": '''
def lora_backward(grad_output, x, W, A, B, scale):
    rows, dy = x.reshape(-1, x.shape[-1]), grad_output.reshape(-1, grad_output.shape[-1])
    z = rows @ A.T
    dz = scale * dy @ B
    n = rows.shape[0]
    return (dy @ W + dz @ A).reshape(x.shape), dz.T @ rows / n, scale * dy.T @ z / n
'''},
    "LoRA backward for (n, in) only (sums over the first axis of a batch)": {"lora_backward": '''
def lora_backward(grad_output, x, W, A, B, scale):
    z = x @ A.T
    dz = scale * grad_output @ B
    dA = np.swapaxes(dz, -1, -2) @ x
    dB = scale * np.swapaxes(grad_output, -1, -2) @ z
    if dA.ndim > 2:
        dA, dB = dA[0], dB[0]
    return grad_output @ W + dz @ A, dA, dB
'''},
}

ALTERNATIVES = {
    "RMSNorm backward written with the Jacobian's two terms expanded": {"rms_norm_backward": '''
def rms_norm_backward(grad_output, x, weight, eps=1e-5):
    d = x.shape[-1]
    ms = np.mean(x ** 2, axis=-1, keepdims=True) + eps
    g = grad_output * weight
    dx = g / np.sqrt(ms) - x * np.sum(g * x, axis=-1, keepdims=True) / (d * ms ** 1.5)
    dw = np.sum(grad_output * x / np.sqrt(ms), axis=tuple(range(x.ndim - 1)))
    return dx, dw
'''},
    "RoPE backward by the explicit inverse rotation formulas": {"rope_backward": '''
def rope_backward(grad_output, positions, base=10000.0):
    d = grad_output.shape[-1]
    angles = np.asarray(positions)[:, None] * base ** (-np.arange(0, d, 2) / d)
    c, s = np.cos(angles), np.sin(angles)
    even, odd = grad_output[..., 0::2], grad_output[..., 1::2]
    out = np.empty_like(grad_output)
    out[..., 0::2] = even * c + odd * s
    out[..., 1::2] = -even * s + odd * c
    return out
'''},
    "RoPE backward with frequencies exp(-2i/d ln base) (their last bits differ from base ** (-2i/d))": {
        "rope_backward": '''
def rope_backward(grad_output, positions, base=10000.0):
    d = grad_output.shape[-1]
    theta = np.asarray(positions)[:, None] * np.exp(-np.arange(0, d, 2) / d * np.log(base))
    return rotate_pairs(grad_output, np.cos(theta), -np.sin(theta))
'''},
    "K/V gradient with a loop over groups": {"kv_head_gradient": '''
def kv_head_gradient(grad_per_query_head, n_kv_heads):
    group = grad_per_query_head.shape[0] // n_kv_heads
    return np.stack([grad_per_query_head[j * group:(j + 1) * group].sum(axis=0) for j in range(n_kv_heads)])
'''},
    "LoRA forward through the merged matrix": {"lora_forward": '''
def lora_forward(x, W, A, B, scale):
    return x @ (W + scale * B @ A).T
'''},
    "LoRA backward with tensordot over the leading axes": {"lora_backward": '''
def lora_backward(grad_output, x, W, A, B, scale):
    lead = list(range(x.ndim - 1))
    z = x @ A.T
    dz = scale * grad_output @ B
    dA = np.tensordot(dz, x, axes=(lead, lead))
    dB = scale * np.tensordot(grad_output, z, axes=(lead, lead))
    return grad_output @ W + dz @ A, dA, dB
'''},
}

# -- written for issue 38, as students get them wrong: eps and base passed or left to their defaults, float64
# precision (float32 inside a float64 task), a rank-1 adapter ---------------------------------------------
MUTANTS.update({
    "RMSNorm backward with eps hard-coded to 1e-5 (the argument ignored)": {"rms_norm_backward": '''
def rms_norm_backward(grad_output, x, weight, eps=1e-5):
    r = 1.0 / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + 1e-5)
    xhat, g = x * r, grad_output * weight
    dx = r * (g - xhat * np.mean(g * xhat, axis=-1, keepdims=True))
    return dx, np.sum((grad_output * xhat).reshape(-1, x.shape[-1]), axis=0)
'''},
    "RMSNorm backward with LLaMA-1's default eps 1e-6": {"rms_norm_backward": '''
def rms_norm_backward(grad_output, x, weight, eps=1e-6):
    r = 1.0 / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps)
    xhat, g = x * r, grad_output * weight
    dx = r * (g - xhat * np.mean(g * xhat, axis=-1, keepdims=True))
    return dx, np.sum((grad_output * xhat).reshape(-1, x.shape[-1]), axis=0)
'''},
    "RMSNorm backward with r computed in float32": {"rms_norm_backward": '''
def rms_norm_backward(grad_output, x, weight, eps=1e-5):
    r = (1.0 / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps)).astype(np.float32)
    xhat, g = x * r, grad_output * weight
    dx = r * (g - xhat * np.mean(g * xhat, axis=-1, keepdims=True))
    return dx, np.sum((grad_output * xhat).reshape(-1, x.shape[-1]), axis=0)
'''},
    "RoPE backward with SmolLM2's base 1e5 as the default": {"rope_backward": '''
def rope_backward(grad_output, positions, base=1e5):
    cos, sin = rope_tables(positions, grad_output.shape[-1], base, grad_output.dtype)
    return rotate_pairs(grad_output, cos, -sin)
'''},
    "RoPE backward with the angles computed in float32": {"rope_backward": '''
def rope_backward(grad_output, positions, base=10000.0):
    d = grad_output.shape[-1]
    angles = np.asarray(positions, np.float32)[:, None] * (base ** (-np.arange(0, d, 2) / d)).astype(np.float32)
    return rotate_pairs(grad_output, np.cos(angles).astype(grad_output.dtype), -np.sin(angles).astype(grad_output.dtype))
'''},
    "LoRA forward with the adapter kept in float32 (as a model stores it)": {"lora_forward": '''
def lora_forward(x, W, A, B, scale):
    A32, B32 = A.astype(np.float32), B.astype(np.float32)
    return x @ W.T + scale * ((x.astype(np.float32) @ A32.T) @ B32.T)
'''},
    "LoRA backward squeezing the rank axis (breaks a rank-1 adapter)": {"lora_backward": '''
def lora_backward(grad_output, x, W, A, B, scale):
    rows = x.reshape(-1, x.shape[-1])
    d_rows = grad_output.reshape(-1, grad_output.shape[-1])
    z = np.squeeze(rows @ A.T)
    dz = np.squeeze(scale * (d_rows @ B))
    return (d_rows @ W + dz @ A).reshape(x.shape), dz.T @ rows, scale * (d_rows.T @ z)
'''},
})
