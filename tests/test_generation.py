"""generation.py: sampling_probabilities, sample_next_token and the generate loop."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from transformer_course.generation import generate, keep_top_p, sample_next_token, sampling_probabilities

PROPS = settings(max_examples=40, deadline=None, database=None)
logit_rows = arrays(np.float64, st.tuples(st.integers(1, 3), st.integers(2, 12)),
                    elements=st.floats(-5, 5, allow_nan=False, width=64))

P = np.array([0.5, 0.2, 0.15, 0.1, 0.05])
LOGITS = np.log(P)


def test_temperature_one_is_the_softmax():
    np.testing.assert_allclose(sampling_probabilities(LOGITS), P, rtol=1e-14)


def test_temperature_divides_the_logits_before_the_softmax():
    # T = 0.5 doubles the logits: p^2, renormalised. Dividing p by T after the softmax would give p again.
    np.testing.assert_allclose(sampling_probabilities(LOGITS, temperature=0.5), P**2 / (P**2).sum(), rtol=1e-14)


def test_temperature_zero_is_greedy_with_the_lowest_index_among_ties():
    np.testing.assert_array_equal(sampling_probabilities(np.array([1.0, 3.0, 3.0]), temperature=0), [0, 1, 0])


def test_top_k_keeps_the_k_largest():
    np.testing.assert_allclose(sampling_probabilities(LOGITS, top_k=2), [5 / 7, 2 / 7, 0, 0, 0], rtol=1e-14)
    np.testing.assert_allclose(sampling_probabilities(LOGITS, top_k=99), P, rtol=1e-14)   # k > V: all


@pytest.mark.parametrize("p, kept", [(0.3, 1), (0.45, 1), (0.6, 2), (0.8, 3), (0.9, 4), (0.96, 5), (1.0, 5)])
def test_top_p_keeps_the_smallest_prefix_with_mass_at_least_p(p, kept):
    # cumulative sums 0.5, 0.7, 0.85, 0.95, 1.0 (p chosen away from them: at a tie rounding decides)
    probs = sampling_probabilities(LOGITS, top_p=p)
    assert int((probs > 0).sum()) == kept
    np.testing.assert_allclose(probs[:kept], P[:kept] / P[:kept].sum(), rtol=1e-14)


@pytest.mark.parametrize("p, kept", [(0.5, 1), (0.7, 2), (0.85, 3), (0.95, 4)])
def test_top_p_equal_to_a_running_sum_stops_there(p, kept):
    # P's running sums are exactly the floats 0.5, 0.7, 0.85, 0.95 (IEEE addition, no exp involved), so the
    # nucleus for p equal to one of them ends at that token. Taking the mass before a token as cumsum - p_i
    # rounds (0.7 - 0.2 = 0.49999999999999994 < 0.5) and keeps one token too many.
    assert np.cumsum(P)[kept - 1] == p
    assert int(keep_top_p(P, p).sum()) == kept
    assert int(keep_top_p(P, np.nextafter(p, 1)).sum()) == kept + 1


@pytest.mark.parametrize("p, kept", [(0.25, 1), (0.5, 2), (0.75, 3), (0.5 + 1e-12, 3)])
def test_top_p_boundary_with_exact_probabilities(p, kept):
    # four equal logits: every probability is exactly 0.25 and every running sum exact
    probs = sampling_probabilities(np.zeros(4), top_p=p, temperature=1.7)
    assert sorted(probs.tolist(), reverse=True) == [1 / kept] * kept + [0.0] * (4 - kept)


def test_top_p_is_applied_after_top_k_on_the_renormalised_distribution():
    # top-k = 3 renormalises to 0.588, 0.235, 0.176: top_p = 0.8 then needs 2 tokens (0.824 >= 0.8),
    # whereas on the full distribution it would need 3.
    probs = sampling_probabilities(LOGITS, top_k=3, top_p=0.8)
    assert int((probs > 0).sum()) == 2


def test_forbidden_tokens_stay_forbidden():
    logits = np.array([0.0, -np.inf, 1.0])
    assert sampling_probabilities(logits, temperature=3.0)[1] == 0.0


@PROPS
@given(logits=logit_rows, t=st.floats(0.05, 5), k=st.integers(1, 12), p=st.floats(0.01, 1.0))
def test_every_rule_returns_a_distribution_whose_support_is_the_most_likely_tokens(logits, t, k, p):
    probs = sampling_probabilities(logits, temperature=t, top_k=k, top_p=p)
    np.testing.assert_allclose(probs.sum(axis=-1), 1.0, rtol=1e-12)
    assert np.all(probs >= 0)
    full = sampling_probabilities(logits, temperature=t)
    for row, frow in zip(probs, full):
        kept = row > 0
        assert 1 <= kept.sum() <= k
        # every kept token is at least as likely as every dropped one
        if (~kept).any():
            assert frow[kept].min() >= frow[~kept].max()
        # kept tokens keep their ratios
        np.testing.assert_allclose(row[kept] / row[kept].sum(), frow[kept] / frow[kept].sum(), rtol=1e-10)


@PROPS
@given(logits=logit_rows, p=st.floats(0.01, 0.999))
def test_nucleus_is_minimal(logits, p):
    probs = sampling_probabilities(logits)
    keep = keep_top_p(probs, p)
    for row, k in zip(probs, keep):
        assert row[k].sum() >= p - 1e-12                       # enough mass
        smallest_kept = row[k].min()
        assert row[k].sum() - smallest_kept < p + 1e-12        # dropping any kept token goes below p


@pytest.mark.parametrize("kwargs, error", [
    (dict(temperature=-1.0), ValueError), (dict(temperature="hot"), TypeError),
    (dict(top_k=0), ValueError), (dict(top_k=2.5), TypeError),
    (dict(top_p=0.0), ValueError), (dict(top_p=1.5), ValueError)])
def test_bad_options_give_clear_errors(kwargs, error):
    with pytest.raises(error):
        sampling_probabilities(LOGITS, **kwargs)


def test_bad_logits_give_clear_errors():
    with pytest.raises(ValueError, match="NaN"):
        sampling_probabilities(np.array([0.0, np.nan]))
    with pytest.raises(ValueError, match="finite entry"):
        sampling_probabilities(np.array([-np.inf, -np.inf]))
    with pytest.raises(ValueError, match=r"shape \(V,\)"):
        sample_next_token(np.zeros((2, 3)), rng=np.random.default_rng(0))
    with pytest.raises(TypeError, match="Generator"):
        sample_next_token(LOGITS, rng=None)


def test_sample_next_token_follows_the_distribution():
    # 20000 draws: each frequency within 5 standard deviations sqrt(p (1 - p) / N) of p (fails w.p. < 1e-5).
    rng = np.random.default_rng(0)
    n = 20000
    counts = np.bincount([sample_next_token(LOGITS, rng=rng, temperature=2.0, top_p=0.9) for _ in range(n)],
                         minlength=5)
    expected = sampling_probabilities(LOGITS, temperature=2.0, top_p=0.9)
    assert np.all(counts[expected == 0] == 0)
    assert np.all(np.abs(counts / n - expected) <= 5 * np.sqrt(expected * (1 - expected) / n) + 1e-12)


def test_sample_next_token_is_reproducible_and_greedy_needs_no_rng():
    a = [sample_next_token(LOGITS, rng=np.random.default_rng(5)) for _ in range(3)]
    b = [sample_next_token(LOGITS, rng=np.random.default_rng(5)) for _ in range(3)]
    assert a == b and all(isinstance(t, int) for t in a)
    assert sample_next_token(LOGITS, rng=None, temperature=0) == 0


def test_generate_passes_the_whole_sequence_and_returns_prompt_plus_new():
    seen = []

    def step(ids):
        seen.append(ids.copy())
        return 10.0 * np.eye(6)[len(ids) % 6]

    out = generate(step, [1, 1], 3, temperature=0)
    np.testing.assert_array_equal(out, [1, 1, 2, 3, 4])
    assert [len(s) for s in seen] == [2, 3, 4]
    assert out.dtype == np.int64
    np.testing.assert_array_equal(generate(step, [4], 0, temperature=0), [4])


def test_generate_with_a_seed_is_reproducible():
    def step(ids):
        return np.linspace(0, 1, 7) + 0.1 * ids[-1]
    a = generate(step, [0], 15, rng=np.random.default_rng(2), temperature=1.5)
    b = generate(step, [0], 15, rng=np.random.default_rng(2), temperature=1.5)
    np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("args, error, match", [
    (("not callable", [0], 1), TypeError, "callable"),
    ((lambda ids: np.zeros(3), [], 1), ValueError, "non-empty"),
    ((lambda ids: np.zeros(3), [0.5], 1), TypeError, "integers"),
    ((lambda ids: np.zeros(3), [0], -1), ValueError, "n_new"),
    ((lambda ids: np.zeros((2, 3)), [0], 1), ValueError, r"shape \(V,\)")])
def test_generate_bad_input(args, error, match):
    with pytest.raises(error, match=match):
        generate(*args, temperature=0)


def test_generate_needs_an_rng_to_sample():
    with pytest.raises(TypeError, match="Generator"):
        generate(lambda ids: np.zeros(3), [0], 1)


@pytest.mark.torch
def test_top_k_top_p_match_transformers_logits_processors():
    """Hugging Face's TopK/TopP warpers keep the same tokens (their order: temperature, top-k, top-p)."""
    torch = pytest.importorskip("torch", reason="PyTorch not installed: pip install -e '.[torch]'")
    gen = pytest.importorskip("transformers.generation.logits_process", reason="transformers not installed")
    rng = np.random.default_rng(4)
    logits = rng.normal(size=(6, 30)) * 2
    for t, k, p in [(0.7, 10, 0.8), (1.3, 25, 0.5), (1.0, 3, 0.95)]:
        scores = torch.from_numpy(logits.copy())
        for warper in (gen.TemperatureLogitsWarper(t), gen.TopKLogitsWarper(k), gen.TopPLogitsWarper(p)):
            scores = warper(None, scores)
        hf = torch.softmax(scores, dim=-1).numpy()
        ours = sampling_probabilities(logits, temperature=t, top_k=k, top_p=p)
        np.testing.assert_allclose(ours, hf, rtol=1e-10, atol=1e-15)
