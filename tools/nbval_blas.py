"""Re-run strict nbval on solutions/ under other OpenBLAS kernels, thread counts and NumPy SIMD paths.

    python tools/nbval_blas.py              # the two other settings (make nbval-blas)
    python tools/nbval_blas.py --default    # and the plain run beside them (make test: all three at once)
    python tools/nbval_blas.py --show       # print the settings this CPU gets, run nothing

The committed solutions were executed on one machine; a reader's laptop or a CI runner
differs on two axes that change the last bits of results:

* the BLAS kernel (Haswell, SkylakeX, Sandybridge, ...) and its thread count: every sum in a
  matrix product;
* NumPy's own SIMD path: its ufuncs (np.exp, np.tanh, ...) are compiled for several CPU feature
  levels and pick the highest the CPU has at run time (an AVX-512 server runs X86_V4/AVX512_*
  code, an AMD laptop without AVX-512 the X86_V3 code, an older CPU the baseline). The float32
  np.exp of X86_V3 and of the baseline differ in the last bit here; float64 np.exp differs
  between the AVX-512 path and the others.

Nothing nbval compares may depend on either, so the same notebooks are re-checked here under two
OpenBLAS kernels that this CPU can run other than its default -- one of them on a single thread
and also on NumPy's next-lower SIMD path (NPY_DISABLE_CPU_FEATURES set to the highest dispatch
levels the CPU runs: on an AVX-512 machine X86_V4 and AVX512_*, which leaves the AVX2 paths an
AMD laptop runs; on an AVX2 machine X86_V3, which leaves the baseline) -- both runs at once (each
is mostly one busy core). Both settings are read from the CPU itself, never assumed: a kernel
the CPU lacks (OPENBLAS_CORETYPE=SkylakeX without AVX-512) kills the process, so none is asked for.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# Newest first; each needs the CPU features listed (a kernel the CPU lacks dies of SIGILL).
KERNELS = [("SkylakeX", {"avx512f"}), ("Haswell", {"avx2"}), ("Sandybridge", {"avx"}), ("Nehalem", set())]


def cpu_flags() -> set[str]:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return set()
    for line in text.splitlines():
        if line.startswith("flags"):
            return set(line.split(":", 1)[1].split())
    return set()


def default_kernel() -> str:
    """The kernel OpenBLAS picks here by itself (asked in a fresh process without the override)."""
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_CORETYPE"}
    code = ("import numpy, threadpoolctl; print([i.get('architecture') for i in "
            "threadpoolctl.threadpool_info() if i['internal_api'] == 'openblas'][0])")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    return out.stdout.strip()


def other_kernels(n: int = 2) -> list[str]:
    flags, default = cpu_flags(), default_kernel()
    usable = [name for name, needs in KERNELS if needs <= flags and name.lower() != default.lower()]
    return usable[:n]


_SIMD_CODE = ("import json; from numpy._core._multiarray_umath import __cpu_features__ as f, __cpu_dispatch__ as d; "
              "print(json.dumps([[name, bool(f.get(name))] for name in d]))")


def _dispatch_levels(env: dict) -> list[tuple[str, bool]]:
    """NumPy's dispatch targets in its order (lowest first) and whether each runs, in a fresh process."""
    out = subprocess.run([sys.executable, "-c", _SIMD_CODE], env=env, capture_output=True, text=True, check=True)
    return [tuple(item) for item in json.loads(out.stdout)]


def lower_simd_path() -> str | None:
    """The value of NPY_DISABLE_CPU_FEATURES that moves NumPy one level down from what this CPU runs by
    itself: every dispatch target above the lowest one it runs (AVX-512: "X86_V4 AVX512_ICL AVX512_SPR",
    leaving X86_V3), or, when it runs only one, that one (AVX2: "X86_V3", leaving the baseline).
    None when NumPy dispatches nothing here. Checked: in a process with the value set, those targets
    are off (NumPy ignores names it does not know without a word)."""
    env = {k: v for k, v in os.environ.items() if k != "NPY_DISABLE_CPU_FEATURES"}
    levels = _dispatch_levels(env)
    names = [name for name, _ in levels]
    running = [name for name, on in levels if on]
    if not running:
        return None
    disable = names[names.index(running[1]):] if len(running) > 1 else running[:1]
    value = " ".join(disable)
    still_on = [name for name, on in _dispatch_levels(dict(env, NPY_DISABLE_CPU_FEATURES=value)) if on and name in disable]
    if still_on:
        raise RuntimeError(f"NPY_DISABLE_CPU_FEATURES={value!r} left {still_on} running: NumPy did not take these names")
    return value


def settings() -> list[dict]:
    """The two other settings nbval runs under: environment overrides, in the order they are run."""
    runs = [{"OPENBLAS_CORETYPE": kernel, "OPENBLAS_NUM_THREADS": threads, "OMP_NUM_THREADS": threads}
            for kernel, threads in zip(other_kernels(), ("1", "2"))]
    simd = lower_simd_path()
    if runs and simd:
        runs[0]["NPY_DISABLE_CPU_FEATURES"] = simd      # the one-thread run also on the lower SIMD path
    elif simd:
        runs.append({"NPY_DISABLE_CPU_FEATURES": simd})
    return runs


def describe(setting: dict | None) -> str:
    if not setting:
        return "the environment's kernel, threads and SIMD path"
    parts = []
    if "OPENBLAS_CORETYPE" in setting:
        parts.append(f"OPENBLAS_CORETYPE={setting['OPENBLAS_CORETYPE']}, {setting['OPENBLAS_NUM_THREADS']} thread(s)")
    if "NPY_DISABLE_CPU_FEATURES" in setting:
        parts.append(f"NPY_DISABLE_CPU_FEATURES=\"{setting['NPY_DISABLE_CPU_FEATURES']}\"")
    return ", ".join(parts)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    runs = settings()
    if "--show" in argv:
        for setting in runs:
            print(describe(setting))
        return 0
    kernels = sum("OPENBLAS_CORETYPE" in r for r in runs)
    if kernels < 2:
        print(f"nbval-blas: this CPU offers {kernels} other OpenBLAS kernel(s); checking those only")
    if not any("NPY_DISABLE_CPU_FEATURES" in r for r in runs):
        print("nbval-blas: NumPy dispatches no SIMD path on this CPU; the SIMD axis is not checked")
    if "--default" in argv:     # the machine's own kernel, threads and SIMD path, as `make nbval` runs it
        runs.insert(0, None)
    nbval = [sys.executable, "-m", "pytest", "--nbval", "solutions", "--nbval-sanitize-with",
             "tools/nbval-sanitize.cfg", "-p", "tools.nbval_figures", "-p", "no:cacheprovider",
             "-o", "testpaths=solutions", "-q"]
    procs = []
    t0 = time.perf_counter()
    for setting in runs:
        env = dict(os.environ, **(setting or {}))
        procs.append((setting, subprocess.Popen(nbval, cwd=ROOT, env=env, text=True,
                                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT)))
    failed = 0
    for setting, proc in procs:
        out, _ = proc.communicate()
        summary = out.strip().splitlines()[-1] if out.strip() else "(no output)"
        print(f"nbval with {describe(setting)}: {summary}")
        if proc.returncode != 0:
            failed += 1
            print(out)
    print(f"nbval-blas: {len(procs)} run(s) in {time.perf_counter() - t0:.0f} s, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
