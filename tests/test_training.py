"""transformer_course.training: the decoder's gradients (finite differences and PyTorch autograd), AdamW
against torch.optim.AdamW, the data generator, the head scores and a short training run.

Tolerances: float64 throughout. Against PyTorch, the same operations in another order: relative
max|a - t| / max|t| <= 1e-10 per parameter tensor (the issue's bound). Central differences with
h = 1e-5: < 1e-6 of the tensor's largest gradient (see tests/test_backward.py for the error budget).
"""

from __future__ import annotations

import numpy as np
import pytest

from transformer_course.training import (
    AdamW,
    TinyDecoder,
    induction_score,
    periodic_sequences,
    previous_token_score,
    repeat_loss,
    train,
    training_batch,
)

TORCH_TOL = 1e-10


def perturbed_model(seed, d_ff, n_heads=2):
    """A small decoder moved away from its init (so LN gains are not exactly 1, biases not 0)."""
    rng = np.random.default_rng(seed)
    model = TinyDecoder(vocab_size=11, n_positions=8, d_model=8, n_layers=2, n_heads=n_heads, d_ff=d_ff, rng=rng)
    for p in model.params.values():
        p += rng.normal(0, 0.1, p.shape)
    tokens, targets = training_batch(rng, batch=3, length=9, vocab_size=11, max_period=4)
    return model, tokens, targets


@pytest.mark.parametrize("d_ff", [None, 16])
def test_model_gradients_match_finite_differences(d_ff):
    model, tokens, targets = perturbed_model(0, d_ff)
    _, grads, _ = model.loss_and_grads(tokens, targets)
    h = 1e-5
    for name, p in model.params.items():
        numeric = np.zeros_like(p)
        for i in np.ndindex(p.shape):
            old = p[i]
            p[i] = old + h
            up = model.loss(tokens, targets)
            p[i] = old - h
            down = model.loss(tokens, targets)
            p[i] = old
            numeric[i] = (up - down) / (2 * h)
        assert np.max(np.abs(grads[name] - numeric)) / np.max(np.abs(numeric)) < 1e-6, name


def torch_decoder_loss(torch, model, tokens, targets):
    """The same decoder written with torch operations on leaf copies of model.params."""
    F = torch.nn.functional
    P = {k: torch.tensor(v, requires_grad=True) for k, v in model.params.items()}
    n = tokens.shape[1]
    h = model.n_heads
    d_head = model.d_model // h
    x = P["E"][torch.from_numpy(tokens)] + torch.from_numpy(model.positions[:n])
    mask = torch.tril(torch.ones(n, n, dtype=torch.bool))
    for layer in range(model.n_layers):
        def w(name):
            return P[f"{layer}.{name}"]

        a = F.layer_norm(x, (model.d_model,), w("ln1.gamma"), w("ln1.beta"), 1e-5)
        B = a.shape[0]
        q, k, v = ((a @ w(m)).reshape(B, n, h, d_head).transpose(1, 2) for m in ("W_Q", "W_K", "W_V"))
        o = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        x = x + o.transpose(1, 2).reshape(B, n, model.d_model) @ w("W_O")
        if model.d_ff:
            m = F.layer_norm(x, (model.d_model,), w("ln2.gamma"), w("ln2.beta"), 1e-5)
            x = x + F.gelu(m @ w("W_1") + w("b_1")) @ w("W_2") + w("b_2")
    xf = F.layer_norm(x, (model.d_model,), P["lnf.gamma"], P["lnf.beta"], 1e-5)
    logits = xf @ P["U"]
    loss = F.cross_entropy(logits.reshape(-1, model.vocab_size), torch.from_numpy(targets).reshape(-1))
    loss.backward()
    return loss.item(), {k: t.grad.numpy() for k, t in P.items()}


@pytest.mark.torch
@pytest.mark.parametrize("d_ff, n_heads, seed", [(None, 2, 0), (None, 1, 1), (16, 2, 2), (16, 4, 3)])
def test_model_gradients_match_torch_autograd(d_ff, n_heads, seed):
    torch = pytest.importorskip("torch", reason="PyTorch not installed: pip install -e '.[torch]' (torch==2.13.0)")
    model, tokens, targets = perturbed_model(seed, d_ff, n_heads)
    loss, grads, _ = model.loss_and_grads(tokens, targets)
    torch_loss, torch_grads = torch_decoder_loss(torch, model, tokens, targets)
    assert loss == pytest.approx(torch_loss, rel=1e-13)
    assert grads.keys() == torch_grads.keys()
    for name in grads:
        err = np.max(np.abs(grads[name] - torch_grads[name])) / np.max(np.abs(torch_grads[name]))
        assert err <= TORCH_TOL, (name, err)


