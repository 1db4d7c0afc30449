"""FastTrainer (transformer_course_fast.training) against the readable TinyDecoder + AdamW.

Error bounds, relative to each tensor's largest entry:

* Gradients at the same parameters: every gradient is a chain of products and sums whose longest
  sums run over the T = batch x n tokens of the batch (weight gradients) -- the fast step adds in
  other orders (BLAS blocking, feature-major layout, rowsum(dO O) for the softmax backward), so the
  two may differ by about eps x T: float32 eps 6e-8 x T = 256 gives 1.5e-5 (measured ~1e-6);
  float64 1.1e-16 x 256 = 2.8e-14 (measured ~2e-15).
* AdamW from the same gradients: the same operations in the same order, so bit for bit equal.
* Parameters after k full steps: each Adam step divides an element's gradient by its own running
  RMS, which multiplies the gradients' rounding (eps x T of the tensor's max) by max|g| / rms(g_elem)
  -- large for elements whose gradient is small. Allowing that factor up to 1e3 over k steps gives
  eps x T x 1e3 x k: 1.4e-10 in float64 for k = 5 (measured 3e-13). In float32 the same product
  (7.5e-2) would check nothing, so there the bound is 2e-3 of (max|p| + k lr) -- the scale the
  parameters move on, which a zero-initialised bias reaches only through its k updates of ~lr; a
  wrong update (one sign, one missing bias correction) is off by ~lr per step, ~1e-2 of that scale.
  Measured: up to 5e-4 over the seeds below.
"""

import numpy as np
import pytest

from transformer_course.training import AdamW, TinyDecoder, training_batch
from transformer_course_fast import FastTrainer

SIZES = dict(vocab_size=64, n_positions=32, d_model=32, n_layers=2, n_heads=2)
EPS = {np.float32: 6e-8, np.float64: 1.1e-16}
HYPER = dict(lr=3e-3, betas=(0.9, 0.98), eps=1e-8, weight_decay=0.01)


def pair(seed, d_ff, dtype):
    """Two identical models: the readable one and one handed to a FastTrainer."""
    ref = TinyDecoder(**SIZES, rng=np.random.default_rng(seed), d_ff=d_ff, dtype=dtype)
    fast = TinyDecoder(**SIZES, rng=np.random.default_rng(seed), d_ff=d_ff, dtype=dtype)
    return ref, FastTrainer(fast, **HYPER)


def rel_error(a, b):
    """max |a - b| relative to the largest entry of b."""
    return float(np.max(np.abs(np.asarray(a, np.float64) - b)) / max(np.max(np.abs(b)), 1e-300))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("d_ff", [None, 48])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_gradients_equal_readable(seed, d_ff, dtype):
    ref, trainer = pair(seed, d_ff, dtype)
    rng = np.random.default_rng(100 + seed)
    # three batches, two shapes: buffers per shape, the previous batch's one-hot cleared
    for batch, length in ((8, 33), (5, 20), (8, 33)):
        tokens, targets = training_batch(rng, batch, length, SIZES["vocab_size"])
        loss, grads, _ = ref.loss_and_grads(tokens, targets)
        fast_loss = trainer.loss_and_grads(tokens, targets)
        bound = EPS[dtype] * tokens.size
        assert isinstance(fast_loss, float)
        assert abs(fast_loss - loss) <= bound * abs(loss), (fast_loss, loss)
        assert trainer.grads.keys() == grads.keys()
        for name, g in grads.items():
            assert trainer.grads[name].shape == g.shape and trainer.grads[name].dtype == dtype, name
            err = rel_error(trainer.grads[name], g)
            assert err <= bound, (name, err, bound)


