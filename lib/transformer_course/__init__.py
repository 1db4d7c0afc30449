"""transformer_course: the Transformer from first principles, in NumPy.

The reference implementation of everything the course's notebooks build, one
module per concept. Shapes follow the ``(..., n, d)`` convention: any leading
batch (and head) dimensions, then positions, then features.
"""

from .activations import gelu, relu
from .attention import attention_scores, scaled_dot_product_attention
from .encoder import TransformerEncoderBlock
from .fast_attention import FastMultiHeadAttention, flash_attention, release_buffers
from .feedforward import PositionwiseFeedForward
from .masks import causal_mask, padding_mask
from .multihead import MultiHeadAttention, merge_heads, split_heads
from .normalization import layer_norm
from .positional import frequencies, positional_encoding, relative_shift_matrix
from .softmax import attention_entropy, softmax, softmax_jacobian

__version__ = "0.1.0"

__all__ = [
    "FastMultiHeadAttention",
    "MultiHeadAttention",
    "PositionwiseFeedForward",
    "TransformerEncoderBlock",
    "attention_entropy",
    "attention_scores",
    "causal_mask",
    "flash_attention",
    "frequencies",
    "gelu",
    "layer_norm",
    "merge_heads",
    "padding_mask",
    "positional_encoding",
    "relative_shift_matrix",
    "release_buffers",
    "relu",
    "scaled_dot_product_attention",
    "softmax",
    "softmax_jacobian",
    "split_heads",
]

# Notebook 09: a LLaMA-style decoder (SmolLM2-135M from its GGUF file) and block quantisation.
from .llama import KVCache, Llama, LlamaConfig, apply_rope, grouped_query_attention, rms_norm, swiglu  # noqa: E402
from .quantization import dequantize_q4_1, dequantize_q8_0, quantize_q4_1, quantize_q8_0  # noqa: E402

__all__ += [
    "KVCache", "Llama", "LlamaConfig", "apply_rope", "dequantize_q4_1", "dequantize_q8_0",
    "grouped_query_attention", "quantize_q4_1", "quantize_q8_0", "rms_norm", "swiglu",
]
