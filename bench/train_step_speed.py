"""One training step of notebook 10's model: NumPy (fast and readable) against PyTorch eager.

The step is forward + backward + AdamW, float32, on the notebook's model: 2 layers, attention only,
2 heads, d 32, vocabulary 64, 32 positions, batch 32 of fresh periodic sequences. The PyTorch model is
the same computation (F.layer_norm, F.scaled_dot_product_attention with a causal mask, F.cross_entropy,
torch.optim.AdamW) in eager mode. Two NumPy implementations: ``numpy-fast``
(transformer_course_fast.FastTrainer, the one the target is for) and ``numpy-readable``
(TinyDecoder.loss_and_grads + AdamW.step, for information). Each implementation runs in its own process (their thread pools
disturb each other), ``--rounds`` times in alternating order; each process warms up, then times
``--steps`` steps one by one; the table shows the median over the processes of their median step.
Each side runs twice: with its default threads, and with one thread (OPENBLAS_NUM_THREADS=1 /
OMP_NUM_THREADS=1), because 32 x 32 products gain little from threads and suffer most when the cores
are shared (FastTrainer holds OpenBLAS at one thread during its step in either case; with default
threads it shares the batch's sequences between two Python threads).
Beside the times: the step's rate, its matrix products' floating-point operations (``step_flops``:
forward and backward, the causal half of the scores included, as computed) per second, against the
machine's float32 GEMM peak (NumPy's OpenBLAS on 1024 x 1024 x 1024, own process, same threads).
Target (issue 30): fast NumPy / PyTorch <= 1.0, with default threads.

Usage::

    .venv/bin/python bench/train_step_speed.py              # 3 rounds x 300 steps (~2 min)
    .venv/bin/python bench/train_step_speed.py --quick      # 1 round x 30 steps (smoke run)
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SIZES = dict(vocab_size=64, n_positions=32, d_model=32, n_layers=2, n_heads=2)
BATCH = 32
TARGET = 1.0


def step_flops(sizes=SIZES, batch=BATCH) -> int:
    """Floating-point operations of one step's matrix products (2 per multiply-add).

    Forward, per layer: Q/K/V projections ``2 T d 3d``, scores and weights x values ``2 x 2 T n d``
    (all n x n scores per head and sequence, as computed), output projection ``2 T d d``; then the
    logits ``2 T d V``. The backward pass computes two products of each product's size (the gradient
    of each operand): three times the forward in all. Element-wise work is not counted."""
    T, n, d = batch * sizes["n_positions"], sizes["n_positions"], sizes["d_model"]
    forward = sizes["n_layers"] * (8 * T * d * d + 4 * T * n * d) + 2 * T * d * sizes["vocab_size"]
    return 3 * forward


def gemm_peak(size: int = 1024, seconds: float = 1.0) -> float:
    """float32 GFLOP/s of NumPy's matmul on ``size``^3, median of repeated calls (this process's threads)."""
    import numpy as np

    a = np.random.default_rng(0).standard_normal((size, size)).astype(np.float32)
    out = np.empty_like(a)
    np.matmul(a, a, out=out)
    times, end = [], time.perf_counter() + seconds
    while time.perf_counter() < end or len(times) < 5:
        start = time.perf_counter()
        np.matmul(a, a, out=out)
        times.append(time.perf_counter() - start)
    return 2 * size ** 3 / statistics.median(times) / 1e9


def numpy_steps(steps: int, warmup: int) -> list[float]:
    import numpy as np

    from transformer_course.training import AdamW, TinyDecoder, training_batch

    rng = np.random.default_rng(0)
    model = TinyDecoder(**SIZES, rng=rng, dtype=np.float32)
    opt = AdamW(model.params, lr=3e-3)
    times = []
    for i in range(warmup + steps):
        inputs, targets = training_batch(rng, BATCH, SIZES["n_positions"] + 1, SIZES["vocab_size"])
        start = time.perf_counter()
        _, grads, _ = model.loss_and_grads(inputs, targets)
        opt.step(grads)
        if i >= warmup:
            times.append(time.perf_counter() - start)
    return times


def fast_steps(steps: int, warmup: int) -> list[float]:
    import numpy as np

    from transformer_course.training import TinyDecoder, training_batch
    from transformer_course_fast import FastTrainer

    rng = np.random.default_rng(0)
    model = TinyDecoder(**SIZES, rng=rng, dtype=np.float32)
    trainer = FastTrainer(model, lr=3e-3)
    times = []
    for i in range(warmup + steps):
        inputs, targets = training_batch(rng, BATCH, SIZES["n_positions"] + 1, SIZES["vocab_size"])
        start = time.perf_counter()
        trainer.step(inputs, targets)
        if i >= warmup:
            times.append(time.perf_counter() - start)
    return times


def torch_steps(steps: int, warmup: int) -> list[float]:
    import numpy as np
    import torch

    from transformer_course.training import TinyDecoder, training_batch

    F = torch.nn.functional
    rng = np.random.default_rng(0)
    init = TinyDecoder(**SIZES, rng=rng, dtype=np.float32)          # the same initial weights
    P = {k: torch.nn.Parameter(torch.from_numpy(v.copy())) for k, v in init.params.items()}
    pos = torch.from_numpy(init.positions)
    n, d, h = SIZES["n_positions"], SIZES["d_model"], SIZES["n_heads"]
    mask = torch.tril(torch.ones(n, n, dtype=torch.bool))
    opt = torch.optim.AdamW(P.values(), lr=3e-3, betas=(0.9, 0.98), eps=1e-8, weight_decay=0.0)

    def loss_fn(tokens, targets):
        x = P["E"][tokens] + pos
        for layer in range(SIZES["n_layers"]):
            a = F.layer_norm(x, (d,), P[f"{layer}.ln1.gamma"], P[f"{layer}.ln1.beta"], 1e-5)
            q, k, v = ((a @ P[f"{layer}.{m}"]).view(BATCH, n, h, d // h).transpose(1, 2)
                       for m in ("W_Q", "W_K", "W_V"))
            o = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
            x = x + o.transpose(1, 2).reshape(BATCH, n, d) @ P[f"{layer}.W_O"]
        xf = F.layer_norm(x, (d,), P["lnf.gamma"], P["lnf.beta"], 1e-5)
        return F.cross_entropy((xf @ P["U"]).view(-1, SIZES["vocab_size"]), targets.reshape(-1))

    times = []
    for i in range(warmup + steps):
        inputs, targets = training_batch(rng, BATCH, n + 1, SIZES["vocab_size"])
        ti, tt = torch.from_numpy(inputs), torch.from_numpy(targets)
        start = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss_fn(ti, tt).backward()
        opt.step()
        if i >= warmup:
            times.append(time.perf_counter() - start)
    return times


def worker(kind: str, steps: int) -> None:
    if kind == "gemm-peak":
        print(json.dumps({"kind": kind, "gflops": gemm_peak()}))
        return
    run = {"numpy-fast": fast_steps, "numpy-readable": numpy_steps, "torch": torch_steps}[kind]
    times = run(steps, warmup=max(5, steps // 10))
    print(json.dumps({"kind": kind, "median_ms": 1e3 * statistics.median(times)}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="1 round of 30 steps")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--worker", choices=["numpy-fast", "numpy-readable", "torch", "gemm-peak"],
                        help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.quick:
        args.rounds, args.steps = 1, 30
    if args.worker:
        worker(args.worker, args.steps)
        return
    try:
        import torch  # noqa: F401
        kinds = ["numpy-fast", "numpy-readable", "torch"]
    except ImportError:
        kinds = ["numpy-fast", "numpy-readable"]
        print("PyTorch not installed: NumPy rows only")
    one_thread = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    rows = [(kind, threads) for threads in ("default", "1") for kind in kinds + ["gemm-peak"]]
    results = {row: [] for row in rows}
    for r in range(args.rounds):
        for kind, threads in (rows if r % 2 == 0 else rows[::-1]):
            env = dict(os.environ, **(one_thread if threads == "1" else {}))
            out = subprocess.run([sys.executable, __file__, "--worker", kind, "--steps", str(args.steps)],
                                 check=True, capture_output=True, text=True, env=env).stdout
            line = json.loads(out.strip().splitlines()[-1])
            results[kind, threads].append(line["gflops" if kind == "gemm-peak" else "median_ms"])
    flop = step_flops()
    peak = {threads: statistics.median(results["gemm-peak", threads]) for threads in ("default", "1")}
    print(f"One training step (forward + backward + AdamW), float32, batch {BATCH}, {SIZES}")
    print(f"Matrix products per step: {flop / 1e6:.1f} MFLOP; float32 GEMM peak (NumPy, 1024^3): "
          f"{peak['default']:.0f} GFLOP/s default threads, {peak['1']:.0f} GFLOP/s 1 thread")
    print(f"{'implementation':16s} {'threads':>8s} {'median step (ms)':>18s} {'GFLOP/s':>8s} {'% of peak':>9s}"
          f"   per process")
    for (kind, threads), ms in results.items():
        if kind == "gemm-peak":
            continue
        rate = flop / (statistics.median(ms) * 1e-3) / 1e9
        print(f"{kind:16s} {threads:>8s} {statistics.median(ms):18.2f} {rate:8.1f} {100 * rate / peak[threads]:9.0f}"
              f"   {', '.join(f'{m:.2f}' for m in ms)}")
    if "torch" in kinds:
        for threads in ("default", "1"):
            for kind in ("numpy-fast", "numpy-readable"):
                ratio = statistics.median(results[kind, threads]) / statistics.median(results["torch", threads])
                verdict = f"(target <= {TARGET:.1f}): {'met' if ratio <= TARGET else 'NOT met'}" if (
                    kind, threads) == ("numpy-fast", "default") else "(information)"
                print(f"{kind} / PyTorch, {threads} threads = {ratio:.2f} {verdict}")
    print(f"Load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}, {time.strftime('%Y-%m-%d %H:%M')}")


if __name__ == "__main__":
    main()
