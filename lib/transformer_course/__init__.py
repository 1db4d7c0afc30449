"""transformer_course: the Transformer from first principles, in NumPy.

The readable reference implementation of everything the course's notebooks build, one
module per concept (see lib/README.md for the map). Shapes follow the ``(..., n, d)``
convention: any leading batch (and head) dimensions, then positions, then features.
Argument checks live in ``_checks.py`` (one call per argument; the rules for NaN, -inf
and empty axes are in its docstring). Fast versions (threads, tiles, fused products)
are in the sibling package ``transformer_course_fast``, tested against these.
"""

from .activations import gelu, relu
from .attention import attention_scores, lookup_query, scaled_dot_product_attention
from .encoder import TransformerEncoderBlock, encoder_block
from .feedforward import PositionwiseFeedForward, feed_forward
from .masks import causal_mask, leaked_weight, padding_mask
from .multihead import MultiHeadAttention, head_bilinear_forms, merge_heads, multi_head_attention, split_heads
from .normalization import fold_layer_norm, layer_norm
from .online_softmax import online_softmax_attention
from .positional import decode_position, frequencies, positional_encoding, relative_shift_matrix, shift_matrix
from .pretrained import embed_tokens, encode_long_document, encoder_layer, pattern_score, sentence_embeddings
from .softmax import attention_entropy, softmax, softmax_backward, softmax_jacobian

__version__ = "0.1.0"

__all__ = [
    "MultiHeadAttention",
    "PositionwiseFeedForward",
    "TransformerEncoderBlock",
    "attention_entropy",
    "attention_scores",
    "causal_mask",
    "decode_position",
    "embed_tokens",
    "encode_long_document",
    "encoder_block",
    "encoder_layer",
    "feed_forward",
    "fold_layer_norm",
    "frequencies",
    "gelu",
    "head_bilinear_forms",
    "layer_norm",
    "leaked_weight",
    "lookup_query",
    "merge_heads",
    "multi_head_attention",
    "online_softmax_attention",
    "padding_mask",
    "pattern_score",
    "positional_encoding",
    "relative_shift_matrix",
    "relu",
    "scaled_dot_product_attention",
    "sentence_embeddings",
    "shift_matrix",
    "softmax",
    "softmax_backward",
    "softmax_jacobian",
    "split_heads",
]

# Notebook 08: the decoder and generation.
from . import decoder, generation  # noqa: E402
from .decoder import (CachedStep, DecoderLM, KVCache, TransformerDecoderBlock, UncachedStep,  # noqa: E402
                      causal_self_attention, cross_attention, decoder_block, language_model_loss)
from .generation import generate, sample_next_token, sampling_probabilities  # noqa: E402

__all__ += [
    "CachedStep",
    "DecoderLM",
    "KVCache",
    "TransformerDecoderBlock",
    "UncachedStep",
    "causal_self_attention",
    "cross_attention",
    "decoder_block",
    "generate",
    "language_model_loss",
    "sample_next_token",
    "sampling_probabilities",
]

# Notebook 10 (learning): backward passes, the loss, and the training utilities.
from . import backward, training  # noqa: E402
from .backward import (attention_backward, cross_entropy_backward, embedding_backward,  # noqa: E402
                       feed_forward_backward, layer_norm_backward, softmax_backward)
from .loss import cross_entropy  # noqa: E402

__all__ += ["attention_backward", "backward", "cross_entropy", "cross_entropy_backward", "embedding_backward",
            "feed_forward_backward", "layer_norm_backward", "softmax_backward", "training"]

# (llama.KVCache, the cache of notebook 09's model, stays under its module: the top-level KVCache
# is notebook 08's.)
# Notebook 09: a LLaMA-style decoder (SmolLM2-135M from its GGUF file) and block quantisation.
from .llama import Llama, LlamaConfig, apply_rope, grouped_query_attention, rms_norm, swiglu  # noqa: E402
from .quantization import dequantize_q4_1, dequantize_q8_0, quantize_q4_1, quantize_q8_0  # noqa: E402

__all__ += [
    "Llama", "LlamaConfig", "apply_rope", "dequantize_q4_1", "dequantize_q8_0",
    "grouped_query_attention", "quantize_q4_1", "quantize_q8_0", "rms_norm", "swiglu",
]

# Notebook 11 (fine-tuning): the backward passes of SmolLM2's pieces and LoRA.
from .llama import kv_head_gradient, rms_norm_backward, rope_backward  # noqa: E402
from .lora import lora_backward, lora_forward  # noqa: E402

__all__ += ["kv_head_gradient", "lora_backward", "lora_forward", "rms_norm_backward", "rope_backward"]
