"""Copy PyTorch modules' weights into the course's NumPy classes (every torch adapter of the package).

PyTorch's ``nn.Linear`` stores ``weight`` as ``(out_features, in_features)``
and computes ``x @ weight.T + bias``; the course writes ``x @ W + b`` with
``W = weight.T``. ``nn.MultiheadAttention`` packs the three input projections
as rows of ``in_proj_weight`` ``(3 d_model, d_model)``: W_Q^T, then W_K^T, then W_V^T.
PyTorch is imported lazily: these functions take the modules as arguments.
"""

from __future__ import annotations

import numpy as np

from .decoder_block import TransformerDecoderBlock
from .encoder import TransformerEncoderBlock
from .multihead import MultiHeadAttention


def _np(t, dtype):
    return None if t is None else t.detach().cpu().numpy().astype(dtype)


def multihead_from_torch(module, dtype=np.float64) -> MultiHeadAttention:
    """A :class:`MultiHeadAttention` with the weights of a ``torch.nn.MultiheadAttention``."""
    d, h = module.embed_dim, module.num_heads
    if module.in_proj_weight is None:
        raise ValueError("only nn.MultiheadAttention with a packed in_proj_weight (kdim == vdim == embed_dim) is supported")
    if module.bias_k is not None or module.add_zero_attn:
        raise ValueError("nn.MultiheadAttention with add_bias_kv=True or add_zero_attn=True is not supported")
    w = _np(module.in_proj_weight, dtype)                       # (3d, d) rows: Q, K, V
    b = _np(module.in_proj_bias, dtype)
    mha = MultiHeadAttention(d, h, rng=np.random.default_rng(0), bias=b is not None, dtype=dtype)
    bq = bk = bv = None
    if b is not None:
        bq, bk, bv = b[:d], b[d:2 * d], b[2 * d:]
    mha.set_weights(w[:d].T, w[d:2 * d].T, w[2 * d:].T, _np(module.out_proj.weight, dtype).T,
                    bq, bk, bv, _np(module.out_proj.bias, dtype))
    return mha


def activation_from_torch(act) -> str:
    """``"relu"`` or ``"gelu"`` for the activation of a ``torch.nn.Transformer*Layer``: ``F.relu``,
    ``F.gelu``, ``nn.ReLU()`` or ``nn.GELU()``. The course's GELU is the exact (erf) one, so
    ``nn.GELU(approximate="tanh")`` (GPT-2's form, up to ~1e-3 away) is refused, as is anything else."""
    import torch.nn.functional as F

    if act is F.gelu or getattr(act, "__name__", "") == "gelu" or (
            type(act).__name__ == "GELU" and getattr(act, "approximate", "none") == "none"):
        return "gelu"
    if act is F.relu or getattr(act, "__name__", "") == "relu" or type(act).__name__ == "ReLU":
        return "relu"
    raise ValueError(f"layer.activation must be relu or the exact (erf) gelu, got {act!r}"
                     + (": the tanh approximation differs from the erf form by up to ~1e-3"
                        if getattr(act, "approximate", "none") != "none" else ""))


def encoder_block_from_torch(layer, dtype=np.float64) -> TransformerEncoderBlock:
    """A :class:`TransformerEncoderBlock` with the weights of a ``torch.nn.TransformerEncoderLayer``."""
    activation = activation_from_torch(layer.activation)
    d_model = layer.self_attn.embed_dim
    d_ff = layer.linear1.out_features
    block = TransformerEncoderBlock(d_model, layer.self_attn.num_heads, d_ff, rng=np.random.default_rng(0),
                                    norm_first=bool(layer.norm_first), activation=activation,
                                    eps=float(layer.norm1.eps), dtype=dtype)
    block.attention = multihead_from_torch(layer.self_attn, dtype)
    block.feed_forward.set_weights(_np(layer.linear1.weight, dtype).T, _np(layer.linear1.bias, dtype),
                                   _np(layer.linear2.weight, dtype).T, _np(layer.linear2.bias, dtype))
    block.ln1_gamma, block.ln1_beta = _np(layer.norm1.weight, dtype), _np(layer.norm1.bias, dtype)
    block.ln2_gamma, block.ln2_beta = _np(layer.norm2.weight, dtype), _np(layer.norm2.bias, dtype)
    return block


def decoder_block_from_torch(layer, dtype=np.float64) -> TransformerDecoderBlock:
    """A :class:`TransformerDecoderBlock` with the weights of a ``torch.nn.TransformerDecoderLayer``."""
    activation = activation_from_torch(layer.activation)
    d_model, d_ff = layer.self_attn.embed_dim, layer.linear1.out_features
    block = TransformerDecoderBlock(d_model, layer.self_attn.num_heads, d_ff, rng=np.random.default_rng(0),
                                    norm_first=bool(layer.norm_first), activation=activation,
                                    eps=float(layer.norm1.eps), dtype=dtype)
    block.self_attention = multihead_from_torch(layer.self_attn, dtype)
    block.cross_attention = multihead_from_torch(layer.multihead_attn, dtype)
    block.feed_forward.set_weights(_np(layer.linear1.weight, dtype).T, _np(layer.linear1.bias, dtype),
                                   _np(layer.linear2.weight, dtype).T, _np(layer.linear2.bias, dtype))
    for i in (1, 2, 3):
        norm = getattr(layer, f"norm{i}")
        setattr(block, f"ln{i}_gamma", _np(norm.weight, dtype))
        setattr(block, f"ln{i}_beta", _np(norm.bias, dtype))
    return block
