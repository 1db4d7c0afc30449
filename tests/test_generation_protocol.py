"""One model protocol, one pair of step functions (issue 27, "one set of pieces").

Every generating model of the course -- notebook 08's ``DecoderLM`` (random, and the induction circuit set
by hand), notebook 09's ``Llama`` (float32, float64) and ``transformer_course_fast.FastLlama`` -- has
``new_cache(capacity)`` and ``forward(ids, cache)`` returning logits ``(n, V)`` and extending the cache in
place, and ``generation.CachedStep`` / ``generation.UncachedStep`` run on any of them. Parametrised over
models x step paths (uncached; cached through the growing and through the preallocated cache): the same
greedy tokens, and every step's logits equal to the uncached forward over the final sequence within

    float64: 1e-13 x max |logit|     (measured <= 6.2e-16)
    float32: 2e-6 x max |logit|      (measured <= 2.5e-7)

(the steps compute the same sums in other shapes: rounding only). The LLaMA-shaped models built from one
set of weights (readable float32/float64, fast float32/float64) are interchangeable: the same greedy tokens,
logits within test_fast_llama's bounds of the readable float64 model. FastLlama has no growing cache: its
cache (FastKVCache) keeps keys in its own half-split order, so it is not a LayerCaches and the readable
models refuse it (and it refuses theirs).
"""

from __future__ import annotations

import numpy as np
import pytest

from test_fast_llama import CONFIGS, random_weights
from transformer_course import decoder, generation
from transformer_course.decoder import DecoderLM, induction_model
from transformer_course.generation import CachedStep, UncachedStep, generate
from transformer_course.kv_cache import GrowingKVCache, LayerCaches, PreallocatedKVCache
from transformer_course.llama import Llama
from transformer_course_fast.llama import FastLlama

STEP_BOUND = {np.float64: 1e-13, np.float32: 2e-6}        # step logits vs the uncached forward, x max |logit|
SAME_MODEL_BOUND = {np.float64: 1e-12, np.float32: 2e-5}  # a LLaMA-shaped model vs the readable float64 one
N_NEW = 16


def llama_weights():
    """GGUF-named weights of a small grouped-query LLaMA whose greedy text does not just repeat a token: the
    layers' output matrices are scaled up (x6) so that they, not the tied embedding of the last token,
    decide the next one (with seed 1: 6 different tokens in 16, smallest top-2 logit gap 0.48)."""
    w = random_weights(CONFIGS["gqa"], seed=1)
    return {k: 6.0 * v if k.endswith(("attn_output.weight", "ffn_down.weight")) else v for k, v in w.items()}


def build(name):
    """(model, prompt, dtype) for a model name."""
    if name == "decoder":
        return DecoderLM.random(40, 32, 4, 3, 64, rng=np.random.default_rng(5)), np.arange(10) * 7 % 40, np.float64
    if name == "induction":
        return induction_model(12, 40), np.array([0, 4, 8, 1, 11, 6, 2, 10, 3, 4]), np.float64
    dtype = np.float32 if name.endswith("32") else np.float64
    kind = Llama if name.startswith("llama") else FastLlama
    return kind(CONFIGS["gqa"], llama_weights(), dtype), np.random.default_rng(1).integers(0, 97, 6), dtype


MODELS = ["decoder", "induction", "llama32", "llama64", "fast32", "fast64"]
PATHS = ["uncached", "cached-growing", "cached-preallocated"]
CASES = [(m, p) for m in MODELS for p in PATHS if not (m.startswith("fast") and p == "cached-growing")]


def step_for(model, path, capacity):
    if path == "uncached":
        return UncachedStep(model)
    return CachedStep(model, model.new_cache(None if path == "cached-growing" else capacity))


def recorded(step, rows):
    """The step function, keeping what it returned."""
    def run(ids):
        rows.append(step(ids))
        return rows[-1]
    return run


@pytest.fixture(scope="module")
def greedy_by_uncached_forward():
    """The reference: per model, argmax of ``forward(ids)[-1]`` in a plain loop (no step function)."""
    found = {}
    for name in MODELS:
        model, prompt, _ = build(name)
        ids = prompt.copy()
        for _ in range(N_NEW):
            ids = np.append(ids, np.argmax(model.forward(ids)[-1]))
        found[name] = ids
    return found


@pytest.mark.parametrize("name,path", CASES, ids=[f"{m}-{p}" for m, p in CASES])
def test_every_model_and_step_path_gives_the_same_greedy_tokens_and_logits(name, path, greedy_by_uncached_forward):
    model, prompt, dtype = build(name)
    rows = []
    step = step_for(model, path, capacity=prompt.size + N_NEW)
    out = generate(recorded(step, rows), prompt, N_NEW, temperature=0.0)
    np.testing.assert_array_equal(out, greedy_by_uncached_forward[name], err_msg=f"{name}, {path}: other greedy tokens")
    assert len(set(out[prompt.size:].tolist())) >= 4, f"{name}: a greedy text of one repeated token tests little"
    expected = model.forward(out)[prompt.size - 1:-1]                       # (N_NEW, V): the uncached rows
    got = np.stack(rows)
    assert got.dtype == expected.dtype == dtype, (got.dtype, expected.dtype)
    err = np.abs(got - expected).max()
    assert err <= STEP_BOUND[dtype] * np.abs(expected).max(), \
        f"{name}, {path}: step logits differ from the uncached forward by {err:.3g} (max |logit| {np.abs(expected).max():.3g})"
    if path != "uncached":
        assert step.cache.length == out.size - 1, "the cache holds every token but the last (never fed)"


