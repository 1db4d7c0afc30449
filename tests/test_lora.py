"""LoRA on the course's Llama (lib/transformer_course/lora.py).

* the adapter layer's backward pass against central differences (float64);
* B = 0: the adapted model is the base model, bit for bit;
* merging ``W + (alpha / r) B A`` gives the adapter path's logits to rounding;
* save / load through safetensors gives the same adapters and logits;
* the whole gradient: every adapter of all 30 layers of SmolLM2-135M, float64, against torch.autograd
  on transformers' LlamaForCausalLM reading the same GGUF file, with the same adapters added by hand
  (forward hooks), RMSNorm and RoPE patched to real float64 (smollm2_reference.load_reference).
"""

from __future__ import annotations

import numpy as np
import pytest

from transformer_course import lora as lo
from transformer_course.llama import Llama, LlamaConfig, LAYER_TENSORS
from transformer_course.testing import central_differences


def rel(a, b) -> float:
    return float(np.max(np.abs(np.asarray(a) - b)) / np.max(np.abs(b)))




def tiny_model(rng, n_layers=3):
    cfg = LlamaConfig(n_layers=n_layers, d_model=8, n_heads=4, n_kv_heads=2, d_ff=12, vocab_size=17,
                      rope_base=1e4, eps=1e-5, context_length=64)
    shapes = {"attn_norm": (8,), "attn_q": (8, 8), "attn_k": (4, 8), "attn_v": (4, 8), "attn_output": (8, 8),
              "ffn_norm": (8,), "ffn_gate": (12, 8), "ffn_up": (12, 8), "ffn_down": (8, 12)}
    w = {"token_embd.weight": rng.normal(0, 1, (17, 8)), "output_norm.weight": rng.uniform(0.5, 1.5, 8)}
    for L in range(n_layers):
        for name in LAYER_TENSORS:
            s = shapes[name]
            w[f"blk.{L}.{name}.weight"] = rng.uniform(0.5, 1.5, s) if len(s) == 1 else rng.normal(0, 0.4, s)
    return Llama(cfg, w, np.float64)


def test_lora_layer_backward_against_central_differences():
    rng = np.random.default_rng(1)
    x, W = rng.normal(0, 1, (2, 3, 5)), rng.normal(0, 1, (4, 5))
    A, B = rng.normal(0, 1, (2, 5)), rng.normal(0, 1, (4, 2))
    G = rng.normal(0, 1, (2, 3, 4))
    dx, dA, dB = lo.lora_backward(G, x, W, A, B, 1.5)
    f = lambda: np.sum(G * lo.lora_forward(x, W, A, B, 1.5))      # noqa: E731
    for mine, arr in ((dx, x), (dA, A), (dB, B)):
        assert rel(mine, central_differences(f, arr)) < 1e-7


def test_tiny_model_gradient_against_central_differences_and_start_equals_base():
    rng = np.random.default_rng(2)
    model = tiny_model(rng)
    lora = lo.LoRAModel(model, [1, 2], ("attn_q", "attn_k", "ffn_down", "ffn_up"), rank=2, alpha=4.0, rng=rng)
    ids = rng.integers(0, 17, (2, 5))
    assert np.array_equal(lora.logits(ids[:1])[0], model.forward(ids[0])), "B = 0 must give the base model exactly"
    # a batch of 2 runs its products on 10 rows, the model on 5: OpenBLAS may sum them in another order
    # (its small-matrix kernels on AVX-512 do), so the batch agrees to rounding, not to the bit
    batched, alone = lora.logits(ids), np.stack([model.forward(row) for row in ids])
    assert np.max(np.abs(batched - alone)) < 1e-13 * np.max(np.abs(alone)), "a batch must give each sequence's logits"
    for k in lora.adapters:                                          # B != 0, or dA would be 0
        lora.adapters[k][...] = rng.normal(0, 0.5, lora.adapters[k].shape)
    targets = rng.integers(0, 17, (2, 5))
    mask = rng.random((2, 5)) < 0.6
    mask[0, -1] = True
    loss, grads = lora.loss_and_grads(lora.hidden_below(ids), targets, mask)
    assert grads.keys() == lora.adapters.keys()

    def f():
        from transformer_course.loss import cross_entropy
        return cross_entropy(lora.logits(ids)[mask], targets[mask])

    assert abs(loss - f()) < 1e-12
    for k, g in grads.items():
        assert rel(g, central_differences(f, lora.adapters[k])) < 1e-7, k


