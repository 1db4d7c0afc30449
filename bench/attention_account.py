"""Where flash_attention's time goes beside PyTorch SDPA's, at make bench-attention's core shapes.

For each shape (batch, heads, n, d_head), float32, non-causal, default threads and one thread:

* ``flash``: ``transformer_course_fast.flash_attention`` (what bench/run.py times);
* ``gemm``: the two products alone, ``Q K^T`` and ``P V`` as whole batched matmuls (the BLAS work
  NumPy cannot avoid; OpenBLAS at the row's thread count);
* ``exp2``: ``np.exp2`` over every score once, from realistic scores (log2 units, at most 0) into a
  second buffer (the element-wise work; NumPy's ufuncs use one thread);
* ``sums``: every row sum of the weights, as flash takes them (a product with a vector of ones);
* ``checks``: the passes over the inputs and the output that guard against overflow and NaN, as
  flash makes them on its usual path (``_surely_safe``: the sums of squares of Q, K and V;
  ``_all_finite`` of the output);
* ``fixed``: ``flash_attention`` on a 1x1x1 problem of the same d_head: what every call pays whatever
  its size (argument checks, dtype handling, buffers, the OpenBLAS thread switch);
* ``rest``: flash minus all of the above (Python between the NumPy calls, copies, scaling Q, the
  threads' hand-offs; negative when flash's threads overlap work that the parts time one after another);
* ``sdpa``: ``torch.nn.functional.scaled_dot_product_attention`` (one fused kernel), own process;
  ``sdpa_fixed`` likewise on 1x1x1.

Each in its own process (NumPy's and PyTorch's thread pools never meet); medians of ``--reps``
processes, numpy and torch alternating. Prints a table and writes it to ``--out`` (default
``bench/results/attention_account.txt``).

    .venv/bin/python bench/attention_account.py                 # ~2 min
    .venv/bin/python bench/attention_account.py --reps 1 --out /tmp/account.txt
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
ROOT = os.path.dirname(HERE)
SHAPES = [(8, 8, 512, 64), (1, 12, 128, 32), (1, 8, 2048, 64)]


def timed(fn, seconds=0.6, min_iters=5):
    fn()
    times, end = [], time.perf_counter() + seconds
    while time.perf_counter() < end or len(times) < min_iters:
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def worker_numpy(shape):
    import numpy as np

    sys.path.insert(0, os.path.join(ROOT, "lib"))
    from transformer_course_fast import flash_attention
    from transformer_course_fast.attention import _all_finite, _surely_safe

    b, h, n, d = shape
    rng = np.random.default_rng(0)
    Q, K, V = (rng.standard_normal(shape).astype(np.float32) for _ in range(3))
    S = np.empty((b, h, n, n), np.float32)                     # (b, h, n_q, n_k)
    O = np.empty(shape, np.float32)
    q1 = rng.standard_normal((1, 1, 1, d)).astype(np.float32)
    Kt = K.swapaxes(-1, -2)                                    # (b, h, d, n_k) view
    np.matmul(Q * (1.4426950408889634 / d ** 0.5), Kt, out=S)  # scores in log2 units
    S -= S.max(axis=-1, keepdims=True)                         # as after the running maximum: <= 0
    P = np.empty_like(S)
    ones = np.ones(n, np.float32)
    row_sums = np.empty((b, h, n), np.float32)
    out = flash_attention(Q, K, V)

    def checks():
        assert _surely_safe(Q, K, V) and _all_finite(out)       # the usual path: no exact checks after

    return {"flash": timed(lambda: flash_attention(Q, K, V)),
            "gemm": timed(lambda: (np.matmul(Q, Kt, out=P), np.matmul(P, V, out=O))),
            "exp2": timed(lambda: np.exp2(S, out=P)),
            "sums": timed(lambda: np.matmul(P, ones, out=row_sums)),
            "checks": timed(checks),
            "fixed": timed(lambda: flash_attention(q1, q1, q1))}


def worker_torch(shape):
    import torch
    import torch.nn.functional as F

    if os.environ.get("OMP_NUM_THREADS"):
        torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))
    torch.manual_seed(0)
    Q, K, V = (torch.randn(*shape) for _ in range(3))
    q1 = torch.randn(1, 1, 1, shape[3])
    with torch.inference_mode():
        return {"sdpa": timed(lambda: F.scaled_dot_product_attention(Q, K, V)),
                "sdpa_fixed": timed(lambda: F.scaled_dot_product_attention(q1, q1, q1)),
                "threads": torch.get_num_threads()}


def run(kind, shape, one_thread):
    env = dict(os.environ)
    if one_thread:
        env.update(OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    out = subprocess.run([sys.executable, __file__, "--worker", kind, "--shape", ",".join(map(str, shape))],
                         capture_output=True, text=True, env=env, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--out", default=os.path.join(HERE, "results", "attention_account.txt"),
                        help="where to write the table")
    parser.add_argument("--worker", choices=["numpy", "torch"], help=argparse.SUPPRESS)
    parser.add_argument("--shape", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        shape = tuple(int(x) for x in args.shape.split(","))
        print(json.dumps((worker_numpy if args.worker == "numpy" else worker_torch)(shape)))
        return 0
    lines = [f"flash_attention against PyTorch SDPA, float32, medians of {args.reps} processes; "
             f"{time.strftime('%Y-%m-%d %H:%M')}, load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}",
             "| shape | threads | flash ms | SDPA ms | flash/SDPA | GEMMs ms | exp2 ms | sums ms | checks ms | "
             "flash fixed ms | rest ms | SDPA fixed ms |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for shape in SHAPES:
        for one in (False, True):
            res = {"numpy": [], "torch": []}
            for r in range(args.reps):
                for kind in (("numpy", "torch") if r % 2 == 0 else ("torch", "numpy")):
                    res[kind].append(run(kind, shape, one))
            m = {k: statistics.median(x[k] for x in res[w]) * 1e3
                 for w in res for k in res[w][0] if k != "threads"}
            rest = m["flash"] - m["gemm"] - m["exp2"] - m["sums"] - m["checks"] - m["fixed"]
            lines.append(f"| {'x'.join(map(str, shape))} | {'1' if one else 'default'} | {m['flash']:.3f} | "
                         f"{m['sdpa']:.3f} | {m['flash'] / m['sdpa']:.2f} | {m['gemm']:.3f} | {m['exp2']:.3f} | "
                         f"{m['sums']:.3f} | {m['checks']:.3f} | {m['fixed']:.3f} | {rest:.3f} | {m['sdpa_fixed']:.3f} |")
            print(lines[-1], flush=True)
    text = "\n".join(lines) + "\n"
    with open(args.out, "w") as f:
        f.write(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