@pytest.mark.torch
def test_adamw_matches_torch_adamw():
    torch = pytest.importorskip("torch", reason="PyTorch not installed: pip install -e '.[torch]' (torch==2.13.0)")
    rng = np.random.default_rng(0)
    params = {"a": rng.normal(size=(3, 4)), "b": rng.normal(size=5)}
    leaves = {k: torch.tensor(v.copy(), requires_grad=True) for k, v in params.items()}
    ours = AdamW(params, lr=1e-2, betas=(0.9, 0.98), eps=1e-8, weight_decay=0.1)
    theirs = torch.optim.AdamW(list(leaves.values()), lr=1e-2, betas=(0.9, 0.98), eps=1e-8, weight_decay=0.1)
    for _ in range(20):
        grads = {k: rng.normal(size=v.shape) for k, v in params.items()}
        ours.step(grads)
        for k, leaf in leaves.items():
            leaf.grad = torch.from_numpy(grads[k].copy())
        theirs.step()
    for k in params:   # float64; 20 steps of a few operations each: agreement to ~1e-15 relative
        np.testing.assert_allclose(params[k], leaves[k].detach().numpy(), rtol=1e-12, atol=1e-14)


def test_adamw_first_step_moves_every_entry_by_lr():
    """With bias correction, step 1 is lr * g / (|g| + eps) = lr * sign(g) for |g| >> eps."""
    params = {"w": np.zeros(4)}
    AdamW(params, lr=0.01).step({"w": np.array([3.0, -2.0, 1e-3, -5.0])})
    np.testing.assert_allclose(params["w"], [-0.01, 0.01, -0.01, 0.01], rtol=1e-5)


def test_adamw_refuses_mismatched_grads_and_bad_settings():
    with pytest.raises(ValueError, match="missing"):
        AdamW({"w": np.zeros(2)}).step({})
    with pytest.raises(ValueError, match="lr"):
        AdamW({"w": np.zeros(2)}, lr=0)


def test_periodic_sequences_repeat_with_their_period(rng):
    periods = np.array([2, 5, 16])
    seq = periodic_sequences(rng, 3, 33, 64, periods)
    assert seq.shape == (3, 33) and seq.dtype.kind == "i" and seq.min() >= 0 and seq.max() < 64
    for row, p in zip(seq, periods):
        np.testing.assert_array_equal(row[p:], row[:-p])
    with pytest.raises(ValueError, match="periods"):
        periodic_sequences(rng, 2, 10, 64, 11)


def test_training_batch_targets_are_the_next_tokens(rng):
    inputs, targets = training_batch(rng, batch=4, length=33, vocab_size=64)
    assert inputs.shape == targets.shape == (4, 32)
    np.testing.assert_array_equal(inputs[:, 1:], targets[:, :-1])


def test_head_scores_of_hand_made_patterns():
    n = 8
    prev = np.zeros((1, 1, n, n))
    prev[0, 0, 0, 0] = 1
    prev[0, 0, np.arange(1, n), np.arange(n - 1)] = 1        # a perfect previous-token head
    assert previous_token_score(prev)[0] == 1.0
    assert induction_score(prev, 4)[0] == 0.0
    ind = np.tile(np.eye(n), (1, 1, 1, 1))
    i = np.arange(4, n)
    ind[0, 0, i] = 0
    ind[0, 0, i, i - 3] = 1                                  # a perfect induction head for period 4
    assert induction_score(ind, 4)[0] == 1.0
    uniform = np.tril(np.ones((n, n))) / np.arange(1, n + 1)[:, None]
    assert previous_token_score(uniform[None, None])[0] == pytest.approx(np.mean(1 / np.arange(2, n + 1)))


def test_short_training_run_lowers_the_loss_and_is_repeatable():
    def run():
        model = TinyDecoder(vocab_size=16, n_positions=12, d_model=16, n_layers=2, n_heads=2,
                            rng=np.random.default_rng(0))
        seq = periodic_sequences(np.random.default_rng(1), 16, 13, 16, 4)
        hist = train(model, AdamW(model.params, lr=3e-3), np.random.default_rng(2), 60,
                     batch=8, eval_sets={"p4": (seq, 4)}, eval_every=20, max_period=4)
        return model, hist

    model, hist = run()
    assert hist["eval_step"].tolist() == [0, 20, 40, 60]
    assert hist["loss"].shape == (60,)
    assert hist["prev/p4"].shape == hist["induction/p4"].shape == (4, 2, 2)
    assert hist["loss"][-10:].mean() < hist["loss"][:10].mean()          # it learns something
    _, hist2 = run()
    np.testing.assert_array_equal(hist["loss"], hist2["loss"])            # same seeds, same machine
    loss, weights = repeat_loss(model, periodic_sequences(np.random.default_rng(3), 4, 13, 16, 4), 4)
    assert np.isfinite(loss) and len(weights) == 2 and weights[0].shape == (4, 2, 12, 12)


