"""transformer_course_fast: the course's attention, MiniLM, SmolLM2 and training step, made fast.

Not for reading first: ``transformer_course`` is the readable reference and every function
here is tested against it (tests/test_fast_attention.py, tests/test_pretrained_minilm.py,
tests/test_fast_training.py, tests/test_fast_llama.py).
``bench/`` times these against PyTorch (``make bench``; ``bench/minilm_speed.py``).

* :func:`flash_attention` -- tiled online-softmax attention, never the ``n x n`` matrix,
  threads that share the tiles (``attention.py``);
* :class:`FastMultiHeadAttention` -- one fused Q/K/V projection feeding that core;
* :class:`FastSentenceEncoder` -- all-MiniLM-L6-v2 with the batch split among threads and a
  float32 GELU (``minilm.py``);
* :class:`FastLlama` -- SmolLM2 (any LLaMA-style config): one GEMV per fused weight matrix,
  constants folded in, buffers reused, batched prefill; decodes at the memory-bandwidth bound
  (``llama.py``; ``make bench-llm``);
* :class:`FastTrainer` -- notebook 10's ``TinyDecoder``: forward + backward + AdamW in
  feature-major layout, flat parameter/gradient buffers, reused arrays (``training.py``);
* ``_threads.py`` -- OpenBLAS thread control (ctypes), the thread pool, reused buffers.
"""

from .attention import FastMultiHeadAttention, flash_attention, release_buffers
from .llama import FastKVCache, FastLlama, load_fast_smollm2
from .minilm import FastSentenceEncoder
from .training import FastTrainer

__all__ = ["FastKVCache", "FastLlama", "FastMultiHeadAttention", "FastSentenceEncoder", "FastTrainer", "flash_attention",
           "load_fast_smollm2", "release_buffers"]