def test_lora_runs_on_the_models_pieces():
    """One composition of a layer (Llama.layer): LoRAModel's forward runs on its model's pieces -- a model with
    written-out pieces (as notebook 09 has them; their attention gives no weights, so the backward recomputes
    them) trains with the right gradient, and a wrong piece in the model shows in LoRA's logits."""
    from test_llama import WRITTEN_OUT

    rng = np.random.default_rng(6)
    model = tiny_model(rng).with_pieces(WRITTEN_OUT)
    lora = lo.LoRAModel(model, [1, 2], ("attn_q", "attn_v", "ffn_gate"), rank=2, alpha=4.0, rng=rng)
    for k in lora.adapters:
        lora.adapters[k][...] = rng.normal(0, 0.5, lora.adapters[k].shape)
    ids, targets = rng.integers(0, 17, (2, 5)), rng.integers(0, 17, (2, 5))
    mask = np.zeros((2, 5), bool)
    mask[:, 2:] = True
    loss, grads = lora.loss_and_grads(lora.hidden_below(ids), targets, mask)

    def f():
        from transformer_course.loss import cross_entropy
        return cross_entropy(lora.logits(ids)[mask], targets[mask])

    assert abs(loss - f()) < 1e-12
    for k, g in grads.items():
        assert rel(g, central_differences(f, lora.adapters[k])) < 1e-7, k
    no_gain = model.with_pieces({**WRITTEN_OUT, "rms_norm": lambda x, w, eps: WRITTEN_OUT["rms_norm"](x, 1.0, eps)})
    wrong = lo.LoRAModel(no_gain, [1, 2], ("attn_q", "attn_v", "ffn_gate"), rank=2, alpha=4.0)
    wrong.adapters = lora.adapters
    assert rel(wrong.logits(ids), lora.logits(ids)) > 1e-3, "LoRAModel must run on its model's rms_norm"


def test_merge_and_save_load(tmp_path):
    rng = np.random.default_rng(3)
    model = tiny_model(rng)
    lora = lo.LoRAModel(model, [0, 2], ("attn_v", "ffn_gate"), rank=3, alpha=6.0, rng=rng)
    for k in lora.adapters:
        lora.adapters[k][...] = rng.normal(0, 0.5, lora.adapters[k].shape)
    ids = rng.integers(0, 17, (1, 6))
    adapted = lora.logits(ids)[0]
    merged = lora.merged().forward(ids[0])
    assert rel(merged, adapted) < 1e-13
    path = lora.save(tmp_path / "adapter.safetensors")
    back = lo.LoRAModel.load(model, path)
    assert back.rank == 3 and back.alpha == 6.0 and back.layers == [0, 2] and back.targets == ("attn_v", "ffn_gate")
    assert all(np.array_equal(back.adapters[k], v) for k, v in lora.adapters.items())
    assert np.array_equal(back.logits(ids), lora.logits(ids))


def test_bad_arguments_are_named():
    rng = np.random.default_rng(4)
    model = tiny_model(rng)
    with pytest.raises(ValueError, match="targets must be"):
        lo.LoRAModel(model, [0], ("attn_norm",))
    with pytest.raises(ValueError, match="layers must be"):
        lo.LoRAModel(model, [3])
    with pytest.raises(ValueError, match="expected x"):
        lo.lora_forward(np.ones((2, 5)), np.ones((4, 5)), np.ones((2, 4)), np.ones((4, 2)), 1.0)


