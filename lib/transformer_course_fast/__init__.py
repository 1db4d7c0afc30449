"""transformer_course_fast: the course's attention and MiniLM forward pass, made fast.

Not for reading first: ``transformer_course`` is the readable reference and every function
here is tested against it (tests/test_fast_attention.py, tests/test_pretrained_minilm.py,
tests/test_fast_training.py).
``bench/`` times these against PyTorch (``make bench``; ``bench/minilm_speed.py``).

* :func:`flash_attention` -- tiled online-softmax attention, never the ``n x n`` matrix,
  threads that share the tiles (``attention.py``);
* :class:`FastMultiHeadAttention` -- one fused Q/K/V projection feeding that core;
* :class:`FastSentenceEncoder` -- all-MiniLM-L6-v2 with the batch split among threads and a
  float32 GELU (``minilm.py``);
* :class:`FastTrainer` -- notebook 10's ``TinyDecoder``: forward + backward + AdamW in
  feature-major layout, flat parameter/gradient buffers, reused arrays (``training.py``);
* ``_threads.py`` -- OpenBLAS thread control (ctypes), the thread pool, reused buffers.
"""

from .attention import FastMultiHeadAttention, flash_attention, release_buffers
from .minilm import FastSentenceEncoder
from .training import FastTrainer

__all__ = ["FastMultiHeadAttention", "FastSentenceEncoder", "FastTrainer", "flash_attention", "release_buffers"]