def test_the_llama_shaped_models_are_interchangeable():
    """Readable and fast, float32 and float64, from one set of weights: one greedy text, close logits."""
    reference, prompt, _ = build("llama64")
    ref_out = generate(CachedStep(reference, reference.new_cache(prompt.size + N_NEW)), prompt, N_NEW, temperature=0.0)
    ref_logits = reference.forward(ref_out)
    for name in ("llama32", "fast32", "fast64"):
        model, _, dtype = build(name)
        out = generate(CachedStep(model, model.new_cache(prompt.size + N_NEW)), prompt, N_NEW, temperature=0.0)
        np.testing.assert_array_equal(out, ref_out, err_msg=f"{name}: other greedy tokens than the readable float64")
        err = np.abs(model.forward(ref_out).astype(np.float64) - ref_logits).max()
        assert err <= SAME_MODEL_BOUND[dtype] * np.abs(ref_logits).max(), f"{name}: logits off by {err:.3g}"


@pytest.mark.parametrize("name", ["decoder", "llama64"])
def test_new_cache_is_growing_or_preallocated(name):
    model, _, dtype = build(name)
    growing, preallocated = model.new_cache(), model.new_cache(12)
    assert isinstance(growing, LayerCaches) and isinstance(preallocated, LayerCaches)
    assert all(type(c) is GrowingKVCache for c in growing) and growing.capacity is None
    assert all(type(c) is PreallocatedKVCache for c in preallocated) and preallocated.capacity == 12
    assert growing.length == preallocated.length == 0
    model.forward(np.arange(5), preallocated)
    assert preallocated.length == 5 and preallocated[0].keys.dtype == dtype


def test_one_step_function_form_everywhere():
    """notebook 08 imports the step functions from decoder, the package from its top: the same objects."""
    import transformer_course as tc

    assert decoder.CachedStep is generation.CachedStep is tc.CachedStep
    assert decoder.UncachedStep is generation.UncachedStep is tc.UncachedStep
    assert not hasattr(Llama, "step_function"), "Llama's own step function is gone: CachedStep(model, cache)"


def test_decoder_forward_returns_weights_on_request():
    model, prompt, _ = build("induction")
    logits, weights = model.forward(prompt, return_weights=True)
    np.testing.assert_array_equal(logits, model.forward(prompt))
    assert [w.shape for w in weights] == [(1, prompt.size, prompt.size)] * 2


# ------------------------------------------------------------------------------------------ bad input
@pytest.mark.parametrize("name", ["decoder", "llama32", "fast32"])
def test_a_cached_step_refuses_ids_that_do_not_extend_its_last_call(name):
    model, prompt, _ = build(name)
    step = CachedStep(model, model.new_cache(32))
    step(prompt[:4])
    for bad, what in ((prompt[:4], "the same ids again"), (prompt[:3], "fewer ids"),
                      (np.concatenate([prompt[:3], prompt[4:6]]), "another prefix")):
        with pytest.raises(ValueError, match="ids must extend the 4 tokens of the previous call"):
            step(bad)
    step(prompt[:6])                                                        # a correct call still works after those
    assert step.cache.length == 6


def test_a_cached_step_refuses_a_cache_changed_outside_it_or_not_empty():
    model, prompt, _ = build("decoder")
    cache = model.new_cache()
    step = CachedStep(model, cache)
    step(prompt[:3])
    model.forward(prompt[3:4], cache)                                       # someone else fed the cache
    with pytest.raises(ValueError, match="the cache holds 4 positions but this step has fed 3"):
        step(prompt[:4])
    with pytest.raises(ValueError, match=r"cache must be an empty cache of the model \(length 0\)"):
        CachedStep(model, cache)


def test_step_functions_name_their_bad_arguments():
    model, _, _ = build("decoder")
    with pytest.raises(TypeError, match=r"model must have the methods forward\(ids, cache=None\)"):
        UncachedStep(lambda ids: ids)
    with pytest.raises(TypeError, match="model must have .* new_cache"):
        CachedStep(type("OnlyForward", (), {"forward": lambda self, ids, cache=None: None})())
    for step in (UncachedStep(model), CachedStep(model)):
        with pytest.raises(ValueError, match="ids must be a non-empty 1-D array of integer token ids"):
            step(np.array([[1, 2]]))
        with pytest.raises(ValueError, match="ids must be a non-empty 1-D array of integer token ids"):
            step(np.array([1.0, 2.0]))


@pytest.mark.parametrize("name", ["decoder", "llama64"])
def test_forward_refuses_a_cache_that_is_not_layer_caches(name):
    model, prompt, _ = build(name)
    with pytest.raises(TypeError, match="cache must be None or a"):
        model.forward(prompt[:2], [None, None])


@pytest.mark.parametrize("name", ["decoder", "llama64"])
def test_forward_names_a_bad_cache(name):
    model, prompt, _ = build(name)
    with pytest.raises(ValueError, match="the cache holds 3 positions; 0 used, 4 more requested"):
        model.forward(prompt[:4], model.new_cache(3))
    n_layers = len(model.new_cache())
    with pytest.raises(ValueError, match=f"cache holds {n_layers + 1} layers"):
        model.forward(prompt[:2], LayerCaches(list(model.new_cache()) + [model.new_cache()[0]]))
    with pytest.raises((TypeError, ValueError), match="capacity"):
        model.new_cache(0)
