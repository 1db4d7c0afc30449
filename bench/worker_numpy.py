"""Time one NumPy implementation on one case, in a process of its own; print one JSON line.

Run by ``bench/run.py``; not meant to be called by hand (but it can be):

    .venv/bin/python bench/worker_numpy.py --impl flash --case core:8,8,512,64 --seconds 1
"""

from __future__ import annotations

import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from run import parse_case, parse_worker_args, time_calls  # noqa: E402  (shared, numpy-free helpers)

import numpy as np  # noqa: E402


def blas_info() -> dict:
    """NumPy's BLAS: library, kernel (OpenBLAS core name) and thread count, via ctypes
    (threadpoolctl if it is importable)."""
    info = {"numpy": np.__version__}
    try:
        import threadpoolctl

        for pool in threadpoolctl.threadpool_info():
            if pool.get("user_api") == "blas" and "numpy" in pool.get("filepath", ""):
                info.update(blas=pool.get("internal_api"), version=pool.get("version"),
                            kernel=pool.get("architecture"), threads=pool.get("num_threads"),
                            via="threadpoolctl")
                return info
    except Exception:  # noqa: BLE001 -- optional
        pass
    import ctypes
    import glob

    root = os.path.dirname(np.__file__)
    for path in sorted(glob.glob(os.path.join(root, os.pardir, "numpy.libs", "*openblas*"))
                       + glob.glob(os.path.join(root, ".dylibs", "*openblas*"))):
        try:
            lib = ctypes.CDLL(path)
        except OSError:
            continue
        for prefix, suffix in (("scipy_openblas_", "64_"), ("scipy_openblas_", ""),
                               ("openblas_", "64_"), ("openblas_", "")):
            core = getattr(lib, f"{prefix}get_corename{suffix}", None)
            nthr = getattr(lib, f"{prefix}get_num_threads{suffix}", None)
            conf = getattr(lib, f"{prefix}get_config{suffix}", None)
            if core is None:
                continue
            core.restype = ctypes.c_char_p
            info.update(blas=os.path.basename(path), kernel=core().decode(), via="ctypes")
            if nthr is not None:
                info["threads"] = int(nthr())
            if conf is not None:
                conf.restype = ctypes.c_char_p
                info["config"] = conf().decode().strip()
            return info
    info["blas"] = "unknown (not NumPy's bundled OpenBLAS)"
    return info


def make(impl: str, kind: str, shape: tuple, params: dict):
    """Inputs and a zero-argument callable for one implementation."""
    import transformer_course as tc
    from transformer_course_fast import FastMultiHeadAttention, flash_attention

    rng = np.random.default_rng(0)
    f32 = np.float32
    if kind == "gemm":
        n = shape[0]
        a, b = rng.standard_normal((n, n), dtype=f32), rng.standard_normal((n, n), dtype=f32)
        c = np.empty((n, n), f32)
        return lambda: np.matmul(a, b, out=c)
    if kind == "core":
        Q, K, V = (rng.standard_normal(shape, dtype=f32) for _ in range(3))  # (batch, heads, n, d_head)
        if impl == "naive":
            return lambda: tc.scaled_dot_product_attention(Q, K, V)[0]
        if impl == "flash":
            return lambda: flash_attention(Q, K, V, **params)
    if kind == "mha":
        batch, n, d_model, heads = shape
        X = rng.standard_normal((batch, n, d_model), dtype=f32)
        mha = tc.MultiHeadAttention(d_model, heads, rng=rng, dtype=f32)
        if impl == "naive":
            return lambda: mha(X)[0]
        if impl == "flash":
            fast = FastMultiHeadAttention(mha, **params)
            return lambda: fast(X)
    raise SystemExit(f"worker_numpy: unknown implementation {impl!r} for {kind!r}")


def main(argv=None):
    args = parse_worker_args(argv, __doc__.splitlines()[0], params=True)
    kind, shape = parse_case(args.case)
    fn = make(args.impl, kind, shape, json.loads(args.params))
    times, cpu_per_wall = time_calls(fn, args.seconds, args.min_iters)
    print(json.dumps({"impl": args.impl, "case": args.case, "times": times, "cpu_per_wall": cpu_per_wall, "info": blas_info(),
                      "env": {k: v for k, v in os.environ.items() if k.startswith("OPENBLAS")}}))


if __name__ == "__main__":
    main()
