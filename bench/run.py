"""`make bench`: NumPy attention against PyTorch, each implementation in its own process.

What it measures (float32, all cores):

* the attention core -- ``scaled_dot_product_attention`` (the readable
  reference), ``flash_attention`` (tiled online softmax) and PyTorch's
  ``F.scaled_dot_product_attention`` -- on ``(batch, heads, n, d_head)``;
* full multi-head self-attention with projections -- ``MultiHeadAttention``,
  ``FastMultiHeadAttention`` (fused Q/K/V projection + fast core) and
  ``torch.nn.MultiheadAttention(batch_first=True)`` with ``need_weights=False``
  in ``inference_mode`` -- on ``(batch, n, d_model, heads)``;
* a 2048^3 float32 GEMM in NumPy and in PyTorch; the faster is "the GEMM peak";
* memory: the peak of traced allocations of ``flash_attention`` at n = 16384,
  d = 64 (tracemalloc sees NumPy's buffers) against the 1 GiB naive score
  matrix, and its largest difference from the naive reference (float64).

How: every (implementation, case) runs in a fresh process (``worker_numpy.py``
or ``worker_torch.py``), which warms up and then times calls for
``--seconds``; this is repeated ``--reps`` times, rotating the order of the
implementations in every round, and the table shows the median over the
processes' medians. NumPy and PyTorch never share a process (their thread pools
disturb each other). If ``OPENBLAS_CORETYPE``/``OPENBLAS_L2_SIZE`` are set they
are removed (both) from the workers' environment only, and the table says so.
Without PyTorch the NumPy rows still run and the skipped rows are listed.

Usage::

    .venv/bin/python bench/run.py            # full run (~5 min); writes bench/results/latest.{md,json,png} and the table in bench/README.md
    .venv/bin/python bench/run.py --quick    # smoke run: small shapes, 1 rep; writes only with --out
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import textwrap
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

# (batch, heads, n, d_head) for the core; (batch, n, d_model, heads) for multi-head attention.
CORE_SHAPES = [(8, 8, 512, 64), (1, 12, 128, 32), (1, 8, 2048, 64)]
MHA_SHAPES = [(8, 512, 512, 8), (1, 128, 384, 12), (1, 2048, 512, 8)]
GEMM_N = 2048
# Also timed with one thread on each side (OPENBLAS_NUM_THREADS=1 / OMP_NUM_THREADS=1):
# how much of each gap is per-thread speed and how much the threads (informative rows, no target).
ONE_THREAD = [("core", (8, 8, 512, 64)), ("core", (1, 12, 128, 32)), ("mha", (1, 128, 384, 12))]
QUICK_ONE_THREAD = [("core", (2, 4, 128, 32))]
QUICK_CORE = [(2, 4, 128, 32)]
QUICK_MHA = [(2, 64, 128, 4)]
QUICK_GEMM_N = 256
MEMORY_N, QUICK_MEMORY_N, MEMORY_D = 16384, 1024, 64

# Targets from the issues: fast core <= 1.0x PyTorch SDPA (issue 30; was 1.5x); fused MHA <= 1.0x
# nn.MultiheadAttention; peak extra memory <= 2 % of the naive n x n float32 scores; max difference <= 1e-6.
TARGET_RATIO = {"core": 1.0, "mha": 1.0}
TARGET_MEMORY_FRACTION = 0.02
TARGET_ERROR = 1e-6

# kind -> [(label, worker, impl, role)]; role "torch" rows are the reference of their case.
IMPLS = {
    "core": [("NumPy scaled_dot_product_attention (naive)", "numpy", "naive", "naive"),
             ("NumPy flash_attention", "numpy", "flash", "fast"),
             ("PyTorch F.scaled_dot_product_attention", "torch", "sdpa", "torch")],
    "mha": [("NumPy MultiHeadAttention (naive)", "numpy", "naive", "naive"),
            ("NumPy FastMultiHeadAttention", "numpy", "flash", "fast"),
            ("PyTorch nn.MultiheadAttention", "torch", "mha", "torch")],
    "gemm": [("NumPy matmul (GEMM)", "numpy", "gemm", "fast"),
             ("PyTorch matmul (GEMM)", "torch", "gemm", "torch")],
}


# ---------------------------------------------------------------------------
# Helpers shared with the workers (keep this part free of NumPy and PyTorch).
# ---------------------------------------------------------------------------
def parse_case(text: str):
    """``"core:8,8,512,64"`` -> ``("core", (8, 8, 512, 64))`` (a thread suffix ``@1t`` is
    dropped: the driver sets the thread count through the environment)."""
    kind, _, dims = text.partition(":")
    return kind, tuple(int(x) for x in dims.partition("@")[0].split(","))


def case_name(kind: str, shape, threads=None) -> str:
    return f"{kind}:{','.join(str(s) for s in shape)}" + (f"@{threads}t" if threads else "")


def describe_shape(kind: str, shape, threads=None) -> str:
    suffix = "" if not threads else f", {threads} thread" + ("s" if threads > 1 else "")
    if kind == "core":
        b, h, n, d = shape
        return f"b={b} h={h} n={n} d={d}{suffix}"
    if kind == "mha":
        b, n, d_model, h = shape
        return f"b={b} n={n} d_model={d_model} h={h}{suffix}"
    return f"{shape[0]}x{shape[0]}x{shape[0]}{suffix}"


def thread_env(env, threads):
    """``env`` with every thread pool (OpenBLAS, OpenMP, MKL) held at ``threads``; unchanged for None."""
    if not threads:
        return env
    env = dict(env)
    for k in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        env[k] = str(threads)
    return env


def flops(kind: str, shape) -> float:
    """Floating-point operations of one call (multiply-add = 2; softmax not counted)."""
    if kind == "core":
        b, h, n, d = shape
        return 4.0 * b * h * n * n * d                         # Q K^T and P V
    if kind == "mha":
        b, n, d_model, h = shape
        return 8.0 * b * n * d_model ** 2 + 4.0 * b * n * n * d_model   # 4 projections + core
    n = shape[0]
    return 2.0 * n ** 3


def parse_worker_args(argv, description: str, params: bool = False):
    """The workers' command line: ``--impl --case --seconds --min-iters`` (and ``--params``)."""
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--impl", required=True)
    p.add_argument("--case", required=True)
    p.add_argument("--seconds", type=float, default=1.0)
    p.add_argument("--min-iters", type=int, default=3)
    if params:
        p.add_argument("--params", default="{}", help="JSON keyword arguments for the fast implementation")
    return p.parse_args(argv)


