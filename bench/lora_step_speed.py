"""One LoRA fine-tuning step of notebook 11: NumPy (lib/transformer_course/lora.py) against PyTorch eager.

The step is notebook 11's: SmolLM2-135M in float32, adapters of rank 8 on attn_q and attn_v of layers
22-29, the 16 quiz prompts (11 positions each), loss on the answer tokens; forward through layers 22-29
and the head, backward to the adapters, Adam. Both sides start from the residual stream entering
layer 22, computed once (the layers below hold nothing to train). PyTorch runs transformers' own
decoder layers with the same adapters added by forward hooks (W_Q's rows permuted as transformers
stores them) and torch.optim.Adam; its loss is checked against NumPy's before timing.

Each side runs in its own process, with the machine's default threads and with one thread, ``--rounds``
times in alternating order; each process warms up, then times ``--steps`` steps; the table shows the
median over processes of their median step. Aim (issue 29): NumPy / PyTorch <= 1.0.

Usage::

    .venv/bin/python bench/lora_step_speed.py            # 3 rounds x 10 steps
    .venv/bin/python bench/lora_step_speed.py --quick    # 1 round x 3 steps
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

TRAIN_SET = {"France": "Paris", "Japan": "Tokyo", "Italy": "Rome", "Spain": "Madrid", "Germany": "Berlin",
             "China": "Beijing", "Russia": "Moscow", "Greece": "Athens", "Canada": "Ottawa", "Kenya": "Nairobi",
             "Cuba": "Havana", "Chile": "Santiago", "Netherlands": "Amsterdam", "Syria": "Damascus",
             "Korea": "Seoul", "Pakistan": "Islamabad"}
LAYERS, TARGETS, RANK, ALPHA, LR = range(22, 30), ("attn_q", "attn_v"), 8, 16.0, 3e-3


def setup():
    import numpy as np

    from transformer_course.lora import LoRAModel
    from transformer_course.smollm2 import load_smollm2

    lm = load_smollm2(dtype=np.float32)
    seqs = [(lm.encode(f"Q: Capital of {c}?\nA:"), lm.encode(" " + a + "\n")) for c, a in TRAIN_SET.items()]
    n = max(len(p) + len(a) for p, a in seqs) - 1
    ids, targets, answer = (np.zeros((len(seqs), n), np.int64), np.zeros((len(seqs), n), np.int64),
                            np.zeros((len(seqs), n), bool))
    for i, (p, a) in enumerate(seqs):
        full = np.concatenate([p, a])
        ids[i, :len(full) - 1], targets[i, :len(full) - 1] = full[:-1], full[1:]
        answer[i, len(p) - 1:len(full) - 1] = True
    lora = LoRAModel(lm.model, LAYERS, TARGETS, RANK, ALPHA, rng=np.random.default_rng(0))
    for k in lora.adapters:                                   # B != 0: every product of the step is real
        if k.endswith("lora_B"):
            lora.adapters[k][...] = np.random.default_rng(1).normal(0, 0.01, lora.adapters[k].shape)
    return lm, lora, ids, targets, answer


def numpy_steps(steps, warmup):
    from transformer_course.training import AdamW

    lm, lora, ids, targets, answer = setup()
    low = lora.hidden_below(ids)
    opt = AdamW(lora.adapters, lr=LR, betas=(0.9, 0.999))
    times, losses = [], []
    for i in range(warmup + steps):
        start = time.perf_counter()
        loss, grads = lora.loss_and_grads(low, targets, answer)
        opt.step(grads)
        losses.append(loss)
        if i >= warmup:
            times.append(time.perf_counter() - start)
    return times, losses[0]


def torch_steps(steps, warmup):
    import numpy as np
    import torch

    from transformer_course.lora import adapter_name
    from transformer_course.smollm2_reference import load_reference

    lm, lora, ids, targets, answer = setup()
    ref, _ = load_reference("float32")
    low = torch.from_numpy(lora.hidden_below(ids))
    names = {"attn_q": "self_attn.q_proj", "attn_v": "self_attn.v_proj"}
    params = []
    for L in LAYERS:
        for t in TARGETS:
            module = ref.model.layers[L].get_submodule(names[t])
            W_ours, W_theirs = lm.model.layers[L][t], module.weight.detach().numpy()
            u = np.random.default_rng(0).normal(0, 1, W_ours.shape[1])
            a, b = W_ours @ u, W_theirs @ u
            order = np.argsort(a)
            perm = order[np.searchsorted(a[order], b)]                # theirs[i] = ours[perm[i]]
            A = torch.nn.Parameter(torch.from_numpy(lora.adapters[adapter_name(L, t, "A")].copy()))
            B = torch.nn.Parameter(torch.from_numpy(lora.adapters[adapter_name(L, t, "B")][perm].copy()))
            params += [A, B]
            module.register_forward_hook(lambda m, inp, out, A=A, B=B: out + lora.scale * (inp[0] @ A.T) @ B.T)
    for p in ref.parameters():
        p.requires_grad_(False)
    opt = torch.optim.Adam(params, lr=LR, betas=(0.9, 0.999), eps=1e-8)
    pos = torch.arange(ids.shape[1])[None].expand(ids.shape[0], -1)
    mask_t, targets_t = torch.from_numpy(answer), torch.from_numpy(targets[answer])
    causal = torch.full((ids.shape[1], ids.shape[1]), -torch.inf).triu(1)[None, None]

    def loss_fn():
        x = low
        cos_sin = ref.model.rotary_emb(x, pos)
        for L in LAYERS:
            x = ref.model.layers[L](x, attention_mask=causal, position_ids=pos, position_embeddings=cos_sin)
            x = x[0] if isinstance(x, tuple) else x
        h = ref.model.norm(x[mask_t])
        return torch.nn.functional.cross_entropy(ref.lm_head(h), targets_t)

    times, losses = [], []
    for i in range(warmup + steps):
        start = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = loss_fn()
        loss.backward()
        opt.step()
        losses.append(float(loss))
        if i >= warmup:
            times.append(time.perf_counter() - start)
    return times, losses[0]


def worker(kind, steps):
    times, first_loss = {"numpy": numpy_steps, "torch": torch_steps}[kind](steps, warmup=2)
    print(json.dumps({"kind": kind, "median_ms": 1e3 * statistics.median(times), "first_loss": first_loss}))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--worker", choices=["numpy", "torch"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.quick:
        args.rounds, args.steps = 1, 3
    if args.worker:
        worker(args.worker, args.steps)
        return
    one = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    rows = [(k, t) for t in ("default", "1") for k in ("numpy", "torch")]
    results, first = {r: [] for r in rows}, {}
    for r in range(args.rounds):
        for kind, threads in (rows if r % 2 == 0 else rows[::-1]):
            env = dict(os.environ, **(one if threads == "1" else {}))
            out = subprocess.run([sys.executable, __file__, "--worker", kind, "--steps", str(args.steps)],
                                 check=True, capture_output=True, text=True, env=env).stdout
            rec = json.loads(out.strip().splitlines()[-1])
            results[kind, threads].append(rec["median_ms"])
            first[kind] = rec["first_loss"]
    gap = abs(first["numpy"] - first["torch"]) / abs(first["torch"])
    print(f"One LoRA step of notebook 11 (float32, rank {RANK} on {TARGETS} of layers 22-29, 16 prompts)")
    print(f"first loss NumPy {first['numpy']:.6f}, PyTorch {first['torch']:.6f} (relative gap {gap:.1e})")
    print(f"{'implementation':16s} {'threads':>8s} {'median step (ms)':>18s}   per process")
    for (kind, threads), ms in results.items():
        print(f"{kind:16s} {threads:>8s} {statistics.median(ms):18.1f}   {', '.join(f'{m:.1f}' for m in ms)}")
    for threads in ("default", "1"):
        ratio = statistics.median(results["numpy", threads]) / statistics.median(results["torch", threads])
        print(f"NumPy / PyTorch, {threads} threads = {ratio:.2f} (aim <= 1.0: {'met' if ratio <= 1.0 else 'NOT met'})")


if __name__ == "__main__":
    main()
