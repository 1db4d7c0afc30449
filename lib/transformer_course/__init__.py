"""transformer_course: the Transformer from first principles, in NumPy.

The readable reference implementation of everything the course's notebooks build, one
module per concept (see lib/README.md for the map). Shapes follow the ``(..., n, d)``
convention: any leading batch (and head) dimensions, then positions, then features.
Argument checks live in ``_checks.py`` (one call per argument; the rules for NaN, -inf
and empty axes are in its docstring). Fast versions (threads, tiles, fused products)
are in the sibling package ``transformer_course_fast``, tested against these.

The exports below follow the notebooks: 01-07 (attention ... the encoder), 08 (the decoder and
generation), 09 (a LLaMA-style decoder, SmolLM2, block quantisation), 10 (learning). The top-level
``KVCache`` is notebook 08's (the growing cache); ``llama.KVCache``, notebook 09's preallocated one,
stays under its module (both implement kv_cache.py's protocol).
"""

# Notebooks 01-07: attention, its scaling, multi-head attention, positions, the encoder block.
from .activations import gelu, relu
from .attention import attention_scores, grouped_query_attention, scaled_dot_product_attention
from .encoder import TransformerEncoderBlock
from .feedforward import PositionwiseFeedForward, swiglu
from .masks import causal_mask, padding_mask
from .multihead import MultiHeadAttention, merge_heads, split_heads
from .normalization import fold_layer_norm, layer_norm, rms_norm
from .online_softmax import online_softmax_attention
from .positional import apply_rope, decode_position, frequencies, positional_encoding, relative_shift_matrix
from .softmax import attention_entropy, softmax, softmax_jacobian
# Notebook 08: the decoder and generation.
from . import decoder, generation
from .decoder import CachedStep, DecoderLM, KVCache, TransformerDecoderBlock, UncachedStep
from .generation import generate, sample_next_token, sampling_probabilities
# Notebook 09: a LLaMA-style decoder (SmolLM2-135M from its GGUF file) and block quantisation.
from .llama import Llama, LlamaConfig
from .quantization import dequantize_q4_1, dequantize_q8_0, quantize_q4_1, quantize_q8_0
# Notebook 10 (learning): backward passes, the loss, and the training utilities.
from . import backward, training
from .loss import cross_entropy

__version__ = "0.1.0"

__all__ = [
    # 01-07
    "MultiHeadAttention",
    "PositionwiseFeedForward",
    "TransformerEncoderBlock",
    "attention_entropy",
    "attention_scores",
    "causal_mask",
    "decode_position",
    "fold_layer_norm",
    "frequencies",
    "gelu",
    "layer_norm",
    "merge_heads",
    "online_softmax_attention",
    "padding_mask",
    "positional_encoding",
    "relative_shift_matrix",
    "relu",
    "scaled_dot_product_attention",
    "softmax",
    "softmax_jacobian",
    "split_heads",
    # 08
    "CachedStep",
    "DecoderLM",
    "KVCache",
    "TransformerDecoderBlock",
    "UncachedStep",
    "generate",
    "sample_next_token",
    "sampling_probabilities",
    # 09
    "Llama",
    "LlamaConfig",
    "apply_rope",
    "dequantize_q4_1",
    "dequantize_q8_0",
    "grouped_query_attention",
    "quantize_q4_1",
    "quantize_q8_0",
    "rms_norm",
    "swiglu",
    # 10
    "backward",
    "cross_entropy",
    "training",
]