@pytest.mark.parametrize("d_ff", [None, 48])
def test_update_from_the_same_gradients_is_adamw_bit_for_bit(d_ff):
    ref, trainer = pair(3, d_ff, np.float32)
    opt = AdamW(ref.params, **HYPER)
    rng = np.random.default_rng(7)
    for step in range(5):
        grads = {k: rng.normal(0, 10.0 ** rng.integers(-9, 1), v.shape).astype(np.float32)
                 for k, v in ref.params.items()}
        opt.step(grads)
        for k, g in grads.items():
            trainer.grads[k][...] = g
        trainer.update()
        for k, p in ref.params.items():
            np.testing.assert_array_equal(trainer.params[k], p, err_msg=f"{k} after {step + 1} updates")
    assert trainer.t == opt.t == 5


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("d_ff", [None, 48])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_steps_follow_readable_training(seed, d_ff, dtype):
    ref, trainer = pair(seed, d_ff, dtype)
    opt = AdamW(ref.params, **HYPER)
    rng = np.random.default_rng(200 + seed)
    eps_T = EPS[dtype] * 8 * 32
    for k in range(1, 6):
        tokens, targets = training_batch(rng, 8, 33, SIZES["vocab_size"])
        loss, grads, _ = ref.loss_and_grads(tokens, targets)
        opt.step(grads)
        fast_loss = trainer.step(tokens, targets)
        # the loss is computed before the update, from parameters already k - 1 steps apart
        assert abs(fast_loss - loss) <= (eps_T if k == 1 else 1e-3 if dtype == np.float32 else 1e-9) * loss
        if k in (1, 5):
            for name, p in ref.params.items():
                if dtype == np.float64:
                    err, bound = rel_error(trainer.params[name], p), eps_T * 1e3 * k
                else:
                    scale = np.max(np.abs(p)) + k * HYPER["lr"]
                    err, bound = float(np.max(np.abs(trainer.params[name] - p)) / scale), 2e-3
                assert err <= bound, (name, k, err, bound)


def test_model_shares_the_trained_parameters():
    model = TinyDecoder(**SIZES, rng=np.random.default_rng(4), d_ff=16, dtype=np.float64)
    before = {k: v.copy() for k, v in model.params.items()}
    trainer = FastTrainer(model, lr=1e-2)
    for k, v in model.params.items():                       # same values, now views of one buffer
        np.testing.assert_array_equal(v, before[k])
        assert trainer.params[k] is v
    rng = np.random.default_rng(5)
    tokens, targets = training_batch(rng, 4, 17, SIZES["vocab_size"])
    trainer.step(tokens, targets)
    assert all(not np.array_equal(model.params[k], before[k]) for k in ("E", "U", "0.W_Q", "1.W_2"))
    # the readable forward reads the updated weights: its loss is the trainer's
    assert abs(model.loss(tokens, targets) - trainer.loss_and_grads(tokens, targets)) <= 1e-12


def test_training_lowers_the_loss():
    # 60 steps on the notebook's task from the bench's model: the loss falls (measured 4.70 -> 4.18)
    model = TinyDecoder(**SIZES, rng=np.random.default_rng(0), dtype=np.float32)
    trainer = FastTrainer(model, lr=3e-3)
    rng = np.random.default_rng(1)
    losses = [trainer.step(*training_batch(rng, 16, 33, SIZES["vocab_size"])) for _ in range(60)]
    assert np.mean(losses[-10:]) < losses[0] - 0.3, (losses[0], losses[-10:])


# -- bad input ---------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def trainer():
    return FastTrainer(TinyDecoder(**SIZES, rng=np.random.default_rng(0), dtype=np.float32))


def good_batch():
    return training_batch(np.random.default_rng(0), 4, 9, SIZES["vocab_size"], max_period=4)


def with_entry(a, value):
    a = a.copy()
    a[1, 2] = value
    return a