def test_model_refuses_bad_sizes_and_tokens():
    with pytest.raises(ValueError, match="divisible"):
        TinyDecoder(d_model=30, n_heads=4, rng=np.random.default_rng(0))
    model = TinyDecoder(vocab_size=8, n_positions=4, d_model=8, n_heads=2, rng=np.random.default_rng(0))
    with pytest.raises(ValueError, match="n_positions"):
        model.forward(np.zeros((1, 5), dtype=int))
    with pytest.raises(ValueError, match="integer"):
        model.forward(np.zeros((1, 3)))


# -- the backward= hook: the gradient composed of any set of the six backward functions ---------------------

def _wrong_layer_norm_backward(grad_output, x, gamma, eps=1e-5):
    """A planted mistake: the path through the mean dropped (the -mean(g) term)."""
    from transformer_course import backward as ref
    dx, dgamma, dbeta = ref.layer_norm_backward(grad_output, x, gamma, eps)
    g = grad_output * gamma
    r = 1.0 / np.sqrt(np.var(x, axis=-1, keepdims=True) + eps)
    return dx + r * g.mean(axis=-1, keepdims=True), dgamma, dbeta


def _short_run(backward):
    model = TinyDecoder(vocab_size=16, n_positions=8, d_model=8, n_layers=2, n_heads=2, rng=np.random.default_rng(0))
    history = train(model, AdamW(model.params, lr=3e-3), np.random.default_rng(1), 30, batch=4, max_period=4,
                    backward=backward)
    return history["loss"], model.params


@pytest.mark.parametrize("d_ff", [None, 16])
def test_passing_the_package_backward_functions_gives_the_same_gradients(d_ff):
    from transformer_course import backward as ref
    from transformer_course.training import BACKWARD_PIECES

    model, tokens, targets = perturbed_model(3, d_ff)
    _, default, _ = model.loss_and_grads(tokens, targets)
    as_dict = {name: getattr(ref, name) for name in BACKWARD_PIECES}
    for backward in (ref, as_dict):
        _, explicit, _ = model.loss_and_grads(tokens, targets, backward=backward)
        assert explicit.keys() == default.keys()
        for k in default:
            np.testing.assert_array_equal(explicit[k], default[k], err_msg=f"gradient of {k} differs")


def test_training_with_the_package_functions_passed_explicitly_is_identical():
    from transformer_course import backward as ref

    loss_default, params_default = _short_run(None)
    loss_explicit, params_explicit = _short_run(ref)
    np.testing.assert_array_equal(loss_explicit, loss_default)
    for k in params_default:
        np.testing.assert_array_equal(params_explicit[k], params_default[k], err_msg=k)


def test_a_planted_wrong_backward_changes_the_training():
    from transformer_course import backward as ref
    from transformer_course.training import BACKWARD_PIECES

    wrong = {name: getattr(ref, name) for name in BACKWARD_PIECES}
    wrong["layer_norm_backward"] = _wrong_layer_norm_backward
    model, tokens, targets = perturbed_model(4, None)
    _, right, _ = model.loss_and_grads(tokens, targets)
    _, planted, _ = model.loss_and_grads(tokens, targets, backward=wrong)
    assert np.max(np.abs(planted["E"] - right["E"])) > 1e-3 * np.max(np.abs(right["E"])), \
        "a layer-norm backward without its mean term must change the embedding gradient"
    loss_right, _ = _short_run(None)
    loss_wrong, _ = _short_run(wrong)
    assert loss_right[0] == loss_wrong[0], "the first loss is computed before any update"
    assert np.max(np.abs(loss_wrong - loss_right)) > 1e-6, "training on a wrong gradient must follow another path"


def test_backward_hook_refuses_an_incomplete_namespace():
    from transformer_course.training import backward_pieces

    with pytest.raises(TypeError, match="attention_backward"):
        backward_pieces({"softmax_backward": np.negative})


def test_yours_or_reference_takes_the_reference_only_for_stubs():
    from transformer_course import backward as ref
    from transformer_course.training import BACKWARD_PIECES, is_stub, yours_or_reference

    def softmax_backward(p, g):
        # YOUR CODE HERE
        raise NotImplementedError()

    def embedding_backward(grad_output, token_ids, vocab_size):
        return ref.embedding_backward(grad_output, token_ids, vocab_size)

    assert is_stub(softmax_backward) and not is_stub(embedding_backward) and not is_stub(ref.softmax_backward)
    # a stub wrapped by the exercise rule's monitor (functools.wraps) is still a stub
    import functools

    @functools.wraps(softmax_backward)
    def monitored(*args, **kwargs):
        return softmax_backward(*args, **kwargs)

    assert is_stub(monitored), "a wrapped stub must count as a stub (yours_or_reference would run it)"
    pieces, yours, fallen_back = yours_or_reference(
        {"softmax_backward": softmax_backward, "embedding_backward": embedding_backward}, BACKWARD_PIECES, ref)
    assert yours == ["embedding_backward"]
    assert fallen_back == [n for n in BACKWARD_PIECES if n != "embedding_backward"]
    assert pieces.embedding_backward is embedding_backward and pieces.softmax_backward is ref.softmax_backward
