"""Re-run strict nbval on solutions/ under other OpenBLAS kernels and thread counts.

    python tools/nbval_blas.py              # the two other kernels (make nbval-blas)
    python tools/nbval_blas.py --default    # and the plain run beside them (make test: all three at once)

The committed solutions were executed on one machine; a reader's laptop or a CI runner
picks another BLAS kernel (Haswell, SkylakeX, Sandybridge, ...) and another number of
threads, which change the last digits of every sum. Nothing nbval compares may depend on
that, so the same notebooks are re-checked here under two kernels that this CPU can run
other than its default -- one of them on a single thread -- both runs at once (each is
mostly one busy core).
"""

from __future__ import annotations

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


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    runs = list(zip(other_kernels(), ("1", "2")))
    if len(runs) < 2:
        print(f"nbval-blas: this CPU offers {len(runs)} other OpenBLAS kernel(s); checking those only")
    if "--default" in argv:     # the machine's own kernel and thread count, as `make nbval` runs it
        runs.insert(0, (None, None))
    nbval = [sys.executable, "-m", "pytest", "--nbval", "solutions", "--nbval-sanitize-with",
             "tools/nbval-sanitize.cfg", "-p", "tools.nbval_figures", "-p", "no:cacheprovider",
             "-o", "testpaths=solutions", "-q"]
    procs = []
    t0 = time.perf_counter()
    for kernel, threads in runs:
        env = dict(os.environ)
        if kernel is not None:
            env.update(OPENBLAS_CORETYPE=kernel, OPENBLAS_NUM_THREADS=threads, OMP_NUM_THREADS=threads)
        procs.append((kernel, threads, subprocess.Popen(nbval, cwd=ROOT, env=env, text=True,
                                                        stdout=subprocess.PIPE, stderr=subprocess.STDOUT)))
    failed = 0
    for kernel, threads, proc in procs:
        out, _ = proc.communicate()
        summary = out.strip().splitlines()[-1] if out.strip() else "(no output)"
        setting = ("the environment's kernel and threads" if kernel is None
                   else f"OPENBLAS_CORETYPE={kernel}, {threads} thread(s)")
        print(f"nbval with {setting}: {summary}")
        if proc.returncode != 0:
            failed += 1
            print(out)
    print(f"nbval-blas: {len(procs)} run(s) in {time.perf_counter() - t0:.0f} s, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
