"""Time one PyTorch implementation on one case, in a process of its own; print one JSON line.

NumPy is not used here (inputs come from ``torch.randn``), so no OpenBLAS
thread pool runs beside PyTorch's. Run by ``bench/run.py``.
"""

from __future__ import annotations

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from run import parse_case, parse_worker_args, time_calls  # noqa: E402


def make(impl: str, kind: str, shape: tuple):
    import torch
    import torch.nn.functional as F

    torch.manual_seed(0)
    if kind == "gemm":
        n = shape[0]
        a, b, c = torch.randn(n, n), torch.randn(n, n), torch.empty(n, n)
        return lambda: torch.matmul(a, b, out=c)
    if kind == "core" and impl == "sdpa":
        Q, K, V = (torch.randn(*shape) for _ in range(3))    # (batch, heads, n, d_head)
        return lambda: F.scaled_dot_product_attention(Q, K, V)
    if kind == "mha" and impl == "mha":
        batch, n, d_model, heads = shape
        X = torch.randn(batch, n, d_model)
        mha = torch.nn.MultiheadAttention(d_model, heads, batch_first=True).eval()
        return lambda: mha(X, X, X, need_weights=False)[0]
    raise SystemExit(f"worker_torch: unknown implementation {impl!r} for {kind!r}")


def main(argv=None):
    args = parse_worker_args(argv, __doc__.splitlines()[0])
    import torch

    kind, shape = parse_case(args.case)
    with torch.inference_mode():
        fn = make(args.impl, kind, shape)
        times, cpu_per_wall = time_calls(fn, args.seconds, args.min_iters)
    info = {"torch": torch.__version__, "threads": torch.get_num_threads(),
            "mkldnn": bool(torch.backends.mkldnn.is_available())}
    print(json.dumps({"impl": args.impl, "case": args.case, "times": times, "cpu_per_wall": cpu_per_wall, "info": info}))


if __name__ == "__main__":
    main()