@pytest.mark.parametrize("change, message", [
    (lambda x, y: (with_entry(x, 64), y), r"tokens must lie in 0\.\.63, got \d+\.\.64"),
    (lambda x, y: (with_entry(x, -1), y), r"tokens must lie in 0\.\.63, got -1\.\."),
    (lambda x, y: (x, with_entry(y, 70)), r"targets must lie in 0\.\.63, got \d+\.\.70"),
    (lambda x, y: (x[0], y[0]), r"tokens must be a \(batch, n\) integer array, got array of shape \(8,\)"),
    (lambda x, y: (x.astype(np.float32), y), r"tokens must be a \(batch, n\) integer array, got .*float32"),
    (lambda x, y: (x, y[:, :-1]), r"targets must have the shape of tokens \(4, 8\), got \(4, 7\)"),
    (lambda x, y: (np.zeros((2, 33), int), np.zeros((2, 33), int)), r"33 tokens exceed n_positions=32"),
    (lambda x, y: (x[:, :0], y[:, :0]), r"tokens must not be empty"),
])
def test_bad_batch_is_refused_and_changes_nothing(trainer, change, message):
    before = {k: v.copy() for k, v in trainer.params.items()}
    t = trainer.t
    with pytest.raises(ValueError, match=message):
        trainer.step(*change(*good_batch()))
    assert trainer.t == t
    for k, v in trainer.params.items():
        np.testing.assert_array_equal(v, before[k])


def test_bad_construction():
    model = TinyDecoder(**SIZES, rng=np.random.default_rng(0), dtype=np.float32)
    with pytest.raises(TypeError, match="model must be a transformer_course.training.TinyDecoder"):
        FastTrainer(model.params)
    with pytest.raises(ValueError, match="need lr > 0"):
        FastTrainer(model, lr=0.0)
    with pytest.raises(ValueError, match="need lr > 0"):
        FastTrainer(model, betas=(0.9, 1.0))
    mixed = TinyDecoder(**SIZES, rng=np.random.default_rng(0), dtype=np.float32)
    mixed.params["U"] = mixed.params["U"].astype(np.float64)
    with pytest.raises(TypeError, match=r"must all be float32 or all float64, got \['float32', 'float64'\]"):
        FastTrainer(mixed)


@pytest.mark.parametrize("threads", [2, 3])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_a_batch_shared_among_threads_gives_the_same_step(threads, dtype):
    """``threads`` > 1 splits the batch's sequences among Python threads (the default when OpenBLAS
    has several): the loss, the gradients and the updated parameters equal one thread's up to the
    order of the gradient sums (bounds as above); a batch smaller than ``threads`` still works."""
    one = FastTrainer(TinyDecoder(**SIZES, rng=np.random.default_rng(9), d_ff=24, dtype=dtype), threads=1, **HYPER)
    many = FastTrainer(TinyDecoder(**SIZES, rng=np.random.default_rng(9), d_ff=24, dtype=dtype), threads=threads,
                       **HYPER)
    rng = np.random.default_rng(10)
    for batch, length in ((8, 33), (5, 20), (2, 9), (8, 33)):
        tokens, targets = training_batch(rng, batch, length, SIZES["vocab_size"])
        bound = 2 * EPS[dtype] * max(tokens.size, 64)      # two rounded sides (each ~eps x T of the truth)
        a, b = one.loss_and_grads(tokens, targets), many.loss_and_grads(tokens, targets)
        assert abs(a - b) <= bound * abs(a), (a, b)
        for name, g in one.grads.items():
            assert rel_error(many.grads[name], g) <= bound, (name, batch)
    for _ in range(3):
        tokens, targets = training_batch(rng, 8, 33, SIZES["vocab_size"])
        one.step(tokens, targets), many.step(tokens, targets)
    for name, p in one.params.items():
        scale = np.max(np.abs(p)) + 3 * HYPER["lr"]
        assert float(np.max(np.abs(many.params[name] - p)) / scale) <= (2e-3 if dtype == np.float32 else 1e-9), name
    with pytest.raises(ValueError, match="threads must be None or an integer >= 1, got int 0"):
        FastTrainer(TinyDecoder(**SIZES, rng=np.random.default_rng(0)), threads=0)
