"""transformer_course: the Transformer from first principles, in NumPy.

The readable reference implementation of everything the course's notebooks build, one
module per concept (see lib/README.md for the map). Shapes follow the ``(..., n, d)``
convention: any leading batch (and head) dimensions, then positions, then features.
Argument checks live in ``_checks.py`` (one call per argument; the rules for NaN, -inf
and empty axes are in its docstring). Fast versions (threads, tiles, fused products)
are in the sibling package ``transformer_course_fast``, tested against these.

The exports below follow the notebooks: 01-07 (attention ... the encoder), 08 (the decoder and
generation), 09 (a LLaMA-style decoder, SmolLM2, block quantisation), 10 (learning), 11 (fine-tuning),
12 (tokenizers). The top-level
``KVCache`` is notebook 08's (the growing cache); ``llama.KVCache``, notebook 09's preallocated one,
stays under its module (both implement kv_cache.py's protocol).
"""

# Notebooks 01-07: attention, its scaling, multi-head attention, positions, the encoder block, MiniLM.
from .activations import gelu, relu
from .attention import attention_scores, grouped_query_attention, lookup_query, scaled_dot_product_attention
from .encoder import TransformerEncoderBlock, encoder_block
from .feedforward import PositionwiseFeedForward, feed_forward, swiglu
from .masks import causal_mask, leaked_weight, padding_mask
from .multihead import MultiHeadAttention, head_bilinear_forms, merge_heads, multi_head_attention, split_heads
from .normalization import fold_layer_norm, layer_norm, rms_norm
from .online_softmax import online_softmax_attention
from .positional import (apply_rope, decode_position, frequencies, positional_encoding, relative_shift_matrix,
                         shift_matrix)
from .pretrained import embed_tokens, encode_long_document, encoder_layer, pattern_score, sentence_embeddings
from .softmax import attention_entropy, softmax, softmax_backward, softmax_jacobian
# Notebook 08: the decoder and generation.
from . import decoder, generation
from .decoder import (DecoderLM, KVCache, TransformerDecoderBlock, causal_self_attention, cross_attention,
                      decoder_block)
from .generation import CachedStep, UncachedStep, generate, sample_next_token, sampling_probabilities
from .loss import cross_entropy, language_model_loss
# Notebook 09: a LLaMA-style decoder (SmolLM2-135M from its GGUF file) and block quantisation.
from .llama import Llama, LlamaConfig
from .quantization import dequantize_q4_1, dequantize_q8_0, quantize_q4_1, quantize_q8_0
# Notebook 10 (learning): backward passes and the training utilities.
from . import backward, training
from .attention import attention_backward
from .backward import cross_entropy_backward, embedding_backward, feed_forward_backward, layer_norm_backward
# Notebook 11 (fine-tuning): the backward passes of SmolLM2's pieces, and LoRA.
from .attention import kv_head_gradient
from .normalization import rms_norm_backward
from .positional import rope_backward
from .lora import lora_backward, lora_forward
# Notebook 12 (tokens): byte-level BPE (GPT-2, SmolLM2) and WordPiece (BERT, MiniLM).
from . import bpe, wordpiece
from .bpe import ByteLevelBPE, bpe_encode, pretokenize, shortest_tokenization, train_bpe
from .wordpiece import WordPiece, wordpiece_tokenize

__version__ = "0.1.0"

__all__ = [
    "apply_rope",
    "attention_backward",
    "attention_entropy",
    "attention_scores",
    "backward",
    "bpe",
    "bpe_encode",
    "ByteLevelBPE",
    "CachedStep",
    "causal_mask",
    "causal_self_attention",
    "cross_attention",
    "cross_entropy",
    "cross_entropy_backward",
    "decode_position",
    "decoder",
    "decoder_block",
    "DecoderLM",
    "dequantize_q4_1",
    "dequantize_q8_0",
    "embed_tokens",
    "embedding_backward",
    "encode_long_document",
    "encoder_block",
    "encoder_layer",
    "feed_forward",
    "feed_forward_backward",
    "fold_layer_norm",
    "frequencies",
    "gelu",
    "generate",
    "generation",
    "grouped_query_attention",
    "head_bilinear_forms",
    "kv_head_gradient",
    "KVCache",
    "language_model_loss",
    "layer_norm",
    "layer_norm_backward",
    "leaked_weight",
    "Llama",
    "LlamaConfig",
    "lookup_query",
    "lora_backward",
    "lora_forward",
    "merge_heads",
    "multi_head_attention",
    "MultiHeadAttention",
    "online_softmax_attention",
    "padding_mask",
    "pattern_score",
    "positional_encoding",
    "pretokenize",
    "PositionwiseFeedForward",
    "quantize_q4_1",
    "quantize_q8_0",
    "relative_shift_matrix",
    "relu",
    "rms_norm",
    "rms_norm_backward",
    "rope_backward",
    "sample_next_token",
    "sampling_probabilities",
    "scaled_dot_product_attention",
    "sentence_embeddings",
    "shortest_tokenization",
    "shift_matrix",
    "softmax",
    "softmax_backward",
    "softmax_jacobian",
    "split_heads",
    "swiglu",
    "train_bpe",
    "training",
    "TransformerDecoderBlock",
    "TransformerEncoderBlock",
    "UncachedStep",
    "wordpiece",
    "WordPiece",
    "wordpiece_tokenize",
]