# ------------------------------------------------------------------------ the whole model against torch
HF_NAMES = {"attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj",
            "attn_output": "self_attn.o_proj", "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj",
            "ffn_down": "mlp.down_proj"}


def row_permutation(ours, theirs):
    """perm with theirs[i] == ours[perm[i]] (transformers un-permutes W_Q, W_K to its half-split RoPE)."""
    u = np.random.default_rng(0).normal(0, 1, ours.shape[1])
    # both C-ordered: one BLAS kernel computes both products, so equal rows give equal bits (Llama keeps its
    # matrices in Fortran order, whose product takes another kernel, summing in another order)
    a, b = np.ascontiguousarray(ours) @ u, np.ascontiguousarray(theirs) @ u
    order = np.argsort(a)
    perm = order[np.searchsorted(a[order], b)]
    assert np.array_equal(ours[perm], theirs), "the two files' rows are not a permutation of each other"
    return perm


@pytest.mark.slow
def test_full_model_lora_gradient_equals_torch_autograd():
    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from transformer_course.smollm2 import load_smollm2
    from transformer_course.smollm2_reference import load_reference

    lm = load_smollm2(dtype=np.float64)
    ref, _ = load_reference("float64")                # RMSNorm and RoPE in real float64
    cfg = lm.model.config
    targets = ("attn_q", "attn_k", "attn_v", "attn_output", "ffn_down")
    rng = np.random.default_rng(5)
    lora = lo.LoRAModel(lm.model, range(cfg.n_layers), targets, rank=4, alpha=8.0, rng=rng)
    for k in lora.adapters:                           # B != 0 so that every dA is non-zero
        if k.endswith("lora_B"):
            lora.adapters[k][...] = rng.normal(0, 0.02, lora.adapters[k].shape)
    ids = np.stack([lm.encode("The capital of France is Paris"), lm.encode("Once upon a time there was")])
    ids = ids[:, :6]
    targets_ids = np.roll(ids, -1, axis=1)
    mask = np.zeros(ids.shape, bool)
    mask[:, 2:5] = True
    loss, grads = lora.loss_and_grads(lora.hidden_below(ids), targets_ids, mask)

    params, hooks = {}, []
    for L in range(cfg.n_layers):
        layer = ref.model.layers[L]
        for t in targets:
            module = layer.get_submodule(HF_NAMES[t])
            A = torch.tensor(lora.adapters[lo.adapter_name(L, t, "A")], requires_grad=True)
            B_ours = lora.adapters[lo.adapter_name(L, t, "B")]
            perm = row_permutation(lm.model.layers[L][t], module.weight.detach().numpy()) \
                if t in ("attn_q", "attn_k") else np.arange(B_ours.shape[0])
            B = torch.tensor(B_ours[perm], requires_grad=True)
            params[(L, t)] = (A, B, perm)
            hooks.append(module.register_forward_hook(
                lambda mod, inp, out, A=A, B=B: out + lora.scale * (inp[0] @ A.T) @ B.T))
    try:
        logits = ref(torch.as_tensor(ids)).logits
        torch_loss = torch.nn.functional.cross_entropy(logits[torch.as_tensor(mask)],
                                                       torch.as_tensor(targets_ids[mask]))
        torch_loss.backward()
    finally:
        for h in hooks:
            h.remove()
    assert abs(loss - torch_loss.item()) < 1e-10 * abs(loss)
    worst = 0.0
    for (L, t), (A, B, perm) in params.items():
        gB = np.empty_like(grads[lo.adapter_name(L, t, "B")])
        gB[perm] = B.grad.numpy()                      # back to GGUF's row order
        worst = max(worst, rel(grads[lo.adapter_name(L, t, "A")], A.grad.numpy()),
                    rel(grads[lo.adapter_name(L, t, "B")], gB))
    print(f"max relative error over {len(params)} adapters: {worst:.1e}")
    assert worst < 1e-10                              # measured 3.3e-13
