"""The two KV caches of kv_cache.py are interchangeable: the decoder of notebook 08 (``DecoderLM``) and a
small random LLaMA-style model (``Llama``) give the same logits through the growing and the preallocated
cache, fed the prompt and then one token at a time, and those logits are the uncached forward's."""

from __future__ import annotations

import numpy as np
import pytest

from test_llama import tiny_model
from transformer_course.decoder import DecoderLM
from transformer_course.kv_cache import GrowingKVCache, LayerCaches, PreallocatedKVCache
from transformer_course.llama import KVCache as LlamaKVCache

CACHES = ["growing", "preallocated"]


def new_cache(kind, model, capacity: int):
    """The model's own cache of that kind (both models answer new_cache(capacity), None = growing)."""
    cache = model.new_cache(None if kind == "growing" else capacity)
    assert isinstance(cache, LayerCaches) and cache.length == 0
    assert cache.capacity == (None if kind == "growing" else capacity)
    return cache


def steps(ids, prompt: int):
    """The prompt, then one token at a time."""
    return [ids[:prompt]] + [ids[i:i + 1] for i in range(prompt, ids.size)]


@pytest.mark.parametrize("kind", CACHES)
def test_decoder_lm_step_by_step_through_each_cache(kind):
    model = DecoderLM.random(vocab_size=23, d_model=16, n_heads=4, n_layers=2, max_len=16,
                             rng=np.random.default_rng(0))
    ids = np.random.default_rng(1).integers(0, 23, 11)
    full = model.logits(ids)                                                 # (11, V), no cache
    cache = new_cache(kind, model, capacity=16)
    rows = [model.forward(piece, cache) for piece in steps(ids, 4)]
    assert all(c.length == ids.size for c in cache), [c.length for c in cache]
    assert all(type(c) is (GrowingKVCache if kind == "growing" else PreallocatedKVCache) for c in cache)
    np.testing.assert_allclose(np.concatenate(rows), full, rtol=0, atol=1e-12 * np.abs(full).max(),
                               err_msg=f"{kind} cache: cached logits differ from the uncached forward")


@pytest.mark.parametrize("kind", CACHES)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_llama_step_by_step_through_each_cache(kind, dtype):
    model = tiny_model(dtype)
    ids = np.random.default_rng(2).integers(0, 50, 12)
    full = model.forward(ids)
    cache = new_cache(kind, model, 16)
    rows = [model.forward(piece, cache) for piece in steps(ids, 5)]
    assert cache.length == ids.size
    tol = 1e-4 if dtype == np.float32 else 1e-12
    assert all(r.dtype == dtype for r in rows)
    np.testing.assert_allclose(np.concatenate(rows), full, rtol=0, atol=tol * np.abs(full).max(),
                               err_msg=f"{kind} cache: cached logits differ from the uncached forward")


@pytest.mark.parametrize("model_kind", ["decoder", "llama"])
def test_the_two_caches_give_the_same_logits(model_kind):
    """Growing and preallocated side by side, step for step: the same numbers (they hold the same keys)."""
    if model_kind == "decoder":
        model = DecoderLM.random(vocab_size=23, d_model=16, n_heads=4, n_layers=2, max_len=16,
                                 rng=np.random.default_rng(3))
        ids = np.random.default_rng(4).integers(0, 23, 9)
    else:
        model = tiny_model(np.float64, seed=5)
        ids = np.random.default_rng(6).integers(0, 50, 9)
    caches = {k: new_cache(k, model, 9) for k in CACHES}
    out = {k: [] for k in CACHES}
    for piece in steps(ids, 3):                                   # side by side, step for step
        for k in CACHES:
            out[k].append(model.forward(piece, caches[k]))
    a, b = (np.concatenate(out[k]) for k in CACHES)
    np.testing.assert_allclose(a, b, rtol=0, atol=1e-13 * np.abs(a).max())


def test_the_protocol_by_hand(rng):
    """append then fetch: both implementations hold exactly the keys and values appended, in order."""
    k1, v1 = rng.normal(size=(2, 3, 4)), rng.normal(size=(2, 3, 4))
    k2, v2 = rng.normal(size=(2, 1, 4)), rng.normal(size=(2, 1, 4))
    empty = np.zeros((2, 0, 4))
    for cache in (GrowingKVCache(empty, empty), PreallocatedKVCache(2, 5, 4, np.float64)):
        cache = cache.append(k1, v1).append(k2, v2)
        assert cache.length == 4, type(cache).__name__
        np.testing.assert_array_equal(cache.keys, np.concatenate([k1, k2], axis=1))
        np.testing.assert_array_equal(cache.values, np.concatenate([v1, v2], axis=1))


def test_preallocated_cache_refuses_overflow_shape_and_dtype():
    cache = PreallocatedKVCache(2, 3, 4, np.float64)
    with pytest.raises(ValueError, match="holds 3 positions; 0 used, 4 more"):
        cache.append(np.zeros((2, 4, 4)), np.zeros((2, 4, 4)))
    with pytest.raises(ValueError, match=r"keys must have shape \(2, n_new, 4\)"):
        cache.append(np.zeros((3, 1, 4)), np.zeros((3, 1, 4)))
    with pytest.raises(TypeError, match="keys must be float64"):
        cache.append(np.zeros((2, 1, 4), np.float32), np.zeros((2, 1, 4), np.float32))


def test_llama_kv_cache_keeps_its_constructor_and_size():
    model = tiny_model(np.float32)
    cache = LlamaKVCache(model.config, 8, np.float32)
    cfg = model.config
    assert isinstance(cache, LayerCaches) and cache.capacity == 8 and cache.length == 0
    assert cache.nbytes == 2 * cfg.n_layers * cfg.n_kv_heads * 8 * cfg.d_head * 4