def time_calls(fn, seconds: float, min_iters: int = 3):
    """Warm up, then time ``fn()`` repeatedly for about ``seconds``.

    Returns ``(times, cpu_per_wall)``: per-call seconds, and the process's CPU
    time over wall time during the timed calls (about 2 when both cores were ours).
    """
    warm_end = time.perf_counter() + 0.2 * seconds
    fn()
    while time.perf_counter() < warm_end:
        fn()
    times = []
    cpu0, wall0 = time.process_time(), time.perf_counter()
    end = wall0 + seconds
    while len(times) < min_iters or time.perf_counter() < end:
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    cpu_per_wall = (time.process_time() - cpu0) / max(1e-9, time.perf_counter() - wall0)
    return times, cpu_per_wall


def cpu_idle(interval: float = 0.3):
    """Fraction of all CPUs idle over ``interval`` seconds (Linux /proc/stat), or None."""
    def read():
        with open("/proc/stat") as f:
            v = [int(x) for x in f.readline().split()[1:]]
        return v[3] + v[4], sum(v)                         # idle + iowait, total
    try:
        a = read()
        time.sleep(interval)
        b = read()
    except OSError:
        return None
    return (b[0] - a[0]) / max(1, b[1] - a[1])


# ---------------------------------------------------------------------------
# Driver
# ---------------------------------------------------------------------------
def worker_env():
    """The environment for workers: OPENBLAS_CORETYPE / OPENBLAS_L2_SIZE removed (both)."""
    env = dict(os.environ)
    removed = {k: env.pop(k) for k in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE") if k in env}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [os.path.join(ROOT, "lib"), env.get("PYTHONPATH")]))
    return env, removed


def wait_for_idle(max_wait: float, threshold: float = 0.8):
    """Wait (at most ``max_wait`` s) until the machine is mostly idle; return the last idle fraction.
    Other people's jobs on a shared machine would otherwise land in one row and not the next."""
    deadline = time.perf_counter() + max_wait
    idle = cpu_idle()
    while idle is not None and idle < threshold and time.perf_counter() < deadline:
        idle = cpu_idle()
    return idle


def run_worker(worker: str, impl: str, case: str, seconds: float, env, params=None, timeout=300):
    script = os.path.join(HERE, f"worker_{worker}.py")
    cmd = [sys.executable, script, "--impl", impl, "--case", case, "--seconds", str(seconds),
           "--min-iters", "2"]
    if params:
        cmd += ["--params", json.dumps(params)]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd[1:])} failed:\n{proc.stderr.strip()[-2000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


MEMORY_SCRIPT = r"""
import json, sys, tracemalloc
import numpy as np
from transformer_course import scaled_dot_product_attention
from transformer_course_fast import flash_attention, release_buffers
n, d = int(sys.argv[1]), int(sys.argv[2])
rng = np.random.default_rng(0)
result = {"n": n, "d": d}
Q, K, V = (rng.standard_normal((1, 1, n, d)) for _ in range(3))       # float64 inputs
outs = {}
for dtype in (np.float32, np.float64):
    q, k, v = (a.astype(dtype) for a in (Q, K, V))
    flash_attention(q, k, v)                                           # warm up (thread pool, BLAS)
    release_buffers()                                                  # count the tile buffers, too
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    outs[dtype] = flash_attention(q, k, v)
    peak = tracemalloc.get_traced_memory()[1] - base
    tracemalloc.stop()
    result[np.dtype(dtype).name] = {"peak_bytes": peak, "output_bytes": outs[dtype].nbytes,
                                    "naive_scores_bytes": n * n * np.dtype(dtype).itemsize}
# The reference in float64, row block by row block: rows are independent, so this
# is exactly the naive computation, only never all n x n scores at once.
errs = {np.float32: 0.0, np.float64: 0.0}
for i in range(0, n, 1024):
    ref = scaled_dot_product_attention(Q[..., i:i + 1024, :], K, V)[0]
    for dtype in errs:
        errs[dtype] = max(errs[dtype], float(np.abs(outs[dtype][..., i:i + 1024, :] - ref).max()))
for dtype, err in errs.items():
    result[np.dtype(dtype).name]["max_abs_err_vs_naive_float64"] = err
print(json.dumps(result))
"""


def run_memory(n: int, env) -> dict:
    proc = subprocess.run([sys.executable, "-c", MEMORY_SCRIPT, str(n), str(MEMORY_D)],
                          capture_output=True, text=True, env=env, timeout=600)
    if proc.returncode != 0:
        raise RuntimeError(f"memory check failed:\n{proc.stderr.strip()[-2000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def torch_available() -> bool:
    return importlib.util.find_spec("torch") is not None


def load_average() -> str:
    try:
        return " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "n/a"


def fmt(x, spec):
    return "—" if x is None else format(x, spec)


def cpu_note(results) -> str:
    """How much of the machine the workers had: CPU time / wall time while timing (2 = both cores)."""
    parts = []
    for family, worker in (("NumPy", "numpy"), ("PyTorch", "torch")):
        vals = [v for (name, impl, w), r in results.items()
                if w == worker and not name.startswith("gemm:") and "@" not in name
                for v in r.get("cpu_per_wall", []) if v is not None]
        if vals:
            parts.append(f"{family} workers {statistics.median(vals):.2f} (min {min(vals):.2f})")
    idle = [v for r in results.values() for v in r.get("idle", []) if v is not None]
    text = "- CPU time / wall time while timing (2.00 = both cores busy with the work): " + "; ".join(parts)
    if idle:
        text += f"; machine idle before the runs: median {100 * statistics.median(idle):.0f} %"
    return text


def build_rows(results, cases, peak):
    """One dict per (case, implementation) with the table's numbers."""
    rows = []
    for kind, shape, threads in cases:
        name = case_name(kind, shape, threads)
        torch_ms = None
        for label, worker, impl, role in IMPLS[kind]:
            r = results.get((name, impl, worker))
            if role == "torch" and r and r["medians"]:
                torch_ms = statistics.median(r["medians"]) * 1e3
        for label, worker, impl, role in IMPLS[kind]:
            r = results.get((name, impl, worker))
            if not r or not r["medians"]:
                continue
            ms = statistics.median(r["medians"]) * 1e3
            gflops = flops(kind, shape) / (ms * 1e-3) / 1e9
            rows.append({
                "implementation": label, "kind": kind, "role": role,
                "shape": describe_shape(kind, shape, threads), "threads": threads, "case": name, "median_ms": ms, "gflops": gflops,
                "pct_peak": None if not peak else 100.0 * gflops / peak,
                "ratio_to_torch": None if torch_ms is None else ms / torch_ms,
                "process_medians_ms": [m * 1e3 for m in r["medians"]],
                "worker_threads": sorted(set(r.get("threads_seen", [])), key=str),   # as the workers saw it
            })
    return rows


def sig(x: float) -> str:
    """At least three significant digits, no exponent: 1234, 123.4, 12.34, 0.1234."""
    if x >= 100:
        return f"{x:.0f}"
    decimals = 2 if x >= 1 else max(2, 2 - math.floor(math.log10(x))) if x > 0 else 2
    return f"{x:.{decimals}f}"


def markdown_table(rows) -> str:
    lines = ["| implementation | shape | median ms | GFLOP/s | % of GEMM peak | ratio to PyTorch |",
             "|---|---|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['implementation']} | {r['shape']} | {sig(r['median_ms'])} | {sig(r['gflops'])} | "
                     f"{fmt(r['pct_peak'], '.0f')} | {fmt(r['ratio_to_torch'], '.2f')} |")
    return "\n".join(lines)


def targets(rows, memory) -> list:
    """Lines saying which of the issue's targets are met."""
    out = []
    for r in rows:
        if r["role"] == "fast" and r["kind"] in TARGET_RATIO and not r.get("threads"):
            limit = TARGET_RATIO[r["kind"]]
            if r["ratio_to_torch"] is None:
                out.append(f"- {r['implementation']} {r['shape']}: no PyTorch figure (skipped)")
            else:
                ok = "met" if r["ratio_to_torch"] <= limit else "NOT met"
                out.append(f"- {r['implementation']} {r['shape']}: {r['ratio_to_torch']:.2f}x PyTorch "
                           f"(target <= {limit}x): {ok}")
    if memory:
        m32, m64 = memory["float32"], memory["float64"]
        frac = m32["peak_bytes"] / m32["naive_scores_bytes"]
        ok = "met" if frac <= TARGET_MEMORY_FRACTION else "NOT met"
        if memory["n"] != MEMORY_N:
            ok = f"(the target is for n={MEMORY_N}; fixed-size tiles dominate at small n)"
        out.append(f"- memory, n={memory['n']} d={memory['d']} float32: peak traced allocation "
                   f"{m32['peak_bytes'] / 2**20:.1f} MiB (output itself {m32['output_bytes'] / 2**20:.1f} MiB) "
                   f"= {100 * frac:.2f} % of the naive {m32['naive_scores_bytes'] / 2**20:.0f} MiB score matrix "
                   f"(target <= {100 * TARGET_MEMORY_FRACTION:.0f} %): {ok}")
        ok = "met" if m64["max_abs_err_vs_naive_float64"] <= TARGET_ERROR else "NOT met"
        out.append(f"- equality, n={memory['n']}: float64 max |flash - naive| = "
                   f"{m64['max_abs_err_vs_naive_float64']:.1e} (target <= 1e-6): {ok}; "
                   f"float32 flash vs float64 naive: {m32['max_abs_err_vs_naive_float64']:.1e}")
    return out


README = os.path.join(ROOT, "bench", "README.md")
README_START, README_END = "<!-- bench-table:start -->", "<!-- bench-table:end -->"


def readme_block(latest_md: str) -> str:
    """What the README shows of a run: the table and the targets of ``latest.md``."""
    table = latest_md.split("\n\n", 1)[1].split("\n\nTargets:", 1)[0].strip()
    checks = latest_md.split("\nTargets:\n", 1)[1].split("\n\n", 1)[0].strip()
    return f"{table}\n\nTargets:\n\n{checks}"


def update_readme(latest_md: str, path: str = README) -> bool:
    """Put :func:`readme_block` between the README's markers; False if they are missing."""
    with open(path) as f:
        text = f.read()
    if README_START not in text or README_END not in text:
        return False
    head, rest = text.split(README_START, 1)
    tail = rest.split(README_END, 1)[1]
    with open(path, "w") as f:
        f.write(f"{head}{README_START}\n{readme_block(latest_md)}\n{README_END}{tail}")
    return True


def plot(rows, peak, path, title_extra=""):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    kinds = [k for k in ("core", "mha") if any(r["kind"] == k for r in rows)]
    fig, axes = plt.subplots(1, len(kinds), figsize=(6.5 * len(kinds), 4.8), squeeze=False)
    colors = {"naive": "#9e9e9e", "fast": "#1f77b4", "torch": "#ff7f0e"}
    for ax, kind in zip(axes[0], kinds):
        sub = [r for r in rows if r["kind"] == kind]
        cases = list(dict.fromkeys(r["shape"] for r in sub))
        roles = ["naive", "fast", "torch"]
        width = 0.8 / len(roles)
        for j, role in enumerate(roles):
            xs, ys, labels = [], [], []
            for i, c in enumerate(cases):
                for r in sub:
                    if r["shape"] == c and r["role"] == role:
                        xs.append(i + (j - 1) * width)
                        ys.append(r["gflops"])
                        labels.append(r)
            if not xs:
                continue
            name = labels[0]["implementation"]
            ax.bar(xs, ys, width, label=name, color=colors[role])
            for x, y, r in zip(xs, ys, labels):
                ax.annotate(f"{sig(r['median_ms'])} ms", (x, y), ha="center", va="bottom", fontsize=7,
                            rotation=90, xytext=(0, 2), textcoords="offset points")
        if peak:
            ax.axhline(peak, color="k", ls="--", lw=1)
            ax.text(len(cases) - 0.5, peak, f"GEMM peak {peak:.0f} GFLOP/s", ha="right", va="bottom", fontsize=8)
        ax.set_xticks(range(len(cases)))
        ax.set_xticklabels(["\n".join(textwrap.wrap(c.replace(",", ""), 13)) for c in cases], fontsize=8)
        ax.set_xlabel("shape")
        ax.set_ylabel("GFLOP/s (float32, higher is better)")
        ax.set_title("attention core" if kind == "core" else "multi-head attention with projections")
        ax.set_ylim(0, (peak or max(r["gflops"] for r in sub)) * 1.25)
        ax.legend(fontsize=7, loc="upper left")
    fig.suptitle(f"NumPy vs PyTorch attention on this machine, float32, all cores unless marked 1 thread "
                 f"({time.strftime('%Y-%m-%d')}; median of per-process medians){title_extra}", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv=None):
    p = argparse.ArgumentParser(description="Benchmark NumPy attention against PyTorch (see module docstring).")
    p.add_argument("--quick", action="store_true", help="smoke run: small shapes, 1 rep, short timings")
    p.add_argument("--reps", type=int, default=None, help="processes per (implementation, case); default 5 (quick: 1)")
    p.add_argument("--seconds", type=float, default=None, help="timing per process; default 0.5 (quick: 0.05)")
    p.add_argument("--out", default=None, help="directory for latest.md/.json/.png "
                                                "(default bench/results; --quick writes only with --out)")
    p.add_argument("--without-torch", action="store_true", help="behave as if PyTorch were not installed")
    p.add_argument("--only", action="append", default=[], metavar="CASE",
                   help='run only the cases whose name contains CASE, e.g. "core:1,12,128,32" or "mha:" '
                        "(repeatable; the GEMM row always runs; writes only with --out)")
    p.add_argument("--no-memory", action="store_true", help="skip the memory check")
    p.add_argument("--no-plot", action="store_true", help="do not write the plot")
    p.add_argument("--wait-idle", type=float, default=None,
                   help="before each process wait up to this many seconds for an idle machine "
                        "(default 3, quick 0; at most 30 s in all)")
    args = p.parse_args(argv)

    quick = args.quick
    reps = args.reps or (1 if quick else 5)
    seconds = args.seconds or (0.05 if quick else 0.5)
    wait_idle = args.wait_idle if args.wait_idle is not None else (0.0 if quick else 3.0)
    wait_budget = 30.0
    out_dir = args.out or (None if quick or args.only else os.path.join(HERE, "results"))
    core_shapes, mha_shapes = (QUICK_CORE, QUICK_MHA) if quick else (CORE_SHAPES, MHA_SHAPES)
    gemm_n = QUICK_GEMM_N if quick else GEMM_N
    one_thread = QUICK_ONE_THREAD if quick else ONE_THREAD
    # (kind, shape, threads): threads None = all the machine's; 1 = one on each side.
    cases = ([("gemm", (gemm_n,), None)] + [("core", s, None) for s in core_shapes]
             + [("mha", s, None) for s in mha_shapes] + [(k, s, 1) for k, s in one_thread])
    if args.only:
        every = cases[1:]
        cases = [c for c in cases if c[0] == "gemm" or any(o in case_name(*c) for o in args.only)]
        if len(cases) == 1:
            p.error(f"--only {args.only} matches no case; cases: " + ", ".join(case_name(*c) for c in every))

    env, removed = worker_env()
    have_torch = torch_available() and not args.without_torch
    skipped = []
    if not have_torch:
        why = "--without-torch" if args.without_torch else "PyTorch is not importable"
        skipped = [f"{label} ({describe_shape(kind, shape, threads)})" for kind, shape, threads in cases
                   for label, worker, impl, role in IMPLS[kind] if worker == "torch"]
        print(f"skipping the PyTorch rows ({why}): " + "; ".join(skipped), flush=True)
    if removed:
        print(f"removed from the workers' environment: {removed}", flush=True)

    t_start = time.perf_counter()
    load_before = load_average()
    results, infos = {}, {}
    for rep in range(reps):
        for kind, shape, threads in cases:
            name = case_name(kind, shape, threads)
            impls = [i for i in IMPLS[kind] if (i[1] == "numpy" or have_torch)
                     and not (threads and i[3] == "naive")]        # one-thread rows: fast vs torch
            shift = rep % len(impls)
            for label, worker, impl, role in impls[shift:] + impls[:shift]:   # rotate the order
                r = results.setdefault((name, impl, worker), {"medians": [], "cpu_per_wall": [], "idle": []})
                if r.get("failed"):
                    continue
                idle = None
                if wait_budget > 0 and wait_idle > 0:
                    t_wait = time.perf_counter()
                    idle = wait_for_idle(min(wait_idle, wait_budget))
                    wait_budget -= time.perf_counter() - t_wait
                try:
                    res = run_worker(worker, impl, name, seconds, thread_env(env, threads))
                except (RuntimeError, subprocess.TimeoutExpired) as exc:
                    if worker == "torch":
                        skipped.append(f"{label} ({describe_shape(kind, shape, threads)}): "
                                       f"{str(exc).splitlines()[-1]}")
                        r["failed"] = True
                        continue
                    raise
                r["medians"].append(statistics.median(res["times"]))
                r["cpu_per_wall"].append(res.get("cpu_per_wall"))
                r["idle"].append(idle)
                r.setdefault("threads_seen", []).append(res.get("info", {}).get("threads"))
                if not threads:
                    infos[worker] = res.get("info", {})
        print(f"  round {rep + 1}/{reps} done ({time.perf_counter() - t_start:.0f} s)", flush=True)

    gemm = [statistics.median(r["medians"]) for (name, impl, worker), r in results.items()
            if name.startswith("gemm:") and r["medians"]]
    peak = max(flops("gemm", (gemm_n,)) / t / 1e9 for t in gemm) if gemm else None
    rows = build_rows(results, cases, peak)

    memory = None
    if not args.no_memory:
        memory = run_memory(QUICK_MEMORY_N if quick else MEMORY_N, env)
    elapsed = time.perf_counter() - t_start

    np_info = infos.get("numpy", {})
    notes = [
        f"- machine: {platform.machine()}, {os.cpu_count()} logical CPUs, {platform.python_version()}; "
        f"load average before/after: {load_before} / {load_average()}",
        f"- NumPy {np_info.get('numpy', '?')}, BLAS {np_info.get('blas', '?')}, kernel "
        f"{np_info.get('kernel', '?')} (via {np_info.get('via', '?')}), {np_info.get('threads', '?')} threads"
        + (f"; PyTorch {infos['torch'].get('torch')}, {infos['torch'].get('threads')} threads"
           if "torch" in infos else ""),
        f"- GEMM peak = faster float32 {gemm_n}^3 matmul of the two: {fmt(peak, '.0f')} GFLOP/s",
        f"- {reps} processes per row, {seconds:g} s of timed calls each, order rotated every round; "
        f"median of the per-process medians; total {elapsed:.0f} s",
        cpu_note(results),
    ]
    if removed:
        notes.append(f"- removed from the workers' environment: {', '.join(f'{k}={v}' for k, v in removed.items())}")
    if skipped:
        notes.append("- skipped: " + "; ".join(skipped))
    table = markdown_table(rows)
    checks = targets(rows, memory)
    unstable = [f"- {r['implementation']} {r['shape']}: per-process medians "
                + ", ".join(sig(m) for m in r["process_medians_ms"]) + " ms"
                for r in rows if len(r["process_medians_ms"]) > 1
                and max(r["process_medians_ms"]) > 1.5 * min(r["process_medians_ms"])]
    if unstable:
        unstable = ["", "Unsteady rows (slowest process > 1.5x the fastest; read their ratios with care):",
                    *unstable]
    text = "\n".join([table, "", "Targets:", *checks, *unstable, "", "Conditions:", *notes])
    print()
    print(text)

    if out_dir:
        os.makedirs(out_dir, exist_ok=True)
        latest_md = f"# Attention benchmark ({time.strftime('%Y-%m-%d %H:%M')})\n\n{text}\n"
        with open(os.path.join(out_dir, "latest.md"), "w") as f:
            f.write(latest_md)
        if os.path.abspath(out_dir) == os.path.join(HERE, "results") and not (quick or args.only):
            if update_readme(latest_md):                   # the README shows the latest full run
                print(f"updated the table in {README}")
        with open(os.path.join(out_dir, "latest.json"), "w") as f:
            json.dump({"rows": rows, "gemm_peak_gflops": peak, "memory": memory, "skipped": skipped,
                       "removed_env": removed, "info": infos, "reps": reps, "seconds": seconds,
                       "load_average_before": load_before, "load_average_after": load_average()},
                      f, indent=1)
        if not args.no_plot:
            plot(rows, peak, os.path.join(out_dir, "latest.png"))
        print(f"\nwrote {os.path.join(out_dir, 'latest.md')}, latest.json"
              + ("" if args.no_plot else ", latest.png"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
